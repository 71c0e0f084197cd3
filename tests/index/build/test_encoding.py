"""Embedding files in another encoding than UTF-8 (``--encoding``) and bytes it does not read (``--unicode-errors``),
against gensim's ``load_word2vec_format(encoding=..., unicode_errors=...)`` on the same files.

The files hold real GloVe 6B rows: the first ones, then every token of the first 100,000 that latin-1 writes and ASCII
does not ('café', 'naïve', 'zürich', '£', ...), written as latin-1 (older word2vec releases, fastText ``.vec`` files
made on Windows); others in cp1252, KOI8-R, Shift JIS and GBK. The table stores its tokens as UTF-8 whatever the
file's encoding.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors

from index.build.sources import RawTable, ReadOptions, read_source, text_codec
from index.errors import InputError
from index.store import tokens as stored_tokens
from tests.cli import run_cli
from tests.index.build.test_sources import import_fails, import_ok

FIRST_ROWS = 2000


@pytest.fixture(scope="module")
def latin1_rows(glove_raw: RawTable) -> tuple[list[str], np.ndarray]:
    """The first GloVe rows latin-1 writes, then every token of the first 100,000 it writes and ASCII does not."""
    writable = [i for i, token in enumerate(glove_raw.tokens[:100_000]) if max(map(ord, token)) < 256]
    rows = [i for i in writable if i < FIRST_ROWS or not glove_raw.tokens[i].isascii()]
    return [glove_raw.tokens[i] for i in rows], np.array(glove_raw.matrix[rows], dtype=np.float32)


def text_table(path: Path, tokens: list[str], matrix: np.ndarray, encoding: str, header: bool) -> Path:
    rows = zip(tokens, matrix.tolist(), strict=True)
    lines = [token.encode(encoding) + b" " + " ".join(map(repr, row)).encode() for token, row in rows]
    data = (f"{len(tokens)} {matrix.shape[1]}\n".encode() if header else b"") + b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def binary_table(path: Path, tokens: list[str], matrix: np.ndarray, encoding: str) -> Path:
    """word2vec binary as word2vec.c writes it (a newline after each row)."""
    rows = zip(tokens, matrix.astype("<f4"), strict=True)
    body = b"".join(token.encode(encoding) + b" " + row.tobytes() + b"\n" for token, row in rows)
    path.write_bytes(f"{len(tokens)} {matrix.shape[1]}\n".encode() + body)
    return path


def gensim_reads(path: Path, **args: object) -> tuple[list[str], np.ndarray]:
    """gensim's tokens and rows for ``path``: the first row of each token (its holes of later duplicates, None keys
    and zero rows at the end, left out)."""
    logging.getLogger("gensim").setLevel(logging.ERROR)  # a warning per duplicate
    kv = KeyedVectors.load_word2vec_format(str(path), **args)
    keys = [key for key in kv.index_to_key if key is not None]
    return keys, kv.vectors[: len(keys)]


def first_of_each(raw: RawTable) -> tuple[list[str], np.ndarray]:
    """The reader's tokens and rows, the first row of each token (as the import's cleaning keeps them)."""
    first: dict[str, int] = {}
    for i, token in enumerate(raw.tokens):
        first.setdefault(token, i)
    rows = sorted(first.values())
    return [raw.tokens[i] for i in rows], raw.matrix[rows]


def assert_same_as_gensim(path: Path, fmt: str, options: ReadOptions, **gensim_args: object) -> RawTable:
    raw, used = read_source(path, fmt, options)
    assert used == fmt
    tokens, matrix = gensim_reads(path, **gensim_args)
    ours, rows = first_of_each(raw)
    assert ours == tokens  # every token, in order
    assert rows.dtype == np.float32 and np.array_equal(rows, matrix)  # every row, bit for bit
    return raw


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


# ------------------------------------------------------------------------------------------- another encoding

FILES = {  # name -> (format, header, gensim's arguments besides the encoding)
    "vectors.txt": ("word2vec", True, {}),
    "wiki.vec": ("fasttext", True, {}),
    "glove.txt.gz": ("glove", False, {"no_header": True}),
}


@pytest.mark.parametrize("name", FILES)
def test_a_latin1_text_table_reads_as_gensim_reads_it(
    tmp_path: Path, data_dir: Path, latin1_rows: tuple[list[str], np.ndarray], name: str
) -> None:
    """word2vec text, fastText .vec and GloVe (gzipped) in latin-1: with --encoding latin-1, every token and row as
    gensim reads them with encoding="latin-1", which are the source's; the table stores the tokens as UTF-8."""
    fmt, header, gensim_args = FILES[name]
    tokens, matrix = latin1_rows
    assert {"café", "naïve", "zürich", "£"} <= set(tokens)
    path = text_table(tmp_path / name, tokens, matrix, "latin-1", header)
    raw = assert_same_as_gensim(path, fmt, ReadOptions(encoding="iso8859-1"), encoding="latin-1", **gensim_args)
    assert raw.tokens == tokens and np.array_equal(raw.matrix, matrix)

    table = import_ok(path, data_dir, "t", "--encoding", "latin-1")
    assert list(table.tokens[: len(tokens)]) == tokens and table.tokens.find("café") == tokens.index("café")
    blob = (data_dir / "t" / stored_tokens.BLOB).read_bytes()
    assert blob.decode("utf-8") == "".join(tokens) and "café".encode() in blob and b"caf\xe9" not in blob
    assert table.manifest["build"]["encoding"] == "iso8859-1"
    assert table.manifest["source"]["format"] == fmt


