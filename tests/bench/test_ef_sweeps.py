"""The efSearch sweeps of ``bench.neighbours`` and ``bench.growth`` time and measure the search a table loaded with
each efSearch serves: its candidates as many as that efSearch, not the loaded one's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bench import growth, neighbours
from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine import knn
from index.engine.table import Table


@pytest.fixture
def graph(tmp_path: Path, glove_raw: RawTable) -> Table:
    """3,000 GloVe rows in a graph loaded with efSearch 64, more than the quick sweeps' widths."""
    raw = RawTable(tokens=list(glove_raw.tokens[:3_000]), matrix=np.array(glove_raw.matrix[:3_000]))
    spec = "hnsw:M=8,efConstruction=40,efSearch=64"
    build_table(raw, data_dir=tmp_path, name="t", source={}, index_spec=spec, min_recall=0)
    return Table.load(tmp_path / "t")


def widths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The width of every index search a table makes from now on."""
    asked: list[int] = []
    top = knn.index_top

    def recorded(index: Any, queries: np.ndarray, k: int, width: int, *rest: Any) -> knn.Hits:
        asked.append(width)
        return top(index, queries, k, width, *rest)

    monkeypatch.setattr(knn, "index_top", recorded)
    return asked


def test_the_neighbours_sweep_searches_each_efsearch_wide(graph: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = widths(monkeypatch)
    words = [(graph.tokens[i], i) for i in range(100, 400)]
    swept = neighbours.recall_sweep(SimpleNamespace(quick=True), graph, words)  # type: ignore[arg-type]
    assert [row["efSearch"] for row in swept] == [16, 24, 32]
    assert sorted(set(asked)) == [16, 24, 32], sorted(set(asked))
    assert graph.search_width == graph.index.hnsw.efSearch == 64  # the table's own, again


def test_the_growth_sweep_searches_each_efsearch_wide(graph: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = widths(monkeypatch)
    queries = np.ascontiguousarray(graph.vectors[:100])
    unreachable = np.full(len(queries), 2.0, dtype=np.float32)  # no 10th score counts: recall 0, every step swept
    swept = growth.sweep(graph, queries, unreachable, quick=True)
    assert [row["efSearch"] for row in swept] == [16, 32]
    assert sorted(set(asked)) == [16, 32], sorted(set(asked))


def test_the_neighbours_sweep_searches_a_graph_behind_a_transform(
    tmp_path: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table's graph behind a transform (``L2norm,HNSW8``, tuned as any graph) has no ``hnsw`` of its own: the
    sweep set efSearch on ``table.index.hnsw`` and stopped at an AttributeError. It sets it where the table's load
    does (``knn.set_search_params``), and gives the table its own back."""
    raw = RawTable(tokens=list(glove_raw.tokens[:3_000]), matrix=np.array(glove_raw.matrix[:3_000]))
    build_table(raw, data_dir=tmp_path, name="t", source={}, index_spec="L2norm,HNSW8", min_recall=0)
    table = Table.load(tmp_path / "t")
    tuned, asked = table.search_width, widths(monkeypatch)
    words = [(table.tokens[i], i) for i in range(100, 400)]
    swept = neighbours.recall_sweep(SimpleNamespace(quick=True), table, words)  # type: ignore[arg-type]
    assert [row["efSearch"] for row in swept] == [16, 24, 32]
    assert sorted(set(asked)) == [16, 24, 32], sorted(set(asked))
    assert table.search_width == knn.search_width(table.index) == tuned  # the table's own, again
