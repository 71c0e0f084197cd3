"""Random document searches against an oracle (``tests/service/search_fuzz.py``), seeded.

Two tables: the Lee corpus with its fields (``tests/lee.py``), and ``typed``, 240 documents whose fields are of
every type with nulls and missing keys, Unicode text, integers past 2**53, negative zero, empty tag lists. Each
request's answer (hits, scores, ranks, ``passing``, or the error's status and code) must be the oracle's: in
process through the app, then a sample over HTTP from a real server.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.build.sources import read_source
from index.build.writer import build_table
from index.engine.table import Table
from tests.lee import TYPES, Lee, write_jsonl
from tests.service import real_server
from tests.service.conftest import client_for
from tests.service.search_fuzz import Corpus, check, check_scroll, request, scroll_request

SEED = 20261207
# Requests per table (SEARCH_FUZZ_REQUESTS sets more for a longer hunt); a sample of them over HTTP.
IN_PROCESS = int(os.environ.get("SEARCH_FUZZ_REQUESTS", "800"))
OVER_HTTP = max(1, IN_PROCESS // 8)
TYPED_TYPES = {
    "s": "string",
    "n": "integer",
    "f": "float",
    "b": "boolean",
    "tags": "string_list",
    "t": "timestamp",
}
VOCABULARY = [
    "fire",
    "storm",
    "river",
    "café",
    "naïve",
    "Straße",
    "日本語",
    "ΣΟΦΙΑ",
    "garden",
    "yacht",
    "police",
    "court",
    "minister",
    "rain",
    "the",
    "of",
]


def typed_corpus() -> Corpus:
    """240 documents: random unit-ish vectors of 16 dimensions and fields of every type, nulls and gaps."""
    rng = random.Random(SEED)
    count = 240
    strings = ["en", "fr", "é", "日本", "", "Ünïcode", "en ", "e\u0301", None]
    integers = [0, -1, 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**62, INT64_MIN, 2**63 - 1, 7, None]
    floats = [0.5, -0.0, 0.0, 1e300, -1.5, 9007199254740992.0, 0.1, 1e-300, None]
    tag_pool = ["gov", "government", "Ünï", "a", "b", "日本"]
    start = dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
    fields: dict[str, list[Any]] = {name: [] for name in TYPED_TYPES}
    for i in range(count):
        fields["s"].append(rng.choice(strings))
        fields["n"].append(rng.choice(integers))
        fields["f"].append(0.5 if i == 0 else rng.choice(floats))
        fields["b"].append(rng.choice([True, False, None]))
        fields["tags"].append(None if rng.random() < 0.15 else rng.sample(tag_pool, rng.choice([0, 1, 2, 3])))
        seconds = rng.choice([0, 1, 86_400, 86_400 * 400, 37 * 3600 * i])
        fields["t"].append(None if rng.random() < 0.1 else start + dt.timedelta(seconds=seconds))
    texts = [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 12))) for _ in range(count)]
    vectors = np.random.default_rng(SEED).normal(size=(count, 16)).astype(np.float32)
    ids = [i * 7 + 3 for i in range(count)]
    return Corpus("typed", Lee(ids, texts, vectors, fields), TYPED_TYPES, integer_ids=True, words=VOCABULARY)


INT64_MIN = -(2**63)


def typed_records(corpus: Corpus) -> list[dict[str, Any]]:
    """The documents as JSON Lines records: a null field is left out of every third record that has one."""
    records = []
    for i, ident in enumerate(corpus.lee.ids):
        record: dict[str, Any] = {"id": ident, "text": corpus.lee.texts[i], "vector": corpus.lee.vectors[i].tolist()}
        for name, column in corpus.lee.fields.items():
            value = column[i]
            if isinstance(value, dt.datetime):
                value = value.strftime("%Y-%m-%dT%H:%M:%SZ")
            if value is not None or i % 3:
                record[name] = value
        records.append(record)
    return records


def lee_corpus(lee: Lee) -> Corpus:
    common = Counter(w for text in lee.texts for w in text.lower().split() if w.isalpha())
    return Corpus("lee", lee, dict(TYPES), words=[w for w, _ in common.most_common(400)])


@pytest.fixture(scope="module")
def corpora(lee_docs: Lee) -> list[Corpus]:
    return [lee_corpus(lee_docs), typed_corpus()]


@pytest.fixture(scope="module")
def data_dir(lee_data_dir: Path, corpora: list[Corpus], tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("fuzz-data")
    shutil.copytree(lee_data_dir / "lee", directory / "lee")
    path = write_jsonl(directory.parent / "typed.jsonl", typed_records(corpora[1]))
    raw, fmt = read_source(path, "documents")
    build_table(raw, data_dir=directory, name="typed", source={"format": fmt, "path": path.name})
    return directory


Post = Callable[[str, dict[str, Any]], tuple[int, dict[str, Any]]]  # (route, body) -> (status, JSON answer)


def run(corpus: Corpus, count: int, post: Post) -> Counter[str]:
    """``count`` random searches of ``corpus`` and ``count // 4`` scroll pages, sent by ``post``; what kinds were
    checked. Fails on the first answer that is not the oracle's, showing the request."""
    rng = random.Random(f"{SEED}-{corpus.name}-{count}")
    kinds: Counter[str] = Counter()
    for _ in range(count):
        body = request(rng, corpus)
        status, answer = post(f"/v1/tables/{corpus.name}/search", body)
        problem = check(corpus, body, status, answer)
        assert problem is None, f"{json.dumps(body)}\n{problem}"
        kinds[f"{status} {body.get('mode', 'vector')}" + (" filtered" if "filter" in body else "")] += 1
    for _ in range(count // 4):
        body = scroll_request(rng, corpus)
        status, answer = post(f"/v1/tables/{corpus.name}/documents/scroll", body)
        problem = check_scroll(corpus, body, status, answer)
        assert problem is None, f"scroll {json.dumps(body)}\n{problem}"
        kinds[f"{status} scroll"] += 1
    return kinds


def test_random_searches_in_process_are_the_oracles(data_dir: Path, corpora: list[Corpus]) -> None:
    with client_for(data_dir=data_dir) as client:

        def post(route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            response = client.post(route, json=body)
            return response.status_code, response.json()

        for corpus in corpora:
            kinds = run(corpus, IN_PROCESS, post)
            print(corpus.name, sum(kinds.values()), dict(sorted(kinds.items())))
            assert kinds["200 vector filtered"] and kinds["422 vector filtered"] + kinds["422 hybrid filtered"]


def test_random_searches_over_http_are_the_oracles(data_dir: Path, corpora: list[Corpus], tmp_path: Path) -> None:
    with real_server.running(data_dir, tmp_path / "serve.log") as server:

        def post(route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            response = real_server.HTTP.post(f"{server.base}{route}", json=body, timeout=30)
            return response.status_code, response.json()

        for corpus in corpora:
            kinds = run(corpus, OVER_HTTP, post)
            print(corpus.name, sum(kinds.values()), dict(sorted(kinds.items())))


def test_in_takes_negative_zero_as_zero(data_dir: Path, corpora: list[Corpus]) -> None:
    """``eq`` and IEEE call -0.0 and 0.0 equal; Arrow's ``is_in`` hashes them apart, so ``in`` missed the
    documents stored as the other zero."""
    table = Table.load(data_dir / "typed")
    zeros = [i for i, f in enumerate(corpora[1].lee.fields["f"]) if f == 0]
    assert {math.copysign(1, corpora[1].lee.fields["f"][i]) for i in zeros} == {1, -1}  # both zeros are stored
    for zero in (0, 0.0, -0.0):
        assert table.filter({"f": zero}).ids.tolist() == zeros
        assert table.filter({"f": {"in": [zero]}}).ids.tolist() == zeros
        assert table.filter({"f": {"in": [zero, 0.5]}}).count == table.filter({"f": {"in": [0, 0.5]}}).count
