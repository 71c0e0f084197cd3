"""Request and response models.

Limits live in the models: ``k`` is 1..max_k and batches hold at most max_batch items, where max_k and
max_batch are the serving app's settings; so do the bounds on a request's total work (hits, filter conditions,
words, layout points x neighbourhood), each a 422 before any work starts. The app publishes them per request in
:data:`LIMITS` (set by the request-limits middleware) and the validators and OpenAPI schema read them from there,
so two apps with different settings can run in one process. JSON bodies are strict: ``k: true`` or ``k: 1.5`` is a 422.
"""

from __future__ import annotations

import functools
import math
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, model_validator

from index.engine.door import SearchOptions, check_mode, check_options


@dataclass(frozen=True)
class Limits:
    max_k: int = 1000
    max_batch: int = 1024
    max_hits: int = 102_400  # items x (offset + k) in one request
    max_filter_conditions: int = 4096  # conditions of all the filters of one request
    max_words: int = 20_000  # words of all the word lists of one request (doesnt-match, n-similarity)
    max_layout_work: int = 32_768  # tokens x perplexity (t-SNE) or x n_neighbors (UMAP) of one projection


LIMITS: ContextVar[Limits] = ContextVar("embedding_limits", default=Limits())  # noqa: B039 (frozen)

MAX_TOKEN_CHARS = 1024
MAX_TEXT_CHARS = 100_000
MAX_DIM = 65_536
FLOAT32_MAX = 3.4028234663852886e38
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _check_k(k: int) -> int:
    limit = LIMITS.get().max_k
    if k > limit:
        raise ValueError(f"k must be at most {limit} (the server's max_k)")
    return k


def _check_batch(items: list[Any]) -> list[Any]:
    limit = LIMITS.get().max_batch
    if len(items) > limit:
        raise ValueError(f"a batch holds at most {limit} items (the server's max_batch), got {len(items)}")
    return items


def check_work(amount: int, limit_name: str, what: str) -> None:
    """ValueError when ``amount`` is over the limit ``limit_name`` of :class:`Limits` (a request's total work)."""
    limit = getattr(LIMITS.get(), limit_name)
    if amount > limit:
        raise ValueError(f"{what}: {amount:,}, more than the server's {limit_name} of {limit:,}")


def _check_hits(items: int, k: int) -> None:
    if items > 1:
        check_work(items * k, "max_hits", f"hits asked for ({items:,} items x k {k:,}, offset included)")


def _k_schema(schema: dict[str, Any]) -> None:
    schema["maximum"] = LIMITS.get().max_k


def _batch_schema(schema: dict[str, Any]) -> None:
    schema["maxItems"] = LIMITS.get().max_batch


WHOLE_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _whole_number(value: Any, info: ValidationInfo) -> Any:
    """JSON Schema (and so OpenAPI 3.1) counts 2.0 and 2e0 as the integer 2; booleans and 2.5 stay refused.

    Strings are numbers only in a query string (lax models); a JSON body's ``"5"`` is a string, refused.
    """
    strict = bool(info.config and info.config.get("strict"))
    if isinstance(value, str) and not strict and WHOLE_NUMBER.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Whole = BeforeValidator(_whole_number)
# The constraints come before the validator, so the schema says "minimum" (pydantic's order rule).
K = Annotated[
    int,
    Field(ge=1, json_schema_extra=_k_schema, description="number of neighbours, 1..max_k"),
    Whole,
    AfterValidator(_check_k),
]
Restrict = Annotated[int, Field(ge=1, description="search only the first N rows (gensim's restrict_vocab)"), Whole]
RowId = Annotated[int, Field(ge=0, description="a row id instead of a token"), Whole]
Token = Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS)]
Component = Annotated[float, Field(ge=-FLOAT32_MAX, le=FLOAT32_MAX, allow_inf_nan=False, description="a float32 value")]
Vector = Annotated[list[Component], Field(min_length=1, max_length=MAX_DIM)]
# Items of a batch are checked one by one (a bad vector gets its own error), so the schema takes any numbers.
BatchVector = Annotated[list[float], Field(min_length=1, max_length=MAX_DIM)]
Tokens = Annotated[list[Token], Field(max_length=MAX_DIM)]


