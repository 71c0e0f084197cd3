"""Writes to a sharded table over HTTP, on loopback: three real shard servers and a real front
(``EMBEDDING_SHARDS``) over gensim's Lee corpus imported as 3 shards, one real server of the same sharded table
served whole, and one of the table imported whole, every server taking writes.

The same writes (new documents, replaced ones, deletes by id, by filter and one by one) go through the front and
into the whole table's server: the front forwards each document to the shard that owns its id (the import's
hash), with the write key, and says what each shard did. The shard servers and the server of the sharded table
served whole share the shards' logs, so both see every write: the one-process server then answers every search
form as the whole table's server does, the front answers vector searches as the whole table does, and keyword,
hybrid and diverse searches as the one-process server (the whole table's live BM25 statistics, gathered from the
shards first: ``index.engine.dfs``). A write
to the one-process server is seen by a search through the front. The front's summary is the one-process server's
(its writes summed and each shard's), and LangChain's and LlamaIndex's stores, which read it, work through the front
as on the whole table's server. Refusals (no key, a wrong key, a bad document in a
batch spanning shards) come back as the shard's error envelope; a writer that cannot be reached: 503; a shard URL
naming a table its server does not have: 503 on every route.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.store import shardmap, writelog
from tests.lee import Lee
from tests.logs import recovered
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.real_server import HTTP, Server
from tests.service.scraped import shard_failures
from tests.service.test_live_search import as_write
from tests.service.test_shard_writes import history
from tests.service.test_shards_front import bodies, search_both

SHARDS = 3
KEY = "shard-writer-key-0123456789"
HEADERS = {"x-api-key": KEY}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, lee_imports: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("front-writes")
    assert SHARDS == LEE_SHARDS
    for where in ("whole", "sharded"):  # with the copies the front's search bodies ask for (equal scores)
        lee_copy(lee_imports, "copies", where, root / where)
    (root / "front").mkdir()
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    started: list[Server] = []
    try:
        # The whole table, the shards and the one-process server first; then the fronts, which need the shards' URLs.
        started += real_server.start_together(
            lambda: real_server.start(root / "whole", root / "whole.log", env=env),
            *real_server.shard_starts(root / "sharded" / "lee", root, SHARDS, env),
            lambda: real_server.start(root / "sharded", root / "one.log", env=env),
        )
        whole, *shards, one = started
        replicas = real_server.replicas(shards)
        front_env = {"EMBEDDING_SHARDS": json.dumps({"lee": replicas})}
        down = f"http://127.0.0.1:{real_server.free_port()}/v1/tables/{shardmap.shard_name(2)}"  # nothing listens
        broken_env = {"EMBEDDING_SHARDS": json.dumps({"lee": [*replicas[:2], [down, replicas[2][0]]]})}
        # shard 1's URL naming a table its server does not have: alone for "lee", beside the right one for "lee-2"
        astray = replicas[1][0].replace(shardmap.shard_name(1), shardmap.shard_name(9))
        tables = {
            "lee": [replicas[0], [astray], replicas[2]],
            "lee-2": [replicas[0], [astray, *replicas[1]], replicas[2]],
        }
        astray_env = {"EMBEDDING_SHARDS": json.dumps(tables), **env}
        started += real_server.start_together(
            lambda: real_server.start(root / "front", root / "front.log", env=front_env),
            lambda: real_server.start(root / "front", root / "broken.log", env=broken_env),
            lambda: real_server.start(root / "front", root / "astray.log", env=astray_env),
        )
        front, broken, astray_front = started[-3:]
        yield {
            "root": root,
            "whole": whole,
            "front": front,
            "broken": broken,
            "astray": astray_front,
            "one": one,
            "shards": shards,
        }
    finally:
        real_server.stop_together(started)


def post(server: Server, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    return HTTP.post(f"{server.base}/v1/tables/lee/{path}", json=body, headers=HEADERS if headers is None else headers)


@pytest.fixture(scope="module")
def written(servers: dict[str, Any], lee_docs: Lee) -> dict[str, Any]:
    """The same writes through the front and into the whole table's server, answered alike."""
    front, whole = servers["front"], servers["whole"]
    batches, deletes = history(lee_docs)
    for batch in batches:
        body = {"documents": [as_write(r) for r in batch]}
        got, expected = post(front, "documents", body), post(whole, "documents", body)
        assert got.status_code == expected.status_code == 200, got.text
        answer = got.json()
        assert answer["table"] == "lee" and answer["upserted"] == expected.json()["upserted"] == len(batch)
        assert len(answer["shards"]) > 1 and sum(s["upserted"] for s in answer["shards"]) == len(batch)
        assert answer["sequence"] == max(s["sequence"] for s in answer["shards"])
    for body in deletes:
        got, expected = post(front, "documents/delete", body), post(whole, "documents/delete", body)
        assert got.status_code == 200 and got.json()["deleted"] == expected.json()["deleted"] > 0, got.text
    one = HTTP.delete(f"{front.base}/v1/tables/lee/documents/lee-201", headers=HEADERS)
    assert one.status_code == 200 and one.json()["deleted"] == 1, one.text
    owner = shardmap.shard_of_id("lee-201", SHARDS)
    assert [s["shard"] for s in one.json()["shards"]] == [owner]
    assert HTTP.delete(f"{whole.base}/v1/tables/lee/documents/lee-201", headers=HEADERS).json()["deleted"] == 1
    return servers


