"""The front's writes to a sharded table: each document's write forwarded to the shard that owns its id.

The owner is computed from the id by the function the import assigns rows with (``index.engine.door.owner``:
BLAKE2b of the id's text, modulo the number of shards), the id read as the table reads it
(``index.engine.door.routed``: on an integer-id table ``"007"`` is the id 7), so a write lands in the shard that
holds, or will hold, the document. An upsert's ids are checked first as the table checks them
(``service.writes.upsert_keys``): the table's 422, and no shard writes. A shard's writer is the FIRST replica
``EMBEDDING_SHARDS`` lists for it (one writer per shard, as one writer per table: its other replicas read the
shard's log); a write is never retried on another replica.
The client's ``X-API-Key`` goes along: the shard's server checks it.

- ``POST .../documents``: the documents split by owner, each part sent to its shard's writer (at once);
  ``POST .../documents/delete`` with ``ids``: likewise; with ``filter``: sent to every shard's writer;
  ``DELETE .../documents/{id}``: to the id's owner.
- One shard written: its answer is the front's (``table`` the sharded table's name, ``shards`` added). Several:
  the counts summed, ``sequence`` the highest of theirs, ``shards`` what each did. A shard's own refusal (4xx)
  is the answer, with its status; when other shards of the same write answered, the envelope says in
  ``shards`` what each did (a write through the front is not atomic across shards), unless every shard refused
  it alike (a delete by a filter the table cannot read): then it is the table's refusal as it is. A writer that
  cannot be reached, fails, takes no writes (a server without write keys: the deployment's fault, not the
  client's key's) or whose server has no table of the name its URL gives: 503 ``shard_unavailable``; no answer in
  time: 504 ``shard_timeout`` (the write may have been applied: repeating an upsert or a delete is harmless).
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

import orjson
from fastapi import Path
from fastapi.routing import APIRoute
from starlette.responses import Response

from index.engine.door import STRING, by_owner, routed
from service.errors import ApiError, error_body
from service.http.auth import READ_ONLY
from service.respond import FastJSON
from service.scatter import Front, Misplaced, ShardRefused, id_type, named, segment, shard_headers, shard_json
from service.schemas.bounds import MAX_TOKEN_CHARS
from service.schemas.writes import DeleteRequest, UpsertRequest, WriteResponse
from service.writes import upsert_keys

WRITE_SECONDS = 60.0  # a write may embed its texts: longer than a search's deadline, which bounds the connect
PLACE = re.compile(r"^documents\[(\d+)\]")


class Refused(Exception):
    """A shard's own 4xx answer to its part of a write."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status, self.body = status, body


async def _send(front: Front, table: str, shard: int, method: str, path: str, body: Any) -> Any:
    """The answer of shard ``shard``'s writer to one request; :class:`Refused` for its 4xx, ``ApiError`` when it
    cannot be reached, fails or does not answer in time."""
    import httpx  # here: a server without shards never loads it

    writer = front.tables[table][shard].replicas[0]
    headers = shard_headers()  # the client's key and the request's id, as every shard request carries them
    timeout = httpx.Timeout(WRITE_SECONDS, connect=front.settings.shard_timeout)
    content = None if body is None else shard_json(body)
    try:
        url = f"{writer}{path}"
        async with front.tables[table][shard].slots:  # one of the shard's slots, as a search's request takes
            await front.check_place(table, shard, writer, front.settings.shard_timeout)
            answer = await front.client.request(method, url, content=content, headers=headers, timeout=timeout)
    except Misplaced as exc:
        front.replica_failed(table, shard, writer, str(exc), logged=True)
        message = f"the writer of shard {shard} of table {table!r} is not that shard: {exc}; nothing was written"
        raise ApiError("shard_unavailable", message, table=table, shard=shard) from None
    except httpx.TimeoutException:
        front.placed.pop((table, shard, writer), None)
        front.replica_failed(table, shard, writer, f"{writer}: no answer to a write in time", logged=False)
        message = f"the writer of shard {shard} of table {table!r} ({writer}) did not answer in time; the write may "
        raise ApiError("shard_timeout", message + "have been applied", table=table, shard=shard) from None
    except httpx.TransportError as exc:
        front.placed.pop((table, shard, writer), None)
        front.replica_failed(table, shard, writer, f"{writer}: {type(exc).__name__} ({exc})", logged=False)
        message = f"the writer of shard {shard} of table {table!r} ({writer}) cannot be reached: {type(exc).__name__}"
        raise ApiError("shard_unavailable", message, table=table, shard=shard) from None
    refused = ShardRefused(answer.status_code, answer.content)
    if refused.names_no_table():
        front.replica_failed(table, shard, writer, f"{writer}: its server has no such table", logged=False)
        message = f"the writer of shard {shard} of table {table!r} ({writer}): its server has no such table"
        raise ApiError("shard_unavailable", message, table=table, shard=shard)
    if answer.status_code == 403 and (refused.error() or {}).get("message") == READ_ONLY:
        front.replica_failed(table, shard, writer, f"{writer}: takes no writes (no EMBEDDING_WRITE_KEYS)", logged=False)
        message = (
            f"the writer of shard {shard} of table {table!r} ({writer}) takes no writes: its server was started "
            "without EMBEDDING_WRITE_KEYS (a shard's writer is the first replica EMBEDDING_SHARDS lists for it, and "
            "takes the front's write keys); nothing was written to it"
        )
        raise ApiError("shard_unavailable", message, table=table, shard=shard)
    if 400 <= answer.status_code < 500:
        front.refused(shard, front.tables[table][shard], refused)
        try:
            refusal = orjson.loads(named(table, answer.content))  # the sharded table's name, not the shard's
        except orjson.JSONDecodeError:
            refusal = error_body("invalid_request", answer.text[:200])
        raise Refused(answer.status_code, refusal)
    if answer.status_code != 200:
        front.replica_failed(table, shard, writer, f"{writer}: status {answer.status_code}", logged=False)
        message = f"the writer of shard {shard} of table {table!r} ({writer}) failed: status {answer.status_code}"
        raise ApiError("shard_unavailable", message, table=table, shard=shard)
    return orjson.loads(answer.content)


