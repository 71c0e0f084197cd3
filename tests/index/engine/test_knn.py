"""The exact kernel's scores do not depend on where a row sits, and equal scores go by row; one raw vector is made a
unit query as a batch's rows are."""

from __future__ import annotations

import numpy as np
import pytest

from index.engine.knn import (
    FLOAT32_MAX,
    TAIL_BLOCK,
    best_of,
    exact_knn,
    inner_products,
    unit_queries,
    unit_vector,
    within_float32,
)
from index.errors import InvalidQuery


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


def test_one_vector_is_made_a_unit_query_as_a_batch_row_is() -> None:
    """``unit_vector`` (a client's one vector) answers bit for bit as ``unit_queries`` does for it, at every length
    and magnitude float32 holds, down to squares that underflow; a zero vector is refused alike."""
    rng = np.random.default_rng(5)
    for trial in range(600):
        dim = int(rng.choice([1, 2, 7, 50, 300, 384, 1024, 4096])) if trial % 3 else int(rng.integers(1, 4097))
        scale = 10.0 ** rng.choice([rng.uniform(-170, -150), rng.uniform(-45, 0), rng.uniform(0, 38)])
        values = np.clip(rng.standard_normal(dim) * scale, -FLOAT32_MAX, FLOAT32_MAX)
        if trial % 5 == 0:
            values = np.round(values, 6)  # a vector as JSON carries it, often all zeros at these scales
        assert within_float32(values)
        try:
            expected = unit_queries(values[None, :])[0]
        except InvalidQuery as exc:
            with pytest.raises(InvalidQuery, match=str(exc)):
                unit_vector(values)
            continue
        assert unit_vector(values).tobytes() == expected.tobytes(), (dim, scale)


def test_within_float32_is_false_for_nan_infinity_and_beyond() -> None:
    ok = np.array([1.0, -FLOAT32_MAX, FLOAT32_MAX])
    assert within_float32(ok) and within_float32(ok[None, :])
    for bad in (np.nan, np.inf, -np.inf, FLOAT32_MAX * 1.0001):
        values = np.array([0.5, bad, 2.0])
        assert not within_float32(values) and not within_float32(np.vstack([ok, values]))