def test_each_write_is_in_its_owners_log(written: dict[str, Any]) -> None:
    logs = written["root"] / "sharded" / writelog.DIRECTORY / "lee"
    for s in range(SHARDS):
        records = recovered(logs / f"{shardmap.shard_name(s)}.log")
        ids = [d["id"] for r in records for d in r.body.get("documents", ())]
        ids += [i for r in records for i in r.body.get("ids", ())]
        assert ids and {shardmap.shard_of_id(i, SHARDS) for i in ids} == {s}


def search(server: Server, body: dict[str, Any], table: str = "lee") -> tuple[int, dict[str, Any]]:
    answer = HTTP.post(f"{server.base}/v1/tables/{table}/search", json=body, timeout=30)
    return answer.status_code, answer.json()


def test_one_process_answers_as_the_whole_table_with_the_same_writes(written: dict[str, Any], lee_docs: Lee) -> None:
    """Every form, hits with their text and fields; two documents of one vector at one score may swap (equal
    scores go by row in the merge, in FAISS's order in the whole table)."""
    vectors = {d: v for d, v in zip(lee_docs.ids, lee_docs.unit(), strict=True)}
    more: list[dict[str, Any]] = [
        {"id": "new/07", "k": 10},
        {"id": "lee-006", "k": 8, "filter": {"lang": "en"}},
        {"positive": ["new/02", "lee-010"], "negative": ["lee-030"], "k": 10},
        {"vector": lee_docs.vectors[40].tolist(), "k": 8, "diversity": 0.4},
        {"text": "police", "mode": "keyword", "k": 20, "fields": ["year"]},
        {"vector": lee_docs.vectors[41].tolist(), "text": "fire", "mode": "hybrid", "k": 8, "diversity": 0.2},
    ]
    answered = 0
    for body in [*bodies(lee_docs), *more]:
        (status, got), (expected_status, expected) = search_both(written["one"], written["whole"], body)
        assert status == expected_status, (body, got)
        if status != 200:  # a query by a document the writes deleted: the same refusal
            assert got == expected and got["error"]["code"] == "unknown_document", (body, got)
            continue
        answered += 1
        assert got.keys() == expected.keys() and len(got["hits"]) == len(expected["hits"]), body
        for mine, theirs in zip(got["hits"], expected["hits"], strict=True):
            if mine["id"] != theirs["id"]:
                assert mine["score"] == theirs["score"], body
                assert np.array_equal(vectors[mine["id"]], vectors[theirs["id"]]), body
            else:
                assert mine == theirs, body
    assert answered >= len(more), answered
    for ident in ("new/07", "lee-006", "lee-201"):
        url = f"/v1/tables/lee/documents/{ident}"
        got, expected = HTTP.get(written["one"].base + url), HTTP.get(written["whole"].base + url)
        assert got.status_code == expected.status_code and got.json() == expected.json(), ident
    # many at once: written, replaced and deleted documents as the whole table answers them, and as GET does
    ids = [f"new/{i:02d}" for i in range(24)] + [f"lee-{i:03d}" for i in (*range(0, 60, 3), *range(100, 132), 201)]
    body = {"ids": [*ids, "nowhere"], "vector": True}
    got, expected = post(written["one"], "documents/get", body, {}), post(written["whole"], "documents/get", body, {})
    assert got.status_code == 200 and got.json() == expected.json(), got.text
    for after in ("lee-010", "lee-150"):  # a scroll's pages: written and deleted documents merged as the whole
        page = {"limit": 40, "after": after, "filter": {"year": {"gte": 1995}}}
        one, whole = (
            post(written["one"], "documents/scroll", page, {}),
            post(written["whole"], "documents/scroll", page, {}),
        )
        assert one.status_code == 200 and one.json() == whole.json() and len(one.json()["documents"]) == 40
    each = [HTTP.get(f"{written['one'].base}/v1/tables/lee/documents/{i}?vector=true") for i in body["ids"]]
    assert got.json() == {
        "documents": [answer.json() for answer in each if answer.status_code == 200],
        "missing": [i for i, answer in zip(body["ids"], each, strict=True) if answer.status_code == 404],
    }
    assert len(got.json()["missing"]) > 5 and len(got.json()["documents"]) > 50  # deleted ones and found ones
    summary = HTTP.get(f"{written['one'].base}/v1/tables/lee").json()["writes"]
    assert summary["written"] == HTTP.get(f"{written['whole'].base}/v1/tables/lee").json()["writes"]["written"]
    assert [s["sequence"] for s in summary["shards"]] == [
        len(recovered(written["root"] / "sharded" / ".writes" / "lee" / f"{shardmap.shard_name(s)}.log"))
        for s in range(SHARDS)
    ]


def without_ties(server: Server, body: dict[str, Any]) -> bool:
    """Whether the whole table's list for ``body``, from its top to one past the page, holds no two equal scores:
    among written documents the front orders those by shard, the whole table by write."""
    deep = {**body, "k": body.get("offset", 0) + body["k"] + 1, "offset": 0}
    status, answer = search(server, deep)
    assert status == 200, answer
    return all(len({h["score"] for h in item["hits"]}) == len(item["hits"]) for item in answer.get("results", [answer]))


