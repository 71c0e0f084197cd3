"""What a caller asks the engine: one typed request per search, run by ``Table.run``.

- :class:`SearchOptions`: which rows may answer (``restrict``, token kinds) and whether to skip the
  approximate index (``exact``);
- :class:`VectorSearch`: the ``k`` nearest rows to each of some unit query vectors, each with its own rows left
  out (gensim leaves a query's input words out of its answer);
- :class:`AnalogySearch`: "a is to b as c is to ?" questions, by 3CosAdd or 3CosMul.

A request knows how to join others like it into one (``key`` says which can be joined, ``join`` makes the
joined request, ``split`` hands each its part of the answers): the service's searcher thread runs the requests
of overlapping HTTP calls as one engine call. Joined or alone, each query gets the same answer.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

import numpy as np

from index.errors import InvalidQuery
from index.knn import Neighbor

Method = Literal["3cosadd", "3cosmul"]
METHODS: tuple[Method, ...] = ("3cosadd", "3cosmul")


@dataclass(frozen=True)
class SearchOptions:
    """Which rows a search may answer with, and how it searches."""

    exact: bool = False  # brute force over the rows even when the table has an approximate index
    restrict: int | None = None  # only the first ``restrict`` rows (the most frequent, in frequency order)
    skip_special: bool = False  # leave out special tokens ([CLS], <s>, ...) of a model-token table
    whole_words_only: bool = False  # leave out word-piece continuations ("##ing") of a model-token table

    def __post_init__(self) -> None:
        if self.restrict is not None and self.restrict < 1:
            raise InvalidQuery("restrict must be at least 1")


@dataclass(frozen=True)
class VectorSearch:
    """The ``k`` nearest rows to each unit query (``queries``: m x dim float32), ``exclude[i]`` left out."""

    queries: np.ndarray
    k: int
    exclude: Sequence[Collection[int]] = ()  # empty, or one collection per query
    options: SearchOptions = field(default_factory=SearchOptions)

    def __len__(self) -> int:
        return len(self.queries)

    def excluded(self, position: int) -> Collection[int]:
        return self.exclude[position] if self.exclude else ()

    def key(self) -> Hashable:
        """Requests with the same key are joined; the widest exclusion is part of it, since it sets how many
        hits the index is asked for (and an approximate index's answer can depend on that)."""
        return ("vector", self.k, self.options, max((len(e) for e in self.exclude), default=0))

    @staticmethod
    def join(requests: Sequence[VectorSearch]) -> VectorSearch:
        first = requests[0]
        if len(requests) == 1:
            return first
        queries = np.vstack([r.queries for r in requests])
        exclude = [r.excluded(i) for r in requests for i in range(len(r))]
        return VectorSearch(queries, first.k, exclude, first.options)


@dataclass(frozen=True)
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

    def key(self) -> Hashable:
        return ("analogy", self.k, self.method, self.options)

    @staticmethod
    def join(requests: Sequence[AnalogySearch]) -> AnalogySearch:
        first = requests[0]
        if len(requests) == 1:
            return first
        return AnalogySearch([q for r in requests for q in r.questions], first.k, first.method, first.options)


Search = VectorSearch | AnalogySearch
Answers = list[list[Neighbor]]  # per query, its hits best first


def join(requests: Sequence[Search]) -> Search:
    """One request for several with the same :meth:`key` (so of one class)."""
    first = requests[0]
    if isinstance(first, VectorSearch):
        return VectorSearch.join(cast(Sequence[VectorSearch], requests))
    return AnalogySearch.join(cast(Sequence[AnalogySearch], requests))


def split(requests: Sequence[Search], answers: Answers) -> list[Answers]:
    """Each joined request's part of the joined answers, in order."""
    out, start = [], 0
    for request in requests:
        out.append(answers[start : start + len(request)])
        start += len(request)
    return out
