"""Dependencies handed to routes: the registry, the settings, the table named in the path, the admin key."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from index.table import Table
from service.errors import ApiError
from service.registry import Registry
from service.settings import Settings

# Dependencies are ``async def`` so FastAPI calls them on the event loop instead of a worker thread.

M = TypeVar("M", bound=BaseModel)


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_registry(request: Request) -> Registry:
    registry = getattr(request.app.state, "registry", None)
    if registry is None:
        raise ApiError("not_ready", "the server is still loading its tables")
    return registry


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[Registry, Depends(get_registry)]


async def get_table(
    request: Request,
    table: Annotated[str, Path(description="table name, as listed by GET /v1/tables", max_length=64)],
) -> Table:
    # The registry is read here rather than through RegistryDep: one dependency level less on the hot path.
    return (await get_registry(request)).get(table)  # 422 invalid name, 404 unknown (suggestions), 503 failed


TableDep = Annotated[Table, Depends(get_table)]


async def require_api_key(
    settings: SettingsDep, x_api_key: Annotated[str | None, Header(description="the admin API key")] = None
) -> None:
    """Guard for admin endpoints: 401 without a key, 403 with a wrong one (or when none is configured)."""
    if x_api_key is None:
        raise ApiError("unauthorized", "this endpoint needs an API key in the X-API-Key header")
    expected = settings.api_key.get_secret_value() if settings.api_key else None
    if expected is None or not secrets.compare_digest(x_api_key.encode(), expected.encode()):
        raise ApiError("forbidden", "the API key is not valid")


AdminDep = Annotated[None, Depends(require_api_key)]


def query_model(model: type[M]) -> Any:
    """``Depends`` that validates the whole query string with ``model`` in one pydantic call.

    FastAPI's field-by-field query parsing costs tens of microseconds a request on the hottest path; errors keep
    FastAPI's shape (``loc`` starts with "query") and :func:`document_query_models` documents the parameters.
    """

    async def parse(request: Request) -> M:
        try:
            return model.model_validate(dict(request.query_params))
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            raise RequestValidationError([{**e, "loc": ("query", *e["loc"])} for e in errors]) from None

    parse.query_model = model  # type: ignore[attr-defined]
    return Depends(parse)


def document_query_models(routers: Iterable[APIRouter], schema: dict[str, Any]) -> None:
    """Add the fields of each route's :func:`query_model` to its OpenAPI operation as query parameters."""
    for route in (r for router in routers for r in router.routes):
        if not isinstance(route, APIRoute) or route.path_format not in schema["paths"]:
            continue
        for dependency in route.dependant.dependencies:
            model = getattr(dependency.call, "query_model", None)
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
            for method in route.methods:
                schema["paths"][route.path_format][method.lower()].setdefault("parameters", []).extend(parameters)