def batch_of(description: str, min_items: int = 1) -> Any:
    """The field of a batch: ``Annotated[list[Item], batch_of(...), CHECK_BATCH]`` is ``min_items``..max_batch items.

    The annotation is written out at each use (not built by a function) so a type checker sees the item type.
    """
    return Field(min_length=min_items, json_schema_extra=_batch_schema, description=description)


CHECK_BATCH = AfterValidator(_check_batch)


STRICT = ConfigDict(strict=True, extra="forbid")


# The request forms, written into the JSON schema as ``oneOf`` so the OpenAPI document says what the model
# validators enforce ("exactly one of ..."): a client (or a fuzzer) that follows the schema is never refused.
def _given(*fields: str) -> dict[str, Any]:
    return {"required": list(fields), "properties": {f: {"not": {"type": "null"}} for f in fields}}


def _absent(*fields: str) -> dict[str, Any]:
    return {"properties": {f: {"type": "null"} for f in fields}}


def _nonempty(field: str) -> dict[str, Any]:
    return {"required": [field], "properties": {field: {"minItems": 1}}}


@dataclass(frozen=True)
class Form:
    """One request form: the schema of a request that uses it, and of one that does not (None: the form itself
    rules the others out)."""

    used: dict[str, Any]
    unused: dict[str, Any] | None = None


def given(*fields: str) -> Form:
    """The form of these fields: given (not null), or left out (or null)."""
    return Form(_given(*fields), _absent(*fields))


NO_POSITIVE_NEGATIVE = {"properties": {"positive": {"maxItems": 0}, "negative": {"maxItems": 0}}}
POSITIVE_NEGATIVE = Form({"anyOf": [_nonempty("positive"), _nonempty("negative")]}, NO_POSITIVE_NEGATIVE)


def one_form(
    *forms: Form, any_of: tuple[dict[str, Any], ...] = (), never: tuple[dict[str, Any], ...] = ()
) -> ConfigDict:
    """Exactly one of ``forms``; given ``any_of``, at least one of those too; none of ``never``.

    Each form is written with the other forms unused, so the forms exclude one another in the schema itself: a
    generator that draws a request from one form gets a valid one, instead of searching for the rare draw that
    happens to match only one of overlapping forms."""
    one_of = []
    for form in forms:
        unused = [other.unused for other in forms if other is not form and other.unused is not None]
        one_of.append({"allOf": [form.used, *unused]} if unused else form.used)
    extra: dict[str, Any] = {"oneOf": one_of}
    if any_of:
        extra["anyOf"] = list(any_of)
    if never:
        extra["not"] = {"anyOf": list(never)}
    return ConfigDict(strict=True, extra="forbid", json_schema_extra=extra)


SINGLE_QUERY_FORMS = (given("token"), given("id"), POSITIVE_NEGATIVE)


# ------------------------------------------------------------------ options shared by every query form
# A few combinations of options are asked for over and over: one (immutable) object each, made once.
search_options = functools.lru_cache(maxsize=256)(SearchOptions)


class QueryOptions(BaseModel):
    k: K = 10
    exact: bool = Field(False, description="force brute force even when the table's index is approximate")
    restrict: Restrict | None = None


class TokenOptions(QueryOptions):
    skip_special: bool = Field(True, description="leave out special tokens ([CLS], <s>, ...) of model-token tables")
    whole_words_only: bool = Field(False, description="leave out word-continuation pieces (##ing) of model tokens")

    def search_options(self) -> SearchOptions:
        """What the engine is asked beside the queries and ``k``."""
        return search_options(self.exact, self.restrict, self.skip_special, self.whole_words_only)


Compose = Literal["mean"]
COMPOSE_HELP = "'mean': a word that is not one row is composed as the mean of its tokenizer pieces' rows"


