"""``GET /v1/limits`` and the clients that size their requests by it: a real server started with limits far below
the defaults (``max_batch`` 50, ``max_k`` 50, a 32 KiB body limit) answers ``Client.documents`` of Lee's 300
documents, LangChain's ``get_by_ids``, LlamaIndex's ``get_nodes`` and writes of all 300 as a server with the
default limits does, where the clients' default sizes (1,024 ids, 256 documents, 2 MiB, pages of 100) are each a
422 or a 413; a refusal of a request over any published limit names it (``"limit"`` in its error), and no other
refusal does; a front reads its shard's limits again when the shard refuses a request for one. A write the client
can tell no request would take (a document over a limit, a vector of another length than the table's) is refused
before any request writes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from llama_index.core.schema import TextNode

from service.schemas.bounds import MAX_DIM, MAX_EMBED_CHARS, MAX_TEXT_CHARS, MAX_TOKEN_CHARS
from service.schemas.limits import ServerLimits
from service.settings import Settings
from service_client import ApiError, AsyncClient, Client, write_bodies
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
        assert sent[0] == ("/v1/tables/notes", 200)  # the table's dimension, read by each client's first write
        assert refused_then_resized(sent[1:], "/v1/tables/notes/documents", 413)
        sent.clear()
        written = await aclient.upsert_many("notes", expected["documents"][WRITTEN : 2 * WRITTEN])
        assert sum(answer["upserted"] for answer in written) == WRITTEN
        assert sent[0] == ("/v1/tables/notes", 200)
        assert refused_then_resized(sent[1:], "/v1/tables/notes/documents", 413)
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


UNKNOWN = "zzqqxx"
WORDS = ["king", "queen", "man", "woman", "fire", "water", "red", "blue", "one", "two", "paris", "london"]
TOKENS = [*WORDS, UNKNOWN, *WORDS[:10], UNKNOWN]  # unknown in the second and third requests of TIGHT's max_batch
assert len(TOKENS) == 3 * int(TIGHT["EMBEDDING_MAX_BATCH"])
VECTORS = [[0.1 * (i % 5) - 0.2] * 50 for i in range(24)]
VECTORS[10] = [0.5] * 49  # not the table's dimension
# Each batch call on ``tight``: its table(s), options and items, the call that answers one item alone, and how many
# batch requests ``TIGHT``'s limits make of them (max_batch, max_hits, max_words, max_exact_rows, max_scored_rows).
BATCHES: list[tuple[str, tuple[str, ...], dict[str, Any], list[Any], str, int]] = [
    ("neighbors_batch", ("small",), {"k": 3, "restrict": 1000}, TOKENS, "neighbors", 3),
    ("neighbors_batch", ("small",), {"k": 10, "restrict": 100}, TOKENS[9:15], "neighbors", 2),  # max_hits
    ("search_batch", ("small",), {"k": 3, "restrict": 1000}, VECTORS, "search", 3),
    ("similarity_batch", ("small",), {}, list(zip(TOKENS, reversed(TOKENS), strict=True)), "similarity", 3),
    ("rank_batch", ("small",), {}, [("king", "queen"), ("cat", UNKNOWN), ("red", "blue")], "rank", 3),  # exact rows
    ("analogies", ("small",), {"k": 2, "restrict": 2000}, [("man", "king", t) for t in TOKENS], "analogy", 3),
    (
        "analogies",
        ("small",),
        {"k": 2, "method": "3cosmul", "restrict": 100},
        [("man", "king", "woman")] * 3,
        "analogy",
        3,
    ),
    ("doesnt_match_batch", ("small",), {}, [["fire", w] for w in TOKENS[8:14]], "doesnt_match", 3),  # max_words
    ("n_similarity_batch", ("small",), {}, [(["fire"], [w]) for w in TOKENS[8:14]], "n_similarity", 3),
    ("search_batch", ("small",), {"k": 3}, VECTORS[8:11], "search", 3),  # exact: every row
    ("compare_batch", ("small", ST), {"k": 3, "restrict": 500}, TOKENS, "compare", 3),
]


def shown(answer: Any, floats: list[float]) -> Any:
    """An answer with its floats taken out into ``floats`` (a batch's scores may differ from one query's in the
    last bits), an error as its status, code and message (an ApiError is equal only to itself)."""
    if isinstance(answer, ApiError):
        return (answer.status, answer.code, answer.message)
    if isinstance(answer, float):
        floats.append(answer)
        return float
    if dataclasses.is_dataclass(answer) and not isinstance(answer, type):
        return shown(dataclasses.asdict(answer), floats)
    if isinstance(answer, dict):
        return {key: shown(value, floats) for key, value in answer.items()}
    if isinstance(answer, list | tuple):
        return [shown(value, floats) for value in answer]
    return answer


def same(answers: list[Any], expected: list[Any]) -> bool:
    """Whether ``answers`` are ``expected``, their floats to within 1e-6."""
    ours: list[float] = []
    theirs: list[float] = []
    return shown(answers, ours) == shown(expected, theirs) and ours == pytest.approx(theirs, abs=1e-6)


def alone(client: Client, single: str, prefix: tuple[str, ...], item: Any, options: dict[str, Any]) -> Any:
    """The answer to ``item`` asked alone, or its error."""
    try:
        return getattr(client, single)(*prefix, *(item if isinstance(item, tuple) else (item,)), **options)
    except ApiError as error:
        return error


@pytest.mark.parametrize(
    ("name", "prefix", "options", "items", "single", "requests"), BATCHES, ids=[f"{b[0]}-{len(b[3])}" for b in BATCHES]
)
def test_every_batch_call_is_sent_in_the_servers_sizes(
    tight: str,
    name: str,
    prefix: tuple[str, ...],
    options: dict[str, Any],
    items: list[Any],
    single: str,
    requests: int,
) -> None:
    """Items that no one request of ``tight`` takes (over its max_batch, hits, words, exact or scored rows), sent by
    each client in requests within them: each item's answer, or error at its place, as the item asked alone."""
    sent: list[tuple[str, str, int]] = []

    def record(response: httpx.Response) -> None:
        sent.append((response.request.method, response.request.url.path, response.status_code))

    async def arecord(response: httpx.Response) -> None:
        record(response)

    with httpx.Client(base_url=tight, event_hooks={"response": [record]}) as http:
        client = Client(tight, http=http)
        answered = getattr(client, name)(*prefix, items, **options)
        batches = [(path, status) for method, path, status in sent if method == "POST"]
        expected = [alone(client, single, prefix, item, options) for item in items]
    assert same(answered, expected)
    assert len(batches) == requests and {status for _, status in batches} == {200}
    assert sent[0] == ("GET", "/v1/limits", 200)

    async def both() -> list[Any]:
        async with httpx.AsyncClient(base_url=tight, event_hooks={"response": [arecord]}) as ahttp:
            return list(await getattr(AsyncClient(tight, http=ahttp), name)(*prefix, items, **options))

    sent.clear()
    assert same(asyncio.run(both()), answered)
    assert [(path, status) for method, path, status in sent if method == "POST"] == batches


