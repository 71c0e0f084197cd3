"""The hot GET routes' own handler: the query string validated by one pydantic model in one call.

The most asked-for routes (neighbours, similarity, rank, closer-than, compare) take their parameters from the
query string. FastAPI solves such a route's parameters field by field, through its dependency machinery, and
that costs more per request than the table lookup the route wraps (BENCHMARKS.md, "Reading these figures"). So a
route marked with :func:`query_params` is called directly, in Starlette's plain request wrapper, and validates
its whole query string with its model in one call (:func:`parse_query`); its path parameters (the table's name)
are validated by FastAPI's own fields, once per name (:class:`QueryRoute`). Everything a client sees is as for
any FastAPI route: the same errors (``loc`` starts with "query"), and the parameters in the OpenAPI document
(:func:`document_query_models`).

``POST .../search`` with one raw vector is asked for as often, and its body costs FastAPI more still: the
JSON read by ``json.loads``, then the whole search request model (every form of a documents search, its
validators) for a body that is a list of numbers and ``k``. A route marked with :func:`plain_body` first reads
the body with orjson and checks that common form itself (:func:`plain_vector`): a vector of finite numbers within
float32, ``k``, ``offset`` and ``min_score`` as plain JSON numbers inside the limits, nothing else. Such a body is
one the request model accepts as it is, so the fast handler answers as the route would (the vector handed on as
the float64 array checked here, which the door reads without a copy). Any other body (another
form or field, a number the model would convert or refuse, a documents table) takes the route's normal path,
which gives its answer or its error; tests send the same bodies both ways and compare the responses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import numpy as np
import orjson
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from fastapi.routing import APIRoute
from fastapi.routing import request_response as with_exit_stacks
from pydantic import BaseModel, ValidationError
from starlette._exception_handler import wrap_app_handling_exceptions
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import request_response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from index.engine.door import within_float32
from service.schemas.bounds import MAX_DIM
from service.schemas.common import LIMITS

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class PlainVector:
    """``{"vector": [...], "k": n, "offset": n, "min_score": x}``, the last three optional, as the model reads it."""

    vector: np.ndarray  # float64, as the door reads a client's vector
    k: int = 10
    offset: int = 0
    min_score: float | None = None


KNOWN_PATHS = 256  # valid path parameters a query_params route remembers (QueryRoute)
PLAIN_FIELDS = frozenset({"vector", "k", "offset", "min_score"})
Handler = Callable[[Request, PlainVector], Awaitable[Response | None]]


NUMBERS = frozenset({int, float})  # by exact type: not bool, whose type is a subclass of int


def _number(value: Any) -> bool:
    return type(value) in NUMBERS


def plain_vector(content_type: str | None, body: bytes) -> PlainVector | None:
    """The body's one raw vector when it has the plain form the search request model accepts unchanged, else None
    (the route's normal path then reads it, with its errors)."""
    if content_type is None or content_type.lower() != "application/json":
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or "vector" not in data or not data.keys() <= PLAIN_FIELDS:
        return None
    vector, k, offset = data["vector"], data.get("k", 10), data.get("offset", 0)
    min_score = data.get("min_score")
    if type(vector) is not list or not 1 <= len(vector) <= MAX_DIM or not set(map(type, vector)) <= NUMBERS:
        return None
    if (
        type(k) is not int
        or type(offset) is not int
        or not (k >= 1 and offset >= 0 and k + offset <= LIMITS.get().max_k)
    ):
        return None
    if min_score is not None and not (_number(min_score) and -1 <= min_score <= 1):
        return None
    values = np.asarray(vector, dtype=np.float64)
    if not within_float32(values):
        return None
    return PlainVector(values, k, offset, None if min_score is None else float(min_score))


def plain_body(handler: Handler) -> Callable[[F], F]:
    """Mark a route whose plain bodies (:func:`plain_vector`) ``handler`` answers first; it answers None to leave
    one to the route (a table it does not serve)."""

    def mark(endpoint: F) -> F:
        endpoint.plain_body = handler  # type: ignore[attr-defined]  # a function attribute, read back by getattr
        return endpoint

    return mark


def query_params(model: type[M]) -> Callable[[F], F]:
    """Mark a route whose query string ``model`` validates (with :func:`parse_query`), for the OpenAPI document."""

    def mark(endpoint: F) -> F:
        endpoint.query_model = model  # type: ignore[attr-defined]  # a function attribute, read back by getattr
        return endpoint

    return mark


def parse_query(request: Request, model: type[M]) -> M:
    """The whole query string validated by ``model`` in one pydantic call, in the route itself.

    The hot GET routes take the table name as their only parameter and do this and :func:`table_named`
    themselves: FastAPI's field-by-field query parsing and its dependency solving cost more per request than
    the lookup they wrap. Errors keep FastAPI's shape (``loc`` starts with "query"). A parameter of the model
    given twice is refused: ``?token=heart&token=love`` answered for its last value would look answered for both.
    """
    pairs = parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True)
    fields = dict(pairs)
    if len(fields) < len(pairs):
        repeated = Counter(name for name, _ in pairs if name in model.model_fields)
        twice = [
            {"type": "value_error", "loc": ("query", name), "msg": f"given {n} times; give it once"}
            for name, n in repeated.items()
            if n > 1
        ]
        if twice:
            raise RequestValidationError(twice)
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)  # its context: the limit an error is over
        raise RequestValidationError([{**e, "loc": ("query", *e["loc"])} for e in errors]) from None


