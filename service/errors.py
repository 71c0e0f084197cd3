"""One error envelope and one map from error kind to HTTP status.

Every error leaves the service as ``{"error": {"code": ..., "message": ..., ...}}``. The status code comes
from :data:`ERRORS` only, and the OpenAPI ``responses`` of every operation are generated from the same map,
so the documentation cannot drift from the behaviour.
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypedDict, TypeVar

import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.models import Schema
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match, Mount

from index.errors import EmbeddingError, OverLimit, clipped
from service.schemas.bounds import FIXED_LIMITS

log = logging.getLogger(__name__)
Item = TypeVar("Item")
R = TypeVar("R")


class ErrorKind(NamedTuple):
    status: int
    description: str


ERRORS: dict[str, ErrorKind] = {
    "unknown_table": ErrorKind(404, "No loaded table has that name (with up to 5 close `suggestions`)"),
    "unknown_token": ErrorKind(404, "The token is not in the table (with up to 5 close `suggestions`)"),
    "unknown_document": ErrorKind(404, "No document of the documents table has that id (the ids are named)"),
    "not_found": ErrorKind(404, "No such path"),
    "method_not_allowed": ErrorKind(405, "The path does not accept this HTTP method"),
    "bad_request": ErrorKind(400, "The request is malformed (e.g. a body that is not UTF-8, a bad Content-Length)"),
    "unauthorized": ErrorKind(401, "An API key is required (header X-API-Key)"),
    "forbidden": ErrorKind(
        403,
        "The API key is not valid, or its kind may not do this (a read key writing; the message says which key to "
        "send), or the server disabled the route (no admin key, no write keys)",
    ),
    "body_too_large": ErrorKind(413, "The request body is larger than the server's limit"),
    "invalid_request": ErrorKind(
        422,
        "Invalid request: a field has the wrong type or is out of range (k, batch size, vector length, "
        "NaN/Inf, zero vector, unknown method)",
    ),
    "not_ready": ErrorKind(503, "The table (or the server) is not loaded, or the server is shutting down"),
    "shard_unavailable": ErrorKind(503, "A shard of the sharded table did not answer (no replica could be reached)"),
    "shard_timeout": ErrorKind(504, "A shard of the sharded table did not answer within its deadline"),
    "request_timeout": ErrorKind(
        408, "The request line and headers, or the body, did not arrive within the server's time"
    ),
    "http_version_not_supported": ErrorKind(505, "The request line names an HTTP version other than 1.0 and 1.1"),
    "request_line_too_long": ErrorKind(414, "The request line (mostly the URL) is longer than the server's limit"),
    "headers_too_large": ErrorKind(431, "The request line and headers together are larger than the server's limit"),
    "overloaded": ErrorKind(
        503,
        "The worker has as many connections open as it takes, or as many long computations (projections, maps) "
        "running and waiting, or no file descriptor or memory left for this request; retry after `Retry-After`",
    ),
    "client_closed_request": ErrorKind(
        499, "The client closed the connection before its work started (no one reads this answer; for the logs)"
    ),
    "internal": ErrorKind(500, "Unexpected server error (details are in the server log, never in the response)"),
}

_BY_STATUS = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large", 400: "bad_request"}
_MESSAGES = {"not_found": "no such path", "method_not_allowed": "method not allowed"}
_DETAILS = {  # FastAPI's words for a body it cannot decode (not UTF-8, nested too deeply, an integer too long)
    "There was an error parsing the body": "the request body cannot be read as JSON: it must be UTF-8 text, "
    "nested less than 1,000 levels deep, its integers at most 4,300 digits long"
}


class ApiError(EmbeddingError):
    """An error raised by the HTTP layer itself, with any code from :data:`ERRORS`."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.code = code


CODE_DESCRIPTION = (
    "the kind of error: " + ", ".join(ERRORS) + " (the responses of each operation say which it answers, and when)"
)


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description=CODE_DESCRIPTION)
    message: str
    suggestions: list[str] | None = Field(None, description="unknown_table, unknown_token: up to 5 spelled like it")
    token: str | None = Field(None, description="unknown_token: the word as asked for")
    limit: str | None = Field(None, description="over a limit: its name, as GET /v1/limits gives it")
    ids: list[str | int] | None = Field(None, description="unknown_document: the ids not found (the first few)")
    count: int | None = Field(None, description="unknown_document: how many ids were not found")
    words: list[str] | None = Field(None, description="a text of no word the table knows: its words")
    document: int | None = Field(None, description="invalid_request of an upsert's document: its index in the request")
    shard: int | None = Field(None, description="shard_unavailable, shard_timeout: the shard")
    shutting_down: bool | None = Field(None, description="not_ready: the server is shutting down")
    details: list[dict[str, Any]] | None = Field(
        None, description="invalid_request of a request's fields: each problem's loc, type and message"
    )