def test_a_batch_of_document_searches_is_sent_in_the_servers_sizes(servers: tuple[str, str], ids: list[str]) -> None:
    """150 searches of ``notes`` by id (one of a missing document) on the server of max_batch 50: three requests,
    each search's hits' scores (Lee's stories that are there twice are tied: either may come first), or
    error, as it alone answers, from each client."""
    queries: list[dict[str, Any]] = [{"id": ident} for ident in ids[:150]]
    queries[70] = {"id": "nowhere"}
    sent: list[str] = []
    hooks = {"request": [lambda request: sent.append(request.method)]}
    with httpx.Client(base_url=servers[1], event_hooks=hooks) as http:
        client = Client(servers[1], http=http)
        answered = client.search_documents_batch("notes", queries, k=2, fields=["year"])
        assert sent.count("POST") == 3
        expected = [
            alone(client, "search_documents", ("notes",), (), {**q, "k": 2, "fields": ["year"]}) for q in queries
        ]
    assert same(scores(answered), scores(expected)) and isinstance(answered[70], ApiError)

    async def search() -> list[Any]:
        async with AsyncClient(servers[1]) as aclient:
            return list(await aclient.search_documents_batch("notes", queries, k=2, fields=["year"]))

    assert same(scores(asyncio.run(search())), scores(answered))


