"""The front of a sharded table over HTTP: three real shard servers (``embedding-index import --shards 3`` of
gensim's Lee corpus, each shard served alone) and a real front (``EMBEDDING_SHARDS``) on loopback, against a
real server of the same documents imported whole.

The corpus carries copies of some documents under ids of their own (on other shards), so that the lists the
front merges hold equal scores. Every form the front takes (vector, by document id, by positive/negative ids,
a batch of vectors or of queries, keyword, hybrid with weights and its RRF constant, diversity, filters, paging,
``min_score``, ``fields``) answers exactly as the whole table does: the same documents in the same order, the
same scores, ranks, text and fields (equal scores by row, as the whole table orders them); so do its reads of
documents by id, one or many (and LangChain's and LlamaIndex's reads by id through it); its summary and list of
tables are those of a real server of the sharded table served whole. Shard 0 has two
replicas, one of which is down: every search still answers (the retry). A shard stopped: 503, or with
``EMBEDDING_PARTIAL=true`` the other shards' merged answer flagged ``partial``; a stopped (SIGSTOP) shard: 504
after its deadline. Every server takes keys (``EMBEDDING_API_KEY``, ``EMBEDDING_READ_API_KEY``, as deploy/k8s's
Secret sets them): the front forwards the client's key to its shards; a front whose shards refuse the key it
took answers 503 ``shard_unavailable`` saying so.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from index.store import shardmap
from service.scatter import PLACE_SECONDS, SHARD_REQUESTS, merge_lists, merged_answer, shard_body
from service.schemas.common import LIMITS
from service.schemas.search import SearchRequest
from service.shard_settings import front_settings
from tests.lee import Lee, jsonl_records
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, client_for, lee_copy
from tests.service.real_server import Server

SHARDS = 3
TIMEOUT = 4.0  # seconds a shard may take: far above a busy machine's answer, well below the test's patience
# seconds a shard may take at the front whose deadline is tested: short, since the test waits it out, yet far above
# a busy machine's answer, so that only the stopped shard misses it
DEADLINE = 1.0
READ_KEY = "front-read-key-0123456789"
STRANGER_KEY = "stranger-read-key-0123456789"  # a front's own key, which its shards do not take
KEYS = {"EMBEDDING_API_KEY": "front-admin-key-0123456789", "EMBEDDING_READ_API_KEY": READ_KEY}
# The tests' requests, with the read key every server takes (as ``real_server.HTTP``: no keep-alive).
HTTP = httpx.Client(headers={"x-api-key": READ_KEY}, limits=httpx.Limits(max_keepalive_connections=0))
TEXTS = ("bushfires in Sydney", "Taliban fighters in Afghanistan", "the government said on Monday", "Qantas")


COPIED = (7, 8, 10, 50, 123, 150)  # documents imported again under other ids: equal scores in the lists
COPIES = 3


def copies() -> list[tuple[str, int]]:
    """(the copy's id, the row it copies), in import order after the corpus."""
    return [(f"lee-{i:03d}-copy-{c}", i) for i in COPIED for c in range(COPIES)]


@pytest.fixture(scope="module")
def records(lee_docs: Lee) -> list[dict[str, Any]]:
    records = jsonl_records(lee_docs)
    return records + [{**records[i], "id": ident} for ident, i in copies()]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, lee_imports: Path) -> Path:
    """``lee`` whole and as ``SHARDS`` shards, with the copies (the corpus and ``copies()``, ``lee_imports``)."""
    root = tmp_path_factory.mktemp("front")
    owners = {shardmap.shard_of_id(ident, SHARDS) for ident, _ in copies()}
    assert owners == set(range(SHARDS))  # the copies of a document stand on more than one shard
    assert SHARDS == LEE_SHARDS
    for where in ("whole", "sharded"):
        lee_copy(lee_imports, "copies", where, root / where)
    (root / "front").mkdir()
    return root


@pytest.fixture(scope="module")
def servers(root: Path) -> Iterator[dict[str, Any]]:
    started: list[Server] = []
    try:
        # The whole table, the shards and the one-process server first; then the fronts, which need the shards' URLs.
        started += real_server.start_together(
            lambda: real_server.start(root / "whole", root / "whole.log", env=KEYS),
            *real_server.shard_starts(root / "sharded" / "lee", root, SHARDS, KEYS),
            # the sharded table served whole
            lambda: real_server.start(
                root / "sharded", root / "one.log", env={"EMBEDDING_WRITE_KEYS": "writer", **KEYS}
            ),
        )
        whole, *shards, one = started
        down = f"http://127.0.0.1:{real_server.free_port()}/v1/tables/{shardmap.shard_name(0)}"  # nothing listens
        replicas = real_server.replicas(shards)
        replicas[0].insert(0, down)
        config = json.dumps({"lee": replicas})

        def front(partial: str, timeout: float, log: str, keys: dict[str, str] = KEYS) -> Callable[[], Server]:
            env = {"EMBEDDING_SHARDS": config, "EMBEDDING_PARTIAL": partial, "EMBEDDING_SHARD_TIMEOUT": str(timeout)}
            return lambda: real_server.start(root / "front", root / log, env={**env, **keys})

        started += real_server.start_together(
            front("false", TIMEOUT, "front-false.log"),
            front("true", TIMEOUT, "front-true.log"),
            front("false", DEADLINE, "front-deadline.log"),
            front("false", TIMEOUT, "front-stranger.log", {"EMBEDDING_READ_API_KEY": STRANGER_KEY}),
        )
        fronts = started[-4:]
        yield {
            "whole": whole,
            "shards": shards,
            "front": fronts[0],
            "partial": fronts[1],
            "deadline": fronts[2],
            "stranger": fronts[3],
            "one": one,
        }
    finally:
        real_server.stop_together(started)


def search(server: Server, body: dict[str, Any], key: str | None = READ_KEY) -> tuple[int, dict[str, Any]]:
    headers = {"x-api-key": key} if key is not None else {}
    answer = real_server.HTTP.post(f"{server.base}/v1/tables/lee/search", json=body, headers=headers, timeout=30)
    return answer.status_code, answer.json()


def search_both(first: Server, second: Server, body: dict[str, Any]) -> tuple[tuple[int, Any], tuple[int, Any]]:
    """``search`` on two servers at once: separate processes, their work overlaps on the machine's cores."""
    with ThreadPoolExecutor(1) as pool:
        theirs = pool.submit(search, second, body)
        return search(first, body), theirs.result()


def lists_with_ties(server: Server, body: dict[str, Any]) -> bool:
    """Whether the whole table's lists the front merges for ``body`` (vector, keyword, as deep as the front asks
    each shard) hold equal scores: the front must order them by row, as the whole table does."""
    answer = HTTP.post(
        f"{server.base}/v1/tables/lee/search", json=shard_body(SearchRequest.model_validate(body), body), timeout=30
    )
    assert answer.status_code == 200, answer.text
    items = answer.json().get("results", [answer.json()])  # one list: the single query form
    return any(len({h["score"] for h in item["hits"]}) < len(item["hits"]) for item in items)


