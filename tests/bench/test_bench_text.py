"""``python -m bench --quick --only text``: the text benchmark's steps work and its figures hold together.

Its tables (flat GloVe with its SIF component, MiniLM's tokens, 5,000 documents imported with ``--encoder``)
are built, served by a real ``embedding-serve`` and queried in every mode. Timings are not checked (``make
bench`` measures them); answers and structure are: the HTTP vectors equal the in-process ones, a ``text`` query
in mode vector answers as its SIF vector does, every answer holds k hits.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from bench.text import BATCHES, DOC_WORDS, HTTP_BATCHES, MODES, QUICK_QUERIES, QUICK_ROWS, K, lee_windows, zipf_texts
from tests.bench.quick import quick_early
from tests.bench.quick import quick_run as run_quick

pytestmark = pytest.mark.slow


QUICK = quick_early(__name__, "quick_run", "text")  # started at collection (tests/early.py)


@pytest.fixture(scope="module")
def quick_run() -> dict[str, Any]:
    return run_quick(QUICK, "text")


def test_inputs_are_seeded_words_and_windows() -> None:
    vocabulary = np.array(["the", "of", "heart", "blood", "pumps"])
    texts = zipf_texts(vocabulary, 2_000, DOC_WORDS, seed=0)
    assert texts == zipf_texts(vocabulary, 2_000, DOC_WORDS, seed=0)
    words = " ".join(texts).split()
    assert len(words) == 2_000 * DOC_WORDS
    counts = [words.count(w) for w in vocabulary]
    assert counts[0] > counts[1] > counts[4] > 0  # Zipf: the first word the most frequent
    windows = lee_windows()
    assert len(windows) > 500 and all(len(w.split()) == 100 for w in windows)


def test_encoding_measured_and_equal_over_http(quick_run: dict[str, Any]) -> None:
    r = quick_run["result"]
    for name in ("sif", "minilm"):
        rates = r["in_process"][name]["texts_per_second"]
        assert set(rates) == {str(b) for b in BATCHES} and all(x > 0 for x in rates.values())
        assert r["in_process"][name]["tokens_per_text"]["known"] > 80  # 100-word windows
        assert set(r["http"]["texts_per_second"][name]) == {str(b) for b in HTTP_BATCHES}
        assert r["http"]["max_abs_difference_vs_in_process"][name] < 1e-6
    assert r["tables"]["sif"]["corpus"]["texts"] == 300
    floor = r["floor"]
    assert 0 < floor["embeddings"]["p50_ms"] <= floor["embeddings"]["p90_ms"] and floor["ratio_p50"] > 0


def test_text_queries_answer_in_every_mode(quick_run: dict[str, Any]) -> None:
    r = quick_run["result"]
    q = r["queries"]
    for mode in MODES:
        assert q[mode]["hits_min"] == K, mode
        assert 0 < q[mode]["p50_ms"] <= q[mode]["p90_ms"], mode
    assert q["raw_vector"]["ratio_p50"] == 1.0
    checks = q["checks"]
    assert checks["queries"] == QUICK_QUERIES
    assert checks["text_vector_equals_raw_vector"] == QUICK_QUERIES  # the server embeds as the client did
    assert 0 < checks["hybrid_overlap_with_vector"] < 1  # fused: some vector hits, not all
    imp = r["import"]
    assert imp["rows"] == QUICK_ROWS and imp["index"]["kind"] == "flat" and imp["seconds"] > 0
    assert imp["encoder"]["table"] == "glove-6b-50d" and imp["encoder"]["pooling"] == "sif"
    assert set(imp["step_seconds"]) == {"embedding", "keyword index"}


def test_section_renders(quick_run: dict[str, Any]) -> None:
    text = quick_run["markdown"]
    assert "## 9. Text in: encoding and text queries" in text
    assert "cannot render" not in text and re.search(r"\| GloVe 6B 50d, SIF \| \d", text)


def test_a_step_longer_than_a_minute_is_read() -> None:
    """The import's step seconds come from its progress lines, written as ``index.progress.duration`` does."""
    from bench.text import DONE, duration_seconds
    from index.progress import duration

    for seconds in (0, 7, 59, 60, 65, 3599):
        line = f"keyword index: done (2000 of 2000 rows) in {duration(seconds)}"
        assert [duration_seconds(took) for _, took in DONE.findall(line)] == [seconds]
    assert duration_seconds(duration(7380)) == 7380  # 2h03m
