"""The explorer page at ``/``, driven in a real headless Chromium against the real ``embedding-serve`` process.

The server runs on a free loopback port over three tables: the 20,000 most frequent GloVe words, the MiniLM
model's token embeddings, and a copy of those under a second name (two tables of one row count and one column).
Every answer the page shows is compared with the API's own answer, fetched with httpx.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest

from bench.common import free_port
from index.engine.layout import MAP_INSTALL
from index.engine.table import Table
from tests.minilm import MINILM
from tests.service.browser import Watched, launched, ring_contrast, save_screenshot
from tests.service.real_server import HTTP

WORDS_TABLE = "small"
TOKENS_TABLE = "minilm"
TWIN_TABLE = "minilm-twin"  # the same rows as TOKENS_TABLE under another name


def map_words(text: str) -> list[str]:
    """The words of the map's textarea (``group: w1 w2`` lines), first occurrence of each, as the page reads them."""
    words: list[str] = []
    for line in text.splitlines():
        for word in re.split(r"[\s,]+", line.split(":", 1)[-1]):
            if word and word not in words:
                words.append(word)
    return words


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path, minilm_data_dir: Path) -> Path:
    """A words table (20k GloVe rows) and a model-token table (MiniLM's input embeddings) twice, copies of the
    session's."""
    directory = tmp_path_factory.mktemp("explorer-data")
    shutil.copytree(small_data_dir / "small", directory / WORDS_TABLE)
    shutil.copytree(minilm_data_dir / MINILM, directory / TOKENS_TABLE)
    shutil.copytree(minilm_data_dir / MINILM, directory / TWIN_TABLE)
    return directory


def warm_umap(base: str) -> threading.Thread:
    """Ask the server for a small UMAP in the background: its first UMAP compiles umap-learn's numba code, which
    takes seconds, and the other tests run meanwhile."""
    body = {"tokens": ["red", "blue", "green", "one", "two", "three"], "method": "umap"}

    def ask() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the server stopped first: nothing left to warm
            HTTP.post(f"{base}/v1/tables/{WORDS_TABLE}/project", json=body, timeout=300)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


UMAP_WARMUP: list[threading.Thread] = []  # started with the server when a UMAP test of this module will run


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[str]:
    """The real ``embedding-serve`` process on a free loopback port; yields its base URL."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("embedding-serve")), "--data-dir", str(data_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    log_path = tmp_path_factory.mktemp("explorer-log") / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                assert process.poll() is None, f"embedding-serve exited: {log_path.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"embedding-serve never got ready: {log_path.read_text()[-2000:]}"
                try:
                    if HTTP.get(f"{base}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)  # polling for readiness, not timing anything
            mine = [item for item in request.session.items if getattr(item, "module", None) is request.module]
            if any("umap" in item.name for item in mine):
                UMAP_WARMUP[:] = [warm_umap(base)]
            yield base
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as client:
        yield client


def neighbour_tokens(page) -> list[str]:
    return page.locator("#neighbours-out .scores button.token").all_inner_texts()


def search(watched: Watched, word: str) -> None:
    page = watched.page
    page.fill("#word", word)
    page.press("#word", "Enter")
    page.wait_for_function("w => new URLSearchParams(location.search).get('word') === w", arg=word)
    page.wait_for_selector("#neighbours-out:not([aria-busy])")


def test_page_loads_with_every_table_and_no_errors(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server)
    page = watched.page
    tables = api.get("/v1/tables").json()["tables"]
    options = page.locator("#table option")
    assert options.evaluate_all("os => os.map(o => o.value)") == [t["name"] for t in tables]
    assert {WORDS_TABLE, TOKENS_TABLE} <= {t["name"] for t in tables}
    model_option = page.locator(f"#table option[value='{TOKENS_TABLE}']").inner_text()
    assert "model tokens" in model_option
    assert page.locator("[aria-live]").count() >= 4
    assert page.title() == "Embedding explorer"
    watched.assert_clean()


def test_heart_shows_the_api_neighbours_and_a_click_searches_the_neighbour(
    server: str, api: httpx.Client, watched: Watched, tmp_path: Path
) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    search(watched, "heart")
    expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"token": "heart", "k": 8}).json()
    shown = neighbour_tokens(page)
    assert len(shown) == 8
    assert shown == [n["token"] for n in expected["neighbors"]]
    scores = page.locator("#neighbours-out .score").all_inner_texts()
    assert scores == [f"{n['score']:.3f}" for n in expected["neighbors"]]

    second = shown[1]
    page.locator("#neighbours-out button.token", has_text=re.compile(f"^{re.escape(second)}$")).click()
    page.wait_for_function("w => new URLSearchParams(location.search).get('word') === w", arg=second)
    page.wait_for_selector("#neighbours-out:not([aria-busy])")
    assert page.input_value("#word") == second
    assert watched.state()["word"] == second
    again = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"token": second, "k": 8}).json()
    assert neighbour_tokens(page) == [n["token"] for n in again["neighbors"]]
    page.go_back()
    page.wait_for_function("() => new URLSearchParams(location.search).get('word') === 'heart'")
    page.wait_for_selector("#neighbours-out:not([aria-busy])")
    assert neighbour_tokens(page) == shown
    save_screenshot(page, "explorer-desktop", tmp_path)
    watched.assert_clean()


def test_map_draws_one_point_per_word_and_reports_unknown_words(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    words = map_words(page.input_value("#map-words"))
    assert 25 <= len(words) <= 40
    assert page.locator("#map-out svg circle").count() == len(words)
    labels = page.locator("#map-out svg .point text").all_text_contents()
    assert sorted(labels) == sorted(words)
    groups = page.locator("#map-out .legend li").all_inner_texts()
    assert groups == ["colours", "numbers", "body parts", "animals", "people and pronouns"]
    projected = api.post(f"/v1/tables/{WORDS_TABLE}/project", json={"tokens": words, "method": "pca"}).json()
    pc1, pc2 = projected["explained_variance_ratio"][:2]
    assert f"PC1 {pc1 * 100:.1f}%" in page.inner_text("#map-out")
    assert f"PC2 {pc2 * 100:.1f}%" in page.inner_text("#map-out")

    # An unknown word is reported and left out; the rest is still drawn (Ctrl+Enter in the words draws them).
    page.fill("#map-words", "fruit: apple banana qzxqzxq\nmetals: iron gold copper")
    page.press("#map-words", "Control+Enter")
    page.wait_for_selector("#map-out .warning")
    assert "qzxqzxq" in page.inner_text("#map-out .warning")
    assert page.locator("#map-out svg circle").count() == 5
    assert watched.state()["words"].startswith("fruit:")

    # Reset draws the opening words again, on principal components, and the link forgets the edited ones.
    page.check("#axes-pairs")
    page.click("#map-reset")
    page.wait_for_function("() => !new URLSearchParams(location.search).has('words')")
    page.wait_for_selector("#map-out:not([aria-busy]) svg")
    assert map_words(page.input_value("#map-words")) == words and page.is_checked("#axes-pca")
    assert sorted(page.locator("#map-out svg .point text").all_text_contents()) == sorted(words)
    watched.assert_clean()


def test_a_row_typed_twice_keeps_its_first_word_and_group(server: str, api: httpx.Client, watched: Watched) -> None:
    """Words that are one row (RED finds red) are one point, named and coloured as the first of them was typed."""
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    page.fill("#map-words", "colours: red blue\nshouting: RED BLUE green")
    page.press("#map-words", "Control+Enter")
    page.wait_for_function("() => document.querySelectorAll('#map-out svg circle').length === 3")
    tokens = ["red", "blue", "RED", "BLUE", "green"]
    answer = api.post(f"/v1/tables/{WORDS_TABLE}/project", json={"tokens": tokens, "method": "pca"}).json()
    assert [p["token"] for p in answer["points"]] == ["red", "blue", "green"]  # one point per row
    titles = page.locator("#map-out svg .point title").all_text_contents()
    assert titles == ["red (colours)", "blue (colours)", "green (shouting)"]
    assert page.locator("#map-out .legend li").all_inner_texts() == ["colours", "shouting"]
    watched.assert_clean()


def test_a_row_typed_in_two_spellings_keeps_its_first_word_and_group(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """On the model-token table "İstanbul" finds istanbul case-folded and "Café" finds cafe as the uncased model
    reads it: typed before "istanbul" and "cafe" in other groups, each point is named and coloured as the first
    word that found its row (the answer's ``text``), not by its label."""
    watched.open(server, f"?table={TOKENS_TABLE}")
    page = watched.page
    page.fill("#map-words", "places: İstanbul paris\nfood: Café tea\nother: istanbul cafe heart")
    page.press("#map-words", "Control+Enter")
    page.wait_for_function("() => document.querySelectorAll('#map-out svg circle').length === 5")
    tokens = ["İstanbul", "paris", "Café", "tea", "istanbul", "cafe", "heart"]
    answer = api.post(f"/v1/tables/{TOKENS_TABLE}/project", json={"tokens": tokens, "method": "pca"}).json()
    assert [(p["token"], p["text"]) for p in answer["points"]] == [
        ("istanbul", "İstanbul"),
        ("paris", "paris"),
        ("cafe", "Café"),
        ("tea", "tea"),
        ("heart", "heart"),
    ]
    titles = page.locator("#map-out svg .point title").all_text_contents()
    assert titles == ["İstanbul (places)", "paris (places)", "Café (food)", "tea (food)", "heart (other)"]
    assert page.locator("#map-out .legend li").all_inner_texts() == ["places", "food", "other"]
    watched.assert_clean()


def test_unknown_word_shows_clickable_suggestions(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    search(watched, "hearrt")
    error = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"token": "hearrt", "k": 8})
    assert error.status_code == 404
    suggestions = error.json()["error"]["suggestions"]
    assert suggestions
    assert "hearrt" in page.inner_text("#neighbours-out [role=alert]")
    assert page.locator("#neighbours-out button.chip").all_inner_texts() == suggestions
    page.locator("#neighbours-out button.chip").first.click()
    page.wait_for_function("w => new URLSearchParams(location.search).get('word') === w", arg=suggestions[0])
    page.wait_for_selector("#neighbours-out .scores")
    assert len(neighbour_tokens(page)) == 8

    # In the other tools a suggestion replaces the unknown word and asks again.
    page.fill("#sim-a", "cat")
    page.fill("#sim-b", "horsse")
    page.press("#sim-b", "Enter")
    page.wait_for_selector("#similarity-out:not([aria-busy]) [role=alert]")
    error = api.get(f"/v1/tables/{WORDS_TABLE}/similarity", params={"a": "cat", "b": "horsse"})
    assert error.status_code == 404
    suggestions = error.json()["error"]["suggestions"]
    assert page.locator("#similarity-out button.chip").all_inner_texts() == suggestions
    page.locator("#similarity-out button.chip").first.click()
    page.wait_for_selector("#similarity-out:not([aria-busy]) strong")
    assert page.input_value("#sim-b") == suggestions[0]
    assert watched.state()["y"] == suggestions[0]
    watched.assert_clean(expected_404=("hearrt", "horsse"))


def test_a_link_whose_escapes_are_not_utf8_opens_the_page(server: str, api: httpx.Client, watched: Watched) -> None:
    """A link cut inside an escape, or written by a Latin-1 tool (caf%E9), opens the page, as the browser decodes
    its query string (U+FFFD for the broken bytes); the cards say the word is unknown and suggest, as for a typo."""
    page = watched.page
    opened = page.goto(f"{server}/?table={WORDS_TABLE}&word=caf%E9&x=red&y=bl%E0%A4")
    assert opened is not None and opened.status == 200, opened and opened.text()[:300]
    page.wait_for_selector("#neighbours-out:not([aria-busy]) [role=alert]")
    page.wait_for_selector("#similarity-out:not([aria-busy]) [role=alert]")
    assert page.input_value("#word") == "caf\ufffd" and page.input_value("#sim-b") == "bl\ufffd"
    error = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"token": "caf\ufffd", "k": 8}).json()["error"]
    assert page.inner_text("#neighbours-out [role=alert] p") == error["message"]
    assert page.locator("#neighbours-out button.chip").all_inner_texts() == error["suggestions"]
    assert "cafe" in error["suggestions"]
    page.locator("#neighbours-out button.chip", has_text=re.compile("^cafe$")).click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('word') === 'cafe'")
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"token": "cafe", "k": 8}).json()
    assert neighbour_tokens(page) == [n["token"] for n in expected["neighbors"]]
    watched.assert_clean(expected_404=("caf%EF%BF%BD", "bl%EF%BF%BD"))


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_analogy_man_king_woman_gives_queen(server: str, api: httpx.Client, watched: Watched, method: str) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    page.fill("#an-a", "man")
    page.fill("#an-b", "king")
    page.fill("#an-c", "woman")
    page.select_option("#an-method", method)
    page.press("#an-c", "Enter")
    page.wait_for_function("m => (new URLSearchParams(location.search).get('method') || '3cosadd') === m", arg=method)
    page.wait_for_selector("#analogy-out:not([aria-busy]) .scores")
    shown = page.locator("#analogy-out .scores button.token").all_inner_texts()
    body = {"a": "man", "b": "king", "c": "woman", "k": 5, "method": method}
    expected = api.post(f"/v1/tables/{WORDS_TABLE}/analogy", json=body).json()
    assert shown == [n["token"] for n in expected["neighbors"]]
    assert shown[0] == "queen"
    assert page.inner_text("#analogy-out .answer strong") == "queen"
    watched.assert_clean()