def bodies(lee: Lee) -> list[dict[str, Any]]:
    vector = lee.vectors[7].tolist()
    other = lee.vectors[123].tolist()
    spec = {"or": [{"long": True}, {"tags": {"prefix": "australia"}}]}
    out: list[dict[str, Any]] = [
        {"vector": vector, "k": 10},
        {"vector": other, "k": 5, "offset": 7, "fields": ["year", "tags"]},
        {"vector": vector, "k": 10, "min_score": 0.98},
        {"vector": other, "k": 8, "filter": spec},
        *({"vector": lee.vectors[i].tolist(), "k": 20, "offset": 5} for i in (50, 150, 250)),
    ]
    for text in TEXTS:
        out += [
            {"text": text, "mode": "keyword", "k": 10},
            {"text": text, "mode": "keyword", "k": 4, "offset": 3, "filter": {"lang": "en"}},
            {"vector": vector, "text": text, "mode": "hybrid", "k": 10},
            {"vector": other, "text": text, "mode": "hybrid", "k": 6, "offset": 4, "rrf_k": 10},
            {"vector": other, "text": text, "mode": "hybrid", "k": 10, "weights": {"vector": 1, "keyword": 3}},
            {"vector": vector, "text": text, "mode": "hybrid", "k": 10, "filter": spec, "fields": ["year"]},
        ]
    out += [
        {"id": "lee-010", "k": 10},
        {"id": "lee-123-copy-1", "k": 6, "offset": 2, "fields": ["year"]},
        {"positive": ["lee-010", "lee-020"], "negative": ["lee-030"], "k": 10, "filter": {"lang": "en"}},
        {"positive": ["lee-050", "lee-007-copy-0"], "k": 8, "min_score": 0.95},
        {"id": "lee-008", "text": "bushfires in Sydney", "mode": "hybrid", "k": 10},
        {"vector": lee.vectors[40].tolist(), "k": 8, "diversity": 0.4},
        {"vector": vector, "k": 8, "offset": 3, "diversity": 0.7, "filter": spec},
        {"id": "lee-150", "k": 6, "diversity": 0.3},
        {"vector": lee.vectors[41].tolist(), "text": "fire", "mode": "hybrid", "k": 8, "diversity": 0.2},
        {"positive": ["lee-007"], "text": "Sydney", "mode": "hybrid", "k": 5, "diversity": 0.5, "rrf_k": 10},
        {"vector": vector, "k": 5, "include": ["row", "vector"]},
        {"text": "bushfires", "mode": "keyword", "k": 5, "include": ["row"]},
        {"vector": other, "k": 4, "filter": {"id": {"in": ["lee-010", "lee-123-copy-1", "lee-200", "lee-7", "x"]}}},
        {"text": "fire", "mode": "keyword", "k": 5, "filter": {"not": {"id": {"in": ["lee-010", "lee-008"]}}}},
    ]
    return out


def test_the_front_answers_as_the_whole_table(servers: dict[str, Any], lee_docs: Lee) -> None:
    """Exactly, equal scores included."""
    tied = 0
    for body in bodies(lee_docs):
        first, (expected_status, expected) = search_both(servers["front"], servers["whole"], body)
        # shard 0's replicas taken in turn: the one that is down, then the other
        for status, got in (first, search(servers["front"], body)):
            assert status == expected_status == 200, (body, got)
            assert got == expected, body
        assert got["hits"] or body.get("min_score"), body
        tied += "id" not in body and "positive" not in body and lists_with_ties(servers["whole"], body)
    assert tied >= 10, tied  # the order of equal scores is tested, not assumed
    # one access line per request in the front's log, not one more per shard it asked (httpx's own lines)
    assert "HTTP Request:" not in servers["front"].log()


def test_the_front_checks_requests_as_any_search(servers: dict[str, Any], lee_docs: Lee) -> None:
    for body in (
        {"vector": [1.0, 2.0], "k": 5},
        {"text": "Qantas", "mode": "keyword", "k": 0},
        {"vector": lee_docs.vectors[0].tolist(), "k": 5, "filter": {"nope": 1}},
        {"positive": ["lee-001"], "negative": ["lee-001"], "k": 5},
        {"vector": lee_docs.vectors[0].tolist(), "k": 5, "include": ["rows"]},
    ):
        status, got = search(servers["front"], body)
        expected_status, _ = search(servers["whole"], body)
        assert status == expected_status == 422 and got["error"]["code"] == "invalid_request", (body, got)
    body = {"vector": lee_docs.vectors[0].tolist(), "k": 5}
    for server in (servers["front"], servers["whole"]):  # a query parameter a POST does not read, refused alike
        answer = real_server.HTTP.post(
            f"{server.base}/v1/tables/lee/search?k=1", json=body, headers={"x-api-key": READ_KEY}, timeout=30
        )
        assert answer.status_code == 422 and answer.json()["error"]["details"][0]["loc"] == ["query", "k"], answer.text
    status, got = search(servers["front"], {"id": "nope", "k": 5})
    expected_status, expected = search(servers["whole"], {"id": "nope", "k": 5})
    assert status == expected_status == 404 and got["error"]["code"] == expected["error"]["code"], got
    for body in ({"id": "nope", "k": 5}, {"vector": lee_docs.vectors[0].tolist(), "k": 5, "fields": ["nope"]}):
        _, got = search(servers["front"], body)  # a shard's message names the sharded table, as the whole's does
        _, expected = search(servers["whole"], body)
        assert got["error"]["message"] == expected["error"]["message"] and "'lee'" in got["error"]["message"], got
    ready = HTTP.get(f"{servers['front'].base}/readyz")  # no table of its own, the sharded one fronted
    assert ready.status_code == 200 and ready.json()["loaded"] == ["lee"], ready.text
    for body in ({"text": "fire", "mode": "hybrid", "k": 5}, {"queries": [{"text": "fire"}], "mode": "hybrid"}):
        (status, got), (expected_status, expected) = search_both(servers["front"], servers["whole"], body)
        assert status == expected_status and got == expected, (body, got)  # an item's error: the whole's envelope
    status, got = search(servers["front"], {"text": "fire", "mode": "hybrid", "k": 5, "diversity": 0.5})
    assert status == 422 and "re-ranks by the query's vector" in got["error"]["message"], got
    base = f"{servers['front'].base}/v1/tables/lee"
    for answer in (
        HTTP.get(f"{base}/map/info"),
        HTTP.get(f"{base}/neighbors?token=fire"),
        HTTP.post(f"{base}/similarity", json={"pairs": [["a", "b"]]}),
    ):
        error = answer.json()["error"]
        assert answer.status_code == 404 and error["code"] == "not_found", answer.text
        assert "table 'lee' is sharded and this server is its front" in error["message"], answer.text
    for body in ({"id": "lee-020", "k": 1000}, {"vector": lee_docs.vectors[0].tolist(), "k": 300, "diversity": 0.5}):
        status, got = search(servers["front"], body)  # more than a shard answers: said so
        assert status == 422 and "asks each shard for" in got["error"]["message"], got
        assert search(servers["front"], {**body, "k": 200})[0] == 200
    for server in (servers["front"], servers["one"]):  # the first rows of a table split by hash mean nothing
        status, got = search(server, {"vector": lee_docs.vectors[0].tolist(), "k": 5, "restrict": 10})
        assert status == 422 and "restrict" in got["error"]["message"], got


def test_the_front_names_every_unknown_id_as_the_whole_table(servers: dict[str, Any]) -> None:
    """Unknown ids of one search, on one shard or several, are named at once, in the query's order, as the
    unsharded table (never written to here) names them: its unknown positive ids, else its unknown negative ones,
    five of them and how many more."""
    owners = {shardmap.shard_of_id(f"nope-{i}", SHARDS) for i in range(8)}
    assert len(owners) > 1
    for body in (
        {"positive": ["nope-3", "lee-010", "nope-1"], "negative": ["nope-2"], "k": 5},
        {"positive": ["lee-010"], "negative": ["nope-2", "lee-020", "nope-0"], "k": 5},
        {"positive": [f"nope-{i}" for i in range(8)], "negative": ["nope-9"], "k": 5},
    ):
        (status, got), (expected_status, expected) = search_both(servers["front"], servers["whole"], body)
        assert status == expected_status == 404 and got == expected, (body, got, expected)
    message = "no document with id 'nope-0', 'nope-1', 'nope-2', 'nope-3', 'nope-4' and 3 more in table 'lee'"
    assert got["error"]["message"] == message and got["error"]["count"] == 8, got


def read_both(servers: dict[str, Any], path: str, body: dict[str, Any] | None = None) -> list[httpx.Response]:
    """The front's answer and the whole table's to ``GET`` (or ``POST`` ``body``) ``.../v1/tables/lee/<path>``."""
    method = "GET" if body is None else "POST"
    return [
        HTTP.request(method, f"{servers[s].base}/v1/tables/lee/{path}", json=body, timeout=30)
        for s in ("front", "whole")
    ]


