"""Request bodies and query strings to the engine's typed queries (``index.engine.door.Query``), one per item."""

from __future__ import annotations

from typing import Any

from index.engine.door import Analogy, Examples, Mode, Query, SearchOptions, Table
from index.errors import InvalidQuery
from service.schemas.analogy import AnalogyQuery, AnalogyRequest
from service.schemas.common import TokenOptions
from service.schemas.neighbors import NeighborsQuery
from service.schemas.search import DocumentQuery, SearchRequest

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


def word(item: str | int | NeighborsQuery, options: TokenOptions, compose: Any = None) -> Query:
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


def analogy(question: AnalogyQuery, body: AnalogyRequest) -> Query:
    asked = Analogy(question.a, question.b, question.c, question.expect)
    return Query(analogy=asked, k=body.k, options=body.search_options(), method=body.method)


def vectors(table: Table, body: SearchRequest) -> list[Query]:
    """A vector search of a table of words or model tokens: ``vector``, or each of ``vectors``; the fields of a
    documents table's search are a 422 here."""
    words_only(table.name, table.kind, body.model_fields_set)
    options = body.search_options()
    items = [body.vector] if body.vector is not None else body.vectors or []
    return [Query(vector=v, k=body.k, offset=body.offset, min_score=body.min_score, options=options) for v in items]


def words_only(name: str, kind: str, asked: Any) -> None:
    """The 422 for a documents table's fields in the search of table ``name`` of ``kind`` (words, model tokens);
    ``include`` (each hit's row in the whole table, its unit vector) is for every table."""
    if given := [field for field in DOCUMENT_ONLY if field in asked]:
        raise InvalidQuery(
            f"{', '.join(given)}: only for documents tables; table {name!r} holds {kind}, search it by vector"
        )


def documents(body: SearchRequest) -> list[Query]:
    """A documents table's search: its one query, or each item of ``queries`` or ``vectors`` (the latter sharing
    the request's filter and page); an item's mode is its own, else the request's."""
    options = body.search_options()
    if body.queries is not None:
        return [_document(item, item.mode or body.mode, body, options) for item in body.queries]
    if body.vectors is not None:
        return [
            _search(
                body, options, body.mode, vector=v, filter=body.filter, offset=body.offset, min_score=body.min_score
            )
            for v in body.vectors
        ]
    return [_document(body, body.mode, body, options)]


def _document(item: DocumentQuery | SearchRequest, mode: Mode, body: SearchRequest, options: SearchOptions) -> Query:
    examples = Examples(item.positive, item.negative, documents=True) if item.positive or item.negative else None
    return _search(
        body,
        options,
        mode,
        vector=item.vector,
        document=item.id,
        examples=examples,
        text=item.text,
        filter=item.filter,
        offset=item.offset,
        min_score=item.min_score,
    )


def _search(body: SearchRequest, options: SearchOptions, mode: Mode, **given: Any) -> Query:
    weights = None if body.weights is None else (body.weights.vector, body.weights.keyword)
    return Query(
        k=body.k,
        options=options,
        mode=mode,
        rrf_k=body.rrf_k,
        weights=weights,
        diversity=body.diversity,
        fields=body.fields,
        statistics=None if body.keyword_statistics is None else body.keyword_statistics.engine(),
        **given,
    )
