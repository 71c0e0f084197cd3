"""Exact top-k for batches of analogy questions ("a is to b as c is to ?"), 3CosAdd or 3CosMul.

The search is exact and batched. Rather than scoring every (question, row) pair with a 50-term dot product, it
uses the shape of the queries: every score is a function of one term per (a, b) pair and one per c, both read
off a single product of the table with the few hundred distinct question words. Rows are streamed in chunks
and cut into blocks of 16; a block whose best possible score (the best pair term plus the best c term in it)
cannot reach a question's current k-th best score is skipped, and the survivors are scored exactly. Final
scores are recomputed the way gensim computes them, so the ranking is gensim's up to float rounding.

The evaluation (``index.build.evaluate``) and the service's batch analogy endpoint both use :func:`analogy_top`.
:func:`cosmul_top` is the plain 3CosMul (every row scored, any number of positive and negative words), for
what the pruned search does not cover: gensim's general ``most_similar_cosmul`` and searches that leave token
kinds out.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from index.engine.knn import Neighbor, exact_knn, top_k
from index.errors import InvalidQuery

COSMUL_EPSILON = 1e-6  # gensim's guard against division by zero in 3CosMul

BLOCK = 8  # rows per pruning block
SUPER = 16  # blocks per superblock (the first, coarser pruning level)
OFFSETS = np.arange(BLOCK)
CHUNK_ROWS = 16_384  # rows per streamed chunk (a multiple of BLOCK * SUPER) ...
CHUNK_BYTES = 1 << 26  # ... unless its terms would take more memory than this
SEED_ROWS = 16_384  # rows searched exhaustively (3CosAdd) first, for the initial k-th best scores
BOUND_CELLS = 1 << 22  # (question x block) cells per bound evaluation
THREADS = max(1, min(4, os.cpu_count() or 1))
MARGIN = 1e-4  # slack for float rounding between the block bounds and the exact scores


class Table(Protocol):
    """What the analogy search reads of a table: its unit rows."""

    @property
    def vectors(self) -> np.ndarray: ...


def cosmul(positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """Levy and Goldberg's 3CosMul from shifted cosines ``(1 + cos) / 2``, one term per leading row: the product
    of the positive terms over the product of the negative ones plus gensim's epsilon."""
    scores: np.ndarray = np.prod(positive, axis=0) / (np.prod(negative, axis=0) + np.float32(COSMUL_EPSILON))
    return scores


