"""word2vec binary files (the GoogleNews format), optionally gzip-compressed.

Layout: a text header ``ROWS DIM\\n``, then for each row the token's bytes, a space, DIM little-endian float32
values and (as word2vec.c writes it) an optional newline. Tokens hold no spaces.

The header is checked against the file size before the matrix is allocated. The rows are located by a short
loop that only finds each token's end; the floats of a whole chunk are then gathered at once with numpy.
Errors name the row (1-based) and its byte offset; row numbers stand in for line numbers. A token holding a space
shifts its row's values: the newline after them lands inside the next row's token (no token holds a newline, after
those word2vec.c writes before each), which is refused, naming the token with the space when its row, read to a
later space, ends at that newline. Without the newlines (gensim writes none), the next row's token is read from
inside the values before it: when it holds what no word holds and reads as a word with the token before ending at a
later space, whose values then read as more floats of an embedding's magnitudes (not so for a token of latin-1 bytes
after values that hold a space byte), the token with the space is named (``_spaced``); when it is a word, the file
is also one of those tokens, read so by gensim too. A token that is not
UTF-8 (nor of the ``--encoding`` given) is refused even with ``--drop-invalid`` (only ``--unicode-errors replace`` or
``ignore`` keeps it): here it mostly means a wrong dimension in the header, each row then read from inside the
previous one's values.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from index.build.sources import (
    BOM,
    BinaryHandle,
    RawTable,
    ReadOptions,
    decode_tokens,
    open_text,
    read_on_disk,
    reading,
    word2vec_header,
)
from index.errors import InputError, counted
from index.progress import Progress

CHUNK_BYTES = 2 << 20
MAX_TOKEN = 4096  # bytes; a longer "token" means a wrong dimension or not a word2vec binary file
WRONG_HEADER = "wrong dimension in the header, or not a word2vec binary file?"
NO_WORD = re.compile("[\x00-\x1f\x7f\ufffd]")  # what no word holds: control characters, U+FFFD of bytes not UTF-8


def _size(path: Path) -> int:
    """Size of the (decompressed) content: of a .gz file, a pass over it, shown by the compressed bytes read."""
    with open_text(path) as handle:
        if not isinstance(handle, gzip.GzipFile):
            return Path(path).stat().st_size
        total = read = 0
        with (
            reading(path),
            Progress(f"measuring the decompressed size of {path.name}", path.stat().st_size, "bytes") as progress,
        ):
            while block := handle.read(CHUNK_BYTES):
                total += len(block)
                position = read_on_disk(handle)
                progress.advance(position - read)
                read = position
        return total


def read(path: Path, options: ReadOptions) -> RawTable:
    path = Path(path)
    size = _size(path)
    with open_text(path) as handle:
        with reading(path):
            first = handle.readline(256)
        if not first:
            raise InputError(path, "empty file: no vectors")
        rows, dim = word2vec_header(path, first.removeprefix(BOM))  # a byte-order mark, as the format is sniffed
        width = 4 * dim
        body = size - len(first)
        if rows * (width + 2) > body:
            raise InputError(
                path,
                f"the header says {rows:,} rows of {dim} float32 values (at least {rows * (width + 2):,} bytes) "
                f"but only {body:,} bytes follow: truncated file or wrong header",
                line=1,
            )
        matrix = np.empty((rows, dim), dtype=np.float32)
        tokens: list[str] = []
        replaced = 0
        data = b""
        base = len(first)  # file offset of data[0]
        eof = False
        row = 0
        with Progress(f"reading {path.name}", rows) as progress:
            while row < rows:
                if not eof:
                    with reading(path):
                        block = handle.read(CHUNK_BYTES)
                    eof = not block
                    data += block
                raw: list[bytes] = []
                offsets: list[int] = []  # byte offset of each row, for messages
                pos, starts, done = _locate(path, data, base, width, rows, row, raw, offsets, eof)
                if starts:
                    windows = sliding_window_view(np.frombuffer(data, dtype=np.uint8), width)
                    matrix[row:done] = windows[np.asarray(starts, dtype=np.int64)].view("<f4")
                    replaced += _decode(path, Rows(raw, data, starts, width, offsets, row), options, tokens)
                progress.advance(done - row)
                row = done
                data = data[pos:]
                base += pos
        rest = data + (b"" if eof else _read_rest(handle, path))
        if rest.strip():
            raise InputError(
                path,
                f"the header says {counted(rows, 'row')} but {size - base:,} more bytes follow them (byte offset "
                f"{base:,}): a row count too small or a wrong dimension in the header, a token holding a space in "
                "the last row, or not a word2vec binary file?",
                line=1,
            )
    return RawTable(tokens=tokens, matrix=matrix, rows_are="vector", report={"tokens_unicode_replaced": replaced})


def _read_rest(handle: BinaryHandle, path: Path) -> bytes:
    with reading(path):
        return handle.read(1 << 20)


def _locate(
    path: Path,
    data: bytes,
    base: int,
    width: int,
    rows: int,
    row: int,
    raw: list[bytes],
    offsets: list[int],
    eof: bool,
) -> tuple[int, list[int], int]:
    """Find the rows that lie wholly in ``data``; return (where the next row starts, float offsets, rows done)."""
    pos = 0
    size = len(data)
    starts: list[int] = []
    find = data.find
    while row < rows:
        space = find(b" ", pos, pos + MAX_TOKEN + 1)
        if space < 0:
            if eof or size - pos > MAX_TOKEN:
                where = f"row {row + 1} of {rows:,} (byte offset {base + pos:,})"
                if size - pos <= MAX_TOKEN:
                    raise InputError(path, f"the file ends inside {where}: truncated file or wrong header")
                raise InputError(path, f"{where}: no token within {MAX_TOKEN:,} bytes; " + WRONG_HEADER)
            break
        end = space + 1 + width
        if end > size:
            if eof:
                raise InputError(
                    path,
                    f"the file ends inside row {row + 1} of {rows:,} (byte offset {base + pos:,}): "
                    "truncated file or wrong header",
                )
            break
        if find(b"\n", pos + 1, space) >= 0 and b"\n" in data[pos:space].lstrip(b"\n"):  # the row before ended early
            raise InputError(path, _misaligned(data, pos, data[pos:space], width, raw, offsets, starts, base, row))
        raw.append(data[pos:space])
        offsets.append(base + pos)
        starts.append(space + 1)
        pos = end
        row += 1
    return pos, starts, row


def _misaligned(
    data: bytes,
    pos: int,
    token: bytes,
    width: int,
    raw: list[bytes],
    offsets: list[int],
    starts: list[int],
    base: int,
    row: int,
) -> str:
    """Why a newline is inside the token of the row at ``pos``: the row before (its token ``raw[-1]``, its values
    from ``starts[-1]``) ended before the newline word2vec.c writes after it. When that row, its token read on to
    a later space, ends at that newline, its token holds a space; else the header's dimension is likely wrong."""
    newline = pos + len(token) - len(token.lstrip(b"\n")) + token.lstrip(b"\n").index(b"\n")
    space = newline - width - 1  # where the token of the row before ends, if it ends at that newline
    if raw and starts[-1] <= space and data[space] == ord(" ") and b"\n" not in data[starts[-1] : space]:
        spaced = (raw[-1].lstrip(b"\n") + b" " + data[starts[-1] : space]).decode("utf-8", "replace")
        return (
            f"row {row} (byte offset {offsets[-1]:,}): the token {spaced!r} holds a space, which a word2vec "
            "binary file cannot hold (a token ends at its first space, as word2vec.c and gensim read it)"
        )
    return (
        f"row {row + 1} (byte offset {base + pos:,}): a newline inside the token: the row before ends "
        f"{newline - pos} bytes early (a wrong dimension in the header, or a token holding a space?)"
    )


