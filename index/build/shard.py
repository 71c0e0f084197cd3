"""A documents table imported as shards (``embedding-index import ... --shards N``).

The documents are read, checked and embedded once, as for a whole table; each is then assigned to a shard by a
stable hash of its id (``index.store.shardmap``), and each shard is built as a complete table of its rows, in
the whole table's order: vectors, index, payload, and a keyword index scored with the WHOLE table's BM25
statistics (documents, average length, document frequencies: ``keyword.Statistics``), so that a shard's BM25
scores are the ones the unsharded table gives the same documents. The shard map, the assignment of every row
and those statistics are written beside the shards, and the whole is published as one table
(``index.store.shardmap`` describes the layout).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from index.build.documents import Documents
from index.build.sources import RawTable
from index.engine import keyword
from index.errors import ArtifactError
from index.progress import note
from index.store import artifact, shardmap
from index.store.payload import KIND, contiguous, payload_files, serialise
from index.store.tokens import write_tokens

log = logging.getLogger(__name__)

# Builds one shard's table: (its raw table, the staging directory, its name) -> its manifest.
BuildShard = Callable[[RawTable, Path, str], dict[str, Any]]
# Runs the shards' builds (each a call without arguments) and gives their manifests in order: one after the
# other here, as Ray tasks all at once (``index.build.ray_build``).
RunAll = Callable[[Sequence[Callable[[], dict[str, Any]]]], list[dict[str, Any]]]


def one_by_one(jobs: Sequence[Callable[[], dict[str, Any]]]) -> list[dict[str, Any]]:
    return [job() for job in jobs]


def _build_job(
    documents: Documents,
    rows: np.ndarray,
    tokenizer: keyword.Tokenizer,
    whole: keyword.Statistics | None,
    source: dict[str, Any],
    build_shard: BuildShard,
    directory: Path,
    name: str,
) -> Callable[[], dict[str, Any]]:
    def job() -> dict[str, Any]:  # rows Ray hands over (read-only, mapped from its object store): copied by the build
        return build_shard(shard_raw(documents, tokenizer, whole, source, rows), directory, name)

    return job


def shard_documents(documents: Documents, rows: np.ndarray) -> Documents:
    """The documents at ``rows`` (ascending), with the manifest's counts of theirs."""
    taken = pa.array(rows, pa.int64())
    payload = documents.payload.take(taken)
    info = dict(documents.info)
    info["count"] = payload.num_rows
    text = info.get("text_field")
    if text:
        info["text_non_null"] = payload.num_rows - payload.column(text).null_count
    info["fields"] = {
        name: {**field, "non_null": payload.num_rows - payload.column(name).null_count}
        for name, field in documents.info["fields"].items()
    }
    tokens = [documents.tokens[i] for i in rows.tolist()]
    return Documents(payload, documents.matrix[rows], tokens, info, documents.report)


def shard_raw(
    documents: Documents,
    tokenizer: keyword.Tokenizer,
    whole: keyword.Statistics | None,
    source: dict[str, Any],
    rows: np.ndarray | None = None,
) -> RawTable:
    """One shard's documents as the raw table of a documents table, its keyword index scored with ``whole``;
    ``rows``: the whole table's row of each (written beside them, ``shardmap.WHOLE_ROWS``)."""
    files = payload_files(documents.payload)
    if rows is not None:
        files[shardmap.WHOLE_ROWS] = artifact.npy_bytes(np.asarray(rows, dtype=np.int64))
    info: dict[str, Any] = {KIND: documents.info}
    text = documents.info.get("text_field")
    if text and whole is not None:
        built = keyword.build(contiguous(documents.payload.column(text)), tokenizer, whole=whole)
        if built is not None:
            info[keyword.KEYWORD] = {"field": text, **built.info}
            files |= built.files
    return RawTable(
        tokens=documents.tokens,
        matrix=documents.matrix,
        report=documents.report,
        info=info,
        kind=KIND,
        extra_files=files,
        source=source,
    )


