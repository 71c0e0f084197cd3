"""What a documents table's fields hold, for building filters: ``GET /v1/tables/{t}/fields``.

The statistics are ``index.engine.field_stats``'s, computed once per loaded table (``Table.cached``) and, with
documents written since the version, over the live documents once per change of the delta (``Delta.cached``).
``GET .../fields/values?field=...`` gives the named fields' statistics with every value listed (up to
``MOST_LISTED`` distinct ones of ``MOST_LISTED_BYTES`` in all; beyond, the most common as ``/fields``): what the
front of a sharded table asks a shard that listed fewer values than it has (``service.scatter_fields``), each
field's made once as ``/fields``'s.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from index.engine.door import field_stats
from service import live
from service.deps import TableDep
from service.errors import TABLE_ERRORS, responses
from service.execute import compute
from service.respond import FastJSON
from service.schemas.fields import FieldsResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["documents"])


@router.get(
    "/fields",
    response_model=FieldsResponse,
    responses=responses(*TABLE_ERRORS),
    summary="A documents table's fields: common values of strings and tags, ranges of numbers and timestamps",
)
async def get_fields(request: Request, table: TableDep) -> Response:
    payload = table.documents("it has no fields")
    delta = live.delta_of(table)  # written documents count, deleted ones do not (as in a fresh import)
    if delta is not None:
        stats = delta.cached("fields", lambda: field_stats(payload, delta))
    else:

        def version() -> dict[str, Any]:
            return table.cached("fields", lambda: field_stats(payload))

        stats = await compute(request, table, "fields", version)
    return FastJSON({"table": table.name, **stats})


@router.get("/fields/values", include_in_schema=False)
async def get_every_value(request: Request, table: TableDep, field: Annotated[list[str], Query()]) -> Response:
    """The statistics of the fields named, each of their values listed with its count (not the most common only)."""
    payload = table.documents("it has no fields")
    delta = live.delta_of(table)
    names = [name for name in payload.fields if name in field]  # the table's only: what is kept stays bounded

    def every_value(name: str) -> Any:
        return field_stats(payload, delta, every=[name])["fields"][name]

    if delta is not None:
        stats = {name: delta.cached(f"fields/values {name}", partial(every_value, name)) for name in names}
    else:

        def version() -> dict[str, Any]:
            return {name: table.cached(f"fields/values {name}", partial(every_value, name)) for name in names}

        stats = await compute(request, table, "fields", version)
    return FastJSON({"table": table.name, "fields": stats})
