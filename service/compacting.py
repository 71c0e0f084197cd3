"""Automatic compaction: a documents table whose writes since its version pass ``EMBEDDING_COMPACT_ROWS``
documents, or whose oldest such write is ``EMBEDDING_COMPACT_SECONDS`` old, is compacted in the background.

One thread in the server's main process (the supervisor under ``--workers N``) looks at the write logs every
second, reading only what each log gained, and runs ``embedding-index compact NAME`` in a child process at a low
CPU priority, one table at a time; writes go on meanwhile. A sharded table's writes are its shards' logs
(``.writes/<table>/shard-NNN.log``, each beyond its shard's version), counted together: the server whose data
directory holds the table (and so those logs) compacts it, every shard at once, as the command does. Once the
new version is published the server is sent SIGHUP and reloads it (``service.reload``), as after a deferred
index build. A failed compaction is logged; the table keeps its version and its log, and is tried again after
``EMBEDDING_COMPACT_SECONDS`` (at least a minute). Each is counted in ``/metrics`` by table and outcome, with the time
of each table's last success (``service.http.metrics``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from index.engine.door import manifest_is_sharded
from index.errors import WAIT_LONGER
from index.store import artifact, writelog
from service.http.metrics import count_compaction
from service.logs import cannot_look, said_once

log = logging.getLogger("service.compacting")
CHILD_NICE = 10
CHECK_SECONDS = 1.0
RETRY_SECONDS = 60.0
WAIT_SECONDS = 600.0  # for another compaction of the table (one run by hand) to end: the command's default


@dataclass
class Pending:
    """What one table's log holds beyond its version, as far as it was read."""

    covered: int = -1  # the version's sequence (the manifest's log_sequence)
    inode: int | None = None
    offset: int = 0
    last: int = 0
    documents: int = 0  # documents written or deleted since the version
    since: float = 0.0  # when the first of them was seen


class AutoCompaction:
    def __init__(self, data_dir: Path, rows: int, seconds: float) -> None:
        self.data_dir = Path(data_dir)
        self.rows = rows
        self.seconds = seconds
        self.pending: dict[str, Pending] = {}  # by log: a table's name, or a sharded table's "<name>/<shard>"
        self.failed: dict[str, float] = {}  # by table: when its last compaction failed
        self._stop = threading.Event()
        self._child: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._run, name="compaction", daemon=True)

    @property
    def retry_seconds(self) -> float:
        """How long after its failed compaction a table is compacted again."""
        return max(RETRY_SECONDS, self.seconds)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            child.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)

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
                compacted = self._compact(name)
                count_compaction(name, compacted)
                if compacted:
                    for key in [key for key in self.pending if key == name or key.startswith(f"{name}/")]:
                        del self.pending[key]
                    self.failed.pop(name, None)
                    os.kill(os.getpid(), signal.SIGHUP)  # this process: the server, or the supervisor of its workers
                else:
                    self.failed[name] = time.monotonic()

    def logs(self) -> dict[str, list[tuple[str, Path, int]]]:
        """Each table with a write log here: (its key in :attr:`pending`, the log, the last write the version of the
        table or shard that reads it holds: its manifest's ``log_sequence``) of each of its logs."""
        top = self.data_dir / writelog.DIRECTORY
        out: dict[str, list[tuple[str, Path, int]]] = {}
        for path in sorted(top.iterdir()) if top.is_dir() else []:
            if path.is_dir():  # a sharded table's: a log per shard
                name = path.name
                shards = sorted(path.glob(f"shard-*{writelog.SUFFIX}"))
                logs = [(f"{name}/{log.stem}", log, self._table(name) / log.stem) for log in shards]
            elif path.name.endswith(writelog.SUFFIX) and not path.name.startswith("."):
                name = path.name.removesuffix(writelog.SUFFIX)
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
        return artifact.table_dir(self.data_dir, name)

    @staticmethod
    def _covered(directory: Path) -> int | None:
        """The last write the version in ``directory`` holds when that table or shard reads its log at
        ``writelog.table_log(directory)``; None when it does not (a sharded table's own directory), or is gone, being
        replaced or refused (the registry reports it)."""
        try:
            manifest = artifact.read_manifest(directory)
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
            failed_at = self.failed.get(name, 0.0)
            if failed_at and now - failed_at < self.retry_seconds:
                continue
            if (self.rows and documents >= self.rows) or (self.seconds and now - since >= self.seconds):
                out.append(name)
        return out

    def _read(self, key: str, path: Path, covered: int) -> Pending:
        state = self.pending.get(key)
        if state is None or state.covered != covered:
            state = self.pending[key] = Pending(covered=covered)
        records, state.offset, inode = writelog.read_new(path, state.offset, state.last, state.inode)
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

    def _compact(self, name: str) -> bool:
        command = [sys.executable, "-m", "index", "--nice", str(CHILD_NICE), "compact", name]
        command += ["--data-dir", str(self.data_dir), "--wait", f"{WAIT_SECONDS:g}"]
        documents = sum(state.documents for key, state in self.pending.items() if key.split("/")[0] == name)
        log.info("table %r: compacting %d written or deleted documents into its next version", name, documents)
        try:
            self._child = child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except OSError as exc:
            log.error("table %r: cannot start the compaction: %s", name, exc)
            return False
        output = child.communicate()[0]
        if child.returncode != 0:
            last = output.strip().splitlines()[-1] if output.strip() else f"exit {child.returncode}"
            then = f"it keeps its version and its log, and is tried again in {self.retry_seconds:g}s"
            if last.endswith(f": {WAIT_LONGER}"):  # the command's advice; the server tries again by itself
                last, then = last.removesuffix(f": {WAIT_LONGER}"), f"{then}: end that compaction if it hangs"
            log.error("table %r: compaction failed (%s); %s", name, last, then)
            return False
        log.info("table %r: %s", name, output.strip().splitlines()[-1])
        return True
