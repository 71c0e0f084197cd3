"""A real server's worker tokenizes with the tokenizer of the version it loaded: the next version of its model-token
table, published under the table's name with another tokenizer before the worker's first text, is not read until the
worker loads that version (SIGHUP), and then wholly."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from index.store.tokens import TOKENIZER
from tests.index.engine.test_loaded_version import linked, next_version, swapped_vocabulary
from tests.minilm import MINILM
from tests.service.real_server import HTTP, running, wait_for

TEXT = "hello world"


def tokens(base: str) -> list[Any]:
    answer = HTTP.post(f"{base}/v1/tables/{MINILM}/tokenize", json={"text": TEXT}, timeout=120)
    assert answer.status_code == 200, answer.text
    return [(token["id"], token["token"]) for token in answer.json()["tokens"]]


def test_a_worker_tokenizes_with_its_versions_tokenizer_until_it_loads_the_next(
    tmp_path: Path, minilm_data_dir: Path
) -> None:
    data = tmp_path / "data"
    directory = linked(minilm_data_dir / MINILM, data)
    with running(data, tmp_path / "server.log") as server:
        next_version(data, MINILM, {TOKENIZER: swapped_vocabulary(directory / TOKENIZER, "hello", "world")})
        hello, world = 7592, 2088  # MiniLM's ids of the two words, its rows' labels
        assert tokens(server.base) == [(hello, "hello"), (world, "world")]  # the loaded version's, never a mix
        server.process.send_signal(signal.SIGHUP)
        # The next version's tokenizer gives "hello" the id of the row labelled "world", and its rows are the loaded
        # version's: tokenized as that version's, whole.
        wait_for(lambda: tokens(server.base) == [(world, "world"), (hello, "hello")], 120, "the next version served")
