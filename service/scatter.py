"""The front of a sharded table: a search scattered to one replica of every shard, the answers merged.

``EMBEDDING_SHARDS`` names, per sharded table, each shard's replicas (the URL of the shard's table on each)::

    {"lee": [["http://lee-0a:8000/v1/tables/shard-000", "http://lee-0b:8000/v1/tables/shard-000"],
             ["http://lee-1a:8000/v1/tables/shard-001"], ["http://lee-2a:8000/v1/tables/shard-002"]]}

``POST /v1/tables/lee/search`` is then answered here: the request is checked as any search is (the same model,
the same 422s), and every shard is asked, in parallel, for its part: its vector list and its keyword list,
``offset + k`` deep (hybrid: at least ``index.engine.hybrid.DEPTH``), filtered by the shard itself. A shard's
replicas are tried in turn from a rotating start, each attempt within ``EMBEDDING_SHARD_TIMEOUT`` seconds, at
most two attempts per shard. The lists merge by score (a cosine and a BM25 score with the whole table's
statistics are the same number on a shard as on the whole table, ``index.engine.shards``); equal scores go by
shard, then by their rank in the shard. Mode hybrid fuses the merged lists with the engine's
:func:`index.engine.fusion.rrf`; then the page and ``min_score`` are taken, as on one table.

A shard that does not answer (refused, failed, or past its deadline) fails the search (503 ``shard_unavailable``,
504 ``shard_timeout``), unless ``EMBEDDING_PARTIAL=true``: then the answer merges the shards that answered and
says which did not (``partial``). A shard's own 4xx (a bad filter, a text with no known word) is the answer.

A batch (``queries``) is each of its queries scattered as a request of its own, at once; an item's error (a
shard's refusal of it) stands in its place. Not here (yet): queries by document id or positive/negative ids,
and diversity (they need the rows); a sharded table served whole by one process answers them all.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError
from starlette.responses import Response

from index.engine.door import DEPTH, LISTS, fuse
from index.errors import EmbeddingError, InvalidQuery
from index.store.artifact import NAME_PATTERN as NAME
from service.errors import BODY_ERRORS, ApiError, item_error, responses
from service.respond import FastJSON
from service.schemas.search import SearchRequest

if TYPE_CHECKING:  # imported where a front asks its shards: a server without shards never loads it
    import httpx

UNSUPPORTED = ("id", "positive", "negative", "vectors", "diversity")


class ShardSettings(BaseSettings):
    """The front's settings (``EMBEDDING_SHARDS``, ``EMBEDDING_PARTIAL``, ``EMBEDDING_SHARD_TIMEOUT``)."""

    model_config = SettingsConfigDict(env_prefix="EMBEDDING_", extra="ignore")

    shards: dict[str, list[list[str]]] = Field(
        default_factory=dict, description="per sharded table, each shard's replica URLs (JSON)"
    )
    partial: bool = Field(False, description="answer with the shards that answered, flagged partial, or fail")
    shard_timeout: float = Field(2.0, gt=0, le=600, description="seconds each attempt at a shard may take")


