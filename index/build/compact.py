"""Compaction: a documents table's write log folded into its next version (``embedding-index compact``).

The next version holds the current version's documents that were not deleted or replaced, in their order, then
the written documents in write order, as a fresh import of those documents would: the same payload columns and
types, vectors normalised by the builder, the keyword index and the approximate index rebuilt by the same code
and options. Its manifest records ``log_sequence``, the last write it holds; it is published atomically as every
build is, and the log is then cut at that sequence, keeping the writes that arrived meanwhile. A server reloads
the new version as after any build (watching the data directory, SIGHUP, or ``POST /v1/admin/reload``), and
replays only the later writes over it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from index.build.budget import AUTO_BUDGET_SECONDS
from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.delta import Delta
from index.engine.keyword import for_documents
from index.engine.table import Table
from index.errors import EVERY_DOCUMENT_DELETED, WAIT_LONGER, WRITES_ONLY, ArtifactError, InvalidQuery, not_documents
from index.progress import CONFIG, Progress, duration, note
from index.store import artifact, writelog
from index.store.payload import KIND, payload_files

log = logging.getLogger(__name__)


def compact(data_dir: Path, name: str, wait: float = writelog.COMPACTION_WAIT_SECONDS) -> dict[str, Any]:
    """Fold table ``name``'s write log into its next version; return what was done (``written`` 0: nothing to do).
    Another process's compaction of the table is waited for ``wait`` seconds at most (:func:`locked`)."""
    directory = artifact.table_dir(data_dir, name)
    kind = artifact.read_manifest(directory).get("kind", "words")  # no such table: said before any lock is made
    if kind != "documents":
        raise not_documents(name, kind, WRITES_ONLY)
    with locked(data_dir, name, wait):
        again = None
        for _ in range(artifact.ROUNDS):  # again while the version is published anew meanwhile (index, sif)
            if again is not None:
                note(f"{again.message}; compacting the newest version ...")
            try:
                return _compact(data_dir, name, directory, writelog.log_path(data_dir, name))
            except Republished as exc:
                again = exc
    raise ArtifactError(
        f"table {name!r} not compacted: a newer version of it was published each of the {artifact.ROUNDS} times it "
        "was compacted (embedding-index index or sif run meanwhile); nothing replaced: compact it again once they "
        "are done"
    )


class Republished(ArtifactError):
    """A compaction's version published anew from the same build (its index or SIF component replaced) meanwhile."""


POLL_SECONDS = 0.05  # how often a compaction waiting for another's lock tries it


