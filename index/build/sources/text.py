"""Text embedding files: word2vec text and fastText ``.vec`` (first line ``ROWS DIM``) and GloVe (no header).

Each row is one line: a token, then DIM numbers separated by single spaces (a trailing space, as fastText
writes, and CRLF line ends are fine). A token may itself contain spaces (GloVe 840B): the last DIM fields of
a line are the vector. Files may be gzip-compressed.

Reading is two streaming passes over the file, so memory stays near the size of the final matrix:

1. a scan counts the lines (a step shown by the bytes read), so a word2vec header that disagrees with the file
   is refused before anything large is allocated, and the matrix can be allocated once at its final size (when
   the header's rows are not the lines after it, another pass counts the blank lines among them, which are not
   rows);
2. a parse of chunks of whole lines with pyarrow's CSV reader (multi-threaded C++, numbers parsed as
   float64 and rounded to float32 exactly as gensim does). A chunk that pyarrow refuses (a token with spaces,
   a short row, a bad number, ...) is parsed again line by line, which gives the exact line number. Rows of
   more than ``WIDE_DIM`` values are always parsed line by line, each line's values by NumPy at once. The
   tokens of a chunk are decoded as one column; only a chunk holding bytes that are not UTF-8, or a file of another
   ``--encoding``, is decoded token by token (a token it does not read refused, its row dropped with
   ``--drop-invalid``, or kept with U+FFFD or without those bytes: ``--unicode-errors``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pacompute
import pyarrow.csv as pacsv

from index.build.clean import first_invalid, invalid_problem
from index.build.sources import (
    BOM,
    DROP_HINT,
    WIDE_DIM,
    BinaryHandle,
    RawTable,
    ReadOptions,
    decode_tokens,
    is_number,
    open_text,
    read_on_disk,
    reading,
    word2vec_header,
)
from index.errors import InputError, counted
from index.progress import Progress

CHUNK_BYTES = 2 << 20
SAMPLE_LINES = 1000
MAX_HEAD = 64 << 20  # the longest first line accepted
BLANK_LINE = re.compile(rb"^[ \t\r\f\v]*\n", re.MULTILINE)
NOT_GLOVE = (  # what a binary file read as GloVe is told
    "not GloVe text, which is a token and its values on each line; word2vec binary starts with a line 'ROWS DIM', "
    "and a fastText .bin model is not read (import the .vec file fastText writes beside it)"
)


def read_word2vec_text(path: Path, options: ReadOptions) -> RawTable:
    """word2vec text or fastText ``.vec``: a ``ROWS DIM`` header line, then one row per line."""
    return _read(Path(path), options, header=True)


def read_glove_text(path: Path, options: ReadOptions) -> RawTable:
    """GloVe text: one row per line, no header; the dimension is taken from the rows."""
    return _read(Path(path), options, header=False)


def _refuse_binary(path: Path, head: bytes) -> None:
    """Refuse ``path`` as binary when its first bytes ``head`` hold a NUL byte; called where it is no token's: in
    the first line, or in a file whose rows have no values."""
    if (nul := head.find(b"\0")) >= 0:
        raise InputError(path, f"binary data (a NUL byte at offset {nul}), {NOT_GLOVE}", line=1)


@dataclass
class _Stats:
    malformed_rows_dropped: int = 0
    tokens_with_spaces: int = 0
    tokens_unicode_replaced: int = 0


@dataclass
class _Chunk:
    tokens: list[str]
    matrix: np.ndarray  # float32 rows x dim


def _read(path: Path, options: ReadOptions, header: bool) -> RawTable:
    lines, nbytes, head = _scan(path)
    if lines == 0:
        raise InputError(path, "empty file: no vectors")
    head_lines = head.split(b"\n")
    if len(head) < nbytes:
        head_lines.pop()  # the block ends inside a line
    if not head_lines:
        raise InputError(path, f"the first line is longer than {MAX_HEAD >> 20} MiB: not an embedding file", line=1)
    first_line = 1
    if header:
        rows, dim = word2vec_header(path, head_lines[0], " (use --format glove for a file without a header)")
        head_lines = head_lines[1:]
        first_line = 2
        if rows != lines - 1:  # blank lines between rows are not rows: they are refused or dropped later
            found_rows = lines - 1 - _count_blank_lines(path, lines)
            if rows != found_rows:
                raise InputError(
                    path, f"the header says {counted(rows, 'row')} but the file has {found_rows:,}", line=1
                )
    else:
        rows = lines
        if b"\0" in head_lines[0]:  # a binary file (of no format sniffed) read as GloVe
            _refuse_binary(path, head)
    sample = [line for line in head_lines[: min(SAMPLE_LINES, rows)] if line.strip()]
    if not sample:
        raise InputError(path, "no vectors found", line=first_line)
    counts = Counter(len(line.rstrip().split(b" ")) - 1 for line in sample)
    # The most common number of values; on a tie the smaller one (extra fields are tokens with spaces).
    found = min(counts, key=lambda n: (-counts[n], n))
    # Rows whose tokens all hold spaces (a table of phrases) have more fields than values: they fit the header's
    # dimension when each parses under it.
    if header and dim not in counts and not all(isinstance(_parse_line(line, dim), tuple) for line in sample):
        raise InputError(path, f"the header says dimension {dim} but the rows have {counted(found, 'value')}", line=1)
    if not header:
        dim = found
        if dim < 1:
            _refuse_binary(path, head)
            tabs = " (the values are separated by tabs: GloVe text separates them by spaces)" if b"\t" in head else ""
            raise InputError(path, f"no vector values after the token{tabs}", line=1)
    trailing = sum(line.rstrip(b"\r").endswith(b" ") for line in sample) * 2 > len(sample)
    ncols = dim + 1 + trailing
    del head, head_lines, sample

    stats = _Stats()
    # A row needs at least 2 bytes per value; if the sample dimension cannot fit, do not preallocate.
    # Blank lines between rows take a row of ``out`` until they are refused or dropped.
    slots = lines - 1 if header else lines
    out = np.empty((slots, dim), dtype=np.float32) if slots * 2 * dim <= nbytes else None
    blocks: list[np.ndarray] = []
    tokens: list[str] = []
    filled = 0
    with Progress(f"reading {path.name}", slots) as progress:
        for chunk, line_no, count in _chunks(path, lines, skip_first=header):
            target = out[filled : filled + count] if out is not None else None
            try:
                part = _parse_chunk(chunk, line_no, count, dim, ncols, path, options, stats, target)
            except InputError as refused:  # a row of an earlier chunk the cleaner would refuse comes first
                if options.drop_invalid:  # the cleaner drops such rows: the refusal is the problem
                    raise
                done = out[:filled] if out is not None else np.concatenate([*blocks, np.empty((0, dim), np.float32)])
                raise _invalid_before(path, done, tokens, first_line) or refused from None
            tokens.extend(part.tokens)
            if out is not None:
                if part.matrix is not target:  # parsed elsewhere (a chunk with irregular lines)
                    out[filled : filled + len(part.tokens)] = part.matrix
            else:
                blocks.append(part.matrix)
            filled += len(part.tokens)
            progress.advance(count)
    if out is None:
        matrix = np.concatenate(blocks) if blocks else np.empty((0, dim), dtype=np.float32)
    else:
        matrix = out if filled == slots else out[:filled]
    report = {
        "malformed_rows_dropped": stats.malformed_rows_dropped,
        "tokens_with_spaces": stats.tokens_with_spaces,
        "tokens_unicode_replaced": stats.tokens_unicode_replaced,
    }
    return RawTable(tokens=tokens, matrix=matrix, first_line=first_line, report=report)


def _read_block(handle: BinaryHandle, path: Path) -> bytes:
    with reading(path):
        return handle.read(CHUNK_BYTES)


def _scan(path: Path) -> tuple[int, int, bytes]:
    """Return (lines up to the last non-blank one, total bytes, the first block(s): at least two whole lines); a
    step shown by the bytes read from the disk (of a .gz file: compressed)."""
    lines = newlines = total = read = 0
    head = b""
    head_done = False
    with (
        open_text(path) as handle,
        Progress(f"counting the lines of {path.name}", path.stat().st_size, "bytes") as progress,
    ):
        while block := _read_block(handle, path):
            position = read_on_disk(handle)
            progress.advance(position - read)
            read = position
            if not total:
                block = block.removeprefix(BOM)
            if not head_done:
                head += block
                head_done = head.count(b"\n") >= 2 or len(head) >= MAX_HEAD
            count = block.count(b"\n")
            end = len(block.rstrip())
            if end:
                lines = newlines + count - block.count(b"\n", end) + 1
            newlines += count
            total += len(block)
    return lines, total, head


def _count_blank_lines(path: Path, lines: int) -> int:
    """How many of the first ``lines`` lines after the header are blank (a pass over the file, shown as a step)."""
    blank = 0
    with Progress(f"counting the blank lines of {path.name}", lines - 1, unit="lines") as progress:
        for chunk, _, count in _chunks(path, lines, skip_first=True):
            blank += len(BLANK_LINE.findall(chunk))
            progress.advance(count)
    return blank


def _chunks(path: Path, lines: int, skip_first: bool) -> Iterator[tuple[bytes, int, int]]:
    """Yield (whole lines ending in a newline, number of the first, how many) for the first ``lines`` lines."""
    done = 0
    carry = b""
    first = True
    with open_text(path) as handle:
        while done < lines:
            block = _read_block(handle, path)
            if first:
                block = block.removeprefix(BOM)
                first = False
            data = carry + block if carry else block
            if not block:
                if not data:
                    return
                data += b"\n"
            cut = data.rfind(b"\n") + 1
            if not cut:
                carry = data
                continue
            count = data.count(b"\n", 0, cut)
            if done + count > lines:
                ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8, count=cut) == 10)
                cut = int(ends[lines - done - 1]) + 1
                count = lines - done
            chunk, carry = data[:cut], data[cut:]
            start, done = done + 1, done + count
            if skip_first and start == 1:
                chunk = chunk[chunk.index(b"\n") + 1 :]
                start, count = 2, count - 1
            if chunk:
                yield chunk, start, count


# ------------------------------------------------------------------------------------------------ parsing


def _arrow_parse(
    chunk: bytes, lines: int, dim: int, ncols: int, out: np.ndarray | None = None
) -> tuple[pa.ChunkedArray, np.ndarray] | None:
    """Parse ``lines`` regular lines (exactly ``ncols`` space-separated fields) with pyarrow, into ``out`` if
    given; None if any line is not regular."""
    names = [f"c{i}" for i in range(ncols)]
    types = {name: pa.float64() for name in names[1 : dim + 1]}
    types[names[0]] = pa.binary()
    if ncols > dim + 1:
        types[names[-1]] = pa.binary()
    try:
        table = pacsv.read_csv(
            pa.py_buffer(chunk),
            read_options=pacsv.ReadOptions(column_names=names, block_size=len(chunk) + 1, use_threads=False),
            parse_options=pacsv.ParseOptions(
                delimiter=" ", quote_char=False, double_quote=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=types, null_values=[], strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != lines:  # a lone CR is a line break to pyarrow, not to us
        return None
    if ncols > dim + 1 and table.num_rows and pacompute.max(pacompute.binary_length(table.column(ncols - 1))).as_py():
        return None
    matrix = np.empty((table.num_rows, dim), dtype=np.float32) if out is None else out
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(dim):
            matrix[:, i] = table.column(i + 1).to_numpy()  # float64 -> float32, rounded as gensim rounds
    return table.column(0), matrix


def _parse_line(line: bytes, dim: int) -> tuple[bytes, np.ndarray] | str:
    """The reference parse of one line: (token, values), or what is wrong with it."""
    stripped = line.rstrip()
    if not stripped:
        return "empty line"
    parts = stripped.split(b" ")
    # Extra fields are part of the token (one with spaces) unless the field before the vector is a number:
    # then the row has a value too many.
    if len(parts) < dim + 1 or (len(parts) > dim + 1 and is_number(parts[-dim - 1])):
        return f"{counted(len(parts) - 1, 'value')} after the token, expected {dim}"
    try:
        values = np.array(parts[-dim:], dtype=np.float64)
    except ValueError:
        part = next(part for part in parts[-dim:] if not is_number(part))
        shown = part[:40].decode("utf-8", "replace")
        return f"{shown!r} is not a number" if part else "empty value (two spaces in a row?)"
    return b" ".join(parts[:-dim]), values


def _invalid_before(
    path: Path, matrix: np.ndarray, tokens: Sequence[bytes | str], first_line: int, encoding: str = "utf-8"
) -> InputError | None:
    """The error for the first row of ``matrix`` (on lines from ``first_line``) that the cleaner would refuse
    (NaN, Inf, overflow), if any: a reader refusing a later row names this one instead, the first problem. A token
    still of bytes is shown decoded as ``encoding``."""
    first = first_invalid(matrix)
    if first is None:
        return None
    token = tokens[first]
    shown = token.decode(encoding, "replace") if isinstance(token, bytes) else token
    return InputError(path, invalid_problem(shown) + DROP_HINT, line=first_line + first)


def _decode(
    path: Path, raw: list[bytes], lines: list[int], options: ReadOptions, stats: _Stats, matrix: np.ndarray
) -> tuple[list[str], list[int]]:
    """The tokens as text, and the positions of those left out as not UTF-8 (``--drop-invalid``); ``matrix``
    holds their rows: one the cleaner would refuse before a token refused here is named instead."""

    def fail(i: int, problem: str) -> InputError:
        earlier = _invalid_before(path, matrix[:i], raw, lines[0], options.encoding) if i else None
        return earlier or InputError(path, problem, line=lines[i])

    dropped: list[int] = []
    tokens, replaced = decode_tokens(raw, options, fail, dropped)
    stats.tokens_unicode_replaced += replaced
    stats.malformed_rows_dropped += len(dropped)
    return tokens, dropped


def _parse_chunk(
    chunk: bytes,
    line_no: int,
    count: int,
    dim: int,
    ncols: int,
    path: Path,
    options: ReadOptions,
    stats: _Stats,
    out: np.ndarray | None = None,
) -> _Chunk:
    parsed = _arrow_parse(chunk, count, dim, ncols, out) if dim <= WIDE_DIM else None
    if parsed is not None:
        column, matrix = parsed
        tokens = _utf8(column) if options.encoding == "utf-8" else None
        if tokens is None:  # a chunk holding bytes that are not UTF-8, or a file of another encoding: token by token
            raw = column.to_pylist()
            tokens, dropped = _decode(path, raw, list(range(line_no, line_no + len(raw))), options, stats, matrix)
            if dropped:
                matrix = np.delete(matrix, dropped, axis=0)
        return _Chunk(tokens, matrix)
    return _parse_irregular(chunk, line_no, dim, ncols, path, options, stats)


def _utf8(column: pa.ChunkedArray) -> list[str] | None:
    """The tokens of ``column`` as text, cast at once; None when some are not UTF-8."""
    try:
        tokens: list[str] = column.cast(pa.string()).to_pylist()
    except pa.ArrowInvalid:
        return None
    return tokens


def _parse_irregular(
    chunk: bytes, line_no: int, dim: int, ncols: int, path: Path, options: ReadOptions, stats: _Stats
) -> _Chunk:
    """A chunk pyarrow refused (or of wide rows): its regular lines still go through pyarrow, the others line by
    line."""
    lines = chunk.split(b"\n")[:-1]
    count = len(lines)
    regular = [i for i, line in enumerate(lines) if line.count(b" ") == ncols - 1] if dim <= WIDE_DIM else []
    joined = b"\n".join(lines[i] for i in regular) + b"\n"
    parsed = _arrow_parse(joined, len(regular), dim, ncols) if regular else None
    matrix = np.empty((count, dim), dtype=np.float32)
    raw: list[bytes] = [b""] * count
    todo: Iterable[int] = range(count)
    if parsed is not None:
        matrix[regular] = parsed[1]
        for i, token in zip(regular, parsed[0].to_pylist(), strict=True):
            raw[i] = token
        done = np.zeros(count, dtype=bool)
        done[regular] = True
        todo = np.flatnonzero(~done).tolist()
    keep = np.ones(count, dtype=bool)
    for i in todo:
        result = _parse_line(lines[i], dim)
        if isinstance(result, str):
            if not options.drop_invalid:
                # A token that is not UTF-8 or a row the cleaner would refuse on an earlier line is the first
                # problem: it is reported instead.
                _decode(path, raw[:i], list(range(line_no, line_no + i)), options, stats, matrix[:i])
                earlier = _invalid_before(path, matrix[:i], raw, line_no, options.encoding)
                raise earlier or InputError(path, result + DROP_HINT, line=line_no + i)
            stats.malformed_rows_dropped += 1
            keep[i] = False
            continue
        raw[i], values = result
        with np.errstate(over="ignore"):
            matrix[i] = values
    numbers = (np.flatnonzero(keep) + line_no).tolist()
    if not keep.all():
        matrix = matrix[keep]
        raw = [t for t, k in zip(raw, keep.tolist(), strict=True) if k]
    tokens, dropped = _decode(path, raw, numbers, options, stats, matrix)
    if dropped:
        matrix = np.delete(matrix, dropped, axis=0)
    stats.tokens_with_spaces += sum(" " in token for token in tokens)  # the rows kept
    return _Chunk(tokens, matrix)
