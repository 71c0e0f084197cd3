"""The settings of a sharded table's front (``service.scatter``): ``EMBEDDING_SHARDS``, ``EMBEDDING_PARTIAL``,
``EMBEDDING_SHARD_TIMEOUT``.

Apart from the front itself, which imports the HTTP framework and the engine: ``embedding-serve`` checks them
before it imports either, so that a wrong value stops it at once.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from service.settings import describe_error, without_passwords

MIN_SHARD_SECONDS = 0.1  # an attempt at a shard: a search and a round trip on the shards' network


class ShardSettings(BaseSettings):
    """The front's settings (``EMBEDDING_SHARDS``, ``EMBEDDING_PARTIAL``, ``EMBEDDING_SHARD_TIMEOUT``)."""

    model_config = SettingsConfigDict(env_prefix="EMBEDDING_", extra="ignore")

    shards: dict[str, list[list[str]]] = Field(
        default_factory=dict, description="per sharded table, each shard's replica URLs (JSON)"
    )
    partial: bool = Field(False, description="answer with the shards that answered, flagged partial, or fail")
    shard_timeout: float = Field(
        2.0, ge=MIN_SHARD_SECONDS, le=600, description="seconds each attempt at a shard may take (at least 0.1)"
    )


def front_settings() -> ShardSettings:
    """The front's settings from the environment; ValueError naming the variable for one that is wrong."""
    try:
        settings = ShardSettings()
    except SettingsError as exc:
        form = "{table: [[replica URL, ...], ...]}"
        raise ValueError(f"EMBEDDING_SHARDS: not JSON of the form {form} ({exc})") from None
    except ValidationError as exc:
        raise ValueError(describe_error(exc, ShardSettings.model_fields).removeprefix("invalid settings: ")) from None
    if not settings.shards:
        return settings
    from index.store import NAME_PATTERN as NAME  # the store (numpy) once there are shards to check

    for name, shards in settings.shards.items():
        if not NAME.fullmatch(name) or ".." in name:
            raise ValueError(f"EMBEDDING_SHARDS: {name!r} is not a table name")
        if not shards or not all(shards):
            raise ValueError(f"EMBEDDING_SHARDS: table {name!r} needs at least one replica URL per shard")
        for replicas in shards:
            for url in replicas:
                problem = replica_problem(url, NAME)
                if problem:
                    raise ValueError(f"EMBEDDING_SHARDS: table {name!r}: {without_passwords(repr(url))} {problem}")
    return settings


def replica_problem(url: str, name: re.Pattern[str]) -> str:
    """What keeps ``url`` from being a replica's table URL, ``http(s)://HOST[:PORT][/prefix]/v1/tables/NAME`` (the
    front adds ``/search``, ... to it, and asks ``/v1/limits`` of what comes before ``/v1/tables/``); "" when
    nothing. Such a URL, accepted, failed every request that needed its shard, blaming the shard."""
    if not url.startswith(("http://", "https://")):
        return "is neither an http nor an https URL"
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  # raises for a port that is not a number or past 65535
    except ValueError:
        return "has a port that is not a number from 0 to 65535"
    if not parts.hostname:
        return "names no host"
    if any(character.isspace() for character in url):
        return "has a space in it"
    table = parts.path.rpartition("/v1/tables/")[2] if "/v1/tables/" in parts.path else ""
    if not name.fullmatch(table) or parts.query or parts.fragment:
        return "is not a table's URL: http(s)://HOST[:PORT]/v1/tables/NAME, the shard's table on its server"
    return ""
