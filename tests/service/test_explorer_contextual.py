"""The explorer's Contextual vectors card, driven in headless Chromium against a real ``embedding-serve`` process
serving all-MiniLM-L6-v2 imported with ``--format transformer`` (``st``) beside the same model's token rows
imported as a plain model-token table (``minilm``), which has no model to run and so no card.

Every cosine, neighbour list and map coordinate the card shows is compared with the API's own answer to the same
request (fetched here with httpx) and, for the map, with NumPy's principal components of the answer's vectors.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np
import pytest

from tests.minilm import MINILM, ST
from tests.service import real_server
from tests.service.browser import SCREENSHOTS, Watched, save_screenshot, text_contrasts

MODEL, TOKENS = ST, "minilm"
BANK = ["the river bank was muddy", "she deposited money at the bank", "we fished from the bank of the river"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, minilm_st_dir: Path, minilm_data_dir: Path) -> Iterator[str]:
    data = tmp_path_factory.mktemp("contextual") / "data"
    shutil.copytree(minilm_st_dir / ST, data / MODEL)  # the session's transformer table
    shutil.copytree(minilm_data_dir / MINILM, data / TOKENS)  # the session's model-token table
    with real_server.running(data, tmp_path_factory.mktemp("contextual-log") / "serve.log") as started:
        yield started.base


@pytest.fixture(scope="module")
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=60) as client:
        yield client


def settle(page: Any) -> None:
    """Until the card shows an answer (the sentences, or an error) to its latest request."""
    page.wait_for_selector("#cx-out:not([aria-busy]) :is(.cx-texts, .error)")
    page.wait_for_function("() => !document.querySelector('#cx-out[aria-busy]')")


def open_card(watched: Watched, base: str, query: str = f"?table={MODEL}") -> Any:
    page = watched.page
    page.goto(f"{base}/{query}")
    page.wait_for_selector("#contextual:not([hidden])")
    settle(page)
    return page


def contextual(api: httpx.Client, texts: list[str], token: str) -> dict[str, Any]:
    response = api.post(f"/v1/tables/{MODEL}/contextual", json={"texts": texts, "token": token, "k": 5})
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()["token"]
    return view


def shown_matrix(page: Any) -> list[list[str]]:
    return page.eval_on_selector_all(
        "#cx-out .cx-matrix tbody tr", "rows => rows.map(r => [...r.querySelectorAll('td')].map(c => c.textContent))"
    )


def expected_matrix(view: dict[str, Any]) -> list[list[str]]:
    """The static row first, then each occurrence: the cosines as the API gives them, to three places."""
    static = [o["static_cosine"] for o in view["occurrences"]]
    rows = [[1.0, *static]] + [[static[i], *row] for i, row in enumerate(view["cosines"])]
    return [[f"{value:.3f}" for value in row] for row in rows]


def shown_neighbours(page: Any) -> list[list[list[str]]]:
    return page.eval_on_selector_all(
        "#cx-out .cx-side",
        """sides => sides.map(s => [...s.querySelectorAll('.scores li')].map(
            li => [li.querySelector('.token').textContent, li.querySelector('.score').textContent]))""",
    )


def expected_neighbours(view: dict[str, Any]) -> list[list[list[str]]]:
    lists = [view["static"]["neighbors"]] + [o["neighbors"] for o in view["occurrences"]]
    return [[[row["token"], f"{row['score']:.3f}"] for row in rows] for rows in lists]


def numpy_map(view: dict[str, Any]) -> np.ndarray:
    """The vectors' first two principal components, each axis turned so that its largest coordinate is positive."""
    points = np.array([view["static"]["vector"]] + [o["vector"] for o in view["occurrences"]], dtype=np.float64)
    centred = points - points.mean(axis=0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    coords = u[:, :2] * s[:2]
    for axis in range(2):
        if coords[np.argmax(np.abs(coords[:, axis])), axis] < 0:
            coords[:, axis] *= -1
    out: np.ndarray = coords
    return out


def shown_map(page: Any) -> np.ndarray:
    pairs = page.eval_on_selector_all(
        "#cx-out .cx-map g.point", "gs => gs.map(g => [Number(g.dataset.x), Number(g.dataset.y)])"
    )
    return np.array(pairs, dtype=np.float64)


def test_the_bank_view_shows_the_api_answer(server: str, api: httpx.Client, watched: Watched, tmp_path: Path) -> None:
    page = open_card(watched, server)
    assert page.input_value("#cx-texts").splitlines() == BANK and page.input_value("#cx-word") == "bank"
    view = contextual(api, BANK, "bank")
    assert [o["text"] for o in view["occurrences"]] == [0, 1, 2]
    assert shown_matrix(page) == expected_matrix(view)
    # the model's reading, as the card shows it: the two river banks are nearer each other than the money bank
    cells = [[float(c) for c in row] for row in shown_matrix(page)]
    assert cells[1][3] > max(cells[1][2], cells[2][3]) and max(cells[0][1:]) < cells[1][2]
    assert shown_neighbours(page) == expected_neighbours(view)
    assert page.locator("#cx-out .cx-map g.point").count() == 4 and page.locator("#cx-out .cx-static").count() == 1
    np.testing.assert_allclose(shown_map(page), numpy_map(view), atol=1e-6)
    hits = page.eval_on_selector_all(
        "#cx-out .cx-texts li", "ls => ls.map(l => [...l.querySelectorAll('.cx-hit')].map(b => b.textContent))"
    )
    assert hits == [["bank"], ["bank"], ["bank"]]
    assert page.locator("#neighbours").is_visible()  # the model's token rows keep their own cards
    card = tmp_path / "contextual-card.png"
    page.locator("#contextual").screenshot(path=str(card))
    assert card.stat().st_size > 10_000
    save_screenshot(page, "contextual-page", tmp_path)
    shutil.copyfile(card, SCREENSHOTS / card.name)
    # Seven texts, each in its own colour: the word white on it, the matrix's heads and the lists' titles in it, all
    # legible (WCAG AA: 4.5:1 for text of this size).
    page.fill("#cx-texts", "\n".join(f"the bank {n}" for n in ("one", "two", "three", "four", "five", "six", "seven")))
    page.press("#cx-word", "Enter")
    page.wait_for_function("() => document.querySelectorAll('#cx-out .cx-hit').length === 7")
    settle(page)
    ratios = text_contrasts(page, "#cx-out :is(.cx-hit, .cx-matrix th, .cx-side h4)")
    assert len(ratios) >= 7 * 3 and min(ratios) >= 4.5, min(ratios)
    watched.assert_clean()


def test_a_click_on_a_word_follows_it_and_the_url_keeps_the_view(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    page = open_card(watched, server)
    page.locator("#cx-out .cx-texts li[data-text='2'] button.cx-word", has_text="river").click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('cw') === 'river'")
    settle(page)
    view = contextual(api, BANK, "river")
    assert [o["text"] for o in view["occurrences"]] == [0, 2]
    assert shown_matrix(page) == expected_matrix(view)
    assert shown_neighbours(page) == expected_neighbours(view)
    texts = ["My heartache is gone.", "Heartache and sorrow fill the song."]
    page.fill("#cx-texts", "\n".join(texts))
    page.fill("#cx-word", "heartache")
    page.press("#cx-word", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('cw') === 'heartache'")
    settle(page)
    view = contextual(api, texts, "heartache")
    assert [p["token"] for p in view["pieces"]] == ["heart", "##ache"]
    assert shown_matrix(page) == expected_matrix(view)
    assert "heart ##ache" in page.text_content("#cx-out .cx-block .cx-note")
    assert page.locator("#cx-out .cx-hit").all_inner_texts() == ["heartache", "heartache"]
    page.reload()
    settle(page)
    assert page.input_value("#cx-word") == "heartache" and page.input_value("#cx-texts").splitlines() == texts
    assert shown_matrix(page) == expected_matrix(view)
    watched.assert_clean()


def test_an_emptied_word_is_kept_in_the_url(server: str, watched: Watched) -> None:
    """With no word the card shows the sentences' words to pick from; the link and a reload keep it so, not the
    default word."""
    page = open_card(watched, server)
    page.fill("#cx-word", "")
    page.press("#cx-word", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('cw') === ''")
    settle(page)
    page.wait_for_selector("#cx-out .cx-prompt")
    assert page.locator("#cx-out .cx-matrix").count() == 0
    page.reload()
    settle(page)
    assert page.input_value("#cx-word") == "" and page.input_value("#cx-texts").splitlines() == BANK
    page.wait_for_selector("#cx-out .cx-prompt")
    assert page.locator("#cx-out .cx-matrix").count() == 0
    page.go_back()
    page.wait_for_function("() => !new URLSearchParams(location.search).has('cw')")
    settle(page)
    assert page.input_value("#cx-word") == "bank" and page.locator("#cx-out .cx-matrix").count() == 1
    watched.assert_clean()


def test_a_word_not_in_the_sentences_shows_the_error_and_their_words(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    page = open_card(watched, server)
    page.fill("#cx-word", "cathedral")
    page.press("#cx-word", "Enter")
    settle(page)
    refused = api.post(f"/v1/tables/{MODEL}/contextual", json={"texts": BANK, "token": "cathedral", "k": 5})
    assert refused.status_code == 422
    assert page.text_content("#cx-out .error p") == refused.json()["error"]["message"]
    assert page.locator("#cx-out .cx-matrix").count() == 0
    words = page.locator("#cx-out .cx-texts li[data-text='1'] button.cx-word").all_inner_texts()
    assert words == BANK[1].split()
    page.fill("#cx-texts", "only one sentence")
    page.press("#cx-word", "Enter")
    page.wait_for_selector("#cx-out >> text=Type two sentences or more")
    watched.assert_clean(expected_422=("contextual",))


def test_a_word_cut_by_truncation_or_read_as_unk_shows_the_server_message(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """The card shows "heart" ending a text cut between "heart" and "##ache": following it shows the server's 422,
    which says where truncation cut it, above the texts' words; so does a word the tokenizer reads as [UNK]."""
    texts = ["a " * 253 + "heartache", "the river bank"]  # [CLS], 253 pieces, "heart" at 254, [SEP] at 255
    page = open_card(watched, server, "?" + urlencode({"table": MODEL, "ctx": "\n".join(texts), "cw": "heart"}))
    cut = page.locator("#cx-out .cx-texts li[data-text='0']")
    assert (
        cut.locator("button.cx-word").last.inner_text() == "heart" and "(cut to the model's length)" in cut.inner_text()
    )
    for word in ["heart", "😀"]:
        if word != "heart":
            page.fill("#cx-word", word)
            page.press("#cx-word", "Enter")
            settle(page)
        refused = api.post(f"/v1/tables/{MODEL}/contextual", json={"texts": texts, "token": word, "k": 5})
        assert refused.status_code == 422
        assert page.text_content("#cx-out .error p") == refused.json()["error"]["message"]
        assert page.locator("#cx-out .cx-texts li").count() == 2 and page.locator("#cx-out .cx-matrix").count() == 0
    cut_message = api.post(f"/v1/tables/{MODEL}/contextual", json={"texts": texts, "token": "heart"}).json()
    assert cut_message["error"]["message"] == (
        "'heart' (heart) occurs in none of the texts: where texts[0] ends, truncation to the model's 256 pieces cut it "
        "from its continuation '##ache'"
    )
    watched.assert_clean(expected_422=("contextual",))


def test_the_card_is_shown_only_for_a_transformer_table_as_the_picker_and_header_say(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """The picker and the header name the transformer table as one, with its model run on text and the card; the
    same rows without their model as model tokens, with no model to run and no card. The card's word is in the
    URL only while the transformer table is shown (and back with it)."""
    summaries = {t["name"]: t for t in api.get("/v1/tables").json()["tables"]}
    name, rows = summaries[MODEL]["model"]["name"], f"{summaries[MODEL]['rows']:,}"
    assert summaries[TOKENS]["model"]["name"] == name and "transformer" not in summaries[TOKENS]
    tokens_info = f"model tokens · {name}'s input rows, no model to run · flat index · word cards"
    layers = summaries[MODEL]["transformer"]["layers"]
    model_info = f"transformer model · {name}, {layers} layers run on text (embed, contextual) · flat index · "
    page = watched.page
    page.goto(f"{server}/?table={TOKENS}&word=bank&cw=river")  # a link with the card's word, which this table lacks
    page.wait_for_selector("#neighbours:not([hidden])")
    page.wait_for_selector("#map-out svg circle")
    assert page.locator("#contextual").is_hidden() and watched.state() == {"table": TOKENS, "word": "bank"}
    labels = page.eval_on_selector_all("#table option", "os => os.map(o => o.textContent)")
    assert labels == [f"{TOKENS} ({rows} × 384, model tokens)", f"{MODEL} ({rows} × 384, transformer model)"]
    assert page.inner_text("#table-info") == tokens_info
    page.select_option("#table", MODEL)
    page.wait_for_selector("#contextual:not([hidden])")
    settle(page)
    assert page.locator("#cx-out .cx-matrix").is_visible() and page.input_value("#cx-word") == "river"
    assert watched.state() == {"table": MODEL, "word": "bank", "cw": "river"}
    assert page.inner_text("#table-info") == model_info + "word cards + Contextual vectors"
    page.select_option("#table", TOKENS)
    page.wait_for_selector("#contextual[hidden]", state="attached")
    assert watched.state() == {"table": TOKENS, "word": "bank"} and page.inner_text("#table-info") == tokens_info
    page.go_back()
    page.wait_for_selector("#contextual:not([hidden])")
    assert page.inner_text("#table-info") == model_info + "word cards + Contextual vectors"
    settle(page)
    watched.assert_clean()


def test_the_card_fits_a_phone(server: str, browser: Any) -> None:
    """At 375 px the page does not scroll sideways: the map shrinks to the card, the cosines scroll in their box."""
    phone = Watched(browser, width=375, height=812)
    try:
        page = open_card(phone, server)
        page.wait_for_selector("#cx-out .cx-map")
        scroll, client = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert client == 375 and scroll <= client
        card = page.locator("#contextual").bounding_box()
        plot = page.locator("#cx-out .cx-map").bounding_box()
        assert card is not None and plot is not None
        assert card["x"] <= plot["x"] and plot["x"] + plot["width"] <= card["x"] + card["width"]
        phone.assert_clean()
    finally:
        phone.close()