def test_picking_the_analogy_method_solves_again(server: str, api: httpx.Client, watched: Watched) -> None:
    """The answer shown is the picked method's: picking the other one asks again, without Enter."""
    watched.open(server, f"?table={WORDS_TABLE}&a=man&b=king&c=woman")
    page = watched.page
    page.wait_for_selector("#analogy-out:not([aria-busy]) .scores")
    page.select_option("#an-method", "3cosmul")
    page.wait_for_function("() => new URLSearchParams(location.search).get('method') === '3cosmul'")
    page.wait_for_selector("#analogy-out:not([aria-busy]) .scores")
    body = {"a": "man", "b": "king", "c": "woman", "k": 5, "method": "3cosmul"}
    expected = api.post(f"/v1/tables/{WORDS_TABLE}/analogy", json=body).json()["neighbors"]
    assert page.locator("#analogy-out .scores .score").all_inner_texts() == [f"{n['score']:.3f}" for n in expected]
    watched.assert_clean()


def test_similarity_and_table_switch(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    page.fill("#sim-a", "red")
    page.fill("#sim-b", "blue")
    page.press("#sim-b", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('x') === 'red'")
    page.wait_for_selector("#similarity-out:not([aria-busy]) strong")
    value = api.get(f"/v1/tables/{WORDS_TABLE}/similarity", params={"a": "red", "b": "blue"}).json()["similarity"]
    assert page.inner_text("#similarity-out strong") == f"{value:.3f}"

    page.fill("#closer-a", "paris")
    page.fill("#closer-b", "london")
    page.press("#closer-b", "Enter")
    page.wait_for_selector("#closer-out:not([aria-busy]) .closer-count")
    page.fill("#odd-words", "breakfast cereal dinner lunch")
    page.press("#odd-words", "Enter")
    page.wait_for_selector("#odd-out:not([aria-busy]) strong")

    # The model-token table answers the same questions from its own rows.
    search(watched, "heart")
    before = {out: page.inner_text(out) for out in ("#closer-out", "#odd-out")}
    page.select_option("#table", TOKENS_TABLE)
    page.wait_for_function("t => new URLSearchParams(location.search).get('table') === t", arg=TOKENS_TABLE)
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    page.wait_for_selector("#similarity-out:not([aria-busy]) strong")
    page.wait_for_selector("#map-out:not([aria-busy]) svg")
    expected = api.get(f"/v1/tables/{TOKENS_TABLE}/neighbors", params={"token": "heart", "k": 8}).json()
    assert neighbour_tokens(page) == [n["token"] for n in expected["neighbors"]]
    value = api.get(f"/v1/tables/{TOKENS_TABLE}/similarity", params={"a": "red", "b": "blue"}).json()["similarity"]
    assert page.inner_text("#similarity-out strong") == f"{value:.3f}"
    words = map_words(page.input_value("#map-words"))
    assert page.locator("#map-out svg circle").count() == len(words)

    # The diagnostics are asked again too, not left showing the other table's answers.
    page.wait_for_function("b => document.getElementById('closer-out').innerText !== b", arg=before["#closer-out"])
    page.wait_for_function("b => document.getElementById('odd-out').innerText !== b", arg=before["#odd-out"])
    page.wait_for_selector("#closer-out:not([aria-busy]) .closer-count")
    page.wait_for_selector("#odd-out:not([aria-busy]) strong")
    params = {"a": "paris", "b": "london", "order": "score", "limit": 10}
    closer = api.get(f"/v1/tables/{TOKENS_TABLE}/closer-than", params=params).json()
    assert page.inner_text("#closer-out .closer-count") == f"{closer['count']:,}"
    assert page.locator("#closer-out .scores button.token").all_inner_texts() == [w["token"] for w in closer["words"]]
    body = {"words": ["breakfast", "cereal", "dinner", "lunch"]}
    odd = api.post(f"/v1/tables/{TOKENS_TABLE}/doesnt-match", json=body).json()
    assert page.locator("#odd-out .scores .score").all_inner_texts() == [f"{r['score']:.3f}" for r in odd["ranking"]]
    watched.assert_clean()


def test_arrow_keys_on_the_table_picker_ask_only_for_the_table_they_stop_on(server: str, watched: Watched) -> None:
    """Stepping through the closed table picker with the arrow keys picks each table in turn; the cards ask the
    server for the one the steps stop on only, not for each table passed over (a pick from the open list is used
    at once: the other tests' select_option)."""
    watched.open(server, f"?table={TOKENS_TABLE}&word=heart")
    page = watched.page
    page.wait_for_load_state("networkidle")
    names = page.eval_on_selector_all("#table option", "os => os.map(o => o.value)")
    assert names == [TOKENS_TABLE, TWIN_TABLE, WORDS_TABLE], names
    asked: list[str] = []
    page.on("request", lambda r: asked.append(urlparse(r.url).path))
    page.focus("#table")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")  # passes names[1] over
    page.wait_for_function("t => new URLSearchParams(location.search).get('table') === t", arg=names[2])
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    page.wait_for_load_state("networkidle")
    tables = {path.split("/")[3] for path in asked if path.startswith("/v1/tables/")}
    assert tables == {names[2]}, asked
    assert page.input_value("#table") == names[2] and page.inner_text("#table-info").startswith("words")
    # Enter uses the table stepped to at once; so does leaving the picker.
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Enter")
    assert watched.state()["table"] == names[1]
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Tab")
    assert watched.state()["table"] == names[0]
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    watched.assert_clean()


def test_state_in_the_url_is_restored_on_reload(
    server: str, api: httpx.Client, browser: object, watched: Watched
) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    search(watched, "river")
    page.fill("#an-a", "france")
    page.fill("#an-b", "paris")
    page.fill("#an-c", "italy")
    page.select_option("#an-method", "3cosmul")
    page.click("#analogy-form button[type=submit]")
    page.wait_for_function("() => new URLSearchParams(location.search).get('c') === 'italy'")
    url = page.url

    restored = Watched(browser)
    try:
        restored.page.goto(url)
        again = restored.page
        again.wait_for_selector("#neighbours-out .scores")
        again.wait_for_selector("#analogy-out .scores")
        assert again.input_value("#table") == WORDS_TABLE
        assert again.input_value("#word") == "river"
        assert [again.input_value(f"#an-{k}") for k in "abc"] == ["france", "paris", "italy"]
        assert again.input_value("#an-method") == "3cosmul"
        expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"token": "river", "k": 8}).json()
        assert neighbour_tokens(again) == [n["token"] for n in expected["neighbors"]]
        body = {"a": "france", "b": "paris", "c": "italy", "k": 5, "method": "3cosmul"}
        answer = api.post(f"/v1/tables/{WORDS_TABLE}/analogy", json=body).json()["neighbors"][0]["token"]
        assert again.inner_text("#analogy-out .answer strong") == answer
        restored.assert_clean()
    finally:
        restored.close()
    page.reload()
    page.wait_for_selector("#neighbours-out .scores")
    assert page.input_value("#word") == "river"
    watched.assert_clean()


def test_phone_width_has_no_horizontal_scroll(server: str, browser: object, tmp_path: Path) -> None:
    phone = Watched(browser, width=375, height=812)
    try:
        phone.open(server, f"?table={WORDS_TABLE}&word=heart")
        page = phone.page
        page.wait_for_selector("#neighbours-out .scores")
        page.wait_for_selector("#analogy-out .scores")
        page.wait_for_selector("#similarity-out strong")
        scroll, client = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert client == 375
        assert scroll <= client
        box = page.locator("#map-out svg").bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= client
        save_screenshot(page, "explorer-phone", tmp_path)
        # A reader whose browser sets text to 32 px by default gets it (the page's sizes follow the default), and
        # the page still does not scroll sideways: long method names and the whole table's controls wrap.
        phone.context.new_cdp_session(page).send("Page.setFontSizes", {"fontSizes": {"standard": 32, "fixed": 26}})
        page.reload()
        page.wait_for_selector("#neighbours-out .scores")
        page.wait_for_selector("#tm-canvas[data-ready=true]")
        root, scroll = page.evaluate(
            "[getComputedStyle(document.documentElement).fontSize, document.documentElement.scrollWidth]"
        )
        assert root == "32px" and scroll <= client, (root, scroll)
        phone.assert_clean()
    finally:
        phone.close()


def test_keyboard_focus_is_visible_and_controls_are_labelled(server: str, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')]
             .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')).map(e => e.id)"""
    )
    assert unlabelled == []
    # The two rows of export buttons (the same three names) are told apart by their groups' names.
    for group in ("Export this map", "Export the highlighted rows, or the rows in view"):
        assert page.get_by_role("group", name=group).get_by_role("button", name="vectors.tsv").count() == 1
    # The picker, the word, its button (filled with the accent): each ring stands out from the background around
    # it (WCAG AA: 3:1 for what shows the focus).
    for expected in ("table", "word", "find"):
        page.keyboard.press("Tab")
        focused = page.evaluate("document.activeElement.id || document.activeElement.textContent.toLowerCase()")
        assert focused == expected
        assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
        assert ring_contrast(page) >= 3, (expected, ring_contrast(page))
    # Tab goes through the cards as the eye does on two columns, top to bottom (the whole table before the
    # diagnostics below it), and on out of the page: no card is skipped, none holds the focus.
    where = """() => { const card = document.activeElement.closest('section.card');
                       return card && [card.id, card.getBoundingClientRect().top + scrollY]; }"""
    cards: list[tuple[str, float]] = [tuple(page.evaluate(where))]  # the word's card
    for _ in range(200):
        page.keyboard.press("Tab")
        card = page.evaluate(where)
        if card is None:
            break
        if cards[-1][0] != card[0]:
            cards.append((card[0], card[1]))
    shown = page.eval_on_selector_all("section.card:not([hidden])", "cards => cards.map((c) => c.id)")
    assert sorted(card for card, _ in cards) == sorted(shown), cards
    assert [top for _, top in cards] == sorted(top for _, top in cards), cards
    watched.assert_clean()


# ------------------------------------------------------------------------------------------ the whole table
# Pixels of the map's canvas: white, search highlights (tablemap.js HIGHLIGHT, rgb(230, 80, 0)) and the clicked
# row with its neighbours (SELECTED, rgb(163, 38, 42)).
PIXELS = """() => {
  const canvas = document.getElementById("tm-canvas");
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const count = (r, g, b) => { let n = 0; for (let k = 0; k < data.length; k += 4)
    if (data[k] === r && data[k + 1] === g && data[k + 2] === b) n++; return n; };
  return { total: data.length / 4, white: count(255, 255, 255), highlight: count(230, 80, 0),
           selected: count(163, 38, 42) };
}"""
# Pan for half the frames, then zoom in, one step per animation frame; frame intervals from requestAnimationFrame's
# timestamps and the map's own draw times.
FRAMES = """async (frames) => {
  const m = window.explorer.tableMap;
  const stamps = [];
  const first = m.drawTimes.length;
  const before = { ...m.view };
  await new Promise((resolve) => {
    let i = 0;
    const step = (t) => {
      stamps.push(t);
      if (i++ >= frames) return resolve();
      if (i <= frames / 2) m.pan(6, 3); else m.zoom(1.03);
      m.drawNow();
      requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  });
  const sorted = (a) => [...a].sort((x, y) => x - y);
  const pick = (a, q) => a[Math.min(a.length - 1, Math.floor(q * a.length))];
  const intervals = sorted(stamps.slice(1).map((t, i) => t - stamps[i]));
  const draws = sorted(m.drawTimes.slice(first));
  return {
    rows: m.n, frames: intervals.length, canvas: [m.canvas.width, m.canvas.height],
    frame_ms: { median: pick(intervals, 0.5), p95: pick(intervals, 0.95), max: intervals[intervals.length - 1] },
    draw_ms: { median: pick(draws, 0.5), p95: pick(draws, 0.95), max: draws[draws.length - 1] },
    draws: draws.length, moved: m.view.cx !== before.cx && m.view.s > before.s,
  };
}"""


