"""Deferred indexes, built in the background while the server already answers.

``embedding-index build --defer-index`` (what ``make run`` does) publishes a table for exact search within
seconds and records the approximate index it still needs under ``index.deferred`` in its manifest.
``embedding-serve`` finds such tables when it starts, and those published into its data directory while it runs
(looking as often as ``EMBEDDING_WATCH_SECONDS`` says, or every ``LOOK_SECONDS`` when it is 0, and whenever its
process reloads), and runs ``embedding-index index NAME`` for each, one at a time, in a child process at a low
CPU priority (requests come first). The child publishes the indexed table atomically; the server is then sent
SIGHUP and reloads it (``service.reload``): exact answers until then, approximate ones after. The child keeps its
progress in a status file per table, which ``/readyz`` and ``GET /v1/tables`` show as ``building``, and its lines
in the server's log as they come (``service.logs.relay``). A failed
build is logged and the table keeps its exact search until it is published again. A server that stops ends its
build (the next start builds it again), and so does one killed outright, on Linux (``service.logs.spawn``); a Ctrl-C
on its terminal is the server's alone (the child, ``--background``, ignores it), so the stop is said once, by the
server.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from index import store
from index.engine.door import Table
from service.logs import cannot_look, child_ended, relay, said_once, spawn
from service.settings import STATUS_VARIABLE
from service.temp_dirs import INDEX_STATUS, locked_temp_dir

log = logging.getLogger("service.indexing")
CHILD_NICE = 10
END_SECONDS = 10.0  # how long a background child ends by itself once the server stopping asks it to
LOOK_SECONDS = 2.0  # how often the builds look for tables published with a deferred index, when the data
# directory is not watched (EMBEDDING_WATCH_SECONDS=0): a supervisor of workers sees none of their reloads


def end(child: subprocess.Popen[str]) -> None:
    """End a background child (``embedding-index --background``) as the server stops: SIGTERM, which it takes as an
    interrupt (its temporary folder removed, its locks let go), then SIGKILL if it is still running ``END_SECONDS``
    later (inside a long native call), its leftovers then removed by the next start's recovery."""
    if child.poll() is not None:
        return
    child.terminate()
    try:
        child.wait(timeout=END_SECONDS)
    except subprocess.TimeoutExpired:
        child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=END_SECONDS)


def defers_index(directory: Path) -> bool:
    """Whether the table in ``directory`` has an index its build left for later (False if it cannot be read)."""
    try:
        manifest = store.read_manifest(directory)
    except Exception:  # an unreadable table is the registry's to report
        return False
    return bool(manifest.get("index", {}).get("deferred"))


def building(status_dir: str | None, deferred: Collection[str] = ()) -> dict[str, dict[str, Any]]:
    """The status of each background build (queued, running, failed) by table name; empty when none runs.

    ``deferred``: the tables this process still serves exactly. A build of one of them that is done is reported
    as running until the process has loaded the new version, so that a build no longer reported means the
    answers come from the index. A failed build is reported only while its table is among them: a table
    published again meanwhile (with its index, or removed) has no build pending."""
    if not status_dir:
        return {}
    out: dict[str, dict[str, Any]] = {}
    try:
        paths = sorted(Path(status_dir).glob("*.json"))
    except OSError:
        return {}
    for path in paths:
        status = store.read_status(path)
        if status is None:
            continue
        state = status.get("state")
        if state == "failed":
            if path.stem in deferred:
                out[path.stem] = status
        elif state != "done":
            out[path.stem] = status
        elif path.stem in deferred:
            out[path.stem] = {"state": "running", "step": "loading the new version", "done": 1.0}
    return out


def serving_deferred(tables: dict[str, Table]) -> set[str]:
    """The names of the loaded tables whose approximate index their build left for later."""
    return {name for name, table in tables.items() if table.manifest.get("index", {}).get("deferred")}


def builds_of(tables: dict[str, Table]) -> dict[str, dict[str, Any]]:
    """``building`` in this process's app (its status directory in ``STATUS_VARIABLE``), for the tables it serves:
    one read of the status files."""
    return building(os.environ.get(STATUS_VARIABLE), serving_deferred(tables))


Version = tuple[str, int, int, int]  # a table's name and its manifest's inode, size and mtime


