"""Documents: the rows a reader found, checked and typed into a payload (ids, text, fields) and vectors.

Every check is vectorised (Arrow compute and numpy over whole columns); only the rows an error message names are
looked at one by one. A bad row is refused with its file and line (row for Parquet), or, with ``drop_invalid``,
left out and counted, with the first few reasons kept for the report:

- the vector: missing or null, of another length than most rows', a value that is null, NaN, infinite or beyond
  float32 (the first is named), all zeros;
- the id: missing, empty, longer than the API's ``max_token_chars`` (no route could name it), or a duplicate
  of an earlier row's (the first row keeps it);
- a float field that is NaN or infinite (JSON cannot carry it); a CSV cell that should hold a JSON array and
  does not;
- what the reader refused itself (a line that is not JSON, a value of another type than the field's first value,
  a CSV row with the wrong number of cells).

A field whose type no document field can have (an object, a list of numbers, ...) is refused as a whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from index.build.fields import (
    BLOCK_ROWS,
    INTEGER_TEXT,
    Checks,
    Rows,
    cast_text,
    column_error,
    describe_type,
    infer_text,
    json_lists,
    line_of,
    locate,
    typed_field,
    where,
)
from index.build.sources import DROP_HINT
from index.engine.encode import cancelled_out, no_known_piece
from index.engine.keyword import bools
from index.engine.knn import FLOAT32_MAX
from index.errors import InputError, counted, every, shown
from index.progress import note
from index.store.payload import ID_KEY, INTEGER, LOGICAL, STRING, contiguous, sort_ids
from index.store.rows import row_norms
from index.store.tokens import MAX_TOKEN_CHARS

REPORTED = 5  # reasons kept in the report of an import with drop_invalid
VECTOR_FIELDS = ("vector", "embedding")


@dataclass
class Embedded:
    """The texts of documents without vectors, embedded: what an :data:`Embed` answers."""

    matrix: np.ndarray  # float32 unit rows of the texts it could embed, in order
    ok: np.ndarray  # a boolean per text: embedded
    cancelled: dict[int, list[str]] = field(default_factory=dict)  # texts whose known words cancel out: those words
    # model-token tables' texts without a known piece: what the tokenizer left out (``Encoded.left_out``)
    left_out: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)


Embed = Callable[[Sequence[str | None]], Embedded]


@dataclass
class DocumentOptions:
    id_field: str | None = None  # None: "id", else the row number
    text_field: str | None = None  # None: "text", else no text
    vector_field: str | None = None  # None: "vector", else "embedding"
    drop_invalid: bool = False
    embed: Embed | None = None  # when the documents have no vector field: embeds their text
    encoder: dict[str, Any] | None = None  # the manifest's record of what ``embed`` is


@dataclass
class Documents:
    payload: pa.Table  # the id column, the text column (if any), then the fields
    matrix: np.ndarray  # float32, one row per document
    tokens: list[str]  # the ids as text: the table's tokens
    info: dict[str, Any]  # the manifest's "documents"
    report: dict[str, Any]  # what was dropped


# ---------------------------------------------------------------------------------------------- columns


@dataclass
class Vectors:
    matrix: np.ndarray  # float32, the rows listed in ``rows`` (those whose vector has the common length)
    rows: np.ndarray
    dim: int
    not_embedded: dict[str, int] = field(default_factory=dict)  # embedded texts: those that were not, by why


def embedded(name: str, column: pa.Array, checks: Checks, embed: Embed) -> Vectors:
    """The text field embedded: documents without text, with no token the encoder knows, or whose known words
    cancel out (their rows sum to zero), are row problems, counted apart."""
    texts: list[str | None] = column.to_pylist()
    found = embed(texts)

    def reason(row: int) -> str:
        if not texts[row]:
            return f"no text to embed ({name!r})"
        if row in found.cancelled:
            return cancelled_out(f"text {name!r}", texts[row] or "", found.cancelled[row], "the encoder").message
        if row in found.left_out:
            return no_known_piece(f"text {name!r}", texts[row] or "", *found.left_out[row], "the encoder").message
        return f"text {name!r} has no word the encoder knows"

    checks.add(~found.ok, reason)
    missing = sum(not texts[row] for row in np.flatnonzero(~found.ok).tolist())
    counts = {
        "no_text": missing,
        "no_known_word": int((~found.ok).sum()) - missing - len(found.cancelled),
        "cancelled_out": len(found.cancelled),
    }
    not_embedded = {why: count for why, count in counts.items() if count}
    if not_embedded:
        note(not_embedded_line(not_embedded))
    return Vectors(found.matrix, np.flatnonzero(found.ok), int(found.matrix.shape[1]), not_embedded)


NOT_EMBEDDED = {
    "no_text": ("document without text", "documents without text"),
    "no_known_word": ("text with no word the encoder knows", "texts with no word the encoder knows"),
    "cancelled_out": ("text whose known words cancel out", "texts whose known words cancel out"),
}


def not_embedded_line(counts: dict[str, int]) -> str:
    """The documents an import could not embed, by why (``texts_not_embedded`` of its cleaning report)."""
    parts = [f"{count:,} {NOT_EMBEDDED[why][count != 1]}" for why, count in counts.items() if why in NOT_EMBEDDED]
    return f"not embedded: {', '.join(parts)}"


def vectors(name: str, column: pa.Array, checks: Checks, rows: Rows) -> Vectors:
    """The vector field as float32 rows; missing, ragged, non-finite and zero vectors are row problems."""
    if rows.text_only:
        column, bad = json_lists(column, pa.float64(), rows)
        checks.add(bad, lambda row: f"vector {name!r} is not a JSON array of numbers")
    kind = column.type
    if pa.types.is_null(kind):
        column = pa.nulls(len(column), pa.list_(pa.float64()))
        kind = column.type
    listed = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    inner = kind.value_type if listed else None
    if inner is None or not (pa.types.is_integer(inner) or pa.types.is_floating(inner) or pa.types.is_null(inner)):
        raise column_error(rows, column, f"the vector field {name!r} holds {describe_type(kind)}, not lists of numbers")
    lengths = np.asarray(pc.list_value_length(column).fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    missing = lengths < 0
    sized = lengths[lengths > 0]
    dim = 0
    if len(sized):
        values, counts = np.unique(sized, return_counts=True)
        dim = int(values[np.argmax(counts)])
    checks.add(missing, lambda row: f"no vector ({name!r} is missing or null)")
    checks.add(
        ~missing & (lengths != dim),
        lambda row: (
            f"vector {name!r} has {counted(int(lengths[row]), 'value')}, expected {dim} (as most rows)"
            if lengths[row]
            else f"vector {name!r} is empty"
        ),
    )
    good = lengths == dim if dim else np.zeros(len(lengths), dtype=bool)
    chosen = np.flatnonzero(good)
    matrix = np.empty((len(chosen), dim), dtype=np.float32)
    filled = 0
    for start in range(0, len(column), BLOCK_ROWS):  # block by block: no full-size float64 copy
        block = column.slice(start, BLOCK_ROWS).filter(pa.array(good[start : start + BLOCK_ROWS]))
        values = block.flatten()
        if values.type not in (pa.float32(), pa.float64()):
            values = values.cast(pa.float64())
        flat = values.fill_null(float("nan")).to_numpy(zero_copy_only=False)
        with np.errstate(over="ignore"):
            matrix[filled : filled + len(block)] = flat.reshape(len(block), dim)
        filled += len(block)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = row_norms(matrix)
    nonfinite, zero = np.zeros(len(lengths), dtype=bool), np.zeros(len(lengths), dtype=bool)
    nonfinite[chosen] = ~np.isfinite(norms)
    zero[chosen] = norms == 0
    checks.add(nonfinite, lambda row: not_finite(name, column[row].as_py()))
    checks.add(zero, lambda row: f"vector {name!r} is all zeros (it has no direction to search by)")
    return Vectors(matrix, chosen, dim)


def not_finite(name: str, values: list[float | None]) -> str:
    """Why a vector has no finite float32 length: its first value that is null, NaN, infinite or beyond float32,
    else values whose squares are."""
    for at, value in enumerate(values, 1):
        if value is None:
            problem = "null"
        elif math.isnan(value):
            problem = "NaN"
        elif math.isinf(value):
            problem = "infinite"
        elif abs(value) > FLOAT32_MAX:
            problem = f"{value:g}, beyond float32"
        else:
            continue
        return f"vector {name!r} value {at} is {problem}"
    return f"vector {name!r} has values too large to normalise in float32 (their squares overflow)"


def document_ids(name: str, column: pa.Array, checks: Checks, rows: Rows) -> tuple[pa.Array, str]:
    """The id field as int64 or strings; missing and empty ids are row problems."""
    if rows.text_only:
        integers = cast_text(column, INTEGER_TEXT, pa.int64())
        column = integers if integers is not None else column.cast(pa.string())
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_null(kind):
        column, kind = pa.nulls(len(column), pa.string()), pa.string()
    if pa.types.is_integer(kind):
        try:
            column = column.cast(pa.int64())
        except pa.ArrowInvalid:
            raise column_error(rows, column, f"the id field {name!r} holds integers beyond 64 bits") from None
    elif not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise column_error(
            rows, column, f"the id field {name!r} holds {describe_type(kind)}; ids are strings or integers"
        )
    checks.add(bools(column.is_null()), lambda row: f"no id ({name!r} is missing or null)")
    if column.type != pa.int64():
        empty = pc.equal(pc.binary_length(column), 0).fill_null(False)
        checks.add(bools(empty), lambda row: "empty id")
        long = pc.greater(pc.utf8_length(column), MAX_TOKEN_CHARS).fill_null(False)
        checks.add(bools(long), lambda row: too_long(column[row].as_py()))
        return column, STRING
    return column, INTEGER


def too_long(ident: str) -> str:
    """Why an id is refused that no route could name (read, delete, search by)."""
    return (
        f"id of {len(ident):,} characters ({shown(ident)}): the API names a document by at most "
        f"{MAX_TOKEN_CHARS:,} (max_token_chars)"
    )


def document_text(name: str, column: pa.Array, rows: Rows) -> pa.Array:
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_null(kind):
        return pa.nulls(len(column), pa.string())
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise column_error(rows, column, f"the text field {name!r} holds {describe_type(kind)}, not strings")
    return column


def duplicates(ids: pa.Array, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Among ``candidates`` (rows, ascending), the rows whose id an earlier candidate has, and that earlier row."""
    if len(candidates) < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    chosen = ids.take(pa.array(candidates))
    order = sort_ids(chosen)  # stable: of equal ids, the earliest row comes first
    ordered = chosen.take(pa.array(order))
    same = bools(pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1)))
    starts = np.where(np.concatenate([[True], ~same]), np.arange(len(ordered)), 0)
    first = np.maximum.accumulate(starts)
    repeated = np.flatnonzero(same) + 1
    return candidates[order[repeated]], candidates[order[first[repeated]]]


