"""The tables a server process answers for: loaded at start-up, replaced as a whole on reload.

A :class:`Registry` is never changed once published on ``app.state``. :meth:`Registry.reload` builds the next one
from the data directory, reusing the loaded :class:`Table` of every table whose files did not change, and the
app swaps the reference in one assignment: requests in flight finish on the tables they started with (their files
stay mapped even after a rebuild replaced them on disk), new requests see the new registry.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from rapidfuzz import fuzz, process

from index import store
from index.engine.door import ShardedTable, Table, is_sharded
from index.errors import EmbeddingError
from service import live
from service.errors import ApiError

log = logging.getLogger(__name__)

# What identifies one version of a table on disk: the directory and every file's inode, size and mtime. A rebuild
# publishes a new directory (new inodes); a file changed in place changes its size or mtime. The write logs of the
# table come last (named by their path in the data directory, from "/"): what a refusal for a damaged log depends on.
Fingerprint = tuple[tuple[str, int, int, int], ...]
LOAD_ATTEMPTS = 3  # a table replaced while it was being loaded is loaded again
LOGS = "/"  # the first character of a log's entry, which no file name in the directory has


def fingerprint(directory: Path, logs: bool = True) -> Fingerprint | None:
    """The identity of the table files in ``directory`` (a sharded table's: its shards' too, as ``shard-000/...``)
    and (``logs``) of its write logs, or None if it is gone."""
    try:
        entries = [(".", *_stat(os.stat(directory)))]
    except OSError:
        return None
    with contextlib.suppress(OSError):  # a directory that may not be listed: its load says why
        entries += _entries(directory)
    return tuple(sorted(entries)) + (_logs(directory) if logs else ())


def _entries(directory: Path | str, within: str = "") -> list[tuple[str, int, int, int]]:
    """Each entry of ``directory`` and its identity; the entries of a directory in it too (a shard), unless
    ``within`` one already. A shard that cannot be listed is left to the table's verification to name."""
    entries = []
    with os.scandir(directory) as children:
        for child in children:
            st = _entry_stat(child)
            entries.append((within + child.name, *_stat(st)))
            if not within and stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(OSError):
                    entries += _entries(child.path, f"{child.name}/")
    return entries


def _entry_stat(entry: os.DirEntry[str]) -> os.stat_result:
    """The file an entry names; a symbolic link that leads nowhere, the link itself: the table is still there, and
    its verification names the link."""
    try:
        return entry.stat(follow_symlinks=True)
    except OSError:
        return entry.stat(follow_symlinks=False)


def _logs(directory: Path) -> Fingerprint:
    """The identity of the write log of the table in ``directory``, and of its shards' logs if it has shards."""
    path = store.log_path(directory.parent, directory.name)
    entries = []
    for log_file in [path, *sorted(path.with_suffix("").glob(f"*{store.LOG_SUFFIX}"))]:
        try:
            entries.append((LOGS + str(log_file.relative_to(directory.parent)), *_stat(os.stat(log_file))))
        except OSError:
            continue  # no log (nothing written yet)
    return tuple(entries)


def files_of(version: Fingerprint) -> Fingerprint:
    """The table's own files of a fingerprint: a loaded table is the same version whatever its log holds since."""
    return tuple(entry for entry in version if not entry[0].startswith(LOGS))


def _stat(st: os.stat_result) -> tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def changed_in_place(served: Fingerprint, now: Fingerprint) -> list[str]:
    """The files of the ``served`` version that ``now`` holds as the same file (inode) with another size or mtime:
    written over in place, so the pages a server maps are the new bytes (or none past a cut: SIGBUS), not the
    version it verified. A file replaced by another one (a new inode), or removed, leaves the mapped one whole."""
    current = {entry[0]: entry for entry in now}
    shards = {entry[0].split("/")[0] for entry in served if "/" in entry[0]}  # directories, not mapped files
    return [
        name
        for name, inode, size, mtime in served
        if name not in (".", *shards)
        and name.rsplit("/")[-1] != store.MANIFEST
        and (entry := current.get(name)) is not None
        and entry[1] == inode
        and entry[2:] != (size, mtime)
    ]


# What a refusal is a verdict on, kept until that changes: the table's files, or its write log (a refusal that a
# repaired log lifts); or nothing kept, for a passing want of the machine's (PASSING), tried again at the next reload
FILES, LOG, NOTHING = "files", "log", "nothing"
PASSING = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EINTR})  # descriptors, memory