@dataclass
class Rows:
    """The rows ``_locate`` found in a chunk: their tokens' bytes, where their values start in ``data`` (``width``
    bytes each), their byte offsets in the file and the row index of the first."""

    tokens: list[bytes]
    data: bytes
    starts: list[int]
    width: int
    offsets: list[int]
    first: int


def _decode(path: Path, rows: Rows, options: ReadOptions, out: list[str]) -> int:
    """Append the tokens (without the newline word2vec.c writes before each) to ``out``; return how many needed
    U+FFFD. A token of bytes no word holds (not UTF-8, a control character) that a space in the token before
    explains is refused naming that token."""

    def fail(i: int, problem: str) -> InputError:
        spaced = _spaced(rows, i)
        if spaced:
            return InputError(path, spaced)
        where = f"row {rows.first + i + 1} (byte offset {rows.offsets[i]:,})"
        return InputError(path, f"{where}: {problem}, or check the header's dimension and the tokens for spaces")

    tokens, replaced = decode_tokens([token.lstrip(b"\n") for token in rows.tokens], options, fail)
    if replaced or NO_WORD.search("".join(tokens)):  # rare: look for the token that holds it, and its cause
        for i, token in enumerate(tokens):
            spaced = _spaced(rows, i) if NO_WORD.search(token) else ""
            if spaced:
                raise InputError(path, spaced)
    out.extend(tokens)
    return replaced