def test_the_front_reads_documents_by_id_as_the_whole_table(servers: dict[str, Any], lee_docs: Lee) -> None:
    """``GET .../documents/{id}`` and ``POST .../documents/get`` through the front: the whole table's answers,
    byte for byte (text, fields, vectors as imported or unit, a selection of fields; unknown ids missing, in the
    order asked, an id asked twice answered twice, up to max_batch ids), and its refusals; each shard asked once
    for a request's ids."""
    ids = ["lee-123", "lee-999", "lee-007-copy-2", "lee-123", "lee-007", "a/c", *lee_docs.ids[::23], "lee-999"]
    assert {shardmap.shard_of_id(ident, SHARDS) for ident in ids} == set(range(SHARDS))
    assert shardmap.shard_of_id("a/c", SHARDS) < shardmap.shard_of_id("lee-999", SHARDS)  # missing as asked
    for options in ({}, {"vector": True}, {"vector": True, "normalized": True, "fields": ["year", "tags"]}):
        got, expected = read_both(servers, "documents/get", {"ids": ids, **options})
        assert got.status_code == expected.status_code == 200 and got.content == expected.content, options
        assert got.json()["missing"] == ["lee-999", "a/c", "lee-999"] and len(got.json()["documents"]) == len(ids) - 3
    for ident in ("lee-123", "lee-007-copy-2", "lee-999", "a/c", "a%2Fc"):
        for query in ("", "?vector=true", "?vector=1&normalized=true&fields=year,%20tags", "?fields="):
            got, expected = read_both(servers, f"documents/{ident}{query}")
            assert (got.status_code, got.content) == (expected.status_code, expected.content), (ident, query)
            assert got.status_code == (404 if ident.startswith(("lee-999", "a")) else 200), got.text
    for ident in ("%2E", "%2E%2E"):  # "." and "..": ids asked of their shard, not steps up its URL
        got, expected = read_both(servers, f"documents/{ident}?vector=true")
        assert (got.status_code, got.content) == (expected.status_code, expected.content), got.text
        assert got.status_code == 404 and got.json()["error"]["code"] == "unknown_document", got.text
        (status, got_search), (_, expected_search) = search_both(servers["front"], servers["whole"], {"id": ".."})
        assert status == 404 and got_search == expected_search, got_search
    most = [lee_docs.ids[i % len(lee_docs.ids)] for i in range(LIMITS.get().max_batch)]
    got, expected = read_both(servers, "documents/get", {"ids": most, "fields": []})
    assert got.status_code == 200 and got.content == expected.content and not got.json()["missing"]
    for body in (
        {"ids": [*most, "lee-001"]},
        {"ids": []},
        {"ids": ["lee-001"], "fields": ["year", "nope"]},
        {"ids": ["lee-999"], "fields": ["nope"]},  # an unknown field, even when no document is found
        {"ids": ["lee-001"], "vector": "yes"},
        {"ids": ["lee-001"], "k": 3},
        {"ids": [""]},
    ):
        got, expected = read_both(servers, "documents/get", body)
        assert got.status_code == expected.status_code == 422 and got.json() == expected.json(), (body, got.text)
    for path in ("documents/lee-001?fields=nope", "documents/lee-001?vector=maybe", "documents/lee-001?k=1"):
        got, expected = read_both(servers, path)
        assert got.status_code == expected.status_code == 422 and got.json() == expected.json(), (path, got.text)
    asked = {"x-request-id": "front-documents-get"}
    answer = HTTP.post(f"{servers['front'].base}/v1/tables/lee/documents/get", json={"ids": ids}, headers=asked)
    assert answer.status_code == 200, answer.text
    for shard in servers["shards"]:  # one request to each shard, for all its ids
        assert shard.log().count('/documents/get HTTP/1.1" 200 request_id=front-documents-get') == 1, shard.log()


def test_the_front_scrolls_the_documents_as_the_whole_table(servers: dict[str, Any], lee_docs: Lee) -> None:
    """``POST .../documents/scroll`` through the front: the whole table's pages, byte for byte, page after page to
    the last (each shard's page merged in the ids' order; documents of one shard alone), with a filter, options, an
    ``after`` it need not hold; its refusals the whole table's."""
    one_shards = [ident for ident in lee_docs.ids if shardmap.shard_of_id(ident, SHARDS) == 1][:5]
    pages = 0
    for options in (
        {"limit": 37},
        {"limit": 7, "filter": {"year": {"gte": 2001}}, "fields": ["year"]},
        {"limit": 2, "filter": {"id": {"in": one_shards}}},  # a full page of one shard's, the others' empty
    ):
        after: Any = None
        while True:
            body = options if after is None else {**options, "after": after}
            got, expected = read_both(servers, "documents/scroll", body)
            assert got.status_code == expected.status_code == 200 and got.content == expected.content, body
            pages += 1
            if (after := got.json()["next"]) is None:
                break
    assert pages > 12
    for body in (
        {},
        {"limit": 3, "after": "lee-1", "vector": True, "normalized": True},
        {"limit": 1, "after": "zzz"},  # past every id: an empty last page
    ):
        got, expected = read_both(servers, "documents/scroll", body)
        assert got.status_code == expected.status_code == 200 and got.content == expected.content, body
    for body in ({"limit": 0}, {"filter": {"nope": 1}}, {"after": ""}, {"vector": "yes"}, {"k": 3}):
        got, expected = read_both(servers, "documents/scroll", body)
        assert got.status_code == expected.status_code == 422 and got.json() == expected.json(), (body, got.text)


def test_a_filter_holding_an_integer_past_64_bits_is_the_whole_tables_answer(
    servers: dict[str, Any], lee_docs: Lee
) -> None:
    """The front sends a shard the request as the client sent it: orjson, which writes the shards' bodies, cannot
    write an integer past 64 bits, and such a filter was a 500 rather than no document, a float's comparison or an
    integer field's 422."""
    vector = lee_docs.vectors[200].tolist()
    for filter_ in ({"id": {"in": [2**64, "lee-201"]}}, {"known": {"lt": 10**30}}, {"year": {"gt": 2**64}}):
        (status, got), (expected_status, expected) = search_both(
            servers["front"], servers["whole"], {"vector": vector, "k": 3, "filter": filter_, "fields": []}
        )
        assert status == expected_status and got == expected, (filter_, got)
        scrolled, whole = read_both(servers, "documents/scroll", {"limit": 3, "filter": filter_})
        assert scrolled.status_code == whole.status_code and scrolled.content == whole.content, (filter_, scrolled)
    assert expected_status == 422 and "beyond an integer field's 64 bits" in got["error"]["message"], got


def test_a_hybrid_text_no_document_holds_is_searched_by_its_vector_alone(
    servers: dict[str, Any], lee_docs: Lee
) -> None:
    """As the whole table does (docs/documents.md, "A hybrid query that falls back to keyword"): no shard holds a
    word of the text (stop words, or words of no document), so the answer is mode vector's, cosines and a
    ``fallback`` saying why, not RRF of the vector list alone; with ``min_score`` it stays hybrid."""
    vector = lee_docs.vectors[200].tolist()
    for body in (
        {"vector": vector, "text": "such", "mode": "hybrid", "k": 3},
        {"id": "lee-200", "text": "the zzqxv", "mode": "hybrid", "k": 3, "filter": {"year": {"gt": 1991}}},
        {"positive": ["lee-200", "lee-201"], "negative": ["lee-002"], "text": "of", "mode": "hybrid", "k": 3},
        {
            "queries": [{"id": "lee-200", "text": "such"}, {"id": "lee-200", "text": "Taliban"}],
            "mode": "hybrid",
            "k": 3,
        },
        {"vector": vector, "text": "such", "mode": "hybrid", "k": 3, "min_score": 0.001},
    ):
        (status, got), (expected_status, expected) = search_both(servers["front"], servers["whole"], body)
        assert status == expected_status == 200 and got == expected, (body, got)
    # A word some documents hold, none of them passing the filter: mode hybrid, the filter aside, on both
    years = {year for text, year in zip(lee_docs.texts, lee_docs.fields["year"], strict=True) if "Taliban" in text}
    year = min(set(lee_docs.fields["year"]) - years)
    filtered = {"vector": vector, "text": "Taliban", "mode": "hybrid", "k": 3, "filter": {"year": {"eq": year}}}
    (status, got), (expected_status, expected) = search_both(servers["front"], servers["whole"], filtered)
    assert status == expected_status == 200 and got == expected and "fallback" not in got and got["hits"], got
    assert "fallback" not in got and "fallback" in search(servers["front"], {**body, "min_score": None})[1]
    assert got["hits"][0]["score"] < 0.02  # fused, not a cosine