class QueryRoute(APIRoute):
    """The route class of routers with :func:`query_params` routes. Such a route's endpoint takes the request and
    its path parameters only, so it is called directly, in Starlette's plain request wrapper: FastAPI's general
    parameter solving (dependencies, body, headers, cookies, a sub-response, exit stacks) costs more per request
    than the whole lookup. The path parameters are still checked by FastAPI's own field validation, with its
    errors, and the OpenAPI document is built from the same signature. A route marked with :func:`plain_body`
    answers its plain bodies with its handler first and leaves every other body to FastAPI. Other routes are
    FastAPI's as usual."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        # hot: answered by a handler of its own, which answers its errors itself by the app's exception handlers
        # (service.http.known_routes hands it requests without the router)
        self.hot = False
        if getattr(endpoint, "query_model", None) is not None:
            self.app, self.hot = request_response(self._direct_handler()), True
        elif (fast := getattr(endpoint, "plain_body", None)) is not None:
            self.app, self.hot = self._plain_first(fast), True

    def _plain_first(self, fast: Handler) -> ASGIApp:
        """The route's app: the body read once; a plain one (:func:`plain_vector`) answered by ``fast``, its errors
        by the app's exception handlers as Starlette's plain request wrapper answers them; any other body, or one
        ``fast`` leaves, handed on as read to the route's own app: FastAPI's wrapper with all the exit stacks it
        expects (``service.http.known_routes`` hands requests on without the app's own). A plain body thus passes
        through no exit stack and none of FastAPI's wrappers (what that saves: BENCHMARKS.md, "HTTP floors: a plain
        body read without FastAPI's wrappers, the app's state read at once")."""
        routed = AsyncExitStackMiddleware(with_exit_stacks(self.get_route_handler()))

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            request = Request(scope, receive, send)
            handed: Receive | None = None  # the receive of the route's own app, when it is to answer

            async def plain_first(scope: Scope, receive: Receive, send: Send) -> None:
                nonlocal handed
                try:
                    body = await request.body()  # a body over the limit raises, answered as the route's error
                except ClientDisconnect:  # the client went mid-body: the route's own path answers it (FastAPI's 400)
                    handed = receive
                    return
                plain = plain_vector(request.headers.get("content-type"), body)
                response = None if plain is None else await fast(request, plain)
                if response is None:
                    handed = _as_read(body, receive)
                else:
                    await response(scope, receive, send)

            await wrap_app_handling_exceptions(plain_first, request)(scope, receive, send)
            if handed is not None:
                await routed(scope, handed, send)

        return app

    def _direct_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        dependant, endpoint = self.dependant, self.endpoint
        others = (dependant.query_params, dependant.header_params, dependant.cookie_params, dependant.body_params)
        request_name = dependant.request_param_name
        if any(others) or dependant.dependencies or request_name is None:
            raise TypeError(f"{self.path}: a query_params endpoint takes (request, <path parameters>) only")
        fields = [(field.name, field.alias, field) for field in dependant.path_params]
        # The path parameters that passed, and their values: a table's name is validated on its first request only
        # (validation depends on the text alone); at most KNOWN_PATHS are kept, then they start again.
        known: dict[tuple[str, str], Any] = {}

        async def handler(request: Request) -> Response:
            values: dict[str, Any] = {request_name: request}
            errors: list[Any] = []
            for name, alias, field in fields:  # a matched route has every path parameter
                given = request.path_params[alias]
                if (alias, given) in known:
                    values[name] = known[alias, given]
                    continue
                values[name], problems = field.validate(given, loc=("path", alias))
                if problems:
                    errors += problems
                    continue
                if len(known) >= KNOWN_PATHS:
                    known.clear()
                known[alias, given] = values[name]
            if errors:
                raise RequestValidationError(errors)
            response: Response = await endpoint(**values)  # a query_params endpoint answers a Response
            return response

        return handler


def _as_read(body: bytes, receive: Receive) -> Receive:
    """``receive`` whose first message is the whole ``body``, already read from it."""
    given = False

    async def again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


def document_query_models(routers: Iterable[APIRouter], schema: dict[str, Any]) -> None:
    """Add the fields of each route's :func:`query_params` model to its OpenAPI operation as query parameters."""
    for route in (r for router in routers for r in router.routes):
        if not isinstance(route, APIRoute) or route.path_format not in schema["paths"]:
            continue
        model = getattr(route.endpoint, "query_model", None)
        if model is None:
            continue
        fields = model.model_json_schema()
        required = set(fields.get("required", []))
        parameters = [
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": field.get("description", ""),
                "schema": field,
            }
            for name, field in fields["properties"].items()
        ]
        for method in route.methods or ():
            schema["paths"][route.path_format][method.lower()].setdefault("parameters", []).extend(parameters)
