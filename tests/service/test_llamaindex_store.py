"""The LlamaIndex vector store (``service_client.llamaindex``) against a real ``embedding-serve`` (two workers).
LlamaIndex ships no standard vector-store tests; these are their equivalent of LangChain's (an empty store, add,
idempotent re-add, replacement by id, delete by source document and by node ids, missing ids, metadata that comes
back whole), then ``MetadataFilters``, scores, MMR and a ``VectorStoreIndex`` built and queried over the store."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores.utils import maximal_marginal_relevance
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

from index.engine.hybrid import DEPTH
from service_client import READ_DOCUMENTS, AsyncClient, Client, calls, stored
from service_client.llamaindex import HYBRID_DEPTH, EmbeddingSearchVectorStore, _restricted, filter_of
from tests.cli import run_cli
from tests.lee import Lee
from tests.service import real_server
from tests.service.async_checks import NoSyncClient, Overlaps

KEY = "llamaindex-writer-key-0123456789a"
DIM = 6
FAKE = DeterministicFakeEmbedding(size=DIM)  # vectors from a hash of the text: deterministic, not meaningful


class FakeEmbedding(BaseEmbedding):
    """LangChain's deterministic fake embedding as a LlamaIndex embedding model."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return FAKE.embed_query(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return FAKE.embed_query(text)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return FAKE.embed_query(query)


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("llamaindex-data")
    source = data.parent / "li.jsonl"
    row = {"id": "placeholder", "text": "placeholder", "vector": [1.0] + [0.0] * (DIM - 1), "metadata": "{}"}
    source.write_text(json.dumps({**row, "ref_doc_id": "none", "topic": "none", "row": -1, "urgent": False}) + "\n")
    assert run_cli("import", source, "--format", "documents", "--name", "li", "--data-dir", data).code == 0
    bare = data.parent / "bare.jsonl"  # ``bare``: fields but no ``metadata`` field
    bare.write_text(json.dumps({key: row[key] for key in ("id", "text", "vector")} | {"topic": "none"}) + "\n")
    assert run_cli("import", bare, "--format", "documents", "--name", "bare", "--data-dir", data).code == 0
    log = tmp_path_factory.mktemp("llamaindex-serve") / "serve.log"
    with real_server.running(data, log, "--workers", "2", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        yield server.base


@pytest.fixture()
def store(server_url: str) -> Iterator[EmbeddingSearchVectorStore]:
    """An empty store (the table's documents all deleted before and after each test)."""
    made = EmbeddingSearchVectorStore(Client(server_url, api_key=KEY), "li")
    made.clear()
    try:
        yield made
    finally:
        made.clear()


def node(ident: str, text: str, source: str = "doc-a", **metadata: Any) -> TextNode:
    made = TextNode(id_=ident, text=text, metadata=metadata, embedding=FAKE.embed_query(text))
    made.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=source)
    return made


def ask(store: EmbeddingSearchVectorStore, text: str, k: int, **options: Any) -> list[str]:
    result = store.query(VectorStoreQuery(query_embedding=FAKE.embed_query(text), similarity_top_k=k, **options))
    return list(result.ids or [])


def test_an_empty_store_answers_nothing(store: EmbeddingSearchVectorStore) -> None:
    assert ask(store, "foo", 1) == []


def test_add_then_query_returns_the_nodes_whole(store: EmbeddingSearchVectorStore) -> None:
    nodes = [node("1", "foo", topic="a", row=1, extra={"deep": [1, 2]}), node("2", "bar", topic="b", row=2)]
    assert store.add(nodes) == ["1", "2"]
    result = store.query(VectorStoreQuery(query_embedding=FAKE.embed_query("bar"), similarity_top_k=2))
    assert result.ids == ["2", "1"]
    assert result.similarities is not None and result.similarities[0] == pytest.approx(1.0, abs=1e-6)
    assert result.nodes is not None
    first, second = result.nodes
    assert (first.get_content(), first.metadata, first.ref_doc_id) == ("bar", {"topic": "b", "row": 2}, "doc-a")
    assert second.metadata == {"topic": "a", "row": 1, "extra": {"deep": [1, 2]}}
    assert [n.embedding for n in (*result.nodes, *store.get_nodes(["1"]))] == [None] * 3  # read without them


def test_nodes_given_their_listed_vectors_are_added_again_as_they_were(store: EmbeddingSearchVectorStore) -> None:
    """docs/documents.md's way to add nodes read back to a table without an encoder: each given its vector from
    ``list_documents(vector=True)``; the table then holds the same documents, fields and vectors."""
    store.add([node("1", "foo\tand\nmore ✓", topic="a", row=2**62), node("2", "bar", topic="b", row=-1, urgent=True)])
    before = store.client.list_documents("li", vector=True)
    nodes = store.get_nodes()
    vectors = {str(document["id"]): document["vector"] for document in before}
    for read in nodes:
        read.embedding = vectors[read.node_id]
    store.clear()
    assert store.add(nodes) == ["1", "2"]
    after = store.client.list_documents("li", vector=True)
    assert [(d["id"], d["text"], d["fields"]) for d in after] == [(d["id"], d["text"], d["fields"]) for d in before]
    np.testing.assert_allclose([d["vector"] for d in after], [d["vector"] for d in before], rtol=1e-6, atol=1e-7)
    assert [d["fields"]["row"] for d in after] == [2**62, -1]


