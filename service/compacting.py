"""Automatic compaction: a documents table whose writes since its version pass ``EMBEDDING_COMPACT_ROWS``
documents, or whose oldest such write is ``EMBEDDING_COMPACT_SECONDS`` old, is compacted in the background.

One thread in the server's main process (the supervisor under ``--workers N``) looks at the write logs every
second, reading only what each log gained, and runs ``embedding-index compact NAME`` in a child process at a low
CPU priority, one table at a time; writes go on meanwhile. Once the new version is published the server is sent
SIGHUP and reloads it (``service.reload``), as after a deferred index build. A failed compaction is logged; the
table keeps its version and its log, and is tried again after ``EMBEDDING_COMPACT_SECONDS`` (at least a minute).
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

from index.store import artifact, writelog

log = logging.getLogger("service.compacting")
CHILD_NICE = 10
CHECK_SECONDS = 1.0
RETRY_SECONDS = 60.0


@dataclass
class Pending:
    """What one table's log holds beyond its version, as far as it was read."""

    covered: int = -1  # the version's sequence (the manifest's log_sequence)
    inode: int | None = None
    offset: int = 0
    last: int = 0
    documents: int = 0  # documents written or deleted since the version
    since: float = 0.0  # when the first of them was seen
    failed_at: float = 0.0


class AutoCompaction:
    def __init__(self, data_dir: Path, rows: int, seconds: float) -> None:
        self.data_dir = Path(data_dir)
        self.rows = rows
        self.seconds = seconds
        self.pending: dict[str, Pending] = {}
        self._stop = threading.Event()
        self._child: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._run, name="compaction", daemon=True)

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
        while not self._stop.wait(CHECK_SECONDS):
            for name in self.due():
                if self._stop.is_set():
                    return
                if self._compact(name):
                    self.pending.pop(name, None)
                    os.kill(os.getpid(), signal.SIGHUP)  # this process: the server, or the supervisor of its workers
                else:
                    self.pending[name].failed_at = time.monotonic()

    def due(self) -> list[str]:
        """The tables whose writes since their version call for a compaction now."""
        out = []
        logs = self.data_dir / writelog.DIRECTORY
        for path in sorted(logs.glob(f"*{writelog.SUFFIX}")) if logs.is_dir() else []:
            name = path.name.removesuffix(writelog.SUFFIX)
            try:
                manifest = artifact.read_manifest(artifact.table_dir(self.data_dir, name))
                state = self._read(name, path, int(manifest.get("log_sequence", 0)))
            except Exception:  # a table being replaced, or refused: the registry reports it
                continue
            if not state.documents:
                continue
            now = time.monotonic()
            if state.failed_at and now - state.failed_at < max(RETRY_SECONDS, self.seconds):
                continue
            if (self.rows and state.documents >= self.rows) or (self.seconds and now - state.since >= self.seconds):
                out.append(name)
        return out

    def _read(self, name: str, path: Path, covered: int) -> Pending:
        state = self.pending.get(name)
        if state is None or state.covered != covered:
            state = self.pending[name] = Pending(covered=covered)
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
        command += ["--data-dir", str(self.data_dir)]
        documents = self.pending[name].documents
        log.info("table %r: compacting %d written or deleted documents into its next version", name, documents)
        try:
            self._child = child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except OSError as exc:
            log.error("table %r: cannot start the compaction: %s", name, exc)
            return False
        output = child.communicate()[0]
        if child.returncode != 0:
            last = output.strip().splitlines()[-1] if output.strip() else f"exit {child.returncode}"
            log.error("table %r: compaction failed (%s); it keeps its version and its log", name, last)
            return False
        log.info("table %r: %s", name, output.strip().splitlines()[-1])
        return True
