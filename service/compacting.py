"""Automatic compaction: a documents table whose writes since its version pass ``EMBEDDING_COMPACT_ROWS``
documents, or whose oldest such write is ``EMBEDDING_COMPACT_SECONDS`` old, is compacted in the background.

One thread in the server's main process (the supervisor under ``--workers N``) looks at the write logs every
second, reading only what each log gained, and runs ``embedding-index compact NAME`` in a child process at a low
CPU priority, one table at a time; writes go on meanwhile. A sharded table's writes are its shards' logs
(``.writes/<table>/shard-NNN.log``, each beyond its shard's version), counted together: the server whose data
directory holds the table (and so those logs) compacts it, every shard at once, as the command does. Once the
new version is published the server is sent SIGHUP and reloads it (``service.reload``), as after a deferred
index build. The child's lines are logged as they come (its steps and their progress, every few seconds), as
an index build's are (``service.logs.relay``). A failed compaction is logged; the table keeps its version and its
log, and is tried again after ``EMBEDDING_COMPACT_SECONDS`` (a minute when that is off), twice as long after each
failure in a row up to an hour (or that setting, when longer), until one succeeds, or until another version of
the table is published (a compaction run by hand, an import, an index build), after which it is compacted as one
that never failed. A table
refused because every one of its documents is deleted is refused so until it is written to again (or a version is
published): it is tried again after its next write only, and said as a warning.
Each is counted in ``/metrics`` by table and outcome, with the time
of each table's last success (``service.http.metrics``). A server that stops ends its compaction (the next start
compacts the table again), and so does one killed outright, on Linux (``service.logs.spawn``); a Ctrl-C on its
terminal is the server's alone (the child, ``--background``, ignores it), so the stop is said once, by the server,
as its index build's is (``service.indexing``).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from index import store
from index.engine.door import manifest_is_sharded
from index.errors import EVERY_DOCUMENT_DELETED, WAIT_LONGER
from service.http.metrics import count_compaction
from service.indexing import END_SECONDS, end
from service.logs import cannot_look, child_ended, relay, said_once, spawn

log = logging.getLogger("service.compacting")
CHILD_NICE = 10
CHECK_SECONDS = 1.0
RETRY_SECONDS = 60.0  # the first wait after a failure when EMBEDDING_COMPACT_SECONDS is off
LONGEST_RETRY_SECONDS = 3600.0  # the wait doubles after each failure in a row up to this (or the setting)


def shards_alone(data_dir: Path) -> str | None:
    """Why a server over ``data_dir`` compacts nothing: its data directory is a sharded table's, its shards served
    alone, while their logs are beside the table (``<parent>/.writes/<table>/``) and compacted with the whole table;
    None for any other data directory."""
    try:
        manifest = store.read_manifest(data_dir)
    except Exception:  # no table there, or a manifest that cannot be read: the registry reports it
        return None
    if not manifest_is_sharded(manifest):
        return None
    table = Path(data_dir).resolve()
    logs = table.parent / store.LOG_DIRECTORY / table.name
    return (
        f"table {table.name!r}: this server serves its shards alone and compacts none of their writes "
        f"(EMBEDDING_COMPACT_ROWS, EMBEDDING_COMPACT_SECONDS): the shards' logs, {logs}, "
        f"are compacted with the whole table, by `embedding-index compact {table.name} --data-dir {table.parent}` or "
        f"by a server whose data directory is {table.parent}; run one, or the logs grow and every load replays them"
    )


@dataclass
class Pending:
    """What one table's log holds beyond its version, as far as it was read."""

    covered: int = -1  # the version's sequence (the manifest's log_sequence)
    inode: int | None = None
    offset: int = 0
    last: int = 0
    documents: int = 0  # documents written or deleted since the version
    since: float = 0.0  # when the first of them was seen


@dataclass
class Failed:
    """A table whose last compactions failed: tried again ``wait`` seconds after the last, or, when ``written`` is
    set, only once one of its logs holds a write after its ``Pending.last`` there; forgotten once a version other
    than ``version`` (``AutoCompaction.version``) is published."""

    at: float
    wait: float
    written: dict[str, int] | None = None
    version: tuple[int, int] | None = None


