"""The explorer's Search card for documents tables, driven in headless Chromium against a real ``embedding-serve``
process serving gensim's Lee corpus (``lee``, 300 news stories with fields) beside a words table (``small``, the
20,000 most frequent GloVe words), so that the page switches cards with the table. A second server, with a write
key, serves a copy of ``lee`` written to before the page opens (its first document deleted, two added), a table
whose field is named ``__proto__``, one a LlamaIndex vector store writes its nodes to and one with a 10 MB text.

Every list of hits the page shows is compared with the API's own answer to the request the page sent, fetched
here with httpx; the filter is checked against what its controls were set to, paging against offsets, more like
this against the new query, and errors against the API's envelope.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np
import pytest

from index.build.sources import read_source
from index.build.writer import build_table
from tests.lee import Lee, write_jsonl
from tests.service import real_server
from tests.service.browser import SCREENSHOTS, Watched, save_screenshot, text_contrasts

DOCS, WORDS = "lee", "small"
EMBEDDED = "lee-text"  # the Lee stories without their vectors, embedded at import by the words table
FIRST = "lee-000"  # the first document: the card's query until one is given
DOCUMENTS_JS = "/static/documents.js"
WRITE_KEY = "explorer-writer-" + "k" * 16
LONG_TEXT = "the licence grants permission " * 350_000  # 10.5 MB, 700,000 words to mark for "licence permission"


@pytest.fixture(scope="module")
def server(documents_server: real_server.Server) -> str:
    """The shared server over ``lee``, ``small`` and ``lee-text`` (and ``no-text``; tests/service/conftest.py)."""
    return documents_server.base


@pytest.fixture(scope="module")
def written(lee_data_dir: Path, lee_docs: Lee, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with a write key over a copy of ``lee`` whose first document was deleted and two written (301 live
    documents), ``proto``: documents whose one field is named ``__proto__``, ``dots``: documents whose first
    ids are ``.`` and ``..``, ``nodes``: a placeholder with the fields a vector store keeps (documents.md), and
    ``long``: a text of 10 MB, which an import takes (a write takes 100,000 characters), beside a short one."""
    directory = tmp_path_factory.mktemp("written-data")
    shutil.copytree(lee_data_dir / "lee", directory / "lee")
    records = [
        {"id": f"p{i}", "text": lee_docs.texts[i], "vector": lee_docs.vectors[i].tolist(), "__proto__": "ab"[i % 2]}
        for i in range(20)
    ]
    ids = [".", "..", *(f"d{i}" for i in range(2, 20))]
    dots = [{"id": id, "text": lee_docs.texts[i], "vector": lee_docs.vectors[i].tolist()} for i, id in enumerate(ids)]
    placeholder = {"id": "placeholder", "text": "placeholder", "vector": lee_docs.vectors[0].tolist()}
    nodes = [{**placeholder, "metadata": "{}", "topic": "none"}]
    long = [
        {"id": "long", "text": LONG_TEXT, "vector": lee_docs.vectors[1].tolist()},
        {"id": "short", "text": "a licence to print money", "vector": lee_docs.vectors[2].tolist()},
    ]
    for name, table in (("proto", records), ("dots", dots), ("nodes", nodes), ("long", long)):
        path = write_jsonl(directory.parent / f"{name}.jsonl", table)
        raw, fmt = read_source(path, "documents")
        build_table(raw, data_dir=directory, name=name, source={"format": fmt, "path": path.name})
    log = directory.parent / "written-serve.log"
    with real_server.running(directory, log, env={"EMBEDDING_WRITE_KEYS": WRITE_KEY}) as server:
        headers = {"X-API-Key": WRITE_KEY}
        new = [{"id": f"new-{i}", "text": lee_docs.texts[i], "vector": lee_docs.vectors[i].tolist()} for i in (1, 2)]
        wrote = real_server.HTTP.post(
            f"{server.base}/v1/tables/{DOCS}/documents", json={"documents": new}, headers=headers
        )
        gone = real_server.HTTP.delete(f"{server.base}/v1/tables/{DOCS}/documents/{FIRST}", headers=headers)
        assert wrote.status_code == 200 and gone.json()["deleted"] == 1
        yield server.base


@pytest.fixture(scope="module")
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as client:
        yield client


def open_search(watched: Watched, base: str, query: str = "") -> Any:
    page = watched.page
    page.goto(f"{base}/?table={DOCS}{query}")
    settle(page)
    return page


def settle(page: Any) -> None:
    """Until the card shows an answer (hits, or an error) to its latest request."""
    page.wait_for_selector("#ds-out:not([aria-busy]) :is(.ds-count, .error)")
    page.wait_for_function("() => !document.querySelector('#ds-out[aria-busy]')")


def sent(page: Any) -> dict[str, Any]:
    """The request body the page sent last, as it shows it."""
    body: dict[str, Any] = json.loads(page.text_content("#ds-request") or "")
    return body


def search(api: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return api.post(f"/v1/tables/{DOCS}/search", json=body)


def shown_hits(page: Any) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        "#ds-out .ds-hit",
        """items => items.map(li => ({
            id: li.querySelector('.ds-id').textContent,
            score: li.querySelector('.score').textContent,
            fields: Object.fromEntries([...li.querySelectorAll('.ds-values li')].map(
                v => [v.dataset.field, v.querySelector('.ds-value').textContent])),
            snippet: li.querySelector('.ds-snippet')?.textContent ?? '',
            marked: [...li.querySelectorAll('.ds-snippet mark')].map(m => m.textContent),
        }))""",
    )


