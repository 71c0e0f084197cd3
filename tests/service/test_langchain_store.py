"""The LangChain vector store (``service_client.langchain``) against a real ``embedding-serve`` (two workers):
LangChain's own standard tests (``langchain_tests.integration_tests.VectorStoreIntegrationTests``), then filters,
scores, MMR and the server's encoder."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import inspect
import json
import math
import shutil
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from service_client import READ_DOCUMENTS, ApiError, AsyncClient, Client
from service_client.langchain import EmbeddingSearchStore
from tests.cli import run_cli
from tests.lee import Lee
from tests.service import real_server
from tests.service.async_checks import NoSyncClient, Overlaps

KEY = "langchain-writer-key-0123456789ab"
DIM = 6  # langchain_tests' DeterministicFakeEmbedding
WIDE = 1536  # OpenAI's text-embedding-3-small


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path) -> Iterator[str]:
    """A server with ``lc``: a documents table of 6 dimensions with fields ``metadata``, ``topic`` and ``published``,
    imported with one placeholder document that each test's store deletes; ``wide``, of 1,536 dimensions;
    ``encoded``, whose texts the words table ``small`` embeds; and ``bare``, of the field ``topic`` alone."""
    data = tmp_path_factory.mktemp("langchain-data")
    shutil.copytree(small_data_dir / "small", data / "small")
    encoded = data.parent / "encoded.jsonl"
    encoded.write_text(json.dumps({"id": "placeholder", "text": "the fire", "metadata": "{}"}) + "\n")
    args = ("import", encoded, "--format", "documents", "--name", "encoded", "--encoder", "small")
    made = run_cli(*args, "--data-dir", data)
    assert made.code == 0, made.err
    source = data.parent / "lc.jsonl"
    placeholder = {"id": "placeholder", "text": "placeholder", "vector": [1.0] + [0.0] * (DIM - 1)}
    lc = {**placeholder, "metadata": "{}", "topic": "none", "published": "2001-01-01T00:00:00Z"}
    source.write_text(json.dumps(lc) + "\n")
    assert run_cli("import", source, "--format", "documents", "--name", "lc", "--data-dir", data).code == 0
    wide = data.parent / "wide.jsonl"  # ``wide``: the same with vectors of an OpenAI embedding's size
    wide.write_text(json.dumps({**placeholder, "vector": [1.0] + [0.0] * (WIDE - 1), "metadata": "{}"}) + "\n")
    assert run_cli("import", wide, "--format", "documents", "--name", "wide", "--data-dir", data).code == 0
    bare = data.parent / "bare.jsonl"  # ``bare``: fields but no ``metadata`` field
    bare.write_text(json.dumps({**placeholder, "topic": "none"}) + "\n")
    assert run_cli("import", bare, "--format", "documents", "--name", "bare", "--data-dir", data).code == 0
    log = tmp_path_factory.mktemp("langchain-serve") / "serve.log"
    with real_server.running(data, log, "--workers", "2", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        yield server.base


def empty_store(url: str, embedding: object) -> EmbeddingSearchStore:
    store = EmbeddingSearchStore(Client(url, api_key=KEY), "lc", embedding=embedding)  # type: ignore[arg-type]
    store.delete(filter={"not": {"metadata": "\u0000"}})  # every document
    return store


class TestStandard(VectorStoreIntegrationTests):
    @pytest.fixture()
    async def vectorstore(  # type: ignore[override]
        self, server_url: str, request: pytest.FixtureRequest
    ) -> AsyncIterator[VectorStore]:
        """An empty store; for the async tests, one whose synchronous client fails on any use: their calls are the
        store's own async methods, not the synchronous ones in a thread (LangChain's defaults)."""
        store = empty_store(server_url, self.get_embeddings())
        synchronous = store.client
        if inspect.iscoroutinefunction(request.function):
            store.client = NoSyncClient()  # type: ignore[assignment]
        try:
            yield store
        finally:
            store.client = synchronous
            await store.aclose()
            everything(store)


def everything(store: EmbeddingSearchStore) -> None:
    store.delete(filter={"not": {"metadata": "\u0000"}})


@pytest.fixture()
def lee_store(server_url: str, lee_docs: Lee) -> Iterator[tuple[EmbeddingSearchStore, list[str]]]:
    """The store holding the first 40 Lee stories, with their metadata: a table field (topic) and others."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    texts = lee_docs.texts[:40]
    metadatas = [{"topic": "even" if i % 2 == 0 else "odd", "row": i, "tags": ["lee", str(i)]} for i in range(40)]
    store.add_texts(texts, metadatas, ids=[f"lee-{i}" for i in range(40)])
    try:
        yield store, texts
    finally:
        everything(store)