class IndexBuilds:
    """Runs the deferred index builds of a data directory one after another on a daemon thread.

    The thread looks at the data directory when it starts, every ``seconds`` (0: every ``LOOK_SECONDS``), and
    when its own process reloads its tables (:func:`look_again`): a table published later with a deferred index is built
    as one found at start-up. Each version of a table is tried once: a failed build is not run again until the
    table is published anew."""

    def __init__(self, data_dir: Path, names: list[str] | None = None, seconds: float = 0.0) -> None:
        self.data_dir = Path(data_dir)
        self.names = names  # the tables served (None: every table)
        self.seconds = seconds or LOOK_SECONDS
        self.status_dir = Path(locked_temp_dir(INDEX_STATUS))  # those of servers killed outright removed
        # Each table's version now: whether its deferred index is still to build (False once its build has run).
        self._pending: dict[Version, bool] = {}
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="index-builds", daemon=True)
        self._child: subprocess.Popen[str] | None = None
        self._stopping = False

    def start(self) -> None:
        global _started
        os.environ[STATUS_VARIABLE] = str(self.status_dir)
        atexit.register(self.stop)
        self.look()  # the pending builds are reported as queued before the tables load
        _started = (os.getpid(), self)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """End a build still running (the server is stopping); its table keeps its exact version."""
        child = self._child
        self._stopping = True
        self._wake.set()
        if child is not None:
            end(child)
        shutil.rmtree(self.status_dir, ignore_errors=True)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def look(self) -> list[Version]:
        """The versions whose deferred index is still to build, in name order. Their tables are reported as
        queued; a table queued before but no longer pending (published with its index, removed) no longer is."""
        pending = [version for version in self._versions() if self._pending[version]]
        names = {version[0] for version in pending}
        for name in sorted(names):
            status = store.read_status(self._status(name))
            if status is None or status.get("state") != "queued":
                queued = {"state": "queued", "step": "waiting for its turn", "done": 0.0, "nice": CHILD_NICE}
                store.write_status(self._status(name), queued)
        for path in self.status_dir.glob("*.json"):
            status = store.read_status(path)
            if path.stem not in names and status is not None and status.get("state") == "queued":
                path.unlink(missing_ok=True)
        return pending

    def _versions(self) -> list[Version]:
        """Every table's version now (a stat of its manifest); a manifest is read once per version, and what is
        known of a version is forgotten once the table has another."""
        versions = []
        for name in store.list_tables(self.data_dir):
            if self.names is not None and name not in self.names:
                continue
            directory = store.table_dir(self.data_dir, name)
            try:
                st = os.stat(directory / store.MANIFEST)
            except OSError:
                continue  # removed or being replaced: seen at the next look
            version = (name, st.st_ino, st.st_size, st.st_mtime_ns)
            if version not in self._pending:
                self._pending[version] = defers_index(directory)
            versions.append(version)
        self._pending = {version: self._pending[version] for version in versions}
        return versions

    def _status(self, name: str) -> Path:
        return self.status_dir / f"{name}.json"

    def _run(self) -> None:
        looking: str | None = None  # why the last look failed, said once until a look succeeds
        starting: str | None = None  # why the last build could not start, said once until one starts
        while not self._stopping:
            self._wake.clear()
            try:
                pending = self.look()
            except OSError as exc:  # no descriptor left, a full temporary directory, ...; or the server stopping
                if self._stopping:
                    return
                looking = said_once(log, looking, f"deferred index builds: {cannot_look(exc)}")
                self._wake.wait(self.seconds)
                continue
            looking = None
            if not pending:
                self._wake.wait(self.seconds)
                continue
            version = pending[0]
            self._pending[version] = False  # tried once: a failed build waits for the table's next version
            name = version[0]
            built = self._build(name)
            if isinstance(built, OSError):  # not started (no descriptor or process left): tried at the next turn
                self._pending[version] = True
                message = f"table {name!r}: cannot start the index build now ({built}); trying again at every turn"
                starting = said_once(log, starting, message)
                self._wake.wait(self.seconds)
                continue
            starting = None
            if built and not self._stopping:
                log.info("index of table %r published; reloading", name)
                os.kill(os.getpid(), signal.SIGHUP)  # this process: the server, or the supervisor of its workers

    def _build(self, name: str) -> bool | OSError:
        """Run the build of table ``name``'s index in a child process: whether it published it, or why the child
        could not be started."""
        status = self._status(name)
        command = [sys.executable, "-m", "index", "--nice", str(CHILD_NICE), "--background"]
        command += ["--status-file", str(status), "index", name, "--data-dir", str(self.data_dir)]
        env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1)}  # the build may use every core
        try:
            self._child = child = spawn(command, env)
        except OSError as exc:
            return exc
        log.info("table %r: building its index in the background (exact search until it is ready)", name)
        last = relay(child, log, name, lambda: self._stopping)
        if child.wait() != 0:
            if self._stopping:
                log.info("table %r: index build stopped with the server; the next start builds it", name)
                return False
            why = child_ended(child.returncode, last)
            log.error("table %r: index build failed (%s); it keeps exact search", name, why)
            store.write_status(status, {"state": "failed", "step": why.removeprefix("embedding-index: "), "done": 0.0})
            return False
        store.write_status(status, {"state": "done", "step": "published", "done": 1.0})
        return True


_started: tuple[int, IndexBuilds] | None = None  # the builds this process runs, and its pid


def look_again() -> None:
    """Have this process's builds (if it runs them) look at the data directory now: its tables were reloaded."""
    if _started is not None and _started[0] == os.getpid():  # a forked worker does not run its parent's thread
        _started[1].wake()


def start(data_dir: Path, names: list[str] | None, seconds: float) -> IndexBuilds:
    """Build in the background every deferred index of ``data_dir`` (of ``names``, if given), now and as tables
    are published, looking every ``seconds`` (0: every ``LOOK_SECONDS``) and on this process's reloads."""
    builds = IndexBuilds(data_dir, names, seconds)
    builds.start()
    return builds
