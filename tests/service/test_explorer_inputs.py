"""The explorer page's inputs, driven in headless Chromium against real ``embedding-serve`` processes: a box of
spaces is refused in place (the answer shown stays), a first answer on its way is said, the word map's unknown words
get the API's suggestions, and a server that asks for a read key gets it from a field kept for the tab only, sent as
``X-API-Key``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service import real_server
from tests.service.browser import Watched

WORDS = "small"  # the 20,000 most frequent GloVe words, served beside the documents tables
READ_KEY = "explorer-reader-" + "r" * 16


@pytest.fixture(scope="module")
def server(documents_server: real_server.Server) -> str:
    return documents_server.base


@pytest.fixture(scope="module")
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as client:
        yield client


def test_a_box_of_spaces_is_refused_and_the_answer_stays(server: str, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS}")
    page = watched.page
    assert not page.is_visible("#key-form")  # an open server asks for no key
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "word"  # the picker, then the first card: nothing hidden
    page.fill("#word", "heart")
    page.press("#word", "Enter")
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    shown = page.inner_text("#neighbours-out")
    page.wait_for_selector("#similarity-out:not([aria-busy]) strong")
    similarity = page.inner_text("#similarity-out")

    boxes = ("#word", "#sim-b", "#odd-words", "#rank-a", "#cmp-word")
    for box in boxes:
        page.fill(box, "   ")
        page.press(box, "Enter")
    page.wait_for_timeout(300)  # a refused form asks nothing: give a wrong answer time to come
    assert page.inner_text("#neighbours-out") == shown and page.inner_text("#similarity-out") == similarity
    assert watched.state()["word"] == "heart" and "y" not in watched.state()  # the link is the answer's
    for box in boxes:  # each box is marked invalid, and the browser says why
        assert page.eval_on_selector(box, "input => !input.validity.valid && input.validationMessage"), box
    watched.assert_clean()


def test_a_first_answer_on_its_way_is_said(server: str, watched: Watched) -> None:
    """A box with no answer yet says it waits for the server (a slow server, a long list); the answer replaces it."""
    watched.open(server, f"?table={WORDS}")
    page = watched.page
    held: list[Any] = []
    page.route("**/neighbors?*", lambda route: held.append(route))
    page.fill("#word", "heart")
    page.press("#word", "Enter")
    page.wait_for_function("() => document.getElementById('neighbours-out').getAttribute('aria-busy') === 'true'")
    waiting = "() => getComputedStyle(document.getElementById('neighbours-out'), '::before')"
    page.wait_for_function(f"{waiting}.visibility === 'visible'")
    assert page.evaluate(f"({waiting})().content") == '"Waiting for the server…"'
    assert page.is_visible("#neighbours-out")
    held[0].continue_()
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    assert page.evaluate(f"({waiting})().content") == "none"
    watched.assert_clean()


def test_an_answer_that_is_no_json_says_its_status_and_when_to_ask_again(server: str, watched: Watched) -> None:
    """A proxy in front of the server answers 429 or 502 with a page of its own, not the API's envelope."""
    watched.open(server, f"?table={WORDS}")
    page = watched.page
    page.route(
        "**/similarity?*",
        lambda route: route.fulfill(status=429, body="<html>slow down</html>", headers={"Retry-After": "3"}),
    )
    page.fill("#sim-b", "horse")
    page.press("#sim-b", "Enter")
    page.wait_for_selector("#similarity-out:not([aria-busy]) [role=alert]")
    assert page.inner_text("#similarity-out") == "the server answered 429 Too Many Requests; try again in 3 s"
    page.route("**/export", lambda route: route.fulfill(status=502, body="Bad Gateway"))
    page.click("#map-export [data-export=vectors]")
    page.wait_for_selector("#map-export-out [role=alert]")
    assert page.inner_text("#map-export-out") == "the server answered 502 Bad Gateway"