@pytest.mark.parametrize("encoding", ["koi8-r", "shift_jis", "gbk"])
def test_a_table_in_a_cyrillic_or_multibyte_encoding_reads_as_gensim_reads_it(
    tmp_path: Path, glove_raw: RawTable, encoding: str
) -> None:
    """GloVe's tokens that KOI8-R (Russian), Shift JIS or GBK write, the first 1,000 and every other one that is not
    ASCII (64, 317 and 5,462 of them): every token and row as gensim reads them (Shift JIS reads its '¥' back as
    '\\', in gensim too)."""
    tokens, rows = [], []
    for i, token in enumerate(glove_raw.tokens):
        try:
            token.encode(encoding)
        except UnicodeEncodeError:
            continue
        if i < 1000 or not token.isascii():
            tokens.append(token)
            rows.append(i)
    assert sum(not token.isascii() for token in tokens) >= 64
    path = text_table(tmp_path / "vectors.txt", tokens, np.array(glove_raw.matrix[rows]), encoding, header=True)
    raw = assert_same_as_gensim(path, "word2vec", ReadOptions(encoding=text_codec(encoding)), encoding=encoding)
    assert len(raw.tokens) == len(tokens)


def test_a_cp1252_word2vec_binary_file_reads_as_gensim_reads_it(
    tmp_path: Path, latin1_rows: tuple[list[str], np.ndarray]
) -> None:
    """gensim's binary reader takes the encoding too, and so does the import's: a cp1252 file (Windows' latin-1,
    with '€' and curly quotes besides) reads as gensim reads it."""
    tokens, matrix = latin1_rows
    tokens = [*tokens[:-3], "€", "‘quoted’", "naïve…"]
    path = binary_table(tmp_path / "vectors.bin", tokens, matrix, "cp1252")
    raw = assert_same_as_gensim(path, "word2vec-binary", ReadOptions(encoding="cp1252"), binary=True, encoding="cp1252")
    assert raw.tokens == tokens


