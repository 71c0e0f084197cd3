"""The write log of a table: ``<data-dir>/.writes/<name>.log``, beside the table's immutable version directory
(``.writes`` is no table's name, so no table can collide with a log).

A record is one frame: a two-byte mark, the payload's length (u32), the sequence number (u64), a CRC32 of the
sequence number and payload (u32), then the payload (UTF-8 JSON: an upsert or a delete, never pickle, naming
the log it was written to: ``table``, as :func:`log_owner` names it; a log copied or restored under another table's
name is refused, :class:`LogMismatch`, rather than replayed into the wrong table). Frames
are appended under an exclusive ``flock`` and fsynced before the write is answered; readers take a shared lock,
so a frame is never read half written. Sequence numbers rise by one from the sequence the table's version
covers (its manifest's ``log_sequence``, 0 for an imported table).

At load and in a compaction :func:`recover_pieces` reads the whole log, a piece at a time: a torn or corrupt tail
(no good frame after the bad bytes: a write cut short by a crash) is cut at the last good record, with a warning
naming the bytes lost; a bad frame with good frames after it is corruption in the middle, and the table is refused
(:class:`LogCorrupt`) naming the record, since replaying past it would lose acknowledged writes silently; so is a
whole, checksummed frame out of sequence, even last, by every reader alike (it may hold a write acknowledged to
another copy of the log). A whole, checksummed frame whose payload is no JSON object holds no write (a server
writes JSON objects): it is damage as a torn frame is, a tail when no good frame follows it, which the load's
check, a compaction's cut and a writer cut, and the readers that cut nothing leave unread. A record whose ``op``
is no write this release knows (a newer release's log) is refused as damage in the middle is, last or not. The log
is locked while its frames are checked (their payloads not parsed, but for the last ones) and such a tail is cut,
not while its records are parsed and applied, so that another process's write waits for the check alone.

A compaction cuts the log (:func:`cut`): the records its new version holds are dropped, the later ones move to a
new file renamed over the log. The file it replaced stays as ``.<name>.log.previous`` until the next cut, so a
reader still on the older version reads the records it had not read yet before it reads the new file; a record
that finds the disk full empties it first (:func:`empty_replaced`), as does the next cut.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import struct
import threading
import zlib
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from index.errors import ArtifactError, InvalidQuery, UnknownTable, counted
from index.store import artifact, shardmap
from index.store.payload import BOOLEAN, FLOAT, INTEGER, KIND, STRING, STRING_LIST, TIMESTAMP

log = logging.getLogger(__name__)

DIRECTORY = ".writes"
SUFFIX = ".log"
MARK = b"\xe5\x1f"
HEADER = struct.Struct("<2sIQI")  # mark, payload length, sequence number, crc32(sequence + payload)
MAX_RECORD = 256 << 20  # a frame claiming more is corrupt; a write of more is refused (bodies are limited far below)
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)  # a full disk, a quota reached
READ_BYTES = 4 << 20  # a log is read this much at a time (more for one longer record): what reading it holds
# A number of 19 digits or more: an integer orjson may read as a float (beyond 64 bits), which json reads exactly
LONG_INTEGER = re.compile(rb"[\[,:]\s*-?[1-9][0-9]{18}")


class LogCorrupt(ArtifactError):
    """A record in the middle of a table's log is damaged: the table is not served until it is repaired."""

    def __init__(self, message: str, at: int | None = None) -> None:
        super().__init__(message)
        self.at = at  # the byte the damaged record starts at, when a scan found it (None: not said)


class LogMismatch(ArtifactError):
    """A table's log does not fit its version: a record of another schema (the table was imported again over writes
    to the one before), or writes missing between the version and the log (an older version restored over it)."""


class LogWriteFailed(ArtifactError):
    """A record could not be written (a full disk, a file size limit): nothing of it is left in the log."""


class LogReplaced(ArtifactError):
    """The log file :func:`read_pieces` read was emptied under it, its records not all read: a compaction's cut
    replaced it, then a second cut or a write on a full disk (:func:`empty_replaced`) emptied it."""


@dataclass(frozen=True)
class Record:
    seq: int
    offset: int  # where its frame starts
    end: int  # where the next frame starts
    body: dict[str, Any]


def log_path(data_dir: Path, name: str) -> Path:
    return Path(data_dir) / DIRECTORY / f"{artifact.check_name(name)}{SUFFIX}"


# How long a compaction waits for another of the same table to let its lock go, by default (``compact --wait``, and
# the server's background compaction): a large table's compaction takes minutes on a busy machine. At most a day: a
# wait said in seconds (an infinite one cannot be said, nor counted down).
COMPACTION_WAIT_SECONDS = 600.0
MAX_COMPACTION_WAIT_SECONDS = 86400.0