def test_metadata_comes_back_whole_and_filters_on_table_fields(
    lee_store: tuple[EmbeddingSearchStore, list[str]],
) -> None:
    store, texts = lee_store
    found = store.similarity_search(texts[3], k=5, filter={"topic": "odd"})
    assert found[0] == Document(
        id="lee-3", page_content=texts[3], metadata={"topic": "odd", "row": 3, "tags": ["lee", "3"]}
    )
    assert len(found) == 5 and all(d.metadata["row"] % 2 == 1 for d in found)
    assert store.get_by_ids(["lee-8", "nowhere"])[0].metadata["row"] == 8


def test_scores_are_the_cosines_and_a_new_client_sees_writes(
    lee_store: tuple[EmbeddingSearchStore, list[str]], server_url: str
) -> None:
    store, texts = lee_store
    embedding = DeterministicFakeEmbedding(size=DIM)
    matrix = np.array(embedding.embed_documents(texts))
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = np.array(embedding.embed_query("bushfires near Sydney"))
    cosines = matrix @ (query / np.linalg.norm(query))
    best = np.argsort(-cosines)[:10]
    for reader in range(3):  # new connections: both workers
        other = EmbeddingSearchStore(Client(server_url), "lc", embedding=embedding)
        hits = other.similarity_search_with_score("bushfires near Sydney", k=10)
        assert [d.id for d, _ in hits] == [f"lee-{i}" for i in best], reader
        np.testing.assert_allclose([s for _, s in hits], cosines[best], atol=1e-6)
    by_vector = store.similarity_search_by_vector(query.tolist(), k=3)
    assert [d.id for d in by_vector] == [f"lee-{i}" for i in best[:3]]
    relevance = store.similarity_search_with_relevance_scores("bushfires near Sydney", k=2)
    np.testing.assert_allclose([s for _, s in relevance], (cosines[best[:2]] + 1) / 2, atol=1e-6)


@pytest.mark.parametrize(("lambda_mult", "fetch_k"), [(0.25, 20), (0.5, 10), (0.5, 40), (0.9, 15)])
def test_mmr_equals_langchains_own(
    lee_store: tuple[EmbeddingSearchStore, list[str]], lambda_mult: float, fetch_k: int
) -> None:
    """MMR chooses as LangChain's ``maximal_marginal_relevance`` does over the ``fetch_k`` nearest documents."""
    store, texts = lee_store
    embedding = DeterministicFakeEmbedding(size=DIM)
    query = embedding.embed_query("election")
    matrix = np.array(embedding.embed_documents(texts))
    nearest = np.argsort(-(matrix / np.linalg.norm(matrix, axis=1, keepdims=True)) @ query)[:fetch_k]
    chosen = maximal_marginal_relevance(np.array(query), matrix[nearest].tolist(), lambda_mult, k=10)
    found = store.max_marginal_relevance_search("election", k=10, fetch_k=fetch_k, lambda_mult=lambda_mult)
    assert [d.id for d in found] == [f"lee-{nearest[i]}" for i in chosen]
    by_vector = store.max_marginal_relevance_search_by_vector(query, k=10, fetch_k=fetch_k, lambda_mult=lambda_mult)
    assert [d.id for d in by_vector] == [d.id for d in found]
    assert found[0].metadata["row"] == int(nearest[0])


def test_delete_by_filter_and_from_texts(lee_store: tuple[EmbeddingSearchStore, list[str]], server_url: str) -> None:
    store, texts = lee_store
    assert store.delete(filter={"topic": "even"})
    assert {d.metadata["topic"] for d in store.similarity_search(texts[0], k=40)} == {"odd"}
    made = EmbeddingSearchStore.from_texts(
        ["a written note"],
        DeterministicFakeEmbedding(size=DIM),
        [{"topic": "note"}],
        ids=["note"],
        client=Client(server_url, api_key=KEY),
        table="lc",
    )
    assert made.similarity_search("a written note", k=1, filter={"topic": "note"})[0].id == "note"


