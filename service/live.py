"""The live part of each loaded documents table: its write log and the delta the log holds beyond the version.

Each worker process keeps one :class:`Live` per loaded documents table (looked up by the table object, so a
reload that reuses a table reuses its delta, and a new version starts a new one). At load the log is recovered
and replayed a piece at a time, as a compaction replays it (``Delta.replay_log``); before each read,
:meth:`Live.refresh` compares the log's size with what it has applied and reads only the new records, so a write
answered by any worker is seen by the next search in every worker. A write holds the log's exclusive lock while
it catches up, checks and appends (an upsert's documents are checked and embedded before it takes it:
``service.writes.upserting``).

A compaction folds the log into a newer version, then cuts the log; the file it replaced is kept until the next cut,
so a worker still on the older version reads on from it. A worker that misses two cuts (it did not load the version
between them: they came within one turn of the data directory's watcher, or it refused that version's files) reads on
too when it had read every write the first of them folded: the later ones are in the file the second replaced, read
by their sequence numbers. One that had not has lost writes that only newer versions now hold: its reads and writes
of the table answer 503 ``not_ready`` until it has loaded the newest version, rather than answer without them; it
asks for that load itself (``when_behind``: the server's reload, ``service.reload.CatchUp``), so the 503 lasts as long
as the load does, whether or not anything else (the data directory's watcher, a SIGHUP) reloads it. So does one whose
table was imported again since it loaded it: a write into the new import's empty log (removed first), or a record
written through the new import that its version cannot take (another schema). A log emptied, cut back or replaced
by hand under the loaded version (it holds fewer writes than the worker read, and no version holds the others) is
read again from its start, as the disk now holds it: the worker answers as a load would, and writes follow the log's
last record.

A shard served alone knows its place in its sharded table as its version was loaded (``Table.place``): it refuses a
write of an id another shard owns (``service.writes.check_owned``), which would otherwise sit in the wrong shard's log.

A sharded table served whole has one :class:`Live` per shard, over the shard's own log
(``store.table_log``), and a :class:`Sharded` that writes to the shards that own the ids and gathers their
deltas into the whole table's (``index.engine.door.WholeDelta``) for its searches.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from index import store
from index.engine.door import Delta, ShardedTable, ShardPlace, Table, WholeDelta, merged_writes
from index.errors import InvalidQuery, counted
from service.errors import ApiError

T = TypeVar("T")
Reader = Callable[[int, int, int | None], tuple[list[store.Record], int, int]]  # (start, previous, inode) -> read_new's
log = logging.getLogger(__name__)
_LIVE: weakref.WeakKeyDictionary[Table, Live] = weakref.WeakKeyDictionary()
_SHARDED: weakref.WeakKeyDictionary[Table, Sharded] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
# What a worker serving an older version than its table's writes need calls to load the table's newest version
_BEHIND: list[Callable[[str, str], None]] = []
REPLAY_LINE_SECONDS = 5.0  # between two lines of a long replay at load, as between the builder's progress lines


def when_behind(load: Callable[[str, str], None] | None) -> None:
    """Have ``load(table name, why)`` called (from any thread, at every read or write while it lasts) once a worker
    finds it serves an older version than the table's writes need: it lacks writes only a newer version holds, or
    the table was imported again (removed first, or over itself with another schema); None: no longer."""
    with _LOCK:
        _BEHIND[:] = [load] if load is not None else []


class Live:
    def __init__(
        self,
        delta: Delta,
        path: Path,
        directory: Path,
        files: object = None,
        name: str = "",
        place: ShardPlace | None = None,
        loaded: tuple[int, int] | None = None,
    ) -> None:
        self.name = name or directory.name  # the table's, as the registry serves it (a shard's: its sharded table's)
        self.path = path
        self.directory = directory  # the table's, whose manifest says which writes its version holds
        self.files = files  # the loaded version's files (their checksums), by which another import is told apart
        self.delta = delta
        self.lock = threading.Lock()
        self.inode: int | None = None  # of the log file read (a compaction replaces it with a shorter one)
        self.behind = 0  # the sequence a newer version holds that the log no longer gives this worker (0: none)
        self.place = place  # of a shard, its version's: the ids it owns are the only ones it takes
        self.loaded = loaded  # the directory of the version loaded (``Table.directory_id``), while in the table's place

    def refresh(self) -> Delta:
        """The delta with every record the log holds now applied (a stat when nothing was written). It is the state's
        one delta, applied to under the lock (its readers read it under the lock too), replaced only by a new one
        when the log is read again from its start (``_read_on``)."""
        self._check_behind()
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return self.delta
        if found.st_size != self.delta.offset or found.st_ino != self.inode:
            with self.lock:
                self._read_on(lambda start, previous, inode: store.read_new(self.path, start, previous, inode))
        self._check_behind()
        return self.delta

    def write(self, make: Callable[[Delta], tuple[dict[str, Any] | None, T]], sync: bool) -> tuple[int, T]:
        """Under the log's lock: catch up, ``make(delta)`` the record's body (None: nothing to write) and what to
        answer, append it (durable when this returns, with ``sync``), apply it. Returns the sequence number."""
        try:
            with self.held(sync) as log:
                body, answer = make(self.delta)
                if body is not None:
                    self.delta.apply([log.append(self.delta.seq + 1, body)])
                return self.delta.seq, answer
        except store.LogWriteFailed as exc:  # the log could not be opened, or the record written
            raise refused_write(self.directory.name, exc) from None

    @contextmanager
    def held(self, sync: bool) -> Iterator[store.Appender]:
        """The log under its lock (``store.LogWriteFailed`` when it cannot be opened for writing), and this
        state caught up with it: a record appended now follows every one written."""
        self._check_behind()
        with self.lock, store.appending(self.path, sync) as log:
            self._check_there(log)
            self._read_on(lambda start, previous, inode: (*log.new_records(start, previous, inode), log.inode))
            self._check_behind()
            self._check_lineage(log)
            yield log

    def _read_on(self, read: Reader) -> None:
        """Under the lock: apply what the log holds beyond what this state read, ``read(start, previous, inode)``
        giving it (``store.read_new``'s answer). Another file (a compaction's cut) must reach on from the last
        write read (``_check_reach``). A log that no longer holds writes this state read as it read them, which no
        version holds either (emptied, cut back or replaced by hand while the version stays; written again since,
        past where this state stopped, so that no record starts there), is read again from its start."""
        before, inode = self.delta.seq, self.inode
        try:
            found = os.stat(self.path)
            same, shorter = found.st_ino == inode, found.st_size < self.delta.offset  # the file read; cut back?
        except FileNotFoundError:
            same = shorter = False
        if same and shorter and self._read_again(read, inode, before):
            return
        try:
            records, offset, new_inode = read(self.delta.offset, self.delta.last, inode)
        except (store.LogCorrupt, store.LogMismatch) as exc:  # damage, or no record where this state stopped
            # damage past where it stopped: the bytes there still start a record, the log was not written anew
            further = isinstance(exc, store.LogCorrupt) and exc.at is not None and exc.at > self.delta.offset
            if same and not further and self._read_again(read, inode, before):
                return
            raise self._refused(exc) from None
        self._apply(records)
        self.delta.offset, self.inode = offset, new_inode
        if new_inode == inode:
            return
        held = max(records[-1].seq if records else 0, self.delta.covered)  # what the log and the version hold
        if held >= before:  # some of those records may be the replaced file's only, which is no longer the log
            held = max(self._last_in(read, new_inode), self.delta.covered)
        if held < before and self._read_again(read, new_inode, before):
            return
        self._check_reach(before, records)

    def _last_in(self, read: Reader, inode: int) -> int:
        """The sequence of the last record of the log file ``inode`` alone, read from its start (0: none)."""
        try:
            records = read(0, 0, inode)[0]
        except (store.LogCorrupt, store.LogMismatch) as exc:
            raise self._refused(exc) from None
        return records[-1].seq if records else 0

    def _read_again(self, read: Reader, inode: int | None, before: int) -> bool:
        """The log (file ``inode``) read again from its start into a new delta over the loaded version, as a load
        replays it: the log no longer holds every write this state read (up to ``before``). False, nothing read,
        when another directory is in the table's place (a compaction's version, an import, none): the load of what
        is there catches up (``_check_reach``, ``_check_lineage``)."""
        if store.directory_identity(self.directory) != self.loaded:
            return False
        old = self.delta
        delta = Delta(old.payload, old.rows, old.dim, old.covered)
        try:
            records, offset, inode = read(0, 0, inode)
            delta.replay(records)
        except (store.LogCorrupt, store.LogMismatch) as exc:
            raise self._refused(exc) from None
        delta.offset = offset
        log.warning(
            "table %r: write log %s no longer holds the writes this worker read as it read them (up to sequence %d), "
            "nor does its version: emptied, cut back or replaced by hand; read again from its start (the writes up "
            "to sequence %d)",
            self.directory.name,
            self.path.name,
            before,
            delta.seq,
        )
        self.delta, self.inode = delta, inode
        return True

    def _check_there(self, log: store.Appender) -> None:
        """The 404 of a write to a table removed from the data directory while this worker still serves it
        (``embedding-index remove`` deletes its log, then the table): it would be answered, then lost or replayed
        into a table imported later under the name. An empty log this write made is taken away again."""
        if (self.directory / store.MANIFEST).is_file():
            return
        if os.fstat(log.fd).st_size == 0:
            self.path.unlink(missing_ok=True)
        raise ApiError("unknown_table", f"table {store.log_owner(self.path)!r} was removed; nothing was written")

    def _check_lineage(self, log: store.Appender) -> None:
        """The 503 of a write that would start an empty log from another sequence than the table's newest version
        ends at, or into another import than the one this worker serves: the table was removed (its log first), or
        removed and imported afresh, since this worker loaded it (an empty log otherwise follows a cut, whose
        version holds every write this worker has read). Numbered after the removed table's, the write would make
        the table imported under the name refuse its log; checked against the removed table's fields, it could
        hold what the new one cannot take. It answers again once it has loaded the table in its place, which it asks
        for itself (``when_behind``), as a worker behind its table's writes does."""
        if os.fstat(log.fd).st_size:
            return
        manifest = store.read_manifest(self.directory)
        folded = int(manifest.get("log_sequence", 0))
        imported = "log_sequence" not in manifest and manifest.get("files") != self.files  # not a compaction's
        if folded == self.delta.seq and not imported:
            return
        table = store.log_owner(self.path)
        held = f" (the version in its place holds the writes up to {folded}, this worker up to {self.delta.seq})"
        held = held if folded != self.delta.seq else ""
        self._catch_up("it was removed or imported again since this worker loaded it")
        raise ApiError(
            "not_ready",
            f"table {table!r} was removed or imported again since this worker loaded it{held}; nothing was written: "
            "it answers again once it has loaded the table in its place (in a moment)",
        )

    def _refused(self, exc: store.LogCorrupt | store.LogMismatch) -> ApiError:
        """The 503 of its table once its log, read while serving, holds a record it cannot apply: a damaged one
        that is no torn tail, or one written to another table's log. It lasts until the log is repaired, which a
        damaged record's refusal says how to do (a record of another table's log, or of a newer release, says so
        itself); the worker reads on from the repaired log."""
        message = f"table {self.directory.name!r}: write log {self.path.name}: {exc.message}"
        if isinstance(exc, store.LogCorrupt) and "not a torn tail" in exc.message:
            message += (
                "; nothing was cut: copy the log aside, then truncate it at that record (losing the writes after "
                "it) or restore it from a backup"
            )
        return ApiError("not_ready", message)

    def _apply(self, records: list[store.Record]) -> None:
        """Apply records read from the log; one that does not fit the loaded version (written through another
        version of another schema) makes the table answer 503 until a reload refuses it."""
        try:
            self.delta.apply(records)
        except store.LogMismatch as exc:
            if store.read_manifest(self.directory).get("files") != self.files:  # written through a newer import
                why = "it was imported again with another schema since this worker loaded it"
                self._catch_up(why)
                message = (
                    f"table {self.directory.name!r}: {why}, and written to since: it answers again once it has loaded "
                    "the table in its place (in a moment)"
                )
            else:
                message = f"table {self.directory.name!r}: write log {self.path.name}: {exc.message}"
            raise ApiError("not_ready", message) from None

    def _check_reach(self, before: int, records: list[store.Record]) -> None:
        """After a cut (another log file): the writes read must follow the last one this worker held (``before``),
        and the newest version hold none after it that the log no longer has; else the file holding them was
        replaced twice since this worker read it, and emptied."""
        first = next((r.seq for r in records if r.seq > before), None)
        if first is None:
            folded = int(store.read_manifest(self.directory).get("log_sequence", 0))
            if folded > before:
                self.behind = folded
        elif first > before + 1:
            self.behind = first - 1

    def _check_behind(self) -> None:
        """The 503 of its table once the log no longer gives this state every write since its version; the newer
        version's load asked for (``when_behind``)."""
        if self.behind:
            self._catch_up("a newer version holds writes this worker lacks")
            raise ApiError(
                "not_ready",
                f"this worker serves an older version of table {self.directory.name!r}, and writes made since (up to "
                f"sequence {self.behind}) are in a newer one only: it answers again once it has loaded that (in a "
                "moment)",
            )

    def _catch_up(self, why: str) -> None:
        """Have the table's newest version loaded (``when_behind``): this worker serves an older one, for ``why``."""
        with _LOCK:
            load = _BEHIND[0] if _BEHIND else None
        if load is not None:
            load(self.name, why)


