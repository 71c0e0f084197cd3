"""File readers through the real ``embedding-index import`` command, on real GloVe rows.

Every format is written by the test from the first rows of GloVe 6B 50d, imported through the CLI, and compared
with the source rows and, where gensim can read the file, with gensim's own loader. Every kind of bad input
must end with exit status 1, one line on stderr naming the file (and line), and nothing written.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors

from index.build import writer
from index.build.clean import clean
from index.build.sources import (
    RawTable,
    ReadOptions,
    read_source,
    refuse_unread,
    sniff_format,
    text,
    word2vec_binary,
)
from index.build.writer import source_digest
from index.engine.table import Table
from index.errors import InputError
from index.store import artifact
from index.store.rows import MAX_DIM
from index.store.tokens import MAX_TOKEN_CHARS
from tests.cli import REPO, progress_lines, run_cli

ROWS = 3000


# ------------------------------------------------------------------------------------------------ helpers


def import_ok(path: Path, data_dir: Path, name: str = "t", *extra: object) -> Table:
    result = run_cli("import", path, "--name", name, "--data-dir", data_dir, *extra)
    assert result.code == 0, result.err
    assert artifact.verify(data_dir / name).ok
    return Table.load(data_dir / name)


def import_fails(path: Path, data_dir: Path, *extra: object, name: str = "t") -> str:
    """Import must fail cleanly: status 1, one stderr line naming the file, no table, no temporary directory."""
    existed = (data_dir / name).exists()
    result = run_cli("import", path, "--name", name, "--data-dir", data_dir, *extra)
    assert result.code == 1, (result.out, result.err)
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("embedding-index: error: ")
    assert "Traceback" not in result.err
    assert (data_dir / name).exists() == existed
    assert not list(data_dir.glob(".tmp-*")) if data_dir.exists() else True
    return lines[0]


NOT_A_HEADER = "expected a word2vec header 'ROWS DIM' on the first line, found '3 x'"


@pytest.mark.parametrize(
    ("fmt", "head", "problem"),
    [
        ("word2vec", b"3 x", NOT_A_HEADER + " (use --format glove for a file without a header)"),
        ("word2vec-binary", b"3 x", NOT_A_HEADER),
        ("word2vec", b"0 2", "the header says 0 rows of dimension 2: no vectors"),
        ("word2vec-binary", b"3 0", "the header says 3 rows of dimension 0: no vectors"),
        ("word2vec", b"1 0", "the header says 1 row of dimension 0: no vectors"),  # a count of 1: singular
    ],
)
def test_a_word2vec_header_is_two_positive_numbers(tmp_path: Path, fmt: str, head: bytes, problem: str) -> None:
    """Text and binary word2vec files read their first line by one rule; the text one's error says what to do."""
    path = tmp_path / "vectors"
    path.write_bytes(head + b"\na 1 2\n")
    with pytest.raises(InputError) as caught:
        read_source(path, fmt)
    assert str(caught.value) == f"{path}:1: {problem}"


def fmt_row(row: np.ndarray) -> bytes:
    """The row's float32 values as text that parses back to exactly the same float32 values."""
    return " ".join(map(repr, row.tolist())).encode()


def text_lines(tokens: list[str], matrix: np.ndarray) -> list[bytes]:
    return [t.encode() + b" " + fmt_row(r) for t, r in zip(tokens, matrix, strict=True)]


