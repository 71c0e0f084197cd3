"""Nearest rows to raw query vectors (normalised server-side), and the search of a documents table: by vector,
by document (more like it) or by positive/negative documents, with filters, paging and a score floor. A batch is
one matrix product per group of queries sharing a filter and page."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.errors import EmbeddingError, InvalidQuery
from index.filters import RowSet
from index.knn import Neighbor
from index.search import SearchOptions, VectorSearch
from index.table import Table
from service import execute, queries
from service.deps import TableDep
from service.errors import BODY_ERRORS, item_error, responses
from service.models import (
    DocumentQuery,
    DocumentSearchBatchResponse,
    DocumentSearchResponse,
    SearchBatchResponse,
    SearchRequest,
    SearchResponse,
)
from service.respond import FastJSON, documents, neighbors

router = APIRouter(prefix="/v1/tables/{table}", tags=["search"])

DOCUMENT_ONLY = ("id", "positive", "negative", "queries", "filter", "fields")


@router.post(
    "/search",
    response_model=SearchResponse | SearchBatchResponse | DocumentSearchResponse | DocumentSearchBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="Nearest rows to a raw vector ({vector}) or to each of several ({vectors}); on a documents table also "
    "by document id, filtered and paged",
)
async def search(request: Request, table: TableDep, body: SearchRequest) -> Response:
    if table.payload is not None:
        return FastJSON(await _documents(request, table, body))
    if given := [name for name in DOCUMENT_ONLY if name in body.model_fields_set]:
        raise InvalidQuery(
            f"{', '.join(given)}: only for documents tables; table {table.name!r} holds {table.kind}, search it "
            "by vector"
        )
    options = body.search_options()
    if body.vector is not None:
        query = queries.raw_vector(table, body.vector)  # 422: wrong length, NaN/Inf, beyond float32, zero
        search = VectorSearch(query.vector[None, :], body.k, (), options, None, body.offset, body.min_score)
        (hits,) = await execute.search(request, table, "search", search)
        return FastJSON({"neighbors": neighbors(table, hits)})
    vectors = body.vectors or []

    def many() -> dict[str, Any]:
        batch = queries.Batch.build(lambda values: queries.raw_vector(table, values), vectors)
        hits = (
            table.run(VectorSearch(batch.matrix(), body.k, (), options, None, body.offset, body.min_score))
            if batch.queries
            else []
        )
        return {"results": batch.results(table, hits, echo=False)}

    return FastJSON(await execute.compute(request, table, "search_batch", many))


async def _documents(request: Request, table: Table, body: SearchRequest) -> dict[str, Any]:
    options = body.search_options()
    if body.queries is None and body.vectors is None:  # one query
        query = body.document_query()
        if query.filter is None:  # no filter to evaluate: the searcher's path, as for a word table
            search = _request([queries.document(table, query)], query, body.k, options, None)
            (hits,) = await execute.search(request, table, "search", search)
            return _shape(table, hits, body, None)

        def filtered() -> dict[str, Any]:
            rows = table.filter(query.filter)
            (hits,) = table.run(_request([queries.document(table, query)], query, body.k, options, rows))
            return _shape(table, hits, body, rows)

        return await execute.compute(request, table, "search", filtered)
    items = body.queries
    if items is None:  # a batch of vectors, sharing the request's filter and page
        items = [
            DocumentQuery.model_construct(
                vector=v, positive=[], negative=[], filter=body.filter, offset=body.offset, min_score=body.min_score
            )
            for v in body.vectors or []
        ]
    batch = items
    return {
        "results": await execute.compute(request, table, "search_batch", lambda: _answer(table, batch, body, options))
    }


def _request(
    probes: list[queries.Probe], page: DocumentQuery, k: int, options: SearchOptions, rows: RowSet | None
) -> VectorSearch:
    """The engine's request for ``probes`` that share a filter's ``rows`` and ``page``'s offset and score floor."""
    matrix = np.vstack([probe.vector for probe in probes]).astype(np.float32, copy=False)
    return VectorSearch(matrix, k, [probe.exclude for probe in probes], options, rows, page.offset, page.min_score)


def _shape(table: Table, hits: list[Neighbor], body: SearchRequest, rows: RowSet | None) -> dict[str, Any]:
    out: dict[str, Any] = {"hits": documents(table, hits, body.fields)}
    if rows is not None:
        out["passing"] = len(rows)
    return out


def _answer(
    table: Table, items: list[DocumentQuery], body: SearchRequest, options: SearchOptions
) -> list[dict[str, Any]]:
    """Each item's hits (or its error), in order: one search per group of items with the same filter and page."""
    out: list[dict[str, Any]] = [{} for _ in items]
    groups: dict[str, list[tuple[int, queries.Probe]]] = defaultdict(list)
    for position, item in enumerate(items):
        try:
            probe = queries.document(table, item)
            if item.filter is not None:
                table.filter(item.filter)  # an error in the filter is this item's (the rows are kept for below)
        except EmbeddingError as exc:
            out[position] = item_error(exc)
            continue
        groups[json.dumps([item.filter, item.offset, item.min_score], sort_keys=True)].append((position, probe))
    for members in groups.values():
        page = items[members[0][0]]
        rows = None if page.filter is None else table.filter(page.filter)
        answers = table.run(_request([probe for _, probe in members], page, body.k, options, rows))
        for (position, _), hits in zip(members, answers, strict=True):
            out[position] = _shape(table, hits, body, rows)
    return out
