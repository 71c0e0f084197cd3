"""``GET /v1/limits`` and the clients that size their requests by it: a real server started with limits far below
the defaults (``max_batch`` 50, ``max_k`` 50, a 32 KiB body limit) answers ``Client.documents`` of Lee's 300
documents, LangChain's ``get_by_ids``, LlamaIndex's ``get_nodes`` and writes of all 300 as a server with the
default limits does, where the clients' default sizes (1,024 ids, 256 documents, 2 MiB, pages of 100) are each a
422 or a 413; a refusal of a request over any published limit names it (``"limit"`` in its error), and no other
refusal does; a front reads its shard's limits again when the shard refuses a request for one."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from service.schemas.bounds import MAX_DIM, MAX_EMBED_CHARS, MAX_TEXT_CHARS, MAX_TOKEN_CHARS
from service.schemas.limits import ServerLimits
from service.settings import Settings
from service_client import AsyncClient, Client
from service_client.langchain import EmbeddingSearchStore
from service_client.llamaindex import EmbeddingSearchVectorStore
from tests.cli import run_cli
from tests.conftest import link_table
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.minilm import ST
from tests.service import real_server

KEY = "limits-writer-key-0123456789abcdef"
SMALL = {"EMBEDDING_MAX_BATCH": "50", "EMBEDDING_MAX_K": "50", "EMBEDDING_MAX_BODY_BYTES": str(32 * 1024)}
FIXED = {
    "max_token_chars": MAX_TOKEN_CHARS,
    "max_text_chars": MAX_TEXT_CHARS,
    "max_embed_chars": MAX_EMBED_CHARS,
    "max_dim": MAX_DIM,
}


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory, lee_docs: Lee) -> Path:
    """A data directory of ``notes``: Lee's 300 stories, each with its metadata as the LangChain and LlamaIndex
    stores keep it (read-only: copied by the servers that serve it)."""
    root = tmp_path_factory.mktemp("notes")
    records = [{**r, "metadata": json.dumps({"row": i})} for i, r in enumerate(jsonl_records(lee_docs))]
    source = write_jsonl(root / "notes.jsonl", records)
    made = run_cli("import", source, "--format", "documents", "--name", "notes", "--data-dir", root / "data")
    assert made.code == 0, made.err
    return root / "data"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, notes: Path) -> Iterator[tuple[str, str]]:
    """The base URLs of two servers of ``notes``: one with the default limits, one with ``SMALL``'s (and a write
    key)."""
    root = tmp_path_factory.mktemp("limits")
    shutil.copytree(notes, root / "default")
    shutil.copytree(notes, root / "small")
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    started = real_server.start_together(
        lambda: real_server.start(root / "default", root / "default.log", env=env),
        lambda: real_server.start(root / "small", root / "small.log", env={**env, **SMALL}),
    )
    try:
        yield started[0].base, started[1].base
    finally:
        real_server.stop_together(started)


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory, servers: tuple[str, str]) -> Iterator[str]:
    """The base URL of a front, with the default limits, of ``notes`` as one shard: the small server's table."""
    root = tmp_path_factory.mktemp("front")
    (root / "data").mkdir()
    env = {"EMBEDDING_SHARDS": json.dumps({"notes": [[f"{servers[1]}/v1/tables/notes"]]})}
    server = real_server.start(root / "data", root / "front.log", env=env)
    try:
        yield server.base
    finally:
        real_server.stop_together([server])


@pytest.fixture(scope="module")
def ids(lee_docs: Lee) -> list[str]:
    return [str(ident) for ident in lee_docs.ids]


def expected_limits(**settings: Any) -> dict[str, Any]:
    """What ``GET /v1/limits`` answers for a server of ``settings``: each limit its setting's value, and the fixed."""
    given = Settings(data_dir=Path("."), **settings)
    return {name: FIXED.get(name, getattr(given, name, None)) for name in ServerLimits.model_fields}


def test_the_limits_are_the_servers_settings(servers: tuple[str, str]) -> None:
    default, small = servers
    assert httpx.get(f"{default}/v1/limits").json() == expected_limits()
    answered = httpx.get(f"{small}/v1/limits").json()
    assert answered == expected_limits(max_batch=50, max_k=50, max_body_bytes=32 * 1024)
    with Client(small) as client:
        assert client.limits() == answered

    async def read() -> dict[str, Any]:
        async with AsyncClient(small) as client:
            return await client.limits()

    assert asyncio.run(read()) == answered


