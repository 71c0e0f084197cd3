"""Request and response schemas of ``GET``/``POST .../analogy``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from index.engine.door import Analogy, Query
from index.errors import OverLimit
from service.schemas.common import (
    CHECK_BATCH,
    LIMITS,
    STRICT,
    Form,
    ItemErrorResponse,
    K,
    Neighbor,
    QueryInfo,
    Token,
    TokenOptions,
    Vector,
    Whole,
    absent,
    batch_of,
    check_hits,
    given,
    one_form,
    present,
)

Method = Literal["3cosadd", "3cosmul"]


EXPECT_HELP = "the answer you expect: its rank among the candidates (1: the answer), score and margin are reported"


class AnalogyQuery(BaseModel):
    model_config = STRICT

    a: Token
    b: Token
    c: Token
    expect: Token | None = Field(None, description=EXPECT_HELP)


AnalogyBatch = Annotated[list[AnalogyQuery], batch_of("a batch of analogy questions"), CHECK_BATCH]


class AnalogyRequest(TokenOptions):
    """``a`` is to ``b`` as ``c`` is to ?; or ``queries`` for a batch."""

    model_config = one_form(Form(present("a", "b", "c"), absent("a", "b", "c", "expect")), given("queries"))

    a: Token | None = None
    b: Token | None = None
    c: Token | None = None
    expect: Token | None = Field(None, description=EXPECT_HELP + " (a batch: each question's own expect)")
    queries: AnalogyBatch | None = None
    method: Method = "3cosadd"

    @model_validator(mode="after")
    def _one_form(self) -> AnalogyRequest:
        given = [x is not None for x in (self.a, self.b, self.c)]
        if self.queries is not None and (any(given) or self.expect is not None):
            raise ValueError("give either queries (a batch) or a, b and c (and expect), not both")
        if self.queries is None and not all(given):
            raise ValueError("give a, b and c (or queries)")
        check_hits(len(self.queries or ()), self.k)
        return self

    def check_scored_rows(self, rows: int) -> None:
        """422 for a batch whose questions that score each of the ``rows`` searched one by one (3CosMul's, or
        those ranking an expected answer) would score more than the server's max_scored_rows."""
        if self.queries is None:
            return
        limit = LIMITS.get().max_scored_rows
        questions = len(self.queries) if self.method == "3cosmul" else sum(q.expect is not None for q in self.queries)
        if questions > 1 and questions * rows > limit:
            which = "by 3CosMul" if self.method == "3cosmul" else "with expect"
            raise OverLimit(
                f"rows scored one by one ({questions:,} questions {which} x {rows:,} rows): {questions * rows:,}, "
                f"more than the server's max_scored_rows of {limit:,}; ask fewer questions at a time",
                "max_scored_rows",
            )

    def query(self, question: AnalogyQuery) -> Query:
        """The engine's query of one question, with this request's ``k``, method and options."""
        asked = Analogy(question.a, question.b, question.c, question.expect)
        return Query(analogy=asked, k=self.k, options=self.search_options(), method=self.method)


class Expected(BaseModel):
    """Where the expected answer ranks among the candidates: 1 is the answer; margin = best score - its score."""

    model_config = ConfigDict(extra="allow")

    token: str
    id: int
    rank: int
    score: float
    margin: float


class AnalogyQueryInfo(BaseModel):
    """The rows of an analogy's words, and its method."""

    a: QueryInfo
    b: QueryInfo
    c: QueryInfo
    method: Method


class AnalogyResponse(BaseModel):
    query: AnalogyQueryInfo
    neighbors: list[Neighbor]
    expect: Expected | None = Field(None, description="only when the request names an expected answer")


class AnalogyBatchResponse(BaseModel):
    results: list[AnalogyResponse | ItemErrorResponse]


class AnalogyRowsRequest(BaseModel):
    """``POST .../analogy/rows``: an analogy by its words' unit rows (of the whole table, which may lie on another
    shard), the table's rows scored as its analogies score them, the words' own rows not left out."""

    model_config = STRICT

    a: Vector = Field(description="a's unit row, used as it is")
    b: Vector = Field(description="b's unit row, used as it is")
    c: Vector = Field(description="c's unit row, used as it is")
    k: K = 10
    method: Method = "3cosadd"
    expect: Vector | None = Field(
        None, description="the expected answer's unit row: the answer adds `expect`, its part of that answer's rank"
    )
    leave_out: list[Annotated[int, Field(ge=0), Whole]] = Field(
        default_factory=list,
        max_length=4,
        description="rows of the whole table (a, b, c and the expected answer) left out of `expect`'s count",
    )


class ExpectPart(BaseModel):
    higher: int = Field(description="how many of the table's rows score strictly higher than the expected answer")
    score: float = Field(description="the expected answer's score")
    top: float | None = Field(description="the best score among the table's rows (null: none left)")


class AnalogyRowsResponse(BaseModel):
    neighbors: list[Neighbor] = Field(description="each with its row in the whole table (a shard's: the sharded one)")
    expect: ExpectPart | None = Field(None, description="with `expect` asked: this table's part of its rank")