def open_table_map(watched: Watched, base: str, query: str = f"?table={WORDS_TABLE}") -> None:
    watched.open(base, query)
    watched.page.wait_for_selector("#tm-canvas[data-ready=true]")
    watched.page.wait_for_selector("#tm-canvas[data-labels=true]")


def decoded_map(api: httpx.Client, table: str) -> np.ndarray:
    info = api.get(f"/v1/tables/{table}/map/info").json()
    codes = np.frombuffer(api.get(f"/v1/tables/{table}/map").content, dtype="<i2").reshape(-1, 2).astype(np.float64)
    for axis, name in enumerate("xy"):
        lo, hi = info["bounds"][name]
        codes[:, axis] = lo + (codes[:, axis] + 32767) / 65534 * (hi - lo)
    return codes


def test_the_keyboard_goes_on_from_a_new_answer(server: str, api: httpx.Client, watched: Watched) -> None:
    """Enter on a neighbour lists its neighbours; the focus stays in the list's place (not back at the top of the
    page), so Tab reaches the new list's first word."""
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    search(watched, "heart")
    first = neighbour_tokens(page)[0]
    page.focus("#neighbours-out button.token")
    page.keyboard.press("Enter")
    page.wait_for_function("w => new URLSearchParams(location.search).get('word') === w", arg=first)
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    assert page.evaluate("document.activeElement.id") == "neighbours-out"
    page.keyboard.press("Tab")
    expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"token": first, "k": 8}).json()["neighbors"]
    assert page.evaluate("document.activeElement.textContent") == expected[0]["token"]
    watched.assert_clean()


def test_the_page_opens_on_the_default_table(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server)
    default = api.get("/v1/explorer").json()["default_table"]
    assert default in {WORDS_TABLE, TOKENS_TABLE}
    assert watched.page.input_value("#table") == default
    assert watched.state()["table"] == default
    watched.assert_clean()


def test_the_whole_table_is_drawn_with_every_row(
    server: str, api: httpx.Client, watched: Watched, data_dir: Path, tmp_path: Path
) -> None:
    open_table_map(watched, server)
    page = watched.page
    rows = api.get(f"/v1/tables/{WORDS_TABLE}").json()["rows"]
    assert page.evaluate("explorer.tableMap.n") == rows
    pixels = page.evaluate(PIXELS)
    assert pixels["total"] - pixels["white"] > 0.01 * pixels["total"]  # ink: points and labels
    expected = decoded_map(api, WORDS_TABLE)
    sample = [0, 1, 500, 7777, rows - 1]
    shown = page.evaluate("ids => ids.map(i => [explorer.tableMap.x[i], explorer.tableMap.y[i]])", sample)
    np.testing.assert_allclose(shown, expected[sample], rtol=1e-6, atol=1e-7)  # float32 in the page
    assert "principal components of all 20,000 rows" in page.inner_text("#table-map .tm-status")
    save_screenshot(page, "explorer-table-map", tmp_path)

    # A model-token table: the same opening view, and its map coloured by token kind.
    page.select_option("#table", TOKENS_TABLE)
    page.wait_for_function(
        "() => explorer.tableMap.table === 'minilm' && explorer.tableMap.canvas.dataset.ready === 'true'"
    )
    page.wait_for_selector("#map-out:not([aria-busy]) svg")
    assert page.locator("#map-out svg circle").count() == len(map_words(page.input_value("#map-words")))
    # Colours the server refuses (a column it lacks, asked in place of this one): said, and the menu goes back to
    # the colours drawn.
    refused = f"{server}/v1/tables/{TOKENS_TABLE}/map/colours/nope"
    page.route("**/map/colours/**", lambda route: route.continue_(url=refused))
    page.select_option("#tm-colour", "token kind")
    page.wait_for_selector("#table-map .tm-colour-note >> text=no colour column 'nope'")
    assert page.input_value("#tm-colour") == "rank" and page.evaluate("explorer.tableMap.column") == "rank"
    page.unroute("**/map/colours/**")
    page.select_option("#tm-colour", "token kind")
    page.wait_for_function("() => explorer.tableMap.column === 'token kind'")
    page.wait_for_selector("#table-map .tm-colour-note", state="hidden")
    assert page.locator("#table-map .tm-legend li").all_inner_texts() == ["word start", "continuation", "special"]
    table = Table.load(data_dir / TOKENS_TABLE, checksums=False)
    assert page.evaluate("explorer.tableMap.n") == table.rows
    watched.assert_clean(expected_422=("/map/colours/",))


def test_colours_asked_for_before_a_table_switch_are_dropped(server: str, watched: Watched) -> None:
    """The colours of a column of the table before (held here until the switch is done) do not colour the new
    table's map."""
    open_table_map(watched, server, f"?table={TOKENS_TABLE}")
    page = watched.page
    held: list = []
    page.route(f"**/v1/tables/{TOKENS_TABLE}/map/colours/**", lambda route: held.append(route))
    with page.expect_request(lambda r: "/map/colours/" in r.url):
        page.select_option("#tm-colour", "token kind")
    page.select_option("#table", WORDS_TABLE)
    page.wait_for_function(
        "t => explorer.tableMap.table === t && explorer.tableMap.canvas.dataset.ready === 'true'", arg=WORDS_TABLE
    )
    legend = page.locator("#table-map .tm-legend li").all_inner_texts()
    assert len(held) == 1 and legend[0] == "top 100"
    with page.expect_response(lambda r: "/map/colours/" in r.url) as answered:
        held[0].continue_()
    answered.value.finished()
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 50)))")  # the page reads it
    assert page.evaluate("explorer.tableMap.column") == "rank"
    assert page.locator("#table-map .tm-legend li").all_inner_texts() == legend
    watched.assert_clean()


def routed(page: Any, held: list[Any], count: int) -> list[Any]:
    """``held`` once it holds ``count`` routes: a request is seen before its route's handler has run."""
    for _ in range(500):
        if len(held) >= count:
            break
        page.wait_for_timeout(20)
    assert len(held) == count, held
    return held


# A fingerprint of the whole-table map's canvas: equal fingerprints, the same pixels.
DRAWN = """() => {
  const canvas = document.getElementById("tm-canvas");
  const data = new Uint32Array(canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data.buffer);
  let h = 0;
  for (let k = 0; k < data.length; k++) h = (Math.imul(h, 31) + data[k]) | 0;
  return h;
}"""


def test_colours_that_come_while_another_tables_layout_loads_are_dropped(server: str, watched: Watched) -> None:
    """Colours of a column of the table shown that come while another table's layout is on its way (the colours
    held here until that layout is asked for, the layout until the colours are in) colour neither the map shown
    nor the next table's once it is drawn; the menu keeps the column picked till that table's columns come."""
    open_table_map(watched, server, f"?table={TOKENS_TABLE}")
    page = watched.page
    held: list = []
    page.route(f"**/v1/tables/{TOKENS_TABLE}/map/colours/**", lambda route: held.append(route))
    page.route(f"**/v1/tables/{WORDS_TABLE}/map?*", lambda route: held.append(route))
    with page.expect_request(lambda r: "/map/colours/" in r.url):
        page.select_option("#tm-colour", "token kind")
    with page.expect_request(lambda r: f"/{WORDS_TABLE}/map?" in r.url):
        page.select_option("#table", WORDS_TABLE)
    routes = routed(page, held, 2)
    colours = next(route for route in routes if "/map/colours/" in route.request.url)
    layout = next(route for route in routes if route is not colours)
    legend = page.locator("#table-map .tm-legend li").all_inner_texts()
    drawn = page.evaluate(DRAWN)
    with page.expect_response(lambda r: "/map/colours/" in r.url) as answered:
        colours.continue_()
    answered.value.finished()
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 50)))")  # the page reads it
    assert page.evaluate("explorer.tableMap.column") == "rank" and legend[0] == "top 100"
    assert page.locator("#table-map .tm-legend li").all_inner_texts() == legend
    assert page.evaluate(DRAWN) == drawn
    assert page.input_value("#tm-colour") == "token kind"
    layout.continue_()
    page.wait_for_function(
        "t => explorer.tableMap.table === t && explorer.tableMap.canvas.dataset.ready === 'true'", arg=WORDS_TABLE
    )
    assert page.evaluate("explorer.tableMap.column") == "rank" and page.input_value("#tm-colour") == "rank"
    assert page.locator("#table-map .tm-legend li").all_inner_texts()[0] == "top 100"
    watched.assert_clean()


# The colours of the map's legend ("rgb(r, g, b)"), and how many of the canvas' pixels are each of ``colours``.
# The map draws in the animation frame after a change (TableMap.request): two frames on, it has drawn.
TWO_FRAMES = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"
SWATCHES = "() => [...document.querySelectorAll('#table-map .tm-legend .swatch')].map((s) => s.style.backgroundColor)"
INKED = """(colours) => {
  const canvas = document.getElementById("tm-canvas");
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const counts = new Map(colours.map((colour) => [colour, 0]));
  for (let k = 0; k < data.length; k += 4) {
    const colour = `rgb(${data[k]}, ${data[k + 1]}, ${data[k + 2]})`;
    if (counts.has(colour)) counts.set(colour, counts.get(colour) + 1);
  }
  return colours.map((colour) => counts.get(colour));
}"""