def shown(value: Any, kind: str) -> str:
    """A field value as the card writes it: cut after 80 characters."""
    if value is None:
        return "—"
    if isinstance(value, list):
        text = ", ".join(value) if value else "(none)"
    elif kind == "float":
        text = f"{value:.4f}".rstrip("0").rstrip(".")
    elif kind == "boolean":
        text = "yes" if value else "no"
    else:
        text = str(value)
    return cut(text)


def cut(text: str) -> str:
    """``text`` as the card shows a long value: its first 80 characters and "…"."""
    return f"{text[:80]}…" if len(text) > 80 else text


def assert_same_hits(page: Any, api: httpx.Client, types: dict[str, str]) -> dict[str, Any]:
    """The hits shown are the API's answer to the request the page sent (ids, scores, fields, text)."""
    body = sent(page)
    answer = search(api, body).json()
    hits = shown_hits(page)
    assert [h["id"] for h in hits] == [h["id"] for h in answer["hits"]]
    assert [h["score"] for h in hits] == [f"{h['score']:.3f}" for h in answer["hits"]]
    for got, want in zip(hits, answer["hits"], strict=True):
        assert got["fields"] == {name: shown(value, types[name]) for name, value in want["fields"].items()}
        start = got["snippet"].removesuffix(" …")
        assert want["text"].startswith(start) and len(start) >= min(len(want["text"]), 40)
    ranks = page.eval_on_selector("#ds-out .ds-hits", "ol => ol.start")
    assert ranks == body["offset"] + 1
    passing = page.locator("#ds-out .ds-passing")
    if "passing" in answer:
        assert passing.inner_text() == f"{answer['passing']:,}"
    else:
        assert passing.count() == 0
    return answer


@pytest.fixture(scope="module")
def types(api: httpx.Client) -> dict[str, str]:
    fields = api.get(f"/v1/tables/{DOCS}").json()["documents"]["fields"]
    return {name: field["type"] for name, field in fields.items()}


def test_a_documents_table_shows_the_search_card_and_a_words_table_the_word_cards(
    server: str, api: httpx.Client, watched: Watched, types: dict[str, str]
) -> None:
    page = open_search(watched, server)
    assert page.is_visible("#doc-search") and not page.is_visible("#neighbours") and not page.is_visible("#table-map")
    assert "documents" in page.inner_text(f"#table option[value='{DOCS}']")
    assert page.input_value("#ds-id") == FIRST and not page.is_disabled("#ds-text")  # by keyword: no encoder
    assert page.eval_on_selector_all("#ds-mode option", "os => os.map(o => o.value)") == ["keyword"]
    # one mode is no choice: no menu, the box names it
    assert not page.is_visible("#ds-mode") and page.get_attribute("#ds-text", "placeholder").endswith("(keyword)")
    assert sent(page) == {"id": FIRST, "k": 10, "offset": 0}
    answer = assert_same_hits(page, api, types)
    assert FIRST not in [hit["id"] for hit in answer["hits"]]

    page.select_option("#table", WORDS)
    page.wait_for_selector("#neighbours:not([hidden])")
    assert not page.is_visible("#doc-search") and page.is_visible("#map")
    for select in ("#cmp-first", "#cmp-second"):  # Compare tables offers the tables with words, not documents
        assert page.eval_on_selector_all(f"{select} option", "os => os.map(o => o.value)") == [WORDS]
        assert page.input_value(select) == WORDS
    page.wait_for_selector("#map-out svg circle")
    page.go_back()
    page.wait_for_selector("#doc-search:not([hidden])")
    settle(page)
    assert [h["id"] for h in shown_hits(page)] == [h["id"] for h in answer["hits"]]
    watched.assert_clean()


def test_a_words_map_left_for_a_documents_table_keeps_its_own_labels(
    server: str, api: httpx.Client, watched: Watched
) -> None:
    """The words table's whole-table map, still on its way (held here) when a documents table is picked, is
    finished with its own labels, not the documents table's ids."""
    page = watched.page
    held: list = []
    page.route(f"**/v1/tables/{WORDS}/map?*", lambda route: held.append(route))
    with page.expect_request(lambda r: f"/v1/tables/{WORDS}/map?" in r.url):
        page.goto(f"{server}/?table={WORDS}")
    page.select_option("#table", DOCS)
    settle(page)
    assert len(held) == 1
    held[0].continue_()
    page.wait_for_selector("#tm-canvas[data-labels=true]", state="attached")
    labels = page.evaluate("[explorer.tableMap.labels.length, explorer.tableMap.labels[0]]")
    assert labels == [
        api.get(f"/v1/tables/{WORDS}").json()["rows"],
        api.get(f"/v1/tables/{WORDS}/ids/0").json()["token"],
    ]
    watched.assert_clean()


