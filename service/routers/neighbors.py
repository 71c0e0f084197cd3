"""Nearest neighbours of a token, a row id, or gensim ``most_similar`` positive/negative tokens; batches."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.search import VectorSearch
from index.engine.table import Table
from service import execute, queries
from service.deps import TableDep, TableName, table_named
from service.errors import BODY_ERRORS, TABLE_ERRORS, responses
from service.http.fastroute import QueryRoute, parse_query, query_params
from service.respond import FastJSON, neighbors
from service.schemas.common import TokenOptions
from service.schemas.neighbors import (
    NeighborsBatchResponse,
    NeighborsParams,
    NeighborsQuery,
    NeighborsRequest,
    NeighborsResponse,
)

router = APIRouter(prefix="/v1/tables/{table}", tags=["neighbors"], route_class=QueryRoute)


def probe(table: Table, item: str | NeighborsQuery, compose: str | None) -> queries.Probe:
    if isinstance(item, str):
        return queries.word(table, item, compose)
    if item.token is not None:
        return queries.word(table, item.token, compose)
    if item.id is not None:
        return queries.row_id(table, item.id)
    return queries.mean_of(table, item.positive, item.negative)


async def single(
    request: Request, table: Table, item: str | NeighborsQuery, compose: str | None, options: TokenOptions
) -> dict[str, Any]:
    query = probe(table, item, compose)
    search = VectorSearch(query.vector[None, :], options.k, [query.exclude], options.search_options())
    (hits,) = await execute.search(request, table, "neighbors", search)
    return {"query": query.info, "neighbors": neighbors(table, hits)}


@router.get(
    "/neighbors",
    response_model=NeighborsResponse,
    responses=responses(*TABLE_ERRORS),
    summary="Nearest neighbours of a token (or row id), the token itself left out",
)
@query_params(NeighborsParams)
async def neighbors_get(request: Request, table: TableName) -> Response:
    found = await table_named(request, table)
    params = parse_query(request, NeighborsParams)
    item = params.token if params.token is not None else NeighborsQuery(id=params.id)
    return FastJSON(await single(request, found, item, params.compose, params))


@router.post(
    "/neighbors",
    response_model=NeighborsResponse | NeighborsBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="gensim most_similar (positive/negative tokens, inputs left out), or a batch of queries",
)
async def neighbors_post(request: Request, table: TableDep, body: NeighborsRequest) -> Response:
    if body.queries is None:
        item = NeighborsQuery(token=body.token, id=body.id, positive=body.positive, negative=body.negative)
        return FastJSON(await single(request, table, item, body.compose, body))
    items = body.queries

    def run() -> dict[str, Any]:
        batch = queries.Batch.build(lambda item: probe(table, item, body.compose), items)
        hits = []
        if batch.queries:
            hits = table.run(VectorSearch(batch.matrix(), body.k, batch.excludes(), body.search_options()))
        return {"results": batch.results(table, hits)}

    return FastJSON(await execute.compute(request, table, "neighbors_batch", run))
