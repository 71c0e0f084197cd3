"""Combining and re-ranking hits: Reciprocal Rank Fusion and Maximal Marginal Relevance.

- :func:`rrf`: Reciprocal Rank Fusion (Cormack, Clarke and Buettcher, SIGIR 2009) of several ranked lists of
  ids. A hit's fused score is the sum over the lists that hold it of ``weight / (k + rank)``, its rank counted
  from 1 in each list, ``k = 60`` by default. Equal fused scores go by the hit's best rank, then by the first
  list that gives it that rank; a fused hit says its rank in every list (0 where a list does not hold it).
- :func:`mmr`: Maximal Marginal Relevance (Carbonell and Goldstein, SIGIR 1998) as Qdrant defines it: the most
  relevant candidate first, then, one at a time, the candidate with the best
  ``(1 - diversity) * relevance - diversity * (its highest similarity to a candidate already chosen)``, the
  similarities being inner products of unit rows (cosines). Diversity 0 gives the candidates by relevance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from index.engine.budget import spend
from index.errors import InvalidQuery

RRF_K = 60
MMR_STEP = 500  # what one step of MMR costs beside its comparisons, counted as comparing this many candidates


@dataclass(frozen=True)
class Fused:
    """A fused ranking, best first: ``ids[i]`` scored ``scores[i]`` and stood at ``ranks[i, j]`` in list ``j``."""

    ids: np.ndarray  # int64
    scores: np.ndarray  # float64
    ranks: np.ndarray  # int64, (hits, lists); 1-based, 0: not in that list

    def __len__(self) -> int:
        return len(self.ids)


def rrf(
    lists: Sequence[np.ndarray | Sequence[int]],
    *,
    k: float = RRF_K,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> Fused:
    """Fuse ranked lists of ids (each best first; ids below 0 are padding, and a list's repeat of an id is
    ignored) into one ranking, at most ``limit`` long."""
    if not np.isfinite(k) or k < 0:
        raise InvalidQuery(f"the RRF constant k must be a number >= 0, not {k}")
    if limit is not None and limit < 0:
        raise InvalidQuery(f"limit must be at least 0, not {limit}")
    weight = np.ones(len(lists)) if weights is None else np.asarray(weights, dtype=np.float64)
    if weight.shape != (len(lists),) or not np.isfinite(weight).all() or (weight < 0).any():
        raise InvalidQuery(f"RRF needs one finite weight >= 0 per list ({len(lists)}), not {list(weight)}")
    arrays = [np.asarray(ranked, dtype=np.int64).reshape(-1) for ranked in lists]
    ids = np.concatenate([np.zeros(0, dtype=np.int64), *arrays])
    which = np.repeat(np.arange(len(arrays)), [len(a) for a in arrays])
    rank = np.concatenate([np.zeros(0, dtype=np.int64), *(np.arange(1, len(a) + 1) for a in arrays)])
    real = ids >= 0
    ids, which, rank = ids[real], which[real], rank[real]
    # A list's first holding of an id: the first of each (list, id) pair in list order.
    _, first = np.unique(which * (ids.max(initial=0) + 1) + ids, return_index=True)
    first.sort()
    ids, which, rank = ids[first], which[first], rank[first]
    unique, hit = np.unique(ids, return_inverse=True)
    scores = np.bincount(hit, weights=weight[which] / (k + rank), minlength=len(unique))  # sums in list order
    ranks = np.zeros((len(unique), len(arrays)), dtype=np.int64)
    ranks[hit, which] = rank
    held = np.where(ranks > 0, ranks, np.iinfo(np.int64).max)
    best_rank, best_list = held.min(axis=1, initial=np.iinfo(np.int64).max), held.argmin(axis=1)
    order = np.lexsort((best_list, best_rank, -scores))[:limit]
    return Fused(unique[order], scores[order], ranks[order])


def mmr(
    query: np.ndarray,
    candidates: np.ndarray,
    k: int,
    diversity: float,
    relevance: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Choose ``k`` of ``candidates`` (unit rows) for ``query`` (a unit vector) by Maximal Marginal Relevance:
    (indices into ``candidates`` in the order chosen, each one's MMR score when chosen).

    ``relevance`` defaults to the candidates' inner products with the query; given, it should be on the same
    scale as a cosine (the similarities between candidates are). Equal MMR scores go by relevance, then by
    position among the candidates. ``diversity`` 0 gives the candidates by relevance (their order when they come
    best first); 1 only avoids what is already chosen.
    """
    if not 0.0 <= diversity <= 1.0:
        raise InvalidQuery(f"diversity must be between 0 and 1, not {diversity}")
    if k < 0:
        raise InvalidQuery(f"k must be at least 0, not {k}")
    rows = np.asarray(candidates, dtype=np.float64)
    if rows.ndim != 2:
        raise InvalidQuery(f"candidates must be a matrix of rows, not of shape {rows.shape}")
    relevant = rows @ np.asarray(query, dtype=np.float64) if relevance is None else np.asarray(relevance, np.float64)
    if relevant.shape != (len(rows),):
        raise InvalidQuery(f"one relevance per candidate ({len(rows)}), not {relevant.shape}")
    count = min(k, len(rows))
    spend(
        count * (len(rows) + MMR_STEP),
        "diversity: the candidates compared with each hit chosen",
        "ask fewer hits (offset + k) or fewer queries at a time",
        f" ({count:,} hits x {len(rows):,} candidates, and {MMR_STEP:,} for each hit's step)",
    )
    chosen = np.empty(count, dtype=np.int64)
    scores = np.empty(count, dtype=np.float64)
    closest = np.zeros(len(rows))  # each candidate's highest similarity to those chosen
    left = np.ones(len(rows), dtype=bool)
    for step in range(count):
        value = (1.0 - diversity) * relevant - diversity * closest if step else relevant
        value = np.where(left, value, -np.inf)
        best = np.flatnonzero(value == value.max())
        pick = int(best[np.argmax(relevant[best])])  # argmax: the first of equal relevance
        chosen[step], scores[step] = pick, (1.0 - diversity) * relevant[pick] - diversity * closest[pick]
        left[pick] = False
        if step + 1 < count:
            closest = np.maximum(closest, rows @ rows[pick]) if step else rows @ rows[pick]
    return chosen, scores
