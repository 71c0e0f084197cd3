"""Passages of a directory of plain-text (``.txt``) and Markdown (``.md``) files.

A paragraph is a run of lines that are not blank; paragraphs are separated by one or more blank lines
(whitespace only). Consecutive paragraphs of a file are joined into one passage while the passage stays within
``chunk_words`` words (words split on whitespace); a paragraph longer than that is a passage of its own. A
passage's text is the file's text from its first paragraph's first character to its last paragraph's last
(the blank lines between them included), so ``text[start:end]`` of the file gives it back exactly. Offsets
count characters of the decoded file (after a UTF-8 byte-order mark, if any); line ends are kept as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from index.errors import InputError

SUFFIXES = (".txt", ".md")
DEFAULT_CHUNK_WORDS = 200
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


def split_passages(text: str, chunk_words: int = DEFAULT_CHUNK_WORDS) -> list[Passage]:
    """Paragraphs joined in order while a passage stays within ``chunk_words`` words."""
    if chunk_words < 1:
        raise ValueError("chunk_words must be at least 1")
    passages: list[Passage] = []
    current: Passage | None = None
    for paragraph in paragraphs(text):
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


def text_files(directory: Path) -> list[Path]:
    """The ``.txt`` and ``.md`` files under ``directory`` (sub-directories too), sorted by relative path."""
    return sorted(
        (p for p in Path(directory).rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES),
        key=lambda p: p.relative_to(directory).as_posix(),
    )


def read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x})", line=line) from None


def passages_table(directory: Path, chunk_words: int = DEFAULT_CHUNK_WORDS) -> pa.Table:
    """One row per passage: ``id`` (``source#chunk``), ``text``, ``source`` (the file's path relative to
    ``directory``), ``chunk`` (the passage's number in its file, from 0), ``start`` and ``end``."""
    directory = Path(directory)
    columns: dict[str, list[object]] = {name: [] for name in ("id", "text", "source", "chunk", "start", "end")}
    for path in text_files(directory):
        text = read_text(path)
        source = path.relative_to(directory).as_posix()
        for chunk, passage in enumerate(split_passages(text, chunk_words)):
            for name, value in zip(
                columns,
                (f"{source}#{chunk}", text[passage.start : passage.end], source, chunk, passage.start, passage.end),
                strict=True,
            ):
                columns[name].append(value)
    types = [pa.string(), pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64()]
    return pa.table({name: pa.array(values, t) for (name, values), t in zip(columns.items(), types, strict=True)})