def compaction_lock(data_dir: Path, name: str) -> Path:
    """The file table ``name``'s compactions lock, one at a time (``index.build.compact.locked``), beside its log:
    ``<data-dir>/.writes/<name>.compacting``; it holds the process id of the compaction holding it."""
    return log_path(data_dir, name).with_suffix(".compacting")


def remove_logs(data_dir: Path, name: str) -> None:
    """Delete a table's write log and the file its last cut replaced; a sharded table's: its shards'. The replaced
    files go first: stopped midway, this never leaves one without its log (a reader that has read no log reads the
    replaced file whole)."""
    path = log_path(data_dir, name)
    shards = path.with_suffix("")
    for previous in [previous_path(path), *shards.glob(f".*{SUFFIX}.previous")]:
        previous.unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    shutil.rmtree(shards, ignore_errors=True)


def table_log(directory: Path) -> Path:
    """The log of the table loaded from ``directory``: ``<data-dir>/.writes/<name>.log``; for a shard of a sharded
    table (a directory inside the table's), ``<data-dir>/.writes/<table>/<shard>.log``, outside every version and
    the same file whether one server loads the whole table or a shard's server loads the shard alone."""
    directory = Path(directory)
    parent = directory.parent
    if shardmap.holds_sharded(parent):
        artifact.check_name(parent.name)
        return parent.parent / DIRECTORY / parent.name / f"{artifact.check_name(directory.name)}{SUFFIX}"
    return log_path(parent, directory.name)


def log_owner(path: Path) -> str:
    """Whose log ``path`` is, as its records name it: the table's name (``lee``), a shard's log its table's and its
    own (``lee/shard-001``); the file a cut replaced (:func:`previous_path`) is its log's."""
    path = Path(path)
    name = path.name.removeprefix(".").removesuffix(".previous") if path.name.endswith(".previous") else path.name
    stem = name.removesuffix(SUFFIX)
    return stem if path.parent.name == DIRECTORY else f"{path.parent.name}/{stem}"


@dataclass(frozen=True)
class Shape:
    """What the upserts of a documents table's log must fit: its dimension, id type, text and field types."""

    dim: int
    id_type: str
    text: bool
    fields: dict[str, str]

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> Shape:
        info = manifest[KIND]
        fields = {name: field["type"] for name, field in info["fields"].items()}
        return cls(int(manifest["dim"]), info["id_type"], bool(info.get("text_field")), fields)


_FITS: dict[str, Any] = {  # a field value as the log keeps it, by field type (None fits every type)
    STRING: lambda v: isinstance(v, str),
    INTEGER: lambda v: isinstance(v, int) and not isinstance(v, bool),
    FLOAT: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    BOOLEAN: lambda v: isinstance(v, bool),
    TIMESTAMP: lambda v: isinstance(v, str),
    STRING_LIST: lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
}


def misfit(body: dict[str, Any], shape: Shape) -> str | None:
    """Why the record ``body`` cannot be applied to a table of ``shape`` (None: it can). A delete always can."""
    if body.get("op") != "upsert":
        return None
    want_id = _FITS[INTEGER] if shape.id_type == INTEGER else _FITS[STRING]
    for document in body.get("documents", []):
        ident = document.get("id")
        vector, fields = document.get("vector"), document.get("fields") or {}
        if not want_id(ident):
            return f"document id {ident!r} is not of the table's id type ({shape.id_type})"
        if not isinstance(vector, list) or len(vector) != shape.dim:
            shown = counted(len(vector), "value") if isinstance(vector, list) else "no values"
            return f"document {ident!r} has a vector of {shown}; the table's have {shape.dim}"
        if document.get("text") is not None and not shape.text:
            return f"document {ident!r} has text; the table keeps none"
        for name, value in fields.items():
            kind = shape.fields.get(name)
            if kind is None:
                return f"document {ident!r} has field {name!r}, which the table does not have"
            if value is not None and not _FITS[kind](value):
                return f"document {ident!r}: field {name!r} holds {repr(value)[:40]}, not of type {kind}"
    return None


def first_misfit(records: list[Record], shape: Shape) -> tuple[Record, str] | None:
    """The first of ``records`` that a table of ``shape`` cannot apply, and why (None: every one fits)."""
    for record in records:
        problem = misfit(record.body, shape)
        if problem is not None:
            return record, problem
    return None