def test_colours_refused_for_the_next_table_leave_it_its_own_colours(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """The next table's colours of the column picked, refused (the request sent, here, for a column it lacks),
    leave its map in its own default colours, not the table before's, though both tables have as many rows."""
    rows = {table: api.get(f"/v1/tables/{table}").json()["rows"] for table in (TOKENS_TABLE, TWIN_TABLE)}
    assert rows[TOKENS_TABLE] == rows[TWIN_TABLE]
    open_table_map(watched, server, f"?table={TOKENS_TABLE}")
    page = watched.page
    page.select_option("#tm-colour", "token kind")
    page.wait_for_function("() => explorer.tableMap.column === 'token kind'")
    page.evaluate(TWO_FRAMES)
    kinds = page.evaluate(SWATCHES)
    assert len(kinds) == 3 and sum(page.evaluate(INKED, kinds)) > 0
    refused = f"{server}/v1/tables/{TWIN_TABLE}/map/colours/nope"
    page.route(f"**/v1/tables/{TWIN_TABLE}/map/colours/**", lambda route: route.continue_(url=refused))
    page.select_option("#table", TWIN_TABLE)
    page.wait_for_function(
        "t => explorer.tableMap.table === t && explorer.tableMap.canvas.dataset.ready === 'true'", arg=TWIN_TABLE
    )
    assert page.locator("#table-map .tm-colour-note").inner_text().startswith("no colour column 'nope'")
    assert page.evaluate("explorer.tableMap.column") == "rank" and page.input_value("#tm-colour") == "rank"
    assert page.locator("#table-map .tm-legend li").all_inner_texts()[0] == "top 100"
    assert page.evaluate(INKED, kinds) == [0, 0, 0]
    assert sum(page.evaluate(INKED, page.evaluate(SWATCHES))) > 0
    watched.assert_clean(expected_422=("/map/colours/",))


def test_the_next_layout_is_drawn_in_its_own_colours_till_the_columns_come(server: str, watched: Watched) -> None:
    """The next table's layout, drawn again (panned) while its colours of the column picked are on their way (held
    here), is drawn in its own default colours (frequency rank), not the table before's; its colours once in."""
    open_table_map(watched, server, f"?table={TOKENS_TABLE}")
    page = watched.page
    page.select_option("#tm-colour", "token kind")
    page.wait_for_function("() => explorer.tableMap.column === 'token kind'")
    kinds = page.evaluate(SWATCHES)
    legend = page.locator("#table-map .tm-legend li").all_inner_texts()
    held: list = []
    page.route(f"**/v1/tables/{TWIN_TABLE}/map/colours/**", lambda route: held.append(route))
    with page.expect_request(lambda r: f"/{TWIN_TABLE}/map/colours/" in r.url):  # asked once its layout is in
        page.select_option("#table", TWIN_TABLE)
    colours = routed(page, held, 1)[0]
    assert page.evaluate("explorer.tableMap.table") == TWIN_TABLE
    page.focus("#tm-canvas")
    page.keyboard.press("ArrowLeft")
    page.evaluate(TWO_FRAMES)
    assert page.evaluate("explorer.tableMap.column") == "rank" and page.input_value("#tm-colour") == "token kind"
    assert page.locator("#table-map .tm-legend li").all_inner_texts()[0] == "top 100"
    assert page.evaluate(INKED, kinds) == [0, 0, 0]
    assert sum(page.evaluate(INKED, page.evaluate(SWATCHES))) > 0
    colours.continue_()
    page.wait_for_function(
        "t => explorer.tableMap.table === t && explorer.tableMap.canvas.dataset.ready === 'true'", arg=TWIN_TABLE
    )
    assert page.evaluate("explorer.tableMap.column") == "token kind"
    assert page.locator("#table-map .tm-legend li").all_inner_texts() == legend
    assert sum(page.evaluate(INKED, kinds)) > 0
    watched.assert_clean()


def test_colours_refused_while_a_layout_loads_are_still_said_once_it_is_drawn(server: str, watched: Watched) -> None:
    """Colours the server refuses while another table's layout is on its way (the refusal held here until that
    layout is asked for, the layout until the refusal is shown) stay said beside the new layout's status line."""
    open_table_map(watched, server, f"?table={TOKENS_TABLE}")
    page = watched.page
    held: list = []
    page.route(f"**/v1/tables/{WORDS_TABLE}/map?*", lambda route: held.append(route))
    page.route("**/map/colours/**", lambda route: held.append(route))
    with page.expect_request(lambda r: "/map/colours/" in r.url):
        page.select_option("#tm-colour", "token kind")
    with page.expect_request(lambda r: f"/{WORDS_TABLE}/map?" in r.url):
        page.select_option("#table", WORDS_TABLE)
    colours, layout = routed(page, held, 2)
    colours.continue_(url=f"{server}/v1/tables/{TOKENS_TABLE}/map/colours/nope")
    said = page.locator("#table-map").get_by_text("no colour column 'nope'")
    said.wait_for()
    layout.continue_()
    page.wait_for_function(
        "t => explorer.tableMap.table === t && explorer.tableMap.canvas.dataset.ready === 'true'", arg=WORDS_TABLE
    )
    assert "principal components of all 20,000 rows" in page.inner_text("#table-map .tm-status")
    assert said.is_visible()
    assert page.get_by_role("combobox", name="Colour").get_attribute("aria-describedby") == "tm-colour-note"
    watched.assert_clean(expected_422=("/map/colours/",))


def test_the_colour_menu_waits_for_the_columns_of_the_next_table(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """While another table's layout info is on its way (held here), the colour menu, still the columns of the table
    drawn, takes no pick; once that layout is drawn the menu offers its table's columns."""
    open_table_map(watched, server, f"?table={TOKENS_TABLE}")
    page = watched.page
    held: list = []
    page.route(f"**/v1/tables/{WORDS_TABLE}/map/info?*", lambda route: held.append(route))
    with page.expect_request(lambda r: f"/{WORDS_TABLE}/map/info?" in r.url):
        page.select_option("#table", WORDS_TABLE)
    menu = page.get_by_role("combobox", name="Colour")
    assert menu.is_disabled()
    routed(page, held, 1)[0].continue_()
    page.wait_for_function(
        "t => explorer.tableMap.table === t && explorer.tableMap.canvas.dataset.ready === 'true'", arg=WORDS_TABLE
    )
    assert menu.is_enabled()
    columns = api.get(f"/v1/tables/{WORDS_TABLE}/map/info").json()["columns"]
    assert menu.locator("option").evaluate_all("os => os.map(o => o.value)") == ["rank", "none", *columns]
    watched.assert_clean()


def test_a_layout_or_labels_lost_or_refused_are_reported(server: str, watched: Watched) -> None:
    """A request of the whole-table map that fails (the connection lost) is said in its status line, not thrown;
    one the server refuses (its error envelope: here a table that is not there, asked in place of the map's) is
    said with the server's message."""
    page = watched.page
    page.route("**/map/labels", lambda route: route.abort())
    watched.open(server, f"?table={WORDS_TABLE}")
    page.wait_for_selector("#table-map .tm-status.warning >> text=the labels could not be loaded")
    page.fill("#tm-search", "heart")
    page.wait_for_selector("#table-map .tm-matches >> text=no labels to search")
    page.route(f"**/v1/tables/{TOKENS_TABLE}/map?*", lambda route: route.abort())
    page.select_option("#table", TOKENS_TABLE)
    page.wait_for_selector("#table-map .tm-status.warning >> text=the map could not be loaded")
    assert [m for m in watched.console if "net::ERR_FAILED" not in m] == []
    assert len(watched.failed) == 2 and not watched.http_errors

    page.unroute_all()
    page.route("**/map/labels", lambda route: route.continue_(url=f"{server}/v1/tables/gone/map/labels"))
    page.select_option("#table", WORDS_TABLE)
    page.wait_for_selector("#table-map .tm-status.warning >> text=could not be loaded (no table named 'gone'")
    page.route(f"**/v1/tables/{TOKENS_TABLE}/map?*", lambda route: route.continue_(url=f"{server}/v1/tables/gone/map"))
    page.select_option("#table", TOKENS_TABLE)
    page.wait_for_selector("#table-map .tm-status.warning >> text=no table named 'gone'")
    assert [status for status, _ in watched.http_errors] == [404, 404]


@pytest.mark.parametrize(
    ("query", "matches"),
    [("/^[0-9]+$/", lambda t: re.search(r"^[0-9]+$", t)), ("HEART", lambda t: "heart" in t.lower())],
)
def test_search_highlights_the_matching_rows(
    server: str, api: httpx.Client, watched: Watched, data_dir: Path, query: str, matches: object
) -> None:
    open_table_map(watched, server)
    page = watched.page
    assert page.evaluate(PIXELS)["highlight"] == 0
    tokens = list(Table.load(data_dir / WORDS_TABLE, checksums=False).tokens[:])
    expected = [i for i, t in enumerate(tokens) if matches(t)]
    page.fill("#tm-search", query)
    page.wait_for_function("n => document.getElementById('table-map').dataset.matches === String(n)", arg=len(expected))
    assert page.evaluate("Array.from(explorer.tableMap.matches)") == expected
    page.wait_for_function(f"() => ({PIXELS})().highlight > 0")
    assert watched.state()["q"] == query  # kept in the URL: a reload highlights the same rows
    page.reload()
    if query.startswith("/"):  # a regular expression from a link waits for Enter
        page.wait_for_selector("#table-map .tm-matches >> text=press Enter to run it")
        assert page.evaluate("explorer.tableMap.matches") is None
    else:
        page.wait_for_function(
            "n => document.getElementById('table-map').dataset.matches === String(n)", arg=len(expected)
        )
    assert page.input_value("#tm-search") == query
    scale = page.evaluate("explorer.tableMap.view.s")
    page.press("#tm-search", "Enter")  # runs the search and zooms to the matches
    page.wait_for_function("s => explorer.tableMap.view.s > s", arg=scale)
    assert page.evaluate("Array.from(explorer.tableMap.matches)") == expected
    # An invalid expression typed over the matches is said, and highlights (and Enter zooms to) nothing.
    page.fill("#tm-search", "/[/")
    page.wait_for_selector("#tm-search[aria-invalid=true]")
    assert "not a regular expression" in page.inner_text("#table-map .tm-matches")
    page.wait_for_function(f"() => ({PIXELS})().highlight === 0")
    assert page.evaluate("explorer.tableMap.matches") is None and page.get_attribute("#table-map", "data-matches") == ""
    scale = page.evaluate("explorer.tableMap.view.s")
    page.press("#tm-search", "Enter")
    assert page.evaluate("explorer.tableMap.view.s") == scale
    page.fill("#tm-search", "")
    page.wait_for_selector("#tm-search:not([aria-invalid])")
    assert page.inner_text("#table-map .tm-matches") == ""
    watched.assert_clean()


def test_a_regular_expression_in_a_link_waits_for_enter(server: str, watched: Watched) -> None:
    """An expression that backtracks exponentially on every label (a shared link could freeze the tab) is not run
    when the page opens; a plain substring from a link is."""
    open_table_map(watched, server, f"?table={WORDS_TABLE}&q=%2F%5E(.%2B)%2B%23%24%2F")
    page = watched.page
    page.wait_for_selector("#table-map .tm-matches >> text=press Enter to run it")
    assert page.input_value("#tm-search") == "/^(.+)+#$/"
    assert page.evaluate("explorer.tableMap.matches") is None and watched.state()["q"] == "/^(.+)+#$/"
    page.fill("#tm-search", "/^[0-9]+$/")  # typed: runs as before
    page.wait_for_function("() => Number(document.getElementById('table-map').dataset.matches) > 0")
    open_table_map(watched, server, f"?table={WORDS_TABLE}&q=heart")
    page.wait_for_function("() => Number(document.getElementById('table-map').dataset.matches) > 0")
    watched.assert_clean()


def test_a_regular_expression_that_backtracks_for_minutes_leaves_the_tab_responsive(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """``/(a+)+$/`` typed over labels of 30 a's and a "!" (2^30 steps of backtracking each, on every label): the
    labels are tested off the page's thread, the page keeps drawing frames and answering meanwhile, the search is
    stopped after its time and says so, highlighting nothing, and the next expression runs."""
    labels = api.get(f"/v1/tables/{WORDS_TABLE}/map/labels")
    rows = len(json.loads(gzip.decompress(labels.content)))
    body = gzip.compress(json.dumps(["a" * 30 + "!"] * rows).encode())
    page = watched.page
    page.route("**/map/labels", lambda route: route.fulfill(body=body, content_type=labels.headers["content-type"]))
    open_table_map(watched, server)
    scale = page.evaluate("explorer.tableMap.view.s")
    page.evaluate(  # the frames drawn while the page says the expression runs
        "() => { window.framesSearching = 0; const tick = () => { const said = document.querySelector("
        "'#table-map .tm-matches').textContent; if (said === 'searching…') window.framesSearching++; "
        "requestAnimationFrame(tick); }; tick(); }"
    )
    page.fill("#tm-search", "/(a+)+$/")
    page.press("#tm-search", "Enter")
    # Frames go on being drawn while the expression runs (tested on the page's thread, none came: the tab froze),
    # however few a busy machine draws before the page stops it
    page.wait_for_function("() => window.framesSearching >= 3", timeout=120_000)
    page.wait_for_selector("#table-map .tm-matches >> text=stopped after 3 s", timeout=120_000)
    assert page.evaluate("explorer.tableMap.matches") is None and page.get_attribute("#table-map", "data-matches") == ""
    assert page.evaluate("explorer.tableMap.view.s") == scale  # Enter zoomed to nothing
    page.fill("#tm-search", "/^a{30}!$/")
    page.wait_for_function("n => document.getElementById('table-map').dataset.matches === String(n)", arg=rows)
    watched.assert_clean()


def zoom_to(page: Any, row: int) -> None:
    """The map zoomed in (60 times the whole table's scale) on ``row``, at the canvas's centre."""
    page.evaluate(
        "i => { const m = explorer.tableMap; m.view = { cx: m.x[i], cy: m.y[i], s: m.fitScale * 60 }; m.drawNow(); }",
        row,
    )


def test_a_click_on_a_point_shows_and_marks_its_neighbours(server: str, api: httpx.Client, watched: Watched) -> None:
    open_table_map(watched, server)
    page = watched.page
    heart = api.get(f"/v1/tables/{WORDS_TABLE}/tokens/heart").json()["id"]
    zoom_to(page, heart)
    page.locator("#tm-canvas").scroll_into_view_if_needed()
    box = page.locator("#tm-canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function("i => explorer.tableMap.hovered === i", arg=heart)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_selector(f"#table-map[data-selected='{heart}'] .tm-panel .scores")
    expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"id": heart, "k": 8}).json()["neighbors"]
    assert page.locator("#table-map .tm-panel button.token").all_inner_texts() == [n["token"] for n in expected]
    assert page.evaluate("explorer.tableMap.neighbours.map(n => n.id)") == [n["id"] for n in expected]
    page.wait_for_function(f"() => ({PIXELS})().selected > 0")
    # A neighbour in the list, by the keyboard: the map goes there and asks for its neighbours, and the focus stays
    # in the list's place.
    page.focus("#table-map .tm-panel button.token")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#table-map[data-selected='{expected[0]['id']}'] .tm-panel .scores")
    assert page.evaluate("document.activeElement.classList.contains('tm-panel')")
    # Back and Forward on the same table keep its map as it was: not laid out again, the row still selected.
    generation = page.evaluate("explorer.tableMap.generation")
    search(watched, "king")
    page.go_back()
    page.wait_for_function("() => !new URLSearchParams(location.search).get('word')")
    page.wait_for_selector("#neighbours-out:not([aria-busy])")
    assert page.evaluate("explorer.tableMap.generation") == generation
    assert page.get_attribute("#table-map", "data-selected") == str(expected[0]["id"])
    # Another table: the list of the other table's rows goes with its layout.
    page.select_option("#table", TOKENS_TABLE)
    page.wait_for_function(
        "() => explorer.tableMap.table === 'minilm' && explorer.tableMap.canvas.dataset.ready === 'true'"
    )
    assert page.locator("#table-map .tm-panel").inner_text() == ""
    assert page.get_attribute("#table-map", "data-selected") == ""
    watched.assert_clean()


def test_the_keyboard_picks_a_row_among_the_search_matches(server: str, api: httpx.Client, watched: Watched) -> None:
    """A search lists its first matches (the row it names in full first) as buttons after the map: Tab reaches
    them, and Enter on one takes the map there and lists its neighbours, as a click on its point does."""
    open_table_map(watched, server)
    page = watched.page
    page.focus("#tm-search")
    page.keyboard.type("art")
    picks = page.get_by_role("list", name="First matches: pick one to go to it and list its neighbours")
    # each key may run a search of its own when keys come slower than the page's debounce: wait for the whole word's
    page.wait_for_function("() => document.querySelector('#table-map .tm-picks button')?.textContent === 'art'")
    names = picks.get_by_role("button").all_inner_texts()
    assert names[0] == "art" and len(names) == 10 and all("art" in name for name in names[1:])
    ids = [api.get(f"/v1/tables/{WORDS_TABLE}/tokens/{name}").json()["id"] for name in names]
    assert ids[1:] == sorted(ids[1:]) and ids[0] > ids[1]  # the most frequent matches after it
    for _ in range(10):  # the layout and colour menus, the canvas and its buttons come first
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.closest('.tm-picks') !== null"):
            break
    assert page.evaluate("document.activeElement.textContent") == "art"
    page.keyboard.press("Enter")
    art = ids[0]
    page.wait_for_selector(f"#table-map[data-selected='{art}'] .tm-panel .scores")
    expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"id": art, "k": 8}).json()["neighbors"]
    assert page.locator("#table-map .tm-panel button.token").all_inner_texts() == [n["token"] for n in expected]
    assert page.evaluate("explorer.tableMap.view.cx") == page.evaluate(f"explorer.tableMap.x[{art}]")
    page.fill("#tm-search", "")
    picks.wait_for(state="hidden")
    watched.assert_clean()