def test_a_latin1_projector_metadata_and_vocabulary_are_read(
    tmp_path: Path, data_dir: Path, latin1_rows: tuple[list[str], np.ndarray]
) -> None:
    """A metadata.tsv (its columns too) and a vocabulary file in latin-1: read with --encoding latin-1, refused
    naming the line without it."""
    tokens, matrix = latin1_rows
    folder = tmp_path / "projector"
    folder.mkdir()
    (folder / "vectors.tsv").write_text("".join("\t".join(map(repr, row)) + "\n" for row in matrix.tolist()))
    kinds = ["ascii" if token.isascii() else "accentué" for token in tokens]
    metadata = "word\tkind\n" + "".join(f"{token}\t{kind}\n" for token, kind in zip(tokens, kinds, strict=True))
    (folder / "metadata.tsv").write_bytes(metadata.encode("latin-1"))
    table = import_ok(folder, data_dir, "p", "--encoding", "latin-1")
    assert list(table.tokens[: len(tokens)]) == tokens
    assert list(table.metadata["kind"]) == kinds
    first = next(i for i, token in enumerate(tokens) if not token.isascii())
    refused = import_fails(folder, data_dir, name="q")
    assert refused.startswith(f"embedding-index: error: {folder / 'metadata.tsv'}:{first + 2}: not valid UTF-8 (byte ")

    np.save(tmp_path / "m.npy", matrix)
    (tmp_path / "vocab.txt").write_bytes("\n".join(tokens).encode("latin-1") + b"\n")
    table = import_ok(tmp_path / "m.npy", data_dir, "n", "--vocab", tmp_path / "vocab.txt", "--encoding", "latin1")
    assert list(table.tokens[: len(tokens)]) == tokens


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1", "cp1252"])
def test_a_byte_order_mark_is_no_token_of_a_vocabulary_as_of_an_embedding_file(tmp_path: Path, encoding: str) -> None:
    """UTF-8's byte order mark before a vocabulary file's first token is dropped whatever --encoding says, as the
    text readers drop it before a GloVe file's: the same tokens from both."""
    tokens = ["the", "of", "and"]
    matrix = np.arange(12, dtype=np.float32).reshape(3, 4)
    glove = text_table(tmp_path / "glove.txt", tokens, matrix, "ascii", header=False)
    glove.write_bytes(b"\xef\xbb\xbf" + glove.read_bytes())
    np.save(tmp_path / "m.npy", matrix)
    (tmp_path / "vocab.txt").write_bytes(b"\xef\xbb\xbf" + "\n".join(tokens).encode() + b"\n")
    options = ReadOptions(encoding=text_codec(encoding))
    assert read_source(glove, "glove", options)[0].tokens == tokens
    options.vocab = tmp_path / "vocab.txt"
    assert read_source(tmp_path / "m.npy", "npy", options)[0].tokens == tokens


