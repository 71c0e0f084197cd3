"""The real ``embedding-serve`` process on a free loopback port, for tests that need a server over the network.

Its stdout and stderr (the server log) go to a file the test can read. Environment variables ``EMBEDDING_*`` of
the test run are dropped; ``env`` adds the ones a test wants (keys, limits, watching the data directory).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import free_port
from index.store import shardmap

START_SECONDS = 180  # the full GloVe table is checksummed on load
BIN = Path(sys.executable).parent
# The tests' plain requests to real servers (``httpx.get`` loads the CA bundle into a new client per call: tens of
# milliseconds of CPU, at every poll). No keep-alive: each request opens its own connection, as ``httpx.get`` does,
# so a server's workers share them.
HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base: str
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM and wait (uvicorn shuts down gracefully); SIGKILL if it hangs. Returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start(
    data_dir: Path,
    log_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    while_starting: Callable[[Server], None] | None = None,
    port: int | None = None,
    serve: tuple[str, ...] = (str(BIN / "embedding-serve"),),
    terminal: bool = False,
) -> Server:
    """Start embedding-serve over ``data_dir``; return once it answers /healthz and every worker has finished
    its start-up (its tables are loaded or refused by then). ``while_starting`` runs at every poll until then.
    ``port``: a stopped server's (started again on it), else a free one. ``serve``: the command that runs
    embedding-serve (``python -m tests.service.failing_serve``: with a route that fails). ``terminal``: as from a
    terminal, leading a process group of its own with SIGINT not ignored, so that a test can type Ctrl-C (SIGINT
    to the group: the server and the children it started)."""
    workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 1
    port = port or free_port()
    command = [*serve, "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port)]
    # The data directory is not watched unless a test asks (EMBEDDING_WATCH_SECONDS): the reload tests count reloads.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    environment |= {"EMBEDDING_WATCH_SECONDS": "0"} | (env or {})
    ignored = terminal and signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # a run started with `&` ignores it,
    if ignored:  # and its children would inherit that
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with log_path.open("wb") as log:
            group = 0 if terminal else None
            process = subprocess.Popen(
                [*command, *args], stdout=log, stderr=subprocess.STDOUT, env=environment, process_group=group
            )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = Server(process, f"http://127.0.0.1:{port}", port, log_path)
    deadline = time.monotonic() + START_SECONDS
    while True:
        if while_starting is not None:
            while_starting(server)
        if process.poll() is not None:
            raise AssertionError(f"embedding-serve exited {process.returncode}: {server.log()[-3000:]}")
        try:
            # One worker answering is not all of them: each logs its own start-up.
            if HTTP.get(f"{server.base}/healthz", timeout=2).status_code == 200 and workers_started(server) == workers:
                return server
        except httpx.TransportError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"embedding-serve did not start in {START_SECONDS}s: {server.log()[-3000:]}")
        time.sleep(0.1)  # poll interval while the process starts


def start_together(*starts: Callable[[], Server]) -> list[Server]:
    """Servers started at once, in the order given: each start-up is mostly its own process's (imports, loading
    its table), so they overlap. If one fails, the others are stopped and its error raised."""
    with ThreadPoolExecutor(len(starts)) as pool:
        futures = [pool.submit(start) for start in starts]
    started = [future.result() for future in futures if future.exception() is None]
    for future in futures:
        if future.exception() is not None:
            stop_together(started)
            future.result()
    return started


def shard_starts(table: Path, logs: Path, shards: int, env: dict[str, str]) -> list[Callable[[], Server]]:
    """For :func:`start_together`: one server per shard of the sharded table in ``table``, each serving its shard
    alone (``--tables shard-00N``), its log ``logs/shard-00N.log``."""
    names = [shardmap.shard_name(s) for s in range(shards)]
    return [lambda name=name: start(table, logs / f"{name}.log", "--tables", name, env=env) for name in names]


def replicas(shards: list[Server]) -> list[list[str]]:
    """A front's ``EMBEDDING_SHARDS`` entry for ``shards``, the server of each shard in order (those of
    :func:`shard_starts`)."""
    return [[f"{server.base}/v1/tables/{shardmap.shard_name(s)}"] for s, server in enumerate(shards)]


@contextmanager
def whole_and_front(
    root: Path, shards: int, env: dict[str, str], front_env: dict[str, str], *, apart: bool = True
) -> Iterator[tuple[Server, list[Server], Server]]:
    """``lee`` served whole (``root/whole``), each of its shards alone (``root/sharded/lee``, with ``env``), and a
    front of those shards over the empty ``root/front`` (with ``front_env``); stopped together at the end. Not
    ``apart``: one server serves every shard (two starts fewer, for a test of the front's answers alone). The
    server of each shard is yielded in order, the same one for each when they are not apart."""
    table = root / "sharded" / "lee"
    names = ",".join(shardmap.shard_name(s) for s in range(shards))
    starts = (
        shard_starts(table, root, shards, env)
        if apart
        else [lambda: start(table, root / "shards.log", "--tables", names, env=env)]
    )
    started: list[Server] = []
    try:
        started += start_together(lambda: start(root / "whole", root / "whole.log", env=env), *starts)
        whole, *served = started
        served = served if apart else served * shards
        config = {"EMBEDDING_SHARDS": json.dumps({"lee": replicas(served)}), **front_env}
        front = start(root / "front", root / "front.log", env=config)
        started.append(front)
        yield whole, served, front
    finally:
        stop_together(started)


def stop_together(servers: list[Server]) -> None:
    """Each server stopped (SIGCONT first, in case a test left it stopped), the shutdowns overlapping."""

    def stop(server: Server) -> None:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()

    with ThreadPoolExecutor(max(len(servers), 1)) as pool:
        list(pool.map(stop, servers))


@contextmanager
def running(data_dir: Path, log_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    """``start``, then ``stop`` when the block ends."""
    server = start(data_dir, log_path, *args, env=env)
    try:
        yield server
    finally:
        server.stop()


def workers_started(server: Server) -> int:
    return server.log().count("Application startup complete.")


def wait_for(condition: Callable[[], bool], seconds: float = 60, what: str = "condition") -> None:
    """Poll ``condition()`` until it is true (a state the server reaches asynchronously, e.g. after SIGHUP)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        time.sleep(0.05)


def ctrl_c(server: Server) -> None:
    """Ctrl-C typed on the terminal of ``server`` (started with ``terminal=True``): SIGINT to its process group; the
    server exits 0."""
    try:
        os.killpg(server.process.pid, signal.SIGINT)
        assert server.process.wait(timeout=60) == 0
    finally:
        server.stop()


def group_ended(server: Server, what: str) -> None:
    """Wait until every process of the group ``server`` led (``what``: its background children) has ended."""

    def gone() -> bool:
        try:
            os.killpg(server.process.pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, seconds=30, what=what)
