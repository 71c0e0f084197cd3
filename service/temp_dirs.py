"""Directories a server makes in the temporary directory for as long as it runs: the metrics directory of
``embedding-serve --workers N`` (``PROMETHEUS_MULTIPROC_DIR``, when not given) and the background index builds'
status directory (``service.indexing``). The server removes them when it exits; one killed outright (kill -9, the
OOM killer) cannot, so each new server removes those of servers that are gone.

A server's directory is locked (``flock``) by the process that made it, and so by the workers forked from it,
which share its open file: the kernel releases the lock when the last of them exits, however it ends. A directory
is removed only if it has the prefix asked for, belongs to this user and its lock can be taken: never one of a
server still running, here or in another PID namespace sharing the temporary directory (the pid in its name, there
for the operator, could be another namespace's or reused), nor another user's. The prefixes differ from those of
earlier versions' directories, which no lock tells in use.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile

METRICS = "embedding-serve-metrics-"
INDEX_STATUS = "embedding-serve-index-status-"

_HELD: list[int] = []  # the open directories whose locks this process holds as long as it runs


def locked_temp_dir(prefix: str) -> str:
    """A new directory ``<prefix><pid>-*`` in the temporary directory, locked for as long as this process or a
    process forked from it runs; those of ``prefix`` that no running server holds removed first."""
    remove_abandoned(prefix)
    while True:
        path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue  # another server starting removed it before it was open: make another
        if _lock(fd) and _is(fd, path):
            _HELD.append(fd)
            return path
        os.close(fd)  # another server's removal took it between its making and its lock: make another


def remove_abandoned(prefix: str) -> list[str]:
    """Remove this user's directories of ``prefix`` that no running server holds; return their paths."""
    try:
        with os.scandir(tempfile.gettempdir()) as entries:
            candidates = [entry.path for entry in entries if entry.name.startswith(prefix)]
    except OSError:
        return []
    removed = []
    for path in candidates:
        try:
            status = os.lstat(path)
            if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
                continue  # a link, or another user's
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone meanwhile, or not ours to open
        try:
            if _lock(fd) and _is(fd, path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        finally:
            os.close(fd)  # the lock with it
    return removed


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _is(fd: int, path: str) -> bool:
    """The open directory ``fd`` is still the one at ``path``."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except OSError:
        return False
