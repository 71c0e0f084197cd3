"""A documents table's search by vector, by keyword (BM25) or both (Reciprocal Rank Fusion), optionally re-ranked
for diversity (Maximal Marginal Relevance); the same filters, paging and score floor as a vector search.

- ``vector``: the nearest rows (``Table.run``); the score is the cosine.
- ``keyword``: ``KeywordIndex.search`` over the passing rows; the score is BM25.
- ``hybrid``: both lists, each ``max(offset + k, DEPTH)`` deep (every passing row when fewer pass), fused by
  :func:`index.engine.fusion.rrf`; the score is the fused RRF score.

Keyword and hybrid hits say their rank in each list that holds them. With ``diversity`` above 0 (vector and
hybrid: it needs a query vector) the best ``DIVERSE * (offset + k)`` candidates (at least ``DEPTH`` in hybrid
mode) are re-ranked by :func:`index.engine.fusion.mmr` on their unit rows, relevance being the cosine (vector) or the
fused score over the highest it can be (hybrid), those scoring below ``min_score`` (the mode's score) left out
first; a hit keeps its mode's own score. The page (``offset``) is taken after the re-ranking. Diversity 0 is the
plain search.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

import numpy as np

from index.engine.filters import RowSet
from index.engine.fusion import RRF_K, mmr, rrf
from index.engine.knn import Neighbor
from index.engine.table import SearchOptions, VectorSearch, check_page
from index.errors import InvalidQuery, counted, shown

Mode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[Mode, ...] = get_args(Mode)
LISTS = ("vector", "keyword")  # the lists a hybrid search fuses, in this order
DEPTH = 100  # candidates each list gives a hybrid search, at least
DIVERSE = 4  # candidates per hit a diverse search re-ranks


class KeywordSearch(Protocol):
    def search(
        self, texts: Sequence[str], k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...


class Source(Protocol):
    """What a search here reads of a table (``table.Table``, or ``live_search.LiveSource``)."""

    @property
    def name(self) -> str: ...
    @property
    def rows(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def keyword(self) -> KeywordSearch | None: ...
    @property
    def vectors(self) -> Any: ...
    def limit(self, options: SearchOptions) -> int: ...
    def run(self, search: VectorSearch) -> list[list[Neighbor]]: ...


@dataclass(frozen=True, slots=True)
class Hit:
    row: int
    score: float  # the mode's: cosine, BM25 or the fused RRF score
    ranks: dict[str, int] | None = None  # keyword and hybrid: the hit's rank (from 1) in each list holding it


@dataclass(slots=True, eq=False)
class DocumentSearch:
    """The ``k`` best documents for each query: ``queries`` (m x dim unit vectors, vector and hybrid modes, and
    with a ``diversity``) and ``texts`` (m query texts, keyword and hybrid modes), ``exclude[i]`` left out of both
    lists. Made by ``index.engine.door`` from queries that passed the mode rules (``index.engine.query``) and the
    table's check of its keyword index; :func:`run` checks that it is whole (:func:`check`) for any other caller."""

    mode: Mode
    k: int
    queries: np.ndarray | None = None
    texts: Sequence[str] | None = None
    exclude: Sequence[Collection[int]] = ()
    options: SearchOptions = field(default_factory=SearchOptions)
    rows: RowSet | None = None  # only these rows may answer (a filter's), None: every row
    offset: int = 0
    min_score: float | None = None
    rrf_k: float = RRF_K
    weights: tuple[float, float] | None = None  # (vector, keyword) weights of the fusion
    diversity: float = 0.0

    def __len__(self) -> int:
        return len(self.queries) if self.queries is not None else len(self.texts or ())


def depths(search: DocumentSearch, rows: int) -> tuple[int, int]:
    """(candidates per list, candidates kept for the page or the re-ranking), both at most ``rows``."""
    want = search.offset + search.k
    pool = DIVERSE * want if search.diversity > 0 else want
    if search.mode == "hybrid":
        pool = max(pool, DEPTH) if search.diversity > 0 else pool
        return min(max(pool, DEPTH), rows), min(pool, rows)
    return min(pool, rows), min(pool, rows)


def check(table: Source, search: DocumentSearch) -> None:
    """The InvalidQuery of a ``search`` that ``table`` cannot run as given: an unknown mode, a page out of range, a
    diversity outside 0..1, a mode's or diversity's input missing (query vectors of the table's width, texts), as
    many of them as queries and of ``exclude``'s collections, or a keyword search of a table without a keyword
    index. The door's queries always pass (its rules, read per query, say more); this holds for any caller."""
    if search.mode not in MODES:
        raise InvalidQuery(f"unknown mode {shown(search.mode)}: use one of {', '.join(MODES)}")
    k, offset = search.k, search.offset
    if type(k) is not int or k < 1 or type(offset) is not int or offset < 0:  # check_page: a page out of the usual
        check_page(k, offset)
    if not 0 <= search.diversity <= 1:
        raise InvalidQuery(f"diversity must be between 0 and 1, not {shown(search.diversity)}")
    m = len(search)
    if search.mode != "keyword" or search.diversity > 0:
        dim = table.dim
        if search.queries is None or np.ndim(search.queries) != 2 or np.shape(search.queries)[1] != dim:
            given = "none" if search.queries is None else f"shape {list(np.shape(search.queries))}"
            why = f"mode {search.mode}" if search.mode != "keyword" else "diversity"
            raise InvalidQuery(f"{why} needs query vectors, one row of {dim} values per query, not {given}")
    if search.mode != "vector":
        if search.texts is None:
            raise InvalidQuery(f"mode {search.mode} needs texts, one per query")
        if table.keyword is None:
            raise InvalidQuery(f"mode {search.mode}: table {table.name!r} has no keyword index; search it by vector")
    lists: dict[str, Sized | None] = {"texts": search.texts, "exclude": search.exclude or None}
    for name, items in lists.items():
        if items is not None and len(items) != m:
            raise InvalidQuery(f"{name} holds {counted(len(items), 'item')}, not one per query ({m})")