def _attach(table: Table, directory: Path, name: str = "") -> Live:
    path = store.table_log(directory)
    where = f"table {directory.name!r}: write log {path.name}"
    size = path.stat().st_size if path.is_file() else 0
    if size:  # seconds for a log of tens of thousands of writes, before the table is said loaded
        log.info("%s: replaying %.1f MiB of writes ...", where, size / 2**20)
    started = time.perf_counter()
    try:
        delta, replayed, inode = _replayed(table, path, _replay_progress(where, size))
    except (store.LogCorrupt, store.LogMismatch) as exc:
        raise type(exc)(f"{where}: {exc.message}") from None
    if size:
        log.info(
            "%s: %s replayed in %.2fs: %s written, %s of the version deleted or replaced",
            where,
            counted(replayed, "record"),
            time.perf_counter() - started,
            counted(len(delta.documents), "document"),
            counted(int(delta.deleted.sum()), "row"),
        )
    live = Live(delta, path, directory, table.manifest.get("files"), name, table.place, table.directory_id)
    live.inode = inode
    with _LOCK:
        _LIVE[table] = live
    return live


def _replayed(table: Table, path: Path, done: Callable[[int], None]) -> tuple[Delta, int, int | None]:
    """The table's delta with the log at ``path`` replayed a piece at a time (``Delta.replay_log``, as a compaction
    replays it; ``done(bytes replayed)`` after each piece), the records replayed and the identity (inode) of the
    file they were read from. Replayed again when a compaction's cut replaced the file meanwhile: the records'
    offsets are the replaced file's, and later writes go to the new one, which would then be read from the wrong
    place."""
    assert table.payload is not None
    while True:
        before = _inode(path)
        delta = Delta(table.payload, table.rows, table.dim, int(table.manifest.get("log_sequence", 0)))
        replayed = delta.replay_log(path, done)
        if _inode(path) == before:
            return delta, replayed, before


