"""Watching the data directory: a table published, rebuilt or removed there is served without a signal.

Every ``EMBEDDING_WATCH_SECONDS`` the watcher lists the data directory and stats each table's files (a build
publishes a table by renaming a new directory into place, so its manifest's inode changes; a table removed takes
its manifest with it; a file written over in place changes its size or mtime, and the registry withdraws the
table it served from it). Of a table whose files were refused (or that is served stale) its write logs are
looked at too (``registry.fingerprint``): a log repaired is seen. When that picture differs from the last one,
or the last reload could not load a table for a passing want (``Registry.passing``: no descriptor or memory
left) and ended ``PASSING_RETRY_SECONDS`` ago, it reloads the tables as SIGHUP does (``service.reload``): new and
changed tables are loaded and verified, unchanged ones are kept. A change is served within one interval plus the
time its files take to verify. A server given ``EMBEDDING_TABLES`` watches those tables only. Every reload (the
watcher's, SIGHUP's or ``POST /v1/admin/reload``'s) takes the picture the next look compares with just before it
scans, so a change a signal has already loaded is not loaded again.

A sharded table's directory served alone (its shards) is watched together with the encoders its shards name
that the registry loaded, refused or did not find beside it, in its parent (``Registry._encoders_beside``): each
look compares each one's manifest (its stat; a refused one's files, one by one) with the version the registry
holds, so an encoder published, rebuilt, damaged or repaired beside the directory is reloaded within one interval
too, and its shards refused or served again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from index.store import MANIFEST, NAME_PATTERN
from service.registry import Fingerprint, Registry, fingerprint
from service.reload import Reloader

log = logging.getLogger(__name__)

Picture = tuple[tuple[str, object], ...]
# The least time from the end of a reload to the next one for a table not loaded for a passing want alone: a want
# that lasts (an address space too small to map the table) would otherwise verify the table's files again at every
# look, or, for a table that takes longer than that to verify, without a pause
PASSING_RETRY_SECONDS = 10.0


def picture(data_dir: Path, closely: frozenset[str] = frozenset(), only: frozenset[str] | None = None) -> Picture:
    """Each table directory's name, its manifest's inode, size and mtime, and its files' (a stat per file: a file
    written over in place is seen too); for the tables named in ``closely``, their write logs' as well. ``only``:
    the tables served (None: every table)."""
    entries: list[tuple[str, object]] = []
    try:
        with os.scandir(data_dir) as children:
            names = [
                child.name
                for child in children
                if NAME_PATTERN.fullmatch(child.name) and (only is None or child.name in only)
            ]
    except OSError:
        return ()
    for name in sorted(names):
        try:
            st = os.stat(data_dir / name / MANIFEST)
        except OSError:
            continue  # not a table (or one being replaced: seen at the next look)
        files = fingerprint(data_dir / name) if name in closely else _files(data_dir / name)
        entries.append((name, (st.st_ino, st.st_size, st.st_mtime_ns, files)))
    return tuple(entries)


def doubtful(registry: Registry | None) -> frozenset[str]:
    """The tables whose files were refused, or that serve an older version than their files: watched closely."""
    if registry is None:
        return frozenset()
    return frozenset(registry.failed) | frozenset(registry.refused) | frozenset(registry.stale)


def unseen_since(registry: Registry | None, now: Picture) -> Picture:
    """``now`` with each table whose files differ from those its reload refused marked unseen: files copied in
    between that reload's scan and this picture are a change the next look reloads."""
    refused = registry.refused if registry is not None else {}
    return tuple(
        (
            name,
            None
            if isinstance(entry, tuple) and entry[3] is not None and name in refused and entry[3] != refused[name]
            else entry,
        )
        for name, entry in now
    )


def encoders_held(registry: Registry | None) -> Picture:
    """The encoders ``registry`` loaded, refused or did not find beside its data directory, as it holds them: a
    loaded one's manifest entry, a refused one's files, None for one that was not there."""
    if registry is None:
        return ()
    held: dict[str, object] = dict.fromkeys(registry.beside_missing)
    held |= {name: _manifest_of(files) for name, files in registry.beside_versions.items()}
    held |= {name: files for name, (files, _) in registry.beside_refused.items()}
    return tuple(sorted(held.items()))


