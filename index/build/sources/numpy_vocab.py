"""A NumPy ``.npy`` matrix (rows x dim, any real numeric dtype) plus a vocabulary file, one token per line; or an
``.npz`` archive of both: exactly the arrays ``vectors`` (the matrix) and ``tokens`` (a str array, one per row).

Never unpickling: an object array is refused by its header, a ``.npy`` read with ``allow_pickle=False``, an ``.npz``
member's bytes taken as the dtype its header names (as many as the member holds: the size it claims is not trusted).
A row of the matrix, or of an .npz's ``tokens``, is named by its row counted from 0, as NumPy counts (``m.npy, row 7``);
the vocabulary file's by its line.
"""

from __future__ import annotations

import gzip
import io
import zipfile
from collections import Counter
from pathlib import Path
from tokenize import TokenError

import numpy as np
import numpy.lib.format as npformat

from index.build.sources import (
    BOM,
    HEAD_BYTES,
    RawTable,
    ReadOptions,
    open_text,
    read_bytes,
    read_head,
    reading,
    refuse_unread,
    undecodable,
    undecodable_lines,
)
from index.errors import InputError, counted

MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"  # an .npz archive
NPZ_ARRAYS = ("tokens", "vectors")
NPZ_HINT = "np.savez(path, vectors=matrix, tokens=np.array(tokens, dtype=str))"
# What numpy raises on a damaged header or body (the header is a Python literal, parsed with tokenize and ast).
NPY_ERRORS = (ValueError, TypeError, KeyError, SyntaxError, TokenError, EOFError, OSError, UnicodeDecodeError)


def is_npz(path: Path) -> bool:
    """Whether ``path`` is an ``.npz`` archive (of tokens and matrix) rather than a ``.npy`` matrix."""
    return read_head(path).startswith(ZIP_MAGIC)


def read(path: Path, options: ReadOptions) -> RawTable:
    path = Path(path)
    if is_npz(path):
        return read_npz(path, options)
    if options.vocab is None:
        raise InputError(path, "a .npy matrix needs its vocabulary: --vocab FILE (one token per line)")
    vocab = Path(options.vocab)
    if not vocab.is_file():
        raise InputError(vocab, "no such vocabulary file" if not vocab.exists() else "the vocabulary is not a file")
    matrix = load_matrix(path)
    tokens, replaced, not_utf8, refused = read_lines(vocab, options, rows=matrix.shape[0])
    if not options.drop_invalid and "" in tokens:
        line = tokens.index("") + 1
        empty = InputError(vocab, empty_line(vocab, line, options), line=line)
        refused = first_of(refused, empty)
    if refused:
        raise refused
    if len(tokens) != matrix.shape[0]:
        raise InputError(
            vocab, f"{counted(len(tokens), 'token')}, but {path.name} has {counted(matrix.shape[0], 'row')}"
        )
    matrix = as_float32(matrix)
    if not_utf8:  # --drop-invalid: the rows whose token is not UTF-8 left out
        keep = keep_mask(len(tokens), not_utf8)
        tokens = [tokens[i] for i in np.flatnonzero(keep).tolist()]
        matrix = matrix[keep]
    report = {"malformed_rows_dropped": len(not_utf8), "tokens_unicode_replaced": replaced}
    return RawTable(tokens=tokens, matrix=matrix, first_line=0, rows_are="row", report=report)


def load_matrix(path: Path) -> np.ndarray:
    """The 2-D numeric array in ``path`` (memory-mapped when uncompressed), never unpickling.

    The header is checked first (dtype, shape, and that the data it describes is there), so a damaged
    header can neither unpickle nor make a large allocation.
    """
    with reading(path), open_text(path) as handle:
        compressed = isinstance(handle, gzip.GzipFile)
        data = handle.read() if compressed else handle.read(6)
    if not data.startswith(MAGIC):
        raise InputError(path, "not a .npy file")
    with io.BytesIO(data) if compressed else open(path, "rb") as stream:
        try:
            version = npformat.read_magic(stream)
            header = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
            shape, _, dtype = header(stream)
            available = (len(data) if compressed else path.stat().st_size) - stream.tell()
        except NPY_ERRORS as exc:
            raise InputError(path, f"not a readable .npy file ({type(exc).__name__}: {exc})") from None
    if problem := matrix_problem(shape, dtype):
        raise InputError(path, problem)
    needed = shape[0] * shape[1] * dtype.itemsize
    if needed > available:
        raise InputError(
            path,
            f"truncated: a {shape[0]:,} x {shape[1]:,} {dtype} matrix needs {needed:,} bytes, {available:,} follow",
        )
    try:
        # np.load is typed as Any (it may return an archive); a .npy file is one array.
        matrix: np.ndarray = (
            np.load(io.BytesIO(data), allow_pickle=False)
            if compressed
            else np.load(path, mmap_mode="r", allow_pickle=False)
        )
        return matrix
    except NPY_ERRORS as exc:
        raise InputError(path, f"not a readable .npy file ({type(exc).__name__}: {exc})") from None


