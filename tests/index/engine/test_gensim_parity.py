"""The query engine against gensim's KeyedVectors on the same GloVe 6B 50d rows: same ids, same order, same scores.

A swap of two neighbours is allowed only where their scores differ by less than 1e-6 (float rounding: gensim
divides raw rows by their norms, the table stores unit rows).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from gensim.models import KeyedVectors

from index.engine.table import Neighbor, Table

WORDS = (  # noqa: SIM905
    "the king queen paris computer heart music river dog cat apple microsoft einstein physics guitar coffee "
    "democracy bank bright quickly running beautiful november germany tokyo football doctor hospital ocean "
    "mountain violin sugar painting theory engine airport rain winter teacher language bread gold silver red "
    "seven happy angry liberty planet virus aardvark kumquat xylophone quixotic"
).split()
QUERIES = [  # (positive, negative)
    (["king", "woman"], ["man"]),
    (["paris", "italy"], ["france"]),
    (["walking", "swam"], ["walked"]),
    (["computer", "music", "art"], []),
    (["good"], ["bad", "evil"]),
    (["tokyo", "germany", "river"], ["japan"]),
    ([], ["cold"]),
]
ANALOGIES = [("man", "king", "woman"), ("france", "paris", "japan"), ("good", "better", "bad"), ("cat", "cats", "dog")]


def ids(table: Table, words: Sequence[str]) -> list[int]:
    out = []
    for word in words:
        found = table.find(word)
        assert found is not None and found.match == "exact", word
        out.append(found.id)
    return out


def assert_same(ours: list[Neighbor], theirs: list[tuple[str, float]], kv: KeyedVectors) -> None:
    """Same rows in the same order (bar swaps of float ties), scores to 1e-5."""
    assert len(ours) == len(theirs)
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)
    our_ids = [i for i, _ in ours]
    their_ids = [kv.key_to_index[w] for w, _ in theirs]
    for pos, (mine, their) in enumerate(zip(our_ids, their_ids, strict=True)):
        if mine != their:
            assert abs(ours[pos][1] - theirs[pos][1]) < 1e-6, (pos, ours, theirs)
            assert mine in their_ids[max(0, pos - 1) : pos + 2] or pos == len(our_ids) - 1, (pos, ours, theirs)


@pytest.mark.parametrize("word", WORDS)
def test_neighbours(glove: Table, glove_kv: KeyedVectors, word: str) -> None:
    (row,) = ids(glove, [word])
    assert_same(glove.most_similar([row], k=10, exact=True), glove_kv.most_similar(word, topn=10), glove_kv)


@pytest.mark.parametrize("word", WORDS[::5])
@pytest.mark.parametrize("restrict", [1_000, 50_000])
def test_neighbours_restricted(glove: Table, glove_kv: KeyedVectors, word: str, restrict: int) -> None:
    (row,) = ids(glove, [word])
    ours = glove.most_similar([row], k=10, exact=True, restrict=restrict)
    assert all(i < restrict for i, _ in ours)
    assert_same(ours, glove_kv.most_similar(word, topn=10, restrict_vocab=restrict), glove_kv)


@pytest.mark.parametrize(("positive", "negative"), QUERIES)
def test_multi_word_queries(glove: Table, glove_kv: KeyedVectors, positive: list[str], negative: list[str]) -> None:
    pos, neg = ids(glove, positive), ids(glove, negative)
    expected = glove_kv.most_similar(positive=positive, negative=negative, topn=15)
    assert_same(glove.most_similar(pos, neg, k=15, exact=True), expected, glove_kv)
    restricted = glove_kv.most_similar(positive=positive, negative=negative, topn=15, restrict_vocab=20_000)
    assert_same(glove.most_similar(pos, neg, k=15, exact=True, restrict=20_000), restricted, glove_kv)
    if positive:
        cosmul = glove_kv.most_similar_cosmul(positive=positive, negative=negative, topn=15)
        assert_same(glove.most_similar_cosmul(pos, neg, k=15), cosmul, glove_kv)


@pytest.mark.parametrize(("a", "b", "c"), ANALOGIES)
def test_analogies(glove: Table, glove_kv: KeyedVectors, a: str, b: str, c: str) -> None:
    ia, ib, ic = ids(glove, [a, b, c])
    add = glove_kv.most_similar(positive=[b, c], negative=[a], topn=10)
    assert_same(glove.analogy(ia, ib, ic, k=10, method="3cosadd", exact=True), add, glove_kv)
    mul = glove_kv.most_similar_cosmul(positive=[b, c], negative=[a], topn=10)
    assert_same(glove.analogy(ia, ib, ic, k=10, method="3cosmul", exact=True), mul, glove_kv)


def test_cosmul_restricted(glove: Table, glove_kv: KeyedVectors) -> None:
    """restrict narrows 3CosMul's candidates to the first rows, as restrict_vocab narrows 3CosAdd's; gensim's
    most_similar_cosmul ignores restrict_vocab, so its scores of every row are cut to those rows here."""
    ia, ib, ic = ids(glove, ["man", "king", "woman"])
    scores = glove_kv.most_similar_cosmul(positive=["king", "woman"], negative=["man"], topn=None)[:1_000].copy()
    scores[[i for i in (ia, ib, ic) if i < 1_000]] = -np.inf
    best = np.argsort(-scores, kind="stable")[:10]
    expected = [(glove_kv.index_to_key[i], float(scores[i])) for i in best]
    assert_same(glove.analogy(ia, ib, ic, k=10, method="3cosmul", restrict=1_000), expected, glove_kv)


def test_similarity(glove: Table, glove_kv: KeyedVectors) -> None:
    rows = ids(glove, WORDS)
    pairs = list(zip(WORDS, WORDS[1:] + WORDS[:1], strict=True))
    for (first, second), (i, j) in zip(pairs, zip(rows, rows[1:] + rows[:1], strict=True), strict=True):
        assert glove.similarity(i, j) == pytest.approx(float(glove_kv.similarity(first, second)), abs=1e-6)
    batch = glove.similarities(np.asarray(rows), np.asarray(rows[1:] + rows[:1]))
    np.testing.assert_allclose(batch, [glove_kv.similarity(a, b) for a, b in pairs], atol=1e-6)


def test_approximate_neighbours_recall(glove: Table) -> None:
    """The default search (the table's HNSW index) finds nearly all the exact neighbours."""
    assert glove.approximate
    rows = ids(glove, WORDS)
    recalls = []
    for row in rows:
        exact = {i for i, _ in glove.most_similar([row], k=10, exact=True)}
        approximate = {i for i, _ in glove.most_similar([row], k=10)}
        recalls.append(len(exact & approximate) / 10)
    assert np.mean(recalls) >= 0.95
    assert sum(r == 1.0 for r in recalls) >= 0.8 * len(rows)
