"""Light searches: alone on the event loop; overlapping ones joined in the searcher thread, same answers."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import faiss
import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from index.engine.table import AnalogySearch, Answers, Search, Table, VectorSearch
from service.app import create_app
from service.execute import MAX_BATCH, Searcher
from service.settings import Settings

WORDS = ["heart", "red", "king", "paris", "music", "river", "doctor", "green", "bank", "light", "train", "stone"]


@pytest.fixture(scope="module")
def glove_copy(glove_data_dir: Path) -> Table:
    """A second table object (a second index): searches of two tables never share a FAISS call."""
    return Table.load(glove_data_dir / "glove-6b-50d", checksums=False)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """(thread name, number of queries) of every Table.knn call."""
    seen: list[tuple[str, int]] = []
    knn = Table.knn

    def spied(self: Table, queries: np.ndarray, k: int, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((threading.current_thread().name, len(queries)))
        return knn(self, queries, k, *args, **kwargs)

    monkeypatch.setattr(Table, "knn", spied)
    yield seen


def query(table: Table, word: str, k: int = 10) -> VectorSearch:
    """gensim's most_similar(word): its row, the word left out."""
    row = table.resolve(word).id
    return VectorSearch(table.mean_query([row]), k, [{row}])


def analogy(table: Table, words: str, k: int = 10) -> AnalogySearch:
    a, b, c = (table.resolve(w).id for w in words.split())
    return AnalogySearch([(a, b, c)], k, "3cosadd")


def alone(table: Table, search: Search) -> Answers:
    return table.run(search)


def test_a_lone_search_runs_on_the_event_loop(glove: Table, calls: list[tuple[str, int]]) -> None:
    async def scenario() -> Answers:
        searcher = Searcher(threads=1)
        try:
            return await searcher.run(glove, query(glove, "heart", 11))
        finally:
            searcher.close()

    found = asyncio.run(scenario())
    assert calls == [("MainThread", 1)]
    assert found == alone(glove, query(glove, "heart", 11))
    heart = glove.resolve("heart").id
    assert len(found[0]) == 11 and heart not in {i for i, _ in found[0]}  # the word itself left out


def test_overlapping_searches_are_batched_in_the_thread_with_the_same_answers(
    glove: Table, glove_copy: Table, calls: list[tuple[str, int]]
) -> None:
    asks = [(table, query(table, word, k)) for table in (glove, glove_copy) for word in WORDS for k in (5, 12)]
    asks += [(glove, analogy(glove, words)) for words in ("man king woman", "paris france rome", "good better bad")]

    rounds: list[int] = []
    answer = Searcher._answer

    def counted(self: Searcher, jobs: list, answers: list) -> None:  # type: ignore[type-arg]
        rounds.append(len(jobs))
        answer(self, jobs, answers)

    async def scenario() -> list[Answers]:
        searcher = Searcher(threads=1)
        try:
            return await asyncio.gather(*(searcher.run(table, search) for table, search in asks))
        finally:
            searcher.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Searcher, "_answer", counted)
        found = asyncio.run(scenario())
    assert {name for name, _ in calls} == {"searcher"} and sum(n for _, n in calls) == len(asks)  # in the thread
    assert max(n for _, n in calls) > 1  # one search for the queries of a round with the same table and k
    assert max(rounds) <= MAX_BATCH and sum(rounds) == len(asks)
    calls.clear()
    for (table, search), answer in zip(asks, found, strict=True):
        assert answer == alone(table, search)  # the same, to the last bit, as a search alone
    assert glove.tokens[found[len(WORDS) * 4][0][0][0]] == "queen"


