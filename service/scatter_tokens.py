"""The front of a sharded word table: its routes by token (neighbours, similarity, analogies).

Each distinct token of a request is looked up once (``GET <replica>/tokens/{token}?normalized=true&row=true``):
the whole table's match is the exact one, on the shard its hash names (asked first), else the case-folded one of
the lowest row in the whole table (every shard asked, ``scatter_words.resolved``); a token no shard holds is the
404 of the shard its hash names, with that shard's suggestions. Then, from the gathered unit rows, as the engine
computes it:

- ``GET``/``POST .../similarity``: the cosine of two unit rows in float64 (``Table.similarity``,
  ``Table.similarities``);
- ``GET``/``POST .../neighbors`` by token or by positive/negative tokens, ``POST .../analogy`` by 3CosAdd: the
  query is gensim's normalised mean of the unit rows (b + c - a for an analogy; ``Table.mean_query``), searched
  on every shard as a vector, as many hits deeper as the query has rows, which the merge leaves out (by cosine,
  equal cosines by row, as the whole table orders them);
- ``POST .../analogy`` by 3CosMul: a row's score depends only on that row and the three words' rows, so each shard
  is given those rows and scores its own (``POST <replica>/analogy/rows``, ``index.engine.shards.analogy_part``:
  the whole table's arithmetic), three deeper; the lists merge by score, then row, the words' rows left out.

A 422 that says why for what the front cannot answer as the whole table does: a row id (a shard numbers its own
rows), ``compose`` (a word's pieces may lie on several shards), ``restrict`` (the first rows of a table), an
analogy's ``expect`` (a rank among every row of every shard) and a ``k`` within the query's row count of
``max_k``. A batch's item answers in its place, its error too; a shard that does not answer fails the request
(503 ``shard_unavailable``, 504 ``shard_timeout``): no partial answer for a lookup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import quote

import numpy as np
import orjson
from fastapi import Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import Route

from index.engine.door import owner
from index.errors import InvalidQuery
from service.errors import BODY_ERRORS, item_error, responses
from service.http.fastroute import parse_query
from service.respond import FastJSON
from service.scatter import Front, ShardFailed, ShardRefused, failed, kind
from service.scatter_words import WORDS, nearest, query_of, query_vector, resolved, vector_body
from service.schemas.analogy import AnalogyQuery, AnalogyRequest
from service.schemas.common import LIMITS
from service.schemas.neighbors import NeighborsParams, NeighborsQuery, NeighborsRequest
from service.schemas.similarity import SimilarityParams, SimilarityRequest

T = TypeVar("T")
AT_ONCE = 64  # a request's tokens looked up (or batch items scattered) at once: each asks every shard
Refuse = Callable[[Request], Awaitable[Response]]
Found = dict[str, Any]  # a shard's lookup of a token (``GET .../tokens/{token}?row=true``): the whole table's match


class Refused(Exception):
    """An item's error as its envelope (``{"error": {...}}``) with the status a request of it alone answers."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status, self.body = status, body

    @classmethod
    def of(cls, refusal: ShardRefused) -> Refused:
        return cls(refusal.status, orjson.loads(refusal.body))

    def response(self) -> Response:
        return FastJSON(self.body, status_code=self.status)