def test_adding_twice_replaces_and_a_mutation_by_id_is_seen(store: EmbeddingSearchVectorStore) -> None:
    store.add([node("1", "foo"), node("2", "bar")])
    store.add([node("1", "foo"), node("2", "bar")])
    assert ask(store, "bar", 5) == ["2", "1"]
    store.add([node("1", "new foo", topic="changed")])
    result = store.query(VectorStoreQuery(query_embedding=FAKE.embed_query("new foo"), similarity_top_k=5))
    assert result.ids == ["1", "2"] and result.nodes is not None
    assert (result.nodes[0].get_content(), result.nodes[0].metadata) == ("new foo", {"topic": "changed"})


def test_delete_by_source_document_and_by_node_ids(store: EmbeddingSearchVectorStore) -> None:
    store.add(
        [node("1", "foo", "doc-a"), node("2", "bar", "doc-b"), node("3", "baz", "doc-a"), node("4", "qux", "doc-c")]
    )
    store.delete("doc-a")
    assert sorted(ask(store, "foo", 10)) == ["2", "4"]
    store.delete_nodes(["4", "missing"])
    assert ask(store, "foo", 10) == ["2"]
    store.delete("nothing-of-it")  # no error


def test_a_node_id_twice_in_one_add_is_refused(store: EmbeddingSearchVectorStore) -> None:
    with pytest.raises(ValueError, match=r"^documents\[2\] \(id '1'\): the id comes twice \(documents\[0\] too\)"):
        store.add([node("1", "foo"), node("2", "bar"), node("1", "baz")])
    assert ask(store, "foo", 3) == []


def test_what_a_table_without_its_metadata_field_would_drop_is_refused(server_url: str) -> None:
    """A table without the field ``metadata`` keeps only the metadata its fields hold: nodes with other metadata
    keys or with relationships (which only that field keeps) are a ValueError naming them before any node is
    written, not nodes stored without them; nodes its fields hold whole are written and come back whole."""
    store = EmbeddingSearchVectorStore(Client(server_url, api_key=KEY), "bare")
    kept = TextNode(id_="b1", text="a fire", metadata={"topic": "fire"}, embedding=FAKE.embed_query("a fire"))
    sourced = node("b2", "a blaze", "doc-b", topic="fire")
    with pytest.raises(ValueError, match=r"nodes\[1\] \(id 'b2'\): .* so its relationships \(source\) would be lost"):
        store.add([kept, sourced])
    keyed = node("b3", "a flame", topic="fire", page=3)
    keyed.relationships.clear()
    lost = (
        r"nodes\[0\] \(id 'b3'\): table 'bare' has no string field 'metadata', .* so its metadata key 'page' "
        r"would be lost \(its fields: 'topic'\): .*; nothing was written"
    )
    with pytest.raises(ValueError, match=lost):
        asyncio.run(store.async_add([keyed]))
    assert store.get_nodes(["b1", "b2", "b3"]) == []
    try:
        assert store.add([kept]) == ["b1"]
        assert [(n.node_id, n.metadata) for n in store.get_nodes(["b1"])] == [("b1", {"topic": "fire"})]
    finally:
        store.delete_nodes(["b1"])


def test_node_ids_the_server_takes_for_no_nodes_are_no_error_to_delete(store: EmbeddingSearchVectorStore) -> None:
    """``delete_nodes`` of ids the server refuses as ids (empty, over 1,024 characters) deletes the others, as
    ``get_nodes`` skips them."""
    store.add([node("1", "foo"), node("2", "bar"), node("3", "baz")])
    store.delete_nodes(node_ids=["", "x" * 1025, "1"])
    asyncio.run(store.adelete_nodes(node_ids=["2", ""]))
    store.delete_nodes(node_ids=[""])
    assert [n.node_id for n in store.get_nodes()] == ["3"]


def test_clear_deletes_every_node_of_a_table_without_the_metadata_field(server_url: str) -> None:
    store = EmbeddingSearchVectorStore(Client(server_url, api_key=KEY), "bare")
    nodes = [TextNode(id_=f"c{i}", text="a fire", embedding=FAKE.embed_query(f"{i}")) for i in range(3)]
    store.add(nodes[:2])
    store.clear()
    assert store.get_nodes() == []
    store.add(nodes)
    asyncio.run(store.aclear())
    assert store.get_nodes() == []


def test_get_nodes_skips_missing_ids(store: EmbeddingSearchVectorStore, server_url: str) -> None:
    store.add([node("1", "foo", topic="a")])
    found = store.get_nodes(["1", "2"])
    assert [(n.node_id, n.get_content(), n.metadata) for n in found] == [("1", "foo", {"topic": "a"})]
    sent: list[str] = []  # the node ids read by POST .../documents/get, READ_DOCUMENTS a request: not one per id
    with httpx.Client(base_url=server_url, event_hooks={"request": [lambda r: sent.append(r.url.path)]}) as http:
        many = EmbeddingSearchVectorStore(Client(server_url, http=http), "li").get_nodes(["1", "2"] * READ_DOCUMENTS)
    assert [n.node_id for n in many] == ["1"] * READ_DOCUMENTS and sent == ["/v1/limits"] + [
        "/v1/tables/li/documents/get"
    ] * 2


