"""What every request and response schema shares: the limits, the field types and their validators, the request
forms written into the JSON schema, the query options, and the parts of answers that many routes give.

Limits live in the models: ``k`` is 1..max_k and batches hold at most max_batch items, where max_k and
max_batch are the serving app's settings; so do the bounds on a request's total work (hits, filter conditions,
words, layout points x neighbourhood, the rows an analogy batch scores one by one), each a 422 before any work
starts (the tokens a transformer runs are counted by the engine, ``index.engine.door.ENCODE_BUDGET``; the bytes a
search answers by ``service.respond``, before the answer is built). The app publishes them per request in
:data:`LIMITS` (set by the request-limits middleware) and the validators and OpenAPI schema read them from there,
so two apps with different settings can run in one process. JSON bodies are strict: ``k: true`` or ``k: 1.5`` is a 422.
"""

from __future__ import annotations

import functools
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

from index.engine.door import FLOAT32_MAX, SearchOptions, filters
from index.errors import OverLimit
from service.errors import CODE_DESCRIPTION
from service.schemas.bounds import MAX_DIM, MAX_EXAMPLES, MAX_TOKEN_CHARS


@dataclass(frozen=True)
class Limits:
    max_k: int = 1000
    max_batch: int = 1024
    max_hits: int = 102_400  # items x (offset + k) in one request
    max_filter_conditions: int = 4096  # conditions of all the filters of one request
    max_words: int = 20_000  # words of all the word lists of one request (doesnt-match, n-similarity, neighbours)
    max_layout_work: int = 32_768  # tokens x perplexity (t-SNE) or x n_neighbors (UMAP) of one projection
    max_encode_tokens: int = 16_384  # tokens one request has a transformer table's model run (index.engine.door)
    max_scored_rows: int = 20_000_000  # rows one analogy batch scores one by one (service.schemas.analogy)
    max_exact_rows: int = 102_400_000  # queries x rows of one request's exact searches (index.engine.knn)
    max_answer_bytes: int = 64_000_000  # text and vectors one search answers (service.respond)


LIMITS: ContextVar[Limits] = ContextVar("embedding_limits", default=Limits())  # noqa: B039 (frozen)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _at_most_max_k(value: int, name: str) -> int:
    limit = LIMITS.get().max_k
    if value > limit:
        raise OverLimit(f"{name} must be at most {limit} (the server's max_k)", "max_k")
    return value


def check_k(k: int) -> int:
    return _at_most_max_k(k, "k")


def check_limit(limit: int) -> int:
    """closer-than's ``limit``, bounded as k is."""
    return _at_most_max_k(limit, "limit")


def _check_batch(items: list[Any]) -> list[Any]:
    limit = LIMITS.get().max_batch
    if len(items) > limit:
        raise OverLimit(f"a batch holds at most {limit} items (the server's max_batch), got {len(items)}", "max_batch")
    return items


def check_work(amount: int, limit_name: str, what: str) -> None:
    """:class:`OverLimit` when ``amount`` is over the limit ``limit_name`` of :class:`Limits` (a request's total
    work)."""
    limit = getattr(LIMITS.get(), limit_name)
    if amount > limit:
        raise OverLimit(f"{what}: {amount:,}, more than the server's {limit_name} of {limit:,}", limit_name)


def check_hits(items: int, k: int) -> None:
    if items > 1:
        check_work(items * k, "max_hits", f"hits asked for ({items:,} items x k {k:,}, offset included)")


def check_page(k: int, offset: int) -> None:
    limit = LIMITS.get().max_k
    if offset + k > limit:
        raise OverLimit(f"offset + k must be at most {limit} (the server's max_k), got {offset + k}", "max_k")


def k_schema(schema: dict[str, Any]) -> None:
    schema["maximum"] = LIMITS.get().max_k


def _batch_schema(schema: dict[str, Any]) -> None:
    schema["maxItems"] = LIMITS.get().max_batch


WHOLE_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
MAX_DIGITS = 4300  # the longest decimal text int() reads (Python's limit; a JSON body's longer integer is a 400)


def _whole_number(value: Any, info: ValidationInfo) -> Any:
    """JSON Schema (and so OpenAPI 3.1) counts 2.0 and 2e0 as the integer 2; booleans and 2.5 stay refused.

    Strings are numbers only in a query string (lax models); a JSON body's ``"5"`` is a string, refused.
    """
    if isinstance(value, str) and not (info.config and info.config.get("strict")):
        if value.isascii() and value.isdigit() and len(value) <= MAX_DIGITS:  # "10": exactly, as float() may not
            return int(value)
        if WHOLE_NUMBER.fullmatch(value.strip()):
            value = float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Whole = BeforeValidator(_whole_number)
