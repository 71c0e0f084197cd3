"""Documents with vectors: JSON Lines, Parquet or CSV (one document per row), or a directory of text files.

The reader finds the rows (:class:`index.build.fields.Rows`); :func:`index.build.documents.prepare` checks and
types them; the table's tokens are the document ids and its payload (ids, text, fields) goes into the artifact as
``payload.arrow`` and ``payload_ids.arrow`` (:mod:`index.store.payload`).

- **JSON Lines** (``.jsonl``, ``.ndjson``, ``.json``; ``.gz`` too): one JSON object per line; blank lines are
  skipped. pyarrow's JSON parser reads blocks of lines; when it refuses the file (bad JSON, a value whose type
  differs from the field's first value) the lines are checked one by one in Python, which names each bad line.
- **CSV** (``.csv``, ``.csv.gz``): a header line, then one row per record (quoted cells may span lines). Cells
  are text: each column is typed by what all its cells are (see ``index.build.documents.infer_text``); vectors and
  lists of strings are JSON arrays in a cell.
- **Parquet** (``.parquet``): typed columns, read in batches of 65,536 rows.
- **A folder** of text files (any file whose content is text, ``.gz`` decompressed): passages
  (:mod:`index.build.passages`), which have no vectors yet; what it skipped goes into the manifest's source.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from index.build.documents import DocumentOptions, Documents, Embed, prepare
from index.build.embed_documents import TextEncoder
from index.build.fields import Rows
from index.build.passages import DEFAULT_CHUNK_WORDS, Folder, passages_table, read_folder
from index.build.sources import BOM, RawTable, ReadOptions, open_text, read_bytes, reading, undecodable_lines
from index.engine.keyword import Tokenizer, for_documents
from index.errors import InputError
from index.progress import Progress
from index.store.payload import KIND, payload_files

CHUNK_BYTES = 8 << 20  # JSON Lines are parsed this many bytes of whole lines at a time
BATCH_ROWS = 65_536
CSV_BLOCK_BYTES = 4 << 20  # CSV is parsed in blocks of this many bytes, or more for a longer record
MAX_CSV_BLOCK_BYTES = 2**31 - 1  # pyarrow's largest
BLANK_LINE = re.compile(rb"\n[ \t\r]*(?=\n|\Z)")  # a blank line (what pyarrow's JSON parser skips), after its newline
FIRST_BLANK = re.compile(rb"[ \t\r]*(?:\n|\Z)")
# An integer literal of 19 digits or more, which may not fit in 64 bits: pyarrow's parser would make its column
# floats (and round it), so a block holding one as a value is checked line by line, where one past 64 bits is
# refused (such digits in a string, "between 0 and 18446744073692774399" in a text, are no such value).
LONG_INTEGER = re.compile(rb"(?<![\w.+-])-?\d{19,}(?![\d.eE])")
INT64 = range(-(2**63), 2**63)


def read(path: Path, options: ReadOptions) -> RawTable:
    """Documents and their vectors as a table whose tokens are the ids; the payload rides along as files."""
    documents, tokenizer, source = read_documents(path, options)
    keyword_info, keyword_files = for_documents(documents.payload, documents.info, tokenizer)  # BM25, if any text
    return RawTable(
        tokens=documents.tokens,
        matrix=documents.matrix,
        report=documents.report,
        info={KIND: documents.info, **keyword_info},
        kind=KIND,
        extra_files={**payload_files(documents.payload), **keyword_files},
        source=source,
    )


def read_documents(
    path: Path, options: ReadOptions, embed_with: Callable[[TextEncoder], Embed] | None = None
) -> tuple[Documents, Tokenizer, dict[str, Any]]:
    """The documents of ``path``, checked and embedded; the keyword index's tokenizer; the manifest's source
    additions (a folder: the files read). ``embed_with(encoder)``: what embeds the texts instead of
    ``encoder.embed`` (Ray's actors, ``index.build.ray_build``)."""
    path = Path(path)
    try:
        tokenizer = Tokenizer.named(options.stopwords, options.stemmer)
    except ValueError as exc:
        raise InputError(path, str(exc)) from None
    encoder = None if options.encoder is None else TextEncoder.open(options.encoder)
    folder = (
        read_folder(path, options.encoding, options.unicode_errors, options.drop_invalid) if path.is_dir() else None
    )
    rows = read_rows(path, options, folder)
    document_options = DocumentOptions(options.id_field, options.text_field, options.vector_field, options.drop_invalid)
    if encoder is not None:
        embed = encoder.embed if embed_with is None else embed_with(encoder)
        document_options.embed, document_options.encoder = embed, encoder.info()
    documents = prepare(rows, document_options)
    del rows  # the source's bytes and columns, before the payload is written out
    return documents, tokenizer, {} if folder is None else folder.source_info()


def file_kind(path: Path) -> str:
    """jsonl, csv or parquet: from the name, else from the first bytes."""
    name = path.name.lower().removesuffix(".gz")
    for kind, suffixes in (("jsonl", (".jsonl", ".ndjson", ".json")), ("csv", (".csv",)), ("parquet", (".parquet",))):
        if name.endswith(suffixes):
            return kind
    with open(path, "rb") as handle:
        if handle.read(4) == b"PAR1":
            return "parquet"
    with reading(path), open_text(path) as handle:
        start = handle.read(4096).removeprefix(BOM).lstrip()
    return "jsonl" if start.startswith(b"{") else "csv"


def read_rows(path: Path, options: ReadOptions, folder: Folder | None = None) -> Rows:
    if path.is_dir():
        folder = folder or read_folder(path, options.encoding, options.unicode_errors, options.drop_invalid)
        folder.report()
        chunk_words = options.chunk_words or DEFAULT_CHUNK_WORDS
        if not folder.files:
            first = f" (first: {folder.skipped[0][0]}: {folder.skipped[0][1]})" if folder.skipped else ""
            raise InputError(path, f"no text files in this folder: {len(folder.skipped):,} skipped{first}")
        passages = passages_table(folder, chunk_words)
        if options.encoder is None:
            raise _passages_without_vectors(path, folder, passages.num_rows)
        return Rows(passages, path, "passages", lambda found: np.asarray(found, dtype=np.int64) + 1, unit="passage")
    kind = file_kind(path)
    if kind == "parquet":
        return read_parquet(path)
    if kind == "csv":
        return read_csv(path)
    return read_jsonl(path)


def _passages_without_vectors(path: Path, folder: Folder, passages: int) -> InputError:
    """Passages are found and checked (bad UTF-8 names its file and line), but they have no vectors yet."""
    return InputError(
        path,
        f"{passages:,} passages from {len(folder.files):,} text files, but no vectors: embed them with "
        "--encoder TABLE (a table of --data-dir), or import a JSONL, Parquet or CSV file with each document's "
        "vector in a field (--vector-field, default 'vector', else 'embedding')",
    )


# ---------------------------------------------------------------------------------------------- line numbers


def _blank_lines(data: bytes) -> np.ndarray:
    """Line numbers (from 1) of the blank lines; the empty piece after a last newline is no line."""
    found = [1] if FIRST_BLANK.match(data) and data else []
    line, position = 1, 0
    for match in BLANK_LINE.finditer(data):  # from the newline before each blank line: no scan at every position
        if match.end() == len(data) and match.end() - match.start() == 1:
            break
        line += data.count(b"\n", position, match.start()) + 1
        position = match.start() + 1
        found.append(line)
    return np.asarray(found, dtype=np.int64)


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


class _Lines:
    """Row -> line number for JSON Lines (a row per line that is not blank), worked out when a message needs it."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._numbers: np.ndarray | None = None

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        if self._numbers is None:
            everything = np.arange(1, _line_count(self._data) + 1, dtype=np.int64)
            self._numbers = np.setdiff1d(everything, _blank_lines(self._data), assume_unique=True)
        return self._numbers[np.asarray(rows, dtype=np.int64)]


# ---------------------------------------------------------------------------------------------- JSON Lines


def read_jsonl(path: Path) -> Rows:
    data = read_bytes(path).removeprefix(BOM)
    if not data.strip():
        raise InputError(path, "empty file: no documents")
    if data.lstrip().startswith(b"["):
        raise InputError(path, "a JSON array, not JSON Lines: write one JSON object per line", line=1)
    table = _parse_jsonl(path, data)
    if table is not None:
        return Rows(table, path, "jsonl", _Lines(data))
    return _checked_jsonl(path, data)


class _Refused(Exception):
    """pyarrow's JSON parser refused a block: the lines are checked one by one instead."""


def _parse_jsonl(path: Path, data: bytes) -> pa.Table | None:
    """Blocks of whole lines through pyarrow's JSON parser; None when it refuses them."""
    buffer = pa.py_buffer(data)
    tables, start = [], 0
    try:
        with Progress(f"reading {path.name}", _line_count(data)) as progress:
            while start < len(data):
                end = data.find(b"\n", min(start + CHUNK_BYTES, len(data)) - 1)
                end = len(data) if end < 0 else end + 1
                chunk = data[start:end]
                lines = _line_count(chunk)
                try:
                    chunk.decode("utf-8")  # pyarrow's parser takes any bytes in a string: the line check names them
                except UnicodeDecodeError:
                    raise _Refused from None
                if _long_integer(chunk):
                    raise _Refused
                try:
                    table = _read_json(buffer.slice(start, end - start), block_size=max(1 << 20, len(chunk) + 1))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    raise _Refused from None
                if table.num_rows != lines - len(_blank_lines(chunk)):
                    raise _Refused  # a line held two objects: the line-by-line check names it
                tables.append(table)
                progress.advance(lines)
                start = end
    except _Refused:
        return None
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # Blocks typed a field apart (all timestamps in one, other strings in another): the whole file at once.
        try:
            return _read_json(buffer)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None


def _long_integer(chunk: bytes) -> bool:
    """Whether a line of ``chunk`` holds an integer of 19 digits or more as a value, or may (it is no JSON: the
    line-by-line check names it). Only the lines where such digits appear are parsed, here in Python."""
    start = 0
    for match in LONG_INTEGER.finditer(chunk):
        if match.start() < start:  # on a line read already
            continue
        start = chunk.rfind(b"\n", 0, match.start()) + 1
        end = chunk.find(b"\n", match.end())
        line, start = chunk[start : len(chunk) if end < 0 else end], len(chunk) if end < 0 else end
        try:
            if _holds_long_integer(json.loads(line)):
                return True
        except (ValueError, RecursionError):
            return True
    return False


def _holds_long_integer(value: object) -> bool:
    if isinstance(value, dict):
        return any(_holds_long_integer(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_long_integer(v) for v in value)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18


def _read_json(lines: pa.Buffer, block_size: int = 1 << 20) -> pa.Table:
    """JSON Lines through pyarrow's parser. Where a block's first values of a list field are null (``[null, 1]``),
    its type inference leaves them out of the list's values (apache/arrow#51305: an invalid table, which fails
    later); such a table is read again with the types it found, which keeps them. Lists that hold nulls alone
    (``[null, null]``, typed lists of nulls) lose them even so: they are read as lists of strings, then typed
    lists of nulls again."""
    options = pajson.ReadOptions(block_size=block_size)
    table = pajson.read_json(pa.BufferReader(lines), read_options=options)
    try:
        table.validate(full=True)
    except pa.ArrowInvalid:
        found = table.schema
        del table  # not held while the lines are parsed again
        typed = pajson.ParseOptions(explicit_schema=pa.schema([f.with_type(_inner_strings(f.type)) for f in found]))
        table = pajson.read_json(pa.BufferReader(lines), read_options=options, parse_options=typed)
        for i, kind in enumerate(found.types):
            if _null_leaves(kind):
                table = table.set_column(i, found.field(i), [_as_nulls(c, kind) for c in table.column(i).chunks])
    return table


def _inner_strings(kind: pa.DataType) -> pa.DataType:
    """``kind`` with the nulls its lists hold (in lists or objects) typed as strings."""
    if pa.types.is_list(kind):
        inner = kind.value_type
        return pa.list_(pa.string() if pa.types.is_null(inner) else _inner_strings(inner))
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_inner_strings(f.type)) for f in kind])
    return kind


