"""Dependencies handed to routes: the registry, the settings, the table named in the path, the admin key."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Header, Path, Request

from index.table import Table
from service.errors import ApiError
from service.registry import Registry
from service.settings import Settings

# Dependencies are ``async def`` so FastAPI calls them on the event loop instead of a worker thread.


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
    registry: RegistryDep,
    table: Annotated[str, Path(description="table name, as listed by GET /v1/tables", max_length=64)],
) -> Table:
    return registry.get(table)  # checks the name first: 422 invalid, 404 unknown (with suggestions), 503 failed


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
