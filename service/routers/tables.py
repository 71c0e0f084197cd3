"""The loaded tables and their manifest summaries."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from index.engine.door import Table
from service import indexing, live
from service.deps import RegistryDep, TableDep
from service.errors import TABLE_ERRORS, responses
from service.respond import FastJSON
from service.schemas.tables import TablesResponse, TableSummary

router = APIRouter(prefix="/v1/tables", tags=["tables"])


def summary(table: Table, builds: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = {**table.summary(), "approximate": table.approximate, "has_tokenizer": table.has_tokenizer}
    source = out.get("source")
    if isinstance(source, dict) and isinstance(source.get("path"), str):  # no paths of the build machine
        out["source"] = {**source, "path": PurePath(source["path"]).name}
    if table.name in builds:
        out["building"] = builds[table.name]
    state = live.live_of(table)
    if state is not None:
        out["writes"] = live.summary(state)
    sharded = live.sharded_of(table)
    if sharded is not None:
        out["writes"] = sharded.summary()
    place = table.place
    if place is not None:  # a shard served alone: a front checks that it lists the shard in its place
        out["shard_of"] = {"table": place.table, "shard": place.shard, "shards": place.count, "import": place.identity}
    return out


@router.get("", response_model=TablesResponse, responses=responses("not_ready"), summary="List the loaded tables")
async def list_tables(registry: RegistryDep) -> Response:
    builds = indexing.builds_of(registry.tables)
    tables = [summary(registry.tables[name], builds) for name in sorted(registry.tables)]
    return FastJSON({"tables": tables, "unavailable": sorted(registry.failed)})


@router.get(
    "/{table}", response_model=TableSummary, responses=responses(*TABLE_ERRORS), summary="One table's manifest summary"
)
async def get_table(table: TableDep) -> Response:
    return FastJSON(summary(table, indexing.builds_of({table.name: table})))