def test_many_wide_documents_are_written_and_found(server_url: str) -> None:
    """200 documents of 1,536 values (6 MB of JSON, above the server's 4 MiB body limit in one request) are all
    written, in requests under it, and each is its own nearest."""
    embedding = DeterministicFakeEmbedding(size=WIDE)
    store = EmbeddingSearchStore(Client(server_url, api_key=KEY), "wide", embedding=embedding)
    texts = [f"chunk number {i} of a long document" for i in range(200)]
    assert store.add_texts(texts, ids=[f"c{i}" for i in range(200)]) == [f"c{i}" for i in range(200)]
    assert len(store.get_by_ids(["c0", "c123", "c199"])) == 3
    assert [store.similarity_search(texts[i], k=1)[0].id for i in (0, 123, 199)] == ["c0", "c123", "c199"]
    sent: list[str] = []  # the ids read by POST .../documents/get, READ_DOCUMENTS a request: not one per id
    hooks = {"request": [lambda request: sent.append(request.url.path)]}
    with httpx.Client(base_url=server_url, event_hooks=hooks) as http:
        reader = EmbeddingSearchStore(Client(server_url, http=http), "wide", embedding=embedding)
        found = reader.get_by_ids([f"c{i % 200}" for i in range(READ_DOCUMENTS + 100)] + ["nowhere"])
    assert [d.id for d in found] == [f"c{i % 200}" for i in range(READ_DOCUMENTS + 100)]
    assert sent == ["/v1/limits"] + ["/v1/tables/wide/documents/get"] * 2  # the limits once, on the first call


def test_an_empty_filter_is_none_and_from_texts_names_what_it_needs(
    lee_store: tuple[EmbeddingSearchStore, list[str]],
) -> None:
    store, texts = lee_store
    assert store.similarity_search(texts[2], k=3, filter={}) == store.similarity_search(texts[2], k=3)
    with pytest.raises(TypeError, match=r"client= .* and table="):
        EmbeddingSearchStore.from_texts(["a note"], DeterministicFakeEmbedding(size=DIM))


def test_a_filter_value_of_the_wrong_type_is_named_as_json_writes_it(
    lee_store: tuple[EmbeddingSearchStore, list[str]],
) -> None:
    """A filter's null, true and false are named as JSON writes them (the client writes NaN and infinities as
    null), not as Python's None, True and False."""
    store, texts = lee_store
    for given, named in ((math.inf, "null"), (None, "null"), (True, "true"), (False, "false")):
        with pytest.raises(ApiError, match=rf"^422 invalid_request: filter\.topic\.eq: .*, got {named}$"):
            store.similarity_search(texts[2], k=3, filter={"topic": given})
        with pytest.raises(ApiError, match=rf"^422 invalid_request: filter\.published\.lt: .*, got {named}$"):
            store.similarity_search(texts[2], k=3, filter={"published": {"lt": given}})


def test_relevance_scores_stay_within_0_and_1(lee_store: tuple[EmbeddingSearchStore, list[str]]) -> None:
    """A float32 cosine of a vector with itself can exceed 1: its relevance is 1, and LangChain does not warn."""
    store, texts = lee_store
    embedding = DeterministicFakeEmbedding(size=DIM)
    queries = [{"vector": embedding.embed_query(text)} for text in texts]
    own = [hits.hits[0].score for hits in store.client.search_documents_batch("lc", queries, k=1)]  # type: ignore[union-attr]
    beyond = [i for i, score in enumerate(own) if score > 1.0]
    assert beyond  # the case at hand
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in beyond:
            ((document, relevance),) = store.similarity_search_with_relevance_scores(texts[i], k=1, score_threshold=1.0)
            assert (document.id, relevance) == (f"lee-{i}", 1.0)