def run(table: Source, search: DocumentSearch) -> list[list[Hit]]:
    """Answer ``search`` on ``table`` (checked first: :func:`check`): per query, its hits best first."""
    check(table, search)
    m = len(search)
    per_list, pool = depths(search, table.rows)
    vector = _vector_lists(table, search, per_list) if search.mode != "keyword" else None
    keyword = _keyword_lists(table, search, per_list, m) if search.mode != "vector" else None
    answers = []
    for q in range(m):
        if search.mode == "vector" and vector is not None:
            ids, scores = vector[q]
            ranks = None
        elif search.mode == "keyword" and keyword is not None:
            ids, scores = keyword[q]
            ranks = np.arange(1, len(ids) + 1)[:, None]
        else:
            assert vector is not None and keyword is not None
            fused = rrf([vector[q][0], keyword[q][0]], k=search.rrf_k, weights=search.weights, limit=pool)
            ids, scores, ranks = fused.ids, fused.scores, fused.ranks
        order = reaching(scores[:pool], search.min_score)
        if search.diversity > 0:
            order = order[_diverse(table, search, q, ids[order], scores[order])]
        answers.append(_page(search, ids, scores, ranks, order))
    return answers


def _vector_lists(table: Source, search: DocumentSearch, depth: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each query's nearest rows (ids, cosines), ``depth`` of them (fewer when fewer rows pass), equal cosines by
    row (as the keyword list's equal scores are); none of an empty table (a page of no hits is no search's)."""
    assert search.queries is not None
    if depth == 0:
        return [(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64))] * len(search.queries)
    answers = table.run(VectorSearch(search.queries, depth, search.exclude, search.options, search.rows))
    out = []
    for hits in answers:
        ids = np.array([i for i, _ in hits], dtype=np.int64)
        scores = np.array([s for _, s in hits], dtype=np.float64)
        order = np.lexsort((ids, -scores))
        out.append((ids[order], scores[order]))
    return out


def _keyword_lists(table: Source, search: DocumentSearch, depth: int, m: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each query text's best rows by BM25 (ids, scores) among the rows that may answer, inputs left out."""
    assert table.keyword is not None and search.texts is not None
    allowed = None if search.rows is None else search.rows.mask
    limit = table.rows if search.options.restrict is None else table.limit(search.options)  # every row, as limit()
    if limit < table.rows:
        allowed = (np.ones(table.rows, dtype=bool) if allowed is None else allowed.copy()) & (
            np.arange(table.rows) < limit
        )
    widest = max(map(len, search.exclude), default=0)
    if not table.rows:  # a shard compacted empty
        return [(np.zeros(0, dtype=np.int64), np.zeros(0))] * m
    scores, ids = table.keyword.search(search.texts, min(depth + widest, table.rows), allowed)
    out = []
    for q in range(m):
        real = ids[q] >= 0
        if search.exclude and search.exclude[q]:
            real &= ~np.isin(ids[q], np.fromiter(search.exclude[q], dtype=np.int64))
        out.append((ids[q][real][:depth], scores[q][real][:depth].astype(np.float64)))
    return out


def _diverse(table: Source, search: DocumentSearch, q: int, ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The page's candidates in MMR order (indices into ``ids``)."""
    assert search.queries is not None
    return diverse(search, search.queries[q], table.vectors[ids], scores)


def diverse(search: DocumentSearch, query: np.ndarray, candidates: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The order (indices into ``candidates``, the unit rows of the best hits, best first, scored ``scores`` in
    the search's mode) in which MMR picks the page's candidates for the unit vector ``query``: relevance is the
    cosine (vector) or the fused score over the highest it can be (hybrid)."""
    relevance = None
    if search.mode == "hybrid":
        weights = (1.0, 1.0) if search.weights is None else search.weights
        best = sum(weights) / (search.rrf_k + 1)  # a hit first in every list
        relevance = scores / best if best > 0 else scores
    chosen, _ = mmr(query, candidates, search.offset + search.k, search.diversity, relevance)
    return chosen


def reaching(scores: np.ndarray, min_score: float | None) -> np.ndarray:
    """The places of the hits scoring at least ``min_score`` (every hit without one), in order: those a page is
    taken from, after diversity re-ranks them, so that a floor leaves a page short only when too few reach it."""
    return np.arange(len(scores)) if min_score is None else np.flatnonzero(scores >= min_score)


def _page(
    search: DocumentSearch, ids: np.ndarray, scores: np.ndarray, ranks: np.ndarray | None, order: np.ndarray
) -> list[Hit]:
    """Hits ``offset .. offset + k - 1`` of ``order``."""
    hits = []
    for i in order[search.offset : search.offset + search.k].tolist():
        named = None
        if ranks is not None:
            lists = LISTS if ranks.shape[1] == 2 else ("keyword",)
            named = {name: int(rank) for name, rank in zip(lists, ranks[i].tolist(), strict=True) if rank}
        hits.append(Hit(int(ids[i]), float(scores[i]), named))
    return hits
