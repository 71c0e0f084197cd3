"""The front of a sharded word table: its routes by token or row id (neighbours, similarity, analogies); and
``GET .../ids/{id}`` of a sharded table of either kind (a documents table's first row is the explorer's first
document), answered as the whole table answers it from the shard that holds that row (below).

Each distinct token of a request is looked up once (``GET <replica>/tokens/{token}?normalized=true&row=true``):
the whole table's match is the token's own label, on the shard its hash names (asked first), else the exact one of
its composed, then decomposed spelling, else the case-folded one of the lowest row in the whole table (every shard
asked, ``scatter_words.resolved``). A token no shard holds is the whole table's 404, with the whole table's
suggestions: every shard's candidates (``GET <replica>/suggestions/{token}``, ``index.engine.shards.suggestion_part``)
merged as the engine ranks its own (``merged_suggestions``). A row id is a
row of the whole table: every shard is asked for it (``GET <replica>/rows/{row}``), the one holding it answers; a
row no shard holds is the whole table's 404 (its range from the shards' row counts). Then, from the gathered unit
rows, as the engine computes it:

- ``GET``/``POST .../similarity``: the cosine of two unit rows in float64 (``Table.similarity``,
  ``Table.similarities``);
- ``GET``/``POST .../neighbors`` by token, row id or positive/negative tokens, ``POST .../analogy`` by 3CosAdd: the
  query is gensim's normalised mean of the unit rows (b + c - a for an analogy; ``Table.mean_query``), searched
  on every shard as a vector, as many hits deeper as the query has rows, which the merge leaves out (by cosine,
  equal cosines by row, as the whole table orders them);
- ``POST .../analogy`` by 3CosMul: a row's score depends only on that row and the three words' rows, so each shard
  is given those rows and scores its own (``POST <replica>/analogy/rows``, ``index.engine.shards.analogy_part``:
  the whole table's arithmetic), three deeper; the lists merge by score, then row, the words' rows left out;
- an analogy's ``expect``: each shard is also given the expected answer's unit row and the whole table's rows of
  a, b, c and the answer (``POST <replica>/analogy/rows`` with ``expect``, ``index.engine.shards.expectation_part``)
  and counts its rows scoring strictly higher; the rank is 1 + their sum, the margin the best score (the shards'
  and the answer's) less the answer's.

A 422 that says why for what the front cannot answer as the whole table does: ``compose`` (a word's pieces may lie
on several shards), ``restrict`` (the first rows of a table) and a ``k`` within the query's row count of
``max_k``. A batch's item answers in its place, its error too; a shard that does not answer fails the request
(503 ``shard_unavailable``, 504 ``shard_timeout``): no partial answer for a lookup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Annotated, Any, TypeVar, cast

import numpy as np
import orjson
from fastapi import Path, Request
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import Route

from index.engine.door import merged_suggestions, no_direction, owner, pair_cosines
from index.errors import InvalidQuery, OverLimit, UnknownToken, shown
from service.errors import item_error
from service.http.fastroute import parse_query
from service.respond import FastJSON
from service.routers.tokens import Normalized
from service.scatter import Front, ShardFailed, ShardRefused, answer_of, failed, kind, segment
from service.scatter_words import WORDS, nearest, query_of, query_vector, resolved, vector_body
from service.schemas.analogy import AnalogyQuery, AnalogyRequest
from service.schemas.common import LIMITS
from service.schemas.neighbors import NeighborsParams, NeighborsQuery, NeighborsRequest
from service.schemas.similarity import SimilarityParams, SimilarityRequest

T = TypeVar("T")
AT_ONCE = 64  # a request's tokens looked up (or batch items scattered) at once: each asks every shard
Refuse = Callable[[Request], Awaitable[Response]]
Found = dict[str, Any]  # a shard's lookup of a token (``GET .../tokens/{token}?row=true``): the whole table's match
Key = str | int  # what a query names a row by: a token, or its row id in the whole table


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
        first: the token's own label stands there alone and wins; else every other shard is asked too (its composed
        or decomposed spelling, a case-folded match of a lower row of the whole table, may stand on any)."""
        home = owner(token, len(self.shards))
        answers = {home: await self.ask_token(home, token)}
        first = answers[home]
        if (
            not isinstance(first, ShardRefused)
            and first["query"]["match"] == "exact"
            and first["query"]["token"] == token
        ):
            return first
        rest = [shard for shard in range(len(self.shards)) if shard != home]
        answers.update(zip(rest, await asyncio.gather(*(self.ask_token(s, token) for s in rest)), strict=True))
        found: list[Found | None] = []
        for answer in answers.values():
            if isinstance(answer, ShardRefused) and answer.status != 404:  # the token itself (too long, ...)
                return Refused.of(answer)
            found.append(None if isinstance(answer, ShardRefused) else answer)
        match = resolved(token, found)
        if match is None:
            return await self.unknown(token, cast(ShardRefused, first))
        return match

    async def unknown(self, token: str, refusal: ShardRefused) -> Refused:
        """The whole table's 404 for a token no shard holds: its suggestions from every shard's candidates
        (``GET .../suggestions/{token}``), merged as the whole table ranks them (``merged_suggestions``)."""
        if orjson.loads(refusal.body)["error"]["code"] != UnknownToken.code:
            return Refused.of(refusal)
        path = f"/suggestions/{segment(token)}"
        try:
            parts = await self.everywhere(lambda shard: self.front.request(shard, self.shards[shard], path, None))
        except ShardRefused:  # a shard without its part of the suggestions: the home shard's answer stands
            return Refused.of(refusal)
        suggestions = merged_suggestions(token, parts)
        error = UnknownToken(
            f"token {shown(token)} is not in table {self.name!r}", suggestions=suggestions, token=token
        )
        return Refused(refusal.status, item_error(error))

    async def lookup_row(self, row: int, normalized: bool = True) -> Found | Refused:
        """Row ``row`` of the whole table, from the shard that holds it (every shard asked: ``GET .../rows/{row}``,
        the others answer 404), its unit row or (``normalized`` false) its vector as imported; a row past every
        shard's is the whole table's 404."""
        path = f"/rows/{row}" + ("" if normalized else "?normalized=false")

        async def ask(shard: int) -> Found | None:
            try:
                return await self.front.request(shard, self.shards[shard], path, None)
            except ShardRefused as refusal:
                if orjson.loads(refusal.body)["error"]["code"] != UnknownToken.code:
                    raise Refused.of(refusal) from None
                return None  # not one of its rows

        try:
            held = [answer for answer in await self.everywhere(ask) if answer is not None]
        except Refused as refused:
            return refused
        if held:
            return held[0]
        try:
            summaries = await self.everywhere(lambda shard: self.front.request(shard, self.shards[shard], "", None))
        except ShardRefused as refusal:
            return Refused.of(refusal)
        rows = sum(int(summary["rows"]) for summary in summaries)
        return Refused(
            404, item_error(UnknownToken(f"id {row} is outside table {self.name!r} (0..{rows - 1})", suggestions=[]))
        )

    async def everywhere(self, ask: Callable[[int], Awaitable[T]]) -> list[T]:
        """``ask(shard)`` of every shard at once, the answers in shard order; one that does not answer fails the
        request."""
        try:
            return list(await asyncio.gather(*map(ask, range(len(self.shards)))))
        except ShardFailed as exc:
            raise failed(self.name, exc) from None

    async def ask_token(self, shard: int, token: str) -> Found | ShardRefused:
        """Shard ``shard``'s match of ``token`` (``GET .../tokens/{token}``), or its refusal; one that does not
        answer fails the request (the token may stand on it: no partial lookup)."""
        path = f"/tokens/{segment(token)}?normalized=true&row=true"
        try:
            return await self.front.request(shard, self.shards[shard], path, None)
        except ShardFailed as exc:
            raise failed(self.name, exc) from None
        except ShardRefused as refusal:
            return refusal

    async def lookups(self, keys: Iterable[Key]) -> dict[Key, Found | Refused]:
        """Each distinct token (or row id) of ``keys`` looked up once, all at once."""
        distinct = list(dict.fromkeys(keys))
        calls = (self.lookup(key) if isinstance(key, str) else self.lookup_row(key) for key in distinct)
        return dict(zip(distinct, await bounded(calls), strict=True))

    async def nearest(self, vector: np.ndarray, own: set[int], k: int, exact: bool) -> list[dict[str, Any]]:
        """The ``k`` rows nearest the unit ``vector`` in the whole table, its own rows ``own`` left out."""
        return nearest(own, k, await self.parts("/search", vector_body(vector, self.depth(k, own), exact)))

    async def analogy(self, words: list[Found], own: set[int], k: int, method: str) -> list[dict[str, Any]]:
        """The ``k`` best rows of the whole table for the analogy of the unit rows ``words`` (a, b, c), its words'
        rows ``own`` left out: each shard's best by the same scores (``POST .../analogy/rows``), merged."""
        body = {"a": words[0]["vector"], "b": words[1]["vector"], "c": words[2]["vector"], "method": method}
        return nearest(own, k, await self.parts("/analogy/rows", {**body, "k": self.depth(k, own)}))

    async def expectation(
        self, words: list[Found], expected: Found, k: int, method: str
    ) -> tuple[list[dict[str, Any]] | None, dict[str, Any]]:
        """The rank of the ``expected`` answer of the analogy of ``words`` (a, b, c) among every row of the whole
        table, its score and the best score's margin over it, as the whole table reports them
        (``diagnostics.analogy_expectations``): each shard counts its rows scoring higher, the words' and the
        answer's rows left out (``POST .../analogy/rows`` with ``expect``), the counts summed. For 3CosMul the same
        requests give the ``k`` best rows too (else None)."""
        own = {int(m["row"]) for m in words}
        body = {
            "a": words[0]["vector"],
            "b": words[1]["vector"],
            "c": words[2]["vector"],
            "method": method,
            "k": self.depth(k, own) if method == "3cosmul" else 1,
            "expect": expected["vector"],
            "leave_out": sorted({*own, int(expected["row"])}),
        }
        parts = await self.parts("/analogy/rows", body)
        counts = [part["results"][0]["expect"] for part in parts if part is not None]
        score = float(counts[0]["score"])
        top = max([score, *(float(c["top"]) for c in counts if c["top"] is not None)])
        rank = 1 + sum(int(c["higher"]) for c in counts)
        found = {"token": expected["query"]["token"], "id": int(expected["row"]), "rank": rank, "score": score}
        return (nearest(own, k, parts) if method == "3cosmul" else None), {**found, "margin": top - score}

    def depth(self, k: int, own: set[int]) -> int:
        """How deep each shard is asked: ``k`` and the query's own rows, which the merge leaves out."""
        if k + len(own) > LIMITS.get().max_k:
            raise OverLimit(
                f"k: the front of sharded table {self.name!r} asks each shard for k + {len(own)} hits (the query's "
                f"own rows are left out after the merge), at most max_k ({LIMITS.get().max_k}): ask k <= "
                f"{LIMITS.get().max_k - len(own)}",
                "max_k",
            )
        return k + len(own)

    async def parts(self, path: str, body: dict[str, Any]) -> list[dict[str, Any] | None]:
        """Every shard's answer to ``body`` at ``path`` (its ``neighbors``, each with its row in the whole table),
        as a batch of one; a shard's refusal raises :class:`Refused`."""
        payload = orjson.dumps(body)
        answers = await asyncio.gather(
            *(self.front.request(i, shard, path, payload) for i, shard in enumerate(self.shards)),
            return_exceptions=True,
        )
        parts: list[dict[str, Any] | None] = []
        for answer in answers:
            if isinstance(answer, ShardRefused):
                raise Refused.of(answer)
            parts.append({"results": [answer_of(self.name, answer)]})
        return parts


