"""Readers for every input format. Each turns a file (or directory) into a :class:`RawTable`.

Readers raise :class:`index.errors.InputError` naming the file, the line and the problem. They never
unpickle: NumPy files are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import codecs
import gzip
import importlib
import io
import os
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from index.engine.keyword import DEFAULT_STEMMER, DEFAULT_STOPWORDS
from index.errors import InputError, counted, shown
from index.progress import note

DROP_HINT = " (use --drop-invalid to skip such rows)"  # ends a bad row's error, where a reader can drop it
# gensim's unicode_errors: a byte the encoding does not read refuses its token, becomes U+FFFD or is left out
UNICODE_ERRORS = ("strict", "replace", "ignore")
ASCII_SAMPLE = "0123456789+-.eEinfINFaAN \t\r\n"  # what the readers find by its ASCII bytes: separators, numbers
# Rows wider than this are parsed line by line with NumPy: pyarrow's CSV reader (one column per value) does not scale.
WIDE_DIM = 4096
HEAD_BYTES = 4096  # the first bytes a file's format is sniffed by
BOM = b"\xef\xbb\xbf"  # UTF-8's byte-order mark: no part of a file's text


@dataclass
class ReadOptions:
    vocab: Path | None = None
    encoding: str = "utf-8"  # of the tokens in a text or binary file (a codec's name, as text_codec gives it)
    unicode_errors: str = "strict"  # or "replace", "ignore"
    drop_invalid: bool = False
    tensor: str | None = None
    allow_pickle: bool = False
    # --format documents: which fields hold the id, the text and the vector (None: the defaults), passage size
    id_field: str | None = None
    text_field: str | None = None
    vector_field: str | None = None
    chunk_words: int | None = None
    encoder: Path | None = None  # documents without vectors: the table that embeds their text
    # documents with text: the keyword index's stop-word list and stemmer (None: none)
    stopwords: str | None = DEFAULT_STOPWORDS
    stemmer: str | None = DEFAULT_STEMMER


@dataclass
class RawTable:
    """What a reader yields: row ``i`` of ``matrix`` belongs to ``tokens[i]``."""

    tokens: list[str]
    matrix: np.ndarray  # float32, rows x dim
    first_line: int = 1  # line number of row 0 in the source, for error messages
    rows_are: str = "line"  # what first_line counts where the source has no lines: "row", "token id", "vector"
    metadata: dict[str, list[str]] = field(default_factory=dict)
    flags: np.ndarray | None = None  # per-row token kind bits, model tables only
    report: dict[str, Any] = field(default_factory=dict)  # what the reader cleaned
    info: dict[str, Any] = field(default_factory=dict)  # extra manifest fields (model, tokenizer, ...)
    kind: str = "words"  # "words", "tokens" or "documents"
    # Copied into the artifact (e.g. tokenizer.json, a documents table's payload): bytes, or a view of a buffer.
    extra_files: dict[str, bytes | memoryview] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)  # added to the manifest's source (a folder: files read)
    rows_file: Path | None = None  # the file ``first_line`` counts in, when not the path imported (a folder)


Reader = Callable[[Path, ReadOptions], RawTable]
# What open_text returns: a gzip stream or a plain file, both read as bytes.
BinaryHandle = gzip.GzipFile | io.BufferedReader


def open_text(path: Path) -> BinaryHandle:
    """Open a possibly gzip-compressed file for binary reading."""
    with open(path, "rb") as handle:
        magic = handle.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def read_on_disk(handle: BinaryHandle) -> int:
    """How far ``handle``'s file has been read from the disk (of a .gz file: its compressed bytes), for progress by
    bytes."""
    return os.lseek(handle.fileno(), 0, os.SEEK_CUR)


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """What reading ``path`` (gzip-compressed or not) raises in the block, as the InputError ``cannot read: ...``."""
    try:
        yield
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None


def read_bytes(path: Path) -> bytes:
    with open_text(path) as handle, reading(path):
        return handle.read()


# format name -> (module of index.build.sources, its reader): one reader per format, imported when first used.
READERS: dict[str, tuple[str, str]] = {
    "word2vec": ("text", "read_word2vec_text"),
    "word2vec-binary": ("word2vec_binary", "read"),
    "glove": ("text", "read_glove_text"),
    "fasttext": ("text", "read_word2vec_text"),
    "npy": ("numpy_vocab", "read"),
    "projector": ("projector", "read"),
    "hf": ("huggingface", "read"),
    "transformer": ("transformer", "read"),
    "model2vec": ("model2vec", "read"),
    "glove-package": ("glove_package", "read"),
    "gensim": ("gensim_pickle", "read"),
    "documents": ("documents", "read"),
}
FORMATS = ("auto", *READERS)


def reader(fmt: str) -> Reader:
    module, name = READERS[fmt]
    found: Reader = getattr(importlib.import_module(f"index.build.sources.{module}"), name)
    return found


def read_head(path: Path) -> bytes:
    """The first bytes of the (decompressed) file: what its format is sniffed by."""
    with reading(path), open_text(path) as handle:
        return handle.read(HEAD_BYTES)


def sniff_format(path: Path, block: bytes | None = None) -> str:
    """Guess the format of ``path`` from its name and first bytes (``block``: those read already)."""
    path = Path(path)
    refuse_stream(path)
    if path.is_dir():
        if (path / "config.json").is_file() or any(path.glob("*.safetensors")):
            from index.build.sources.model2vec import is_model2vec

            return "model2vec" if is_model2vec(path) else "hf"
        if (path / "vectors.tsv").is_file() or (path / "vectors.tsv.gz").is_file():
            return "projector"
        with os.scandir(path) as entries:
            if any(entries):
                return "documents"  # a folder of text files (the reader says which files are not)
        raise InputError(path, "empty directory: neither a model (config.json, *.safetensors), vectors.tsv nor files")
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson", ".json", ".parquet", ".csv")):
        return "documents"
    if name.endswith((".npy", ".npz")):
        return "npy"
    if name.endswith(".tsv"):
        return "projector"
    if name.endswith(".safetensors"):
        return "hf"
    if name.endswith((".model", ".kv", ".pkl", ".pickle")):
        return "gensim"  # the reader refuses it unless --allow-pickle is given
    block = read_head(path) if block is None else block
    head = block.removeprefix(BOM)
    if head.startswith((b"\x93NUMPY", b"PK\x03\x04")):
        return "npy"
    refuse_unread(path, head)
    if len(head) > 1 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "gensim"  # a pickle
    first = head.split(b"\n", 1)[0]
    if (header := header_numbers(first)) is not None:
        # word2vec text if the first row is text (its token may contain spaces); else binary: a token, a space,
        # then raw float32 bytes.
        dim = header[1]
        row = head[len(first) + 1 :]
        if b"\n" not in row:
            row += _read_line(path, len(block), min(FIRST_ROW_SLACK + 32 * dim, MAX_FIRST_ROW))
        if not first_row_is_text(row.split(b"\n", 1)[0], dim):
            return "word2vec-binary"
        return "fasttext" if name.endswith(".vec") else "word2vec"
    return "glove"


def header_numbers(line: bytes) -> tuple[int, int] | None:
    """The two numbers of a word2vec header line ``ROWS DIM``, or None when ``line`` is not one."""
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def word2vec_header(path: Path, line: bytes, hint: str = "") -> tuple[int, int]:
    """The rows and dimension a word2vec file's first ``line`` announces (``hint`` ends the error of a line that is
    not a header)."""
    header = header_numbers(line)
    if header is None:
        shown = line[:60].decode("utf-8", "replace").strip()
        raise InputError(
            path, f"expected a word2vec header 'ROWS DIM' on the first line, found {shown!r}{hint}", line=1
        )
    rows, dim = header
    if rows < 1 or dim < 1:
        raise InputError(path, f"the header says {counted(rows, 'row')} of dimension {dim}: no vectors", line=1)
    return rows, dim


# First bytes of files no reader takes, and what they are.
UNREAD = (
    (b"\xfd7zXZ\x00", "xz compressed: decompress it first (gzip is read as it is)"),
    (b"\x28\xb5\x2f\xfd", "zstd compressed: decompress it first (gzip is read as it is)"),
    (
        (793712314).to_bytes(4, "little"),  # fastText's magic number
        "a fastText .bin model, which is not read: import its word vectors as text, the .vec file fastText writes "
        "beside it (or gensim's save_word2vec_format)",
    ),
)


def refuse_stream(path: Path) -> None:
    """Refuse a pipe or a device: the readers read a file more than once (and opening a FIFO can wait forever)."""
    if path.exists() and not path.is_dir() and not path.is_file():
        raise InputError(
            path, "not a regular file (a pipe or a device): the import reads it more than once; save it first"
        )


def refuse_unread(path: Path, head: bytes) -> None:
    """Refuse a file that its first bytes show no reader takes: xz, bzip2 or zstd compressed, a fastText model, UTF-16
    text."""
    for magic, what in UNREAD:
        if head.startswith(magic):
            raise InputError(path, what)
    if head.startswith(b"BZh") and head[4:10] == b"1AY&SY":
        raise InputError(path, "bzip2 compressed: decompress it first (gzip is read as it is)")
    if _utf16(head):
        raise InputError(path, "UTF-16 text (Windows' 'Unicode'): convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8)")


def _utf16(head: bytes) -> bool:
    """A byte order mark of UTF-16 then two characters of text (not a binary file that starts with those bytes)."""
    for mark, codec in ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if head.startswith(mark):
            text = head[2:6].decode(codec, "replace")
            return len(text) == 2 and all(char.isprintable() or char.isspace() for char in text)
    return False


FIRST_ROW_SLACK = 64 << 10  # how far past DIM values of 32 bytes the sniffer looks for the end of the first row
MAX_FIRST_ROW = 64 << 20


def _read_line(path: Path, offset: int, limit: int) -> bytes:
    """The rest of the line at byte ``offset`` of the (decompressed) file, at most ``limit`` bytes."""
    with reading(path), open_text(path) as handle:
        handle.seek(offset)
        return handle.readline(limit)


def is_number(field: bytes) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def first_row_is_text(line: bytes, dim: int) -> bool:
    """Whether ``line``, the first row under a word2vec header, is text: it ends in ``dim`` numbers (after a
    token that may contain spaces), or everything after its first field is numbers (a wrong header dimension,
    which the text reader reports)."""
    fields = line.rstrip().split(b" ")
    return (len(fields) > dim and _all_numbers(fields[-dim:])) or (len(fields) > 1 and _all_numbers(fields[1:]))


def _all_numbers(fields: list[bytes]) -> bool:
    try:
        np.array(fields, dtype=np.float64)
    except ValueError:
        return False
    return True


def read_source(path: Path, fmt: str = "auto", options: ReadOptions | None = None) -> tuple[RawTable, str]:
    """Read ``path`` in ``fmt`` (sniffed when "auto"); return the raw table and the format used."""
    path = Path(path)
    options = options or ReadOptions()
    if fmt != "glove-package" and not path.exists():
        raise InputError(path, "no such file or directory")
    refuse_stream(path)
    if fmt not in FORMATS:
        raise InputError(path, f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    block = read_head(path) if path.is_file() else b""
    refuse_unread(path, block)  # a format given by hand: its reader would not say what the file is
    fmt = sniff_format(path, block) if fmt == "auto" else fmt
    note(f"reading {path.name} ({fmt}) ...")
    return reader(fmt)(path, options), fmt


def text_codec(name: str) -> str:
    """The name Python gives the codec ``name`` (``latin-1``: ``iso8859-1``), for a file's tokens; ValueError naming
    the problem when Python knows no such text codec, or when its text is not ASCII where the readers find their
    separators and numbers by their ASCII bytes (UTF-16 and UTF-32 are not)."""
    try:
        codec = codecs.lookup(name).name
        ascii_as_ascii = ASCII_SAMPLE.encode("ascii").decode(codec) == ASCII_SAMPLE
    except LookupError:  # unknown, or a codec of bytes to bytes (base64, zlib) or of text to text (rot13)
        raise ValueError(f"{shown(name)} is no text encoding Python knows (such as utf-8, latin-1, cp1252)") from None
    except UnicodeError:  # ASCII's bytes are no text of it (UTF-32, punycode)
        ascii_as_ascii = False
    if not ascii_as_ascii:
        raise ValueError(
            f"{shown(name)} does not write spaces, newlines and digits as ASCII bytes, as the text formats are read: "
            f"convert the file to UTF-8 first (iconv -f {name} -t UTF-8)"
        )
    return codec


def undecodable(options: ReadOptions, byte: int | None, where: str = "", droppable: bool = False) -> str:
    """The refusal of bytes ``options.encoding`` does not read, whose first is ``byte`` (at ``where``), and its ways
    out: another encoding, ``--unicode-errors``, and ``--drop-invalid`` where the reader can drop the row."""
    codec = "UTF-8" if options.encoding == "utf-8" else options.encoding
    first = "" if byte is None else f" (byte 0x{byte:02x}{where})"
    return f"not valid {codec}{first}; {ways_out('rows' if droppable else '')}"


def ways_out(skipped: str = "", another_encoding: bool = True) -> str:
    """The ways out of bytes an encoding does not read: another encoding (where no byte-order mark says which),
    ``--unicode-errors``, and ``--drop-invalid`` where it can skip what holds them (``skipped``: rows, files)."""
    ways = ["--encoding NAME for a file in another encoding (such as latin-1)"] if another_encoding else []
    ways.append("--unicode-errors replace to substitute U+FFFD")
    if skipped:
        ways.append(f"--drop-invalid to skip such {skipped}")
    listed = ", ".join(ways[:-1]) + ("," if len(ways) > 2 else "") + " or " + ways[-1] if len(ways) > 1 else ways[0]
    return f"use {listed}"


def undecodable_lines(data: bytes, encoding: str = "utf-8") -> dict[int, int]:
    """The lines (1-based) of ``data`` that ``encoding`` (an ASCII-compatible codec, see :func:`text_codec`) does not
    read, each with its first byte that it does not. Meant for a file known to hold such bytes: it looks at each line
    that is not ASCII. A newline is never inside such a run of bytes (an ASCII byte ends one), so lines stay lines
    when they are replaced by U+FFFD."""
    found: dict[int, int] = {}
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.isascii():
            try:
                line.decode(encoding)
            except UnicodeDecodeError as bad:
                found[number] = line[bad.start]
    return found


def decode_tokens(
    raw: Sequence[bytes],
    options: ReadOptions,
    fail: Callable[[int, str], InputError],
    dropped: list[int] | None = None,
) -> tuple[list[str], int]:
    """The tokens ``raw`` decoded as ``--encoding`` says: strictly, raising ``fail(position, problem)`` for the first
    that it does not read, or (``--unicode-errors replace`` or ``ignore``) with U+FFFD for each byte it does not read,
    or without it; also how many needed it. A reader that can drop such a row passes ``dropped``: with
    ``--drop-invalid`` (and strict decoding) the positions of those tokens are added to it, and the tokens left out."""
    out: list[str] = []
    replaced = 0
    encoding, errors = options.encoding, options.unicode_errors
    for position, token in enumerate(raw):
        try:
            out.append(token.decode(encoding))
        except UnicodeDecodeError as exc:
            if errors != "strict":
                replaced += 1
                out.append(token.decode(encoding, errors))
            elif dropped is not None and options.drop_invalid:
                dropped.append(position)
            else:
                problem = undecodable(options, token[exc.start], f" at position {exc.start}", dropped is not None)
                raise fail(position, f"token is {problem}") from None
    return out, replaced
