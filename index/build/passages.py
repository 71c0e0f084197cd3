"""Passages of a folder of text files: any file whose content is text (not its name), ``.gz`` decompressed.

**Which files.** Every file under the folder (sub-folders too, links to files followed; hidden files and folders,
links to folders and names that are not UTF-8 left out, and listed), in the order of their relative paths. A file is
read when its content is text: gzip-compressed files are decompressed first (their magic bytes, not their name, say
so), and then a file is text when it holds no NUL byte and is UTF-8 (a byte-order mark is skipped), is UTF-16
after its byte-order mark, or is of the encoding ``--encoding`` names. The others are skipped, each with its reason
(binary, empty, larger than :data:`MAX_FILE_BYTES`, a broken gzip stream, unreadable); a file that is none of these
stops the import, naming its line, unless ``--drop-invalid`` skips it or ``--unicode-errors`` reads it with U+FFFD
for its bad bytes (``replace``) or without them (``ignore``).
:class:`Folder` keeps what was read, what was skipped and why, and the folder's sha256 (of the files read, with
their relative paths).

**Passages.** A paragraph is a run of lines that are not blank; paragraphs are separated by one or more blank lines
(whitespace only). Consecutive paragraphs of a file are joined into one passage while the passage stays within
``chunk_words`` words (words split on whitespace); a paragraph longer than that is a passage of its own, up to
:data:`LONG_PARAGRAPH_WORDS` words: a longer one is cut at whitespace into passages of ``chunk_words`` words (the
last one may be shorter, and joined to what follows). A passage's text is the file's text from its first paragraph's
(or piece's) first character to its last one's last (the blank lines between them included), so ``text[start:end]``
of the file gives it back exactly. Offsets count characters of the decoded file (after its byte-order mark, if any,
and after decompression); line ends are kept as they are.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from index.build.sources import ways_out
from index.errors import InputError
from index.progress import Progress, note

DEFAULT_CHUNK_WORDS = 200
LONG_PARAGRAPH_WORDS = 1000  # a longer paragraph (than this and chunk_words) is cut into passages of chunk_words
MAX_FILE_BYTES = 64 << 20  # a file's text (decompressed) read at most
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # little- and big-endian
SHOWN_SKIPPED = 20  # the skipped files named on stderr (the manifest lists them all, up to MAX_LISTED)
MAX_LISTED = 1000
TOP = "."  # the folder field of the files at the top of the folder
PARAGRAPH = re.compile(r"^[^\S\n]*\S.*(?:\n[^\S\n]*\S.*)*", re.MULTILINE)  # lines holding something, in a row


@dataclass(frozen=True)
class Passage:
    start: int  # character offsets into the file's text, end exclusive
    end: int
    words: int


def paragraphs(text: str) -> list[Passage]:
    """The paragraphs of ``text``, their surrounding whitespace left out."""
    found = []
    for match in PARAGRAPH.finditer(text):
        body = match.group()
        start = match.start() + len(body) - len(body.lstrip())
        end = match.end() - (len(body) - len(body.rstrip()))
        found.append(Passage(start, end, len(body.split())))
    return found


def pieces(text: str, paragraph: Passage, chunk_words: int) -> list[Passage]:
    """``paragraph`` of ``text`` whole, or, when it is longer than :data:`LONG_PARAGRAPH_WORDS` and ``chunk_words``,
    cut at whitespace into runs of ``chunk_words`` words (the last one may be shorter): such a "paragraph" is a
    file without blank lines (a man page's roff, a text on one line, PostScript, JSON), which no passage should
    hold whole."""
    if paragraph.words <= max(chunk_words, LONG_PARAGRAPH_WORDS):
        return [paragraph]
    run = re.compile(rf"\S+(?:\s+\S+){{0,{chunk_words - 1}}}")
    found = [Passage(m.start(), m.end(), chunk_words) for m in run.finditer(text, paragraph.start, paragraph.end)]
    last = found[-1]
    found[-1] = Passage(last.start, last.end, paragraph.words - chunk_words * (len(found) - 1))
    return found


def split_passages(text: str, chunk_words: int = DEFAULT_CHUNK_WORDS) -> list[Passage]:
    """Paragraphs joined in order while a passage stays within ``chunk_words`` words; a longer paragraph is a passage
    of its own, unless it is cut (:func:`pieces`)."""
    if chunk_words < 1:
        raise ValueError("chunk_words must be at least 1")
    passages: list[Passage] = []
    current: Passage | None = None
    for paragraph in (piece for whole in paragraphs(text) for piece in pieces(text, whole, chunk_words)):
        if current is not None and current.words + paragraph.words > chunk_words:
            passages.append(current)
            current = None
        if current is None:
            current = paragraph
        else:
            current = Passage(current.start, paragraph.end, current.words + paragraph.words)
    if current is not None:
        passages.append(current)
    return passages


@dataclass(frozen=True)
class TextFile:
    source: str  # the path relative to the folder (POSIX)
    text: str


@dataclass
class Folder:
    """A folder's text files as the import reads them, and the files it skipped, with the reason."""

    directory: Path
    files: list[TextFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)
    encoded: list[str] = field(default_factory=list)  # not UTF-8: read in ``encoding``
    # the files read with U+FFFD for the bytes ``encoding`` does not read, or without them (``unicode_errors``)
    replaced: list[str] = field(default_factory=list)
    encoding: str = "utf-8"  # of the files that are not UTF-8 (``--encoding``)
    unicode_errors: str = "strict"
    sha256: str = ""  # of the files read: each one's relative path and the sha256 of its bytes, in order

    def source_info(self) -> dict[str, Any]:
        """What the manifest's ``source`` records: the files read, and the skipped ones with the reason."""
        info: dict[str, Any] = {"sha256": self.sha256, "files_read": len(self.files)}
        info["files_skipped"] = len(self.skipped)
        info["skipped_reasons"] = self.reasons()
        info["skipped"] = [{"path": path, "reason": why} for path, why in self.skipped[:MAX_LISTED]]
        if self.encoded:
            info["other_encoding"] = self.encoded[:MAX_LISTED]
        if self.replaced:
            info["unicode_replaced"] = self.replaced[:MAX_LISTED]
        return info

    def reasons(self) -> dict[str, int]:
        """How many files were skipped for each kind of reason (``binary``, ``empty``, ...)."""
        reasons: dict[str, int] = {}
        for _, why in self.skipped:
            kind = why.split(" (")[0].split(":")[0].split(",")[0]
            reasons[kind] = reasons.get(kind, 0) + 1
        return reasons

    def report(self) -> None:
        """A line for what was read and skipped, then a line for each skipped file (the first ones), and the files
        read in another encoding than UTF-8 or without some of their bytes."""
        read = f"read {len(self.files):,} text files of {path_text(self.directory)}"
        if self.skipped:
            summary = ", ".join(f"{count:,} {kind}" for kind, count in self.reasons().items())
            read += f"; skipped {len(self.skipped):,}: {summary}"
        note(read)
        for path, why in self.skipped[:SHOWN_SKIPPED]:
            note(f"skipped {path}: {why}")
        if len(self.skipped) > SHOWN_SKIPPED:
            note(f"... and {len(self.skipped) - SHOWN_SKIPPED:,} more skipped (the manifest's source lists them)")
        if self.encoded:
            note(f"{len(self.encoded):,} files not UTF-8, read as {self.encoding}: {_first(self.encoded)}")
        if self.replaced:
            codec = "UTF-8" if self.encoding == "utf-8" else f"UTF-8 nor {self.encoding}"
            how = "with U+FFFD for" if self.unicode_errors == "replace" else "without"
            note(f"{len(self.replaced):,} files not {codec}, read {how} their bad bytes: {_first(self.replaced)}")


def _first(paths: list[str], shown: int = 3) -> str:
    """The first ``shown`` of ``paths``, and ``...`` when there are more (the manifest's source lists them)."""
    return ", ".join(paths[:shown] + (["..."] if len(paths) > shown else []))


def folder_files(directory: Path) -> tuple[list[tuple[str, Path]], list[tuple[str, str]]]:
    """Every file under ``directory`` as (relative path, path), sorted by relative path; and the hidden files and
    folders, the links to folders (not followed: a folder is read once), the names that are not UTF-8 and the
    broken links, skipped."""
    found: list[tuple[str, Path]] = []
    skipped: list[tuple[str, str]] = []

    def unreadable(error: OSError) -> None:
        place = Path(error.filename or directory).relative_to(directory).as_posix()
        skipped.append((path_text(place) + "/", f"unreadable folder: {error.strerror or error}"))

    for root, folders, names in os.walk(directory, onerror=unreadable):
        here = Path(root)
        entered = []
        for name in folders:
            path = here / name
            why = _not_entered(name, path)
            if why:
                skipped.append((path_text(path.relative_to(directory).as_posix()) + "/", why))
            else:
                entered.append(name)
        folders[:] = entered
        for name in names:
            path = here / name
            relative = path.relative_to(directory).as_posix()
            if name.startswith("."):
                skipped.append((path_text(relative), "hidden file"))
            elif problem := bad_name(name):
                skipped.append((path_text(relative), f"name not UTF-8 ({problem})"))
            elif not path.is_file():
                # a link to nothing (or a loop of links); or a pipe, socket or device (or a link to one)
                what = "a pipe, socket or device" if path.exists() else "a broken link?"
                skipped.append((path_text(relative), f"not a regular file ({what})"))
            else:
                found.append((relative, path))
    found.sort(key=lambda item: item[0])
    skipped.sort()
    return found, skipped


def bad_name(name: str) -> str:
    """The first byte of a file name that is not UTF-8 (``byte 0xe9``), or ``""``: os.walk keeps such bytes as
    surrogates, which no id, Arrow string or manifest can hold."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"byte 0x{os.fsencode(name[exc.start])[0]:02x}"
    return ""


# control characters (a newline, a tab, ESC, CR; DEL; C1) as escapes, so that a name stays one plain line
CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F)} | {
    code: f"\\u{code:04x}" for code in range(0x80, 0xA0)
}


def path_text(path: str | Path) -> str:
    """A path as the report and the manifest (UTF-8 JSON) show it: bytes of a name that are not UTF-8 as ``\\xe9``,
    control characters as ``\\x0a`` (a newline), ``\\x1b`` (ESC), ``\\u009b``. A file that is read keeps its real
    name in its passages' ids and ``source``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace").translate(CONTROLS)


def _not_entered(name: str, path: Path) -> str:
    """Why a sub-folder is not entered (``""`` when it is)."""
    if name.startswith("."):
        return "hidden folder"
    if path.is_symlink():
        return "link to a folder (not followed)"
    problem = bad_name(name)
    return f"name not UTF-8 ({problem})" if problem else ""


def _content(path: Path) -> tuple[bytes, bytes] | str:
    """(the file's bytes, its text's bytes: decompressed if gzip), or why it is not read."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    if len(raw) > MAX_FILE_BYTES:
        return f"larger than {MAX_FILE_BYTES >> 20} MiB"
    data = raw
    if raw.startswith(GZIP_MAGIC):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
                data = stream.read(MAX_FILE_BYTES + 1)
        except (OSError, EOFError, zlib.error) as exc:
            return f"broken gzip: {exc}"
        if len(data) > MAX_FILE_BYTES:
            return f"larger than {MAX_FILE_BYTES >> 20} MiB decompressed"
    if not data.strip():
        return "empty"
    nul = -1 if data.startswith(UTF16_BOMS) else data.find(b"\0")  # UTF-16's NUL bytes are half its characters
    if nul >= 0:
        return f"binary (a NUL byte at offset {nul:,})"
    return raw, data


def _encoded(data: bytes, encoding: str) -> tuple[bytes, str, str | None]:
    """A file's text bytes, their encoding, and their text when telling the encoding decoded it (else None): UTF-16
    with its byte-order mark (which the codec reads), UTF-8 after its byte-order mark (left out, so that a bad byte's
    offset counts from the file's first byte after it), else UTF-8 when they are, else ``encoding`` (a codec's name,
    as ``text_codec`` gives it)."""
    if data.startswith(UTF16_BOMS):
        return data, "UTF-16", None
    if data.startswith(UTF8_BOM) or encoding == "utf-8":
        return data.removeprefix(UTF8_BOM), "UTF-8", None
    try:
        return data, "UTF-8", data.decode("utf-8")
    except UnicodeDecodeError:
        return data, encoding, None


def _problem(data: bytes, encoding: str, exc: UnicodeDecodeError) -> tuple[str, int]:
    """What is wrong with the text, and its line."""
    line = data[: exc.start].decode(encoding, "replace").count("\n") + 1
    if encoding == "UTF-16":
        return f"not UTF-16 text ({exc.reason} at byte {exc.start:,})", line
    codec = "UTF-8" if encoding == "UTF-8" else f"UTF-8 nor {encoding}"
    return f"not {codec} text (byte 0x{data[exc.start]:02x})", line


def _nul(text: str) -> str:
    """Why a decoded text is binary after all (a NUL character in it), or ``""``."""
    nul = text.find("\0")
    return f"binary (a NUL character at {nul:,})" if nul >= 0 else ""


def read_folder(
    directory: Path, encoding: str = "utf-8", unicode_errors: str = "strict", drop_invalid: bool = False
) -> Folder:
    """The text files of ``directory`` (see the module's docstring), those that are not UTF-8 read in ``encoding``; a
    file that it does not read either is an InputError naming its line, unless ``drop_invalid`` skips it or
    ``unicode_errors`` (``replace``, ``ignore``) says what its bad bytes become."""
    directory = Path(directory)
    paths, skipped = folder_files(directory)
    folder = Folder(directory, skipped=skipped)
    digest = hashlib.sha256()
    with Progress(
        f"reading the files of {path_text(directory.name or directory)}", len(paths), unit="files"
    ) as progress:
        for relative, path in paths:
            progress.advance(1)
            content = _content(path)
            if isinstance(content, str):
                folder.skipped.append((path_text(relative), content))
                continue
            raw, data = content
            marked = data.startswith((UTF8_BOM, *UTF16_BOMS))  # read in its mark's encoding, whatever --encoding says
            data, codec, text = _encoded(data, encoding)
            try:
                text = data.decode(codec) if text is None else text
            except UnicodeDecodeError as exc:
                problem, line = _problem(data, codec, exc)
                if unicode_errors != "strict":
                    text = data.decode(codec, unicode_errors)
                    folder.replaced.append(path_text(relative))
                elif drop_invalid:
                    folder.skipped.append((path_text(relative), f"{problem}, line {line}"))
                    continue
                else:
                    hint = ways_out("files", another_encoding=not marked)
                    raise InputError(path_text(path), f"{problem}; {hint}", line=line) from None
            why = "empty" if not text.strip() else _nul(text)  # a byte-order mark alone; UTF-32 read as UTF-16
            if why:
                folder.skipped.append((path_text(relative), why))
                continue
            if codec not in ("UTF-8", "UTF-16"):
                folder.encoded.append(path_text(relative))
            folder.files.append(TextFile(relative, text))
            digest.update(f"{relative}\0{hashlib.sha256(raw).hexdigest()}\n".encode())
    folder.skipped.sort()
    folder.sha256 = digest.hexdigest()
    folder.encoding, folder.unicode_errors = encoding, unicode_errors
    return folder


def folder_of(source: str) -> str:
    """The sub-folder a file's relative path is in (``.`` at the top)."""
    parent = source.rpartition("/")[0]
    return parent or TOP


def passages_table(directory: Path | Folder, chunk_words: int = DEFAULT_CHUNK_WORDS) -> pa.Table:
    """One row per passage: ``id`` (``source#chunk``), ``text``, ``source`` (the file's path relative to the
    folder), ``folder`` (its sub-folder, ``.`` at the top), ``chunk`` (the passage's number in its file, from 0),
    ``start`` and ``end``."""
    folder = directory if isinstance(directory, Folder) else read_folder(Path(directory))
    names = ("id", "text", "source", "folder", "chunk", "start", "end")
    columns: dict[str, list[object]] = {name: [] for name in names}
    for file in folder.files:
        text, source = file.text, file.source
        place = folder_of(source)
        for chunk, passage in enumerate(split_passages(text, chunk_words)):
            values = (f"{source}#{chunk}", text[passage.start : passage.end], source, place, chunk)
            for name, value in zip(names, (*values, passage.start, passage.end), strict=True):
                columns[name].append(value)
    types = [pa.string()] * 4 + [pa.int64()] * 3
    return pa.table({name: pa.array(values, t) for (name, values), t in zip(columns.items(), types, strict=True)})