def test_pan_and_zoom_redraw_every_frame(server: str, watched: Watched) -> None:
    open_table_map(watched, server)
    stats = watched.page.evaluate(FRAMES, 40)
    assert stats["frames"] == 40 and stats["draws"] >= 40 and stats["moved"]
    assert stats["draw_ms"]["median"] < 100  # 20,000 rows; the 400,000-row figures are in BENCHMARKS.md
    assert watched.page.evaluate(PIXELS)["white"] < watched.page.evaluate(PIXELS)["total"]
    watched.assert_clean()


# The map's labels as its canvas draws them: the texts and fonts of the last frame (each frame starts with
# putImageData, then writes its labels with fillText).
DRAWN_LABELS = """() => {
  window.drawnLabels = [];
  const proto = CanvasRenderingContext2D.prototype;
  const put = proto.putImageData;
  const fill = proto.fillText;
  proto.putImageData = function (...args) {
    if (this.canvas.id === "tm-canvas") window.drawnLabels = [];
    return put.apply(this, args);
  };
  proto.fillText = function (text, ...args) {
    if (this.canvas.id === "tm-canvas") window.drawnLabels.push([text, this.font]);
    return fill.call(this, text, ...args);
  };
}"""
# The table of labelled words, once it lists the words the last frame labelled (it follows the map once it stops).
LISTED_AS_DRAWN = """() => {
  const listed = [...document.querySelectorAll("#table-map .tm-words tbody th")].map((th) => th.textContent);
  const drawn = [...new Set(window.drawnLabels.map(([text]) => text))];
  return listed.length > 0 && listed.length === drawn.length && listed.every((word) => drawn.includes(word));
}"""


FOCUSED = "document.activeElement.getAttribute('aria-label') || document.activeElement.textContent"


def check_words_table(page: Any, ids: dict[str, int]) -> list[str]:
    """The table of labelled words against the map: the words its last frame labels, most frequent first, each at
    its place and with the labelled words nearest to it (a float64 brute force over the page's coordinates,
    equal distances by row). Returns the words."""
    page.wait_for_function(LISTED_AS_DRAWN)
    cells = page.eval_on_selector_all(
        "#table-map .tm-words tbody tr",
        "rows => rows.map((r) => [...r.children].map((c, k) => k < 3 ? c.textContent : "
        "[...c.querySelectorAll('li')].map((li) => li.textContent)))",
    )
    words = [word for word, *_ in cells]
    rows = [ids[word] for word in words]
    assert rows == sorted(rows)
    places = np.array(page.evaluate("ids => ids.map((i) => [explorer.tableMap.x[i], explorer.tableMap.y[i]])", rows))
    shown = [(float(x), float(y)) for _, x, y, _ in cells]
    np.testing.assert_allclose(shown, places, rtol=0, atol=0.0005 + 1e-9)  # three decimals
    distances = ((places[:, None, :] - places[None, :, :]) ** 2).sum(axis=2)
    for k, (word, _, _, near) in enumerate(cells):
        others = sorted((distances[k, j], rows[j]) for j in range(len(rows)) if j != k)[:3]
        assert near == [words[rows.index(row)] for _, row in others], word
    return words


def test_the_map_is_told_in_a_table_of_its_labelled_words(server: str, api: httpx.Client, watched: Watched) -> None:
    """A screen reader's way into the map: the canvas names the line that says what is in view, and a table after
    it (its summary one Tab after the zoom buttons) lists the words the map labels with their places and the
    labelled words nearest to each on the map. Both follow the map as the keyboard moves it, and a word in the
    table takes the map to it and lists its neighbours, the focus staying on it."""
    page = watched.page
    page.add_init_script(f"({DRAWN_LABELS})()")
    open_table_map(watched, server)
    labels = json.loads(gzip.decompress(api.get(f"/v1/tables/{WORDS_TABLE}/map/labels").content))
    ids = {label: i for i, label in enumerate(labels)}
    canvas = page.get_by_role("img", name=re.compile("labelled words are listed in a table after it"))
    described = canvas.get_attribute("aria-describedby")
    view = page.locator(f"#{described}")
    assert view.get_attribute("aria-live") == "polite"
    page.focus("#tm-canvas")
    for name in ("Zoom in", "Zoom out", "Fit the whole table", "The labelled words as a table"):
        page.keyboard.press("Tab")
        assert page.evaluate(FOCUSED) == name
    page.keyboard.press("Enter")
    table = page.get_by_role("table", name=re.compile("^The words labelled on the map"))
    table.wait_for()
    first = check_words_table(page, ids)
    assert 50 <= len(first) <= 140, len(first)
    assert view.inner_text() == f"20,000 of 20,000 rows in view; {len(first)} rows labelled, listed in the table below."

    # The keyboard zooms in and pans: the line and the table follow.
    page.focus("#tm-canvas")
    for key in ("+", "+", "+", "ArrowLeft", "ArrowUp"):
        page.keyboard.press(key)
    page.wait_for_function("n => !document.getElementById('tm-view').textContent.startsWith(n)", arg="20,000 of")
    zoomed = check_words_table(page, ids)
    assert zoomed != first
    shown = int(view.inner_text().split(" of ")[0].replace(",", ""))
    assert len(zoomed) <= shown < 20_000

    # A word of the table, by the keyboard: the map goes to it and lists the API's neighbours of its row; the table
    # follows, and the focus stays on the word.
    page.focus("#table-map .tm-words summary")
    page.keyboard.press("Tab")
    word = page.evaluate("document.activeElement.textContent")
    assert word == zoomed[0]
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#table-map[data-selected='{ids[word]}'] .tm-panel .scores")
    expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"id": ids[word], "k": 8}).json()["neighbors"]
    assert page.locator("#table-map .tm-panel button.token").all_inner_texts() == [n["token"] for n in expected]
    assert page.evaluate("explorer.tableMap.view.cx") == page.evaluate(f"explorer.tableMap.x[{ids[word]}]")
    after = check_words_table(page, ids)
    assert after != zoomed and word in after
    assert page.evaluate("document.activeElement.textContent") == word
    watched.assert_clean()


def test_a_layout_refused_lists_no_word_of_the_layout_before(server: str, api: httpx.Client, watched: Watched) -> None:
    """A layout the server refuses leaves the map and its table of labelled words empty: neither labels nor lists
    the words of the layout before (its selected row and that row's neighbours least of all)."""
    page = watched.page
    open_table_map(watched, server)
    heart = api.get(f"/v1/tables/{WORDS_TABLE}/tokens/heart").json()["id"]
    page.evaluate("i => explorer.tableMap.goTo(i)", heart)
    page.wait_for_selector(f"#table-map[data-selected='{heart}'] .tm-panel .scores")
    page.wait_for_function("() => document.querySelectorAll('#table-map .tm-words tbody tr').length > 0")
    refusal = json.dumps({"error": {"code": "not_found", "message": "no such layout"}})
    page.route(
        f"**/v1/tables/{WORDS_TABLE}/map?*",
        lambda route: route.fulfill(status=404, body=refusal, content_type="application/json"),
    )
    page.evaluate("t => explorer.tableMap.load(t, 'pca')", WORDS_TABLE)
    # The refusal said, then the view told once more (its line emptied with the table): till the refusal comes, the
    # map of the layout before is still drawn and its words still listed, as a redraw meanwhile tells again.
    page.wait_for_selector("#table-map .tm-status.warning:text('no such layout')")
    page.wait_for_function("() => document.getElementById('tm-view').textContent === ''")
    assert page.locator("#table-map .tm-words tbody tr").count() == 0
    assert page.evaluate("explorer.tableMap.labelled") == []
    watched.assert_clean(expected_404=("/map?",))


def test_the_focus_on_a_word_of_the_table_leaves_it_when_another_table_is_laid_out(
    server: str, watched: Watched
) -> None:
    """The focus on a word of the table of labelled words goes to the table's summary when another table's layout
    replaces it, never to the word of the same row number there (another word). Till that layout comes the table
    still lists the words of the map drawn: told again meanwhile (the map redrawn), it keeps the focus on the word."""
    page = watched.page
    open_table_map(watched, server)
    page.click("#table-map .tm-words summary")
    page.wait_for_function("() => document.querySelectorAll('#table-map .tm-words tbody button').length > 0")
    held: list[Any] = []
    page.route(f"**/v1/tables/{TOKENS_TABLE}/map?*", lambda route: held.append(route))
    page.select_option("#table", TOKENS_TABLE)
    page.wait_for_function("t => explorer.tableMap.asked?.table === t", arg=TOKENS_TABLE)
    page.focus("#table-map .tm-words tbody tr[data-row='0'] button")  # row 0: labelled on both maps
    page.evaluate("() => { explorer.tableMap.drawNow(); explorer.tableMap.describeView(); }")  # as a settle would
    assert page.evaluate("document.activeElement.closest('tr')?.dataset.row") == "0"
    routed(page, held, 1)[0].continue_()
    page.wait_for_function(
        "t => { const m = explorer.tableMap; return m.table === t && m.labels"
        " && m.words.querySelector(`tr[data-row='0'] button`)?.textContent === m.labels[0]; }",
        arg=TOKENS_TABLE,
    )
    assert page.evaluate("document.activeElement.tagName") == "SUMMARY"
    watched.assert_clean()


# The map's point under CSS pixel (x, y) of the screen.
UNDER = """([x, y]) => {
  const m = explorer.tableMap;
  const rect = m.canvas.getBoundingClientRect();
  const p = m.toData((x - rect.left) * m.dpr, (y - rect.top) * m.dpr);
  return [p.x, p.y];
}"""


# Every text the map's hint says, recorded as it comes: it goes after a while, which a busy machine can outlast.
RECORD_HINTS = """() => {
  const hint = document.querySelector("#table-map .tm-hint");
  window.hintsSaid = [];
  new MutationObserver(() => { if (hint.textContent) window.hintsSaid.push(hint.textContent); })
    .observe(hint, { childList: true, characterData: true, subtree: true });
}"""
MAP_STATE = "() => [scrollY, explorer.tableMap.view.cx, explorer.tableMap.view.cy, explorer.tableMap.view.s]"


def touch(cdp: Any, start: list[tuple[float, float]], end: list[tuple[float, float]], steps: int = 12) -> None:
    """Fingers put down at ``start``, moved in ``steps`` to ``end`` and lifted, as a touch screen sends them
    (CDP's Input.dispatchTouchEvent: the browser makes its own gestures of them, the page's scrolling too)."""

    def at(t: float) -> list[dict[str, float]]:
        return [
            {"x": a[0] + (b[0] - a[0]) * t, "y": a[1] + (b[1] - a[1]) * t, "id": k}
            for k, (a, b) in enumerate(zip(start, end, strict=True))
        ]

    cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": at(0)})
    for step in range(1, steps + 1):
        cdp.send("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": at(step / steps)})
    cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})


