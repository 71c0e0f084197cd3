"""Text to vectors: ``POST /v1/tables/{table}/embed`` and the OpenAI-compatible ``POST /v1/embeddings`` (``model``
names a table). The encoders are ``index.encode``'s; the work runs in a worker thread (``execute.compute``).
Errors of ``/v1/embeddings`` leave in OpenAI's shape (``service.http.openai_errors``)."""

from __future__ import annotations

import base64
import logging
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.encode import Encoded, encoder_for
from index.errors import EmbeddingError, InvalidQuery
from index.table import Table
from service.deps import TableDep, get_registry
from service.embed_models import EmbedRequest, EmbedResponse, OpenAIEmbeddingsRequest, OpenAIEmbeddingsResponse
from service.embed_models import OpenAIErrorResponse as OpenAIError
from service.errors import BODY_ERRORS, ERRORS, ApiError, responses
from service.execute import compute
from service.respond import FastJSON

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/tables/{table}", tags=["embed"])
openai_router = APIRouter(tags=["embed"])


async def encode(request: Request, table: Table, operation: str, texts: list[str], pooling: Any) -> Encoded:
    encoder = encoder_for(table)  # cheap: what it loads, it loads on first use, in the worker thread
    return await compute(request, table, operation, lambda: encoder.encode(texts, pooling))


@router.post(
    "/embed",
    response_model=EmbedResponse,
    responses=responses(*BODY_ERRORS),
    summary="Texts to unit vectors with the table's rows: SIF or mean of word rows, mean of model-token rows",
)
async def embed(request: Request, table: TableDep, body: EmbedRequest) -> Response:
    encoded = await encode(request, table, "embed", body.texts, body.pooling)
    out = {"table": table.name, "pooling": encoded.pooling, "dim": table.dim}
    if encoded.truncated is not None:
        out["truncated"] = encoded.truncated
    return FastJSON({**out, "tokens": encoded.tokens, "unknown": encoded.unknown, "vectors": encoded.vectors})


def openai_responses(*codes: str) -> dict[int | str, dict[str, Any]]:
    statuses = sorted({ERRORS[code].status for code in (*codes, "internal")})
    return {status: {"model": OpenAIError, "description": "OpenAI's error shape"} for status in statuses}


@openai_router.post(
    "/v1/embeddings",
    response_model=OpenAIEmbeddingsResponse,
    responses=openai_responses(*BODY_ERRORS),
    summary="OpenAI-compatible embeddings: model is a table's name, input a text or texts",
)
async def create_embeddings(request: Request, body: OpenAIEmbeddingsRequest) -> Response:
    table = (await get_registry(request)).get(body.model)
    if body.dimensions is not None and body.dimensions != table.dim:
        message = f"table {table.name!r} gives {table.dim} dimensions; dimensions must be {table.dim} or left out"
        raise ApiError("invalid_request", message, param="dimensions")
    try:
        encoder = encoder_for(table)
    except InvalidQuery as exc:
        raise ApiError(exc.code, exc.message, param="model") from None
    try:
        encoder.check(body.pooling)
    except InvalidQuery as exc:
        raise ApiError(exc.code, exc.message, param="pooling") from None
    try:
        texts = [body.input] if isinstance(body.input, str) else body.input
        encoded = await encode(request, table, "embeddings", texts, body.pooling)
    except InvalidQuery as exc:
        item = exc.details.get("text")
        raise ApiError(exc.code, exc.message, param="input" if item is None else f"input[{item}]") from None
    except EmbeddingError:
        raise
    except Exception:  # past the error handlers' reach on this path: answered here, in OpenAI's shape
        log.exception("unhandled error on POST /v1/embeddings")
        raise ApiError("internal", "internal server error") from None
    if body.encoding_format == "base64":
        rows = np.ascontiguousarray(encoded.vectors, dtype="<f4")
        embeddings: list[Any] = [base64.b64encode(row.tobytes()).decode("ascii") for row in rows]
    else:
        embeddings = list(encoded.vectors)
    data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(embeddings)]
    used = int(sum(encoded.tokens) + sum(encoded.unknown))
    usage = {"prompt_tokens": used, "total_tokens": used}
    return FastJSON({"object": "list", "data": data, "model": table.name, "usage": usage})


ROUTERS = (router, openai_router)
