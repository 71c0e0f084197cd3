"""Request and response schemas of the word diagnostics: doesnt-match, rank, closer-than, n-similarity and the
comparison of two tables."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from service.schemas.common import (
    CHECK_BATCH,
    QUERY,
    STRICT,
    ItemError,
    ItemErrorResponse,
    Neighbor,
    PairBatch,
    PairQuery,
    QueryInfo,
    TableNameField,
    Token,
    TokenOptions,
    Whole,
    batch_of,
    check_hits,
    check_limit,
    check_work,
    given,
    k_schema,
    one_form,
)

MAX_SET_WORDS = 1000  # words in one set of a batch item (doesnt-match, n-similarity)
WordSet = Annotated[list[Token], Field(min_length=1, max_length=MAX_SET_WORDS)]
WordSetBatch = Annotated[list[WordSet], batch_of(f"a batch of word lists (each 1..{MAX_SET_WORDS} words)"), CHECK_BATCH]
SKIP_UNKNOWN_HELP = "leave unknown words out (listed in 'unknown'), as gensim does, instead of 404"


class DoesntMatchRequest(BaseModel):
    """``words`` for one question, or ``queries`` (word lists) for a batch."""

    model_config = one_form(given("words"), given("queries"))

    words: WordSet | None = None
    queries: WordSetBatch | None = None
    skip_unknown: bool = Field(False, description=SKIP_UNKNOWN_HELP)

    @model_validator(mode="after")
    def _one_form(self) -> DoesntMatchRequest:
        if (self.words is None) == (self.queries is None):
            raise ValueError("give exactly one of words or queries")
        check_work(sum(map(len, self.queries or ())), "max_words", "words in the lists")
        return self


class RankParams(BaseModel):
    """Query string of ``GET .../rank``."""

    model_config = QUERY

    a: Token
    b: Token


class RankRequest(BaseModel):
    model_config = STRICT

    pairs: PairBatch


class CloserThanParams(BaseModel):
    """Query string of ``GET .../closer-than``."""

    model_config = QUERY

    a: Token
    b: Token
    limit: Annotated[
        int,
        Field(ge=1, json_schema_extra=k_schema, description="list at most this many of the words, 1..max_k"),
        Whole,
        AfterValidator(check_limit),
    ] = 100
    order: Literal["index", "score"] = Field(
        "index", description="index: row order, as gensim returns them; score: most similar to a first"
    )


class SetPair(BaseModel):
    model_config = STRICT

    a: WordSet
    b: WordSet


SetPairBatch = Annotated[list[SetPair], batch_of("a batch of {a, b} word-set pairs"), CHECK_BATCH]


class NSimilarityRequest(BaseModel):
    """Two word sets ``a`` and ``b``, or ``queries`` (pairs of sets) for a batch."""

    model_config = one_form(given("a", "b"), given("queries"))

    a: WordSet | None = None
    b: WordSet | None = None
    queries: SetPairBatch | None = None
    skip_unknown: bool = Field(False, description=SKIP_UNKNOWN_HELP)

    @model_validator(mode="after")
    def _one_form(self) -> NSimilarityRequest:
        single = self.a is not None and self.b is not None
        if self.queries is not None and (self.a is not None or self.b is not None):
            raise ValueError("give either queries (a batch) or a and b, not both")
        if self.queries is None and not single:
            raise ValueError("give a and b (two word sets), or queries")
        words = sum(len(pair.a) + len(pair.b) for pair in self.queries or ())
        check_work(words, "max_words", "words in the sets")
        return self


class CompareParams(TokenOptions):
    """Query string of ``GET /v1/compare``."""

    model_config = QUERY

    first: TableNameField
    second: TableNameField
    token: Token


CompareTokens = Annotated[list[Token], batch_of("the words to compare"), CHECK_BATCH]


class CompareRequest(TokenOptions):
    model_config = STRICT

    first: TableNameField
    second: TableNameField
    tokens: CompareTokens

    @model_validator(mode="after")
    def _work(self) -> CompareRequest:
        check_hits(len(self.tokens), self.k)
        return self


class RankedWord(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str
    token: str
    id: int
    match: str = Field(description="exact, casefold, space-marked, normalized or id: how the word found its row")
    score: float = Field(description="cosine with the normalised mean of the words' unit rows")


class DoesntMatchResponse(BaseModel):
    doesnt_match: RankedWord
    ranking: list[RankedWord] = Field(description="the words, most central first (gensim rank_by_centrality)")
    unknown: list[str]


class DoesntMatchBatchResponse(BaseModel):
    results: list[DoesntMatchResponse | ItemErrorResponse]


class RankResponse(BaseModel):
    a: str
    b: str
    rank: int
    similarity: float
    query: PairQuery


class RanksResponse(BaseModel):
    ranks: list[int | None]
    similarities: list[float | None]
    errors: list[ItemError | None] = Field(description="why a pair's rank is null (null when it is not)")


class CloserThanResponse(BaseModel):
    a: str
    b: str
    similarity: float = Field(description="cosine of a and b: the listed words are more similar to a than this")
    count: int = Field(description="how many words are closer (gensim rank(a, b) - 1)")
    order: str
    words: list[Neighbor] = Field(description="the first `limit` of them, with their cosine with a")
    query: PairQuery


class NSimilarityResponse(BaseModel):
    similarity: float
    a: list[QueryInfo]
    b: list[QueryInfo]
    unknown: list[str]


class NSimilarityBatchResponse(BaseModel):
    results: list[NSimilarityResponse | ItemErrorResponse]


class CompareSide(BaseModel):
    table: str
    query: QueryInfo
    neighbors: list[Neighbor]


class CompareResponse(BaseModel):
    token: str
    k: int
    overlap: float = Field(description="overlap@k: the share of the k neighbours (by label) both tables give")
    shared: list[str] = Field(description="the labels in both lists, in the first table's order")
    first: CompareSide
    second: CompareSide


class CompareBatchResponse(BaseModel):
    results: list[CompareResponse | ItemErrorResponse]
