"""Searches see writes at once: a real ``embedding-serve`` with two workers serving gensim's Lee corpus, written to
(new documents, replaced ones, deletes by id and by filter, on fields and on ids), answers vector searches (raw
vectors, batches, more like a written or an imported document, positive/negative, filters on fields and ids,
pages, score floors) exactly as a fresh import of the same final documents through the real builder does: the
same ids, the same cosines.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.cli import run_cli
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.service import real_server
from tests.service.conftest import client_for

KEY = "live-search-writer-key-0123456789"
HEADERS = {"X-API-Key": KEY}


def written(lee: Lee) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]], list[Any]]:
    """The final documents (in the order a fresh import of them has), the upsert batches and the delete bodies."""
    records = {r["id"]: r for r in jsonl_records(lee)}
    rng = np.random.default_rng(7)
    batches: list[list[dict[str, Any]]] = []
    new = []
    for i in range(24):  # new documents: a document's vector nudged, its fields, another year
        source = dict(records[lee.ids[(i * 37) % 300]])
        vector = (lee.vectors[(i * 37) % 300] + rng.normal(0, 0.05, lee.vectors.shape[1])).astype(np.float32)
        new.append({**source, "id": f"new/{i:02d}", "vector": vector.tolist(), "year": 1980 + i % 5})
    replaced = []
    for row in range(0, 60, 6):  # replacements of imported documents: another vector and year
        vector = lee.vectors[(row + 150) % 300]
        replaced.append({**records[lee.ids[row]], "vector": vector.tolist(), "year": 1970})
    batches = [new[:12], replaced, new[12:]]
    deletes: list[Any] = [{"ids": [lee.ids[i] for i in range(100, 130, 2)] + ["new/03", "nowhere"]}]
    deletes.append({"filter": {"and": [{"year": {"lt": 1982}}, {"year": {"gte": 1981}}]}})  # written ones only
    deletes.append({"filter": {"lang": "en", "long": True, "year": 1995}})
    deletes.append(
        {"filter": {"id": {"in": ["lee-290", "lee-104", "nowhere"]}}}
    )  # by id: one deleted before, one never there
    final = dict(records)
    for batch in batches:
        for document in batch:
            final.pop(document["id"], None)  # a replaced document moves to the end
            final[document["id"]] = document
    for ident in deletes[0]["ids"] + deletes[3]["filter"]["id"]["in"]:
        final.pop(ident, None)
    for ident in [k for k, r in final.items() if 1981 <= r["year"] < 1982]:
        del final[ident]
    for ident in [k for k, r in final.items() if r["lang"] == "en" and r["long"] and r["year"] == 1995]:
        del final[ident]
    return list(final.values()), batches, deletes


def as_write(record: dict[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in record.items() if k not in ("id", "text", "vector")}
    return {"id": record["id"], "text": record["text"], "vector": record["vector"], "fields": fields}


@pytest.fixture(scope="module")
def live(lee_data_dir: Path, tmp_path_factory: pytest.TempPathFactory, lee_docs: Lee) -> Iterator[str]:
    data = tmp_path_factory.mktemp("live-data")
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    final, batches, deletes = written(lee_docs)
    log = tmp_path_factory.mktemp("live-serve") / "serve.log"
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    with real_server.running(data, log, "--workers", "2", env=env) as server:
        for batch in batches:
            answer = real_server.HTTP.post(
                f"{server.base}/v1/tables/lee/documents",
                json={"documents": [as_write(r) for r in batch]},
                headers=HEADERS,
            )
            assert answer.status_code == 200, answer.text
        counts = []
        for body in deletes:
            answer = real_server.HTTP.post(f"{server.base}/v1/tables/lee/documents/delete", json=body, headers=HEADERS)
            assert answer.status_code == 200, answer.text
            counts.append(answer.json()["deleted"])
        assert sum(counts) == 300 + 24 - len(final)
        yield server.base


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory, lee_docs: Lee) -> Iterator[TestClient]:
    """The same final documents imported afresh by the builder."""
    data = tmp_path_factory.mktemp("fresh-data")
    final, _, _ = written(lee_docs)
    path = write_jsonl(data.parent / "lee-final.jsonl", final)
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    with client_for(data_dir=data) as client:
        yield client


QUERIES: list[dict[str, Any]] = [
    {"vector": "doc:5", "k": 10},
    {"vector": "doc:40", "k": 7, "filter": {"year": {"gte": 1970, "lt": 1990}}},
    {"vector": "doc:8", "k": 5, "offset": 5},
    {"vector": "doc:9", "k": 30, "min_score": 0.9},
    {"id": "new/07", "k": 8},
    {"id": "lee-012", "k": 8, "filter": {"not": {"lang": "en"}}},
    {"id": "lee-006", "k": 6},  # a replaced document
    {"positive": ["new/02", "lee-200"], "negative": ["lee-030"], "k": 6},
    {"vectors": ["doc:1", "doc:2", "doc:3"], "k": 4, "filter": {"tags": {"in": ["government", "minister"]}}},
    {"queries": [{"id": "new/10"}, {"vector": "doc:77", "offset": 2}], "k": 5},
    {"vector": "doc:5", "k": 10, "fields": ["year"]},
    # among these ids: written (new/01), replaced (lee-006), deleted (new/03, lee-100, new/20) and imported ones
    {
        "vector": "doc:5",
        "k": 10,
        "filter": {"id": {"in": ["new/01", "new/03", "lee-006", "lee-100", "new/20", "lee-7"]}},
    },
    {"vector": "doc:40", "k": 6, "filter": {"or": [{"id": "new/11"}, {"year": 1970, "id": {"ne": "lee-012"}}]}},
]


def resolve(body: dict[str, Any], lee: Lee) -> dict[str, Any]:
    def value(v: Any) -> Any:
        if isinstance(v, str) and v.startswith("doc:"):
            return (lee.vectors[int(v[4:])] * 1.5).tolist()
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return v

    return {k: value(v) for k, v in body.items()}


def hits_of(answer: dict[str, Any]) -> list[list[dict[str, Any]]]:
    if "results" in answer:
        return [result["hits"] for result in answer["results"]]
    return [answer["hits"]]


def ranked(hits: list[dict[str, Any]]) -> list[str]:
    """The ids in answer order, equal scores (the same vector twice: Lee has such documents) by id: exact search
    does not promise an order among them."""
    return [h["id"] for h in sorted(hits, key=lambda h: (-round(h["score"], 6), h["id"]))]


def shown(hits: list[dict[str, Any]]) -> dict[str, Any]:
    return {h["id"]: (h["text"], h["fields"]) for h in hits}


def passing(answer: dict[str, Any]) -> list[int | None]:
    return [result.get("passing") for result in answer.get("results", [answer])]


@pytest.mark.parametrize("body", QUERIES, ids=[str(i) for i in range(len(QUERIES))])
def test_searches_after_writes_equal_a_fresh_import(
    live: str, fresh: TestClient, lee_docs: Lee, body: dict[str, Any]
) -> None:
    request = resolve(body, lee_docs)
    expected = fresh.post("/v1/tables/lee/search", json=request)
    assert expected.status_code == 200, expected.text
    for _ in range(4):  # over new connections: both workers
        got = real_server.HTTP.post(f"{live}/v1/tables/lee/search", json=request, timeout=30)
        assert got.status_code == 200, got.text
        for mine, theirs in zip(hits_of(got.json()), hits_of(expected.json()), strict=True):
            assert ranked(mine) == ranked(theirs)
            assert shown(mine) == shown(theirs)
            np.testing.assert_allclose([h["score"] for h in mine], [h["score"] for h in theirs], rtol=0, atol=1e-6)
        assert passing(got.json()) == passing(expected.json())


def test_a_deleted_document_is_never_an_answer(live: str, lee_docs: Lee) -> None:
    gone = lee_docs.ids[104]
    answer = real_server.HTTP.post(f"{live}/v1/tables/lee/search", json={"id": gone, "k": 3}, timeout=30)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "unknown_document"
    near = real_server.HTTP.post(
        f"{live}/v1/tables/lee/search", json={"vector": lee_docs.vectors[104].tolist(), "k": 300}, timeout=30
    ).json()
    assert gone not in {hit["id"] for hit in near["hits"]}
    keyword = real_server.HTTP.post(
        f"{live}/v1/tables/lee/search", json={"text": lee_docs.texts[104][:200], "mode": "keyword", "k": 50}
    ).json()
    assert keyword["hits"] and gone not in {hit["id"] for hit in keyword["hits"]}


def test_a_written_document_is_found_at_once(live: str, lee_docs: Lee) -> None:
    near = real_server.HTTP.post(
        f"{live}/v1/tables/lee/search", json={"vector": lee_docs.vectors[259].tolist(), "k": 2}, timeout=30
    ).json()
    assert {hit["id"] for hit in near["hits"]} == {"lee-259", "new/07"}


def words(lee: Lee, row: int, count: int = 12) -> str:
    return " ".join(lee.texts[row].split()[:count])


TEXT_QUERIES: list[dict[str, Any]] = [
    {"text": "text:5", "mode": "keyword", "k": 20},
    {"text": "text:104", "mode": "keyword", "k": 50},  # a deleted document's words
    {"text": "text:0", "mode": "keyword", "k": 10},  # a replaced document's words
    {"text": "text:37", "mode": "keyword", "k": 8, "filter": {"year": {"gte": 1970, "lt": 1990}}},
    {"text": "text:74", "mode": "keyword", "k": 5, "offset": 3, "min_score": 4.0},
    {"queries": [{"text": "text:111"}, {"text": "text:148", "offset": 2}, {"text": "fire fire bushfires"}], "k": 6},
    {"vector": "doc:148", "text": "text:148", "mode": "hybrid", "k": 10},
    {"id": "new/02", "text": "text:185", "mode": "hybrid", "k": 8, "rrf_k": 10, "weights": {"keyword": 2}},
    {"vector": "doc:60", "text": "text:60", "mode": "hybrid", "k": 5, "offset": 5, "filter": {"not": {"lang": "en"}}},
    {"vector": "doc:70", "text": "text:70", "mode": "hybrid", "k": 6, "diversity": 0.5},
    {"vector": "doc:259", "k": 6, "diversity": 0.7},
    {"id": "new/12", "k": 5, "diversity": 0.3, "filter": {"year": {"gte": 1970}}},
]


def resolve_text(body: dict[str, Any], lee: Lee) -> dict[str, Any]:
    def text(v: Any) -> Any:
        return words(lee, int(v[5:])) if isinstance(v, str) and v.startswith("text:") else v

    request = resolve(body, lee)
    if "text" in request:
        request["text"] = text(request["text"])
    for item in request.get("queries", []):
        item.update(mode="keyword", text=text(item["text"]))
    return request


@pytest.mark.parametrize("body", TEXT_QUERIES, ids=[str(i) for i in range(len(TEXT_QUERIES))])
def test_keyword_hybrid_and_diverse_searches_after_writes_equal_a_fresh_import(
    live: str, fresh: TestClient, lee_docs: Lee, body: dict[str, Any]
) -> None:
    """BM25 with the live documents' statistics (count, average length, each word's document frequency) and the
    written documents' words: the same hits in the same order, the same scores and ranks as a fresh import."""
    request = resolve_text(body, lee_docs)
    expected = fresh.post("/v1/tables/lee/search", json=request)
    assert expected.status_code == 200, expected.text
    theirs = hits_of(expected.json())
    assert any(h["id"].startswith("new/") for hits in theirs for h in hits) or body.get("filter")
    for _ in range(4):  # over new connections: both workers
        got = real_server.HTTP.post(f"{live}/v1/tables/lee/search", json=request, timeout=30)
        assert got.status_code == 200, got.text
        for mine, reference in zip(hits_of(got.json()), theirs, strict=True):
            assert [h["id"] for h in mine] == [h["id"] for h in reference]
            assert [h.get("ranks") for h in mine] == [h.get("ranks") for h in reference]
            assert shown(mine) == shown(reference)
            if request.get("mode") == "keyword":  # BM25 to the bit
                assert [h["score"] for h in mine] == [h["score"] for h in reference]
            else:
                np.testing.assert_allclose([h["score"] for h in mine], [h["score"] for h in reference], atol=1e-6)
        assert passing(got.json()) == passing(expected.json())