def _read(directory: Path, checksums: bool) -> tuple[Table | None, str, str]:
    """The table in ``directory`` (verified against its manifest), or None and why not; and what the refusal is a
    verdict on (``FILES``, ``LOG`` or ``NOTHING``)."""
    try:
        if is_sharded(directory):  # its shards, searched as one
            table: Table = ShardedTable.load(directory, checksums=checksums)
            table.tokens.prepare_lookup()
            live.attach(table, directory)  # each shard's write log, replayed
            return table, "", FILES
        table = Table.load(directory, checksums=checksums)
        table.tokens.prepare_lookup()  # now rather than in the first request
        live.attach(table, directory)  # a documents table's write log, replayed
        return table, "", FILES
    except (store.LogCorrupt, store.LogMismatch) as exc:
        return None, exc.message, LOG
    except EmbeddingError as exc:
        return None, exc.message, FILES
    except Exception as exc:  # a corrupt file can fail inside numpy or FAISS
        if isinstance(exc, OSError) and exc.errno in PASSING:
            where = f"{exc.filename}: " if exc.filename else ""
            return None, f"{where}{exc.strerror or exc} (tried again at the next reload)", NOTHING
        log.exception("table %r not loaded", directory.name)
        return None, f"{type(exc).__name__} while loading (see the server log)", FILES


def _read_settled(
    directory: Path, version: Fingerprint, checksums: bool
) -> tuple[Table | None, str, str, Fingerprint, Fingerprint | None]:
    """``_read``, again while the files change under it (replaced while it was read: what was verified may not be
    what is mapped), up to ``LOAD_ATTEMPTS`` times. The table or None and why not, what the refusal is a verdict
    on; the version read, and the directory's fingerprint after the last read (None: gone). Changed under
    every read, the version is the one before the last change: the files as they settle are tried at the next
    reload, not refused with it."""
    for attempt in range(1, LOAD_ATTEMPTS + 1):
        table, reason, verdict = _read(directory, checksums)
        after = fingerprint(directory)
        if after is None:
            return None, reason or "its files changed while they were being loaded", verdict, version, None
        if files_of(after) == files_of(version):
            return table, reason, verdict, version, after
        if attempt < LOAD_ATTEMPTS:
            version = after
    return None, "its files changed while they were being loaded", FILES, version, after


