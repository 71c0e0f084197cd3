"""Filters on a documents table's payload fields: parsed once, evaluated over whole Arrow columns.

A filter is JSON, as the search request carries it:

- ``{"lang": "en"}``: equality (for a list-of-strings field, "has this tag");
- ``{"tags": {"in": ["a", "b"]}}``: any of the values (for a list field, any of its tags);
- ``{"source": {"prefix": "licenses/"}}``: text that starts so (for a list field, a tag that does);
- ``{"tags": {"contains": ["a", "b"]}}``: a list field holding all of these tags (one tag: a string);
  ``{"title": {"contains": "GPL"}}``: text holding this substring (case-sensitive);
- ``{"year": {"gte": 2000, "lt": 2010}}``: a range, for integer, float and timestamp fields (timestamps as
  ISO 8601 text); ``{"year": {"eq": 2001}}`` and ``{"ne": ...}`` as well;
- ``{"id": "lee-010"}``, ``{"id": {"in": [...]}}``, ``{"id": {"ne": ...}}``: the documents' own ids (not a
  field: the import refuses a field named ``id``, and on a table imported before with one, ``id`` is refused),
  read as the table reads ids (``"7"`` is 7 in an integer-id table); an id the table does not have passes no row;
- ``{"not": F}``, ``{"and": [F, ...]}``, ``{"or": [F, ...]}`` (never fields: the import refuses a field so
  named, and on a table imported before with one, such a key given a field's value is refused naming it);
  several keys in one object all must hold.

A null (missing) value passes no condition but ``ne`` and ``not``. Each condition is one Arrow compute call
over the column (no Python loop over documents); the result is a :class:`RowSet`, a boolean per row with the
passing rows' ids, which the search hands to FAISS as an id selector or searches exactly (``index.engine.table``).
Unknown fields, operators a field's type lacks and values of the wrong type are :class:`InvalidQuery` errors
naming them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from index.engine.budget import spend
from index.errors import InvalidQuery, clipped, shown
from index.store.payload import (
    BOOLEAN,
    FLOAT,
    ID_KEY,
    INTEGER,
    LOGICAL,
    STRING,
    STRING_LIST,
    TIMESTAMP,
    Payload,
    timestamp_type,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from index.lazy import pa, pc

RANGE = ("gt", "gte", "lt", "lte")
OPERATORS: dict[str, tuple[str, ...]] = {
    STRING: ("eq", "ne", "in", "prefix", "contains"),
    STRING_LIST: ("eq", "ne", "in", "prefix", "contains"),
    BOOLEAN: ("eq", "ne"),
    INTEGER: ("eq", "ne", "in", *RANGE),
    FLOAT: ("eq", "ne", "in", *RANGE),
    TIMESTAMP: ("eq", "ne", "in", *RANGE),
}
ID_OPERATORS = ("eq", "ne", "in")
MAX_DEPTH = 32  # nesting of and/or/not
MAX_VALUES = 10_000  # values of one "in"
FLOAT_MAX = float(np.finfo(np.float64).max)
COMPARE = {"eq": "equal", "ne": "not_equal", "gt": "greater", "gte": "greater_equal", "lt": "less", "lte": "less_equal"}


@dataclass(eq=False)
class RowSet:
    """The rows a filter lets through: a boolean per row, their ids in order, and FAISS's selector for them."""

    mask: np.ndarray
    ids: np.ndarray = field(init=False)
    count: int = field(init=False)  # how many pass: len(ids), read on every search without a call
    _bitmap: np.ndarray | None = field(default=None, init=False, repr=False)
    _selector: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.ids = np.flatnonzero(self.mask)
        self.count = len(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """What the set holds: its mask, its row ids and (once made) the selector's bitmap."""
        bitmap = 0 if self._bitmap is None else self._bitmap.nbytes
        return int(self.mask.nbytes + self.ids.nbytes + bitmap)

    @property
    def fraction(self) -> float:
        return len(self.ids) / max(1, len(self.mask))

    def head(self, rows: int) -> RowSet:
        """Only the passing rows among the first ``rows`` (a search restricted to them)."""
        mask = self.mask.copy()
        mask[rows:] = False
        return RowSet(mask)

    def selector(self) -> faiss.IDSelector:
        """FAISS's selector of the passing rows (a bitmap, one bit per row; the selector keeps it alive)."""
        if self._selector is None:
            self._bitmap = np.packbits(self.mask, bitorder="little")
            self._selector = faiss.IDSelectorBitmap(len(self.mask), faiss.swig_ptr(self._bitmap))
        selector: faiss.IDSelector = self._selector
        return selector


def evaluate(payload: Payload, spec: Any) -> RowSet:
    """The rows of ``payload`` that pass the filter ``spec`` (JSON, as described in the module docstring)."""
    rows = len(payload)
    spend(
        rows * _conditions(spec),
        "filtering: the rows the conditions test",
        'send fewer conditions (one "in" holds many values)',
        f" (each condition, and/or/not included, tests the {rows:,} rows)",
    )
    passing = _node(payload, spec, "filter", 0)
    return RowSet(np.asarray(passing.to_numpy(zero_copy_only=False), dtype=bool))


def _node(payload: Payload, spec: Any, where: str, depth: int) -> pa.Array:
    if depth > MAX_DEPTH:
        raise InvalidQuery(f"{where}: a filter nests at most {MAX_DEPTH} levels of and/or/not")
    if not isinstance(spec, dict) or not spec:
        raise InvalidQuery(f'{where}: a filter is a non-empty object, e.g. {{"lang": "en"}}, got {shown(spec)}')
    parts = []
    for key, value in spec.items():
        here = f"{where}.{clipped(str(key))}"
        if key == "not":
            if not isinstance(value, dict):
                _logical_field(payload, key, here)
            parts.append(pc.invert(_node(payload, value, here, depth + 1)))
        elif key in ("and", "or"):
            if not isinstance(value, list) or not value:
                _logical_field(payload, key, here)
                raise InvalidQuery(f"{here}: takes a non-empty list of filters")
            items = [_node(payload, item, f"{here}[{i}]", depth + 1) for i, item in enumerate(value)]
            parts.append(_combine(items, pc.and_ if key == "and" else pc.or_))
        elif key == ID_KEY:
            parts.append(_ids(payload, value, here))
        else:
            parts.append(_field(payload, key, value, here))
    return _combine(parts, pc.and_)


def _logical_field(payload: Payload, key: str, where: str) -> None:
    """Refuse a filter's ``and``/``or``/``not`` given a field's value on a table with a field of that name
    (imported before the import refused one): no filter can test that field."""
    if key in payload.fields:
        raise InvalidQuery(
            f"{where}: the table has a field named {key!r}, imported before fields could not be named so; a "
            f"filter's {key!r} combines filters, so no filter tests that field: import the table again with the "
            "field renamed"
        )


def _conditions(spec: Any) -> int:
    """The conditions of a filter, as ``max_filter_conditions`` counts them: each operator on a field, each
    and/or/not (what is not a filter counts nothing: its evaluation refuses it)."""
    count, pending = 0, [spec]
    while pending:
        node = pending.pop()
        for key, value in node.items() if isinstance(node, dict) else ():
            if key in LOGICAL:
                count += 1
                pending.extend(value if isinstance(value, list) else [value])
            else:
                count += len(value) if isinstance(value, dict) and value else 1
    return count


def _combine(parts: list[pa.Array], op: Callable[..., Any]) -> pa.Array:
    result = parts[0]
    for part in parts[1:]:
        result = op(result, part)
    return result


def _field(payload: Payload, name: str, condition: Any, where: str) -> pa.Array:
    kind = payload.fields.get(name)
    if kind is None:
        known = ", ".join(repr(f) for f in payload.fields) or "none"
        raise InvalidQuery(f"{where}: the table has no field {shown(name)} (its fields: {known}; and, or, not combine)")
    column = payload.column(name)
    operations = _operations(condition, OPERATORS[kind], f"{kind} field {name!r} takes", where)
    return _combine([_condition(column, kind, op, value, f"{where}.{op}") for op, value in operations], pc.and_)


def _operations(condition: Any, allowed: tuple[str, ...], subject: str, where: str) -> list[tuple[str, Any]]:
    """The (operator, value) pairs of ``condition`` (a bare value is ``eq``), each operator one ``allowed``."""
    if not isinstance(condition, dict):
        condition = {"eq": condition}
    if not condition:
        raise InvalidQuery(f"{where}: give a value or an operator ({', '.join(allowed)})")
    for op in condition:
        if op not in allowed:
            raise InvalidQuery(f"{where}: {subject} the operators {', '.join(allowed)}, not {shown(op)}")
    return list(condition.items())


def _ids(payload: Payload, condition: Any, where: str) -> pa.Array:
    """The rows whose id is (``eq``), is not (``ne``) or is one of (``in``) the ids given: a binary search of
    the table's sorted ids per id asked (``Payload.find_rows``), not a pass over the rows."""
    if ID_KEY in payload.fields:  # imported before the import refused it: its filters named that field so
        raise InvalidQuery(
            f"{where}: the table has a field named {ID_KEY!r} beside its ids ({payload.id_field!r}), imported before "
            f"a filter's {ID_KEY!r} meant the documents' ids; import it again with that field renamed, or as the ids "
            f"(--id-field {ID_KEY})"
        )
    parts = []
    for op, value in _operations(condition, ID_OPERATORS, "the documents' ids take", where):
        here = f"{where}.{op}"
        if op == "in" and (not isinstance(value, list) or not value or len(value) > MAX_VALUES):
            raise InvalidQuery(f"{here}: takes a list of 1 to {MAX_VALUES:,} ids")
        asked = [_id(v, f"{here}[{i}]") for i, v in enumerate(value)] if op == "in" else [_id(value, here)]
        rows = payload.find_rows(asked)
        passing = np.zeros(len(payload), dtype=bool)
        passing[rows[rows >= 0]] = True
        parts.append(pa.array(~passing if op == "ne" else passing))
    return _combine(parts, pc.and_)


def _id(value: Any, where: str) -> str | int:
    """An id asked for: text or a whole number (``2.0`` is 2, as JSON Schema counts it), as a search's ``id``."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise InvalidQuery(f"{where}: a document's id is text or a whole number, got {_given(value)}")


def _condition(column: pa.Array, kind: str, op: str, value: Any, where: str) -> pa.Array:
    """One operator on one column: a boolean per row, nulls (missing values) counted as not passing."""
    if op == "in":
        if not isinstance(value, list) or not value or len(value) > MAX_VALUES:
            raise InvalidQuery(f"{where}: takes a list of 1 to {MAX_VALUES:,} values")
        asked = [_value(kind, v, f"{where}[{i}]") for i, v in enumerate(value)]
        if kind == FLOAT and 0.0 in asked:  # is_in hashes -0.0 apart from 0.0, which eq (and IEEE) call equal
            asked += [0.0, -0.0]
        values = pa.array(asked, _scalar_type(kind))
        if kind == STRING_LIST:
            return _any_tag(column, lambda tags: pc.is_in(tags, value_set=values))
        return pc.fill_null(pc.is_in(column, value_set=values), False)
    if op == "contains" and kind == STRING_LIST:  # all of these tags
        tags = value if isinstance(value, list) else [value]
        if not tags or len(tags) > MAX_VALUES:
            raise InvalidQuery(f"{where}: takes a tag or a list of 1 to {MAX_VALUES:,} tags")
        wanted = pa.array([_value(kind, tag, f"{where}[{i}]") for i, tag in enumerate(tags)], pa.string())
        return _combine([_any_tag(column, _equal_to(tag)) for tag in wanted], pc.and_)
    if op in ("prefix", "contains"):
        match = _text_match(op, _value(kind, value, where))
        return _any_tag(column, match) if kind == STRING_LIST else pc.fill_null(match(column), False)
    scalar = pa.scalar(_value(kind, value, where), _scalar_type(kind))
    if kind == STRING_LIST:  # "has this tag"; ne: has it not
        has = _any_tag(column, lambda tags: pc.equal(tags, scalar))
        return pc.invert(has) if op == "ne" else has
    passing = getattr(pc, COMPARE[op])(column, scalar)  # Arrow's compute function by name
    return pc.fill_null(passing, op == "ne")


def _equal_to(tag: pa.Scalar) -> Callable[[pa.Array], pa.Array]:
    return lambda items: pc.equal(items, tag)


def _text_match(op: str, text: str) -> Callable[[pa.Array], pa.Array]:
    """prefix: the strings that start with ``text``; contains: those that hold it."""
    if op == "prefix":
        return lambda items: pc.starts_with(items, pattern=text)
    return lambda items: pc.match_substring(items, pattern=text)


def _any_tag(column: pa.Array, test: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """Per row of a list column: whether any of its items passes ``test`` (vectorised over the flat items)."""
    flat = pc.list_flatten(column)
    hits = np.asarray(pc.fill_null(test(flat), False).to_numpy(zero_copy_only=False), dtype=bool)
    parents = np.asarray(pc.list_parent_indices(column).to_numpy(), dtype=np.int64)
    passing = np.zeros(len(column), dtype=bool)
    passing[parents[hits]] = True
    return pa.array(passing)


def _scalar_type(kind: str) -> pa.DataType:
    return {
        STRING: pa.string(),
        STRING_LIST: pa.string(),
        INTEGER: pa.int64(),
        FLOAT: pa.float64(),
        BOOLEAN: pa.bool_(),
        TIMESTAMP: timestamp_type(),
    }[kind]


def _value(kind: str, value: Any, where: str) -> Any:
    """``value`` checked against the field's type (JSON numbers for numbers, ISO 8601 text for timestamps)."""
    ok: bool
    if kind in (STRING, STRING_LIST):
        ok = isinstance(value, str)
    elif kind == BOOLEAN:
        ok = isinstance(value, bool)
    elif kind == INTEGER:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not -(2**63) <= value < 2**63:
            raise InvalidQuery(
                f"{where}: {value} is beyond an integer field's 64 bits (-9223372036854775808 to 9223372036854775807)"
            )
    elif kind == FLOAT:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= FLOAT_MAX
        value = float(value) if ok else value
    else:
        return _timestamp(value, where)
    if not ok:
        article = "an" if kind == INTEGER else "a"
        raise InvalidQuery(f"{where}: {article} {kind} field is compared with {_expected(kind)}, got {_given(value)}")
    return value


def _timestamp(value: Any, where: str) -> dt.datetime:
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is None:
            return moment.replace(tzinfo=dt.UTC)
        if moment is not None:
            try:
                return moment.astimezone(dt.UTC)
            except OverflowError:  # the offset moves it out of years 1..9999
                raise InvalidQuery(f"{where}: {shown(value)} falls outside the years 1 to 9999 in UTC") from None
    raise InvalidQuery(
        f"{where}: a timestamp field is compared with ISO 8601 text (2001-12-24T05:30:00Z), got {_given(value)}"
    )


def _given(value: Any) -> str:
    """A filter's value as a message names it: null, true and false as the JSON it came in writes them (a client
    writes NaN and infinities as null), another as :func:`shown` quotes it."""
    return json.dumps(value) if value is None or isinstance(value, bool) else shown(value)


def _expected(kind: str) -> str:
    return {
        STRING: "text",
        STRING_LIST: "text (a tag)",
        BOOLEAN: "true or false",
        INTEGER: "a whole number",
        FLOAT: "a finite number",
    }[kind]
