"""Word diagnostics over a :class:`~index.engine.table.Table`, answered as gensim's ``KeyedVectors`` answers them.

- :func:`doesnt_match` (gensim ``doesnt_match`` / ``rank_by_centrality``): the words ranked by the cosine of
  their unit rows with the normalised mean of those unit rows; the odd one out is the last. A word the table does
  not have is left out (gensim ignores it), and repeated words count once per occurrence, as in gensim;
- :func:`closer_than` and :func:`rank` (gensim ``closer_than`` / ``rank``): the rows whose cosine with ``a`` is
  strictly greater than that of ``b``, ``a`` itself left out, in row order; ``rank`` is their number plus one;
- :func:`n_similarity` (gensim ``n_similarity``): the cosine of the means of the two sets' ORIGINAL rows (gensim
  averages the raw vectors here, not the unit ones);
- :func:`analogy_expectations`: where an expected answer ranks among an analogy's candidates (3CosAdd or 3CosMul,
  a, b and c left out, as gensim ``most_similar`` / ``most_similar_cosmul`` rank them), its score and the margin
  to the best candidate;
- :func:`compare`: a word's neighbours in two tables side by side, and their overlap@k.

Words resolve as everywhere else in the engine (:meth:`Table.find`: exact, then case-folded), so a word gensim
would not know ("Paris" in a lower-cased table) is found here under its case-folded row; every answer says which
row each word resolved to. Scores over every row are one matrix product (chunked for batches).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from index.engine.analogy import cosmul
from index.engine.budget import spend_exact
from index.engine.knn import inner_products, unit_mean
from index.engine.table import Neighbor, Resolved, SearchOptions, Table, VectorSearch
from index.errors import InvalidQuery, UnknownToken, shown
from index.store.tokens import FLAG_SPECIAL

CHUNK_BYTES = 64 << 20  # memory of one block of (row x query) scores


# ------------------------------------------------------------------------------------------------- words
@dataclass(frozen=True)
class Words:
    """Words of a request resolved to rows; ``unknown`` are the ones the table does not have."""

    found: list[Resolved]
    unknown: list[str]

    @property
    def ids(self) -> np.ndarray:
        return np.array([r.id for r in self.found], dtype=np.int64)


def resolve_words(table: Table, words: Sequence[str], skip_unknown: bool = True) -> Words:
    """Each word's row; an unknown word is left out (gensim's way) or, without ``skip_unknown``, a 404."""
    if not words:
        raise InvalidQuery("give at least one word")
    found: list[Resolved] = []
    unknown: list[str] = []
    for word in words:
        resolved = table.find(word) if skip_unknown else table.resolve(word)
        if resolved is None:
            unknown.append(word)
        else:
            found.append(resolved)
    if not found:  # gensim: "cannot select a word from an empty list"
        raise UnknownToken(
            f"none of the words is in table {table.name!r}", suggestions=table.suggest(words[0]), token=words[0]
        )
    return Words(found, unknown)


def _unit(table: Table, ids: np.ndarray) -> np.ndarray:
    return np.asarray(table.vectors[ids], dtype=np.float64)


# ----------------------------------------------------------------------------------------- doesnt_match
@dataclass(frozen=True)
class Centrality:
    """gensim ``rank_by_centrality``: (word, cosine with the normalised mean of the unit rows), most central first."""

    ranking: list[tuple[Resolved, float]]
    unknown: list[str]

    @property
    def odd_one_out(self) -> Resolved:
        return self.ranking[-1][0]


def rank_by_centrality(table: Table, words: Sequence[str], skip_unknown: bool = True) -> Centrality:
    """The words by cosine with the mean of their unit rows, as gensim ``rank_by_centrality`` computes it, step for
    step: the rows summed one after another in float32 and divided by their count, scaled to unit length by
    BLAS's ``dnrm2`` and ``dscal`` in float64 and rounded back to float32 (``matutils.unitvec``), then one float32
    product. Two words' scores are equal but for that rounding, so only gensim's own steps give gensim's order."""
    from scipy.linalg.blas import dnrm2, dscal  # on the first call only: SciPy's BLAS, as gensim calls it

    resolved = resolve_words(table, words, skip_unknown)
    unit = np.asarray(table.vectors[resolved.ids], dtype=np.float32)
    mean = np.cumsum(unit, axis=0)[-1] / np.float32(len(unit))  # summed in order, as gensim's loop adds
    norm = float(dnrm2(mean.astype(np.float64)))
    if norm > 0:  # gensim's unitvec keeps a zero vector
        mean = np.asarray(dscal(1.0 / norm, mean.astype(np.float64)), dtype=np.float32)
    scores = (unit @ mean).astype(np.float64)
    # gensim sorts (float32 score, key) pairs in reverse: equal scores go to the later key in string order.
    pairs = sorted(zip(scores.tolist(), resolved.found, strict=True), key=lambda p: (p[0], p[1].token), reverse=True)
    return Centrality([(r, s) for s, r in pairs], resolved.unknown)