def test_numpy_metadata_is_written_as_json_and_ids_the_server_refuses_are_missing(
    store: EmbeddingSearchVectorStore,
) -> None:
    """NumPy's scalars and arrays in a node's metadata are written as JSON's numbers, booleans and lists (the
    table's integer field ``row`` filtered on too); ids the server takes for no node's are not found."""
    store.add([node("1", "foo", topic=np.str_("a"), row=np.int64(3), score=np.float32(0.5), seen=np.bool_(True))])
    store.add([node("2", "bar", row=np.int32(4), point=np.arange(2), nested={"counts": [np.uint8(1)]})])
    row_3 = MetadataFilters(filters=[MetadataFilter(key="row", value=3)])
    result = store.query(VectorStoreQuery(query_embedding=FAKE.embed_query("foo"), similarity_top_k=5, filters=row_3))
    assert [n.metadata for n in result.nodes or []] == [{"topic": "a", "row": 3, "score": 0.5, "seen": True}]
    found = store.get_nodes(["", "x" * 1025, "2", "missing"])
    assert [n.metadata for n in found] == [{"row": 4, "point": [0, 1], "nested": {"counts": [1]}}]


def test_node_ids_with_filters_delete_those_passing_and_an_empty_filter_alone_is_refused(
    store: EmbeddingSearchVectorStore,
) -> None:
    """Node ids and filters both: the nodes of those ids that pass the filters are deleted (as LlamaIndex's own
    store deletes), by the server's filter on ids; an empty filter alone (which passes every node) is refused,
    and nothing is deleted."""
    store.add([node("1", "foo", topic="sport"), node("2", "bar", topic="fire"), node("3", "baz", topic="fire")])
    fire = MetadataFilters(filters=[MetadataFilter(key="topic", value="fire")])
    with pytest.raises(ValueError, match="every node"):
        store.delete_nodes(filters=MetadataFilters(filters=[]))
    assert sorted(ask(store, "foo", 5)) == ["1", "2", "3"]
    store.delete_nodes(["1", "2", "missing"], filters=fire)
    assert sorted(ask(store, "foo", 5)) == ["1", "3"]
    store.delete_nodes(["3"], filters=MetadataFilters(filters=[]))  # no condition but the ids
    assert ask(store, "foo", 5) == ["1"]
    store.add([node("2", "bar", topic="fire"), node("3", "baz", topic="fire")])
    store.delete_nodes(filters=fire)
    assert ask(store, "foo", 5) == ["1"]


def test_an_empty_metadata_filter_is_no_filter(store: EmbeddingSearchVectorStore) -> None:
    store.add([node("1", "foo", topic="a"), node("2", "bar", topic="b")])
    empty = MetadataFilters(filters=[])
    assert filter_of(empty) is True
    assert ask(store, "foo", 5, filters=empty) == ask(store, "foo", 5) == ["1", "2"]


@pytest.fixture()
def lee_nodes(store: EmbeddingSearchVectorStore, lee_docs: Lee) -> list[TextNode]:
    nodes = [node(f"lee-{i}", lee_docs.texts[i], f"doc-{i % 3}", topic=f"t{i % 4}", row=i) for i in range(40)]
    store.add(nodes)
    return nodes


FILTERS = [
    (MetadataFilters(filters=[MetadataFilter(key="topic", value="t1")]), lambda i: i % 4 == 1),
    (MetadataFilters(filters=[MetadataFilter(key="row", value=30, operator=FilterOperator.GTE)]), lambda i: i >= 30),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="topic", value=["t0", "t2"], operator=FilterOperator.IN),
                MetadataFilter(key="row", value=10, operator=FilterOperator.LT),
            ]
        ),
        lambda i: i % 4 in (0, 2) and i < 10,
    ),
    (
        MetadataFilters(
            filters=[
                MetadataFilter(key="topic", value=["t0", "t1", "t2"], operator=FilterOperator.NIN),
                MetadataFilter(key="row", value=5, operator=FilterOperator.LTE),
            ],
            condition=FilterCondition.OR,
        ),
        lambda i: i % 4 == 3 or i <= 5,
    ),
    (
        MetadataFilters(filters=[MetadataFilter(key="topic", value="t3", operator=FilterOperator.NE)]),
        lambda i: i % 4 != 3,
    ),
    (  # a substring, as LlamaIndex's own stores match text
        MetadataFilters(filters=[MetadataFilter(key="topic", value="3", operator=FilterOperator.TEXT_MATCH)]),
        lambda i: i % 4 == 3,
    ),
]


