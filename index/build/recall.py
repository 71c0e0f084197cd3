"""Recall@k that counts tied rows as found.

Duplicate rows are common (a licence under two names, a README copied between packages, a document imported twice,
words with equal vectors), and among equal scores the exact top k is one arbitrary pick: an index answering with
the other copy is as right as exact search. So, as ann-benchmarks counts it, a found row is correct when its exact
score is at least the k-th exact score less :func:`tie_epsilon`; recall@k is the correct rows over k per query.

The queries are rows of the table, so each one's own row is left out of both its exact top k and the index's answer
(:func:`others`), as a neighbours query leaves out the word asked about: an index that finds a query's own row
has found nothing a query from outside the table would get, and counting it hides about a tenth of the misses
(GloVe 6B 50d's default graph: recall@10 0.9906 at efSearch 48 with it, 0.9889 without).
"""

from __future__ import annotations

import numpy as np

SCORE_BLOCK = 1024  # queries scored at a time: their found rows are gathered, k x dim floats each


def tie_epsilon(dim: int) -> float:
    """How far two float32 computations of the same inner product of unit rows may differ: each is a sum of
    ``dim`` products whose magnitudes add up to at most 1 (Cauchy-Schwarz), so its rounding error is at most about
    ``dim`` x float32's unit roundoff (2**-24), whatever the order of summation (BLAS for the exact top k, numpy
    here). Twice that bound covers both sides: 3.6e-5 at 300 dimensions, 1.2e-4 at 1,024. A fixed 1e-6 would miss
    copies whose two scores round apart; a row within this of the k-th is as near the query as float32 can tell."""
    return 2.0 * dim * float(np.finfo(np.float32).epsneg)


def others(values: np.ndarray, found: np.ndarray, own: np.ndarray) -> np.ndarray:
    """``values`` (queries, k + 1; the ids ``found`` themselves, or their scores) without the entry of each query's
    own id ``own`` in ``found`` (its first, or the row's last entry when the id is not there): (queries, k)."""
    match = np.asarray(found) == np.asarray(own)[:, None]
    position = np.where(match.any(axis=1), match.argmax(axis=1), found.shape[1] - 1)
    keep = np.arange(found.shape[1])[None, :] != position[:, None]
    kept: np.ndarray = np.asarray(values)[keep].reshape(len(found), found.shape[1] - 1)
    return kept


def kth_scores(scores: np.ndarray) -> np.ndarray:
    """The k-th exact score of each query, from exact search's (queries, k) scores in descending order."""
    return np.asarray(scores, dtype=np.float32)[:, -1]


def tied_found(queries: np.ndarray, vectors: np.ndarray, kth: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Which ``found`` ids (queries, k; -1 for none) score at least ``kth`` (each query's k-th exact score) less
    :func:`tie_epsilon`, scored exactly as the inner product of ``queries`` with the unit rows ``vectors``."""
    found = np.asarray(found, dtype=np.int64)
    eps = tie_epsilon(vectors.shape[1])
    out = np.zeros(found.shape, dtype=bool)
    for start in range(0, len(found), SCORE_BLOCK):
        ids = found[start : start + SCORE_BLOCK]
        valid = ids >= 0
        rows = np.asarray(vectors[np.where(valid, ids, 0).ravel()], dtype=np.float32).reshape(*ids.shape, -1)
        scores = np.einsum("qkd,qd->qk", rows, np.asarray(queries[start : start + SCORE_BLOCK], dtype=np.float32))
        out[start : start + SCORE_BLOCK] = valid & (
            scores >= np.asarray(kth[start : start + SCORE_BLOCK])[:, None] - eps
        )
    return out


def tied_recall(queries: np.ndarray, vectors: np.ndarray, kth: np.ndarray, found: np.ndarray, k: int) -> float:
    """Recall@``k`` of the ``found`` ids (queries, k), ties counted (:func:`tied_found`)."""
    return int(np.count_nonzero(tied_found(queries, vectors, kth, found))) / (len(queries) * k)
