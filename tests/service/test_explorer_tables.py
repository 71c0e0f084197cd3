"""The explorer page, in headless Chromium against a real ``embedding-serve``, on tables unlike the other modules':
model-token tables whose labels are not the text they stand for, a small byte-level BPE model (``Ġheart``, ``å¿ĥ``
for 心) and a small SentencePiece one (``▁need``), whose listed rows are shown as the API's ``readable`` form and
still searched by their labels; a documents table whose field values are long (file paths); and a table
withdrawn while the page is open.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from index.build.sources import ReadOptions, read_source
from index.build.sources import huggingface as hf
from index.build.writer import build_table
from tests.index.build.test_huggingface import write_model
from tests.lee import write_jsonl
from tests.service import real_server
from tests.service.browser import Watched

BPE, SP, FILES = "tiny-bpe", "tiny-sp", "files"
HEART = "心"  # one row of the byte-level table, labelled with its UTF-8 bytes' stand-ins


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_server.Server]:
    root = tmp_path_factory.mktemp("explorer-tokens")
    for name, scheme, tensor in ((BPE, "byte-bpe", "model.embed_tokens.weight"), (SP, "sp-unigram", "shared.weight")):
        model = write_model(root / name, scheme, "F32", tensor, sharded=False, output=None)
        build_table(hf.read(model.directory, ReadOptions()), data_dir=root / "data", name=name, source={"format": "hf"})
    vectors = np.random.default_rng(3).standard_normal((200, 8)).round(4)
    paths = [f"/usr/share/doc/libpackage{i % 7}withalongname/changelog.Debian.gz" for i in range(200)]  # no hyphen
    records = [{"id": f"d{i}", "vector": v.tolist(), "file": paths[i]} for i, v in enumerate(vectors)]
    raw, fmt = read_source(write_jsonl(root / "files.jsonl", records), "documents")
    build_table(raw, data_dir=root / "data", name=FILES, source={"format": fmt})
    with real_server.running(root / "data", root / "server.log") as running:
        yield running


@pytest.fixture(scope="module")
def server(served: real_server.Server) -> str:
    return served.base


def shown_as(row: dict) -> str:
    """What the page names a listed row: its readable form, a space as ␣ and a control character by its code;
    its label when the readable form is the label or only drops a prefix."""
    token, readable = row["token"], row["readable"]
    if token.endswith(readable):
        return token
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"U+{ord(m[0]):04X}", readable.replace(" ", "␣"))


def listed(watched: Watched, base: str, table: str, word: str) -> list[str]:
    watched.page.goto(f"{base}/?table={table}&word={word}")
    watched.page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    watched.page.wait_for_load_state("networkidle")  # the other cards too: leaving earlier would cut their requests
    return watched.page.locator("#neighbours-out .scores button.token").all_inner_texts()


def test_listed_tokens_read_as_their_text_and_search_by_their_label(server: str, watched: Watched) -> None:
    with httpx.Client(base_url=server, timeout=30) as api:
        heart = api.get(f"/v1/tables/{BPE}/tokens/{HEART}").json()
        assert heart["readable"] == HEART and heart["token"] != HEART
        # A row whose neighbours hold 心: the page must show it as 心, not as its byte stand-ins.
        around = api.get(f"/v1/tables/{BPE}/neighbors", params={"token": heart["token"], "k": 8}).json()["neighbors"]

        def lists_heart(row: int) -> bool:
            rows = api.get(f"/v1/tables/{BPE}/neighbors", params={"id": row, "k": 8}).json()["neighbors"]
            return heart["id"] in [n["id"] for n in rows]

        word = next(n["token"] for n in around if lists_heart(n["id"]))
        answer = api.get(f"/v1/tables/{BPE}/neighbors", params={"token": word, "k": 8}).json()["neighbors"]
        the = api.get(f"/v1/tables/{BPE}/neighbors", params={"token": "the", "k": 8}).json()["neighbors"]
        need = api.get(f"/v1/tables/{SP}/neighbors", params={"token": "need", "k": 8}).json()["neighbors"]

    shown = listed(watched, server, BPE, word)
    assert shown == [shown_as(n) for n in answer] and HEART in shown
    assert not any("Ġ" in text for text in shown)
    shown = listed(watched, server, BPE, "the")
    assert shown == [shown_as(n) for n in the] and not any("Ġ" in text for text in shown)
    marked = [n for n in the if n["token"].startswith("Ġ")]
    assert marked, "a word-start token among the neighbours"
    name = re.compile(f"^{re.escape(shown_as(marked[0]))}$")
    watched.page.locator("#neighbours-out .scores button.token", has_text=name).first.click()
    # The row's own label is searched: "m" would be another row than "Ġm".
    word_is = "w => new URLSearchParams(location.search).get('word') === w"
    watched.page.wait_for_function(word_is, arg=marked[0]["token"])

    shown = listed(watched, server, SP, "need")
    assert shown == [shown_as(n) for n in need] and not any("▁" in text for text in shown)
    assert any(text.startswith("␣") for text in shown)
    watched.assert_clean(expected_404=("/analogy", "/similarity?a=cat"))  # the opening words: few are tokens here


@pytest.mark.parametrize("width", [1280, 375])
def test_a_long_field_value_keeps_its_count_on_one_line(server: str, browser: object, width: int) -> None:
    """A filter chip's value may wrap anywhere (a file path), its count of documents never: "28,143" cut into
    "28,14" and "3" reads as two numbers."""
    watched = Watched(browser, width=width)
    watched.page.goto(f"{server}/?table={FILES}")
    watched.page.wait_for_selector(".ds-chip .ds-n")
    lines = watched.page.evaluate("""[...document.querySelectorAll(".ds-chip:not([hidden]) .ds-n")].map((n) => {
        const range = document.createRange();
        range.selectNodeContents(n);
        return range.getClientRects().length;
    })""")
    wrapped = watched.page.evaluate("""[...document.querySelectorAll(".ds-chip:not([hidden])")]
        .filter((chip) => chip.getBoundingClientRect().height > 30).length""")
    assert lines and set(lines) == {1} and wrapped, (lines, wrapped)  # long values wrapped, their counts whole
    watched.assert_clean()
    watched.close()


def test_hits_with_long_field_values_fit_a_phone(server: str, browser: object) -> None:
    """At 375 px a hit's file path wraps inside the card: the page does not scroll sideways."""
    watched = Watched(browser, width=375)
    watched.page.goto(f"{server}/?table={FILES}&doc=d0")
    watched.page.wait_for_selector("#ds-out:not([aria-busy]) .ds-hit .ds-values")
    assert watched.page.evaluate("document.documentElement.scrollWidth") <= 375
    watched.assert_clean()
    watched.close()