def test_a_failed_search_fails_only_its_own_requests(glove: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    knn = Table.knn

    def failing(self: Table, queries: np.ndarray, k: int, *args, **kwargs):  # type: ignore[no-untyped-def]
        if k == 14:  # 13 neighbours and the word left out
            raise RuntimeError("index failure")
        return knn(self, queries, k, *args, **kwargs)

    monkeypatch.setattr(Table, "knn", failing)

    async def scenario() -> list[object]:
        searcher = Searcher(threads=1)
        try:
            asks = [searcher.run(glove, query(glove, w, 13 if i % 3 == 0 else 10)) for i, w in enumerate(WORDS)]
            return await asyncio.gather(*asks, return_exceptions=True)
        finally:
            searcher.close()

    found = asyncio.run(scenario())
    monkeypatch.setattr(Table, "knn", knn)
    for i, answer in enumerate(found):
        if i % 3 == 0:
            assert isinstance(answer, RuntimeError)
        else:
            assert answer == alone(glove, query(glove, WORDS[i]))


def test_a_request_that_goes_away_while_gathering_leaves_the_others_answered(glove: Table) -> None:
    async def scenario() -> list[Answers]:
        searcher = Searcher(threads=1)
        try:
            tasks = [asyncio.create_task(searcher.run(glove, query(glove, w))) for w in WORDS[:6]]
            await asyncio.sleep(0)  # every task reaches its search: the first gathers, the others join it
            tasks[0].cancel()
            done = await asyncio.wait_for(asyncio.gather(*tasks[1:]), timeout=10)
            assert tasks[0].cancelled()
            return done
        finally:
            searcher.close()

    for word, answer in zip(WORDS[1:6], asyncio.run(scenario()), strict=True):
        assert answer == alone(glove, query(glove, word))


def test_close_stops_the_thread() -> None:
    searcher = Searcher()
    searcher.close()
    assert not searcher._thread.is_alive()


def test_concurrent_http_requests_go_through_the_thread_and_get_their_own_answers(
    glove_data_dir: Path, calls: list[tuple[str, int]]
) -> None:
    app = create_app(Settings(data_dir=glove_data_dir, tables=["glove-6b-50d"], cache_bytes=0))

    async def scenario() -> tuple[list[httpx.Response], list[httpx.Response]]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

                def ask(word: str) -> object:
                    return client.get("/v1/tables/glove-6b-50d/neighbors", params={"token": word, "k": 8})

                together = await asyncio.gather(*(ask(w) for w in WORDS * 3))
                alone = [await ask(w) for w in WORDS]
        return together, alone

    together, alone = asyncio.run(scenario())
    assert any(name == "searcher" for name, _ in calls)  # the requests overlapped: their searches went to the thread
    by_word = {w: r.json() for w, r in zip(WORDS, alone, strict=True)}
    for word, response in zip(WORDS * 3, together, strict=True):
        assert response.status_code == 200
        assert response.json() == by_word[word]
        assert response.json()["query"]["token"] == word and len(response.json()["neighbors"]) == 8


def test_the_server_stops_faiss_taking_the_gil_to_check_for_ctrl_c(small_data_dir: Path) -> None:
    """FAISS's Python module installs a Ctrl-C check that takes the GIL after each search (it made the searcher
    thread wait for the event loop); a running app has it removed."""
    faiss.PythonInterruptCallback.reset()  # as after `import faiss`
    no_check = 1 << 30  # FAISS's check period when nothing is installed
    assert faiss.InterruptCallback.get_period_hint(1000) < no_check
    with TestClient(create_app(Settings(data_dir=small_data_dir))) as client:
        assert client.get("/readyz").status_code == 200
        assert faiss.InterruptCallback.get_period_hint(1000) == no_check


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def nice_of(thread_id: int | None) -> int:
    assert thread_id is not None
    return os.getpriority(os.PRIO_PROCESS, thread_id)


@linux_only
def test_the_searcher_thread_runs_at_a_lower_priority_than_its_caller() -> None:
    own = nice_of(threading.get_native_id())
    lowered, same = Searcher(nice=5), Searcher(nice=0)
    try:
        assert nice_of(lowered._thread.native_id) == min(19, own + 5)
        assert nice_of(same._thread.native_id) == own
        assert nice_of(threading.get_native_id()) == own  # only the searcher thread changed
    finally:
        lowered.close()
        same.close()


@linux_only
def test_the_app_lowers_its_searcher_thread_by_the_setting(
    small_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = nice_of(threading.get_native_id())
    for env, expected in ((None, own), ("3", min(19, own + 3))):
        if env is None:
            monkeypatch.delenv("EMBEDDING_SEARCHER_NICE", raising=False)
        else:
            monkeypatch.setenv("EMBEDDING_SEARCHER_NICE", env)
        app = create_app(Settings(data_dir=small_data_dir))
        with TestClient(app) as client:
            assert client.get("/readyz").status_code == 200
            assert nice_of(app.state.searcher._thread.native_id) == expected
    monkeypatch.setenv("EMBEDDING_SEARCHER_NICE", "20")
    with pytest.raises(ValueError, match="searcher_nice"):
        Settings(data_dir=small_data_dir)
