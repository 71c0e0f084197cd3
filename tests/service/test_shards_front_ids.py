"""Ids through the front of a sharded table, on loopback: Lee's documents under integer ids, imported as three
shards (three real shard servers and a real front, ``EMBEDDING_SHARDS``) and whole (one real server), every
server taking writes.

The front reads an id as the table reads it (``index.engine.door.routed``, the table's own ``id_key``): on an
integer-id table ``"007"``, ``"7"`` and ``7`` are one id, routed to the one shard that owns 7, so a write, a query
by the document and a delete through the front reach the same document whichever way the id is written (a shard
served alone would refuse ``"007"`` sent to it by its text's hash, naming 7's owner). An id the table cannot hold
is refused by the front as the table refuses it. A string-id table keeps ``"007"`` and ``"7"`` apart
(``tests/service/test_shards_writes_http.py``). The whole table's server and the shards' take batches of at most
``MAX_BATCH``, the front its default: its pages of documents are those of a server of the lower ``max_batch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from index.store import shardmap
from tests.cli import run_cli
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.service import real_server
from tests.service.real_server import HTTP
from tests.service.test_shards_front import search_both
from tests.service.test_shards_writes_http import HEADERS, KEY, SHARDS

MAX_BATCH = 64  # the whole table's and the shards' max_batch, below the front's


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, lee_docs: Lee) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("front-ids")
    records = [{**record, "id": i} for i, record in enumerate(jsonl_records(lee_docs))]
    source = write_jsonl(root / "numbers.jsonl", records)
    for where, extra in (("whole", ()), ("sharded", ("--shards", SHARDS))):
        done = run_cli("import", source, "--name", "lee", *extra, "--data-dir", root / where)
        assert done.code == 0, done.err
    (root / "front").mkdir()
    with real_server.whole_and_front(
        root, SHARDS, {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_MAX_BATCH": str(MAX_BATCH)}, {}
    ) as (whole, shards, front):
        yield {"whole": whole, "front": front, "shards": shards}


def both(servers: dict[str, Any], method: str, path: str, body: dict[str, Any] | None = None) -> list[Any]:
    """The front's answer to a request, and the whole table's: status and body."""
    answers = []
    for server in (servers["front"], servers["whole"]):
        url = f"{server.base}/v1/tables/lee/{path}"
        answer = HTTP.request(method, url, json=body, headers=HEADERS, timeout=30)
        answers.append((answer.status_code, answer.json()))
    return answers


def limits_asked(servers: dict[str, Any]) -> list[int]:
    """How many times each shard's server was asked its limits (``GET /v1/limits``, its access log says)."""
    return [shard.log().count('"GET /v1/limits HTTP/1.1" 200') for shard in servers["shards"]]


def padded(number: int) -> str:
    """``number``'s digits with leading zeros that its text's hash sends to another shard than its own."""
    owner = shardmap.shard_of_id(number, SHARDS)
    return next(text for n in range(1, 9) if shardmap.shard_of_id(text := "0" * n + str(number), SHARDS) != owner)


def test_an_integer_id_reaches_its_document_however_it_is_written(servers: dict[str, Any], lee_docs: Lee) -> None:
    front = servers["front"]
    number, vector = 5000, (-lee_docs.vectors[7]).tolist()  # a new document, in a direction no other has
    owner = shardmap.shard_of_id(number, SHARDS)
    text = padded(number)
    write = {"documents": [{"id": text, "text": "a note on wombats", "vector": vector, "fields": {"year": 2001}}]}
    (status, got), (_, expected) = both(servers, "POST", "documents", write)
    assert status == 200 and got["upserted"] == expected["upserted"] == 1, got
    assert [s["shard"] for s in got["shards"]] == [owner], got  # the owner of 5000, not of its padded text
    for ident in (number, str(number), text, f"+{number}"):  # a read by any of its texts finds it
        for body in ({"id": ident, "k": 5}, {"positive": [ident, 3], "negative": [10], "k": 5}):
            (status, got), (_, expected) = search_both(front, servers["whole"], body)
            assert status == 200 and got == expected, (body, got, expected)
            assert number not in [h["id"] for h in got["hits"]], body  # left out of its own answer
    again = {"documents": [{**write["documents"][0], "id": number, "fields": {"year": 2002}}]}
    assert both(servers, "POST", "documents", again)[0][1]["shards"][0]["shard"] == owner  # the same document
    (status, got), (_, expected) = search_both(front, servers["whole"], {"vector": vector, "k": 2, "fields": ["year"]})
    assert status == 200 and got == expected, (got, expected)
    assert [(h["id"], h["fields"]["year"]) for h in got["hits"]][:1] == [(number, 2002)]  # once, replaced
    assert got["hits"][1]["id"] != number
    (status, got), (_, expected) = both(servers, "DELETE", f"documents/{text}")
    assert status == 200 and got["deleted"] == expected["deleted"] == 1, got
    assert [s["shard"] for s in got["shards"]] == [owner]
    (status, got), (_, expected) = search_both(front, servers["whole"], {"id": number, "k": 1})
    assert status == 404 and got == expected and got["error"]["code"] == "unknown_document", got


