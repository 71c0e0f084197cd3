"""Service fixtures: ``create_app`` over the shared real tables, driven through TestClient.

- ``api``: the 20,000-row GloVe table ``small`` (flat, exact);
- ``glove_api``: the full GloVe 6B 50d table (HNSW);
- ``minilm_api``: the MiniLM model's token embeddings (a model-token table with a tokenizer; ``minilm_data_dir``,
  tests/conftest.py).

Real ``embedding-serve`` processes with the default settings, shared by the modules that only read them:

- ``small_server``: over ``small_data_dir`` (the table ``small`` alone);
- ``documents_server``: over ``documents_data_dir`` (``lee``, ``no-text``, ``small`` and ``lee-text``).

A module that needs other settings, other tables or writes starts its own (``tests/service/real_server.py``).
The sharded-table modules copy their data directories from ``lee_imports``: the Lee corpus imported once for the
session, whole and as shards.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from index.build.sources import glove_package, read_source
from index.build.writer import build_table
from service.app import create_app
from service.settings import Settings
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.service import real_server


def client_for(**settings: object) -> TestClient:
    """A TestClient over a fresh app; use it as a context manager so the lifespan loads the tables. The data
    directory is not watched unless asked (``watch_seconds``): the reload tests count reloads."""
    return TestClient(create_app(Settings(**{"watch_seconds": 0, **settings})), raise_server_exceptions=False)


@pytest.fixture(scope="session")
def api(small_data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=small_data_dir) as client:
        yield client


@pytest.fixture(scope="session")
def glove_api(glove_data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=glove_data_dir, tables=[glove_package.DEFAULT_NAME]) as client:
        yield client


@pytest.fixture(scope="session")
def minilm_api(minilm_data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=minilm_data_dir) as client:
        yield client


@pytest.fixture(scope="session")
def small_server(small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_server.Server]:
    """The real server over ``small_data_dir``; at the end of the session it exits gracefully (uvicorn re-raises
    SIGTERM after shutting down cleanly)."""
    server = real_server.start(small_data_dir, tmp_path_factory.mktemp("small-serve") / "server.log")
    try:
        yield server
    finally:
        assert server.stop() in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in server.log()


@pytest.fixture(scope="session")
def documents_data_dir(
    lee_data_dir: Path, small_data_dir: Path, lee_docs: Lee, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """``lee`` (the Lee corpus with its fields and text); ``no-text``, the same documents without their text (a
    table with no keyword index); ``small``, the words table; ``lee-text``, the Lee stories without their vectors,
    embedded at import by ``small``."""
    from tests.cli import run_cli
    from tests.index.build.test_embed_documents import without_vectors

    directory = tmp_path_factory.mktemp("documents-data")
    shutil.copytree(lee_data_dir / "lee", directory / "lee")
    shutil.copytree(small_data_dir / "small", directory / "small")
    records = [{key: value for key, value in record.items() if key != "text"} for record in jsonl_records(lee_docs)]
    path = write_jsonl(directory.parent / "lee-no-text.jsonl", records)
    raw, fmt = read_source(path, "documents")
    build_table(raw, data_dir=directory, name="no-text", source={"format": fmt, "path": path.name})
    texts = write_jsonl(directory.parent / "lee-text.jsonl", without_vectors(lee_docs))
    args = ("import", texts, "--format", "documents", "--name", "lee-text", "--encoder", "small")
    imported = run_cli(*args, "--data-dir", directory)
    assert imported.code == 0, imported.err
    return directory


@pytest.fixture(scope="session")
def documents_server(
    documents_data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[real_server.Server]:
    with real_server.running(documents_data_dir, tmp_path_factory.mktemp("documents-serve") / "serve.log") as server:
        yield server


LEE_SHARDS = 3


@pytest.fixture(scope="session")
def lee_imports(tmp_path_factory: pytest.TempPathFactory, lee_docs: Lee) -> Path:
    """gensim's Lee corpus imported by ``embedding-index import`` (its entry point, in this process) as ``lee``,
    whole and as ``LEE_SHARDS`` shards: ``plain/whole``, ``plain/sharded``, and the same with copies of some
    documents under ids of their own (``copies/...``: equal scores in the lists a front merges). Data
    directories to copy (``lee_copy``): the modules serve and write to their own."""
    from tests.cli import run_cli
    from tests.service.test_shards_front import copies

    root = tmp_path_factory.mktemp("lee-imports")
    records = jsonl_records(lee_docs)
    sources = {"plain": records, "copies": records + [{**records[i], "id": ident} for ident, i in copies()]}
    for kind, rows in sources.items():
        source = write_jsonl(root / f"{kind}.jsonl", rows)
        for where, extra in (("whole", ()), ("sharded", ("--shards", LEE_SHARDS))):
            done = run_cli("import", source, "--name", "lee", *extra, "--data-dir", root / kind / where)
            assert done.code == 0, done.err
    return root


def lee_copy(lee_imports: Path, kind: str, where: str, to: Path) -> Path:
    """A copy of the data directory ``lee_imports / kind / where`` (it holds ``lee``) at ``to``."""
    shutil.copytree(lee_imports / kind / where, to)
    return to


# The explorer's browser: imported when a test asks for it (tests.service.browser skips where Chromium is missing).
# One per module, not per session: while it is open, Playwright's sync API keeps an event loop running in the main
# thread, and every later test's asyncio.run() would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from tests.service.browser import launched

    with launched() as chromium:
        yield chromium


@pytest.fixture
def watched(browser: Any) -> Iterator[Any]:
    """A fresh page of the module's browser, its errors recorded (``tests.service.browser.Watched``)."""
    from tests.service.browser import Watched

    page = Watched(browser)
    yield page
    page.close()
