"""What a documents table's fields hold, for building filters: ``GET /v1/tables/{t}/fields``.

Per field: its type and non-null count; for strings, lists of strings (tags) and booleans the number of distinct
values and the :data:`TOP_VALUES` most common with the documents that have each (as many as the filter
``{name: value}`` passes); for integers, floats and timestamps the smallest and largest value. Each statistic is
one Arrow compute call over the whole column; the answer is computed once per loaded table and kept (with
documents written since the version: over the live documents, once per change of the delta).
"""

from __future__ import annotations

import datetime as dt
import threading
import weakref
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from index.engine.delta import Delta
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store.payload import BOOLEAN, FLOAT, INTEGER, STRING, STRING_LIST, TIMESTAMP, Payload
from service import live
from service.deps import TableDep
from service.errors import TABLE_ERRORS, responses
from service.execute import compute
from service.respond import FastJSON

router = APIRouter(prefix="/v1/tables/{table}", tags=["documents"])

TOP_VALUES = 50
_cache: weakref.WeakKeyDictionary[Table, dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class FieldValue(BaseModel):
    value: str | bool
    count: int = Field(description="documents with this value (for a list field: with this tag)")


class FieldStats(BaseModel):
    type: str = Field(description="string, integer, float, boolean, timestamp or string_list")
    non_null: int = Field(description="documents with a value")
    distinct: int | None = Field(None, description="strings, tags, booleans: how many distinct values")
    values: list[FieldValue] | None = Field(
        None, description=f"strings, tags, booleans: the {TOP_VALUES} most common, most common first"
    )
    min: int | float | str | None = Field(None, description="numbers and timestamps (ISO 8601): the smallest")
    max: int | float | str | None = Field(None, description="numbers and timestamps (ISO 8601): the largest")


class FieldsResponse(BaseModel):
    table: str
    rows: int
    fields: dict[str, FieldStats]


@router.get(
    "/fields",
    response_model=FieldsResponse,
    responses=responses(*TABLE_ERRORS),
    summary="A documents table's fields: common values of strings and tags, ranges of numbers and timestamps",
)
async def get_fields(request: Request, table: TableDep) -> Response:
    payload = table.payload
    if payload is None:
        raise InvalidQuery(f"table {table.name!r} holds {table.kind}, not documents: it has no fields")
    delta = live.delta_of(table)  # written documents count, deleted ones do not (as in a fresh import)
    if delta is not None:
        return FastJSON(delta.cached("fields", lambda: field_stats(table.name, payload, delta)))
    with _lock:
        known = _cache.get(table)
    if known is None:
        known = await compute(request, table, "fields", lambda: field_stats(table.name, payload))
        with _lock:
            _cache[table] = known
    return FastJSON(known)


def field_stats(name: str, payload: Payload, delta: Delta | None = None) -> dict[str, Any]:
    """The statistics of every field, over the version's rows, or the live documents when a ``delta`` is given."""
    if delta is None:
        fields = {field: _stats(kind, payload.column(field)) for field, kind in payload.fields.items()}
        return {"table": name, "rows": len(payload), "fields": fields}
    keep, written = pa.array(~delta.deleted), delta.columns()
    fields = {}
    for field, kind in payload.fields.items():
        column = payload.column(field).filter(keep)
        fields[field] = _stats(kind, pa.concat_arrays([column, written.column(field).cast(column.type)]))
    return {"table": name, "rows": keep.true_count + len(written.documents), "fields": fields}


def _stats(kind: str, column: pa.Array) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "non_null": len(column) - column.null_count}
    if kind in (STRING, BOOLEAN):
        out.update(_common(column.drop_null()))
    elif kind == STRING_LIST:
        # One (document, tag) pair per tag a document has, however often its list repeats it.
        pairs = pa.table({"row": pc.list_parent_indices(column), "tag": pc.list_flatten(column)}).drop_null()
        out.update(_common(pairs.group_by(["row", "tag"]).aggregate([]).column("tag")))
    elif kind in (INTEGER, FLOAT, TIMESTAMP):
        if kind == FLOAT:
            column = pc.filter(column, pc.invert(pc.is_nan(column)))
        low, high = (value.as_py() for value in pc.min_max(column).values())
        out["min"], out["max"] = (_iso(v) if kind == TIMESTAMP and v is not None else v for v in (low, high))
    return out


def _common(values: pa.Array | pa.ChunkedArray) -> dict[str, Any]:
    """The number of distinct ``values`` and the most common, by count (then value) with their counts."""
    counts = pc.value_counts(values)
    ranked = pa.table({"value": counts.field("values"), "count": counts.field("counts")}).sort_by(
        [("count", "descending"), ("value", "ascending")]
    )
    return {"distinct": len(counts), "values": ranked.slice(0, TOP_VALUES).to_pylist()}


def _iso(moment: dt.datetime) -> str:
    """As the payload writes timestamps: ``2001-12-24T05:30:00Z``, fractions of a second only when set."""
    text = moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else "") + "Z"