def test_the_front_answers_a_batch_item_by_item(servers: dict[str, Any], lee_docs: Lee) -> None:
    """A batch of queries or of vectors: each query scattered on its own, and answered exactly as the whole table
    answers it asked alone, an item's error in its place. (The whole table answers a batch's queries together,
    through BLAS's matrix product, whose sums may round a cosine one unit in the last place apart from one
    query's; the same documents come back.)"""
    items: list[dict[str, Any]] = [
        {"vector": lee_docs.vectors[50].tolist()},
        {"text": "Qantas", "mode": "keyword", "offset": 2},
        {"vector": lee_docs.vectors[150].tolist(), "text": "Taliban fighters", "mode": "hybrid"},
        {"vector": lee_docs.vectors[250].tolist(), "filter": {"nope": 1}},
        {"vector": lee_docs.vectors[250].tolist(), "filter": {"lang": "en"}, "min_score": 0.97},
        {"id": "lee-007", "offset": 1},
        {"positive": ["lee-007", "lee-008"], "negative": ["lee-123"]},
        {"id": "nope"},
    ]
    vectors = [lee_docs.vectors[i].tolist() for i in (7, 10, 123)]
    for body in (
        {"queries": items, "k": 6, "fields": ["year"]},
        {"queries": items[:3], "k": 6, "diversity": 0.5},
        {"queries": items[:3], "k": 6, "rrf_k": 10, "weights": {"keyword": 2}},  # its hybrid item's alone
        {"queries": [{**items[2], "mode": None}, items[1]], "k": 6, "mode": "hybrid", "rrf_k": 10},  # null: the top's
        {"vectors": vectors, "k": 7, "offset": 1, "filter": {"lang": "en"}},
        {"queries": [items[0], items[5], items[6]], "k": 5, "offset": 1, "filter": {"lang": "en"}, "min_score": 0.6},
    ):
        status, got = search(servers["front"], body)
        expected_status, expected = search(servers["whole"], body)
        assert status == expected_status == 200, got
        common = {key: value for key, value in body.items() if key not in ("queries", "vectors")}
        if "vectors" in body:
            alone = [{"vector": vector, **common} for vector in body["vectors"]]
        else:
            alone = [{**common, **{k: v for k, v in query.items() if v is not None}} for query in body["queries"]]
            fusion = ("rrf_k", "weights")  # a query not of mode hybrid is refused them asked alone
            alone = [q if q.get("mode") == "hybrid" else {k: v for k, v in q.items() if k not in fusion} for q in alone]
        assert len(got["results"]) == len(expected["results"]) == len(alone)
        for query, mine, theirs in zip(alone, got["results"], expected["results"], strict=True):
            single_status, single = search(servers["whole"], query)
            if "error" in theirs:
                assert mine["error"]["code"] == theirs["error"]["code"] == single["error"]["code"], mine
                continue
            assert single_status == 200 and mine == single, query
            assert [h["id"] for h in mine["hits"]] == [h["id"] for h in theirs["hits"]], query


def test_hits_carry_their_rows_and_unit_vectors_when_asked(
    servers: dict[str, Any], records: list[dict[str, Any]]
) -> None:
    """``include``: a shard's hits name their rows in the whole table (the order of equal scores) and carry their
    unit vectors; ``GET .../documents/{id}?vector=true&normalized=true`` gives a document's unit vector."""
    row = {record["id"]: i for i, record in enumerate(records)}
    unit = {r["id"]: np.asarray(r["vector"]) / np.linalg.norm(r["vector"]) for r in records}
    body = {"vector": records[7]["vector"], "k": 20, "include": ["row", "vector"]}
    seen = 0
    for s, shard in enumerate(servers["shards"]):
        answer = HTTP.post(f"{shard.base}/v1/tables/{shardmap.shard_name(s)}/search", json=body, timeout=30).json()
        for hit in answer["hits"]:
            assert hit["row"] == row[hit["id"]] and shardmap.shard_of_id(hit["id"], SHARDS) == s
            np.testing.assert_allclose(hit["vector"], unit[hit["id"]], atol=1e-6)
            seen += 1
        one = answer["hits"][0]["id"]
        url = f"{shard.base}/v1/tables/{shardmap.shard_name(s)}/documents/{one}?vector=true&normalized=true"
        assert HTTP.get(url).json()["vector"] == answer["hits"][0]["vector"]
    assert seen == SHARDS * 20
    _, plain = search(servers["whole"], {"vector": records[7]["vector"], "k": 3})
    assert all(hit.keys() == {"id", "score", "text", "fields"} for hit in plain["hits"])


def test_the_front_forwards_the_clients_key_to_its_shards(servers: dict[str, Any], lee_docs: Lee) -> None:
    """Every shard request carries the client's key (the kind lookup, a document's vector, the keyword statistics,
    the search), and the request's X-Request-ID when it has one; a key the front takes and its shards refuse is
    the deployment's fault: 503 naming the refusal."""
    vector = lee_docs.vectors[7].tolist()
    for body in (
        {"vector": vector, "k": 5},
        {"id": "lee-010", "text": "bushfires in Sydney", "mode": "hybrid", "k": 5},
        {"queries": [{"positive": ["lee-050"]}, {"text": "Qantas", "mode": "keyword"}], "k": 3},
    ):
        (status, got), (_, expected) = search_both(servers["front"], servers["whole"], body)
        assert status == 200 and got == expected, (body, got)
    named = {"x-api-key": READ_KEY, "X-Request-ID": "front-7f3a"}
    answer = real_server.HTTP.post(
        f"{servers['front'].base}/v1/tables/lee/search", json={"vector": vector, "k": 5}, headers=named
    )
    assert answer.status_code == 200 and answer.headers["x-request-id"] == "front-7f3a"
    for shard in servers["shards"]:  # each shard's access line of the request it was asked names it
        assert '/search HTTP/1.1" 200 request_id=front-7f3a' in shard.log(), shard.log()[-2000:]
    for key, code in ((None, "unauthorized"), ("wrong", "forbidden")):  # the front's own check, as any server's
        status, got = search(servers["front"], {"vector": vector, "k": 5}, key)
        assert status == {"unauthorized": 401, "forbidden": 403}[code] and got["error"]["code"] == code, got
    for body in ({"vector": vector, "k": 5}, {"queries": [{"vector": vector}], "k": 5}):
        status, got = search(servers["stranger"], body, STRANGER_KEY)
        assert status == 503 and got["error"]["code"] == "shard_unavailable", got
        assert "refused the request's API key (status 403" in got["error"]["message"], got


def test_the_front_summarises_the_table_as_one_process(servers: dict[str, Any]) -> None:
    """``GET /v1/tables/lee`` and ``GET /v1/tables`` through the fronts (one retrying shard 0's replica that is
    down) answer as the one-process server of the same shards: rows, fields, shards, writes; the explorer opens
    on the table (``GET /v1/explorer``)."""
    got = [HTTP.get(f"{servers[name].base}/v1/tables/lee").json() for name in ("front", "partial", "one")]
    assert got[0] == got[1] == got[2] and got[2]["rows"] == sum(got[2]["shards"]["rows"]), got
    listed = [HTTP.get(f"{servers[name].base}/v1/tables").json() for name in ("front", "one")]
    assert listed[0] == listed[1] == {"tables": [got[2]], "unavailable": []}, listed
    explorer = HTTP.get(f"{servers['front'].base}/v1/explorer").json()  # the page opens on a table it lists
    assert (explorer["default_table"], explorer["default_reason"]) == ("lee", "first"), explorer


