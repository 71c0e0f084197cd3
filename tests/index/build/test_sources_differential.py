"""The text, binary, TSV and .npy readers against gensim's and NumPy's, on seeded random well-formed files.

Each file has a random size and dimension, tokens drawn from real GloVe tokens and Unicode letters, and any of the
variations its format allows: CRLF line ends, trailing spaces or tabs, a last line without a newline, blank lines at
the end, a UTF-8 byte-order mark, gzip, duplicate tokens, tokens with spaces (text formats), numbers spelled
``1e-05``, ``-0``, ``+1.5``, ``.5``. Read by ``read_source`` and cleaned as an import cleans it, the tokens (in order)
and the float32 matrix before normalisation must be bit for bit what the file says, and what gensim's
``KeyedVectors.load_word2vec_format`` (or NumPy) reads wherever it reads the file. Where gensim 4.4 differs, the
difference is expected, and ours is the right answer:

- a byte-order mark: gensim fails on the header (``int('\\ufeff3')``), or keeps the mark in a GloVe file's first
  token; it is no part of the text;
- a token with spaces (GloVe 840B): gensim refuses the line; the last DIM fields are the vector;
- a duplicate token: gensim keeps the first row, as we do, but leaves a ``None`` key and a zero row at the end of its
  table for each later one; we drop and count them;
- NaN, Inf or a value that overflows float32: gensim reads it; the import refuses the row naming its line, since no
  cosine can be computed with it;
- a header counting more rows than the file has: both refuse; fewer: gensim reads that many and ignores the rest
  silently, the import refuses the file naming its header's line;
- blank lines at the end of a GloVe file: gensim counts them as rows and fails; they are no rows.

The seeds are fixed, so every run checks the same files.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors

from index.build.clean import clean
from index.build.sources import (
    DROP_HINT,
    RawTable,
    ReadOptions,
    is_number,
    projector,
    read_source,
    sniff_format,
    text,
    word2vec_binary,
)
from index.engine.table import Table
from index.errors import InputError
from index.store import artifact
from tests.cli import run_cli

CASES = 160  # seeded files of each group: the whole module stays near ten seconds
LETTERS = "abcdefghijklmnopqrstuvwxyzéüßçøåλπжяשалוםअमक日本語中文한국어ñ"
SECOND_WORDS = ("york", "ñandú", "日本", "jersey", "d'ivoire")  # a token's part after its space: never a number
INVALID = ("nan", "inf", "-inf", "1e39", "NaN", "-Infinity")
BOM = b"\xef\xbb\xbf"


@dataclass
class Case:
    """A written file and what reading it must give: the rows, or the refusal (its line and words)."""

    path: Path
    fmt: str
    tokens: list[str] = field(default_factory=list)  # every row's token, duplicates included
    matrix: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32))  # what the file's values say
    refused: tuple[int, str] | None = None  # (line, words of the message) when the import must refuse the file
    gensim_refuses: bool = False
    gensim_rows: int | None = None  # gensim reads only the rows its header counts, when that is fewer
    bom_in_first_token: bool = False  # gensim keeps a GloVe file's byte-order mark in its first token


@pytest.fixture(scope="module")
def words(glove_raw: RawTable) -> list[str]:
    """Real GloVe tokens that are not numbers (a token that reads as one is a row with a value too many when it
    follows a space)."""
    return [token for token in glove_raw.tokens[:20_000] if not is_number(token.encode())]


def a_token(rng: random.Random, words: list[str]) -> str:
    if rng.random() < 0.7:
        return rng.choice(words)
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 8)))


def spelled(rng: random.Random, value: np.float32) -> str:
    """``value`` as one of the spellings a writer of embedding files uses (some lose precision: what the file
    says is what the reader must give)."""
    number = float(value)
    choice = rng.randrange(8)
    if choice == 0:
        return repr(number)
    if choice == 1:
        return f"{number:.5g}"
    if choice == 2:
        return f"{number:e}"  # 1.000000e-05
    if choice == 3:
        return f"+{number!r}" if number >= 0 else repr(number)
    if choice == 4:  # .5, -.25
        return repr(number).replace("0.", ".", 1) if abs(number) < 1 else repr(number)
    if choice == 5:
        return rng.choice(["-0", "0", "-0.0", "3", "+1.5", ".5", "1e-05"])
    if choice == 6:
        return f"{number:.9g}"
    return f"{number:.3E}"


def values_of(rows: list[list[str]], dim: int) -> np.ndarray:
    """The float32 matrix the spelled values say: each parsed as a double, then rounded once."""
    parsed = [[float(value) for value in row] for row in rows]
    with np.errstate(over="ignore"):
        return np.array(parsed, dtype=np.float64).reshape(len(rows), dim).astype(np.float32)


def with_duplicates(rng: random.Random, tokens: list[str]) -> list[str]:
    for _ in range(rng.choice([0, 0, 1, 3])):
        if len(tokens) > 1:
            tokens[rng.randrange(1, len(tokens))] = rng.choice(tokens)
    return tokens


def text_case(rng: random.Random, folder: Path, words: list[str]) -> Case:
    """A GloVe, word2vec or fastText text file."""
    fmt = rng.choice(["glove", "word2vec", "fasttext"])
    rows, dim = rng.randint(1, 60), rng.randint(1, 20)
    tokens = with_duplicates(rng, [a_token(rng, words) for _ in range(rows)])
    # Tokens with spaces: none, some, or (under a header, which gives the dimension) all: a table of phrases. In
    # GloVe, whose dimension is the most common number of fields, they stay a minority of any first lines.
    spaces = rng.choice(["none", "none", "some", "all" if fmt != "glove" else "some"])
    for i in range(rows):
        if spaces == "all" or (spaces == "some" and (fmt != "glove" or i % 3 == 2) and rng.random() < 0.3):
            tokens[i] += " " + rng.choice(SECOND_WORDS)
    source = np.random.default_rng(rng.randrange(1 << 30)).standard_normal((rows, dim)) * 10 ** rng.uniform(-6, 3)
    spellings = [[spelled(rng, value) for value in row] for row in source.astype(np.float32)]
    case = Case(folder / ("v.vec" if fmt == "fasttext" else "v.txt"), fmt, tokens)
    if rng.random() < 0.1:  # a value no cosine can be computed with
        bad = rng.randrange(rows)
        spellings[bad][rng.randrange(dim)] = rng.choice(INVALID)
        case.refused = (bad + (fmt != "glove") + 1, "NaN, Inf or overflowing values")
    case.matrix = values_of(spellings, dim)
    trailing = rng.choice(["", "", " ", "\t", " \t"])
    lines = [f"{token} {' '.join(row)}{trailing}" for token, row in zip(tokens, spellings, strict=True)]
    if fmt != "glove":
        counted = rows + rng.choice([0] * 8 + [-1, 1]) if rows > 1 else rows
        lines.insert(0, f"{counted} {dim}")
        if counted != rows:  # the header is the first problem of the file
            case.refused = (1, f"the header says {counted} row{'s' * (counted != 1)} but the file has {rows}")
            case.gensim_refuses = counted > rows
            case.gensim_rows = counted if counted < rows else None
    newline = rng.choice(["\n", "\n", "\r\n"])
    end = rng.choice([newline, newline, "", newline + newline + " " + newline])  # none, or blank lines after
    data = (newline.join(lines) + end).encode()
    read_by_gensim = case.gensim_rows or rows
    case.gensim_refuses |= any(" " in token for token in tokens[:read_by_gensim])
    case.gensim_refuses |= fmt == "glove" and end.count(newline) > 1  # blank lines are rows to gensim
    if rng.random() < 0.15:
        data = BOM + data
        case.gensim_refuses |= fmt != "glove"
        case.bom_in_first_token = fmt == "glove"
    return write(rng, case, data)


def binary_case(rng: random.Random, folder: Path, words: list[str]) -> Case:
    """A word2vec binary file (its tokens hold no spaces: a token ends at its first space). Of three values or more:
    a first row of one or two float32 values can look like text to the sniffer (``--format`` then says it)."""
    rows, dim = rng.randint(1, 60), rng.randint(3, 20)
    tokens = with_duplicates(rng, [a_token(rng, words) for _ in range(rows)])
    matrix = np.random.default_rng(rng.randrange(1 << 30)).standard_normal((rows, dim)) * 10 ** rng.uniform(-6, 3)
    case = Case(folder / "v.bin", "word2vec-binary", tokens, matrix.astype(np.float32))
    if rng.random() < 0.1:
        bad = rng.randrange(rows)
        case.matrix[bad, rng.randrange(dim)] = rng.choice([np.nan, np.inf, -np.inf])
        case.refused = (bad + 1, "NaN, Inf or overflowing values")  # a binary file's vectors are counted from 1
    newline = rng.choice([b"\n", b"\n", b""])  # word2vec.c writes one after each row; gensim's writer too
    packed = [
        t.encode() + b" " + row.astype("<f4").tobytes() + newline for t, row in zip(tokens, case.matrix, strict=True)
    ]
    data = f"{rows} {dim}\n".encode() + b"".join(packed)
    if rng.random() < 0.15:
        data = BOM + data
        case.gensim_refuses = True
    return write(rng, case, data)


def write(rng: random.Random, case: Case, data: bytes) -> Case:
    if rng.random() < 0.3:
        case.path = case.path.with_name(case.path.name + ".gz")
        data = gzip.compress(data)
    case.path.write_bytes(data)
    return case


def kept(tokens: list[str], matrix: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The rows an import (or gensim) keeps: the first of each token."""
    first: dict[str, int] = {}
    for i, token in enumerate(tokens):
        first.setdefault(token, i)
    rows = sorted(first.values())
    return [tokens[i] for i in rows], matrix[rows]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal float32 matrices, bit for bit (-0.0 is not 0.0)."""
    same_shape = a.dtype == b.dtype == np.float32 and a.shape == b.shape
    return same_shape and np.array_equal(a.view(np.int32), b.view(np.int32))


def read_ours(case: Case) -> RawTable:
    raw, fmt = read_source(case.path)
    assert fmt == case.fmt
    return clean(raw, case.path)[0]


def check_gensim(case: Case) -> None:
    """gensim reads the file as we do, or differs only as the module's docstring says."""
    binary = case.fmt == "word2vec-binary"
    try:
        kv = KeyedVectors.load_word2vec_format(str(case.path), binary=binary, no_header=case.fmt == "glove")
    except (ValueError, EOFError):
        assert case.gensim_refuses, case.path
        return
    assert not case.gensim_refuses, case.path
    keys = [key for key in kv.index_to_key if key is not None]  # its holes of duplicates left out
    rows = len(keys)
    assert all(key is None for key in kv.index_to_key[rows:]) and not kv.vectors[rows:].any()
    tokens = list(case.tokens)
    if case.bom_in_first_token:
        tokens[0] = "\ufeff" + tokens[0]
    read = case.gensim_rows or len(tokens)
    expected_tokens, expected = kept(tokens[:read], case.matrix[:read])
    assert keys == expected_tokens
    assert same_bits(np.ascontiguousarray(kv.vectors[:rows]), expected)  # NaN and Inf too, as the file says them