# ----------------------------------------------------------------------------------------- neighbours
class NeighborsParams(TokenOptions):
    """Query string of ``GET .../neighbors``: one token (or row id)."""

    token: Token | None = None
    id: RowId | None = None
    compose: Compose | None = Field(None, description=COMPOSE_HELP)

    @model_validator(mode="after")
    def _one_query(self) -> NeighborsParams:
        if (self.token is None) == (self.id is None):
            raise ValueError("give exactly one of token or id")
        return self


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

    model_config = one_form(*SINGLE_QUERY_FORMS, given("queries"))

    positive: Tokens = []
    negative: Tokens = []
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
        _check_hits(len(self.queries or ()), self.k)
        return self


def _utf8_json(value: Any, where: str = "") -> None:
    """Raise ValueError at the first text (key or value) of free-form JSON that UTF-8 cannot encode: a lone
    surrogate such as ``"\\ud800"`` is valid JSON, and pydantic's ``str`` refuses it, but ``Any`` lets it through."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValueError(
                f"{where or 'text'}: text must be valid Unicode (a lone UTF-16 surrogate is not)"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _utf8_json(key, f"{where}.<a key>" if where else "<a key>")
            _utf8_json(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _utf8_json(item, f"{where}[{i}]")


def _valid_text(value: Any) -> Any:
    _utf8_json(value)
    return value


def _int64_schema(schema: dict[str, Any]) -> None:
    """The int64 range as the OpenAPI document can say it: its bounds become floats, which a checker compares as
    floats, so they stay a float's step (1024) inside it (a client that keeps within the schema is never refused)."""
    schema["minimum"], schema["maximum"] = INT64_MIN + 1024, INT64_MAX + 1 - 1024


def conditions(spec: Any) -> int:
    """How many conditions a filter holds: one per operator on a field and per and/or/not (each is one pass over
    a column or over the rows' booleans)."""
    if isinstance(spec, list):
        return sum(conditions(item) for item in spec)
    if not isinstance(spec, dict):
        return 1
    count = 0
    for key, value in spec.items():
        if key in ("and", "or", "not"):
            count += 1 + conditions(value)
        else:
            count += len(value) if isinstance(value, dict) and value else 1
    return count


ValidText = AfterValidator(_valid_text)  # for free-form JSON (``Any``); typed ``str`` fields refuse surrogates already


# ------------------------------------------------------------------------------------------- search
VectorBatch = Annotated[list[BatchVector], batch_of("a batch of query vectors"), CHECK_BATCH]
DocumentId = Annotated[
    Token | Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX, json_schema_extra=_int64_schema), Whole],
    Field(description="a document's id (documents tables)", union_mode="left_to_right"),
]
DocumentIds = Annotated[list[DocumentId], Field(max_length=MAX_DIM)]
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
    "fused by Reciprocal Rank Fusion)"
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
        ge=0, le=1e6, allow_inf_nan=False, description="mode hybrid: the RRF constant k (score: sum of w / (k + rank))"
    ),
]
Weight = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)]
Filter = Annotated[
    dict[str, Any],
    Field(
        min_length=1,
        description="documents tables: a filter on payload fields: {field: value}, {field: {in: [...]}}, "
        "{field: {gte, gt, lte, lt, eq, ne}}, {not: F}, {and: [F, ...]}, {or: [F, ...]}",
    ),
    ValidText,
]
FieldNames = Annotated[list[Token], Field(max_length=1024, description="documents tables: the fields a hit carries")]
DOCUMENT_FORMS = (given("vector"), given("id"), POSITIVE_NEGATIVE)
TEXT_ALONE = {"allOf": [_given("text"), _absent("vector", "id"), NO_POSITIVE_NEGATIVE]}  # no vector query
TEXT_FORM = Form({"allOf": [_given("text"), _absent("vector", "vectors", "id", "queries"), NO_POSITIVE_NEGATIVE]})
VECTOR_QUERY = {"anyOf": [_given("vector"), _given("id"), _nonempty("positive"), _nonempty("negative")]}
# What each mode asks of a request (beside its form): a vector search's score floor is a cosine; keyword search
# takes text alone and no diversity; hybrid search text (and a vector query, or the table's encoder embeds the
# text); a batch's items carry their own.
MODE_FORMS = (
    {"properties": {"mode": {"const": "vector"}, "min_score": {"minimum": -1, "maximum": 1}}},
    {
        "required": ["mode"],
        "properties": {"mode": {"const": "keyword"}, "diversity": {"maximum": 0}},
        "anyOf": [TEXT_ALONE, _given("queries")],
    },
    {
        "required": ["mode"],
        "properties": {"mode": {"const": "hybrid"}},
        "anyOf": [_given("text"), _given("queries")],  # the vector side: a vector query, or the table's encoder
    },
)


