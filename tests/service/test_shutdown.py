"""SIGTERM on the real ``embedding-serve``, one worker and two: readiness fails first, the server keeps serving
through the drain, the requests in flight finish with correct answers, and the process exits 0.

A request is held in flight by its body: it is sent with ``Expect: 100-continue`` and the rest of the body only
later, so the server has started on it (it asked for the body: ``100 Continue``) before the signal, and it ends
when the test sends the rest, during the drain or after it, while uvicorn waits for it to finish.

A SIGTERM during the start-up, before anything serves, ends it at once with exit 0, also when the server is its
PID namespace's init (PID 1, as a container's command), which ignores a signal it has no handler for.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench.common import free_port
from index.engine.table import Table
from service.http.drain import Drain
from service.http.logged_once import CUT_MESSAGE, LoggedOnce
from service.http.metrics import Metrics, MetricsMiddleware
from tests.service.raw_http import (
    assert_exact_neighbours,
    closed,
    connect,
    error_of,
    queries,
    read_head,
    read_response,
    request,
    search_body,
)
from tests.service.real_server import start, wait_for

DRAIN = 3.0  # long enough for the checks made during the drain, with room for a slow and busy machine
CUT_AFTER = 0.5  # the shutdown timeout of a request that never ends
IN_FLIGHT = 4
DRAINING = "readiness fails now"
SHUTTING_DOWN = "Shutting down"


class InFlight:
    """A search request whose body is held back: the server is working on it until ``finish``."""

    def __init__(self, port: int, vectors: np.ndarray, request_id: str = "") -> None:
        self.vectors = vectors
        body = search_body(vectors, k=5)
        self.rest = body[10:]
        self.sock = connect(port)
        headers = {"Expect": "100-continue", **({"X-Request-ID": request_id} if request_id else {})}
        head = request("POST", "/v1/tables/small/search", body, headers=headers)
        self.sock.sendall(head[: len(head) - len(body)] + body[:10])
        status, _, self.data = read_head(self.sock)
        assert status == 100  # the app is reading the body: the request is in flight

    def finish(self, table: Table) -> dict[str, str]:
        self.sock.sendall(self.rest)
        status, headers, body = read_response(self.sock, self.data)
        assert status == 200, body[:300]
        assert_exact_neighbours(table, self.vectors, 5, json.loads(body))
        self.sock.close()
        return headers


def readiness(port: int) -> tuple[int, dict[str, str], bytes]:
    with connect(port) as sock:
        sock.sendall(request("GET", "/readyz", headers={"Connection": "close"}))
        return read_response(sock)


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_drains_then_finishes_the_requests_in_flight(
    small_data_dir: Path, small: Table, tmp_path: Path, workers: int
) -> None:
    env = {"EMBEDDING_DRAIN_SECONDS": str(DRAIN), "EMBEDDING_SHUTDOWN_TIMEOUT": "20"}
    server = start(small_data_dir, tmp_path / "server.log", "--workers", str(workers), env=env)
    try:
        assert readiness(server.port)[0] == 200
        kept = connect(server.port)  # a kept-alive connection, answered once before the signal
        kept.sendall(request("GET", "/healthz"))
        assert read_response(kept)[0] == 200
        in_flight = [InFlight(server.port, queries(small, 3, seed=i)) for i in range(IN_FLIGHT)]

        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)  # with --workers, the supervisor passes it on
        wait_for(lambda: server.log().count(DRAINING) == workers, seconds=10, what="every worker to drain")

        # The drain: readiness 503 on every worker, and the server still serves.
        for _ in range(3 * workers):
            error = error_of(readiness(server.port), 503)
            assert error["code"] == "not_ready" and error["shutting_down"] is True
            assert "shutting down" in error["message"]
        kept.sendall(request("GET", "/healthz"))
        status, headers, _ = read_response(kept)
        assert status == 200 and headers["connection"] == "close"  # the client goes elsewhere for the next one
        assert closed(kept)
        for request_ in in_flight[:2]:
            request_.finish(small)
        assert server.log().count(SHUTTING_DOWN) < workers  # all of that within the drain
        assert server.process.poll() is None

        # After the drain uvicorn stops accepting connections and waits for the rest.
        wait_for(lambda: server.log().count(SHUTTING_DOWN) == workers, seconds=DRAIN + 10, what="the shutdown")
        assert time.monotonic() - signalled >= DRAIN
        if workers == 1:  # (with --workers the supervisor holds the listening socket until it exits)

            def refused() -> bool:
                try:
                    socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
                except ConnectionRefusedError:
                    return True
                return False

            wait_for(refused, seconds=5, what="the listening socket to close")
        assert server.process.poll() is None  # still waiting for the requests in flight
        for request_ in in_flight[2:]:
            headers = request_.finish(small)
            assert headers["connection"] == "close"
        assert server.process.wait(timeout=10) == 0
    finally:
        server.stop()
    log = server.log()
    assert "Traceback" not in log and "Exception in ASGI application" not in log
    assert log.count("Finished server process") == workers


def test_a_request_outlasting_the_shutdown_timeout_is_cut(small_data_dir: Path, small: Table, tmp_path: Path) -> None:
    """No drain (the default): the server stops accepting at once, gives a request in flight its timeout, then
    cancels it, answering it 503 in the envelope (not uvicorn's plain-text 500 and a traceback), and exits 0."""
    env = {"EMBEDDING_SHUTDOWN_TIMEOUT": str(CUT_AFTER)}
    server = start(small_data_dir, tmp_path / "server.log", env=env)
    try:
        stuck = InFlight(server.port, queries(small, 1, seed=9), request_id="cut-at-shutdown")  # its body never comes
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=10) == 0
        elapsed = time.monotonic() - signalled
        assert CUT_AFTER <= elapsed < CUT_AFTER + 4.0
        stuck.sock.settimeout(5)
        response = read_response(stuck.sock, stuck.data)
        error = error_of(response, 503)
        assert error == {"code": "not_ready", "message": CUT_MESSAGE, "shutting_down": True}
        assert response[1]["connection"] == "close" and response[1]["x-request-id"] == "cut-at-shutdown"
        assert closed(stuck.sock)
        stuck.sock.close()
    finally:
        server.stop()
    log = server.log()
    assert "timeout graceful shutdown exceeded" in log
    assert "Traceback" not in log and "Exception in ASGI application" not in log
    cut = [line for line in log.splitlines() if "still running at the shutdown timeout" in line]
    assert len(cut) == 1 and "POST /v1/tables/small/search" in cut[0] and "request_id=cut-at-shutdown" in cut[0]
    assert '"POST /v1/tables/small/search HTTP/1.1" 503 request_id=cut-at-shutdown' in log


