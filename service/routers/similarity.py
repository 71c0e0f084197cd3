"""Cosine similarity of two tokens (gensim ``similarity``), or of many pairs at once."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine import door
from index.engine.door import Failed
from service.deps import TableDep, TableName, table_named
from service.errors import BODY_ERRORS, TABLE_ERRORS, item_error, responses
from service.execute import compute
from service.http.fastroute import QueryRoute, parse_query, query_params
from service.respond import FastJSON
from service.schemas.similarity import SimilaritiesResponse, SimilarityParams, SimilarityRequest, SimilarityResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["similarity"], route_class=QueryRoute)


@router.get(
    "/similarity",
    response_model=SimilarityResponse,
    responses=responses(*TABLE_ERRORS),
    summary="Cosine similarity of two tokens",
)
@query_params(SimilarityParams)
async def similarity_get(request: Request, table: TableName) -> Response:
    found = await table_named(request, table)
    params = parse_query(request, SimilarityParams)
    value, info = await compute(
        request, found, "similarity", lambda: door.similarity(found, params.a, params.b, params.compose), on_loop=True
    )
    return FastJSON({"a": params.a, "b": params.b, "similarity": value, "query": info})


@router.post(
    "/similarity",
    response_model=SimilaritiesResponse,
    responses=responses(*BODY_ERRORS),
    summary="Cosine similarity of many pairs; null (with the reason in errors) for a pair with an unknown token",
)
async def similarity_post(request: Request, table: TableDep, body: SimilarityRequest) -> Response:
    def run() -> dict[str, Any]:
        answers = door.similarities(table, body.pairs, body.compose)
        values = [None if isinstance(a, Failed) else a for a in answers]
        errors = [item_error(a.error)["error"] if isinstance(a, Failed) else None for a in answers]
        return {"similarities": values, "errors": errors}

    return FastJSON(await compute(request, table, "similarity_batch", run))