def test_the_front_answers_vector_searches_as_the_whole_table_with_the_same_writes(
    written: dict[str, Any], lee_docs: Lee
) -> None:
    """Vector searches exactly (where no two scores tie); keyword, hybrid and diverse searches are compared with one
    process serving the sharded table whole (the next test): the unsharded table orders equal scores otherwise."""
    exact = 0
    more = [{"vector": lee_docs.vectors[i].tolist(), "k": 12, "filter": {"year": {"gte": 1970}}} for i in (0, 60, 90)]
    more += [{"vector": lee_docs.vectors[i].tolist(), "k": 9, "offset": 2} for i in (30, 120, 210)]
    for body in [*bodies(lee_docs), *more]:
        (status, got), (expected_status, expected) = search_both(written["front"], written["whole"], body)
        assert status == expected_status, (body, got)
        if status != 200:  # a query by a document the writes deleted: refused on both
            assert got["error"]["code"] == expected["error"]["code"] == "unknown_document", (body, got)
        elif body.get("mode", "vector") != "vector" or "diversity" in body:
            assert got["hits"], body
        elif without_ties(written["whole"], body):
            assert got == expected, body
            exact += 1
        else:
            assert [h["score"] for h in got["hits"]] == [h["score"] for h in expected["hits"]], body
    assert exact >= 3, exact


def same_hits(got: dict[str, Any], expected: dict[str, Any], body: dict[str, Any]) -> None:
    """The same hits, but two at one score may swap (the front numbers written documents as it meets them), and a
    cosine (mode vector) may be one unit in float32's last place apart: the one process scores every shard's
    written documents as one matrix, a shard its own, and a matrix product rounds a row by its place."""
    assert got.keys() == expected.keys() and len(got["hits"]) == len(expected["hits"]), (body, got, expected)
    cosine = body.get("mode", "vector") == "vector"
    for mine, theirs in zip(got["hits"], expected["hits"], strict=True):
        if cosine:
            assert mine["score"] == pytest.approx(theirs["score"], rel=0, abs=1.2e-7), (body, mine, theirs)
            mine, theirs = {**mine, "score": 0}, {**theirs, "score": 0}
        if mine["id"] != theirs["id"]:
            assert mine["score"] == theirs["score"], (body, got["hits"], expected["hits"])
            continue
        assert mine == theirs, body
    assert {h["id"] for h in got["hits"]} == {h["id"] for h in expected["hits"]} or got["hits"][-1]["score"] == (
        expected["hits"][-1]["score"]
    ), body


def test_the_front_answers_keyword_hybrid_and_diverse_searches_as_one_process_with_the_same_writes(
    written: dict[str, Any], lee_docs: Lee
) -> None:
    """BM25 with the whole table's statistics after writes: the front gathers each shard's part for the query's
    words and every shard scores with their sums, as one process serving the table whole scores."""
    more: list[dict[str, Any]] = [
        {"text": "police note07", "mode": "keyword", "k": 20},
        {"text": "fire police", "mode": "keyword", "k": 15, "offset": 5, "filter": {"year": {"gte": 1970}}},
        {"vector": lee_docs.vectors[41].tolist(), "text": "fire", "mode": "hybrid", "k": 8, "diversity": 0.2},
        {"id": "new/07", "text": "police", "mode": "hybrid", "k": 10},
        {"vector": lee_docs.vectors[3].tolist(), "k": 10, "diversity": 0.5},
        {"text": "fire", "mode": "keyword", "k": 10, "min_score": 1.0},
    ]
    compared = 0
    for body in [*bodies(lee_docs), *more]:
        if body.get("mode", "vector") == "vector" and "diversity" not in body:
            continue
        (status, got), (expected_status, expected) = search_both(written["front"], written["one"], body)
        assert status == expected_status, (body, got)
        if status != 200:
            assert got["error"]["code"] == expected["error"]["code"] == "unknown_document", (body, got)
            continue
        assert got["hits"], body
        same_hits(got, expected, body)
        compared += 1
    assert compared >= 20, compared
    # Mode hybrid's fallback to the vector alone decided on the live documents: a written word keeps it hybrid
    for text, falls_back in (("note07", False), ("zzqxv", True)):
        body = {"vector": lee_docs.vectors[3].tolist(), "text": text, "mode": "hybrid", "k": 5}
        (status, got), (expected_status, expected) = search_both(written["front"], written["one"], body)
        assert status == expected_status == 200 and ("fallback" in got) == falls_back, (body, got)
        assert got.get("fallback") == expected.get("fallback"), (body, got)
        same_hits(got, expected, body)
    body = {"text": "police note07", "mode": "keyword", "k": 20}  # shard 2's statistics from its second replica
    for _ in range(2):
        assert search(written["broken"], body) == search(written["front"], body), body


