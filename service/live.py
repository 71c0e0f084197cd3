"""The live part of each loaded documents table: its write log and the delta the log holds beyond the version.

Each worker process keeps one :class:`Live` per loaded documents table (looked up by the table object, so a
reload that reuses a table reuses its delta, and a new version starts a new one). At load the log is recovered
and replayed (``index.store.writelog.recover``); before each read, :meth:`Live.refresh` compares the log's size with
what it has applied and reads only the new records, so a write answered by any worker is seen by the next
search in every worker. A write holds the log's exclusive lock while it catches up, checks and appends.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from index.engine.door import Delta, Table
from index.store import artifact, writelog

T = TypeVar("T")
_LIVE: weakref.WeakKeyDictionary[Table, Live] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class Live:
    def __init__(self, delta: Delta, path: Path, directory: Path) -> None:
        self.path = path
        self.directory = directory  # the table's, whose manifest says which writes its version holds
        self.delta = delta
        self.lock = threading.Lock()
        self.inode: int | None = None  # of the log file read (a compaction replaces it with a shorter one)

    def refresh(self) -> Delta:
        """The delta with every record the log holds now applied (a stat when nothing was written)."""
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return self.delta
        if found.st_size != self.delta.offset or found.st_ino != self.inode:
            with self.lock:
                records, offset, self.inode = writelog.read_new(
                    self.path, self.delta.offset, self.delta.last, self.inode
                )
                self.delta.apply(records)
                self.delta.offset = offset
        return self.delta

    def write(self, make: Callable[[Delta], tuple[dict[str, Any] | None, T]], sync: bool) -> tuple[int, T]:
        """Under the log's lock: catch up, ``make(delta)`` the record's body (None: nothing to write) and what to
        answer, append it (durable when this returns, with ``sync``), apply it. Returns the sequence number."""
        with self.lock, writelog.appending(self.path, sync) as log:
            if log.inode != self.inode:  # another log file: a compaction cut the log after it published
                folded = int(artifact.read_manifest(self.directory).get("log_sequence", 0))
                self.delta.last = max(self.delta.last, folded)  # the next write numbered after what it folded
            records, offset = log.new_records(self.delta.offset, self.delta.last, self.inode)
            self.delta.apply(records)
            self.delta.offset, self.inode = offset, log.inode
            body, answer = make(self.delta)
            if body is not None:
                self.delta.apply([log.append(self.delta.seq + 1, body)])
            return self.delta.seq, answer


def attach(table: Table, directory: Path) -> None:
    """Recover and replay the write log of the documents table loaded from ``directory`` (a torn tail is cut with
    a warning; a damaged record in the middle raises ``writelog.LogCorrupt``, naming it)."""
    if table.payload is None:
        return
    covered = int(table.manifest.get("log_sequence", 0))
    delta = Delta(table.payload, table.rows, table.dim, covered)
    live = Live(delta, writelog.log_path(directory.parent, directory.name), directory)
    try:
        live.delta.apply(writelog.recover(live.path))
        live.inode = os.stat(live.path).st_ino if live.path.exists() else None
    except writelog.LogCorrupt as exc:
        raise writelog.LogCorrupt(f"table {directory.name!r}: write log {live.path.name}: {exc.message}") from None
    with _LOCK:
        _LIVE[table] = live


def summary(state: Live) -> dict[str, Any]:
    """What ``GET /v1/tables/{table}`` says of a documents table's writes: the sequence its version holds, the
    table's sequence (its last write), and the documents written and deleted since the version."""
    delta = state.refresh()
    return {
        "version_sequence": delta.covered,
        "sequence": delta.seq,
        "written": len(delta.documents),
        "deleted": int(delta.deleted.sum()),
        "log_bytes": delta.offset,
    }


def live_of(table: Table) -> Live | None:
    """The live state of a loaded documents table (None for other tables, or one loaded without ``attach``)."""
    return _LIVE.get(table)


def delta_of(table: Table) -> Delta | None:
    """A snapshot of the table's delta, brought up to date with its log (later writes leave it as it is); None
    when nothing was written since its version."""
    live = _LIVE.get(table)
    if live is None:
        return None
    live.refresh()
    with live.lock:
        delta = live.delta.snapshot()
    return delta if delta.documents or delta.deleted.any() else None


def log_lengths() -> tuple[int, ...]:
    """The length and file of every loaded documents table's write log (a stat each): what cached answers depend
    on (a log cut by a compaction is another file, which may grow back to an earlier length)."""
    with _LOCK:
        paths = [state.path for state in _LIVE.values()]
    lengths: list[int] = []
    for path in paths:
        try:
            found = os.stat(path)
        except FileNotFoundError:
            lengths += (0, 0)
            continue
        lengths += (found.st_size, found.st_ino)
    return tuple(lengths)