def test_documents_are_read_in_the_servers_batches(servers: tuple[str, str], ids: list[str]) -> None:
    """300 ids (and one missing), read in requests of 50 by each client: as the default server answers them."""
    default, small = servers
    asked = [*ids, "nowhere"]
    with Client(default) as client:
        expected = client.documents("notes", asked, vector=True)
    assert len(expected["documents"]) == 300 and expected["missing"] == ["nowhere"]
    sent: list[str] = []
    hooks = {"request": [lambda request: sent.append(request.url.path)]}
    with httpx.Client(base_url=small, event_hooks=hooks) as http:
        client = Client(small, http=http)
        assert client.documents("notes", asked, vector=True) == expected
        assert client.documents("notes", ids[:3], vector=True)["documents"] == expected["documents"][:3]
    assert sent == ["/v1/limits"] + ["/v1/tables/notes/documents/get"] * 8  # the limits read once

    async def read() -> dict[str, Any]:
        async with AsyncClient(small) as client:
            return await client.documents("notes", asked, vector=True)

    assert asyncio.run(read()) == expected


def test_the_stores_read_by_id_and_list_in_the_servers_batches(servers: tuple[str, str], ids: list[str]) -> None:
    """LangChain's ``get_by_ids`` and LlamaIndex's ``get_nodes`` of the 300 ids, and LlamaIndex's listing of every
    node (pages of 50, as the small server's max_k is), answer as the default server's."""
    answers = []
    for url in servers:
        langchain = EmbeddingSearchStore(Client(url), "notes")
        llamaindex = EmbeddingSearchVectorStore(Client(url), "notes")
        listed = sorted((node.node_id, node.get_content()) for node in llamaindex.get_nodes())
        answers.append((langchain.get_by_ids(ids), llamaindex.get_nodes(ids), listed))
    assert len(answers[0][0]) == len(answers[0][1]) == len(answers[0][2]) == 300
    assert answers[1] == answers[0]
    assert [document.metadata for document in answers[1][0][:2]] == [{"row": 0}, {"row": 1}]


def test_many_documents_are_written_in_the_servers_batches(servers: tuple[str, str], ids: list[str]) -> None:
    """Lee's 300 documents deleted and written again, by id, on the small server: 300 ids are 6 requests of 50 and
    the documents (about 1 MB of JSON) requests of at most 50 documents and 16 KiB; the documents read back are the
    default server's."""
    default, small = servers
    with Client(default) as client:
        expected = client.documents("notes", ids, vector=True)["documents"]
    with Client(small, api_key=KEY) as client:
        deleted = client.delete_many("notes", ids)
        assert [answer["deleted"] for answer in deleted] == [50] * 6
        assert client.documents("notes", ids)["missing"] == ids
        written = client.upsert_many("notes", expected)
        assert sum(answer["upserted"] for answer in written) == 300 and len(written) > 300 * 1000 // (16 * 1024)
        found = client.documents("notes", ids, vector=True)["documents"]
    assert [without_vector(d) for d in found] == [without_vector(d) for d in expected]
    # as written: the vectors a write stores may differ from the import's in the last float32 bit (one of 300 does)
    assert np.allclose([d["vector"] for d in found], [d["vector"] for d in expected], rtol=0, atol=1e-7)


def without_vector(document: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in document.items() if key != "vector"}


def test_a_fronts_limits_are_its_shards_where_lower(servers: tuple[str, str], front: str, ids: list[str]) -> None:
    """A front forwards what it takes to its shards: its limits are theirs where lower, so a client that sizes its
    requests by them reads the 300 ids through the front (in requests of 50) as from the shard's own server."""
    small = servers[1]
    assert httpx.get(f"{front}/v1/limits").json() == httpx.get(f"{small}/v1/limits").json()
    asked = [*ids, "nowhere"]
    with Client(small) as client:
        expected = client.documents("notes", asked, vector=True)
    with Client(front) as client:
        assert client.documents("notes", asked, vector=True) == expected
    # more than its shard takes: the shard's refusal, naming the limit, is the front's answer
    refused = real_server.HTTP.post(f"{front}/v1/tables/notes/documents/get", json={"ids": ids[:51]})
    assert refused.status_code == 422 and refused.json()["error"]["limit"] == "max_batch", refused.text


