"""Top-k kernels over unit rows: exact inner-product search and the best of a score vector."""

from __future__ import annotations

from collections.abc import Collection

import faiss
import numpy as np

SMALL_BATCH = 2  # up to this many queries a plain matrix product beats FAISS's blocked search
GATHER_BELOW = 4  # a filtered exact search gathers its rows when fewer than 1 in GATHER_BELOW pass
MASKED_BLOCK_BYTES = 64 << 20  # scores of a filtered exact search computed at once
TAIL_BLOCK = 16  # a multiple of the rows BLAS's inner-product kernels take at once (see inner_products)

Neighbor = tuple[int, float]  # (row id, score)
Hits = tuple[np.ndarray, np.ndarray]  # (scores, ids), one row per query, best first; id -1 pads


def exact_knn(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force inner-product top-``k``: one BLAS product for a few queries, FAISS's blocked search beyond."""
    if len(queries) > SMALL_BATCH:
        return faiss.knn(queries, base, k, metric=faiss.METRIC_INNER_PRODUCT)
    return best_of(inner_products(queries, base), k)


def inner_products(queries: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``queries @ base.T`` (float32); for up to ``SMALL_BATCH`` queries, each row's score the same wherever the
    row sits in ``base``.

    BLAS computes the last rows of a matrix (its length modulo the kernel's block) with another kernel, whose
    sums round differently: the same row would score one unit in the last place apart at the end of a shard and
    in the middle of the whole table. The last ``len(base) % TAIL_BLOCK`` rows are scored in a zero-padded block
    of their own, through the main kernel as every other row. A larger batch is one matrix product, whose tiles
    round by their place in both matrices (so a batch's cosine may differ in the last place from one query's)."""
    matrix = np.asarray(base)
    if len(queries) > SMALL_BATCH:
        product: np.ndarray = queries @ matrix.T
        return product
    n = len(matrix)
    head = n - n % TAIL_BLOCK
    out = np.empty((len(queries), n), dtype=np.float32)
    np.matmul(queries, matrix[:head].T, out=out[:, :head])
    if head < n:
        tail = np.zeros((TAIL_BLOCK, matrix.shape[1]), dtype=np.float32)
        tail[: n - head] = matrix[head:]
        out[:, head:] = (queries @ tail.T)[:, : n - head]
    return out


def best_of(scores: np.ndarray, k: int) -> Hits:
    """The ``k`` best (scores, ids) of each row of a queries x rows score matrix, best first, equal scores by id
    (also at the k-th place: of equal scores there, the lowest ids are kept)."""
    n = scores.shape[1]
    if k >= n:
        best = np.broadcast_to(np.arange(n), scores.shape)
        top = scores
    else:
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(scores, best, axis=1)
        last = top.min(axis=1)
        for q in np.flatnonzero(np.count_nonzero(scores == last[:, None], axis=1) > (top == last[:, None]).sum(1)):
            # more rows score the k-th score than were kept: keep those of the lowest ids
            above = np.flatnonzero(scores[q] > last[q])
            tied = np.flatnonzero(scores[q] == last[q])[: k - len(above)]
            best[q] = np.concatenate([above, tied])
            top[q] = scores[q, best[q]]
    order = np.lexsort((best, -top), axis=1) if len(best) else np.zeros(best.shape, dtype=np.int64)
    return np.take_along_axis(top, order, axis=1), np.take_along_axis(best, order, axis=1).astype(np.int64)


def exact_knn_rows(queries: np.ndarray, base: np.ndarray, k: int, rows: np.ndarray, mask: np.ndarray) -> Hits:
    """:func:`exact_knn` over only the rows ``rows`` of ``base`` (``mask``: the same rows as a boolean per row).

    A few rows are gathered and searched; many are searched in place, the others' scores set to -inf (a gather
    would copy most of the matrix). Ids are rows of ``base``; ``k`` at most ``len(rows)``."""
    if len(rows) * GATHER_BELOW < len(base):
        scores, ids = exact_knn(queries, np.ascontiguousarray(base[rows]), k)
        return scores, np.where(ids >= 0, rows[np.maximum(ids, 0)], -1)
    out_scores = np.empty((len(queries), k), dtype=np.float32)
    out_ids = np.empty((len(queries), k), dtype=np.int64)
    step = max(1, MASKED_BLOCK_BYTES // (4 * len(base)))
    for start in range(0, len(queries), step):
        scores = inner_products(queries[start : start + step], base)
        scores[:, ~mask] = -np.inf
        out_scores[start : start + step], out_ids[start : start + step] = best_of(scores, k)
    return out_scores, out_ids


def top_k(scores: np.ndarray, k: int, exclude: Collection[int] = ()) -> list[Neighbor]:
    """The ``k`` best (id, score) pairs of a full score vector, best first, ``exclude`` left out."""
    want = min(len(scores), k + len(exclude))
    best = np.argpartition(-scores, want - 1)[:want] if want < len(scores) else np.arange(len(scores))
    best = best[np.argsort(-scores[best], kind="stable")]
    out = [(int(i), float(scores[i])) for i in best if int(i) not in exclude and np.isfinite(scores[i])]
    return out[:k]