def test_the_front_answers_fields_and_rows_by_id_as_one_process(servers: dict[str, Any]) -> None:
    """``GET .../fields`` (every shard's values merged, those it listed in part asked in full) and ``GET
    .../ids/{id}`` (a row of the whole table, from the shard that holds it) through the front: the answers of the
    one-process server of the same shards and of the whole table's server, byte for byte, refusals too."""
    paths = ["fields", "ids/0", "ids/0?normalized=true", "ids/151", "ids/317", "ids/318", "ids/x", "ids/1?k=2"]
    for path in paths:
        got = [HTTP.get(f"{servers[name].base}/v1/tables/lee/{path}") for name in ("front", "one", "whole")]
        assert len({(answer.status_code, answer.content) for answer in got}) == 1, (path, got[0].text, got[1].text)
    assert [answer.status_code for answer in got] == [422] * 3
    summary = HTTP.get(f"{servers['front'].base}/v1/tables/lee").json()
    assert summary["rows"] == 318 and HTTP.get(f"{servers['front'].base}/v1/tables/lee/ids/317").json()["id"] == 317


def test_the_python_client_reads_the_front_as_the_whole_table(servers: dict[str, Any], lee_docs: Lee) -> None:
    """An application's client, with its read key, gets from the front what it gets from the whole table: hits, a
    batch's per-item errors, documents by id (LangChain's ``get_by_ids``, LlamaIndex's ``get_nodes``), its fields;
    without the key, a typed 401."""
    from service_client import ApiError, Client
    from service_client.langchain import EmbeddingSearchStore
    from service_client.llamaindex import EmbeddingSearchVectorStore

    ids = [lee_docs.ids[5], "lee-999", "lee-123-copy-2", lee_docs.ids[5], *lee_docs.ids[200:260]]

    def answers(api: Client) -> list[Any]:
        batch = api.search_documents_batch("lee", [{"id": lee_docs.ids[3]}, {"id": "lee-999"}], k=3)
        nodes = EmbeddingSearchVectorStore(api, "lee").get_nodes(node_ids=ids)
        return [
            api.search_documents("lee", vector=lee_docs.vectors[7], k=5, fields=["year"]),
            api.search_documents("lee", text="bushfires in Sydney", mode="keyword", k=4),
            batch[0],
            (batch[1].status, batch[1].code) if isinstance(batch[1], ApiError) else batch[1],
            api.document("lee", lee_docs.ids[5], vector=True, fields=["year"]),
            api.documents("lee", ids, vector=True, normalized=True),
            EmbeddingSearchStore(api, "lee").get_by_ids(ids),
            [(node.node_id, node.get_content(), node.metadata) for node in nodes],
            api.limits(),  # the front's own, its settings' (the defaults, as the whole table's server's)
        ]

    front_base = servers["front"].base
    with Client(front_base, api_key=READ_KEY) as front, Client(servers["whole"].base, api_key=READ_KEY) as whole:
        got = answers(front)
        assert got == answers(whole) and got[3] == (404, "unknown_document") and got[8]["max_batch"] == 1024
        assert [d.id for d in got[6]] == [ids[0], *ids[2:]] == [n[0] for n in got[7]]  # as asked, found ones
        assert front.fields("lee") == whole.fields("lee")
    with Client(front_base) as anonymous, pytest.raises(ApiError) as refused:
        anonymous.search_documents("lee", vector=lee_docs.vectors[7])
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")


def test_a_shard_listed_in_another_shards_place_fails_saying_so(servers: dict[str, Any], root: Path) -> None:
    """A front whose ``EMBEDDING_SHARDS`` lists shards 0 and 1 in each other's place would route an id to a shard
    that does not hold it (a 404 for a document the table holds, a write refused by the wrong shard): each
    shard's server says in its summary which shard of how many it serves (``shard_of``), and the front fails
    every request that needs a shard listed out of place, 503 saying so (writes: ``test_shards_writes_http.py``)."""
    shards = servers["shards"]
    for number, shard in enumerate(shards):
        summary = HTTP.get(f"{shard.base}/v1/tables/{shardmap.shard_name(number)}").json()
        identity = shardmap.read(root / "sharded" / "lee").manifest["shards"][shardmap.IMPORT]
        assert summary["shard_of"] == {"table": "lee", "shard": number, "shards": SHARDS, "import": identity}
    assert "shard_of" not in HTTP.get(f"{servers['one'].base}/v1/tables/lee").json()  # the table served whole
    replicas = real_server.replicas(shards)
    swapped = json.dumps({"lee": [replicas[1], replicas[0], replicas[2]]})
    front = real_server.start(root / "front", root / "front-swapped.log", env={"EMBEDDING_SHARDS": swapped, **KEYS})
    try:
        owned = next(f"lee-{i:03d}" for i in range(300) if shardmap.shard_of_id(f"lee-{i:03d}", SHARDS) == 0)
        base = f"{front.base}/v1/tables/lee"
        vector = [0.5] * 50
        for answer in (
            HTTP.get(f"{base}/documents/{owned}"),
            HTTP.post(f"{base}/documents/get", json={"ids": [owned]}),
            HTTP.post(f"{base}/search", json={"id": owned, "k": 3}),
            HTTP.post(f"{base}/search", json={"vector": vector, "k": 3}),
            HTTP.get(base),
        ):
            error = answer.json()["error"]
            assert answer.status_code == 503 and error["code"] == "shard_unavailable", (answer.request.url, error)
            assert (
                f"{replicas[1][0]}: its server serves shard 1 of the 3 of table 'lee', not shard 0 of 3"
                in error["message"]
            ), error
    finally:
        real_server.stop_together([front])
    said = [line for line in front.log().splitlines() if "as EMBEDDING_SHARDS lists it" in line]
    assert len(said) == 2, said  # once for each replica out of place, however many requests met it
    assert "ERROR service.scatter: table 'lee', shard 0: " in said[0] + said[1], said
    got, expected = (
        HTTP.get(f"{s.base}/v1/tables/lee/documents/{owned}") for s in (servers["front"], servers["whole"])
    )
    assert got.status_code == 200 and got.content == expected.content  # where it is listed in its place


def test_a_replica_restarted_on_another_import_is_noticed(root: Path, lee_imports: Path) -> None:
    """Shard 2's server restarted on its URL serving shard 2 of an import into four shards, between two requests,
    so that the front sees no failure: within ``PLACE_SECONDS`` the front asks its place again and fails the
    requests that need it, 503 saying so, rather than miss the documents shard 2 of three holds."""
    from tests.cli import run_cli

    four = root / "four"
    done = run_cli("import", lee_imports / "copies.jsonl", "--name", "lee", "--shards", 4, "--data-dir", four)
    assert done.code == 0, done.err
    (root / "restarted").mkdir()
    table, logs, name = root / "sharded" / "lee", root / "restarted", shardmap.shard_name(2)
    first = ",".join(map(shardmap.shard_name, range(2)))
    started = real_server.start_together(  # shards 0 and 1 by one server, shard 2 by one of its own
        lambda: real_server.start(table, logs / "first.log", "--tables", first, env=KEYS),
        lambda: real_server.start(table, logs / f"{name}.log", "--tables", name, env=KEYS),
    )
    try:
        env = {"EMBEDDING_SHARDS": json.dumps({"lee": real_server.replicas([started[0], *started])}), **KEYS}
        started.append(real_server.start(root / "front", root / "front-restarted.log", env=env))
        base = f"{started[-1].base}/v1/tables/lee"
        owned = next(f"lee-{i:03d}" for i in range(300) if shardmap.shard_of_id(f"lee-{i:03d}", SHARDS) == 2)
        assert HTTP.get(f"{base}/documents/{owned}").status_code == 200
        port = started[1].port
        started[1].stop()
        started[1] = real_server.start(four / "lee", logs / "again.log", "--tables", name, env=KEYS, port=port)
        time.sleep(PLACE_SECONDS)
        answer = HTTP.get(f"{base}/documents/{owned}")
        error = answer.json()["error"]
        assert answer.status_code == 503 and error["code"] == "shard_unavailable" and error["shard"] == 2, error
        assert "its server serves shard 2 of the 4 of table 'lee', not shard 2 of 3" in error["message"], error
    finally:
        real_server.stop_together(started)