def test_imported_integer_ids_are_deleted_and_left_out_however_written(servers: dict[str, Any]) -> None:
    imported = [n for n in range(40, 80) if shardmap.shard_of_id(padded(n), SHARDS) != shardmap.shard_of_id(n, SHARDS)]
    first, second = imported[:2]
    (status, got), (_, expected) = search_both(servers["front"], servers["whole"], {"id": padded(first), "k": 8})
    assert status == 200 and got == expected and first not in [h["id"] for h in got["hits"]], got
    (status, got), (_, expected) = both(servers, "POST", "documents/delete", {"ids": [padded(first), f" {second} "]})
    assert status == 200 and got["deleted"] == expected["deleted"] == 2, got
    assert {s["shard"] for s in got["shards"]} == {shardmap.shard_of_id(n, SHARDS) for n in (first, second)}
    for ident in (first, str(second)):
        (status, got), (_, expected) = search_both(servers["front"], servers["whole"], {"id": ident, "k": 3})
        assert status == 404 and got == expected and got["error"]["code"] == "unknown_document", got


def test_the_front_refuses_the_ids_the_table_refuses_as_the_table_does(servers: dict[str, Any], lee_docs: Lee) -> None:
    vector = lee_docs.vectors[0].tolist()
    batches = [
        [{"id": "note-1", "vector": vector}],  # not an integer
        [{"id": "99999999999999999999", "vector": vector}],  # beyond 64 bits
        [{"id": "+-7", "vector": vector}],  # two signs
        [{"id": 6000, "vector": vector}, {"id": "06000", "vector": vector}],  # one id twice
        [{"id": 6001 + i, "vector": vector} for i in range(9)] + [{"id": "x", "vector": vector}],  # spanning shards
    ]
    for documents in batches:
        (status, got), (expected_status, expected) = both(servers, "POST", "documents", {"documents": documents})
        assert status == expected_status == 422 and got == expected, (documents, got, expected)
        assert "shards" not in got["error"], got  # refused before any shard wrote
    for ident in (6001, "+-7", "x"):  # none of those batches was written; no id can be "+-7"
        answers = both(servers, "POST", "search", {"id": ident, "k": 1})
        assert answers[0] == answers[1] and answers[0][0] == 404, answers


