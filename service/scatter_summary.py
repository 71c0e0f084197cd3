"""The front's summary of a sharded table (``GET /v1/tables/{t}``) and its list of tables (``GET /v1/tables``),
answered as one process serving the sharded table whole answers them (``index.engine.shards.ShardedTable.summary``,
``service.routers.tables``), from its shards' own summaries (``GET <replica>``), asked at once on every request:
a shard's summary costs it no search, and its counts change with its writes and reloads, so none is kept here.

- ``rows``: the shards' rows summed; ``shards``: their count and rows; ``documents.fields``: each field's
  ``non_null`` summed (each document is on one shard); ``recall_at_10``: the lowest of the shards' (None if one has
  none); ``approximate``: whether any shard's index is; ``index``, ``dim``, ``kind``, ``source`` and the rest of
  ``documents``: the first shard's (every shard's, from one import).
- ``built_at``: the latest of the shards', as the one-process server says it.
- ``writes`` (a documents table): ``written``, ``deleted`` and ``log_bytes`` summed, and each shard's own under
  ``shards``, as the one-process server reads the same logs.
- ``metadata_columns`` empty and ``has_tokenizer`` false, as the one-process server says of a sharded table (the
  front answers no word table's rows or tokenizing); no ``model``, ``transformer``, ``index_deferred`` or
  ``building``, which a sharded table's summary does not carry either.

A shard that does not answer fails the summary (503 ``shard_unavailable``, 504 ``shard_timeout``, naming it),
partial answers or not: the sums would be wrong. In the list such a table is named under ``unavailable``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi.routing import APIRoute
from starlette.responses import Response

from service import indexing
from service.deps import RegistryDep
from service.errors import ApiError
from service.respond import FastJSON
from service.routers.tables import summary as local_summary
from service.scatter import Front, ShardFailed, ShardRefused, failed, unanswered

TOTALS = ("written", "deleted", "log_bytes")  # what a sharded table's ``writes`` sums over its shards


async def shard_summaries(front: Front, name: str) -> list[dict[str, Any]]:
    """Every shard's summary of its part of the sharded table ``name``, asked at once; a shard that does not
    answer, or refuses (its URL names no table: the deployment's fault), raises the front's 503 or 504."""
    shards = front.tables[name]
    outcomes = await asyncio.gather(
        *(front.request(i, shard, "", None) for i, shard in enumerate(shards)), return_exceptions=True
    )
    parts = []
    for number, outcome in enumerate(outcomes):
        if isinstance(outcome, ShardRefused):
            outcome = unanswered(number, outcome)
        if isinstance(outcome, ShardFailed):
            raise failed(name, outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        parts.append(outcome)
    return parts


def merged_summary(name: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of the sharded table ``name`` from its shards' summaries ``parts`` (in shard order)."""
    first = parts[0]
    recalls: list[float | None] = [part.get("recall_at_10") for part in parts]
    built = [part["built_at"] for part in parts if part.get("built_at")]
    out: dict[str, Any] = {
        "name": name,
        "rows": sum(part["rows"] for part in parts),
        "dim": first["dim"],
        "kind": first["kind"],
        "index": first["index"],
        "recall_at_10": None if None in recalls else min(r for r in recalls if r is not None),
        "source": first["source"],
        "metadata_columns": [],
        "built_at": max(built, default=None),
    }
    if "documents" in first:
        fields = {
            field: {**info, "non_null": sum(part["documents"]["fields"][field]["non_null"] for part in parts)}
            for field, info in first["documents"]["fields"].items()
        }
        out["documents"] = {**first["documents"], "fields": fields}
    out["shards"] = {"count": len(parts), "rows": [part["rows"] for part in parts]}
    out["approximate"] = any(part["approximate"] for part in parts)
    out["has_tokenizer"] = False
    if all("writes" in part for part in parts):
        writes = [part["writes"] for part in parts]
        out["writes"] = {**{key: sum(w[key] for w in writes) for key in TOTALS}, "shards": writes}
    return out


async def table_summary(front: Front, name: str) -> dict[str, Any]:
    return merged_summary(name, await shard_summaries(front, name))


def routes(front: Front) -> list[APIRoute]:
    """``GET /v1/tables/<name>`` for each sharded table fronted here, and ``GET /v1/tables``: this server's own
    tables and the fronted ones (ahead of the routes of every table)."""

    async def list_tables(registry: RegistryDep) -> Response:
        builds = indexing.builds_of(registry.tables)
        tables = {name: local_summary(registry.tables[name], builds) for name in registry.tables}
        unavailable = set(registry.failed)
        answers = await asyncio.gather(*(table_summary(front, name) for name in front.tables), return_exceptions=True)
        for name, answer in zip(front.tables, answers, strict=True):
            tables.pop(name, None)  # a fronted table's routes are its shards', whatever this server holds
            if isinstance(answer, ApiError):
                unavailable.add(name)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                tables[name] = answer
        return FastJSON({"tables": [tables[name] for name in sorted(tables)], "unavailable": sorted(unavailable)})

    def one(name: str) -> APIRoute:
        async def get_table() -> Response:
            return FastJSON(await table_summary(front, name))

        return APIRoute(
            f"/v1/tables/{name}",
            get_table,
            methods=["GET"],
            summary=f"The sharded table {name}",
            include_in_schema=False,
        )

    listing = APIRoute("/v1/tables", list_tables, methods=["GET"], summary="List the tables", include_in_schema=False)
    return [listing, *(one(name) for name in front.tables)]
