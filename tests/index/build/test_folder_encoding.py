"""A folder whose files are not all UTF-8: a real Latin-1 changelog of /usr/share/doc, a cp1252 text, a UTF-8 text
with a byte-order mark, a JPEG. Each file's stored text is what Python's ``open(path, encoding=...)`` reads: UTF-8
when the file is, its byte-order mark's encoding when it has one, else the one --encoding names."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from index.build.passages import UTF8_BOM, read_folder
from index.engine.table import Table
from index.errors import InputError
from tests.cli import REPO, run_cli
from tests.index.build.test_folder_import import HINT, LICENSES


def decompressed(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def latin1_changelog() -> Path:
    """An installed changelog whose non-ASCII lines are all Latin-1 (none UTF-8), such as an author's name."""
    for path in sorted(Path("/usr/share/doc").glob("*/changelog.gz")):
        lines = [line for line in decompressed(path).split(b"\n") if not line.isascii()]
        if b"\0" not in decompressed(path) and lines and not any(_utf8(line) for line in lines):
            return path
    pytest.skip("no Latin-1 changelog in /usr/share/doc")


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    root.mkdir()
    shutil.copyfile(latin1_changelog(), root / "changelog.gz")
    apache = (LICENSES / "Apache-2.0").read_text(encoding="utf-8")
    quoted = apache.replace('"Licensor"', "\u201cLicensor\u201d").replace("--", "\u2013")
    assert quoted != apache
    (root / "windows.txt").write_bytes(quoted.encode("cp1252"))
    marked = "Caf\u00e9 \u2014 na\u00efve.\n\n" + (LICENSES / "BSD").read_text(encoding="utf-8")
    (root / "marked.txt").write_bytes(b"\xef\xbb\xbf" + marked.encode())
    shutil.copyfile(LICENSES / "MIT" if (LICENSES / "MIT").exists() else LICENSES / "BSD", root / "plain.txt")
    (root / "screenshot.jpg").write_bytes((REPO / "docs" / "explorer-map.jpg").read_bytes())
    return root


def python_reads(path: Path, encoding: str) -> str:
    """What Python's open() reads of ``path`` (decompressed first), line ends kept as they are."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding=encoding, newline="") as handle:
        return str(handle.read())


def passages(table: Table) -> list[dict[str, object]]:
    """Each passage's file, text and place in it, as stored."""
    assert table.payload is not None
    columns = {name: table.payload.column(name).to_pylist() for name in ("source", "text", "start", "end")}
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def test_a_file_of_another_encoding_names_its_file_and_line(folder: Path, data_dir: Path) -> None:
    result = run_cli("import", folder, "--name", "t", "--data-dir", data_dir, "--encoder", "small")
    data = decompressed(folder / "changelog.gz")
    bad = next(i for i, line in enumerate(data.split(b"\n"), 1) if not _utf8(line))
    byte = next(b for b in data.split(b"\n")[bad - 1] if b >= 0x80)
    assert (result.code, result.err) == (
        1,
        f"embedding-index: error: {folder / 'changelog.gz'}:{bad}: not UTF-8 text (byte 0x{byte:02x}); {HINT}\n",
    )
    assert not (data_dir / "t").exists()


@pytest.mark.parametrize(("encoding", "codec"), [("latin-1", "iso8859-1"), ("windows-1252", "cp1252")])
def test_encoding_reads_the_files_that_are_not_utf8(folder: Path, data_dir: Path, encoding: str, codec: str) -> None:
    result = run_cli(
        "import", folder, "--name", "t", "--data-dir", data_dir, "--encoder", "small", "--encoding", encoding
    )
    assert result.code == 0, result.err
    table = Table.load(data_dir / "t")
    assert table.manifest["build"]["encoding"] == codec
    source = table.manifest["source"]
    assert source["other_encoding"] == ["changelog.gz", "windows.txt"]
    assert source["skipped"] == [{"path": "screenshot.jpg", "reason": "binary (a NUL byte at offset 4)"}]
    expected = {
        "changelog.gz": python_reads(folder / "changelog.gz", codec),
        "windows.txt": python_reads(folder / "windows.txt", codec),
        "marked.txt": python_reads(folder / "marked.txt", "utf-8-sig"),
        "plain.txt": python_reads(folder / "plain.txt", "utf-8"),
    }
    rows = passages(table)
    assert {row["source"] for row in rows} == set(expected)
    for row in rows:
        assert row["text"] == expected[row["source"]][row["start"] : row["end"]], row["source"]
    windows = "".join(row["text"] for row in rows if row["source"] == "windows.txt")
    assert ("\u201cLicensor\u201d" in windows) == (codec == "cp1252")
    assert "".join(row["text"] for row in rows if row["source"] == "marked.txt").startswith("Caf\u00e9 \u2014 na")


