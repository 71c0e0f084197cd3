"""A table's write log read as a load reads it, for the tests that look at what it holds; written to by other
processes as workers write it (light to start: they import the log module alone)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from index.store import artifact, writelog


def recovered(path: Path) -> list[writelog.Record]:
    """Every good record of the log at ``path`` (none without a log), read as a server's load and a compaction
    read it (``writelog.recover_pieces``: a torn or corrupt tail cut, with a warning; a damaged record in the
    middle raises ``LogCorrupt``), its pieces joined."""
    return [record for records in writelog.recover_pieces(path) for record in records]


def read_only(path: Path) -> list[writelog.Record]:
    """Every good record of the log at ``path``, read as a replica on a read-only mount and a compaction's check
    read it (``writelog.read_pieces``: a torn tail left for its writer to cut), its pieces joined."""
    return [record for records in writelog.read_pieces(path) for record in records]


def lock_is_free(path: Path, opener: Callable[..., int] = os.open) -> bool:
    """Whether a writer would take the log's lock now (the exclusive lock of a file opened by ``opener``)."""
    fd = opener(path, os.O_RDWR)
    try:
        return artifact.try_lock(fd)
    finally:
        os.close(fd)


def writing_after_the_first_piece(
    replay: Callable[[Any, list[writelog.Record]], None], path: Path, seq: int, body: dict[str, Any]
) -> tuple[Callable[[Any, list[writelog.Record]], None], list[writelog.Record]]:
    """``replay`` (``Delta.replay``) that, after the first piece of the log at ``path`` it is given, finds the log's
    lock free and appends record ``seq`` as another process's writer would; and the records it appended."""
    appended: list[writelog.Record] = []

    def replay_then_write(delta: Any, records: list[writelog.Record]) -> None:
        replay(delta, records)
        if not appended:
            assert lock_is_free(path), "the replay holds the log's lock"
            with writelog.appending(path, sync=False) as log:
                appended.append(log.append(seq, body))

    return replay_then_write, appended


def append_when_started(path: str, bodies: list[dict[str, Any]], started: Any, appended: Any) -> None:
    """Append ``bodies`` once ``started`` is set, one write at a time as a worker appends: under the log's lock, after
    reading what the others appended (a torn tail cut)."""
    started.wait(60)
    offset, last, inode = 0, 0, None
    for body in bodies:
        with writelog.appending(Path(path), sync=False) as log:
            records, offset = log.new_records(offset, last, inode)
            last, inode = (records[-1].seq if records else last), log.inode
            record = log.append(last + 1, body)
            offset, last = record.end, record.seq
        with appended.get_lock():
            appended.value += 1


def killed_in_a_record(path: str, body: dict[str, Any], started: Any) -> None:
    """A writer killed (SIGKILL) halfway through writing its record, once ``started`` is set."""
    started.wait(60)
    with writelog.appending(Path(path), sync=False) as log:
        records, end = log.new_records(0, 0, None)
        data = writelog.frame(records[-1].seq + 1, body)
        os.pwrite(log.fd, data[: len(data) // 2], end)
        os.kill(os.getpid(), signal.SIGKILL)
