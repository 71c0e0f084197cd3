"""The hot GET routes' own handler: the query string validated by one pydantic model in one call.

The most asked-for routes (neighbours, similarity, rank, closer-than, compare) take their parameters from the
query string. FastAPI solves such a route's parameters field by field, through its dependency machinery, and
that costs more per request than the table lookup the route wraps (BENCHMARKS.md, "Reading these figures"). So a
route marked with :func:`query_params` is called directly, in Starlette's plain request wrapper, and validates
its whole query string with its model in one call (:func:`parse_query`). Everything a client sees is as for any
FastAPI route: the same errors (``loc`` starts with "query"), and the parameters in the OpenAPI document
(:func:`document_query_models`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.routing import request_response

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])


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
    the lookup they wrap. Errors keep FastAPI's shape (``loc`` starts with "query").
    """
    try:
        # What Starlette's request.query_params holds (the last value of a repeated name), without its multidict.
        return model.model_validate(
            dict(parse_qsl(request.scope["query_string"].decode("latin-1"), keep_blank_values=True))
        )
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise RequestValidationError([{**e, "loc": ("query", *e["loc"])} for e in errors]) from None


class QueryRoute(APIRoute):
    """The route class of routers with :func:`query_params` routes. Such a route's endpoint takes the request and
    its path parameters only, so it is called directly, in Starlette's plain request wrapper: FastAPI's general
    parameter solving (dependencies, body, headers, cookies, a sub-response, exit stacks) costs more per request
    than the whole lookup. The path parameters are still checked by FastAPI's own field validation, with its
    errors, and the OpenAPI document is built from the same signature. Other routes are FastAPI's as usual."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if getattr(endpoint, "query_model", None) is not None:
            self.app = request_response(self._direct_handler())

    def _direct_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        dependant, endpoint = self.dependant, self.endpoint
        others = (dependant.query_params, dependant.header_params, dependant.cookie_params, dependant.body_params)
        request_name = dependant.request_param_name
        if any(others) or dependant.dependencies or request_name is None:
            raise TypeError(f"{self.path}: a query_params endpoint takes (request, <path parameters>) only")
        fields = [(field.name, field.alias, field) for field in dependant.path_params]

        async def handler(request: Request) -> Response:
            values: dict[str, Any] = {request_name: request}
            errors: list[Any] = []
            for name, alias, field in fields:  # a matched route has every path parameter
                values[name], problems = field.validate(request.path_params[alias], loc=("path", alias))
                errors += problems
            if errors:
                raise RequestValidationError(errors)
            response: Response = await endpoint(**values)  # a query_params endpoint answers a Response
            return response

        return handler


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