def test_a_write_to_shards_that_take_none_is_the_deployments_fault(root: Path) -> None:
    """A front started with write keys over shards served without any key (by one server): the client's write key
    is not at fault, the deployment is: 503 ``shard_unavailable`` saying the shard's writer takes no writes, not the
    shard's 403 telling the client to start "this server" (the front, which has them) with EMBEDDING_WRITE_KEYS."""
    key = "front-write-key-0123456789"
    names = ",".join(shardmap.shard_name(s) for s in range(SHARDS))
    started = [real_server.start(root / "sharded" / "lee", root / "open.log", "--tables", names)]
    try:
        config = json.dumps({"lee": real_server.replicas(started * SHARDS)})
        env = {"EMBEDDING_SHARDS": config, "EMBEDDING_WRITE_KEYS": key}
        started.append(real_server.start(root / "front", root / "front-writes.log", env=env))
        body = {"documents": [{"id": "lee-000", "vector": [0.5] * 50}]}
        answer = HTTP.post(f"{started[-1].base}/v1/tables/lee/documents", json=body, headers={"x-api-key": key})
        error = answer.json()["error"]
        assert answer.status_code == 503 and error["code"] == "shard_unavailable", error
        owner = shardmap.shard_of_id("lee-000", SHARDS)
        assert error["shard"] == owner and f"the writer of shard {owner} of table 'lee'" in error["message"], error
        assert "takes no writes: its server was started without EMBEDDING_WRITE_KEYS" in error["message"], error
    finally:
        real_server.stop_together(started)


def test_a_slow_shard_hits_its_deadline(servers: dict[str, Any], lee_docs: Lee) -> None:
    """A search, a read of documents of which the stopped shard holds some, one or many, and the table's summary:
    504 naming it."""
    shard = servers["shards"][1]
    owned = next(ident for ident in lee_docs.ids if shardmap.shard_of_id(ident, SHARDS) == 1)
    base = f"{servers['deadline'].base}/v1/tables/lee/documents"
    shard.process.send_signal(signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(3) as pool:
            reads = [
                pool.submit(HTTP.get, f"{base}/{owned}", timeout=30),
                pool.submit(HTTP.post, f"{base}/get", json={"ids": lee_docs.ids[:9]}, timeout=30),
                pool.submit(HTTP.get, f"{servers['deadline'].base}/v1/tables/lee", timeout=30),
            ]
            started = time.monotonic()
            status, got = search(servers["deadline"], {"vector": lee_docs.vectors[3].tolist(), "k": 5})
            took = time.monotonic() - started
            answers = [read.result() for read in reads]
    finally:
        shard.process.send_signal(signal.SIGCONT)
    assert status == 504 and got["error"]["code"] == "shard_timeout" and got["error"]["shard"] == 1, got
    assert DEADLINE <= took < 4 * DEADLINE, took
    for answer in answers:
        error = answer.json()["error"]
        assert answer.status_code == 504 and error["code"] == "shard_timeout" and error["shard"] == 1, answer.text


def test_a_big_batch_waits_its_turn_and_the_front_answers_meanwhile(servers: dict[str, Any], lee_docs: Lee) -> None:
    """A batch asks each shard once per query; past ``SHARD_REQUESTS`` at a time they wait their turn in the
    front, not in its HTTP client's pool (whose queue, hundreds long, held the front's event loop for minutes): the
    batch is answered as the whole table answers it, and the front answers other requests while it runs."""
    queries = 3 * SHARD_REQUESTS * SHARDS + len(lee_docs.ids) // 2  # more shard requests than the old pool's 256
    body = {"vectors": [lee_docs.vectors[i % len(lee_docs.ids)].tolist() for i in range(queries)], "k": 2}
    with ThreadPoolExecutor(1) as pool:
        batch = pool.submit(search, servers["front"], {**body, "fields": []})
        while not batch.done():
            assert HTTP.get(f"{servers['front'].base}/healthz", timeout=TIMEOUT).status_code == 200
            time.sleep(0.1)
        status, got = batch.result()
    expected_status, expected = search(servers["whole"], {**body, "fields": []})
    assert status == expected_status == 200 and len(got["results"]) == queries, got
    for mine, theirs in zip(got["results"], expected["results"], strict=True):  # a cosine a unit apart at most
        scores = [[h["score"] for h in item["hits"]] for item in (mine, theirs)]
        np.testing.assert_allclose(*scores, rtol=0, atol=1e-6)


def test_a_batch_asks_a_stopped_shard_once(servers: dict[str, Any], lee_docs: Lee) -> None:
    """A shard that did not answer one of a request's queries is not asked again for the others: a batch of
    more queries than a shard takes at once is answered, partial, within about one deadline, not one per turn."""
    body = {"vectors": [lee_docs.vectors[i].tolist() for i in range(3 * SHARD_REQUESTS)], "k": 3}
    shard = servers["shards"][1]
    shard.process.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        status, got = search(servers["partial"], body)
        took = time.monotonic() - started
    finally:
        shard.process.send_signal(signal.SIGCONT)
    assert status == 200 and all(item["partial"]["missing"][0]["shard"] == 1 for item in got["results"]), got
    assert TIMEOUT <= took < 2 * TIMEOUT, took


def shard_2s_own_word(whole: Server, lee: Lee) -> str:
    """A word of the documents of shard 2 alone (the whole table's keyword hits for it all shard 2's)."""
    held: dict[str, set[int]] = {}
    for ident, text in zip(lee.ids, lee.texts, strict=True):
        for word in set(re.findall(r"[a-z]{6,}", text.lower())):
            held.setdefault(word, set()).add(shardmap.shard_of_id(ident, SHARDS))
    for word in sorted(w for w, shards in held.items() if shards == {2})[:20]:
        status, got = search(whole, {"text": word, "mode": "keyword", "k": 10})
        if status == 200 and got["hits"] and all(shardmap.shard_of_id(h["id"], SHARDS) == 2 for h in got["hits"]):
            return word
    raise AssertionError("no word of shard 2's documents alone")


def test_a_stopped_shard_fails_or_is_flagged(servers: dict[str, Any], lee_docs: Lee) -> None:
    body = {"text": "government", "mode": "keyword", "k": 20}
    _, whole = search(servers["whole"], {**body, "k": 100})
    servers["shards"][2].stop()
    status, got = search(servers["front"], body)
    assert status == 503 and got["error"]["code"] == "shard_unavailable" and got["error"]["shard"] == 2, got
    assert HTTP.get(f"{servers['front'].base}/readyz").status_code == 200  # the front's readiness asks no shard
    status, got = search(servers["partial"], body)
    assert status == 200 and got["partial"]["shards"] == SHARDS and got["partial"]["answered"] == SHARDS - 1
    assert [m["shard"] for m in got["partial"]["missing"]] == [2]
    kept = [h for h in whole["hits"] if shardmap.shard_of_id(h["id"], SHARDS) != 2][:20]
    assert [h["score"] for h in got["hits"]] == [h["score"] for h in kept] and len(kept) == 20
    assert {h["id"] for h in got["hits"] if h["score"] > kept[-1]["score"]} == {
        h["id"] for h in kept if h["score"] > kept[-1]["score"]
    }
    assert {h["id"] for h in whole["hits"][:20]} - {h["id"] for h in got["hits"]}  # shard 2's are missing
    # A hybrid text whose words shard 2's documents alone hold: no fallback saying that no document holds one
    word = shard_2s_own_word(servers["whole"], lee_docs)
    body = {"vector": lee_docs.vectors[0].tolist(), "text": word, "mode": "hybrid", "k": 3}
    status, got = search(servers["partial"], body)
    assert status == 200 and "fallback" not in got and got["partial"]["missing"][0]["shard"] == 2, (word, got)
    # A query by a document of shard 2 has no vector to search by, partial answers or not; nor is it read
    owned = next(f"lee-{i:03d}" for i in range(300) if shardmap.shard_of_id(f"lee-{i:03d}", SHARDS) == 2)
    others = [ident for ident in lee_docs.ids[:30] if shardmap.shard_of_id(ident, SHARDS) != 2]
    for front in ("front", "partial"):
        base = f"{servers[front].base}/v1/tables/lee"
        for answer in (
            HTTP.post(f"{base}/search", json={"id": owned, "k": 3}),
            HTTP.post(f"{base}/search", json={"queries": [{"id": owned}], "k": 3}),
            HTTP.get(f"{base}/documents/{owned}"),
            HTTP.post(f"{base}/documents/get", json={"ids": [*others, owned]}),
            HTTP.post(f"{base}/documents/scroll", json={}),  # its limits asked first, then its page
            HTTP.post(f"{base}/documents/scroll", json={"limit": 5, "after": "lee-299"}),
        ):
            error = answer.json()["error"]
            assert answer.status_code == 503 and error["code"] == "shard_unavailable" and error["shard"] == 2, error
        got, expected = (
            HTTP.post(f"{s.base}/v1/tables/lee/documents/get", json={"ids": others})
            for s in (servers[front], servers["whole"])
        )
        assert got.status_code == 200 and got.content == expected.content  # the shards that answer are read
        summary = HTTP.get(base)  # its sums would be wrong without shard 2's part, partial answers or not
        error = summary.json()["error"]
        assert summary.status_code == 503 and error["code"] == "shard_unavailable" and error["shard"] == 2, error
        assert "shard 2 of table 'lee' did not answer" in error["message"], error
        listed = HTTP.get(f"{servers[front].base}/v1/tables").json()
        assert listed == {"tables": [], "unavailable": ["lee"]}, listed


def test_a_replicas_password_is_in_no_answer_nor_log_line(tmp_path: Path) -> None:
    """A replica URL may carry a password (``http://user:password@host/...``), which the settings' refusals hide: a
    shard that did not answer was named by its URL whole, password included, in the 503 every client was sent
    (a read key's too) and in the front's log."""
    shards = [[f"http://user:s3cret@127.0.0.1:9/v1/tables/shard-00{i}"] for i in range(2)]
    (tmp_path / "data").mkdir()
    env = {"EMBEDDING_SHARDS": json.dumps({"lee": shards})}
    front = real_server.start(tmp_path / "data", tmp_path / "front.log", env=env)
    try:
        answers = [
            HTTP.post(f"{front.base}/v1/tables/lee/search", json={"vector": [0.5] * 8, "k": 2}),
            HTTP.get(f"{front.base}/v1/tables/lee"),
        ]
    finally:
        front.stop()
    for answer in answers:
        error = answer.json()["error"]
        assert answer.status_code == 503 and error["code"] == "shard_unavailable", error
        assert "http://user:***@127.0.0.1:9/v1/tables/shard-000" in error["message"], error
        assert "s3cret" not in answer.text, answer.text
    assert "user:***@" in front.log() and "s3cret" not in front.log()


def test_a_replicas_password_is_in_no_debug_log_line(tmp_path: Path) -> None:
    """At EMBEDDING_LOG_LEVEL=debug the front logs each request it sends a shard (httpx's own line), which named a
    replica's URL whole, password included. Here the replica is a server that answers 501 to anything."""
    replica = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=replica.serve_forever, daemon=True).start()
    url = f"http://user:s3cret@127.0.0.1:{replica.server_address[1]}/v1/tables/shard-000"
    (tmp_path / "data").mkdir()
    env = {"EMBEDDING_SHARDS": json.dumps({"lee": [[url]]}), "EMBEDDING_LOG_LEVEL": "debug"}
    front = real_server.start(tmp_path / "data", tmp_path / "front.log", env=env)
    try:
        answer = HTTP.get(f"{front.base}/v1/tables/lee")
    finally:
        front.stop()
        replica.shutdown()
    assert answer.status_code == 503 and "s3cret" not in answer.text, answer.text
    assert "HTTP Request: GET http://user:***@127.0.0.1" in front.log() and "s3cret" not in front.log()