# The constraints come before the validator, so the schema says "minimum" (pydantic's order rule).
K = Annotated[
    int,
    Field(ge=1, json_schema_extra=k_schema, description="number of neighbours, 1..max_k"),
    Whole,
    AfterValidator(check_k),
]
Restrict = Annotated[int, Field(ge=1, description="search only the first N rows (gensim's restrict_vocab)"), Whole]
RowId = Annotated[int, Field(ge=0, description="a row id instead of a token"), Whole]
Token = Annotated[str, Field(min_length=1, max_length=MAX_TOKEN_CHARS)]
Component = Annotated[float, Field(ge=-FLOAT32_MAX, le=FLOAT32_MAX, allow_inf_nan=False, description="a float32 value")]
Vector = Annotated[list[Component], Field(min_length=1, max_length=MAX_DIM)]
# Items of a batch are checked one by one (a bad vector gets its own error), so the schema takes any numbers.
BatchVector = Annotated[list[float], Field(min_length=1, max_length=MAX_DIM)]
Tokens = Annotated[list[Token], Field(max_length=MAX_EXAMPLES)]


def batch_of(description: str, min_items: int = 1) -> Any:
    """The field of a batch: ``Annotated[list[Item], batch_of(...), CHECK_BATCH]`` is ``min_items``..max_batch items.

    The annotation is written out at each use (not built by a function) so a type checker sees the item type.
    """
    return Field(min_length=min_items, json_schema_extra=_batch_schema, description=description)


CHECK_BATCH = AfterValidator(_check_batch)


STRICT = ConfigDict(strict=True, extra="forbid")
# A query string's model: its values are text, converted as FastAPI converts query parameters; an unknown
# parameter is refused as a body's unknown field is (a misspelt ``min_scor`` must not be dropped silently).
QUERY = ConfigDict(extra="forbid")


# The request forms, written into the JSON schema as ``oneOf`` so the OpenAPI document says what the model
# validators enforce ("exactly one of ..."): a client (or a fuzzer) that follows the schema is never refused. They
# sit in an ``allOf`` beside the model's ``properties``: client generators (openapi-python-client) read a schema
# whose own ``oneOf`` is a union of its forms' fragments, and drop the shared fields (``k``, ``vector``, ...).
def present(*fields: str) -> dict[str, Any]:
    return {"required": list(fields), "properties": {f: {"not": {"type": "null"}} for f in fields}}


def absent(*fields: str) -> dict[str, Any]:
    return {"properties": {f: {"type": "null"} for f in fields}}


def nonempty(field: str) -> dict[str, Any]:
    return {"required": [field], "properties": {field: {"minItems": 1}}}


@dataclass(frozen=True)
class Form:
    """One request form: the schema of a request that uses it, and of one that does not (None: the form itself
    rules the others out)."""

    used: dict[str, Any]
    unused: dict[str, Any] | None = None


def given(*fields: str) -> Form:
    """The form of these fields: given (not null), or left out (or null)."""
    return Form(present(*fields), absent(*fields))


NO_POSITIVE_NEGATIVE = {"properties": {"positive": {"maxItems": 0}, "negative": {"maxItems": 0}}}
POSITIVE_NEGATIVE = Form({"anyOf": [nonempty("positive"), nonempty("negative")]}, NO_POSITIVE_NEGATIVE)


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
    rules: list[Any] = [{"oneOf": one_of}]
    if any_of:
        rules.append({"anyOf": list(any_of)})
    if never:
        rules.append({"not": {"anyOf": list(never)}})
    return ConfigDict(strict=True, extra="forbid", json_schema_extra={"allOf": rules})


SINGLE_QUERY_FORMS = (given("token"), given("id"), POSITIVE_NEGATIVE)


def unsent_default(schema: dict[str, Any]) -> None:
    """Leaves out of a field's schema a default that holds only where the field belongs (a method's, a mode's, a
    documents table's field; its description says it): a client generated from the document sends the defaults
    the schema declares, and the field is refused where it does not belong (``rrf_k`` outside mode hybrid)."""
    schema.pop("default", None)


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