def test_a_request_cut_at_the_shutdown_timeout_is_counted_as_answered() -> None:
    """The request metrics count a cut request by the status its client gets (503), not as a 500: the counts of a
    worker that stops (replaced under a supervisor) stay in the server's totals."""
    metrics = Metrics()
    drain = Drain(0.0, on_start=lambda: None)
    drain.draining = True  # after SIGTERM, as uvicorn cancels the requests still running

    async def never_answers(scope: object, receive: object, send: object) -> None:
        await asyncio.sleep(3600)

    sent: list[dict[str, object]] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def cut() -> None:
        app = LoggedOnce(MetricsMiddleware(never_answers, metrics, {"small"}), drain)  # type: ignore[arg-type]
        scope = {"type": "http", "method": "GET", "path": "/v1/tables/small/neighbors", "path_params": {}}
        request = asyncio.ensure_future(app(scope, receive, send))
        await asyncio.sleep(0.01)
        request.cancel()  # what uvicorn does at the shutdown timeout
        await request

    asyncio.run(cut())
    assert sent[0]["status"] == 503
    text = metrics.exposition()[0].decode()
    assert 'method="GET",route="unmatched",status="503",table=""} 1.0' in text
    assert 'status="500"' not in text


# The real start-up held at a known point, after the arguments are read and before anything is loaded or served:
# ``tune_malloc``, main's first step after the arguments, replaced by a wait that only a signal ends.
HELD_START_UP = """
import sys, time
import service.main as serve

def held() -> None:
    print("start-up held", flush=True)
    time.sleep(600)

serve.tune_malloc = held
sys.exit(serve.main())
"""
AS_INIT = ["unshare", "--user", "--map-root-user", "--pid", "--fork"]  # a new PID namespace: the command is PID 1


def child_of(pid: int) -> int:
    """The one child process of ``pid`` (the command ``unshare --fork`` runs), once it exists."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    wait_for(lambda: children.read_text().split() != [], seconds=30, what="unshare's child")
    (child,) = children.read_text().split()
    return int(child)


@pytest.mark.parametrize("as_init", [False, True], ids=["process", "pid-1"])
def test_sigterm_during_the_start_up_ends_it_at_once(small_data_dir: Path, tmp_path: Path, as_init: bool) -> None:
    command = [sys.executable, "-c", HELD_START_UP, "--data-dir", str(small_data_dir), "--port", str(free_port())]
    if as_init:
        if shutil.which("unshare") is None or subprocess.run([*AS_INIT, "true"], capture_output=True).returncode:
            pytest.skip("no unprivileged PID namespaces here (`unshare --user --pid` fails)")
        command = [*AS_INIT, *command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        server = child_of(process.pid) if as_init else process.pid
        wait_for(lambda: "start-up held" in log.read_text(), seconds=60, what="the start-up to reach its wait")
        signalled = time.monotonic()
        os.kill(server, signal.SIGTERM)
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"exit {code} ({time.monotonic() - signalled:.1f} s after SIGTERM): {log.read_text()[-2000:]}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert "Traceback" not in log.read_text()
