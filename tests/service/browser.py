"""The explorer's tests' browser: Debian's Chromium driven by Playwright, and a page that records every error.

The ``browser`` (one per module) and ``watched`` (a fresh page) fixtures are in ``tests/service/conftest.py``."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests import REPO

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("Chromium is not installed (make system-deps installs it)", allow_module_level=True)

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
TIMEOUT_MS = 20_000


@contextmanager
def launched() -> Iterator[Any]:
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

    def assert_clean(self, expected_404: tuple[str, ...] = (), expected_422: tuple[str, ...] = ()) -> None:
        """No failure except 404s (422s) from URLs containing an ``expected_404`` (``expected_422``) part, and
        Chromium's log line for them."""

        def expected(status: int, text: str) -> bool:
            parts = {404: expected_404, 422: expected_422}.get(status, ())
            return any(word in text for word in parts)

        assert self.failed == [], self.failed
        unexpected = [e for e in self.http_errors if not expected(e[0], e[1])]
        assert unexpected == [], unexpected
        logged = [m for m in self.console if not any(str(c) in m and expected(c, m) for c in (404, 422))]
        assert logged == [], logged

    def state(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlparse(self.page.url).query).items()}

    def close(self) -> None:
        self.context.close()


def save_screenshot(page, name: str, tmp_path: Path) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    shutil.copyfile(path, SCREENSHOTS / path.name)
    assert path.stat().st_size > 10_000
    return path
