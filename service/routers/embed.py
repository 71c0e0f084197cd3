"""Text to vectors: ``POST /v1/tables/{table}/embed`` and the OpenAI-compatible ``POST /v1/embeddings`` (``model``
names a table) and ``GET /v1/models`` (the tables that embed text). The encoders are ``index.engine.encode``'s; the work
runs in a worker thread (``execute.compute``). Errors of the OpenAI paths leave in OpenAI's shape
(``service.http.openai_errors``)."""

from __future__ import annotations

import base64
import logging
from datetime import datetime
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import Response

from index.engine.door import Encoded, Table, check_known, embeds_text, encoder_for
from index.errors import EmbeddingError, InvalidQuery
from service.deps import NAME_SCHEMA, RegistryDep, TableDep, table_named
from service.errors import BODY_ERRORS, ApiError, by_status, describe, headers, responses
from service.execute import compute
from service.http.openai_errors import CODES, is_openai, openai_status
from service.respond import FastJSON
from service.schemas.embed import (
    EmbedRequest,
    EmbedResponse,
    OpenAIEmbeddingsRequest,
    OpenAIEmbeddingsResponse,
    OpenAIModel,
    OpenAIModelList,
)
from service.schemas.embed import OpenAIErrorResponse as OpenAIError

log = logging.getLogger(__name__)


def azure_api_version(
    api_version: Annotated[
        str | None,
        Query(alias="api-version", description="ignored: Azure OpenAI's client sends it on every request"),
    ] = None,
) -> None:
    """Accept the ``api-version`` query parameter that Azure OpenAI's client (``openai.AzureOpenAI``) always adds;
    any other parameter these routes do not declare is refused (``service.http.declared_query``)."""


router = APIRouter(prefix="/v1/tables/{table}", tags=["embed"])
openai_router = APIRouter(tags=["embed"], dependencies=[Depends(azure_api_version)])


async def encode(
    request: Request, table: Table, operation: str, texts: list[str], pooling: Any, name: str, lone: bool = False
) -> Encoded:
    """The texts' vectors; a 422 naming the first text (``name[i]``; ``name`` for a ``lone`` text, sent alone and
    not in a list) with no word the table knows, and its words."""
    encoder = encoder_for(table)  # cheap: what it loads, it loads on first use, in the worker thread
    encoded = await compute(request, table, operation, lambda: encoder.encode(texts, pooling, strict=False))
    check_known(encoded, texts, f"table {table.name!r}", name, lone)
    return encoded


@router.post(
    "/embed",
    response_model=EmbedResponse,
    responses=responses(*BODY_ERRORS),
    summary="Texts to unit vectors with the table's rows: SIF or mean of word rows, mean of model-token rows",
)
async def embed(request: Request, table: TableDep, body: EmbedRequest) -> Response:
    encoded = await encode(request, table, "embed", body.texts, body.pooling, "texts")
    out = {"table": table.name, "pooling": encoded.pooling, "dim": table.dim}
    if encoded.truncated is not None:
        out["truncated"] = encoded.truncated
    return FastJSON({**out, "tokens": encoded.tokens, "unknown": encoded.unknown, "vectors": encoded.vectors})


class ModelId(PathConvertor):
    """A model id of ``GET /v1/models/{model}``, slashes and all (``BAAI/bge-small-en-v1.5`` is answered as the table
    name it is not, as ``POST /v1/embeddings`` answers it); an empty one or a trailing slash is left to the
    redirect that drops it."""

    regex = ".*[^/]"


register_url_convertor("model_id", ModelId())

ModelName = Annotated[str, Path(description="a table's name", max_length=64, json_schema_extra=NAME_SCHEMA)]


async def model_table(request: Request, model: ModelName) -> Table:
    """The table ``model`` names; the registry checks the name: a 400 for one that is no table name (param model)."""
    try:
        return await table_named(request, model)
    except InvalidQuery as exc:
        raise ApiError(exc.code, exc.message, param="model") from None


def check_model(table: Table) -> None:
    """A 404 (``model_not_found``) for a table that embeds no text: not one of ``GET /v1/models``'s models."""
    if not embeds_text(table):
        kind = "a model-token table without a tokenizer" if table.kind == "tokens" else f"a table of {table.kind}"
        raise ApiError("unknown_table", f"table {table.name!r} is {kind}, not a model that embeds text")


