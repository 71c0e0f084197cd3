"""The stored format: a table's artifact (manifest, checksums, publishing, recovery), its tokens, unit rows, per-row
metadata, a documents table's payload, and its write log. Imports nothing else of ``index`` but ``errors``,
``progress`` and ``lazy``.

Outside ``index`` (the server) the store is this package, its face: the tables of a data directory (their names,
manifests, recovery, an index build's status file beside them) and a table's write log (appended to under its lock,
read from where a reader stopped, the damage it refuses). Modules inside ``index`` import the store's modules
themselves, never this face (which imports them).
"""

from index.progress import read_status, write_status
from index.store.artifact import (
    MANIFEST,
    NAME_PATTERN,
    check_name,
    directory_identity,
    list_tables,
    read_manifest,
    recover,
    table_dir,
)
from index.store.writelog import (
    COMPACTION_WAIT_SECONDS,
    Appender,
    LogCorrupt,
    LogMismatch,
    LogWriteFailed,
    Record,
    appending,
    log_owner,
    log_path,
    read_new,
    table_log,
)
from index.store.writelog import DIRECTORY as LOG_DIRECTORY
from index.store.writelog import SUFFIX as LOG_SUFFIX

__all__ = [
    "COMPACTION_WAIT_SECONDS",
    "LOG_DIRECTORY",
    "LOG_SUFFIX",
    "MANIFEST",
    "NAME_PATTERN",
    "Appender",
    "LogCorrupt",
    "LogMismatch",
    "LogWriteFailed",
    "Record",
    "appending",
    "check_name",
    "directory_identity",
    "list_tables",
    "log_owner",
    "log_path",
    "read_manifest",
    "read_new",
    "read_status",
    "recover",
    "table_dir",
    "table_log",
    "write_status",
]
