"""Property tests: malformed text, binary, TSV and .npy inputs through the ``embedding-index import`` entry point.

Each generated file starts from real GloVe rows and is damaged at random. The import either succeeds with a
table that verifies, or fails cleanly: exit status 1, one line on stderr that names the source, and nothing
written. An uncaught exception or any other exit status fails the test. Examples are derandomised, so every
run checks the same files.
"""

from __future__ import annotations

import gzip
import io
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from index.build.sources import RawTable, text, word2vec_binary
from index.engine.table import Table
from index.store import artifact
from tests.cli import Result, run_cli

ROWS, DIM = 12, 6
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

JUNK = st.one_of(
    st.sampled_from(
        [
            b"",
            b"nan",
            b"-inf",
            b"1e39",
            b"-1e-50",
            b"abc",
            b"\xff",
            b"caf\xe9",
            b"0x10",
            b"1_0",
            b"\t",
            b"\r",
            b" ",
            b"\x00",
            b"+1",
            b"...",
            b"\xef\xbb\xbf",
            b"1,5",
            b"\n",
            b"\r\n",
            b"0",
            b"-0",
        ]
    ),
    st.binary(max_size=6),
)
# One edit of a list of lines: (kind, line index, field index, junk).
EDIT = st.tuples(
    st.sampled_from(
        [
            "delete_field",
            "insert_field",
            "replace_field",
            "insert_line",
            "delete_line",
            "copy_line",
            "crlf",
            "trailing_space",
            "replace_token",
        ]
    ),
    st.integers(0, ROWS + 1),
    st.integers(0, DIM + 1),
    JUNK,
)


@pytest.fixture(scope="module")
def base(glove_raw: RawTable) -> tuple[list[str], np.ndarray]:
    return glove_raw.tokens[:ROWS], np.array(glove_raw.matrix[:ROWS, :DIM], dtype=np.float32)


def apply_edits(lines: list[bytes], edits: list[tuple[str, int, int, bytes]], sep: bytes) -> list[bytes]:
    lines = list(lines)
    for kind, i, j, junk in edits:
        if not lines:
            break
        i %= len(lines)
        fields = lines[i].split(sep)
        j %= len(fields)
        if kind == "delete_field":
            del fields[j]
        elif kind == "insert_field":
            fields.insert(j, junk)
        elif kind == "replace_field":
            fields[j] = junk
        elif kind == "replace_token":
            fields[0] = junk
        elif kind == "insert_line":
            lines.insert(i, junk)
            continue
        elif kind == "delete_line":
            del lines[i]
            continue
        elif kind == "copy_line":
            lines.insert(j % (len(lines) + 1), lines[i])
            continue
        elif kind == "crlf":
            fields[-1] += b"\r"
        elif kind == "trailing_space":
            fields[-1] += b" "
        lines[i] = sep.join(fields)
    return lines


def check(result: Result, source: Path, data_dir: Path) -> None:
    """Success with a verified table, or a clean one-line failure naming the source; nothing half-written."""
    assert result.code in (0, 1), result
    assert "Traceback" not in result.err
    event("imported" if result.code == 0 else "refused")
    if result.code == 0:
        assert artifact.verify(data_dir / "t").ok
        table = Table.load(data_dir / "t")
        assert table.rows >= 1
        assert np.isfinite(np.asarray(table.vectors)).all()
    else:
        lines = result.err.splitlines()
        assert len(lines) == 1, result.err
        assert lines[0].startswith("embedding-index: error: ")
        assert str(source) in lines[0], lines[0]
        assert not (data_dir / "t").exists()
    assert not list(data_dir.glob(".tmp-*")) if data_dir.exists() else True


def run_import(source: Path, data_dir: Path, path: Path, *extra: str) -> Result:
    return run_cli("import", path, "--name", "t", "--data-dir", data_dir, "--index", "flat", *extra)


FLAGS = st.tuples(st.booleans(), st.sampled_from(["strict", "replace"]))


def _flags(drop: bool, unicode_errors: str) -> list[str]:
    return (["--drop-invalid"] if drop else []) + ["--unicode-errors", unicode_errors]


@SETTINGS
@given(
    edits=st.lists(EDIT, max_size=4),
    header=st.one_of(st.none(), st.just("ok"), st.sampled_from([b"12 5", b"13 6", b"0 6", b"99999999999 6", b"x y"])),
    fmt=st.sampled_from(["auto", "glove", "word2vec", "fasttext"]),
    flags=FLAGS,
    cut=st.one_of(st.none(), st.integers(0, 2000)),
    gz=st.booleans(),
    chunk=st.sampled_from([text.CHUNK_BYTES, 100, 333]),
)
def test_malformed_text(base, edits, header, fmt, flags, cut, gz, chunk) -> None:
    tokens, matrix = base
    lines = [
        t.encode() + b" " + b" ".join(repr(v).encode() for v in row.tolist())
        for t, row in zip(tokens, matrix, strict=True)
    ]
    lines = apply_edits(lines, edits, b" ")
    if header is not None:
        lines.insert(0, f"{len(lines)} {DIM}".encode() if header == "ok" else header)
    data = b"\n".join(lines) + b"\n"
    if cut is not None:
        data = data[:cut]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        path = source / ("vectors.txt.gz" if gz else "vectors.txt")
        path.write_bytes(gzip.compress(data) if gz else data)
        data_dir = Path(tmp) / "data"
        with mock.patch.object(text, "CHUNK_BYTES", chunk):  # small chunks: rows cross chunk boundaries
            result = run_import(source, data_dir, path, "--format", fmt, *_flags(*flags))
        check(result, source, data_dir)