# A server whose every settable limit is low enough for one small request to exceed it (the fixed ones are the same
# everywhere), and per published limit one request over it, the status and code its refusal has always had.
TIGHT = {
    "EMBEDDING_MAX_K": "20",
    "EMBEDDING_MAX_BATCH": "8",
    "EMBEDDING_MAX_HITS": "30",
    "EMBEDDING_MAX_FILTER_CONDITIONS": "2",
    "EMBEDDING_MAX_WORDS": "4",
    "EMBEDDING_MAX_LAYOUT_WORK": "10",
    "EMBEDDING_MAX_ENCODE_TOKENS": "32",
    "EMBEDDING_MAX_SCORED_ROWS": "10",
    "EMBEDDING_MAX_EXACT_ROWS": "20000",
    "EMBEDDING_MAX_ANSWER_BYTES": "1000",
    "EMBEDDING_MAX_BODY_BYTES": "300000",
    "EMBEDDING_MAX_HEADER_BYTES": "2048",
}
INVALID = (422, "invalid_request")
OVER: dict[str, tuple[str, str, dict[str, Any], tuple[int, str]]] = {
    "max_k": ("small/neighbors", "GET", {"params": {"token": "the", "k": 21}}, INVALID),  # a query string's
    "max_batch": ("lee/documents/get", "POST", {"json": {"ids": [f"lee-{i:03}" for i in range(9)]}}, INVALID),
    "max_hits": ("small/neighbors", "POST", {"json": {"queries": ["the", "of"], "k": 20}}, INVALID),
    "max_filter_conditions": (
        "lee/documents/scroll",
        "POST",
        {"json": {"filter": {"and": [{"words": {"gte": 1}}, {"words": {"lte": 900}}]}}},
        INVALID,
    ),
    "max_words": ("small/doesnt-match", "POST", {"json": {"queries": [["the", "of", "and"], ["a", "to"]]}}, INVALID),
    "max_layout_work": (
        "small/project",
        "POST",
        {"json": {"tokens": ["the", "of", "and", "to"], "method": "tsne", "perplexity": 3}},
        INVALID,
    ),
    "max_encode_tokens": (f"{ST}/embed", "POST", {"json": {"texts": ["the river " * 20]}}, INVALID),
    "max_scored_rows": (
        "small/analogy",
        "POST",
        {"json": {"queries": [{"a": "man", "b": "king", "c": "woman"}] * 2, "method": "3cosmul", "k": 3}},
        INVALID,
    ),
    "max_exact_rows": ("small/search", "POST", {"json": {"vectors": [[0.5] * 50] * 2, "k": 3}}, INVALID),
    "max_answer_bytes": ("lee/search", "POST", {"json": {"id": "lee-001", "k": 10}}, INVALID),
    "max_body_bytes": (
        "small/neighbors",
        "POST",
        {"json": {"token": "the", "pad": "x" * 300_000}},
        (413, "body_too_large"),
    ),
    "max_header_bytes": ("small", "GET", {"headers": {"x-pad": "x" * 2048}}, (431, "headers_too_large")),
    "max_token_chars": ("small/neighbors", "POST", {"json": {"token": "x" * (MAX_TOKEN_CHARS + 1)}}, INVALID),
    "max_text_chars": ("lee/search", "POST", {"json": {"text": "x" * (MAX_TEXT_CHARS + 1), "k": 1}}, INVALID),
    "max_embed_chars": ("small/embed", "POST", {"json": {"texts": ["x" * (MAX_EMBED_CHARS + 1)]}}, INVALID),
    "max_dim": ("lee/search", "POST", {"json": {"vector": [0.5] * (MAX_DIM + 1), "k": 1}}, INVALID),
}


@pytest.fixture(scope="module")
def tight(
    tmp_path_factory: pytest.TempPathFactory, lee_data_dir: Path, small_data_dir: Path, minilm_st_dir: Path
) -> Iterator[str]:
    """The base URL of a server of ``TIGHT``'s limits over ``lee``, ``small`` and the transformer table."""
    data = tmp_path_factory.mktemp("tight") / "data"
    data.mkdir()
    for table in (lee_data_dir / "lee", small_data_dir / "small", minilm_st_dir / ST):
        assert link_table(table, data)
    with real_server.running(data, data.parent / "serve.log", env=TIGHT) as server:
        yield server.base