def test_unknown_ids_of_a_table_written_to(servers: dict[str, Any], lee_docs: Lee) -> None:
    """A table written to since its version names the first of a query's unknown ids, the front every one (it does
    not know whether another shard was written to); a deleted document is the first refusal, named alike."""
    vector = lee_docs.vectors[3].tolist()
    (status, got), _ = both(servers, "POST", "documents", {"documents": [{"id": 7000, "vector": vector}]})
    assert status == 200 and got["upserted"] == 1, got
    assert {shardmap.shard_of_id(n, SHARDS) for n in (9001, 9002)} != {shardmap.shard_of_id(9001, SHARDS)}
    body = {"positive": [9001, 3, "9002"], "negative": [10], "k": 5}
    (status, got), (expected_status, expected) = search_both(servers["front"], servers["whole"], body)
    assert status == expected_status == 404, (got, expected)
    assert expected["error"] == {
        "code": "unknown_document",
        "message": "no document with id 9001 in table 'lee'",
        "ids": [9001],
        "count": 1,
    }
    assert got["error"] == {
        "code": "unknown_document",
        "message": "no document with id 9001, '9002' in table 'lee'",
        "ids": [9001, "9002"],
        "count": 2,
    }
    (status, got), _ = both(servers, "DELETE", "documents/3")
    assert status == 200 and got["deleted"] == 1, got
    (status, got), (expected_status, expected) = search_both(servers["front"], servers["whole"], body)
    assert status == expected_status == 404 and got == expected, (got, expected)
    assert got["error"]["message"] == "no document with id 9001 in table 'lee'", got
    body = {"positive": [7000, 3, 9001], "k": 5}
    (status, got), (expected_status, expected) = search_both(servers["front"], servers["whole"], body)
    assert status == expected_status == 404 and got == expected, (got, expected)
    assert got["error"]["message"] == "no document with id 3 in table 'lee' (deleted)", got


def test_documents_are_read_by_any_text_of_their_ids(servers: dict[str, Any]) -> None:
    """``GET .../documents/{id}`` and ``POST .../documents/get`` through the front: an id read as the table reads it
    (``"007"`` is 7, asked of 7's owner), written and deleted documents as the table holds them after the writes
    above, ids no integer can be missing as asked: the whole table's answers."""
    number = next(
        n for n in range(20, 60) if shardmap.shard_of_id(padded(n), SHARDS) != shardmap.shard_of_id(n, SHARDS)
    )
    ids = [number, padded(number), f"+{number}", 7000, "3", 5000, "x", "99999999999999999999", -1, number, 12]
    (status, got), (_, expected) = both(servers, "POST", "documents/get", {"ids": ids, "vector": True})
    assert status == 200 and got == expected, (got, expected)
    assert got["missing"] == ["3", 5000, "x", "99999999999999999999", -1]
    assert [d["id"] for d in got["documents"]] == [number, number, number, 7000, number, 12]
    for ident in (padded(number), "7000", "3", "x", "5000"):
        (status, got), (expected_status, expected) = both(servers, "GET", f"documents/{ident}?fields=year")
        assert status == expected_status and got == expected, (ident, got, expected)


def test_the_front_scrolls_integer_ids_by_number_as_the_whole_table(servers: dict[str, Any]) -> None:
    """``POST .../documents/scroll`` through the front after the writes above: the ids merged by number, ``after``
    read as the table reads it (``"007"`` is 7), a page of the shards' lower ``max_batch`` by default (the front's
    ``/v1/limits``, each shard's kept a few seconds, not asked again for every page), a larger one refused as the
    table refuses it: the whole table's answers, page after page."""
    asked = limits_asked(servers)
    pages, after = 0, None
    while True:
        (status, got), (_, expected) = both(servers, "POST", "documents/scroll", {"after": after} if pages else {})
        assert status == 200 and got == expected, (after, got, expected)
        assert len(got["documents"]) == MAX_BATCH or got["next"] is None, got["next"]
        pages += 1
        if (after := got["next"]) is None:
            break
    assert pages == 5, pages  # 300 documents, 7000 written, 3 and 5000 deleted, a page of 64
    again = [now - before for now, before in zip(limits_asked(servers), asked, strict=True)]
    assert again in ([0] * SHARDS, [1] * SHARDS), again  # once at most, not once a page
    for body in (
        {"after": "007", "limit": 5, "fields": ["year"]},
        {"after": " +98", "filter": {"year": {"gte": 2001}}},
    ):
        (status, got), (_, expected) = both(servers, "POST", "documents/scroll", body)
        assert status == 200 and got == expected, (body, got, expected)
    assert [
        d["id"] for d in both(servers, "POST", "documents/scroll", {"after": "007", "limit": 3})[0][1]["documents"]
    ] == [8, 9, 10]
    (status, got), (expected_status, expected) = both(servers, "POST", "documents/scroll", {"limit": MAX_BATCH + 1})
    assert status == expected_status == 422 and got == expected, (got, expected)
