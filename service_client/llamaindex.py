"""A LlamaIndex vector store over a documents table of an embedding-search server (``pip install
embedding-search[llamaindex]``).

    from llama_index.core import StorageContext, VectorStoreIndex
    from service_client import Client
    from service_client.llamaindex import EmbeddingSearchVectorStore

    store = EmbeddingSearchVectorStore(client=Client(url, api_key=WRITE_KEY), table="notes")
    index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store))

``add`` upserts each node by its id (its embedding as the vector, its text, its metadata and relationships kept
whole, as JSON, in the table's string field ``metadata``; a metadata key that is also a field of the table is
written to that field too, and its source document's id to a ``ref_doc_id`` field when the table has one; a
table without ``metadata`` takes only nodes its fields hold whole, without relationships: others are a ValueError);
``delete(ref_doc_id)`` deletes the nodes of a source document (by that field); ``get_nodes(filters=...)`` lists
the nodes the filters pass (the server's pages of them, in the ids' order); ``query`` searches by the query
embedding with ``MetadataFilters`` translated to the server's filter language (on the table's fields;
``node_ids`` on the documents' ids, the filter's ``id``), mode ``mmr`` by the server's ``diversity`` (``1 -
mmr_threshold``, 0.5 by default), ``text_search`` and ``hybrid`` by its keyword and hybrid searches of the query
text (``alpha`` 1 its vector search, 0 its keyword search).

The async methods (``async_add``, ``aquery``, ``adelete``, ...) are the store's own, over an
:class:`~service_client.AsyncClient` like ``client`` (made on first use on each event loop; ``aclose()`` closes
it), or the ``async_client`` given: LlamaIndex's async engines wait on no HTTP round trip.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import metadata_dict_to_node, node_to_metadata_dict
from pydantic import PrivateAttr

from service_client import AsyncClient, Client, Hit
from service_client.async_client import LoopClient
from service_client.stored import METADATA, among, metadata_of, named, plain, unkept

REF_DOC_ID = "ref_doc_id"
HYBRID_DEPTH = 100  # the documents each list of the server's hybrid search gives at least (index.engine.hybrid's DEPTH)
RANGES = {FilterOperator.GT: "gt", FilterOperator.GTE: "gte", FilterOperator.LT: "lt", FilterOperator.LTE: "lte"}
COMPARISONS = {**RANGES, FilterOperator.EQ: "eq", FilterOperator.NE: "ne"}
TRUTHS = (FilterOperator.EQ, FilterOperator.NE, FilterOperator.IN, FilterOperator.ANY, FilterOperator.NIN)  # by 1 and 0
ORIGINS = {"integer": 0, "float": 0.0, "timestamp": "1970-01-01T00:00:00Z"}  # a value each is above or below


def filter_of(filters: MetadataFilters, types: Mapping[str, str] | None = None) -> dict[str, Any] | bool:
    """LlamaIndex's ``MetadataFilters`` in the server's filter language: True when every node passes (an empty
    ``MetadataFilters``, no condition to LlamaIndex), False when none does (``in`` of no values); ValueError for
    what it cannot say. An empty nested ``MetadataFilters`` is left out. ``types``: the table's field types, which
    ``is_empty`` needs."""
    parts = [
        filter_of(item, types) if isinstance(item, MetadataFilters) else _condition(item, types)
        for item in filters.filters
        if not isinstance(item, MetadataFilters) or item.filters
    ]
    if not parts:
        return True
    any_of = filters.condition in (FilterCondition.OR, FilterCondition.NOT)  # NOT: none of them
    kept = [part for part in parts if not isinstance(part, bool)]
    combined: dict[str, Any] | bool
    if any(part is any_of for part in parts):  # a part every node passes (or), or none does (and)
        combined = any_of
    elif not kept:
        combined = not any_of
    else:
        combined = {"or" if any_of else "and": kept}
    if filters.condition == FilterCondition.NOT:
        return not combined if isinstance(combined, bool) else {"not": combined}
    return combined


def _condition(item: MetadataFilter, types: Mapping[str, str] | None) -> dict[str, Any] | bool:
    key, operator = item.key, item.operator
    value: Any = item.value
    kind = (types or {}).get(key)
    if operator == FilterOperator.IS_EMPTY:
        return _empty(key, kind)
    if value is None and operator in (FilterOperator.EQ, FilterOperator.NE):
        return operator == FilterOperator.NE  # as LlamaIndex's own store: no value is None, every one differs
    if kind == "boolean" and operator in TRUTHS:
        value = [_truth(key, v) for v in value] if isinstance(value, list) else _truth(key, value)
    if kind == "integer" and _fraction(value):
        if operator in (FilterOperator.EQ, FilterOperator.NE):
            return operator == FilterOperator.NE
        if operator in RANGES:  # the whole number on its side, which passes the same integers
            value = math.floor(value) if operator in (FilterOperator.GT, FilterOperator.LTE) else math.ceil(value)
    if operator in COMPARISONS:
        return {key: {COMPARISONS[operator]: value}}
    if operator in (FilterOperator.IN, FilterOperator.ANY, FilterOperator.NIN):
        values = list(value) if isinstance(value, list) else [value]
        if kind == "integer":
            values = [v for v in values if not _fraction(v)]
        if not values:  # in no values: no node; not in them: every node
            return operator == FilterOperator.NIN
        among: dict[str, Any] = {key: {"in": values}}
        if kind == "boolean":  # which takes eq and ne alone
            among = {"or": [{key: {"eq": truth}} for truth in dict.fromkeys(values)]}
        return {"not": among} if operator == FilterOperator.NIN else among
    if operator in (FilterOperator.ALL, FilterOperator.CONTAINS, FilterOperator.TEXT_MATCH):
        return {key: {"contains": value}}  # TEXT_MATCH: a substring, case-sensitive, as LlamaIndex matches it
    raise ValueError(f"filter operator {operator.value!r} has no equivalent in the server's filter language")


def _truth(key: str, value: object) -> bool:
    """A boolean field's value as LlamaIndex compares it (``True == 1``): its ``MetadataFilter`` holds no bool."""
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    raise ValueError(
        f"field {key!r} is a boolean field: compare it with 1 (true) or 0 (false), as LlamaIndex's MetadataFilter "
        f"holds no True or False, not {value!r}"
    )


