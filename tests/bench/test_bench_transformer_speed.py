"""The transformer speed benchmark's own side, on a few texts: its texts and its onnxruntime rows (the torch side
needs an environment with torch, which the tests never have)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.transformer_speed import CALLS, ours, texts_of
from index.engine.table import Table
from tests.index.build.test_transformer import NAME


@pytest.fixture(scope="module")
def table(minilm_st_dir: Path) -> Table:
    return Table.load(minilm_st_dir / NAME)


def test_texts_have_their_word_counts() -> None:
    texts = texts_of(20, 5)
    assert len(texts) == 5 and {len(t.split()) for t in texts} == {20} and len(set(texts)) == 5


def test_rows_for_every_call_and_thread_count(table: Table) -> None:
    texts = {20: texts_of(20, 40)}
    rows, vectors = ours(table, texts, [1])
    assert [(r["call"], r["threads"], r["texts"]) for r in rows] == [(call, 1, 40) for call in CALLS]
    assert all(r["seconds"] > 0 for r in rows)
    assert vectors[20].shape == (40, 384) and np.allclose(np.linalg.norm(vectors[20], axis=1), 1, atol=1e-5)