# ---------------------------------------------------------------------------------------------- documents


def _field(rows: Rows, given: str | None, defaults: tuple[str, ...], option: str) -> str | None:
    names = rows.table.column_names
    if given is None:
        return next((d for d in defaults if d in names), None)
    if given not in names:
        known = ", ".join(repr(n) for n in names)
        raise InputError(rows.path, f"{option} {given!r}: no such field; the fields are {known}")
    return given


def no_vectors(rows: Rows) -> InputError:
    known = ", ".join(repr(n) for n in rows.table.column_names)
    return InputError(
        rows.path,
        "no vector field ('vector' or 'embedding'; name yours with --vector-field): documents need a vector each, "
        f"from your own encoder or embedded here from their text with --encoder TABLE; the fields are {known}",
    )


def _reasons(rows: Rows, checks: Checks, bad: np.ndarray) -> list[tuple[int, str]]:
    """The first few problems in file order: the reader's and the rows'."""
    first = np.flatnonzero(bad)[:REPORTED]
    found = [(int(line), checks.reason(int(row))) for row, line in zip(first, rows.lines(first), strict=True)]
    return sorted(found + rows.problems)[:REPORTED]


def none_left(invalid: int) -> str:
    """An import's refusal when each of its ``invalid`` rows is: "no documents left: the only row is invalid"."""
    return f"no documents left: {every(invalid, 'row')} {'is' if invalid == 1 else 'are'} invalid"


