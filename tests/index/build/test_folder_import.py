"""A folder of real text files imported as passages: licence texts (/usr/share/common-licenses, most without an
extension), package READMEs (/usr/share/doc: plain, Markdown, reStructuredText, gzip-compressed), man pages as
installed (gzip-compressed roff), and beside them a Latin-1 file, a JPEG, an empty file, a hidden file and a
broken link. Files are read by their content; what is skipped is said, with the reason, and recorded. Apart: names
that are not UTF-8, links to folders, a pipe, UTF-16 text, a file on one line."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from index.build.passages import MAX_FILE_BYTES, folder_files, paragraphs, passages_table, read_folder
from index.engine.table import Table
from index.store import artifact
from tests.cli import REPO, run_cli

LICENSES = Path("/usr/share/common-licenses")
MAN = Path("/usr/share/man/man1")
HINT = (  # the ways out of a file the encoding does not read
    "use --encoding NAME for a file in another encoding (such as latin-1), --unicode-errors replace to substitute "
    "U+FFFD, or --drop-invalid to skip such files"
)


def plain_text(path: Path) -> bool:
    """Whether a file is UTF-8 text with something in it, gzip-compressed or not (checked here apart)."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in data and bool(data.strip())


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mixed") / "mixed"
    (root / "licenses").mkdir(parents=True)
    for path in sorted(LICENSES.iterdir()):
        shutil.copyfile(path, root / "licenses" / path.name)
    for path in sorted(Path("/usr/share/doc").glob("*/README*")):
        if path.is_file() and plain_text(path):  # the files skipped here are the ones planted below
            (root / "doc" / path.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, root / "doc" / path.parent.name / path.name)
    (root / "man").mkdir()
    for path in sorted(MAN.glob("*.1.gz"))[:5]:
        shutil.copyfile(path, root / "man" / path.name)
    french = "Licence publique Mozilla, traduction française\n\n" + (LICENSES / "MPL-2.0").read_text()[:2000]
    (root / "latin1.txt").write_bytes(french.encode("latin-1"))
    (root / "screenshot.jpg").write_bytes((REPO / "docs" / "explorer-map.jpg").read_bytes())
    (root / "empty.md").write_text(" \n\n")
    (root / ".notes.txt").write_text("hidden\n")
    (root / "gone.txt").symlink_to(root / "nowhere.txt")
    return root


SKIPPED = {
    ".notes.txt": "hidden file",
    "empty.md": "empty",
    "gone.txt": "not a regular file (a broken link?)",
    "latin1.txt": "not UTF-8 text (byte 0xe7), line 1",
    "screenshot.jpg": "binary (a NUL byte at offset 4)",
}