def test_the_url_holds_only_what_the_table_shown_reads(
    server: str, api: httpx.Client, browser: object, watched: Watched
) -> None:
    """The word tools' state leaves the URL for a documents table and is back with the words table; a link made
    for either kind opens with its own keys and drops the other kind's (in a page of its own, as a link is opened:
    leaving the words page at once would cut its maps' downloads). The picker and the header say what each table
    is and which cards it gets, as its summary does."""
    words = {"table": WORDS, "word": "heart", "a": "paris", "b": "france", "c": "rome", "x": "red", "y": "blue"}
    page = watched.page
    page.goto(f"{server}/?{urlencode({**words, 'doc': 'lee-001', 'text': 'fire'})}")
    page.wait_for_selector("#neighbours-out .scores")
    assert watched.state() == words
    summaries = {t["name"]: t for t in api.get("/v1/tables").json()["tables"]}
    kinds = {"lee": "documents", "lee-text": "documents", "no-text": "documents", WORDS: "words"}
    labels = page.eval_on_selector_all("#table option", "os => os.map(o => o.textContent)")
    assert labels == [f"{n} ({t['rows']:,} × {t['dim']}, {kinds[n]})" for n, t in summaries.items()]
    assert page.inner_text("#table-info") == "words · flat index · word cards"
    page.select_option("#table", DOCS)
    settle(page)
    assert watched.state() == {"table": DOCS}
    assert page.inner_text("#table-info") == "documents · text search: keyword · flat index · Search card"
    page.select_option("#table", WORDS)
    page.wait_for_function("() => new URLSearchParams(location.search).get('table') === 'small'")
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    assert watched.state() == words and page.input_value("#word") == "heart"
    watched.assert_clean()
    linked = Watched(browser)
    try:
        page = linked.page
        page.goto(f"{server}/?{urlencode({'table': EMBEDDED, 'doc': 'lee-002', 'word': 'heart', 'x': 'red'})}")
        settle(page)
        assert linked.state() == {"table": EMBEDDED, "doc": "lee-002"} and sent(page)["id"] == "lee-002"
        encoder = summaries[EMBEDDED]["documents"]["encoder"]["table"]
        searches = f"text search: vector, keyword, hybrid (encoder {encoder})"
        assert page.inner_text("#table-info") == f"documents · {searches} · flat index · Search card"
        page.select_option("#table", "no-text")
        settle(page)
        assert page.inner_text("#table-info") == "documents · no text search · flat index · Search card"
        linked.assert_clean()
    finally:
        linked.close()


def test_hits_of_the_table_before_are_not_shown_on_the_next(server: str, watched: Watched) -> None:
    """Hits still on their way when another documents table is picked are dropped (each held here until the
    switch is done)."""
    page = open_search(watched, server)
    held: list = []
    page.route(f"**/v1/tables/{DOCS}/search", lambda route: held.append(route))
    page.route(f"**/v1/tables/{EMBEDDED}/fields", lambda route: held.append(route))
    page.fill("#ds-id", "lee-001")
    with page.expect_request(lambda r: r.url.endswith(f"/{DOCS}/search")):  # held once it is sent
        page.press("#ds-id", "Enter")
    with page.expect_request(lambda r: r.url.endswith(f"/{EMBEDDED}/fields")):
        page.select_option("#table", EMBEDDED)
    page.wait_for_function("() => new URLSearchParams(location.search).get('table') === 'lee-text'")
    page.wait_for_function("() => document.querySelector('#ds-controls').innerText === 'Loading the fields…'")
    with page.expect_response(lambda r: r.url.endswith(f"/{DOCS}/search")) as answered:
        next(route for route in held if route.request.url.endswith("/search")).continue_()
    answered.value.finished()
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => setTimeout(done, 50)))")  # the page reads it
    assert page.locator("#ds-out .ds-hit").count() == 0
    next(route for route in held if route.request.url.endswith("/fields")).continue_()
    settle(page)
    assert sent(page) == {"id": FIRST, "k": 10, "offset": 0}
    assert page.inner_text("#ds-out .ds-query") == FIRST
    watched.assert_clean()


def test_the_filter_controls_send_their_filter_and_show_the_api_hits(
    server: str, api: httpx.Client, watched: Watched, types: dict[str, str], lee_docs: Lee, tmp_path: Path
) -> None:
    page = open_search(watched, server)
    stats = api.get(f"/v1/tables/{DOCS}/fields").json()["fields"]
    tags = page.locator("#ds-controls [data-field='tags'] label.ds-chip")
    assert tags.count() == len(stats["tags"]["values"])  # the 50 most common, 8 shown until "more"
    top = stats["tags"]["values"][0]
    assert tags.first.inner_text().split() == [top["value"], str(top["count"])]

    page.click("#ds-controls [data-field='lang'] label.ds-chip:has(input[value='en'])")
    settle(page)
    page.locator("#ds-controls [data-field='year'] input").first.fill("1995")
    page.locator("#ds-controls [data-field='year'] input").first.press("Enter")
    settle(page)
    page.locator("#ds-controls [data-field='long'] label", has_text="yes").click()
    settle(page)
    dates = page.locator("#ds-controls [data-field='published'] input")
    dates.nth(0).fill("2001-03-01")
    dates.nth(1).fill("2001-12-31")
    dates.nth(1).dispatch_event("change")
    settle(page)
    expected = {
        "lang": "en",
        "year": {"gte": 1995},
        "long": True,
        "published": {"gte": "2001-03-01T00:00:00Z", "lt": "2002-01-01T00:00:00Z"},
    }
    assert json.loads(page.input_value("#ds-filter")) == expected
    assert sent(page) == {"id": FIRST, "k": 10, "offset": 0, "filter": expected}
    answer = assert_same_hits(page, api, types)
    records = [lee_docs.record(i) for i in range(300)]
    passing = [
        r
        for r in records
        if r["lang"] == "en" and r["year"] >= 1995 and r["long"] and "2001-03-01" <= r["published"] < "2002-01-01"
    ]
    assert answer["passing"] == len(passing) > 10

    first, later = stats["tags"]["values"][1]["value"], stats["tags"]["values"][12]["value"]
    page.click(f"#ds-controls [data-field='tags'] label.ds-chip:has(input[value='{first}'])")
    settle(page)
    assert sent(page)["filter"]["tags"] == first
    assert_same_hits(page, api, types)
    save_screenshot(page, "explorer-search", tmp_path)  # and as JPEG, the README's format (docs/explorer-search.jpg)
    page.screenshot(path=str(SCREENSHOTS / "explorer-search.jpg"), type="jpeg", quality=75, full_page=True)
    assert not page.is_visible(f"#ds-controls label.ds-chip:has(input[value='{later}'])")
    page.click("#ds-controls [data-field='tags'] button.ds-more-values")
    page.click(f"#ds-controls [data-field='tags'] label.ds-chip:has(input[value='{later}'])")
    settle(page)
    assert sent(page)["filter"]["tags"] == {"in": [first, later]}
    assert_same_hits(page, api, types)

    page.click("#ds-clear")
    settle(page)
    assert page.input_value("#ds-filter") == "" and "filter" not in sent(page)
    assert page.locator("#ds-controls input:checked").count() == 1  # "any" of the boolean
    watched.assert_clean()