def test_fields_after_writes_equal_a_fresh_import(live: str, fresh: TestClient) -> None:
    """``GET .../fields`` counts written documents and leaves deleted ones out, as a fresh import does."""
    expected = fresh.get("/v1/tables/lee/fields")
    assert expected.status_code == 200, expected.text
    for _ in range(4):  # both workers
        got = real_server.HTTP.get(f"{live}/v1/tables/lee/fields", timeout=30)
        assert got.status_code == 200, got.text
        assert got.json() == expected.json()
    assert got.json()["fields"]["year"]["min"] == 1970  # the replaced documents' year: written, not imported


def test_a_word_only_a_written_document_holds_keeps_mode_hybrid(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Hybrid falls back to vector only when no live document holds a word of the text: a written one counts."""
    word = "quixotically"
    assert not any(word in text.lower() for text in lee_docs.texts)
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        document = as_write({**jsonl_records(lee_docs)[0], "id": "new/word", "text": f"a {word} worded note"})
        url = f"{server.base}/v1/tables/lee"
        written = real_server.HTTP.post(f"{url}/documents", json={"documents": [document]}, headers=HEADERS)
        assert written.status_code == 200, written.text
        body = {"vector": lee_docs.vectors[5].tolist(), "text": word, "mode": "hybrid", "k": 5}
        answer = real_server.HTTP.post(f"{url}/search", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        assert "fallback" not in answer.json(), answer.json()
        assert "new/word" in {hit["id"] for hit in answer.json()["hits"]}


def test_pages_through_equal_scores_of_written_documents_see_each_once(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    """Written documents of one vector tie with the imported one of that vector: pages cut between them show
    each once, in the order one page of all shows them (the imported row, then the writes in write order)."""
    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    vector = lee_docs.vectors[0].tolist()
    others = np.random.default_rng(3).standard_normal((32, len(vector))).tolist()  # far from it
    written = [
        {"id": f"{'tie' if i % 4 == 3 else 'other'}/{i}", "text": "a write", "vector": vector if i % 4 == 3 else row}
        for i, row in enumerate(others)
    ]  # the ties among other writes, so that a partition of the scores may cut them in any order
    ties = [w for w in written if w["id"].startswith("tie/")]
    with client_for(data_dir=tmp_path, write_keys=[KEY], compact_rows=0) as client:
        answer = client.post("/v1/tables/lee/documents", json={"documents": written}, headers=HEADERS)
        assert answer.status_code == 200, answer.text
        whole = [h["id"] for h in client.post("/v1/tables/lee/search", json={"vector": vector, "k": 9}).json()["hits"]]
        pages = [
            h["id"]
            for offset in (0, 3, 6)
            for h in client.post("/v1/tables/lee/search", json={"vector": vector, "k": 3, "offset": offset}).json()[
                "hits"
            ]
        ]
    assert whole == [lee_docs.ids[0], *(t["id"] for t in ties)]
    assert pages == whole


def test_a_write_between_pages_moves_the_later_pages_by_one(lee_data_dir: Path, tmp_path: Path, lee_docs: Lee) -> None:
    """Pages by offset read the table as it is when each is asked (docs/documents.md, ``offset``): a document
    written above the cut between two pages shows the last hit again, one deleted there leaves a hit unshown."""
    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    vector = lee_docs.vectors[0].tolist()

    def page(client: TestClient, offset: int, k: int = 3) -> list[str]:
        body = {"vector": vector, "k": k, "offset": offset, "fields": []}
        answer = client.post("/v1/tables/lee/search", json=body)
        assert answer.status_code == 200, answer.text
        return [hit["id"] for hit in answer.json()["hits"]]

    with client_for(data_dir=tmp_path, write_keys=[KEY], compact_rows=0) as client:
        whole = page(client, 0, 9)
        assert page(client, 0) == whole[:3]
        written = {"documents": [{"id": "new/above", "text": "a write", "vector": vector}]}  # ties lee-000, after it
        assert client.post("/v1/tables/lee/documents", json=written, headers=HEADERS).status_code == 200
        assert page(client, 3) == whole[2:5]  # the first page's last hit again
        deleted = {"ids": [whole[0]]}
        assert client.post("/v1/tables/lee/documents/delete", json=deleted, headers=HEADERS).status_code == 200
        assert page(client, 6) == whole[6:9]  # whole[5] never shown


def test_written_copies_follow_their_imported_rows_on_an_hnsw_table(
    lee_docs: Lee, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """On a table searched by its graph, a row found scores as the exact search scores it, to the bit: a written
    copy of an imported document ties with it and comes after it, as on an exact table."""
    source = write_jsonl(tmp_path_factory.mktemp("hnsw-lee") / "lee.jsonl", jsonl_records(lee_docs))
    spec = "hnsw:M=8,efSearch=16"
    done = run_cli("import", source, "--name", "lee", "--index", spec, "--min-recall", "0.5", "--data-dir", tmp_path)
    assert done.code == 0, done.err
    rows = range(0, 300, 10)
    copies = [{"id": f"copy/{i}", "text": "a write", "vector": lee_docs.vectors[i].tolist()} for i in rows]
    with client_for(data_dir=tmp_path, write_keys=[KEY], compact_rows=0) as client:
        assert client.post("/v1/tables/lee/documents", json={"documents": copies}, headers=HEADERS).status_code == 200
        for i in rows:
            query = (lee_docs.vectors[i] + 0.3 * lee_docs.vectors[i + 1]).tolist()  # near row i, equal to no row
            found, exact = (
                client.post("/v1/tables/lee/search", json={"vector": query, "k": 6, "exact": e, "fields": []}).json()
                for e in (False, True)
            )
            scores = {hit["id"]: hit["score"] for hit in found["hits"]}
            ids = list(scores)
            tied = [ident for ident in ids if scores[ident] == scores[lee_docs.ids[i]]]  # Lee has duplicates
            assert {lee_docs.ids[i], f"copy/{i}"} <= set(tied), (i, scores)
            assert tied == sorted(tied, key=lambda ident: ident.startswith("copy/")), (i, scores)  # imported first
            assert all(scores.get(hit["id"], hit["score"]) == hit["score"] for hit in exact["hits"]), (i, found, exact)
