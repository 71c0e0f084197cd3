"""A transformer table's contextual token vectors: ``POST /v1/tables/{table}/contextual`` (``engine.contextual``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.door import contextual, transformer_of
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.execute import compute
from service.respond import FastJSON
from service.schemas.contextual import ContextualRequest, ContextualResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["embed"])


@router.post(
    "/contextual",
    response_model=ContextualResponse,
    responses=responses(*BODY_ERRORS),
    summary="A transformer table's last-layer token vectors; a word's in each text beside its static row",
)
async def post_contextual(request: Request, table: TableDep, body: ContextualRequest) -> Response:
    encoder = transformer_of(table)
    answer = await compute(request, table, "contextual", lambda: contextual(encoder, body.texts, body.token, body.k))
    return FastJSON(answer)
