"""The TensorFlow Embedding Projector pair: ``vectors.tsv`` + ``metadata.tsv``.

``vectors.tsv`` holds one row per line, tab-separated numbers, no header. ``metadata.tsv`` holds the row
labels: with one column, one token per line and no header; with more columns, a header line, the token in
the first column and the other columns (e.g. a "kind" per word) kept as table metadata. ``path`` may be the
vectors file (the metadata file is found beside it, or given with ``--vocab``), the metadata file, or a
directory holding both (either gzipped too: ``vectors.tsv.gz``, ``metadata.tsv.gz``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from index.build.sources import (
    BOM,
    DROP_HINT,
    WIDE_DIM,
    RawTable,
    ReadOptions,
    is_number,
    read_bytes,
    undecodable,
)
from index.build.sources.numpy_vocab import first_of, keep_mask, read_lines
from index.errors import InputError, counted
from index.progress import Progress

SAMPLE_BYTES = 1 << 20  # the dimension is the most common row length among the whole lines in this much
BLOCK_BYTES = 4 << 20  # vectors.tsv is parsed this many bytes at a time


def locate(path: Path, vocab: Path | None = None) -> tuple[Path, Path]:
    """Return (vectors file, metadata file) for ``path``."""
    path = Path(path)
    if path.is_dir():
        vectors, metadata = _twin(path / "vectors.tsv"), _twin(path / "metadata.tsv")
    elif "metadata" in path.name and vocab is None:
        vectors, metadata = _twin(path.with_name(path.name.replace("metadata", "vectors"))), path
    else:
        vectors = path
        guess = path.name.replace("vectors", "metadata") if "vectors" in path.name else "metadata.tsv"
        metadata = _twin(path.with_name(guess))
    if vocab is not None:
        metadata = Path(vocab)
    if not vectors.is_file():
        raise InputError(vectors, "no such file (the projector's vectors.tsv)")
    if not metadata.is_file():
        raise InputError(metadata, "no such file: the projector needs metadata.tsv (the tokens) or --vocab FILE")
    return vectors, metadata


def _twin(path: Path) -> Path:
    """``path``, else its gzipped or plain twin (``.gz`` added or taken off) when only that is there: either file
    of the pair may be gzipped (gzip is read as it is)."""
    name = path.name.removesuffix(".gz") if path.name.endswith(".gz") else path.name + ".gz"
    twin = path.with_name(name)
    return twin if not path.exists() and twin.is_file() else path


def read(path: Path, options: ReadOptions) -> RawTable:
    vectors_path, metadata_path = locate(path, options.vocab)
    data = read_bytes(vectors_path).removeprefix(BOM).rstrip(b"\r\n") + b"\n"
    tokens, columns, replaced, dropped = read_metadata(metadata_path, options, data.count(b"\n"))
    matrix, keep = read_vectors(vectors_path, data, options)
    if len(keep) != len(tokens):
        raise InputError(metadata_path, f"{counted(len(tokens), 'row')}, but {vectors_path.name} has {len(keep):,}")
    if dropped:  # --drop-invalid: the rows whose metadata line is dropped left out too
        labelled = keep_mask(len(tokens), dropped)
        matrix = matrix[labelled[keep]]
        keep &= labelled
    report = {"malformed_rows_dropped": int((~keep).sum()), "tokens_unicode_replaced": replaced}
    if not keep.all():
        ids = np.flatnonzero(keep).tolist()
        tokens = [tokens[i] for i in ids]
        columns = {name: [values[i] for i in ids] for name, values in columns.items()}
    return RawTable(
        tokens=tokens,
        matrix=matrix,
        first_line=1,
        metadata=columns,
        report=report,
        info={"projector_metadata": str(metadata_path)},
        rows_file=vectors_path,
    )


def read_metadata(
    path: Path, options: ReadOptions, vectors: int
) -> tuple[list[str], dict[str, list[str]], int, list[int]]:
    """Return (tokens, extra columns by name, lines with U+FFFD, rows (0-based) to drop with ``--drop-invalid``:
    those whose line is not UTF-8 or has the wrong number of columns). A line of spaces among the first ``vectors``
    rows (of vectors.tsv; those after the header, if there is one) is a token, not a blank line at the end (see
    ``read_lines``)."""
    lines, replaced, dropped, refused = read_lines(path, options, vectors + 1)  # a header's line, if any, besides
    if not lines:
        raise InputError(path, "empty file: no tokens")
    if "\t" not in lines[0] and len(lines) > vectors and not lines[-1].strip():  # no header: past the rows
        lines.pop()

    def fail(problem: str, line: int) -> InputError:
        """The error for ``problem`` on ``line``, or for an earlier line that is not UTF-8."""
        return first_of(refused, InputError(path, problem, line=line))

    if "\t" not in lines[0]:
        tokens, columns, first = lines, {}, 1
    else:
        if dropped and dropped[0] == 0:
            raise InputError(path, f"the header is {undecodable(options, None)}", line=1)
        header = lines[0].split("\t")
        for i, name in enumerate(header):
            if not name.strip():
                raise fail(f"header column {i + 1} has no name", 1)
        duplicated = [name for name, n in Counter(header).items() if n > 1]
        if duplicated:
            raise fail(f"header names column {duplicated[0]!r} twice", 1)
        rows = [line.split("\t") for line in lines[1:]]
        ragged = [i for i, row in enumerate(rows) if len(row) != len(header)]
        tokens = [row[0] for row in rows]
        if ragged and not options.drop_invalid:
            if "" in tokens[: ragged[0]]:  # an empty token on an earlier line is the first problem
                raise fail("empty token", tokens.index("") + 2)
            problem = f"{len(rows[ragged[0]])} columns, the header has {len(header)}"
            raise fail(problem + DROP_HINT, ragged[0] + 2)
        for i in ragged:  # --drop-invalid: left out below with their vector rows
            rows[i], tokens[i] = [""] * len(header), ""
        dropped = sorted({*(line - 1 for line in dropped), *ragged})
        columns = {name: [row[j] for row in rows] for j, name in enumerate(header) if j}
        first = 2
    if not options.drop_invalid and "" in tokens:
        raise fail("empty token", tokens.index("") + first)
    if refused:
        raise refused
    return tokens, columns, replaced, dropped


def read_vectors(path: Path, data: bytes, options: ReadOptions) -> tuple[np.ndarray, np.ndarray]:
    """Return (float32 matrix of the rows kept, which lines were kept) of ``data``, the lines of ``path`` (each
    ended by one LF; the blank lines at its end left out)."""
    if not data.strip():
        raise InputError(path, "empty file: no vectors")
    whole = max(data.rfind(b"\n", 0, SAMPLE_BYTES), data.index(b"\n"))  # at least the first line
    sample = [line.strip() for line in data[:whole].split(b"\n", 1000)[:1000] if line.strip()]
    counts = Counter(len(line.split(b"\t")) for line in sample)
    dim = min(counts, key=lambda n: (-counts[n], n))
    rows = data.count(b"\n")
    matrix = np.empty((rows, dim), dtype=np.float32)
    if dim <= WIDE_DIM:
        try:
            _arrow_parse(path, data, matrix)
            return matrix, np.ones(rows, dtype=bool)
        except _Refused:
            pass
    keep = np.ones(rows, dtype=bool)
    with Progress(f"reading {path.name} line by line", rows) as progress:
        for i, line in enumerate(data.split(b"\n")[:-1]):
            problem = _parse_line(line, dim, matrix[i])
            if problem:
                if not options.drop_invalid:
                    raise InputError(path, problem + DROP_HINT, line=i + 1)
                keep[i] = False
            progress.advance()
    return (matrix if keep.all() else matrix[keep]), keep


class _Refused(Exception):
    """pyarrow refused a block: each line is parsed on its own, which names the bad one."""


def _arrow_parse(path: Path, data: bytes, out: np.ndarray) -> None:
    """Parse the lines of ``data`` into ``out`` with pyarrow, a block at a time (its progress shown); raise
    :class:`_Refused` at a block it refuses."""
    rows, dim = out.shape
    names = [f"c{i}" for i in range(dim)]
    done = 0
    try:
        reader = pacsv.open_csv(
            pa.py_buffer(data),
            read_options=pacsv.ReadOptions(column_names=names, block_size=BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(
                delimiter="\t", quote_char=False, double_quote=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.float64()), null_values=[], strings_can_be_null=False
            ),
        )
        with Progress(f"reading {path.name}", rows) as progress, np.errstate(over="ignore", invalid="ignore"):
            for batch in reader:
                end = done + batch.num_rows
                if end > rows:
                    raise _Refused
                for i in range(dim):
                    out[done:end, i] = batch.column(i).to_numpy()
                progress.advance(batch.num_rows)
                done = end
            if done != rows:
                raise _Refused
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _Refused from None


def _parse_line(line: bytes, dim: int, out: np.ndarray) -> str | None:
    """Parse one line into ``out``; return what is wrong with it, or None."""
    fields = line.strip().split(b"\t")
    if not line.strip():
        return "empty line"
    if len(fields) != dim:
        return f"{counted(len(fields), 'value')}, expected {dim}"
    try:
        values = np.array(fields, dtype=np.float64)
    except ValueError:
        field = next(field for field in fields if not is_number(field))
        shown = field[:40].decode("utf-8", "replace")
        return f"{shown!r} is not a number" if field else "empty value (two tabs in a row?)"
    with np.errstate(over="ignore"):
        out[:] = values
    return None