def write(path: Path, lines: list[bytes], header: bytes | None = None, newline: bytes = b"\n") -> Path:
    data = newline.join(([header] if header is not None else []) + lines) + newline
    if path.suffix == ".gz":
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def assert_rows(table: Table, tokens: list[str], matrix: np.ndarray) -> None:
    """The table holds ``tokens`` in order, and each row scaled back to its norm equals the source row."""
    assert table.rows == len(tokens)
    assert list(table.tokens[: len(tokens)]) == tokens
    for i in range(0, len(tokens), max(1, len(tokens) // 50)):
        np.testing.assert_allclose(table.row(i), matrix[i], rtol=1e-5, atol=1e-6)
    restored = np.asarray(table.vectors) * np.asarray(table.norms)[:, None]
    np.testing.assert_allclose(restored, matrix, rtol=1e-5, atol=1e-6)


def assert_same_as_gensim(path: Path, raw: RawTable, **gensim_args: object) -> None:
    kv = KeyedVectors.load_word2vec_format(str(path), **gensim_args)
    assert raw.tokens == kv.index_to_key
    assert raw.matrix.dtype == np.float32
    assert np.array_equal(raw.matrix, kv.vectors)


@pytest.fixture(scope="module")
def glove_rows(glove_raw: RawTable) -> tuple[list[str], np.ndarray]:
    return glove_raw.tokens[:ROWS], np.array(glove_raw.matrix[:ROWS], dtype=np.float32)


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


# ------------------------------------------------------------------------------------------------ formats


def test_glove_text_matches_source_and_gensim(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    path = write(tmp_path / "glove.txt", text_lines(tokens, matrix))
    assert sniff_format(path) == "glove"
    table = import_ok(path, data_dir)
    assert_rows(table, tokens, matrix)
    assert table.manifest["source"]["format"] == "glove"
    raw, _ = read_source(path)
    assert_same_as_gensim(path, raw, binary=False, no_header=True)
    assert np.array_equal(raw.matrix, matrix)


def test_glove_text_five_digit_values_equal_gensim(tmp_path: Path, glove_raw: RawTable) -> None:
    """The original GloVe text has 5 significant digits; 20,000 such rows parse exactly as gensim parses them."""
    rows = 20_000
    with open(tmp_path / "glove.txt", "w", encoding="utf-8") as f:
        template = " ".join(["%.5g"] * 50)
        for token, row in zip(glove_raw.tokens[:rows], glove_raw.matrix[:rows].tolist(), strict=True):
            f.write(token + " " + template % tuple(row) + "\n")
    raw, fmt = read_source(tmp_path / "glove.txt")
    assert fmt == "glove"
    assert_same_as_gensim(tmp_path / "glove.txt", raw, binary=False, no_header=True)
    assert np.array_equal(raw.matrix, glove_raw.matrix[:rows])


@pytest.mark.parametrize("name", ["vectors.txt", "vectors.txt.gz"])
def test_word2vec_text_plain_and_gzip(tmp_path: Path, data_dir: Path, glove_rows, name: str) -> None:
    tokens, matrix = glove_rows
    path = write(tmp_path / name, text_lines(tokens, matrix), header=f"{ROWS} 50".encode())
    assert sniff_format(path) == "word2vec"
    table = import_ok(path, data_dir)
    assert_rows(table, tokens, matrix)
    raw, _ = read_source(path)
    assert raw.first_line == 2
    assert_same_as_gensim(path, raw, binary=False)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_word2vec_text_of_few_short_numbers_is_text(tmp_path: Path, data_dir: Path, dim: int) -> None:
    """Rows of a few one-digit numbers: the bytes after the first row are the next row's token, not raw floats."""
    rows = [(f"w{i}", [(i + j) % 9 + 1 for j in range(dim)]) for i in range(3)]
    lines = [f"{token} {' '.join(map(str, values))}".encode() for token, values in rows]
    path = write(tmp_path / "small.txt", lines, header=f"3 {dim}".encode())
    assert sniff_format(path) == "word2vec"
    assert import_ok(path, data_dir).tokens[:] == ["w0", "w1", "w2"]


def test_fasttext_vec_with_trailing_spaces_and_crlf(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    lines = [line + b" " for line in text_lines(tokens, matrix)]  # fastText ends each row with a space
    path = write(tmp_path / "wiki.vec", lines, header=f"{ROWS} 50".encode(), newline=b"\r\n")
    assert sniff_format(path) == "fasttext"
    table = import_ok(path, data_dir)
    assert_rows(table, tokens, matrix)
    raw, _ = read_source(path)
    assert_same_as_gensim(path, raw, binary=False)


@pytest.mark.parametrize("name", ["vectors.bin", "vectors.bin.gz"])
def test_word2vec_binary(tmp_path: Path, data_dir: Path, glove_rows, name: str) -> None:
    tokens, matrix = glove_rows
    kv = KeyedVectors(50)
    kv.add_vectors(tokens, matrix)
    kv.save_word2vec_format(str(tmp_path / "plain.bin"), binary=True)
    path = tmp_path / name
    data = (tmp_path / "plain.bin").read_bytes()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert sniff_format(path) == "word2vec-binary"
    table = import_ok(path, data_dir)
    assert_rows(table, tokens, matrix)
    raw, _ = read_source(path)
    assert_same_as_gensim(path, raw, binary=True)


def test_word2vec_binary_without_newlines(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """The newline after each row is optional in the binary format."""
    tokens, matrix = glove_rows
    body = b"".join(t.encode() + b" " + r.astype("<f4").tobytes() for t, r in zip(tokens, matrix, strict=True))
    path = tmp_path / "packed.bin"
    path.write_bytes(f"{ROWS} 50\n".encode() + body)
    table = import_ok(path, data_dir, "t", "--format", "word2vec-binary")
    assert_rows(table, tokens, matrix)
    raw, _ = read_source(path)
    assert_same_as_gensim(path, raw, binary=True)


def test_word2vec_binary_after_a_byte_order_mark(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """A byte-order mark before the header, which the format is sniffed past, is read past too."""
    tokens, matrix = glove_rows
    body = b"".join(t.encode() + b" " + r.astype("<f4").tobytes() + b"\n" for t, r in zip(tokens, matrix, strict=True))
    path = tmp_path / "marked.bin"
    path.write_bytes(f"\ufeff{ROWS} 50\n".encode() + body)
    assert sniff_format(path) == "word2vec-binary"
    assert_rows(import_ok(path, data_dir), tokens, matrix)


@pytest.mark.parametrize(("row", "token"), [(1, "new york"), (37, "a b"), (99, "san francisco bay")])
def test_a_binary_token_with_a_space_is_refused_naming_it(
    tmp_path: Path, data_dir: Path, glove_rows, row: int, token: str
) -> None:
    """The format cannot hold a space in a token (it ends at the first one): the values of its row start inside
    it, and the newline after them lands inside the next row's token. Read so, a row in two of three turned into a
    token such as 'Q?\\nw1' and imported; now the row with the space is named, even with --unicode-errors replace."""
    tokens, matrix = glove_rows
    tokens = [token if i == row - 1 else t for i, t in enumerate(tokens[:100])]
    path = tmp_path / "spaced.bin"
    path.write_bytes(_binary((tokens, matrix)))
    offset = len("100 50\n") + sum(len(t.encode()) + 1 + 4 * 50 + 1 for t in tokens[: row - 1])
    offset -= row > 1  # a row's offset is the newline's before its token
    said = f"spaced.bin: row {row} (byte offset {offset:,}): the token '{token}' holds a space"
    for extra in ([], ["--unicode-errors", "replace"], ["--drop-invalid"]):
        assert said in import_fails(path, data_dir, *extra)


def test_a_binary_token_with_a_space_read_across_chunks_is_refused(tmp_path: Path, glove_rows, monkeypatch) -> None:
    """Read a row a chunk, the row before is gone when the shift shows: the refusal names the row it shows in."""
    tokens, matrix = glove_rows
    path = tmp_path / "spaced.bin"
    path.write_bytes(_binary(([*tokens[:9], "a b", *tokens[10:100]], matrix)))
    monkeypatch.setattr(word2vec_binary, "CHUNK_BYTES", 97)
    with pytest.raises(InputError, match=r"row 11 \(byte offset .*\): a newline inside the token: .*a token holding a"):
        read_source(path)


def _gensim_binary(path: Path, tokens: list[str], matrix: np.ndarray) -> Path:
    """``tokens`` and ``matrix`` written by gensim's own word2vec binary writer: no newline after a row's values."""
    kv = KeyedVectors(matrix.shape[1])
    kv.add_vectors(tokens, matrix)
    kv.save_word2vec_format(str(path), binary=True)
    return path


@pytest.mark.parametrize(("row", "token"), [(1, "new york"), (37, "a b"), (99, "san francisco bay")])
def test_a_token_with_a_space_in_a_file_gensim_wrote_is_refused_naming_it(
    tmp_path: Path, data_dir: Path, glove_rows, row: int, token: str
) -> None:
    """gensim writes no newline after a row's values, so a token with a space leaves no newline in the next token:
    that token is read from inside the values before it, and was refused as bytes that are no UTF-8, without naming
    the token with the space, or imported, as '>\\x00#Z=beta' (a control character) or with --unicode-errors
    replace. The row with the space is named when the token after it holds what no word holds."""
    tokens, matrix = glove_rows
    tokens = [token if i == row - 1 else t for i, t in enumerate(tokens[:100])]
    path = _gensim_binary(tmp_path / "spaced.bin", tokens, matrix[:100])
    offset = len("100 50\n") + sum(len(t.encode()) + 1 + 4 * 50 for t in tokens[: row - 1])
    said = f"spaced.bin: row {row} (byte offset {offset:,}): the token '{token}' holds a space"
    for extra in ([], ["--unicode-errors", "replace"], ["--drop-invalid"]):
        assert said in import_fails(path, data_dir, *extra)


def test_a_spaced_token_whose_next_token_ends_inside_its_values_is_named(
    tmp_path: Path, data_dir: Path, glove_rows
) -> None:
    """'new york' as GloVe's 103rd token in a file gensim wrote: the next token, read from inside the values before
    it, ends at a space byte of those values ('\\xbe&\\x1e'), before the word after them ('him'). It was named as
    row 104's token not UTF-8, and with --unicode-errors replace stopped with a traceback; now the token with the
    space is named."""
    tokens, matrix = glove_rows
    tokens = [*tokens[:102], "new york", *tokens[103:400]]
    path = _gensim_binary(tmp_path / "spaced.bin", tokens, matrix[:400])
    offset = len("400 50\n") + sum(len(t.encode()) + 1 + 4 * 50 for t in tokens[:102])
    said = f"spaced.bin: row 103 (byte offset {offset:,}): the token 'new york' holds a space"
    for extra in ([], ["--unicode-errors", "replace"]):
        assert said in import_fails(path, data_dir, *extra)


def test_a_spaced_token_is_read_as_gensim_reads_it_when_the_next_token_is_a_word(tmp_path: Path, glove_rows) -> None:
    """Where the token read after a token with a space is a word, the file is also a file of those tokens: gensim
    reads it so, and so does the import. Here the values' last bytes are ">ab=>" (0.185 as the last value), which
    read as the start of the next token make '>ab=>beta'."""
    rows = glove_rows[1][:3].copy()
    last = bytearray(rows[1].astype("<f4").tobytes())
    last[-5:] = b">ab=>"
    rows[1] = np.frombuffer(bytes(last), dtype="<f4")
    path = _gensim_binary(tmp_path / "spaced.bin", ["alpha", "new york", "beta"], rows)
    raw, _ = read_source(path)
    assert raw.tokens == ["alpha", "new", ">ab=>beta"]
    assert_same_as_gensim(path, raw, binary=True)


# GloVe's tokens, one after another in a word2vec binary file of latin-1 tokens written as gensim writes (no
# newlines): the second's first bytes, read from the first's values with the space byte among them, made a word
# of the first token and a word after it ("marxism-leninism 2" and "\ufffdelebi"); the last six are no such pair in
# GloVe, but were in a file of its latin-1 tokens with an ASCII one between each two.
LATIN1_PAIRS = (
    ("marxism-leninism", "\u00e7elebi"),
    ("philippus", "a\u00e9rea"),
    ("inactivates", "gr\u00fcnberg"),
    ("47.08", "b\u00f6cklin"),
    ("paran\u00e1", "k\u00f6nigsberg"),
    ("horn\u00ed", "schl\u00e4fli"),
    ("eichst\u00e4tt", "m\u00e8re"),
    ("solskj\u00e6r", "pi\u00e8ces"),
    ("c\u00f4te-nord", "\u00e5kerlund"),
    ("h\u00f6lle", "\u00e9omer"),
)


def test_a_latin1_binary_file_without_newlines_reads_as_gensim_reads_it(
    tmp_path: Path, data_dir: Path, glove_raw: RawTable
) -> None:
    """Tokens of latin-1, not UTF-8, in a file without newlines: with --unicode-errors replace, the tokens and rows
    gensim reads (``unicode_errors="replace"``), each byte no UTF-8 holds a U+FFFD. A token of such bytes after a
    token whose values hold a space byte was refused as the token before holding a space ('marxism-leninism 2'),
    or, when that token was no UTF-8 either, a traceback: the values of the row before read from after that space
    are floats no row holds. Without --unicode-errors replace, the first such token is named as not UTF-8."""
    at = {token: i for i, token in enumerate(glove_raw.tokens)}
    tokens = [*glove_raw.tokens[:100], *(token for pair in LATIN1_PAIRS for token in pair)]
    matrix = glove_raw.matrix[[*range(100), *(at[token] for token in tokens[100:])]]
    body = b"".join(t.encode("latin-1") + b" " + r.astype("<f4").tobytes() for t, r in zip(tokens, matrix, strict=True))
    path = tmp_path / "latin1.bin"
    path.write_bytes(f"{len(tokens)} 50\n".encode() + body)
    raw, _ = read_source(path, options=ReadOptions(unicode_errors="replace"))
    assert raw.tokens[100:102] == ["marxism-leninism", "\ufffdelebi"]
    assert_same_as_gensim(path, raw, binary=True, unicode_errors="replace")
    refused = import_fails(path, data_dir)
    assert (
        "latin1.bin: row 102 (byte offset " in refused
        and "token is not valid UTF-8 (byte 0xe7 at position 0)" in refused
    )


def test_tokens_with_spaces_glove_840b_style(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    tokens = list(tokens)
    for i, phrase in [(5, "new york"), (700, ". . ."), (2999, "a  b")]:
        tokens[i] = phrase
    path = write(tmp_path / "glove.840B.txt", text_lines(tokens, matrix))
    table = import_ok(path, data_dir)
    assert_rows(table, tokens, matrix)
    assert table.manifest["cleaning"]["tokens_with_spaces"] == 3
    assert table.tokens.find("new york") == 5


def test_tokens_with_spaces_in_word2vec_text(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    tokens = [*tokens[:10], "los angeles"]
    path = write(tmp_path / "w.txt", text_lines(tokens, matrix[:11]), header=b"11 50")
    table = import_ok(path, data_dir)
    assert_rows(table, tokens, matrix[:11])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_npy_with_vocabulary(tmp_path: Path, data_dir: Path, glove_rows, dtype) -> None:
    tokens, matrix = glove_rows
    np.save(tmp_path / "m.npy", matrix.astype(dtype))
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    assert sniff_format(tmp_path / "m.npy") == "npy"
    table = import_ok(tmp_path / "m.npy", data_dir, "t", "--vocab", tmp_path / "vocab.txt")
    assert_rows(table, tokens, matrix.astype(dtype).astype(np.float32))


def test_npy_gzip_and_crlf_vocabulary(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    buffer = io.BytesIO()
    np.save(buffer, matrix)
    (tmp_path / "m.npy.gz").write_bytes(gzip.compress(buffer.getvalue()))
    (tmp_path / "vocab.txt").write_bytes("\r\n".join(tokens).encode())  # no final newline
    table = import_ok(tmp_path / "m.npy.gz", data_dir, "t", "--vocab", tmp_path / "vocab.txt")
    assert_rows(table, tokens, matrix)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_of_vectors_and_tokens(tmp_path: Path, data_dir: Path, glove_rows, save) -> None:
    """An .npz archive of the arrays ``vectors`` and ``tokens`` (str) is the same table as .npy + vocabulary."""
    tokens, matrix = glove_rows
    save(tmp_path / "m.npz", vectors=matrix, tokens=np.array(tokens, dtype=str))
    assert sniff_format(tmp_path / "m.npz") == "npy"
    assert_rows(import_ok(tmp_path / "m.npz", data_dir, "t"), tokens, matrix)


def test_npz_token_with_an_unpaired_surrogate_replaced_or_dropped(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """A str array can hold an unpaired surrogate, which UTF-8 cannot: ``--unicode-errors replace`` makes it what the
    vocabulary file of the same bytes gives (U+FFFD for each), ``--drop-invalid`` leaves its row out."""
    tokens, matrix = glove_rows
    given = [*tokens[:12], "a\ud800", *tokens[13:200]]
    np.savez(tmp_path / "m.npz", vectors=matrix[:200], tokens=np.array(given, dtype=str))
    np.save(tmp_path / "m.npy", matrix[:200])
    (tmp_path / "vocab.txt").write_bytes("\n".join(given).encode("utf-8", "surrogatepass") + b"\n")
    replaced = import_ok(tmp_path / "m.npz", data_dir, "r", "--unicode-errors", "replace")
    vocab = import_ok(
        tmp_path / "m.npy", data_dir, "v", "--vocab", tmp_path / "vocab.txt", "--unicode-errors", "replace"
    )
    assert replaced.tokens[12] == vocab.tokens[12] == "a\ufffd\ufffd\ufffd"
    dropped = import_ok(tmp_path / "m.npz", data_dir, "d", "--drop-invalid")
    assert_rows(dropped, tokens[:12] + tokens[13:200], np.delete(matrix[:200], 12, axis=0))


def _projector(directory: Path, tokens: list[str], matrix: np.ndarray, kinds: list[str] | None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    rows = ["\t".join(map(repr, r.tolist())) for r in matrix]
    (directory / "vectors.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    if kinds is None:
        meta = "\n".join(tokens) + "\n"
    else:
        meta = "word\tkind\n" + "".join(f"{t}\t{k}\n" for t, k in zip(tokens, kinds, strict=True))
    (directory / "metadata.tsv").write_text(meta, encoding="utf-8")
    return directory


def test_projector_pair_keeps_kind_column(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    kinds = ["punct" if not t.isalnum() else ("number" if t.isdigit() else "word") for t in tokens]
    directory = _projector(tmp_path / "proj", tokens, matrix, kinds)
    assert sniff_format(directory) == "projector"
    assert sniff_format(directory / "vectors.tsv") == "projector"
    table = import_ok(directory, data_dir)
    assert_rows(table, tokens, matrix)
    assert {name: list(values) for name, values in table.metadata.items()} == {"kind": kinds}
    assert table.manifest["metadata_columns"] == ["kind"]
    assert (data_dir / "t" / "metadata.arrow").is_file()  # memory-mapped, as a documents payload
    # The vectors file alone finds its metadata beside it.
    table = import_ok(directory / "vectors.tsv", data_dir, "t2")
    assert list(table.metadata["kind"]) == kinds


def test_tables_with_json_metadata_still_load(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """A table built when metadata was one JSON file (metadata.json) loads with the same columns."""
    tokens, matrix = glove_rows
    kinds = [f"k{i % 7}" for i in range(len(tokens))]
    table = import_ok(_projector(tmp_path / "proj", tokens, matrix, kinds), data_dir)
    directory = table.directory
    (directory / "metadata.arrow").unlink()
    (directory / "metadata.json").write_text(json.dumps({"kind": kinds}))
    manifest = artifact.read_manifest(directory)
    del manifest["files"]
    artifact.write_manifest(directory, manifest)
    old = Table.load(directory)
    assert list(old.metadata["kind"]) == kinds and old.row_metadata(5) == {"kind": "k5"}


def test_projector_metadata_follows_dropped_rows(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """Duplicates and dropped rows remove the matching metadata values."""
    tokens, matrix = glove_rows
    tokens, matrix = [*tokens[:100], tokens[3]], np.vstack([matrix[:100], matrix[7]])
    kinds = [f"k{i}" for i in range(101)]
    directory = _projector(tmp_path / "proj", tokens, matrix, kinds)
    lines = (directory / "vectors.tsv").read_text().splitlines()
    lines[10] = "\t".join(lines[10].split("\t")[:-1])
    (directory / "vectors.tsv").write_text("\n".join(lines) + "\n")
    table = import_ok(directory, data_dir, "t", "--drop-invalid")
    keep = [i for i in range(100) if i != 10]
    assert list(table.tokens[:]) == [tokens[i] for i in keep]
    assert list(table.metadata["kind"]) == [kinds[i] for i in keep]
    assert table.manifest["cleaning"]["malformed_rows_dropped"] == 1
    assert table.manifest["cleaning"]["duplicate_tokens_dropped"] == 1


def test_a_duplicate_token_dropped_is_said(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """Tokens that an export wrote alike (``a\tb`` and ``a b``: a tab becomes a space) are one token again: the
    later row is dropped, as gensim drops it, and the import says so rather than lose it silently."""
    tokens, matrix = glove_rows
    directory = _projector(tmp_path / "proj", [*tokens[:3], "a b", "a b"], matrix[:5], None)
    result = run_cli("import", directory, "--name", "t", "--data-dir", data_dir, quiet=False)
    assert result.code == 0, result.err
    warning = "embedding-index: warning: dropped 1 row whose token an earlier row has, the first row of each kept"
    assert f"{warning} (first: 'a b')\n" in result.err
    assert Table.load(data_dir / "t").rows == 4


def test_projector_metadata_row_of_the_wrong_width_is_a_bad_row(tmp_path: Path, glove_rows) -> None:
    """A metadata.tsv row with more or fewer columns than the header is refused naming its line, or dropped with its
    vector row and counted with --drop-invalid; a header of the wrong shape refuses the file either way."""
    tokens, matrix = glove_rows
    tokens, matrix = tokens[:40], matrix[:40]
    kinds = [f"k{i}" for i in range(40)]
    directory = _projector(tmp_path / "proj", tokens, matrix, kinds)
    lines = (directory / "metadata.tsv").read_text().splitlines()
    lines[1 + 20] += "\textra"
    lines[1 + 30] = tokens[30]
    lines[1 + 10] += "\t"  # its vector row is short too: one row dropped
    vectors = (directory / "vectors.tsv").read_text().splitlines()
    vectors[10] = "1\t2"
    (directory / "vectors.tsv").write_text("\n".join(vectors) + "\n")
    (directory / "metadata.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"metadata.tsv:12: 3 columns, the header has 2 \(use --drop-invalid"):
        read_source(directory)
    raw, _ = read_source(directory, options=ReadOptions(drop_invalid=True))
    keep = [i for i in range(40) if i not in (10, 20, 30)]
    assert raw.tokens == [tokens[i] for i in keep] and np.array_equal(raw.matrix, matrix[keep])
    assert raw.metadata == {"kind": [kinds[i] for i in keep]} and raw.report["malformed_rows_dropped"] == 3
    (directory / "metadata.tsv").write_text("\n".join(["word\tword", *lines[1:]]) + "\n")
    with pytest.raises(InputError, match=r"metadata.tsv:1: header names column 'word' twice"):
        read_source(directory, options=ReadOptions(drop_invalid=True))


def test_a_gzipped_projector_pair_reads_as_one(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """A folder of ``vectors.tsv.gz`` and ``metadata.tsv.gz`` is a projector pair (not a folder of documents), and
    either file of a pair may be gzipped, found from the other."""
    tokens, matrix = glove_rows
    directory = _projector(tmp_path / "proj", tokens[:50], matrix[:50], [f"k{i}" for i in range(50)])
    for name in ("vectors.tsv", "metadata.tsv"):
        (directory / f"{name}.gz").write_bytes(gzip.compress((directory / name).read_bytes()))
        (directory / name).unlink()
    assert sniff_format(directory) == "projector"
    table = import_ok(directory, data_dir)
    assert_rows(table, tokens[:50], matrix[:50])
    assert list(table.metadata["kind"]) == [f"k{i}" for i in range(50)]
    (directory / "metadata.tsv").write_bytes(gzip.decompress((directory / "metadata.tsv.gz").read_bytes()))
    (directory / "metadata.tsv.gz").unlink()
    raw, fmt = read_source(directory / "vectors.tsv.gz")
    assert fmt == "projector" and raw.tokens == tokens[:50]
    assert read_source(directory / "metadata.tsv")[0].tokens == tokens[:50]


def test_projector_single_column_metadata(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    directory = _projector(tmp_path / "proj", tokens[:500], matrix[:500], None)
    table = import_ok(directory, data_dir)
    assert_rows(table, tokens[:500], matrix[:500])
    assert table.metadata == {}


def test_gensim_kv_needs_allow_pickle(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    kv = KeyedVectors(50)
    kv.add_vectors(tokens, matrix)
    kv.save(str(tmp_path / "vectors.kv"))
    assert sniff_format(tmp_path / "vectors.kv") == "gensim"
    message = import_fails(tmp_path / "vectors.kv", data_dir)
    assert "--allow-pickle" in message and "vectors.kv" in message
    table = import_ok(tmp_path / "vectors.kv", data_dir, "t", "--allow-pickle")
    assert_rows(table, tokens, matrix)


def test_duplicates_keep_first_and_are_counted(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    lines = text_lines(tokens, matrix)
    dup = text_lines([tokens[1], tokens[2]], matrix[[10, 20]])
    path = write(tmp_path / "dup.txt", lines[:500] + dup + lines[500:1000])
    table = import_ok(path, data_dir)
    assert_rows(table, tokens[:1000], matrix[:1000])
    assert table.manifest["cleaning"]["duplicate_tokens_dropped"] == 2
    # gensim also keeps the first row of a duplicated token
    kv = KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=True)
    assert sorted(kv.key_to_index) == sorted(table.tokens[:])
    gensim_rows = np.vstack([kv[t] for t in table.tokens[:]])
    np.testing.assert_allclose(np.asarray(table.vectors) * np.asarray(table.norms)[:, None], gensim_rows, rtol=1e-5)


@pytest.mark.parametrize("fmt", ["glove", "npy", "projector"])
def test_tokens_no_request_could_name_are_dropped_and_counted(
    tmp_path: Path, data_dir: Path, glove_rows, fmt: str
) -> None:
    """A word longer than max_token_chars, which no route could name, is dropped and counted whatever the reader, as
    a duplicate is, and whatever its row holds (NaN here); one of max_token_chars characters is kept, however many
    bytes they take (two each here)."""
    tokens, matrix = glove_rows
    longest, too_long = "é" * MAX_TOKEN_CHARS, ["x" * (MAX_TOKEN_CHARS + 1), "é" * (MAX_TOKEN_CHARS + 1)]
    words = [*tokens[:100], too_long[0], *tokens[100:200], longest, too_long[1], *tokens[200:300]]
    rows = matrix[: len(words)].copy()
    rows[100] = np.nan
    if fmt == "glove":
        path, extra = write(tmp_path / "g.txt", text_lines(words, rows)), []
    elif fmt == "npy":
        np.save(path := tmp_path / "m.npy", rows)
        extra = ["--vocab", write(tmp_path / "vocab.txt", [w.encode() for w in words])]
    else:
        path, extra = _projector(tmp_path / "proj", words, rows, None), []
    table = import_ok(path, data_dir, "t", *extra)
    kept = [i for i, word in enumerate(words) if word not in too_long]
    assert_rows(table, [words[i] for i in kept], rows[kept])
    assert table.manifest["cleaning"]["long_tokens_dropped"] == 2
    assert table.tokens.find(longest) == 200
    with progress_lines() as stream:
        clean(read_source(path, fmt, ReadOptions(vocab=tmp_path / "vocab.txt" if extra else None))[0], path)
    warning = "warning: dropped 2 tokens longer than 1,024 characters (max_token_chars), which no request could name"
    assert f"embedding-index: {warning} (first: 'xxxxx" in stream.getvalue()


def test_non_utf8_token_strict_or_replaced(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    lines = text_lines(tokens[:200], matrix[:200])
    lines[41] = b"caf\xe9" + lines[41][len(tokens[41].encode()) :]
    path = write(tmp_path / "latin1.txt", lines)
    message = import_fails(path, data_dir)
    assert "latin1.txt:42:" in message and "UTF-8" in message and "--unicode-errors replace" in message
    table = import_ok(path, data_dir, "t", "--unicode-errors", "replace")
    assert table.tokens[41] == "caf\ufffd"
    assert table.manifest["cleaning"]["tokens_unicode_replaced"] == 1
    kv = KeyedVectors.load_word2vec_format(str(path), binary=False, no_header=True, unicode_errors="replace")
    assert kv.index_to_key == list(table.tokens[:])


@pytest.mark.parametrize("chunk", [text.CHUNK_BYTES, 500])
def test_drop_invalid_drops_text_rows_whose_token_is_not_utf8(
    tmp_path: Path, glove_rows, chunk: int, monkeypatch
) -> None:
    """With --drop-invalid a row whose token is not UTF-8 is dropped and counted as any bad row, in a chunk read
    as one column or line by line (a short row, a token with spaces beside it); --unicode-errors replace keeps it."""
    monkeypatch.setattr(text, "CHUNK_BYTES", chunk)
    tokens, matrix = glove_rows
    tokens, matrix = list(tokens[:60]), matrix[:60]
    tokens[50] = "new york"
    lines = text_lines(tokens, matrix)
    for i in (3, 40, 51):
        lines[i] = b"caf\xe9" + lines[i][len(tokens[i].encode()) :]
    lines[52] = b"bad 1 2"  # a row pyarrow refuses: the lines around it are read one by one
    lines[53] = b"a b\xff " + lines[53][len(tokens[53].encode()) + 1 :]  # not UTF-8, with a space
    keep = [i for i in range(60) if i not in (3, 40, 51, 52, 53)]
    for name, header in (("g.txt", None), ("w.vec", b"60 50")):
        first = 1 if header is None else 2
        strict = write(tmp_path / f"strict-{name}", lines[:50], header and b"50 50")
        with pytest.raises(InputError, match=rf"{strict.name}:{3 + first}: token is not valid UTF-8 .*--drop-invalid"):
            read_source(strict)
        path = write(tmp_path / name, lines, header)
        # The first problem is named, also when a later short row has its chunk read line by line
        with pytest.raises(InputError, match=rf"{name}:{3 + first}: token is not valid UTF-8"):
            read_source(path)
        raw, _ = read_source(path, options=ReadOptions(drop_invalid=True))
        assert raw.tokens == [tokens[i] for i in keep] and np.array_equal(raw.matrix, matrix[keep])
        assert raw.report == {"malformed_rows_dropped": 5, "tokens_with_spaces": 1, "tokens_unicode_replaced": 0}
        raw, _ = read_source(path, options=ReadOptions(drop_invalid=True, unicode_errors="replace"))
        assert len(raw.tokens) == 59 and raw.tokens[3] == "caf\ufffd" and raw.report["tokens_unicode_replaced"] == 4


def test_drop_invalid_drops_npy_and_projector_rows_whose_token_is_not_utf8(
    tmp_path: Path, data_dir: Path, glove_rows
) -> None:
    """A vocabulary or metadata.tsv line that is not UTF-8 is refused, kept with U+FFFD, or dropped with its row
    and counted with --drop-invalid; a metadata header that is not UTF-8 refuses the file."""
    tokens, matrix = glove_rows
    tokens, matrix = tokens[:20], matrix[:20]
    np.save(tmp_path / "m.npy", matrix)
    vocab = [t.encode() for t in tokens]
    vocab[4], vocab[17] = b"caf\xe9", b"\xff"
    (tmp_path / "vocab.txt").write_bytes(b"\n".join(vocab) + b"\n")
    keep = [i for i in range(20) if i not in (4, 17)]
    message = import_fails(tmp_path / "m.npy", data_dir, "--vocab", tmp_path / "vocab.txt")
    assert "vocab.txt:5: not valid UTF-8 (byte 0xe9)" in message and "--drop-invalid" in message, message
    table = import_ok(tmp_path / "m.npy", data_dir, "t", "--vocab", tmp_path / "vocab.txt", "--drop-invalid")
    assert_rows(table, [tokens[i] for i in keep], matrix[keep])
    assert table.manifest["cleaning"]["malformed_rows_dropped"] == 2
    options = ReadOptions(vocab=tmp_path / "vocab.txt", drop_invalid=True, unicode_errors="replace")
    raw, _ = read_source(tmp_path / "m.npy", options=options)
    assert len(raw.tokens) == 20 and raw.tokens[17] == "\ufffd" and raw.report["tokens_unicode_replaced"] == 2

    kinds = [f"k{i}" for i in range(20)]
    for header in (None, b"word\tkind"):
        directory = _projector(tmp_path / f"proj{header is None}", tokens, matrix, kinds)
        lines = [t + (b"" if header is None else b"\t" + k.encode()) for t, k in zip(vocab, kinds, strict=True)]
        (directory / "metadata.tsv").write_bytes(b"\n".join(([header] if header else []) + lines) + b"\n")
        vectors = (directory / "vectors.tsv").read_bytes().split(b"\n")
        vectors[9] = b"1\t2"  # a short row, dropped too
        (directory / "vectors.tsv").write_bytes(b"\n".join(vectors))
        projector_keep = [i for i in keep if i != 9]
        line = 5 if header is None else 6
        with pytest.raises(InputError, match=rf"metadata.tsv:{line}: not valid UTF-8 .*--drop-invalid"):
            read_source(directory)
        raw, _ = read_source(directory, options=ReadOptions(drop_invalid=True))
        assert raw.tokens == [tokens[i] for i in projector_keep] and np.array_equal(raw.matrix, matrix[projector_keep])
        assert raw.report["malformed_rows_dropped"] == 3
        assert raw.metadata == ({} if header is None else {"kind": [kinds[i] for i in projector_keep]})
    (directory / "metadata.tsv").write_bytes(b"w\xe9rd\tkind\n" + b"\n".join(lines) + b"\n")
    with pytest.raises(InputError, match=r"metadata.tsv:1: the header is not valid UTF-8"):
        read_source(directory, options=ReadOptions(drop_invalid=True))


def test_vocabulary_and_metadata_name_their_first_problem(tmp_path: Path) -> None:
    """A line that is not UTF-8 is named only when no earlier line has a problem (an empty token, a row of the
    wrong width), in a --vocab file and in metadata.tsv; an empty token before a wrong-width row is named too."""
    np.save(tmp_path / "m.npy", np.ones((5, 2), dtype=np.float32))
    (tmp_path / "vocab.txt").write_bytes(b"a\n\nc\nd\xe9\ne\n")
    with pytest.raises(InputError, match=r"vocab.txt:2: empty line"):
        read_source(tmp_path / "m.npy", options=ReadOptions(vocab=tmp_path / "vocab.txt"))
    directory = _projector(tmp_path / "p", list("abcde"), np.ones((5, 2), dtype=np.float32), None)
    cases = [
        (b"a\n\nc\nd\xe9\ne\n", r"metadata.tsv:2: empty token"),
        (b"w\tk\na\tk\nb\nc\xe9\tk\nd\tk\ne\tk\n", r"metadata.tsv:3: 1 columns, the header has 2"),
        (b"w\tk\n\tk\nb\nc\xe9\tk\nd\tk\ne\tk\n", r"metadata.tsv:2: empty token"),
        (b"w\tk\na\xe9\tk\nb\nc\tk\nd\tk\ne\tk\n", r"metadata.tsv:2: not valid UTF-8 \(byte 0xe9\)"),
    ]
    for metadata, expected in cases:
        (directory / "metadata.tsv").write_bytes(metadata)
        with pytest.raises(InputError, match=expected):
            read_source(directory)


def test_non_utf8_token_in_binary(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    body = b"".join(
        (b"caf\xe9" if i == 7 else t.encode()) + b" " + r.tobytes() + b"\n"
        for i, (t, r) in enumerate(zip(tokens[:50], matrix[:50], strict=True))
    )
    path = tmp_path / "latin1.bin"
    path.write_bytes(b"50 50\n" + body)
    message = import_fails(path, data_dir)
    assert "latin1.bin" in message and "row 8" in message and "UTF-8" in message
    # Such bytes in a binary file mostly mean a wrong header: refused with --drop-invalid too
    assert import_fails(path, data_dir, "--drop-invalid") == message and "--drop-invalid" not in message
    table = import_ok(path, data_dir, "t", "--unicode-errors", "replace")
    assert table.tokens[7] == "caf\ufffd"


def test_latin_1_tokens_in_binary_are_kept_with_unicode_errors_replace(tmp_path: Path, glove_raw: RawTable) -> None:
    """Real tokens written in latin-1 by word2vec.c (a newline after each row), read with --unicode-errors replace:
    each is kept with U+FFFD, as gensim keeps it. The GloVe package's values before 'çelebi' and 'søn' start with a
    byte that reads as a word and a space, which were taken for a token with a space and the file refused."""
    rows = [*range(118470, 118490), *range(242035, 242055)]
    tokens = [glove_raw.tokens[i] for i in rows]
    assert "çelebi" in tokens and "søn" in tokens
    body = b"".join(
        (t.encode("latin-1") if max(map(ord, t)) < 256 else t.encode()) + b" " + r.tobytes() + b"\n"
        for t, r in zip(tokens, np.asarray(glove_raw.matrix[rows], dtype="<f4"), strict=True)
    )
    path = tmp_path / "latin1.bin"
    path.write_bytes(f"{len(rows)} 50\n".encode() + body)
    raw, _ = read_source(path, options=ReadOptions(unicode_errors="replace"))
    assert "\ufffdelebi" in raw.tokens and "s\ufffdn" in raw.tokens
    assert_same_as_gensim(path, raw, binary=True, unicode_errors="replace")


def test_drop_invalid_skips_bad_rows_and_counts_them(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    lines = text_lines(tokens[:300], matrix[:300])
    lines[10] = b" ".join(lines[10].split(b" ")[:-2])  # short row
    lines[20] = lines[20].rsplit(b" ", 1)[0] + b" nan"  # NaN
    lines[30] = lines[30].rsplit(b" ", 1)[0] + b" 1e39"  # overflows float32
    lines[40] = lines[40].rsplit(b" ", 1)[0] + b" x"  # not a number
    path = write(tmp_path / "bad.txt", lines)
    table = import_ok(path, data_dir, "t", "--drop-invalid")
    keep = [i for i in range(300) if i not in (10, 20, 30, 40)]
    assert_rows(table, [tokens[i] for i in keep], matrix[keep])
    cleaning = table.manifest["cleaning"]
    assert cleaning["malformed_rows_dropped"] == 2 and cleaning["invalid_rows_dropped"] == 2


def test_drop_invalid_never_leaves_an_empty_table_over_a_good_one(tmp_path: Path, data_dir: Path) -> None:
    """Every row invalid: refused with --drop-invalid too, and the table of that name stays as it was."""
    good = write(tmp_path / "ok.txt", [b"a 1 2", b"b 3 4", b"c 5 6"])
    import_ok(good, data_dir, "t")
    bad = write(tmp_path / "allbad.txt", [b"a nan 1", b"b inf 2"])
    message = import_fails(bad, data_dir, "--force", "--drop-invalid")
    assert "no rows left: all 2 rows are invalid" in message, message
    long = write(tmp_path / "long.txt", [b"x" * (MAX_TOKEN_CHARS + 1) + b" 1 2", b"b inf 2"])  # dropped as too long
    message = import_fails(long, data_dir, "--force", "--drop-invalid")
    assert "no rows left: all 2 rows are invalid (NaN, Inf or overflowing values) or have tokens longer than" in message
    for lines, said in (
        ([b"a nan 1"], "the only row is invalid (NaN, Inf or overflowing values)"),
        (
            [b"x" * (MAX_TOKEN_CHARS + 1) + b" 1 2"],
            f"the only row has a token longer than {MAX_TOKEN_CHARS:,} characters",
        ),
    ):
        message = import_fails(write(tmp_path / "one.txt", lines), data_dir, "--force", "--drop-invalid")
        assert f"no rows left: {said}" in message, message
    assert Table.load(data_dir / "t").tokens[:] == ["a", "b", "c"] and artifact.verify(data_dir / "t").ok


def test_trailing_blank_lines_and_bom_are_ignored(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    path = tmp_path / "g.txt"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(text_lines(tokens[:100], matrix[:100])) + b"\n\n  \n\n")
    table = import_ok(path, data_dir)
    assert_rows(table, tokens[:100], matrix[:100])


@pytest.mark.parametrize("chunk", [97, 1000, 65536])
def test_chunk_boundaries_do_not_change_the_result(tmp_path: Path, glove_rows, chunk: int, monkeypatch) -> None:
    tokens, matrix = glove_rows
    tokens, matrix = list(tokens[:600]), matrix[:600]
    tokens[5], tokens[400] = "new york", "a b c"
    lines = text_lines(tokens, matrix)
    lines[100] += b" "
    lines[200] += b"\r"
    path = tmp_path / "g.txt"
    path.write_bytes(b"\n".join(lines))  # no final newline
    binary = tmp_path / "v.bin"
    binary.write_bytes(
        b"600 50\n"
        + b"".join(
            t.encode() + b" " + r.tobytes() for t, r in zip([t.replace(" ", "_") for t in tokens], matrix, strict=True)
        )
    )
    bad_lines = list(lines)
    bad_lines[555] = b"bad 1 2"
    bad = write(tmp_path / "bad.txt", bad_lines)
    monkeypatch.setattr(text, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(word2vec_binary, "CHUNK_BYTES", chunk)
    raw, _ = read_source(path)
    assert raw.tokens == tokens
    assert np.array_equal(raw.matrix, matrix)
    assert raw.report["tokens_with_spaces"] == 2
    raw, _ = read_source(binary)
    assert raw.tokens == [t.replace(" ", "_") for t in tokens]
    assert np.array_equal(raw.matrix, matrix)
    with pytest.raises(InputError, match=r"bad.txt:556: 2 values after the token"):
        read_source(bad)


@pytest.mark.parametrize(
    ("name", "body", "fmt"),
    [
        ("silent.txt", b"3 2\nnew abc 1 2\nb 1.5 2.5\nc 0.5 0.5\n", "word2vec"),
        ("york.txt", b"3 2\nnew york 0.1 0.2\nb 0.3 0.1\nc 0.5 0.5\n", "word2vec"),
        ("york.vec", b"3 2\nnew york 0.1 0.2 \nb 0.3 0.1 \nc 0.5 0.5 \n", "fasttext"),
    ],
)
def test_word2vec_text_whose_first_token_has_spaces_is_text(
    tmp_path: Path, data_dir: Path, name: str, body: bytes, fmt: str
) -> None:
    """The first row ends in DIM numbers: text, whatever follows the token's first space."""
    path = tmp_path / name
    path.write_bytes(body)
    assert sniff_format(path) == fmt
    table = import_ok(path, data_dir)
    assert table.manifest["source"]["format"] == fmt
    rows = [line.rstrip().rsplit(b" ", 2) for line in body.splitlines()[1:]]
    expected = np.array([[float(a), float(b)] for _, a, b in rows], dtype=np.float32)
    assert_rows(table, [row[0].decode() for row in rows], expected)
    explicit = import_ok(path, data_dir, "explicit", "--format", "word2vec")
    assert np.array_equal(np.asarray(explicit.vectors), np.asarray(table.vectors))


def test_word2vec_text_whose_wide_first_row_has_a_spaced_token(tmp_path: Path, glove_rows) -> None:
    """A first row longer than the sniffer's first block is still recognised as text."""
    tokens, matrix = glove_rows
    wide = np.tile(matrix[:3], 40)  # 2,000 values: the first row does not fit in the first 4 KiB
    path = write(tmp_path / "wide.txt", text_lines(["new york", *tokens[1:3]], wide), header=b"3 2000")
    assert sniff_format(path) == "word2vec"
    raw, _ = read_source(path)
    assert raw.tokens == ["new york", *tokens[1:3]] and np.array_equal(raw.matrix, wide)


def test_word2vec_text_whose_every_token_has_a_space(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """A table of phrases: each row has a field more than the header's dimension, and is a token with a space and
    DIM values, not a row of a header that says a dimension too small."""
    tokens, matrix = glove_rows
    phrases = [f"{a} {b}" for a, b in zip(tokens[:200:2], tokens[1:200:2], strict=True)]
    path = write(tmp_path / "phrases.txt", text_lines(phrases, matrix[:100]), header=b"100 50")
    table = import_ok(path, data_dir)
    assert_rows(table, phrases, matrix[:100])
    assert table.manifest["cleaning"]["tokens_with_spaces"] == 100


def test_row_with_a_value_too_many_is_refused_as_gensim_refuses_it(tmp_path: Path, data_dir: Path) -> None:
    """An extra value is not a token with a space: refused with its line, or dropped; gensim refuses it too."""
    path = tmp_path / "extra.txt"
    path.write_bytes(b"5 3\na 1 0 0\nb 0 1 0\nc 0 0 1 5\nd 1 1 0\ne 1 0 1\n")
    with pytest.raises(ValueError):
        KeyedVectors.load_word2vec_format(str(path))
    message = import_fails(path, data_dir)
    assert "extra.txt:4: 4 values after the token, expected 3" in message, message
    table = import_ok(path, data_dir, "t", "--drop-invalid")
    assert table.manifest["cleaning"]["malformed_rows_dropped"] == 1
    fixed = tmp_path / "fixed.txt"
    fixed.write_bytes(b"4 3\na 1 0 0\nb 0 1 0\nd 1 1 0\ne 1 0 1\n")
    kv = KeyedVectors.load_word2vec_format(str(fixed))
    assert table.tokens[:] == kv.index_to_key
    np.testing.assert_allclose(np.asarray(table.vectors) * np.asarray(table.norms)[:, None], kv.vectors)


@pytest.mark.parametrize("chunk", [text.CHUNK_BYTES, 64])
@pytest.mark.parametrize("value", [b"nan", b"-inf", b"1e39"])
def test_an_invalid_row_is_named_before_a_later_refused_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, value: bytes
) -> None:
    """A row the cleaner refuses (NaN, Inf, overflow) is the first problem, before a later short row or token that
    is not UTF-8 the reader refuses: in the same chunk or an earlier one."""
    monkeypatch.setattr(text, "CHUNK_BYTES", chunk)
    rows = [b"w%d 0.5 0.25 0.125" % i for i in range(100)]
    rows[1] = b"w1 0.5 " + value + b" 0.125"
    for later in (b"short 0.5 0.25", b"\xff 0.5 0.25 0.125"):
        rows[99] = later
        for header, first in ((b"", 2), (b"100 3\n", 3)):
            path = tmp_path / "g.txt"
            path.write_bytes(header + b"\n".join(rows) + b"\n")
            with pytest.raises(InputError, match=rf"g.txt:{first}: NaN, Inf or overflowing values for 'w1' \(use"):
                read_source(path, "word2vec" if header else "glove")
    rows[1] = b"w1 0.5 0.25 0.125"  # without it, the later row is named
    path.write_bytes(b"\n".join(rows) + b"\n")
    with pytest.raises(InputError, match=r"g.txt:100: token is not valid UTF-8"):
        read_source(path, "glove")


def test_token_ending_in_a_number_is_a_row_too_long(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """ "1 000" or "windows 7" cannot be told from a row with an extra value: refused like one (GloVe too)."""
    tokens, matrix = glove_rows
    lines = text_lines(tokens[:20], matrix[:20])
    lines[7] = b"windows 7 " + lines[7].split(b" ", 1)[1]
    path = write(tmp_path / "glove.txt", lines)
    message = import_fails(path, data_dir)
    assert "glove.txt:8: 51 values after the token, expected 50" in message, message
    lines[7] = b"windows seven " + lines[7].split(b" ", 2)[2]
    table = import_ok(write(path, lines), data_dir)
    assert table.tokens[7] == "windows seven"


def test_drop_invalid_keeps_the_valid_later_row_of_a_token(tmp_path: Path, data_dir: Path) -> None:
    """A token's first row is invalid: its next valid row is the one kept, not dropped as a duplicate."""
    path = tmp_path / "dup.txt"
    path.write_bytes(b"a 0 nan 1\nb 0 1 0\na 1 0 0\nc 1 1 1\nb 5 5 5\n")
    table = import_ok(path, data_dir, "t", "--drop-invalid")
    assert_rows(table, ["b", "a", "c"], np.array([[0, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=np.float32))
    cleaning = table.manifest["cleaning"]
    assert cleaning["invalid_rows_dropped"] == 1 and cleaning["duplicate_tokens_dropped"] == 1


def test_blank_line_between_rows_under_a_header(tmp_path: Path, data_dir: Path) -> None:
    """A blank line is not a row: refused with its own line number, or dropped and counted with --drop-invalid."""
    lines = [b"a 1 0 0", b"b 0 1 0", b"c 0 0 1", b"d 1 1 0", b"e 1 0 1"]
    path = tmp_path / "blanks_mid.txt"
    path.write_bytes(b"5 3\n" + b"\n".join(lines[:3]) + b"\n \r\n" + b"\n".join(lines[3:]) + b"\n\n")
    message = import_fails(path, data_dir)
    assert "blanks_mid.txt:5: empty line" in message, message
    table = import_ok(path, data_dir, "t", "--drop-invalid")
    assert table.manifest["cleaning"]["malformed_rows_dropped"] == 1
    kv = KeyedVectors.load_word2vec_format(str(write(tmp_path / "no_blank.txt", lines, header=b"5 3")))
    assert table.tokens[:] == kv.index_to_key
    np.testing.assert_allclose(np.asarray(table.vectors) * np.asarray(table.norms)[:, None], kv.vectors)
    short = tmp_path / "six.txt"
    short.write_bytes(b"6 3\na 1 0 0\n\nb 0 1 0\n")
    assert "six.txt:1: the header says 6 rows but the file has 2" in import_fails(short, data_dir, name="six")
    one = tmp_path / "one.txt"  # a count of 1 is said in the singular
    one.write_bytes(b"1 3\na 1 0 0\nb 0 1 0\n")
    assert "one.txt:1: the header says 1 row but the file has 2" in import_fails(one, data_dir, name="one")
    one.write_bytes(b"1 3\na 1 0 0\n")
    done = run_cli("import", one, "--name", "one", "--data-dir", data_dir)
    assert done.code == 0 and done.out.startswith("built 'one': 1 row x 3 "), done


def test_counting_the_blank_lines_is_a_step_shown(tmp_path: Path) -> None:
    """When the header's rows are not the lines after it, the pass over the file that counts the blank lines
    among them shows its progress, as every long step does."""
    path = tmp_path / "blanks.txt"
    path.write_bytes(b"2 3\na 1 0 0\n\nb 0 1 0\n")
    with progress_lines() as stream:
        raw, _ = read_source(path, "word2vec", ReadOptions(drop_invalid=True))
    assert raw.tokens == ["a", "b"]
    assert "embedding-index: counting the blank lines of blanks.txt: done (3 of 3 lines) in " in stream.getvalue()


@pytest.mark.parametrize("name", ["rows.txt", "rows.txt.gz"])
def test_counting_the_lines_is_a_step_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The first pass over a text file, which counts its lines (a minute over a GloVe 840B file, more gzipped),
    shows its progress by the bytes read from the disk, as every long step does."""
    from index import progress

    rows = np.random.default_rng(0).standard_normal((40_000, 50)).astype(np.float32)
    text = b"".join(b"w%d " % i + b" ".join(b"%.6f" % v for v in row) + b"\n" for i, row in enumerate(rows))
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    size = path.stat().st_size
    assert size > 4 << 20  # more than one block read
    monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at every step forward
    with progress_lines() as stream:
        raw, _ = read_source(path, "glove")
    assert len(raw.tokens) == 40_000
    counting = [line for line in stream.getvalue().splitlines() if "counting the lines of" in line]
    assert counting[0].startswith(f"embedding-index: counting the lines of {name}: ") and "% (" in counting[0]
    assert counting[-1].startswith(
        f"embedding-index: counting the lines of {name}: done ({size / 2**20:,.0f} MiB of {size / 2**20:,.0f} MiB) in "
    )


def test_measuring_a_gzipped_word2vec_binary_file_is_a_step_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass that decompresses a gzipped word2vec binary file to check its header against its size (a minute
    over GoogleNews-vectors-negative300.bin.gz) shows its progress by the compressed bytes read."""
    from index import progress

    rows = np.random.default_rng(0).standard_normal((40_000, 50)).astype(np.float32)
    body = b"".join(b"w%d " % i + row.tobytes() + b"\n" for i, row in enumerate(rows))
    path = tmp_path / "rows.bin.gz"
    path.write_bytes(gzip.compress(b"40000 50\n" + body))
    size = path.stat().st_size
    assert size > 4 << 20  # more than one block read
    monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at every step forward
    with progress_lines() as stream:
        raw, fmt = read_source(path)
    assert fmt == "word2vec-binary" and np.array_equal(raw.matrix, rows)
    step = "embedding-index: measuring the decompressed size of rows.bin.gz: "
    measuring = [line for line in stream.getvalue().splitlines() if line.startswith(step)]
    assert "% (" in measuring[0]
    assert measuring[-1].startswith(f"{step}done ({size / 2**20:,.0f} MiB of {size / 2**20:,.0f} MiB) in ")


def test_reading_a_projector_pair_is_a_step_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``vectors.tsv`` is read a block at a time, its progress shown by rows (400,000 rows took 5 s with nothing
    shown); a row pyarrow refuses has the file read line by line, shown too, which names its line."""
    from index import progress

    rows = np.random.default_rng(0).standard_normal((40_000, 50)).astype(np.float32)
    lines = [b"\t".join(b"%.6f" % v for v in row) for row in rows]
    folder = tmp_path / "pair"
    folder.mkdir()
    (folder / "vectors.tsv").write_bytes(b"\n".join(lines) + b"\n")
    (folder / "metadata.tsv").write_text("".join(f"w{i}\n" for i in range(40_000)))
    monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at every step forward
    with progress_lines() as stream:
        raw, _ = read_source(folder)
    np.testing.assert_allclose(raw.matrix, rows, rtol=0, atol=6e-7)  # six decimals
    reading = [line for line in stream.getvalue().splitlines() if "reading vectors.tsv" in line]
    assert "% (" in reading[0] and reading[-1].startswith(
        "embedding-index: reading vectors.tsv: done (40,000 of 40,000 rows) in "
    )

    lines[-1] = lines[-1].rsplit(b"\t", 1)[0]
    (folder / "vectors.tsv").write_bytes(b"\n".join(lines) + b"\n")
    with progress_lines() as stream, pytest.raises(InputError, match=r"vectors.tsv:40000: 49 values, expected 50"):
        read_source(folder)
    assert "embedding-index: reading vectors.tsv line by line: 50% (20,000 of 40,000 rows)" in stream.getvalue()


def test_last_row_short_is_named_by_its_line(tmp_path: Path, data_dir: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_bytes(b"2 2\na 1 2\nb 3\n")
    message = import_fails(path, data_dir)
    assert "short.txt:3: 1 value after the token, expected 2" in message, message


def test_very_wide_rows_match_gensim(tmp_path: Path, data_dir: Path) -> None:
    """600,000 values a row: parsed a line at a time in seconds, not as one pyarrow column per value (minutes); the
    import refuses the table, wider than the API's max_dim."""
    matrix = np.random.default_rng(7).standard_normal((2, 600_000)).astype(np.float32)
    path = write(tmp_path / "wide.txt", text_lines(["first", "second"], matrix))
    started = time.monotonic()
    raw, fmt = read_source(path)
    assert time.monotonic() - started < 20
    assert fmt == "glove" and np.array_equal(raw.matrix, matrix)
    assert_same_as_gensim(path, raw, binary=False, no_header=True)
    assert f"{path}: vectors of 600,000 values, more than the 65,536" in import_fails(path, data_dir)


def test_projector_rows_longer_than_the_sample(tmp_path: Path, data_dir: Path) -> None:
    """A vectors.tsv whose first line is longer than the sample read for the dimension (the import refuses the
    table, wider than the API's max_dim, naming the file)."""
    matrix = np.random.default_rng(8).standard_normal((3, 150_000)).astype(np.float32)
    directory = tmp_path / "wide"
    directory.mkdir()
    (directory / "vectors.tsv").write_bytes(b"\n".join(fmt_row(row).replace(b" ", b"\t") for row in matrix) + b"\n")
    (directory / "metadata.tsv").write_text("a\nb\nc\n")
    raw, fmt = read_source(directory)
    assert fmt == "projector" and raw.tokens == ["a", "b", "c"] and np.array_equal(raw.matrix, matrix)
    message = import_fails(directory, data_dir)
    assert f"{directory / 'vectors.tsv'}: vectors of 150,000 values, more than the 65,536" in message


def test_projector_invalid_value_names_vectors_tsv(tmp_path: Path, data_dir: Path) -> None:
    directory = tmp_path / "nanrow"
    directory.mkdir()
    (directory / "vectors.tsv").write_bytes(b"1\t2\n3\t4\nnan\t1\n")
    (directory / "metadata.tsv").write_text("a\nb\nc\n")
    message = import_fails(directory, data_dir)
    assert f"{directory / 'vectors.tsv'}:3: NaN" in message, message


def test_vectors_wider_than_max_dim_are_refused(tmp_path: Path, data_dir: Path) -> None:
    """A table no vector query could be sent to (wider than the API's max_dim) is refused, naming the file, whatever
    the reader; one as wide as max_dim is imported."""
    vocab = write(tmp_path / "vocab.txt", [b"a", b"b"])
    np.save(tmp_path / "ok.npy", np.eye(2, MAX_DIM, dtype=np.float32))
    assert import_ok(tmp_path / "ok.npy", data_dir, "t", "--vocab", vocab).dim == MAX_DIM
    wide = np.eye(2, MAX_DIM + 1, dtype=np.float32)
    np.save(tmp_path / "wide.npy", wide)
    binary = b"".join(t + b" " + r.tobytes() for t, r in zip([b"a", b"b"], wide, strict=True))
    refused = {
        tmp_path / "wide.npy": ["--vocab", vocab],
        write(tmp_path / "wide.txt", text_lines(["a", "b"], wide)): [],
        write(tmp_path / "wide.bin", [binary], header=f"2 {MAX_DIM + 1}".encode()): [],
    }
    for path, extra in refused.items():
        problem = "vectors of 65,537 values, more than the 65,536 a request's vector may hold (max_dim)"
        assert (
            import_fails(path, data_dir, *extra, "--force")
            == f"embedding-index: error: {path}: {problem}: no vector query could be sent to the table"
        )


def test_npy_vocabulary_with_trailing_blank_lines(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    np.save(tmp_path / "m.npy", matrix[:10])
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokens[:10]) + "\n\n \n\n")
    assert_rows(import_ok(tmp_path / "m.npy", data_dir, "t", "--vocab", vocab), tokens[:10], matrix[:10])


def test_a_last_token_of_spaces_is_a_token(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """A vocabulary's or metadata.tsv's last line of spaces (U+3000, or a space, as a table may hold and export) is
    the last row's token while the vectors have a row for it; blank lines past those are still ignored."""
    tokens, matrix = glove_rows
    spaced = [*tokens[:4], "\u3000", " "]
    np.save(tmp_path / "m.npy", matrix[:6])
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(spaced) + "\n\n \n")
    assert_rows(import_ok(tmp_path / "m.npy", data_dir, "npy", "--vocab", vocab), spaced, matrix[:6])
    pair = tmp_path / "pair"
    pair.mkdir()
    (pair / "metadata.tsv").write_text("\n".join(spaced) + "\n")
    (pair / "vectors.tsv").write_text("".join("\t".join(map(repr, row.tolist())) + "\n" for row in matrix[:6]))
    assert_rows(import_ok(pair, data_dir, "pair"), spaced, matrix[:6])


def test_a_last_token_of_spaces_under_a_header_is_a_token(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    """metadata.tsv with a header (an export of a table with a column, or of rows with groups): its last row, a
    token of spaces whose fields are empty, is a row while the vectors have one for it (the header is no row)."""
    tokens, matrix = glove_rows
    spaced = [*tokens[:5], "\u3000"]
    (tmp_path / "metadata.tsv").write_text("token\tgroup\n" + "".join(f"{t}\t\n" for t in spaced) + "\n")
    (tmp_path / "vectors.tsv").write_text("".join("\t".join(map(repr, row.tolist())) + "\n" for row in matrix[:6]))
    table = import_ok(tmp_path, data_dir, "pair")
    assert_rows(table, spaced, matrix[:6])
    assert list(table.metadata["group"]) == [""] * 6


def test_a_row_whose_length_overflows_float32_is_refused(tmp_path: Path, data_dir: Path) -> None:
    """A value float32 holds whose square it does not (1.85e19 and up): the row's length, kept as float32, would be
    Inf, so the row is refused as NaN and Inf are (docs/builder.md's cleaning rules); 1.8e19 is a row."""
    for value, kept in ((1.8e19, True), (1.85e19, False)):
        np.savez(
            tmp_path / "m.npz", vectors=np.array([[value, 1.0], [1.0, 2.0]], np.float32), tokens=np.array(["a", "b"])
        )
        if kept:
            assert import_ok(tmp_path / "m.npz", data_dir, "big").rows == 2
        else:
            message = import_fails(tmp_path / "m.npz", data_dir, name="overflowing")
            assert message.endswith(
                "m.npz, row 0: NaN, Inf or overflowing values for 'a' (use --drop-invalid to skip such rows)"
            )


# ---------------------------------------------------------------------------------------------- bad input


def _lines(glove_rows, n: int = 200) -> list[bytes]:
    tokens, matrix = glove_rows
    return text_lines(tokens[:n], matrix[:n])


def _replace_value(line: bytes, value: bytes) -> bytes:
    parts = line.split(b" ")
    parts[7] = value
    return b" ".join(parts)


def _binary(glove_rows, n: int = 100) -> bytes:
    tokens, matrix = glove_rows
    body = b"".join(t.encode() + b" " + r.tobytes() + b"\n" for t, r in zip(tokens[:n], matrix[:n], strict=True))
    return f"{n} 50\n".encode() + body


def _object_npy(tmp_path: Path, rows) -> list[object]:
    np.save(tmp_path / "m.npy", np.array([[1, "a"], [2, "b"]], dtype=object), allow_pickle=True)
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    return [tmp_path / "m.npy", "--vocab", tmp_path / "vocab.txt"]


def _npy(tmp_path: Path, rows, vocab_lines: int | None = 200, array: np.ndarray | None = None) -> list[object]:
    tokens, matrix = rows
    np.save(tmp_path / "m.npy", matrix[:200] if array is None else array)
    if vocab_lines is None:
        return [tmp_path / "m.npy"]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens[:vocab_lines]) + "\n")
    return [tmp_path / "m.npy", "--vocab", tmp_path / "vocab.txt"]


def _npz(tmp_path: Path, rows, **arrays: object) -> list[object]:
    """``m.npz`` of ``rows``'s first 200 as ``vectors`` and ``tokens``, or of ``arrays`` (None: left out)."""
    tokens, matrix = rows
    given = {"vectors": matrix[:200], "tokens": np.array(tokens[:200], dtype=str), **arrays}
    np.savez(tmp_path / "m.npz", **{name: array for name, array in given.items() if array is not None})
    return [tmp_path / "m.npz"]


def _zip(tmp_path: Path, members: dict[str, bytes], claimed: int = 0) -> list[object]:
    """``m.npz`` of ``members`` as given; ``claimed``: the size the entry of ``vectors.npy`` states (a field of the
    zip that a forged archive sets at will)."""
    with zipfile.ZipFile(tmp_path / "m.npz", "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        if claimed:
            archive.getinfo("vectors.npy").file_size = claimed
    return [tmp_path / "m.npz"]


def _npy_bytes(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, array)
    return out.getvalue()


def _npz_twice(tmp_path: Path, rows) -> list[object]:
    """The matrix as both ``vectors.npy`` and ``vectors`` (np.load answers either name)."""
    tokens, matrix = _npy_bytes(np.array(rows[0][:200], dtype=str)), _npy_bytes(rows[1][:200])
    return _zip(tmp_path, {"vectors.npy": matrix, "vectors": matrix, "tokens.npy": tokens})


def _npz_claiming(tmp_path: Path, rows, claimed: int) -> list[object]:
    """``vectors.npy`` whose header and entry claim ``claimed`` bytes of rows of 50 float32 and which holds 64."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": "<f4", "fortran_order": False, "shape": ((claimed - 1024) // 200, 50)}
    )
    members = {"vectors.npy": head.getvalue() + bytes(64), "tokens.npy": _npy_bytes(np.array(rows[0][:200], dtype=str))}
    return _zip(tmp_path, members, claimed)


def _write_case(tmp_path: Path, name: str, data: bytes) -> list[object]:
    (tmp_path / name).write_bytes(data)
    return [tmp_path / name]


def _projector_case(tmp_path: Path, rows, change: Callable[[Path], None]) -> list[object]:
    tokens, matrix = rows
    directory = _projector(tmp_path / "proj", tokens[:100], matrix[:100], ["k"] * 100)
    change(directory)
    return [directory]


def _edit(path: Path, index: int, transform: Callable[[str], str]) -> None:
    lines = path.read_text().splitlines()
    lines[index] = transform(lines[index])
    path.write_text("\n".join(lines) + "\n")


def _join(lines: list[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n"


# The first bytes of a fastText model as fastText (and gensim's save_facebook_model) writes it: magic, version 12,
# then its arguments (dim 20, ...).
FASTTEXT_MODEL_HEAD = (793712314).to_bytes(4, "little") + (12).to_bytes(4, "little") + (20).to_bytes(4, "little") * 30

BAD_CASES: dict[str, tuple[Callable[[Path, object], list[object]], list[str]]] = {
    "values separated by tabs": (
        lambda p, r: _write_case(p, "g.txt", _join(_lines(r)).replace(b" ", b"\t")),
        ["g.txt:1: no vector values after the token (the values are separated by tabs: GloVe text separates them by"],
    ),
    "xz compressed": (
        lambda p, r: _write_case(p, "g.txt.xz", lzma.compress(_join(_lines(r)))),
        ["g.txt.xz:", "xz compressed: decompress it first"],
    ),
    "bzip2 compressed": (
        lambda p, r: _write_case(p, "g.txt.bz2", bz2.compress(_join(_lines(r)))),
        ["g.txt.bz2:", "bzip2 compressed: decompress it first"],
    ),
    "zstd compressed": (
        lambda p, r: _write_case(p, "g.txt.zst", b"\x28\xb5\x2f\xfd" + b"\0" * 40),
        ["g.txt.zst:", "zstd compressed: decompress it first"],
    ),
    "xz compressed read as fasttext": (
        lambda p, r: [*_write_case(p, "w.vec.xz", lzma.compress(_join(_lines(r)))), "--format", "fasttext"],
        ["w.vec.xz:", "xz compressed: decompress it first"],
    ),
    "fastText model": (
        lambda p, r: _write_case(p, "wiki.bin", FASTTEXT_MODEL_HEAD),
        ["wiki.bin:", "a fastText .bin model, which is not read", ".vec"],
    ),
    "fastText model read as word2vec binary": (
        lambda p, r: [*_write_case(p, "wiki.bin", FASTTEXT_MODEL_HEAD), "--format", "word2vec-binary"],
        ["wiki.bin:", "a fastText .bin model"],
    ),
    "fastText model gzip read as fasttext": (
        lambda p, r: [*_write_case(p, "wiki.bin.gz", gzip.compress(FASTTEXT_MODEL_HEAD)), "--format", "fasttext"],
        ["wiki.bin.gz:", "a fastText .bin model"],
    ),
    "xz compressed read as documents": (
        lambda p, r: [
            *_write_case(p, "d.jsonl.xz", lzma.compress(b'{"id": "a", "vector": [1.0]}\n')),
            "--format",
            "documents",
        ],
        ["d.jsonl.xz:", "xz compressed: decompress it first"],
    ),
    "fastText model read as npy": (
        lambda p, r: [*_write_case(p, "wiki.bin", FASTTEXT_MODEL_HEAD), "--format", "npy"],
        ["wiki.bin:", "a fastText .bin model"],
    ),
    "UTF-16 text": (  # as Windows tools write "Unicode": a byte order mark, two bytes a character
        lambda p, r: _write_case(p, "g.txt", _join(_lines(r)).decode().encode("utf-16")),
        ["g.txt:", "UTF-16 text", "convert it to UTF-8 first"],
    ),
    "UTF-16 big-endian read as glove": (
        lambda p, r: [
            *_write_case(p, "g.txt", b"\xfe\xff" + _join(_lines(r)).decode().encode("utf-16-be")),
            "--format",
            "glove",
        ],
        ["g.txt:", "UTF-16 text"],
    ),
    "UTF-16 documents": (
        lambda p, r: _write_case(p, "d.jsonl", '{"id": "a", "vector": [1.0]}\n'.encode("utf-16")),
        ["d.jsonl:", "UTF-16 text"],
    ),
    "UTF-16 vocabulary": (
        lambda p, r: [
            *_npy(p, r, vocab_lines=None),
            "--vocab",
            _write_case(p, "v.txt", "\n".join(r[0]).encode("utf-16"))[0],
        ],
        ["v.txt:", "UTF-16 text"],
    ),
    "wrong row length": (
        lambda p, r: _write_case(p, "g.txt", _join([*_lines(r)[:57], b"short 0.1 0.2", *_lines(r)[58:]])),
        ["g.txt:58:", "2 values after the token, expected 50"],
    ),
    "short row in word2vec": (
        lambda p, r: _write_case(p, "w.txt", _join([b"3 50", *_lines(r, 3)[:2], b"x" + b" 0.5" * 49])),
        ["w.txt:4:", "49 values"],
    ),
    "nan": (
        lambda p, r: _write_case(p, "g.txt", _join([*_lines(r)[:80], _replace_value(_lines(r)[80], b"NaN")])),
        ["g.txt:81:", "NaN"],
    ),
    "inf in word2vec": (
        lambda p, r: _write_case(p, "w.txt", _join([b"4 50", *_lines(r, 3), _replace_value(_lines(r)[3], b"-inf")])),
        ["w.txt:5:", "NaN, Inf"],
    ),
    "overflowing value": (
        lambda p, r: _write_case(p, "g.txt", _join([*_lines(r)[:9], _replace_value(_lines(r)[9], b"3e39")])),
        ["g.txt:10:", "overflowing"],
    ),
    "not a number": (
        lambda p, r: _write_case(p, "g.txt", _join([*_lines(r)[:150], _replace_value(_lines(r)[150], b"0.1.2")])),
        ["g.txt:151:", "'0.1.2' is not a number"],
    ),
    "blank line inside": (
        lambda p, r: _write_case(p, "g.txt", _join([*_lines(r)[:20], b"", *_lines(r)[20:]])),
        ["g.txt:21:", "empty line"],
    ),
    "header count too high": (
        lambda p, r: _write_case(p, "w.txt", _join([b"201 50", *_lines(r)])),
        ["w.txt:1:", "header says 201 rows but the file has 200"],
    ),
    "header count too low": (
        lambda p, r: _write_case(p, "w.txt", _join([b"199 50", *_lines(r)])),
        ["w.txt:1:", "header says 199 rows"],
    ),
    "header huge count": (
        lambda p, r: _write_case(p, "w.txt", _join([b"1000000000000 50", *_lines(r)])),
        ["w.txt:1:", "1,000,000,000,000 rows"],
    ),
    "header dimension": (
        lambda p, r: _write_case(p, "w.txt", _join([b"200 300", *_lines(r)])),
        ["w.txt:1:", "dimension 300 but the rows have 50"],
    ),
    "not a header": (
        lambda p, r: _write_case(p, "w.txt", _join([b"200 fifty", *_lines(r)])),
        ["w.txt:1:", "header"],
        # forced to word2vec below
    ),
    "non-utf8 token": (
        lambda p, r: _write_case(p, "g.txt", _join([*_lines(r)[:3], b"\xff\xfe" + _lines(r)[3]])),
        ["g.txt:4:", "not valid UTF-8"],
    ),
    "empty file": (lambda p, r: _write_case(p, "g.txt", b""), ["g.txt", "empty file"]),
    "whitespace only": (lambda p, r: _write_case(p, "g.txt", b"\n \n\t\n"), ["g.txt", "empty file"]),
    "empty gzip": (lambda p, r: _write_case(p, "g.txt.gz", gzip.compress(b"")), ["g.txt.gz", "empty file"]),
    "corrupt gzip": (
        lambda p, r: _write_case(p, "g.txt.gz", gzip.compress(_join(_lines(r)))[:-30] + b"\0" * 30),
        ["g.txt.gz", "cannot read"],
    ),
    "truncated binary": (lambda p, r: _write_case(p, "v.bin", _binary(r)[:-1000]), ["v.bin", "truncated"]),
    "binary cut inside its last row": (
        lambda p, r: _write_case(p, "v.bin", _binary(r)[:-10]),
        ["v.bin", "ends inside row 100 of 100", "truncated"],
    ),
    "binary header larger than file": (
        lambda p, r: _write_case(p, "v.bin", b"3000000 300\n" + _binary(r)[7:]),
        ["v.bin:1:", "header says 3,000,000 rows"],
    ),
    "binary with an infinite value": (  # a binary file has no lines: its vectors are counted
        lambda p, r: _write_case(
            p, "v.bin", _binary((r[0], np.where(np.arange(100)[:, None] == 3, np.inf, r[1][:100]).astype(np.float32)))
        ),
        ["v.bin, vector 4:", "NaN, Inf"],
    ),
    "binary wrong dimension": (
        lambda p, r: _write_case(p, "v.bin", b"100 40\n" + _binary(r)[7:]),
        ["v.bin", "header"],
    ),
    "binary header count too low": (  # the header is what is wrong: its line is named, and its count
        lambda p, r: _write_case(p, "v.bin", b"99 50\n" + _binary(r)[7:]),
        ["v.bin:1:", "the header says 99 rows but 207 more bytes follow them", "a row count too small"],
    ),
    "npy object array": (_object_npy, ["m.npy", "Python objects"]),
    "npy without vocabulary": (lambda p, r: _npy(p, r, vocab_lines=None), ["m.npy", "--vocab"]),
    "npy vocabulary too short": (lambda p, r: _npy(p, r, vocab_lines=199), ["vocab.txt", "199 tokens", "200 rows"]),
    "npy vocabulary a folder": (
        lambda p, r: [*_npy(p, r, vocab_lines=None), "--vocab", p],
        ["the vocabulary is not a file"],
    ),
    "npy one-dimensional": (
        lambda p, r: _npy(p, r, array=np.zeros(200, dtype=np.float32)),
        ["m.npy", "2-D"],
    ),
    "npy complex": (lambda p, r: _npy(p, r, array=np.zeros((200, 4), dtype=np.complex64)), ["m.npy", "complex"]),
    "npy with nan": (
        lambda p, r: _npy(p, r, array=np.where(np.arange(200)[:, None] == 12, np.nan, r[1][:200])),
        ["m.npy, row 12:", "NaN"],
    ),
    "npz with --vocab": (lambda p, r: [*_npz(p, r), "--vocab", p / "m.npz"], ["m.npz", "leave out --vocab"]),
    "npz without tokens": (lambda p, r: _npz(p, r, tokens=None), ["m.npz", "found 'vectors'", "np.savez("]),
    "npz with an extra array": (
        lambda p, r: _npz(p, r, norms=np.ones(200)),
        ["m.npz", "holds the arrays 'tokens' and 'vectors', found 'norms', 'tokens', 'vectors'"],
    ),
    "npz object tokens": (
        lambda p, r: _npz(p, r, tokens=np.array(r[0][:200], dtype=object)),
        ["m.npz", "array 'tokens': holds Python objects", "unpickle"],
    ),
    "npz bytes tokens": (
        lambda p, r: _npz(p, r, tokens=np.array(r[0][:200], dtype=bytes)),
        ["m.npz", "array 'tokens': dtype |S", "is not str"],
    ),
    "npz tokens too few": (
        lambda p, r: _npz(p, r, tokens=np.array(r[0][:199], dtype=str)),
        ["m.npz", "array 'tokens': 199 tokens, but 'vectors' has 200"],
    ),
    "npz one-dimensional vectors": (
        lambda p, r: _npz(p, r, vectors=np.zeros(200, dtype=np.float32)),
        ["m.npz", "array 'vectors': expected a 2-D matrix"],
    ),
    "npz with an array twice": (
        _npz_twice,
        ["m.npz", "array 'vectors' is in the archive twice ('vectors.npy', 'vectors')"],
    ),
    "npz token with an unpaired surrogate": (
        lambda p, r: _npz(p, r, tokens=np.array([*r[0][:12], "a\ud800", *r[0][13:200]], dtype=str)),
        ["m.npz, row 12:", "array 'tokens': an unpaired surrogate", "--unicode-errors replace"],
    ),
    "npz with an empty token": (  # named by its row, as a NaN row of the same archive is
        lambda p, r: _npz(p, r, tokens=np.array([*r[0][:7], "", *r[0][8:200]], dtype=str)),
        ["m.npz, row 7:", "array 'tokens': an empty token"],
    ),
    "npz whose entry claims a terabyte": (  # refused by the bytes it holds, before numpy allocates what it claims
        lambda p, r: _npz_claiming(p, r, 1 << 40),
        ["m.npz", "array 'vectors': truncated:", "bytes, 64 follow"],
    ),
    "not an npy": (lambda p, r: [*_write_case(p, "m.npy", b"hello"), "--vocab", p / "m.npy"], ["m.npy", "not a .npy"]),
    "projector without metadata": (
        lambda p, r: _projector_case(p, r, lambda d: (d / "metadata.tsv").unlink()),
        ["metadata.tsv", "no such file"],
    ),
    "projector row count": (
        lambda p, r: _projector_case(p, r, lambda d: _edit(d / "metadata.tsv", 5, lambda s: s + "\nextra\tk")),
        ["metadata.tsv", "101 rows", "100"],
    ),
    "projector short row": (
        lambda p, r: _projector_case(p, r, lambda d: _edit(d / "vectors.tsv", 33, lambda s: s.rsplit("\t", 1)[0])),
        ["vectors.tsv:34:", "49 values, expected 50"],
    ),
    "projector bad number": (
        lambda p, r: _projector_case(p, r, lambda d: _edit(d / "vectors.tsv", 3, lambda s: "x" + s)),
        ["vectors.tsv:4:", "is not a number"],
    ),
    "projector ragged metadata": (
        lambda p, r: _projector_case(p, r, lambda d: _edit(d / "metadata.tsv", 9, lambda s: s + "\textra")),
        ["metadata.tsv:10:", "3 columns, the header has 2"],
    ),
    "pickle without flag": (
        lambda p, r: _write_case(p, "model.pkl", b"\x80\x04\x95" + b"\0" * 20),
        ["model.pkl", "--allow-pickle"],
    ),
    "pickle that is not gensim": (
        lambda p, r: [*_write_case(p, "model.pkl", __import__("pickle").dumps([1, 2, 3])), "--allow-pickle"],
        ["model.pkl", "cannot load as a gensim model"],
    ),
}
FORCED = {"not a header": ["--format", "word2vec"]}


def test_binary_bytes_like_a_utf16_mark_are_not_text(tmp_path: Path) -> None:
    """A safetensors file whose header length starts 0xFEFF is no UTF-16 text: the UTF-16 refusal reads on."""
    for head in (b"\xff\xfe\x01\x00\x00\x00\x00\x00{", b"\xfe\xff\x00\x00\x00\x00\x00\x01{"):
        refuse_unread(tmp_path / "model.safetensors", head)
    with pytest.raises(InputError, match="UTF-16 text"):
        refuse_unread(tmp_path / "g.txt", "\ufeffthe 0.1".encode("utf-16-le"))


def test_a_binary_file_is_not_read_as_glove_text(tmp_path: Path, data_dir: Path) -> None:
    """A binary file no reader sniffs (a fastText model from before its magic number, as gensim's test data has
    one, a program, an image) is said to be binary, also with ``--format glove``; a NUL byte in a later token is
    no sign of one."""
    from gensim.test.utils import datapath

    old_fasttext = Path(datapath("cp852_fasttext.bin"))
    program, image = tmp_path / "program", tmp_path / "image.png"
    program.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    image.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    said = "not GloVe text, which is a token and its values on each line; word2vec binary starts with a line"
    cases = ((old_fasttext, 1, ()), (program, 7, ()), (program, 7, ("--format", "glove")), (image, 8, ()))
    for path, offset, extra in cases:
        message = import_fails(path, data_dir, *extra)
        assert message.startswith(f"embedding-index: error: {path}:1: binary data (a NUL byte at offset {offset}), ")
        assert said in message and "fastText .bin model is not read" in message
    text = tmp_path / "nul.txt"
    text.write_bytes(b"the 0.5 1\na\0b 1 0.25\n")
    assert import_ok(text, data_dir).tokens[1] == "a\0b"


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_fails_cleanly(tmp_path: Path, data_dir: Path, glove_rows, case: str) -> None:
    make, expected = BAD_CASES[case]
    args = make(tmp_path, glove_rows)
    message = import_fails(args[0], data_dir, *args[1:], *FORCED.get(case, []))
    for part in expected:
        assert part in message, message
    assert not data_dir.exists() or not any(data_dir.iterdir())


def test_failed_force_rebuild_keeps_existing_table(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    good = write(tmp_path / "good.txt", text_lines(tokens[:500], matrix[:500]))
    import_ok(good, data_dir, "t")
    manifest = (data_dir / "t" / artifact.MANIFEST).read_bytes()
    lines = text_lines(tokens[:500], matrix[:500])
    lines[300] = _replace_value(lines[300], b"inf")
    bad = write(tmp_path / "bad.txt", lines)
    message = import_fails(bad, data_dir, "--force", name="t")
    assert "bad.txt:301:" in message
    assert (data_dir / "t" / artifact.MANIFEST).read_bytes() == manifest
    assert artifact.verify(data_dir / "t").ok
    assert artifact.list_tables(data_dir) == ["t"]
    assert not list(data_dir.glob(".tmp-*")) and not list(data_dir.glob(".old-*"))
    assert json.loads(manifest)["rows"] == 500


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("fmt", ["auto", "fasttext", "documents"])
def test_a_pipe_or_device_is_refused_before_it_is_read(tmp_path: Path, data_dir: Path, kind: str, fmt: str) -> None:
    """The readers read a file more than once: a pipe (``<(zcat f.vec.xz)``, a FIFO nobody writes to, which opening
    would wait on) or a device is refused by what it is, not by what its second reading finds."""
    path = Path("/dev/null")
    if kind == "fifo":
        path = tmp_path / "vectors.vec"
        os.mkfifo(path)
    message = import_fails(path, data_dir, "--format", fmt)
    assert message.endswith(
        f"{path}: not a regular file (a pipe or a device): the import reads it more than once; save it first"
    )


def test_existing_table_without_force_is_refused(tmp_path: Path, data_dir: Path, glove_rows) -> None:
    tokens, matrix = glove_rows
    good = write(tmp_path / "good.txt", text_lines(tokens[:100], matrix[:100]))
    import_ok(good, data_dir, "t")
    message = import_fails(good, data_dir, name="t")
    assert "already exists" in message and "--force" in message


# ---------------------------------------------------------------------------------------------- sniffing


def test_sniff_format(tmp_path: Path, glove_rows) -> None:
    lines = _lines(glove_rows, 5)
    cases = {
        "a.txt": _join(lines),
        "a.txt.gz": gzip.compress(_join(lines)),
        "w.txt": _join([b"5 50", *lines]),
        "w.vec": _join([b"5 50", *lines]),
        "w.vec.gz": gzip.compress(_join([b"5 50", *lines])),
        "v.bin": _binary(glove_rows, 5),
        "v.bin.gz": gzip.compress(_binary(glove_rows, 5)),
        "no-extension": _binary(glove_rows, 5),
        "a.model": b"anything",
        "a.kv": b"anything",
        "pickle.bin": __import__("pickle").dumps({"a": 1}),
        "m.data": b"\x93NUMPY" + b"\0" * 10,
        "u.txt": _join([b"\xe4\xb8\xad\xe6\x96\x87 " * 30 + b"0.5 0.25"]),
    }
    expected = {
        "a.txt": "glove",
        "a.txt.gz": "glove",
        "w.txt": "word2vec",
        "w.vec": "fasttext",
        "w.vec.gz": "fasttext",
        "v.bin": "word2vec-binary",
        "v.bin.gz": "word2vec-binary",
        "no-extension": "word2vec-binary",
        "a.model": "gensim",
        "a.kv": "gensim",
        "pickle.bin": "gensim",
        "m.data": "npy",
        "u.txt": "glove",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert sniff_format(tmp_path / name) == expected[name], name
    # A text file with a header whose tokens are not ASCII is still text.
    (tmp_path / "cjk.txt").write_bytes(_join([b"1 2", "\u4e2d\u6587\u5b57".encode() * 40 + b" 0.5 -1e-3"]))
    assert sniff_format(tmp_path / "cjk.txt") == "word2vec"


def test_reader_options_apply_to_direct_calls(tmp_path: Path, glove_rows) -> None:
    """The readers also work as plain functions (for the service's tests and benchmarks)."""
    lines = _lines(glove_rows, 10)
    path = write(tmp_path / "g.txt", [*lines[:5], b"bad 1", *lines[5:]])
    raw, fmt = read_source(path, "glove", ReadOptions(drop_invalid=True))
    assert fmt == "glove" and len(raw.tokens) == 10 and raw.report["malformed_rows_dropped"] == 1


def test_a_large_sources_checksum_shows_its_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source's sha256 takes a second or more from ``SHOWN_DIGEST_BYTES`` on (a 5 GB fastText file, ten): its
    progress is shown from there on; the digest is the file's, a folder's that of its files' names and digests."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes(b"x" * 3000)
    second.write_bytes(b"y" * 1000)
    monkeypatch.setattr(writer, "SHOWN_DIGEST_BYTES", 4000)
    with progress_lines() as shown:
        assert source_digest([first]) == hashlib.sha256(first.read_bytes()).hexdigest()
    assert shown.getvalue() == ""
    with progress_lines() as shown:
        folder = source_digest([tmp_path])
    assert shown.getvalue() == "embedding-index: checksum of the source: done (0 MiB of 0 MiB) in 0s\n"
    named = "".join(f"{f.name}:{hashlib.sha256(f.read_bytes()).hexdigest()}\n" for f in (first, second))
    assert folder == hashlib.sha256(named.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- real binary


def test_console_script_success_and_failure(tmp_path: Path, glove_rows) -> None:
    """The installed ``embedding-index`` command, as a user runs it."""
    exe = REPO / ".venv" / "bin" / "embedding-index"
    if not exe.exists():
        exe = Path(sys.executable).parent / "embedding-index"
    tokens, matrix = glove_rows
    good = write(tmp_path / "vectors.txt.gz", text_lines(tokens, matrix), header=f"{ROWS} 50".encode())
    data = tmp_path / "data"
    done = subprocess.run(
        [exe, "import", good, "--name", "w2v", "--data-dir", data], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "3,000 rows x 50" in done.stdout
    # Not a terminal: each step says what it does, and how far it got when it ends.
    assert "embedding-index: reading vectors.txt.gz: done (3,000 of 3,000 rows)" in done.stderr
    assert_rows(Table.load(data / "w2v"), tokens, matrix)

    lines = text_lines(tokens, matrix)
    lines[1234] = lines[1234].rsplit(b" ", 3)[0]
    bad = write(tmp_path / "bad.txt", lines)
    failed = subprocess.run(
        [exe, "import", bad, "--name", "bad", "--data-dir", data], capture_output=True, text=True, timeout=300
    )
    assert failed.returncode == 1
    *progress, error = failed.stderr.splitlines()
    assert error == (
        f"embedding-index: error: {bad}:1235: 47 values after the token, expected 50 "
        "(use --drop-invalid to skip such rows)"
    )
    mib = f"{bad.stat().st_size / 2**20:,.0f} MiB"
    assert len(progress) == 2  # then the first bad line stops it
    assert progress[0] == "embedding-index: reading bad.txt (glove) ..."
    assert progress[1].startswith(f"embedding-index: counting the lines of bad.txt: done ({mib} of {mib}) in ")
    assert not (data / "bad").exists() and not list(data.glob(".tmp-*"))