def test_documents_written_otherwise_come_back_with_their_fields(server_url: str) -> None:
    """A document whose ``metadata`` field is its own text (not a JSON object this store wrote) comes back with
    its fields as metadata, in searches and by id."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    vector = [1.0] + [0.0] * (DIM - 1)
    written = [
        {"id": "plain", "text": "a", "vector": vector, "fields": {"metadata": "a note, not JSON", "topic": "x"}},
        {"id": "listed", "text": "b", "vector": vector, "fields": {"metadata": "[1, 2]"}},
    ]
    store.client.upsert_documents("lc", written)
    try:
        expected = {
            "plain": {"metadata": "a note, not JSON", "topic": "x"},
            "listed": {"metadata": "[1, 2]"},
        }
        assert {d.id: d.metadata for d in store.similarity_search_by_vector(vector, k=2)} == expected
        assert [d.metadata for d in store.get_by_ids(["listed", "plain"])] == [expected["listed"], expected["plain"]]
    finally:
        everything(store)


class CountedEmbedding(DeterministicFakeEmbedding):
    """LangChain's fake embedding, counting the texts it embeds."""

    embedded: int = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return super().embed_documents(texts)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)


async def test_metadata_a_table_without_its_metadata_field_would_drop_is_refused(server_url: str) -> None:
    """A table without the field ``metadata`` keeps only the metadata its fields hold: a write of other keys is a
    ValueError naming them, before any text is embedded or written, not metadata dropped without a word; a
    write of metadata its fields hold comes back whole."""
    embedding = CountedEmbedding(size=DIM)
    store = EmbeddingSearchStore(Client(server_url, api_key=KEY), "bare", embedding=embedding)
    metadatas = [{"topic": "fire"}, {"topic": "fire", "source": "notes.txt", "page": 3}]
    lost = (
        r"metadatas\[1\] \(id 'b2'\): table 'bare' has no string field 'metadata', which keeps a document's "
        r"metadata whole, so its metadata keys 'source', 'page' would be lost \(its fields: 'topic'\): .*; "
        "nothing was written"
    )
    with pytest.raises(ValueError, match=lost):
        store.add_texts(["a fire", "a blaze"], metadatas, ids=["b1", "b2"])
    with pytest.raises(ValueError, match=lost):
        await store.aadd_texts(["a fire", "a blaze"], metadatas, ids=["b1", "b2"])
    assert embedding.embedded == 0 and store.get_by_ids(["b1", "b2"]) == []
    try:
        assert store.add_texts(["a fire"], metadatas[:1], ids=["b1"]) == ["b1"]
        assert [(d.id, d.metadata) for d in store.get_by_ids(["b1"])] == [("b1", {"topic": "fire"})]
    finally:
        store.delete(["b1"])
        await store.aclose()


def test_without_an_embedding_the_tables_encoder_embeds(server_url: str, lee_docs: Lee) -> None:
    """Texts and queries embedded by the table's encoder: searches, scores and MMR as with the same vectors given."""
    client = Client(server_url, api_key=KEY)
    store = EmbeddingSearchStore(client, "encoded")
    texts = lee_docs.texts[:20]
    store.add_texts(texts, ids=[f"lee-{i}" for i in range(20)])
    store.delete(["placeholder"])
    try:
        query = client.embed("small", ["bushfires near Sydney"])[0]
        found = store.similarity_search_with_score("bushfires near Sydney", k=5)
        by_vector = store.similarity_search_by_vector_with_score(query, k=5)
        assert [d.id for d, _ in found] == [d.id for d, _ in by_vector]
        np.testing.assert_allclose([s for _, s in found], [s for _, s in by_vector], atol=1e-6)
        vectors = np.array(client.embed("small", texts))
        nearest = np.argsort(-(vectors / np.linalg.norm(vectors, axis=1, keepdims=True)) @ query)[:8]
        chosen = maximal_marginal_relevance(np.array(query), vectors[nearest].tolist(), 0.3, k=4)
        diverse = store.max_marginal_relevance_search("bushfires near Sydney", k=4, fetch_k=8, lambda_mult=0.3)
        assert [d.id for d in diverse] == [f"lee-{nearest[i]}" for i in chosen]
    finally:
        store.delete(filter={"not": {"metadata": "\u0000"}})


def test_ids_with_a_filter_delete_those_passing_and_lengths_that_differ_are_refused(
    lee_store: tuple[EmbeddingSearchStore, list[str]],
) -> None:
    """Ids with a filter delete those of the ids that pass it (the server's filter on ids; no ids: none); texts,
    metadatas and ids of different lengths are refused before any text is embedded."""
    store, _ = lee_store
    store.delete([], filter={"topic": "odd"})
    store.delete(["lee-1", "lee-2", "lee-3", "nowhere"], filter={"topic": "odd"})
    assert [d.id for d in store.get_by_ids(["lee-1", "lee-2", "lee-3", "lee-5"])] == ["lee-2", "lee-5"]
    with pytest.raises(ValueError, match="needs ids or a filter="):
        store.delete()
    with pytest.raises(ValueError, match="texts: 2, metadatas: 1, ids: 2"):
        store.add_texts(["a", "b"], [{"topic": "x"}], ids=["new-a", "new-b"])
    with pytest.raises(ValueError, match="texts: 1, metadatas: 1, ids: 2"):
        store.add_texts(["a"], ids=["new-a", "new-b"])
    assert store.get_by_ids(["new-a", "new-b"]) == []


