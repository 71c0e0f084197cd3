"""A request's total work is bounded before it starts, and long computations do not starve searches.

- Within today's per-field limits (batch 1,024, k 1,000, 1,000 words a list, perplexity 100, n_neighbors 200),
  the products that make a request long (items x k, filter conditions, words x lists, neighbours' positive and
  negative words x items, analogy questions scoring every row x rows, tokens x perplexity or n_neighbors) are
  422s naming the setting, before any work; requests just within them are answered.
- What a request scores or tests one by one beyond its searches is bounded together (max_scored_rows): its
  keyword words' documents, its filters' conditions x the table's rows, and diversity's comparisons; and so are
  the rows its exact searches score (max_exact_rows): on a real server, over either is a 422 for the whole
  request, a batch too.
- The text a search of documents answers is bounded: on a real server over documents of 50 KB, a batch (or one
  query) whose hits would carry more than max_answer_bytes is a 422 naming it, before the answer is built;
  the text of documents written since the table's version counts too, and so do the vectors asked for.
- A filter nested deeper than the engine evaluates (32 levels of and/or/not) is its 422 at any depth the JSON
  parser takes, in a batch item too: never a 500 from a recursion.
- On a real server with one slot for long computations and a queue of one: a t-SNE projection runs, a second
  waits, a third is a 503 ``overloaded`` at once, and a filtered exact search is answered while the first runs;
  the waiting one, whose client has gone, is never started.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from index.build.sources import read_source
from index.build.writer import build_table
from index.engine import layout
from index.engine.filters import MAX_DEPTH
from index.engine.live_search import LiveKeyword
from index.engine.table import Table
from service.app import create_app
from service.settings import Settings
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.service.conftest import client_for
from tests.service.raw_http import assert_exact_neighbours, connect, error_of, queries, request, search_body
from tests.service.real_server import HTTP, Server, start, wait_for

SMALL, LEE = "/v1/tables/small", "/v1/tables/lee"


@pytest.fixture(scope="module")
def data_dir(lee_data_dir: Path, small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("work-bounds")
    for source in (lee_data_dir / "lee", small_data_dir / "small"):
        (directory / source.name).symlink_to(source)
    return directory


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=data_dir) as client:
        yield client


@pytest.fixture(scope="module")
def words(small: Table) -> list[str]:
    """1,024 distinct frequent words of the table."""
    return [str(label) for label in small.tokens.labels(list(range(100, 1124)))]


def over(client: TestClient, path: str, body: dict[str, Any], setting: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and setting in error["message"], error


def test_a_batch_of_many_items_at_a_large_k_is_a_422(client: TestClient, small: Table, words: list[str]) -> None:
    vectors = queries(small, 1024, seed=11)
    over(client, f"{SMALL}/search", {"vectors": vectors.round(6).tolist(), "k": 1000}, "max_hits")
    over(client, f"{SMALL}/neighbors", {"queries": words, "k": 1000}, "max_hits")
    over(client, "/v1/compare", {"first": "small", "second": "small", "tokens": words, "k": 1000}, "max_hits")
    questions = [{"a": "man", "b": "king", "c": w} for w in words[:200]]
    over(client, f"{SMALL}/analogy", {"queries": questions, "k": 1000}, "max_hits")
    lee = [{"id": f"lee-{i:03d}", "offset": 900} for i in range(200)]
    over(client, f"{LEE}/search", {"queries": lee, "k": 100}, "max_hits")  # offset + k counts
    # Within the bound: 1,024 queries at k 100, checked against a float64 brute force.
    response = client.post(f"{SMALL}/search", json=json.loads(search_body(vectors, 100)))
    assert response.status_code == 200, response.text[:300]
    assert_exact_neighbours(small, vectors, 100, response.json())
    one = client.post(f"{SMALL}/search", json={"vector": vectors[0].round(6).tolist(), "k": 1000})
    assert one.status_code == 200 and len(one.json()["neighbors"]) == 1000  # a single query keeps max_k


def test_a_filter_of_many_conditions_is_a_422(client: TestClient) -> None:
    many = {"or": [{"year": 1990 + i % 30} for i in range(150_000)]}
    over(client, f"{LEE}/search", {"id": "lee-000", "filter": many}, "max_filter_conditions")
    batch = [{"id": "lee-000", "filter": {"or": [{"year": y} for y in range(2000, 2010)]}}] * 400  # 4,400 in all
    over(client, f"{LEE}/search", {"queries": batch}, "max_filter_conditions")
    within = {"or": [{"year": 1990 + i} for i in range(30)] + [{"tags": {"in": ["a", "b"]}}]}
    response = client.post(f"{LEE}/search", json={"id": "lee-000", "k": 1, "filter": within})
    assert response.status_code == 200, response.text[:300]


def nested(levels: int, op: str) -> str:
    """A filter of ``levels`` and/or/not operators, each holding the next, around one condition, as JSON text
    (written out: deeper than Python's JSON encoder goes)."""
    opening, closing = (f'{{"{op}": ', "}") if op == "not" else (f'{{"{op}": [', "]}")
    return opening * levels + '{"year": 2000}' + closing * levels


def test_a_filter_nested_deeper_than_the_engine_evaluates_is_a_422(server: Server) -> None:
    """Up to near the JSON parser's own depth, on a real server: the engine's 422, never a 500 (RecursionError)."""
    assert MAX_DEPTH == 32  # the request schema checks the engine's own bound

    def post(body: str) -> httpx.Response:
        return HTTP.post(f"{server.base}{LEE}/search", content=body.encode(), timeout=60)

    for op in ("and", "or", "not"):
        for levels in (33, 400, 470):
            one = f'{{"id": "lee-000", "filter": {nested(levels, op)}}}'
            batch = f'{{"queries": [{{"id": "lee-000"}}, {{"id": "lee-001", "filter": {nested(levels, op)}}}]}}'
            for body in (one, batch):
                response = post(body)
                error = error_of((response.status_code, dict(response.headers), response.content), 422)
                assert "a filter nests at most 32 levels of and/or/not" in error["message"], (op, levels, error)
        response = post(f'{{"id": "lee-000", "k": 3, "filter": {nested(32, op)}}}')
        assert response.status_code == 200, (op, response.text[:300])


def test_many_word_lists_are_a_422(client: TestClient, words: list[str]) -> None:
    over(client, f"{SMALL}/doesnt-match", {"queries": [words[:1000]] * 400}, "max_words")
    pairs = [{"a": words[:600], "b": words[600:1000]}] * 30
    over(client, f"{SMALL}/n-similarity", {"queries": pairs}, "max_words")
    response = client.post(f"{SMALL}/doesnt-match", json={"queries": [words[:100]] * 20})
    assert response.status_code == 200 and len(response.json()["results"]) == 20
    # gensim most_similar's positive and negative words, over the whole request (the batch's items and its own)
    examples = [{"positive": words[:16], "negative": words[16:21]}] * 1000
    over(client, f"{SMALL}/neighbors", {"queries": examples, "k": 1}, "max_words")
    over(client, f"{SMALL}/neighbors", {"positive": words * 20, "negative": words[:1]}, "max_words")
    response = client.post(f"{SMALL}/neighbors", json={"queries": examples[:100], "k": 1})
    assert response.status_code == 200 and len(response.json()["results"]) == 100, response.text[:300]


def test_a_batch_of_analogies_that_score_every_row_is_a_422(client: TestClient, words: list[str]) -> None:
    """3CosMul scores each row searched for each question, and so does ranking an expected answer: questions x
    rows is bounded (1,024 questions over the 20,000 rows of ``small``), within max_hits."""
    questions = [{"a": "man", "b": "king", "c": w} for w in words]
    over(client, f"{SMALL}/analogy", {"queries": questions, "k": 10, "method": "3cosmul"}, "max_scored_rows")
    expecting = [{**question, "expect": "queen"} for question in questions]
    over(client, f"{SMALL}/analogy", {"queries": expecting, "k": 10}, "max_scored_rows")
    # Over the first 1,000 rows (restrict) the same batch is within the bound; 3CosAdd alone searches the index.
    for body in ({"method": "3cosmul", "restrict": 1000}, {"method": "3cosadd"}):
        response = client.post(f"{SMALL}/analogy", json={"queries": questions, "k": 3, **body})
        assert response.status_code == 200 and len(response.json()["results"]) == 1024, response.text[:300]


def test_a_projection_of_many_points_at_a_large_neighbourhood_is_a_422(client: TestClient, words: list[str]) -> None:
    over(client, f"{SMALL}/project", {"tokens": words, "method": "tsne", "perplexity": 100}, "max_layout_work")
    over(client, f"{SMALL}/project", {"tokens": words, "method": "umap", "n_neighbors": 200}, "max_layout_work")
    response = client.post(f"{SMALL}/project", json={"tokens": words[:60], "method": "tsne", "perplexity": 100})
    assert response.status_code == 200 and len(response.json()["points"]) == 60, response.text[:300]


def test_the_bounds_are_settings(data_dir: Path, small: Table, words: list[str]) -> None:
    bounds = {"max_hits": 10, "max_k": 10, "max_words": 5, "max_layout_work": 100, "max_scored_rows": 100_000}
    bounds["max_answer_bytes"] = 5000
    with client_for(data_dir=data_dir, **bounds) as client:
        over(client, f"{SMALL}/neighbors", {"queries": words[:3], "k": 4}, "max_hits of 10")
        assert client.post(f"{SMALL}/neighbors", json={"queries": words[:2], "k": 5}).status_code == 200
        over(client, f"{SMALL}/doesnt-match", {"queries": [words[:3]] * 2}, "max_words of 5")
        examples = {"queries": ["king", {"positive": words[:3], "negative": words[3:6]}], "k": 1}
        over(client, f"{SMALL}/neighbors", examples, "max_words of 5")
        over(client, f"{SMALL}/project", {"tokens": words[:11], "method": "umap", "n_neighbors": 10}, "of 100")
        questions = [{"a": "man", "b": "king", "c": w} for w in words[: bounds["max_scored_rows"] // small.rows + 1]]
        over(
            client,
            f"{SMALL}/analogy",
            {"queries": questions, "k": 1, "method": "3cosmul"},
            "max_scored_rows of 100,000",
        )
        within = questions[:-1]
        response = client.post(f"{SMALL}/analogy", json={"queries": within, "k": 2, "method": "3cosmul"})
        assert response.status_code == 200 and len(response.json()["results"]) == len(within), response.text[:300]
        # Vectors asked for in the hits count at 12 bytes a value: 10 hits of 50 values are 6,000 bytes.
        vectors = {"vectors": small.vectors[[100, 200]].tolist(), "k": 5}
        over(client, f"{SMALL}/search", {**vectors, "include": ["vector"]}, "max_answer_bytes of 5,000 bytes")
        assert client.post(f"{SMALL}/search", json=vectors).status_code == 200
        response = client.post(f"{SMALL}/search", json={**vectors, "k": 4, "include": ["vector"]})
        assert response.status_code == 200 and len(response.json()["results"][1]["neighbors"][3]["vector"]) == 50


SAID = "said " * 19_999  # a query of one word 19,999 times (of 100,000 characters at most), held by 208 documents


def test_keyword_queries_whose_words_add_up_too_many_documents_are_a_422(server: Server, data_dir: Path) -> None:
    """A word is scored each time a query gives it: a query of one common word repeated adds up its documents per
    repetition. The request's total is bounded (max_scored_rows, as an analogy batch's rows): past it, a 422
    before any scoring, a batch's queries counting together; a query within it is answered."""
    keyword = Table.load(data_dir / "lee").keyword
    assert keyword is not None
    postings = 19_999 * len(keyword.postings("said")[0])
    assert postings == 19_999 * 208 and 4 * postings < 20_000_000 < 5 * postings  # the default bound

    def search(body: dict[str, Any]) -> httpx.Response:
        return HTTP.post(f"{server.base}{LEE}/search", json=body, timeout=120)

    batch = {"queries": [{"text": SAID, "mode": "keyword"}] * 5, "k": 1}
    response = search(batch)
    error = error_of((response.status_code, dict(response.headers), response.content), 422)
    assert f"{5 * postings:,}" in error["message"] and "max_scored_rows of 20,000,000" in error["message"], error
    response = search({**batch, "queries": batch["queries"][:4]})
    assert response.status_code == 200 and len(response.json()["results"]) == 4, response.text[:300]


def test_the_keyword_bound_counts_written_documents_too(lee_data_dir: Path, tmp_path: Path) -> None:
    """Documents written since the version are scored beside it (live keyword search) and count towards the bound:
    a query whose word the version's documents alone keep at the bound is refused once a written document holds
    that word too."""
    (tmp_path / "lee").symlink_to(lee_data_dir / "lee")
    keyword = Table.load(lee_data_dir / "lee").keyword
    assert keyword is not None
    said = len(keyword.postings("said")[0])  # the version's documents holding "said"
    bound, query = 50 * said, {"text": "said " * 50, "mode": "keyword", "k": 1}
    key = {"X-API-Key": "w"}
    with client_for(data_dir=tmp_path, write_keys=["w"], max_scored_rows=bound) as client:
        response = client.post(f"{LEE}/search", json=query)
        assert response.status_code == 200 and response.json()["hits"], response.text[:300]  # at the bound: answered
        written = {"id": "new", "vector": [0.5] * 50, "text": "It was said, and said again."}
        assert client.post(f"{LEE}/documents", json={"documents": [written]}, headers=key).status_code == 200
        said_in_all = f"add up to {50 * (said + 1):,} (a word counted each time it is given), more than the server's "
        over(client, f"{LEE}/search", query, f"{said_in_all}max_scored_rows of {bound:,}")
        response = client.post(f"{LEE}/search", json={**query, "text": "said " * 40})
        assert response.status_code == 200 and response.json()["hits"][0]["id"] == "new", response.text[:300]


def test_a_keyword_query_beside_written_documents_is_refused_before_any_postings_are_read(
    lee_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside written documents each word's postings are read one word at a time (each row's count recovered from
    its score): the words' documents are added up from where the postings start and stop, and the query refused,
    before any is read. A hybrid search of 12,000 distinct words took 5.9 s reading them before its 422 (their
    columns looked up one word at a time: now all at once, 0.5 s for a query within the bound)."""
    (tmp_path / "lee").symlink_to(lee_data_dir / "lee")
    read: list[str] = []
    postings = LiveKeyword._version_postings
    monkeypatch.setattr(
        LiveKeyword, "_version_postings", lambda self, word, stored: read.append(word) or postings(self, word, stored)
    )
    with client_for(data_dir=tmp_path, write_keys=["w"], max_scored_rows=1_000) as client:
        written = {"id": "new", "vector": [0.5] * 50, "text": "It was said, and said again."}
        assert client.post(f"{LEE}/documents", json={"documents": [written]}, headers={"X-API-Key": "w"}).is_success
        over(client, f"{LEE}/search", {"text": "said " * 5, "mode": "keyword", "k": 1}, "max_scored_rows of 1,000")
        assert read == []
        response = client.post(f"{LEE}/search", json={"text": "said " * 4, "mode": "keyword", "k": 1})
        assert response.status_code == 200 and read == ["said"], (response.text[:300], read)


SCORED_ROWS = 6_000  # the bounded server's max_scored_rows: 20 conditions over lee's 300 rows
EXACT_ROWS = 40_000  # its max_exact_rows: two queries over small's 20,000 rows (a table without an index)


@pytest.fixture(scope="module")
def bounded_server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real server whose requests may score or test 6,000 rows one by one (max_scored_rows) and score 40,000
    in exact searches (max_exact_rows)."""
    env = {"EMBEDDING_MAX_SCORED_ROWS": str(SCORED_ROWS), "EMBEDDING_MAX_EXACT_ROWS": str(EXACT_ROWS)}
    process = start(data_dir, tmp_path_factory.mktemp("work-bounds-scored") / "server.log", env=env)
    try:
        yield process
    finally:
        assert process.stop() == 0


def refused(server: Server, body: dict[str, Any], counted: str) -> None:
    """``body``, searched on lee, is a 422 naming max_scored_rows, for the whole request (a batch too)."""
    response = HTTP.post(f"{server.base}{LEE}/search", json=body, timeout=60)
    error = error_of((response.status_code, dict(response.headers), response.content), 422)
    assert error["limit"] == "max_scored_rows" and counted in error["message"], error
    assert "more than the server's max_scored_rows of 6,000" in error["message"], error


def answered(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    response = HTTP.post(f"{server.base}{LEE}/search", json=body, timeout=60)
    assert response.status_code == 200, response.text[:300]
    answer: dict[str, Any] = response.json()
    return answer


def test_filters_whose_conditions_test_too_many_rows_are_a_422(bounded_server: Server) -> None:
    """Each condition of a filter (an operator on a field, an and/or/not) tests every row of the table: their rows
    count towards max_scored_rows, a batch's filters together, refused before any is evaluated, the whole request
    (never one item of a batch). The first 4,096 conditions of a table of a million rows took a core for a minute."""
    years = [{"year": {"gte": 1990 + i}} for i in range(21)]
    refused(bounded_server, {"id": "lee-000", "filter": {"or": years[:20]}}, "add up to 6,300 (each condition")
    batch = [{"id": "lee-000", "filter": {"year": {"lt": 1990 + i}}} for i in range(21)]
    refused(bounded_server, {"queries": batch}, "filtering: the rows the conditions test add up to 6,300")
    assert answered(bounded_server, {"id": "lee-000", "k": 1, "filter": {"and": years[:19]}})["hits"] == []
    assert len(answered(bounded_server, {"queries": batch[:20], "k": 1})["results"]) == 20


def test_diversity_comparing_too_many_candidates_is_a_422(bounded_server: Server) -> None:
    """MMR compares each candidate (4 x offset + k) with each hit it chooses, a step apiece: its comparisons, and
    500 a step, count towards max_scored_rows. A batch of 102 queries at k 1,000 took a core for 6 s."""
    counted = "diversity: the candidates compared with each hit chosen add up to 6,576 (12 hits x 48 candidates"
    refused(bounded_server, {"id": "lee-000", "k": 12, "diversity": 0.5}, counted)
    refused(bounded_server, {"id": "lee-000", "k": 2, "offset": 10, "diversity": 0.5}, counted)
    refused(bounded_server, {"queries": [{"id": "lee-000"}, {"id": "lee-001"}], "k": 6, "diversity": 0.5}, "6,288")
    assert len(answered(bounded_server, {"id": "lee-000", "k": 11, "diversity": 0.5})["hits"]) == 11


def test_exact_searches_scoring_too_many_rows_are_a_422(bounded_server: Server, small: Table) -> None:
    """An exact search scores every row for each query (small has no approximate index: every search of it is
    exact), as rank does for each pair: their queries x rows count towards max_exact_rows, refused before any is
    scored. 1,024 exact queries over GloVe's 400,000 rows took a core for 3.3 s."""
    assert small.index is None and small.rows == 20_000
    vectors = queries(small, 3, seed=5).round(6).tolist()
    for path, body in (("search", {"vectors": vectors, "k": 3}), ("neighbors", {"queries": ["the", "of", "and"]})):
        response = HTTP.post(f"{bounded_server.base}{SMALL}/{path}", json=body, timeout=60)
        error = error_of((response.status_code, dict(response.headers), response.content), 422)
        assert error["limit"] == "max_exact_rows" and "add up to 60,000 (3 x 20,000 here)" in error["message"], error
        assert "more than the server's max_exact_rows of 40,000" in error["message"], error
    pairs = [["the", "of"], ["and", "to"], ["in", "a"]]
    response = HTTP.post(f"{bounded_server.base}{SMALL}/rank", json={"pairs": pairs}, timeout=60)
    error = error_of((response.status_code, dict(response.headers), response.content), 422)
    assert error["message"].startswith("rank: its pairs x the rows they score add up to 60,000"), error
    assert error["message"].endswith("send fewer pairs at a time (each scores every row, exact or not)"), error
    response = HTTP.post(f"{bounded_server.base}{SMALL}/rank", json={"pairs": pairs[:2]}, timeout=60)
    assert response.status_code == 200 and len(response.json()["ranks"]) == 2, response.text[:300]
    response = HTTP.post(f"{bounded_server.base}{SMALL}/search", json={"vectors": vectors[:2], "k": 3}, timeout=60)
    assert response.status_code == 200 and len(response.json()["results"]) == 2, response.text[:300]


LONG_TEXT_BYTES = 50_000  # a document's text in the table ``long``


@pytest.fixture(scope="module")
def long_data_dir(lee_docs: Lee, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding ``long``: the Lee documents, each text repeated to 50 KB."""
    directory = tmp_path_factory.mktemp("work-bounds-long")
    records = jsonl_records(lee_docs)
    for record in records:
        record["text"] = (record["text"] + " ") * (LONG_TEXT_BYTES // len(record["text"]))
    raw, fmt = read_source(write_jsonl(directory / "long.jsonl", records), "documents")
    build_table(raw, data_dir=directory / "data", name="long", source={"format": fmt, "path": "long.jsonl"})
    return directory / "data"


@pytest.fixture(scope="module")
def long_server(long_data_dir: Path) -> Iterator[Server]:
    """A real server over ``long``, its answers bounded at 4 MB of text."""
    env = {"EMBEDDING_MAX_ANSWER_BYTES": "4000000"}
    process = start(long_data_dir, long_data_dir.parent / "server.log", env=env)
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_an_answer_carrying_too_much_document_text_is_a_422(long_server: Server, lee_docs: Lee) -> None:
    vectors = lee_docs.vectors[:4].tolist()

    def search(body: dict[str, Any]) -> httpx.Response:
        return HTTP.post(f"{long_server.base}/v1/tables/long/search", json=body, timeout=120)

    for body in ({"vectors": vectors, "k": 300}, {"vector": vectors[0], "k": 100}, {"vector": vectors[0], "k": 90}):
        response = search(body)
        error = error_of((response.status_code, dict(response.headers), response.content), 422)
        assert error["code"] == "invalid_request" and "max_answer_bytes of 4.0 MB" in error["message"], error
        assert "MB of document text" in error["message"] and "ask fewer hits" in error["message"], error
    within = search({"vectors": vectors[:2], "k": 35})
    assert within.status_code == 200, within.text[:300]
    texts = [hit["text"] for result in within.json()["results"] for hit in result["hits"]]
    assert len(texts) == 70 and 3_000_000 < sum(len(t.encode()) for t in texts) <= 4_000_000


def test_the_text_of_written_documents_counts_too(long_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> None:
    """Twelve documents of 90 KB written next to the same vector: a search answering them all is over 1 MB."""
    shutil.copytree(long_data_dir, tmp_path / "data", symlinks=True)
    vector = lee_docs.vectors[0].tolist()
    written = [{"id": f"big-{i}", "text": "x" * 90_000, "vector": vector} for i in range(12)]
    with client_for(data_dir=tmp_path / "data", write_keys=["w"], max_answer_bytes=1_000_000) as client:
        wrote = client.post("/v1/tables/long/documents", json={"documents": written}, headers={"X-API-Key": "w"})
        assert wrote.status_code == 200, wrote.text[:300]
        over(client, "/v1/tables/long/search", {"vector": vector, "k": 12}, "max_answer_bytes of 1.0 MB")
        response = client.post("/v1/tables/long/search", json={"vector": vector, "k": 5})
        assert response.status_code == 200 and len(response.json()["hits"]) == 5, response.text[:300]


# ------------------------------------------------------------------------------------- long computations
# Long enough (the server's max_layout_work is raised to take it): time for the requests that come
# while it runs, and for a client to go midway through its optimisation (after its neighbour search).
TSNE_TOKENS, PERPLEXITY = 500, 100


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"EMBEDDING_LAYOUT_SLOTS": "1", "EMBEDDING_LAYOUT_QUEUE": "1", "EMBEDDING_MAX_LAYOUT_WORK": "102400"}
    process = start(data_dir, tmp_path_factory.mktemp("work-bounds-serve") / "server.log", env=env)
    try:
        yield process
    finally:
        assert process.stop() == 0


def project_count(server: Server) -> float:
    text = HTTP.get(f"{server.base}/metrics", timeout=30).text
    found = re.search(r'embedding_search_seconds_count\{operation="project",table="small"\} ([0-9.e+]+)', text)
    return float(found.group(1)) if found else 0.0


def long_work(server: Server) -> tuple[float, float]:
    """The long computations running and waiting, as the server's metrics count them."""
    text = HTTP.get(f"{server.base}/metrics", timeout=30).text
    found = dict(re.findall(r'embedding_work\{kind="long",state="(running|waiting)"\} ([0-9.e+]+)', text))
    return float(found.get("running", 0)), float(found.get("waiting", 0))


def test_long_computations_have_their_own_slots_and_a_bounded_queue(server: Server, words: list[str]) -> None:
    tsne = {"tokens": words[:TSNE_TOKENS], "method": "tsne", "perplexity": PERPLEXITY}
    done: dict[str, float] = {}
    answers: dict[str, httpx.Response] = {}

    def run_first() -> None:
        answers["first"] = HTTP.post(f"{server.base}{SMALL}/project", json=tsne, timeout=600)
        done["first"] = time.monotonic()

    first = threading.Thread(target=run_first)
    first.start()
    wait_for(lambda: long_work(server) == (1, 0), seconds=60, what="the first in the slot")
    # The second waits for the slot, on a raw socket its client will close; the third finds the queue full.
    waiting = connect(server.port, timeout=600)
    waiting.sendall(request("POST", f"{SMALL}/project", json.dumps(tsne).encode()))
    wait_for(lambda: long_work(server) == (1, 1), seconds=60, what="the second in the queue")
    third = HTTP.post(f"{server.base}{SMALL}/project", json=tsne, timeout=60)
    error = error_of((third.status_code, dict(third.headers), third.content), 503)
    assert error["code"] == "overloaded" and third.headers["retry-after"] == "1"
    assert "first" not in done, "the t-SNE layout ended too soon for this test to show anything"
    # A filtered exact search does not wait behind the t-SNE layout.
    started = time.monotonic()
    search = HTTP.post(
        f"{server.base}{LEE}/search", json={"id": "lee-000", "exact": True, "filter": {"year": {"gte": 2000}}}
    )
    searched = time.monotonic()
    assert search.status_code == 200 and search.json()["hits"], search.text[:300]
    waiting.shutdown(socket.SHUT_RDWR)  # the waiting client gives up
    waiting.close()
    first.join()
    assert answers["first"].status_code == 200 and len(answers["first"].json()["points"]) == TSNE_TOKENS
    assert searched < done["first"], (searched - started, done["first"] - started)
    wait_for(lambda: "the client has gone, its work is not started" in server.log(), seconds=30, what="the drop")
    assert project_count(server) == 1  # the t-SNE that was answered, and no other
    assert long_work(server) == (0, 0)


def test_a_map_layout_asked_for_by_many_at_once_is_computed_once(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight requests for a t-SNE map not kept yet: one computation in the one long slot, which the others await
    without taking a place in the queue (none left here), and all get the same layout."""
    computed: list[int] = []
    tsne_layout = layout.tsne_layout

    def counted(vectors: Any, *args: Any, **kwargs: Any) -> Any:
        computed.append(len(vectors))
        return tsne_layout(vectors, *args, **kwargs)

    monkeypatch.setattr(layout, "tsne_layout", counted)
    settings = Settings(data_dir=data_dir, cache_dir=tmp_path, cache_bytes=0, map_tsne_rows=300, layout_queue=0)
    app = create_app(settings)

    async def scenario() -> list[httpx.Response]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=600) as client:
                paths = [f"{SMALL}/map/info?method=tsne", f"{SMALL}/map?method=tsne"] * 4
                return list(await asyncio.gather(*(client.get(path) for path in paths)))

    answers = asyncio.run(scenario())
    assert [a.status_code for a in answers] == [200] * 8, [a.text[:200] for a in answers]
    assert computed == [300]  # once, for all eight
    infos = [a.json() for a in answers[::2]]
    assert all(info["rows"] == 300 and info["bounds"] == infos[0]["bounds"] for info in infos)
    assert len({a.content for a in answers[1::2]}) == 1 and len(answers[1].content) == 300 * 4


def test_a_t_sne_projection_whose_client_goes_is_stopped(server: Server, words: list[str]) -> None:
    tsne = {"tokens": words[:TSNE_TOKENS], "method": "tsne", "perplexity": PERPLEXITY, "seed": 7}
    started = time.monotonic()
    whole = HTTP.post(f"{server.base}{SMALL}/project", json=tsne, timeout=600)
    full = time.monotonic() - started
    assert whole.status_code == 200, whole.text[:300]
    stopped = server.log().count("its work is stopped")
    with connect(server.port, timeout=600) as sock:
        sock.sendall(request("POST", f"{SMALL}/project", json.dumps(tsne).encode()))
        time.sleep(full / 4)
    closed_at = time.monotonic()
    wait_for(lambda: server.log().count("its work is stopped") > stopped, seconds=full * 2, what="the stop")
    assert time.monotonic() - closed_at < full / 2, (time.monotonic() - closed_at, full)
    again = HTTP.post(f"{server.base}{SMALL}/project", json=tsne, timeout=600)  # the slot is free again
    assert again.status_code == 200 and again.json()["points"] == whole.json()["points"]