def test_a_vocabulary_line_left_empty_by_unicode_errors_ignore_is_named_so(tmp_path: Path, data_dir: Path) -> None:
    """A vocabulary line of bytes the encoding does not read alone, left out by --unicode-errors ignore, is refused
    as such (the byte, the ways out), not as an empty line, which it was not; a line that is empty still is one."""
    np.save(tmp_path / "m.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    (tmp_path / "vocab.txt").write_bytes(b"the\n\xa3\ncaf\xe9\n")
    refused = import_fails(
        tmp_path / "m.npy", data_dir, "--vocab", tmp_path / "vocab.txt", "--unicode-errors", "ignore"
    )
    assert refused.startswith(
        f"embedding-index: error: {tmp_path / 'vocab.txt'}:2: no token left: --unicode-errors ignore left out each "
        "byte of the line, not valid UTF-8 (byte 0xa3); use --encoding NAME for a file in another encoding"
    )
    (tmp_path / "vocab.txt").write_bytes(b"the\n\ncaf\xe9\n")
    refused = import_fails(
        tmp_path / "m.npy", data_dir, "--vocab", tmp_path / "vocab.txt", "--unicode-errors", "ignore"
    )
    assert refused.startswith(f"embedding-index: error: {tmp_path / 'vocab.txt'}:2: empty line: each line must hold")


# ---------------------------------------------------------------------------------------------- wrong encoding


def test_a_latin1_table_read_as_utf8_names_file_line_and_the_way_out(
    tmp_path: Path, data_dir: Path, latin1_rows: tuple[list[str], np.ndarray]
) -> None:
    """Without --encoding, the first token that is not UTF-8 is refused naming the file, its line, the byte, and
    what to do: --encoding for a file in another encoding; nothing is written."""
    tokens, matrix = latin1_rows
    path = text_table(tmp_path / "vectors.txt", tokens, matrix, "latin-1", header=True)
    first = next(i for i, token in enumerate(tokens) if not token.isascii())
    byte = next(b for b in tokens[first].encode("latin-1") if b > 127)
    position = tokens[first].encode("latin-1").index(byte)
    assert import_fails(path, data_dir) == (
        f"embedding-index: error: {path}:{first + 2}: token is not valid UTF-8 (byte 0x{byte:02x} at position "
        f"{position}); use --encoding NAME for a file in another encoding (such as latin-1), --unicode-errors replace "
        "to substitute U+FFFD, or --drop-invalid to skip such rows"
    )
    assert not data_dir.exists() or not any(data_dir.iterdir())


@pytest.mark.parametrize(("encoding", "shown"), [("ascii", "ascii"), ("cp1252", "cp1252")])
def test_a_byte_the_encoding_given_does_not_read_names_file_and_line(
    tmp_path: Path, data_dir: Path, latin1_rows: tuple[list[str], np.ndarray], encoding: str, shown: str
) -> None:
    """A byte the given encoding does not read (ASCII: any past 127; cp1252: 0x81, which it leaves undefined) is
    refused naming the encoding, the file and the line, in a text and a binary file alike."""
    tokens, matrix = list(latin1_rows[0][:300]), latin1_rows[1][:300]
    tokens[200] = "caf\xe9" if encoding == "ascii" else "caf\x81"  # latin-1 writes U+0081 as the byte 0x81
    byte, position = tokens[200].encode("latin-1")[3], 3
    path = text_table(tmp_path / "glove.txt", tokens, matrix, "latin-1", header=False)
    assert import_fails(path, data_dir, "--encoding", encoding) == (
        f"embedding-index: error: {path}:201: token is not valid {shown} (byte 0x{byte:02x} at position {position}); "
        "use --encoding NAME for a file in another encoding (such as latin-1), --unicode-errors replace to "
        "substitute U+FFFD, or --drop-invalid to skip such rows"
    )
    path = binary_table(tmp_path / "vectors.bin", tokens, matrix, "latin-1")
    refused = import_fails(path, data_dir, "--encoding", encoding)
    assert refused.startswith(f"embedding-index: error: {path}: row 201 (byte offset ")
    assert f"token is not valid {shown} (byte 0x{byte:02x} at position 3)" in refused


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("nonesuch", "'nonesuch' is no text encoding Python knows (such as utf-8, latin-1, cp1252)"),
        ("rot13", "'rot13' is no text encoding Python knows (such as utf-8, latin-1, cp1252)"),
        ("base64", "'base64' is no text encoding Python knows (such as utf-8, latin-1, cp1252)"),
        *(
            (
                name,
                f"'{name}' does not write spaces, newlines and digits as ASCII bytes, as the text formats are read: "
                f"convert the file to UTF-8 first (iconv -f {name} -t UTF-8)",
            )
            for name in ("utf-16", "utf-32", "utf-7", "cp037", "punycode")
        ),
        ("x" * 100, f"'{'x' * 56}... is no text encoding Python knows (such as utf-8, latin-1, cp1252)"),
    ],
)
def test_an_unknown_codec_is_refused_before_reading(tmp_path: Path, data_dir: Path, name: str, problem: str) -> None:
    """A codec Python does not know (its name clipped), one that is no text encoding, or one whose ASCII is not
    ASCII's bytes (EBCDIC's cp037, UTF-7's '+'): a usage error (status 2) before the file is opened: a file that is
    not there is not named."""
    result = run_cli("import", tmp_path / "missing.txt", "--name", "t", "--data-dir", data_dir, "--encoding", name)
    assert (result.code, result.err) == (2, f"embedding-index: error: --encoding: {problem}\n")
    assert not data_dir.exists()
    with pytest.raises(ValueError) as refused:
        text_codec(name)
    assert str(refused.value) == problem


