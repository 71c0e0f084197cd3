"""The one typed query every search form converges to, its per-item result and its per-item error.

A :class:`Query` names its input (exactly one of a token, a row id, a document id, positive/negative examples,
a raw vector or an analogy question; or a text, alone or beside a vector input in mode hybrid) and what to
answer: ``k`` hits from ``offset`` at or above ``min_score``, among the rows a ``filter`` passes, its inputs and
``exclude`` left out, by ``mode`` (vector, keyword or both fused) with the fusion's settings, re-ranked for
``diversity``. ``index.engine.door`` runs a batch of them against a table and answers each with a
:class:`Result` or a :class:`Failed`: one bad item never fails the others.

The mode rules (:func:`check_mode`) live here once and are read once, by each query made (:attr:`Query.problem`):
the request schema that makes a single query refuses its problem as the request's, and the door answers a batch
item's as that item's error. A request's own options are checked against its mode here too (:func:`check_fusion`,
:func:`check_options`). The door adds what a query cannot know, the table's keyword index, and refuses text beside
a vector input in mode vector as the search's own error, after the request's checks; ``index.engine.hybrid`` checks
none of them again (only that a request handed to it is whole). A query's page (``k``, ``offset``) is checked here
too, for any input (``index.engine.table.check_page``): a query made in process, not by a request model, is answered
by its own error rather than by a failure deep in a kernel.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from index.engine.fusion import RRF_K
from index.engine.hybrid import MODES, Hit, Mode
from index.engine.knn import Neighbor
from index.engine.table import Method, SearchOptions, check_page
from index.errors import EmbeddingError, InvalidQuery, shown

DEFAULT_OPTIONS = SearchOptions()


@dataclass(frozen=True, slots=True)
class Examples:
    """gensim ``most_similar``'s inputs: the normalised mean of the positive rows minus the negative ones, the
    inputs left out. ``documents``: the names are a documents table's ids, else tokens."""

    positive: Sequence[Any]
    negative: Sequence[Any]
    documents: bool = False


@dataclass(frozen=True, slots=True)
class Analogy:
    """a is to b as c is to ?; ``expect``: the answer whose rank, score and margin are reported."""

    a: str
    b: str
    c: str
    expect: str | None = None


# Made once per query on the hot path and never changed after: a plain slotted class.
@dataclass(slots=True, eq=False)
class Query:
    """One search. Input: exactly one of ``token``, ``row``, ``document``, ``examples``, ``vector`` and
    ``analogy``, or ``text`` alone (embedded by the table's encoder); ``text`` beside a vector input in mode
    hybrid (the keyword side)."""

    token: str | None = None
    row: int | None = None
    document: Any = None  # a documents table's id: more like it, itself left out
    examples: Examples | None = None
    vector: Sequence[float] | np.ndarray | None = None  # a client's vector, normalised by the door
    text: str | None = None
    analogy: Analogy | None = None
    k: int = 10
    offset: int = 0
    min_score: float | None = None
    filter: Any = None  # a filter on payload fields (``index.engine.filters``), None: every row
    exclude: Collection[int] = ()  # rows left out beside the inputs
    options: SearchOptions = DEFAULT_OPTIONS
    compose: Literal["mean"] | None = None  # a word that is not one row: the mean of its tokenizer pieces
    mode: Mode = "vector"
    rrf_k: float = RRF_K
    weights: tuple[float, float] | None = None  # (vector, keyword) weights of a hybrid search's fusion
    diversity: float | None = None  # Maximal Marginal Relevance's trade-off (None and 0: none)
    method: Method = "3cosadd"  # an analogy's
    fields: list[str] | None = None  # a documents table's payload fields to return (None: all)
    statistics: Any = None  # a sharded table's whole keyword statistics to score with (``index.engine.dfs``)
    # Whether the query has an input that stands for a vector (text aside): read where the query is made, so
    # the door asks the query nothing.
    vector_input: bool = field(init=False)
    # Whether it is one engine request with nothing around it (``index.engine.door.split``): an input that stands
    # for a vector, in mode vector, undiversified, unfiltered.
    plain: bool = field(init=False)
    # Whether its input is a word table's (token, row, word examples, analogy): searched by vector, no mode of its own.
    words_input: bool = field(init=False)
    # What is wrong with its page (k, offset: ``table.check_page``) or, of any other input, what the mode rules
    # (:func:`check_mode`) find wrong (None: nothing): the door answers it as the query's error.
    problem: str | None = field(init=False)

    def __post_init__(self) -> None:
        examples = self.examples
        self.words_input = (
            self.token is not None
            or self.row is not None
            or self.analogy is not None
            or (examples is not None and not examples.documents)
        )
        self.vector_input = (
            self.words_input or self.vector is not None or self.document is not None or examples is not None
        )
        self.plain = self.vector_input and self.mode == "vector" and not self.diversity and self.filter is None
        self.problem = None
        k, offset = self.k, self.offset
        try:
            # The page's rule (table.check_page) called for a page out of the usual only: a request model's query
            # enters no other module here, on the hot path
            if type(k) is not int or k < 1 or type(offset) is not int or offset < 0:
                check_page(k, offset)
            if not self.words_input:
                check_mode(self.mode, self.text, self.vector_input, self.min_score, self.diversity)
        except (ValueError, InvalidQuery) as exc:
            self.problem = str(exc)