def test_paging_moves_by_k_and_the_url_keeps_the_page(
    server: str, api: httpx.Client, watched: Watched, types: dict[str, str]
) -> None:
    spec = {"lang": "en"}
    page = open_search(watched, server, f"&filter={json.dumps(spec)}")
    assert page.locator("#ds-controls [data-field='lang'] input").is_checked()
    page.select_option("#ds-k", "5")
    settle(page)
    whole = search(api, {"id": FIRST, "k": 15, "filter": spec}).json()["hits"]
    assert page.is_disabled("#ds-out .ds-prev")
    for offset in (0, 5, 10):
        assert sent(page) == {"id": FIRST, "k": 5, "offset": offset, "filter": spec}
        assert [h["id"] for h in shown_hits(page)] == [h["id"] for h in whole[offset : offset + 5]]
        assert_same_hits(page, api, types)
        if offset < 10:
            page.click("#ds-out .ds-next")
            settle(page)
    assert watched.state()["offset"] == "10" and watched.state()["per"] == "5"
    page.reload()
    settle(page)
    assert [h["id"] for h in shown_hits(page)] == [h["id"] for h in whole[10:15]]
    page.click("#ds-out .ds-prev")
    settle(page)
    assert sent(page)["offset"] == 5

    last = search(api, {"id": FIRST, "k": 50, "filter": {"tags": "australian"}}).json()
    page.fill("#ds-filter", '{"tags": "australian"}')
    page.press("#ds-filter", "Enter")
    settle(page)
    pages = -(-len(last["hits"]) // 5)
    for _ in range(pages - 1):
        page.click("#ds-out .ds-next")
        settle(page)
    assert [h["id"] for h in shown_hits(page)] == [h["id"] for h in last["hits"][(pages - 1) * 5 :]]
    assert page.is_disabled("#ds-out .ds-next")  # the last page
    watched.assert_clean()


WORD = re.compile(r"[^\W_]+(?:['’][^\W\d_]+)*")


def test_the_keyboard_goes_on_from_the_next_page(server: str, watched: Watched) -> None:
    """Enter on "next" shows the next page with the focus in the hits' place, not back at the top of the page."""
    page = open_search(watched, server)
    page.focus("#ds-out button.ds-next")
    page.keyboard.press("Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('offset') === '10'")
    settle(page)
    assert page.evaluate("document.activeElement.id") == "ds-out"
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.getAttribute('aria-label')")
    assert focused == f"more like this: {shown_hits(page)[0]['id']}"
    watched.assert_clean()


def test_the_card_reads_and_works_without_a_mouse(server: str, watched: Watched) -> None:
    """A search is said in one line, its count, not read out hit by hit; a hit's "more like this" is named by the
    words it shows, then its id (a voice command says the words); a field's "N more" hands the focus to the first
    value it shows, so Tab goes on through them, not past them; a chip's count is legible checked or not (WCAG AA,
    4.5:1 for its small text)."""
    page = open_search(watched, server)
    said = page.get_by_role("status")
    assert said.count() == 1 and said.text_content() == f"More like {FIRST}: {page.text_content('#ds-out .ds-count')}"
    assert page.eval_on_selector("#ds-out .ds-hits", "list => !list.closest('[aria-live], [role=status]')")
    for hit in shown_hits(page):
        button = page.get_by_role("button", name=f"more like this: {hit['id']}", exact=True)
        assert button.count() == 1 and button.inner_text() == "more like this"
    tags = page.locator("#ds-controls [data-field=tags]")
    tags.locator(".ds-more-values").focus()
    page.keyboard.press("Enter")
    names = tags.locator(".ds-chip input").evaluate_all("inputs => inputs.map((i) => i.getAttribute('aria-label'))")
    assert len(names) > 9 and tags.locator(".ds-chip:not([hidden])").count() == len(names)
    focused = "document.activeElement.getAttribute('aria-label')"
    assert page.evaluate(focused) == names[8]  # the first of those the button hid
    page.keyboard.press("Tab")
    assert page.evaluate(focused) == names[9]
    page.keyboard.press("Space")
    page.wait_for_function("() => new URLSearchParams(location.search).has('filter')")
    settle(page)
    assert said.text_content() == f"More like {FIRST}: {page.text_content('#ds-out .ds-count')}"
    assert "pass the filter" in said.text_content()
    checked = text_contrasts(page, "#ds-controls .ds-chip:has(input:checked) .ds-n")
    unchecked = text_contrasts(page, "#ds-controls .ds-chip:not([hidden]):has(input:not(:checked)) .ds-n")
    assert len(checked) == 1 and len(unchecked) > 9
    assert min(checked + unchecked) >= 4.5, (checked, min(unchecked))
    watched.assert_clean()


def test_more_like_this_searches_from_the_hit(
    server: str, api: httpx.Client, watched: Watched, types: dict[str, str]
) -> None:
    page = open_search(watched, server, '&filter={"long": true}')
    second = shown_hits(page)[1]["id"]
    page.locator(f"#ds-out .ds-hit[data-id='{second}'] button.ds-more").click()
    page.wait_for_function("id => new URLSearchParams(location.search).get('doc') === id", arg=second)
    settle(page)
    assert page.input_value("#ds-id") == second
    assert page.inner_text("#ds-out .ds-query") == second
    assert sent(page) == {"id": second, "k": 10, "offset": 0, "filter": {"long": True}}
    answer = assert_same_hits(page, api, types)
    assert second not in [hit["id"] for hit in answer["hits"]]
    query_words = {w.lower() for w in WORD.findall(api.get(f"/v1/tables/{DOCS}/documents/{second}").json()["text"])}
    texts = {hit["id"]: hit["text"] for hit in answer["hits"]}
    marked = 0
    for hit in shown_hits(page):
        hit_words = {w.lower() for w in WORD.findall(texts[hit["id"]])}
        for word in hit["marked"]:
            assert word.lower() in query_words & hit_words and len(word) >= 3, (hit["id"], word)
        marked += len(hit["marked"])
        assert "the" not in {w.lower() for w in hit["marked"]}
    assert marked > 10
    page.go_back()
    page.wait_for_function("() => !new URLSearchParams(location.search).get('doc')")
    settle(page)
    assert sent(page)["id"] == FIRST
    watched.assert_clean()


def test_bad_filters_and_unknown_documents_show_the_api_error(
    server: str, api: httpx.Client, watched: Watched, types: dict[str, str], lee_docs: Lee
) -> None:
    page = open_search(watched, server)
    for text in ('{"yeer": 1990}', '{"published": {"gte": 2001}}', '{"lang": {"gt": "en"}}'):
        page.fill("#ds-filter", text)
        page.press("#ds-filter", "Enter")
        settle(page)
        expected = search(api, {"id": FIRST, "k": 10, "offset": 0, "filter": json.loads(text)})
        assert expected.status_code == 422
        error = expected.json()["error"]
        box = page.locator("#ds-out .error")
        assert box.locator("p").first.inner_text() == error["message"]
        assert box.locator(".ds-code").inner_text() == "invalid_request · HTTP 422"
        assert page.locator("#ds-out .ds-hit").count() == 0
    assert page.is_visible("#ds-hand")  # the controls cannot show these
    page.fill("#ds-filter", '{"not": {"lang": "en"}}')
    page.press("#ds-filter", "Enter")
    settle(page)
    assert page.is_visible("#ds-hand") and sent(page)["filter"] == {"not": {"lang": "en"}}
    answer = assert_same_hits(page, api, types)
    assert answer["passing"] == sum(r is None for r in lee_docs.fields["lang"])
    page.fill("#ds-filter", '{"lang": "en"')
    page.press("#ds-filter", "Enter")
    settle(page)
    assert page.inner_text("#ds-out .error").startswith("The filter is not valid JSON")
    page.fill("#ds-filter", "")
    page.fill("#ds-id", "lee-999")
    page.press("#ds-id", "Enter")
    settle(page)
    missing = search(api, {"id": "lee-999"}).json()["error"]
    assert page.locator("#ds-out .error p").first.inner_text() == missing["message"]
    assert page.inner_text("#ds-out .ds-code") == "unknown_document · HTTP 404"
    watched.assert_clean(expected_404=("/documents/lee-999", f"/{DOCS}/search"), expected_422=(f"/{DOCS}/search",))
    page.route(f"**/{DOCS}/search", lambda route: route.abort())  # the server gone mid-use: what to do, no status
    page.fill("#ds-id", FIRST)
    page.press("#ds-id", "Enter")
    settle(page)
    message = page.inner_text("#ds-out .error p")
    assert message.startswith("network error: the server could not be reached (Failed to fetch)")
    assert message.endswith("check that it is running, then try again")
    assert page.locator("#ds-out .ds-code").count() == 0 and len(watched.failed) == 1


ENCODER = """async ([words, path]) => {
    const module = await import(path);
    module.textSearch.query = async (table, text) => {
        const rows = [];
        for (const word of text.toLowerCase().match(/[a-z]+/g)) {
            const response = await fetch(`/v1/tables/${words}/tokens/${encodeURIComponent(word)}`);
            if (!response.ok) return { ok: false, status: response.status, data: await response.json() };
            rows.push((await response.json()).vector);
        }
        const mean = rows[0].map((_, i) => rows.reduce((sum, row) => sum + row[i], 0) / rows.length);
        return { ok: true, query: { vector: mean } };
    };
    explorer.documentSearch.enableText();
}"""


def test_a_text_search_plugs_into_the_text_box(
    server: str, api: httpx.Client, watched: Watched, types: dict[str, str]
) -> None:
    """The hook for text queries: with an encoder (here the mean of the words table's rows, as the Lee vectors
    are made), the text box turns on, its text is searched as a vector and each hit marks the query's words."""
    page = open_search(watched, server)
    page.evaluate(ENCODER, [WORDS, DOCUMENTS_JS])
    assert not page.is_disabled("#ds-text") and not page.is_visible("#ds-text-note")
    page.fill("#ds-text", "fire firefighters wind")
    page.press("#ds-text", "Enter")
    settle(page)
    body = sent(page)
    rows = [api.get(f"/v1/tables/{WORDS}/tokens/{w}").json()["vector"] for w in ("fire", "firefighters", "wind")]
    np.testing.assert_allclose(body["vector"], np.mean(rows, axis=0), rtol=1e-6, atol=1e-7)
    assert page.inner_text("#ds-out .ds-query") == "“fire firefighters wind”"
    answer = assert_same_hits(page, api, types)
    assert sum("fire" in hit["text"].lower() for hit in answer["hits"][:5]) >= 3
    marks = {m.lower() for hit in shown_hits(page) for m in hit["marked"]}
    assert marks and marks <= {"fire", "firefighters", "wind"}
    page.fill("#ds-text", "zzqqxv")
    page.press("#ds-text", "Enter")
    settle(page)
    assert page.inner_text("#ds-out .ds-code") == "unknown_token · HTTP 404"
    watched.assert_clean(expected_404=("/tokens/zzqqxv",))


# What each mode's score is, as a hit's score says on hover.
SCORE_TITLES = {
    "vector": "cosine with the query",
    "keyword": "BM25 score of the query's words",
    "hybrid": "fused score (reciprocal rank fusion)",
}


def score_titles(page: Any) -> list[str]:
    return page.eval_on_selector_all("#ds-out .ds-hit .score", "spans => spans.map(s => s.title)")


def fused_ranks(page: Any) -> list[str]:
    """Each hit's ranks in the lists fused as its head shows them, in its text (not on hover only: a keyboard,
    touch or screen-reader user reads them too); None for a hit of no fused list, "hidden" for ranks not shown."""
    return page.eval_on_selector_all(
        "#ds-out .ds-hit-head",
        "heads => heads.map(h => h.querySelector('.ds-ranks')).map(r => !r ? null : r.checkVisibility() ? r.innerText"
        " : 'hidden')",
    )


def test_text_searches_by_the_tables_own_modes(
    server: str, api: httpx.Client, watched: Watched, types: dict[str, str]
) -> None:
    """A table embedded at import by the server's encoder searches text by meaning, keyword or both (hybrid by
    default); the hits are the API's answer to the request sent, each text's words marked."""
    page = watched.page
    page.goto(f"{server}/?table={EMBEDDED}")
    settle(page)
    assert page.eval_on_selector_all("#ds-mode option", "os => os.map(o => o.value)") == [
        "vector",
        "keyword",
        "hybrid",
    ]
    assert page.input_value("#ds-mode") == "hybrid" and page.is_visible("#ds-mode")
    for mode in ("hybrid", "keyword", "vector"):
        page.select_option("#ds-mode", mode)
        page.fill("#ds-text", "firefighters battle bushfires near Sydney")
        page.press("#ds-text", "Enter")
        settle(page)
        body = sent(page)
        assert body == {"text": "firefighters battle bushfires near Sydney", "mode": mode, "k": 10, "offset": 0}
        answer = api.post(f"/v1/tables/{EMBEDDED}/search", json=body).json()
        assert [hit["id"] for hit in shown_hits(page)] == [hit["id"] for hit in answer["hits"]]
        assert score_titles(page) == [SCORE_TITLES[mode]] * len(answer["hits"])
        hits = answer["hits"]
        if mode == "hybrid":  # each hit's rank in each list fused, beside its score
            ranks = [", ".join(f"{name} no. {rank}" for name, rank in hit["ranks"].items()) for hit in hits]
            assert fused_ranks(page) == ranks and any(len(hit["ranks"]) == 2 for hit in hits), ranks
        else:
            assert fused_ranks(page) == [None] * len(hits), mode
        if mode != "vector":  # BM25 finds the fire stories; a mean of GloVe rows is a weaker guide
            assert sum("fire" in hit["text"].lower() for hit in answer["hits"][:5]) >= 3, mode
        assert not page.is_visible("#ds-out .ds-fallback")
    # A word the encoder does not know (10 of the stories; not one of the 20,000 words): hybrid falls back to
    # keyword, and the card says so.
    page.select_option("#ds-mode", "hybrid")
    page.fill("#ds-text", "canyoning")
    page.press("#ds-text", "Enter")
    settle(page)
    answer = api.post(f"/v1/tables/{EMBEDDED}/search", json=sent(page)).json()
    assert answer["fallback"]["mode"] == "keyword" and len(answer["hits"]) == 10
    assert [hit["id"] for hit in shown_hits(page)] == [hit["id"] for hit in answer["hits"]]
    assert score_titles(page) == [SCORE_TITLES["keyword"]] * len(answer["hits"])  # BM25's scores
    assert fused_ranks(page) == [None] * len(answer["hits"])  # nothing fused
    note = page.inner_text("#ds-out .ds-fallback")
    assert note.startswith("Searched by keyword only: text 'canyoning': no word of it is known") and "(small)" in note
    assert set(page.locator("#ds-out .ds-shared").all_inner_texts()) == {"1 shared word"}  # the one word asked
    watched.assert_clean()


def test_picking_another_mode_searches_the_text_again(server: str, api: httpx.Client, watched: Watched) -> None:
    """The hits shown are always the picked mode's: picking keyword after a hybrid search searches again, without
    Enter; with the box empty there is no text to search, and the hits of the document stay."""
    page = watched.page
    page.goto(f"{server}/?table={EMBEDDED}")
    settle(page)
    page.fill("#ds-text", "bushfires near Sydney")
    page.press("#ds-text", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('mode') === 'hybrid'")
    settle(page)
    page.select_option("#ds-mode", "keyword")
    page.wait_for_function("() => new URLSearchParams(location.search).get('mode') === 'keyword'")
    settle(page)
    body = sent(page)
    assert body == {"text": "bushfires near Sydney", "mode": "keyword", "k": 10, "offset": 0}
    answer = api.post(f"/v1/tables/{EMBEDDED}/search", json=body).json()
    assert [hit["id"] for hit in shown_hits(page)] == [hit["id"] for hit in answer["hits"]]
    page.fill("#ds-text", "")
    page.press("#ds-text", "Enter")
    page.wait_for_function("() => !new URLSearchParams(location.search).has('text')")
    settle(page)
    assert "id" in sent(page)
    searches: list[str] = []
    page.on("request", lambda request: request.url.endswith("/search") and searches.append(request.url))
    page.select_option("#ds-mode", "vector")
    page.wait_for_timeout(300)  # a search the pick started would be on its way at once
    assert searches == []
    watched.assert_clean()


def test_a_text_query_is_kept_in_the_url(server: str, watched: Watched) -> None:
    """The text and its mode go into the URL: a reload searches them again, more like this leaves them and Back
    brings them back."""
    page = watched.page
    page.goto(f"{server}/?table={EMBEDDED}")
    settle(page)
    page.select_option("#ds-mode", "keyword")
    page.fill("#ds-text", "bushfires Sydney")
    page.press("#ds-text", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('text') === 'bushfires Sydney'")
    settle(page)
    assert watched.state()["mode"] == "keyword"
    hits = [hit["id"] for hit in shown_hits(page)]
    page.reload()
    settle(page)
    assert (page.input_value("#ds-text"), page.input_value("#ds-mode")) == ("bushfires Sydney", "keyword")
    assert sent(page) == {"text": "bushfires Sydney", "mode": "keyword", "k": 10, "offset": 0}
    assert [hit["id"] for hit in shown_hits(page)] == hits
    page.locator(f"#ds-out .ds-hit[data-id='{hits[0]}'] button.ds-more").click()
    page.wait_for_function("() => !new URLSearchParams(location.search).get('text')")
    settle(page)
    assert sent(page)["id"] == hits[0] and page.input_value("#ds-text") == ""
    page.go_back()
    page.wait_for_function("() => new URLSearchParams(location.search).get('text') === 'bushfires Sydney'")
    settle(page)
    assert sent(page)["text"] == "bushfires Sydney" and page.input_value("#ds-text") == "bushfires Sydney"
    # A filter control searches the text in the box, as Enter does, and the URL says so.
    page.fill("#ds-text", "firefighters")
    page.locator("#ds-controls [data-field='long'] label", has_text="yes").click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('text') === 'firefighters'")
    settle(page)
    assert sent(page) == {"text": "firefighters", "mode": "keyword", "k": 10, "offset": 0, "filter": {"long": True}}
    # A text too long for a link is searched but left out of the URL (a reload would be refused: 414), and the
    # card names it by its start.
    long = "bushfires near Sydney " * 1000
    page.fill("#ds-text", long)
    page.press("#ds-text", "Enter")
    page.wait_for_function("() => !new URLSearchParams(location.search).get('text')")
    settle(page)
    assert sent(page)["text"] == long.strip() and watched.state()["mode"] == "keyword"
    assert page.inner_text("#ds-out .ds-query") == f"“{long[:80]}…”"
    watched.assert_clean()


def test_phone_width_has_no_horizontal_scroll(server: str, browser: Any, api: httpx.Client) -> None:
    phone = Watched(browser, width=375, height=812)
    try:
        page = open_search(phone, server)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        phone.assert_clean()
    finally:
        phone.close()


def test_a_table_written_to_opens_on_a_live_document_and_counts_the_live_ones(written: str, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{written}/?table={DOCS}")
    settle(page)
    live = real_server.HTTP.get(f"{written}/v1/tables/{DOCS}/fields").json()["rows"]
    assert live == 301
    example = page.input_value("#ds-id")  # the first document was deleted: the card opens on a live one
    assert example != FIRST and page.locator("#ds-out .error").count() == 0
    assert real_server.HTTP.get(f"{written}/v1/tables/{DOCS}/documents/{example}").status_code == 200
    assert sent(page)["id"] == example and page.locator("#ds-out .ds-hit").count() == 10
    assert "301 documents, no filter" in page.inner_text("#ds-out .ds-count")
    page.click("#ds-controls [data-field='lang'] label.ds-chip:has(input[value='en'])")
    page.wait_for_function("() => new URLSearchParams(location.search).get('filter')")
    settle(page)
    passing = real_server.HTTP.post(f"{written}/v1/tables/{DOCS}/search", json=sent(page)).json()["passing"]
    assert f"{passing:,} of 301 documents pass the filter" in page.inner_text("#ds-out .ds-count")
    watched.assert_clean(expected_404=(f"documents/{FIRST}",))


def test_a_field_named_proto_filters_with_its_chips(written: str, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{written}/?table=proto")
    settle(page)
    assert page.is_hidden("#ds-hand")  # no filter: nothing the controls cannot show
    page.click("#ds-controls [data-field='__proto__'] label.ds-chip:has(input[value='a'])")
    page.wait_for_function("() => new URLSearchParams(location.search).get('filter')")
    settle(page)
    assert sent(page)["filter"] == {"__proto__": "a"}
    assert page.input_value("#ds-filter") == '{\n  "__proto__": "a"\n}'
    answer = real_server.HTTP.post(f"{written}/v1/tables/proto/search", json=sent(page)).json()
    hits = shown_hits(page)
    assert [h["id"] for h in hits] == [h["id"] for h in answer["hits"]] and len(hits) == 9  # p0 is the query
    values = page.locator("#ds-out .ds-hit .ds-values li[data-field='__proto__'] .ds-value").all_inner_texts()
    assert values == ["a"] * 9
    page.reload()  # the filter from the URL sets the chip again
    settle(page)
    assert page.is_checked("#ds-controls [data-field='__proto__'] input[value='a']") and page.is_hidden("#ds-hand")
    watched.assert_clean()


def test_a_document_whose_id_is_a_dot_marks_the_words_it_shares(written: str, watched: Watched) -> None:
    """A browser takes "." and ".." in a URL's path, escaped as %2E or not, for steps of the path: the card asks for
    the query document's text in a body, so that such a document's shared words are marked as any other's."""
    page = watched.page
    for id in (".", ".."):
        page.goto(f"{written}/?{urlencode({'table': 'dots', 'doc': id})}")
        settle(page)
        assert sent(page)["id"] == id and page.locator("#ds-out .ds-hit").count() == 10
        assert sum(len(hit["marked"]) for hit in shown_hits(page)) > 10
    watched.assert_clean()


def test_a_vector_stores_metadata_is_shown_cut_and_filters_whole(written: str, lee_docs: Lee, watched: Watched) -> None:
    """A LlamaIndex node's metadata is a JSON string of hundreds of characters in the field ``metadata``: its
    chip and its value in each hit are cut (the whole as the tooltip), the chip filters by the whole value, and the
    filter column stays a column of chips, not screens of JSON."""
    from llama_index.core.schema import TextNode

    from service_client import Client
    from service_client.llamaindex import EmbeddingSearchVectorStore

    store = EmbeddingSearchVectorStore(Client(written, api_key=WRITE_KEY), "nodes")
    store.add(
        [
            TextNode(
                id_=f"n{i}", text=lee_docs.texts[i], embedding=lee_docs.vectors[i].tolist(), metadata={"topic": "news"}
            )
            for i in range(1, 13)
        ]
    )
    store.delete_nodes(["placeholder"])
    page = watched.page
    page.goto(f"{written}/?table=nodes&per=20")
    settle(page)
    metadata = real_server.HTTP.get(f"{written}/v1/tables/nodes/fields").json()["fields"]["metadata"]["values"]
    whole = [value["value"] for value in metadata]
    assert len(whole) == 12 and min(map(len, whole)) > 300  # each node's JSON
    chips = page.locator("#ds-controls [data-field='metadata'] label.ds-chip")
    assert chips.count() == 12
    page.click("#ds-controls [data-field='metadata'] .ds-more-values")
    other = "n5" if page.input_value("#ds-id") != "n5" else "n6"  # not the query document, which is left out
    value = real_server.HTTP.get(f"{written}/v1/tables/nodes/documents/{other}").json()["fields"]["metadata"]
    at = page.eval_on_selector_all(
        "#ds-controls [data-field='metadata'] label.ds-chip input",
        "(inputs, v) => inputs.findIndex(i => i.value === v)",
        value,
    )
    chip = chips.nth(at)
    assert value in whole and chip.get_attribute("title") == value
    assert chip.inner_text().removesuffix("1").strip() == cut(value)
    assert (chip.bounding_box() or {})["height"] < 80  # three lines at most, not 450 px of JSON
    chip.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('filter')")
    settle(page)
    assert sent(page)["filter"] == {"metadata": value}
    hits = page.locator("#ds-out .ds-hit")
    assert hits.count() == 1 and hits.first.get_attribute("data-id") == other
    shown_value = hits.first.locator("li[data-field='metadata'] .ds-value")
    assert shown_value.inner_text() == cut(value) and shown_value.get_attribute("title") == value
    watched.assert_clean()


def test_a_10_mb_text_is_shown_and_marked_within_its_first_100000_characters(written: str, watched: Watched) -> None:
    """A text search whose words a 10 MB hit holds 700,000 times shows the hit (its marks as one call's arguments
    overflowed the call stack: a page error and no hits); its whole text, written when opened, is marked within its
    first 100,000 characters (laying out 700,000 marks took 30 s)."""
    page = watched.page
    page.goto(f"{written}/?table=long&text=licence+permission&mode=keyword")
    settle(page)
    answer = real_server.HTTP.post(f"{written}/v1/tables/long/search", json=sent(page)).json()
    hits = shown_hits(page)
    assert [h["id"] for h in hits] == [h["id"] for h in answer["hits"]] == ["long", "short"]
    start = [word for word in re.findall(r"\w+", hits[0]["snippet"]) if word in ("licence", "permission")]
    assert hits[0]["marked"] == start and len(start) > 10 and hits[1]["marked"] == ["licence"]
    whole = "#ds-out .ds-hit[data-id='long'] .ds-whole"
    assert page.eval_on_selector(f"{whole} p", "p => p.childNodes.length") == 0  # not written until opened
    page.click(f"{whole} summary")
    page.wait_for_selector(f"{whole} p mark")
    assert page.eval_on_selector(f"{whole} p", "p => p.textContent") == LONG_TEXT
    marks = [m.group() for m in re.finditer(r"\w+", LONG_TEXT) if m.start() < 100_000 and m.group() != "the"]
    marks = [word for word in marks if word in ("licence", "permission")]
    assert page.eval_on_selector_all(f"{whole} p mark", "ms => ms.map(m => m.textContent)") == marks
    watched.assert_clean()