@dataclass
class Registry:
    """Loaded tables by name; requested tables that could not be loaded (name -> reason, for the log only), and
    those of them not served for a reason of the data directory's tables rather than of their files (name ->
    reason, which a request of the table is told); tables that keep serving an older version because their new
    files were refused (name -> reason)."""

    data_dir: Path
    requested: list[str] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    told: dict[str, str] = field(default_factory=dict)
    stale: dict[str, str] = field(default_factory=dict)
    names: list[str] | None = None  # the tables asked for by name (None: every table in the data directory)
    checksums: bool = True
    versions: dict[str, Fingerprint] = field(default_factory=dict)  # of each loaded table
    refused: dict[str, Fingerprint] = field(default_factory=dict)  # files already refused: not verified again
    # Tables and encoders not loaded for a passing want (PASSING: no descriptor or memory left): the watcher
    # reloads at its next look, the files unchanged
    passing: list[str] = field(default_factory=list)
    data_dir_missing: bool = False  # the data directory was gone (moved or removed) when it was scanned
    # Encoders of the shards of a sharded table's directory, loaded from beside it (``_encoders_beside``); of each,
    # the version loaded, and why it was refused (with the files refused, not verified again); those not there
    beside: dict[str, Table] = field(default_factory=dict)
    beside_versions: dict[str, Fingerprint] = field(default_factory=dict)
    beside_refused: dict[str, tuple[Fingerprint, str]] = field(default_factory=dict)
    beside_missing: list[str] = field(default_factory=list)
    sharded: bool = False  # the data directory is a sharded table's: its tables are shards, their encoders beside
    fronting: bool = False  # the server answers sharded tables from their shards: it may have no tables of its own

    @classmethod
    def load(
        cls, data_dir: Path, names: list[str] | None = None, checksums: bool = True, fronting: bool = False
    ) -> Registry:
        """Load ``names`` (default: every table in ``data_dir``); a table that fails is logged and skipped."""
        names = list(names) if names is not None else None
        registry = cls(data_dir=Path(data_dir), names=names, checksums=checksums, fronting=fronting)
        try:
            for path, what in store.recover(registry.data_dir):  # left by a publisher that was killed
                log.warning("%s: %s", path, what)
        except OSError as exc:
            log.warning("%s: leftovers of killed builds not looked for: %s", data_dir, exc.strerror)
        return registry.reload()[0]

    def reload(self) -> tuple[Registry, dict[str, list[str]]]:
        """The next registry, from the data directory as it is now, and what changed (names by outcome).

        New and changed tables are loaded and verified; unchanged ones are reused as they are. A changed table
        whose new files are refused keeps serving its loaded version (``stale``); if it had none it is ``failed``.
        """
        gone = not self.data_dir.is_dir()
        available = store.list_tables(self.data_dir)
        requested = list(self.names) if self.names is not None else available
        if self.names is None:  # a table caught between the two renames of a rebuild is not a removed table
            requested += sorted(name for name in self.tables if name not in available and self._publishing(name))
        nxt = Registry(
            self.data_dir,
            requested,
            names=self.names,
            checksums=self.checksums,
            data_dir_missing=gone,
            fronting=self.fronting,
        )
        nxt.sharded = _sharded_directory(self.data_dir)
        if self.names is None:
            for entry, why in _not_tables(self.data_dir):
                log.warning("%r in the data directory is not served: %s", entry, why)
        absent = "the data directory is missing" if gone else "no table of that name in the data directory"
        report: dict[str, list[str]] = {"loaded": [], "unchanged": [], "refused": [], "missing": [], "removed": []}
        written_over: list[str] = []  # served tables whose mapped files changed in place: withdrawn, not removed
        for name in requested:
            old = self.tables.get(name)
            version = fingerprint(self.data_dir / name) if name in available else None
            if version is None:
                if old is not None and self._publishing(name):
                    nxt._keep(name, old, self.versions[name], self.stale.get(name))
                    report["unchanged"].append(name)
                else:
                    nxt._fail(name, nxt._beside_not_served(name) or absent, told=True)
                    report["missing"].append(name)
                continue
            if old is not None and self.versions.get(name) == files_of(version):
                nxt._keep(name, old, files_of(version), None)
                report["unchanged"].append(name)
                continue
            if self.refused.get(name) in (version, files_of(version)):  # the same files (and log): the same verdict
                nxt.refused[name] = self.refused[name]
                if old is not None:
                    nxt._keep(name, old, self.versions[name], self.stale.get(name))
                    report["refused"].append(name)
                else:
                    nxt.failed[name] = self.failed.get(name, "refused earlier")
                    report["missing"].append(name)
                continue
            loaded = nxt._load(name, version, serving=old is not None)
            if loaded:
                report["loaded"].append(name)
            elif old is not None and (written := changed_in_place(self.versions[name], version)):
                # The served version is no longer whole: withdrawn, not served stale, until a good one is published
                reason = nxt.failed.pop(name)
                nxt._fail(name, f"{', '.join(written)} written over in place while it was served, withdrawn: {reason}")
                report["missing"].append(name)
                written_over.append(name)
            elif old is not None:
                reason = nxt.failed.pop(name)
                built = old.manifest.get("built_at", "an earlier build")
                log.error("table %r: new files refused, still serving the version built at %s: %s", name, built, reason)
                nxt._keep(name, old, self.versions[name], reason)
                report["refused"].append(name)
            else:
                report["missing"].append(name)
        if nxt.sharded:
            nxt._encoders_beside(self)
        withdrawn = nxt._without_encoder()
        for name in withdrawn:
            for outcome in ("loaded", "unchanged", "refused"):
                if name in report[outcome]:
                    report[outcome].remove(name)
            report["missing"].append(name)
        # A table withdrawn for its encoder or its files is still in the data directory: missing (its reason
        # logged), not removed
        withdrawn += written_over
        report["removed"] = sorted(name for name in self.tables if name not in nxt.tables and name not in withdrawn)
        for name in report["removed"]:
            log.warning("table %r is no longer in the data directory; no longer served", name)
        if gone:
            log.warning(
                "the data directory %s is missing (moved or removed): no tables until it is back", self.data_dir
            )
        elif not requested and not self.fronting:
            log.warning("no tables found in %s", self.data_dir)
        return nxt, report

    def _publishing(self, name: str) -> bool:
        """A rebuild of ``name`` is between its two renames (the old directory is parked as ``.old-<name>-*``)."""
        return any(self.data_dir.glob(f".old-{name}-*"))

    def _keep(self, name: str, table: Table, version: Fingerprint, stale: str | None) -> None:
        self.tables[name] = table
        self.versions[name] = version
        if stale is not None:
            self.stale[name] = stale

    def _loading(self, name: str, version: Fingerprint) -> None:
        """Say what a table's load and verification (seconds for a large one) is about to read."""
        size = sum(entry[2] for entry in files_of(version) if entry[0] != ".")
        what = "checking every file's sha256" if self.checksums else "checking file sizes"
        log.info("table %r: loading %.0f MiB, %s ...", name, size / 2**20, what)

    def _load(self, name: str, version: Fingerprint, serving: bool = False) -> bool:
        """Load and verify one table; on failure record it (logged, unless ``serving``: the caller says which
        version serves on) and return False."""
        directory = Path(os.path.abspath(self.data_dir / name))  # a shard's log is found by its parent's name
        started = time.perf_counter()
        self._loading(name, version)
        table, reason, verdict, version, after = _read_settled(directory, version, self.checksums)
        if table is None:
            # Refused for its log: tried again once the log changes (repaired); for its files once they change; for
            # a passing want (no descriptor left) at the next reload.
            if verdict == NOTHING:
                self.passing.append(name)
            else:
                self.refused[name] = (after or version) if verdict == LOG else files_of(version)
            if serving:
                self.failed[name] = reason
            else:
                self._fail(name, reason)
            return False
        if table.name != name:  # a table copied or renamed on disk is served under its directory name
            log.warning("table directory %r holds a table built as %r; serving it as %r", name, table.name, name)
            table.serve_as(name)
        self.tables[name] = table
        self.versions[name] = files_of(version)
        deferred = table.summary().get("index_deferred")
        log.info(
            "table %r loaded: %d rows x %d dims, index %s%s, built at %s, verified and mapped in %.2fs",
            name,
            table.rows,
            table.dim,
            table.summary()["index"].get("kind"),
            f" (exact search until its {deferred!r} index is built)" if deferred else "",
            table.manifest.get("built_at", "?"),
            time.perf_counter() - started,
        )
        return True

    def encoder_of(self, table: Table) -> Table | None:
        """The table that embedded a documents table's text at import (``--encoder``), which embeds its query
        texts too; None when its vectors came from elsewhere."""
        record = table.encoder_record
        if record is None:
            return None
        return (self.beside if self.sharded else self.tables).get(record["table"])

    def beside_dir(self) -> Path:
        """Where a sharded table's directory's encoders are: its parent ("." or "x/.." made absolute first)."""
        return Path(os.path.abspath(self.data_dir)).parent

    def _beside_not_served(self, name: str) -> str | None:
        """Why ``name``, asked for by name, is not served when it is a table beside this sharded table's directory
        rather than in it; None otherwise."""
        if not (self.sharded and store.NAME_PATTERN.fullmatch(name)):
            return None
        if not os.path.isfile(self.beside_dir() / name / store.MANIFEST):  # False, not an error, if unreadable
            return None
        return (
            "it is beside this sharded table's directory (in its parent), not in it: a shard whose documents it "
            "embedded loads it from there itself, and it is not served under routes of its own; leave it out of "
            "the tables asked for (--tables, EMBEDDING_TABLES)"
        )

    def _encoders_beside(self, previous: Registry) -> None:
        """Load the encoders that the shards of this sharded table's directory name from its parent: the data
        directory the import wrote the table and its encoder to (a shard is never one, whatever its name).
        Unchanged since ``previous``: reused; refused: ``_without_encoder`` refuses the shards it embeds for.

        An encoder loaded so is not served under routes of its own: it is not a table of this data directory (the
        shards are what ``--tables`` asked for), so /readyz, the table list and a reload's report stay the
        directory's; its faults show as its shards' refusals, which they do report."""
        parent, sharded = self.beside_dir(), Path(os.path.abspath(self.data_dir)).name
        named = {table.encoder_record["table"] for table in self.tables.values() if table.encoder_record}
        for name in sorted(named):
            directory = parent / name
            version = fingerprint(directory) if store.NAME_PATTERN.fullmatch(name) else None
            if version is None or not (directory / store.MANIFEST).is_file():
                if store.NAME_PATTERN.fullmatch(name):
                    self.beside_missing.append(name)  # looked for again when it appears (service.watch)
                continue  # not there either: its shards are refused for it
            files = files_of(version)
            if previous.beside_versions.get(name) == files:
                self.beside[name], self.beside_versions[name] = previous.beside[name], files
                continue
            if name in previous.beside_refused and previous.beside_refused[name][0] == files:
                self.beside_refused[name] = previous.beside_refused[name]
                continue
            self._loading(name, version)
            table, reason, verdict, version, _ = _read_settled(directory, version, self.checksums)
            files = files_of(version)
            if table is None:
                log.error("table %r in %s, the encoder of the shards of %r, refused: %s", name, parent, sharded, reason)
                if verdict == NOTHING:
                    self.passing.append(name)
                else:
                    self.beside_refused[name] = (files, reason)
                continue
            log.info("table %r loaded from %s: it embeds the query texts of the shards of %r", name, parent, sharded)
            self.beside[name], self.beside_versions[name] = table, files

    def _without_encoder(self) -> list[str]:
        """Refuse the documents tables whose encoder is not loaded, or is not the one that embedded them (other
        vectors, or no longer the SIF component their documents were embedded with)."""
        refused = []
        for name, table in list(self.tables.items()):
            record = table.encoder_record
            if record is None:
                continue
            encoder = self.encoder_of(table)
            if encoder is None and record["table"] in self.beside_refused:
                reason = (
                    f"its documents were embedded with table {record['table']!r}, beside this sharded table's "
                    "directory, whose files were refused (see the server log)"
                )
            elif encoder is None and self.sharded:
                reason = (
                    f"its documents were embedded with table {record['table']!r}, which is neither in this sharded "
                    "table's directory nor beside it (in its parent); keep the table and its encoder in one data "
                    "directory, as the import wrote them (it embeds the query texts)"
                )
            elif encoder is None:
                reason = (
                    f"its documents were embedded with table {record['table']!r}, which is not loaded; serve that "
                    "table too (it embeds the query texts)"
                )
            elif (encoder.vectors_sha256, encoder.graph_sha256) != (
                record["vectors_sha256"],
                record.get("graph_sha256"),
            ):
                reason = (
                    f"its documents were embedded with other vectors than table {record['table']!r} holds now "
                    "(rebuilt since?); import the documents again with --encoder"
                )
            elif record.get("pooling") == "sif" and encoder.sif_sha256 is None:
                reason = (
                    f"its documents were embedded with the SIF component of table {record['table']!r}, which that "
                    f"table no longer has: `embedding-index sif {record['table']}` computes one, then import the "
                    "documents again with --encoder"
                )
            elif record.get("sif_sha256", encoder.sif_sha256) != encoder.sif_sha256:
                reason = (
                    f"its documents were embedded with another SIF component than table {record['table']!r} holds "
                    "now (computed again since?); import the documents again with --encoder"
                )
            else:
                continue
            del self.tables[name], self.versions[name]
            self._fail(name, reason, told=True)
            refused.append(name)
        return refused

    def _fail(self, name: str, reason: str, told: bool = False) -> None:
        """Record why ``name`` is not served; ``told``: a reason that names tables, not files, which a request of
        the table is told (a file's refusal may name paths: the log says it)."""
        log.error("table %r not loaded, skipped: %s", name, reason)
        self.failed[name] = reason
        if told:
            self.told[name] = reason

    @property
    def ready(self) -> bool:
        """Every requested table is loaded (and there is at least one)."""
        return bool(self.tables) and not self.failed

    def get(self, name: str) -> Table:
        """The loaded table ``name``; 422 for an invalid name, 503 if it failed to load, else 404."""
        table = self.tables.get(name)
        if table is not None:  # a loaded table's name was checked when it was loaded
            return table
        store.check_name(name)
        if name in self.failed:
            why = self.told.get(name, "its files were refused (see the server log)")
            message = f"table {name!r} is not loaded: {why}"
            raise ApiError("not_ready", message, table=name)
        raise ApiError(
            "unknown_table",
            f"no table named {name!r}" + (f"; loaded: {', '.join(sorted(self.tables))}" if self.tables else ""),
            suggestions=self.suggest(name),
        )

    def suggest(self, name: str, limit: int = 5) -> list[str]:
        names = sorted(self.tables)
        matches = process.extract(name, names, scorer=fuzz.WRatio, processor=str.casefold, limit=limit)
        return [match for match, score, _ in matches if score >= 40]


def _not_tables(data_dir: Path) -> list[tuple[str, str]]:
    """Entries of the data directory meant as tables that cannot be served, and why: a table under a name no
    request can give, a symbolic link that leads to nothing (or in a circle). Hidden entries are the builder's."""
    found = []
    with contextlib.suppress(OSError), os.scandir(data_dir) as children:
        for child in children:
            if child.name.startswith("."):
                continue
            if child.is_symlink() and not os.path.exists(child.path):
                found.append((child.name, f"a symbolic link to {os.readlink(child.path)}, which leads to no table"))
            elif not store.NAME_PATTERN.fullmatch(child.name) and (Path(child) / store.MANIFEST).is_file():
                found.append((child.name, "a table's name is 1-64 letters, digits, '.', '_' or '-' (rename it)"))
    return sorted(found)


def _sharded_directory(directory: Path) -> bool:
    """The data directory is itself a sharded table's (its shards served alone)."""
    try:
        return is_sharded(directory)
    except EmbeddingError:  # no manifest there (an ordinary data directory), or not one that can be read
        return False
