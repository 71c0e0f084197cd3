"""The guides' pictures of the explorer, taken again from today's page: ``docs/explorer.jpg``,
``docs/explorer-map.jpg``, ``docs/explorer-contextual.jpg`` and ``docs/explorer-search.jpg``.

Not part of the suite (its name does not start with ``test_``); run it by its path when the page changes::

    .venv/bin/python -m pytest -q tests/service/pictures.py

It starts real servers over the tables the captions name (the whole GloVe 6B 50d table, MiniLM imported as a
transformer table, gensim's Lee corpus, as the tests build them), drives Chromium to the view each caption
describes, checks that the view shows it, and writes each picture as a JPEG of quality 80.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from PIL import Image

from index.build.sources import glove_package
from tests import REPO
from tests.minilm import ST
from tests.service import real_server
from tests.service.browser import Watched

GLOVE = glove_package.DEFAULT_NAME
QUALITY = 80
# The Search card's view: more like lee-000, filtered by year, tag, language, length and date.
LEE_FILTER = {
    "year": {"gte": 1995},
    "tags": "australia",
    "lang": "en",
    "long": True,
    "published": {"gte": "2001-03-01T00:00:00Z", "lt": "2002-01-01T00:00:00Z"},
}


def write_jpeg(png: bytes, name: str) -> Path:
    """``docs/<name>.jpg`` from a PNG screenshot, its size checked (the guides' are about 100-300 KB)."""
    path = REPO / "docs" / f"{name}.jpg"
    Image.open(io.BytesIO(png)).convert("RGB").save(path, "JPEG", quality=QUALITY, optimize=True, progressive=True)
    assert 80_000 < path.stat().st_size < 350_000, path.stat().st_size
    return path


def serve(data_dir: Path, table: str, tmp: pytest.TempPathFactory) -> Iterator[str]:
    """A server over ``table`` alone, its layouts cached outside the shared test data."""
    env = {"EMBEDDING_CACHE_DIR": str(tmp.mktemp("pictures-cache"))}
    with real_server.running(data_dir, tmp.mktemp("pictures-log") / "serve.log", "--tables", table, env=env) as server:
        yield server.base


@pytest.fixture(scope="module")
def glove_server(glove_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(glove_data_dir, GLOVE, tmp_path_factory)


def wait_for_whole_table(page: Any) -> None:
    page.wait_for_selector("#tm-canvas[data-ready=true]")
    page.wait_for_selector("#tm-canvas[data-labels=true]")


def test_the_explorer_on_glove(glove_server: str, watched: Watched) -> None:
    """The page as it opens on the default table, with heart's neighbours, man : king :: woman and three · four."""
    page = watched.page
    watched.open(glove_server, "?" + urlencode({"word": "heart", "x": "three", "y": "four"}))
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    page.wait_for_selector("#analogy-out .scores")
    page.wait_for_selector("#similarity-out:not(:empty)")
    wait_for_whole_table(page)
    assert page.input_value("#table") == GLOVE
    assert page.locator("#neighbours-out button.token").first.inner_text() == "pain"
    write_jpeg(page.screenshot(full_page=True), "explorer")
    watched.assert_clean()


def test_the_whole_table_with_numbers_and_heart(glove_server: str, watched: Watched) -> None:
    """Every GloVe row, zoomed on heart, its neighbours marked and the numbers highlighted."""
    page = watched.page
    watched.open(glove_server)
    wait_for_whole_table(page)
    page.fill("#tm-search", "heart")
    picks = page.get_by_role("list", name="First matches: pick one to go to it and list its neighbours")
    picks.get_by_role("button", name="heart", exact=True).click()
    page.wait_for_selector("#table-map .tm-panel .scores")
    for _ in range(3):  # zoomed out till all eight neighbours are in view
        page.click("#table-map .tm-zoom-out")
    page.fill("#tm-search", "/^[0-9]+$/")  # typed, not Entered: the view stays on heart
    page.wait_for_function("() => Number(document.getElementById('table-map').dataset.matches) > 1000")
    assert "of all 400,000 rows" in page.inner_text("#table-map .tm-status")
    assert page.locator("#table-map .tm-panel").inner_text().startswith("Nearest to “heart”")
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 100)))")  # drawn
    write_jpeg(page.locator("#table-map").screenshot(), "explorer-map")
    watched.assert_clean()


@pytest.fixture(scope="module")
def transformer_server(minilm_st_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(minilm_st_dir, ST, tmp_path_factory)


def test_the_contextual_card_on_bank(transformer_server: str, watched: Watched) -> None:
    """The Contextual vectors card's opening view: "bank" in three sentences."""
    page = watched.page
    page.goto(f"{transformer_server}/?table={ST}")
    page.wait_for_selector("#cx-out:not([aria-busy]) .cx-texts")
    assert page.locator("#cx-out .cx-hit").all_inner_texts() == ["bank"] * 3
    write_jpeg(page.locator("#contextual").screenshot(), "explorer-contextual")
    watched.assert_clean()


def test_the_search_card_on_lee(documents_server: real_server.Server, watched: Watched) -> None:
    """The Search card on the Lee corpus: more like lee-000, filtered by year, tag, language, length and date."""
    page = watched.page
    page.goto(f"{documents_server.base}/?" + urlencode({"table": "lee", "filter": json.dumps(LEE_FILTER)}))
    page.wait_for_selector("#ds-out:not([aria-busy]) .ds-count")
    sent = json.loads(page.text_content("#ds-request") or "")
    assert sent == {"id": "lee-000", "k": 10, "offset": 0, "filter": LEE_FILTER}
    answer = httpx.post(f"{documents_server.base}/v1/tables/lee/search", json=sent).json()
    assert page.locator("#ds-out .ds-hit .ds-id").all_inner_texts() == [h["id"] for h in answer["hits"]]
    write_jpeg(page.screenshot(full_page=True), "explorer-search")
    watched.assert_clean()