def check_reimport(data_dir: Path, name: str, new: Path) -> None:
    """Before the table at ``new`` is published over table ``name`` (an import with ``--force``): the writes its log
    holds beyond the replaced version are replayed over the new one, so each must fit it (id type, dimension, field
    types); else :class:`LogMismatch` names the first that does not, and nothing is replaced. An import from a whole
    table to shards, or from shards to a whole table or to shards again, replays no log: it is refused while the
    replaced table's logs hold writes beyond its version, which it would drop."""
    manifest = artifact.read_manifest(new)
    final = artifact.table_dir(data_dir, name)
    if "log_sequence" in manifest:  # a compaction's version, which holds its log's writes
        return
    try:
        old = artifact.read_manifest(final)
    except (UnknownTable, ArtifactError):  # the name holds no table, or a damaged one: nothing is continued
        return
    if shardmap.is_sharded(manifest) or shardmap.is_sharded(old):
        found = _unfolded(data_dir, name, final, old)
        if found is not None:
            log_name, seq = found
            how = "as shards" if shardmap.is_sharded(manifest) else "over a sharded table"
            raise LogMismatch(
                f"table {name!r} not replaced: its write log {log_name} holds writes made since its version (the "
                f"first: sequence {seq}), which an import {how} does not replay; compact first (`embedding-index "
                f"compact {name}`) to fold them into the version this import replaces, or remove the table "
                f"(`embedding-index remove {name}`)"
            )
        return
    if manifest.get("kind") != KIND:
        return
    covered, shape = int(old.get("log_sequence", 0)), Shape.of(manifest)
    with contextlib.closing(read_pieces(log_path(data_dir, name))) as pieces:
        found_misfit = next(
            filter(None, (first_misfit([r for r in p if r.seq > covered], shape) for p in pieces)), None
        )
    if found_misfit is not None:
        record, problem = found_misfit
        raise LogMismatch(
            f"table {name!r} not replaced: its write log holds writes the new import cannot take (sequence "
            f"{record.seq}: {problem}); compact first (`embedding-index compact {name}`) to fold them into the "
            f"version this import replaces, or remove the table (`embedding-index remove {name}`)"
        )


def _unfolded(data_dir: Path, name: str, directory: Path, manifest: dict[str, Any]) -> tuple[str, int] | None:
    """The first write beyond its version in the log of documents table ``name`` (at ``directory``, of
    ``manifest``), or of any of its shards: (the log, its sequence number); None when there is none."""
    if shardmap.is_sharded(manifest):
        if manifest.get("of") != KIND:
            return None
        names = list(manifest["shards"]["names"])
        logs = [(table_log(directory / shard), directory / shard) for shard in names]
        covered = [int(artifact.read_manifest(shard).get("log_sequence", 0)) for _, shard in logs]
        paths = [path for path, _ in logs]
    elif manifest.get("kind") == KIND:
        paths, covered = [log_path(data_dir, name)], [int(manifest.get("log_sequence", 0))]
    else:
        return None
    for path, sequence in zip(paths, covered, strict=True):
        with contextlib.closing(read_pieces(path)) as pieces:
            later = next((r.seq for records in pieces for r in records if r.seq > sequence), None)
        if later is not None:
            return f"{log_owner(path)}{SUFFIX}", later
    return None


def frame(seq: int, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    seq_bytes = struct.pack("<Q", seq)
    return HEADER.pack(MARK, len(payload), seq, zlib.crc32(seq_bytes + payload)) + payload


def _parse(data: bytes | memoryview, at: int, previous: int, base: int = 0, body: bool = True) -> Record | str:
    """The record whose frame starts at ``at``, or why there is none (incomplete, bad mark, checksum...);
    ``data`` read from byte ``base`` of its file: the record's offsets are the file's. Without ``body`` the frame
    alone is checked, its payload not parsed (the record's body is empty)."""
    if len(data) - at < HEADER.size:
        return f"{len(data) - at} bytes, shorter than a record header"
    mark, length, seq, crc = HEADER.unpack_from(data, at)
    if mark != MARK:
        return "no record mark"
    if length > MAX_RECORD:
        return f"a record length of {length} bytes"
    end = at + HEADER.size + length
    if end > len(data):
        return f"a record of {length} bytes with only {len(data) - at - HEADER.size} present"
    payload = bytes(data[at + HEADER.size : end])
    if zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq))) != crc:
        return "a checksum that does not match"
    if previous and seq != previous + 1:
        return f"sequence number {seq} after {previous}"
    if not body:
        return Record(seq, base + at, base + end, {})
    parsed = _body(payload)
    return parsed if isinstance(parsed, str) else Record(seq, base + at, base + end, parsed)


NOT_JSON, NOT_OBJECT = "a payload that is not JSON", "a payload that is not a JSON object"


def _body(payload: bytes) -> dict[str, Any] | str:
    """A record's payload parsed, or why it holds no write: a server writes a JSON object (:func:`frame`), so a
    whole, checksummed frame of anything else was written by no server, and holds no acknowledged write."""
    try:
        parsed = _loads(payload)
    except ValueError:
        return NOT_JSON
    return parsed if isinstance(parsed, dict) else NOT_OBJECT


def _loads(payload: bytes) -> Any:
    """A record's payload parsed by orjson (a tenth of json's time); by json where they could differ: a payload
    with an integer orjson may read as a float (beyond 64 bits), or one orjson refuses (NaN, lone surrogates: no
    record is written so, but one read before still reads as it did)."""
    if LONG_INTEGER.search(payload) is None:
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError:
            pass
    return json.loads(payload)