@pytest.mark.parametrize(("filters", "keep"), FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_metadata_filters_keep_what_they_say(
    store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode], filters: MetadataFilters, keep: Any
) -> None:
    query = FAKE.embed_query("bushfires")
    matrix = np.array([n.embedding for n in lee_nodes])
    cosines = matrix @ query / np.linalg.norm(matrix, axis=1) / np.linalg.norm(query)
    wanted = [i for i in np.argsort(-cosines) if keep(int(i))][:8]
    result = store.query(VectorStoreQuery(query_embedding=query, similarity_top_k=8, filters=filters))
    assert result.ids == [f"lee-{i}" for i in wanted]
    np.testing.assert_allclose(result.similarities or [], cosines[wanted], atol=1e-6)


def test_a_filter_the_server_cannot_say_is_refused() -> None:
    text = FilterOperator.TEXT_MATCH_INSENSITIVE
    with pytest.raises(ValueError, match="text_match_insensitive"):
        filter_of(MetadataFilters(filters=[MetadataFilter(key="topic", value="t", operator=text)]))
    for value in ("true", 2, [1, 2]):  # a boolean field compared with what is neither 1 nor 0
        truth = MetadataFilters(filters=[MetadataFilter(key="urgent", value=value)])
        with pytest.raises(ValueError, match=r"field 'urgent' is a boolean field: compare it with 1 \(true\) or 0"):
            filter_of(truth, {"urgent": "boolean"})
    empty = MetadataFilters(filters=[MetadataFilter(key="topic", value=None, operator=FilterOperator.IS_EMPTY)])
    with pytest.raises(ValueError, match="'is_empty' needs the type of field 'topic'"):
        filter_of(empty)  # without the table's field types