def expected_sha256(root: Path, sources: list[str]) -> str:
    digest = hashlib.sha256()
    for source in sources:
        digest.update(f"{source}\0{hashlib.sha256((root / source).read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def test_files_are_read_by_their_content(folder: Path) -> None:
    read = read_folder(folder, drop_invalid=True)
    sources = [file.source for file in read.files]
    assert sources == sorted(sources)
    assert dict(read.skipped) == SKIPPED
    licenses = sorted(f"licenses/{p.name}" for p in LICENSES.iterdir())
    assert [s for s in sources if s.startswith("licenses/")] == licenses and "licenses/GPL-3" in licenses
    docs = [s for s in sources if s.startswith("doc/")]
    for kind in (r"/README", ".md", ".gz", ".rst.gz", ".Debian"):  # extension-less, Markdown, compressed
        assert any(s.endswith(kind) for s in docs), kind
    assert len(docs) == sum(1 for p in (folder / "doc").rglob("*") if p.is_file()) > 100
    text = {file.source: file.text for file in read.files}
    for source in [s for s in sources if s.endswith(".gz")]:
        assert text[source] == gzip.decompress((folder / source).read_bytes()).decode("utf-8-sig"), source
    assert text["licenses/GPL-3"] == (LICENSES / "GPL-3").read_text(encoding="utf-8")
    assert read.sha256 == expected_sha256(folder, sources) != hashlib.sha256(b"").hexdigest()
    assert read.source_info()["skipped_reasons"] == {
        "hidden file": 1,
        "empty": 1,
        "not a regular file": 1,
        "not UTF-8 text": 1,
        "binary": 1,
    }


def test_a_file_that_is_not_utf8_stops_the_import_unless_told(folder: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = run_cli("import", folder, "--name", "t", "--data-dir", data)
    assert result.code == 1 and not (data / "t").exists()
    assert result.err.strip() == (
        f"embedding-index: error: {folder / 'latin1.txt'}:1: not UTF-8 text (byte 0xe7); {HINT}"
    )
    replaced = read_folder(folder, unicode_errors="replace")
    assert replaced.replaced == ["latin1.txt"] and "latin1.txt" not in dict(replaced.skipped)
    assert next(f.text for f in replaced.files if f.source == "latin1.txt").startswith(
        "Licence publique Mozilla, traduction fran\ufffdaise"
    )


def test_the_import_says_what_it_skipped_and_records_it(folder: Path, data_dir: Path) -> None:
    done = run_cli(
        "import", folder, "--name", "mixed", "--data-dir", data_dir, "--encoder", "small", "--drop-invalid", quiet=False
    )
    assert done.code == 0, done.err
    read = read_folder(folder, drop_invalid=True)
    assert (
        f"embedding-index: read {len(read.files):,} text files of {folder}; skipped 5: 1 hidden file, 1 empty, "
        "1 not a regular file, 1 not UTF-8 text, 1 binary"
    ) in done.err.splitlines()
    for path, why in SKIPPED.items():
        assert f"embedding-index: skipped {path}: {why}" in done.err.splitlines()
    assert (
        f"files: {len(read.files):,} read, 5 skipped (1 hidden file, 1 empty, 1 not a regular file, "
        "1 not UTF-8 text, 1 binary; each is listed in the manifest's source)"
    ) in done.out.splitlines()
    table = Table.load(data_dir / "mixed")
    source = table.manifest["source"]
    assert source["sha256"] == read.sha256 and source["files_read"] == len(read.files)
    assert source["skipped"] == [{"path": path, "reason": why} for path, why in sorted(SKIPPED.items())]

    assert table.payload is not None
    rows = range(table.rows)
    sources = table.payload.column("source").to_pylist()
    folders = table.payload.column("folder").to_pylist()
    assert folders == [s.rpartition("/")[0] or "." for s in sources]
    licences = table.filter({"folder": "licenses"})
    assert licences.ids.tolist() == [i for i in rows if sources[i].startswith("licenses/")] and len(licences) > 0
    manuals = table.filter({"source": {"prefix": "man/"}})
    assert manuals.ids.tolist() == [i for i in rows if sources[i].startswith("man/")] and len(manuals) > 0
    assert table.filter({"folder": {"prefix": "doc/"}}).ids.tolist() == [
        i for i in rows if folders[i] != "." and folders[i].startswith("doc/")
    ]


def test_the_folder_hash_follows_the_files_read(folder: Path, tmp_path: Path) -> None:
    """The hash is of the files read, with their paths: not of the folder's top level (which holds no file here)."""
    copy = tmp_path / "copy"
    shutil.copytree(folder / "licenses", copy / "licenses")
    first = read_folder(copy).sha256
    assert first == expected_sha256(copy, sorted(f"licenses/{p.name}" for p in LICENSES.iterdir()))
    assert first != hashlib.sha256(b"").hexdigest() and read_folder(copy).sha256 == first
    (copy / "picture.jpg").write_bytes((REPO / "docs" / "explorer.jpg").read_bytes())  # skipped: not hashed
    assert read_folder(copy).sha256 == first
    (copy / "licenses" / "GPL-3").rename(copy / "licenses" / "GPL-3.0")  # the same bytes under another path
    assert read_folder(copy).sha256 != first


def test_a_folder_with_nothing_to_read(tmp_path: Path, data_dir: Path) -> None:
    empty = tmp_path / "pictures"
    empty.mkdir()
    (empty / "a.jpg").write_bytes((REPO / "docs" / "explorer.jpg").read_bytes())
    result = run_cli("import", empty, "--name", "t", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 1
    assert result.err.strip() == (
        f"embedding-index: error: {empty}: no text files in this folder: 1 skipped (first: a.jpg: binary "
        "(a NUL byte at offset 4))"
    )
    assert folder_files(LICENSES / "GPL-3") == ([], [("./", "unreadable folder: Not a directory")])
    big = tmp_path / "big"
    big.mkdir()
    (big / "huge.txt.gz").write_bytes(gzip.compress(b"word " * (MAX_FILE_BYTES // 5 + 1)))
    (big / "broken.gz").write_bytes(gzip.compress(b"some text\n")[:-6])
    assert dict(read_folder(big).skipped) == {
        "huge.txt.gz": f"larger than {MAX_FILE_BYTES >> 20} MiB decompressed",
        "broken.gz": "broken gzip: Compressed file ended before the end-of-stream marker was reached",
    }


def test_the_manifest_of_a_folder_verifies(folder: Path, data_dir: Path) -> None:
    result = run_cli("import", folder, "--name", "m", "--data-dir", data_dir, "--encoder", "small", "--drop-invalid")
    assert result.code == 0, result.err
    assert artifact.verify(data_dir / "m").ok


def test_unicode_errors_replace_reads_the_file(folder: Path, data_dir: Path) -> None:
    extra = ("--encoder", "small", "--drop-invalid", "--unicode-errors", "replace")
    result = run_cli("import", folder, "--name", "r", "--data-dir", data_dir, *extra)
    assert result.code == 0, result.err
    table = Table.load(data_dir / "r")
    source = table.manifest["source"]
    assert source["unicode_replaced"] == ["latin1.txt"] and "latin1.txt" not in {s["path"] for s in source["skipped"]}
    assert table.payload is not None
    first = table.payload.column("source").to_pylist().index("latin1.txt")
    assert table.payload.column("text")[first].as_py().startswith("Licence publique Mozilla, traduction fran\ufffdaise")


def test_a_passage_problem_names_the_file_it_was_cut_from(tmp_path: Path, data_dir: Path) -> None:
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "a.txt").write_text("The heart pumps blood through the body.\n")
    (notes / "sub" / "b.txt").write_text("zzqxvw qqqzzzx wwxxqq\n")  # no word the encoder knows
    result = run_cli("import", notes, "--name", "n", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 1 and "passage 2 (sub/b.txt#0): " in result.err, result.err


def test_a_path_too_long_for_an_id_stops_the_import_unless_told(tmp_path: Path, data_dir: Path) -> None:
    """A file whose relative path makes its passages' ids longer than the API's max_token_chars (ids no route could
    name) stops the import, naming the file; with --drop-invalid its passages are dropped and the rest imported."""
    notes = tmp_path / "notes"
    deep = Path(*["d" * 250] * 4, "e" * 20)  # 1,024 characters: the ids of its file's passages are longer
    (notes / deep).mkdir(parents=True)
    (notes / deep / "a.txt").write_text("The heart pumps blood through the body.\n")
    (notes / "b.txt").write_text("The lungs take in air.\n")
    result = run_cli("import", notes, "--name", "n", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 1, result.err
    assert f"passage 2 ({deep.as_posix()}/a.txt#0): id of 1,032 characters (" in result.err, result.err
    assert not (data_dir / "n").exists()
    result = run_cli("import", notes, "--name", "n", "--data-dir", data_dir, "--encoder", "small", "--drop-invalid")
    assert result.code == 0, result.err
    payload = Table.load(data_dir / "n").payload
    assert payload is not None and payload.column("id").to_pylist() == ["b.txt#0"]


def test_odd_names_and_links_to_folders_are_named_among_the_skipped(tmp_path: Path, data_dir: Path) -> None:
    """A name holding bytes that are not UTF-8 (a Latin-1 name from an old archive) cannot be an id: its file or
    folder is skipped and shown with the bytes escaped; a link to a folder (here a loop back to the top) is not
    entered, and says so; a pipe is not opened. The rest is read, and the import goes on."""
    root = tmp_path / "odd"
    (root / "sub").mkdir(parents=True)
    shutil.copyfile(LICENSES / "GPL-3", root / "sub" / "GPL-3")
    shutil.copyfile(LICENSES / "MPL-2.0", root / os.fsdecode(b"licence-fran\xe7aise.txt"))
    (root / os.fsdecode(b"d\xe9j\xe0")).mkdir()
    shutil.copyfile(LICENSES / "BSD", root / os.fsdecode(b"d\xe9j\xe0") / "BSD")
    (root / "sub" / "loop").symlink_to("..")
    os.mkfifo(root / "pipe")  # opened, it would wait for a writer
    (root / "null").symlink_to("/dev/null")
    skipped = [
        ("d\\xe9j\\xe0/", "name not UTF-8 (byte 0xe9)"),
        ("licence-fran\\xe7aise.txt", "name not UTF-8 (byte 0xe7)"),
        ("null", "not a regular file (a pipe, socket or device)"),
        ("pipe", "not a regular file (a pipe, socket or device)"),
        ("sub/loop/", "link to a folder (not followed)"),
    ]
    read = read_folder(root)
    assert [file.source for file in read.files] == ["sub/GPL-3"] and read.skipped == skipped
    result = run_cli("import", root, "--name", "odd", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 0, result.err
    assert (
        "files: 1 read, 5 skipped (2 name not UTF-8, 2 not a regular file, 1 link to a folder; each is listed in the "
        "manifest's source)" in (result.out.splitlines())
    )
    source = Table.load(data_dir / "odd").manifest["source"]
    assert source["skipped"] == [{"path": path, "reason": why} for path, why in skipped]
    assert source["sha256"] == expected_sha256(root, ["sub/GPL-3"])


def test_control_characters_in_names_are_escaped_where_they_are_named(tmp_path: Path, data_dir: Path) -> None:
    """A name holding a newline, a tab, ESC or CR is shown with them escaped (``\\x0a``), as the bytes of a name
    that is not UTF-8 are: each skipped file is one line on stderr and one plain path in the manifest. A file that
    is read keeps its real name in its passages' ids and ``source``."""
    root = tmp_path / "control"
    (root / "old\rnotes").mkdir(parents=True)
    shutil.copyfile(LICENSES / "GPL-3", root / "GPL\n3.txt")
    (root / "empty\nfile.md").write_text(" \n")
    (root / "tab\there.jpg").write_bytes((REPO / "docs" / "explorer.jpg").read_bytes())
    (root / "old\rnotes" / "\x1b[31mred").write_text("\n")
    skipped = [
        ("empty\\x0afile.md", "empty"),
        ("old\\x0dnotes/\\x1b[31mred", "empty"),
        ("tab\\x09here.jpg", "binary (a NUL byte at offset 4)"),
    ]
    assert read_folder(root).skipped == skipped
    done = run_cli("import", root, "--name", "ctl", "--data-dir", data_dir, "--encoder", "small", quiet=False)
    assert done.code == 0, done.err
    lines = done.err.splitlines()
    assert f"embedding-index: read 1 text files of {root}; skipped 3: 2 empty, 1 binary" in lines
    for path, why in skipped:
        assert f"embedding-index: skipped {path}: {why}" in lines
    table = Table.load(data_dir / "ctl")
    assert table.manifest["source"]["skipped"] == [{"path": path, "reason": why} for path, why in skipped]
    assert table.payload is not None
    assert set(table.payload.column("source").to_pylist()) == {"GPL\n3.txt"}
    assert table.payload.column("id")[0].as_py() == "GPL\n3.txt#0"
    (root / "latin\t1.txt").write_bytes("fran\u00e7aise\n".encode("latin-1"))
    result = run_cli("import", root, "--name", "bad", "--data-dir", data_dir)
    assert result.code == 1 and result.err.strip() == (
        f"embedding-index: error: {root}/latin\\x091.txt:1: not UTF-8 text (byte 0xe7); {HINT}"
    )


def test_utf16_text_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    """What Windows editors and shells write as "Unicode": UTF-16 with a byte-order mark, little- or big-endian,
    compressed or not. Its passages are those of the same text in UTF-8; a mark alone is an empty file."""
    text = (LICENSES / "Apache-2.0").read_text(encoding="utf-8")
    assert text.endswith("\n")
    root = tmp_path / "windows"
    root.mkdir()
    (root / "utf8.txt").write_text(text, encoding="utf-8")
    (root / "le.txt").write_bytes(text.encode("utf-16-le").join([b"\xff\xfe", b""]))
    (root / "be.txt").write_bytes(text.encode("utf-16-be").join([b"\xfe\xff", b""]))
    (root / "le.txt.gz").write_bytes(gzip.compress((root / "le.txt").read_bytes()))
    (root / "mark-only.txt").write_bytes(b"\xef\xbb\xbf\r\n")
    (root / "cut.txt").write_bytes((root / "le.txt").read_bytes()[:-1])  # an odd number of bytes
    read = read_folder(root, drop_invalid=True)
    assert [file.source for file in read.files] == ["be.txt", "le.txt", "le.txt.gz", "utf8.txt"]
    assert all(file.text == text for file in read.files)
    assert read.skipped == [
        # the last character cut in half: the newline ending the last line
        ("cut.txt", f"not UTF-16 text (truncated data at byte {len(text) * 2:,}), line {text.count(chr(10))}"),
        ("mark-only.txt", "empty"),
    ]
    rows = passages_table(read).to_pylist()
    by_file: dict[str, list[tuple[object, ...]]] = {}
    for row in rows:
        by_file.setdefault(row["source"], []).append((row["chunk"], row["start"], row["end"], row["text"]))
    assert by_file["le.txt"] == by_file["be.txt"] == by_file["le.txt.gz"] == by_file["utf8.txt"] != []


def test_a_bad_byte_after_a_utf8_mark_is_named(tmp_path: Path) -> None:
    """The byte and line named are the bad ones, counted after the byte-order mark; --encoding, which a file with a
    mark does not take, is not offered."""
    root = tmp_path / "marked"
    root.mkdir()
    french = "Licence publique Mozilla\n\ntraduction française\n" + (LICENSES / "MPL-2.0").read_text()[:500]
    (root / "notes.txt").write_bytes(b"\xef\xbb\xbf" + french.encode("latin-1"))
    result = run_cli("import", root, "--name", "t", "--data-dir", tmp_path / "data")
    assert result.code == 1 and not (tmp_path / "data" / "t").exists()
    marked_hint = "use --unicode-errors replace to substitute U+FFFD or --drop-invalid to skip such files"
    assert (
        result.err.strip()
        == f"embedding-index: error: {root / 'notes.txt'}:3: not UTF-8 text (byte 0xe7); {marked_hint}"
    )


def test_a_file_on_one_line_is_cut_into_passages_of_chunk_words(tmp_path: Path, data_dir: Path) -> None:
    """A text without line breaks (the GPL as one line, as an editor that wraps nothing saves it) is one paragraph of
    5,644 words: beyond 1,000 words it is cut at whitespace into passages of --chunk-words words, not kept as one
    passage of the whole file."""
    root = tmp_path / "long"
    root.mkdir()
    words = (LICENSES / "GPL-3").read_text(encoding="utf-8").split()
    line = " ".join(words)
    (root / "GPL-3.txt").write_text(line, encoding="utf-8")
    result = run_cli(
        "import", root, "--name", "long", "--data-dir", data_dir, "--encoder", "small", "--chunk-words", 150
    )
    assert result.code == 0, result.err
    table = Table.load(data_dir / "long")
    assert table.payload is not None
    columns = {name: table.payload.column(name).to_pylist() for name in ("text", "chunk", "start", "end")}
    rows = [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]
    assert len(rows) == -(-len(words) // 150) > 30
    assert [row["chunk"] for row in rows] == list(range(len(rows)))
    assert all(line[row["start"] : row["end"]] == row["text"] for row in rows)
    assert [row["text"].split() for row in rows] == [words[i : i + 150] for i in range(0, len(words), 150)]
    # A paragraph of prose stays whole: the GFDL's longest, 480 words, is a passage of its own at 150.
    prose = tmp_path / "prose"
    prose.mkdir()
    shutil.copyfile(LICENSES / "GFDL-1.3", prose / "GFDL-1.3")
    longest = max(len(row["text"].split()) for row in passages_table(prose, 150).to_pylist())
    assert longest == max(p.words for p in paragraphs((LICENSES / "GFDL-1.3").read_text())) == 480


def test_a_folder_whose_own_name_is_not_utf8(tmp_path: Path, data_dir: Path) -> None:
    """The folder given may have such a name too: the manifest (UTF-8 JSON) records its path with the byte escaped."""
    root = tmp_path / os.fsdecode(b"licences-fran\xe7aises")
    root.mkdir()
    shutil.copyfile(LICENSES / "BSD", root / "BSD")
    result = run_cli("import", root, "--name", "named", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 0, result.err
    assert Table.load(data_dir / "named").manifest["source"]["path"] == f"{tmp_path}/licences-fran\\xe7aises"
    assert artifact.verify(data_dir / "named").ok
