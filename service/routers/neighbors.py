"""Nearest neighbours of a token, a row id, or gensim ``most_similar`` positive/negative tokens; batches."""

from __future__ import annotations

import functools

from fastapi import APIRouter, Request
from starlette.responses import Response

from service import execute
from service.deps import TableDep, TableName, table_named
from service.errors import BODY_ERRORS, TABLE_ERRORS, responses
from service.http.fastroute import QueryRoute, parse_query, query_params
from service.respond import FastJSON, results, words
from service.schemas.neighbors import (
    NeighborsBatchResponse,
    NeighborsParams,
    NeighborsRequest,
    NeighborsResponse,
)

router = APIRouter(prefix="/v1/tables/{table}", tags=["neighbors"], route_class=QueryRoute)


@router.get(
    "/neighbors",
    response_model=NeighborsResponse,
    responses=responses(*TABLE_ERRORS),
    summary="Nearest neighbours of a token (or row id), the token itself left out",
)
@query_params(NeighborsParams)
async def neighbors_get(request: Request, table: TableName) -> Response:
    found = await table_named(request, table)
    query = parse_query(request, NeighborsParams).query()
    return FastJSON(words(found, await execute.one(request, found, "neighbors", query)))


@router.post(
    "/neighbors",
    response_model=NeighborsResponse | NeighborsBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="gensim most_similar (positive/negative tokens, inputs left out), or a batch of queries",
)
async def neighbors_post(request: Request, table: TableDep, body: NeighborsRequest) -> Response:
    queries = body.engine_queries()
    if body.queries is None:
        return FastJSON(words(table, await execute.one(request, table, "neighbors", queries[0])))
    answers = await execute.batch(request, table, "neighbors_batch", queries)
    return FastJSON({"results": results(answers, functools.partial(words, table))})