async def bounded(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Each of ``calls`` awaited, at most :data:`AT_ONCE` at a time (a big batch does not queue thousands of
    requests on the client's connections, where they would wait past their deadline), the answers in order."""
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return await asyncio.gather(*map(one, calls))


class Words:
    """A sharded word table's front: its tokens looked up on its shards, its nearest rows scattered and merged."""

    def __init__(self, front: Front, name: str) -> None:
        self.front, self.name, self.shards = front, name, front.tables[name]

    async def lookup(self, token: str) -> Found | Refused:
        """The whole table's match of ``token``, or the refusal of the shard its hash names. That shard is asked
        first: an exact match stands there alone and wins; else every other shard is asked too (a case-folded match
        of a lower row of the whole table may stand on any)."""
        home = owner(token, len(self.shards))
        answers = {home: await self.ask_token(home, token)}
        first = answers[home]
        if not isinstance(first, ShardRefused) and first["query"]["match"] == "exact":
            return first
        rest = [shard for shard in range(len(self.shards)) if shard != home]
        answers.update(zip(rest, await asyncio.gather(*(self.ask_token(s, token) for s in rest)), strict=True))
        found: list[Found | None] = []
        for answer in answers.values():
            if isinstance(answer, ShardRefused) and answer.status != 404:  # the token itself (too long, ...)
                return Refused.of(answer)
            found.append(None if isinstance(answer, ShardRefused) else answer)
        match = resolved(found)
        if match is None:
            return Refused.of(cast(ShardRefused, first))
        return match

    async def ask_token(self, shard: int, token: str) -> Found | ShardRefused:
        """Shard ``shard``'s match of ``token`` (``GET .../tokens/{token}``), or its refusal; one that does not
        answer fails the request (the token may stand on it: no partial lookup)."""
        path = f"/tokens/{quote(token, safe='')}?normalized=true&row=true"
        try:
            return await self.front.request(shard, self.shards[shard], path, None)
        except ShardFailed as exc:
            raise failed(self.name, exc) from None
        except ShardRefused as refusal:
            return refusal

    async def lookups(self, tokens: Iterable[str]) -> dict[str, Found | Refused]:
        """Each distinct token of ``tokens`` looked up once, all at once."""
        distinct = list(dict.fromkeys(tokens))
        return dict(zip(distinct, await bounded(map(self.lookup, distinct)), strict=True))

    async def nearest(self, vector: np.ndarray, own: set[int], k: int, exact: bool) -> list[dict[str, Any]]:
        """The ``k`` rows nearest the unit ``vector`` in the whole table, its own rows ``own`` left out."""
        return await self.merged("/search", vector_body(vector, self.depth(k, own), exact), own, k)

    async def analogy(self, words: list[Found], own: set[int], k: int, method: str) -> list[dict[str, Any]]:
        """The ``k`` best rows of the whole table for the analogy of the unit rows ``words`` (a, b, c), its words'
        rows ``own`` left out: each shard's best by the same scores (``POST .../analogy/rows``), merged."""
        body = {"a": words[0]["vector"], "b": words[1]["vector"], "c": words[2]["vector"], "method": method}
        return await self.merged("/analogy/rows", {**body, "k": self.depth(k, own)}, own, k)

    def depth(self, k: int, own: set[int]) -> int:
        """How deep each shard is asked: ``k`` and the query's own rows, which the merge leaves out."""
        if k + len(own) > LIMITS.get().max_k:
            raise InvalidQuery(
                f"k: the front of sharded table {self.name!r} asks each shard for k + {len(own)} hits (the query's "
                f"own rows are left out after the merge), at most max_k ({LIMITS.get().max_k}): ask k <= "
                f"{LIMITS.get().max_k - len(own)}"
            )
        return k + len(own)

    async def merged(self, path: str, body: dict[str, Any], own: set[int], k: int) -> list[dict[str, Any]]:
        """Every shard's answer to ``body`` at ``path`` (its ``neighbors``, each with its row in the whole table),
        merged by score, then row: the ``k`` best but the rows ``own``."""
        payload = orjson.dumps(body)
        answers = await asyncio.gather(
            *(self.front.request(i, shard, path, payload) for i, shard in enumerate(self.shards)),
            return_exceptions=True,
        )
        parts: list[dict[str, Any] | None] = []
        for answer in answers:
            if isinstance(answer, ShardFailed):
                raise failed(self.name, answer)
            if isinstance(answer, ShardRefused):
                raise Refused.of(answer)
            if isinstance(answer, BaseException):
                raise answer
            parts.append({"results": [answer]})
        return nearest(own, k, parts)


def found(matches: dict[str, Found | Refused], tokens: Sequence[str]) -> list[Found]:
    """The matches of ``tokens`` in order; the first one missing raises its refusal (as the engine resolves them)."""
    out = []
    for token in tokens:
        match = matches[token]
        if isinstance(match, Refused):
            raise match
        out.append(match)
    return out


def not_here(name: str, what: str, why: str) -> InvalidQuery:
    return InvalidQuery(
        f"{what}: {why}; the front of sharded table {name!r} does not answer it (a server of the whole table does)"
    )


def check_options(name: str, restrict: int | None, compose: str | None = None) -> None:
    if restrict is not None:  # as the one-process server refuses it (index.engine.shards)
        raise InvalidQuery("restrict (the first rows of a table) is not for a sharded table")
    if compose is not None:
        raise not_here(name, "compose", "a word's tokenizer pieces may lie on several shards")


def routes(front: Front, name: str, refuse: Refuse) -> list[Route]:
    """The word routes by token of the sharded table ``name`` (``refuse``: a documents table's answer)."""
    words = Words(front, name)
    prefix = f"/v1/tables/{name}"

    async def is_words() -> bool:
        return await kind(front, name) == WORDS

    async def neighbors_of(
        item: str | NeighborsQuery, k: int, exact: bool, matches: dict[str, Found | Refused]
    ) -> dict[str, Any]:
        """One neighbours query (a token, or positive/negative tokens) as the whole table answers it."""
        if isinstance(item, str):
            item = NeighborsQuery(token=item)
        if item.id is not None:
            raise not_here(name, "id", "a row id is a shard's own")
        if item.token is not None:
            (match,) = found(matches, [item.token])
            rows = [match]
            info: dict[str, Any] = query_of(match)
            positive = 1
        else:
            pos, neg = found(matches, item.positive), found(matches, item.negative)
            rows, positive = pos + neg, len(pos)
            info = {"positive": [query_of(m) for m in pos], "negative": [query_of(m) for m in neg]}
        vector = query_vector(rows, positive)
        own = {int(m["row"]) for m in rows}
        return {"query": info, "neighbors": await words.nearest(vector, own, k, exact)}

    def tokens_of(items: Iterable[str | NeighborsQuery]) -> list[str]:
        out: list[str] = []
        for item in items:
            if isinstance(item, str):
                out.append(item)
            else:
                out += [*([item.token] if item.token is not None else []), *item.positive, *item.negative]
        return out

    async def neighbors_get(request: Request) -> Response:
        if not await is_words():
            return await refuse(request)
        params = parse_query(request, NeighborsParams)
        check_options(name, params.restrict, params.compose)
        item = NeighborsQuery(token=params.token, id=params.id)
        try:
            answer = await neighbors_of(item, params.k, params.exact, await words.lookups(tokens_of([item])))
        except Refused as refused:
            return refused.response()
        return FastJSON(answer)

    async def neighbors_post(request: Request, body: NeighborsRequest) -> Response:
        if not await is_words():
            return await refuse(request)
        check_options(name, body.restrict, body.compose)
        if body.queries is None:
            item = NeighborsQuery(token=body.token, id=body.id, positive=body.positive, negative=body.negative)
            try:
                answer = await neighbors_of(item, body.k, body.exact, await words.lookups(tokens_of([item])))
            except Refused as refused:
                return refused.response()
            return FastJSON(answer)
        matches = await words.lookups(tokens_of(body.queries))

        async def each(query: str | NeighborsQuery) -> dict[str, Any]:
            try:
                return await neighbors_of(query, body.k, body.exact, matches)
            except Refused as refused:
                return refused.body
            except InvalidQuery as exc:
                return item_error(exc)

        return FastJSON({"results": await bounded(map(each, body.queries))})

    async def similarity_get(request: Request) -> Response:
        if not await is_words():
            return await refuse(request)
        params = parse_query(request, SimilarityParams)
        check_options(name, None, params.compose)
        try:
            a, b = found(await words.lookups([params.a, params.b]), [params.a, params.b])
        except Refused as refused:
            return refused.response()
        left, right = (np.asarray(m["vector"], dtype=np.float32).astype(np.float64) for m in (a, b))
        value = float(np.dot(left, right))  # Table.similarity's arithmetic
        info = {"a": query_of(a), "b": query_of(b)}
        return FastJSON({"a": params.a, "b": params.b, "similarity": value, "query": info})

    async def similarity_post(request: Request, body: SimilarityRequest) -> Response:
        if not await is_words():
            return await refuse(request)
        check_options(name, None, body.compose)
        matches = await words.lookups(token for pair in body.pairs for token in pair)
        values: list[float | None] = [None] * len(body.pairs)
        errors: list[dict[str, Any] | None] = [None] * len(body.pairs)
        scored: list[tuple[int, Found, Found]] = []
        for position, pair in enumerate(body.pairs):
            try:
                a, b = found(matches, pair)
                scored.append((position, a, b))
            except Refused as refused:
                errors[position] = refused.body["error"]
        if scored:  # Table.similarities' arithmetic
            left, right = (
                np.asarray([m["vector"] for m in column], dtype=np.float32).astype(np.float64)
                for column in ([a for _, a, _ in scored], [b for _, _, b in scored])
            )
            for (position, _, _), value in zip(scored, np.einsum("ij,ij->i", left, right).tolist(), strict=True):
                values[position] = value
        return FastJSON({"similarities": values, "errors": errors})

    async def analogy_of(
        question: AnalogyQuery, k: int, exact: bool, method: str, matches: dict[str, Found | Refused]
    ) -> Any:
        """One question as the whole table answers it (``index.engine.door``'s checks, in its order)."""
        b, c, a = found(matches, [question.b, question.c, question.a])
        if a["row"] == b["row"] or np.array_equal(np.asarray(a["vector"]), np.asarray(b["vector"])):
            raise InvalidQuery(
                f"the analogy's offset b - a is zero ({question.a!r} and {question.b!r} are the same vector): "
                "give two different words for a and b"
            )
        own = {int(m["row"]) for m in (a, b, c)}
        info = {"a": query_of(a), "b": query_of(b), "c": query_of(c), "method": method}
        if method == "3cosadd":
            return {"query": info, "neighbors": await words.nearest(query_vector([b, c, a], 2), own, k, exact)}
        return {"query": info, "neighbors": await words.analogy([a, b, c], own, k, method)}

    async def analogy(request: Request, body: AnalogyRequest) -> Response:
        if not await is_words():
            return await refuse(request)
        check_options(name, body.restrict)
        questions = body.queries
        if questions is None:
            questions = [
                AnalogyQuery(a=cast(str, body.a), b=cast(str, body.b), c=cast(str, body.c), expect=body.expect)
            ]
        if any(q.expect is not None for q in questions):
            raise not_here(name, "expect", "the expected answer's rank is among every row of every shard")
        matches = await words.lookups(t for q in questions for t in (q.b, q.c, q.a))
        if body.queries is None:
            try:
                return FastJSON(await analogy_of(questions[0], body.k, body.exact, body.method, matches))
            except Refused as refused:
                return refused.response()

        async def each(question: AnalogyQuery) -> dict[str, Any]:
            try:
                answer: dict[str, Any] = await analogy_of(question, body.k, body.exact, body.method, matches)
                return answer
            except Refused as refused:
                return refused.body
            except InvalidQuery as exc:
                return item_error(exc)

        return FastJSON({"results": await bounded(map(each, questions))})

    def post(path: str, handler: Callable[..., Awaitable[Response]]) -> APIRoute:
        return APIRoute(
            f"{prefix}/{path}",
            handler,
            methods=["POST"],
            responses=responses(*BODY_ERRORS, "shard_unavailable", "shard_timeout"),
            include_in_schema=False,
        )

    return [
        Route(f"{prefix}/neighbors", neighbors_get, methods=["GET"]),
        post("neighbors", neighbors_post),
        Route(f"{prefix}/similarity", similarity_get, methods=["GET"]),
        post("similarity", similarity_post),
        post("analogy", analogy),
    ]