def test_a_shard_scores_with_the_statistics_it_is_sent_and_refuses_impossible_ones(written: dict[str, Any]) -> None:
    shard = written["shards"][0]
    url = f"{shard.base}/v1/tables/{shardmap.shard_name(0)}"
    gathered = HTTP.post(f"{url}/search/statistics", json={"texts": ["police fire"]})
    assert gathered.status_code == 200, gathered.text
    part = gathered.json()
    assert part["written"] and set(part["terms"]) == {"polic", "fire"}
    body = {"text": "police fire", "mode": "keyword", "k": 5}
    own = HTTP.post(f"{url}/search", json=body).json()["hits"]
    whole = {"documents": [3 * n for n in part["documents"]], "words": [3 * w for w in part["words"]]}
    whole["terms"] = {word: [3 * v, 3 * live] for word, (v, live) in part["terms"].items()}
    scored = HTTP.post(f"{url}/search", json={**body, "keyword_statistics": whole})
    assert scored.status_code == 200, scored.text
    assert [h["score"] for h in scored.json()["hits"]] != [h["score"] for h in own]
    impossible = [
        {**whole, "documents": [1, 1]},  # fewer documents than the shard holds
        {**whole, "terms": {"polic": [0, 0], "fire": [0, 0]}},  # fewer holding a word than on the shard
        {**whole, "terms": {"polic": whole["terms"]["polic"]}},  # a word of the query missing
        {**whole, "terms": {"fire": [10**9, 10**9], "polic": [1, 1]}},  # more holding it than documents
        {**whole, "documents": [-1, 5]},
        {**whole, "extra": 1},
    ]
    for statistics in impossible:
        refused = HTTP.post(f"{url}/search", json={**body, "keyword_statistics": statistics})
        assert refused.status_code == 422, (statistics, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "invalid_request" and "keyword_statistics" in error["message"], refused.text
    assert HTTP.post(f"{url}/search/statistics", json={"texts": []}).status_code == 422


def test_the_front_reads_documents_as_the_whole_table_with_the_same_writes(
    written: dict[str, Any], lee_docs: Lee
) -> None:
    """Documents by id through the front after the same writes: written, replaced and deleted ones as the whole
    table holds them, one by one and many at once; a document written through the front is read back at once
    (the front keeps no answer of its shards' documents)."""
    front, whole = written["front"], written["whole"]
    batches, deletes = history(lee_docs)
    ids = [*dict.fromkeys([*(r["id"] for batch in batches for r in batch), *deletes[0]["ids"], "lee-201"])]
    ids += lee_docs.ids[::7]
    for options in ({"vector": True}, {"vector": True, "normalized": True, "fields": ["year"]}):
        got, expected = (post(server, "documents/get", {"ids": ids, **options}) for server in (front, whole))
        assert got.status_code == 200 and got.content == expected.content, options
        assert len(got.json()["missing"]) > 10 and len(got.json()["documents"]) > 50
    note = {
        "id": "new/05",
        "text": "a note read back",
        "vector": (-lee_docs.vectors[20]).tolist(),
        "fields": {"year": 1},
    }
    for step in range(2):  # read before and after its write
        for ident in ("new/05", "new%2F03", "lee-201", lee_docs.ids[0], lee_docs.ids[1]):
            got, expected = (HTTP.get(f"{s.base}/v1/tables/lee/documents/{ident}?vector=true") for s in (front, whole))
            assert (got.status_code, got.content) == (expected.status_code, expected.content), (step, ident)
        if step == 0:
            for server in (front, whole):
                assert post(server, "documents", {"documents": [note]}).status_code == 200
    assert HTTP.get(f"{front.base}/v1/tables/lee/documents/new%2F05").json()["text"] == "a note read back"
    gone = HTTP.get(f"{front.base}/v1/tables/lee/documents/lee-201").json()["error"]
    assert gone["code"] == "unknown_document" and gone["message"].endswith("(deleted)"), gone
    for ident in ("%2E", "%2E%2E"):  # "." and "..": ids sent to their shard, not steps up its URL
        got, expected = (
            HTTP.delete(f"{s.base}/v1/tables/lee/documents/{ident}", headers=HEADERS) for s in (front, whole)
        )
        assert got.status_code == expected.status_code == 200 and got.json()["deleted"] == 0, got.text


def test_a_write_to_one_process_is_seen_through_the_front(written: dict[str, Any], lee_docs: Lee) -> None:
    vector = (-lee_docs.vectors[3]).tolist()  # a direction no document has
    document = {"id": "seen/1", "text": "a note on kangaroos", "vector": vector, "fields": {"year": 2001}}
    answer = post(written["one"], "documents", {"documents": [document]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["shards"][0]["shard"] == shardmap.shard_of_id("seen/1", SHARDS)
    status, got = search(written["front"], {"vector": vector, "k": 1})
    assert status == 200 and got["hits"][0]["id"] == "seen/1" and got["hits"][0]["score"] == pytest.approx(1.0)
    status, got = search(written["front"], {"text": "kangaroos", "mode": "keyword", "k": 3})
    assert status == 200 and [h["id"] for h in got["hits"]] == ["seen/1"], got
    gone = HTTP.delete(f"{written['front'].base}/v1/tables/lee/documents/seen%2F1", headers=HEADERS)
    assert gone.status_code == 200 and gone.json()["deleted"] == 1, gone.text
    status, got = search(written["one"], {"text": "kangaroos", "mode": "keyword", "k": 3})
    assert status == 200 and got["hits"] == []


def test_refusals_come_back_as_the_shards_envelope(written: dict[str, Any], lee_docs: Lee) -> None:
    front = written["front"]
    vector = lee_docs.vectors[0].tolist()
    body = {"documents": [{"id": "key/1", "vector": vector}]}
    assert post(front, "documents", body, {}).status_code == 401
    refused = post(front, "documents", body, {"x-api-key": "wrong"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    ids = [f"mixed/{i}" for i in range(12)]
    by_shard = {shardmap.shard_of_id(i, SHARDS) for i in ids}
    assert len(by_shard) == SHARDS
    bad = 7
    documents: list[dict[str, Any]] = [{"id": i, "vector": vector} for i in ids]
    documents[bad]["fields"] = {"nope": 1}
    answer = post(front, "documents", {"documents": documents})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["message"].startswith(f"documents[{bad}] (id 'mixed/{bad}'): the table has no field 'nope'")
    outcomes = {s["shard"]: s for s in error["shards"]}
    owner = shardmap.shard_of_id(ids[bad], SHARDS)
    assert set(outcomes) == by_shard and "error" in outcomes[owner]
    assert all("sequence" in outcomes[s] for s in by_shard - {owner})  # the other shards wrote their part
    assert post(front, "documents", {"documents": [{"id": 5}]}).status_code == 422  # checked by the front too
    answer = post(front, "documents", {"documents": [{"id": 5, "vector": vector}]})  # the owner's refusal
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["message"] == "documents[0] (id 5): the ids of table 'lee' are strings"


def test_a_delete_by_a_filter_every_shard_refuses_is_the_tables_refusal(servers: dict[str, Any]) -> None:
    """A delete by a filter the table cannot read is sent to every shard, and each refuses it alike: the front's
    answer is the whole table's, not the same refusal repeated once per shard in ``shards``."""
    for spec in ({"nope": 1}, {}, {"year": {"gte": "x"}}, {"year": {"gt": 2**64}}):  # past what orjson writes
        got, expected = (post(servers[s], "documents/delete", {"filter": spec}) for s in ("front", "whole"))
        assert got.status_code == expected.status_code == 422 and got.json() == expected.json(), (got.text, spec)


def test_a_field_past_64_bits_is_the_owners_refusal(servers: dict[str, Any], lee_docs: Lee) -> None:
    """An upsert holding an integer past 64 bits reaches its shard as sent (orjson, which writes the front's
    bodies, cannot write it: a 500), and is refused as the whole table refuses it."""
    body = {"documents": [{"id": "big/1", "vector": lee_docs.vectors[0].tolist(), "fields": {"year": 2**64}}]}
    got, expected = (post(servers[s], "documents", body) for s in ("front", "whole"))
    assert got.status_code == expected.status_code == 422, got.text
    assert got.json()["error"]["message"] == expected.json()["error"]["message"], got.text


def test_a_shard_served_alone_refuses_the_ids_another_shard_owns(servers: dict[str, Any], lee_docs: Lee) -> None:
    """A write sent to a shard's own server rather than through the front: an id another shard owns is refused
    whole, naming its owner, and the shard's log is left as it was."""
    shard = servers["shards"][0]
    url = f"{shard.base}/v1/tables/{shardmap.shard_name(0)}/documents"
    log = servers["root"] / "sharded" / writelog.DIRECTORY / "lee" / f"{shardmap.shard_name(0)}.log"
    before = log.stat().st_size if log.exists() else 0
    ids = [f"stray/{i}" for i in range(12)]
    foreign = [i for i in ids if shardmap.shard_of_id(i, SHARDS) != 0]
    mine = next(i for i in ids if shardmap.shard_of_id(i, SHARDS) == 0)
    owner = shardmap.shard_name(shardmap.shard_of_id(foreign[0], SHARDS))
    vector = lee_docs.vectors[0].tolist()
    documents = [{"id": i, "vector": vector} for i in [mine, *foreign]]
    refusals = [
        HTTP.post(url, json={"documents": documents}, headers=HEADERS),
        HTTP.post(f"{url}/delete", json={"ids": [mine, *foreign]}, headers=HEADERS),
        HTTP.delete(f"{url}/{foreign[0].replace('/', '%2F')}", headers=HEADERS),
    ]
    names = [f"documents[1] (id {foreign[0]!r})", f"id {foreign[0]!r}", f"id {foreign[0]!r}"]
    for refused, named in zip(refusals, names, strict=True):
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "invalid_request", error
        assert error["message"].startswith(f"{named}: {owner} owns this id"), error
        assert f"shard 0 of the {SHARDS} of table 'lee'" in error["message"], error
    assert f"(and {len(foreign) - 1} more of this request's ids)" in refusals[0].json()["error"]["message"]
    assert (log.stat().st_size if log.exists() else 0) == before


def test_an_unreachable_writer_is_a_503(written: dict[str, Any], lee_docs: Lee) -> None:
    ident = next(f"far/{i}" for i in range(100) if shardmap.shard_of_id(f"far/{i}", SHARDS) == 2)
    body = {"documents": [{"id": ident, "vector": lee_docs.vectors[0].tolist()}]}
    failed = shard_failures(written["broken"].base).get(("lee", "2"), 0.0)
    answer = post(written["broken"], "documents", body)
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "shard_unavailable" and error["shard"] == 2 and "cannot be reached" in error["message"]
    assert shard_failures(written["broken"].base).get(("lee", "2")) == failed + 1  # the operator's view of it
    said = "WARNING service.scatter: table 'lee', shard 2: http://127.0.0.1:"
    assert any(said in line and "ConnectError" in line for line in written["broken"].log().splitlines())
    near = next(f"far/{i}" for i in range(100) if shardmap.shard_of_id(f"far/{i}", SHARDS) == 0)
    answer = post(written["broken"], "documents/delete", {"ids": [near]})
    assert answer.status_code == 200 and answer.json()["deleted"] == 0, answer.text


def test_a_shard_url_naming_no_table_fails_every_route_as_a_shard_that_does_not_answer(
    servers: dict[str, Any], lee_docs: Lee
) -> None:
    """A shard URL naming a table its server does not have is the deployment's fault, not the request's (as a
    shard refusing the front's key): the summary, a search, a query by a document of that shard, the reads and a
    write of one are 503 ``shard_unavailable`` naming the shard and saying why, not the shard's 404 (nothing is
    written); the list of tables names the table unavailable. Beside a replica that names the shard's table, it is
    a replica that failed: the other one answers."""
    front, base = servers["astray"], f"{servers['astray'].base}/v1/tables/lee"
    owned = next(ident for ident in lee_docs.ids if shardmap.shard_of_id(ident, SHARDS) == 1)
    vector = lee_docs.vectors[3].tolist()
    answers = [
        HTTP.get(base),
        HTTP.post(f"{base}/search", json={"vector": vector, "k": 3}),
        HTTP.post(f"{base}/search", json={"id": owned, "k": 3}),
        HTTP.get(f"{base}/documents/{owned}"),
        HTTP.post(f"{base}/documents/get", json={"ids": [owned]}),
        HTTP.post(f"{base}/documents/scroll", json={"limit": 5}),
        HTTP.post(f"{base}/documents", json={"documents": [{"id": owned, "vector": vector}]}, headers=HEADERS),
    ]
    errors = [answer.json()["error"] for answer in answers]
    got = [
        (answer.status_code, error["code"], error.get("shard")) for answer, error in zip(answers, errors, strict=True)
    ]
    assert got == [(503, "shard_unavailable", 1)] * len(answers), errors
    assert all("its server has no such table" in error["message"] for error in errors), errors
    body = {"vector": vector, "k": 5}
    for _ in range(2):  # the replicas taken in turn: the one naming no table, then the other
        assert search(front, body, "lee-2") == search(servers["front"], body), body
    listed = HTTP.get(f"{front.base}/v1/tables").json()
    assert [t["name"] for t in listed["tables"]] == ["lee-2"] and listed["unavailable"] == ["lee"], listed


def test_a_writer_listed_out_of_place_writes_nothing(servers: dict[str, Any], lee_docs: Lee) -> None:
    """A front listing shards 0 and 1 in each other's place, or two of the three shards (as a front left with the
    shards of an import into two), would send a write to a shard that does not own its id: 503
    ``shard_unavailable`` saying which shard the writer serves, and no shard's log grows."""
    replicas = real_server.replicas(servers["shards"])
    listings = {
        "swapped": ([replicas[1], replicas[0], replicas[2]], "shard 1 of the 3 of table 'lee', not shard 0 of 3"),
        "two": (replicas[:2], "shard 0 of the 3 of table 'lee', not shard 0 of 2"),
    }
    root = servers["root"]
    logs = root / "sharded" / writelog.DIRECTORY / "lee"
    sizes = {log: log.stat().st_size for log in logs.glob("*.log")}
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    fronts = real_server.start_together(
        *(
            lambda listing=listing, name=name: real_server.start(
                root / "front", root / f"{name}.log", env={"EMBEDDING_SHARDS": json.dumps({"lee": listing}), **env}
            )
            for name, (listing, _) in listings.items()
        )
    )
    try:
        vector = lee_docs.vectors[3].tolist()
        for front, (listing, said) in zip(fronts, listings.values(), strict=True):
            ident = next(f"placed/{i}" for i in range(100) if shardmap.shard_of_id(f"placed/{i}", len(listing)) == 0)
            answer = HTTP.post(
                f"{front.base}/v1/tables/lee/documents",
                json={"documents": [{"id": ident, "vector": vector}]},
                headers=HEADERS,
            )
            error = answer.json()["error"]
            assert answer.status_code == 503 and error["code"] == "shard_unavailable" and error["shard"] == 0, error
            assert f"its server serves {said}" in error["message"], error
    finally:
        real_server.stop_together(fronts)
    assert {log: log.stat().st_size for log in logs.glob("*.log")} == sizes


def test_a_string_id_is_its_text(written: dict[str, Any], lee_docs: Lee) -> None:
    """On a string-id table ``"007"`` and ``"7"`` are two documents, each routed by its own text (an integer 7 finds
    ``"7"``, as the table reads it): written, found, left out of their own answers and deleted through the front as
    in the whole table."""
    front, whole = written["front"], written["whole"]
    notes = {"007": 11, "7": 12}
    documents = [
        {"id": ident, "text": f"a note filed as {ident}", "vector": (-lee_docs.vectors[i]).tolist()}
        for ident, i in notes.items()
    ]
    got, expected = (
        post(front, "documents", {"documents": documents}),
        post(whole, "documents", {"documents": documents}),
    )
    assert got.status_code == expected.status_code == 200 and got.json()["upserted"] == 2, got.text
    owners = {shardmap.shard_of_id(ident, SHARDS) for ident in notes}
    assert {s["shard"] for s in got.json()["shards"]} == owners and sum(
        s["upserted"] for s in got.json()["shards"]
    ) == 2
    for ident, i in notes.items():
        status, hits = search(front, {"vector": (-lee_docs.vectors[i]).tolist(), "k": 1})
        assert status == 200 and [h["id"] for h in hits["hits"]] == [ident], hits
    for body in ({"id": "007", "k": 6}, {"id": "7", "k": 6}, {"id": 7, "k": 6}, {"positive": ["007", 7], "k": 6}):
        (status, got_hits), (_, expected_hits) = search_both(front, whole, body)
        assert status == 200, got_hits
        same_hits(got_hits, expected_hits, body)  # a written document's cosine may be a float32 unit apart
        assert not {h["id"] for h in got_hits["hits"]} & {str(i) for i in [body.get("id"), *body.get("positive", ())]}
    gone = HTTP.delete(f"{front.base}/v1/tables/lee/documents/007", headers=HEADERS)
    assert gone.status_code == 200 and gone.json()["deleted"] == 1, gone.text
    assert [s["shard"] for s in gone.json()["shards"]] == [shardmap.shard_of_id("007", SHARDS)]
    assert HTTP.delete(f"{whole.base}/v1/tables/lee/documents/007", headers=HEADERS).json()["deleted"] == 1
    for body in ({"id": "007", "k": 3}, {"id": 7, "k": 3}):  # "7" stays
        (status, got_hits), (expected_status, expected_hits) = search_both(front, whole, body)
        assert status == expected_status and got_hits == expected_hits, (body, got_hits, expected_hits)
    assert search(front, {"id": "007", "k": 3})[0] == 404 and search(front, {"id": "7", "k": 3})[0] == 200
    for server in (front, whole):
        assert post(server, "documents/delete", {"ids": [7]}).json()["deleted"] == 1


def summaries(servers: dict[str, Any], *names: str) -> list[Any]:
    return [HTTP.get(f"{servers[name].base}/v1/tables/lee").json() for name in names]


def test_the_fronts_summary_is_the_one_process_servers_with_the_same_writes(written: dict[str, Any]) -> None:
    """The summary (rows, fields, shards, writes summed and each shard's) and the list of tables, through the front,
    through a front retrying a replica that is down, and from the one-process server of the same shards: the same,
    after the writes and after one more."""
    front, broken, one = summaries(written, "front", "broken", "one")
    assert front == broken == one and one["shards"]["count"] == SHARDS, (front, one)
    assert one["writes"]["written"] > 0 and len(one["writes"]["shards"]) == SHARDS, one
    listed = [HTTP.get(f"{written[name].base}/v1/tables").json() for name in ("front", "one")]
    assert listed[0] == listed[1] == {"tables": [one], "unavailable": []}, listed
    document = {"id": "summary/1", "vector": [1.0] * 50, "fields": {"year": 2001}}
    assert post(written["front"], "documents", {"documents": [document]}).status_code == 200
    front, one = summaries(written, "front", "one")
    assert front == one and one["writes"]["written"] == listed[1]["tables"][0]["writes"]["written"] + 1, (front, one)
    assert post(written["front"], "documents/delete", {"ids": ["summary/1"]}).json()["deleted"] == 1


def fields_of(servers: dict[str, Any], *names: str) -> list[bytes]:
    return [HTTP.get(f"{servers[name].base}/v1/tables/lee/fields").content for name in names]


def test_the_fronts_fields_are_the_one_process_servers_with_the_same_writes(
    written: dict[str, Any], lee_docs: Lee
) -> None:
    """``GET .../fields`` through the front: the answer of the one-process server of the same shards and logs, byte
    for byte, after the module's writes and deletes, and after documents written and deleted through the front
    that move a field's extremes (two timestamps in one second on two shards: ``.5Z`` is the later; one before the
    year 1000, its year in four digits) and its values. Every shard lists some of its tags only (the front asks for
    all of them) and all of its languages."""
    shard_fields = [
        HTTP.get(f"{s.base}/v1/tables/{shardmap.shard_name(i)}/fields").json() for i, s in enumerate(written["shards"])
    ]
    assert all(len(part["fields"]["tags"]["values"]) < part["fields"]["tags"]["distinct"] for part in shard_fields)
    assert all(len(part["fields"]["lang"]["values"]) == part["fields"]["lang"]["distinct"] for part in shard_fields)
    front, one = fields_of(written, "front", "one")
    assert front == one, (front, one)
    ids = ["fields/a", *(f"fields/{n}" for n in range(1, 40))]
    second = next(i for i in ids[1:] if shardmap.shard_of_id(i, SHARDS) != shardmap.shard_of_id(ids[0], SHARDS))
    oldest = next(i for i in ids[1:] if i != second)
    documents = [
        {"id": ident, "vector": lee_docs.vectors[i].tolist(), "fields": fields}
        for i, (ident, fields) in enumerate(
            [
                (ids[0], {"published": "2009-01-01T00:00:00Z", "tags": ["zebra"], "known": -1.5, "long": False}),
                (second, {"published": "2009-01-01T00:00:00.5Z", "tags": ["zebra", "yak"], "lang": "xx"}),
                (oldest, {"published": "0999-06-01T00:00:00Z"}),
            ]
        )
    ]
    assert post(written["front"], "documents", {"documents": documents}).status_code == 200
    front, one = fields_of(written, "front", "one")
    assert front == one, (front, one)
    fields = json.loads(front)["fields"]
    assert fields["published"]["max"] == "2009-01-01T00:00:00.5Z" and fields["known"]["min"] == -1.5, fields
    assert fields["published"]["min"] == "0999-06-01T00:00:00Z", fields["published"]
    assert {"value": "xx", "count": 1} in fields["lang"]["values"], fields["lang"]
    kept = HTTP.get(f"{written['front'].base}/v1/tables/lee/documents/{oldest}").json()
    assert kept["fields"]["published"] == "0999-06-01T00:00:00Z", kept
    before = {"vector": lee_docs.vectors[0].tolist(), "k": 2, "filter": {"published": {"lt": "1000-01-01T00:00:00Z"}}}
    status, found = search(written["front"], before)
    assert status == 200 and [hit["id"] for hit in found["hits"]] == [oldest], found
    assert post(written["front"], "documents/delete", {"ids": [ids[0], second, oldest]}).json()["deleted"] == 3
    front, one = fields_of(written, "front", "one")
    assert front == one and b'"zebra"' not in front, (front, one)


def test_the_documents_card_works_through_the_front(written: dict[str, Any], tmp_path: Path) -> None:
    """The explorer's Search card of the front: its filter controls (built from the front's fields), its first
    document (the whole table's first row, ``GET .../ids/0``) and its hits are those the one-process server's page
    shows, with no error."""
    from tests.service.browser import Watched, launched, save_screenshot

    shown = []
    with launched() as browser:
        for name in ("front", "one"):
            watched = Watched(browser)
            page = watched.page
            page.goto(f"{written[name].base}/?table=lee")
            page.wait_for_selector("#ds-out:not([aria-busy]) .ds-hits li")
            shown.append([page.inner_text(part) for part in ("#ds-controls", "#ds-out")])
            shown[-1].append(page.input_value("#ds-id"))
            if name == "front":
                save_screenshot(page, "explorer-front", tmp_path)
            watched.assert_clean()
            watched.close()
    assert shown[0] == shown[1], shown
    controls, hits, first = shown[0]
    assert first == "lee-000" and hits.startswith("More like lee-000"), hits
    tags = json.loads(fields_of(written, "front")[0])["fields"]["tags"]
    assert f"{tags['values'][0]['value']}\n{tags['values'][0]['count']}" in controls, controls
    assert f"the 50 most common of {tags['distinct']} are listed" in controls, controls


def test_the_stores_work_through_the_front_as_on_the_whole_table(written: dict[str, Any]) -> None:
    """LangChain's store (``add_texts`` with its embedding: the table has no encoder, ``similarity_search`` with a
    filter) and LlamaIndex's (``add``, ``query`` and ``get_nodes`` with filters) read the table's summary: through
    the front they answer as on the whole table's server."""
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters, VectorStoreQuery

    from service_client import Client
    from service_client.langchain import EmbeddingSearchStore
    from service_client.llamaindex import EmbeddingSearchVectorStore

    embedding = DeterministicFakeEmbedding(size=50)
    texts = [f"a note on {topic}" for topic in ("bushfires", "cricket", "the harbour", "rain", "the budget", "ferries")]
    chain_ids = [f"chain/{i}" for i in range(len(texts))]
    node_ids = [f"node/{i}" for i in range(len(texts))]
    later = MetadataFilters(filters=[MetadataFilter(key="year", value=2041)])

    def use(server: Server) -> list[Any]:
        with Client(server.base, api_key=KEY) as client:
            chain = EmbeddingSearchStore(client, "lee", embedding=embedding)
            added = chain.add_texts(
                texts, [{"year": 2030 + i % 2, "lang": "en"} for i in range(len(texts))], ids=chain_ids
            )
            found = chain.similarity_search_with_score(texts[3], k=4, filter={"year": 2031})
            llama = EmbeddingSearchVectorStore(client, "lee")
            nodes = [
                TextNode(id_=ident, text=text, metadata={"year": 2040 + i % 2}, embedding=embedding.embed_query(text))
                for i, (ident, text) in enumerate(zip(node_ids, texts, strict=True))
            ]
            stored = llama.add(nodes)
            result = llama.query(
                VectorStoreQuery(query_embedding=embedding.embed_query(texts[1]), similarity_top_k=3, filters=later)
            )
            got = llama.get_nodes(node_ids=node_ids, filters=later)
            chain.delete(chain_ids)
            llama.delete_nodes(node_ids)
            scores = [score for _, score in found] + list(result.similarities or ())
            return [
                added,
                [(d.id, d.page_content, d.metadata) for d, _ in found],
                stored,
                result.ids,
                [(n.node_id, n.get_content(), n.metadata) for n in got],
                scores,
            ]

    through_front, on_whole = use(written["front"]), use(written["whole"])
    assert through_front[:-1] == on_whole[:-1]
    np.testing.assert_allclose(through_front[-1], on_whole[-1], rtol=0, atol=1e-6)  # a float32 unit apart at most
    assert len(through_front[1]) == 3 and len(through_front[3]) == 3 and len(through_front[4]) == 3, through_front


def test_the_front_scrolls_as_one_process_with_writes_between_pages(written: dict[str, Any], lee_docs: Lee) -> None:
    """``POST .../documents/scroll`` through the front, page after page to the last, with documents written,
    replaced and deleted through it ahead of and behind the cursor between pages (ids with "/" and past ASCII,
    merged in code-point order): the pages of the one-process server of the same shards and logs."""
    front, one = written["front"], written["one"]
    vector = lee_docs.vectors[30].tolist()
    between = [
        {
            "documents": [
                {"id": i, "text": "between pages", "vector": vector} for i in ("lee-0005/x", "lee-2\u00e9", "zz")
            ]
        },
        {
            "documents": [
                {"id": "lee-250", "text": "replaced ahead", "vector": vector},
                {"id": "lee-\U0001f600", "vector": vector},
                {"id": "lee-\uff01", "vector": vector},
            ]
        },
    ]
    pages, after = 0, None
    while True:
        body = {"limit": 23, "fields": ["year"]} | ({} if after is None else {"after": after})
        got, expected = (post(server, "documents/scroll", body, {}) for server in (front, one))
        assert got.status_code == 200 and got.content == expected.content, (body, got.text)
        if pages < len(between):
            assert post(front, "documents", between[pages]).status_code == 200
            assert post(front, "documents/delete", {"ids": [lee_docs.ids[20 * pages + 40]]}).status_code == 200
        pages += 1
        if (after := got.json()["next"]) is None:
            break
    assert pages > 10 and got.json()["documents"][-1]["id"] == "zz", got.json()
