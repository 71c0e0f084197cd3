"""What a caller asks the engine: one typed request per search, run by ``Table.run``.

- :class:`SearchOptions`: which rows may answer (``restrict``, token kinds) and whether to skip the
  approximate index (``exact``);
- :class:`VectorSearch`: the ``k`` nearest rows to each of some unit query vectors, each with its own rows left
  out (gensim leaves a query's input words out of its answer), optionally only among the rows a filter passes
  (``index.engine.filters``), from an offset (paging) and above a score;
- :class:`AnalogySearch`: "a is to b as c is to ?" questions, by 3CosAdd or 3CosMul.

``Table.run(request)`` answers one; ``Table.plan(request)`` splits a nearest-row search into its FAISS part and
the rest (``index.engine.table.Plan``), for the service's searcher thread.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from index.engine.filters import RowSet
from index.engine.knn import Neighbor
from index.errors import InvalidQuery

Method = Literal["3cosadd", "3cosmul"]
METHODS: tuple[Method, ...] = ("3cosadd", "3cosmul")


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """Which rows a search may answer with, and how it searches."""

    exact: bool = False  # brute force over the rows even when the table has an approximate index
    restrict: int | None = None  # only the first ``restrict`` rows (the most frequent, in frequency order)
    skip_special: bool = False  # leave out special tokens ([CLS], <s>, ...) of a model-token table
    whole_words_only: bool = False  # leave out word-piece continuations ("##ing") of a model-token table


# Requests are made once per query on the hot path and never changed after: plain slotted classes (a frozen
# dataclass pays for every field it sets).
@dataclass(slots=True, eq=False)
class VectorSearch:
    """The ``k`` nearest rows to each unit query (``queries``: m x dim float32), ``exclude[i]`` left out."""

    queries: np.ndarray
    k: int
    exclude: Sequence[Collection[int]] = ()  # empty, or one collection per query
    options: SearchOptions = field(default_factory=SearchOptions)
    rows: RowSet | None = None  # only these rows may answer (a filter's), None: every row
    offset: int = 0  # hits skipped first (paging): the answer is hits offset .. offset + k - 1
    min_score: float | None = None  # hits scoring below it left out

    def __len__(self) -> int:
        return len(self.queries)

    def excluded(self, position: int) -> Collection[int]:
        return self.exclude[position] if self.exclude else ()


@dataclass(slots=True, eq=False)
class AnalogySearch:
    """For each question (a, b, c) of row ids: the ``k`` best d for "a is to b as c is to d", a, b, c left out."""

    questions: Sequence[tuple[int, int, int]]
    k: int
    method: Method = "3cosadd"
    options: SearchOptions = field(default_factory=SearchOptions)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidQuery(f"unknown analogy method {self.method!r}: use 3cosadd or 3cosmul")

    def __len__(self) -> int:
        return len(self.questions)


Search = VectorSearch | AnalogySearch
Answers = list[list[Neighbor]]  # per query, its hits best first
