"""What a documents table's fields hold, for building filters.

Per field: its type and non-null count; for strings, lists of strings (tags) and booleans the number of distinct
values and the :data:`TOP_VALUES` most common with the documents that have each (as many as the filter
``{name: value}`` passes); for integers, floats and timestamps the smallest and largest value (NaN left out).
Each statistic is one Arrow compute call over the whole column: over the version's rows, or over the live
documents (the version's rows not deleted, then the written ones) when a delta is given.

A sharded table's statistics are its shards' merged (:func:`merged_field_stats`): counts summed (each document is
on one shard), the smallest of the smallest values, the largest of the largest; a field's distinct values and
their counts merged from every value of each shard (``every``: a shard that listed fewer than it has is asked for
all of them), so that every figure is the whole table's. A shard lists every value of a field only up to
:data:`MOST_LISTED` distinct ones of :data:`MOST_LISTED_BYTES` in all, so that its answer stays small: beyond, the
merge has its most common values only, and says what it knows for sure (``"exact": false``: ``distinct`` and each
count at least those shown).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from index.engine.delta import Delta, timestamp_text
from index.store.payload import BOOLEAN, FLOAT, INTEGER, STRING, STRING_LIST, TIMESTAMP, Payload

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from index.lazy import pa, pc

TOP_VALUES = 50
MOST_LISTED = 10_000  # the most distinct values of a field listed in full (``every``); beyond, its TOP_VALUES
MOST_LISTED_BYTES = 1 << 20  # and the most bytes of their text (long values: abstracts, URLs)
VALUED = (STRING, STRING_LIST, BOOLEAN)  # the kinds of field whose values are counted


def field_stats(payload: Payload, delta: Delta | None = None, every: Collection[str] | None = None) -> dict[str, Any]:
    """``{"rows", "fields": {name: statistics}}`` over the version's rows, or the live documents of ``delta``;
    with ``every``, of those fields alone, each of their values listed (not the :data:`TOP_VALUES` most common)
    where they are at most :data:`MOST_LISTED` of at most :data:`MOST_LISTED_BYTES`."""
    names = [field for field in payload.fields if every is None or field in every]
    listing = every is not None
    if delta is None:
        fields = {field: _stats(payload.fields[field], payload.column(field), listing) for field in names}
        return {"rows": len(payload), "fields": fields}
    keep, written = pa.array(~delta.deleted), delta.columns()
    fields = {}
    for field in names:
        column = payload.column(field).filter(keep)
        live = pa.concat_arrays([column, written.column(field).cast(column.type)])
        fields[field] = _stats(payload.fields[field], live, listing)
    return {"rows": keep.true_count + len(written.documents), "fields": fields}


def _stats(kind: str, column: pa.Array, every: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "non_null": len(column) - column.null_count}
    if kind in (STRING, BOOLEAN):
        out.update(_common(column.drop_null(), every))
    elif kind == STRING_LIST:
        # One (document, tag) pair per tag a document has, however often its list repeats it.
        pairs = pa.table({"row": pc.list_parent_indices(column), "tag": pc.list_flatten(column)}).drop_null()
        out.update(_common(pairs.group_by(["row", "tag"]).aggregate([]).column("tag"), every))
    elif kind in (INTEGER, FLOAT, TIMESTAMP):
        if kind == FLOAT:
            column = pc.filter(column, pc.invert(pc.is_nan(column)))
        low, high = (value.as_py() for value in pc.min_max(column).values())
        out["min"], out["max"] = (timestamp_text(v) if kind == TIMESTAMP and v is not None else v for v in (low, high))
    return out


def _common(values: pa.Array | pa.ChunkedArray, every: bool) -> dict[str, Any]:
    """The number of distinct ``values`` and the most common, by count (then value), with their counts: all of them
    if they are at most :data:`TOP_VALUES`, or with ``every`` at most :data:`MOST_LISTED` of at most
    :data:`MOST_LISTED_BYTES`; else the :data:`TOP_VALUES` most common."""
    counts = pc.value_counts(values)
    ranked = pa.table({"value": counts.field("values"), "count": counts.field("counts")}).sort_by(
        [("count", "descending"), ("value", "ascending")]
    )
    few = len(counts) <= TOP_VALUES or (every and _listable(counts.field("values")))
    listed = ranked if few else ranked.slice(0, TOP_VALUES)
    return {"distinct": len(counts), "values": listed.to_pylist()}


def _listable(distinct: pa.Array) -> bool:
    """Whether a field's ``distinct`` values (strings: more than a boolean's two) are few and short enough to list."""
    return len(distinct) <= MOST_LISTED and (pc.sum(pc.binary_length(distinct)).as_py() or 0) <= MOST_LISTED_BYTES


def cut_fields(part: dict[str, Any]) -> list[str]:
    """The fields whose values a table's statistics ``part`` did not list in full (more than :data:`TOP_VALUES`)
    but might (at most :data:`MOST_LISTED`; if their text is over :data:`MOST_LISTED_BYTES`, the shard lists its most
    common again)."""
    return [name for name, stats in part["fields"].items() if _cut(stats) and stats["distinct"] <= MOST_LISTED]


def _cut(stats: dict[str, Any]) -> bool:
    return "values" in stats and len(stats["values"]) < stats["distinct"]


def merged_field_stats(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The statistics of a sharded table from its shards' ``parts`` (:func:`field_stats`' answers, in shard order),
    each field's values listed in full where a shard has more than :data:`TOP_VALUES` (:func:`cut_fields`). A field
    a shard listed in part (it has more than :data:`MOST_LISTED`, or their text more than :data:`MOST_LISTED_BYTES`)
    is not exact (``"exact": false``): its ``distinct`` is at least the largest shard's (and the values listed),
    each listed count the sum of the counts the shards listed (no more than the value's true count), the values
    those with the highest such sums."""
    fields = {}
    for name, first in parts[0]["fields"].items():
        stats = [part["fields"][name] for part in parts]
        out: dict[str, Any] = {"type": first["type"], "non_null": sum(s["non_null"] for s in stats)}
        if first["type"] in VALUED:
            counts: Counter[Any] = Counter()  # at most shards x MOST_LISTED values
            for s in stats:
                counts.update({value["value"]: value["count"] for value in s["values"]})
            ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            out["distinct"] = len(counts)
            out["values"] = [{"value": value, "count": count} for value, count in ranked[:TOP_VALUES]]
            if any(_cut(s) for s in stats):
                out["distinct"] = max(len(counts), *(s["distinct"] for s in stats))
                out["exact"] = False
        elif "min" in first:
            key = _moment if first["type"] == TIMESTAMP else None
            lows = [s["min"] for s in stats if s["min"] is not None]
            highs = [s["max"] for s in stats if s["max"] is not None]
            out["min"] = min(lows, key=key) if lows else None
            out["max"] = max(highs, key=key) if highs else None
        fields[name] = out
    return {"rows": sum(part["rows"] for part in parts), "fields": fields}


def _moment(text: str) -> dt.datetime:
    """A timestamp as :func:`timestamp_text` writes it, compared as a moment (``...:00.5Z`` is after ``...:00Z``)."""
    return dt.datetime.fromisoformat(text)