@SETTINGS
@given(
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    inserts=st.lists(st.tuples(st.integers(0, 10_000), JUNK), max_size=2),
    header=st.one_of(st.none(), st.sampled_from([b"12 5", b"11 6", b"13 6", b"12 7", b"0 6", b"9999999999 300"])),
    cut=st.one_of(st.none(), st.integers(0, 400)),
    newline=st.booleans(),
    fmt=st.sampled_from(["auto", "word2vec-binary"]),
    flags=FLAGS,
    chunk=st.sampled_from([word2vec_binary.CHUNK_BYTES, 50, 77]),
)
def test_malformed_binary(base, flips, inserts, header, cut, newline, fmt, flags, chunk) -> None:
    tokens, matrix = base
    body = b"".join(
        t.encode() + b" " + r.tobytes() + (b"\n" if newline else b"") for t, r in zip(tokens, matrix, strict=True)
    )
    data = bytearray((header if header is not None else f"{ROWS} {DIM}".encode()) + b"\n" + body)
    for position, value in flips:
        data[position % len(data)] = value
    for position, junk in inserts:
        data[position % len(data) : position % len(data)] = junk
    if cut is not None:
        data = data[: len(data) - cut]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        path = source / "vectors.bin"
        path.write_bytes(bytes(data))
        data_dir = Path(tmp) / "data"
        with mock.patch.object(word2vec_binary, "CHUNK_BYTES", chunk):
            result = run_import(source, data_dir, path, "--format", fmt, *_flags(*flags))
        check(result, source, data_dir)


@SETTINGS
@given(
    vector_edits=st.lists(EDIT, max_size=3),
    metadata_edits=st.lists(EDIT, max_size=3),
    kind_column=st.booleans(),
    by_directory=st.booleans(),
    flags=FLAGS,
)
def test_malformed_projector(base, vector_edits, metadata_edits, kind_column, by_directory, flags) -> None:
    tokens, matrix = base
    vectors = apply_edits([b"\t".join(repr(v).encode() for v in row.tolist()) for row in matrix], vector_edits, b"\t")
    if kind_column:
        metadata = [b"word\tkind"] + [t.encode() + b"\t" + (b"punct" if len(t) == 1 else b"word") for t in tokens]
    else:
        metadata = [t.encode() for t in tokens]
    metadata = apply_edits(metadata, metadata_edits, b"\t")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        (source / "vectors.tsv").write_bytes(b"\n".join(vectors) + b"\n")
        (source / "metadata.tsv").write_bytes(b"\n".join(metadata) + b"\n")
        data_dir = Path(tmp) / "data"
        path = source if by_directory else source / "vectors.tsv"
        result = run_import(source, data_dir, path, *_flags(*flags))
        check(result, source, data_dir)
        if result.code == 0:  # metadata columns stay aligned with the rows kept
            table = Table.load(data_dir / "t")
            assert all(len(values) == table.rows for values in table.metadata.values())


@SETTINGS
@given(
    dtype=st.sampled_from(["<f4", "<f4", "<f4", ">f8", "<f2", "<i4", "<u1", "<c8", "|b1", "<U3", "|O"]),
    shape=st.sampled_from([(ROWS, DIM)] * 5 + [(ROWS,), (0, DIM), (ROWS, 0), (ROWS, DIM, 1), (ROWS, 1)]),
    vocab_rows=st.sampled_from([ROWS] * 4 + [0, 1, ROWS - 1, ROWS + 1]),
    nan_row=st.sampled_from([None, None, None, 0, ROWS - 1]),
    flips=st.one_of(st.just([]), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=2)),
    compress=st.booleans(),
    flags=FLAGS,
)
def test_malformed_npy(base, dtype, shape, vocab_rows, nan_row, flips, compress, flags) -> None:
    tokens, matrix = base
    values = np.resize(matrix, shape) if 0 not in shape else np.zeros(shape, dtype=np.float32)
    if nan_row is not None and len(shape) == 2 and shape[0] and shape[1] and dtype[1] in "fc":
        values = values.astype(np.float64)
        values[nan_row, 0] = np.nan
    array = values.astype(object) if dtype == "|O" else values.astype(dtype)
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    data = bytearray(buffer.getvalue())
    for position, value in flips:
        data[position % len(data)] = value
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        path = source / ("m.npy.gz" if compress else "m.npy")
        path.write_bytes(gzip.compress(bytes(data)) if compress else bytes(data))
        (source / "vocab.txt").write_text("".join(f"{t}\n" for t in (tokens * 2)[:vocab_rows]), encoding="utf-8")
        data_dir = Path(tmp) / "data"
        result = run_import(source, data_dir, path, "--vocab", str(source / "vocab.txt"), *_flags(*flags))
        check(result, source, data_dir)