def test_an_empty_id_is_no_id_as_in_langchains_own_store(server_url: str) -> None:
    """A document whose id is ``""`` among documents with ids (``add_documents`` then hands ``add_texts`` every
    document's id) is given a new uuid, as LangChain's ``InMemoryVectorStore`` gives it, not refused by the server."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    try:
        documents = [Document(page_content="with an id", id="given"), Document(page_content="without one", id="")]
        for other in (store, InMemoryVectorStore(DeterministicFakeEmbedding(size=DIM))):
            named, new = other.add_documents(documents)
            assert named == "given" and str(uuid.UUID(new)) == new
            assert [d.page_content for d in other.get_by_ids([new])] == ["without one"]
        new, named = store.add_texts(["none", "named"], ids=["", "n1"])
        assert named == "n1" and [d.page_content for d in store.get_by_ids([new])] == ["none"]
    finally:
        everything(store)


def test_ids_the_server_takes_for_no_documents_are_no_error_to_delete(
    lee_store: tuple[EmbeddingSearchStore, list[str]],
) -> None:
    """``delete`` of ids no document has is no error, ids the server refuses as ids (empty, over 1,024 characters)
    too, as ``get_by_ids`` skips them: the other ids are deleted."""
    store, _ = lee_store
    assert store.delete(["", "x" * 1025, "lee-1"]) is True
    assert asyncio.run(store.adelete(["lee-2", ""])) is True
    assert store.delete(["", "x" * 1025]) is True
    assert [d.id for d in store.get_by_ids(["lee-0", "lee-1", "lee-2", "lee-3"])] == ["lee-0", "lee-3"]


def test_an_id_twice_in_one_write_is_refused_wherever_it_falls(server_url: str) -> None:
    """An id that comes twice among the documents of one write is refused before anything is written, as the
    server refuses it in one request: whether the two fall in the same request or, 256 documents apart, in two."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    texts = [f"note {i}" for i in range(300)]
    for first, second in [(0, 1), (0, 299), (256, 257)]:
        ids = [f"n{i}" for i in range(300)]
        ids[second] = ids[first]
        message = rf"^documents\[{second}\] \(id 'n{first}'\): the id comes twice \(documents\[{first}\] too\)"
        with pytest.raises(ValueError, match=message):
            store.add_texts(texts, ids=ids)
        assert store.similarity_search("note 1", k=1) == []


def test_a_refused_document_is_counted_among_the_writes_and_the_written_are_named(server_url: str) -> None:
    """A document refused in a write's second request is named by its index among the write's documents (the
    server counts within its request), with the documents the requests before it wrote."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    metadatas: list[dict[str, Any]] = [{"topic": "note"} for _ in range(300)]
    metadatas[280]["topic"] = 5  # a string field
    message = r"^422 invalid_request: documents\[280\] \(id 'n280'\): field 'topic' is a string field, not 5 "
    with pytest.raises(ApiError, match=message + r"\(documents\[0\] to documents\[255\] were written, by the"):
        store.add_texts([f"note {i}" for i in range(300)], metadatas, ids=[f"n{i}" for i in range(300)])
    assert [d.id for d in store.get_by_ids(["n0", "n255", "n256"])] == ["n0", "n255"]
    everything(store)


def test_a_text_over_the_servers_length_is_refused_before_anything_is_written(server_url: str) -> None:
    """A text over the server's ``max_text_chars``, the 290th of 300 (in a write's second request), is refused
    before any request writes a document, named by its index among the write's, as the server would refuse it."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    texts = [f"note {i}" for i in range(300)]
    texts[289] = "word " * 20_001  # 100,005 characters
    message = (
        r"^422 invalid_request: documents\[289\] \(id 'n289'\): text: String should have at most 100000 characters "
        r"\(the server's max_text_chars\); nothing was written$"
    )
    with pytest.raises(ApiError, match=message) as refused:
        store.add_texts(texts, ids=[f"n{i}" for i in range(300)])
    assert refused.value.limit == "max_text_chars" and refused.value.details["document"] == 289
    assert store.get_by_ids(["n0", "n255", "n256"]) == []
    everything(store)