def test_a_query_by_node_ids_searches_those_nodes_alone(
    store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``node_ids`` restrict a query to those nodes (the server's filter on ids; more than one "in" of it takes, an
    "or" of several), with its filters and in every mode, as a retriever given them asks; no node ids (what an
    index whose store keeps the text gives each retriever) restrict nothing."""
    monkeypatch.setattr(stored, "FILTER_IDS", 4)
    chosen = [f"lee-{i}" for i in range(0, 40, 3)]
    query = FAKE.embed_query("bushfires")
    matrix = np.array([n.embedding for n in lee_nodes])
    cosines = matrix @ query / np.linalg.norm(matrix, axis=1) / np.linalg.norm(query)
    order = [int(i) for i in np.argsort(-cosines)]
    wanted = [i for i in order if i % 3 == 0][:5]
    result = store.query(VectorStoreQuery(query_embedding=query, similarity_top_k=5, node_ids=chosen))
    assert result.ids == [f"lee-{i}" for i in wanted]
    np.testing.assert_allclose(result.similarities or [], cosines[wanted], atol=1e-6)
    t1 = MetadataFilters(filters=[MetadataFilter(key="topic", value="t1")])
    both = store.query(VectorStoreQuery(query_embedding=query, similarity_top_k=5, node_ids=chosen, filters=t1))
    assert both.ids == [f"lee-{i}" for i in order if i % 3 == 0 and i % 4 == 1][:5]
    text = "police said"
    keyword = store.query(VectorStoreQuery(query_str=text, mode="text_search", similarity_top_k=40, node_ids=chosen))
    server = store.client.search_documents("li", k=40, text=text, mode="keyword").hits
    assert keyword.ids == [hit.id for hit in server if hit.id in chosen] and len(server) > len(keyword.ids or []) > 0
    index = VectorStoreIndex.from_vector_store(store, embed_model=FakeEmbedding())
    retrieved = VectorIndexRetriever(index, node_ids=chosen, similarity_top_k=5).retrieve("bushfires")
    assert [n.node.node_id for n in retrieved] == result.ids
    assert ask(store, "bushfires", 5, node_ids=[]) == ask(store, "bushfires", 5) != result.ids
    assert [n.node.node_id for n in index.as_retriever(similarity_top_k=5).retrieve("bushfires")] == ask(
        store, "bushfires", 5
    )
    assert _restricted(["lee-0"], None, {}) == {"id": {"in": ["lee-0"]}}  # no field needed


def test_get_nodes_lists_the_nodes_filters_pass(
    store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_nodes(filters=...)`` reads every node the filters pass, page after page (of 7 here) in the ids'
    order; of ``node_ids`` too when given both; no filters and no ids: every node. ``aget_nodes`` answers the
    same, awaited, and so does ``aquery`` by node ids, without the synchronous client."""
    monkeypatch.setattr(calls, "READ_DOCUMENTS", 7)
    early = MetadataFilters(filters=[MetadataFilter(key="topic", value=["t0", "t1"], operator=FilterOperator.IN)])
    passing = [n for n in lee_nodes if n.metadata["topic"] in ("t0", "t1")]
    found = store.get_nodes(filters=early)
    assert sorted((n.node_id, n.get_content(), str(n.metadata)) for n in found) == sorted(
        (n.node_id, n.get_content(), str(n.metadata)) for n in passing
    )
    assert len(passing) == 20 and [n.node_id for n in found] == sorted(n.node_id for n in passing)
    assert sorted(n.node_id for n in store.get_nodes()) == sorted(n.node_id for n in lee_nodes)
    some = store.get_nodes(["lee-1", "lee-2", "lee-5", "missing"], filters=early)
    assert sorted(n.node_id for n in some) == ["lee-1", "lee-5"]
    nothing = MetadataFilters(filters=[MetadataFilter(key="topic", value=[], operator=FilterOperator.IN)])
    assert store.get_nodes(filters=nothing) == store.get_nodes([], filters=early) == []

    by_ids = VectorStoreQuery(query_embedding=FAKE.embed_query("fire"), similarity_top_k=3, node_ids=["lee-1", "lee-2"])

    async def read() -> list[list[str]]:
        synchronous, store._client = store.client, NoSyncClient()  # type: ignore[assignment]
        try:
            answers = [await store.aget_nodes(filters=early), await store.aget_nodes(["lee-1", "lee-2"], early)]
            searched = await store.aquery(by_ids)
        finally:
            store._client = synchronous
            await store.aclose()
        return [sorted(n.node_id for n in answer) for answer in answers] + [searched.ids or []]

    assert asyncio.run(read()) == [sorted(n.node_id for n in found), ["lee-1"], store.query(by_ids).ids]


def test_a_listing_while_nodes_are_written_reads_each_node_once(
    store: EmbeddingSearchVectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``get_nodes()`` reads its pages in the ids' order, each after the last id read: between two pages, a node
    written behind them is not listed and one ahead of them is, a node deleted ahead is not and one read already
    stays read; no node comes twice or is skipped (as pages by offset would). No bound on the nodes listed."""
    monkeypatch.setattr(calls, "READ_DOCUMENTS", 4)
    made = [TextNode(id_=f"n{i:02d}", text="x", embedding=[1.0, i / 20, 0, 0, 0, 0]) for i in range(14)]
    store.add(made)
    client, scrolls = store.client, []
    carry = client._request

    def request(asked: Any) -> Any:
        answer = carry(asked)
        if asked.path.endswith("/documents/scroll"):
            scrolls.append(asked)
            if len(scrolls) == 1:  # the first page read: n00 to n03
                store.add([TextNode(id_=i, text="x", embedding=[1.0, 0, 0, 0, 0, 0]) for i in ("n01b", "n09b")])
                store.delete_nodes(["n05", "n02"])
        return answer

    monkeypatch.setattr(client, "_request", request)
    listed = [n.node_id for n in store.get_nodes()]
    expected = sorted({n.node_id for n in made} - {"n05"} | {"n09b"})
    assert listed == expected and len(scrolls) == 4


def test_mmr_is_maximal_marginal_relevance(store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode]) -> None:
    """Mode mmr by the server: standard MMR (each candidate's highest similarity to all chosen), as LangChain's
    ``maximal_marginal_relevance`` computes it, with every node among the candidates."""
    query = FAKE.embed_query("election")
    for threshold in (0.3, 0.7):
        chosen = maximal_marginal_relevance(np.array(query), [n.embedding for n in lee_nodes], threshold, k=10)
        got = ask(store, "election", 10, mode=VectorStoreQueryMode.MMR, mmr_threshold=threshold)
        assert got == [f"lee-{i}" for i in chosen]


def test_a_retrievers_mmr_threshold_is_the_stores(store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode]) -> None:
    """A retriever hands ``vector_store_kwargs`` to ``query`` as keyword arguments (as SimpleVectorStore reads
    ``mmr_threshold``): the threshold given there is the one searched with; another one (a misspelt name) is
    refused, not ignored."""
    index = VectorStoreIndex.from_vector_store(store, embed_model=FakeEmbedding())
    for threshold in (0.0, 0.3, 1.0):
        retriever = index.as_retriever(
            similarity_top_k=10, vector_store_query_mode="mmr", vector_store_kwargs={"mmr_threshold": threshold}
        )
        got = [n.node.node_id for n in retriever.retrieve("election")]
        assert got == ask(store, "election", 10, mode=VectorStoreQueryMode.MMR, mmr_threshold=threshold)
    assert ask(store, "election", 10, mode=VectorStoreQueryMode.MMR, mmr_threshold=0.0) != ask(store, "election", 10)
    with pytest.raises(ValueError, match="mmr_threshold must be between 0 and 1"):
        ask(store, "election", 10, mode=VectorStoreQueryMode.MMR, mmr_threshold=1.5)
    misspelt = index.as_retriever(vector_store_query_mode="mmr", vector_store_kwargs={"mmr_treshold": 0.0})
    with pytest.raises(TypeError, match=r"does not take 'mmr_treshold'.* it takes mmr_threshold"):
        misspelt.retrieve("election")
    with pytest.raises(TypeError, match="does not take 'mmr_treshold'"):
        asyncio.run(misspelt.aretrieve("election"))


def test_a_vector_store_index_over_the_store(server_url: str, store: EmbeddingSearchVectorStore, lee_docs: Lee) -> None:
    """LlamaIndex's own index and retriever write and search through the store; another client sees the nodes."""
    nodes = [
        TextNode(
            id_=f"story-{i}", text=lee_docs.texts[i], metadata={"topic": "lee"}, excluded_embed_metadata_keys=["topic"]
        )
        for i in range(12)
    ]
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(vector_store=store), embed_model=FakeEmbedding()
    )
    retrieved = index.as_retriever(similarity_top_k=3).retrieve(lee_docs.texts[7])
    assert retrieved[0].node.node_id == "story-7" and retrieved[0].score == pytest.approx(1.0, abs=1e-6)
    other = EmbeddingSearchVectorStore(Client(server_url), "li")
    (seen,) = other.get_nodes(["story-3"])
    assert (seen.node_id, seen.metadata, seen.get_content()) == ("story-3", {"topic": "lee"}, lee_docs.texts[3])


def test_documents_written_otherwise_come_back_as_text_nodes(store: EmbeddingSearchVectorStore) -> None:
    """A document written by another program (the client, a LangChain store) is a TextNode of its metadata."""
    vector = FAKE.embed_query("foo")
    store.client.upsert_documents(
        "li", [{"id": "x", "text": "foo", "vector": vector, "fields": {"metadata": '{"topic": "a"}', "topic": "a"}}]
    )
    store.client.upsert_documents("li", [{"id": "y", "text": "foo", "vector": vector, "fields": {"topic": "b"}}])
    own = {"metadata": "a note, not JSON", "topic": "c"}  # a metadata field of its own: not JSON
    store.client.upsert_documents("li", [{"id": "z", "text": "foo", "vector": vector, "fields": own}])
    result = store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=3))
    assert result.nodes is not None
    assert sorted((n.node_id, n.get_content(), str(n.metadata)) for n in result.nodes) == [
        ("x", "foo", "{'topic': 'a'}"),
        ("y", "foo", "{'topic': 'b'}"),
        ("z", "foo", str(own)),
    ]
    assert [n.metadata for n in store.get_nodes(["z"])] == [own]