def test_the_maps_unknown_words_get_the_apis_suggestions(server: str, api: httpx.Client, watched: Watched) -> None:
    watched.open(server, f"?table={WORDS}")
    page = watched.page
    page.fill("#map-words", "fruit: apple banana hearrt\nmetals: iron gold")
    page.press("#map-words", "Control+Enter")
    page.wait_for_selector("#map-out .map-suggestions button.chip")
    error = api.get(f"/v1/tables/{WORDS}/neighbors", params={"token": "hearrt"})
    suggestions = error.json()["error"]["suggestions"]
    assert error.status_code == 404 and suggestions
    chips = page.locator("#map-out .map-suggestions button.chip")
    assert chips.all_inner_texts() == suggestions
    assert "hearrt" in page.inner_text("#map-out .map-suggestions")
    assert page.locator("#map-out svg circle").count() == 4

    chips.first.focus()
    page.keyboard.press("Enter")  # the keyboard picks one as a click does
    page.wait_for_function("() => document.querySelectorAll('#map-out svg circle').length === 5")
    assert page.input_value("#map-words") == f"fruit: apple banana {suggestions[0]}\nmetals: iron gold"
    assert page.locator("#map-out .warning").count() == 0
    titles = page.locator("#map-out svg .point title").all_text_contents()
    assert f"{suggestions[0]} (fruit)" in titles
    assert watched.state()["words"].startswith(f"fruit: apple banana {suggestions[0]}")
    watched.assert_clean()


@pytest.fixture(scope="module")
def keyed(documents_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server over the same tables that answers only requests with its read key."""
    log = tmp_path_factory.mktemp("keyed-serve") / "serve.log"
    with real_server.running(documents_data_dir, log, env={"EMBEDDING_READ_API_KEY": READ_KEY}) as server:
        yield server.base


def test_a_server_that_asks_for_a_key_gets_it_from_the_key_field(keyed: str, browser: Any) -> None:
    watched = Watched(browser)
    page = watched.page
    try:
        page.goto(f"{keyed}/?table={WORDS}&word=heart")
        page.wait_for_selector("#key-form:not([hidden])")
        assert page.evaluate("document.activeElement.id") == "api-key"
        assert "read key" in page.inner_text("#table-info")  # the server's 401 message
        assert watched.http_errors and all(status == 401 for status, _ in watched.http_errors)

        page.fill("#api-key", "not-the-key")  # a wrong key: refused, said, and the field stays
        with page.expect_response(lambda r: r.url.endswith("/v1/tables") and r.status == 403):
            page.press("#api-key", "Enter")
        page.wait_for_function("() => /not valid/.test(document.getElementById('table-info').textContent)")
        assert page.eval_on_selector("#table-info", "e => e.closest('[aria-live]')?.ariaLive") == "polite"  # said
        assert page.is_visible("#key-form")
        refused = len(watched.http_errors)

        with page.expect_request(lambda r: "/v1/tables/small/neighbors" in r.url) as asked:
            page.fill("#api-key", READ_KEY)
            page.press("#api-key", "Enter")
        assert asked.value.headers.get("x-api-key") == READ_KEY
        page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
        page.wait_for_selector("#map-out svg circle")
        page.wait_for_selector("#tm-canvas[data-labels=true]", state="attached")  # the whole table's files too
        tokens = page.locator("#neighbours-out .scores button.token").all_inner_texts()
        answer = httpx.get(
            f"{keyed}/v1/tables/{WORDS}/neighbors", params={"token": "heart", "k": 8}, headers={"X-API-Key": READ_KEY}
        )
        assert tokens == [n["token"] for n in answer.json()["neighbors"]]
        assert len(watched.http_errors) == refused  # nothing refused once the key is in

        assert READ_KEY not in page.url
        assert page.evaluate("JSON.stringify(localStorage)") == "{}"
        page.reload()  # kept for the tab: a reload needs no key typed again
        page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
        assert len(watched.http_errors) == refused
    finally:
        watched.close()

    fresh = Watched(browser)  # another tab (a new browsing context) is asked for the key
    try:
        fresh.page.goto(f"{keyed}/?table={WORDS}")
        fresh.page.wait_for_selector("#key-form:not([hidden])")
    finally:
        fresh.close()