def _fraction(value: object) -> TypeGuard[float]:
    """A number no integer equals."""
    return isinstance(value, float) and not value.is_integer()


def _empty(key: str, kind: str | None) -> dict[str, Any]:
    """``is_empty`` on field ``key`` of type ``kind``: no value, or an empty string or list (as LlamaIndex has it)."""
    if kind == "string":
        return {"or": [{"not": {key: {"prefix": ""}}}, {key: {"eq": ""}}]}  # every string starts with ""
    if kind == "string_list":
        return {"not": {key: {"prefix": ""}}}  # null, or no tag
    if kind == "boolean":
        return {"not": {"or": [{key: {"eq": True}}, {key: {"eq": False}}]}}
    if kind in ORIGINS:
        return {"not": {"or": [{key: {"gte": ORIGINS[kind]}}, {key: {"lt": ORIGINS[kind]}}]}}
    raise ValueError(f"filter operator 'is_empty' needs the type of field {key!r}, which the table does not have")


def _mode(query: VectorStoreQuery) -> VectorStoreQueryMode:
    """The mode ``query`` is searched in: its own (which may be given as its string), but ``hybrid`` with
    ``alpha`` 1 is a vector search and with ``alpha`` 0 a keyword search, as LlamaIndex defines alpha (and
    Weaviate searches): a list of weight 0 would otherwise still add its documents, scored 0, to the fused one."""
    mode = VectorStoreQueryMode(query.mode)
    if mode != VectorStoreQueryMode.HYBRID or query.alpha is None:
        return mode
    if not 0.0 <= query.alpha <= 1.0:
        raise ValueError(f"alpha must be between 0 (keyword search) and 1 (vector search), not {query.alpha}")
    if query.alpha == 1.0:
        return VectorStoreQueryMode.DEFAULT
    return VectorStoreQueryMode.TEXT_SEARCH if query.alpha == 0.0 else mode


