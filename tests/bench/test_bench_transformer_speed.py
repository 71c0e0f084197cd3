"""The transformer speed benchmark's own side, on a few texts: its texts and its onnxruntime rows (the torch side
needs an environment with torch, which the tests never have)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.transformer_speed import CALLS, Int8Encoder, ours, texts_of
from index.engine.table import Table
from index.store.artifact import GRAPH
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


def test_the_int8_engine_reads_the_threads_variable_as_every_reader(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The int8 engine's session read EMBEDDING_THREADS with its own int(): "2.0", which the server and the builder
    take, stopped the benchmark, and a full-width "2", which they refuse, was taken."""
    monkeypatch.setenv("EMBEDDING_THREADS", "2.0")
    session = Int8Encoder(table, table.directory / GRAPH).session  # the float graph: its options are what count
    assert session.get_session_options().intra_op_num_threads == 2
    monkeypatch.setenv("EMBEDDING_THREADS", "\uff12")
    with pytest.raises(ValueError, match=r"EMBEDDING_THREADS='２': must be a whole number from 1 to 512"):
        Int8Encoder(table, table.directory / GRAPH).session  # noqa: B018