def doesnt_match(table: Table, words: Sequence[str], skip_unknown: bool = True) -> Centrality:
    """gensim ``doesnt_match``: the word least similar to the mean is ``.odd_one_out`` (the ranking's last)."""
    return rank_by_centrality(table, words, skip_unknown)


# --------------------------------------------------------------------------------- rank and closer_than
def _per_block(rows: int, terms: int = 1) -> int:
    """Queries per block of scores, so that one block (``terms`` x rows x queries float32) fits CHUNK_BYTES."""
    return max(1, CHUNK_BYTES // (4 * rows * terms))


def rows_scores(table: Table, rows: np.ndarray) -> np.ndarray:
    """Cosine of every row with each of ``rows`` (rows x len(rows), float32, as gensim's ``distances`` computes
    them) by one matrix product at least two columns wide: a row's column is then the same whatever rows come with
    it, where numpy's product of one column (a matrix-vector product) rounds its sums otherwise."""
    queries = table.vectors[rows if len(rows) > 1 else np.repeat(rows, 2)]
    scores: np.ndarray = (table.vectors @ queries.T)[:, : len(rows)]
    return scores


def row_scores(table: Table, row: int) -> np.ndarray:
    """Cosine of every row with row ``row`` (:func:`rows_scores`)."""
    return rows_scores(table, np.array([row]))[:, 0]


def closer_than(table: Table, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """gensim ``closer_than(a, b)``: (ids in row order, their cosines with ``a``) of the rows closer to ``a``
    than ``b`` is, ``a`` itself left out."""
    scores = row_scores(table, a)
    closer = scores > scores[b]
    closer[a] = False
    ids = np.flatnonzero(closer)
    return ids, scores[ids]


def ranks(table: Table, a: Sequence[int], b: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """gensim ``rank(a[i], b[i])`` for many pairs (1 + the number of rows closer to a than b, a left out), and
    the cosine of each pair, from one matrix product per block of pairs."""
    a_ids, b_ids = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    advice = "send fewer pairs at a time (each scores every row, exact or not)"  # rank takes no exact
    spend_exact(len(a_ids), table.rows, "rank: its pairs", advice)
    out = np.empty(len(a_ids), dtype=np.int64)
    cosines = np.empty(len(a_ids), dtype=np.float32)
    step = _per_block(table.rows)
    for start in range(0, len(a_ids), step):
        qa, qb = a_ids[start : start + step], b_ids[start : start + step]
        scores = rows_scores(table, qa)  # rows x pairs
        columns = np.arange(len(qa))
        threshold = scores[qb, columns]
        above = np.count_nonzero(scores > threshold, axis=0) - (scores[qa, columns] > threshold)
        out[start : start + len(qa)] = above + 1
        cosines[start : start + len(qa)] = threshold
    return out, cosines


def rank(table: Table, a: int, b: int) -> int:
    """gensim ``rank(a, b)``: where ``b`` ranks among the neighbours of ``a`` (1: the nearest)."""
    return int(ranks(table, [a], [b])[0][0])


# --------------------------------------------------------------------------------------------- n_similarity
@dataclass(frozen=True)
class SetSimilarity:
    similarity: float
    first: Words
    second: Words


def mean_row(table: Table, ids: np.ndarray) -> np.ndarray:
    """The mean of the ORIGINAL rows (unit row x norm), as gensim ``get_mean_vector(pre_normalize=False)``."""
    mean: np.ndarray = (_unit(table, ids) * np.asarray(table.norms[ids], dtype=np.float64)[:, None]).mean(axis=0)
    return mean


def n_similarity(
    table: Table, words1: Sequence[str], words2: Sequence[str], skip_unknown: bool = True
) -> SetSimilarity:
    """gensim ``n_similarity``: cosine of the two sets' mean original vectors; unknown words left out.

    Unlike gensim, a set with no known word is refused (404) instead of scoring 0.0 with a zero mean.
    """
    first, second = resolve_words(table, words1, skip_unknown), resolve_words(table, words2, skip_unknown)
    left, right = mean_row(table, first.ids), mean_row(table, second.ids)
    norms = np.sqrt(left @ left) * np.sqrt(right @ right)
    return SetSimilarity(float(left @ right / norms) if norms > 0 else 0.0, first, second)


# ------------------------------------------------------------------------------------------ analogy ranks
@dataclass(frozen=True)
class Expectation:
    """Where the expected answer of an analogy ranks (1: the answer), its score, and the best score's lead."""

    rank: int
    score: float
    top: float

    @property
    def margin(self) -> float:
        """How far the best candidate's score is ahead of the expected word's (0 when it is the answer)."""
        return self.top - self.score

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "score": self.score, "margin": self.margin}


def check_expected(
    table: Table, question: tuple[int, int, int], expected: int, options: SearchOptions = SearchOptions()
) -> None:
    """422 for an expected answer the analogy can never give: one of a, b, c, outside the searched rows, or a
    token kind left out."""
    limit, drop = table.limit(options), table.drop_bits(options)
    word = f"the expected word {shown(table.tokens.labels([expected])[0])}"
    if expected in question:
        raise InvalidQuery(f"{word} is one of a, b and c, which are left out of the answers: expect another word")
    if expected >= limit:
        raise InvalidQuery(
            f"{word} is row {expected:,}, outside the first {limit:,} rows searched (restrict): "
            f"raise restrict above {expected:,} or leave it out"
        )
    left_out = drop & int(table.flags[expected]) if table.flags is not None else 0
    if left_out:
        kind, option = (
            ("a special token", "skip_special")
            if left_out & FLAG_SPECIAL
            else ("a continuation piece", "whole_words_only")
        )
        raise InvalidQuery(
            f"{word} is {kind}, which {option} leaves out of the answers: send {option}: false to rank it"
        )


def analogy_scores(words: np.ndarray, base: np.ndarray, method: str) -> np.ndarray:
    """Every row of ``base`` scored for each question's unit rows ``words`` (questions x 3 x dim: a, b, c) as
    :meth:`Table.analogy` scores it (3CosAdd: the cosine with gensim's normalised b + c - a; 3CosMul: gensim's
    ``most_similar_cosmul``): questions x rows. A question alone scores each row the same wherever it sits
    (``knn.inner_products``), so that a shard scores its rows as the whole table does."""
    if method == "3cosadd":
        query = np.vstack([unit_mean(rows[[1, 2, 0]], 2) for rows in words])  # Table.mean_query([b, c], [a])
        cosines: np.ndarray = inner_products(query, base)
        return cosines
    sa, sb, sc = ((1 + inner_products(words[:, i], base)) / 2 for i in range(3))
    scores: np.ndarray = cosmul(np.stack([sb, sc]), sa[None])
    return scores


def analogy_expectations(
    table: Table,
    questions: Sequence[tuple[int, int, int]] | np.ndarray,
    expected: Sequence[int] | np.ndarray,
    method: str = "3cosadd",
    *,
    restrict: int | None = None,
    skip_special: bool = False,
    whole_words_only: bool = False,
    done: Callable[[int], None] | None = None,
) -> list[Expectation]:
    """The rank, score and margin of ``expected[i]`` among the answers to "a is to b as c is to ?".

    Every candidate row is scored as :meth:`Table.analogy` scores it (3CosAdd: cosine with the normalised
    b + c - a over the first ``restrict`` rows; 3CosMul: gensim's ``most_similar_cosmul``), a, b, c and
    left-out token kinds excluded (:func:`analogy_scores`); the rank is 1 + the number of candidates scoring
    strictly higher. ``done(questions)`` after each block of questions (the builder's progress).
    """
    if method not in ("3cosadd", "3cosmul"):
        raise InvalidQuery(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
    options = SearchOptions(restrict=restrict, skip_special=skip_special, whole_words_only=whole_words_only)
    limit = table.limit(options)
    for question, row in zip(questions, expected, strict=True):
        check_expected(table, question, row, options)
    base = table.vectors[:limit]
    dropped = table.dropped(options)
    quads = np.asarray(questions, dtype=np.int64).reshape(-1, 3)
    want = np.asarray(expected, dtype=np.int64)
    out: list[Expectation] = []
    step = _per_block(limit, 3 if method == "3cosmul" else 1)
    for start in range(0, len(quads), step):
        a, b, c = quads[start : start + step].T
        words = table.vectors[quads[start : start + step].ravel()].reshape(len(a), 3, -1)
        scores = analogy_scores(words, base, method)
        rows = np.arange(len(a))[:, None]
        inputs = np.stack([a, b, c], axis=1)
        scores[np.broadcast_to(rows, inputs.shape)[inputs < limit], inputs[inputs < limit]] = -np.inf
        if dropped is not None:
            scores[:, dropped[:limit]] = -np.inf
        mine = scores[rows[:, 0], want[start : start + step]]
        higher = np.count_nonzero(scores > mine[:, None], axis=1)
        top = scores.max(axis=1)
        out.extend(Expectation(int(h) + 1, float(s), float(t)) for h, s, t in zip(higher, mine, top, strict=True))
        if done is not None:
            done(len(a))
    return out


# ------------------------------------------------------------------------------------------------ compare
@dataclass(frozen=True)
class Comparison:
    """A word's ``k`` neighbours in two tables, and how many labels the two lists share."""

    first: list[Neighbor]
    second: list[Neighbor]
    shared: list[str]  # labels in both lists, in the first list's order
    k: int

    @property
    def overlap(self) -> float:
        """overlap@k: the share of the ``k`` neighbours both tables give (by label)."""
        return len(self.shared) / self.k if self.k else 0.0


def compare(
    first: Table,
    second: Table,
    rows: Sequence[tuple[int, int]],
    k: int = 10,
    options: SearchOptions = SearchOptions(),
) -> list[Comparison]:
    """For each (row in ``first``, row in ``second``) of one word, its ``k`` neighbours in each table (the word
    left out, as ``most_similar``), one search per table for all the words; tables are matched by label."""
    if not rows:
        return []
    hits = []
    for table, ids in ((first, [r for r, _ in rows]), (second, [r for _, r in rows])):
        queries = np.asarray(table.vectors[ids], dtype=np.float32)
        hits.append(table.run(VectorSearch(queries, k, [{i} for i in ids], options)))
    out = []
    for mine, theirs in zip(*hits, strict=True):
        labels = first.tokens.labels([i for i, _ in mine])
        others = set(second.tokens.labels([i for i, _ in theirs]))
        size = min(k, max(len(mine), len(theirs)))
        out.append(Comparison(mine, theirs, [label for label in labels if label in others], size))
    return out