def _asked(query: VectorStoreQuery, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The search of ``query`` but its filter: by the query embedding (else the text, embedded by the table's
    encoder); mode ``text_search`` by BM25 over the query text, ``hybrid`` both fused (``alpha`` the vector
    list's weight, ``1 - alpha`` the keyword list's; see :func:`_mode` for 0 and 1), ``mmr`` with the server's
    ``diversity``."""
    given, mode = VectorStoreQueryMode(query.mode), _mode(query)
    if mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID) and query.query_str is None:
        raise ValueError(
            f"query mode {given.value!r} needs a query text"
            + (" (alpha 1 makes it a vector search, which does not)" if given == VectorStoreQueryMode.HYBRID else "")
        )
    if mode in (VectorStoreQueryMode.TEXT_SEARCH, VectorStoreQueryMode.HYBRID):
        if mode == VectorStoreQueryMode.TEXT_SEARCH:
            return {"text": query.query_str, "mode": "keyword"}
        body: dict[str, Any] = {"text": query.query_str, "mode": "hybrid"}
        if query.query_embedding is not None:
            body["vector"] = list(query.query_embedding)
        if query.alpha is not None:
            body["weights"] = {"vector": query.alpha, "keyword": 1.0 - query.alpha}
        return body
    if query.query_embedding is not None:
        body = {"vector": list(query.query_embedding)}
    elif query.query_str is not None:
        body = {"text": query.query_str}  # embedded by the table's encoder
    else:
        raise ValueError("a query needs an embedding or a text")
    if mode == VectorStoreQueryMode.MMR:
        # A retriever's vector_store_kwargs={"mmr_threshold": ...} come as kwargs, as SimpleVectorStore reads them.
        threshold = next((t for t in (query.mmr_threshold, kwargs.get("mmr_threshold")) if t is not None), 0.5)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"mmr_threshold must be between 0 and 1 (1: relevance alone), not {threshold}")
        body["diversity"] = 1.0 - threshold
    elif mode != VectorStoreQueryMode.DEFAULT:
        raise ValueError(f"query mode {mode.value!r} is not supported: use default, mmr, text_search or hybrid")
    return body


class EmbeddingSearchVectorStore(BasePydanticVectorStore):
    stores_text: bool = True
    flat_metadata: bool = False
    _table: str = PrivateAttr()
    _client: Client = PrivateAttr()
    _info: dict[str, Any] | None = PrivateAttr(default=None)
    _async: LoopClient = PrivateAttr()

    def __init__(self, client: Client, table: str, async_client: AsyncClient | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client, self._table = client, table
        self._async = LoopClient(client, async_client)

    @property
    def table(self) -> str:
        return self._table

    @property
    def client(self) -> Client:
        return self._client

    @property
    def async_client(self) -> AsyncClient:
        """The client of the async methods (on the running event loop)."""
        return self._async.get()

    async def aclose(self) -> None:
        """Close the async methods' client, unless it was given."""
        await self._async.aclose()

    def types(self) -> dict[str, str]:
        """The table's fields' types."""
        return _types(self.fields())

    def fields(self) -> dict[str, Any]:
        return dict(self._table_info()["documents"]["fields"])

    async def afields(self) -> dict[str, Any]:
        return dict((await self._atable_info())["documents"]["fields"])

    def _table_info(self) -> dict[str, Any]:
        if self._info is None:
            self._info = self._client.table(self.table)
        return self._info

    async def _atable_info(self) -> dict[str, Any]:
        if self._info is None:
            self._info = await self.async_client.table(self.table)
        return self._info

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        self._client.upsert_many(self.table, _rows(self.table, nodes, self.fields()))
        return [node.node_id for node in nodes]

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        await self.async_client.upsert_many(self.table, _rows(self.table, nodes, await self.afields()))
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self._client.delete_documents(self.table, filter={REF_DOC_ID: ref_doc_id})

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await self.async_client.delete_documents(self.table, filter={REF_DOC_ID: ref_doc_id})

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Delete the nodes ``node_ids``, those ``filters`` match, or (given both) those of ``node_ids`` that
        ``filters`` match (the server's filter on ids and fields)."""
        if filters is None:
            self._client.delete_many(self.table, named(node_ids or []))
        elif (condition := _delete_filter(node_ids, filters, self.types())) is not None:
            self._client.delete_documents(self.table, filter=condition)

    async def adelete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        if filters is None:
            await self.async_client.delete_many(self.table, named(node_ids or []))
        elif (condition := _delete_filter(node_ids, filters, _types(await self.afields()))) is not None:
            await self.async_client.delete_documents(self.table, filter=condition)

    def clear(self) -> None:
        self._client.delete_documents(self.table, filter=EVERY_NODE)

    async def aclear(self) -> None:
        await self.async_client.delete_documents(self.table, filter=EVERY_NODE)

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The nodes ``node_ids`` (those there, in their order), or every node ``filters`` pass (of those
        ``node_ids`` too, by the server's filter on ids), or every node: in the ids' order, the server's pages of
        them (``Client.list_documents``)."""
        if node_ids is None or filters is not None:
            condition = _restricted(node_ids, filters, self.types())
            if condition is False:
                return []
            listed = self._client.list_documents(self.table, filter=None if condition is True else condition)
            return [_node_of(document) for document in listed]
        asked = named(node_ids or [])
        return [_node_of(document) for document in self._client.documents(self.table, asked)["documents"]]

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """:meth:`get_nodes`, awaited."""
        if node_ids is None or filters is not None:
            condition = _restricted(node_ids, filters, _types(await self.afields()))
            if condition is False:
                return []
            listed = await self.async_client.list_documents(self.table, filter=None if condition is True else condition)
            return [_node_of(document) for document in listed]
        asked = named(node_ids or [])
        return [_node_of(document) for document in (await self.async_client.documents(self.table, asked))["documents"]]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        search = _search(query, kwargs, self.types)
        if search is None:
            return _result([])
        k, body = search
        return _result(self._client.search_documents(self.table, k=k, **body).hits)

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        fields = await self.afields() if query.filters is not None else {}
        search = _search(query, kwargs, lambda: _types(fields))
        if search is None:
            return _result([])
        k, body = search
        return _result((await self.async_client.search_documents(self.table, k=k, **body)).hits)


EVERY_NODE = {"not": {"id": "\u0000"}}  # a filter every document passes (of an id none has), of any table


def _types(fields: dict[str, Any]) -> dict[str, str]:
    return {name: field["type"] for name, field in fields.items()}


def _rows(table: str, nodes: Sequence[BaseNode], known: dict[str, Any]) -> list[dict[str, Any]]:
    """The documents to write of ``nodes``, ``known`` the table's fields; a ValueError, before any is written, for
    a node whose metadata or relationships the table would not keep (:func:`~service_client.stored.unkept`)."""
    documents = []
    for i, node in enumerate(nodes):
        metadata = plain(node.metadata)  # NumPy's values as JSON's, which LlamaIndex's dump needs too
        related = f"its relationships ({', '.join(sorted(r.name.lower() for r in node.relationships))})"
        unkept(table, known, f"nodes[{i}] (id {node.node_id!r})", metadata, related if node.relationships else "")
        shown = node.model_copy(update={"metadata": metadata})
        stored = node_to_metadata_dict(shown, remove_text=True, flat_metadata=False)
        fields = {k: v for k, v in metadata.items() if k in known and k not in (METADATA, REF_DOC_ID)}
        if METADATA in known:
            fields[METADATA] = json.dumps(stored, sort_keys=True)
        if REF_DOC_ID in known:
            fields[REF_DOC_ID] = node.ref_doc_id
        document: dict[str, Any] = {
            "id": node.node_id,
            "text": node.get_content(metadata_mode=MetadataMode.NONE),
            "fields": fields,
        }
        if node.embedding is not None:
            document["vector"] = node.embedding
        documents.append(document)
    return documents


def _restricted(
    node_ids: list[str] | None, filters: MetadataFilters | None, types: Mapping[str, str]
) -> dict[str, Any] | bool:
    """The server's filter of the nodes of ``node_ids`` (None: any) that ``filters`` pass: True when every node
    does, False when none does (``types``: the table's fields', read for ``filters`` only)."""
    conditions: list[dict[str, Any]] = []
    if node_ids is not None:
        if not node_ids:
            return False
        conditions.append(among(list(node_ids)))  # the documents' own ids
    condition = True if filters is None else filter_of(filters, types)
    if condition is False:
        return False
    if condition is not True:
        conditions.append(condition)
    return True if not conditions else conditions[0] if len(conditions) == 1 else {"and": conditions}


def _delete_filter(
    node_ids: list[str] | None, filters: MetadataFilters, types: Mapping[str, str]
) -> dict[str, Any] | None:
    """The server's filter of the nodes ``delete_nodes`` deletes; None when no node passes it."""
    condition = _restricted(node_ids, filters, types)
    if condition is True:
        raise ValueError("a filter that passes every node (an empty one): clear() deletes them all")
    return None if condition is False else condition


def _nodes(hits: list[Hit]) -> list[BaseNode]:
    return [_node(hit.id, hit.text, hit.fields) for hit in hits]


def _node_of(document: dict[str, Any]) -> BaseNode:
    return _node(document["id"], document.get("text"), document.get("fields", {}))


def _node(ident: str | int, text: str | None, fields: dict[str, Any]) -> BaseNode:
    metadata = metadata_of(fields)
    if "_node_content" in metadata:  # a node this store wrote
        node = metadata_dict_to_node(metadata, text=text or "")
    else:  # a document written otherwise: its metadata, or its fields
        node = TextNode(text=text or "", metadata=metadata)
    node.id_ = str(ident)
    return node


def _search(
    query: VectorStoreQuery, kwargs: dict[str, Any], types: Callable[[], dict[str, str]]
) -> tuple[int, dict[str, Any]] | None:
    """The ``k`` and body of ``query``'s search (``types``: the table's fields' types, read if its filters need
    them); None when its filters pass no node. A keyword argument other than ``mmr_threshold`` (a retriever's
    ``vector_store_kwargs``) is refused: a misspelt one would otherwise be ignored without a word."""
    if unknown := sorted(set(kwargs) - {"mmr_threshold"}):
        raise TypeError(
            f"query() does not take {', '.join(map(repr, unknown))}: of keyword arguments (a retriever's "
            "vector_store_kwargs) it takes mmr_threshold"
        )
    body, k = _asked(query, kwargs), _k(query)
    # No node_ids is no restriction, as in LlamaIndex's remote stores: an index whose store keeps the text (its
    # own node list empty) makes each retriever with node_ids=[].
    node_ids = query.node_ids or None
    asked = query.filters is not None or node_ids is not None
    condition = _restricted(node_ids, query.filters, {} if query.filters is None else types()) if asked else True
    if condition is False:
        return None
    conditions = [] if condition is True else [condition]
    if query.doc_ids:
        conditions.append({REF_DOC_ID: {"in": list(query.doc_ids)}})
    if conditions:
        body["filter"] = conditions[0] if len(conditions) == 1 else {"and": conditions}
    return k, body


def _k(query: VectorStoreQuery) -> int:
    """How many nodes ``query`` asks for: ``hybrid_top_k`` in mode hybrid and ``sparse_top_k`` in text_search when
    given, as LlamaIndex's stores read them, else ``similarity_top_k``. In mode hybrid ``sparse_top_k`` is the
    keyword list's depth, which the server's lists meet up to ``HYBRID_DEPTH`` (each ``max(k, HYBRID_DEPTH)`` deep):
    a deeper one is a ValueError; the vector modes do not read it, as LlamaIndex's own store."""
    mode = VectorStoreQueryMode(query.mode)
    if mode == VectorStoreQueryMode.TEXT_SEARCH:
        return query.sparse_top_k or query.similarity_top_k
    if mode != VectorStoreQueryMode.HYBRID:
        return query.similarity_top_k
    k = query.hybrid_top_k or query.similarity_top_k
    if query.sparse_top_k is not None and query.sparse_top_k > max(k, HYBRID_DEPTH):
        raise ValueError(
            f"sparse_top_k {query.sparse_top_k} is deeper than the keyword list a hybrid search fuses: max(k, "
            f"{HYBRID_DEPTH}) documents, its k hybrid_top_k, else similarity_top_k"
        )
    return k


def _result(hits: list[Hit]) -> VectorStoreQueryResult:
    return VectorStoreQueryResult(
        nodes=_nodes(hits),
        similarities=[hit.score for hit in hits],
        ids=[str(hit.id) for hit in hits],
    )
