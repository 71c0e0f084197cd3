"""Load against the real ``embedding-serve`` process: 64 concurrent connections on mixed endpoints, no failure.

1. GloVe 6B 50d (HNSW): neighbours (GET and POST), similarity, analogy, raw-vector search and batches, until
   ``REQUESTS`` requests and ``EACH`` of every kind are answered (at most ``MAIN_SECONDS``). Every request must
   answer 200 and every kind must be answered; the request count and p50/p99 latency are printed (no timing
   assertions: performance is measured in bench/, so a longer run would prove nothing more here).
2. A shorter phase on a table that is rebuilt (``embedding-index import --force`` into the served data directory)
   and reloaded (``POST /v1/admin/reload``) under load: no failed request, and the answers switch to the new
   version once, for good.

Both phases drive the server with an async httpx client (seeded choices).
"""

from __future__ import annotations

import asyncio
import random
import ssl
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from index.build.sources import RawTable, glove_package
from index.build.writer import build_table
from tests.service.real_server import BIN, HTTP, Server, start, start_together, stop_together

CONNECTIONS = 64
# The mixed load's end: a count, not a duration (what it proves is the requests answered, and a fixed duration
# burned both cores for as long on any machine); at most MAIN_SECONDS on a machine too busy to reach it.
REQUESTS, EACH = 2_000, 20
KINDS = 9  # the kinds of request mixed() sends
MAIN_SECONDS = 15.0
# Seconds of load before the rebuild starts (the load is under way; the rebuild itself lasts seconds more, under
# the load) and after the reload answered (the answers stay on the new version).
BEFORE_REBUILD, AFTER_RELOAD = 1.0, 3.0
KEY = "load-admin-key-0123456789"
TIMEOUT = 600  # seconds: on a machine shared with other jobs an answer can be slow; it must not be lost
# As the image runs it: one BLAS/OpenMP thread per process (concurrent requests are the parallelism).
SERVE = ("--threads", "1", "--no-access-log")
Request = tuple[str, str, str, dict[str, Any]]  # label, method, path, httpx keyword arguments


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def report(self, title: str) -> str:
        every = np.array([x for v in self.latencies.values() for x in v]) * 1000
        lines = [
            f"{title}: {self.count:,} requests in {self.seconds:.1f} s on {CONNECTIONS} connections "
            f"({self.count / self.seconds:,.0f}/s), p50 {np.percentile(every, 50):.1f} ms, "
            f"p99 {np.percentile(every, 99):.1f} ms, {len(self.failures)} failed"
        ]
        for label, values in sorted(self.latencies.items()):
            ms = np.array(values) * 1000
            lines.append(
                f"  {label:<22} {len(ms):>7,}  p50 {np.percentile(ms, 50):6.1f} ms  p99 {np.percentile(ms, 99):6.1f} ms"
            )
        return "\n".join(lines)


async def drive(base: str, done: Callable[[Stats], bool], pick: Callable[[random.Random], Request], seed: int) -> Stats:
    """``CONNECTIONS`` clients, each sending the next request as soon as the last one is answered, until
    ``done(stats so far)``."""
    stats = Stats()
    # One client (one keep-alive connection) per user: httpx's shared pool costs more CPU than the server does.
    one = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    tls = ssl.create_default_context()  # one for all: each client would load the CA bundle again (plain HTTP here)
    clients = [httpx.AsyncClient(base_url=base, limits=one, timeout=TIMEOUT, verify=tls) for _ in range(CONNECTIONS)]
    try:

        async def user(number: int) -> None:
            client, rng = clients[number], random.Random(seed * 1000 + number)
            while not done(stats):
                label, method, path, kwargs = pick(rng)
                started = time.perf_counter()
                try:
                    response = await client.request(method, path, **kwargs)
                except httpx.HTTPError as exc:
                    stats.failures.append(f"{label}: {type(exc).__name__}: {exc}")
                    continue
                if response.status_code != 200:
                    stats.failures.append(f"{label}: {response.status_code} {response.text[:200]}")
                    continue
                stats.latencies[label].append(time.perf_counter() - started)

        started = time.monotonic()
        await asyncio.gather(*(user(i) for i in range(CONNECTIONS)))
        stats.seconds = time.monotonic() - started
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))
    return stats


def mixed(table: str, words: list[str], dim: int) -> Callable[[random.Random], Request]:
    """Neighbours GET/POST, similarity, analogy, search and batches, in fixed proportions."""
    path = f"/v1/tables/{table}"

    def pick(rng: random.Random) -> Request:
        a, b, c, d = rng.sample(words, 4)
        vector = [rng.uniform(-1, 1) for _ in range(dim)]
        kind = rng.random()
        if kind < 0.30:
            return "neighbors GET", "GET", f"{path}/neighbors", {"params": {"token": a, "k": 10}}
        if kind < 0.45:
            body = {"positive": [a, b], "negative": [c], "k": 10}
            return "neighbors POST", "POST", f"{path}/neighbors", {"json": body}
        if kind < 0.60:
            return "similarity GET", "GET", f"{path}/similarity", {"params": {"a": a, "b": b}}
        if kind < 0.72:  # 3CosMul scores every row (no index): one in ten analogies
            method = "3cosmul" if rng.random() < 0.1 else "3cosadd"
            body = {"a": a, "b": b, "c": c, "k": 5, "method": method}
            return f"analogy {method}", "POST", f"{path}/analogy", {"json": body}
        if kind < 0.84:
            return "search", "POST", f"{path}/search", {"json": {"vector": vector, "k": 10}}
        if kind < 0.92:
            body = {"queries": [a, b, c, d, {"positive": [a, d], "negative": [b]}], "k": 5}
            return "neighbors batch", "POST", f"{path}/neighbors", {"json": body}
        if kind < 0.96:
            body = {"vectors": [vector, [rng.uniform(-1, 1) for _ in range(dim)]], "k": 5}
            return "search batch", "POST", f"{path}/search", {"json": body}
        body = {"pairs": [[a, b], [c, d], [a, d]]}
        return "similarity batch", "POST", f"{path}/similarity", {"json": body}

    return pick