def _good_frame_after(data: bytes, start: int) -> int | None:
    """The offset of the first whole, checksummed frame of a JSON object after ``start`` (a write a server may have
    acknowledged: corruption in the middle), or None."""
    at = data.find(MARK, start)
    while at >= 0:
        if isinstance(_parse(data, at, 0), Record):
            return at
        at = data.find(MARK, at + 1)
    return None


def scan(
    data: bytes, start: int = 0, previous: int = 0, log: str | None = None, base: int = 0, body: bool = True
) -> tuple[list[Record], int, str | None]:
    """The good records from ``start``, the offset after the last of them, and why reading stopped before the
    end of ``data`` (None: it did not); ``data`` read from byte ``base`` of its file: the records' offsets and the
    bytes named are the file's. Raises :class:`LogCorrupt` when good frames (of JSON objects) follow a bad one, or
    for a whole, checksummed frame out of sequence, and
    :class:`LogMismatch` for a record written to another log than ``log`` (:func:`log_owner`; None: not checked).
    Without ``body`` the frames alone are checked (:func:`_parse`)."""
    records: list[Record] = []
    at = start
    while at < len(data):
        parsed = _parse(data, at, previous, body=body)
        if isinstance(parsed, str):
            after = f"sequence number {previous}" if previous else "the start of the log"
            # whole and checksummed, but out of sequence: it may hold a write acknowledged (another copy of the log);
            # a payload no server writes holds none: damage as a torn frame is (a tail, or damage in the middle)
            if parsed not in (NOT_JSON, NOT_OBJECT) and isinstance(_parse(data, at, 0, body=False), Record):
                raise LogCorrupt(
                    f"record at byte {base + at} (after {after}) is damaged: {parsed}; it is whole and checksummed, "
                    "so it is not a torn tail",
                    base + at,
                )
            later = _good_frame_after(data, at + 1)
            if later is not None:
                raise LogCorrupt(
                    f"record at byte {base + at} (after {after}) is damaged: {parsed}; good records follow at byte "
                    f"{base + later}, so it is not a torn tail",
                    base + at,
                )
            return records, at, parsed
        at = parsed.end
        if base:
            parsed = Record(parsed.seq, parsed.offset + base, parsed.end + base, parsed.body)
        _check_record(parsed, log, body)
        records.append(parsed)
        previous = parsed.seq
    return records, at, None


def _scan_file(
    fd: int, log: str | None, size: int | None = None, body: bool = True
) -> Iterator[tuple[list[Record], int, str | None]]:
    """:func:`scan` of the open log ``fd`` up to byte ``size`` (None: its end), ``READ_BYTES`` at a time (a longer
    record whole), so that what reading holds is a piece, not the log: each piece's good records, the offset after
    them and, for the last piece only, why reading stopped before the end (None: it did not). At damage the rest is
    scanned at once, to tell a torn tail from corruption in the middle as :func:`scan` does. Without ``body`` the
    frames alone are checked (:func:`_parse`)."""
    size = os.fstat(fd).st_size if size is None else size
    at, previous = 0, 0
    while at < size:
        data = os.pread(fd, min(READ_BYTES, size - at), at)
        if len(data) >= HEADER.size:
            mark, length, _, _ = HEADER.unpack_from(data)
            whole = HEADER.size + length
            if mark == MARK and length <= MAX_RECORD and len(data) < whole <= size - at:  # longer than a read
                data = os.pread(fd, whole, at)
        records, end = _whole_records(data, at, previous, log, body)
        if not records:  # damage at ``at``
            records, end, problem = scan(os.pread(fd, size - at, at), 0, previous, log, base=at, body=body)
            yield records, at + end, problem
            return
        yield records, at + end, None
        previous = records[-1].seq
        at += end


def _whole_records(
    data: bytes, base: int, previous: int, log: str | None, body: bool = True
) -> tuple[list[Record], int]:
    """The good records from the start of ``data`` (read from byte ``base`` of its file: their offsets are the
    file's) up to the first that is not whole or not good, and where that one starts in ``data``."""
    records: list[Record] = []
    at = 0
    while not isinstance(parsed := _parse(data, at, previous, base, body), str):
        _check_record(parsed, log, body)
        records.append(parsed)
        previous, at = parsed.seq, parsed.end - base
    return records, at


OPS = ("upsert", "delete")  # the writes a record holds