@dataclass(slots=True, eq=False)
class Result:
    """One query's answer: its hits best first (``Hit`` when ``ranked``: a keyword, hybrid or diverse search, with
    each hit's ranks), the query as the answer echoes it, how many documents the filter passes (``passing``, with
    a filter), the mode taken instead of the one asked (``fallback``), and an analogy's expected answer."""

    hits: list[Neighbor] | list[Hit]
    query: dict[str, Any]
    passing: int | None = None
    fallback: dict[str, str] | None = None
    expect: dict[str, Any] | None = None
    ranked: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """One item's error: the batch answers its other items."""

    error: EmbeddingError


Answer = Result | Failed


def check_options(mode: str, min_score: float | None, diversity: float | None) -> None:
    """What a mode asks of the score floor and diversity (within 0..1); a ValueError says what is wrong."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {shown(mode)}: use one of {', '.join(MODES)}")
    if diversity is not None and not 0 <= diversity <= 1:
        raise ValueError(f"diversity must be between 0 and 1, not {shown(diversity)}")
    if mode == "vector" and min_score is not None and not -1 <= min_score <= 1:
        raise ValueError(f"min_score of mode vector is a cosine, between -1 and 1, got {min_score}")
    if mode == "keyword" and diversity:
        raise ValueError("diversity needs a query vector: it is for modes vector and hybrid, not keyword")


def check_fusion(given: Sequence[str], mode: str, item_modes: Sequence[str | None] | None) -> None:
    """Mode hybrid's fusion options (``given``: which of rrf_k and weights a request sets) where none of its queries
    is hybrid (``mode``, or a batch's ``item_modes``, each its own or the batch's): a ValueError, not left unread."""
    modes = [mode] if item_modes is None else [own or mode for own in item_modes]
    if given and "hybrid" not in modes:
        searched = "no query of the batch is" if item_modes else f"this search is mode {mode}, not"
        raise ValueError(
            f"{' and '.join(given)}: for mode hybrid, which fuses a vector and a keyword list; {searched} hybrid"
        )


def check_mode(
    mode: str, text: str | None, vector_query: bool, min_score: float | None, diversity: float | None
) -> None:
    """What a mode asks of one query; a ValueError says what is missing or out of place."""
    check_options(mode, min_score, diversity)
    if mode == "keyword":
        if text is None:
            raise ValueError("mode keyword needs text")
        if vector_query:
            raise ValueError("mode keyword searches by text alone: leave out vector, id and positive/negative ids")
    if mode == "hybrid" and text is None:
        raise ValueError(
            "mode hybrid needs text (with a vector, id or positive/negative ids, or alone on a table "
            "whose documents were embedded with --encoder)"
        )