def cosmul_top(
    vectors: np.ndarray,
    queries: Sequence[tuple[Sequence[int], Sequence[int]]],
    k: int,
    limit: int,
    dropped: np.ndarray | None = None,
    chunk_bytes: int = 64 << 20,
) -> list[list[Neighbor]]:
    """gensim ``most_similar_cosmul`` for each (positive, negative) query over the first ``limit`` rows, its
    words and the rows ``dropped`` (a boolean per row) left out: one matrix product per chunk of queries."""
    if any(not positive for positive, _ in queries):
        raise InvalidQuery("3CosMul needs at least one positive token")
    base = vectors[:limit]
    per_chunk = max(1, chunk_bytes // (4 * limit * 4))  # about 3 term rows and 1 score row per query
    results: list[list[Neighbor]] = []
    for start in range(0, len(queries), per_chunk):
        chunk = queries[start : start + per_chunk]
        terms = [i for positive, negative in chunk for i in (*positive, *negative)]
        # rows x terms, as gensim scores each term against every row, then one term per leading row
        shifted = ((1 + base @ np.asarray(vectors[terms], dtype=np.float32).T) / 2).T
        scores = np.empty((len(chunk), limit), dtype=np.float32)
        row = 0
        for qi, (positive, negative) in enumerate(chunk):
            middle, end = row + len(positive), row + len(positive) + len(negative)
            scores[qi] = cosmul(shifted[row:middle], shifted[middle:end])
            row = end
            scores[qi, [i for i in (*positive, *negative) if i < limit]] = -np.inf
        if dropped is not None:
            scores[:, dropped[:limit]] = -np.inf
        results.extend(top_k(s, k) for s in scores)
    return results


def _rows(table: Table, start: int, stop: int) -> np.ndarray:
    return np.asarray(table.vectors[start:stop], dtype=np.float32)


class _Terms:
    """Score terms: one per distinct (a, b) pair and one per distinct c, for a run of rows.

    3CosAdd: ``x.(b - a) + x.c`` is ``|b + c - a|`` times the cosine of row x with the query. 3CosMul: the ratio
    ``sb / (sa + eps)`` times ``sc``, where ``s = (1 + cos) / 2``.
    """

    def __init__(self, table: Table, method: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        self.add = method == "3cosadd"
        n = len(a)
        words, inverse = np.unique(np.concatenate([a, b, c]), return_inverse=True)
        ia, ib, ic = inverse[:n], inverse[n : 2 * n], inverse[2 * n :]
        pairs, self.pair_of = np.unique(ia * len(words) + ib, return_inverse=True)
        self.pair_a, self.pair_b = np.divmod(pairs, len(words))
        self.c_words, c_of = np.unique(ic, return_inverse=True)
        self.pairs = len(pairs)
        self.c_of = c_of + self.pairs  # c terms follow the pair terms
        self.unit = _rows_at(table, words)
        mean = self.unit[ib].astype(np.float64) + self.unit[ic] - self.unit[ia]
        norm = np.linalg.norm(mean, axis=1)
        self.query = (mean / norm[:, None]).astype(np.float32)  # 3CosAdd: gensim's most_similar query
        self.scale = norm if self.add else np.ones(n)
        if self.add:
            self.matrix = np.concatenate([self.unit[self.pair_b] - self.unit[self.pair_a], self.unit[self.c_words]])
        self.vectors = {"a": self.unit[ia], "b": self.unit[ib], "c": self.unit[ic]}

    @property
    def width(self) -> int:
        return self.pairs + len(self.c_words)

    def compute(self, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The terms of ``rows`` into ``out`` (rows x terms: pair terms, then c terms)."""
        if self.add:
            return np.matmul(rows, self.matrix.T, out=out)
        shifted = (1 + rows @ self.unit.T) / 2
        np.divide(
            shifted[:, self.pair_b], shifted[:, self.pair_a] + np.float32(COSMUL_EPSILON), out=out[:, : self.pairs]
        )
        out[:, self.pairs :] = shifted[:, self.c_words]
        return out

    def combine(self, pair: np.ndarray, word: np.ndarray) -> np.ndarray:
        combined: np.ndarray = pair + word if self.add else pair * word
        return combined

    def bound(self, pair_max: np.ndarray, word_max: np.ndarray) -> np.ndarray:
        bound: np.ndarray = pair_max + word_max if self.add else np.maximum(pair_max, 0) * np.maximum(word_max, 0)
        return bound

    def exact(self, table: Table, q: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Scores of rows ``r`` for questions ``q``, computed as gensim computes them (float32)."""
        rows = _rows_at(table, r)
        scores: np.ndarray
        if self.add:
            scores = np.einsum("ij,ij->i", rows, self.query[q])
            return scores
        b, c, a = ((1 + np.einsum("ij,ij->i", rows, self.vectors[w][q])) / 2 for w in "bca")
        return cosmul(np.stack([b, c]), a[None, :])


def _rows_at(table: Table, ids: np.ndarray) -> np.ndarray:
    rows: np.ndarray = np.asarray(table.vectors[ids], dtype=np.float32)
    return rows


def _threshold(best: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """k-th best score so far, in the terms' scale, lowered by the rounding slack."""
    level = best.min(axis=1) * scale
    threshold: np.ndarray = (level - MARGIN * np.maximum(np.abs(level), 1)).astype(np.float32)
    return threshold


def _merge_best(best: np.ndarray, q: np.ndarray, scores: np.ndarray, width: int = 32) -> np.ndarray:
    """Fold new scores into each question's k best (up to ``width`` new ones per question, its best)."""
    if not len(q):
        return best
    order = np.lexsort((-scores, q))
    q, scores = q[order], scores[order]
    rank = np.arange(len(q)) - np.searchsorted(q, np.arange(len(best)))[q]
    keep = rank < width
    extra = np.full((len(best), width), -np.inf, dtype=best.dtype)
    extra[q[keep], rank[keep]] = scores[keep]
    k = best.shape[1]
    return -np.partition(-np.concatenate([best, extra], axis=1), k - 1, axis=1)[:, :k]


@dataclass
class _ChunkScan:
    """The rows of one chunk that can still reach the k best of questions ``lo:hi``: (questions, rows, scores)."""

    terms: _Terms
    values: np.ndarray  # blocks x BLOCK x terms
    super_max: np.ndarray  # terms x superblocks
    block_max: np.ndarray  # terms x superblocks x SUPER
    threshold: np.ndarray
    start: int
    size: int
    seed: np.ndarray | None  # rows already counted per question, when the chunk overlaps the seeds

    def __call__(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        terms, threshold = self.terms, self.threshold
        bound = terms.bound(self.super_max[terms.pair_of[lo:hi]], self.super_max[terms.c_of[lo:hi]])
        q, sup = np.nonzero(bound >= threshold[lo:hi, None])
        q += lo
        pairs, words = terms.pair_of[q], terms.c_of[q]
        bound = terms.bound(self.block_max[pairs, sup], self.block_max[words, sup])
        hit, sub = np.nonzero(bound >= threshold[q, None])
        q, blk, pairs, words = q[hit], sup[hit] * SUPER + sub, pairs[hit], words[hit]
        values = self.values
        exact = terms.combine(
            values[blk[:, None], OFFSETS, pairs[:, None]], values[blk[:, None], OFFSETS, words[:, None]]
        )
        hit, offset = np.nonzero(exact >= threshold[q, None])
        row = blk[hit] * BLOCK + offset
        keep = row < self.size
        if self.seed is not None:  # leave out the seeds, already counted
            keep &= ~(self.seed[q[hit]] == (self.start + row)[:, None]).any(axis=1)
        hit, offset, row = hit[keep], offset[keep], row[keep]
        return q[hit], self.start + row, exact[hit, offset] / terms.scale[q[hit]]


def analogy_top(
    table: Table,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    k: int,
    method: str,
    limit: int,
    done: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` (ids, scores) among the first ``limit`` rows for questions "a is to b as c is to ?".

    3CosAdd scores are cosines with the normalised ``b + c - a``; 3CosMul scores are Levy and Goldberg's, with
    gensim's shift to [0, 1]. Best first; ties by lower id; ``-1`` pads when ``limit < k``. A ``limit`` past the
    table's rows is the whole table. ``done(rows)`` as the rows are searched (the builder's progress): ``limit`` in all.
    """
    n = len(a)
    limit = min(limit, len(table.vectors))
    k = min(k, limit)
    terms = _Terms(table, method, a, b, c)
    scale = terms.scale
    head = min(SEED_ROWS, limit)
    # 1. Seeds: the exact 3CosAdd top k among the first rows (one blocked product); their exact scores for the
    # method give every question a k-th best score to beat before the rest is searched.
    _, seed = exact_knn(terms.query, _rows(table, 0, head), k)
    found_q, found_r = [np.repeat(np.arange(n), k)], [seed.ravel()]
    best = terms.exact(table, found_q[0], found_r[0]).reshape(n, k).astype(np.float64)
    found_s = [best.ravel()]
    threshold = _threshold(best, scale)
    # 2. The other rows, chunk by chunk: a superblock (SUPER blocks), then a block of BLOCK rows, is skipped
    # when its best pair term combined with its best c term cannot reach the question's k-th best so far.
    span = BLOCK * SUPER
    chunk_rows = max(span, min(CHUNK_ROWS, CHUNK_BYTES // (4 * terms.width)) // span * span)
    buffer = np.empty((chunk_rows, terms.width), dtype=np.float32)
    with ThreadPoolExecutor(THREADS) as pool:  # numpy releases the GIL in the heavy steps: slices run in parallel
        start = head if terms.add else 0  # 3CosAdd seeds are exhaustive over the first rows; 3CosMul ones are not
        if done is not None and start:
            done(start)
        while start < limit:
            # Chunks double up to chunk_rows, so the thresholds tighten before the bulk of the rows.
            stop = min(limit, start + min(chunk_rows, max(span, start)))
            size = stop - start
            padded = -(-size // span) * span
            values = terms.compute(_rows(table, start, stop), buffer[:size])
            buffer[size:padded] = -np.inf
            values = buffer[:padded].reshape(padded // BLOCK, BLOCK, terms.width)
            block_max = values.max(axis=1)  # blocks x terms
            super_max = np.ascontiguousarray(block_max.reshape(-1, SUPER, terms.width).max(axis=1).T)  # terms x supers
            block_max = np.ascontiguousarray(block_max.T).reshape(terms.width, -1, SUPER)  # terms x supers x SUPER
            step = max(1, min(BOUND_CELLS // super_max.shape[1], -(-n // THREADS)))
            scan = _ChunkScan(
                terms, values, super_max, block_max, threshold, start, size, seed if start < head else None
            )
            parts = list(pool.map(scan, range(0, n, step), [min(n, lo + step) for lo in range(0, n, step)]))
            q, r, s = (np.concatenate(column) for column in zip(*parts, strict=True))
            found_q.append(q)
            found_r.append(r)
            found_s.append(s)
            best = _merge_best(best, q, s)
            threshold = _threshold(best, scale)
            if done is not None:
                done(size)
            start = stop
    # 3. Exact scores (as gensim computes them) of the candidates that can still make it; best k per question.
    q, r, s = np.concatenate(found_q), np.concatenate(found_r), np.concatenate(found_s)
    keep = s * scale[q] >= threshold[q]
    q, r = q[keep], r[keep]
    scores = terms.exact(table, q, r)
    order = np.lexsort((r, -scores, q))
    q, r, scores = q[order], r[order], scores[order]
    rank = np.arange(len(q)) - np.searchsorted(q, np.arange(n))[q]
    first = rank < k
    ids = np.full((n, k), -1, dtype=np.int64)
    top = np.full((n, k), -np.inf, dtype=np.float32)
    ids[q[first], rank[first]] = r[first]
    top[q[first], rank[first]] = scores[first]
    return ids, top