def import_sharded(
    documents: Documents,
    tokenizer: keyword.Tokenizer,
    *,
    shards: int,
    data_dir: Path,
    name: str,
    source: dict[str, Any],
    build_shard: BuildShard,
    params: dict[str, Any],
    force: bool = False,
    run_all: RunAll = one_by_one,
    complete: Callable[[Path], None] | None = None,
    empty: bool = False,
    identity: str | None = "new",
) -> dict[str, Any]:
    """Publish ``documents`` as table ``name`` of ``shards`` shards; return the sharded table's manifest.

    ``build_shard(raw, directory, name)`` builds one shard as a table of ``directory`` (``build_table`` with the
    import's index options); ``complete``, if given, runs under the publish lock before the swap (it may refuse);
    ``empty``: a shard may hold no document (a compaction's, after deletes), else that is refused; ``identity``:
    the import's, as the map records it: ``"new"`` makes one; a compaction keeps its table's, and so none (None)
    for a table imported before imports had one, whose shards' servers still on the version before then serve
    the same import as those on the compacted one."""
    started = time.perf_counter()
    check_target(data_dir, name, shards, force)
    assignment = shardmap.assign(documents.payload.column(0).combine_chunks(), shards)
    text = documents.info.get("text_field")
    whole = None
    if text and documents.info.get("text_non_null"):
        note("keyword statistics of the whole table ...")
        whole = keyword.statistics(contiguous(documents.payload.column(text)), tokenizer)
        if not whole.words:
            whole = None

    def job(rows: np.ndarray, directory: Path, shard_dir: str) -> Callable[[], dict[str, Any]]:
        part = shard_documents(documents, rows)
        return _build_job(part, rows, tokenizer, whole, source, build_shard, directory, shard_dir)

    def beside(tmp: Path) -> dict[str, Any]:
        statistics: dict[str, Any] | None = None
        if whole is not None:
            (tmp / shardmap.DF).write_bytes(artifact.npy_bytes(whole.df))
            terms = pa.RecordBatch.from_arrays([whole.terms], names=["term"])
            (tmp / shardmap.TERMS).write_bytes(serialise(terms))
            statistics = {
                "field": text,
                "tokenizer": tokenizer.settings(),
                "k1": keyword.K1,
                "b": keyword.B,
                "documents": whole.documents,
                "average_length": whole.average_length,
                "words": whole.words,
                "terms": len(whole.terms),
                "files": [shardmap.TERMS, shardmap.DF],
            }
        return {KIND: {**documents.info}, "keyword_statistics": statistics, "cleaning": documents.report}

    return publish(
        Sharding(
            data_dir, name, shards, assignment, documents.tokens, KIND, "documents", source, params, started, identity
        ),
        job,
        beside,
        force=force,
        run_all=run_all,
        complete=complete,
        empty=empty,
    )


def check_target(data_dir: Path, name: str, shards: int, force: bool) -> None:
    """Before a sharded import reads anything more: the count and the name are valid, what killed builds left is
    cleared, and the table is not there unless ``force``."""
    shardmap.check_count(shards)
    artifact.check_name(name)
    for path, what in artifact.recover(data_dir):
        log.warning("%s: %s", path, what)
    artifact.check_free(data_dir, name, force)


@dataclass(frozen=True)
class Sharding:
    """What a sharded import publishes: where, every row's shard, the whole table's tokens (ids), its kind."""

    data_dir: Path
    name: str
    shards: int
    assignment: np.ndarray
    tokens: Sequence[str]
    of: str  # the kind of table each shard is
    unit: str  # what its rows are called in messages
    source: dict[str, Any]
    params: dict[str, Any]
    started: float
    identity: str | None = "new"  # the import's (``shardmap.IMPORT``): a compaction keeps its own


def publish(
    sharding: Sharding,
    job: Callable[[np.ndarray, Path, str], Callable[[], dict[str, Any]]],
    beside: Callable[[Path], dict[str, Any]],
    *,
    force: bool,
    run_all: RunAll = one_by_one,
    complete: Callable[[Path], None] | None = None,
    empty: bool = False,
) -> dict[str, Any]:
    """Build every shard (``job(rows, directory, name)``: the build of the shard of those rows, as a call), move
    them beside the map, the assignment and the whole table's tokens, add what ``beside(staging)`` writes and
    returns for the manifest, and publish the whole as one table. Returns its manifest. A shard of no rows is
    refused unless ``empty``."""
    assignment, count = sharding.assignment, sharding.shards
    names = [shardmap.shard_name(s) for s in range(count)]
    with artifact.staging(sharding.data_dir, sharding.name, force=force, complete=complete) as tmp:
        # Each shard is published into a directory of its own first (a build locks the data directory it
        # publishes into, and the staging directory is locked by this build), then moved beside the map.
        built = tmp / ".shards"
        built.mkdir()
        jobs = []
        for shard, shard_dir in enumerate(names):
            rows = np.flatnonzero(assignment == shard)
            if not len(rows) and not empty:
                raise ArtifactError(
                    f"shard {shard} of {count} would hold no {sharding.unit} ({len(assignment):,} {sharding.unit}): "
                    "use fewer shards"
                )
            note(f"shard {shard + 1} of {count}: {len(rows):,} {sharding.unit}")
            jobs.append(job(rows, built, shard_dir))
        manifests = run_all(jobs)
        for shard_dir in names:
            (built / shard_dir).rename(tmp / shard_dir)
        built.rmdir()
        (tmp / shardmap.ASSIGNMENT).write_bytes(artifact.npy_bytes(assignment))
        write_tokens(tmp, sharding.tokens)  # the whole table's tokens (ids): its lookups, served whole
        return shardmap.write_manifest(
            tmp,
            {
                "name": sharding.name,
                "kind": shardmap.KIND,
                "of": sharding.of,
                "rows": len(assignment),
                "dim": manifests[0]["dim"],
                "source": sharding.source,
                "build": sharding.params,
                "shards": {
                    "count": count,
                    "hash": shardmap.HASH,
                    "names": names,
                    "rows": [m["rows"] for m in manifests],
                    "index": [m["index"]["spec"] for m in manifests],
                    shardmap.IMPORT: uuid.uuid4().hex if sharding.identity == "new" else sharding.identity,
                },
                **beside(tmp),
                "built_at": artifact.now_iso(),
                "build_seconds": round(time.perf_counter() - sharding.started, 3),
            },
            names,
        )