def test_codec_names_are_pythons() -> None:
    """Any spelling Python takes; the name recorded is Python's own."""
    names = ("latin-1", "latin1", "ISO-8859-1", "cp1252", "windows-1252", "UTF8", "utf-8-sig", "koi8-r", "shift_jis")
    assert [text_codec(name) for name in names] == [
        "iso8859-1",
        "iso8859-1",
        "iso8859-1",
        "cp1252",
        "cp1252",
        "utf-8",
        "utf-8-sig",
        "koi8-r",
        "shift_jis",
    ]


def test_encoding_on_a_format_of_text_tokens_is_refused(tmp_path: Path, data_dir: Path) -> None:
    """--encoding is for the readers that decode tokens from bytes and for a folder's files: a file of documents or a
    model would ignore it, so it is refused (a folder: tests/index/build/test_folder_encoding.py; an .npz: below)."""
    records = tmp_path / "notes.jsonl"
    records.write_text('{"id": "a", "text": "the heart", "vector": [0.1, 0.2]}\n')
    for codec in ("latin-1", "utf-8"):  # UTF-8 named too: the option is refused where it does not apply, not read
        result = run_cli("import", records, "--name", "t", "--data-dir", data_dir, "--encoding", codec)
        assert (result.code, result.err) == (
            1,
            f"embedding-index: error: --encoding: only for a folder of text files, and {records} is a file of "
            "documents\n",
        )
    model = tmp_path / "model"
    model.mkdir()
    result = run_cli("import", model, "--name", "t", "--data-dir", data_dir, "--format", "hf", "--encoding", "cp1252")
    assert (result.code, result.err) == (
        1,
        "embedding-index: error: --encoding: only for --format word2vec, word2vec-binary, glove, fasttext, npy, "
        f"projector or a folder of text files, and {model} reads as hf, whose tokens are text already\n",
    )


@pytest.mark.parametrize("codec", ["utf-8", "latin-1"])
def test_encoding_on_an_npz_archive_is_refused(tmp_path: Path, data_dir: Path, codec: str) -> None:
    """An .npz archive's tokens are a str array, text already: --encoding (utf-8 too) would be ignored, so the
    command refuses it, naming the option and the archive, before reading it; a reader given another encoding for
    one refuses it too. (--unicode-errors applies: tests/index/build/test_sources.py, an unpaired surrogate.)"""
    archive = tmp_path / "m.npz"
    np.savez(archive, vectors=np.eye(2, dtype=np.float32), tokens=np.array(["a", "b"]))
    result = run_cli("import", archive, "--name", "t", "--data-dir", data_dir, "--encoding", codec)
    problem = f"--encoding: not for an .npz archive, whose tokens are text already (a str array), and {archive} is one"
    assert (result.code, result.err) == (1, f"embedding-index: error: {problem}\n")
    assert not (data_dir / "t").exists()
    with pytest.raises(InputError, match=r"an \.npz archive's tokens are text already \(a str array\)"):
        read_source(archive, "npy", ReadOptions(encoding="iso8859-1"))


# -------------------------------------------------------------------------------------------- unicode_errors


