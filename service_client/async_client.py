"""The asynchronous client (``from service_client import AsyncClient``), on ``httpx.AsyncClient``: the calls of
:class:`~service_client.Client` an async application makes most (the documents table's, the LangChain and
LlamaIndex stores', and the common reads), with the same arguments, answers, errors and retries, awaited. Both
clients carry the same descriptions of the calls (:mod:`service_client.calls`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

import httpx

from service_client import calls
from service_client.calls import Call, Request, retry_wait
from service_client.shapes import ApiError, Embedded, Hits, Neighbor, T, TableInfo, _no_answer

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
        self._owned = http is None
        self.http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        if api_key:
            self.http.headers["X-API-Key"] = api_key

    @classmethod
    def like(cls, client: Client) -> AsyncClient:
        """An asynchronous client to the server of ``client`` (a :class:`~service_client.Client`): its address,
        headers (its key), timeout and retries."""
        http = client.http
        made = cls(str(http.base_url), retries=client.retries)
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
            raise _no_answer(exc) from exc

    # --------------------------------------------------------------------------------------- server
    async def ready(self) -> bool:
        """Whether every table is loaded (``GET /readyz``); False too while the server cannot be reached."""
        try:
            return (await self.http.get("/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    async def tables(self) -> list[TableInfo]:
        return await self._run(calls.tables())

    async def table(self, table: str) -> dict[str, Any]:
        return await self._run(calls.table(table))

    async def vector(self, table: str, token: str, normalized: bool = False) -> list[float]:
        return await self._run(calls.vector(table, token, normalized))

    # -------------------------------------------------------------------------------------- queries
    async def neighbors(self, table: str, token: str, k: int = 10, **options: Any) -> list[Neighbor]:
        return await self._run(calls.neighbors(table, token, k, options))

    async def neighbors_batch(
        self, table: str, queries: Sequence[str | dict[str, Any]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        return await self._run(calls.neighbors_batch(table, queries, k, options))

    async def similarity(self, table: str, a: str, b: str) -> float:
        return await self._run(calls.similarity(table, a, b))

    async def search(self, table: str, vector: Sequence[float], k: int = 10, **options: Any) -> list[Neighbor]:
        return await self._run(calls.search(table, vector, k, options))

    async def search_batch(
        self, table: str, vectors: Sequence[Sequence[float]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        return await self._run(calls.search_batch(table, vectors, k, options))

    async def search_documents(self, table: str, k: int = 10, **query: Any) -> Hits:
        return await self._run(calls.search_documents(table, k, query))

    async def search_documents_batch(
        self, table: str, queries: Sequence[dict[str, Any]], k: int = 10, **options: Any
    ) -> list[Hits | ApiError]:
        return await self._run(calls.search_documents_batch(table, queries, k, options))

    async def document(
        self,
        table: str,
        id: str | int,
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        return await self._run(calls.document(table, id, vector, normalized, fields))

    async def fields(self, table: str) -> dict[str, Any]:
        return await self._run(calls.fields(table))

    async def embed(self, table: str, texts: Sequence[str], pooling: str | None = None) -> list[list[float]]:
        return (await self._run(calls.embed_details(table, texts, pooling))).vectors

    async def embed_details(self, table: str, texts: Sequence[str], pooling: str | None = None) -> Embedded:
        return await self._run(calls.embed_details(table, texts, pooling))

    # ---------------------------------------------------------------------------------------- writes
    async def upsert_documents(self, table: str, documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return await self._run(calls.upsert_documents(table, documents))

    async def upsert_many(self, table: str, documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return await self._run(calls.upsert_many(table, documents))

    async def delete_many(self, table: str, ids: Sequence[str | int]) -> list[dict[str, Any]]:
        return await self._run(calls.delete_many(table, ids))

    async def delete_documents(
        self, table: str, ids: Sequence[str | int] | None = None, filter: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self._run(calls.delete_documents(table, ids, filter))

    async def delete_document(self, table: str, id: str | int) -> dict[str, Any]:
        return await self._run(calls.delete_document(table, id))


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


async def found_documents(reads: Iterable[Awaitable[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The documents ``reads`` (:meth:`AsyncClient.document` calls) find, read at once, in their order: one that
    is not there (``unknown_document``) left out, any other error raised."""
    answers = await asyncio.gather(*reads, return_exceptions=True)
    for answer in answers:
        if isinstance(answer, BaseException) and not (
            isinstance(answer, ApiError) and answer.code == "unknown_document"
        ):
            raise answer
    return [answer for answer in answers if not isinstance(answer, BaseException)]