OPENAI_NAMES = {code: name or "null" for code, name in CODES.items()}
FASTAPI_422 = ("HTTPValidationError", "ValidationError")  # the schemas of the 422 FastAPI declares itself


def undeclare_422(schema: dict[str, Any]) -> None:
    """Take the 422 FastAPI declares on an operation that declares none out of the OpenAI-compatible ones (they
    answer an invalid request with OpenAI's 400), with its schemas once nothing names them."""
    for path, item in schema["paths"].items():
        for operation in item.values() if is_openai(path) else ():
            operation["responses"].pop("422", None)
    if FASTAPI_422[0] not in str(schema["paths"]):
        for name in FASTAPI_422:
            schema.get("components", {}).get("schemas", {}).pop(name, None)


def openai_responses(*codes: str) -> dict[int | str, dict[str, Any]]:
    """The error answers of an OpenAI-compatible operation, by the status each has there (OpenAI's)."""
    grouped: dict[int, list[str]] = {}
    for code in (code for kinds in by_status(*codes).values() for code in kinds):
        grouped.setdefault(openai_status(code), []).append(code)
    return {
        status: {
            "model": OpenAIError,
            "description": f"OpenAI's error shape; {describe(kinds, OPENAI_NAMES)}",
            **headers(kinds),
        }
        for status, kinds in sorted(grouped.items())
    }


@openai_router.post(
    "/v1/embeddings",
    response_model=OpenAIEmbeddingsResponse,
    responses=openai_responses(*BODY_ERRORS),
    summary="OpenAI-compatible embeddings: model is a table's name, input a text or texts",
)
async def create_embeddings(request: Request, body: OpenAIEmbeddingsRequest) -> Response:
    table = await model_table(request, body.model)
    check_model(table)  # first: a table that embeds no text is no model, whatever the dimensions asked
    try:
        encoder = encoder_for(table)
    except InvalidQuery as exc:
        raise ApiError(exc.code, exc.message, param="model") from None
    if body.dimensions is not None and body.dimensions != table.dim:
        message = f"table {table.name!r} gives {table.dim} dimensions; dimensions must be {table.dim} or left out"
        raise ApiError("invalid_request", message, param="dimensions")
    try:
        encoder.check(body.pooling)
    except InvalidQuery as exc:
        raise ApiError(exc.code, exc.message, param="pooling") from None
    lone = isinstance(body.input, str)  # one string: named "input", as the validation errors name it
    try:
        texts = [body.input] if isinstance(body.input, str) else body.input
        encoded = await encode(request, table, "embeddings", texts, body.pooling, "input", lone)
    except InvalidQuery as exc:
        item = exc.details.get("text")
        param = "input" if item is None or lone else f"input[{item}]"
        raise ApiError(exc.code, exc.message, param=param, words=exc.details.get("words")) from None
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


def _model(table: Table) -> dict[str, Any]:
    built = table.manifest.get("built_at")
    try:
        created = int(datetime.fromisoformat(str(built)).timestamp())
    except ValueError:
        created = 0
    return {"id": table.name, "object": "model", "created": created, "owned_by": "embedding-search"}


@openai_router.get(
    "/v1/models",
    response_model=OpenAIModelList,
    responses=openai_responses("invalid_request", "not_ready"),
    summary="OpenAI-compatible: the tables that embed text (models of POST /v1/embeddings)",
)
async def list_models(registry: RegistryDep) -> Response:
    tables = [registry.tables[name] for name in sorted(registry.tables)]
    return FastJSON({"object": "list", "data": [_model(table) for table in tables if embeds_text(table)]})


@openai_router.get(
    "/v1/models/{model:model_id}",
    response_model=OpenAIModel,
    responses=openai_responses("unknown_table", "invalid_request", "not_ready"),
    summary="OpenAI-compatible: one table that embeds text, as a model",
)
async def get_model(table: Annotated[Table, Depends(model_table)]) -> Response:
    check_model(table)
    return FastJSON(_model(table))


ROUTERS = (router, openai_router)