class AutoCompaction:
    def __init__(self, data_dir: Path, rows: int, seconds: float) -> None:
        self.data_dir = Path(data_dir)
        self.rows = rows
        self.seconds = seconds
        self.pending: dict[str, Pending] = {}  # by log: a table's name, or a sharded table's "<name>/<shard>"
        self.failed: dict[str, Failed] = {}  # by table: its compactions that failed, in a row
        self._stop = threading.Event()
        self._child: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._run, name="compaction", daemon=True)

    def retry_seconds(self, name: str) -> float:
        """How long after this failure of its compaction table ``name`` is compacted again: the setting's age (a
        minute when it is off) after a first failure, twice the last wait after each next one, an hour at most."""
        first = self.seconds or RETRY_SECONDS
        last = self.failed.get(name)
        return first if last is None else min(2 * last.wait, max(LONGEST_RETRY_SECONDS, first))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End a compaction still running (the server is stopping): the table keeps its version and its log."""
        self._stop.set()
        child = self._child
        if child is not None:
            end(child)
        if self._thread.is_alive():  # its last word said before the process ends
            self._thread.join(timeout=END_SECONDS)

    def _run(self) -> None:
        trouble: str | None = None  # why the last look failed, said once until a look succeeds
        while not self._stop.wait(CHECK_SECONDS):
            try:
                due = self.due()
            except OSError as exc:  # no descriptor left, ...: looked at again at the next turn
                trouble = said_once(log, trouble, f"background compaction: {cannot_look(exc)}")
                continue
            trouble = None
            for name in due:
                if self._stop.is_set():
                    return
                failed = self._compact(name)
                if self._stop.is_set():  # ended with the server: no outcome to count
                    return
                count_compaction(name, failed is None)
                if failed is None:
                    for key in [key for key in self.pending if key == name or key.startswith(f"{name}/")]:
                        del self.pending[key]
                    self.failed.pop(name, None)
                    os.kill(os.getpid(), signal.SIGHUP)  # this process: the server, or the supervisor of its workers
                else:
                    self.failed[name] = failed

    def logs(self) -> dict[str, list[tuple[str, Path, int]]]:
        """Each table with a write log here: (its key in :attr:`pending`, the log, the last write the version of the
        table or shard that reads it holds: its manifest's ``log_sequence``) of each of its logs."""
        top = self.data_dir / store.LOG_DIRECTORY
        out: dict[str, list[tuple[str, Path, int]]] = {}
        for path in sorted(top.iterdir()) if top.is_dir() else []:
            if path.is_dir():  # a sharded table's: a log per shard
                name = path.name
                shards = sorted(path.glob(f"shard-*{store.LOG_SUFFIX}"))
                logs = [(f"{name}/{log.stem}", log, self._table(name) / log.stem) for log in shards]
            elif path.name.endswith(store.LOG_SUFFIX) and not path.name.startswith("."):
                name = path.name.removesuffix(store.LOG_SUFFIX)
                logs = [(name, path, self._table(name))]
            else:
                continue
            # Only the logs the table reads: not the one of the unsharded table a sharded import replaced, nor a
            # shard's the table no longer has (they would call for compactions that find nothing to fold).
            covered = [(key, log, self._covered(directory)) for key, log, directory in logs]
            mine = [(key, log, sequence) for key, log, sequence in covered if sequence is not None]
            if mine:
                out[name] = mine
        return out

    def _table(self, name: str) -> Path:
        return store.table_dir(self.data_dir, name)

    @staticmethod
    def _covered(directory: Path) -> int | None:
        """The last write the version in ``directory`` holds when that table or shard reads its log at
        ``store.table_log(directory)``; None when it does not (a sharded table's own directory), or is gone, being
        replaced or refused (the registry reports it)."""
        try:
            manifest = store.read_manifest(directory)
        except Exception:
            return None
        return None if manifest_is_sharded(manifest) else int(manifest.get("log_sequence", 0))

    def due(self) -> list[str]:
        """The tables whose writes since their version call for a compaction now."""
        out = []
        for name, logs in self.logs().items():
            try:
                states = [self._read(key, path, covered) for key, path, covered in logs]
            except Exception:  # a damaged log: the registry reports it
                continue
            documents = sum(state.documents for state in states)
            if not documents:
                continue
            since = min(state.since for state in states if state.documents)
            now = time.monotonic()
            failed = self.failed.get(name)
            if failed is not None and failed.version != self.version(name):
                log.info(
                    "table %r: a new version was published (a compaction run by hand, an import, an index build); its "
                    "compactions' failures before it no longer hold back the next",
                    name,
                )
                del self.failed[name]
                failed = None
            if failed is not None and failed.written is not None:
                if self._written(name) == failed.written:
                    continue  # not written to since its refusal
            elif failed is not None and now - failed.at < failed.wait:
                continue
            if (self.rows and documents >= self.rows) or (self.seconds and now - since >= self.seconds):
                out.append(name)
        return out

    def _read(self, key: str, path: Path, covered: int) -> Pending:
        state = self.pending.get(key)
        if state is None or state.covered != covered:
            state = self.pending[key] = Pending(covered=covered)
        records, state.offset, inode = store.read_new(path, state.offset, state.last, state.inode)
        if inode != state.inode and state.inode is not None:  # cut by a compaction: counted again from its start
            state.documents = 0
        state.inode = inode
        for record in records:
            state.last = record.seq
            if record.seq > covered:
                body = record.body
                touched = len(body.get("documents", ())) + len(body.get("ids", ()))
                if touched and not state.documents:
                    state.since = time.monotonic()
                state.documents += touched
        return state

    def version(self, name: str) -> tuple[int, int] | None:
        """Which version of table ``name`` is published: its manifest file's inode and modification time (each
        publish, of a compaction, an import or an index, puts a new file in place); None when there is none."""
        try:
            stat = (self._table(name) / store.MANIFEST).stat()
        except OSError:
            return None
        return stat.st_ino, stat.st_mtime_ns

    def _written(self, name: str) -> dict[str, int]:
        """The last write read of each of table ``name``'s logs."""
        return {key: state.last for key, state in self.pending.items() if key.split("/")[0] == name}

    def _compact(self, name: str) -> Failed | None:
        """Compact table ``name`` in a child process: None when it did, else when to try it again (said in the
        log)."""
        command = [sys.executable, "-m", "index", "--nice", str(CHILD_NICE), "--background", "compact", name]
        command += ["--data-dir", str(self.data_dir), "--wait", f"{store.COMPACTION_WAIT_SECONDS:g}"]
        documents = sum(state.documents for key, state in self.pending.items() if key.split("/")[0] == name)
        log.info("table %r: compacting %d written or deleted documents into its next version", name, documents)
        wait = self.retry_seconds(name)
        then = f"it keeps its version and its log, and is tried again in {wait:g}s"
        try:
            self._child = child = spawn(command)
        except OSError as exc:
            log.error("table %r: cannot start the compaction (%s); %s", name, exc, then)
            return Failed(at=time.monotonic(), wait=wait, version=self.version(name))
        output = relay(child, log, name, self._stop.is_set)  # its progress in the log as it comes, then its summary
        child.wait()
        # the wait counts from its end, as a lock's wait may be long
        failed = Failed(at=time.monotonic(), wait=wait, version=self.version(name))
        if child.returncode == 0:
            return None
        if self._stop.is_set():  # ended by :meth:`stop`: said as the server's index build says it
            log.info("table %r: compaction stopped with the server; it keeps its version and its log", name)
            return failed
        last = child_ended(child.returncode, output)
        if f"not compacted: {EVERY_DOCUMENT_DELETED}" in last:  # refused so until the table is written to
            failed.written = self._written(name)
            log.warning(
                "table %r: not compacted: %s; it serves on from its version and its writes, and is compacted "
                "again after its next write (add a document, or remove the table)",
                name,
                EVERY_DOCUMENT_DELETED,
            )
            return failed
        if last.endswith(f": {WAIT_LONGER}"):  # the command's advice; the server tries again by itself
            last, then = last.removesuffix(f": {WAIT_LONGER}"), f"{then}: end that compaction if it hangs"
        log.error("table %r: compaction failed (%s); %s", name, last, then)
        return failed