def test_one_server_serves_a_sharded_table_whole(servers: dict[str, Any], lee_docs: Lee) -> None:
    """``embedding-serve`` over a data directory holding the sharded table: its shards in one process, merged by
    ``index.engine.shards``, answer every form as the whole table does: the same hits, scores, ranks, text and
    fields, in the same order, equal scores by row (a batch's items as the whole table answers the batch)."""
    more: list[dict[str, Any]] = [
        {"id": "lee-010", "k": 10},
        {"positive": ["lee-010", "lee-020"], "negative": ["lee-030"], "k": 10, "filter": {"lang": "en"}},
        {"vector": lee_docs.vectors[40].tolist(), "k": 8, "diversity": 0.4},
        {"vector": lee_docs.vectors[41].tolist(), "text": "fire", "mode": "hybrid", "k": 8, "diversity": 0.2},
        {"queries": [{"id": "lee-005"}, {"text": "Qantas", "mode": "keyword", "offset": 2}], "k": 5},
    ]
    for body in [*bodies(lee_docs), *more]:
        (status, got), (expected_status, expected) = search_both(servers["one"], servers["whole"], body)
        assert status == expected_status == 200, (body, got)
        assert got == expected, body
    one = HTTP.get(f"{servers['one'].base}/v1/tables/lee/documents/lee-123?vector=true").json()
    assert one == HTTP.get(f"{servers['whole'].base}/v1/tables/lee/documents/lee-123?vector=true").json()
    ids = ["lee-123", "lee-999", "lee-007", "lee-123", *(f"lee-{i:03d}" for i in range(0, 300, 29))]
    many = [
        HTTP.post(f"{servers[s].base}/v1/tables/lee/documents/get", json={"ids": ids, "vector": True})
        for s in ("one", "whole")
    ]
    assert many[0].status_code == 200 and many[0].json() == many[1].json(), many[0].text
    each = [HTTP.get(f"{servers['one'].base}/v1/tables/lee/documents/{i}?vector=true") for i in ids]
    assert many[0].json() == {
        "documents": [answer.json() for answer in each if answer.status_code == 200],
        "missing": [i for i, answer in zip(ids, each, strict=True) if answer.status_code == 404],
    }
    summary = HTTP.get(f"{servers['one'].base}/v1/tables/lee").json()
    assert summary["rows"] == 300 + len(copies()) and summary["kind"] == "documents"
    assert summary["shards"]["count"] == SHARDS
    assert summary["recall_at_10"] == 1.0 and summary["approximate"] is False  # its flat shards': exact


def test_the_fronts_metrics_label_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The front's routes of its table are counted as a server of the table counts them: by route template and
    the table's name; a name it does not serve is "unknown"."""
    down = f"http://127.0.0.1:{real_server.free_port()}/v1/tables/shard-000"  # nothing listens
    monkeypatch.setenv("EMBEDDING_SHARDS", json.dumps({"lee": [[down]]}))
    asked = [
        ("POST", "/v1/tables/lee/search", {"vector": [0.5] * 50}, 503, "/v1/tables/{table}/search", "lee"),
        ("GET", "/v1/tables/lee", None, 503, "/v1/tables/{table}", "lee"),
        ("DELETE", "/v1/tables/lee/documents/a/b", None, 503, "/v1/tables/{table}/documents/{document:path}", "lee"),
        ("GET", "/v1/tables/lee/fields", None, 503, "/v1/tables/{table}/fields", "lee"),
        ("GET", "/v1/tables/lee/ids/3", None, 503, "/v1/tables/{table}/ids/{id}", "lee"),
        ("GET", "/v1/tables/nope/fields", None, 404, "/v1/tables/{table}/fields", "unknown"),
    ]
    with client_for(data_dir=tmp_path) as client:
        for method, path, body, status, _, _ in asked:
            assert client.request(method, path, json=body).status_code == status, path
        lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith("embedding_http_req")]
    for method, _, _, status, route, table in asked:
        labels = (f'method="{method}"', f'route="{route}"', f'table="{table}"', f'status="{status}"')
        assert any(all(label in line for label in labels) for line in lines), (route, lines)
    assert not [line for line in lines if "/v1/tables/lee" in line or ('table=""' in line and "/v1/" in line)]