def matrix_problem(shape: tuple[int, ...], dtype: np.dtype) -> str | None:
    """What keeps an array of ``shape`` and ``dtype`` (from its header) from being the table's matrix."""
    if dtype.hasobject:
        return "holds Python objects (dtype object); refused, since reading it would unpickle"
    if dtype.kind not in "fiu":
        return f"dtype {dtype} is not a real numeric matrix"
    if len(shape) != 2:
        return f"expected a 2-D matrix (rows x dim), found shape {list(shape)}"
    return None


def as_float32(matrix: np.ndarray) -> np.ndarray:
    """The matrix as float32 (values past float32's range become Inf, which the cleaning names by row)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(matrix, dtype=np.float32)


def read_npz(path: Path, options: ReadOptions) -> RawTable:
    """An ``.npz`` archive (``np.savez`` or ``np.savez_compressed``) of exactly ``vectors`` and ``tokens``."""
    if options.vocab is not None:
        raise InputError(path, "an .npz archive carries its own tokens (its array 'tokens'): leave out --vocab")
    if options.encoding != "utf-8":
        raise InputError(path, "an .npz archive's tokens are text already (a str array): leave out --encoding")
    try:
        archive = zipfile.ZipFile(io.BytesIO(read_bytes(path)))
        names = archive.namelist()
    except zipfile.BadZipFile as exc:
        raise InputError(path, f"not a readable .npz archive ({exc})") from None
    members = {name.removesuffix(".npy"): name for name in names}
    arrays = Counter(name.removesuffix(".npy") for name in names)
    if twice := [array for array, count in arrays.items() if count > 1]:  # np.load would take one of them
        given = ", ".join(repr(name) for name in names if name.removesuffix(".npy") == twice[0])
        raise InputError(path, f"array {twice[0]!r} is in the archive twice ({given})")
    if sorted(members) != list(NPZ_ARRAYS):
        found = ", ".join(map(repr, sorted(members))) or "none"
        raise InputError(path, f"an .npz archive holds the arrays 'tokens' and 'vectors', found {found}; {NPZ_HINT}")
    matrix = npz_array(path, archive, members["vectors"])
    labels = npz_array(path, archive, members["tokens"])
    if len(labels) != len(matrix):
        raise InputError(path, f"array 'tokens': {counted(len(labels), 'token')}, but 'vectors' has {len(matrix):,}")
    tokens, dropped, report = npz_tokens(path, labels.tolist(), options)
    matrix = as_float32(matrix)
    if dropped:  # --drop-invalid: their rows left out
        keep = keep_mask(len(tokens), dropped)
        tokens, matrix = [tokens[i] for i in np.flatnonzero(keep).tolist()], matrix[keep]
    return RawTable(tokens=tokens, matrix=matrix, first_line=0, rows_are="row", report=report)


def npz_tokens(path: Path, tokens: list[str], options: ReadOptions) -> tuple[list[str], list[int], dict[str, int]]:
    """The array ``tokens`` checked as the lines of a vocabulary file are: an empty token refused, one with an
    unpaired surrogate (which a str array holds and UTF-8 cannot) refused, decoded as its UTF-8 bytes would be
    (``--unicode-errors replace`` or ``ignore``) or its row dropped (``--drop-invalid``); return (tokens, rows to
    drop, report)."""
    unpaired = surrogate_rows(tokens)
    lenient = options.unicode_errors != "strict"
    refused = None
    if unpaired and not lenient and not options.drop_invalid:
        problem = "an unpaired surrogate (U+D800 to U+DFFF), which is no character in UTF-8"
        refused = InputError(
            path,
            f"array 'tokens': {problem}; use --unicode-errors replace to substitute U+FFFD, or --drop-invalid to "
            "skip such rows",
            line=unpaired[0],
            unit="row",
        )
    if not options.drop_invalid and "" in tokens:
        empty = InputError(path, "array 'tokens': an empty token", line=tokens.index(""), unit="row")
        refused = first_of(refused, empty)
    if refused:
        raise refused
    if not lenient:
        return tokens, unpaired, {"malformed_rows_dropped": len(unpaired), "tokens_unicode_replaced": 0}
    for row in unpaired:
        tokens[row] = tokens[row].encode("utf-8", "surrogatepass").decode("utf-8", options.unicode_errors)
    return tokens, [], {"malformed_rows_dropped": 0, "tokens_unicode_replaced": len(unpaired)}


def surrogate_rows(tokens: list[str]) -> list[int]:
    """The rows (0-based) whose token holds an unpaired surrogate (U+D800 to U+DFFF, no character in UTF-8), which a
    str array can hold and a vocabulary file cannot."""
    try:
        "".join(tokens).encode("utf-8")
        return []
    except UnicodeEncodeError:
        return [row for row, token in enumerate(tokens) if not _is_utf8(token)]


def _is_utf8(token: str) -> bool:
    try:
        token.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _unreadable(path: Path, name: str, exc: Exception) -> InputError:
    return InputError(path, f"array {name!r}: not a readable .npy ({type(exc).__name__}: {exc})")


def npz_array(path: Path, archive: zipfile.ZipFile, member: str) -> np.ndarray:
    """The archive's array ``vectors`` (a matrix) or ``tokens`` (1-D, str), its header checked before it is read."""
    name = member.removesuffix(".npy")
    try:
        with archive.open(member) as stream:
            version = npformat.read_magic(stream)
            header = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
            shape, fortran_order, dtype = header(stream)
            start = stream.tell()
            available = archive.getinfo(member).file_size - start
    except (*NPY_ERRORS, zipfile.BadZipFile) as exc:
        raise _unreadable(path, name, exc) from None
    if name == "vectors" or dtype.hasobject:
        problem = matrix_problem(shape, dtype)
    elif dtype.kind != "U":
        problem = f"dtype {dtype} is not str; {NPZ_HINT}"
    else:
        problem = None if len(shape) == 1 else f"expected one token per row (1-D), found shape {list(shape)}"
    needed = int(np.prod(shape)) * dtype.itemsize
    if not problem and needed > available:
        problem = f"truncated: shape {list(shape)} of {dtype} needs more than the {available:,} bytes that follow"
    if problem:
        raise InputError(path, f"array {name!r}: {problem}")
    try:
        with archive.open(member) as stream:
            stream.seek(start)
            data = stream.read(needed)  # what the member holds: the size its entry claims is not trusted
    except (*NPY_ERRORS, zipfile.BadZipFile) as exc:
        raise _unreadable(path, name, exc) from None
    if len(data) < needed:
        raise InputError(
            path,
            f"array {name!r}: truncated: shape {list(shape)} of {dtype} needs {needed:,} bytes, {len(data):,} follow",
        )
    array = np.frombuffer(data, dtype=dtype, count=int(np.prod(shape)))
    return array.reshape(shape[::-1]).T if fortran_order else array.reshape(shape)