def test_text_search_and_hybrid_modes_are_the_servers(
    store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode]
) -> None:
    """Mode text_search is the server's keyword (BM25) search of the query text, hybrid its fusion of both lists
    (``alpha`` the vector list's weight), with the same filter; a retriever in hybrid mode asks the same."""
    text = "bushfires near Sydney"
    vector = FAKE.embed_query(text)
    odd = MetadataFilters(filters=[MetadataFilter(key="row", value=[1, 3, 5, 7, 9, 11], operator=FilterOperator.NIN)])
    keyword = store.query(VectorStoreQuery(query_str=text, similarity_top_k=5, mode="text_search", filters=odd))
    server = store.client.search_documents("li", k=5, text=text, mode="keyword", filter=filter_of(odd)).hits
    assert keyword.ids == [hit.id for hit in server] and len(server) == 5
    assert keyword.similarities == [hit.score for hit in server]
    hybrid = VectorStoreQuery(query_str=text, query_embedding=vector, similarity_top_k=5, mode="hybrid", alpha=0.3)
    fused = store.client.search_documents(
        "li", k=5, text=text, vector=vector, mode="hybrid", weights={"vector": 0.3, "keyword": 0.7}
    )
    assert store.query(hybrid).ids == [hit.id for hit in fused.hits] != keyword.ids
    index = VectorStoreIndex.from_vector_store(store, embed_model=FakeEmbedding())
    retriever = index.as_retriever(similarity_top_k=5, vector_store_query_mode="hybrid", alpha=0.3)
    assert [n.node.node_id for n in retriever.retrieve(text)] == store.query(hybrid).ids
    with pytest.raises(ValueError, match="'hybrid' needs a query text"):
        store.query(VectorStoreQuery(query_embedding=vector, mode="hybrid"))


def test_hybrid_alpha_one_is_the_vector_search_and_zero_the_keyword_search(
    store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode]
) -> None:
    """LlamaIndex's ``alpha`` runs from 0 (keyword search) to 1 (vector search): at its ends the answer is the
    server's vector or keyword search, not a fusion that keeps the other list's documents, scored 0."""
    text = "firefighters"  # in fewer nodes than k
    vector = FAKE.embed_query(text)
    odd = MetadataFilters(filters=[MetadataFilter(key="row", value=[1, 3, 5, 7, 9, 11], operator=FilterOperator.NIN)])

    def hybrid(alpha: float) -> VectorStoreQuery:
        return VectorStoreQuery(
            query_str=text, query_embedding=vector, similarity_top_k=10, mode="hybrid", alpha=alpha, filters=odd
        )

    by_vector = store.client.search_documents("li", k=10, vector=vector, filter=filter_of(odd)).hits
    by_keyword = store.client.search_documents("li", k=10, text=text, mode="keyword", filter=filter_of(odd)).hits
    assert 0 < len(by_keyword) < 10
    for alpha, hits in ((1.0, by_vector), (0.0, by_keyword)):
        result = store.query(hybrid(alpha))
        assert (result.ids, result.similarities) == ([hit.id for hit in hits], [hit.score for hit in hits]), alpha
    assert len(store.query(hybrid(0.01)).ids or []) == 10  # both lists, fused
    alone = store.query(
        VectorStoreQuery(query_embedding=vector, similarity_top_k=10, mode="hybrid", alpha=1.0, filters=odd)
    )
    assert alone.ids == [hit.id for hit in by_vector]  # a vector search needs no text
    with pytest.raises(ValueError, match="needs a query text"):
        store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=10, mode="hybrid", alpha=0.5))
    with pytest.raises(ValueError, match=r"alpha must be between 0 .* and 1"):
        store.query(hybrid(1.5))