def _check_page(k: int, offset: int) -> None:
    limit = LIMITS.get().max_k
    if offset + k > limit:
        raise ValueError(f"offset + k must be at most {limit} (the server's max_k), got {offset + k}")


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
        never=(_given("text", "vectors"), _given("text", "queries")),  # a batch's items carry their own text
    )

    vector: Vector | None = None
    vectors: VectorBatch | None = None
    id: DocumentId | None = None
    positive: DocumentIds = []
    negative: DocumentIds = []
    queries: DocumentBatch | None = None
    fields: FieldNames | None = None
    text: QueryText | None = None
    mode: SearchMode = Field("vector", description=MODE_HELP)
    diversity: Diversity | None = None
    rrf_k: RrfK = 60.0
    weights: FusionWeights | None = Field(None, description="mode hybrid: each list's weight (default 1 each)")

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
        if self.queries is None:
            check_mode(self.mode, self.text, bool(vector_query), self.min_score, self.diversity)
        else:  # the items' texts and vector queries are checked one by one (a bad item fails alone)
            check_options(self.mode, self.min_score, self.diversity)
        _check_page(self.k, max([self.offset, *(q.offset for q in self.queries or [])]))
        items = len(self.queries or self.vectors or ())
        _check_hits(items, self.k + max([self.offset, *(q.offset for q in self.queries or [])]))
        filters = [self.filter, *(q.filter for q in self.queries or [])]
        check_work(
            sum(conditions(f) for f in filters if f is not None), "max_filter_conditions", "conditions in the filters"
        )
        return self

    def document_query(self) -> DocumentQuery:
        """The single query of the request (not ``vectors`` or ``queries``)."""
        return DocumentQuery.model_construct(
            vector=self.vector,
            id=self.id,
            positive=self.positive,
            negative=self.negative,
            filter=self.filter,
            offset=self.offset,
            min_score=self.min_score,
            text=self.text,
            mode=self.mode,
        )


# --------------------------------------------------------------------------------------- similarity
class SimilarityParams(BaseModel):
    a: Token
    b: Token
    compose: Compose | None = Field(None, description=COMPOSE_HELP)


PairBatch = Annotated[
    list[Annotated[list[Token], Field(min_length=2, max_length=2)]], batch_of("pairs of tokens"), CHECK_BATCH
]


class SimilarityRequest(BaseModel):
    model_config = STRICT

    pairs: PairBatch
    compose: Compose | None = Field(None, description=COMPOSE_HELP)


# ------------------------------------------------------------------------------------------ analogy
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

    model_config = one_form(Form(_given("a", "b", "c"), _absent("a", "b", "c", "expect")), given("queries"))

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
        _check_hits(len(self.queries or ()), self.k)
        return self


# --------------------------------------------------------------------------------------- projection
ProjectTokens = Annotated[
    list[Token], batch_of("the tokens to project (at least two distinct)", min_items=2), CHECK_BATCH
]


AxisPair = Annotated[
    list[Token],
    Field(min_length=2, max_length=2, description="two tokens [a, b]: the axis runs along the direction a - b"),
]
TSNE_FIELDS, UMAP_FIELDS, SEEDED = ("perplexity",), ("n_neighbors", "min_dist"), ("seed",)
_NULL = {"type": "null"}


def _project_form(method: str, allowed: tuple[str, ...], required: tuple[str, ...] = ("method",)) -> dict[str, Any]:
    """The form of ``method``: the fields of the other methods absent (null)."""
    others = ("x_axis", "y_axis", *SEEDED, *TSNE_FIELDS, *UMAP_FIELDS)
    properties: dict[str, Any] = {"method": {"const": method}, **{f: _NULL for f in others if f not in allowed}}
    if "x_axis" in allowed:
        properties["x_axis"] = {"not": _NULL}
    return {"required": list(required), "properties": properties}


