"""The keyword statistics a sharded table's front gathers from its shards and sends with a search
(``index.engine.dfs``): internal to the front and its shards, left out of the API's schema."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, PrivateAttr, model_validator

from index.engine.door import Statistics
from index.errors import InvalidQuery
from service.schemas.bounds import MAX_TEXT_CHARS
from service.schemas.common import INT64_MAX, STRICT, Whole

MAX_TERMS = 10_000
Count = Annotated[int, Field(ge=0, le=INT64_MAX), Whole]
Pair = Annotated[list[Count], Field(min_length=2, max_length=2)]
Word = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]  # a word of a query text, as cut


class KeywordStatistics(BaseModel):
    """A whole table's BM25 statistics for a query's words, each [the version's, the live documents']."""

    model_config = STRICT

    documents: Pair
    words: Pair
    terms: Annotated[dict[Word, Pair], Field(max_length=MAX_TERMS)]
    _statistics: Statistics | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _consistent(self) -> KeywordStatistics:
        try:
            self._statistics = Statistics.of(
                (self.documents[0], self.documents[1]),
                (self.words[0], self.words[1]),
                {word: (pair[0], pair[1]) for word, pair in self.terms.items()},
            )
        except InvalidQuery as exc:
            raise ValueError(exc.message.removeprefix("keyword_statistics: ")) from None
        return self

    def engine(self) -> Statistics:
        assert self._statistics is not None
        return self._statistics


class GatherRequest(BaseModel):
    """``POST .../search/statistics``: the query texts whose words' statistics a front gathers."""

    model_config = STRICT

    texts: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]], Field(min_length=1, max_length=64)
    ]
