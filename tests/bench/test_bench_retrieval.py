"""The known-item retrieval benchmark's own arithmetic (the halves it cuts and the figures it computes), and its
figures in BENCHMARKS.md measured again: ``python -m bench.retrieval`` runs in the background (tests/early.py), on
the encoders' tables ``tests/bench/test_bench_lee_similarity.py``'s run built (the same builds: not made twice),
and every row of the section's two tables must be what the run gives, to the digits shown."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gensim.test.utils import datapath

from bench.retrieval import halves, measure, padded
from tests.bench.stated import section_rows, shown
from tests.bench.test_bench_lee_similarity import RUN as LEE_RUN
from tests.early import Early

SECTION = "## Known-item retrieval on the Lee corpus"
BM25 = "keyword: BM25 k1 1.2, b 0.75"
# BENCHMARKS.md's row -> the benchmark's method
ROWS = {
    f"{BM25}, the import's (English stop words and stemmer)": f"{BM25}, the import's (stop words en, stemmer english)",
    f"{BM25}, no stop words, no stemming": f"{BM25}, no stop words, no stemming",
    f"{BM25}, English stemmer": f"{BM25}, English stemmer",
    f"{BM25}, English stop words": f"{BM25}, English stop words",
    "keyword: BM25 k1 1.5, b 0.75 (bm25s's defaults), the import's words": (
        "keyword: BM25 k1 1.5, b 0.75 (bm25s's defaults), the import's words"
    ),
    "vector: mean GloVe 6B 50d": "vector: mean GloVe 6B 50d, cosine",
    "hybrid: mean GloVe + keyword": "hybrid: RRF k 60 of vector and keyword lists (100 deep)",
    "hybrid: mean GloVe + keyword, keyword weight 2": "hybrid: RRF k 60, keyword weight 2",
    "vector: GloVe 6B 50d SIF (component from the same corpus)": "vector: GloVe 6B 50d SIF, cosine",
    "hybrid: GloVe SIF + keyword": "hybrid: RRF k 60 of GloVe 6B 50d SIF and keyword lists",
    "vector: all-MiniLM-L6-v2 token mean": "vector: MiniLM token mean, cosine",
    "hybrid: MiniLM token mean + keyword": "hybrid: RRF k 60 of MiniLM token mean and keyword lists",
    "vector: all-MiniLM-L6-v2 sentence encoder (transformer table, ONNX Runtime)": "vector: MiniLM transformer, cosine",
    "hybrid: MiniLM transformer + keyword": "hybrid: RRF k 60 of MiniLM transformer and keyword lists",
}
FIGURES = ("mrr@10", "recall@10", "recall@1")


def run_argv(out: Path) -> list[str]:
    tables = LEE_RUN.outcome().out / "work" / "data"  # done by now (``needs``)
    return [sys.executable, "-m", "bench.retrieval", "--json", str(out / "retrieval.json"), "--tables", str(tables)]


RUN = Early(__name__, "retrieval_run", run_argv, needs=LEE_RUN)  # started at collection (tests/early.py)


@pytest.fixture(scope="module")
def retrieval_run() -> dict[str, Any]:
    done = RUN.result()
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads((done.out / "retrieval.json").read_text())
    return result


def test_halves_cut_each_document_in_two() -> None:
    firsts, seconds = halves()
    texts = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()
    assert len(firsts) == len(seconds) == len(texts) == 300
    for first, second, text in zip(firsts, seconds, texts, strict=True):
        words = text.split()
        assert first.split() + second.split() == words
        assert len(first.split()) == len(words) // 2


def test_measure_counts_ranks_of_the_right_answer() -> None:
    queries = [f"q{i}" for i in range(4)]
    # query i's right answer is row i: found first, third, never, and eleventh (outside the ten)
    answers = [[0, 5, 6], [7, 8, 1], [3, 3, 3], [9] * 10 + [3]]

    def search(asked: list[str], k: int) -> np.ndarray:
        return padded([answers[queries.index(q)] for q in asked], k)

    figures = measure(search, queries)
    assert figures["mrr@10"] == (1 + 1 / 3) / 4
    assert figures["recall@10"] == 0.5 and figures["recall@1"] == 0.25


def test_the_stated_figures_are_measured(retrieval_run: dict[str, Any]) -> None:
    """Each row of BENCHMARKS.md's known-item table, of its short queries' table and of its fusion constants' table
    is the run's figure."""
    stated = {row: cells for row, cells in section_rows(SECTION).items() if re.fullmatch(r"[0-9.]+", cells[-1])}
    measured = retrieval_run["rows"]
    assert set(ROWS) <= set(stated)
    wrong = [
        f"{row}: {name} {cell} stated, {measured[method][name]:.4f} measured"
        for row, method in ROWS.items()
        for name, cell in zip(FIGURES, stated[row], strict=True)
        if not shown(measured[method][name], cell)
    ]
    short = {row: cells for row, cells in stated.items() if len(cells) == 2 * len(FIGURES)}
    assert len(short) == 4
    for row, cells in short.items():
        label = row.removesuffix(" (the import's)")
        for n, part in zip((5, 10), (cells[:3], cells[3:]), strict=True):
            figures = retrieval_run["short_queries"][f"{BM25}, {label}, first {n} words"]
            wrong += [
                f"{row}, {n} words: {name} {cell} stated, {figures[name]:.4f} measured"
                for name, cell in zip(FIGURES, part, strict=True)
                if not shown(figures[name], cell)
            ]
    for k, by_label in zip_fusion(retrieval_run["rrf_k"]):
        cells = stated[f"{k} (default)" if k == "60" else k]
        for figures, part in zip(by_label, (cells[:2], cells[2:]), strict=True):
            wrong += [
                f"rrf_k {k}: {name} {cell} stated, {figures[name]:.4f} measured"
                for name, cell in zip(FIGURES[:2], part, strict=True)
                if not shown(figures[name], cell)
            ]
    assert not wrong, "\n".join(wrong)


def zip_fusion(rrf_k: dict[str, dict[str, dict[str, float]]]) -> list[tuple[str, list[dict[str, float]]]]:
    """Each measured ``rrf_k`` with the figures of the two hybrids, in the table's column order."""
    weak, strong = rrf_k["mean GloVe 6B 50d"], rrf_k["MiniLM transformer"]
    return [(k, [weak[k], strong[k]]) for k in weak]