@pytest.mark.parametrize("batch_mode", [None, "hybrid"])
def test_a_batchs_rrf_k_and_weights_go_to_the_requests_of_its_hybrid_searches(
    servers: tuple[str, str], batch_mode: str | None
) -> None:
    """51 searches with rrf_k and weights on the server of max_batch 50, the first of mode hybrid (its own, or the
    batch's, which the others leave for mode vector): the second request (no hybrid search) is sent without them,
    as the server refuses them to a batch none of whose searches is hybrid; each answer is its search's asked
    alone. Without a hybrid search they are the server's 422."""
    other = {"mode": "vector"} if batch_mode else {}
    queries: list[dict[str, Any]] = [{"id": f"lee-{i:03}", **other} for i in range(51)]
    queries[0] = {"id": "lee-000", "text": "bushfires in Sydney", **({} if batch_mode else {"mode": "hybrid"})}
    fusion: dict[str, Any] = {"rrf_k": 5, "weights": {"keyword": 3}}
    options = {**fusion, **({"mode": batch_mode} if batch_mode else {})}
    hybrid = {**queries[0], "mode": "hybrid", "k": 3, "fields": []}
    with Client(servers[1]) as client:
        answered = client.search_documents_batch("notes", queries, k=3, fields=[], **options)
        expected = [
            client.search_documents("notes", **hybrid, **fusion),
            client.search_documents("notes", **queries[50], k=3, fields=[]),
        ]
        assert scores([answered[0], answered[50]]) == scores(expected)
        assert scores([answered[0]]) != scores([client.search_documents("notes", **hybrid)])
        with pytest.raises(ApiError, match="rrf_k and weights: for mode hybrid"):
            client.search_documents_batch("notes", queries[1:], k=3, fields=[], **options)

    async def search() -> list[Any]:
        async with AsyncClient(servers[1]) as aclient:
            return list(await aclient.search_documents_batch("notes", queries, k=3, fields=[], **options))

    assert scores(asyncio.run(search())) == scores(answered)


def scores(answers: list[Any]) -> list[Any]:
    return [a if isinstance(a, ApiError) else [hit.score for hit in a.hits] for a in answers]


def test_a_refusal_of_a_later_request_names_the_item_among_the_batchs(tight: str) -> None:
    """Tokens too long for any request, the 21st and 23rd of 24 (the fifth and seventh of the third request): the
    call raises that request's refusal, as the server's of one request of them all, its error naming
    ``queries.20`` and ``queries.22``, not 4 and 6."""
    long = "x" * (MAX_TOKEN_CHARS + 1)
    tokens = [*TOKENS[:20], long, TOKENS[21], long, TOKENS[23]]
    with Client(tight) as client, pytest.raises(ApiError) as refused:
        client.neighbors_batch("small", tokens, k=3, restrict=1000)
    message, details = refused.value.message, refused.value.details["details"]
    assert (
        message.startswith("queries.20: ") and "; queries.22: " in message and refused.value.limit == "max_token_chars"
    )
    assert [problem["loc"] for problem in details] == [["body", "queries", "20"], ["body", "queries", "22"]]


def test_texts_are_embedded_in_the_servers_sizes(tight: str) -> None:
    """24 texts of 5 to 9 tokens: 8 at a time (max_batch) are over max_encode_tokens (32), which the client cannot
    count: each 8 is refused and sent again in halves; the vectors are each text's alone."""
    texts = [f"the river {word}" for word in TOKENS]
    sent: list[int] = []
    hooks = {"response": [lambda response: sent.append(response.status_code)]}
    with httpx.Client(base_url=tight, event_hooks=hooks) as http:
        client = Client(tight, http=http)
        details = client.embed_details(ST, texts)
        assert sent == [200] + [422, 200, 200] * 3  # the limits, then each 8 refused and halved
        alone = [client.embed_details(ST, [text]) for text in texts]
    for vector, one in zip(details.vectors, alone, strict=True):  # a text's vector alone and among others: as near
        assert vector == pytest.approx(one.vectors[0], abs=1e-5)  # as the model's batches of padded texts give them
    assert details.pooling == alone[0].pooling
    assert details.tokens == [one.tokens[0] for one in alone] and max(details.tokens) == 9
    assert details.truncated == [False] * 24


