"""Compaction of a sharded documents table: every shard's write log folded into the table's next version.

The shards' logs (``<data-dir>/.writes/<table>/shard-NNN.log``) are read as the server reads them and gathered
into the whole table's delta (``index.engine.shard_writes.WholeDelta``); the live documents (the version's that
were not deleted or replaced, in order, then the written ones, by shard and in write order) are imported again
as shards by the import's own code (``index.build.shard``): each document stays in the shard that owns its id,
each shard is built with the import's index options and its manifest records the last write of its log it
holds (``log_sequence``), the keyword statistics are the new whole table's, and the map, its assignment and the
shards are published as one table. Each shard's log is then cut at its ``log_sequence``, keeping the writes that
arrived meanwhile. Every shard is rebuilt, written to or not: the whole table's BM25 statistics, which every
shard's keyword index is scored with, change with any shard's writes.

A shard every document of which is deleted (none written that it owns) is rebuilt empty: no rows, an exact
index and a keyword index of no word, so that it answers every search with no hit and takes writes again. A
compaction that would leave every shard empty is refused before anything is folded, and the table serves on from
its version and its logs, as an unsharded table whose every document is deleted does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from index.build.compact import all_deleted, built_as, finish, folded, locked, replay, unchanged
from index.build.documents import Documents
from index.build.shard import import_sharded
from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.delta import Delta
from index.engine.keyword import DEFAULT_STEMMER, DEFAULT_STOPWORDS, Tokenizer
from index.engine.shard_writes import WholeDelta, owner
from index.engine.shards import ShardedTable, furthest_fallback
from index.errors import WRITES_ONLY
from index.progress import note
from index.store import artifact, shardmap, writelog


def compact_sharded(data_dir: Path, name: str, wait: float = writelog.COMPACTION_WAIT_SECONDS) -> dict[str, Any]:
    """Fold the shards' logs of the sharded table ``name`` into its next version (under the table's compaction
    lock, waited for ``wait`` seconds at most); what was done, as ``compact.compact`` says it."""
    with locked(data_dir, name, wait):
        return _compact(data_dir, name, artifact.table_dir(data_dir, name))


def _compact(data_dir: Path, name: str, directory: Path) -> dict[str, Any]:
    files = artifact.identity(directory)
    note(f"verifying {directory} ...")
    table = ShardedTable.load(directory)
    table.documents(WRITES_ONLY)
    parts = []
    for s, shard in enumerate(table.shards):
        assert shard.payload is not None
        delta = Delta(shard.payload, shard.rows, shard.dim, int(shard.manifest.get("log_sequence", 0)))
        replay(f"{name}/{shardmap.shard_name(s)}", delta, writelog.table_log(table.map.shard_directory(s)))
        parts.append(delta)
    written = sum(part.seq - part.covered for part in parts)
    sequences = [part.seq for part in parts]
    logs = [(writelog.table_log(directory / shardmap.shard_name(s)), seq) for s, seq in enumerate(sequences)]
    if not written:
        finish(data_dir, logs)
        return {"table": name, "log_sequence": sum(sequences), "written": 0, "rows": table.rows}
    if len(_emptied(parts)) == len(parts):
        raise all_deleted(name, "its shards' write logs")
    note(f"folding {written:,} writes into the {len(parts)} shards of {name!r} ...")
    documents, matrix, info = folded(table, WholeDelta(table).of(parts))
    tokenizer = (
        table.keyword.tokenizer if table.keyword is not None else Tokenizer.named(DEFAULT_STOPWORDS, DEFAULT_STEMMER)
    )
    manifest = table.manifest
    build = manifest.get("build", {})
    source = manifest.get("source", {})

    def build_shard(raw: RawTable, staging: Path, shard: str) -> dict[str, Any]:
        raw.info["log_sequence"] = sequences[table.map.names.index(shard)]
        raw.info["compacted_at"] = artifact.now_iso()
        options = built_as(manifest)
        if not len(raw.tokens):  # every document of the shard deleted: no index to train over no rows
            options["index_spec"] = "flat"
        return build_table(raw, data_dir=staging, name=shard, source=source, empty=True, **options)

    tokens = [str(i) for i in documents.column(0).to_pylist()]
    published = import_sharded(
        Documents(documents, matrix, tokens, info, manifest.get("cleaning", {})),
        tokenizer,
        shards=table.map.count,
        data_dir=data_dir,
        name=name,
        source=source,
        build_shard=build_shard,
        params=build,
        force=True,
        complete=unchanged(directory, manifest, name, files),
        empty=True,
        identity=manifest["shards"].get(shardmap.IMPORT),  # the same import, its shards served on
    )
    kept = finish(data_dir, logs)
    shards = [artifact.read_manifest(directory / shard)["index"] for shard in table.map.names]
    fallbacks = [index["fallback"] for index in shards if index.get("fallback")]
    done = {"table": name, "log_sequence": sum(sequences), "written": written, "rows": published["rows"]}
    return {**done, "kept": kept, **({"fallback": furthest_fallback(fallbacks)} if fallbacks else {})}


def _emptied(parts: list[Delta]) -> list[int]:
    """The shards the folded table would leave without a document: every row of their version deleted, and no
    written document is theirs (each goes to the shard that owns its id, whatever log it was written to)."""
    theirs = {owner(key, len(parts)) for part in parts for key in part.documents}
    return [s for s, part in enumerate(parts) if part.deleted.all() and s not in theirs]