def _check_record(record: Record, log: str | None, body: bool = True) -> None:
    """The log ``record`` names taken off its body; :class:`LogMismatch` when that is another than ``log`` (a
    record written before records named their log names none, and fits any), and :class:`LogCorrupt` when its
    ``op`` is none of :data:`OPS`: replaying past it would lose its write without a word. Without ``body`` (the
    frame alone checked) nothing is."""
    if not body:
        return
    op = record.body.get("op")
    if op not in OPS:
        raise LogCorrupt(
            f"record at byte {record.offset} (sequence {record.seq}) holds op {repr(op)[:40]}, which this release "
            f"does not write ({', '.join(OPS)}): it was written by a newer release, or damaged; serve the table "
            "with that release, or move the log aside to serve this version without its writes"
        )
    written = record.body.pop("table", log)
    if log is not None and written != log:
        raise LogMismatch(
            f"its record at byte {record.offset} (sequence {record.seq}) was written to the log of {written!r}, not "
            f"of {log!r}: the file was copied or restored under another table's name; put back this table's own "
            "log, or move this one aside to serve the table without its writes"
        )


class _ForkGuard:
    """A fork waits until no thread of this process has a log open. A lock taken with ``flock`` belongs to the open
    file, which a forked child shares: a child forked while a thread held a log open (the server's supervisor
    forks its workers while its compaction thread reads the logs) would hold that lock for its whole life, and
    its own first exclusive lock on the log would wait for it forever."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.open = 0

    def enter(self) -> None:
        with self.changed:
            self.open += 1

    def leave(self) -> None:
        with self.changed:
            self.open -= 1
            self.changed.notify_all()

    def before_fork(self) -> None:
        self.changed.acquire()  # held through the fork: no thread opens a log meanwhile
        self.changed.wait_for(lambda: self.open == 0)

    def after_fork_in_parent(self) -> None:
        self.changed.release()

    def after_fork_in_child(self) -> None:
        self.__init__()  # type: ignore[misc]  # the child's only thread has no log open


_FORKS = _ForkGuard()
os.register_at_fork(
    before=_FORKS.before_fork,
    after_in_parent=_FORKS.after_fork_in_parent,
    after_in_child=_FORKS.after_fork_in_child,
)


@contextmanager
def _locked(path: Path, mode: int, kind: int) -> Iterator[int]:
    """``path`` opened and locked; opened again if :func:`cut` replaced it while this waited for the lock."""
    _FORKS.enter()
    try:
        with _opened_and_locked(path, mode, kind) as fd:
            yield fd
    finally:
        _FORKS.leave()


@contextmanager
def _opened_and_locked(path: Path, mode: int, kind: int) -> Iterator[int]:
    while True:
        fd = os.open(path, mode, 0o644)
        fcntl.flock(fd, kind)
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = -1
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)  # releases the lock


def _read_from(fd: int, start: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, max(0, size - start), start) if size > start else b""


def recover_pieces(path: Path) -> Generator[list[Record]]:
    """Every good record of the log at ``path`` (none if there is no log), a piece of the log at a time
    (``READ_BYTES``), so that a reader applying each piece before it takes the next never holds the whole log's
    records, after cutting a torn or corrupt tail (logged as a warning with the bytes lost): what a server's load
    and a compaction replay (``Delta.replay_log``). Raises :class:`LogCorrupt` for a damaged record in the middle.
    A replica on a read-only mount cuts nothing: it reads up to a torn tail, which its writer cuts.

    The log is locked only while its frames are checked and a torn tail is cut (:func:`_recovered_end`: marks,
    lengths, checksums, sequence numbers, no payload parsed), not while the records are parsed and applied: the
    bytes up to that end are whole records no writer changes (a write appends after them), read without the lock,
    so that another process's write waits for the check alone. A record appended meanwhile is not read here: the
    reader takes it up as any later write (:func:`read_new`, from the end of the last record given). A cut
    meanwhile leaves the file being read whole (as the replaced file); a second one empties it, and the reading
    stops there: the log's file is another one then, by which the reader tells (``service.live`` reads it again)."""
    if not path.is_file():
        return
    try:
        end, reader = _checked(path, writable=True)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):  # EPERM: an immutable log
            raise
        end, reader = _checked(path, writable=False)  # a replica on a read-only mount: it reads, the writer cuts
    yield from _checked_pieces(path, end, reader, emptied_ends=True)


def _checked_pieces(path: Path, end: int, reader: int, emptied_ends: bool) -> Generator[list[Record]]:
    """The records of the log at ``path`` up to ``end``, its frames checked (:func:`_checked`), read from ``reader``
    without the lock, a piece at a time; ``reader`` is closed after. A file emptied under it (a second cut) ends
    the reading (``emptied_ends``: a load, which tells by the log's inode) or raises :class:`LogReplaced`."""
    try:
        reached = 0
        for records, reached, problem in _scan_file(reader, log_owner(path), end):
            # the checked frames changed under it; a short read of a file emptied under it (a second cut) ends here
            if problem is not None and os.fstat(reader).st_size >= end:
                if problem not in (NOT_JSON, NOT_OBJECT):
                    raise LogCorrupt(f"record at byte {reached} is damaged: {problem}")
                # records no server writes end the log, past the piece its check parsed: left for the writer to cut
                reached = end
            if records:
                yield records
        if reached < end and not emptied_ends:
            raise LogReplaced(
                f"write log {path.name} was emptied while it was read (at byte {reached} of {end}): compactions "
                "replaced it meanwhile"
            )
    finally:
        os.close(reader)