def found(matches: dict[Key, Found | Refused], tokens: Sequence[Key]) -> list[Found]:
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
        item: str | NeighborsQuery, k: int, exact: bool, matches: dict[Key, Found | Refused]
    ) -> dict[str, Any]:
        """One neighbours query (a token, or positive/negative tokens) as the whole table answers it."""
        if isinstance(item, str):
            item = NeighborsQuery(token=item)
        if item.token is not None or item.id is not None:
            (match,) = found(matches, [item.token if item.token is not None else cast(int, item.id)])
            rows = [match]
            info: dict[str, Any] = query_of(match)
            positive = 1
        else:
            pos, neg = found(matches, item.positive), found(matches, item.negative)
            rows, positive = pos + neg, len(pos)
            info = {"positive": [query_of(m) for m in pos], "negative": [query_of(m) for m in neg]}
        if not any(np.any(m["vector"]) for m in rows):  # zero rows: named, as the whole table names them
            raise no_direction([query_of(m) for m in rows])
        vector = query_vector(rows, positive)
        own = {int(m["row"]) for m in rows}
        return {"query": info, "neighbors": await words.nearest(vector, own, k, exact)}

    def tokens_of(items: Iterable[str | NeighborsQuery]) -> list[Key]:
        out: list[Key] = []
        for item in items:
            if isinstance(item, str):
                out.append(item)
            else:
                named = [key for key in (item.token, item.id) if key is not None]
                out += [*named, *item.positive, *item.negative]
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
        left, right = (np.asarray([m["vector"]], dtype=np.float32) for m in (a, b))
        value = float(pair_cosines(left, right)[0])  # Table.similarity's arithmetic
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
                np.asarray([m["vector"] for m in column], dtype=np.float32)
                for column in ([a for _, a, _ in scored], [b for _, _, b in scored])
            )
            for (position, _, _), value in zip(scored, pair_cosines(left, right).tolist(), strict=True):
                values[position] = value
        return FastJSON({"similarities": values, "errors": errors})

    async def analogy_of(
        question: AnalogyQuery, k: int, exact: bool, method: str, matches: dict[Key, Found | Refused]
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
        if question.expect is not None:
            (expected,) = found(matches, [question.expect])
            if int(expected["row"]) in own:
                raise InvalidQuery(
                    f"the expected word {shown(expected['token'])} is one of a, b and c, which are left out of the "
                    "answers: expect another word"
                )
            if method == "3cosadd":
                hits, (_, expect) = await asyncio.gather(
                    words.nearest(query_vector([b, c, a], 2), own, k, exact),
                    words.expectation([a, b, c], expected, k, method),
                )
            else:
                best, expect = await words.expectation([a, b, c], expected, k, method)
                hits = cast(list[dict[str, Any]], best)
            return {"query": info, "neighbors": hits, "expect": expect}
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
        expected = [q.expect for q in questions if q.expect is not None]
        matches = await words.lookups([*(t for q in questions for t in (q.b, q.c, q.a)), *expected])
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
            include_in_schema=False,
        )

    async def by_id(id: Annotated[int, Path(ge=0)], normalized: Normalized = False) -> Response:
        """``GET .../ids/{id}`` of a table of either kind: row ``id`` of the whole table, as its server answers it
        (``service.routers.tokens``; the explorer's first document of a documents table)."""
        match = await words.lookup_row(id, normalized)
        if isinstance(match, Refused):
            return match.response()
        answer = {key: value for key, value in match.items() if key != "row"}  # the shard's own row is its own
        return FastJSON(answer | {"id": id, "query": {**match["query"], "id": id}})

    return [
        APIRoute(f"{prefix}/ids/{{id}}", by_id, methods=["GET"], include_in_schema=False),
        Route(f"{prefix}/neighbors", neighbors_get, methods=["GET"]),
        post("neighbors", neighbors_post),
        Route(f"{prefix}/similarity", similarity_get, methods=["GET"]),
        post("similarity", similarity_post),
        post("analogy", analogy),
    ]