def test_sparse_top_k_is_the_k_of_mode_text_search_and_the_keyword_lists_depth_in_hybrid(
    store: EmbeddingSearchVectorStore, lee_nodes: list[TextNode]
) -> None:
    """Mode text_search answers ``sparse_top_k`` nodes when given (``similarity_top_k`` otherwise), as LlamaIndex's
    stores with a keyword search take it (Postgres, Qdrant's sparse mode), a retriever's too. In mode hybrid it is
    the keyword list's depth (Qdrant's), which the server's lists meet up to the server's depth: a retriever carried
    over with one is answered as without it, a deeper one refused; the vector modes do not read it."""
    text = "bushfires near Sydney"
    server = [hit.id for hit in store.client.search_documents("li", k=4, text=text, mode="keyword").hits]
    assert len(server) == 4
    query = VectorStoreQuery(query_str=text, similarity_top_k=1, sparse_top_k=4, mode="text_search")
    assert store.query(query).ids == server
    index = VectorStoreIndex.from_vector_store(store, embed_model=FakeEmbedding())
    retriever = index.as_retriever(similarity_top_k=1, sparse_top_k=4, vector_store_query_mode="text_search")
    assert [n.node.node_id for n in retriever.retrieve(text)] == server
    assert HYBRID_DEPTH == DEPTH  # the client's bound is the server's
    embedding = FAKE.embed_query(text)
    for mode in ("hybrid", "default", "mmr"):
        plain = VectorStoreQuery(query_str=text, query_embedding=embedding, similarity_top_k=4, mode=mode)
        carried = VectorStoreQuery(
            query_str=text, query_embedding=embedding, similarity_top_k=4, sparse_top_k=DEPTH, mode=mode
        )
        assert store.query(carried).ids == store.query(plain).ids, mode
    deeper = VectorStoreQuery(
        query_str=text, query_embedding=embedding, similarity_top_k=4, sparse_top_k=DEPTH + 1, mode="hybrid"
    )
    with pytest.raises(ValueError, match=f"sparse_top_k {DEPTH + 1} is deeper than the keyword list"):
        store.query(deeper)


def test_filters_pass_the_nodes_llamaindexs_own_store_passes(store: EmbeddingSearchVectorStore) -> None:
    """Each operator, alone and combined by and, or and not, passes the nodes LlamaIndex's ``SimpleVectorStore``
    passes: ``in`` of no values none, ``nin`` of no values every node (a node without the key too), ``is_empty``
    a node without the key or with an empty string, an integer compared with a fraction as a number, a boolean
    field with 1 and 0 as true and false (``True == 1``: a ``MetadataFilter`` holds no bool), ``==`` None no node
    and ``!=`` None every node."""
    topics = ["fire", "sport", None, "fire brigade", "", None, "rain"]
    urgent: list[dict[str, Any]] = [{"urgent": True}, {"urgent": False}, {}]
    nodes = [
        node(
            f"{i}",
            f"note {i}",
            **({} if topic is None else {"topic": topic}),
            **({"row": i} if i != 5 else {}),
            **urgent[i % 3],
        )
        for i, topic in enumerate(topics)
    ]
    store.add(nodes)
    own = SimpleVectorStore()
    own.add([n.model_copy() for n in nodes])
    atoms = [
        MetadataFilter(key="topic", value=[], operator=FilterOperator.IN),
        MetadataFilter(key="topic", value=[], operator=FilterOperator.NIN),
        MetadataFilter(key="topic", value=["rain", "sport"], operator=FilterOperator.NIN),
        MetadataFilter(key="topic", value="fire", operator=FilterOperator.TEXT_MATCH),
        MetadataFilter(key="row", value=3, operator=FilterOperator.GTE),
        MetadataFilter(key="topic", value="fire", operator=FilterOperator.NE),
        MetadataFilter(key="topic", value=None, operator=FilterOperator.IS_EMPTY),
        MetadataFilter(key="row", value=None, operator=FilterOperator.IS_EMPTY),
        *[MetadataFilter(key="row", value=2.5, operator=FilterOperator(op)) for op in (">", ">=", "<", "<=", "==")],
        MetadataFilter(key="row", value=2.5, operator=FilterOperator.NE),
        MetadataFilter(key="row", value=[2.5, 3.0], operator=FilterOperator.IN),  # an integer field, by fractions
        MetadataFilter(key="row", value=[2.5], operator=FilterOperator.NIN),
        MetadataFilter(key="urgent", value=1),
        MetadataFilter(key="urgent", value=0.0),
        MetadataFilter(key="urgent", value=1, operator=FilterOperator.NE),
        MetadataFilter(key="urgent", value=[0], operator=FilterOperator.IN),
        MetadataFilter(key="urgent", value=[1], operator=FilterOperator.NIN),
        MetadataFilter(key="topic", value=None),
        MetadataFilter(key="row", value=None, operator=FilterOperator.NE),
        MetadataFilter(key="urgent", value=None),
    ]
    pairs = [[a, b] for a in atoms for b in atoms if a is not b][::12]
    for condition in FilterCondition:
        for items in [[a] for a in atoms] + pairs:
            filters = MetadataFilters(filters=items, condition=condition)
            query = VectorStoreQuery(query_embedding=FAKE.embed_query("note"), similarity_top_k=10, filters=filters)
            assert sorted(store.query(query).ids or []) == sorted(own.query(query).ids or []), (condition, items)
    for truths in (
        [1],
        [0, 1],
    ):  # any of a boolean field's values: as in (LlamaIndex's own store takes no any of a bool)
        found = []
        for operator in (FilterOperator.ANY, FilterOperator.IN):
            filters = MetadataFilters(filters=[MetadataFilter(key="urgent", value=truths, operator=operator)])
            query = VectorStoreQuery(query_embedding=FAKE.embed_query("note"), similarity_top_k=10, filters=filters)
            found.append(sorted(store.query(query).ids or []))
        assert found[0] == found[1] == sorted(own.query(query).ids or []), truths
    nothing = MetadataFilters(filters=[MetadataFilter(key="topic", value=[], operator=FilterOperator.IN)])
    store.delete_nodes(filters=nothing)
    assert len(ask(store, "note", 10)) == len(nodes)