def _checked(path: Path, writable: bool) -> tuple[int, int]:
    """The end of the last good record of the log at ``path`` (:func:`_recovered_end`, under its exclusive lock; a
    log not ``writable`` under a shared one, its torn tail left) and the log opened again to read up to there."""
    mode, kind = (os.O_RDWR, fcntl.LOCK_EX) if writable else (os.O_RDONLY, fcntl.LOCK_SH)
    with _locked(path, mode, kind) as fd:
        end = _recovered_end(fd, path, writable)
        return end, os.open(path, os.O_RDONLY)  # the file checked: no cut replaces it while the lock is held


def _recovered_end(fd: int, path: Path, cut: bool) -> int:
    """Where the last good record of the log open (and locked) as ``fd`` ends (:func:`_recovered_frames`)."""
    end = 0
    for records in _recovered_frames(fd, path, cut):
        end = records[-1].end if records else end
    return end


def _recovered_frames(fd: int, path: Path, cut: bool) -> Iterator[list[Record]]:
    """The good records of the log open (and locked) as ``fd``, a piece at a time, their frames checked without
    their payloads but for the last ones' (:func:`_written`): a torn or corrupt tail, or one of records no server
    writes, is cut after the last (with ``cut``; else left, not read), with a warning
    naming the bytes lost and the last good record; :class:`LogCorrupt` for a damaged record with good ones after
    it. What a load's check and a compaction's cut (:func:`cut`) both do."""
    last = 0  # the sequence number of the last good record; 0: none
    for records, end, problem in _damage_joined(_scan_file(fd, None, body=False)):
        if problem is not None or end >= os.fstat(fd).st_size:  # the last piece: the records that end it checked
            written, unwritten = _written(fd, records)
            if unwritten is not None:  # records no server wrote, and what torn tail follows them
                end, problem, records = records[len(written)].offset, unwritten, written
        last = records[-1].seq if records else last
        if problem is not None:
            _tail_said(path, os.fstat(fd).st_size - end, end, problem, last, cut)
            if cut:
                os.ftruncate(fd, end)
                os.fsync(fd)
        yield records


def _tail_said(path: Path, lost: int, at: int, problem: str, last: int, cut: bool = True) -> None:
    """The warning for a damaged tail of ``lost`` bytes at byte ``at``, cut (or, without ``cut``, left unread), after
    the record of sequence ``last`` (0: none), as the load, a compaction's cut and a writer say it."""
    bytes_lost = f"{lost} bytes at byte {at}"
    said = f"cut {bytes_lost} ({problem})" if cut else f"{bytes_lost} not read ({problem})"
    good = f"sequence number {last}" if last else "no record"
    log.warning("write log %s: %s; last good record: %s", path, said, good)


def _damage_joined(
    pieces: Iterator[tuple[list[Record], int, str | None]],
) -> Iterator[tuple[list[Record], int, str | None]]:
    """:func:`_scan_file`'s pieces, the damage that ends the log (a piece of no records) given with the records of
    the piece before it, whose last may be records no server writes: they and a torn frame after them are one tail."""
    held = None
    for piece in pieces:
        if held is not None and piece[2] is not None:
            piece = (held[0], *piece[1:])
        elif held is not None:
            yield held
        held = piece
    if held is not None:
        yield held


def _written(fd: int, records: list[Record]) -> tuple[list[Record], str | None]:
    """``records`` (whose frames were checked) without those at their end whose payload no server writes (no JSON
    object, :func:`_body`), and why the first of those holds no write (None: there are none). The last payloads
    alone are parsed: a log's check parses one in general."""
    count, why = len(records), None
    while count and isinstance(problem := _body(_payload(fd, records[count - 1])), str):
        count, why = count - 1, problem
    return records[:count], why


def _payload(fd: int, record: Record) -> bytes:
    return os.pread(fd, record.end - record.offset - HEADER.size, record.offset + HEADER.size)


def check_writable(path: Path) -> None:
    """:class:`LogWriteFailed` when the log at ``path`` exists and cannot be opened for writing (a read-only
    directory or mount, an immutable file): what a compaction checks before it folds, since it must cut the log."""
    try:
        os.close(os.open(path, os.O_RDWR))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LogWriteFailed(f"write log {path.name} could not be opened for writing ({exc.strerror or exc})") from exc


def read_pieces(path: Path) -> Generator[list[Record]]:
    """The good records of the log at ``path`` (none if there is none), a piece of the log at a time, read only, as
    a replica on a read-only mount reads them in :func:`recover_pieces`: the frames checked under a shared lock, the
    records parsed without it; a torn tail is left for its writer to cut (with a warning); :class:`LogCorrupt` for a
    damaged record in the middle. One cut meanwhile leaves the file read whole (kept as the replaced file); a second
    one, or a write on a full disk, empties it, which raises :class:`LogReplaced` rather than end early: ``verify``
    then checks the newest version again; an import's checks, under the publish lock, which no second cut passes
    (a cut follows its compaction's publish), refuse the import then, nothing replaced."""
    if not path.is_file():
        return
    yield from _checked_pieces(path, *_checked(path, writable=False), emptied_ends=False)


