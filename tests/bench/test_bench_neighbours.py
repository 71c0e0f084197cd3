"""The neighbours benchmark (bench/neighbours.py) times only servers whose answers it has checked, and its summary's
ratios come out the right way round."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench import load
from bench.neighbours import same_answers, targets_of
from tests.bench import stub_server


class Handler(stub_server.QuietHandler):
    """Answers ``/neighbors?token=W`` with ``{"token": "W"}``, but ``heart`` as ``cache`` would if it mixed up keys."""

    def do_GET(self) -> None:
        token = self.path.split("token=", 1)[1]
        self.answer(200, ('{"token": "%s"}' % ("cache" if token == "heart" else token)).encode())


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with stub_server.served(Handler) as url:
        yield url


def test_a_server_answering_as_embedding_serve_does_passes(base: str) -> None:
    items = [load.Request("GET", f"/neighbors?token={w}") for w in ("love", "hate")]
    same_answers(base, items, [b'{"token": "love"}', b'{"token": "hate"}'], "the server with the answer cache")


def test_a_server_answering_one_request_otherwise_is_not_timed(base: str) -> None:
    items = [load.Request("GET", f"/neighbors?token={w}") for w in ("love", "heart")]
    with pytest.raises(RuntimeError, match="the server with the answer cache answers differently"):
        same_answers(base, items, [b'{"token": "love"}', b'{"token": "heart"}'], "the server with the answer cache")


def served(p50_ms: float, rps: float) -> dict[str, Any]:
    rounds = [{"c1": {"p50_ms": p50_ms}, "c32": {"rps": rps}}] * 3
    return {"p50_ms": p50_ms, "rps_c32": rps, "command_c1": "c1", "command_c32": "c32", "rounds": rounds}


def searched(p50_ms: float) -> dict[str, Any]:
    return {"p50_ms": p50_ms, "rounds": [{"p50": p50_ms}] * 3}


def test_the_summary_ratios_are_the_right_way_round() -> None:
    http = {
        "connections": 32,
        "floor_get": served(0.1, 1_000.0),
        "hnsw_get": served(0.4, 500.0),  # against 0.1 + 0.1 ms and 1,000 req/s: the ratios 2.0 and 0.5 below
        "cached_get": served(0.05, 3_000.0),
        "remembered_get": served(0.2, 700.0),
        "floor_post64": served(0.2, 800.0),
        "hnsw_post64": served(1.2, 100.0),
    }
    proc = {
        "ours_hnsw_single": searched(0.1),
        "ours_exact_single": searched(16.0),
        "gensim_single": searched(8.0),
        "ours_hnsw_batch64": searched(1.0),
        "ours_exact_batch64": searched(100.0),
        "gensim_batch64": searched(500.0),
    }
    rows = {row["figure"]: row for row in targets_of(http, proc, "command")}
    get = "neighbours over HTTP, one query (HNSW), "
    assert rows[get + "p50 at concurrency 1 vs floor p50 + in-process search"]["ratio"] == 2.0
    assert rows[get + "p50 at concurrency 1 vs floor p50 + in-process search"]["met"] is False
    assert rows[get + "requests/s at concurrency 32 vs the floor"]["ratio"] == 0.5
    assert rows[get + "requests/s at concurrency 32 vs the floor"]["met"] is False
    cached = (
        "neighbours over HTTP, one query asked before (answer cache hit), requests/s at concurrency 32 vs the floor"
    )
    assert rows[cached]["ratio"] == 3.0
    gensim = "neighbours in process, {} ({}), p50 vs gensim most_similar"
    assert rows[gensim.format("one query", "hnsw")]["ratio"] == 80.0  # times faster than gensim
    assert rows[gensim.format("one query", "exact")]["ratio"] == 0.5  # half as fast
    assert rows[gensim.format("a batch of 64", "exact")]["ratio"] == 5.0