PROJECT_FORMS = (
    {**_project_form("pca", ()), "required": []},  # method may be left out: pca is the default
    _project_form("axes", ("x_axis", "y_axis"), ("method", "x_axis")),
    _project_form("tsne", (*SEEDED, *TSNE_FIELDS)),
    _project_form("umap", (*SEEDED, *UMAP_FIELDS)),
)
Seed = Annotated[
    int, Field(ge=0, le=2**32 - 1, description="tsne, umap: the random seed (the same seed, the same layout)"), Whole
]


class ProjectRequest(BaseModel):
    """``pca``: the tokens on their own first two principal components. ``axes``: x = v . (a - b) / |a - b|^2
    for ``x_axis`` [a, b], y the same for ``y_axis`` [c, d], or (without ``y_axis``) the first principal
    component of the tokens with the x direction removed. ``tsne`` (openTSNE) and ``umap`` (umap-learn): a
    seeded non-linear layout of the tokens (at least 4), cosine metric; ``perplexity`` is lowered to
    (n - 1) / 3 and ``n_neighbors`` to n - 1 for n tokens, and ``params`` in the answer says what was used."""

    model_config = one_form(*map(Form, PROJECT_FORMS))  # each form names its method

    tokens: ProjectTokens
    method: Literal["pca", "axes", "tsne", "umap"] = "pca"
    skip_unknown: bool = Field(False, description="leave unknown tokens out (listed in 'unknown') instead of 404")
    x_axis: AxisPair | None = Field(None, description="method axes: the pair [a, b] whose difference is the x axis")
    y_axis: AxisPair | None = Field(
        None, description="method axes: the pair [c, d] whose difference is the y axis (default: PCA of the rest)"
    )
    seed: Seed = 42
    perplexity: float = Field(
        30.0,
        ge=1,
        le=100,
        allow_inf_nan=False,
        description="method tsne: the perplexity asked for (lowered to (n - 1) / 3 for n tokens)",
    )
    n_neighbors: Annotated[int, Field(ge=2, le=200), Whole] = Field(
        15, description="method umap: the neighbourhood size asked for (lowered to n - 1 for n tokens)"
    )
    min_dist: float = Field(
        0.1, ge=0, le=1, allow_inf_nan=False, description="method umap: how tightly points may pack (umap-learn's)"
    )

    @model_validator(mode="after")
    def _forms(self) -> ProjectRequest:
        given = self.model_fields_set
        if self.method == "axes" and self.x_axis is None:
            raise ValueError("method axes needs x_axis: [a, b]")
        if self.method != "axes" and (self.x_axis is not None or self.y_axis is not None):
            raise ValueError("x_axis and y_axis belong to method axes")
        if self.method not in ("tsne", "umap") and given & set(SEEDED):
            raise ValueError("seed belongs to methods tsne and umap")
        if self.method != "tsne" and given & set(TSNE_FIELDS):
            raise ValueError("perplexity belongs to method tsne")
        if self.method != "umap" and given & set(UMAP_FIELDS):
            raise ValueError("n_neighbors and min_dist belong to method umap")
        if self.method == "tsne":
            work = len(self.tokens) * math.ceil(self.perplexity)
            check_work(
                work, "max_layout_work", f"t-SNE work ({len(self.tokens):,} tokens x perplexity {self.perplexity:g})"
            )
        if self.method == "umap":
            work = len(self.tokens) * self.n_neighbors
            check_work(
                work, "max_layout_work", f"UMAP work ({len(self.tokens):,} tokens x n_neighbors {self.n_neighbors})"
            )
        return self


MAX_EXPORT_ROWS = 50_000


class ExportRow(BaseModel):
    model_config = one_form(given("token"), given("id"))

    token: Token | None = None
    id: RowId | None = None
    group: Annotated[str, Field(max_length=200)] | None = Field(
        None, description="a label written as the 'group' column of metadata.tsv"
    )

    @model_validator(mode="after")
    def _one_form(self) -> ExportRow:
        if (self.token is None) == (self.id is None):
            raise ValueError("give exactly one of token or id")
        return self