def test_a_document_too_big_for_any_request_is_refused_before_anything_is_written(server_url: str) -> None:
    """A document whose JSON alone passes the server's ``max_body_bytes`` is refused before any request is sent
    (not sent alone after the documents before it were written, twice: again after reading the limits again), as
    the server's 413 would refuse it."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    texts = [f"note {i}" for i in range(300)]
    texts[289] = "word " * 900_000  # over the body a request may hold at the default limits
    message = (
        r"^413 body_too_large: documents\[289\] \(id 'n289'\): its JSON alone \(\d+ bytes\) makes a request body "
        r"over 4194304 bytes \(the server's max_body_bytes\); nothing was written$"
    )
    with pytest.raises(ApiError, match=message) as refused:
        store.add_texts(texts, ids=[f"n{i}" for i in range(300)])
    assert refused.value.limit == "max_body_bytes"
    assert store.get_by_ids(["n0", "n288", "n289", "n290"]) == []
    everything(store)


# A text to add no request can hold, the 900th of 1,000: (its id, its text, the server's limit it is over).
UNWRITABLE = (
    ("n899", "word " * 20_001, "max_text_chars"),
    ("i" * 1025, "a note", "max_token_chars"),
    ("n899", "word " * 900_000, "max_body_bytes"),  # over max_text_chars too: the body is checked first
)


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize(("ident", "text", "limit"), UNWRITABLE)
async def test_a_text_the_server_would_refuse_is_refused_before_any_text_is_embedded(
    server_url: str, asynchronous: bool, ident: str, text: str, limit: str
) -> None:
    """1,000 texts to add whose 900th no request can hold (its text over ``max_text_chars``, its id over
    ``max_token_chars``, its JSON over ``max_body_bytes``): refused before the embedding embeds any of them, with
    the error the server answers for it (status, code, limit), named among the write's documents; none written."""
    embedding = CountedEmbedding(size=DIM)
    store = empty_store(server_url, embedding)
    texts = [f"note {i}" for i in range(1000)]
    ids = [f"n{i}" for i in range(1000)]
    texts[899], ids[899] = text, ident
    try:
        with pytest.raises(ApiError) as refused:
            await store.aadd_texts(texts, ids=ids) if asynchronous else store.add_texts(texts, ids=ids)
        assert embedding.embedded == 0
        assert store.get_by_ids(["n0", "n898", "n900"]) == []
        with pytest.raises(ApiError) as alone:
            store.client.upsert_documents("lc", [{"id": ident, "text": text, "vector": [1.0] * DIM}])
    finally:
        await store.aclose()
    error = refused.value
    assert (error.status, error.code, error.limit) == (alone.value.status, alone.value.code, limit)
    shown = repr(ident) if len(ident) < 60 else f"'{ident[:55]}...'"
    assert error.message.startswith(f"documents[899] (id {shown}): ") and error.details["document"] == 899
    assert error.message.endswith(f"(the server's {limit}); nothing was written")


