"""A LangChain ``VectorStore`` over a documents table of an embedding-search server (``pip install
embedding-search[langchain]``).

    from service_client import Client
    from service_client.langchain import EmbeddingSearchStore

    store = EmbeddingSearchStore(Client(url, api_key=WRITE_KEY), "notes", embedding=embeddings)
    store.add_texts(["a note"], metadatas=[{"folder": "inbox"}], ids=["note-1"])
    store.similarity_search("note", k=4, filter={"folder": "inbox"})

Documents are written with ``POST .../documents`` (upserts by id) and deleted with ``.../documents/delete``; a
search is ``POST .../search``, seen at once (``max_marginal_relevance_search``: LangChain's MMR over the
``fetch_k`` nearest documents, which the search answers with their unit vectors). A document's metadata is kept
whole, as JSON, in the table's string field ``metadata`` (so it comes back as it went in, whatever its keys); a
metadata key that is also a field of the table is written to that field too, where ``filter`` (the server's
filter language) can test it; a table without that field keeps only what its fields hold (other keys are a
ValueError before any text is embedded). Ids are strings (a table of string ids).
Without an ``embedding``, texts are embedded by the table's encoder on the server; with one, a write the client
refuses before any request (an id twice, a text or id over the server's limits, :meth:`Client.upsert_many`) is
refused before any text is embedded.

The async methods (``aadd_texts``, ``asimilarity_search``, ``adelete``, ...) are the store's own, over an
:class:`~service_client.AsyncClient` like ``client`` (made on first use on each event loop; ``aclose()`` closes
it), or the ``async_client`` given: an async application's searches wait on no thread.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from service_client import ApiError, AsyncClient, Client, Hit
from service_client.async_client import LoopClient
from service_client.calls import check_unembedded
from service_client.stored import METADATA, among, metadata_of, named, plain, unkept


def _max_k(error: ApiError) -> int | None:
    """The server's max_k when ``error`` refuses a search's ``k`` above it, else None."""
    for detail in error.details.get("details", []) if error.code == "invalid_request" else []:
        found = re.fullmatch(r"k must be at most (\d+) .*", str(detail.get("message", "")))
        if detail.get("loc", [])[-1:] == ["k"] and found:
            return int(found.group(1))
    return None


def _fetch_k_refused(error: ApiError, fetch_k: int) -> ApiError:
    """A search refused for its ``k`` above the server's max_k as the error of MMR's ``fetch_k``, else ``error``."""
    limit = _max_k(error)
    if limit is None:
        return error
    message = f"fetch_k must be at most {limit} (the server's max_k), got {fetch_k}"
    return ApiError(error.status, error.code, message, error.details)


def _ids(texts: list[str], metadatas: list[dict[str, Any]] | None, ids: list[str] | None) -> list[str]:
    """The ids of the texts to add (a new uuid for one not given: None or ``""``, as LangChain's own stores have it),
    checked one a text with the metadatas."""
    metadatas = metadatas or [{} for _ in texts]
    ids = (
        [str(uuid.uuid4()) if i is None or i == "" else str(i) for i in ids]
        if ids
        else [str(uuid.uuid4()) for _ in texts]
    )
    if not len(texts) == len(metadatas) == len(ids):  # before the texts are embedded
        raise ValueError(f"texts: {len(texts)}, metadatas: {len(metadatas)}, ids: {len(ids)}: give one of each a text")
    return ids


def _embedded(documents: list[dict[str, Any]], vectors: list[list[float]]) -> None:
    """Give each of ``documents`` its vector, of an embedding's ``embed_documents`` of their texts."""
    for document, vector in zip(documents, vectors, strict=True):
        document["vector"] = vector


def _delete_filter(ids: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The server's filter of what a delete given ``filter=`` deletes (of ``ids`` too, given them: the filter on
    the documents' ids); None for a delete by ids alone."""
    spec: dict[str, Any] | None = kwargs.get("filter")
    if ids is None and spec is None:
        raise ValueError("delete needs ids or a filter=")
    return spec if ids is None or spec is None else {"and": [among(list(ids)), spec]}


OPTIONS, MMR_OPTIONS = "k and filter=", "k, fetch_k, lambda_mult and filter="  # what a search takes


def _no_options(method: str, kwargs: dict[str, Any], takes: str = OPTIONS) -> None:
    """Refuse the keyword arguments a search does not read (``filters=``, Chroma's ``where=``, a
    ``score_threshold`` outside the relevance searches), which it would otherwise ignore without a word."""
    if kwargs:
        raise TypeError(
            f"{method}() does not take {', '.join(map(repr, sorted(kwargs)))}: it takes {takes} (in the server's "
            "filter language); a score_threshold goes to similarity_search_with_relevance_scores (a retriever's "
            "search_type='similarity_score_threshold')"
        )


class EmbeddingSearchStore(VectorStore):
    def __init__(
        self,
        client: Client,
        table: str,
        embedding: Embeddings | None = None,
        async_client: AsyncClient | None = None,
    ) -> None:
        self.client = client
        self.table = table
        self.embedding = embedding
        self._documents: dict[str, Any] | None = None
        self._async = LoopClient(client, async_client)

    @property
    def async_client(self) -> AsyncClient:
        """The client of the async methods (on the running event loop)."""
        return self._async.get()

    async def aclose(self) -> None:
        """Close the async methods' client, unless it was given."""
        await self._async.aclose()

    @property
    def embeddings(self) -> Embeddings | None:
        return self.embedding

    def documents(self) -> dict[str, Any]:
        """The table's ``documents`` description: its fields, its encoder, ... (read once)."""
        if self._documents is None:
            self._documents = dict(self.client.table(self.table)["documents"])
        return self._documents

    async def adocuments(self) -> dict[str, Any]:
        """:meth:`documents`, awaited."""
        if self._documents is None:
            self._documents = dict((await self.async_client.table(self.table))["documents"])
        return self._documents

    def fields(self) -> dict[str, Any]:
        """The table's fields and their types."""
        fields: dict[str, Any] = self.documents()["fields"]
        return fields

    def _fields(
        self, table: dict[str, Any], texts: list[str], ids: list[str], metadatas: list[dict[str, Any]] | None
    ) -> list[dict[str, Any]]:
        """Each text's fields to write, ``table`` the table's ``documents`` description: its metadata's keys that
        are fields, and the whole metadata as JSON in ``metadata``; a ValueError, before any text is embedded,
        for metadata the table would not keep (:func:`~service_client.stored.unkept`)."""
        known, rows = table["fields"], []
        for i, (ident, metadata) in enumerate(zip(ids, metadatas or [{} for _ in texts], strict=True)):
            metadata = plain(metadata)
            unkept(self.table, known, f"metadatas[{i}] (id {ident!r})", metadata)
            fields = {name: value for name, value in metadata.items() if name in known and name != METADATA}
            if METADATA in known:
                fields[METADATA] = json.dumps(metadata, sort_keys=True)
            rows.append(fields)
        return rows

    @staticmethod
    def _rows(ids: list[str], texts: list[str], fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The documents to write of the texts, without their vectors (:func:`_embedded`)."""
        return [
            {"id": ident, "text": text, "fields": values}
            for ident, text, values in zip(ids, texts, fields, strict=True)
        ]

    def _document(self, hit: Hit | dict[str, Any]) -> Document:
        ident, text, fields = (
            (hit.id, hit.text, hit.fields)
            if isinstance(hit, Hit)
            else (hit["id"], hit.get("text"), hit.get("fields", {}))
        )
        return Document(id=str(ident), page_content=text or "", metadata=metadata_of(fields))

    # ------------------------------------------------------------------------------------------ writes
    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        texts = list(texts)
        ids = _ids(texts, metadatas, ids)
        rows = self._rows(ids, texts, self._fields(self.documents(), texts, ids, metadatas))
        if self.embedding is not None:
            check_unembedded(rows, self.client.limits())  # a write refused pays no embedding
            _embedded(rows, self.embedding.embed_documents(texts))
        self.client.upsert_many(self.table, rows)
        return ids

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        texts = list(texts)
        ids = _ids(texts, metadatas, ids)
        rows = self._rows(ids, texts, self._fields(await self.adocuments(), texts, ids, metadatas))
        if self.embedding is not None:
            check_unembedded(rows, await self.async_client.limits())
            _embedded(rows, await self.embedding.aembed_documents(texts))
        await self.async_client.upsert_many(self.table, rows)
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete by ids (ids not there are no error, nor ids the server refuses as ids), by ``filter=`` (the
        server's filter language), or (given both) the documents of ``ids`` that pass the filter."""
        spec = _delete_filter(ids, kwargs)
        if spec is None:
            self.client.delete_many(self.table, named(ids or []))
        elif ids != []:  # of no ids, none to delete
            self.client.delete_documents(self.table, filter=spec)
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        spec = _delete_filter(ids, kwargs)
        if spec is None:
            await self.async_client.delete_many(self.table, named(ids or []))
        elif ids != []:  # of no ids, none to delete
            await self.async_client.delete_documents(self.table, filter=spec)
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents of ``ids`` that are there, in their order (``POST .../documents/get``, ``READ_DOCUMENTS``
        ids a request, fewer if the server's ``max_batch`` is: :meth:`Client.documents`); an id the server refuses
        as an id (empty, or too long) names none."""
        found = self.client.documents(self.table, named(ids))
        return [self._document(document) for document in found["documents"]]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """:meth:`get_by_ids`, awaited."""
        found = await self.async_client.documents(self.table, named(ids))
        return [self._document(document) for document in found["documents"]]

    # ----------------------------------------------------------------------------------------- searches
    @staticmethod
    def _filtered(query: dict[str, Any], filter: dict[str, Any] | None) -> dict[str, Any]:
        return {**query, "filter": filter} if filter else query  # an empty filter is none

    def _hits(self, query: dict[str, Any], k: int, filter: dict[str, Any] | None) -> list[Hit]:
        return self.client.search_documents(self.table, k=k, **self._filtered(query, filter)).hits

    async def _ahits(self, query: dict[str, Any], k: int, filter: dict[str, Any] | None) -> list[Hit]:
        return (await self.async_client.search_documents(self.table, k=k, **self._filtered(query, filter))).hits

    def _scored(self, hits: list[Hit]) -> list[tuple[Document, float]]:
        return [(self._document(hit), hit.score) for hit in hits]

    def _search(self, query: dict[str, Any], k: int, filter: dict[str, Any] | None) -> list[tuple[Document, float]]:
        return self._scored(self._hits(query, k, filter))

    def _query(self, text: str) -> dict[str, Any]:
        if self.embedding is None:
            return {"text": text}
        return {"vector": self.embedding.embed_query(text)}

    async def _aquery(self, text: str) -> dict[str, Any]:
        if self.embedding is None:
            return {"text": text}
        return {"vector": await self.embedding.aembed_query(text)}

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        _no_options("similarity_search", kwargs)
        return [document for document, _ in self.similarity_search_with_score(query, k, filter)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest documents and their cosine similarity (higher is nearer)."""
        _no_options("similarity_search_with_score", kwargs)
        return self._search(self._query(query), k, filter)

    async def asimilarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        _no_options("asimilarity_search", kwargs)
        return [document for document, _ in await self.asimilarity_search_with_score(query, k, filter)]

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        _no_options("asimilarity_search_with_score", kwargs)
        return self._scored(await self._ahits(await self._aquery(query), k, filter))

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        _no_options("similarity_search_by_vector", kwargs)
        return [document for document, _ in self.similarity_search_by_vector_with_score(embedding, k, filter)]

    def similarity_search_by_vector_with_score(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None
    ) -> list[tuple[Document, float]]:
        return self._search({"vector": list(embedding)}, k, filter)

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        _no_options("asimilarity_search_by_vector", kwargs)
        return [document for document, _ in self._scored(await self._ahits({"vector": list(embedding)}, k, filter))]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """LangChain's MMR over the ``fetch_k`` nearest documents (without an ``embedding``, the query is embedded
        by the table's encoder)."""
        _no_options("max_marginal_relevance_search", kwargs, MMR_OPTIONS)
        vector = self._embed_query(query)
        return self.max_marginal_relevance_search_by_vector(vector, k, fetch_k, lambda_mult, filter)

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        _no_options("amax_marginal_relevance_search", kwargs, MMR_OPTIONS)
        vector = await self._aembed_query(query)
        return await self.amax_marginal_relevance_search_by_vector(vector, k, fetch_k, lambda_mult, filter)

    def _embed_query(self, text: str) -> list[float]:
        """``text``'s vector: the ``embedding``'s, else the table's encoder's as its searches embed a query text."""
        if self.embedding is not None:
            return self.embedding.embed_query(text)
        encoder = self._encoder(self.documents())
        return self.client.embed(encoder["table"], [text], pooling=encoder.get("pooling"))[0]

    async def _aembed_query(self, text: str) -> list[float]:
        if self.embedding is not None:
            return await self.embedding.aembed_query(text)
        encoder = self._encoder(await self.adocuments())
        return (await self.async_client.embed(encoder["table"], [text], pooling=encoder.get("pooling")))[0]

    def _encoder(self, table: dict[str, Any]) -> dict[str, Any]:
        """The table's encoder, which embeds a query text as its searches do."""
        encoder: dict[str, Any] | None = table["encoder"]
        if encoder is None:
            raise ValueError(f"table {self.table!r} records no encoder: give the store an embedding")
        return encoder

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """``maximal_marginal_relevance`` over the ``fetch_k`` nearest documents' unit vectors (the search's
        ``include``), as LangChain's own stores choose."""
        _no_options("max_marginal_relevance_search_by_vector", kwargs, MMR_OPTIONS)
        try:
            hits = self._hits({"vector": list(embedding), "include": ["vector"]}, fetch_k, filter)
        except ApiError as error:
            raise _fetch_k_refused(error, fetch_k) from None
        return self._chosen(embedding, hits, k, lambda_mult)

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        _no_options("amax_marginal_relevance_search_by_vector", kwargs, MMR_OPTIONS)
        try:
            hits = await self._ahits({"vector": list(embedding), "include": ["vector"]}, fetch_k, filter)
        except ApiError as error:
            raise _fetch_k_refused(error, fetch_k) from None
        return self._chosen(embedding, hits, k, lambda_mult)

    def _chosen(self, embedding: list[float], hits: list[Hit], k: int, lambda_mult: float) -> list[Document]:
        pairs = [(hit, hit.vector) for hit in hits if hit.vector is not None]  # each hit's, as asked
        chosen = maximal_marginal_relevance(np.array(embedding), [vector for _, vector in pairs], lambda_mult, k)
        return [self._document(pairs[i][0]) for i in chosen]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        # The cosine in [-1, 1] to a relevance in [0, 1]; a float32 cosine of a vector with itself can exceed 1.
        return lambda cosine: min(1.0, max(0.0, (cosine + 1.0) / 2.0))

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> EmbeddingSearchStore:
        """A store over ``table=`` of ``client=`` (an existing documents table; ``async_client=`` optional),
        ``texts`` added to it."""
        if "client" not in kwargs or "table" not in kwargs:
            raise TypeError("from_texts needs client= (a service_client.Client) and table= (a documents table)")
        if unknown := sorted(set(kwargs) - {"client", "table", "async_client"}):
            raise TypeError(
                f"from_texts() does not take {', '.join(map(repr, unknown))}: it takes client=, table= "
                "and async_client="
            )
        store = cls(kwargs["client"], kwargs["table"], embedding, kwargs.get("async_client"))
        store.add_texts(texts, metadatas, ids=ids)
        return store