def test_a_filter_chip_is_named_with_its_count_apart(server: str, watched: Watched) -> None:
    """A screen reader names a chip's checkbox by its value and its count of documents, not the two run together
    ("…changelog.Debian.gz29")."""
    watched.page.goto(f"{server}/?table={FILES}")
    watched.page.wait_for_selector(".ds-chip input")
    path = "/usr/share/doc/libpackage0withalongname/changelog.Debian.gz"
    chip = watched.page.get_by_role("checkbox", name=f"{path} (29 documents)", exact=True)
    assert chip.count() == 1
    chip.check()  # the chip it names filters to those 29
    watched.page.wait_for_function("document.querySelector('#ds-out .ds-count')?.textContent.startsWith('29 of 200')")
    watched.assert_clean()


def reloaded(served: real_server.Server, table: str, status: int) -> None:
    """SIGHUP (the server reloads its data directory), then wait until ``table`` answers ``status``."""
    served.process.send_signal(signal.SIGHUP)
    url = f"{served.base}/v1/tables/{table}/neighbors"
    real_server.wait_for(
        lambda: real_server.HTTP.get(url, params={"token": "need"}).status_code == status,
        what=f"{table} answering {status}",
    )


def test_a_table_withdrawn_while_open_is_said_and_its_names_are_no_words(
    served: real_server.Server, watched: Watched
) -> None:
    """The cards of a table taken away meanwhile say so; the API's suggestions there are other tables' names, not
    words to search (a click searched the word "tiny-bpe"). Put back, the table answers again."""
    page = watched.page
    listed(watched, served.base, SP, "need")
    data = served.log_path.parent / "data"
    (data / SP).rename(data.parent / "withdrawn")
    try:
        reloaded(served, SP, 404)
        page.fill("#word", "no")
        page.press("#word", "Enter")
        page.wait_for_selector("#neighbours-out:not([aria-busy]) .error")
        assert f"no table named '{SP}'" in page.inner_text("#neighbours-out")
        assert BPE in page.inner_text("#neighbours-out .chips")  # named, as the picker's tables are
        assert page.locator("#neighbours-out button").count() == 0
    finally:
        (data.parent / "withdrawn").rename(data / SP)
    reloaded(served, SP, 200)
    page.press("#word", "Enter")
    page.wait_for_selector("#neighbours-out:not([aria-busy]) .scores")
    watched.assert_clean(expected_404=("/analogy", "/similarity?a=cat", f"/{SP}/"))