def front_settings() -> ShardSettings:
    """The front's settings from the environment; ValueError naming the variable for one that is wrong."""
    try:
        settings = ShardSettings()
    except SettingsError as exc:
        form = "{table: [[replica URL, ...], ...]}"
        raise ValueError(f"EMBEDDING_SHARDS: not JSON of the form {form} ({exc})") from None
    except ValidationError as exc:
        problems = "; ".join(f"EMBEDDING_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise ValueError(problems) from None
    for name, shards in settings.shards.items():
        if not NAME.fullmatch(name) or ".." in name:
            raise ValueError(f"EMBEDDING_SHARDS: {name!r} is not a table name")
        if not shards or not all(shards):
            raise ValueError(f"EMBEDDING_SHARDS: table {name!r} needs at least one replica URL per shard")
        for replicas in shards:
            for url in replicas:
                if not url.startswith(("http://", "https://")):
                    raise ValueError(f"EMBEDDING_SHARDS: table {name!r}: {url!r} is not an http(s) URL")
    return settings


@dataclass
class Shard:
    replicas: list[str]
    turn: itertools.count[int] = field(default_factory=itertools.count)

    def order(self) -> list[str]:
        """The replicas, from the next one in turn (requests spread over them; a failed one is tried last)."""
        start = next(self.turn) % len(self.replicas)
        return self.replicas[start:] + self.replicas[:start]


class ShardFailed(Exception):
    def __init__(self, shard: int, reason: str, timed_out: bool) -> None:
        super().__init__(reason)
        self.shard, self.reason, self.timed_out = shard, reason, timed_out


class ShardRefused(Exception):
    """A shard's own 4xx answer: the request's fault, answered as it is."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status, self.body = status, body


class Front:
    """The sharded tables this process fronts, and the one HTTP client it asks their shards with."""

    def __init__(self, settings: ShardSettings) -> None:
        self.settings = settings
        self.tables = {name: [Shard(list(replicas)) for replicas in shards] for name, shards in settings.shards.items()}
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:  # made in the event loop that uses it
            import httpx

            self._client = httpx.AsyncClient(limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def ask(self, shard_number: int, shard: Shard, body: dict[str, Any]) -> dict[str, Any]:
        """One shard's answer to ``body`` (``POST <replica>/search``): each replica in turn, at most two."""
        import httpx

        reasons, timed_out = [], False
        payload = orjson.dumps(body)
        headers = {"content-type": "application/json"}
        for replica in shard.order()[:2]:
            try:
                answer = await self.client.post(
                    f"{replica}/search", content=payload, headers=headers, timeout=self.settings.shard_timeout
                )
            except httpx.TimeoutException:
                reasons.append(f"{replica}: no answer within {self.settings.shard_timeout:g} s")
                timed_out = True
                continue
            except httpx.TransportError as exc:
                reasons.append(f"{replica}: {type(exc).__name__} ({exc})")
                continue
            if 400 <= answer.status_code < 500:
                raise ShardRefused(answer.status_code, answer.content)
            if answer.status_code != 200:
                reasons.append(f"{replica}: status {answer.status_code}")
                continue
            result: dict[str, Any] = orjson.loads(answer.content)
            return result if "results" in result else {"results": [result]}  # a single query's answer
        raise ShardFailed(shard_number, "; ".join(reasons), timed_out and len(reasons) == 1)


def merge_lists(lists: Sequence[list[dict[str, Any]]], depth: int) -> list[dict[str, Any]]:
    """The ``depth`` best hits of the shards' lists (each best first): by score, then shard, then rank."""
    keyed = [(-hit["score"], shard, rank, hit) for shard, hits in enumerate(lists) for rank, hit in enumerate(hits)]
    keyed.sort(key=lambda entry: entry[:3])
    return [hit for *_, hit in keyed[:depth]]


def depth_of(body: SearchRequest) -> int:
    """How deep each shard's list is asked: the page's end, and hybrid's fusion depth at least."""
    want = body.offset + body.k
    return want if body.mode != "hybrid" else max(want, DEPTH)


def merged_answer(body: SearchRequest, parts: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The page of hits from the shards' answers (``None``: a shard that did not answer)."""
    mode, want, depth = body.mode, body.offset + body.k, depth_of(body)
    answered = [part for part in parts if part is not None]
    lists = {}
    for position, name in enumerate(n for n in LISTS if mode in (n, "hybrid")):
        lists[name] = merge_lists([part["results"][position]["hits"] for part in answered], depth)
    if mode == "hybrid":
        by_key = {json.dumps(hit["id"]): hit for name in reversed(LISTS) for hit in lists[name]}
        keys = [[json.dumps(hit["id"]) for hit in lists[name]] for name in LISTS]
        weights = None if body.weights is None else (body.weights.vector, body.weights.keyword)
        hits = []
        for key, score, ranks in fuse(keys, body.rrf_k, weights, want):
            hit = {k: v for k, v in by_key[str(key)].items() if k != "ranks"}
            hit["score"] = score
            hit["ranks"] = {name: rank for name, rank in zip(LISTS, ranks, strict=True) if rank}
            hits.append(hit)
    else:
        hits = lists[mode]
        if mode == "keyword":
            hits = [{**hit, "ranks": {"keyword": rank}} for rank, hit in enumerate(hits, 1)]
    floor = -np.inf if body.min_score is None else body.min_score
    return [hit for hit in hits[body.offset : want] if hit["score"] >= floor]


def shard_body(body: SearchRequest, given: dict[str, Any]) -> dict[str, Any]:
    """What every shard is asked: the query once per list its mode needs, each ``depth_of`` deep, from offset 0."""
    depth = depth_of(body)
    query: dict[str, Any] = {name: given[name] for name in ("vector", "text", "filter") if name in given}
    items: list[dict[str, Any]] = []
    if body.mode in ("vector", "hybrid"):
        probe = ("vector",) if "vector" in query else ("text",)  # a text with a vector is the keyword list's
        items.append({name: query[name] for name in (*probe, "filter") if name in query} | {"mode": "vector"})
    if body.mode in ("keyword", "hybrid"):
        items.append({name: query[name] for name in ("text", "filter") if name in query} | {"mode": "keyword"})
    # One list: the single query form (a shard answers it on its light path); two: a batch of both.
    out: dict[str, Any] = {**items[0], "k": depth} if len(items) == 1 else {"queries": items, "k": depth}
    if "fields" in given:
        out["fields"] = given["fields"]
    return out


def route(front: Front, name: str) -> APIRoute:
    """``POST /v1/tables/<name>/search`` for the sharded table ``name`` (ahead of the route of every table)."""
    shards = front.tables[name]

    async def one(body: SearchRequest, given: dict[str, Any]) -> dict[str, Any]:
        """One query's merged answer; a shard's refusal raises :class:`ShardRefused`, a shard that did not answer
        an ``ApiError`` (unless partial answers are taken)."""
        if unsupported := [option for option in UNSUPPORTED if option in given]:
            raise InvalidQuery(
                f"{', '.join(unsupported)}: not taken by the front of sharded table {name!r} (a vector or a text, "
                "by vector, keyword or hybrid, filtered and paged; a batch of such queries)"
            )
        outcomes = await asyncio.gather(
            *(front.ask(i, shard, shard_body(body, given)) for i, shard in enumerate(shards)), return_exceptions=True
        )
        parts: list[dict[str, Any] | None] = []
        missing = []
        for outcome in outcomes:
            if isinstance(outcome, ShardFailed):
                if not front.settings.partial:
                    code = "shard_timeout" if outcome.timed_out else "shard_unavailable"
                    message = f"shard {outcome.shard} of table {name!r} did not answer: {outcome.reason}"
                    raise ApiError(code, message, table=name, shard=outcome.shard)
                missing.append({"shard": outcome.shard, "reason": outcome.reason})
                parts.append(None)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                parts.append(outcome)
        for part in parts:  # an item's own error (a text with no known word): the request's
            for item in part["results"] if part is not None else ():
                if "error" in item:
                    raise ApiError(item["error"]["code"], item["error"]["message"], table=name)
        out: dict[str, Any] = {"hits": merged_answer(body, parts)}
        if "filter" in given:
            out["passing"] = sum(part["results"][0].get("passing", 0) for part in parts if part is not None)
        if missing:
            out["partial"] = {"shards": len(shards), "answered": len(shards) - len(missing), "missing": missing}
        return out

    async def item(common: dict[str, Any], query: dict[str, Any]) -> dict[str, Any]:
        """One query of a batch, answered as a request of its own; its error in its place."""
        try:
            given = {**common, **query}
            return await one(SearchRequest.model_validate(given), given)
        except ShardRefused as refused:
            error: dict[str, Any] = orjson.loads(refused.body)
            return error
        except ValidationError as exc:
            return item_error(InvalidQuery("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())))
        except ApiError as exc:
            if exc.code in ("shard_timeout", "shard_unavailable"):
                raise
            return item_error(exc)
        except EmbeddingError as exc:
            return item_error(exc)

    async def search(request: Request, body: SearchRequest) -> Response:
        given = body.model_dump(exclude_unset=True, mode="json")
        if "queries" in given:
            shared = ("k", "fields", "mode", "rrf_k", "weights")
            common: dict[str, Any] = {key: given[key] for key in shared if key in given}
            answers = await asyncio.gather(*(item(common, query) for query in given["queries"]))
            return FastJSON({"results": answers})
        try:
            return FastJSON(await one(body, given))
        except ShardRefused as refused:
            return Response(refused.body, refused.status, media_type="application/json")

    return APIRoute(
        f"/v1/tables/{name}/search",
        search,
        methods=["POST"],
        responses=responses(*BODY_ERRORS, "shard_unavailable", "shard_timeout"),
        summary=f"Search the sharded table {name}: scattered to its shards, merged",
        include_in_schema=False,
    )
