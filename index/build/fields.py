"""Field types of documents: a reader's Arrow columns typed as string, integer, float, boolean, timestamp or
string_list, with the helpers that locate a problem in the source (file and line, or row for Parquet).

- JSON Lines and Parquet columns keep their own types (integers of any width become int64, floats float64, dates
  and timestamps timestamp[us, UTC], times without a zone taken as UTC); JSON strings that are all ISO 8601 dates
  or times become timestamps;
- CSV cells are text: a column is integer, float, boolean or timestamp when every cell is one (integers without
  leading zeros, so ``007`` stays text), else string; a column whose first cell is a JSON array holds lists of
  strings, and vectors are JSON arrays of numbers. Cells that should be JSON arrays are parsed by pyarrow's JSON
  parser a block at a time, cell by cell in Python only for a block it refuses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from index.engine.keyword import bools
from index.errors import InputError
from index.store.payload import (
    BOOLEAN,
    FLOAT,
    INTEGER,
    STRING,
    STRING_LIST,
    TIMESTAMP,
    contiguous,
    string_offsets,
    timestamp_type,
)

BLOCK_ROWS = 16_384  # rows per block when vectors are copied out of Arrow lists, or CSV cells parsed as JSON
SUPPORTED = "strings, integers, floats, booleans, timestamps or lists of strings"
INTEGER_TEXT = r"^[+-]?(?:0|[1-9][0-9]*)$"  # no leading zeros: "007" stays text
FLOAT_TEXT = r"^[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
BOOLEAN_TEXT = ("true", "false", "True", "False", "TRUE", "FALSE")
ISO_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$"


@dataclass
class Rows:
    """What a format reader found: one column per source field, and where each row came from."""

    table: pa.Table
    path: Path
    source_format: str  # "jsonl", "csv" or "parquet"
    lines: Callable[[np.ndarray], np.ndarray]  # rows -> their line numbers (row numbers from 1 for Parquet)
    unit: str = "line"  # or "row"
    problems: list[tuple[int, str]] = field(default_factory=list)  # rows the reader refused: (line, reason)
    text_only: bool = False  # CSV: every column is text, typed here
    infer_timestamps: bool = True  # strings that are all ISO 8601 dates/times make a timestamp field


def locate(rows: Rows, number: int, problem: str) -> InputError:
    if rows.unit == "line":
        return InputError(rows.path, problem, line=number)
    return InputError(rows.path, f"{where(rows, number)}: {problem}")


def where(rows: Rows, number: int) -> str:
    """``line 7``, ``row 7``, or a folder's ``passage 7 (notes/a.txt#2)``: the file a passage was cut from."""
    if rows.unit == "passage":
        return f"passage {number} ({rows.table.column('id')[number - 1].as_py()})"
    return f"{rows.unit} {number}"


def line_of(rows: Rows, row: int) -> int:
    return int(rows.lines(np.asarray([row], dtype=np.int64))[0])


def column_error(rows: Rows, column: pa.Array, problem: str) -> InputError:
    """An error about a whole field, located at its first value."""
    present = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    first = int(np.argmax(present)) if present.any() else 0
    return locate(rows, line_of(rows, first), problem)


def describe_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_struct(arrow_type) or pa.types.is_map(arrow_type):
        return "objects"
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return f"lists of {describe_type(arrow_type.value_type)}"
    names = {"double": "floats", "float": "floats", "int64": "integers", "string": "strings", "bool": "booleans"}
    return names.get(str(arrow_type), f"values of type {arrow_type}")


