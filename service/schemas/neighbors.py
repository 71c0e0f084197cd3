"""Request and response schemas of the neighbour routes: ``GET``/``POST .../neighbors``."""

from __future__ import annotations

from typing import Annotated, cast

from pydantic import BaseModel, Field, model_validator

from index.engine.door import Examples, Query
from service.schemas.common import (
    CHECK_BATCH,
    COMPOSE_HELP,
    QUERY,
    SINGLE_QUERY_FORMS,
    Compose,
    ExamplesQuery,
    ItemErrorResponse,
    Neighbor,
    QueryInfo,
    RowId,
    Token,
    TokenOptions,
    Tokens,
    batch_of,
    check_hits,
    check_work,
    given,
    nonempty,
    one_form,
    present,
)


class NeighborsParams(TokenOptions):
    """Query string of ``GET .../neighbors``: one token (or row id)."""

    model_config = QUERY

    token: Token | None = None
    id: RowId | None = None
    compose: Compose | None = Field(None, description=COMPOSE_HELP)

    @model_validator(mode="after")
    def _one_query(self) -> NeighborsParams:
        if (self.token is None) == (self.id is None):
            raise ValueError("give exactly one of token or id")
        return self

    def query(self) -> Query:
        """The engine's query: this token's (or row's) neighbours."""
        item = self.token if self.token is not None else cast(int, self.id)  # the validator asks for one
        return word_query(item, self, self.compose)


class NeighborsQuery(BaseModel):
    """One query of a batch: a token, a row id, or positive/negative tokens (gensim ``most_similar``)."""

    model_config = one_form(*SINGLE_QUERY_FORMS)

    token: Token | None = None
    id: RowId | None = None
    positive: Tokens = []
    negative: Tokens = []

    @model_validator(mode="after")
    def _one_form(self) -> NeighborsQuery:
        forms = (self.token is not None) + (self.id is not None) + bool(self.positive or self.negative)
        if forms != 1:
            raise ValueError("give exactly one of token, id, or positive/negative tokens")
        return self


NeighborsBatch = Annotated[list[Token | NeighborsQuery], batch_of("a batch: tokens or query objects"), CHECK_BATCH]


class NeighborsRequest(TokenOptions):
    """``POST .../neighbors``: ``positive``/``negative`` (or ``token``) for one query, or ``queries`` for a batch."""

    model_config = one_form(
        *SINGLE_QUERY_FORMS,
        given("queries"),
        never=tuple({"allOf": [present("compose"), nonempty(words)]} for words in ("positive", "negative")),
    )

    positive: Tokens = Field([])
    negative: Tokens = Field([])
    token: Token | None = None
    id: RowId | None = None
    queries: NeighborsBatch | None = None
    compose: Compose | None = Field(None, description=COMPOSE_HELP)

    @model_validator(mode="after")
    def _one_form(self) -> NeighborsRequest:
        single = (self.token is not None) + (self.id is not None) + bool(self.positive or self.negative)
        if self.queries is not None and single:
            raise ValueError("give either queries (a batch) or one query, not both")
        if self.queries is None and single != 1:
            raise ValueError("give exactly one of token, id, positive/negative tokens, or queries")
        if self.compose is not None and self.example_words():
            raise ValueError("compose is for token queries: the words of positive/negative lists are not composed")
        check_hits(len(self.queries or ()), self.k)
        check_work(self.example_words(), "max_words", "words in the positive and negative lists")
        return self

    def example_words(self) -> int:
        """How many words the positive and negative lists of the request and of its items hold together."""
        items = [q for q in self.queries or () if isinstance(q, NeighborsQuery)]
        return len(self.positive) + len(self.negative) + sum(len(q.positive) + len(q.negative) for q in items)

    def engine_queries(self) -> list[Query]:
        """The engine's queries: the one query, or each item of ``queries``."""
        if self.queries is None:
            item = NeighborsQuery.model_construct(
                token=self.token, id=self.id, positive=self.positive, negative=self.negative
            )
            return [word_query(item, self, self.compose)]
        return [word_query(item, self, self.compose) for item in self.queries]


def word_query(item: str | int | NeighborsQuery, options: TokenOptions, compose: Compose | None = None) -> Query:
    """A neighbours query: a token, a row id, or positive/negative tokens (gensim ``most_similar``)."""
    search = options.search_options()
    if isinstance(item, str):
        return Query(token=item, k=options.k, options=search, compose=compose)
    if isinstance(item, int):
        return Query(row=item, k=options.k, options=search)
    if item.token is not None:
        return Query(token=item.token, k=options.k, options=search, compose=compose)
    if item.id is not None:
        return Query(row=item.id, k=options.k, options=search)
    return Query(examples=Examples(item.positive, item.negative), k=options.k, options=search)


class NeighborsResponse(BaseModel):
    # The form with required fields first: a generated client takes the first of a union that reads the answer,
    # and QueryInfo, whose fields are all optional, reads any object.
    query: ExamplesQuery | QueryInfo
    neighbors: list[Neighbor]


class NeighborsBatchResponse(BaseModel):
    results: list[NeighborsResponse | ItemErrorResponse]
