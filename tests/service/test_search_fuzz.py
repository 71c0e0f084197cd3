"""Random document searches against an oracle (``tests/service/search_fuzz.py``), seeded and bounded.

Two tables: the Lee corpus with its fields (``tests/lee.py``), and ``typed``, 240 documents with integer ids whose
fields are of every type with nulls and missing keys, Unicode text, integers past 2**53, negative zero, empty tag
lists. Random searches (filter trees, modes, pages, floors, diversity, batches, recommendations) and scroll pages:
each answer (hits, scores, ranks, ``passing``, ``fallback``, or the error's status and code) must be the oracle's.
In process through the app; then a sample over HTTP from a real server of one worker and of two; the Lee table
served whole and as three shards behind a front, both taking the same random writes between rounds of searches;
and the typed table whole and behind a front. The front's answers must also be the whole table's (one server
serves the three shards: which process holds a shard is nothing to the front's answers).
``SEARCH_FUZZ_SEED`` and ``SEARCH_FUZZ_REQUESTS`` (requests per table in process; an eighth of them over HTTP)
run a longer hunt.
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
from tests.service.conftest import LEE_SHARDS, client_for, lee_copy
from tests.service.real_server import Server
from tests.service.search_fuzz import (
    Corpus,
    Refused,
    batch_request,
    check,
    check_batch,
    check_scroll,
    filter_tree,
    passing,
    request,
    scroll_request,
)

SEED = int(os.environ.get("SEARCH_FUZZ_SEED", "20261207"))  # another for a longer hunt
# Requests per table (SEARCH_FUZZ_REQUESTS sets more for a longer hunt); a sample of them over HTTP.
IN_PROCESS = int(os.environ.get("SEARCH_FUZZ_REQUESTS", "600"))
OVER_HTTP = max(1, IN_PROCESS // 8)
KIND_REQUESTS = max(1, IN_PROCESS // 8)  # per table and index kind
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


def run(corpus: Corpus, count: int, post: Post, server: str = "") -> Counter[str]:
    """``count`` random searches of ``corpus`` and ``count // 4`` scroll pages, sent by ``post``; what kinds were
    checked. Fails on the first answer that is not the oracle's, showing the request."""
    rng = random.Random(f"{SEED}-{corpus.name}-{count}")
    kinds: Counter[str] = Counter()
    for _ in range(count):
        body = request(rng, corpus)
        status, answer = post(f"/v1/tables/{corpus.name}/search", body)
        problem = check(corpus, body, status, answer)
        assert problem is None, f"{server} {json.dumps(body)}\n{problem}"
        kinds[f"{status} {body.get('mode', 'vector')}" + (" filtered" if "filter" in body else "")] += 1
    for _ in range(count // 8):
        body = batch_request(rng, corpus)
        status, answer = post(f"/v1/tables/{corpus.name}/search", body)
        problem = check_batch(corpus, body, status, answer)
        assert problem is None, f"{server} batch {json.dumps(body)}\n{problem}"
        kinds[f"{status} batch"] += 1
    for _ in range(count // 4):
        body = scroll_request(rng, corpus)
        status, answer = post(f"/v1/tables/{corpus.name}/documents/scroll", body)
        problem = check_scroll(corpus, body, status, answer)
        assert problem is None, f"{server} scroll {json.dumps(body)}\n{problem}"
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


@pytest.mark.parametrize("workers", [1, 2])
def test_random_searches_over_http_are_the_oracles(
    data_dir: Path, corpora: list[Corpus], tmp_path: Path, workers: int
) -> None:
    with real_server.running(data_dir, tmp_path / "serve.log", "--workers", str(workers)) as server:

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


KINDS = (  # each index kind searching every row, so that its answers are the exact search's
    "ivf:nlist=8,nprobe=8",
    "ivfpq:nlist=4,nprobe=4,nbits=4,rerank=300",
    "hnsw:M=8,efSearch=512",
)


@pytest.mark.parametrize("spec", KINDS)
def test_random_searches_of_every_index_kind_are_the_oracles(
    lee_data_dir: Path, corpora: list[Corpus], tmp_path: Path, spec: str
) -> None:
    """An IVF, an IVF-PQ re-ranked and an HNSW index, each wide enough to reach every row, answer as the exact
    search: filters (which widen nprobe or efSearch), pages, floors, diversity, hybrid, batches."""
    typed = write_jsonl(tmp_path / "typed.jsonl", typed_records(corpora[1]))
    for corpus, path in zip(corpora, (lee_data_dir.parent / "lee.jsonl", typed), strict=True):
        raw, fmt = read_source(path, "documents")
        build_table(
            raw, data_dir=tmp_path, name=corpus.name, source={"format": fmt, "path": path.name}, index_spec=spec
        )
        assert Table.load(tmp_path / corpus.name).index is not None
    with client_for(data_dir=tmp_path) as client:

        def post(route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            response = client.post(route, json=body)
            return response.status_code, response.json()

        for corpus in corpora:
            kinds = run(corpus, KIND_REQUESTS, post, spec)
            assert kinds["200 vector filtered"] and kinds["200 batch"], kinds


WRITE_KEY = "fuzz-writer-key-0123456789"
Seen = list[tuple[dict[str, Any], int, Any]]  # a server's answers: (request body, status, JSON answer)
ROUNDS = 4  # rounds of writes, each followed by searches
REFUSED = [
    {"year": "2000"},
    {"year": 2000.5},
    {"year": 2**64},
    {"colour": "red"},
    {"long": 1},
    {"known": "0.5"},
]  # a write's fields


def random_write(rng: random.Random, corpus: Corpus, serial: int) -> tuple[str, dict[str, Any]]:
    """A random write to the Lee table as ``corpus`` holds it: documents added or replaced (fields of every type,
    nulls, a whole number given as a float; now and then one the table refuses), deleted by id or by a filter."""
    roll = rng.random()
    if roll < 0.2:
        ids = [*rng.sample(corpus.lee.ids, 3), "nowhere"]
        return "documents/delete", {"ids": ids}
    if roll < 0.4:
        few = {"id": {"in": rng.sample(corpus.lee.ids, 10)}}  # at most these ten deleted
        return "documents/delete", {"filter": {"and": [filter_tree(rng, corpus, depth=2), few]}}
    documents = []
    live = rng.sample(corpus.lee.ids, 4)
    for n in range(rng.randint(3, 10)):
        ident = live.pop() if live and rng.random() < 0.3 else f"w-{serial:02d}-{n}"
        row = rng.randrange(len(corpus.lee.ids))
        noise = np.random.default_rng(rng.randrange(2**32)).normal(0, 0.1, corpus.lee.vectors.shape[1])
        fields: dict[str, Any] = {
            "year": rng.choice([1990, 2024, 2024.0, -(2**53) - 1, None]),
            "tags": rng.choice([[], ["government"], ["australian", "Ünï"], None]),
            "lang": rng.choice(["en", "fr", "日本", None]),
            "known": rng.choice([0.5, 1, -0.0, 0.97, None]),
            "long": rng.choice([True, False, None]),
            "published": rng.choice(["2001-03-01T00:00:00Z", "2002-01-01", "2001-06-01T10:00:00+02:00", None]),
        }
        fields = {k: v for k, v in fields.items() if v is not None or rng.random() < 0.5}  # left out: null
        text = " ".join(rng.choice(corpus.words) for _ in range(rng.randint(3, 30)))
        vector = (corpus.lee.vectors[row] + noise).astype(np.float32).tolist()
        documents.append({"id": ident, "text": text, "vector": vector, "fields": fields})
    if rng.random() < 0.1:  # refused: nothing written (one document: a front's write is not atomic across shards)
        documents = [{**documents[-1], "fields": rng.choice(REFUSED)}]
    return "documents", {"documents": documents}


def written(corpus: Corpus, route: str, body: dict[str, Any]) -> tuple[Corpus, int, int]:
    """``corpus`` after the write, the status it is answered with and how many documents it upserts or deletes."""
    lee = corpus.lee
    records = {
        ident: (lee.texts[i], lee.vectors[i], {name: column[i] for name, column in lee.fields.items()})
        for i, ident in enumerate(lee.ids)
    }
    if route == "documents":
        if any(set(d["fields"]) - set(TYPES) or d["fields"] in REFUSED for d in body["documents"]):
            return corpus, 422, 0
        for document in body["documents"]:
            fields = {name: document["fields"].get(name) for name in TYPES}
            if fields["year"] is not None:
                fields["year"] = int(fields["year"])
            if fields["known"] is not None:
                fields["known"] = float(fields["known"])
            if fields["published"] is not None:
                fields["published"] = dt.datetime.fromisoformat(fields["published"].replace("Z", "+00:00"))
                if fields["published"].tzinfo is None:
                    fields["published"] = fields["published"].replace(tzinfo=dt.UTC)
                fields["published"] = fields["published"].astimezone(dt.UTC)
            records.pop(document["id"], None)  # a replaced document moves to the end
            records[document["id"]] = (document["text"], np.asarray(document["vector"], np.float32), fields)
        count = len(body["documents"])
    else:
        try:
            mask = passing(corpus, body["filter"]) if "filter" in body else np.isin(lee.ids, body["ids"])
        except Refused:
            return corpus, 422, 0
        for i in np.flatnonzero(mask):
            del records[lee.ids[i]]
        count = int(mask.sum())
    ids = list(records)
    fields = {name: [records[i][2][name] for i in ids] for name in TYPES}
    vectors = np.stack([records[i][1] for i in ids]).astype(np.float32)
    after = Lee(ids, [records[i][0] for i in ids], vectors, fields)
    return Corpus(corpus.name, after, corpus.types, words=corpus.words), 200, count


def alike(seen: dict[str, Seen]) -> int:
    """How many answers the front gave as the whole table did: the same hits, scores within float32's rounding
    of a sum of 50 products (the whole table scores its written documents as one matrix, each shard its own),
    two whose scores are that close in either order; fails on the first that differs otherwise."""
    for (body, status, expected), (_, got_status, got) in zip(seen["whole"], seen["front"], strict=True):
        assert got_status == status, (body, got, expected)
        for mine, theirs in zip(got.get("results", [got]), expected.get("results", [expected]), strict=True):
            if "hits" in mine:
                assert mine.keys() == theirs.keys() and len(mine["hits"]) == len(theirs["hits"]), (body, got)
                scores = [[hit["score"] for hit in answer["hits"]] for answer in (mine, theirs)]
                np.testing.assert_allclose(scores[0], scores[1], rtol=0, atol=1e-6, err_msg=json.dumps(body))
                for a, b in zip(mine["hits"], theirs["hits"], strict=True):
                    assert a["id"] == b["id"] or abs(a["score"] - b["score"]) <= 1e-6, (body, got, expected)
            elif "error" in mine:
                assert mine["error"]["code"] == theirs["error"]["code"], (body, got, expected)
            else:  # a scroll page
                assert mine == theirs, (body, got, expected)
    return len(seen["front"])


def test_random_searches_with_writes_and_through_a_front_are_the_oracles(
    lee_imports: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """The Lee table served whole and as three shards behind a front, both taking the same random writes; after
    each round of writes, random searches and scroll pages of each answered as the oracle answers them over the
    live documents, and the front's as the whole table's."""
    lee_copy(lee_imports, "plain", "whole", tmp_path / "whole")
    lee_copy(lee_imports, "plain", "sharded", tmp_path / "sharded")
    (tmp_path / "front").mkdir()
    corpus = lee_corpus(lee_docs)
    rng = random.Random(SEED)
    env = {"EMBEDDING_WRITE_KEYS": WRITE_KEY}
    with real_server.whole_and_front(tmp_path, LEE_SHARDS, env, env, apart=False) as (whole, _, front):

        def send(server: Server, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            headers = {"x-api-key": WRITE_KEY}
            response = real_server.HTTP.post(f"{server.base}{route}", json=body, headers=headers, timeout=30)
            return response.status_code, response.json()

        answers: Counter[str] = Counter()
        for serial in range(ROUNDS):
            for _ in range(3):
                route, body = random_write(rng, corpus, serial)
                corpus, status, count = written(corpus, route, body)
                for server in (whole, front):
                    got, answer = send(server, f"/v1/tables/lee/{route}", body)
                    assert got == status, f"{route} {json.dumps(body)[:500]}: {got} {answer}"
                    if status == 200:
                        assert answer.get("upserted", answer.get("deleted")) == count, answer
                answers[f"{status} {route}"] += 1
            seen: dict[str, Seen] = {"whole": [], "front": []}
            for name, server in (("whole", whole), ("front", front)):

                def post(route: str, body: dict[str, Any], to: Server = server, log: Seen = seen[name]) -> Any:
                    status, answer = send(to, route, body)
                    log.append((body, status, answer))
                    return status, answer

                for kind, n in run(corpus, OVER_HTTP // ROUNDS, post, name).items():
                    answers[f"{name} {kind}"] += n
            answers["front as the whole"] += alike(seen)
            print(serial, len(corpus.lee.ids), "documents")
        print(dict(sorted(answers.items())))


def test_random_searches_of_the_typed_table_through_a_front_are_the_oracles(
    corpora: list[Corpus], tmp_path: Path
) -> None:
    """The typed table (integer ids, integers past 2**53, negative zero, Unicode, nulls) imported whole and as
    three shards behind a front: each answer the oracle's, and the front's the whole table's."""
    from tests.cli import run_cli

    typed = corpora[1]
    corpus = Corpus("lee", typed.lee, typed.types, integer_ids=True, words=typed.words)  # the front's table name
    source = write_jsonl(tmp_path / "typed.jsonl", typed_records(typed))
    for where, extra in (("whole", ()), ("sharded", ("--shards", str(LEE_SHARDS)))):
        done = run_cli("import", source, "--name", "lee", *extra, "--data-dir", tmp_path / where)
        assert done.code == 0, done.err
    (tmp_path / "front").mkdir()
    with real_server.whole_and_front(tmp_path, LEE_SHARDS, {}, {}, apart=False) as (whole, _, front):
        seen: dict[str, Seen] = {"whole": [], "front": []}
        kinds: Counter[str] = Counter()
        for name, server in (("whole", whole), ("front", front)):

            def post(route: str, body: dict[str, Any], to: Server = server, log: Seen = seen[name]) -> Any:
                response = real_server.HTTP.post(f"{to.base}{route}", json=body, timeout=30)
                log.append((body, response.status_code, response.json()))
                return response.status_code, response.json()

            kinds += run(corpus, OVER_HTTP, post, name)
        alike(seen)
        print(sum(kinds.values()), dict(sorted(kinds.items())))
