"""The builder's recall@10 counts a found row whose exact score ties the k-th exact score (``index.build.recall``):
on a table of duplicated rows, an index that answers with the other copy is not counted as missing it. Its queries
are rows of the table, each one's own row left out of its answers, as a neighbours query leaves it out."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from index.build.index_choice import RecallProbe, build_and_measure, parse_spec
from index.build.recall import tie_epsilon, tied_recall
from index.build.sources import RawTable
from index.engine.knn import index_knn, search_width

ROWS = 5_000


@pytest.fixture(scope="module")
def tripled(glove_raw: RawTable) -> np.ndarray:
    """5,000 GloVe rows, unit-normalised, three times over: rows i, i + 5,000 and i + 10,000 are equal, so a
    query's exact top 10 holds three copies each of three rows and one copy, of three, of a fourth."""
    rows = glove_raw.matrix[:ROWS].astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return np.ascontiguousarray(np.vstack([rows, rows, rows]))


def others_scores(unit: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Float64 cosines of the rows ``ids`` with every row, each one's own row at -inf (left out)."""
    scores = unit[ids].astype(np.float64) @ unit.astype(np.float64).T
    scores[np.arange(len(ids)), ids] = -np.inf
    return scores


def without_own(found: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The first 10 of each row of ``found`` (queries, 11) that are not its query's own row."""
    return np.array([[f for f in row if f != own][:10] for row, own in zip(found, ids, strict=True)])


def served(index: faiss.Index, queries: np.ndarray, unit: np.ndarray, k: int = 11) -> np.ndarray:
    """The ids of the top ``k`` a table of the rows ``unit`` serves from ``index``, as the builder measures them."""
    return index_knn(index, queries, k, search_width(index), unit)[1]


def id_recall(unit: np.ndarray, ids: np.ndarray, found: np.ndarray) -> float:
    """Recall@10 as the share of the exact top-10 ids found (float64 brute force, the lower id first among ties)."""
    truth = np.argsort(-others_scores(unit, ids), axis=1, kind="stable")[:, :10]
    return float(np.mean([len(np.intersect1d(t, f)) / 10 for t, f in zip(truth, found, strict=True)]))


def float64_tied_recall(unit: np.ndarray, ids: np.ndarray, found: np.ndarray) -> float:
    """Recall@10 counting a found row whose float64 score reaches the float64 k-th score (rounding apart)."""
    scores = others_scores(unit, ids)
    kth = -np.partition(-scores, 9, axis=1)[:, 9]
    got = np.take_along_axis(scores, found, axis=1)
    return float(np.mean(got >= kth[:, None] - 1e-12))


def test_an_exact_index_answering_with_the_other_copies_has_recall_1(tripled: np.ndarray) -> None:
    """An exact index over the rows in another order finds, among equal rows, a copy the exact top 10 did not
    take: by ids it misses some of the exact top 10, tied rows counted it misses none."""
    index = faiss.IndexIDMap(faiss.IndexFlatIP(tripled.shape[1]))
    order = np.arange(3 * ROWS)[::-1].copy()  # the last copies first
    index.add_with_ids(tripled[order], order.astype(np.int64))
    probe = RecallProbe.draw(tripled)
    _, found = index.search(probe.queries, 11)
    assert id_recall(tripled, probe.ids, without_own(found, probe.ids)) < 0.98
    assert probe.recall(index) == 1.0


def test_an_hnsw_index_on_duplicated_rows_is_measured_with_its_ties(tripled: np.ndarray) -> None:
    """The builder's recall@10 of an HNSW graph over duplicated rows is that of the table's answers as float64
    brute force counts them when tied rows count, well above the share of exact top-10 ids FAISS's own top 10 holds
    (the table puts equal rows in row order, FAISS in the order the graph visits them)."""
    spec = parse_spec("hnsw:M=8,efConstruction=40,efSearch=16", len(tripled))
    built = build_and_measure(tripled, spec, min_recall=0.0)
    probe = RecallProbe.draw(tripled)  # the builder's sample (seed 0)
    found = served(built.index, probe.queries, tripled)
    tied = float64_tied_recall(tripled, probe.ids, without_own(found, probe.ids))
    assert built.info["recall_at_10"] == pytest.approx(tied, abs=1e-4)
    _, visited = built.index.search(probe.queries, 11)  # FAISS's own top 11: equal rows as the graph visits them
    assert id_recall(tripled, probe.ids, without_own(visited, probe.ids)) < tied - 0.05


def test_rows_apart_by_more_than_rounding_are_not_ties(glove_raw: RawTable) -> None:
    """Without duplicates, a found row counts only if it is in the exact top 10 or within rounding of the 10th:
    answers that drop each query's nearest other row for its 11th have recall 0.9 by ids, and a near tie more."""
    unit = glove_raw.matrix[:ROWS].astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    probe = RecallProbe.draw(unit)
    assert (probe.ids >= 0).all()
    scores, top12 = faiss.knn(probe.queries, unit, 12, metric=faiss.METRIC_INNER_PRODUCT)
    assert (top12[:, 0] == probe.ids).all()  # each row is its own nearest: left out
    scores, shifted = scores[:, 1:], top12[:, 2:]
    assert id_recall(unit, probe.ids, shifted) == pytest.approx(0.9)
    # GloVe's own near ties: an 11th row within float32's rounding of the 10th ("+" after "p", 2.2e-6 apart)
    ties = int(np.count_nonzero(scores[:, 9] - scores[:, 10] <= tie_epsilon(unit.shape[1])))
    assert ties <= 3
    assert tied_recall(probe.queries, unit, probe.kth, shifted, 10) == pytest.approx(0.9 + ties / shifted.size)


def test_a_query_row_found_by_the_index_is_not_counted(glove_raw: RawTable) -> None:
    """The builder's recall@10 is that of neighbour queries: a float64 brute force over the other rows of each
    sampled row. Counting the query's own row, which the graph finds anyway, gives a higher figure than the
    answers earn."""
    unit = glove_raw.matrix[:ROWS].astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    spec = parse_spec("hnsw:M=8,efConstruction=40,efSearch=10", len(unit))
    built = build_and_measure(unit, spec, min_recall=0.0)
    ids = np.sort(np.random.default_rng(0).choice(ROWS, size=1000, replace=False))  # the builder's sample (seed 0)
    found = served(built.index, unit[ids], unit)
    assert (found == ids[:, None]).any(axis=1).mean() > 0.95  # the graph nearly always finds the query's own row
    expected = float64_tied_recall(unit, ids, without_own(found, ids))
    assert built.info["recall_at_10"] == pytest.approx(expected, abs=1e-4)
    scores = unit[ids].astype(np.float64) @ unit.astype(np.float64).T
    kth = -np.partition(-scores, 9, axis=1)[:, 9]
    found = served(built.index, unit[ids], unit, 10)
    with_own = float(np.mean(np.take_along_axis(scores, found, axis=1) >= kth[:, None] - 1e-12))
    assert with_own > expected + 0.002


@pytest.mark.parametrize("rows", [1, 2, 11])
def test_tables_of_few_rows_are_measured(glove_raw: RawTable, rows: int) -> None:
    """A table of one row has no neighbour to find (recall 1.0); of two, each row's one neighbour is the other."""
    unit = glove_raw.matrix[:rows].astype(np.float32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    built = build_and_measure(unit, parse_spec("hnsw:M=4,efConstruction=16", rows), min_recall=0.99)
    assert built.info["recall_at_10"] == 1.0 and built.info["recall_sample"] == rows
