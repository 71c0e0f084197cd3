"""The exact kernel's scores do not depend on where a row sits, and equal scores go by row."""

from __future__ import annotations

import numpy as np

from index.engine.knn import TAIL_BLOCK, best_of, exact_knn, inner_products


def rows(n: int, seed: int = 3) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(n, 50)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_a_row_scores_the_same_wherever_it_sits() -> None:
    """The same rows, cut at every offset (as a shard holds some of the whole table's), score bit for bit alike,
    and the rows before the tail as the plain matrix product scores them."""
    matrix = rows(301)
    for queries in (matrix[[7]], matrix[[7, 120]]):
        whole = inner_products(queries, matrix)
        for start in range(2 * TAIL_BLOCK + 1):
            np.testing.assert_array_equal(inner_products(queries, matrix[start:]), whole[:, start:])
        head = len(matrix) - len(matrix) % TAIL_BLOCK
        np.testing.assert_array_equal(whole[:, :head], (queries @ matrix.T)[:, :head])  # the same kernel as before


def test_equal_scores_go_by_row_also_at_the_kth_place() -> None:
    matrix = rows(200)
    copies = np.vstack([matrix, matrix[[5, 5, 5]], matrix[:10]])  # row 5 again at 200, 201, 202 and 208
    for k in (2, 3, 4, 5, 10):
        scores, ids = exact_knn(copies[[5]], copies, k)
        assert ids[0].tolist() == [5, 200, 201, 202, 208, *ids[0, 5:].tolist()][:k], (k, ids)
        assert len(set(scores[0, : min(k, 5)].tolist())) == 1
    scores = np.array([[0.5, 0.9, 0.5, 0.9, 0.1, 0.5]], dtype=np.float32)
    top, ids = best_of(scores, 4)
    assert ids.tolist() == [[1, 3, 0, 2]] and np.allclose(top, [[0.9, 0.9, 0.5, 0.5]])
    _, every = best_of(scores, 6)
    assert every.tolist() == [[1, 3, 0, 2, 5, 4]]