def _replay_progress(where: str, size: int) -> Callable[[int], None]:
    """``done(bytes replayed)`` of the replay of a log of ``size`` bytes: a line every ``REPLAY_LINE_SECONDS``, as
    the builder's long steps print theirs, the last piece said by the replay's closing line."""
    last = time.monotonic()

    def done(end: int) -> None:
        nonlocal last
        if end < size and time.monotonic() - last >= REPLAY_LINE_SECONDS:
            last = time.monotonic()
            log.info("%s: %.0f%% replayed (%.1f of %.1f MiB) ...", where, 100 * end / size, end / 2**20, size / 2**20)

    return done


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def attach(table: Table, directory: Path) -> None:
    """Recover and replay the write log of the documents table loaded from ``directory`` (a torn tail is cut with
    a warning; a damaged record in the middle raises ``store.LogCorrupt``, naming it); of a sharded table,
    every shard's log."""
    if isinstance(table, ShardedTable) and table.payload is not None:  # a sharded word table takes no writes
        lives = [_attach(shard, table.map.shard_directory(s), table.name) for s, shard in enumerate(table.shards)]
        with _LOCK:
            _SHARDED[table] = Sharded(table, lives)
    elif table.payload is not None:
        _attach(table, directory)


class Sharded:
    """A sharded table's shards' live states: a write goes to the shard owning each id, a search sees them all."""

    def __init__(self, table: ShardedTable, shards: list[Live]) -> None:
        self.name = table.name
        self.shards = shards
        self.whole = WholeDelta(table)

    def delta(self) -> Delta:
        """A snapshot of the whole table's delta, every shard's log read up to now."""
        parts = []
        for state in self.shards:
            state.refresh()
            with state.lock:
                parts.append(state.delta.snapshot())
        return self.whole.of(parts)

    def write(
        self, makes: dict[int, Callable[[Delta], tuple[dict[str, Any] | None, T]]], sync: bool
    ) -> list[Written[T]]:
        """Each shard's write, as one: every shard's log held (``Live.held``, in shard order), each record made and
        appended, then applied; a record that cannot be written (or a log opened) writes none, the records appended
        before it cut off again (no reader saw them: their logs were held). (shard, its sequence, what to answer) of
        each."""
        with ExitStack() as stack:
            try:
                logs = {shard: stack.enter_context(self.shards[shard].held(sync)) for shard in sorted(makes)}
                made = {shard: makes[shard](self.shards[shard].delta) for shard in logs}
                appended: dict[int, store.Record] = {}
                try:
                    for shard, (body, _) in made.items():
                        if body is not None:
                            appended[shard] = logs[shard].append(self.shards[shard].delta.seq + 1, body)
                except (store.LogWriteFailed, InvalidQuery):  # a log that failed, or a record too long
                    for shard, record in appended.items():
                        logs[shard].cut_back(record.offset)
                    raise
            except store.LogWriteFailed as exc:
                raise refused_write(self.name, exc) from None
            for shard, record in appended.items():
                self.shards[shard].delta.apply([record])
            return [Written(shard, self.shards[shard].delta.seq, answer) for shard, (_, answer) in made.items()]

    def summary(self) -> dict[str, Any]:
        return merged_writes([summary(state) for state in self.shards])