class ExportRequest(BaseModel):
    """``POST .../export``: the rows of a view as one file of the Embedding Projector's pair."""

    model_config = STRICT

    rows: Annotated[list[ExportRow], Field(min_length=1, max_length=MAX_EXPORT_ROWS)]
    file: Literal["vectors", "metadata"] = Field(
        description="vectors: vectors.tsv (the original rows, tab-separated); metadata: metadata.tsv (token, "
        "group if any row has one, and the table's metadata columns)"
    )


class TokenizeRequest(BaseModel):
    model_config = STRICT

    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


# -------------------------------------------------------------------------------------- diagnostics
MAX_SET_WORDS = 1000  # words in one set of a batch item (doesnt-match, n-similarity)
WordSet = Annotated[list[Token], Field(min_length=1, max_length=MAX_SET_WORDS)]
WordSetBatch = Annotated[list[WordSet], batch_of(f"a batch of word lists (each 1..{MAX_SET_WORDS} words)"), CHECK_BATCH]
SKIP_UNKNOWN_HELP = "leave unknown words out (listed in 'unknown'), as gensim does, instead of 404"
TableNameField = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*\.?$",
        description="table name, as listed by GET /v1/tables",
    ),
]


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

    a: Token
    b: Token


class RankRequest(BaseModel):
    model_config = STRICT

    pairs: PairBatch


