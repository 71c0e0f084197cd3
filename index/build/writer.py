"""Turn a raw table into a verified artifact: clean, normalise, index, write atomically."""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from index.build.budget import AUTO_BUDGET_SECONDS
from index.build.clean import clean
from index.build.index_choice import IndexSpec, build_and_measure, build_or_instead, check_spec, parse_spec
from index.build.sources import RawTable
from index.errors import ArtifactError, counted
from index.progress import Progress, duration, note
from index.store import artifact
from index.store.metadata import METADATA, metadata_file
from index.store.rows import normalise
from index.store.tokens import FLAGS, write_tokens

log = logging.getLogger(__name__)

SHOWN_DIGEST_BYTES = 256 << 20  # a source this large takes a second or more to hash: its progress is shown


def source_digest(paths: list[Path]) -> str:
    """sha256 of the source files (a directory counts as its top-level files, sorted by name); its progress shown
    from ``SHOWN_DIGEST_BYTES`` on."""
    files: list[Path] = []
    for path in paths:
        path = Path(path)
        files.extend(sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path])
    size = sum(f.stat().st_size for f in files)
    shown = Progress("checksum of the source", size, "bytes") if size >= SHOWN_DIGEST_BYTES else nullcontext()
    with shown as progress:
        digests = [artifact.sha256_file(f, progress=progress) for f in files]
    if len(files) == 1:
        return digests[0]
    digest = hashlib.sha256()
    for f, file_digest in zip(files, digests, strict=True):
        digest.update(f"{f.name}:{file_digest}\n".encode())
    return digest.hexdigest()


def write_index(index: faiss.Index, path: Path) -> None:
    """FAISS's write of ``index`` to ``path``. A write FAISS could not make (no space left, the file size limit) is
    its RuntimeError: raised as the OSError of a failed write, which the staging directory names with its file and
    cause (``artifact.staging``), rather than as a traceback."""
    try:
        faiss.write_index(index, str(path))
    except RuntimeError as exc:
        short = re.search(r"write error in .*: (\d+) != (\d+)", str(exc))  # FAISS's words: "written != requested"
        said = f"FAISS wrote {short[1]} of the {short[2]} bytes it was writing" if short else str(exc)
        raise OSError(said) from exc


def built_with(index_spec: str, min_recall: float, seed: int, budget: float) -> dict[str, Any]:
    """A table's index options as its manifest's ``build`` records them, which a compaction builds its next version
    with (``compact.built_as``)."""
    return {"index": index_spec, "min_recall": min_recall, "seed": seed, "budget_seconds": budget}


def build_table(
    raw: RawTable,
    *,
    data_dir: Path,
    name: str,
    source: dict[str, Any],
    index_spec: str = "auto",
    min_recall: float = 0.95,
    params: dict[str, Any] | None = None,
    force: bool = False,
    drop_invalid: bool = False,
    seed: int = 0,
    defer_index: bool = False,
    budget: float = AUTO_BUDGET_SECONDS,
    complete: Callable[[Path], None] | None = None,
    empty: bool = False,
    fallback: bool = False,
) -> dict[str, Any]:
    """Build table ``name`` under ``data_dir`` from ``raw``; return its manifest. ``complete``, if given, runs under
    the publish lock just before the new version takes the name (``artifact.staging``; it may refuse by raising).

    ``raw`` is the build's: its rows are normalised in place, since a copy would double what the build holds (76 MiB
    for 400,000 x 50, 2,289 MiB for 2,000,000 x 300); a caller that uses them afterwards gives a copy. Rows that
    cannot be written (a read-only array, one mapped from Ray's object store) are copied first.
    ``empty``: a table of no rows is built (a shard a compaction left without documents) rather than refused.
    ``fallback``: an index below ``min_recall``, or one these rows cannot build, is replaced by the one ``auto``
    takes rather than refused (a compaction, which must fold its log: ``index_choice.build_or_instead``).

    With ``defer_index`` an approximate index is not built now: the table is published for exact search at once,
    with the index spec recorded under ``index.deferred`` for :func:`index_table` (which ``embedding-serve`` runs
    in the background) to build later.
    """
    started = time.perf_counter()
    artifact.check_name(name)
    artifact.check_writable(data_dir)
    for path, what in artifact.recover(data_dir):  # left by a build that was killed
        log.warning("%s: %s", path, what)
    artifact.check_free(data_dir, name, force)
    note(f"cleaning and normalising {counted(len(raw.tokens), 'row')} ...")
    raw, report = clean(raw, source.get("path", name), drop_invalid=drop_invalid, allow_empty=empty)
    unit, norms = normalise(raw.matrix if raw.matrix.flags.writeable else raw.matrix.copy())
    if defer_index and parse_spec(index_spec, len(unit), unit.shape[1]).kind != "flat":
        built = build_and_measure(unit, IndexSpec(kind="flat"), min_recall=min_recall)
        built.info["deferred"] = {"spec": index_spec, "min_recall": min_recall, "budget_seconds": budget, "seed": seed}
        note(
            f"exact search for now; the {index_spec!r} index is built later, "
            f"in the background by `embedding-serve` or by `embedding-index index {name}`"
        )
    else:
        built = build_or_instead(unit, index_spec, min_recall, seed=seed, budget=budget, fallback=fallback)
    note(f"writing {artifact.table_dir(data_dir, name)} ...")
    with artifact.staging(data_dir, name, force=force, complete=complete) as tmp:
        np.save(tmp / artifact.VECTORS, unit, allow_pickle=False)
        np.save(tmp / artifact.NORMS, norms, allow_pickle=False)
        write_tokens(tmp, raw.tokens)
        if built.index is not None:
            write_index(built.index, tmp / artifact.INDEX)
        if raw.flags is not None:
            np.save(tmp / FLAGS, np.asarray(raw.flags, dtype=np.uint8), allow_pickle=False)
        for file_name, content in raw.extra_files.items():
            (tmp / artifact.check_name(file_name)).write_bytes(content)
        if raw.metadata:
            (tmp / METADATA).write_bytes(metadata_file(raw.metadata))
        manifest = artifact.write_manifest(
            tmp,
            {
                "name": name,
                "kind": raw.kind,
                "rows": int(unit.shape[0]),
                "dim": int(unit.shape[1]),
                "source": source,
                "build": params or {},
                "index": built.info,
                "cleaning": report,
                "metadata_columns": sorted(raw.metadata),
                **raw.info,
                "built_at": artifact.now_iso(),
                "build_seconds": round(time.perf_counter() - started, 3),
            },
        )
    return manifest