def test_a_server_without_a_limit_of_rows_is_asked_no_tables_rows(tight: str) -> None:
    """A server that publishes no max_exact_rows (an older version): a batch of searches, exact or restricted,
    that fits one request is that request alone, the table's rows never read."""
    sent: list[str] = []
    hooks = {"response": [lambda response: sent.append(response.request.url.path)]}
    with httpx.Client(base_url=tight, event_hooks=hooks) as http:
        client = Client(tight, http=http)
        client._known.limits = {k: v for k, v in client.limits().items() if k != "max_exact_rows"}
        sent.clear()
        client.search_batch("small", VECTORS[:1], k=3, exact=True)
        client.neighbors_batch("small", TOKENS[:2], k=3, restrict=1000)
    assert sent == ["/v1/tables/small/search", "/v1/tables/small/neighbors"]


def test_a_batch_refused_for_a_lowered_limit_is_sized_again(tight: str) -> None:
    """A client that read a higher max_batch than the server's now (the server started again with a lower one)
    sends 24 tokens at once; refused for it, it reads the limits again and sends them in threes of 8."""
    sent: list[tuple[str, int]] = []
    hooks = {"response": [lambda response: sent.append((response.request.url.path, response.status_code))]}
    with httpx.Client(base_url=tight, event_hooks=hooks) as http:
        client = Client(tight, http=http)
        client._known.limits = {**client.limits(), "max_batch": 100}  # as read before the server's restart
        sent.clear()
        answered = client.neighbors_batch("small", TOKENS, k=3, restrict=1000)
    path = "/v1/tables/small/neighbors"
    assert (
        sent
        == [("/v1/tables/small", 200), (path, 422), ("/v1/limits", 200), ("/v1/tables/small", 200)] + [(path, 200)] * 3
    )
    assert [isinstance(a, ApiError) for a in answered] == [t == UNKNOWN for t in TOKENS]


# A document no request can hold, the 290th of 300 written: (server, its text's characters, the limit it is over).
OVERSIZED = (
    (0, MAX_TEXT_CHARS + 1, "max_text_chars"),  # the default server: a text over 100,000 characters
    (0, 10 * 1024 * 1024, "max_body_bytes"),  # over the default body limit (and max_text_chars)
    (1, 40_000, "max_body_bytes"),  # the small server: a text within max_text_chars, over its 32 KiB body limit
)
WRITERS = ("Client", "AsyncClient", "langchain", "llamaindex", "langchain async", "llamaindex async")


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize(("server", "chars", "limit"), OVERSIZED)
def test_a_document_over_a_limit_is_refused_before_anything_is_written(
    servers: tuple[str, str], lee_docs: Lee, writer: str, server: int, chars: int, limit: str
) -> None:
    """300 new documents whose 290th no request can hold (its text over max_text_chars, or its JSON over
    max_body_bytes): each client and store refuses the write before sending any document, with the error the
    server answers for that document alone (status, code and limit), naming ``documents[289]``; none is written."""
    url = servers[server]
    texts = [*lee_docs.texts[:289], "x" * chars, *lee_docs.texts[290:300]]
    new = [f"w{i}" for i in range(300)]
    documents = [
        {"id": ident, "text": text, "vector": vector.tolist()}
        for ident, text, vector in zip(new, texts, lee_docs.vectors, strict=True)
    ]
    sent: list[str] = []
    hooks = {"response": [lambda response: sent.append(f"{response.request.method} {response.request.url.path}")]}

    async def arecord(response: httpx.Response) -> None:
        sent.append(f"{response.request.method} {response.request.url.path}")

    embedding = DeterministicFakeEmbedding(size=lee_docs.vectors.shape[1])
    nodes = [TextNode(id_=d["id"], text=d["text"], embedding=d["vector"]) for d in documents]

    async def awrite(client: Client) -> None:
        async with httpx.AsyncClient(base_url=url, event_hooks={"response": [arecord]}) as ahttp:
            aclient = AsyncClient(url, http=ahttp, api_key=KEY)
            if writer == "AsyncClient":
                await aclient.upsert_many("notes", documents)
            elif writer == "langchain async":
                store = EmbeddingSearchStore(client, "notes", embedding=embedding, async_client=aclient)
                await store.aadd_texts(texts, ids=new)
            else:
                await EmbeddingSearchVectorStore(client, "notes", async_client=aclient).async_add(nodes)

    try:
        with httpx.Client(base_url=url, event_hooks=hooks) as http, pytest.raises(ApiError) as refused:
            client = Client(url, http=http, api_key=KEY)
            if writer == "Client":
                client.upsert_many("notes", documents)
            elif writer == "langchain":
                EmbeddingSearchStore(client, "notes", embedding=embedding).add_texts(texts, ids=new)
            elif writer == "llamaindex":
                EmbeddingSearchVectorStore(client, "notes").add(nodes)
            else:
                asyncio.run(awrite(client))
        assert not any(request.endswith("/documents") for request in sent), sent
        with Client(url, api_key=KEY) as client:
            assert client.documents("notes", new)["missing"] == new
            with pytest.raises(ApiError) as alone:
                client.upsert_documents("notes", documents[289:290])
        error = refused.value
        assert (error.status, error.code, error.limit) == (alone.value.status, alone.value.code, limit)
        assert error.message.startswith("documents[289] (id 'w289'): ") and error.details["document"] == 289
        assert error.message.endswith(f"(the server's {limit}); nothing was written"), error.message
    finally:
        with Client(url, api_key=KEY) as client:
            client.delete_many("notes", new)


