"""The front's reads of a sharded documents table's documents (by id, a page of them), answered as one process
serving the table whole answers them (``service.routers.documents``).

- ``GET .../documents/{id}``: asked of the shard that owns the id as the table reads it
  (``index.engine.door.routed``: on an integer-id table ``"007"`` is the id 7, its owner's), with the request's
  own query (``vector``, ``normalized``, ``fields``, checked here first as the table checks them).
- ``POST .../documents/get``: the ids split by owner, each owner asked once for its part, all at once
  (``POST <replica>/documents/get`` with the request's options); the documents in the order asked (an id asked
  twice, twice), the ids no shard has in ``missing``, as asked; refused when the documents of the shards' answers
  together carry more than the front's ``max_answer_bytes`` (each shard's within its own), weighed as the table
  weighs them (``service.respond.shown_bytes``).

- ``POST .../documents/scroll``: every shard asked at once for its page after ``after`` (the request's filter,
  options and page size; by default a server's of the lowest ``max_batch`` of the front's and its shards', as
  its ``GET /v1/limits`` says, the shards' limits asked first or kept from the last ``LIMITS_SECONDS``), the
  pages merged in the ids' order (each shard's is in that order) up to the lowest ``next`` of the shards' (a
  shard's page is cut short where its documents would pass its ``max_answer_bytes``: none of its documents after
  its ``next`` is in the merge), and the first ``limit`` kept, cut short before the document that would take them
  past the front's ``max_answer_bytes``, as the table's page is; ``next`` is the last one's id when a shard holds
  more (a page it did not finish, or documents past those kept), as the table's ``next``.

Each shard reads its own write log, so a document written or deleted (through the front or not) is read as the
table holds it. A shard's refusal (the table's 404 ``unknown_document``, a 422 for an unknown field) is the answer,
naming the sharded table; else a shard that does not answer is 503 ``shard_unavailable`` or 504
``shard_timeout`` naming it, partial answers or not (the ids it holds are neither found nor missing).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any

import numpy as np
import orjson
from fastapi import Path, Query, Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from index.engine.door import STRING, by_owner, check_weights, page_within, routed
from service.respond import FastJSON, shown_bytes, too_much
from service.scatter import (
    Front,
    ShardFailed,
    ShardRefused,
    answer_of,
    every_shard,
    failed,
    id_type,
    shard_json,
    string_fields,
)
from service.schemas.bounds import MAX_TOKEN_CHARS
from service.schemas.common import LIMITS
from service.schemas.documents import DocumentsRequest, ScrollRequest


def placed(asked: Sequence[str | int], part: dict[str, Any]) -> Iterator[dict[str, Any] | None]:
    """Each of ``asked``'s answer in a shard's answer to them (``{"documents", "missing"}``, each in the order
    asked): its document, or None for an id the shard lists as missing (as it was sent: the same type and value)."""
    found, missing = iter(part["documents"]), part["missing"]
    gone = 0
    for ident in asked:
        if gone < len(missing) and type(missing[gone]) is type(ident) and missing[gone] == ident:
            gone += 1
            yield None
        else:
            yield next(found)


async def answer_bound(front: Front, vector: bool) -> tuple[int, Callable[[int, str, str], Exception]]:
    """The front's max_answer_bytes, the lowest of its own and its shards' as its ``GET /v1/limits`` says, and the
    refusal of an answer past it, which the shards' answers merged may be, each within its own."""
    own = LIMITS.get().max_answer_bytes
    most = min([own, *(int(shard.get("max_answer_bytes", own)) for shard in await front.shard_limits())])
    return most, lambda total, counted, advice: too_much(True, vector, most, total, counted, advice)


