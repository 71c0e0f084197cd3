"""Watching the data directory: a table published, rebuilt or removed there is served without a signal.

Every ``EMBEDDING_WATCH_SECONDS`` the watcher lists the data directory and stats each table's ``manifest.json``
(a build publishes a table by renaming a new directory into place, so its manifest's inode changes; a table
removed takes its manifest with it). A table whose files were refused (or that is served stale) is looked at
file by file (``registry.fingerprint``): files copied in after their manifest are seen too. When that picture
differs from the last one, it reloads the tables as SIGHUP does (``service.reload``): new and changed tables
are loaded and verified, unchanged ones are kept. A change is served within one interval plus the time its
files take to verify.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from index.store.artifact import MANIFEST, NAME_PATTERN
from service.registry import Registry, fingerprint
from service.reload import Reloader

log = logging.getLogger(__name__)

Picture = tuple[tuple[str, object], ...]


def picture(data_dir: Path, closely: frozenset[str] = frozenset()) -> Picture:
    """Each table directory's name and its manifest's inode, size and mtime (a cheap stat per table); for the
    tables named in ``closely``, every file's."""
    entries: list[tuple[str, object]] = []
    try:
        with os.scandir(data_dir) as children:
            names = [child.name for child in children if NAME_PATTERN.fullmatch(child.name)]
    except OSError:
        return ()
    for name in sorted(names):
        try:
            st = os.stat(data_dir / name / MANIFEST)
        except OSError:
            continue  # not a table (or one being replaced: seen at the next look)
        files = fingerprint(data_dir / name) if name in closely else None
        entries.append((name, (st.st_ino, st.st_size, st.st_mtime_ns, files)))
    return tuple(entries)


def doubtful(registry: Registry | None) -> frozenset[str]:
    """The tables whose files were refused, or that serve an older version than their files: watched closely."""
    if registry is None:
        return frozenset()
    return frozenset(registry.failed) | frozenset(registry.refused) | frozenset(registry.stale)


class Watcher:
    """Polls ``data_dir`` every ``seconds`` and reloads through ``reloader`` when its tables change."""

    def __init__(self, data_dir: Path, seconds: float, reloader: Reloader) -> None:
        self.data_dir = data_dir
        self.seconds = seconds
        self.reloader = reloader
        self.seen = picture(data_dir)  # taken before the tables load: a change while they load is caught
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.seconds > 0:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.seconds)
            closely = doubtful(getattr(self.reloader.app.state, "registry", None))
            now = await run_in_threadpool(picture, self.data_dir, closely)
            if now == self.seen:
                continue
            log.info("the data directory's tables changed: reloading them")
            try:
                await self.reloader()
            except Exception:
                log.exception("reload after a change in the data directory failed")
                continue  # tried again at the next look
            # As the reload left the tables: the picture of the tables it refused is the close one from now on.
            registry = getattr(self.reloader.app.state, "registry", None)
            self.seen = (
                now
                if doubtful(registry) == closely
                else await run_in_threadpool(picture, self.data_dir, doubtful(registry))
            )