@pytest.mark.parametrize("writer", WRITERS[:2])
def test_an_id_over_the_servers_length_is_refused_before_anything_is_written(
    servers: tuple[str, str], lee_docs: Lee, writer: str
) -> None:
    """The 290th of 300 documents with an id over max_token_chars: refused before any document is sent, with the
    server's error for it (422, its limit), the id shown clipped; none is written."""
    url = servers[0]
    new = [*(f"w{i}" for i in range(289)), "i" * (MAX_TOKEN_CHARS + 1), *(f"w{i}" for i in range(290, 300))]
    documents = [
        {"id": ident, "text": text, "vector": vector.tolist()}
        for ident, text, vector in zip(new, lee_docs.texts, lee_docs.vectors, strict=True)
    ]
    sent: list[str] = []

    async def record(response: httpx.Response) -> None:
        sent.append(response.request.url.path)

    async def write() -> None:
        async with httpx.AsyncClient(base_url=url, event_hooks={"response": [record]}) as http:
            await AsyncClient(url, http=http, api_key=KEY).upsert_many("notes", documents)

    try:
        with pytest.raises(ApiError) as refused:
            if writer == "Client":
                hooks = {"response": [lambda response: sent.append(response.request.url.path)]}
                with httpx.Client(base_url=url, event_hooks=hooks) as http:
                    Client(url, http=http, api_key=KEY).upsert_many("notes", documents)
            else:
                asyncio.run(write())
        with Client(url, api_key=KEY) as client:
            assert client.documents("notes", new[:289])["missing"] == new[:289]
            with pytest.raises(ApiError) as alone:
                client.upsert_documents("notes", documents[289:290])
    finally:
        with Client(url, api_key=KEY) as client:
            client.delete_many("notes", new[:289])
    assert sent == ["/v1/limits"]
    error = refused.value
    assert (error.status, error.code, error.limit) == (alone.value.status, alone.value.code, "max_token_chars")
    assert error.message == (
        f"documents[289] (id '{'i' * 55}...'): id: String should have at most {MAX_TOKEN_CHARS} characters "
        "(the server's max_token_chars); nothing was written"
    )


# Vectors of 300 new documents (the table's have 50 values) and the first a write refuses: one of 49 values in the
# write's second request, or the vectors of the write's second half a value longer than the first half's.
LENGTHS = (([50] * 289 + [49] + [50] * 10, 289), ([50] * 150 + [51] * 150, 150))


