"""What a documents table's fields hold, for building filters.

Per field: its type and non-null count; for strings, lists of strings (tags) and booleans the number of distinct
values and the :data:`TOP_VALUES` most common with the documents that have each (as many as the filter
``{name: value}`` passes); for integers, floats and timestamps the smallest and largest value (NaN left out).
Each statistic is one Arrow compute call over the whole column: over the version's rows, or over the live
documents (the version's rows not deleted, then the written ones) when a delta is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from index.engine.delta import Delta, timestamp_text
from index.store.payload import BOOLEAN, FLOAT, INTEGER, STRING, STRING_LIST, TIMESTAMP, Payload

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from index.lazy import pa, pc

TOP_VALUES = 50


def field_stats(payload: Payload, delta: Delta | None = None) -> dict[str, Any]:
    """``{"rows", "fields": {name: statistics}}`` over the version's rows, or the live documents of ``delta``."""
    if delta is None:
        fields = {field: _stats(kind, payload.column(field)) for field, kind in payload.fields.items()}
        return {"rows": len(payload), "fields": fields}
    keep, written = pa.array(~delta.deleted), delta.columns()
    fields = {}
    for field, kind in payload.fields.items():
        column = payload.column(field).filter(keep)
        fields[field] = _stats(kind, pa.concat_arrays([column, written.column(field).cast(column.type)]))
    return {"rows": keep.true_count + len(written.documents), "fields": fields}


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
        out["min"], out["max"] = (timestamp_text(v) if kind == TIMESTAMP and v is not None else v for v in (low, high))
    return out


def _common(values: pa.Array | pa.ChunkedArray) -> dict[str, Any]:
    """The number of distinct ``values`` and the most common, by count (then value) with their counts."""
    counts = pc.value_counts(values)
    ranked = pa.table({"value": counts.field("values"), "count": counts.field("counts")}).sort_by(
        [("count", "descending"), ("value", "ascending")]
    )
    return {"distinct": len(counts), "values": ranked.slice(0, TOP_VALUES).to_pylist()}
