"""Turn a raw table into a verified artifact: clean, normalise, index, write atomically."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from index import artifact
from index.clean import clean, normalise
from index.faiss_index import build_and_measure, parse_spec
from index.sources import RawTable
from index.table import FLAGS
from index.tokens import write_tokens

log = logging.getLogger(__name__)


def source_digest(paths: list[Path]) -> str:
    """sha256 of the source files (a directory counts as its top-level files, sorted by name)."""
    files: list[Path] = []
    for path in paths:
        path = Path(path)
        files.extend(sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path])
    if len(files) == 1:
        return artifact.sha256_file(files[0])
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name}:{artifact.sha256_file(f)}\n".encode())
    return digest.hexdigest()


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
) -> dict[str, Any]:
    """Build table ``name`` under ``data_dir`` from ``raw``; return its manifest."""
    started = time.perf_counter()
    artifact.check_name(name)
    for stale in artifact.clean_stale(data_dir):  # left by a build that was killed
        log.info("removed %s, left in %s by a build that did not finish", stale.name, data_dir)
    if artifact.table_dir(data_dir, name).exists() and not force:
        raise artifact.ArtifactError(f"table {name!r} already exists in {data_dir} (use --force to rebuild it)")
    raw, report = clean(raw, source.get("path", name), drop_invalid=drop_invalid)
    unit, norms = normalise(raw.matrix)
    spec = parse_spec(index_spec, len(unit))
    built = build_and_measure(unit, spec, min_recall=min_recall, seed=seed)
    with artifact.staging(data_dir, name, force=force) as tmp:
        np.save(tmp / artifact.VECTORS, unit, allow_pickle=False)
        np.save(tmp / artifact.NORMS, norms, allow_pickle=False)
        write_tokens(tmp, raw.tokens)
        if spec.kind != "flat":
            faiss.write_index(built.index, str(tmp / artifact.INDEX))
        if raw.flags is not None:
            np.save(tmp / FLAGS, np.asarray(raw.flags, dtype=np.uint8), allow_pickle=False)
        for file_name, content in raw.extra_files.items():
            (tmp / artifact.check_name(file_name)).write_bytes(content)
        if raw.metadata:
            (tmp / artifact.METADATA).write_text(json.dumps(raw.metadata, ensure_ascii=False))
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