def test_a_phone_scrolls_the_page_with_one_finger_and_moves_the_map_with_two(
    server: str, api: httpx.Client, browser: object, tmp_path: Path
) -> None:
    """On a touch screen the map cooperates with the page, as map widgets in a page do: one finger drawn over it
    scrolls the page (the map stays, and says that two fingers move it), two fingers pan it and pinch-zoom it
    (the page stays), and a tap on a point lists its neighbours."""
    phone = Watched(browser, width=375, height=812, has_touch=True, is_mobile=True)
    try:
        phone.open(server, f"?table={WORDS_TABLE}")
        page = phone.page
        page.wait_for_selector("#tm-canvas[data-ready=true]")
        page.wait_for_selector("#tm-canvas[data-labels=true]")
        cdp = phone.context.new_cdp_session(page)

        def centre() -> tuple[int, int]:
            """The canvas scrolled to the middle of the screen; its centre there, in whole CSS pixels."""
            page.evaluate("document.getElementById('tm-canvas').scrollIntoView({ block: 'center' })")
            box = page.locator("#tm-canvas").bounding_box()
            return round(box["x"] + box["width"] / 2), round(box["y"] + box["height"] / 2)

        x, y = centre()
        scroll, cx, cy, s = page.evaluate(MAP_STATE)

        page.evaluate(RECORD_HINTS)
        touch(cdp, [(x, y + 100)], [(x, y - 100)])
        page.wait_for_function("y => scrollY > y + 100", arg=scroll)
        assert page.evaluate(MAP_STATE)[1:] == [cx, cy, s]
        said = page.evaluate("hintsSaid")
        assert said and set(said) == {"Use two fingers to move or zoom the map"}
        page.locator("#table-map .tm-hint").wait_for(state="hidden")

        x, y = centre()
        scroll = page.evaluate("scrollY")
        touch(cdp, [(x - 40, y), (x + 40, y)], [(x - 140, y + 50), (x - 60, y + 50)])  # two fingers: pan
        dpr = page.evaluate("explorer.tableMap.dpr")
        panned = page.evaluate(MAP_STATE)
        assert panned[0] == scroll
        np.testing.assert_allclose(panned[1:], [cx + 100 * dpr / s, cy + 50 * dpr / s, s], rtol=1e-9)
        point = page.evaluate(UNDER, [x, y])
        touch(cdp, [(x - 50, y), (x + 50, y)], [(x - 100, y), (x + 100, y)])  # spread apart: zoom in twice
        zoomed = page.evaluate(MAP_STATE)
        assert zoomed[0] == scroll and zoomed[3] == pytest.approx(2 * s, rel=1e-9)
        assert page.evaluate("visualViewport.scale") == 1  # the map zoomed, not the page
        np.testing.assert_allclose(page.evaluate(UNDER, [x, y]), point, rtol=0, atol=1e-9)  # the fingers' point stays

        # A tap on a point: its neighbours, as a click gives them.
        heart = api.get(f"/v1/tables/{WORDS_TABLE}/tokens/heart").json()["id"]
        zoom_to(page, heart)
        page.touchscreen.tap(x, y)
        page.wait_for_selector(f"#table-map[data-selected='{heart}'] .tm-panel .scores")
        expected = api.get(f"/v1/tables/{WORDS_TABLE}/neighbors", params={"id": heart, "k": 8}).json()["neighbors"]
        assert page.locator("#table-map .tm-panel button.token").all_inner_texts() == [n["token"] for n in expected]
        save_screenshot(page, "explorer-table-map-phone", tmp_path)
        phone.assert_clean()
    finally:
        phone.close()


def test_the_wheel_scrolls_the_page_over_the_map_and_zooms_it_with_ctrl(server: str, watched: Watched) -> None:
    """The mouse wheel over the map cooperates with the page, as map widgets in a page do: a plain wheel scrolls
    the page (the map stays, and a hint over it says politely how to zoom, the focus left where it was); Ctrl +
    wheel, ⌘ + wheel and a touchpad's pinch (which comes as wheels with Ctrl held) zoom the map about the pointer,
    the page neither scrolled nor zoomed. The buttons still zoom."""
    open_table_map(watched, server)
    page = watched.page
    hint = page.locator("#table-map .tm-hint")
    assert hint.get_attribute("aria-live") == "polite"
    assert "Ctrl + scroll or pinch to zoom" in page.locator("#table-map .tm-status").inner_text()
    page.evaluate(RECORD_HINTS)

    def over_map() -> tuple[int, int]:
        """The canvas scrolled to the middle of the screen and the pointer on it, off its centre (where a zoom about
        the canvas's centre would move the point under it)."""
        page.evaluate("document.getElementById('tm-canvas').scrollIntoView({ block: 'center' })")
        box = page.locator("#tm-canvas").bounding_box()
        x, y = round(box["x"] + box["width"] * 0.3), round(box["y"] + box["height"] * 0.7)
        page.mouse.move(x, y)
        return x, y

    page.focus("#tm-search")
    over_map()
    scroll, cx, cy, s = page.evaluate(MAP_STATE)
    page.evaluate("() => { window.scrollEnds = []; addEventListener('scrollend', () => scrollEnds.push(scrollY)) }")
    page.mouse.wheel(0, 300)
    page.wait_for_function("y => scrollEnds.some((end) => end > y)", arg=scroll)  # scrolled, and done scrolling
    assert page.evaluate(MAP_STATE)[1:] == [cx, cy, s]
    said = page.evaluate("hintsSaid")
    assert said and set(said) == {"Use Ctrl + scroll to zoom the map"}
    assert page.evaluate("document.activeElement.id") == "tm-search"
    hint.wait_for(state="hidden")
    assert hint.text_content() == ""

    def wheel_with(key: str, dy: int) -> Callable[[int, int], None]:
        def gesture(x: int, y: int) -> None:
            page.keyboard.down(key)
            page.mouse.wheel(0, dy)
            page.keyboard.up(key)

        return gesture

    cdp = watched.context.new_cdp_session(page)

    def pinch(x: int, y: int) -> None:
        """A touchpad's fingers spread twice as far apart: Chromium sends the page wheels with ctrlKey set."""
        cdp.send("Input.synthesizePinchGesture", {"x": x, "y": y, "scaleFactor": 2, "gestureSourceType": "mouse"})

    ratio = page.evaluate("devicePixelRatio")
    for gesture, grows in ((wheel_with("Control", -300), True), (wheel_with("Meta", 200), False), (pinch, True)):
        x, y = over_map()
        scroll, _, _, s = page.evaluate(MAP_STATE)
        point = page.evaluate(UNDER, [x, y])
        gesture(x, y)
        page.wait_for_function("([s, grows]) => (explorer.tableMap.view.s > s) === grows", arg=[s, grows])
        assert page.evaluate("scrollY") == scroll
        assert page.evaluate("[visualViewport.scale, devicePixelRatio]") == [1, ratio]  # the page is not zoomed
        np.testing.assert_allclose(page.evaluate(UNDER, [x, y]), point, rtol=0, atol=1e-9)  # the pointer's point stays
    assert set(page.evaluate("hintsSaid")) == {"Use Ctrl + scroll to zoom the map"}  # said of the plain wheel only

    s = page.evaluate("explorer.tableMap.view.s")
    page.click("#table-map .tm-zoom-in")
    page.wait_for_function("s => explorer.tableMap.view.s !== s", arg=s)
    assert page.evaluate("explorer.tableMap.view.s") == pytest.approx(1.5 * s, rel=1e-12)
    watched.assert_clean()


# The map's scale after a Ctrl + wheel of ``deltaY`` in ``deltaMode``'s units over the canvas's centre, from the
# whole table's view each time.
WHEEL_ZOOM = """([deltaY, deltaMode]) => {
  const m = explorer.tableMap;
  m.fit();
  const before = m.view.s;
  const rect = m.canvas.getBoundingClientRect();
  const at = { clientX: rect.left + rect.width / 2, clientY: rect.top + rect.height / 2 };
  m.canvas.dispatchEvent(new WheelEvent("wheel", { deltaY, deltaMode, ctrlKey: true, cancelable: true, ...at }));
  return m.view.s / before;
}"""


def test_a_wheel_counted_in_lines_or_pages_zooms_as_its_pixels_do(server: str, watched: Watched) -> None:
    """A wheel counted in lines (Firefox's mouse wheel: 3 a notch) or pages zooms the map as much as the pixels it
    scrolls would, not as that many pixels (3 lines zoomed by 0.5%, a notch of pixels by 16%)."""
    open_table_map(watched, server)
    page = watched.page
    for delta, mode, pixels in ((-3, 1, -120), (3, 1, 120), (-1, 2, -800)):
        assert page.evaluate(WHEEL_ZOOM, [delta, mode]) == pytest.approx(page.evaluate(WHEEL_ZOOM, [pixels, 0]))
    assert page.evaluate(WHEEL_ZOOM, [-120, 0]) == pytest.approx(math.exp(120 * 0.0015))
    watched.assert_clean()


def test_on_a_mac_the_map_says_to_zoom_with_the_command_key(server: str, browser: object) -> None:
    """On a Mac the hint and the status line name ⌘, the key held there with the wheel."""
    mac = Watched(browser)
    try:
        mac.context.add_init_script("Object.defineProperty(Navigator.prototype, 'platform', { get: () => 'MacIntel' })")
        open_table_map(mac, server)
        page = mac.page
        assert "⌘ + scroll or pinch to zoom" in page.locator("#table-map .tm-status").inner_text()
        page.evaluate(RECORD_HINTS)
        page.locator("#tm-canvas").hover()
        page.mouse.wheel(0, 100)
        page.wait_for_function("() => hintsSaid.length > 0")
        assert set(page.evaluate("hintsSaid")) == {"Use ⌘ + scroll to zoom the map"}
        mac.assert_clean()
    finally:
        mac.close()


def test_the_maps_labels_follow_the_browsers_text_size(server: str, watched: Watched, tmp_path: Path) -> None:
    """The canvas's labels are the page's small text: 12 px at the browser's default 16 px, 24 px when the reader
    sets 32 px, as the rest of the page's text follows it."""
    page = watched.page
    page.add_init_script(f"({DRAWN_LABELS})()")
    sizes = []
    for default in (16, 32):
        sizes_set = {"fontSizes": {"standard": default, "fixed": 13}}
        watched.context.new_cdp_session(page).send("Page.setFontSizes", sizes_set)
        open_table_map(watched, server)
        page.wait_for_function("() => window.drawnLabels.length > 0")
        fonts = {font for _, font in page.evaluate("window.drawnLabels")}
        assert fonts == {f"{default * 0.75:g}px system-ui, sans-serif"}, fonts
        sizes.append(len(page.evaluate("window.drawnLabels")))
    save_screenshot(page, "explorer-table-map-large-text", tmp_path)
    assert sizes[1] < sizes[0]  # labels twice the size: fewer fit without overlapping
    watched.assert_clean()