def read_new(path: Path, start: int, previous: int, inode: int | None) -> tuple[list[Record], int, int]:
    """The records appended since byte ``start`` (the last record read had sequence ``previous``), the offset
    after them and the log file's inode. When the file is not ``inode`` (a compaction cut the log since; None: the
    reader has read no file yet, and a cut may have come since), the records of the file the cut replaced that
    were not read come first, then the new file's from its start. Damage with good records after it raises
    :class:`LogCorrupt`; a damaged tail is not read."""
    try:
        lock = _locked(path, os.O_RDONLY, fcntl.LOCK_SH)
        fd = lock.__enter__()
    except FileNotFoundError:
        return [], start, -1
    try:
        current = os.fstat(fd).st_ino
        before: list[Record] = []
        if current != inode:
            before, start, previous = _unread_before_cut(path, inode, start, previous), 0, 0
        data = _read_from(fd, start)
    finally:
        lock.__exit__(None, None, None)
    # a damaged tail is not read (the writer cuts it before appending)
    records, end, _ = scan(data, 0, previous, log_owner(path), base=start)
    return _joined(before, records), start + end, current


def previous_path(path: Path) -> Path:
    """Where :func:`cut` keeps the log file it replaced, until the next cut."""
    return path.with_name(f".{path.name}.previous")


def empty_replaced(path: Path) -> int:
    """Give back the room of the file the last cut of the log at ``path`` replaced: it is emptied, not removed, so
    that no new log file takes its inode, by which readers tell the files apart. Returns the bytes given back.
    Every record it held is in the table's newest version or in the log: only a worker still on an older version
    that had not read its last records needs it, and that one answers 503 until it has loaded the newest
    (``service.live``), as after two cuts. A cut killed between linking the log there and renaming its new file over
    the log leaves the log itself there: that link is removed, the log left whole."""
    previous = previous_path(path)
    try:
        found = previous.stat()
        if os.path.samestat(found, os.stat(path)):
            previous.unlink()
            return 0
        size = found.st_size
        if size:
            os.truncate(previous, 0)
    except FileNotFoundError:
        return 0
    return size