def encoders_now(registry: Registry | None) -> Picture:
    """The same encoders as they are beside the data directory now, to compare with ``encoders_held``."""
    if registry is None:
        return ()
    parent = registry.beside_dir()
    return tuple(
        (name, _files(parent / name) if name in registry.beside_refused else _manifest(parent / name, was is None))
        for name, was in encoders_held(registry)
    )


def _manifest_of(files: Fingerprint) -> object:
    return next((entry for entry in files if entry[0] == MANIFEST), None)


def _manifest(directory: Path, missing: bool = False) -> object:
    """A table's manifest entry as a fingerprint gives it, or None where the registry finds no table: no manifest
    file, or (for one ``missing`` when it loaded) a directory it cannot list. Else such a table would look changed
    at every look, and be reloaded in a loop."""
    try:
        st = os.stat(directory / MANIFEST)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or (missing and fingerprint(directory) is None):
        return None
    return (MANIFEST, st.st_ino, st.st_size, st.st_mtime_ns)


def _files(directory: Path) -> object:
    return fingerprint(directory, logs=False)


class Watcher:
    """Polls ``data_dir`` every ``seconds`` and reloads through ``reloader`` when its tables (``names``, or every
    table) change."""

    def __init__(self, data_dir: Path, seconds: float, reloader: Reloader, names: list[str] | None = None) -> None:
        self.data_dir = data_dir
        self.seconds = seconds
        self.reloader = reloader
        self.only = None if names is None else frozenset(names)
        self.closely: frozenset[str] = frozenset()  # the tables the last picture looked at with their write logs
        self.seen = self.look()  # taken before the tables load: a change while they load is caught
        self.reloaded = time.monotonic()  # the last load began (or the start-up load ended)
        reloader.before_scan = self.before_reload
        self._task: asyncio.Task[None] | None = None

    def look(self, closely: frozenset[str] | None = None) -> Picture:
        """The picture of the data directory now, the tables in doubt (or ``closely``) with their write logs."""
        closely = doubtful(getattr(self.reloader.app.state, "registry", None)) if closely is None else closely
        return picture(self.data_dir, closely, self.only)

    def change(self) -> str | None:
        """What changed since the tables were last loaded (None: nothing): the data directory's tables, or
        encoders beside it; or a table or encoder the last reload could not load for a passing want (no descriptor
        or memory left), tried again ``PASSING_RETRY_SECONDS`` after the last load until it loads."""
        if self.reloader.busy():
            return None  # looked at again once that reload has ended: it took its picture as it began
        if self.look(self.closely) != self.seen:
            return "the data directory's tables changed"
        registry = getattr(self.reloader.app.state, "registry", None)
        last = max(self.reloaded, self.reloader.ended)  # the last load's start, or its end once it ended
        if registry is not None and registry.passing and time.monotonic() - last >= PASSING_RETRY_SECONDS:
            return f"table {registry.passing[0]!r} was not loaded for want of a descriptor or of memory"
        held, now = encoders_held(registry), encoders_now(registry)
        changed = [name for (name, was), (_, entry) in zip(held, now, strict=True) if entry != was]
        return f"table {changed[0]!r} beside the data directory changed" if changed else None

    def before_reload(self) -> None:
        """Called by every reload (in its thread) just before it scans the data directory: what it loads is what
        the next look compares with."""
        self.closely = doubtful(getattr(self.reloader.app.state, "registry", None))
        self.seen = self.look(self.closely)
        self.reloaded = time.monotonic()

    def start(self) -> None:
        self.reloaded = time.monotonic()  # the start-up load's end
        if self.seconds > 0:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.seconds)
            change = await run_in_threadpool(self.change)
            if change is None:
                continue
            log.info("%s: reloading them", change)
            try:
                await self.reloader()
            except Exception:
                log.exception("reload after a change in the data directory failed")
                self.seen = ()  # tried again at the next look
                continue
            # The tables the reload refused are watched with their logs from now on: their picture is taken anew.
            registry = getattr(self.reloader.app.state, "registry", None)
            closely = doubtful(registry)
            if closely != self.closely:
                self.closely = closely
                self.seen = unseen_since(registry, await run_in_threadpool(self.look, closely))