def prepare(rows: Rows, options: DocumentOptions) -> Documents:
    """Check and type ``rows`` into documents; raise :class:`InputError` for the first bad row, unless
    ``options.drop_invalid``."""
    table = rows.table
    if table.num_rows == 0 and rows.problems:  # every line was refused
        line, reason = min(rows.problems)
        if not options.drop_invalid:
            raise locate(rows, line, reason + DROP_HINT)
        raise InputError(rows.path, f"{none_left(len(rows.problems))}, {where(rows, line)}: {reason}")
    names = table.column_names
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise locate(rows, 1, f"field {repeated[0]!r} appears twice")
    vector_name = _field(rows, options.vector_field, VECTOR_FIELDS, "--vector-field")
    if vector_name is None and options.embed is None:
        raise no_vectors(rows)
    if vector_name is not None and options.embed is not None:
        raise InputError(
            rows.path,
            f"the documents have vectors ({vector_name!r}), and --encoder embeds documents that have none: import "
            "these vectors without --encoder, or leave the field out of the file to embed the texts",
        )
    id_name = _field(rows, options.id_field, ("id",), "--id-field")
    text_name = _field(rows, options.text_field, ("text",), "--text-field")
    chosen = [n for n in (vector_name, id_name, text_name) if n is not None]
    if len(set(chosen)) < len(chosen):
        twice = next(n for n in chosen if chosen.count(n) > 1)
        raise InputError(rows.path, f"field {twice!r} is named for two of --id-field, --text-field, --vector-field")
    if ID_KEY in names and ID_KEY not in chosen:  # filters read "id" as the documents' own ids
        raise InputError(
            rows.path,
            f"a field named {ID_KEY!r} beside the ids of --id-field {id_name!r}: a filter's {ID_KEY!r} is the "
            f"documents' ids; rename the field, or make it the ids (--id-field {ID_KEY})",
        )
    if combining := [n for n in names if n in LOGICAL and n not in chosen]:  # a filter's and/or/not combine
        raise InputError(
            rows.path,
            f"a field named {combining[0]!r}: a filter's {combining[0]!r} combines filters, so no filter could "
            "test the field; rename it",
        )
    n = table.num_rows
    if n == 0:
        raise InputError(rows.path, "no documents")
    checks = Checks(n)

    def column(name: str) -> pa.Array:
        return contiguous(table.column(name))

    if vector_name is not None:
        found = vectors(vector_name, column(vector_name), checks, rows)
    elif text_name is None or options.embed is None:
        raise InputError(rows.path, "--encoder embeds each document's text, and the documents have no text field")
    else:
        found = embedded(text_name, column(text_name), checks, options.embed)
    if id_name is not None:
        ids, id_type = document_ids(id_name, column(id_name), checks, rows)
    else:
        ids, id_type = pa.array(np.arange(n, dtype=np.int64)), INTEGER
    text = document_text(text_name, column(text_name), rows) if text_name is not None else None
    typing = infer_text if rows.text_only else typed_field
    fields = {name: typing(name, column(name), checks, rows) for name in names if name not in chosen}

    bad = checks.bad()
    repeats, earlier = duplicates(ids, np.flatnonzero(~bad))
    if len(repeats):
        first_at = np.full(n, -1, dtype=np.int64)
        first_at[repeats] = earlier
        mask = np.zeros(n, dtype=bool)
        mask[repeats] = True
        checks.add(
            mask,
            lambda row: f"duplicate id {ids[row].as_py()!r}, first at {where(rows, line_of(rows, int(first_at[row])))}",
        )
        bad |= mask
    dropped = int(bad.sum()) + len(rows.problems)
    report: dict[str, Any] = {}
    if dropped:
        reasons = _reasons(rows, checks, bad)
        if not options.drop_invalid:
            line, reason = reasons[0]
            raise locate(rows, line, reason + DROP_HINT)
        report = {"invalid_rows_dropped": dropped, "invalid_rows": [f"{where(rows, at)}: {r}" for at, r in reasons]}
        if found.not_embedded:
            report["texts_not_embedded"] = found.not_embedded
    keep = ~bad
    if not keep.any():
        raise InputError(rows.path, f"{none_left(dropped)}, {report['invalid_rows'][0]}")

    kept = pa.array(keep)

    def chosen_rows(values: pa.Array) -> pa.Array:
        return values if dropped == 0 else values.filter(kept)

    columns = {id_name or "id": chosen_rows(ids)}
    if text is not None and text_name is not None:
        columns[text_name] = chosen_rows(text)
    for name, (values, _) in fields.items():
        columns[name] = chosen_rows(values)
    payload = pa.table(columns)
    matrix = found.matrix if keep[found.rows].all() else found.matrix[keep[found.rows]]
    info = {
        "count": payload.num_rows,
        "source_format": rows.source_format,
        "id_field": id_name or "id",
        "id_type": id_type,
        "ids_from": "field" if id_name is not None else "row number",
        "text_field": text_name,
        "text_non_null": payload.num_rows - payload.column(text_name).null_count if text_name is not None else 0,
        "vector_field": vector_name,
        **({"encoder": options.encoder} if vector_name is None and options.encoder else {}),
        "dim": found.dim,
        "fields": {
            name: {"type": kind, "non_null": payload.num_rows - payload.column(name).null_count}
            for name, (_, kind) in fields.items()
        },
    }
    tokens = pc.cast(payload.column(0), pa.string()).to_pylist()
    return Documents(payload=payload, matrix=matrix, tokens=tokens, info=info, report=report)