def routes(front: Front, name: str) -> list[APIRoute]:
    """The routes reading the documents of the sharded table ``name`` by id (ahead of the routes of every table)."""
    shards = front.tables[name]
    prefix = f"/v1/tables/{name}/documents"

    async def get_document(
        request: Request,
        document: Annotated[str, Path(min_length=1, max_length=MAX_TOKEN_CHARS)],
        vector: Annotated[bool, Query()] = False,
        normalized: Annotated[bool, Query()] = False,
        fields: Annotated[str | None, Query()] = None,
    ) -> Response:
        del vector, normalized, fields  # checked as the table checks them; the query is sent to the shard as it came
        kind = await id_type(front, name) or STRING
        try:
            return FastJSON(await front.document(shards, document, kind, request.url.query))
        except ShardRefused as refused:
            return refused.response()
        except ShardFailed as outcome:
            raise failed(name, outcome) from None

    async def get_documents(body: DocumentsRequest) -> Response:
        ids = list(body.ids)
        options = body.model_dump(mode="json", exclude_unset=True, exclude={"ids"})
        groups = by_owner(routed(ids, await id_type(front, name) or STRING), len(shards))
        outcomes = await asyncio.gather(
            *(
                front.request(
                    shard, shards[shard], "/documents/get", orjson.dumps({"ids": [ids[i] for i in at]} | options)
                )
                for shard, at in groups.items()
            ),
            return_exceptions=True,
        )
        for outcome in outcomes:  # the request's fault first (an unknown field): the table's answer
            if isinstance(outcome, ShardRefused):
                return outcome.response()
        shown: list[dict[str, Any] | None] = [None] * len(ids)
        for at, outcome in zip(groups.values(), outcomes, strict=True):
            answer = answer_of(name, outcome)
            for i, document in zip(at, placed([ids[i] for i in at], answer), strict=True):
                shown[i] = document
        missing = [ident for ident, document in zip(ids, shown, strict=True) if document is None]
        found = [document for document in shown if document is not None]
        strings = await string_fields(front, name)
        weights = np.array([0 if d is None else shown_bytes(d, strings) for d in shown], dtype=np.int64)
        bound = await answer_bound(front, body.vector)
        check_weights(weights, ids, len(found), *bound)  # the shards' parts together, each within its own
        return FastJSON({"documents": found, "missing": missing})

    async def scroll(body: ScrollRequest) -> Response:
        limit = body.page
        if body.limit is None:  # the default page of a server of the lowest max_batch, as the front's /v1/limits says
            limit = min([limit, *(int(s.get("max_batch", limit)) for s in await front.shard_limits())])
        sent = shard_json(body.model_dump(mode="json", exclude_unset=True) | {"limit": limit})
        try:  # the request's fault first (a bad filter, an after the table cannot hold): the table's answer
            pages = await every_shard(
                front, name, lambda number, shard: front.request(number, shard, "/documents/scroll", sent)
            )
        except ShardRefused as refused:
            return refused.response()
        merged = list(heapq.merge(*(page["documents"] for page in pages), key=lambda document: document["id"]))
        cut = [page["next"] for page in pages if page["next"] is not None]
        if cut:  # a shard's page ends there (full, or cut short by its bytes): none of its later ones is here
            merged = [document for document in merged if document["id"] <= min(cut)]
        kept = merged[:limit]
        strings = await string_fields(front, name)
        weights = np.array([shown_bytes(document, strings) for document in kept], dtype=np.int64)
        bound = await answer_bound(front, body.vector)
        within = page_within(weights, [document["id"] for document in kept], *bound)
        more = len(merged) > within or bool(cut)  # cut short at limit or by its bytes, as a shard's page is
        kept = kept[:within]
        return FastJSON({"documents": kept, "next": kept[-1]["id"] if more and kept else None})

    common: dict[str, Any] = {"include_in_schema": False}
    return [
        # POST only: GET .../documents/get is the document whose id is "get", as on the table's own server
        APIRoute(f"{prefix}/get", get_documents, methods=["POST"], summary=f"Documents of {name} by id", **common),
        APIRoute(f"{prefix}/scroll", scroll, methods=["POST"], summary=f"Documents of {name}, a page", **common),
        APIRoute(prefix + "/{document:path}", get_document, methods=["GET"], summary=f"A document of {name}", **common),
    ]