async def test_the_async_methods_add_query_and_delete_as_the_synchronous_ones(
    server_url: str, store: EmbeddingSearchVectorStore
) -> None:
    """The store's own async methods, over an ``AsyncClient`` alone: what the synchronous methods see and answer,
    the queries of one ``gather`` in flight together."""
    overlaps = Overlaps()
    async with httpx.AsyncClient(base_url=server_url, transport=overlaps) as http:
        given = AsyncClient(server_url, http=http, api_key=KEY)
        aside = EmbeddingSearchVectorStore(NoSyncClient(), "li", async_client=given)  # type: ignore[arg-type]
        nodes = [
            node("1", "foo", "doc-a", topic="a", row=1),
            node("2", "bar", "doc-b", topic="b", row=2),
            node("3", "baz", "doc-a", topic="a", row=3),
            node("4", "qux", "doc-c", topic="c", row=4),
        ]
        assert await aside.async_add(nodes) == ["1", "2", "3", "4"]
        only_a = MetadataFilters(filters=[MetadataFilter(key="topic", value="a")])
        above = MetadataFilters(filters=[MetadataFilter(key="row", value=1.5, operator=FilterOperator.GT)])
        none = MetadataFilters(filters=[MetadataFilter(key="topic", value=[], operator=FilterOperator.IN)])
        queries = [
            VectorStoreQuery(query_embedding=FAKE.embed_query(text), similarity_top_k=3, filters=filters)
            for text in ("foo", "bar", "qux")
            for filters in (None, only_a, above, none)
        ]
        answers = await asyncio.gather(*(aside.aquery(query) for query in queries))
        assert overlaps.most > 1, overlaps.most
        for query, answer in zip(queries, answers, strict=True):
            expected = store.query(query)
            assert (answer.ids, answer.similarities, answer.nodes) == (
                expected.ids,
                expected.similarities,
                expected.nodes,
            )
        assert [len(answer.ids or []) for answer in answers[:4]] == [3, 2, 3, 0]
        assert await aside.aget_nodes(["4", "missing", "1"]) == store.get_nodes(["4", "missing", "1"])
        await aside.adelete("doc-a")
        assert sorted(ask(store, "foo", 10)) == ["2", "4"]
        await aside.adelete_nodes(["4", "missing"])
        await aside.adelete_nodes(filters=only_a)  # none left to delete
        assert ask(store, "foo", 10) == ["2"]
        await aside.adelete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="topic", value="b")]))
        assert ask(store, "foo", 10) == []
        await aside.async_add(nodes)
        await aside.aclear()
        assert ask(store, "foo", 10) == []
        with pytest.raises(ValueError, match="clear\\(\\) deletes them all"):
            await aside.adelete_nodes(filters=MetadataFilters(filters=[]))


async def test_an_index_inserts_retrieves_and_deletes_through_the_async_methods(
    store: EmbeddingSearchVectorStore, lee_docs: Lee
) -> None:
    """LlamaIndex's own async insert, retrieval and delete over the store: none of them uses its synchronous client
    (the store's ``AsyncClient``, made like it on first use, closes with ``aclose``)."""
    index = VectorStoreIndex.from_vector_store(store, embed_model=FakeEmbedding())
    nodes = [node(f"story-{i}", lee_docs.texts[i], "lee-a" if i < 6 else "lee-b", topic="lee") for i in range(12)]
    synchronous, store._client = store.client, NoSyncClient()  # type: ignore[assignment]
    try:
        await index.ainsert_nodes(nodes)
        retrieved = await index.as_retriever(similarity_top_k=3).aretrieve(lee_docs.texts[7])
        await index.adelete_ref_doc("lee-a")
        left = await store.aquery(VectorStoreQuery(query_embedding=FAKE.embed_query("x"), similarity_top_k=20))
        made = store.async_client
    finally:
        store._client = synchronous
        await store.aclose()
    assert made.http.is_closed
    assert retrieved[0].node.node_id == "story-7" and retrieved[0].score == pytest.approx(1.0, abs=1e-6)
    assert sorted(left.ids or []) == sorted(f"story-{i}" for i in range(6, 12))