def test_nan_and_infinities_in_metadata_are_written_as_null_as_llamaindex_writes_them(server_url: str) -> None:
    """A metadata value that is NaN or infinite (pandas' missing value) is written as JSON's null, in lists and
    dicts too, as pydantic and LlamaIndex write it: the field ``metadata`` holds JSON that any reader parses, not
    Python's ``NaN``, which JSON has not."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    try:
        metadata = {"score": math.nan, "nested": {"range": [-math.inf, 1.5, np.float64(math.inf)]}, "topic": "t"}
        store.add_texts(["a note"], [metadata], ids=["nan"])
        expected = {"score": None, "nested": {"range": [None, 1.5, None]}, "topic": "t"}
        assert store.get_by_ids(["nan"])[0].metadata == expected
        stored = store.client.document("lc", "nan")["fields"]["metadata"]

        def refused(constant: str) -> None:
            raise AssertionError(f"{constant} is not JSON: {stored}")

        assert json.loads(stored, parse_constant=refused) == expected
    finally:
        everything(store)


def test_numpy_metadata_is_written_as_json_and_ids_the_server_refuses_are_missing(server_url: str) -> None:
    """Metadata values of NumPy (scalars, arrays, inside lists and dicts too) are written as JSON's numbers,
    booleans and lists, a datetime as its ISO 8601 string (the timestamp field ``published`` too), as LlamaIndex
    writes them; ids the server takes for no document's (empty, over 1,024 characters) are not found."""
    store = empty_store(server_url, DeterministicFakeEmbedding(size=DIM))
    metadata = {
        "topic": np.str_("numpy"),
        "row": np.int64(7),
        "score": np.float32(0.5),
        "seen": np.bool_(True),
        "point": np.arange(3),
        "nested": {"counts": [np.int32(1), np.uint8(2)]},
        "published": dt.datetime(2001, 12, 3, 6, tzinfo=dt.UTC),
        "day": dt.date(2001, 12, 4),
        "amount": decimal.Decimal("1.50"),
        "key": uuid.UUID(int=7),
        "labels": {"fire"},
    }
    try:
        assert store.add_texts(["a note"], [metadata], ids=["np"]) == ["np"]
        plain = {
            "topic": "numpy",
            "row": 7,
            "score": 0.5,
            "seen": True,
            "point": [0, 1, 2],
            "nested": {"counts": [1, 2]},
            "published": "2001-12-03T06:00:00Z",
            "day": "2001-12-04",
            "amount": "1.50",
            "key": "00000000-0000-0000-0000-000000000007",
            "labels": ["fire"],
        }
        (found,) = store.similarity_search("a note", k=1, filter={"published": {"gt": "2001-12-03T05:00:00Z"}})
        assert (found.id, found.metadata) == ("np", plain)
        with pytest.raises(TypeError, match="a metadata value of type Event has no JSON form"):
            store.add_texts(["a note"], [{"event": threading.Event()}], ids=["np"])
        assert [d.id for d in store.get_by_ids(["", "x" * 1025, "np", "nowhere"])] == ["np"]
    finally:
        everything(store)


def test_a_fetch_k_above_the_servers_max_k_is_named(server_url: str) -> None:
    store = EmbeddingSearchStore(Client(server_url), "lc", embedding=DeterministicFakeEmbedding(size=DIM))
    with pytest.raises(ApiError, match=r"fetch_k must be at most 1000 \(the server's max_k\), got 1001"):
        store.max_marginal_relevance_search("a note", k=4, fetch_k=1001)
    with pytest.raises(ApiError, match=r"^422 invalid_request: k: k must be at most 1000"):
        store.similarity_search("a note", k=1001)  # k itself is named as it is


async def test_the_async_methods_answer_as_the_synchronous_ones_at_once(
    lee_store: tuple[EmbeddingSearchStore, list[str]], server_url: str
) -> None:
    """The store's own async methods, over an ``AsyncClient`` alone: the synchronous methods' answers, the
    searches of one ``gather`` in flight together."""
    store, texts = lee_store
    embedding = DeterministicFakeEmbedding(size=DIM)
    queries = texts[:8]
    expected = [store.similarity_search_with_score(text, k=5, filter={"topic": "odd"}) for text in queries]
    diverse = store.max_marginal_relevance_search("election", k=5, fetch_k=15, lambda_mult=0.3)
    vector = embedding.embed_query("bushfires near Sydney")
    overlaps = Overlaps()
    async with httpx.AsyncClient(base_url=server_url, transport=overlaps) as http:
        given = AsyncClient(server_url, http=http, api_key=KEY)
        reader = EmbeddingSearchStore(NoSyncClient(), "lc", embedding, async_client=given)  # type: ignore[arg-type]
        found = await asyncio.gather(*(reader.asimilarity_search_with_score(t, 5, {"topic": "odd"}) for t in queries))
        assert found == expected and overlaps.most > 1, overlaps.most
        assert await reader.asimilarity_search(queries[0], k=3) == store.similarity_search(queries[0], k=3)
        assert await reader.asimilarity_search_by_vector(vector, k=4) == store.similarity_search_by_vector(vector, k=4)
        chosen = await reader.amax_marginal_relevance_search("election", k=5, fetch_k=15, lambda_mult=0.3)
        assert [d.id for d in chosen] == [d.id for d in diverse]
        ids = ["lee-8", "nowhere", "", "lee-3"]
        assert await reader.aget_by_ids(ids) == store.get_by_ids(ids) and len(store.get_by_ids(ids)) == 2
        assert await reader.aadd_texts(["a new note"], [{"topic": "new"}], ids=["note"]) == ["note"]
        assert [d.id for d in store.similarity_search("a new note", k=1, filter={"topic": "new"})] == ["note"]
        await reader.adelete(filter={"topic": "odd"})
        assert await reader.asimilarity_search("election", k=40, filter={"topic": "odd"}) == []
        with pytest.raises(ApiError, match="fetch_k must be at most 1000"):
            await reader.amax_marginal_relevance_search("election", fetch_k=1001)
        await reader.adelete(["note", "lee-8"], filter={"topic": "new"})  # the ids that pass: note
        assert len(await reader.aget_by_ids(["note", "lee-8"])) == 1


