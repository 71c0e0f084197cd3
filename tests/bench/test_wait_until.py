"""A benchmark's server waited for (``bench.common.wait_ready``, ``bench.peers.process``): its readiness polled
until it answers, and a server that dies first named with the end of its output."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from bench.common import free_port, own_session, stop, wait_ready
from bench.peers import process


def test_a_server_is_waited_for_until_it_answers(tmp_path: Path) -> None:
    port = free_port()
    start = "import runpy, sys, time; time.sleep(0.5); runpy.run_module('http.server', run_name='__main__')"
    argv = [sys.executable, "-c", start, str(port), "--bind", "127.0.0.1"]
    with tempfile.TemporaryFile() as log:
        spawned = time.perf_counter()
        server = own_session(argv, stdout=log, stderr=log, cwd=tmp_path)
        try:
            seconds = wait_ready(server, f"http://127.0.0.1:{port}/", log, timeout=60)
            # it waited out the server's half second: counted from the spawn, as the wait itself may begin later
            assert time.perf_counter() - spawned >= 0.5
            assert 0 < seconds < 30
            assert httpx.get(f"http://127.0.0.1:{port}/").status_code == 200
        finally:
            stop(server)


def test_a_server_that_dies_first_is_named_with_its_output() -> None:
    argv = [sys.executable, "-c", "print('no table here'); raise SystemExit(3)"]
    with tempfile.TemporaryFile() as log:
        server = own_session(argv, stdout=log, stderr=log)
        with pytest.raises(RuntimeError, match=r"server did not become ready at http://127.0.0.1:9/readyz:\nno table"):
            wait_ready(server, "http://127.0.0.1:9/readyz", log)


def test_a_peer_is_polled_through_its_errors(tmp_path: Path) -> None:
    calls = []

    def ready() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise ValueError("not up yet")  # any error of a peer's client: not yet
        return True

    with process(["sleep", "30"], ready, {}, tmp_path / "logs") as server:
        assert len(calls) == 3 and server["process"].poll() is None
        assert server["ready_seconds"] >= 0.1  # two of the pauses `process` makes between its tries
    assert server["process"].poll() is not None  # stopped after


def test_a_peer_that_dies_first_is_named_with_its_command_and_output(tmp_path: Path) -> None:
    argv = ["sh", "-c", "echo cannot bind; exit 1"]
    failed = r"sh -c 'echo cannot bind; exit 1' did not become ready:\ncannot bind"
    with pytest.raises(RuntimeError, match=failed), process(argv, lambda: False, {}, tmp_path / "logs"):
        pass