@contextmanager
def locked(data_dir: Path, name: str, wait: float = writelog.COMPACTION_WAIT_SECONDS) -> Iterator[None]:
    """Table ``name``'s compaction lock held; while another process holds it (a server's compaction and one run by
    hand), waited for ``wait`` seconds at most, saying so every few seconds, so the later one folds the writes made
    since the other's version; then :class:`ArtifactError`, naming the process that held it (the lock file holds
    its holder's process id)."""
    path = writelog.compaction_lock(data_dir, name)
    path.parent.mkdir(exist_ok=True)
    lock_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if not artifact.try_lock(lock_fd):
            _wait_for(lock_fd, name, wait)
        with contextlib.suppress(OSError):  # its id, for the compactions waiting for it to name (not on a full disk)
            os.ftruncate(lock_fd, 0)
            os.pwrite(lock_fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(lock_fd)


def _wait_for(fd: int, name: str, wait: float) -> None:
    """The compaction lock open as ``fd`` taken once the process holding it lets it go, within ``wait`` seconds."""
    if not wait:
        raise ArtifactError(
            f"table {name!r} not compacted: another compaction of it{_holder(fd)} holds its lock, and --wait 0 does "
            f"not wait for it; nothing was changed: {WAIT_LONGER}"
        )
    bound = f"{_span(wait)} at most (--wait)"
    note(f"table {name!r} is being compacted by another process{_holder(fd)}; waiting for it, {bound} ...")
    started = said = time.monotonic()
    while not artifact.try_lock(fd):
        now = time.monotonic()
        if now - started >= wait:
            raise ArtifactError(
                f"table {name!r} not compacted: another compaction of it{_holder(fd)} held its lock for the "
                f"{_span(wait)} it was given; nothing was changed: {WAIT_LONGER}"
            )
        if now - said >= CONFIG.interval:
            said = now
            other = f"{name!r}{_holder(fd)}"
            note(f"still waiting for the other compaction of {other}: {duration(now - started)} of {bound} ...")
        time.sleep(min(POLL_SECONDS, max(0.0, started + wait - now)))


def _span(seconds: float) -> str:
    """A ``--wait`` as said: under a second as such (``0.4s``), else as a duration (``10m00s``)."""
    return f"{seconds:.2g}s" if seconds < 1 else duration(seconds)


def _holder(fd: int) -> str:
    """`` (process N)`` for the compaction holding the lock open as ``fd``, as it wrote its id in the lock file; read
    each time it is said, since the lock may pass to another meanwhile. Empty when none is written (a full disk)."""
    holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f" (process {holder})" if holder.isdigit() else ""


def finish(data_dir: Path, logs: list[tuple[Path, int]]) -> int:
    """After a version is published, by this compaction or by one killed before it finished: the older version it
    swapped out removed, and each log cut at the last write the version holds. Returns the records kept."""
    for path, what in artifact.recover(data_dir):
        log.warning("%s: %s", path, what)
    return sum(writelog.cut(path, covered) for path, covered in logs)


def folded(table: Table, delta: Delta) -> tuple[pa.Table, np.ndarray, dict[str, Any]]:
    """The documents a fresh import of the table's live documents would hold (the version's that were not
    deleted or replaced, in order, then the written ones in write order): payload, vectors, manifest info."""
    payload = table.payload
    assert payload is not None
    keep = np.flatnonzero(~delta.deleted)
    names = [payload.id_field, *([payload.text_field] if payload.text_field else []), *payload.fields]
    written = delta.columns()
    columns = []
    for column in names:
        old = payload.column(column).take(pa.array(keep))
        new = written.column(column).cast(old.type)
        columns.append(pa.concat_arrays([old, new]))
    documents = pa.table(columns, names=names)
    _, units, norms = delta.matrix()
    matrix = np.vstack(
        [table.vectors[keep] * table.norms[keep][:, None], units * norms[:, None]]  # the vectors as imported
    ).astype(np.float32)
    info = copy.deepcopy(table.manifest[KIND])
    info["count"] = documents.num_rows
    if payload.text_field:
        info["text_non_null"] = documents.num_rows - documents.column(payload.text_field).null_count
    for field in payload.fields:
        info["fields"][field]["non_null"] = documents.num_rows - documents.column(field).null_count
    return documents, matrix, info


def replay(name: str, delta: Delta, path: Path) -> None:
    """The log's writes past the version into ``delta``, as a server replays them at load: a log that does not
    follow its version (a gap, another schema) or that holds a damaged record or an op this release does not write,
    or one it could not cut once the new version is published (read only), stops the compaction, naming the table,
    before anything is folded."""
    try:
        writelog.check_writable(path)
    except writelog.LogWriteFailed as exc:
        raise writelog.LogWriteFailed(
            f"table {name!r} not compacted: {exc.message}, and a compaction cuts it once its new version is "
            "published; nothing was changed (make it writable, then compact again)"
        ) from None
    size = path.stat().st_size if path.is_file() else 0
    try:
        with Progress(f"replaying {path.name}", size, "bytes") as bar:
            delta.replay_log(path, lambda end: bar.advance(end - bar.done))
    except (writelog.LogMismatch, writelog.LogCorrupt) as exc:  # as the load refuses the table, named
        raise type(exc)(f"table {name!r} not compacted (its write log): {exc}") from None


def check_log(directory: Path, path: Path) -> None:
    """Raise as a server loading the documents table at ``directory`` would for its write log at ``path``: a
    damaged record (:class:`writelog.LogCorrupt`), a log that does not follow the version or a write it cannot
    take (:class:`writelog.LogMismatch`). The log is only read."""
    table = Table.load(directory, checksums=False)  # its files are checked by the caller
    if table.payload is not None:
        delta = Delta(table.payload, table.rows, table.dim, int(table.manifest.get("log_sequence", 0)))
        with contextlib.closing(writelog.read_pieces(path)) as pieces:
            for records in pieces:
                delta.replay(records)


def built_as(manifest: dict[str, Any]) -> dict[str, Any]:
    """``build_table``'s options as the version of ``manifest`` was built (index, recall, seed, build budget): the
    next version is built as the import built it (a table built before the budget was recorded: the default one).
    Where that index no longer reaches the recall (rows that tie massively, among which a graph loses its way), the
    one ``auto`` takes is built instead, recorded under ``index.fallback``: a compaction that refused would leave
    its log to grow at every write."""
    build = manifest.get("build", {})
    return {
        "index_spec": str(build.get("index", "auto")),
        "min_recall": float(build.get("min_recall", 0.95)),
        "params": build,
        "seed": int(build.get("seed", 0)),
        "budget": float(build.get("budget_seconds", AUTO_BUDGET_SECONDS)),
        "fallback": True,
    }


def unchanged(
    directory: Path, manifest: dict[str, Any], name: str, files: dict[str, tuple[int, int, int]]
) -> Callable[[Path], None]:
    """A publish's last check, under its lock: the table at ``directory`` is still the version of ``manifest``
    (none was published since the compaction read it) and its ``files`` (``artifact.identity``, taken before they
    were verified) were not written over in place, which the new version would hold as verified; else nothing is
    replaced."""

    def check(_: Path) -> None:
        newest, now = artifact.read_manifest(directory), artifact.identity(directory)
        # another manifest file (inode) is a version published, even one whose manifest repeats the last (an index
        # rebuilt); the same file written over in place is damage, said below
        inode = now.get(artifact.MANIFEST, (None,))[0]
        if newest != manifest or inode != files.get(artifact.MANIFEST, (None,))[0]:
            again = Republished if artifact.same_build(newest, manifest) else ArtifactError
            raise again(f"table {name!r} was published again while it was being compacted; nothing replaced")
        if written := sorted(path for path, was in files.items() if now.get(path) != was):
            raise ArtifactError(
                f"table {name!r}: {', '.join(written)} changed in place while it was being compacted; nothing "
                "replaced (embedding-index verify names the damage)"
            )

    return check


def all_deleted(name: str, logs: str) -> InvalidQuery:
    """The refusal of a compaction that would leave table ``name`` without a document (a table holds at least one):
    it serves on from its version and ``logs``."""
    return InvalidQuery(
        f"table {name!r} not compacted: {EVERY_DOCUMENT_DELETED}; it serves on from its version and "
        f"{logs} (compact it once a document is added, or remove it)"
    )


def _compact(data_dir: Path, name: str, directory: Path, path: Path) -> dict[str, Any]:
    files = artifact.identity(directory)
    note(f"verifying {directory} ...")
    table = Table.load(directory)
    payload = table.documents(WRITES_ONLY)
    manifest = table.manifest
    covered = int(manifest.get("log_sequence", 0))
    delta = Delta(payload, table.rows, table.dim, covered)
    replay(name, delta, path)
    if delta.seq == covered:
        finish(data_dir, [(path, covered)])
        return {"table": name, "log_sequence": covered, "written": 0, "rows": table.rows}
    if not delta.documents and delta.deleted.all():
        raise all_deleted(name, "its write log")
    note(f"folding writes {covered + 1}..{delta.seq} into {name!r} ...")
    documents, matrix, info = folded(table, delta)
    # The table's own stop words and stemmer (an import's options), else the defaults
    tokenizer = table.keyword.tokenizer if table.keyword is not None else None
    keyword_info, keyword_files = for_documents(documents, info, tokenizer)
    raw = RawTable(
        tokens=[str(i) for i in documents.column(0).to_pylist()],
        matrix=matrix,
        info={KIND: info, **keyword_info, "log_sequence": delta.seq, "compacted_at": artifact.now_iso()},
        kind=KIND,
        extra_files={**payload_files(documents), **keyword_files},
    )
    published = build_table(
        raw,
        data_dir=data_dir,
        name=name,
        source=manifest.get("source", {}),
        force=True,
        complete=unchanged(directory, manifest, name, files),
        **built_as(manifest),
    )
    kept = finish(data_dir, [(path, delta.seq)])
    done = {"table": name, "log_sequence": delta.seq, "written": delta.seq - covered, "rows": published["rows"]}
    return {**done, "kept": kept, **fell_back(published)}


def fell_back(manifest: dict[str, Any]) -> dict[str, Any]:
    """``{"fallback": ...}``, what a compaction built in place of the table's index (``index.fallback``), or ``{}``."""
    fallback = manifest.get("index", {}).get("fallback")
    return {"fallback": fallback} if fallback else {}