def _null_leaves(kind: pa.DataType) -> bool:
    """Whether ``kind`` is lists (of lists) of nulls."""
    return pa.types.is_list(kind) and (pa.types.is_null(kind.value_type) or _null_leaves(kind.value_type))


def _as_nulls(lists: pa.ListArray, kind: pa.DataType) -> pa.ListArray:
    """``lists`` of strings (or lists of them), every one null, as ``kind``, lists (of lists) of nulls."""
    inner = kind.value_type
    values = pa.nulls(len(lists.values)) if pa.types.is_null(inner) else _as_nulls(lists.values, inner)
    return pa.ListArray.from_arrays(lists.offsets, values, type=kind, mask=lists.is_null())


class _Repeated(ValueError):
    pass


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result = dict(pairs)
    if len(result) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Repeated(f"field {key!r} appears twice in the object")
            seen.add(key)
    return result


def _finite_number(text: str) -> float:
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a double")
    return value


PLURALS = {"a boolean": "booleans", "a number": "numbers", "a string": "strings", "an object": "objects"}


def _kind(value: object) -> str:
    """A JSON value's kind as pyarrow's parser tells them apart (ints and floats are both numbers)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    assert isinstance(value, list)
    kinds = sorted({PLURALS.get(k, "lists") for k in map(_kind, value) if k != "null"})
    if not kinds:
        return "a list"
    if len(kinds) > 1:
        return "a list mixing " + " and ".join(kinds)
    return f"a list of {kinds[0]}"


def _fits(kind: str, first: str) -> bool:
    if kind == first or "null" in (kind, first):
        return True
    return kind.startswith("a list") and first.startswith("a list") and "a list" in (kind, first)


def _checked_jsonl(path: Path, data: bytes) -> Rows:
    """Check each line in Python: bad lines are the reader's problems, the others are parsed by pyarrow."""
    problems: list[tuple[int, str]] = []
    kept: list[bytes] = []
    numbers: list[int] = []
    first: dict[str, tuple[str, int]] = {}  # field -> the kind of its first value, and that line
    lines = data.split(b"\n")[: _line_count(data)]  # not the empty piece after a last newline
    with Progress(f"checking {path.name} line by line", len(lines)) as progress:
        for number, line in enumerate(lines, 1):
            progress.advance(1)
            if not line.strip():
                continue
            problem = _line_problem(line, number, first)
            if problem is not None:
                problems.append((number, problem))
                continue
            kept.append(line)
            numbers.append(number)
    if not kept:
        return Rows(pa.table({}), path, "jsonl", lambda rows: rows + 1, problems=problems)
    try:
        table = _read_json(pa.py_buffer(b"\n".join(kept)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InputError(path, f"cannot read as JSON Lines: {exc}") from None
    if table.num_rows != len(kept):
        raise InputError(path, f"cannot read as JSON Lines: {table.num_rows:,} objects in {len(kept):,} lines")
    line_numbers = np.asarray(numbers, dtype=np.int64)
    return Rows(table, path, "jsonl", lambda rows: line_numbers[rows], problems=problems)


def _line_problem(line: bytes, number: int, first: dict[str, tuple[str, int]]) -> str | None:
    """What is wrong with one JSON line, given the kinds of the fields' first values (updated)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte 0x{line[exc.start]:02x} at column {exc.start + 1})"
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_float=_finite_number)
    except _Repeated as exc:
        return str(exc)
    except json.JSONDecodeError as exc:
        return f"bad JSON: {exc.msg} (column {exc.colno})"
    except (ValueError, RecursionError) as exc:
        return f"bad JSON: {exc}"
    if not isinstance(value, dict):
        return f"not a JSON object but {_kind(value)}"
    if b"\\u" in line:  # json reads an escaped "\ud800" alone as a lone surrogate, which no UTF-8 text holds
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds an unpaired surrogate escape (\\ud800 to \\udfff), which is no character"
    kinds = {key: _kind(v) for key, v in value.items()}
    for key, kind in kinds.items():
        if "mixing" in kind:
            return f"field {key!r} is {kind}"
        if any(
            isinstance(v, int) and v not in INT64 for v in (value[key] if kind.startswith("a list") else [value[key]])
        ):
            return f"field {key!r} holds an integer beyond 64 bits"
        if key in first and not _fits(kind, first[key][0]):
            seen, at = first[key]
            return f"field {key!r} is {kind}, but its first value (line {at}) is {seen}"
    for key, kind in kinds.items():
        if kind != "null" and (key not in first or first[key][0] in ("null", "a list")):
            first[key] = (kind, number)
    return None


# ---------------------------------------------------------------------------------------------- CSV


def read_csv(path: Path) -> Rows:
    data = read_bytes(path).removeprefix(BOM)
    if not data.strip():
        raise InputError(path, "empty file: no documents")
    # First: pyarrow's handler of a refused row cannot show a row that is not UTF-8 either.
    data, not_utf8 = _as_utf8(data)
    refused: list[tuple[int, int, int]] = []  # (record number, cells, expected cells)
    block = CSV_BLOCK_BYTES
    while True:
        refused.clear()
        try:
            table = _read_csv_blocks(path, data, block, refused)
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            # A record longer than a block (a cell of megabytes: a book's text) is parsed again in larger blocks.
            if "straddl" not in str(exc) or block > len(data) or block == MAX_CSV_BLOCK_BYTES:
                raise _csv_error(path, exc) from None
            block = min(2 * block, MAX_CSV_BLOCK_BYTES)
    reasons = {number: f"{cells} cells, the header has {expected}" for number, cells, expected in refused}
    records = _CsvRecords(data, table.num_rows, list(reasons))
    if not_utf8:  # such records are the rows' problems (a record's first line names it), the header the file's
        lines = np.asarray(list(not_utf8), dtype=np.int64)
        numbers = records.records_at(lines)
        if numbers[0] == 1:
            raise InputError(path, f"not UTF-8 text (byte 0x{not_utf8[int(lines[0])]:02x})", line=int(lines[0]))
        rows = records.rows_of(numbers)
        table = table.filter(pa.array(np.isin(np.arange(table.num_rows), rows, invert=True)))
        for line, number in zip(lines.tolist(), numbers.tolist(), strict=True):
            if number not in reasons or not reasons[number].startswith("not UTF-8"):
                reasons[number] = f"not UTF-8 text (byte 0x{not_utf8[line]:02x})"
        records = _CsvRecords(data, table.num_rows, list(reasons))
    problems = [(records.line(number), reason) for number, reason in sorted(reasons.items())]
    return Rows(table, path, "csv", records, problems=problems, text_only=True)


def _read_csv_blocks(path: Path, data: bytes, block: int, refused: list[tuple[int, int, int]]) -> pa.Table:
    """The cells of ``data`` as strings, parsed by pyarrow in blocks of ``block`` bytes; each record of the wrong
    number of cells is added to ``refused`` (record number, cells, expected cells) and left out."""

    def invalid(row: pacsv.InvalidRow) -> str:
        refused.append((row.number, row.actual_columns, row.expected_columns))
        return "skip"

    read = pacsv.ReadOptions(use_threads=False, block_size=block)
    header = pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=lambda row: "skip")
    head = pacsv.open_csv(pa.BufferReader(data), read_options=read, parse_options=header)
    names = head.schema.names
    head.close()
    for i, name in enumerate(names):
        if not name.strip():
            raise InputError(path, f"header column {i + 1} has no name", line=1)
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()),
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
        null_values=[""],
    )
    parse = pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=invalid)
    reader = pacsv.open_csv(pa.BufferReader(data), read_options=read, parse_options=parse, convert_options=convert)
    batches = []
    with Progress(f"reading {path.name}", max(0, _line_count(data) - 1)) as progress:
        for batch in reader:
            batches.append(batch)
            progress.advance(batch.num_rows)
    return pa.Table.from_batches(batches, schema=reader.schema)


def _as_utf8(data: bytes) -> tuple[bytes, dict[int, int]]:
    """``data``, each run of bytes that is not UTF-8 replaced by U+FFFD (cells, quotes and lines stay as they were),
    and the first such byte of each line that has one (line -> byte)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8"), undecodable_lines(data)
    return data, {}


def _csv_error(path: Path, exc: Exception) -> InputError:
    return InputError(path, f"cannot read as CSV: {exc}")


class _CsvRecords:
    """Row -> line number of a CSV file, worked out when a message needs it: quoted cells may span lines, the
    header is record 1, and refused records count (pyarrow numbers records so; blank lines are none)."""

    def __init__(self, data: bytes, rows: int, refused: list[int]) -> None:
        self._data = data
        self._record_of_row = np.delete(np.arange(2, rows + len(refused) + 2), np.asarray(refused, dtype=np.int64) - 2)
        self._starts: np.ndarray | None = None

    def _lines_of_records(self, records: np.ndarray) -> np.ndarray:
        if self._starts is None:  # one pass of Python's csv module, which splits records as pyarrow does
            starts, previous = [], 0
            limit = csv.field_size_limit(max(csv.field_size_limit(), len(self._data)))  # a cell may be the file
            try:
                # decoded as it is read, a few KiB at a time (the whole text decoded into a StringIO, four bytes a
                # character, took five times the file)
                reader = csv.reader(io.TextIOWrapper(io.BytesIO(self._data), encoding="utf-8", newline=""))
                for record in reader:
                    if record:
                        starts.append(previous + 1)
                    previous = reader.line_num
            finally:
                csv.field_size_limit(limit)
            self._starts = np.asarray(starts, dtype=np.int64)
        return np.asarray(self._starts[records - 1], dtype=np.int64)

    def line(self, record: int) -> int:
        return int(self._lines_of_records(np.asarray([record], dtype=np.int64))[0])

    def records_at(self, lines: np.ndarray) -> np.ndarray:
        """The record number of each of ``lines`` (sorted): the last record that starts at or before it."""
        self._lines_of_records(np.asarray([1], dtype=np.int64))  # the records' first lines, found
        assert self._starts is not None
        return np.searchsorted(self._starts, lines, side="right").astype(np.int64)

    def rows_of(self, records: np.ndarray) -> np.ndarray:
        """The table rows of ``records``, those of records refused as rows left out."""
        at = np.searchsorted(self._record_of_row, records)
        inside = at < len(self._record_of_row)
        return np.unique(at[inside][self._record_of_row[at[inside]] == records[inside]])

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        return self._lines_of_records(self._record_of_row[np.asarray(rows, dtype=np.int64)])


# ---------------------------------------------------------------------------------------------- Parquet


def read_parquet(path: Path) -> Rows:
    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(path, f"not a Parquet file ({exc})") from None
    batches = []
    try:
        with Progress(f"reading {path.name}", parquet.metadata.num_rows) as progress:
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                batches.append(batch)
                progress.advance(batch.num_rows)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(path, f"cannot read the Parquet file ({exc})") from None
    table = pa.Table.from_batches(batches, schema=schema)
    try:
        table.validate(full=True)  # Parquet's strings are not checked as read: one that is not UTF-8 is refused here
    except pa.ArrowInvalid as exc:
        raise InputError(path, f"cannot read the Parquet file ({exc})") from None
    return Rows(
        table, path, "parquet", lambda rows: np.asarray(rows, dtype=np.int64) + 1, unit="row", infer_timestamps=False
    )
