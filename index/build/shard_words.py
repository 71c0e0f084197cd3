"""A word table imported as shards (``embedding-index import ... --shards N`` of word vectors).

The rows are read and cleaned once, as for a whole table (duplicates, invalid rows and words too long to name
leave here, so the whole table's rows are the unsharded table's); each is then assigned to a shard by the stable
hash of its token (``index.store.shardmap``, the hash documents use of their ids), and each shard is built as a
complete word table of its rows, in the whole table's order, with ``whole_rows.npy`` (the whole table's row of each
of its rows). The map, the assignment of every row and the whole table's tokens are written beside the shards, and
the whole is published as one table, as a sharded documents table is (``index.build.shard``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from index.build.clean import clean
from index.build.shard import BuildShard, Sharding, check_target, publish
from index.build.sources import RawTable
from index.errors import ArtifactError, counted
from index.progress import note
from index.store import artifact, shardmap

WORDS = "words"


def shard_rows(raw: RawTable, rows: np.ndarray) -> RawTable:
    """The rows ``rows`` (ascending) of a cleaned word table, with their whole-table rows beside them."""
    listed = rows.tolist()
    return replace(
        raw,
        tokens=[raw.tokens[i] for i in listed],
        matrix=np.ascontiguousarray(raw.matrix[rows]),
        metadata={column: [values[i] for i in listed] for column, values in raw.metadata.items()},
        extra_files={**raw.extra_files, shardmap.WHOLE_ROWS: artifact.npy_bytes(np.asarray(rows, dtype=np.int64))},
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
    check_target(data_dir, name, shards, force)
    if raw.kind != WORDS:
        raise ArtifactError(f"--shards: a {raw.kind} table stays whole (words and documents tables shard)")
    note(f"cleaning {counted(len(raw.tokens), 'row')} ...")
    raw, report = clean(raw, source.get("path", name), drop_invalid=drop_invalid)
    raw = replace(raw, report=report)
    assignment = shardmap.assign(pa.array(raw.tokens, pa.string()), shards)

    def job(rows: np.ndarray, directory: Path, shard_dir: str) -> Callable[[], dict[str, Any]]:
        return lambda: build_shard(shard_rows(raw, rows), directory, shard_dir)

    sharding = Sharding(data_dir, name, shards, assignment, raw.tokens, WORDS, "rows", source, params, started)
    return publish(sharding, job, lambda _: {"cleaning": report}, force=force)