@pytest.mark.parametrize("name", ServerLimits.model_fields)
def test_every_refusal_of_a_limit_names_it(tight: str, name: str) -> None:
    """A request over each published limit (a new limit without one here fails) is refused as ever, its envelope
    naming the limit as ``GET /v1/limits`` does; in OpenAI's shape, not (its fields are OpenAI's only)."""
    path, method, request, (status, code) = OVER[name]
    response = real_server.HTTP.request(method, f"{tight}/v1/tables/{path}", **request)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text
    assert response.json()["error"]["limit"] == name, response.text


def test_a_long_list_that_is_no_vector_is_not_refused_as_one(tight: str) -> None:
    """Positive lists of max_dim + 1 words or ids hold no vector's values: the words are over max_words, named so,
    and the ids are looked up as any (none of Lee's), never refused as a vector over max_dim."""
    for path, item, want in (("small/neighbors", "a", (422, "max_words")), ("lee/search", "x", (404, None))):
        body = json.dumps({"positive": [item] * (MAX_DIM + 1), "k": 1}, separators=(",", ":"))
        response = real_server.HTTP.post(
            f"{tight}/v1/tables/{path}", content=body, headers={"content-type": "application/json"}
        )
        assert (response.status_code, response.json()["error"].get("limit")) == want, response.text[:300]