class CloserThanParams(BaseModel):
    """Query string of ``GET .../closer-than``."""

    a: Token
    b: Token
    limit: Annotated[
        int,
        Field(ge=1, json_schema_extra=_k_schema, description="list at most this many of the words, 1..max_k"),
        Whole,
        AfterValidator(_check_k),
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
        _check_hits(len(self.tokens), self.k)
        return self


# -------------------------------------------------------------------------------------------- responses
class Neighbor(BaseModel):
    token: str
    id: int
    score: float
    readable: str | None = Field(None, description="model-token tables: the text the token stands for (' heart')")
    metadata: dict[str, str] | None = Field(None, description="the row's metadata columns, for tables that have them")


class QueryInfo(BaseModel):
    """Which row(s) a query used: ``token``/``id`` of the resolved row and how it matched."""

    model_config = ConfigDict(extra="allow")

    text: str | None = None
    token: str | None = None
    id: int | None = None
    match: str | None = Field(None, description="exact, casefold, space-marked, id, or composed")


class NeighborsResponse(BaseModel):
    query: QueryInfo | dict[str, Any]
    neighbors: list[Neighbor]


class ItemError(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class ItemErrorResponse(BaseModel):
    error: ItemError


class NeighborsBatchResponse(BaseModel):
    results: list[NeighborsResponse | ItemErrorResponse]


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


class DocumentResponse(BaseModel):
    id: str | int
    text: str | None
    fields: dict[str, Any]
    vector: list[float] | None = Field(None, description="with ?vector=true: the document's vector as imported")


class SimilarityResponse(BaseModel):
    a: str
    b: str
    similarity: float
    query: dict[str, Any]


class SimilaritiesResponse(BaseModel):
    similarities: list[float | None]
    errors: list[ItemError | None] = Field(description="why a pair's similarity is null (null when it is not)")


class Expected(BaseModel):
    """Where the expected answer ranks among the candidates: 1 is the answer; margin = best score - its score."""

    model_config = ConfigDict(extra="allow")

    token: str
    id: int
    rank: int
    score: float
    margin: float


class AnalogyResponse(NeighborsResponse):
    expect: Expected | None = Field(None, description="only when the request names an expected answer")


class AnalogyBatchResponse(BaseModel):
    results: list[AnalogyResponse | ItemErrorResponse]


class RankedWord(BaseModel):
    model_config = ConfigDict(extra="allow")

    text: str
    token: str
    id: int
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
    query: dict[str, Any]


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
    query: dict[str, Any]


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


class Point(BaseModel):
    token: str
    id: int
    x: float
    y: float


class ProjectResponse(BaseModel):
    method: str
    points: list[Point]
    explained_variance_ratio: list[float] | None = Field(
        None,
        description="pca: each component's share of the variance; axes: each axis's share of it (tsne, umap: left out)",
    )
    unknown: list[str] = []
    axes: dict[str, Any] | None = Field(None, description="method axes: the token pairs of x and y (null: PCA)")
    params: dict[str, Any] | None = Field(
        None,
        description="methods tsne and umap: the parameters used (perplexity or n_neighbors as lowered for these "
        "tokens, beside the value asked for; seed, metric, initialisation, iterations) and the library's version",
    )


class MapBounds(BaseModel):
    x: list[float]
    y: list[float]


class MapInfo(BaseModel):
    """A whole-table layout: what ``GET .../map`` returns as int16 pairs and how to read them back."""

    table: str
    method: str
    rows: int = Field(description="points in the layout: row ids 0..rows-1")
    bounds: MapBounds
    format: str = Field(description="'int16-le-xy': x, y per row; value = lo + (code + 32767) / 65534 * (hi - lo)")
    params: dict[str, Any]
    explained_variance_ratio: list[float] | None = None
    seconds: float = Field(description="how long the layout took to compute")
    computed_at: str | None = None
    cached: bool = Field(description="read from the on-disk cache rather than computed by this request")
    columns: list[str] = Field(description="the columns the map can be coloured by (GET .../map/colours/{column})")


class MapColours(BaseModel):
    column: str
    categories: list[str]
    codes: str = Field(description="base64 of one uint8 per row: the index of its category")


class ExplorerConfig(BaseModel):
    default_table: str | None = Field(description="the table the explorer opens on")
    default_reason: str = Field(description="why that table: 'EMBEDDING_TABLES', 'glove-6b-50d' or 'first'")
    tsne_rows: int = Field(description="rows of the t-SNE layout (EMBEDDING_MAP_TSNE_ROWS; 0: t-SNE off)")
    tsne_available: bool
    max_export_rows: int


class TokenResponse(BaseModel):
    token: str
    id: int
    readable: str | None = Field(None, description="model-token tables: the text the token stands for (' heart')")
    metadata: dict[str, str] | None = Field(None, description="the row's metadata columns, for tables that have them")
    vector: list[float]
    normalized: bool
    norm: float
    query: QueryInfo


class TokenPiece(BaseModel):
    id: int
    token: str


class TokenizeResponse(BaseModel):
    text: str
    tokens: list[TokenPiece]


class TableSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    rows: int
    dim: int
    kind: str
    index: dict[str, Any]
    approximate: bool
    has_tokenizer: bool


class TablesResponse(BaseModel):
    tables: list[TableSummary]
    unavailable: list[str] = Field([], description="requested tables that failed to load")


class Health(BaseModel):
    status: str


class BuildStatus(BaseModel):
    state: str = Field(description="queued, running or failed")
    step: str = Field(description="what the build is doing, e.g. adding rows to the index")
    done: float = Field(description="fraction of the step done, 0 to 1")
    seconds_left: float | None = Field(None, description="estimated seconds left in the step, at the rate so far")
    nice: int | None = Field(None, description="the build process's nice level (it yields the CPU to requests)")
    elapsed_seconds: float | None = Field(None, description="seconds since the build started")
    cpu_seconds: float | None = Field(None, description="CPU seconds the build has used so far, all its threads")
    hnsw_estimate_seconds: float | None = Field(
        None, description="the estimated time of the HNSW build, when the auto rule estimated it"
    )


class Ready(BaseModel):
    status: str
    loaded: list[str]
    missing: list[str]
    stale: list[str] = Field(
        [], description="tables still serving their previous version because their new files were refused (if any)"
    )
    building: dict[str, BuildStatus] = Field(
        {}, description="tables whose approximate index is being built in the background (exact answers meanwhile)"
    )


class ReloadResponse(BaseModel):
    loaded: list[str] = Field(description="new or changed tables, loaded and verified")
    unchanged: list[str]
    refused: list[str] = Field(description="changed tables whose new files were refused: the previous version serves")
    missing: list[str] = Field(description="requested tables that are not loaded")
    removed: list[str] = Field(description="tables no longer in the data directory, no longer served")
    ready: bool
    seconds: float
    other_workers_signalled: bool = Field(description="the embedding-serve supervisor passes the reload on (SIGHUP)")
