"""The front's ``GET /v1/tables/{t}/fields`` of a sharded documents table: what its fields hold, answered as one
process serving the table whole answers it (``service.routers.fields``), from its shards' own statistics.

Every shard is asked at once for its statistics (``GET <replica>/fields``, kept by the shard while it is not
written to); a shard that listed fewer values of a string, tag or boolean field than it has (more than
``TOP_VALUES``) is then asked for every value of those fields (``GET <replica>/fields/values?field=...``, in
several requests when their names are long: :func:`queries`), so that the merge
(``index.engine.field_stats.merged_field_stats``) is exact: rows and counts summed, the distinct values of every
shard counted once, the smallest and largest values of all. Not of a field a shard holds more than ``MOST_LISTED``
distinct values of (unique titles), or values of more than ``MOST_LISTED_BYTES`` in all (long texts): its answer
would grow with the table; that field's statistics are merged from the most common values the shards listed and
flagged ``"exact": false`` (lower bounds). Each shard reads its own write log: documents written or deleted
(through the front or not) count as the table counts them.

A shard's refusal (a word table's 422) is the answer, naming the sharded table; a shard that does not answer fails
the request (503 ``shard_unavailable``, 504 ``shard_timeout``), partial answers or not: the sums would be wrong.
"""

from __future__ import annotations

from typing import Any

from fastapi.routing import APIRoute
from starlette.responses import Response

from index.engine.door import cut_fields, merged_field_stats
from service.respond import FastJSON
from service.scatter import Front, Shard, ShardRefused, every_shard, segment

QUERY_BYTES = 4096  # the longest query string of a request for every value of some fields (they are split)


def queries(fields: list[str]) -> list[str]:
    """The query strings that ask a shard for every value of ``fields``, each at most :data:`QUERY_BYTES` (a field
    whose name is longer alone): however many fields and however long their names, a request line within the
    shard's ``max_header_bytes``."""
    out: list[str] = []
    for field in fields:
        part = f"field={segment(field)}"
        if out and len(out[-1]) + 1 + len(part) <= QUERY_BYTES:
            out[-1] += "&" + part
        else:
            out.append(part)
    return out


async def fields_of(front: Front, name: str) -> dict[str, Any]:
    """The statistics of the fields of the sharded table ``name``, every figure the whole table's."""
    parts = await every_shard(front, name, lambda number, shard: front.request(number, shard, "/fields", None))

    async def whole(number: int, shard: Shard) -> dict[str, Any]:
        """Shard ``number``'s statistics with every value of the fields it listed in part."""
        part: dict[str, Any] = parts[number]
        listed = dict(part["fields"])
        for query in queries(cut_fields(part)):
            listed |= (await front.request(number, shard, f"/fields/values?{query}", None))["fields"]
        return {**part, "fields": listed}

    return {"table": name, **merged_field_stats(await every_shard(front, name, whole))}


def routes(front: Front, name: str) -> list[APIRoute]:
    """``GET /v1/tables/<name>/fields`` for the sharded table ``name`` (ahead of the routes of every table)."""

    async def get_fields() -> Response:
        try:
            return FastJSON(await fields_of(front, name))
        except ShardRefused as refused:
            return refused.response()

    summary = f"The fields of the sharded table {name}"
    return [
        APIRoute(f"/v1/tables/{name}/fields", get_fields, methods=["GET"], summary=summary, include_in_schema=False)
    ]