def _spaced(rows: Rows, i: int) -> str:
    """Why row ``i``'s token holds bytes no word holds, when the token before held a space: its row's values were
    read from inside it, and this token from inside those values (a file without the newline after each row, as
    gensim writes it, has no other sign of it). Read with the token before ending at a later space, the next token is
    a word: the refusal names the token with the space. "" when no such reading is found."""
    # The row before is in an earlier chunk; or the file has the newline after each row, which a token with a space
    # would have put inside this token (refused by ``_locate``), not before it
    if i == 0 or rows.tokens[i].startswith(b"\n"):
        return ""
    data, start, width = rows.data, rows.starts[i - 1], rows.width
    values = data[start : start + width]
    space = values.find(b" ")
    while space >= 0:
        # The token before read on to this space: its values after it, then the next token, to its own space (past
        # this token as read, when that ended at a space byte of those values). The values so read must hold more
        # floats of an embedding's magnitudes than as read: else they were the row's own, and this token holds
        # bytes of another encoding (latin-1's), not the values' last bytes.
        rest, after = values[:space], start + space + 1 + width
        end = data.find(b" ", after, after + MAX_TOKEN + 1)
        following, shifted = data[after : max(end, after)], data[after - width : after]
        if rest and following and _word(rest) and _word(following) and _floats(shifted) > _floats(values):
            spaced = (rows.tokens[i - 1].lstrip(b"\n") + b" " + rest).decode("utf-8", "replace")
            return (
                f"row {rows.first + i} (byte offset {rows.offsets[i - 1]:,}): the token {spaced!r} holds a space, "
                "which a word2vec binary file cannot hold (a token ends at its first space, as word2vec.c and "
                "gensim read it)"
            )
        space = values.find(b" ", space + 1)
    return ""


def _floats(values: bytes) -> int:
    """How many of the float32 values of ``values`` are of an embedding's magnitudes (0, or 2**-40 to 2**40 either
    side of it, by their exponent bits): a row's values read from a byte that does not start them mostly are not."""
    bits = np.frombuffer(values, dtype="<u4") & 0x7FFFFFFF
    exponent = bits >> 23
    return int(np.count_nonzero((bits == 0) | ((exponent >= 127 - 40) & (exponent < 127 + 40))))


def _word(piece: bytes) -> bool:
    """Whether ``piece`` can be (part of) a word: UTF-8 without control characters."""
    try:
        return not NO_WORD.search(piece.decode())
    except UnicodeDecodeError:
        return False