def index_table(
    data_dir: Path,
    name: str,
    *,
    index_spec: str | None = None,
    min_recall: float | None = None,
    budget: float | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """Build the index of an existing table (by default the one its build deferred) and publish the new version;
    the options not given are the table's own (its deferred build's, else those its manifest records).

    The table's other files are linked (or copied) unchanged into the new version; the existing version keeps
    serving until the new one is renamed into place, and stays as it was if anything fails.
    """
    started = time.perf_counter()
    directory = artifact.table_dir(data_dir, name)
    artifact.read_manifest(directory)  # no such table: say so before anything else
    artifact.check_writable(data_dir)
    if index_spec is not None:
        check_spec(index_spec)  # its form, before the table's files are read
    for round_ in range(artifact.ROUNDS):  # again while a version is published meanwhile (a server's compaction)
        if round_:
            note(f"a newer version of {name!r} was published while its index was built; indexing it ...")
        deferred = _defers_index(directory)
        try:
            return _index_version(data_dir, name, directory, index_spec, min_recall, budget, seed, started)
        except artifact.Rebuilt:
            if index_spec is None and deferred and not _defers_index(directory):
                raise  # the deferred index was asked for, and the newest version has its own
    raise ArtifactError(
        f"table {name!r}: a newer version was published each of the {artifact.ROUNDS} times its index was built (a "
        "server compacting it more often than its index is built); nothing replaced: build it again when it is "
        "compacted less often"
    )


def _defers_index(directory: Path) -> bool:
    return bool(artifact.read_manifest(directory).get("index", {}).get("deferred"))


def _index_version(
    data_dir: Path,
    name: str,
    directory: Path,
    index_spec: str | None,
    min_recall: float | None,
    budget: float | None,
    seed: int | None,
    started: float,
) -> dict[str, Any]:
    """:func:`index_table` of the version ``directory`` holds now."""
    note(f"verifying {directory} ...")
    manifest, checked = artifact.verified(directory)
    deferred = manifest.get("index", {}).get("deferred") or {}
    spec_text = index_spec if index_spec is not None else deferred.get("spec") or "auto"
    if not checked.ok:
        raise ArtifactError(f"table {name!r}: " + "; ".join(checked.problems))
    vectors = np.load(directory / artifact.VECTORS, mmap_mode="r")
    # An option not given: the deferred build's, else the table's as its manifest's build records them (what a
    # compaction builds with), else the default.
    recorded = {**manifest.get("build", {}), **deferred}
    min_recall = min_recall if min_recall is not None else recorded.get("min_recall", 0.95)
    seed = seed if seed is not None else recorded.get("seed", 0)
    budget = budget if budget is not None else recorded.get("budget_seconds", AUTO_BUDGET_SECONDS)
    built = build_or_instead(vectors, spec_text, min_recall, seed=seed, budget=budget)
    note(f"writing the new version of {directory} ...")

    def write(tmp: Path) -> None:
        if built.index is not None:
            write_index(built.index, tmp / artifact.INDEX)

    # The options a compaction builds the next version with (``compact.built_as``): this index's, not the import's.
    build = {**manifest.get("build", {}), **built_with(spec_text, min_recall, seed, budget)}
    changes = {"index": built.info, "indexed_at": artifact.now_iso(), "build": build}
    published = artifact.republish(
        data_dir, name, manifest, write, (artifact.INDEX,), changes, "its index was being built"
    )
    note(f"indexed {name!r} in {duration(time.perf_counter() - started)}")
    return published
