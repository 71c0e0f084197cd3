"""Nearest rows to raw query vectors (normalised server-side); a batch is one matrix product."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from index.search import VectorSearch
from service import execute, queries
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.models import SearchBatchResponse, SearchRequest, SearchResponse
from service.respond import FastJSON, neighbors

router = APIRouter(prefix="/v1/tables/{table}", tags=["search"])


@router.post(
    "/search",
    response_model=SearchResponse | SearchBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="Nearest rows to a raw vector ({vector}) or to each of several ({vectors})",
)
async def search(request: Request, table: TableDep, body: SearchRequest) -> Response:
    options = body.search_options()
    if body.vector is not None:
        query = queries.raw_vector(table, body.vector)  # 422: wrong length, NaN/Inf, beyond float32, zero
        (hits,) = await execute.search(
            request, table, "search", VectorSearch(query.vector[None, :], body.k, (), options)
        )
        return FastJSON({"neighbors": neighbors(table, hits)})
    vectors = body.vectors or []

    def many() -> dict[str, Any]:
        batch = queries.Batch.build(lambda values: queries.raw_vector(table, values), vectors)
        hits = table.run(VectorSearch(batch.matrix(), body.k, (), options)) if batch.queries else []
        return {"results": batch.results(table, hits, echo=False)}

    return FastJSON(await execute.compute(request, table, "search_batch", many))