def show(capsys: pytest.CaptureFixture[str], text: str) -> None:
    with capsys.disabled():  # the figures appear in the test output
        print("\n" + text)


V1, V2 = 20_000, 30_000  # rows of the rebuilt table t: its first version, and the one it is rebuilt as


@dataclass
class Servers:
    glove: Server  # the default GloVe table
    rebuilt: Server  # t: GloVe's first V1 rows, to be rebuilt from ``sources`` (V2 rows) under load
    sources: Path


@pytest.fixture(scope="module")
def servers(glove_data_dir: Path, glove_raw: RawTable, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Each test's own server, started at once: t is built while the GloVe server starts up."""
    logs, sources = tmp_path_factory.mktemp("logs"), tmp_path_factory.mktemp("rebuilt")

    def start_rebuilt() -> Server:
        part = RawTable(tokens=glove_raw.tokens[:V1], matrix=glove_raw.matrix[:V1].copy())
        build_table(part, data_dir=sources / "data", name="t", source={"format": "test", "path": "glove[:20000]"})
        np.save(sources / "v2.npy", glove_raw.matrix[:V2], allow_pickle=False)
        (sources / "v2.txt").write_text("\n".join(glove_raw.tokens[:V2]) + "\n")
        return start(sources / "data", logs / "rebuilt.log", *SERVE, env={"EMBEDDING_API_KEY": KEY})

    glove = partial(start, glove_data_dir, logs / "glove.log", "--tables", glove_package.DEFAULT_NAME, *SERVE)
    started = start_together(glove, start_rebuilt)
    try:
        yield Servers(*started, sources)
    finally:
        stop_together(started)


@pytest.mark.slow
def test_mixed_load_without_a_failure(
    servers: Servers, glove_raw: RawTable, capsys: pytest.CaptureFixture[str]
) -> None:
    name = glove_package.DEFAULT_NAME
    words = glove_raw.tokens[:10_000]
    server = servers.glove
    deadline = time.monotonic() + MAIN_SECONDS

    def done(stats: Stats) -> bool:
        kinds = stats.latencies.values()
        enough = stats.count >= REQUESTS and len(kinds) == KINDS and min(map(len, kinds)) >= EACH
        return enough or time.monotonic() >= deadline

    stats = asyncio.run(drive(server.base, done, mixed(name, words, 50), seed=1))
    assert server.process.poll() is None
    assert HTTP.get(f"{server.base}/readyz").status_code == 200
    show(capsys, stats.report(f"load on {name} (HNSW)"))
    assert stats.failures == [], stats.failures[:10]
    assert len(stats.latencies) == KINDS and all(len(v) > 0 for v in stats.latencies.values())


@pytest.mark.slow
def test_rebuild_and_reload_under_load_without_a_failure(
    servers: Servers, glove_raw: RawTable, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = servers.sources
    data_dir = sources / "data"
    words = glove_raw.tokens[:5_000]  # in both versions
    server = servers.rebuilt
    seen: list[int] = []  # rows of t, as a client polling the table summary sees them, in order

    reloaded: list[float] = []  # when the reload answered

    def done(_: Stats) -> bool:
        return bool(reloaded) and time.monotonic() >= reloaded[0] + AFTER_RELOAD

    async def scenario() -> tuple[Stats, dict[str, Any]]:
        load = asyncio.create_task(drive(server.base, done, mixed("t", words, 50), seed=2))
        async with httpx.AsyncClient(base_url=server.base, timeout=TIMEOUT) as client:

            async def poll() -> None:
                while not load.done():
                    seen.append((await client.get("/v1/tables/t")).json()["rows"])
                    await asyncio.sleep(0.02)

            poller = asyncio.create_task(poll())
            await asyncio.sleep(BEFORE_REBUILD)
            command = [str(BIN / "embedding-index"), "import", str(sources / "v2.npy"), "--vocab"]
            command += [str(sources / "v2.txt"), "--name", "t", "--data-dir", str(data_dir), "--force"]
            build = await asyncio.create_subprocess_exec(*command, stderr=subprocess.PIPE)
            _, stderr = await build.communicate()
            assert build.returncode == 0, stderr.decode()
            report = (await client.post("/v1/admin/reload", headers={"x-api-key": KEY})).json()
            reloaded.append(time.monotonic())
            stats = await load
            await poller
        return stats, report

    stats, report = asyncio.run(scenario())
    after = HTTP.get(f"{server.base}/v1/tables/t/ids/{V2 - 1}")
    show(capsys, stats.report("load on t while it is rebuilt and reloaded"))
    assert stats.failures == [], stats.failures[:10]
    assert report["loaded"] == ["t"] and report["ready"] is True
    assert after.status_code == 200 and after.json()["token"] == glove_raw.tokens[V2 - 1]
    # The swap is atomic: version 1 until the reload, version 2 from then on, never back.
    switch = seen.index(V2)
    assert switch > 0 and set(seen[:switch]) == {V1} and set(seen[switch:]) == {V2}


def test_the_thread_count_is_set_before_numpy_loads() -> None:
    """numpy's BLAS fixes its thread count when it loads: embedding-serve must set it first (found by the load test:
    with one worker and two BLAS threads, 64 concurrent exact searches ran at ~10 requests/s instead of ~400)."""
    probe = "import sys, service.main; print('numpy' in sys.modules, 'faiss' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == ["False", "False"]