def _renumbered(refusal: dict[str, Any], places: list[int]) -> dict[str, Any]:
    """A shard's refusal of its part of a batch, its ``documents[i]`` numbered as in the client's batch."""
    error = dict(refusal.get("error") or {})
    if isinstance(error.get("document"), int) and error["document"] < len(places):
        error["document"] = places[error["document"]]
    message = error.get("message")
    if isinstance(message, str):
        error["message"] = PLACE.sub(
            lambda m: f"documents[{places[int(m[1])]}]" if int(m[1]) < len(places) else m[0], message
        )
    return {**refusal, "error": error}


async def _scatter(front: Front, table: str, parts: dict[int, tuple[str, str, Any, list[int]]], what: str) -> Response:
    """Each shard's part (method, path, body, the client's places it holds) sent to its writer at once; the
    merged answer, or the first refusal or failure (in shard order) with what each shard did."""
    shards = sorted(parts)
    outcomes = await asyncio.gather(*(_send(front, table, s, *parts[s][:3]) for s in shards), return_exceptions=True)
    done: list[dict[str, Any]] = []
    first: Refused | ApiError | None = None
    for shard, outcome in zip(shards, outcomes, strict=True):
        if isinstance(outcome, Refused | ApiError):
            places = parts[shard][3]
            if isinstance(outcome, Refused):
                outcome.body = _renumbered(outcome.body, places)
                done.append({"shard": shard, **outcome.body})
            else:
                done.append({"shard": shard, **error_body(outcome.code, outcome.message)})
            first = first or outcome
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            done.append({"shard": shard, "sequence": outcome["sequence"], what: outcome[what]})
    if first is None:
        total = sum(d[what] for d in done)
        return FastJSON({"table": table, "sequence": max(d["sequence"] for d in done), what: total, "shards": done})
    # Every shard refusing alike (a delete's filter the table cannot read): nothing written, the table's refusal.
    refusals = [orjson.dumps(o.body) for o in outcomes if isinstance(o, Refused)]
    alike = len(refusals) == len(outcomes) and len(set(refusals)) == 1
    others = {"shards": done} if len(done) > 1 and not alike else {}
    if isinstance(first, ApiError):
        raise ApiError(first.code, first.message, **first.details, **others)
    error = {**first.body.get("error", {}), **others}
    return Response(orjson.dumps({**first.body, "error": error}), first.status, media_type="application/json")


def routes(front: Front, name: str) -> list[APIRoute]:
    """The write routes of the sharded table ``name`` (ahead of the routes of every table)."""
    count = len(front.tables[name])
    prefix = f"/v1/tables/{name}/documents"

    async def upsert(body: UpsertRequest) -> Response:
        documents = [d.model_dump(exclude_unset=True, mode="json") for d in body.documents]
        ids = [d["id"] for d in documents]
        kind = await id_type(front, name)  # None: no documents table, whose shards refuse the write
        # Checked and routed as the table reads them ("007" is the integer id 7), refused as the table refuses them.
        keys = routed(ids, STRING) if kind is None else upsert_keys(name, kind, ids)
        parts = {
            shard: ("POST", "/documents", {"documents": [documents[i] for i in places]}, places)
            for shard, places in by_owner(keys, count).items()
        }
        return await _scatter(front, name, parts, "upserted")

    async def delete_many(body: DeleteRequest) -> Response:
        parts: dict[int, tuple[str, str, Any, list[int]]]
        if body.ids is None:
            spec = {"filter": body.filter}
            parts = {shard: ("POST", "/documents/delete", spec, []) for shard in range(count)}
        else:
            ids = list(body.ids)
            parts = {
                shard: ("POST", "/documents/delete", {"ids": [ids[i] for i in places]}, places)
                for shard, places in by_owner(routed(ids, await id_type(front, name) or STRING), count).items()
            }
        return await _scatter(front, name, parts, "deleted")

    async def delete_one(document: Annotated[str, Path(min_length=1, max_length=MAX_TOKEN_CHARS)]) -> Response:
        (shard,) = by_owner(routed([document], await id_type(front, name) or STRING), count)
        parts = {shard: ("DELETE", f"/documents/{segment(document)}", None, [0])}
        return await _scatter(front, name, parts, "deleted")

    common: dict[str, Any] = {
        "response_model": WriteResponse,
        "include_in_schema": False,
    }
    return [
        APIRoute(prefix, upsert, methods=["POST"], summary=f"Upsert into the sharded table {name}", **common),
        APIRoute(f"{prefix}/delete", delete_many, methods=["POST"], summary=f"Delete from {name}", **common),
        APIRoute(prefix + "/{document:path}", delete_one, methods=["DELETE"], summary=f"Delete from {name}", **common),
    ]
