"""The scoring benchmark (bench/scoring.py) times the two scorings only while they answer the same, to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from bench.scoring import BATCHES, measure, same_answers
from index.engine.table import Table


def test_scorings_that_differ_are_not_timed(glove: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    queries = np.ascontiguousarray(glove.vectors[1_000:1_016])
    same_answers(glove, queries)  # the graph's rows and the table's: the same answers
    figures = measure(glove, queries, rounds=2)
    assert set(figures) == {str(b) for b in BATCHES}
    assert all(len(v) == 2 and min(v) > 0 for by_case in figures.values() for v in by_case.values())
    off = np.array(glove.scored_rows) * np.float32(0.5)
    monkeypatch.setattr(glove, "scored_rows", off)
    with pytest.raises(SystemExit, match="the two scorings differ"):
        same_answers(glove, queries)
