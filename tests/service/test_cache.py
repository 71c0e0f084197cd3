"""The answer cache: repeated GET answers come from memory, identical to computed ones, never stale, never
for a client the read key refuses; errors are not kept; least recently used answers go first."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.engine.table import Table
from index.progress import write_status
from service import indexing
from service.http.cache import Answer, AnswerCache
from tests.service.conftest import client_for

KEY = "read-key-for-tests-0123456789"


def test_a_repeated_answer_is_served_from_the_cache_unchanged(small_data_dir: Path, small: Table) -> None:
    with client_for(data_dir=small_data_dir) as client:
        cache: AnswerCache = client.app.state.answer_cache
        params = {"token": "heart", "k": 8}
        first = client.get("/v1/tables/small/neighbors", params=params)
        searches = search_count(client)
        again = [client.get("/v1/tables/small/neighbors", params=params) for _ in range(3)]
        assert all(r.status_code == 200 and r.content == first.content for r in again)
        assert all(r.headers["content-type"] == "application/json" for r in again)
        assert cache.hits == 3 and len(cache) == 1
        assert search_count(client) == searches  # no search ran for the hits
        # The hits are requests like any other in the metrics, under their route and table.
        counted = [
            line
            for line in client.get("/metrics").text.splitlines()
            if line.startswith("embedding_http_requests_total{")
            and 'route="/v1/tables/{table}/neighbors"' in line
            and 'table="small"' in line
        ]
        assert sum(float(line.rsplit(" ", 1)[1]) for line in counted) == 4
        lookups = client.get("/metrics").text
        assert 'embedding_answer_cache_total{result="hit"} 3.0' in lookups
        assert 'embedding_answer_cache_total{result="miss"} 1.0' in lookups
        # A different query string is a different answer.
        other = client.get("/v1/tables/small/neighbors", params={"token": "heart", "k": 3}).json()
        assert len(other["neighbors"]) == 3 and cache.misses == 2


def search_count(client) -> float:  # type: ignore[no-untyped-def]
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("embedding_search_seconds_count{") and 'operation="neighbors"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_errors_and_posts_are_not_kept(small_data_dir: Path) -> None:
    with client_for(data_dir=small_data_dir) as client:
        cache: AnswerCache = client.app.state.answer_cache
        for _ in range(2):
            assert client.get("/v1/tables/small/neighbors", params={"token": "qwxzzy"}).status_code == 404
            assert client.get("/v1/tables/nope/neighbors", params={"token": "heart"}).status_code == 404
            assert client.post("/v1/tables/small/neighbors", json={"positive": ["heart"], "k": 2}).status_code == 200
        assert len(cache) == 0 and cache.hits == 0


def test_a_table_summary_shows_its_build_as_it_progresses(
    small_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary's ``building`` changes while the registry does not: it is never served from the cache."""
    monkeypatch.setenv(indexing.STATUS_VARIABLE, str(tmp_path))
    status = tmp_path / "small.json"
    with client_for(data_dir=small_data_dir) as client:
        cache: AnswerCache = client.app.state.answer_cache
        for done in (0.25, 0.25, 0.5):
            write_status(status, {"state": "running", "step": "adding rows to the index", "done": done})
            summary = client.get("/v1/tables/small")
            assert summary.status_code == 200 and summary.json()["building"]["done"] == done
        write_status(status, {"state": "queued", "step": "waiting for its turn", "done": 0.0})
        assert client.get("/v1/tables/small").json()["building"]["state"] == "queued"
        assert len(cache) == 0 and cache.hits == 0


def test_the_read_key_is_checked_before_the_cache(small_data_dir: Path) -> None:
    with client_for(data_dir=small_data_dir, read_api_key=KEY) as client:
        path = "/v1/tables/small/similarity?a=red&b=blue"
        assert client.get(path, headers={"x-api-key": KEY}).status_code == 200
        assert client.get(path, headers={"x-api-key": KEY}).status_code == 200
        assert client.app.state.answer_cache.hits == 1
        assert client.get(path).status_code == 401


def test_cache_off(small_data_dir: Path) -> None:
    with client_for(data_dir=small_data_dir, cache_bytes=0) as client:
        assert not hasattr(client.app.state, "answer_cache")
        assert client.get("/v1/tables/small/neighbors", params={"token": "heart"}).status_code == 200


class Version:
    """A registry, as the cache sees one: an object it may refer to weakly."""


def answer(size: int) -> Answer:
    return Answer([(b"content-type", b"application/json")], b"x" * size, None, {})


def test_least_recently_used_answers_go_first_and_stale_ones_are_refused() -> None:
    registry, newer = Version(), Version()
    cache = AnswerCache(max_bytes=8_000)
    assert cache.get(registry, ("/a", b"")) is None
    for name in "abcde":
        cache.put(registry, (f"/{name}", b""), answer(700))
    assert cache.get(registry, ("/a", b"")) is not None  # "a" is now the most recently used
    for name in "fghi":  # 9 answers of about 900 bytes: one must go
        cache.put(registry, (f"/{name}", b""), answer(700))
    assert cache.bytes <= 8_000
    assert cache.get(registry, ("/b", b"")) is None and cache.get(registry, ("/a", b"")) is not None
    cache.put(registry, ("/huge", b""), answer(2_000))  # over an eighth of the cache: not kept
    assert cache.get(registry, ("/huge", b"")) is None
    # A new registry empties the cache; an answer computed by the old one is not stored.
    assert cache.get(newer, ("/a", b"")) is None and len(cache) == 0 and cache.bytes == 0
    cache.put(registry, ("/late", b""), answer(10))
    assert cache.get(newer, ("/late", b"")) is None
