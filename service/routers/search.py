"""Nearest rows to raw query vectors (normalised server-side), and the search of a documents table: by vector,
by document (more like it) or by positive/negative documents, by keyword (BM25) or both fused, with filters,
paging, a score floor and diversity. The engine's door (``index.engine.door``) answers them."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.door import keyword_statistics
from service import execute, live
from service.deps import RegistryDep, TableDep
from service.errors import BODY_ERRORS, responses
from service.http.fastroute import QueryRoute, plain_body
from service.plain_search import plain_vector_search
from service.respond import FastJSON, Shown, searched
from service.schemas.keyword_statistics import GatherRequest
from service.schemas.search import (
    DocumentSearchBatchResponse,
    DocumentSearchResponse,
    SearchBatchResponse,
    SearchRequest,
    SearchResponse,
)

router = APIRouter(prefix="/v1/tables/{table}", tags=["search"], route_class=QueryRoute)


@router.post(
    "/search",
    response_model=SearchResponse | SearchBatchResponse | DocumentSearchResponse | DocumentSearchBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="Nearest rows to a raw vector ({vector}) or to each of several ({vectors}); on a documents table also "
    "by document id, by keyword or hybrid (text, mode), filtered, paged and diversified",
)
@plain_body(plain_vector_search)  # one raw vector: answered without the request model (service.http.fastroute)
async def search(request: Request, table: TableDep, registry: RegistryDep, body: SearchRequest) -> Response:
    single = body.queries is None and body.vectors is None
    encoder, delta = None, None
    if table.payload is None:
        queries = body.vector_queries(table.name, table.kind)
    else:
        queries = body.document_queries()
        encoder = registry.encoder_of(table)
        delta = live.delta_of(table)  # the documents written since the version, if any: searched beside them
    shown = Shown(body.fields, body.include or (), delta)
    if single:
        result = await execute.one(request, table, "search", queries[0], encoder, delta)
        return FastJSON(searched(table, [result], shown)[0])
    answers = await execute.batch(request, table, "search_batch", queries, encoder, delta)
    return FastJSON({"results": searched(table, answers, shown)})


@router.post("/search/statistics", include_in_schema=False)
async def search_statistics(request: Request, table: TableDep, body: GatherRequest) -> Response:
    """This table's part of the keyword statistics of the texts' words (``index.engine.dfs.gather``): what the
    front of a sharded table sums over its shards and sends with a keyword or hybrid search."""
    delta = live.delta_of(table)
    return FastJSON(
        await execute.compute(request, table, "search_statistics", lambda: keyword_statistics(table, delta, body.texts))
    )
