"""A word table imported as shards (``embedding-index import ... --shards N`` of word vectors).

The rows are read and cleaned once, as for a whole table (duplicates and invalid rows leave here, so the whole
table's rows are the unsharded table's); each is then assigned to a shard by the stable hash of its token
(``index.store.shardmap``, the hash documents use of their ids), and each shard is built as a complete word table
of its rows, in the whole table's order, with ``whole_rows.npy`` (the whole table's row of each of its rows). The
map, the assignment of every row and the whole table's tokens are written beside the shards, and the whole is
published as one table, as a sharded documents table is (``index.build.shard``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from index.build.clean import clean
from index.build.shard import BuildShard, _npy
from index.build.sources import RawTable
from index.errors import ArtifactError
from index.progress import note
from index.store import artifact, shardmap
from index.store.tokens import write_tokens

log = logging.getLogger(__name__)
WORDS = "words"


def shard_rows(raw: RawTable, rows: np.ndarray) -> RawTable:
    """The rows ``rows`` (ascending) of a cleaned word table, with their whole-table rows beside them."""
    listed = rows.tolist()
    return replace(
        raw,
        tokens=[raw.tokens[i] for i in listed],
        matrix=np.ascontiguousarray(raw.matrix[rows]),
        metadata={column: [values[i] for i in listed] for column, values in raw.metadata.items()},
        extra_files={**raw.extra_files, shardmap.WHOLE_ROWS: _npy(np.asarray(rows, dtype=np.int64))},
    )


def import_sharded_words(
    raw: RawTable,
    *,
    shards: int,
    data_dir: Path,
    name: str,
    source: dict[str, Any],
    build_shard: BuildShard,
    params: dict[str, Any],
    force: bool = False,
    drop_invalid: bool = False,
) -> dict[str, Any]:
    """Publish the word table ``raw`` as table ``name`` of ``shards`` shards; return the sharded table's manifest.

    ``build_shard(raw, directory, name)`` builds one shard as a table of ``directory``."""
    started = time.perf_counter()
    shardmap.check_count(shards)
    artifact.check_name(name)
    for path, what in artifact.recover(data_dir):
        log.warning("%s: %s", path, what)
    if raw.kind != WORDS:
        raise ArtifactError(f"--shards: a {raw.kind} table stays whole (words and documents tables shard)")
    if artifact.table_dir(data_dir, name).exists() and not force:
        raise ArtifactError(f"table {name!r} already exists in {data_dir} (use --force to rebuild it)")
    note(f"cleaning {len(raw.tokens):,} rows ...")
    raw, report = clean(raw, source.get("path", name), drop_invalid=drop_invalid)
    raw = replace(raw, report=report)
    assignment = shardmap.assign(pa.array(raw.tokens, pa.string()), shards)
    names = [shardmap.shard_name(s) for s in range(shards)]
    with artifact.staging(data_dir, name, force=force) as tmp:
        built = tmp / ".shards"  # each shard published on its own first (see index.build.shard)
        built.mkdir()
        manifests = []
        for shard, shard_dir in enumerate(names):
            rows = np.flatnonzero(assignment == shard)
            if not len(rows):
                raise ArtifactError(
                    f"shard {shard} of {shards} would hold no rows ({len(assignment):,} rows): use fewer shards"
                )
            note(f"shard {shard + 1} of {shards}: {len(rows):,} rows")
            manifests.append(build_shard(shard_rows(raw, rows), built, shard_dir))
        for shard_dir in names:
            (built / shard_dir).rename(tmp / shard_dir)
        built.rmdir()
        (tmp / shardmap.ASSIGNMENT).write_bytes(_npy(assignment))
        write_tokens(tmp, raw.tokens)  # the whole table's tokens: its lookups, served whole
        return shardmap.write_manifest(
            tmp,
            {
                "name": name,
                "kind": shardmap.KIND,
                "of": WORDS,
                "rows": len(assignment),
                "dim": manifests[0]["dim"],
                "source": source,
                "build": params,
                "shards": {
                    "count": shards,
                    "hash": shardmap.HASH,
                    "names": names,
                    "rows": [m["rows"] for m in manifests],
                    "index": [m["index"]["spec"] for m in manifests],
                },
                "cleaning": report,
                "built_at": artifact.now_iso(),
                "build_seconds": round(time.perf_counter() - started, 3),
            },
            names,
        )
