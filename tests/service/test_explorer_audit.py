"""An automatic accessibility audit of the explorer: axe-core (the ``axe.min.js`` that axe-playwright-python bundles)
run in headless Chromium against the page in its main states, on the shared real server over ``small`` (the 20,000
most frequent GloVe words), ``lee`` (gensim's Lee corpus with its fields) and ``lee-text`` (the same stories embedded
by ``small``: searchable by text). Every state must hold no violation of a WCAG 2.0 or 2.1 rule of level A or AA.
"""

from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe

from tests.service import real_server
from tests.service.browser import Watched

WORDS, DOCS, EMBEDDED = "small", "lee", "lee-text"
WCAG_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
OPTIONS = {"runOnly": {"type": "tag", "values": WCAG_A_AA}, "resultTypes": ["violations"]}
AXE = Axe()


def violations(page: Any) -> list[str]:
    """axe-core's violations of the page as it is now, one line a rule: its id, its help and the elements."""
    found = AXE.run(page, options=OPTIONS).response["violations"]
    return [
        f"{rule['id']} ({rule['impact']}): {rule['help']}: "
        + "; ".join(f"{node['target']} {node['failureSummary'].splitlines()[-1].strip()}" for node in rule["nodes"])
        for rule in found
    ]


def settled(page: Any, *answers: str) -> None:
    """Until every selector of ``answers`` shows and no box waits for the server."""
    for selector in answers:
        page.wait_for_selector(selector)
    page.wait_for_function("() => !document.querySelector('[aria-busy]')")


def submit(page: Any, box: str, text: str) -> None:
    page.fill(box, text)
    page.press(box, "Enter")


def test_the_page_holds_no_wcag_violation_in_its_main_states(
    documents_server: real_server.Server, watched: Watched
) -> None:
    page, base = watched.page, documents_server.base
    found: dict[str, list[str]] = {}

    # A words table as it opens: the word map, the analogy and similarity answers, the whole table drawn.
    page.goto(f"{base}/?table={WORDS}")
    opening = ("#map-out svg circle", "#analogy-out .scores", "#similarity-out strong", "#tm-canvas[data-labels=true]")
    settled(page, *opening)
    found["first load"] = violations(page)

    # A word searched with its neighbours shown, and the other cards' answers.
    submit(page, "#word", "heart")
    submit(page, "#odd-words", "breakfast cereal dinner lunch")
    page.fill("#rank-b", "queen")
    submit(page, "#rank-a", "king")
    page.fill("#closer-a", "paris")
    submit(page, "#closer-b", "london")
    page.fill("#nsim-a", "breakfast lunch")
    submit(page, "#nsim-b", "dinner meal")
    submit(page, "#cmp-word", "heart")
    answers = ("#neighbours-out .scores", "#odd-out .answer", "#rank-out .answer", "#closer-out .scores")
    settled(page, *answers, "#nsim-out .answer", "#compare-out .compare-grid")
    found["answers"] = violations(page)

    # An answer on its way (held here until audited): the answer before it stays shown, marked as old.
    held: list[Any] = []
    page.route("**/neighbors?*", lambda route: held.append(route))
    submit(page, "#word", "king")
    page.wait_for_selector("#neighbours-out[aria-busy=true] .scores")
    found["an answer on its way"] = violations(page)
    for route in held:
        route.continue_()
    page.unroute("**/neighbors?*")
    settled(page, "#neighbours-out .scores")

    # The whole table: a search's first matches, a row picked among them with its neighbours listed, and the table
    # of the map's labelled words opened.
    submit(page, "#tm-search", "art")
    page.wait_for_function("() => document.querySelector('#table-map .tm-picks button')?.textContent === 'art'")
    page.click("#table-map .tm-picks button")
    page.click("#table-map .tm-words summary")
    settled(page, "#table-map[data-selected] .tm-panel .scores", "#table-map .tm-words tbody button")
    found["whole table"] = violations(page)

    # Errors: unknown words (with the API's suggestions), a map word left out, an expression that is not one.
    submit(page, "#word", "hearrt")
    page.fill("#sim-a", "cat")
    submit(page, "#sim-b", "horsse")
    page.fill("#map-words", "fruit: apple banana qzxqzxq")
    page.press("#map-words", "Control+Enter")
    submit(page, "#tm-search", "/(/")
    settled(page, "#neighbours-out [role=alert]", "#similarity-out [role=alert]", "#map-out .warning")
    page.wait_for_selector("#tm-search[aria-invalid=true]")
    found["errors"] = violations(page)

    # A documents table's search: the hits of more like its first document, the filter's controls and the pages.
    page.goto(f"{base}/?table={DOCS}")
    settled(page, "#ds-out .ds-hit", "#ds-controls .ds-field", "#ds-out .ds-pages")
    found["documents"] = violations(page)

    submit(page, "#ds-id", "lee-999")
    settled(page, "#ds-out .error")
    found["documents error"] = violations(page)

    # A text search of a table with an encoder: its modes in a menu.
    page.goto(f"{base}/?table={EMBEDDED}&text=government+of+australia")
    settled(page, "#ds-out .ds-hit", "#ds-mode:not([hidden])")
    found["text search"] = violations(page)

    assert {state: lines for state, lines in found.items() if lines} == {}
    watched.assert_clean(expected_404=("hearrt", "horsse", f"/{DOCS}/search"))
