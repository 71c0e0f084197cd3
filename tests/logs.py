"""A table's write log read as a load reads it, for the tests that look at what it holds."""

from __future__ import annotations

from pathlib import Path

from index.store import writelog


def recovered(path: Path) -> list[writelog.Record]:
    """Every good record of the log at ``path`` (none without a log), read as a server's load and a compaction
    read it (``writelog.recover_pieces``: a torn or corrupt tail cut, with a warning; a damaged record in the
    middle raises ``LogCorrupt``), its pieces joined."""
    return [record for records in writelog.recover_pieces(path) for record in records]


def read_only(path: Path) -> list[writelog.Record]:
    """Every good record of the log at ``path``, read as a replica on a read-only mount and a compaction's check
    read it (``writelog.read_pieces``: a torn tail left for its writer to cut), its pieces joined."""
    return [record for records in writelog.read_pieces(path) for record in records]