def test_unicode_errors_ignore_leaves_the_bad_bytes_out(folder: Path, data_dir: Path) -> None:
    extra = ("--encoder", "small", "--unicode-errors", "ignore")
    result = run_cli("import", folder, "--name", "t", "--data-dir", data_dir, *extra, quiet=False)
    assert result.code == 0, result.err
    assert (
        "embedding-index: 2 files not UTF-8, read without their bad bytes: changelog.gz, windows.txt"
        in result.err.splitlines()
    )
    table = Table.load(data_dir / "t")
    assert table.manifest["source"]["unicode_replaced"] == ["changelog.gz", "windows.txt"]
    rows = passages(table)
    for row in rows:
        if row["source"] in ("changelog.gz", "windows.txt"):
            text = decompressed(folder / row["source"]).decode("utf-8", "ignore")
            assert row["text"] == text[row["start"] : row["end"]]


def test_a_file_that_mixes_encodings(tmp_path: Path, data_dir: Path) -> None:
    """UTF-8 lines, then a Latin-1 one (a changelog whose later entries were written in another editor): refused at
    the Latin-1 line; with --unicode-errors replace its UTF-8 characters are kept, each Latin-1 byte a U+FFFD; with
    --encoding latin-1 the file is read as Latin-1 whole, as Python reads it, each UTF-8 character then two."""
    root = tmp_path / "mixed"
    root.mkdir()
    utf8 = "Caf\u00e9 cr\u00e8me, written in UTF-8.\n\n" + (LICENSES / "BSD").read_text(encoding="utf-8")
    latin1 = "\nFixed by S\u00f8ren J\u00e9r\u00f4me.\n"
    (root / "mixed.txt").write_bytes(utf8.encode() + latin1.encode("latin-1"))
    line = utf8.count("\n") + 2
    result = run_cli("import", root, "--name", "t", "--data-dir", data_dir, "--encoder", "small")
    assert (result.code, result.err) == (
        1,
        f"embedding-index: error: {root / 'mixed.txt'}:{line}: not UTF-8 text (byte 0xf8); {HINT}\n",
    )
    extra = ("--encoder", "small", "--unicode-errors", "replace")
    result = run_cli("import", root, "--name", "t", "--data-dir", data_dir, *extra, quiet=False)
    assert result.code == 0, result.err
    lines = result.err.splitlines()
    assert "embedding-index: 1 files not UTF-8, read with U+FFFD for their bad bytes: mixed.txt" in lines, lines
    (replaced,) = read_folder(root, unicode_errors="replace").files
    assert replaced.text == utf8 + "\nFixed by S\ufffdren J\ufffdr\ufffdme.\n"
    (latin,) = read_folder(root, encoding="iso8859-1").files
    assert latin.text == python_reads(root / "mixed.txt", "latin-1") and latin.text.startswith("Caf\u00c3\u00a9")


def test_a_byte_the_encoding_does_not_read_either(tmp_path: Path, data_dir: Path) -> None:
    """cp1252 has no character for 0x81: such a file is refused with both encodings named, or skipped."""
    root = tmp_path / "undefined"
    root.mkdir()
    (root / "a.txt").write_bytes(b"first line\nsecond \x81 line\n")
    extra = ("--encoder", "small", "--encoding", "cp1252")
    result = run_cli("import", root, "--name", "t", "--data-dir", data_dir, *extra)
    assert (result.code, result.err) == (
        1,
        f"embedding-index: error: {root / 'a.txt'}:2: not UTF-8 nor cp1252 text (byte 0x81); {HINT}\n",
    )
    assert read_folder(root, "cp1252", drop_invalid=True).skipped == [
        ("a.txt", "not UTF-8 nor cp1252 text (byte 0x81), line 2")
    ]


def test_a_file_whose_byte_order_mark_says_utf8_is_offered_no_other_encoding(tmp_path: Path) -> None:
    """A Latin-1 byte after a UTF-8 byte-order mark: the mark says how the file is read, whatever --encoding says,
    and the refusal offered --encoding all the same, then said the same again with it."""
    (tmp_path / "marked.txt").write_bytes(UTF8_BOM + b"caf\xe9\n")
    for encoding in ("utf-8", "iso8859-1"):
        with pytest.raises(InputError) as caught:
            read_folder(tmp_path, encoding)
        message = str(caught.value)
        assert "not UTF-8 text (byte 0xe9)" in message and "--unicode-errors replace" in message, message
        assert "--encoding" not in message, message