class ErrorResponse(BaseModel):
    """The envelope of every error response; kind-specific fields (e.g. ``suggestions``; ``limit``, the name of
    the limit of ``GET /v1/limits`` a request is over) sit beside code."""

    error: ErrorBody


def status_of(code: str) -> int:
    return ERRORS[code].status if code in ERRORS else 500


def error_body(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **details}}


def item_error(exc: EmbeddingError) -> dict[str, Any]:
    """The envelope for one failed item of a batch (the batch itself succeeds)."""
    return error_body(exc.code, exc.message, **exc.details)


def per_item(items: Iterable[Item], run: Callable[[Item], R]) -> tuple[list[R | None], dict[int, dict[str, Any]]]:
    """``run(item)`` for each item of a batch: the results (None for an item that failed) and, by position, the
    :func:`item_error` of each item that failed (the batch itself succeeds)."""
    results: list[R | None] = []
    errors: dict[int, dict[str, Any]] = {}
    for position, item in enumerate(items):
        try:
            results.append(run(item))
        except EmbeddingError as exc:
            results.append(None)
            errors[position] = item_error(exc)
    return results, errors


def with_errors(results: Sequence[Any], errors: dict[int, dict[str, Any]]) -> list[Any]:
    """A batch's ``results``, each failed item's error envelope in its place."""
    return [errors.get(position, result) for position, result in enumerate(results)]


