"""What the LangChain and LlamaIndex stores write and read back of a document: the metadata they keep whole, as a
JSON object, in the table's string field ``metadata``; its values as JSON has them; the ids the server takes, and
its filter of documents by id. A table without that field keeps only the metadata its fields hold: what else a
write would drop is refused before anything is written (:func:`unkept`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from pydantic_core import to_jsonable_python

METADATA = "metadata"  # the table's string field holding each document's metadata as JSON
MAX_ID_CHARS = 1024  # a document's id: a string of 1 to this many characters, as the server's tokens
FILTER_IDS = 10_000  # the ids of one "in" of the server's filter on ids (index.engine.filters.MAX_VALUES)


def plain(value: Any) -> Any:
    """``value`` as the values JSON holds, in dicts and lists too: metadata as an application has it. NumPy's
    scalars and arrays (anything with ``tolist``: a count from pandas, a score from NumPy) as numbers, booleans and
    lists; the rest as pydantic writes it in JSON, as LlamaIndex dumps a node: a datetime or a date as its ISO
    8601 string (a timestamp field's value), a UUID, Decimal or path as a string, a tuple or set as a list; NaN and
    infinities (pandas' missing values) as null, which JSON has for them."""
    return _finite(to_jsonable_python(value, fallback=_listed))


def _finite(value: Any) -> Any:
    """``value`` (JSON's values) with each float that is NaN or infinite null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return [_finite(item) for item in value] if isinstance(value, list) else value


def _listed(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)
    if not callable(tolist):
        raise TypeError(f"a metadata value of type {type(value).__name__} has no JSON form: {value!r}")
    return tolist()


def unkept(table: str, fields: dict[str, Any], item: str, metadata: dict[str, Any], more: str = "") -> None:
    """A ValueError when the table ``table`` of ``fields`` has no field ``metadata`` and the write of ``item`` (a
    document, named as the store names it) would drop what its fields do not hold: its metadata's keys that are
    not fields, and ``more`` (what else only that field would keep)."""
    if METADATA in fields:
        return
    keys = [repr(key) for key in metadata if key not in fields]
    lost = ([f"its metadata key{'s' if len(keys) > 1 else ''} {', '.join(keys)}"] if keys else []) + [more] * bool(more)
    if lost:
        raise ValueError(
            f"{item}: table {table!r} has no string field {METADATA!r}, which keeps a document's metadata whole, "
            f"so {' and '.join(lost)} would be lost (its fields: {', '.join(map(repr, fields)) or 'none'}): import "
            f"the table with a {METADATA!r} field, or give only metadata its fields hold; nothing was written"
        )


def named(ids: Iterable[str]) -> list[str]:
    """Of ``ids``, those the server takes as a document's id: one it refuses (empty, too long) names no document,
    so reading or deleting it is no error."""
    return [ident for ident in ids if 1 <= len(ident) <= MAX_ID_CHARS]


def among(ids: list[str | int]) -> dict[str, Any]:
    """The server's filter of the documents of ``ids`` (at least one): ``{"id": {"in": ids}}``, or beyond the ids
    one ``in`` takes, the ``or`` of several."""
    runs = [{"id": {"in": ids[start : start + FILTER_IDS]}} for start in range(0, len(ids), FILTER_IDS)]
    return runs[0] if len(runs) == 1 else {"or": runs}


def metadata_of(fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON object in ``fields["metadata"]``; for a document written otherwise (that field null, or its own
    text rather than a JSON object), its fields that are not null."""
    stored = fields.get(METADATA)
    try:
        metadata = json.loads(stored) if isinstance(stored, str) else None
    except ValueError:
        metadata = None
    if isinstance(metadata, dict):
        return metadata
    return {name: value for name, value in fields.items() if value is not None}
