"""Documents read by id and a page at a time are bounded by ``EMBEDDING_MAX_ANSWER_BYTES`` as a search's hits are,
on real servers of a small bound: gensim's Lee corpus served whole and as shards behind a real front, documents of
long text written to both. A ``documents/get`` (or ``GET .../documents/{id}``) over the bound is refused; a page of
``documents/scroll`` is cut short before the document that would pass it (``next`` the last one kept), its listing
complete all the same, through the front too; a page's first document alone over it is refused.

What a document carries is measured as the server does (``service.respond.row_bytes``): its text's and its string
fields' UTF-8 bytes (here ``lang``; a written document's text only), 12 bytes a value of its vector when asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service_client import ApiError, AsyncClient, Client
from tests.lee import Lee
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy

KEY = "bounded-writer-" + "k" * 24
HEADERS = {"X-API-Key": KEY}
BOUND = 20_000  # about 16 of Lee's documents, 12 with their vectors
MAX_BATCH = 64
DIM = 50
WRITTEN = ["aaa", "lee-0505", "lee-1005", "lee-2995", "zzz"]  # among the version's ids, first and last too

Record = dict[str, Any]


@pytest.fixture(scope="module")
def servers(lee_imports: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("answer-bytes")
    lee_copy(lee_imports, "plain", "whole", root / "whole")
    lee_copy(lee_imports, "plain", "sharded", root / "sharded")
    (root / "front").mkdir()
    env = {
        "EMBEDDING_WRITE_KEYS": KEY,
        "EMBEDDING_MAX_BATCH": str(MAX_BATCH),
        "EMBEDDING_MAX_ANSWER_BYTES": str(BOUND),
    }
    with real_server.whole_and_front(root, LEE_SHARDS, env, {}) as (whole, shards, front):
        yield {"whole": whole, "shards": shards, "front": front}


def post(server: real_server.Server, path: str, body: Record) -> httpx.Response:
    return real_server.HTTP.post(f"{server.base}/v1/tables/lee/{path}", json=body, headers=HEADERS, timeout=30)


def write_long(server: real_server.Server, lee_docs: Lee) -> None:
    """The documents of :data:`WRITTEN`, each of about 5,000 bytes of text (fewer than one page's bound)."""
    documents = [
        {
            "id": ident,
            "text": (lee_docs.texts[i] + " ") * (5000 // len(lee_docs.texts[i]) + 1),
            "fields": {"year": 2000},
        }
        | {"vector": lee_docs.vectors[i].tolist()}
        for i, ident in enumerate(WRITTEN)
    ]
    answer = post(server, "documents", {"documents": documents})
    assert answer.status_code == 200, answer.text


def carried(document: Record, vector: bool) -> int:
    """The bytes the server counts for a document shown: its text, its string field ``lang``, its vector."""
    lang = document["fields"].get("lang") or ""
    return len(document["text"].encode()) + len(lang.encode()) + (DIM * 12 if vector else 0)


def pages(server: real_server.Server, body: Record) -> list[list[Record]]:
    """Every page of a scroll from its start, each checked: within the bound, cut only where the next page's first
    document would pass it (or at ``limit``), ``next`` its last id while more follow."""
    out: list[list[Record]] = []
    after = None
    while True:
        answer = post(server, "documents/scroll", body | ({} if after is None else {"after": after}))
        assert answer.status_code == 200, answer.text[:300]
        page = answer.json()
        documents = page["documents"]
        assert sum(carried(d, body.get("vector", False)) for d in documents) <= BOUND, after
        if out and len(out[-1]) < MAX_BATCH:  # the last page was cut: this one's first would have passed the bound
            held = sum(carried(d, body.get("vector", False)) for d in out[-1])
            assert held + carried(documents[0], body.get("vector", False)) > BOUND, after
        out.append(documents)
        if page["next"] is None:
            return out
        assert page["next"] == documents[-1]["id"]
        after = page["next"]


def listed(found: list[list[Record]]) -> list[str]:
    return [d["id"] for page in found for d in page]


def error(answer: httpx.Response) -> tuple[int, str, str]:
    body = answer.json()["error"]
    return answer.status_code, body["code"], body["message"]


def test_documents_read_by_id_over_the_bound_are_refused(servers: dict[str, Any], lee_docs: Lee) -> None:
    """``documents/get`` of more documents than the bound holds is a 422 saying what to ask instead; of as many
    as it holds without their vectors, an answer, with them a 422; ``GET .../documents/{id}`` of one written
    document over the bound alone, a 422 (its text measured by its length)."""
    whole = servers["whole"]
    status, code, message = error(post(whole, "documents/get", {"ids": lee_docs.ids[:40]}))
    assert (status, code) == (422, "invalid_request"), message
    assert post(whole, "documents/get", {"ids": lee_docs.ids[:40]}).json()["error"]["limit"] == "max_answer_bytes"
    assert "max_answer_bytes of 20,000 bytes" in message and "ask fewer ids, fewer fields or no vector" in message
    sizes = [carried({"text": lee_docs.texts[i], "fields": lee_docs.record(i)}, False) for i in range(300)]
    fits = next(n for n in range(1, 300) if sum(sizes[:n]) + n * DIM * 12 > BOUND)  # fits without vectors only
    assert sum(sizes[:fits]) <= BOUND
    answer = post(whole, "documents/get", {"ids": lee_docs.ids[:fits]})
    assert answer.status_code == 200 and len(answer.json()["documents"]) == fits, answer.text[:300]
    status, code, message = error(post(whole, "documents/get", {"ids": lee_docs.ids[:fits], "vector": True}))
    assert status == 422 and "document text and vectors" in message, message
    huge = {"id": "lee-1505", "text": "wombat " * 3000, "vector": lee_docs.vectors[0].tolist()}
    assert post(whole, "documents", {"documents": [huge]}).status_code == 200
    try:
        got = real_server.HTTP.get(f"{whole.base}/v1/tables/lee/documents/lee-1505?fields=year", timeout=30)
        assert error(got)[:2] == (422, "invalid_request") and "21,000 bytes" in error(got)[2], got.text
        assert real_server.HTTP.get(f"{whole.base}/v1/tables/lee/documents/lee-150?vector=true").status_code == 200
        status, _, message = error(post(whole, "documents/scroll", {"after": "lee-150", "fields": []}))
        assert status == 422 and "the document 'lee-1505'" in message, message  # a page's first, alone over it
        page = post(whole, "documents/scroll", {"after": "lee-148"}).json()  # cut before it
        assert [d["id"] for d in page["documents"]] == ["lee-149", "lee-150"] and page["next"] == "lee-150", page
    finally:
        assert post(whole, "documents/delete", {"ids": ["lee-1505"]}).status_code == 200


def test_pages_are_cut_by_bytes_and_list_every_document(servers: dict[str, Any], lee_docs: Lee) -> None:
    """Pages of the whole table, with written documents of long text among the version's: each cut where the
    next document would pass the bound (with vectors, sooner), and every live document listed once, in order."""
    whole = servers["whole"]
    write_long(whole, lee_docs)
    every = sorted([*lee_docs.ids, *WRITTEN])
    plain = pages(whole, {})
    assert listed(plain) == every and len(plain) > len(every) / MAX_BATCH + 1
    with_vectors = pages(whole, {"vector": True, "normalized": True})
    assert listed(with_vectors) == every and len(with_vectors) > len(plain)
    recent = [i for i, year in enumerate(lee_docs.fields["year"]) if year >= 1995]
    expected = sorted([*(lee_docs.ids[i] for i in recent), *WRITTEN])
    assert listed(pages(whole, {"filter": {"year": {"gte": 1995}}, "vector": True, "fields": ["year"]})) == expected


def test_the_front_merges_pages_cut_short_without_skipping(servers: dict[str, Any], lee_docs: Lee) -> None:
    """Through the front of three shards, each cutting its own pages by bytes: the merged page keeps the documents
    up to the lowest ``next`` of the shards', so the listing is the whole table's, every document once, in order."""
    write_long(servers["front"], lee_docs)
    write_long(servers["whole"], lee_docs)
    for body in ({}, {"vector": True}, {"filter": {"year": {"gte": 1995}}, "fields": ["lang"]}):
        whole = listed(pages(servers["whole"], body))
        through = []
        after = None
        while True:
            answer = post(servers["front"], "documents/scroll", body | ({} if after is None else {"after": after}))
            assert answer.status_code == 200, answer.text[:300]
            page = answer.json()
            assert sum(carried(d, body.get("vector", False)) for d in page["documents"]) <= BOUND, after
            through += [d["id"] for d in page["documents"]]
            if (after := page["next"]) is None:
                break
            assert after == page["documents"][-1]["id"]
        assert through == whole, body


def test_the_front_refuses_documents_its_shards_carry_past_the_bound_together(
    servers: dict[str, Any], lee_docs: Lee
) -> None:
    """``documents/get`` of 40 documents through the front of three shards, each shard's part within the bound, all
    of them past it: refused as the whole table refuses them, the same error; 12 of them answered as the whole's."""
    body = {"ids": lee_docs.ids[:40]}
    refused = post(servers["front"], "documents/get", body)
    assert (refused.status_code, refused.json()) == (422, post(servers["whole"], "documents/get", body).json())
    answer = post(servers["front"], "documents/get", {"ids": lee_docs.ids[:12]})
    assert answer.json() == post(servers["whole"], "documents/get", {"ids": lee_docs.ids[:12]}).json()


def test_the_clients_read_more_documents_than_one_answer_holds(servers: dict[str, Any], lee_docs: Lee) -> None:
    """``Client.documents`` / ``AsyncClient.documents`` of 60 documents with their vectors (about 5 answers' worth):
    each run refused for ``max_answer_bytes`` is read again in halves, so every document comes back, in the order
    asked, as one request at a time gives it (a missing id too); a document alone over the bound is raised."""
    whole = servers["whole"]
    ids = [*lee_docs.ids[100:130], "no-such-id", *lee_docs.ids[130:160]]
    alone = [post(whole, "documents/get", {"ids": [i], "vector": True}).json() for i in ids]
    expected = {
        "documents": [d for answer in alone for d in answer["documents"]],
        "missing": ["no-such-id"],
    }
    with Client(whole.base) as client:
        assert client.documents("lee", ids, vector=True) == expected

    async def read() -> dict[str, Any]:
        async with AsyncClient(whole.base) as client:
            return await client.documents("lee", ids, vector=True)

    assert asyncio.run(read()) == expected
    huge = {"id": "lee-1506", "text": "wombat " * 3000, "vector": lee_docs.vectors[0].tolist()}
    assert post(whole, "documents", {"documents": [huge]}).status_code == 200
    try:
        with Client(whole.base) as client, pytest.raises(ApiError) as refused:
            client.documents("lee", ["lee-1505", "lee-1506", "lee-1507"])
        assert refused.value.limit == "max_answer_bytes" and "the document 'lee-1506'" in str(refused.value)
    finally:
        assert post(whole, "documents/delete", {"ids": ["lee-1506"]}).status_code == 200
