"""Dependencies handed to routes: the registry, the settings, the table named in the path, the admin key."""

from __future__ import annotations

import functools
from typing import Annotated

from fastapi import Depends, Header, Path, Request
from pydantic import AfterValidator

from index.engine.door import Table
from index.errors import InvalidQuery
from index.store import check_name
from service.errors import ApiError
from service.http import auth
from service.registry import Registry
from service.settings import Settings

# Dependencies are ``async def`` so FastAPI calls them on the event loop instead of a worker thread.


# The names ``index.store.check_name`` accepts (no "..", no leading dot) as one regular expression, for the
# OpenAPI document; the check itself is check_name's, so its message names the rule (tests hold the two equal).
TABLE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*\.?$"
NAME_SCHEMA = {"pattern": TABLE_NAME}
MAX_NAME = 64


@functools.lru_cache(maxsize=256)  # a valid name is checked once; a refused one raises again each time
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
    Path(description="table name, as listed by GET /v1/tables", max_length=MAX_NAME, json_schema_extra=NAME_SCHEMA),
    AfterValidator(_table_name),
]


async def table_named(request: Request, table: str) -> Table:
    """The loaded table ``table``: 404 unknown (with suggestions), 503 failed to load."""
    registry = await get_registry(request)
    return registry.tables.get(table) or registry.get(table)


async def get_table(request: Request, table: TableName) -> Table:
    return await table_named(request, table)


TableDep = Annotated[Table, Depends(get_table)]


async def require_api_key(
    settings: SettingsDep, x_api_key: Annotated[str | None, Header(description="the admin API key")] = None
) -> None:
    """Guard for admin endpoints: 403 when the server has no admin key, 401 without a key, 403 with another."""
    keys = auth.server_keys(settings)
    if not keys[auth.ADMIN]:
        raise ApiError("forbidden", "admin endpoints are disabled: the server was started without EMBEDDING_API_KEY")
    auth.check(x_api_key, keys, (auth.ADMIN,), auth.needs(auth.ADMIN), "use the admin endpoints")


AdminDep = Annotated[None, Depends(require_api_key)]
