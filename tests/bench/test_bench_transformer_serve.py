"""The transformer serving benchmark's inputs: distinct passages of the asked length however many are asked, and
queries from the Lee test corpus (the server side is the real ``embedding-serve``, run by the benchmark)."""

from __future__ import annotations

from bench.transformer_serve import QUERY_WORDS, passages, queries


def test_passages_are_distinct_windows_of_their_length_past_one_pass_of_the_corpus() -> None:
    texts = passages(1500, 60)  # the background corpus holds about 1,000 windows of 60 words
    assert len(set(texts)) == 1500 and {len(t.split()) for t in texts} == {60}


def test_queries_are_short_and_distinct() -> None:
    asked = queries(100)
    assert len(set(asked)) == 100 and {len(q.split()) for q in asked} == {QUERY_WORDS}
