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

    def __init__(self, browser: object, width: int = 1280, height: int = 900, **options: Any) -> None:
        """``options``: the context's others (``has_touch``, ``is_mobile``: a phone)."""
        self.context = browser.new_context(viewport={"width": width, "height": height}, **options)
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


# WCAG's contrast ratio of a text's colour (dimmed by its own and its ancestors' opacity) with the first opaque
# background behind it, and of the focused element's outline with the background around it (the ring is drawn
# outside the element).
CONTRAST = """(mode, elements) => {
  const rgba = (text) => { const v = text.match(/[\\d.]+/g).map(Number); return [v[0], v[1], v[2], v[3] ?? 1]; };
  const linear = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
  const lum = (c) => 0.2126 * linear(c[0]) + 0.7152 * linear(c[1]) + 0.0722 * linear(c[2]);
  const ratio = (a, b) => {
    const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const behind = (node) => { // the first opaque background, and the opacity of the elements above it
    let alpha = 1;
    for (; node; node = node.parentElement) {
      const style = getComputedStyle(node);
      if (rgba(style.backgroundColor)[3] === 1) return [rgba(style.backgroundColor), alpha];
      alpha *= Number(style.opacity);
    }
    return [[255, 255, 255, 1], alpha];
  };
  return elements.map((e) => {
    if (mode === "ring") return ratio(rgba(getComputedStyle(e).outlineColor), behind(e.parentElement)[0]);
    const [back, alpha] = behind(e);
    const fore = rgba(getComputedStyle(e).color);
    const a = fore[3] * alpha;
    return ratio(fore.map((v, i) => v * a + back[i] * (1 - a)), back);
  });
}"""


def text_contrasts(page: Any, selector: str) -> list[float]:
    """The contrast ratio of each text ``selector`` matches with its background (WCAG AA: 4.5 for small text)."""
    ratios: list[float] = page.eval_on_selector_all(selector, f"es => ({CONTRAST})('text', es)")
    return ratios


def ring_contrast(page: Any) -> float:
    """The contrast ratio of the focused element's outline with the background around it (WCAG AA: 3)."""
    ratio: float = page.evaluate(f"() => ({CONTRAST})('ring', [document.activeElement])[0]")
    return ratio


def save_screenshot(page, name: str, tmp_path: Path) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    shutil.copyfile(path, SCREENSHOTS / path.name)
    assert path.stat().st_size > 10_000
    return path