async def test_without_an_embedding_the_async_searches_embed_on_the_server(server_url: str, lee_docs: Lee) -> None:
    """Without an embedding, the async searches and MMR embed the query as the synchronous ones, on the server
    (the table's encoder, read over the async client); the store's own async client closes with ``aclose``."""
    store = EmbeddingSearchStore(Client(server_url, api_key=KEY), "encoded")
    texts = lee_docs.texts[20:30]
    await store.aadd_texts(texts, ids=[f"lee-{i}" for i in range(10)])
    synchronous, store.client = store.client, NoSyncClient()  # type: ignore[assignment]
    try:
        found = await store.asimilarity_search_with_score("bushfires near Sydney", k=4)
        diverse = await store.amax_marginal_relevance_search("bushfires near Sydney", k=3, fetch_k=6, lambda_mult=0.3)
        made = store.async_client
    finally:
        store.client = synchronous
        await store.aclose()
    assert made.http.is_closed
    try:
        assert found == store.similarity_search_with_score("bushfires near Sydney", k=4)
        expected = store.max_marginal_relevance_search("bushfires near Sydney", k=3, fetch_k=6, lambda_mult=0.3)
        assert [d.id for d in diverse] == [d.id for d in expected]
    finally:
        store.delete([f"lee-{i}" for i in range(10)])


async def test_an_option_a_search_does_not_take_is_refused(
    lee_store: tuple[EmbeddingSearchStore, list[str]], server_url: str
) -> None:
    """A keyword argument a search does not read is refused, not ignored: ``filters=`` (LlamaIndex's name),
    Chroma's ``where=``, a ``score_threshold`` given to a plain similarity search (the relevance searches take it,
    with ``filter``); ``from_texts`` takes ``async_client=`` and nothing else of its own."""
    store, texts = lee_store
    odd = {"topic": "odd"}
    refused = [
        (store.as_retriever(search_kwargs={"k": 3, "filters": odd}), "'filters': it takes k and filter="),
        (store.as_retriever(search_type="mmr", search_kwargs={"where": odd}), "'where': it takes k, fetch_k"),
        (store.as_retriever(search_kwargs={"score_threshold": 0.9}), "'score_threshold': it takes k and filter="),
    ]
    for retriever, message in refused:
        with pytest.raises(TypeError, match=message):
            retriever.invoke(texts[0])
        with pytest.raises(TypeError, match=message):
            await retriever.ainvoke(texts[0])
    kwargs = {"score_threshold": 0.5, "filter": odd, "k": 5}
    kept = store.as_retriever(search_type="similarity_score_threshold", search_kwargs=kwargs).invoke(texts[1])
    assert kept[0].id == "lee-1" and {d.metadata["topic"] for d in kept} == {"odd"}
    embedding, client = DeterministicFakeEmbedding(size=DIM), Client(server_url, api_key=KEY)
    with pytest.raises(TypeError, match="from_texts\\(\\) does not take 'batch_size'"):
        EmbeddingSearchStore.from_texts(["a note"], embedding, client=client, table="lc", batch_size=8)
    given = AsyncClient(server_url, api_key=KEY)
    made = EmbeddingSearchStore.from_texts(
        ["a note"], embedding, ids=["n"], client=client, table="lc", async_client=given
    )
    assert made.async_client is given and [d.id for d in await made.aget_by_ids(["n"])] == ["n"]
    await given.aclose()