@pytest.mark.parametrize("writer", WRITERS[:2])
@pytest.mark.parametrize(("lengths", "first"), LENGTHS)
def test_a_vector_of_another_length_is_refused_before_anything_is_written(
    servers: tuple[str, str], lee_docs: Lee, writer: str, lengths: list[int], first: int
) -> None:
    """A write whose vectors are not all of the table's dimension is refused before any document is sent (the
    server refuses such a vector in its own request only, after the requests before it wrote theirs), naming the
    first such document among the write's and both lengths as the server's error for it does; none is written.
    The table's dimension is read once per client (``GET /v1/tables/notes``), and again before a refusal by it."""
    url = servers[0]
    new = [f"w{i}" for i in range(300)]
    documents = [
        {"id": ident, "text": text, "vector": np.resize(vector, size).tolist()}
        for ident, text, vector, size in zip(new, lee_docs.texts, lee_docs.vectors, lengths, strict=True)
    ]
    sent: list[str] = []

    async def record(response: httpx.Response) -> None:
        sent.append(response.request.url.path)

    async def write() -> list[ApiError]:
        refused = []
        async with httpx.AsyncClient(base_url=url, event_hooks={"response": [record]}) as http:
            client = AsyncClient(url, http=http, api_key=KEY)
            for _ in range(2):
                with pytest.raises(ApiError) as raised:
                    await client.upsert_many("notes", documents)
                refused.append(raised.value)
        return refused

    try:
        if writer == "Client":
            refused = []
            with httpx.Client(base_url=url, event_hooks={"response": [lambda r: sent.append(r.request.url.path)]}) as h:
                client = Client(url, http=h, api_key=KEY)
                for _ in range(2):
                    with pytest.raises(ApiError) as raised:
                        client.upsert_many("notes", documents)
                    refused.append(raised.value)
        else:
            refused = asyncio.run(write())
        with Client(url, api_key=KEY) as reader:
            assert reader.documents("notes", new)["missing"] == new
            with pytest.raises(ApiError) as alone:
                reader.upsert_documents("notes", documents[first : first + 1])
    finally:
        with Client(url, api_key=KEY) as writer_client:
            writer_client.delete_many("notes", new)
    # no document sent; the table read by the first write, and again before the second refuses by what it read
    assert sent == ["/v1/limits", "/v1/tables/notes", "/v1/tables/notes"]
    error = refused[0]
    assert (error.status, error.code) == (alone.value.status, alone.value.code)
    assert (error.details, alone.value.details) == ({"document": first}, {"document": 0})
    problem = alone.value.message.removeprefix(f"documents[0] (id 'w{first}'): ")
    assert problem == f"a vector of {lengths[first]} values; the table's have 50"
    assert error.message == f"documents[{first}] (id 'w{first}'): {problem}; nothing was written"
    assert refused[1].message == error.message


@pytest.mark.parametrize("asynchronous", [False, True])
def test_llamaindex_nodes_of_another_embedding_length_are_refused_before_anything_is_written(
    servers: tuple[str, str], lee_docs: Lee, asynchronous: bool
) -> None:
    """LlamaIndex's ``add`` and ``async_add`` of 300 nodes whose 290th embedding has 49 values (an index embedded
    with another model): refused before any node is sent, naming ``documents[289]``; none is written."""
    url = servers[0]
    nodes = [
        TextNode(id_=f"w{i}", text=text, embedding=np.resize(vector, 49 if i == 289 else 50).tolist())
        for i, (text, vector) in enumerate(zip(lee_docs.texts, lee_docs.vectors, strict=True))
    ]
    sent: list[str] = []

    async def record(response: httpx.Response) -> None:
        sent.append(response.request.url.path)

    async def add(client: Client) -> None:
        async with httpx.AsyncClient(base_url=url, event_hooks={"response": [record]}) as http:
            await EmbeddingSearchVectorStore(
                client, "notes", async_client=AsyncClient(url, http=http, api_key=KEY)
            ).async_add(nodes)

    new = [node.node_id for node in nodes]
    try:
        with httpx.Client(base_url=url, event_hooks={"response": [lambda r: sent.append(r.request.url.path)]}) as h:
            client = Client(url, http=h, api_key=KEY)
            with pytest.raises(ApiError) as refused:
                asyncio.run(add(client)) if asynchronous else EmbeddingSearchVectorStore(client, "notes").add(nodes)
        assert not any(path.endswith("/documents") for path in sent), sent
        with Client(url, api_key=KEY) as reader:
            assert reader.documents("notes", new)["missing"] == new
    finally:
        with Client(url, api_key=KEY) as writer_client:
            writer_client.delete_many("notes", new)
    assert refused.value.message == (
        "documents[289] (id 'w289'): a vector of 49 values; the table's have 50; nothing was written"
    )