def test_a_long_list_of_fields_is_no_token(tight: str, lee_docs: Lee) -> None:
    """``GET .../documents/{id}?fields=`` of more than max_token_chars characters names fields, none of them a token
    that long: the document (Lee's shortest, within max_answer_bytes) is answered with them, not refused as a token
    over max_token_chars."""
    fields = ",".join(["year"] * (MAX_TOKEN_CHARS // 4))  # 1,279 characters
    shortest = lee_docs.ids[min(range(len(lee_docs.ids)), key=lambda i: len(lee_docs.texts[i]))]
    response = real_server.HTTP.get(f"{tight}/v1/tables/lee/documents/{shortest}", params={"fields": fields})
    assert response.status_code == 200 and response.json()["fields"].keys() == {"year"}, response.text[:300]


def test_openais_refusals_name_no_limit(tight: str) -> None:
    response = real_server.HTTP.post(f"{tight}/v1/embeddings", json={"model": "small", "input": ["the"] * 9})
    assert response.status_code == 400 and response.json()["error"].keys() == {"message", "type", "param", "code"}


# The limits of a server started again on its port: lower each time, below what a client read before.
PHASES = (
    {"EMBEDDING_MAX_BATCH": "100", "EMBEDDING_MAX_BODY_BYTES": str(64 * 1024)},
    {"EMBEDDING_MAX_BATCH": "100", "EMBEDDING_MAX_BODY_BYTES": str(16 * 1024)},  # writes of 32 KiB refused
    {"EMBEDDING_MAX_BATCH": "20", "EMBEDDING_MAX_BODY_BYTES": str(16 * 1024)},  # reads of 100 ids refused
    {"EMBEDDING_MAX_BATCH": "10", "EMBEDDING_MAX_BODY_BYTES": str(16 * 1024)},  # deletes of 20 ids refused
)
WRITTEN = 40  # documents written again


def test_the_clients_follow_a_servers_lowered_limits(tmp_path: Path, notes: Path, ids: list[str]) -> None:
    """Each client reads a server's limits, then the server is started again on its port with a lower body limit,
    then a lower max_batch, twice: each request sized by the limits read before is refused for the one it is over, and
    the client reads them again and sends what was refused in requests of the new sizes, once."""
    shutil.copytree(notes, tmp_path / "data")
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    started = [real_server.start(tmp_path / "data", tmp_path / "serve.log", env={**env, **PHASES[0]})]
    base, port = started[0].base, started[0].port
    sent: list[tuple[str, int]] = []

    def record(response: httpx.Response) -> None:
        sent.append((response.request.url.path, response.status_code))

    async def arecord(response: httpx.Response) -> None:
        record(response)

    def restart(phase: dict[str, str]) -> None:
        started[0].stop()
        started[0] = real_server.start(tmp_path / "data", tmp_path / "serve.log", env={**env, **phase}, port=port)
        sent.clear()

    async def both(client: Client, aclient: AsyncClient) -> None:  # the server started again between their calls
        expected = client.documents("notes", ids, vector=True)
        assert (await aclient.limits()) == client.limits() and client.limits()["max_body_bytes"] == 64 * 1024
        restart(PHASES[1])
        written = client.upsert_many("notes", expected["documents"][:WRITTEN])
        assert sum(answer["upserted"] for answer in written) == WRITTEN
        assert refused_then_resized(sent, "/v1/tables/notes/documents", 413)
        sent.clear()
        written = await aclient.upsert_many("notes", expected["documents"][WRITTEN : 2 * WRITTEN])
        assert sum(answer["upserted"] for answer in written) == WRITTEN
        assert refused_then_resized(sent, "/v1/tables/notes/documents", 413)
        restart(PHASES[2])
        assert client.documents("notes", ids, vector=True) == expected
        assert refused_then_resized(sent, "/v1/tables/notes/documents/get", 422) and len(sent) == 2 + 300 // 20
        sent.clear()
        assert (await aclient.list_documents("notes", vector=True)) == expected["documents"]
        assert refused_then_resized(sent, "/v1/tables/notes/documents/scroll", 422)
        restart(PHASES[3])
        assert [answer["deleted"] for answer in client.delete_many("notes", ids[:WRITTEN])] == [10] * 4
        assert refused_then_resized(sent, "/v1/tables/notes/documents/delete", 422)

    async def run() -> None:
        with httpx.Client(base_url=base, event_hooks={"response": [record]}) as http:
            async with httpx.AsyncClient(base_url=base, event_hooks={"response": [arecord]}) as ahttp:
                await both(Client(base, http=http, api_key=KEY), AsyncClient(base, http=ahttp, api_key=KEY))

    try:
        asyncio.run(run())
    finally:
        started[0].stop()


def refused_then_resized(sent: list[tuple[str, int]], path: str, status: int) -> bool:
    """Whether ``sent`` is one request to ``path`` refused with ``status``, the limits read again, and requests to
    ``path`` that all succeed."""
    return sent[:2] == [(path, status), ("/v1/limits", 200)] and {*sent[2:]} == {(path, 200)}


def test_a_front_reads_a_shards_limits_again_when_it_refuses_one(tmp_path: Path, notes: Path, ids: list[str]) -> None:
    """A front keeps its shard's limits for a while; the shard started again with a lower max_batch refuses a read,
    then a delete, for it: the front's limits are read again at once (not 10 s later), so that a client that reads
    them again after the refusal sizes its next request by the shard's new ones."""
    shutil.copytree(notes, tmp_path / "shard")
    (tmp_path / "front").mkdir()
    started = [real_server.start(tmp_path / "shard", tmp_path / "shard.log", env={"EMBEDDING_WRITE_KEYS": KEY})]
    env = {"EMBEDDING_SHARDS": json.dumps({"notes": [[f"{started[0].base}/v1/tables/notes"]]})}
    front = real_server.start(tmp_path / "front", tmp_path / "front.log", env={**env, "EMBEDDING_WRITE_KEYS": KEY})
    tables, headers = f"{front.base}/v1/tables/notes", {"X-API-Key": KEY}
    try:
        assert real_server.HTTP.get(f"{front.base}/v1/limits").json()["max_batch"] == 1024
        for batch, (path, body) in ((20, ("get", {"ids": ids[:30]})), (10, ("delete", {"ids": ids[:15]}))):
            port = started[0].port
            started[0].stop()
            shard_env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_MAX_BATCH": str(batch)}
            started[0] = real_server.start(tmp_path / "shard", tmp_path / "shard.log", env=shard_env, port=port)
            refused = real_server.HTTP.post(f"{tables}/documents/{path}", json=body, headers=headers)
            assert refused.status_code == 422 and refused.json()["error"]["limit"] == "max_batch", refused.text
            assert real_server.HTTP.get(f"{front.base}/v1/limits").json()["max_batch"] == batch
    finally:
        real_server.stop_together([front, started[0]])