def refused_write(table: str, exc: store.LogWriteFailed) -> ApiError:
    """The 503 of a write its log could not take (a full disk, the file size limit, a read-only log), said in the
    server's log too: the operator has room to make, not only the client a write to try again."""
    message = f"table {table!r}: {exc.message}"
    log.warning("write refused: %s", message)
    return ApiError("not_ready", message)


@dataclass(frozen=True)
class Written(Generic[T]):
    shard: int
    sequence: int
    answer: T


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


def sharded_of(table: Table) -> Sharded | None:
    """The live state of a loaded sharded table's shards (None for any other table)."""
    return _SHARDED.get(table)


def live_of(table: Table) -> Live | None:
    """The live state of a loaded documents table (None for other tables, or one loaded without ``attach``)."""
    return _LIVE.get(table)


def delta_of(table: Table) -> Delta | None:
    """A snapshot of the table's delta, brought up to date with its log (later writes leave it as it is); None
    when nothing was written since its version."""
    sharded = _SHARDED.get(table)
    if sharded is not None:
        whole = sharded.delta()
        return whole if whole.documents or whole.deleted.any() else None
    state = _LIVE.get(table)
    if state is None:
        return None
    delta = state.refresh()
    with state.lock:  # a snapshot only when something was written: a search without writes copies nothing
        return delta.snapshot() if delta.documents or delta.deleted.any() else None


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
