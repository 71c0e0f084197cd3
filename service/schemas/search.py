"""Request and response schemas of ``POST .../search``: raw vectors, and on a documents table document ids, text,
filters, paging, the search modes and their fusion, diversity."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, model_validator
from pydantic.json_schema import SkipJsonSchema

from index.engine.door import Examples, Mode, Query, SearchOptions, check_fusion, check_options
from index.errors import InvalidQuery
from service.schemas.bounds import MAX_EXAMPLES, MAX_TEXT_CHARS
from service.schemas.common import (
    CHECK_BATCH,
    NO_POSITIVE_NEGATIVE,
    POSITIVE_NEGATIVE,
    STRICT,
    BatchVector,
    DocumentId,
    Form,
    ItemErrorResponse,
    Neighbor,
    Token,
    TokenOptions,
    ValidText,
    Vector,
    Whole,
    absent,
    batch_of,
    check_hits,
    check_page,
    check_work,
    conditions,
    given,
    one_form,
    present,
    unsent_default,
)
from service.schemas.keyword_statistics import KeywordStatistics

VectorBatch = Annotated[list[BatchVector], batch_of("a batch of query vectors"), CHECK_BATCH]
DocumentIds = Annotated[list[DocumentId], Field(max_length=MAX_EXAMPLES)]
Offset = Annotated[int, Field(ge=0, description="hits skipped first, for paging (offset + k <= max_k)"), Whole]
MinScore = Annotated[
    float,
    Field(
        allow_inf_nan=False,
        description="leave out hits scoring below it: the cosine in mode vector (-1..1), BM25 in mode keyword, the "
        "fused RRF score in mode hybrid",
    ),
]
SearchMode = Literal["vector", "keyword", "hybrid"]
MODE_HELP = (
    "documents tables: vector (by vector, id or positive/negative ids), keyword (BM25 over the text), hybrid (both, "
    "fused by Reciprocal Rank Fusion); default vector"
)
QueryText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="documents tables: the query text of modes keyword and hybrid",
    ),
]
Diversity = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="documents tables, modes vector and hybrid: Maximal Marginal Relevance re-ranking, 0 (plain "
        "relevance) to 1 (only unlike what is already chosen)",
    ),
]
RrfK = Annotated[
    float,
    Field(
        ge=0,
        le=1e6,
        allow_inf_nan=False,
        description="mode hybrid: the RRF constant k (score: sum of w / (k + rank)), default 60",
    ),
]
Weight = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
Filter = Annotated[
    dict[str, Any],
    Field(
        min_length=1,
        description="documents tables: a filter on payload fields: {field: value}, {field: {in: [...]}}, "
        "{field: {gte, gt, lte, lt, eq, ne, prefix, contains}}, on the documents' ids: {id: value}, "
        "{id: {in: [...]}}, {id: {ne: value}}; {not: F}, {and: [F, ...]}, {or: [F, ...]}",
    ),
    ValidText,
]
FieldNames = Annotated[list[Token], Field(max_length=1024, description="documents tables: the fields a hit carries")]
Include = Annotated[
    list[Literal["row", "vector"]],
    Field(
        max_length=2,
        description="what else each hit carries: its row (a shard's: in the whole sharded table, the order equal "
        "scores go by) and its unit vector (what a front re-ranks by diversity)",
    ),
]
# The fields of a documents table's search: a 422 in the search of a table of words or model tokens.
DOCUMENT_ONLY = (
    "id",
    "positive",
    "negative",
    "queries",
    "filter",
    "fields",
    "text",
    "mode",
    "diversity",
    "rrf_k",
    "weights",
)
DOCUMENT_FORMS = (given("vector"), given("id"), POSITIVE_NEGATIVE)
TEXT_ALONE = {"allOf": [present("text"), absent("vector", "id"), NO_POSITIVE_NEGATIVE]}  # no vector query
TEXT_FORM = Form({"allOf": [present("text"), absent("vector", "vectors", "id", "queries"), NO_POSITIVE_NEGATIVE]})
IS_HYBRID = {"required": ["mode"], "properties": {"mode": {"const": "hybrid"}}}
HYBRID_ITEM = {"required": ["queries"], "properties": {"queries": {"type": "array", "contains": IS_HYBRID}}}
NO_FUSION = {"anyOf": [absent("rrf_k", "weights"), HYBRID_ITEM]}  # the fusion's options: for mode hybrid only
OTHER_MODE = {"required": ["mode"], "properties": {"mode": {"enum": ["vector", "keyword"]}}}
HYBRID_OR_NO_BATCH = {"properties": {"queries": {"contains": {"not": OTHER_MODE}}}}  # an item of the batch's mode
COSINE_FLOOR = {"properties": {"min_score": {"minimum": -1, "maximum": 1}}}
# What each mode asks of a request (beside its form), described for the OpenAPI document only: the rules are the
# engine query's (index.engine.query: check_mode, check_options, check_fusion), read where the queries are made, and
# nothing here checks a body. A vector search's score floor is a cosine; keyword search takes text alone and no
# diversity; hybrid search text (and a vector query, or the table's encoder embeds the text), and it alone rrf_k
# and weights; a batch's items carry their own, and its score floor is its items' (each of the mode it is searched
# in: a BM25 floor for items of mode keyword).
MODE_FORMS = (
    {
        "properties": {"mode": {"const": "vector"}},
        "allOf": [{"anyOf": [COSINE_FLOOR, present("queries")]}, NO_FUSION],
    },
    {
        "required": ["mode"],
        "properties": {"mode": {"const": "keyword"}, "diversity": {"maximum": 0}},
        "allOf": [{"anyOf": [TEXT_ALONE, present("queries")]}, NO_FUSION],
    },
    {  # the vector side: a vector query, or the encoder
        **IS_HYBRID,
        "allOf": [
            {"anyOf": [present("text"), present("queries")]},
            {"anyOf": [absent("rrf_k", "weights"), HYBRID_OR_NO_BATCH]},
        ],
    },
)


def words_only(name: str, kind: str, asked: Any) -> None:
    """The 422 for a documents table's fields in the search of table ``name`` of ``kind`` (words, model tokens);
    ``include`` (each hit's row in the whole table, its unit vector) is for every table."""
    if given := [field for field in DOCUMENT_ONLY if field in asked]:
        raise InvalidQuery(
            f"{', '.join(given)}: only for documents tables; table {name!r} holds {kind}, search it by vector"
        )


class FusionWeights(BaseModel):
    """Each list's weight in a hybrid search's fusion."""

    model_config = STRICT

    vector: Weight = 1.0
    keyword: Weight = 1.0


class PageOptions(BaseModel):
    """What a document search keeps of its hits: only those passing ``filter``, from ``offset``, above
    ``min_score``."""

    filter: Filter | None = None
    offset: Offset = 0
    min_score: MinScore | None = None


class DocumentQuery(PageOptions):
    """One query of a document search batch: a ``vector``, a document ``id`` (more like it, itself left out), or
    ``positive``/``negative`` document ids (the normalised mean of their unit vectors, the inputs left out)."""

    model_config = one_form(*DOCUMENT_FORMS, Form(TEXT_ALONE))

    vector: BatchVector | None = None
    id: DocumentId | None = None
    positive: DocumentIds = []
    negative: DocumentIds = []
    text: QueryText | None = None
    mode: SearchMode | None = Field(None, description="this item's mode (default: the request's)")

    @model_validator(mode="after")
    def _one_form(self) -> DocumentQuery:
        vector_query = (self.vector is not None) + (self.id is not None) + bool(self.positive or self.negative)
        if vector_query + (self.text is not None and not vector_query) != 1:
            raise ValueError("give exactly one of vector, id, or positive/negative document ids (or text alone)")
        return self

    @property
    def vector_query(self) -> bool:
        return self.vector is not None or self.id is not None or bool(self.positive or self.negative)


DocumentBatch = Annotated[list[DocumentQuery], batch_of("a batch of document queries"), CHECK_BATCH]


class SearchRequest(TokenOptions, PageOptions):
    """``POST .../search``: a raw ``vector`` or a batch of ``vectors``, normalised server-side; on a documents
    table also a document ``id``, ``positive``/``negative`` ids, or a batch of ``queries``, with ``filter``,
    ``offset``, ``min_score`` and ``fields``."""

    model_config = one_form(
        *DOCUMENT_FORMS,
        given("vectors"),
        given("queries"),
        TEXT_FORM,
        any_of=MODE_FORMS,
        never=(present("text", "vectors"), present("text", "queries")),  # a batch's items carry their own text
    )

    vector: Vector | None = None
    vectors: VectorBatch | None = None
    id: DocumentId | None = None
    positive: DocumentIds = Field([], json_schema_extra=unsent_default, description="documents tables: ids")
    negative: DocumentIds = Field([], json_schema_extra=unsent_default, description="documents tables: ids")
    queries: DocumentBatch | None = None
    fields: FieldNames | None = None
    include: Include | None = None
    text: QueryText | None = None
    mode: SearchMode = Field("vector", json_schema_extra=unsent_default, description=MODE_HELP)
    diversity: Diversity | None = None
    rrf_k: RrfK = Field(60.0, json_schema_extra=unsent_default)
    weights: FusionWeights | None = Field(None, description="mode hybrid: each list's weight (default 1 each)")
    keyword_statistics: SkipJsonSchema[KeywordStatistics | None] = None  # a sharded table's front's, to its shards

    # The engine's queries, made where the body is validated: each reads the mode rules on itself (Query.problem).
    _made: list[Query] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _one_form(self) -> SearchRequest:
        vector_query = (self.vector is not None) + (self.id is not None) + bool(self.positive or self.negative)
        batch = (self.vectors is not None) + (self.queries is not None)
        if batch and self.text is not None:
            raise ValueError("text belongs to one query: give each item of queries its own text")
        if vector_query + batch + (self.text is not None and not vector_query) != 1:
            raise ValueError(
                "give exactly one of vector, vectors, id, positive/negative document ids, queries, or text alone"
            )
        fusion = [n for n in ("rrf_k", "weights") if n in self.model_fields_set and getattr(self, n) is not None]
        item_modes = None if self.queries is None else [q.mode for q in self.queries]
        made = self._make_queries()
        check_fusion(fusion, self.mode, item_modes)
        if self.queries is None:  # one query, or vectors sharing its mode: what the mode rules find is the request's
            if made[0].problem is not None:
                raise ValueError(made[0].problem)
        else:  # each item's problem is its own error; the batch's own diversity is checked against its mode
            check_options(self.mode, None, self.diversity)
        offset, filters = self.offset, [] if self.filter is None else [self.filter]
        if self.queries is not None:  # each item's page and filter too
            offset = max([offset, *[q.offset for q in self.queries]])
            filters += [q.filter for q in self.queries if q.filter is not None]
        check_page(self.k, offset)
        check_hits(len(self.queries or self.vectors or ()), self.k + offset)
        check_work(sum(map(conditions, filters)), "max_filter_conditions", "conditions in the filters")
        self._made = made
        return self

    def vector_queries(self, name: str, kind: str) -> list[Query]:
        """The engine's queries of a vector search of table ``name`` of words or model tokens (``kind``):
        ``vector``, or each of ``vectors``; the fields of a documents table's search are a 422 here."""
        words_only(name, kind, self.model_fields_set)
        return self._made

    def document_queries(self) -> list[Query]:
        """The engine's queries of a documents table's search: its one query, or each item of ``queries`` or
        ``vectors`` (the latter sharing the request's filter and page); an item's mode, filter, offset and
        min_score are its own, else the request's."""
        return self._made

    def _make_queries(self) -> list[Query]:
        options = self.search_options()
        if self.queries is not None:
            return [self._document(self._with_page(item), item.mode or self.mode, options) for item in self.queries]
        if self.vectors is not None:
            page = {"filter": self.filter, "offset": self.offset, "min_score": self.min_score}
            return [self._search(self.mode, options, vector=v, **page) for v in self.vectors]
        return [self._document(self, self.mode, options)]

    def _with_page(self, item: DocumentQuery) -> DocumentQuery:
        """``item`` with the request's ``filter``, ``offset`` and ``min_score`` where it gives none of its own."""
        given = item.model_fields_set
        shared = {name: getattr(self, name) for name in ("filter", "offset", "min_score") if name not in given}
        return item.model_copy(update=shared) if shared else item

    def _document(self, item: DocumentQuery | SearchRequest, mode: Mode, options: SearchOptions) -> Query:
        examples = Examples(item.positive, item.negative, documents=True) if item.positive or item.negative else None
        return self._search(
            mode,
            options,
            vector=item.vector,
            document=item.id,
            examples=examples,
            text=item.text,
            filter=item.filter,
            offset=item.offset,
            min_score=item.min_score,
        )

    def _search(self, mode: Mode, options: SearchOptions, **given: Any) -> Query:
        weights = None if self.weights is None else (self.weights.vector, self.weights.keyword)
        return Query(
            k=self.k,
            options=options,
            mode=mode,
            rrf_k=self.rrf_k,
            weights=weights,
            diversity=self.diversity,
            fields=self.fields,
            statistics=None if self.keyword_statistics is None else self.keyword_statistics.engine(),
            **given,
        )


class SearchResponse(BaseModel):
    neighbors: list[Neighbor]


class SearchBatchResponse(BaseModel):
    results: list[SearchResponse | ItemErrorResponse]


class DocumentHit(BaseModel):
    id: str | int
    score: float
    text: str | None = Field(description="the document's text (null when the table has none)")
    fields: dict[str, Any] = Field(description="payload fields (timestamps as ISO 8601 text, missing as null)")
    ranks: dict[str, int] | None = Field(
        None, description="modes keyword and hybrid: the hit's rank (from 1) in each list holding it (vector, keyword)"
    )
    row: int | None = Field(None, description='with include "row": the row (of a shard: in the whole table)')
    vector: list[float] | None = Field(None, description='with include "vector": the unit vector')


class Fallback(BaseModel):
    mode: str = Field(description="the mode the query was searched in instead of the one asked for")
    reason: str = Field(description="why: e.g. no word of the text is known to the documents' encoder")


class DocumentSearchResponse(BaseModel):
    hits: list[DocumentHit]
    passing: int | None = Field(None, description="with a filter: how many documents pass it")
    fallback: Fallback | None = Field(
        None,
        description="mode hybrid with one list empty: text alone whose words the encoder does not know is searched "
        "by keyword, text none of whose words a document holds by vector",
    )


class DocumentSearchBatchResponse(BaseModel):
    results: list[DocumentSearchResponse | ItemErrorResponse]