@pytest.mark.parametrize("errors", ["replace", "ignore"])
@pytest.mark.parametrize("binary", [False, True])
def test_unicode_errors_read_as_gensims(
    tmp_path: Path, latin1_rows: tuple[list[str], np.ndarray], errors: str, binary: bool
) -> None:
    """A latin-1 file read as UTF-8 with --unicode-errors replace (a U+FFFD for each byte that is not UTF-8) or
    ignore (those bytes left out): the tokens and rows gensim's unicode_errors gives, duplicates made by it ('£'
    and '¥' both '' or '\\ufffd') keeping their first row as gensim keeps it; strict: both refuse."""
    tokens, matrix = latin1_rows
    if binary:
        path = binary_table(tmp_path / "vectors.bin", tokens, matrix, "latin-1")
        fmt, args = "word2vec-binary", {"binary": True}
    else:
        path = text_table(tmp_path / "vectors.txt", tokens, matrix, "latin-1", header=True)
        fmt, args = "word2vec", {}
    raw = assert_same_as_gensim(path, fmt, ReadOptions(unicode_errors=errors), unicode_errors=errors, **args)
    expected = [token.encode("latin-1").decode("utf-8", errors) for token in tokens]
    changed = sum(token != token.encode("latin-1").decode("utf-8", "replace") for token in tokens)
    assert raw.tokens == expected and raw.report["tokens_unicode_replaced"] == changed > 500
    assert len(set(expected)) < len(expected)  # the file makes duplicates of both
    with pytest.raises(UnicodeDecodeError):
        KeyedVectors.load_word2vec_format(str(path), **args)
    with pytest.raises(InputError, match="token is not valid UTF-8"):
        read_source(path, fmt, ReadOptions())


def test_unicode_errors_ignore_through_the_import(
    tmp_path: Path, data_dir: Path, latin1_rows: tuple[list[str], np.ndarray]
) -> None:
    """Through the import, a token left empty by ignore ('£') is refused as any empty token is, naming its line, and
    dropped with --drop-invalid; a token of another encoding's bytes given --unicode-errors ignore keeps the rest."""
    tokens, matrix = latin1_rows
    path = text_table(tmp_path / "vectors.txt", tokens, matrix, "latin-1", header=True)
    emptied = next(i for i, token in enumerate(tokens) if not token.encode("latin-1").decode("utf-8", "ignore"))
    assert import_fails(path, data_dir, "--unicode-errors", "ignore") == (
        f"embedding-index: error: {path}:{emptied + 2}: an empty token (use --drop-invalid to skip such rows)"
    )
    table = import_ok(path, data_dir, "t", "--unicode-errors", "ignore", "--drop-invalid")
    assert table.tokens.find("caf") is not None and table.tokens.find("café") is None
    assert table.manifest["build"]["unicode_errors"] == "ignore"


def test_unicode_errors_takes_gensims_three_values(tmp_path: Path, data_dir: Path) -> None:
    path = tmp_path / "glove.txt"
    path.write_text("heart 0.1 0.2\n")
    result = run_cli("import", path, "--name", "t", "--data-dir", data_dir, "--unicode-errors", "backslashreplace")
    assert (result.code, result.err) == (
        2,
        "embedding-index: error: --unicode-errors 'backslashreplace': not one of strict, replace, ignore\n",
    )


def test_an_import_of_another_encoding_is_a_table_like_any(
    tmp_path: Path, data_dir: Path, latin1_rows: tuple[list[str], np.ndarray]
) -> None:
    """The same rows from a latin-1 file (--encoding latin-1) and a UTF-8 one make the same table: the same tokens
    and rows, found by the same names."""
    tokens, matrix = latin1_rows
    latin1 = import_ok(
        text_table(tmp_path / "l.txt", tokens, matrix, "latin-1", False), data_dir, "l", "--encoding", "latin-1"
    )
    utf8 = import_ok(text_table(tmp_path / "u.txt", tokens, matrix, "utf-8", False), data_dir, "u")
    assert list(latin1.tokens[: latin1.rows]) == list(utf8.tokens[: utf8.rows])
    assert np.array_equal(np.asarray(latin1.vectors), np.asarray(utf8.vectors))
    assert latin1.tokens.find("zürich") == utf8.tokens.find("zürich") == tokens.index("zürich")
