"""Dependencies handed to routes: the registry, the settings, the table named in the path, the admin key."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Annotated, Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Header, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel, ValidationError
from starlette.responses import Response
from starlette.routing import request_response

from index.artifact import check_name
from index.errors import InvalidQuery
from index.table import Table
from service import auth
from service.errors import ApiError
from service.registry import Registry
from service.settings import Settings

# Dependencies are ``async def`` so FastAPI calls them on the event loop instead of a worker thread.

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])

# The names ``index.artifact.check_name`` accepts (no "..", no leading dot) as one regular expression, for the
# OpenAPI document; the check itself is check_name's, so its message names the rule (tests hold the two equal).
TABLE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*\.?$"
NAME_SCHEMA = {"pattern": TABLE_NAME}


def _table_name(name: str) -> str:
    """A table name is validated before any use (422 with the rule); never a path outside the data directory."""
    try:
        return check_name(name)
    except InvalidQuery as exc:
        raise ValueError(exc.message) from None


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings  # set by create_app
    return settings


async def get_registry(request: Request) -> Registry:
    registry: Registry | None = getattr(request.app.state, "registry", None)
    if registry is None:
        raise ApiError("not_ready", "the server is still loading its tables")
    return registry


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[Registry, Depends(get_registry)]


# The ``{table}`` path parameter: 422 with the naming rule for a name that could escape the data directory.
TableName = Annotated[
    str,
    Path(description="table name, as listed by GET /v1/tables", max_length=64, json_schema_extra=NAME_SCHEMA),
    AfterValidator(_table_name),
]


async def table_named(request: Request, table: str) -> Table:
    """The loaded table ``table``: 404 unknown (with suggestions), 503 failed to load."""
    return (await get_registry(request)).get(table)


async def get_table(request: Request, table: TableName) -> Table:
    return await table_named(request, table)


TableDep = Annotated[Table, Depends(get_table)]


async def require_api_key(
    settings: SettingsDep, x_api_key: Annotated[str | None, Header(description="the admin API key")] = None
) -> None:
    """Guard for admin endpoints: 403 when the server has no admin key, 401 without a key, 403 with a wrong one."""
    expected = auth.key_bytes(settings.api_key)
    if expected is None:
        raise ApiError("forbidden", "admin endpoints are disabled: the server was started without EMBEDDING_API_KEY")
    auth.check(x_api_key, (expected,))


AdminDep = Annotated[None, Depends(require_api_key)]


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
