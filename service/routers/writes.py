"""Writes to a documents table: upsert documents, delete them by id or by filter (``service.writes``).

Every write route needs a write key (``EMBEDDING_WRITE_KEYS``) in the ``X-API-Key`` header; a server started
without one keeps its tables read-only and answers 403 saying so. A write is answered once its record is in the
table's log (fsynced, unless ``EMBEDDING_WRITE_SYNC`` is off), with the table's sequence number. An upsert's
documents are checked and embedded before it takes the log's lock: other writes do not wait for the encoder.

A sharded table's write goes to the shards that own its ids (``index.engine.door.owner``), each into its own log:
an upsert's documents are all checked (and embedded) first, so a refused document writes none; a delete by
filter is every shard's. The answer adds what each shard did (``shards``). A shard served alone takes only the
ids it owns: a write of another shard's id is refused (422) before anything is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.routing import BaseRoute

from index.engine.door import ShardedTable, Table
from index.errors import WRITES_ONLY
from service import live, writes
from service.deps import RegistryDep, SettingsDep, TableDep
from service.errors import BODY_ERRORS, ApiError, responses
from service.http import auth
from service.respond import FastJSON
from service.schemas.bounds import MAX_TOKEN_CHARS
from service.schemas.writes import DeleteRequest, UpsertRequest, WriteResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["writes"])
WRITE_ERRORS = (*BODY_ERRORS, "unauthorized", "forbidden")


async def require_write_key(
    settings: SettingsDep, x_api_key: Annotated[str | None, Header(description="a write key")] = None
) -> None:
    """403 when the server has no write key (its tables are read-only), 401 without a key, 403 with another."""
    keys = auth.server_keys(settings)
    if not keys[auth.WRITE]:
        raise ApiError("forbidden", auth.READ_ONLY)
    auth.check(x_api_key, keys, (auth.WRITE,), auth.needs(auth.WRITE), "write documents")


WriteKey = Annotated[None, Depends(require_write_key)]


def write_routes(routes: Iterable[BaseRoute]) -> list[APIRoute]:
    """The routes among ``routes`` that need a write key."""
    return [
        route
        for route in routes
        if isinstance(route, APIRoute) and any(d.call is require_write_key for d in route.dependant.dependencies)
    ]


def _live(table: Table) -> live.Live:
    table.documents(WRITES_ONLY)
    state = live.live_of(table)
    if state is None:
        raise ApiError("not_ready", f"table {table.name!r} is not ready for writes", table=table.name)
    return state


def _sharded(table: Table) -> live.Sharded | None:
    table.documents(WRITES_ONLY)
    return live.sharded_of(table) if isinstance(table, ShardedTable) else None


async def _write(table: Table, make: writes.Make, sync: bool, what: str) -> Response:
    state = _live(table)
    sequence, count = await run_in_threadpool(state.write, make, sync)
    return FastJSON({"table": table.name, "sequence": sequence, what: count})


async def _write_shards(
    table: Table, state: live.Sharded, makes: dict[int, writes.Make], sync: bool, what: str
) -> Response:
    """Each shard's part of a write to a sharded table, in shard order; the answer says what each shard did
    (``sequence``: the highest of theirs)."""
    done = await run_in_threadpool(state.write, makes, sync)
    shards = [{"shard": d.shard, "sequence": d.sequence, what: d.answer} for d in done]
    sequence = max((d.sequence for d in done), default=0)
    return FastJSON({"table": table.name, "sequence": sequence, what: sum(d.answer for d in done), "shards": shards})


@router.post(
    "/documents",
    response_model=WriteResponse,
    responses=responses(*WRITE_ERRORS),
    summary="Add documents, or replace them by id (upsert); searchable as soon as this answers",
)
async def upsert(
    _: WriteKey, table: TableDep, registry: RegistryDep, settings: SettingsDep, body: UpsertRequest
) -> Response:
    encoder = registry.encoder_of(table)
    sharded = _sharded(table)
    if sharded is not None:  # the whole batch checked (and embedded) first, then each shard's part written
        makes = await run_in_threadpool(writes.sharded_upsert, table, encoder, body.documents, sharded.whole.delta)
        return await _write_shards(table, sharded, makes, settings.write_sync, "upserted")

    state = _live(table)
    # the table's own refusals first (refresh), as a write's; then the documents checked and embedded outside the
    # log's lock
    make = await run_in_threadpool(
        lambda: writes.upserting(table, encoder, body.documents, state.refresh(), state.place)
    )
    return await _write(table, make, settings.write_sync, "upserted")


@router.post(
    "/documents/delete",
    response_model=WriteResponse,
    responses=responses(*WRITE_ERRORS),
    summary="Delete documents by id or by a search filter; answers how many were deleted",
)
async def delete_many(_: WriteKey, table: TableDep, settings: SettingsDep, body: DeleteRequest) -> Response:
    sharded = _sharded(table)
    if sharded is not None:
        if body.ids is not None:
            makes = writes.sharded_delete(table, list(body.ids), sharded.whole.delta)
        else:
            makes = writes.sharded_filter_delete(table, body.filter)
        return await _write_shards(table, sharded, makes, settings.write_sync, "deleted")

    if body.ids is not None:
        state = _live(table)
        writes.check_ids_owned(state.place, body.ids, state.delta)
        make = writes.deleting(table, body.ids)
    else:  # a shard deletes what the filter lets through of its own
        make = writes.filtering(table, body.filter)
    return await _write(table, make, settings.write_sync, "deleted")


@router.delete(
    "/documents/{document:path}",  # an id may hold "/", as GET allows
    response_model=WriteResponse,
    responses=responses(*WRITE_ERRORS),
    summary="Delete one document by its id",
)
async def delete_one(
    _: WriteKey,
    table: TableDep,
    settings: SettingsDep,
    document: Annotated[str, Path(min_length=1, max_length=MAX_TOKEN_CHARS, description="the document's id")],
) -> Response:
    sharded = _sharded(table)
    if sharded is not None:
        makes = writes.sharded_delete(table, [document], sharded.whole.delta)
        return await _write_shards(table, sharded, makes, settings.write_sync, "deleted")

    state = _live(table)
    writes.check_ids_owned(state.place, [document], state.delta)
    return await _write(table, writes.deleting(table, [document]), settings.write_sync, "deleted")