class Checks:
    """Per-row problems as boolean masks; a row's reason is worded only when a message names it."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.found: list[tuple[np.ndarray, Callable[[int], str]]] = []

    def add(self, mask: np.ndarray, describe: Callable[[int], str]) -> None:
        if mask.any():
            self.found.append((mask, describe))

    def bad(self) -> np.ndarray:
        bad = np.zeros(self.rows, dtype=bool)
        for mask, _ in self.found:
            bad |= mask
        return bad

    def reason(self, row: int) -> str:
        return next(describe(row) for mask, describe in self.found if mask[row])


def _all(mask: pa.Array) -> bool:
    return bool(pc.all(mask).as_py() is not False)


def as_timestamps(column: pa.Array) -> pa.Array | None:
    """Strings that are all ISO 8601 dates or times as timestamp[us, UTC] (no zone: UTC), else None."""
    values = column.drop_null()
    if not len(values) or not _all(pc.match_substring_regex(values, ISO_TIMESTAMP)):
        return None
    text = pc.replace_substring_regex(column, pattern=r"^(\d{4}-\d{2}-\d{2})$", replacement=r"\1T00:00:00")
    zoned = pc.match_substring_regex(text, r"(?:Z|[+-]\d{2}:?\d{2})$")
    text = pc.if_else(zoned, text, pc.binary_join_element_wise(text, "Z", ""))
    try:
        return pc.cast(text, timestamp_type())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # e.g. month 13: not dates after all


def cast_text(values: pa.Array, pattern: str, to: pa.DataType) -> pa.Array | None:
    present = values.drop_null()
    if not len(present) or not _all(pc.match_substring_regex(present, pattern)):
        return None
    try:
        return pc.cast(values, to)
    except pa.ArrowInvalid:
        return None  # beyond int64


def infer_text(name: str, column: pa.Array, checks: Checks, rows: Rows) -> tuple[pa.Array, str]:
    """A CSV column (text) typed by what all its cells are: integer, float, boolean, timestamp, else string;
    a column whose first cell is a JSON array holds lists of strings, and every cell must be one."""
    present = column.drop_null()
    if not len(present):
        return column.cast(pa.string()), STRING
    if _json_array(str(present[0].as_py())):
        lists, bad = json_lists(column, pa.string(), rows)
        checks.add(bad, lambda row: f"field {name!r} is not a JSON array of strings, as its first value is")
        return lists, STRING_LIST
    if (integers := cast_text(column, INTEGER_TEXT, pa.int64())) is not None:
        return integers, INTEGER
    if (floats := cast_text(column, FLOAT_TEXT, pa.float64())) is not None:
        if _all(pc.match_substring_regex(present, INTEGER_TEXT)):  # whole numbers beyond 64 bits: as written
            return column.cast(pa.string()), STRING
        return floats, FLOAT
    if _all(pc.is_in(present, pa.array(BOOLEAN_TEXT))):
        true = pc.is_in(column, pa.array(BOOLEAN_TEXT[0::2]))
        return pc.if_else(column.is_null(), pa.scalar(None, pa.bool_()), true), BOOLEAN
    if (timestamps := as_timestamps(column)) is not None:
        return timestamps, TIMESTAMP
    return column.cast(pa.string()), STRING


def typed_field(name: str, column: pa.Array, checks: Checks, rows: Rows) -> tuple[pa.Array, str]:
    """A JSONL or Parquet column in its field type; strings that are all dates or times become timestamps
    (JSONL, whose values have no timestamp type)."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_null(kind):
        return pa.nulls(len(column), pa.string()), STRING
    if pa.types.is_boolean(kind):
        return column, BOOLEAN
    if pa.types.is_integer(kind):
        try:
            return column.cast(pa.int64()), INTEGER
        except pa.ArrowInvalid:
            raise column_error(rows, column, f"field {name!r} holds integers beyond 64 bits") from None
    if pa.types.is_floating(kind):
        floats = column.cast(pa.float64())
        finite = pc.is_finite(floats)
        checks.add(~bools(finite.fill_null(True)), lambda row: f"field {name!r} is NaN or infinite")
        return floats, FLOAT
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        timestamps = as_timestamps(column) if rows.infer_timestamps else None
        return (column, STRING) if timestamps is None else (timestamps, TIMESTAMP)
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        if pa.types.is_date(kind) or kind.tz is None:  # no zone: the time is UTC
            column = column.cast(pa.timestamp("us"), safe=False)
        return column.cast(timestamp_type(), safe=False), TIMESTAMP
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        inner = kind.value_type
        if pa.types.is_dictionary(inner):
            inner = inner.value_type
        if pa.types.is_string(inner) or pa.types.is_large_string(inner) or pa.types.is_null(inner):
            return column.cast(pa.list_(pa.string())), STRING_LIST
    raise column_error(rows, column, f"field {name!r} holds {describe_type(kind)}; a document field holds {SUPPORTED}")


def _json_array(text: str) -> bool:
    try:
        return isinstance(json.loads(text), list)
    except ValueError:
        return False


def _json_cell_ok(cell: str | None, numbers: bool) -> bool:
    """Whether a CSV cell is a JSON array of numbers (or of strings); an empty cell is simply missing."""
    if cell is None:
        return True
    try:
        value = json.loads(cell, parse_float=_finite)
    except (ValueError, RecursionError):
        return False
    if value is None:
        return True
    if not isinstance(value, list):
        return False
    if numbers:
        return all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in value)
    return all(v is None or isinstance(v, str) for v in value)


def _finite(text: str) -> float:
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"{text} is beyond a double")
    return value


def _parse_cells(cells: pa.Array, value_type: pa.DataType) -> pa.Array | None:
    """CSV cells holding JSON arrays as one list array, by pyarrow's JSON parser; None if any cell is not one."""
    cells = pc.replace_substring_regex(cells.cast(pa.large_string()), pattern=r"[\r\n]", replacement=" ")
    large = pa.large_string()
    lines = pc.binary_join_element_wise(
        pa.scalar('{"v":', large), cells.fill_null("null"), pa.scalar("}\n", large), pa.scalar("", large)
    )
    longest = pc.max(pc.binary_length(lines)).as_py() or 0
    offsets = string_offsets(lines)
    text = lines.buffers()[2][int(offsets[0]) : int(offsets[-1])]  # the lines back to back: JSON Lines
    try:
        table = pajson.read_json(
            pa.BufferReader(text),
            read_options=pajson.ReadOptions(block_size=max(1 << 20, 2 * longest + 2)),
            parse_options=pajson.ParseOptions(
                explicit_schema=pa.schema([("v", pa.list_(value_type))]), unexpected_field_behavior="error"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(cells):  # a cell held more than one JSON value
        return None
    return contiguous(table.column(0))


def json_lists(column: pa.Array, value_type: pa.DataType, rows: Rows) -> tuple[pa.Array, np.ndarray]:
    """CSV cells that hold JSON arrays (of numbers or of strings) as a list array, block by block.

    Returns the lists and which cells were not such an array (they become null). Only a block that pyarrow
    refuses is looked at cell by cell.
    """
    numbers = pa.types.is_floating(value_type)
    parts, bad = [], np.zeros(len(column), dtype=bool)
    for start in range(0, len(column), BLOCK_ROWS):
        cells = column.slice(start, BLOCK_ROWS)
        lists = _parse_cells(cells, value_type)
        if lists is None:
            wrong = np.fromiter((not _json_cell_ok(c, numbers) for c in cells.to_pylist()), bool, len(cells))
            bad[start : start + len(cells)] = wrong
            lists = _parse_cells(pc.if_else(pa.array(wrong), pa.scalar(None, cells.type), cells), value_type)
            if lists is None:
                raise InputError(rows.path, "cannot read the JSON arrays of a column")
        parts.append(lists)
    return pa.concat_arrays(parts) if parts else pa.array([], pa.list_(value_type)), bad