def check(case: Case) -> None:
    assert sniff_format(case.path) == case.fmt
    if case.refused is not None:
        line, words = case.refused
        with pytest.raises(InputError) as refusal:
            read_ours(case)
        where = f"{case.path}, vector {line}: " if case.fmt == "word2vec-binary" else f"{case.path}:{line}: "
        assert str(refusal.value).startswith(where) and words in str(refusal.value), (str(refusal.value), where)
    else:
        table = read_ours(case)
        tokens, matrix = kept(case.tokens, case.matrix)
        assert table.tokens == tokens
        assert same_bits(table.matrix, matrix)
    check_gensim(case)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # gensim reading 1e39
@pytest.mark.parametrize("group", ["text", "binary"])
def test_word2vec_readers_read_what_gensim_reads(
    tmp_path: Path, words: list[str], group: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = text_case if group == "text" else binary_case
    for seed in range(CASES):
        rng = random.Random(f"{group}-{seed}")
        # chunks of a few rows too: the readers' carry-over between chunks is read as well
        monkeypatch.setattr(text, "CHUNK_BYTES", rng.choice([64, 997, 2 << 20]))
        monkeypatch.setattr(word2vec_binary, "CHUNK_BYTES", rng.choice([64, 997, 2 << 20]))
        folder = tmp_path / str(seed)
        folder.mkdir()
        check(make(rng, folder, words))


def projector_case(rng: random.Random, folder: Path, words: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A projector pair in ``folder``: (tokens, what its values say, NumPy's ``loadtxt`` of vectors.tsv)."""
    rows, dim = rng.randint(1, 60), rng.randint(1, 20)
    tokens = with_duplicates(rng, [a_token(rng, words) for _ in range(rows)])
    for i in range(rows):  # a line of metadata.tsv is the token, spaces and all
        if rng.random() < 0.1:
            tokens[i] += " " + rng.choice(SECOND_WORDS)
    source = np.random.default_rng(rng.randrange(1 << 30)).standard_normal((rows, dim)) * 10 ** rng.uniform(-6, 3)
    spellings = [[spelled(rng, value) for value in row] for row in source.astype(np.float32)]
    newline = rng.choice(["\n", "\n", "\r\n"])
    end = rng.choice([newline, newline, ""])
    vectors = (newline.join("\t".join(row) for row in spellings) + end).encode()
    if rng.random() < 0.5:  # a column of kinds: then the first line is a header
        metadata = newline.join(["word\tkind", *(f"{token}\tk{i % 3}" for i, token in enumerate(tokens))]) + end
    else:
        metadata = newline.join(tokens) + end
    bom = BOM if rng.random() < 0.15 else b""
    name = "vectors.tsv.gz" if rng.random() < 0.3 else "vectors.tsv"
    (folder / name).write_bytes(gzip.compress(bom + vectors) if name.endswith(".gz") else bom + vectors)
    (folder / "metadata.tsv").write_bytes(bom + metadata.encode())
    numpy_read = np.loadtxt(folder / name, delimiter="\t", encoding="utf-8-sig", ndmin=2)
    return tokens, values_of(spellings, dim), numpy_read


def test_projector_reader_reads_what_numpy_reads(
    tmp_path: Path, words: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for seed in range(CASES):
        rng = random.Random(f"projector-{seed}")
        monkeypatch.setattr(projector, "BLOCK_BYTES", rng.choice([64, 997, 4 << 20]))
        folder = tmp_path / str(seed)
        folder.mkdir()
        tokens, matrix, numpy_read = projector_case(rng, folder, words)
        raw, fmt = read_source(folder)
        table = clean(raw, folder)[0]
        expected_tokens, expected = kept(tokens, matrix)
        assert fmt == "projector" and table.tokens == expected_tokens
        assert same_bits(table.matrix, expected)
        assert same_bits(kept(tokens, numpy_read.astype(np.float32))[1], expected)


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">f2", "<i4", ">i8", "u1"])
def test_npy_reader_reads_what_numpy_loads(tmp_path: Path, dtype: str) -> None:
    """Any real dtype, byte order and memory order, gzipped or not, its vocabulary with CRLF, a byte-order mark or
    no last newline: the float32 of what ``numpy.load`` gives."""
    rng = random.Random(dtype)
    for seed in range(20):
        rows, dim = rng.randint(1, 40), rng.randint(1, 20)
        array = (np.random.default_rng(seed).standard_normal((rows, dim)) * 50).astype(dtype)
        if rng.random() < 0.3:
            array = np.asfortranarray(array)
        path = tmp_path / f"{seed}.npy"
        np.save(path, array)
        if rng.random() < 0.3:
            path = path.with_name(path.name + ".gz")
            path.write_bytes(gzip.compress(path.with_suffix("").read_bytes()))
        tokens = [f"{a_token(rng, ['the', 'ñandú'])}{i}" for i in range(rows)]
        newline = rng.choice(["\n", "\r\n"])
        vocab = tmp_path / f"{seed}.txt"
        lines = (newline.join(tokens) + rng.choice([newline, ""])).encode()
        vocab.write_bytes((BOM if rng.random() < 0.2 else b"") + lines)
        raw, fmt = read_source(path, options=ReadOptions(vocab=vocab))
        assert fmt == "npy" and raw.tokens == tokens
        assert same_bits(raw.matrix, np.load(tmp_path / f"{seed}.npy").astype(np.float32))


def import_refused(path: Path, data_dir: Path) -> str:
    """Import ``path`` over the existing table ``t`` with ``--force``: refused with one line, the table as it was,
    nothing else left in the data directory."""
    before = {p.name: p.read_bytes() for p in (data_dir / "t").rglob("*") if p.is_file()}
    result = run_cli("import", path, "--name", "t", "--data-dir", data_dir, "--force")
    assert result.code == 1 and len(result.err.splitlines()) == 1, result.err
    assert sorted(p.name for p in data_dir.iterdir()) == ["t"]
    assert {p.name: p.read_bytes() for p in (data_dir / "t").rglob("*") if p.is_file()} == before
    assert artifact.verify(data_dir / "t").ok
    return result.err.removeprefix("embedding-index: error: ").rstrip("\n")


def test_odd_files_read_or_refused_by_name_line_and_problem(tmp_path: Path) -> None:
    """Compression told by the first bytes, not the name (gensim goes by the name, and fails on both); bzip2 and xz,
    which gensim reads by their names, refused with what to do; a binary file short by one byte, an empty file, a
    header alone, a binary token with a space: refused naming the file, the line or row, and the problem, with the
    table of the same name left as it was."""
    data_dir = tmp_path / "data"
    rows = b"the 0.5 -1.25 3\n\xc3\xb1and\xc3\xba 1 2 -0\n"
    good = tmp_path / "good.txt"
    good.write_bytes(rows)
    assert run_cli("import", good, "--name", "t", "--data-dir", data_dir).code == 0
    expected = np.array([[0.5, -1.25, 3], [1, 2, -0.0]], dtype=np.float32)
    for name, data in {"gzip.txt": gzip.compress(b"2 3\n" + rows), "plain.txt.gz": b"2 3\n" + rows}.items():
        (tmp_path / name).write_bytes(data)
        raw, fmt = read_source(tmp_path / name)
        assert fmt == "word2vec" and raw.tokens == ["the", "ñandú"] and same_bits(raw.matrix, expected)
        with pytest.raises((UnicodeDecodeError, OSError), match=r"codec can.t decode|Not a gzipped file"):
            KeyedVectors.load_word2vec_format(str(tmp_path / name))
    for name, compress, what in (("v.txt.bz2", bz2.compress, "bzip2"), ("v.txt.xz", lzma.compress, "xz")):
        (tmp_path / name).write_bytes(compress(b"2 3\n" + rows))
        assert KeyedVectors.load_word2vec_format(str(tmp_path / name)).index_to_key == ["the", "ñandú"]
        said = f"{tmp_path / name}: {what} compressed: decompress it first (gzip is read as it is)"
        assert import_refused(tmp_path / name, data_dir) == said
    packed = [t + b" " + r.astype("<f4").tobytes() for t, r in zip([b"a", b"b"], expected, strict=True)]
    binary = b"2 3\n" + b"\n".join(packed) + b"\n"
    cases = {
        "short.bin": (binary[:-2], "short.bin: the file ends inside row 2 of 2 (byte offset 18): truncated file"),
        "short-packed.bin": (  # rows without newlines: the size the header needs is checked first
            b"2 3\n" + b"".join(packed)[:-1],
            "short-packed.bin:1: the header says 2 rows of 3 float32 values (at least 28 bytes) but only 27 bytes",
        ),
        "empty.txt": (b"", "empty.txt: empty file: no vectors"),
        "empty.txt.gz": (gzip.compress(b""), "empty.txt.gz: empty file: no vectors"),
        "header.txt": (b"2 3\n", "header.txt:1: the header says 2 rows of 3 float32 values (at least 28 bytes) but"),
    }
    for name, (data, said) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert import_refused(tmp_path / name, data_dir).startswith(f"{tmp_path}/{said}")
        with pytest.raises((ValueError, EOFError)):
            KeyedVectors.load_word2vec_format(str(tmp_path / name), binary=name.endswith(".bin"))
    # A token ends at its first space: gensim reads 'new' with 'york' and 8 bytes of floats as its vector.
    (tmp_path / "spaced.bin").write_bytes(binary.replace(b"b ", b"new york ", 1))
    said = "spaced.bin:1: the header says 2 rows but 6 more bytes follow them (byte offset 35)"
    assert import_refused(tmp_path / "spaced.bin", data_dir).startswith(f"{tmp_path}/{said}")
    assert KeyedVectors.load_word2vec_format(str(tmp_path / "spaced.bin"), binary=True).index_to_key == ["a", "new"]
    # Digits of other scripts: Python's float() reads them, and so gensim does; no embedding file writes them.
    (tmp_path / "arabic.txt").write_text("the 0.5 1\nof \u0661 2\n", encoding="utf-8")
    assert import_refused(tmp_path / "arabic.txt", data_dir).endswith(
        "arabic.txt:2: '\u0661' is not a number" + DROP_HINT
    )
    assert KeyedVectors.load_word2vec_format(str(tmp_path / "arabic.txt"), no_header=True)["of"][0] == 1
    assert Table.load(data_dir / "t").tokens[:] == ["the", "ñandú"]