def read_lines(path: Path, options: ReadOptions, rows: int) -> tuple[list[str], int, list[int], InputError | None]:
    """One token per line (CR LF or LF; blank lines at the end are ignored, but a line of spaces, such as U+3000,
    among the first ``rows`` is a token), decoded as ``--encoding`` says; return (tokens, lines with bytes it does
    not read, replaced or left out (``--unicode-errors``), lines it does not read for the caller to drop with their
    rows, the error refusing the first such line). Such a line is refused, kept with U+FFFD (``--unicode-errors
    replace``) or without its bytes (``ignore``) or, with ``--drop-invalid``, given as U+FFFD and listed (0-based).
    The error is returned, with the lines (U+FFFD in its place), for the caller to raise after any problem on an
    earlier line (see ``first_of``)."""
    data = read_bytes(path)
    refuse_unread(path, data[:HEAD_BYTES])
    data = data.removeprefix(BOM)  # UTF-8's mark, no token of any --encoding, as the embedding files' readers drop it
    refused: InputError | None = None
    lenient = options.unicode_errors != "strict"
    try:
        text = data.decode(options.encoding)
        bad: list[int] = []
    except UnicodeDecodeError as exc:
        text = data.decode(options.encoding, options.unicode_errors if lenient else "replace")
        bad = []
        if not lenient and not options.drop_invalid:
            problem = undecodable(options, data[exc.start], droppable=True)
            refused = InputError(path, problem, line=data.count(b"\n", 0, exc.start) + 1)
        else:
            bad = [line - 1 for line in undecodable_lines(data, options.encoding)]  # 0-based, as the rows
    lines = text.split("\n")
    # Blank lines at the end, as in text files; one of spaces is a token while there are rows for it.
    while lines and (not lines[-1].removesuffix("\r") or (len(lines) > rows and not lines[-1].strip())):
        lines.pop()
    tokens = [line.removesuffix("\r") for line in lines]
    return (tokens, len(bad), [], None) if lenient else (tokens, 0, bad, refused)


def empty_line(path: Path, line: int, options: ReadOptions) -> str:
    """Why line ``line`` of vocabulary ``path`` holds no token: it is empty, or it held only bytes ``--encoding``
    does not read, which ``--unicode-errors ignore`` left out."""
    raw = read_bytes(path).removeprefix(BOM).split(b"\n")[line - 1].removesuffix(b"\r")
    if not raw:
        return "empty line: each line must hold one token"
    problem = undecodable(options, raw[0], droppable=True)
    return f"no token left: --unicode-errors ignore left out each byte of the line, {problem}"


def first_of(refused: InputError | None, error: InputError) -> InputError:
    """``refused`` (a line that is not UTF-8) if it is on or before the line of ``error``, else ``error``: the first
    problem in the file is the one reported."""
    return refused if refused is not None and refused.details["line"] <= error.details["line"] else error


def keep_mask(rows: int, dropped: list[int]) -> np.ndarray:
    """Which of ``rows`` rows are kept when ``dropped`` are not."""
    keep = np.ones(rows, dtype=bool)
    keep[dropped] = False
    return keep
