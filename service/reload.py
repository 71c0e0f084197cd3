"""Reloading the tables of a running server: ``POST /v1/admin/reload`` and SIGHUP.

A reload re-scans the data directory off the event loop, builds the next :class:`Registry` (see there) and
publishes it with one assignment to ``app.state.registry``. Reloads run one at a time. Under
``embedding-serve --workers N`` the HTTP reload also signals the supervisor, which passes SIGHUP on to every
worker, so all of them pick up the change.

A worker that finds it lacks writes only a newer version of a table holds (``service.live``) reloads by itself
(:class:`CatchUp`), each worker process for itself, without a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from service import indexing, live
from service.registry import Registry

log = logging.getLogger(__name__)


class Reloader:
    """Swaps ``app.state.registry`` for a freshly scanned one, one reload at a time."""

    def __init__(self, app: FastAPI, on_loaded: Callable[[Registry], None]) -> None:
        self.app = app
        self.on_loaded = on_loaded  # e.g. let the metrics accept the new table names
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.owed = False  # a SIGHUP came while the tables were loading
        self.before_scan: Callable[[], None] | None = None  # the data directory's watcher takes its picture
        self.ended = 0.0  # time.monotonic() at the end of the last reload (the watcher's retries wait from it)

    def loaded(self) -> None:
        """The start-up load is done: run the reload a SIGHUP asked for meanwhile."""
        if self.owed:
            self.owed = False
            self._on_sighup()

    def busy(self) -> bool:
        """A reload is running (in any thread)."""
        return self._lock.locked()

    def reload(self) -> dict[str, Any]:
        """Blocking: scan, load what changed, publish; returns what happened."""
        with self._lock:
            current: Registry | None = getattr(self.app.state, "registry", None)
            if current is None:
                raise RuntimeError("the tables are still loading")
            started = time.perf_counter()
            if self.before_scan is not None:
                self.before_scan()
            registry, report = current.reload()
            self.on_loaded(registry)
            self.app.state.registry = registry  # the swap: one reference assignment
            seconds = time.perf_counter() - started
            self.ended = time.monotonic()
        indexing.look_again()  # a table loaded with a deferred index gets it built, as at start-up
        log.info(
            "reload: %d loaded, %d unchanged, %d refused (previous version kept), %d missing, %d removed, %.2fs",
            *(len(report[k]) for k in ("loaded", "unchanged", "refused", "missing", "removed")),
            seconds,
        )
        return {**report, "ready": registry.ready, "seconds": round(seconds, 3)}

    async def __call__(self) -> dict[str, Any]:
        return await run_in_threadpool(self.reload)

    # ------------------------------------------------------------------------------------------ SIGHUP
    def install_sighup(self) -> bool:
        """Reload on SIGHUP; only possible in the main thread of a process (as under uvicorn)."""
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGHUP"):
            return False
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._on_sighup)
        except (NotImplementedError, RuntimeError, ValueError):
            return False
        return True

    def remove_sighup(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

    def _on_sighup(self) -> None:
        if getattr(self.app.state, "registry", None) is None:
            self.owed = True  # still loading: reload once loaded, the load may have read a table before the change
            return
        log.info("SIGHUP: reloading the tables")
        task = asyncio.get_running_loop().create_task(self._reload_logged())
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def _reload_logged(self) -> None:
        try:
            await self()
        except Exception:
            log.exception("reload after SIGHUP failed")


class CatchUp:
    """The reload a worker behind its table's writes (or serving a table since imported again) asks for
    (``live.when_behind``): one at a time however many
    requests ask meanwhile, run as SIGHUP's is. When it leaves the table behind (its new files refused: the
    registry keeps the older version), the next waits ``FIRST_WAIT_SECONDS``, doubling to ``LONGEST_WAIT_SECONDS``,
    so a version that cannot be loaded is not scanned for again at every request."""

    FIRST_WAIT_SECONDS = 1.0
    LONGEST_WAIT_SECONDS = 30.0

    def __init__(self, reloader: Reloader) -> None:
        self.reloader = reloader
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._wait = 0.0  # before the next reload after the last one (0: none since one loaded the table)
        self._next = 0.0  # time.monotonic() before which no reload is started
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        live.when_behind(self.ask)

    def stop(self) -> None:
        live.when_behind(None)

    def ask(self, name: str, why: str) -> None:
        """Have the tables reloaded for table ``name``'s newer version (from any thread), which this worker needs for
        ``why``: at once, unless one such reload runs or the wait after the last has not passed."""
        with self._lock:
            if self._loop is None or self._running or time.monotonic() < self._next:
                return
            self._running = True
        self._loop.call_soon_threadsafe(self._spawn, name, why)

    def _spawn(self, name: str, why: str) -> None:
        task = asyncio.get_running_loop().create_task(self._reload(name, why))
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def _reload(self, name: str, why: str) -> None:
        log.info("table %r: %s: reloading the tables", name, why)
        loaded = False
        try:
            loaded = name in (await self.reloader())["loaded"]
        except Exception:
            log.exception("reload for the newer version of table %r failed", name)
        with self._lock:
            self._running = False
            longer = min(max(2 * self._wait, self.FIRST_WAIT_SECONDS), self.LONGEST_WAIT_SECONDS)
            self._wait = 0.0 if loaded else longer
            self._next = time.monotonic() + self._wait


def signal_supervisor(app: FastAPI) -> bool:
    """Ask the ``embedding-serve`` supervisor (if this worker has one) to pass SIGHUP on to every worker."""
    pid = getattr(app.state, "supervisor_pid", None)
    if not pid:
        return False
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError:
        log.warning("could not signal the supervisor process %s to reload the other workers", pid)
        return False
    return True
