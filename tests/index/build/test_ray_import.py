"""``embedding-index import --shards 3 --ray auto`` on a local Ray cluster (two CPUs, started once for the module)
against the same import without Ray: the same files, checksum for checksum, in every shard and beside them.

Gensim's Lee corpus twice: with its vectors, and without them, its text embedded by the 20,000-row GloVe table
``small`` (on Ray: by actors holding the encoder).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from index.build.cli import app
from index.store import artifact, shardmap
from tests.lee import Lee, jsonl_records, write_jsonl

ray = pytest.importorskip("ray")
SHARDS = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def checksums(directory: Path) -> dict[str, Any]:
    """Every file's sha256 in a sharded table (its own and its shards'), the manifests' own entries aside."""
    manifest = artifact.read_manifest(directory)
    found: dict[str, Any] = {name: file["sha256"] for name, file in manifest["files"].items()}
    for name in manifest["shards"]["names"]:
        shard = artifact.read_manifest(directory / name)
        found |= {f"{name}/{file}": entry["sha256"] for file, entry in shard["files"].items()}
    return found


def imported(data_dir: Path, source: Path, name: str, *options: str) -> dict[str, Any]:
    done = CliRunner().invoke(
        app, ["import", str(source), "--name", name, "--shards", str(SHARDS), "--data-dir", str(data_dir), *options]
    )
    assert done.exit_code == 0, (done.output, done.exception)
    assert shardmap.verify(data_dir / name).ok
    return checksums(data_dir / name)


@pytest.mark.usefixtures("cluster")
def test_a_ray_import_writes_the_local_imports_files(tmp_path: Path, lee_docs: Lee) -> None:
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    local = imported(tmp_path / "data", source, "local")
    on_ray = imported(tmp_path / "data", source, "on-ray", "--ray", "auto")
    assert on_ray == local and len(local) > 40


@pytest.mark.usefixtures("cluster")
def test_a_ray_import_embeds_with_actors(data_dir: Path, tmp_path: Path, lee_docs: Lee) -> None:
    records = [{k: v for k, v in record.items() if k != "vector"} for record in jsonl_records(lee_docs)]
    source = write_jsonl(tmp_path / "lee-text.jsonl", records)
    local = imported(data_dir, source, "local", "--encoder", "small")
    on_ray = imported(data_dir, source, "on-ray", "--encoder", "small", "--ray", "auto")
    assert on_ray == local
    manifest = json.loads((data_dir / "on-ray" / artifact.MANIFEST).read_text())
    assert manifest["documents"]["encoder"]["table"] == "small" and manifest["rows"] == len(lee_docs.ids)


def test_ray_only_with_shards(tmp_path: Path, lee_docs: Lee) -> None:
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    done = CliRunner().invoke(app, ["import", str(source), "--name", "x", "--ray", "auto", "--data-dir", str(tmp_path)])
    assert done.exit_code == 1 and "--ray: only with --shards" in done.output
