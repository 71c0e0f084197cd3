"""Reciprocal Rank Fusion and Maximal Marginal Relevance against plain-Python brute forces.

RRF is checked by hand on small lists and, on random lists (hypothesis), against a loop over the lists that sums
each id's ``weight / (k + rank)`` in list order, exactly as floats (and within 1e-12 of exact fractions). MMR is
checked against a float64 greedy loop over the candidates (one inner product at a time) on random unit rows and
on real GloVe rows, with diversity 0 giving the input's own order.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from index.build.sources import RawTable
from index.engine.fusion import RRF_K, mmr, rrf
from index.errors import InvalidQuery
from tests.vectors import unit

# ------------------------------------------------------------------------------------------------ RRF


def rrf_brute(lists: list[list[int]], k: float, weights: list[float]) -> list[tuple[int, float, list[int]]]:
    """(id, score, ranks) best first: a loop over each list, best rank and first list breaking ties."""
    score: dict[int, float] = {}
    ranks: dict[int, list[int]] = {}
    for j, ranked in enumerate(lists):
        seen: set[int] = set()
        for position, doc in enumerate(ranked, start=1):
            if doc < 0 or doc in seen:
                continue
            seen.add(doc)
            score[doc] = score.get(doc, 0.0) + weights[j] / (k + position)
            ranks.setdefault(doc, [0] * len(lists))[j] = position

    def key(doc: int) -> tuple[float, int, int]:
        best = min(r for r in ranks[doc] if r > 0)
        return (-score[doc], best, ranks[doc].index(best))

    return [(doc, score[doc], ranks[doc]) for doc in sorted(score, key=key)]


def test_rrf_by_hand() -> None:
    fused = rrf([[1, 2, 3], [3, 1]])
    # 1: 1/61 + 1/62; 3: 1/63 + 1/61; 2: 1/62
    assert fused.ids.tolist() == [1, 3, 2]
    assert fused.scores.tolist() == pytest.approx([1 / 61 + 1 / 62, 1 / 63 + 1 / 61, 1 / 62], rel=1e-15)
    assert fused.ranks.tolist() == [[1, 2], [3, 1], [2, 0]]
    assert RRF_K == 60


def test_rrf_weights_k_limit_and_padding() -> None:
    # A weight of 3 on the second list lifts its first hit above a hit ranked first and second.
    fused = rrf([[5, 7, -1, -1], [7, 9]], weights=[1.0, 3.0], k=0)
    # 5: 1/1; 7: 1/2 + 3/1; 9: 3/2
    assert fused.ids.tolist() == [7, 9, 5]
    assert fused.scores.tolist() == [3.5, 1.5, 1.0]
    assert rrf([[5, 7], [7, 9]], limit=1).ids.tolist() == [7]
    assert len(rrf([[-1], []])) == 0
    # Equal scores: the best rank first; then the first list giving it.
    assert rrf([[1, 2], [3, 4]]).ids.tolist() == [1, 3, 2, 4]
    # A list's repeat of an id is ignored; its later ids keep their own positions as ranks.
    assert rrf([[4, 4, 6]]).ranks.tolist() == [[1], [3]]


@pytest.mark.parametrize(
    "call",
    [
        lambda: rrf([[1]], k=-1),
        lambda: rrf([[1]], k=float("nan")),
        lambda: rrf([[1], [2]], weights=[1.0]),
        lambda: rrf([[1]], weights=[-1.0]),
        lambda: rrf([[1]], limit=-1),
    ],
)
def test_rrf_refuses(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidQuery):
        call()


ranked_lists = st.lists(st.lists(st.integers(-1, 40), max_size=30), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(
    lists=ranked_lists,
    k=st.one_of(st.just(60.0), st.integers(0, 100).map(float), st.floats(0, 1000)),
    data=st.data(),
)
def test_rrf_against_brute_force(lists: list[list[int]], k: float, data: st.DataObject) -> None:
    weights = data.draw(st.one_of(st.none(), st.lists(st.floats(0, 5), min_size=len(lists), max_size=len(lists))))
    fused = rrf([np.array(ranked) for ranked in lists], k=k, weights=weights)
    used = weights or [1.0] * len(lists)
    expected = rrf_brute(lists, k, used)
    assert fused.ids.tolist() == [doc for doc, _, _ in expected]
    assert fused.scores.tolist() == [score for _, score, _ in expected]  # the same sums in the same order
    assert fused.ranks.tolist() == [ranks for _, _, ranks in expected]
    for _, score, ranks in expected:
        exact = sum(Fraction(w) / (Fraction(k) + r) for w, r in zip(used, ranks, strict=True) if r)
        assert abs(score - float(exact)) <= 1e-12 * max(1.0, float(exact))


# ------------------------------------------------------------------------------------------------ MMR


def mmr_brute(
    query: np.ndarray, rows: np.ndarray, k: int, diversity: float, relevance: np.ndarray | None = None
) -> tuple[list[int], list[float]]:
    """Greedy MMR over float64 rows, one candidate and one inner product at a time."""
    n = len(rows)
    rel = [float(np.dot(rows[i], query)) for i in range(n)] if relevance is None else list(map(float, relevance))
    chosen: list[int] = []
    values: list[float] = []
    for _ in range(min(k, n)):
        best, best_key = -1, (-np.inf, -np.inf, 0)
        for i in range(n):
            if i in chosen:
                continue
            closest = max((float(np.dot(rows[i], rows[j])) for j in chosen), default=0.0)
            value = (1 - diversity) * rel[i] - diversity * closest if chosen else rel[i]
            key = (value, rel[i], -i)
            if key > best_key:
                best, best_key = i, key
        closest = max((float(np.dot(rows[best], rows[j])) for j in chosen), default=0.0)
        chosen.append(best)
        values.append((1 - diversity) * rel[best] - diversity * closest)
    return chosen, values


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 60),
    dim=st.integers(2, 24),
    k=st.integers(0, 70),
    diversity=st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0, 1)),
    given_relevance=st.booleans(),
)
def test_mmr_against_brute_force(seed: int, n: int, dim: int, k: int, diversity: float, given_relevance: bool) -> None:
    rng = np.random.default_rng(seed)
    rows = unit(rng.standard_normal((n, dim)))
    query = unit(rng.standard_normal(dim))
    relevance = rng.uniform(-1, 1, n) if given_relevance else None
    chosen, values = mmr(query, rows.astype(np.float32), k, diversity, relevance)
    expected, expected_values = mmr_brute(query, rows.astype(np.float32).astype(np.float64), k, diversity, relevance)
    assert chosen.tolist() == expected
    np.testing.assert_allclose(values, expected_values, rtol=1e-9, atol=1e-12)
    assert len(set(chosen.tolist())) == len(chosen) == min(k, n)


def test_mmr_without_diversity_keeps_the_order(glove_raw: RawTable) -> None:
    rows = unit(glove_raw.matrix[:2000].astype(np.float64))
    query = unit(glove_raw.matrix[glove_raw.tokens.index("heart")].astype(np.float64))
    relevance = rows @ query
    by_relevance = np.argsort(-relevance, kind="stable")
    candidates = rows[by_relevance[:100]]
    chosen, values = mmr(query, candidates, 20, 0.0)
    assert chosen.tolist() == list(range(20))  # candidates come best first: the same order
    np.testing.assert_allclose(values, relevance[by_relevance[:20]], rtol=1e-12)
    shuffled = np.random.default_rng(1).permutation(len(rows))
    assert (
        mmr(query, rows[shuffled], 30, 0.0)[0].tolist() == np.argsort(-relevance[shuffled], kind="stable")[:30].tolist()
    )


@pytest.mark.parametrize("diversity", [0.3, 0.5, 0.8, 1.0])
def test_mmr_on_glove_against_brute_force(glove_raw: RawTable, diversity: float) -> None:
    """The 200 nearest words of 'heart': with diversity the picks move away from each other."""
    rows = unit(glove_raw.matrix.astype(np.float64))
    query = rows[glove_raw.tokens.index("heart")]
    nearest = np.argsort(-(rows @ query), kind="stable")[1:201]
    candidates = rows[nearest]
    chosen, values = mmr(query, candidates, 15, diversity)
    expected, expected_values = mmr_brute(query, candidates, 15, diversity)
    assert chosen.tolist() == expected
    np.testing.assert_allclose(values, expected_values, rtol=1e-9, atol=1e-12)
    assert chosen[0] == 0  # the most relevant first, whatever the diversity
    plain = candidates[:15]
    picked = candidates[chosen]
    redundancy = [np.triu(m @ m.T, 1).max() for m in (plain, picked)]
    assert redundancy[1] < redundancy[0]


def test_mmr_ties_and_duplicates() -> None:
    rows = unit(np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
    query = unit(np.array([1.0, 0.2]))
    # The duplicate of the first pick is as similar to it as can be: with diversity it comes last.
    assert mmr(query, rows, 4, 0.7)[0].tolist() == [0, 2, 3, 1]
    assert mmr(query, rows, 4, 0.0)[0].tolist() == [0, 1, 3, 2]
    # Equal relevance: by position.
    same = np.ones(4)
    assert mmr(query, rows, 2, 0.0, relevance=same)[0].tolist() == [0, 1]
    assert mmr(query, rows, 0, 0.5)[0].tolist() == []
    assert mmr(query, rows[:0], 5, 0.5)[0].tolist() == []


@pytest.mark.parametrize(
    "call",
    [
        lambda: mmr(np.ones(2), np.ones((3, 2)), 2, 1.5),
        lambda: mmr(np.ones(2), np.ones((3, 2)), 2, -0.1),
        lambda: mmr(np.ones(2), np.ones((3, 2)), -1, 0.5),
        lambda: mmr(np.ones(2), np.ones((3, 2)), 2, 0.5, relevance=np.ones(2)),
        lambda: mmr(np.ones(2), np.ones(3), 2, 0.5),
    ],
)
def test_mmr_refuses(call: Callable[[], object]) -> None:
    with pytest.raises(InvalidQuery):
        call()