def test_axes_move_the_points(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    words = map_words(page.input_value("#map-words"))

    def positions() -> dict[str, float]:
        circles = page.locator("#map-out svg .point")
        names = circles.locator("text").all_text_contents()
        xs = [float(c) for c in circles.locator("circle").evaluate_all("cs => cs.map(c => c.getAttribute('cx'))")]
        return dict(zip(names, xs, strict=True))

    before = positions()
    page.check("#axes-pairs")
    page.fill("#ax-a", "man")
    page.fill("#ax-b", "woman")
    page.press("#ax-b", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('axes') === 'man,woman,,'")
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=x: man − woman")
    after = positions()
    body = {"tokens": words, "method": "axes", "x_axis": ["man", "woman"], "skip_unknown": True}
    answer = {p["token"]: p["x"] for p in api.post(f"/v1/tables/{WORDS_TABLE}/project", json=body).json()["points"]}
    shared = sorted(answer)
    assert np.corrcoef([after[w] for w in shared], [answer[w] for w in shared])[0, 1] > 0.9999  # x drawn as asked
    assert after["man"] > after["woman"] and after != before
    assert "PC1 of the rest" in page.locator("#map-out svg").text_content()
    assert round(answer["man"], 6) == 0.5 and round(answer["woman"], 6) == -0.5  # unit rows, 1 apart
    assert "length along man − woman (man at 0.5, woman at −0.5)" in page.inner_text("#map-out p.muted")

    page.fill("#ax-c", "red")
    page.fill("#ax-d", "blue")
    page.press("#ax-d", "Enter")
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=/y: red − blue/")

    page.fill("#ax-a", "1,000")  # a word with a comma: escaped in the URL's comma-separated pairs
    page.fill("#ax-b", "%")
    page.press("#ax-b", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('axes') === '1%2C000,%25,red,blue'")
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=/x: 1,000 − %/")
    page.reload()  # the link draws the same pairs
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=/x: 1,000 − %/")
    assert [page.input_value(f"#ax-{i}") for i in "abcd"] == ["1,000", "%", "red", "blue"]
    watched.assert_clean()


def test_plate_pairs_are_one_click_away(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    for a, b in [("red", "blue"), ("three", "four"), ("he", "she"), ("red", "heart")]:
        page.click(f"[data-pair='{a} {b}']")
        page.wait_for_function("p => new URLSearchParams(location.search).get('y') === p", arg=b)
        page.wait_for_selector(f"#similarity-out:not([aria-busy]) >> text=cos({a}, {b})")
        value = api.get(f"/v1/tables/{WORDS_TABLE}/similarity", params={"a": a, "b": b}).json()["similarity"]
        assert page.inner_text("#similarity-out strong") == f"{value:.3f}"
    watched.assert_clean()


def test_diagnostics_odd_one_out_and_rank(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    words = ["breakfast", "cereal", "dinner", "lunch"]
    page.fill("#odd-words", " ".join(words))
    page.press("#odd-words", "Enter")
    page.wait_for_selector("#odd-out:not([aria-busy]) strong")
    expected = api.post(f"/v1/tables/{WORDS_TABLE}/doesnt-match", json={"words": words}).json()
    assert page.inner_text("#odd-out strong") == expected["doesnt_match"]["token"]
    assert page.locator("#odd-out .scores button.token").all_inner_texts() == [r["token"] for r in expected["ranking"]]
    shown = page.locator("#odd-out .scores .score").all_inner_texts()
    assert shown == [f"{r['score']:.3f}" for r in expected["ranking"]]

    page.fill("#rank-b", "queen")
    page.fill("#rank-a", "king")
    page.press("#rank-a", "Enter")
    page.wait_for_selector("#rank-out:not([aria-busy]) strong")
    rank = api.get(f"/v1/tables/{WORDS_TABLE}/rank", params={"a": "king", "b": "queen"}).json()
    assert page.inner_text("#rank-out strong") == f"no. {rank['rank']}"
    assert f"cosine {rank['similarity']:.3f}" in page.inner_text("#rank-out")

    page.fill("#rank-a", "kingg")  # an unknown word: the error envelope's message, its suggestions one click away
    page.press("#rank-a", "Enter")
    page.wait_for_selector("#rank-out:not([aria-busy]) [role=alert]")
    error = api.get(f"/v1/tables/{WORDS_TABLE}/rank", params={"a": "kingg", "b": "queen"}).json()["error"]
    assert error["message"] in page.inner_text("#rank-out [role=alert]")
    page.locator("#rank-out button.chip").first.click()
    page.wait_for_selector("#rank-out:not([aria-busy]) strong")
    assert page.input_value("#rank-a") == error["suggestions"][0]
    rank = api.get(f"/v1/tables/{WORDS_TABLE}/rank", params={"a": error["suggestions"][0], "b": "queen"}).json()
    assert page.inner_text("#rank-out strong") == f"no. {rank['rank']}"

    page.fill("#odd-words", "breakfast cereal dinner lunchh")  # the same in the odd one out's list
    page.press("#odd-words", "Enter")
    page.wait_for_selector("#odd-out:not([aria-busy]) [role=alert]")
    refused = api.post(
        f"/v1/tables/{WORDS_TABLE}/doesnt-match", json={"words": ["breakfast", "cereal", "dinner", "lunchh"]}
    )
    error = refused.json()["error"]
    assert refused.status_code == 404 and error["message"] in page.inner_text("#odd-out [role=alert]")
    page.locator("#odd-out button.chip").first.click()
    page.wait_for_selector("#odd-out:not([aria-busy]) strong")
    fixed = ["breakfast", "cereal", "dinner", error["suggestions"][0]]
    assert page.input_value("#odd-words") == " ".join(fixed)
    odd = api.post(f"/v1/tables/{WORDS_TABLE}/doesnt-match", json={"words": fixed}).json()
    assert page.locator("#odd-out .scores button.token").all_inner_texts() == [r["token"] for r in odd["ranking"]]

    numbers = ["1,000", "10,000", "100,000", "banana"]  # GloVe's numbers hold commas: one word each
    odd = api.post(f"/v1/tables/{WORDS_TABLE}/doesnt-match", json={"words": numbers}).json()
    page.fill("#odd-words", "1,000 10,000 100,000,banana")  # a comma outside a number parts words, as a space
    page.press("#odd-words", "Enter")
    shown = "t => document.querySelector('#odd-out:not([aria-busy]) strong')?.innerText === t"
    page.wait_for_function(shown, arg=odd["doesnt_match"]["token"])
    assert page.locator("#odd-out .scores button.token").all_inner_texts() == [r["token"] for r in odd["ranking"]]
    watched.assert_clean(expected_404=("kingg", "doesnt-match"))


def test_an_answer_overtaken_by_a_shorter_input_is_dropped(server: str, watched: Watched) -> None:
    """Too few words are answered at once, without asking; an answer still on its way for the words before is
    dropped, not shown in place of that answer (each held here until the newer input is shown)."""
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    held: list = []
    for path in ("doesnt-match", "project"):
        page.route(f"**/v1/tables/{WORDS_TABLE}/{path}", lambda route: held.append(route))
    page.fill("#odd-words", "breakfast cereal dinner lunch")
    page.press("#odd-words", "Enter")
    page.fill("#map-words", "colours: red blue green")
    page.click("#map-form button[type=submit]")
    page.wait_for_function("() => document.querySelectorAll('#odd-out[aria-busy], #map-out[aria-busy]').length === 2")
    page.fill("#odd-words", "breakfast")
    page.press("#odd-words", "Enter")
    page.fill("#map-words", "colours: red")
    page.click("#map-form button[type=submit]")
    for route in held:
        route.continue_()
    page.wait_for_selector("#odd-out:not([aria-busy])")
    page.wait_for_selector("#map-out:not([aria-busy])")
    assert page.inner_text("#odd-out") == "Give two words or more."
    assert page.inner_text("#map-out") == "Give two words or more to map."
    assert page.locator("#map-out svg").count() == 0
    watched.assert_clean()


def test_export_downloads_files_that_reimport(
    server: str, api: httpx.Client, browser: object, data_dir: Path, tmp_path: Path
) -> None:
    watched = Watched(browser)
    try:
        watched.open(server, f"?table={WORDS_TABLE}")
        page = watched.page
        out = tmp_path / "export"
        out.mkdir()
        for kind, name in [("vectors", "vectors.tsv"), ("metadata", "metadata.tsv"), ("csv", "coordinates.csv")]:
            with page.expect_download() as download:
                page.click(f"#map-export [data-export={kind}]")
            assert download.value.suggested_filename == name
            download.value.save_as(out / name)
        words = map_words(page.input_value("#map-words"))
        with (out / "coordinates.csv").open() as handle:
            coordinates = list(csv.DictReader(handle))
        projected = api.post(f"/v1/tables/{WORDS_TABLE}/project", json={"tokens": words}).json()["points"]
        assert [c["token"] for c in coordinates] == [p["token"] for p in projected]
        np.testing.assert_allclose([float(c["x"]) for c in coordinates], [p["x"] for p in projected], rtol=1e-12)
        assert coordinates[0]["group"] == "colours"

        command = [str(Path(sys.executable).with_name("embedding-index")), "--quiet", "import", str(out)]
        command += ["--format", "projector", "--name", "exported", "--data-dir", str(tmp_path / "data")]
        # The import runs while the page exports the whole table.
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as importing:
            # The whole-table map exports its highlighted rows.
            open_table_map(watched, server)
            page.fill("#tm-search", "/^[0-9]+$/")
            page.wait_for_function("() => Number(document.getElementById('table-map').dataset.matches) > 0")
            with page.expect_download() as download:
                page.click("#tm-export [data-export=metadata]")
            lines = Path(download.value.path()).read_text().splitlines()
            assert lines and all(re.fullmatch(r"[0-9]+", line) for line in lines)
            assert len(lines) == int(page.evaluate("document.getElementById('table-map').dataset.matches"))

            _, errors = importing.communicate(timeout=120)
        assert importing.returncode == 0, errors
        exported = Table.load(tmp_path / "data" / "exported")
        source = Table.load(data_dir / WORDS_TABLE, checksums=False)
        assert list(exported.tokens[:]) == [p["token"] for p in projected]
        assert exported.metadata["group"][:6] == ["colours"] * 6
        ids = [p["id"] for p in projected]
        np.testing.assert_allclose(np.asarray(exported.vectors), np.asarray(source.vectors[ids]), atol=1e-6)
        watched.assert_clean()
    finally:
        watched.close()


# ------------------------------------------------------------------- diagnostics, compare, t-SNE and UMAP
@pytest.fixture(scope="module")
def umap_warm(server: str) -> threading.Thread:
    """The background UMAP started with the server (``warm_umap``)."""
    return UMAP_WARMUP[0] if UMAP_WARMUP else warm_umap(server)


def test_a_failed_export_is_reported_under_its_buttons_and_the_maps_stay(server: str, watched: Watched) -> None:
    """An export the server refuses (its error envelope: a row id outside the table, sent in place of the map's)
    or the network loses is said under the export buttons; the word map and the whole table's list of neighbours
    stay as they were."""
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    circles = page.locator("#map-out svg circle").count()
    outside = json.dumps({"rows": [{"id": 10**8}], "file": "vectors"})
    page.route("**/export", lambda route: route.continue_(post_data=outside))
    page.click("#map-export [data-export=vectors]")
    page.wait_for_selector("#map-export-out [role=alert] >> text=is outside table")
    assert page.locator("#map-out svg circle").count() == circles and page.inner_text("#map-out .legend")

    page.unroute("**/export")
    page.route("**/export", lambda route: route.abort())
    page.wait_for_selector("#tm-canvas[data-ready=true]")
    page.evaluate("explorer.tableMap.select(0)")
    page.click("#tm-export [data-export=metadata]")
    page.wait_for_selector("#tm-export-out [role=alert] >> text=could not be reached")
    # A lost connection says what happened and what to do, as every card says it (here the server gone mid-use).
    assert page.inner_text("#tm-export-out").endswith("check that it is running, then try again")
    assert page.locator("#table-map[data-selected='0'] .tm-panel .scores li").count() == 8
    page.click("#map-form button[type=submit]")  # the word map drawn again: the error about the one before goes
    page.wait_for_function("() => document.getElementById('map-export-out').innerText === ''")
    page.wait_for_selector("#tm-canvas[data-labels=true]")
    page.fill("#tm-search", "qzxqzxq")  # nothing highlighted: nothing to export, and the page says so
    page.wait_for_selector("#table-map[data-matches='0']")
    page.click("#tm-export [data-export=csv]")
    page.wait_for_selector("#tm-export-out >> text=No rows to export.")
    assert [m for m in watched.console if "net::ERR_FAILED" not in m and "404" not in m] == []
    assert len(watched.failed) == 1 and [status for status, _ in watched.http_errors] == [404]


def test_an_export_while_another_table_loads_is_of_the_maps_shown(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """Exported while the next table's maps are on their way (held here), the files are of the maps still shown,
    not their row ids read from the next table."""
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    page.wait_for_selector("#tm-canvas[data-ready=true]")
    held: list = []
    for path in ("project", "map?*"):
        page.route(f"**/v1/tables/{TOKENS_TABLE}/{path}", lambda route: held.append(route))
    page.select_option("#table", TOKENS_TABLE)
    page.wait_for_selector("#map-out[aria-busy=true]")
    files = []
    for button in ("#map-export [data-export=metadata]", "#tm-export [data-export=metadata]"):
        with page.expect_download() as download:
            page.click(button)
        files.append(Path(download.value.path()).read_text().splitlines())
    assert [line.split("\t")[0] for line in files[0][1:]] == map_words(page.input_value("#map-words"))
    first = api.get(f"/v1/tables/{WORDS_TABLE}/ids/0").json()["token"]
    assert files[1][0] == first
    for route in held:
        route.continue_()
    page.wait_for_function("t => explorer.lastMap?.table === t", arg=TOKENS_TABLE)
    watched.assert_clean()


def test_analogy_shows_where_the_expected_word_ranks(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    page.fill("#an-expect", "princess")
    page.press("#an-expect", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('expect') === 'princess'")
    page.wait_for_selector("#analogy-out:not([aria-busy]) .expect")
    body = {"a": "man", "b": "king", "c": "woman", "k": 5, "method": "3cosadd", "expect": "princess"}
    expect = api.post(f"/v1/tables/{WORDS_TABLE}/analogy", json=body).json()["expect"]
    assert expect["rank"] > 1
    shown = page.inner_text("#analogy-out .expect")
    assert page.inner_text("#analogy-out .expect-rank") == f"no. {expect['rank']}"
    assert f"score {expect['score']:.3f}, margin {expect['margin']:.3f}" in shown and "“princess”" in shown

    page.fill("#an-expect", "queen")  # the answer itself: rank 1, margin 0
    page.press("#an-expect", "Enter")
    page.wait_for_selector("#analogy-out:not([aria-busy]) .expect >> text=is the answer")
    assert "margin 0.000" in page.inner_text("#analogy-out .expect")

    page.fill("#an-expect", "king")  # one of a, b, c: the API refuses it, and the page says why
    page.press("#an-expect", "Enter")
    page.wait_for_selector("#analogy-out:not([aria-busy]) [role=alert]")
    refused = api.post(f"/v1/tables/{WORDS_TABLE}/analogy", json={**body, "expect": "king"})
    assert refused.status_code == 422
    assert refused.json()["error"]["message"] in page.inner_text("#analogy-out [role=alert]")
    watched.assert_clean(expected_422=("analogy",))


def test_diagnostics_closer_than_and_set_similarity(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    for a, b in [("paris", "london"), ("heart", "chest")]:
        page.fill("#closer-a", a)
        page.fill("#closer-b", b)
        page.press("#closer-b", "Enter")
        page.wait_for_selector(f"#closer-out:not([aria-busy]) >> text=than “{b}” is")
        params = {"a": a, "b": b, "order": "score", "limit": 10}
        expected = api.get(f"/v1/tables/{WORDS_TABLE}/closer-than", params=params).json()
        assert page.inner_text("#closer-out .closer-count") == f"{expected['count']:,}"
        assert page.locator("#closer-out .scores button.token").all_inner_texts() == [
            w["token"] for w in expected["words"]
        ]
        scores = page.locator("#closer-out .scores .score").all_inner_texts()
        assert scores == [f"{w['score']:.3f}" for w in expected["words"]]
        assert f"cosine {expected['similarity']:.3f}" in page.inner_text("#closer-out")
    assert expected["count"] > 10 and "the 10 nearest" in page.inner_text("#closer-out")

    page.fill("#nsim-a", "breakfast lunchh")  # an unknown word: the API's suggestions, one click from a fix
    page.fill("#nsim-b", "dinner meal")
    page.press("#nsim-b", "Enter")
    page.wait_for_selector("#nsim-out:not([aria-busy]) [role=alert]")
    error = api.post(
        f"/v1/tables/{WORDS_TABLE}/n-similarity", json={"a": ["breakfast", "lunchh"], "b": ["dinner", "meal"]}
    )
    assert error.status_code == 404 and error.json()["error"]["message"] in page.inner_text("#nsim-out")
    suggestion = error.json()["error"]["suggestions"][0]
    page.locator("#nsim-out button.chip").first.click()
    page.wait_for_selector("#nsim-out:not([aria-busy]) strong")
    assert page.input_value("#nsim-a") == f"breakfast {suggestion}"
    body = {"a": ["breakfast", suggestion], "b": ["dinner", "meal"]}
    value = api.post(f"/v1/tables/{WORDS_TABLE}/n-similarity", json=body).json()["similarity"]
    assert page.inner_text("#nsim-out strong") == f"{value:.3f}"
    watched.assert_clean(expected_404=("n-similarity",))


def test_compare_tables_side_by_side_with_the_overlap_marked(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    options = page.locator("#cmp-second option").evaluate_all("os => os.map(o => o.value)")
    assert options == page.locator("#table option").evaluate_all("os => os.map(o => o.value)")
    assert page.input_value("#cmp-first") == WORDS_TABLE and page.input_value("#cmp-second") == TOKENS_TABLE
    for word in ["heart", "king"]:
        page.fill("#cmp-word", word)
        page.press("#cmp-word", "Enter")
        page.wait_for_selector(f"#compare-out:not([aria-busy]) .compare-side >> text=“{word}”")
        params = {"first": WORDS_TABLE, "second": TOKENS_TABLE, "token": word, "k": 10}
        expected = api.get("/v1/compare", params=params).json()
        sides = page.locator("#compare-out .compare-side")
        for i, side in enumerate((expected["first"], expected["second"])):
            column = sides.nth(i)
            assert column.locator("h3").inner_text().startswith(side["table"])
            assert column.locator("button.token").all_inner_texts() == [n["token"] for n in side["neighbors"]]
            assert column.locator(".score").all_inner_texts() == [f"{n['score']:.3f}" for n in side["neighbors"]]
            marked = column.locator("li.shared button.token").all_inner_texts()
            assert marked == [n["token"] for n in side["neighbors"] if n["token"] in expected["shared"]]
        assert sorted(sides.nth(0).locator("li.shared button.token").all_inner_texts()) == sorted(expected["shared"])
        assert page.inner_text("#compare-out .overlap") == f"{expected['overlap']:.2f}"
    assert 0 < len(expected["shared"]) < 10  # two different tables: some neighbours in common, not all

    page.locator("#compare-out .compare-side").nth(1).locator("button.token").first.click()  # compare that word
    clicked = expected["second"]["neighbors"][0]["token"]
    page.wait_for_selector(f"#compare-out:not([aria-busy]) .compare-side >> text=“{clicked}”")
    assert page.input_value("#cmp-word") == clicked

    page.select_option("#cmp-second", WORDS_TABLE)  # a table against itself, compared once picked: all shared
    page.wait_for_selector("#compare-out:not([aria-busy]) .overlap >> text=1.00")
    assert page.locator("#compare-out li.shared").count() == 20

    page.fill("#cmp-word", "hearrtt")  # a word the tables lack: the API's error
    page.press("#cmp-word", "Enter")
    page.wait_for_selector("#compare-out:not([aria-busy]) [role=alert]")
    assert "hearrtt" in page.inner_text("#compare-out [role=alert]")
    watched.assert_clean(expected_404=("hearrtt",))


def check_drawn(page, api: httpx.Client, words: list[str], body: dict) -> dict:
    """The page's map holds the API's answer to ``body`` for ``words`` and draws each point where it says."""
    answer = api.post(f"/v1/tables/{WORDS_TABLE}/project", json={"tokens": words, "skip_unknown": True, **body}).json()
    points = page.evaluate("explorer.lastMap.points.map(p => ({token: p.token, x: p.x, y: p.y}))")
    assert points == [{"token": p["token"], "x": p["x"], "y": p["y"]} for p in answer["points"]]
    circles = page.locator("#map-out svg circle").evaluate_all(
        "cs => cs.map(c => [Number(c.getAttribute('cx')), Number(c.getAttribute('cy'))])"
    )
    for axis, sign in ((0, 1), (1, -1)):  # y grows downwards on screen
        values = [p["xy"[axis]] for p in answer["points"]]
        assert sign * np.corrcoef(values, [c[axis] for c in circles])[0, 1] > 0.9999
    return answer


def test_tsne_draws_the_api_layout_with_its_seed_and_perplexity(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    watched.open(server, f"?table={WORDS_TABLE}")
    page = watched.page
    words = map_words(page.input_value("#map-words"))
    page.check("#method-tsne")  # draws at once, with the default seed and perplexity
    page.wait_for_function("() => new URLSearchParams(location.search).get('proj') === 'tsne'")
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=t-SNE 1", timeout=120_000)  # t-SNE on busy cores
    answer = check_drawn(page, api, words, {"method": "tsne"})
    caption = page.inner_text("#map-out .muted")
    assert f"perplexity {answer['params']['perplexity']:.2f} (30 asked for" in caption and "seed 42" in caption
    page.fill("#map-seed", "7")
    page.fill("#map-perplexity", "4")
    page.press("#map-perplexity", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('proj') === 'tsne,7,4'")
    page.wait_for_selector("#map-out:not([aria-busy]) >> text=seed 7")
    check_drawn(page, api, words, {"method": "tsne", "seed": 7, "perplexity": 4})

    page.fill("#map-words", "colours: red blue green")  # three words: too few, and the page says so
    page.press("#map-perplexity", "Enter")
    page.wait_for_selector("#map-out:not([aria-busy]) [role=alert]")
    assert "t-SNE needs at least 4 distinct tokens, got 3" in page.inner_text("#map-out [role=alert]")

    # A perplexity the browser refuses (below the input's min) and then another method: the hidden input does not
    # keep the form from being sent.
    page.fill("#map-perplexity", "0")
    page.press("#map-perplexity", "Enter")
    page.check("#axes-pca")
    page.wait_for_function("() => !new URLSearchParams(location.search).get('proj')")
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=PC1")
    assert page.locator("#map-out svg circle").count() == 3
    watched.assert_clean(expected_422=("project",))


def test_umap_draws_the_api_layout_and_a_missing_package_disables_it(
    server: str, api: httpx.Client, watched: Watched, umap_warm: threading.Thread
) -> None:
    umap_warm.join()  # the server's UMAP is compiled by now (or the wait is here, once)
    watched.open(server, f"?table={WORDS_TABLE}&proj=umap,3,5")  # a link with UMAP, its seed and n_neighbors
    page = watched.page
    words = map_words(page.input_value("#map-words"))
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=UMAP 1")
    assert page.is_checked("#method-umap") and not page.is_visible("#map-perplexity")
    assert (page.input_value("#map-seed"), page.input_value("#map-neighbors")) == ("3", "5")
    answer = check_drawn(page, api, words, {"method": "umap", "seed": 3, "n_neighbors": 5})
    assert "5 neighbours, min_dist 0.1" in page.inner_text("#map-out .muted") and answer["params"]["seed"] == 3
    page.fill("#map-seed", "")
    page.fill("#map-neighbors", "")
    page.press("#map-neighbors", "Enter")  # the server's defaults: seed 42, n_neighbors 15
    page.wait_for_function("() => new URLSearchParams(location.search).get('proj') === 'umap'")
    page.wait_for_selector("#map-out:not([aria-busy]) >> text=seed 42")
    check_drawn(page, api, words, {"method": "umap"})

    # A server without umap-learn answers 422 naming the package (tests/service/test_projection_methods.py): the
    # page shows the message and disables UMAP.
    message = f"UMAP needs the umap-learn package, which this server does not have ({MAP_INSTALL})"
    envelope = {"error": {"code": "invalid_request", "message": message, "package": "umap-learn", "extra": "map"}}
    page.route("**/project", lambda route: route.fulfill(status=422, json=envelope))
    page.click("#map-form button[type=submit]")
    page.wait_for_selector("#method-umap:disabled")
    assert message in page.inner_text("#map-out [role=alert]")
    page.unroute("**/project")
    page.check("#axes-pca")
    page.wait_for_selector("#map-out:not([aria-busy]) svg >> text=/PC1/")
    # The message is gone with the map; the radio button still says why it is off, in its name, not in a tooltip.
    assert page.get_by_role("radio", name="UMAP (not on this server)", exact=True).is_disabled()

    # A server without openTSNE says so in GET /v1/explorer: the page disables t-SNE at once, and its reason names
    # the install the server gives there (the project's own checkout or image, never PyPI's namesake).
    def without_tsne(route: Any) -> None:
        answer = route.fetch()
        route.fulfill(response=answer, json={**answer.json(), "tsne_available": False})

    page.route("**/v1/explorer", without_tsne)
    page.reload()
    page.wait_for_selector("#method-tsne:disabled")
    label = page.locator("label", has=page.locator("#method-tsne"))
    assert label.get_attribute("title") == f"t-SNE needs the openTSNE package on the server ({MAP_INSTALL})"
    assert page.get_by_role("radio", name="t-SNE (not on this server)", exact=True).is_disabled()
    assert api.get("/v1/explorer").json()["map_install"] == MAP_INSTALL
    page.unroute("**/v1/explorer")
    watched.assert_clean(expected_422=("project",))


def measure(base: str, table: str, frames: int = 120) -> dict[str, object]:
    """First view and pan/zoom frame times of ``table`` in headless Chromium against a running server."""
    with launched() as chromium:
        page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
        started = time.perf_counter()
        page.goto(f"{base}/?table={table}")
        page.wait_for_selector("#tm-canvas[data-ready=true]", timeout=60_000)
        first_view = time.perf_counter() - started
        page.wait_for_selector("#tm-canvas[data-labels=true]", timeout=60_000)
        labels = time.perf_counter() - started
        stats = page.evaluate(FRAMES, frames)
    return {"first_view_s": round(first_view, 3), "labels_s": round(labels, 3), **stats}


if __name__ == "__main__":  # python -m tests.service.test_explorer http://127.0.0.1:8000 glove-6b-50d
    print(json.dumps(measure(sys.argv[1], sys.argv[2]), indent=1))
