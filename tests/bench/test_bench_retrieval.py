"""The known-item retrieval benchmark's own arithmetic: the halves it cuts and the figures it computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gensim.test.utils import datapath

from bench.retrieval import halves, measure, padded


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
