"""The explorer page on model-token tables whose labels are not the text they stand for, in headless Chromium
against a real ``embedding-serve``: a small byte-level BPE model (``Ġheart``, ``å¿ĥ`` for 心) and a small
SentencePiece one (``▁need``). A listed row is shown as the API's ``readable`` form, and still searched by its label.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from index.build.sources import ReadOptions
from index.build.sources import huggingface as hf
from index.build.writer import build_table
from tests.index.build.test_huggingface import write_model
from tests.service import real_server
from tests.service.browser import Watched

BPE, SP = "tiny-bpe", "tiny-sp"
HEART = "心"  # one row of the byte-level table, labelled with its UTF-8 bytes' stand-ins


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("explorer-tokens")
    for name, scheme, tensor in ((BPE, "byte-bpe", "model.embed_tokens.weight"), (SP, "sp-unigram", "shared.weight")):
        model = write_model(root / name, scheme, "F32", tensor, sharded=False, output=None)
        build_table(hf.read(model.directory, ReadOptions()), data_dir=root / "data", name=name, source={"format": "hf"})
    with real_server.running(root / "data", root / "server.log") as running:
        yield running.base


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
