"""Shared fixtures: real tables built with the real builder.

- ``glove_data_dir``: the full default table (GloVe 6B 50d, indexed as ``embedding-index build`` indexes it),
  cached across runs in ``.cache/test-data`` (or ``$EMBEDDING_TEST_CACHE``). A current copy of the table in
  ``data/`` (what ``make run`` built and indexed) is linked in instead of building it again. Otherwise its build,
  minutes long, starts in a child process as soon as the tests are collected, and the modules that use the
  table run last: the other tests run while its graph is built.
- ``small_data_dir``: the 20,000 most frequent GloVe rows as an exact (flat) table, built per session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from index import artifact
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


GLOVE_FIXTURES = {"glove_data_dir"}  # what needs the cached default table (other fixtures reach it through these)


def cache_dir() -> Path:
    return Path(os.environ.get("EMBEDDING_TEST_CACHE", REPO / ".cache" / "test-data"))


def is_current(directory: Path) -> bool:
    """A complete table with the builder's default index (not a deferred one, not an older builder's)."""
    try:
        manifest = Table.load(directory, checksums=False).manifest
    except (ArtifactError, UnknownTable):
        return False
    spec, default = manifest["index"].get("spec", {}), IndexSpec(kind="hnsw")
    return not manifest["index"].get("deferred") and (spec.get("M"), spec.get("efConstruction")) == (
        default.m,
        default.ef_construction,
    )


def link_table(source: Path, data_dir: Path) -> bool:
    """Hard-link a built table into ``data_dir`` (published like a build: staged, then renamed)."""
    try:
        with artifact.staging(data_dir, source.name, force=True) as tmp:
            for child in source.iterdir():
                os.link(child, tmp / child.name)
    except OSError:  # another file system: build instead
        return False
    return True


class CacheBuild:
    """The default table's build into the test cache, in a child process started at collection."""

    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @classmethod
    def start(cls) -> None:
        data_dir = cache_dir()
        if cls.process is not None or is_current(data_dir / glove_package.DEFAULT_NAME):
            return
        made = REPO / "data" / glove_package.DEFAULT_NAME
        if is_current(made) and link_table(made, data_dir):
            return
        data_dir.mkdir(parents=True, exist_ok=True)
        cls.log = data_dir / "build.log"
        command = [sys.executable, "-m", "index", "build", "--data-dir", str(data_dir), "--force"]
        with cls.log.open("wb") as log:
            cls.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)

    @classmethod
    def wait(cls) -> Path:
        cls.start()
        if cls.process is not None and cls.process.wait() != 0:
            log = cls.log.read_text(errors="replace")[-3000:] if cls.log else ""
            pytest.fail(f"building the default table for the tests failed:\n{log}")
        return cache_dir()


def needs_glove(item: pytest.Item) -> bool:
    return bool(GLOVE_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that use the default table run after the others, which run while it is built."""
    late = {item.module for item in items if needs_glove(item)}  # type: ignore[attr-defined]
    items.sort(key=lambda item: getattr(item, "module", None) in late)  # stable: the order within each part stays


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(needs_glove(item) for item in session.items):
        CacheBuild.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if CacheBuild.process is not None and CacheBuild.process.poll() is None:  # stopped early: no build left behind
        CacheBuild.process.terminate()
        CacheBuild.process.wait()


@pytest.fixture(scope="session")
def glove_data_dir() -> Path:
    return CacheBuild.wait()


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
