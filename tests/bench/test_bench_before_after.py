"""The before/after benchmark's requests: the raw-vector and the hybrid search bodies it replays, and its table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from urllib.parse import quote

import numpy as np
from gensim.test.utils import datapath

from bench.before_after import (
    DOCUMENTS,
    K,
    close,
    documents_table,
    hot_routes,
    load_arguments,
    table_of,
    vector_requests,
)
from bench.common import REPO, TABLE
from bench.neighbours import sample_words
from index.engine.table import Table


def test_vector_requests_carry_each_words_row(glove: Table) -> None:
    words = sample_words(glove, 16)
    items = vector_requests(glove, glove.name, words)
    assert len(items) == 16
    for item, (_, row) in zip(items, words, strict=True):
        assert (item.method, item.path) == ("POST", f"/v1/tables/{glove.name}/search")
        body = json.loads(item.body or b"")
        assert set(body) == {"vector", "k"} and body["k"] == K
        np.testing.assert_allclose(body["vector"], glove.vectors[row], atol=5e-7)


def test_the_hot_routes_and_their_options(glove: Table) -> None:
    """What this benchmark and bench.floors both measure: the neighbours GET of each word and its raw-vector search,
    with the same options."""
    parser = argparse.ArgumentParser()
    load_arguments(parser)
    args = parser.parse_args([])
    assert (args.data_dir, args.table) == (REPO / "data", TABLE)
    assert (args.rounds, args.seconds, args.connections, args.words) == (5, 5.0, 32, 2048)
    words = sample_words(glove, 4)
    routes = hot_routes(glove, glove.name, words)
    assert list(routes) == ["neighbors", "search_vector"]
    base = f"/v1/tables/{glove.name}/neighbors"
    gets = [(item.method, item.path) for item in routes["neighbors"]]
    assert gets == [("GET", f"{base}?token={quote(word, safe='')}&k={K}") for word, _ in words]
    assert routes["search_vector"] == vector_requests(glove, glove.name, words)


def test_documents_table_is_the_lee_corpus_with_hybrid_queries(tmp_path: Path) -> None:
    table_dir, items = documents_table(tmp_path)
    table = Table.load(table_dir)
    texts = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()
    assert table.name == DOCUMENTS and table.rows == len(texts) == len(items) == 300
    assert table.keyword is not None  # mode hybrid needs the documents' text indexed
    for item, text in zip(items, texts, strict=True):
        body = json.loads(item.body or b"")
        assert item.path == f"/v1/tables/{DOCUMENTS}/search"
        assert body["mode"] == "hybrid" and body["k"] == K
        assert body["text"] == " ".join(text.split()[:10])
        assert len(body["vector"]) == table.dim and np.linalg.norm(body["vector"]) > 0


def test_table_of_prints_a_row_of_ratios_per_route() -> None:
    before = {"p50_ms": 0.5, "rps": 2000.0, "cpu_us": 400.0}
    summary = {"neighbors": {"before": before, "after": {"p50_ms": 0.4, "rps": 2500.0, "cpu_us": 380.0}}}
    ratios = {"neighbors": {"p50": 0.8, "rps": 1.25, "cpu": 0.95}}
    lines = table_of(summary, ratios).splitlines()
    expected = ["neighbors", "0.500ms", "0.400ms", "0.80", "2,000", "2,500", "1.25", "400", "380", "0.95"]
    assert len(lines) == 2 and lines[1].split() == expected


def test_close_answers_differ_only_in_their_scores_last_bits() -> None:
    """``--answers close``: the same hits, scores within 1e-5, near-ties in either order; anything else differs."""
    answer = {
        "query": {"token": "heart", "id": 1},
        "neighbors": [{"token": "a", "id": 7, "score": 0.70344525}, {"token": "b", "id": 9, "score": 0.7034452}],
    }
    moved = json.loads(json.dumps(answer))
    moved["neighbors"][0]["score"] = 0.7034453  # a last-bits change
    swapped = {**answer, "neighbors": answer["neighbors"][::-1]}
    assert close(answer, answer) and close(answer, moved) and close(answer, swapped)
    other_score = json.loads(json.dumps(answer))
    other_score["neighbors"][1]["score"] = 0.7035
    other_hit = json.loads(json.dumps(answer))
    other_hit["neighbors"][1]["id"] = 10
    other_query = {**answer, "query": {"token": "heart", "id": 2}}
    shorter = {**answer, "neighbors": answer["neighbors"][:1]}
    for different in (other_score, other_hit, other_query, shorter):
        assert not close(answer, different)