def error_response(code: str, message: str, headers: dict[str, str] | None = None, **details: Any) -> Response:
    status = status_of(code)
    body = orjson.dumps(error_body(code, message, **details), option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


SCHEMAS = "#/components/schemas/"


def envelope(shape: str = "ErrorResponse") -> dict[str, Any]:
    """An OpenAPI response's content: JSON of the error schema ``shape`` (OpenAI's on its paths)."""
    return {"application/json": {"schema": {"$ref": SCHEMAS + shape}}}


def by_status(*codes: str, busy: bool = True) -> dict[int, list[str]]:
    """The error codes an operation can answer, by status: ``codes``, ``body_too_large`` (every operation: a body
    over the limit is refused before any route, whatever the method; ``service.http.limits``), ``overloaded``
    (every path but the liveness probe, unless ``busy`` is off) and the generic 500."""
    grouped: dict[int, list[str]] = {}
    for code in dict.fromkeys((*codes, "body_too_large", *(("overloaded",) if busy else ()), "internal")):
        grouped.setdefault(ERRORS[code].status, []).append(code)
    return dict(sorted(grouped.items()))


def describe(kinds: Iterable[str], names: dict[str, str] | None = None) -> str:
    """A response's description: each error code (as ``names`` renames it) with what it means."""
    return " / ".join(f"`{(names or {}).get(c, c)}`: {ERRORS[c].description}" for c in kinds)


RETRY_AFTER = {"description": "with `overloaded`: the seconds to wait before retrying", "schema": {"type": "integer"}}


def headers(kinds: Iterable[str]) -> dict[str, Any]:
    """The headers a response of these error codes carries, as an OpenAPI response declares them."""
    return {"headers": {"Retry-After": RETRY_AFTER}} if "overloaded" in kinds else {}


def responses(*codes: str, busy: bool = True) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` for an operation that can fail with ``codes`` (see :func:`by_status`). The envelope's
    schema is referred to, not given as a ``model``: FastAPI would build a pydantic field for each operation and
    status at every start; :func:`document_envelope` puts the schema in the document."""
    return {
        status: {
            "description": describe(kinds),
            **headers(kinds),
            "content": envelope(),
        }
        for status, kinds in by_status(*codes, busy=busy).items()
    }


def declare(schema: dict[str, Any], prefix: str, *codes: str) -> None:
    """Add ``codes`` to every operation of an OpenAPI document under ``prefix``, beside the codes it declares."""
    for path, item in schema["paths"].items():
        for operation in item.values() if path.startswith(prefix) else ():
            for code in codes:
                status = str(ERRORS[code].status)
                response = operation["responses"].setdefault(status, {"description": "", "content": envelope()})
                response["description"] = " / ".join(filter(None, (response["description"], describe([code]))))


def document_envelope(schema: dict[str, Any]) -> None:
    """Add the error envelope's schemas (:class:`ErrorResponse`, :class:`ErrorBody`) to an OpenAPI document's
    components, kept in FastAPI's order (by name)."""
    envelope = ErrorResponse.model_json_schema(ref_template=SCHEMAS + "{model}", mode="serialization")
    made = {**envelope.pop("$defs"), ErrorResponse.__name__: envelope}
    # in the key order of FastAPI's own schemas (its document passes through its OpenAPI models)
    parts = {name: jsonable_encoder(Schema(**part), by_alias=True, exclude_none=True) for name, part in made.items()}
    components = schema.setdefault("components", {})
    components["schemas"] = dict(sorted({**components.get("schemas", {}), **parts}.items()))


# Codes every operation on a table can answer with; POST operations can also get bad_request (every operation can
# get body_too_large: see by_status).
TABLE_ERRORS = ("unknown_table", "unknown_token", "unknown_document", "not_found", "invalid_request", "not_ready")
BODY_ERRORS = (*TABLE_ERRORS, "bad_request")


class ValidationDetail(TypedDict):
    """One problem of an ``invalid_request`` error, as its ``details`` list shows it."""

    loc: list[str]
    type: Any  # pydantic's error type (a string such as "int_parsing")
    message: str


# The tags pydantic puts in a location for the member of a union it tried ("constrained-str",
# "function-after[_check_batch(), list[constrained-str]]"): type names, not the client's words.
_UNION_TAG = re.compile(r"^(?:constrained-[a-z]+|str|int|float|bool|[a-z-]+\[.*\])$")


def _client_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors with union tags left out of their locations; of a union whose value fits one member (a list of
    texts for ``str | list[str]``), only that member's complaints, not the others' "should be a valid string"."""
    shown: list[tuple[dict[str, Any], tuple[str, ...], bool]] = []
    for error in errors:
        loc = [str(p) for p in error.get("loc", ())]
        tag = next((i for i, p in enumerate(loc) if _UNION_TAG.match(p)), None)
        mismatch = tag == len(loc) - 1 and str(error.get("type", "")).endswith("_type")  # wrong type for the member
        union = tuple(loc[:tag]) if tag is not None else ()
        shown.append(({**error, "loc": [p for p in loc if not _UNION_TAG.match(p)]}, union, mismatch))
    fitting = {union for _, union, mismatch in shown if union and not mismatch}
    return [error for error, union, mismatch in shown if not (mismatch and union in fitting)]


def dotted(detail: ValidationDetail) -> str:
    """Where a problem is, as the service names it: its location after "body" (or "query"), dotted (``texts.2``);
    a key with no name (``?=1``) is its place, "body" or "query"."""
    loc = detail["loc"]
    return ".".join(loc[1:] or loc) or (loc[0] if loc else "body")


def listed(details: Sequence[ValidationDetail], place: Callable[[ValidationDetail], str] = dotted) -> str:
    """The message of a validation error: its first problems, each named by ``place``, and how many more."""
    shown = [f"{place(d)}: {d['message']}" for d in details[:3]]
    more = f" (and {len(details) - 3} more)" if len(details) > 3 else ""
    return "; ".join(shown) + more


def _limit_of(errors: list[dict[str, Any]]) -> str | None:
    """The name of the limit (as ``GET /v1/limits`` gives it) the first of ``errors`` over one is over: the
    :class:`OverLimit` a validator raised, or the fixed limit of a field's ``max_length``."""
    for error in errors:
        context = error.get("ctx") or {}
        if isinstance(context.get("error"), OverLimit):
            return str(context["error"].limit)
        if (named := FIXED_LIMITS.get((str(error.get("type")), context.get("max_length")))) is not None:
            return named
    return None


FLOAT32_MAX = float(np.finfo(np.float32).max)  # the bound of a vector's values (service.schemas.common)
DOCUMENT = ("body", "documents")  # where an upsert's documents are: a field of one is at (*DOCUMENT, i, name)
UNKNOWN = "not a parameter of this route: check its spelling"  # a query's or a body's, worded alike


def _worded(error: dict[str, Any], loc: list[str], posted: bool) -> str:
    """pydantic's message for ``error`` in the service's words where pydantic's do not say what to do: a parameter
    the route does not take (in the query of a route that reads its body: ``posted``), a value beyond float32, a
    list's length."""
    kind, context = error.get("type"), error.get("ctx") or {}
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    if kind == "extra_forbidden" and tuple(loc[:2]) == DOCUMENT and len(loc) == 4:
        return 'not a field of a document (id, text, vector, fields): the table\'s fields go in its "fields"'
    if kind == "extra_forbidden" and len(loc) > 2:  # a key of an object in the body, such as an item of a batch
        return f"not a field of {'.'.join(loc[1:-1])}: check its spelling"
    if kind == "extra_forbidden":
        return UNKNOWN + (
            " (this route reads its parameters from its JSON body)" if posted and loc[:1] == ["query"] else ""
        )
    if kind == "missing" and loc == ["body"]:
        return "the request has no body: send a JSON object"
    if kind in ("model_attributes_type", "model_type", "dict_type"):  # a list, a string or a number for an object
        return "Input should be a JSON object ({...})"
    bound = context.get("le", context.get("ge"))
    if kind in ("less_than_equal", "greater_than_equal") and isinstance(bound, float) and abs(bound) == FLOAT32_MAX:
        return f"vector values must fit in float32 (|x| <= {FLOAT32_MAX:.4g})"  # as a batch item's (index.engine.door)
    return message.replace(" after validation", "")  # pydantic's words for a list's length checked after its items


def _validation_message(errors: list[dict[str, Any]], posted: bool) -> tuple[str, list[ValidationDetail]]:
    details: list[ValidationDetail] = []
    for error in errors:
        loc = [clipped(str(p)) for p in error.get("loc", ())]  # a key of the client's (an extra field) may be long
        message = _worded(error, loc, posted)
        if error.get("type") == "json_invalid" and len(loc) == 2:  # FastAPI's loc: ("body", the character's offset)
            loc, message = loc[:1], f"not valid JSON at character {loc[1]}: send one JSON object"
        details.append({"loc": loc, "type": error.get("type"), "message": message})
    return listed(details), details


async def _embedding_error(_: Request, exc: EmbeddingError) -> Response:
    if exc.code not in ERRORS:  # an engine error no client can cause (e.g. a corrupt table)
        log.error("unexpected %s: %s", type(exc).__name__, exc.message)
        return error_response("internal", "internal server error")
    headers = {"Retry-After": "1"} if exc.code == "overloaded" else None
    return error_response(exc.code, exc.message, headers=headers, **exc.details)


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    errors = _client_errors(list(exc.errors()))
    message, details = _validation_message(errors, posted=request.method not in ("GET", "HEAD"))
    limit = _limit_of(errors)
    named: dict[str, Any] = {} if limit is None else {"limit": limit}
    return error_response("invalid_request", message, details=details, **named)


def _allowed_methods(request: Request) -> str:
    """Every method some route of the app takes on this path (Starlette names only the first matching route's):
    ``HEAD`` wherever ``GET`` (``service.http.head``); a mounted directory's files (the explorer's, the docs')
    are read with both. RFC 9110 (15.5.6): a 405 names them all."""
    scope = request.scope
    scope = {**scope, "root_path": scope.get("app_root_path", scope.get("root_path", ""))}  # a mount's is its own
    methods: set[str] = set()
    for route in request.app.router.routes:
        if route.matches(scope)[0] is Match.NONE:
            continue
        methods |= {"GET"} if isinstance(route, Mount) else getattr(route, "methods", None) or set()
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    code = _BY_STATUS.get(exc.status_code, "bad_request" if exc.status_code < 500 else "internal")
    message = _MESSAGES.get(code) or _DETAILS.get(str(exc.detail), str(exc.detail))
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    limit = getattr(exc, "limit", None)  # a body over max_body_bytes (service.http.limits.BodyTooLarge)
    return error_response(code, message, headers=headers, **({} if limit is None else {"limit": limit}))


SHORT = {errno.EMFILE: "file descriptors", errno.ENFILE: "file descriptors", errno.ENOMEM: "memory"}


async def _short_of(request: Request, exc: OSError | MemoryError) -> Response:
    """A request that found no descriptor (``ulimit -n`` reached under many connections) or memory left (an array
    numpy could not allocate is a MemoryError): the worker's passing want, neither the client's fault nor a bug:
    503 ``overloaded``, and one log line. Any other system error is unexpected (500, with its traceback in the
    log)."""
    code = errno.ENOMEM if isinstance(exc, MemoryError) else exc.errno
    if code not in SHORT:
        raise exc
    log.warning("%s %s: answered 503: %s", request.method, request.url.path, exc or "out of memory")
    message = f"the server is short of {SHORT[code]} ({os.strerror(code)}): retry in a moment"
    return error_response("overloaded", message, headers={"Retry-After": "1"})


async def _unexpected(_: Request, __: Exception) -> Response:
    return error_response("internal", "internal server error")  # logged by service.http.logged_once


def install(app: FastAPI) -> None:
    """Route every kind of error through the envelope."""
    # Starlette types a handler as taking any Exception; each of these takes the class it is registered for.
    app.add_exception_handler(EmbeddingError, _embedding_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(OSError, _short_of)  # type: ignore[arg-type]
    app.add_exception_handler(MemoryError, _short_of)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