def _utf8_json(value: Any) -> None:
    """Raise ValueError at the first text (key or value) of free-form JSON that UTF-8 cannot encode: a lone
    surrogate such as ``"\\ud800"`` is valid JSON, and pydantic's ``str`` refuses it, but ``Any`` lets it through.
    Walked without recursion: any depth the JSON parser takes is checked."""
    pending: list[tuple[Any, str]] = [(value, "")]
    while pending:
        node, where = pending.pop()
        if isinstance(node, str):
            try:
                node.encode()
            except UnicodeEncodeError:
                raise ValueError(
                    f"{where or 'text'}: text must be valid Unicode (a lone UTF-16 surrogate is not)"
                ) from None
        elif isinstance(node, dict):
            for key, item in reversed(node.items()):
                pending.append((item, f"{where}.{key}" if where else key))
                pending.append((key, f"{where}.<a key>" if where else "<a key>"))
        elif isinstance(node, list):
            pending.extend((item, f"{where}[{i}]") for i, item in reversed(list(enumerate(node))))


def _valid_text(value: Any) -> Any:
    _utf8_json(value)
    return value


def int64_schema(schema: dict[str, Any]) -> None:
    """The int64 range as the OpenAPI document can say it: its bounds become floats, which a checker compares as
    floats, so they stay a float's step (1024) inside it (a client that keeps within the schema is never refused)."""
    schema["minimum"], schema["maximum"] = INT64_MIN + 1024, INT64_MAX + 1 - 1024


Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX, json_schema_extra=int64_schema), Whole]
DocumentId = Annotated[
    Token | Int64, Field(description="a document's id (documents tables)", union_mode="left_to_right")
]


def conditions(spec: Any) -> int:
    """How many conditions a filter holds: one per operator on a field and per and/or/not (each is one pass over
    a column or over the rows' booleans). Counted without recursion, so a filter nested deeper than the engine
    evaluates is its 422, whatever its depth."""
    count, pending = 0, [(spec, 0)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, list):
            pending.extend((item, depth) for item in node)
        elif not isinstance(node, dict):
            count += 1
        else:
            for key, value in node.items():
                if key not in ("and", "or", "not"):
                    count += len(value) if isinstance(value, dict) and value else 1
                elif depth == filters.MAX_DEPTH:  # as deep as the engine evaluates them
                    raise ValueError(f"a filter nests at most {filters.MAX_DEPTH} levels of and/or/not")
                else:
                    count += 1
                    pending.append((value, depth + 1))
    return count


ValidText = AfterValidator(_valid_text)  # for free-form JSON (``Any``); typed ``str`` fields refuse surrogates already


PairBatch = Annotated[
    list[Annotated[list[Token], Field(min_length=2, max_length=2)]], batch_of("pairs of tokens"), CHECK_BATCH
]


TABLE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*\.?$"  # what check_name accepts
TableNameField = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=TABLE_NAME_PATTERN,
        description="table name, as listed by GET /v1/tables",
    ),
]


class Neighbor(BaseModel):
    token: str
    id: int
    score: float
    readable: str | None = Field(None, description="model-token tables: the text the token stands for (' heart')")
    metadata: dict[str, str] | None = Field(None, description="the row's metadata columns, for tables that have them")
    row: int | None = Field(None, description='with include "row": the row (of a shard: in the whole table)')
    vector: list[float] | None = Field(None, description='with include "vector": the unit vector')


class TokenPiece(BaseModel):
    id: int
    token: str


class QueryInfo(BaseModel):
    """Which row(s) a query used: ``token``/``id`` of the resolved row and how it matched."""

    model_config = ConfigDict(extra="allow")

    text: str | None = None
    token: str | None = None
    id: int | None = None
    match: str | None = Field(None, description="exact, casefold, space-marked, normalized, id, or composed")
    compose: str | None = Field(None, description='match "composed": how its pieces\' rows were combined (mean)')
    tokens: list[TokenPiece] | None = Field(None, description='match "composed": the pieces the word was split into')


class PairQuery(BaseModel):
    """The rows of a pair's words (similarity, rank, closer-than)."""

    a: QueryInfo
    b: QueryInfo


class ExamplesQuery(BaseModel):
    """The rows of a positive/negative query (gensim ``most_similar``)."""

    positive: list[QueryInfo]
    negative: list[QueryInfo]


class ItemError(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description=CODE_DESCRIPTION)
    message: str
    suggestions: list[str] | None = Field(None, description="unknown_token: up to 5 tokens spelled like it")
    token: str | None = Field(None, description="unknown_token: the word as asked for")
    ids: list[str | int] | None = Field(None, description="unknown_document: the ids not found (the first few)")
    count: int | None = Field(None, description="unknown_document: how many ids were not found")


class ItemErrorResponse(BaseModel):
    error: ItemError