def test_a_table_replaced_with_another_dimension_is_read_again_before_a_write_is_refused(
    servers: tuple[str, str], lee_docs: Lee
) -> None:
    """A client that read the table's dimension before the table was replaced with vectors of another length
    reads it again before refusing a write by it: vectors of the table's dimension now are written."""
    url = servers[0]
    documents = [{"id": "again", "text": "fire", "vector": lee_docs.vectors[0].tolist()}]
    sent: list[str] = []
    hooks = {"response": [lambda response: sent.append(response.request.url.path)]}
    try:
        with httpx.Client(base_url=url, event_hooks=hooks) as http:
            client = Client(url, http=http, api_key=KEY)
            client._known.tables["notes"] = {**client.table("notes"), "dim": 49}  # as read before the replacement
            sent.clear()
            assert [answer["upserted"] for answer in client.upsert_many("notes", documents)] == [1]
        assert sent == ["/v1/limits", "/v1/tables/notes", "/v1/tables/notes/documents"]
    finally:
        with Client(url, api_key=KEY) as client:
            client.delete_many("notes", ["again"])


def test_the_largest_document_a_request_holds_is_the_servers(servers: tuple[str, str], lee_docs: Lee) -> None:
    """On the small server (a 32 KiB body limit): a document whose request body is exactly the limit is written,
    and one of a character more is refused by the client before it is sent, as the server refuses it (413)."""
    url = servers[1]
    empty = {"id": "edge", "text": "", "vector": lee_docs.vectors[0].tolist()}
    fits = 32 * 1024 - len(write_bodies([empty])[0])  # the text's characters that make the body the limit
    sent: list[str] = []
    hooks = {"response": [lambda response: sent.append(response.request.url.path)]}
    try:
        with httpx.Client(base_url=url, event_hooks=hooks) as http:
            client = Client(url, http=http, api_key=KEY)
            assert client.upsert_many("notes", [{**empty, "text": "x" * fits}])[0]["upserted"] == 1
            sent.clear()
            with pytest.raises(ApiError) as refused:
                client.upsert_many("notes", [{**empty, "text": "x" * (fits + 1)}])
            assert sent == [] and (refused.value.status, refused.value.limit) == (413, "max_body_bytes")
            with pytest.raises(ApiError) as alone:
                client.upsert_documents("notes", [{**empty, "text": "x" * (fits + 1)}])
            assert (alone.value.status, alone.value.code) == (413, refused.value.code)
    finally:
        with Client(url, api_key=KEY) as client:
            client.delete_many("notes", ["edge"])


def test_the_longest_text_a_write_holds_is_the_servers(servers: tuple[str, str], lee_docs: Lee) -> None:
    """A text of max_text_chars characters outside the BMP (4 bytes each in UTF-8, 2 UTF-16 units) is written, and
    one of a character more is refused by the client before it is sent, as the server refuses it: both count
    characters alike."""
    url = servers[0]
    document = {"id": "edge", "vector": lee_docs.vectors[0].tolist()}
    sent: list[str] = []
    hooks = {"response": [lambda response: sent.append(response.request.url.path)]}
    try:
        with httpx.Client(base_url=url, event_hooks=hooks) as http:
            client = Client(url, http=http, api_key=KEY)
            written = client.upsert_many("notes", [{**document, "text": "\U0001f600" * MAX_TEXT_CHARS}])
            assert written[0]["upserted"] == 1
            sent.clear()
            with pytest.raises(ApiError) as refused:
                client.upsert_many("notes", [{**document, "text": "\U0001f600" * (MAX_TEXT_CHARS + 1)}])
            assert sent == [] and (refused.value.status, refused.value.limit) == (422, "max_text_chars")
            with pytest.raises(ApiError) as alone:
                client.upsert_documents("notes", [{**document, "text": "\U0001f600" * (MAX_TEXT_CHARS + 1)}])
            assert (alone.value.code, alone.value.limit) == (refused.value.code, "max_text_chars")
    finally:
        with Client(url, api_key=KEY) as client:
            client.delete_many("notes", ["edge"])
