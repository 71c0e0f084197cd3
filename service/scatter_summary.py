"""The front's summary of a sharded table (``GET /v1/tables/{t}``) and its list of tables (``GET /v1/tables``),
answered as one process serving the sharded table whole answers them (``service.routers.tables``), from its shards'
own summaries (``GET <replica>``), asked at once on every request: a shard's summary costs it no search, and its
counts change with its writes and reloads, so none is kept here. Both merge the shards' summaries by one rule,
``index.engine.shards.merged_summary`` (rows, fields' ``non_null`` and ``writes`` summed, the lowest recall, the
latest ``built_at``, the shards' rows, the index the first shard's or each shard's where they differ in kind, the
rest the first shard's).

A shard that does not answer fails the summary (503 ``shard_unavailable``, 504 ``shard_timeout``, naming it),
partial answers or not: the sums would be wrong. In the list such a table is named under ``unavailable``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi.routing import APIRoute
from starlette.responses import Response

from index.engine.door import merged_summary
from service import indexing
from service.deps import RegistryDep
from service.errors import ApiError
from service.respond import FastJSON
from service.routers.tables import summary as local_summary
from service.scatter import Front, ShardRefused, answer_of, unanswered


async def shard_summaries(front: Front, name: str) -> list[dict[str, Any]]:
    """Every shard's summary of its part of the sharded table ``name``, asked at once; a shard that does not
    answer, or refuses it (its URL is no table's: the deployment's fault), raises the front's 503 or 504."""
    shards = front.tables[name]
    outcomes = await asyncio.gather(
        *(front.request(i, shard, "", None) for i, shard in enumerate(shards)), return_exceptions=True
    )
    parts = []
    for number, outcome in enumerate(outcomes):
        if isinstance(outcome, ShardRefused):
            outcome = unanswered(number, outcome)
        parts.append(answer_of(name, outcome))
    return parts


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