def test_a_front_without_tables_of_its_own_says_what_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A front's data directory holds no table (docs/deployment.md: `--data-dir /empty`): its start-up names the
    sharded tables it answers instead of warning that it found no tables (nor at a reload), which a server of nothing
    still does."""
    down = f"http://127.0.0.1:{real_server.free_port()}/v1/tables/shard-000"  # nothing listens: not asked at start-up
    with caplog.at_level(logging.INFO, logger="service"):
        with client_for(data_dir=tmp_path):
            pass
        monkeypatch.setenv("EMBEDDING_SHARDS", json.dumps({"lee": [[down]], "glove": [[down]]}))
        with client_for(data_dir=tmp_path, api_key="admin") as front:  # and at a reload
            assert front.post("/v1/admin/reload", headers={"x-api-key": "admin"}).status_code == 200
        monkeypatch.setenv("EMBEDDING_SHARDS", json.dumps({"lee": [[down]]}))
        with client_for(data_dir=tmp_path):
            pass
    said = [record.getMessage() for record in caplog.records]
    empty = f"no tables found in {tmp_path}"
    fronting = "answering sharded tables glove, lee from their shards (EMBEDDING_SHARDS)"
    assert said.count(empty) == 1 and said.index(empty) < said.index(fronting), said
    assert said.count("ready: 0 tables loaded, 0 failed") == 3, said
    assert "answering sharded table lee from its shards (EMBEDDING_SHARDS)" in said, said


def test_the_merge_orders_equal_scores_by_row_and_written_documents_last() -> None:
    """Equal scores by the whole table's row whatever shard holds them; a document written since its shard's
    version (no row) after the rows of its score, by shard and rank; the query's own documents left out."""
    lists = [
        [
            {"id": "a", "score": 0.9, "row": 8},
            {"id": "w1", "score": 0.5, "row": None},
            {"id": "b", "score": 0.5, "row": 9},
        ],
        [
            {"id": "c", "score": 0.9, "row": 3},
            {"id": "q", "score": 0.8, "row": 0},
            {"id": "d", "score": 0.5, "row": 20},
        ],
        [{"id": "w2", "score": 0.9, "row": None}, {"id": "e", "score": 0.4, "row": 1}],
    ]
    merged = merge_lists(lists, 6, frozenset({"q"}))
    assert [hit["id"] for hit in merged] == ["c", "a", "w2", "b", "d", "w1"]
    local = [
        [{"id": "a", "score": 0.5, "row": 1}],
        [{"id": "b", "score": 0.5, "row": 0}, {"id": "c", "score": 0.5, "row": 1}],
    ]
    assert [hit["id"] for hit in merge_lists(local, 3, frozenset())] == ["b", "a", "c"]  # rows of their own: none lost
    hybrid = SearchRequest.model_validate({"vector": [1.0] * 50, "text": "x", "mode": "hybrid", "k": 3})
    both = [
        {
            "results": [
                {"hits": [{"id": "w", "score": 0.9, "row": None}]},
                {"hits": [{"id": "w", "score": 2.0, "row": None}]},
            ]
        }
    ]
    fused = merged_answer(hybrid, both)  # a written document in both lists is one document, in both
    assert [(hit["id"], hit["ranks"]) for hit in fused] == [("w", {"vector": 1, "keyword": 1})]
    body = SearchRequest.model_validate({"vector": [1.0] * 50, "k": 4, "offset": 1, "include": ["row"]})
    parts: list[dict[str, Any] | None] = [{"results": [{"hits": hits}]} for hits in lists]
    page = merged_answer(body, parts, frozenset({"q"}))
    assert [(hit["id"], hit["row"]) for hit in page] == [("a", 8), ("w2", None), ("b", 9), ("d", 20)]


NOT_A_TABLE = "is not a table's URL: http(s)://HOST[:PORT]/v1/tables/NAME, the shard's table on its server"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nonsense", "EMBEDDING_SHARDS: not JSON of the form {table: [[replica URL, ...], ...]}"),
        ('{"a/b": [["http://x"]]}', "EMBEDDING_SHARDS: 'a/b' is not a table name"),
        ('{"lee": [[]]}', "EMBEDDING_SHARDS: table 'lee' needs at least one replica URL per shard"),
        ('{"lee": [["ftp://x"]]}', "EMBEDDING_SHARDS: table 'lee': 'ftp://x' is neither an http nor an https URL"),
        # Accepted, each of these failed every request needing its shard, with a 503 blaming the shard.
        ('{"lee": [["http://x:8000"]]}', f"EMBEDDING_SHARDS: table 'lee': 'http://x:8000' {NOT_A_TABLE}"),
        (
            '{"lee": [["http://x/v1/tables/a?b=1"]]}',
            f"EMBEDDING_SHARDS: table 'lee': 'http://x/v1/tables/a?b=1' {NOT_A_TABLE}",
        ),
        ('{"lee": [["http:///v1/tables/a"]]}', "EMBEDDING_SHARDS: table 'lee': 'http:///v1/tables/a' names no host"),
        (
            '{"lee": [["http://a b/v1/tables/a"]]}',
            "EMBEDDING_SHARDS: table 'lee': 'http://a b/v1/tables/a' has a space",
        ),
        (
            '{"lee": [["http://x:99999/v1/tables/a"]]}',
            "EMBEDDING_SHARDS: table 'lee': 'http://x:99999/v1/tables/a' has a port",
        ),
        # A password in a URL is not shown; a table's name is shown as given (names are case-sensitive).
        (
            '{"lee": [["http://user:s3cret@x/v1/tables/a/"]]}',
            f"EMBEDDING_SHARDS: table 'lee': 'http://user:***@x/v1/tables/a/' {NOT_A_TABLE}",
        ),
        # a password may hold an apostrophe (a URL's user information may), which has the URL quoted in double quotes
        (
            '{"lee": [["http://user:it\'s@x/v1/tables/a/"]]}',
            f"EMBEDDING_SHARDS: table 'lee': \"http://user:***@x/v1/tables/a/\" {NOT_A_TABLE}",
        ),
        ('{"Lee": [[5]]}', "EMBEDDING_SHARDS.Lee.0.0=5: Input should be a valid string"),
        # nor in a value of the wrong shape, which the refusal quotes (a shard's URLs not in a list of their own)
        (
            '{"lee": ["https://user:s3cret@x/v1/tables/a"]}',
            "EMBEDDING_SHARDS.lee.0='https://user:***@x/v1/tables/a': Input should be a valid list",
        ),
        ('{"lee": [["http://x/v1/tables/shard-000"], ["https://[::1]:8000/prefix/v1/tables/shard-001"]]}', None),
    ],
)
def test_a_bad_shard_setting_is_one_line(
    value: str, message: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBEDDING_SHARDS", value)
    if message is None:
        assert list(front_settings().shards) == ["lee"]
        return
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        front_settings()
    done = subprocess.run(
        [str(real_server.BIN / "embedding-serve"), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}, "EMBEDDING_SHARDS": value},
    )
    assert done.returncode == 2 and done.stderr.startswith(f"embedding-serve: invalid settings: {message}")
    assert "Traceback" not in done.stderr
