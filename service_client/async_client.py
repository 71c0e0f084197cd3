"""The asynchronous client (``from service_client import AsyncClient``), on ``httpx.AsyncClient``: every call of
:class:`~service_client.Client`, with the same arguments, answers, errors and retries, awaited (``aclose`` for its
``close``: closing an ``httpx.AsyncClient`` is awaited). Both clients carry the same descriptions of the calls
(:mod:`service_client.calls`); each method's docstring is its ``Client`` twin's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import httpx
import numpy as np

from service_client import calls, runs
from service_client.calls import MapMethod, Method, retry_wait
from service_client.maps import MapColours
from service_client.request import Call, Request
from service_client.runs import Known
from service_client.shapes import (
    ApiError,
    Embedded,
    Hits,
    Neighbor,
    Piece,
    Projection,
    T,
    TableInfo,
    _no_answer,
    encodable,
    server_address,
)

if TYPE_CHECKING:
    from service_client import Client


class AsyncClient:
    """``async with AsyncClient(url) as api: await api.search_documents(...)``; ``options`` as :class:`Client`'s.
    An ``httpx.AsyncClient`` belongs to the event loop it first runs on: make one for each loop."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        http: httpx.AsyncClient | None = None,
        api_key: str | None = None,
        retries: int = 2,
    ) -> None:
        """As :class:`~service_client.Client`'s: ``http``, an ``httpx.AsyncClient`` of the caller's, who closes
        it (:meth:`aclose` does not)."""
        self.retries = retries
        self._known = Known()  # the server's limits and tables' rows, read once (again when lowered): runs.Known
        self._owned = http is None
        self.http = http or httpx.AsyncClient(base_url=server_address(base_url), timeout=timeout)
        if api_key:
            self.http.headers["X-API-Key"] = api_key

    @classmethod
    def like(cls, client: Client) -> AsyncClient:
        """An asynchronous client to the server of ``client`` (a :class:`~service_client.Client`): its address,
        headers (its key), timeout and retries."""
        http = client.http
        made = cls(str(http.base_url), retries=client.retries)
        made._known = client._known  # the same server's limits
        made.http.headers.update(http.headers)
        made.http.timeout = http.timeout
        return made

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self.http.aclose()

    async def _run(self, call: Call[T]) -> T:
        """``call`` carried through: each request it makes sent, its answer handed back to it."""
        answer = None
        with encodable():
            while True:
                try:
                    request = call.send(answer)
                except StopIteration as done:
                    return cast(T, done.value)
                answer = await self._request(request)

    async def _request(self, request: Request) -> Any:
        """The request's answer, after the retries an ``overloaded`` answer takes."""
        response = await self._once(request)
        for _ in range(self.retries):
            wait = retry_wait(response)
            if wait is None:
                break
            await asyncio.sleep(wait)
            response = await self._once(request)
        return request.answer(response)

    async def _once(self, request: Request) -> httpx.Response:
        try:
            return await self.http.request(request.method, request.path, **request.arguments())
        except httpx.TransportError as exc:
            raise _no_answer(exc, self._owned) from exc

    # --------------------------------------------------------------------------------------- server
    async def ready(self) -> bool:
        try:
            return (await self.http.get("/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    async def reload(self) -> dict[str, Any]:
        return await self._run(calls.reload())

    async def limits(self) -> dict[str, Any]:
        return await self._run(runs.limits(self._known))

    async def tables(self) -> list[TableInfo]:
        return await self._run(calls.tables())

    async def table(self, table: str) -> dict[str, Any]:
        return await self._run(calls.table(table))

    async def vector(self, table: str, token: str, normalized: bool = False) -> list[float]:
        return await self._run(calls.vector(table, token, normalized))

    async def vector_of_id(self, table: str, id: int, normalized: bool = False) -> list[float]:
        return await self._run(calls.vector_of_id(table, id, normalized))

    async def tokenize(self, table: str, text: str) -> list[Piece]:
        return await self._run(calls.tokenize(table, text))

    # -------------------------------------------------------------------------------------- queries
    async def neighbors(self, table: str, token: str, k: int = 10, **options: Any) -> list[Neighbor]:
        return await self._run(calls.neighbors(table, token, k, options))

    async def most_similar(
        self, table: str, positive: Sequence[str], negative: Sequence[str] = (), k: int = 10, **options: Any
    ) -> list[Neighbor]:
        return await self._run(calls.most_similar(table, positive, negative, k, options))

    async def neighbors_batch(
        self, table: str, queries: Sequence[str | dict[str, Any]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        return await self._run(calls.neighbors_batch(table, queries, k, options, self._known))

    async def similarity(self, table: str, a: str, b: str) -> float:
        return await self._run(calls.similarity(table, a, b))

    async def similarities(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        return await self._run(calls.similarities(table, pairs, self._known))

    async def similarity_batch(
        self, table: str, pairs: Sequence[tuple[str, str]], **options: Any
    ) -> list[float | ApiError]:
        return await self._run(calls.similarity_batch(table, pairs, options, self._known))

    async def analogy(
        self, table: str, a: str, b: str, c: str, k: int = 10, method: Method = "3cosadd", **options: Any
    ) -> list[Neighbor]:
        return await self._run(calls.analogy(table, a, b, c, k, method, options))

    async def analogies(
        self,
        table: str,
        questions: Sequence[tuple[str, str, str]],
        k: int = 10,
        method: Method = "3cosadd",
        **options: Any,
    ) -> list[list[Neighbor] | ApiError]:
        return await self._run(calls.analogies(table, questions, k, method, options, self._known))

    async def search(self, table: str, vector: Sequence[float], k: int = 10, **options: Any) -> list[Neighbor]:
        return await self._run(calls.search(table, vector, k, options))

    async def search_batch(
        self, table: str, vectors: Sequence[Sequence[float]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        return await self._run(calls.search_batch(table, vectors, k, options, self._known))

    async def search_documents(self, table: str, k: int = 10, **query: Any) -> Hits:
        return await self._run(calls.search_documents(table, k, query))

    async def search_documents_batch(
        self, table: str, queries: Sequence[dict[str, Any]], k: int = 10, **options: Any
    ) -> list[Hits | ApiError]:
        return await self._run(calls.search_documents_batch(table, queries, k, options, self._known))

    async def document(
        self,
        table: str,
        id: str | int,
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        return await self._run(calls.document(table, id, vector, normalized, fields))

    async def documents(
        self,
        table: str,
        ids: Sequence[str | int],
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        return await self._run(calls.documents(table, ids, vector, normalized, fields, self._known))

    async def scroll_documents(
        self,
        table: str,
        filter: dict[str, Any] | None = None,
        limit: int | None = None,
        after: str | int | None = None,
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        return await self._run(calls.scroll_documents(table, filter, limit, after, vector, normalized, fields))

    async def list_documents(
        self,
        table: str,
        filter: dict[str, Any] | None = None,
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        return await self._run(calls.list_documents(table, filter, vector, normalized, fields, self._known))

    async def fields(self, table: str) -> dict[str, Any]:
        return await self._run(calls.fields(table))

    # ---------------------------------------------------------------------------------------- writes
    async def upsert_documents(self, table: str, documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return await self._run(calls.upsert_documents(table, documents))

    async def upsert_many(self, table: str, documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return await self._run(calls.upsert_many(table, documents, self._known))

    async def delete_many(self, table: str, ids: Sequence[str | int]) -> list[dict[str, Any]]:
        return await self._run(calls.delete_many(table, ids, self._known))

    async def delete_documents(
        self, table: str, ids: Sequence[str | int] | None = None, filter: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self._run(calls.delete_documents(table, ids, filter))

    async def delete_document(self, table: str, id: str | int) -> dict[str, Any]:
        return await self._run(calls.delete_document(table, id))

    async def embed(self, table: str, texts: Sequence[str], pooling: str | None = None) -> list[list[float]]:
        return (await self._run(calls.embed_details(table, texts, pooling, self._known))).vectors

    async def embed_details(self, table: str, texts: Sequence[str], pooling: str | None = None) -> Embedded:
        return await self._run(calls.embed_details(table, texts, pooling, self._known))

    async def contextual(
        self, table: str, texts: Sequence[str], token: str | None = None, k: int = 5
    ) -> dict[str, Any]:
        return await self._run(calls.contextual(table, texts, token, k))

    async def project(
        self,
        table: str,
        tokens: Sequence[str],
        skip_unknown: bool = False,
        method: Literal["pca", "axes", "tsne", "umap"] = "pca",
        **options: Any,
    ) -> Projection:
        return await self._run(calls.project(table, tokens, skip_unknown, method, options))

    # ---------------------------------------------------------------------------------- diagnostics
    async def doesnt_match(self, table: str, words: Sequence[str], skip_unknown: bool = False) -> str:
        return await self._run(calls.doesnt_match(table, words, skip_unknown))

    async def doesnt_match_batch(
        self, table: str, queries: Sequence[Sequence[str]], skip_unknown: bool = False
    ) -> list[str | ApiError]:
        return await self._run(calls.doesnt_match_batch(table, queries, skip_unknown, self._known))

    async def rank(self, table: str, a: str, b: str) -> int:
        return await self._run(calls.rank(table, a, b))

    async def ranks(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        return await self._run(calls.ranks(table, pairs, self._known))

    async def rank_batch(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[int | ApiError]:
        return await self._run(calls.rank_batch(table, pairs, self._known))

    async def closer_than(
        self, table: str, a: str, b: str, limit: int = 100, order: Literal["index", "score"] = "index"
    ) -> tuple[int, list[Neighbor]]:
        return await self._run(calls.closer_than(table, a, b, limit, order))

    async def n_similarity(self, table: str, a: Sequence[str], b: Sequence[str], skip_unknown: bool = False) -> float:
        return await self._run(calls.n_similarity(table, a, b, skip_unknown))

    async def n_similarity_batch(
        self, table: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], skip_unknown: bool = False
    ) -> list[float | ApiError]:
        return await self._run(calls.n_similarity_batch(table, pairs, skip_unknown, self._known))

    async def expected_rank(
        self, table: str, a: str, b: str, c: str, expect: str, method: Method = "3cosadd", **options: Any
    ) -> dict[str, Any]:
        return await self._run(calls.expected_rank(table, a, b, c, expect, method, options))

    async def compare(self, first: str, second: str, token: str, k: int = 10, **options: Any) -> dict[str, Any]:
        return await self._run(calls.compare(first, second, token, k, options))

    async def compare_batch(
        self, first: str, second: str, tokens: Sequence[str], k: int = 10, **options: Any
    ) -> list[dict[str, Any] | ApiError]:
        return await self._run(calls.compare_batch(first, second, tokens, k, options, self._known))

    # ------------------------------------------------------------------------------ map and export
    async def map_info(self, table: str, method: MapMethod = "pca") -> dict[str, Any]:
        return await self._run(calls.map_info(table, method))

    async def map_points(self, table: str, method: MapMethod = "pca") -> np.ndarray:
        return await self._run(calls.map_points(table, method))

    async def map_labels(self, table: str) -> list[str]:
        return await self._run(calls.map_labels(table))

    async def map_colours(self, table: str, column: str) -> MapColours:
        return await self._run(calls.map_colours(table, column))

    async def export(
        self, table: str, rows: Sequence[str | int | dict[str, Any]], file: Literal["vectors", "metadata"]
    ) -> str:
        return await self._run(calls.export(table, rows, file))


class LoopClient:
    """What a vector store holding a :class:`~service_client.Client` awaits: an :class:`AsyncClient` like it, made
    on first use on each event loop (an ``httpx.AsyncClient`` belongs to the loop it runs on, and an application
    may run several, one after the other); or the caller's own ``given`` one, which the caller closes."""

    def __init__(self, client: Client, given: AsyncClient | None = None) -> None:
        self._client = client
        self._given = given
        self._made: AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> AsyncClient:
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._made is None or self._loop is not loop:  # the last loop's client, if any, went with its loop
            self._made, self._loop = AsyncClient.like(self._client), loop
        return self._made

    async def aclose(self) -> None:
        """Close the client made on the running loop (not a given one; one of a loop gone went with it)."""
        made, loop, self._made, self._loop = self._made, self._loop, None, None
        if made is not None and loop is asyncio.get_running_loop():
            await made.aclose()