def _unread_before_cut(path: Path, inode: int | None, start: int, previous: int) -> list[Record]:
    """The records after byte ``start`` of the log file ``inode`` that a cut replaced since it was read; every
    record of the file the last cut replaced when that is another (a later cut replaced the reader's too) or the
    reader had read none (``inode`` None): those it holds already, by their sequence numbers, it skips, and whether
    the rest follow its last is its to check. Nothing writes to a replaced file: it is read without a lock. Their
    offsets are in that file; the reader's offset is the new file's."""
    try:
        fd = os.open(previous_path(path), os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        if inode is not None and os.fstat(fd).st_ino != inode:
            start, previous = 0, 0
        data = _read_from(fd, start)
    finally:
        os.close(fd)
    return scan(data, 0, previous, log_owner(path))[0]


def _joined(before: list[Record], records: list[Record]) -> list[Record]:
    """The records read from a replaced file, then the new file's that come after them (the new file holds the
    replaced file's last records again when the cut kept them)."""
    return before + [r for r in records if r.seq > before[-1].seq] if before else records


class Appender:
    """The log held under its exclusive lock: read what other processes appended, then append."""

    def __init__(self, path: Path, fd: int, sync: bool) -> None:
        self.path = path
        self.fd = fd
        self.sync = sync

    @property
    def inode(self) -> int:
        return os.fstat(self.fd).st_ino

    def new_records(self, start: int, previous: int, inode: int | None) -> tuple[list[Record], int]:
        """As :func:`read_new`, under the exclusive lock; a damaged tail is cut (with a warning) so that the next
        record follows the last good one."""
        before: list[Record] = []
        if inode != self.inode:
            before, start, previous = _unread_before_cut(self.path, inode, start, previous), 0, 0
        data = _read_from(self.fd, start)
        records, end, problem = scan(data, 0, previous, log_owner(self.path), base=start)
        if problem is not None:  # a damaged tail: cut, so that the next record follows the last good one
            _tail_said(self.path, len(data) - end, start + end, problem, records[-1].seq if records else previous)
            os.ftruncate(self.fd, start + end)
            if self.sync:
                os.fsync(self.fd)
        return _joined(before, records), start + end

    def append(self, seq: int, body: dict[str, Any]) -> Record:
        """Append one record; it is on disk (fsynced, unless ``sync`` is off) when this returns. A write that fails
        (a full disk, a file size limit) is cut off again and raises :class:`LogWriteFailed`: the log ends at its
        last whole record. A disk with no room for it is first given back the file the last cut replaced
        (:func:`empty_replaced`), and the record written once more."""
        data = frame(seq, {**body, "table": log_owner(self.path)})  # its log: a copy under another name is refused
        if len(data) - HEADER.size > MAX_RECORD:  # a reader would take it for a damaged length, and cut it off
            raise InvalidQuery(
                f"this write's record would be {counted(len(data) - HEADER.size, 'byte')}, more than the write log "
                f"takes in one ({counted(MAX_RECORD, 'byte')}): write it in parts (fewer documents, or a delete by "
                "fewer ids or a narrower filter); nothing was written"
            )
        while True:
            at = os.lseek(self.fd, 0, os.SEEK_END)
            try:
                written = 0
                while written < len(data):
                    written += os.pwrite(self.fd, data[written:], at + written)
                if self.sync:
                    os.fsync(self.fd)
                return Record(seq, at, at + len(data), body)
            except OSError as exc:
                self.cut_back(at)
                freed = empty_replaced(self.path) if exc.errno in NO_ROOM else 0
                if freed:
                    log.warning(
                        "write log %s: the disk is full: emptied the file the last cut replaced (%d bytes)",
                        self.path,
                        freed,
                    )
                    continue
                reason = exc.strerror or str(exc)
                message = f"write log {self.path.name} could not be written ({reason}); nothing was written"
                raise LogWriteFailed(message) from exc

    def cut_back(self, at: int) -> None:
        """The log cut back to byte ``at``, where a failed record began, or one of a write that failed as a whole
        (logged if even that fails)."""
        try:
            os.ftruncate(self.fd, at)
            if self.sync:
                os.fsync(self.fd)
        except OSError as exc:  # the next writer cuts the torn frame (``new_records``)
            log.warning("write log %s: a failed record at byte %d not cut off: %s", self.path, at, exc.strerror)


@contextmanager
def appending(path: Path, sync: bool = True) -> Iterator[Appender]:
    """The log at ``path`` (created, with its directory entry fsynced, if new) under its exclusive lock."""
    top = path.parent if path.parent.name == DIRECTORY else path.parent.parent  # a shard's log is a level deeper
    with contextlib.ExitStack() as opened:
        try:  # a read-only directory or mount, an immutable log: no record can be made durable
            for directory in dict.fromkeys((top, path.parent)):
                directory.mkdir(exist_ok=True)
            fd = opened.enter_context(_locked(path, os.O_RDWR | os.O_CREAT, fcntl.LOCK_EX))
            if sync and os.fstat(fd).st_size == 0:  # the first record waits for the entries of the log and its
                for directory in dict.fromkeys((top.parent, path.parent.parent, path.parent)):  # folders
                    artifact.fsync_dir(directory)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            message = f"write log {path.name} could not be opened for writing ({reason}); nothing was written"
            raise LogWriteFailed(message) from exc
        yield Appender(path, fd, sync)


def cut(path: Path, covered: int) -> int:
    """Drop the records up to sequence ``covered`` (folded into a published version): the later ones are written
    to a new file renamed over the log, under the lock, so writes arriving meanwhile are kept; the replaced file
    stays at :func:`previous_path` until the next cut. A log without such records is left as it is. Returns the
    records kept. Its frames are checked, their payloads not parsed (the compaction's replay parsed them) but for the
    last ones, which may be a tail no server wrote, cut as a load cuts it."""
    if not path.is_file():
        return 0
    with _locked(path, os.O_RDWR, fcntl.LOCK_EX) as fd:
        total, kept, end = 0, 0, 0  # the records read, those after ``covered``, the end of the last
        first: int | None = None  # where the first to keep starts
        # The frames alone, no payload parsed (the writes waiting for the lock wait for that, as for a load's check);
        # a torn tail (a writer killed in a record since the compaction read the log) cut as a load cuts it; damage
        # with good records after it: LogCorrupt
        for records in _recovered_frames(fd, path, cut=True):
            end = records[-1].end if records else end
            total += len(records)
            kept += sum(r.seq > covered for r in records)
            if first is None:
                first = next((r.offset for r in records if r.seq > covered), None)
        if kept == total:
            return kept
        empty_replaced(path)  # first: its room may be needed for the new file (on a full disk)
        tmp = path.with_name(f".{path.name}.cut")
        try:
            with open(tmp, "wb") as handle:
                at = end if first is None else first  # the records kept follow one another to the end
                while at < end:
                    at += handle.write(os.pread(fd, min(READ_BYTES, end - at), at))
                handle.flush()
                os.fsync(handle.fileno())
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        previous = previous_path(path)
        previous.unlink(missing_ok=True)  # after the new file is made, which so cannot take its inode
        os.link(path, previous)
        os.rename(tmp, path)
        artifact.fsync_dir(path.parent)
    return kept
