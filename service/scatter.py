"""The front of a sharded table: a search scattered to one replica of every shard, the answers merged.

``EMBEDDING_SHARDS`` names, per sharded table, each shard's replicas (the URL of the shard's table on each)::

    {"lee": [["http://lee-0a:8000/v1/tables/shard-000", "http://lee-0b:8000/v1/tables/shard-000"],
             ["http://lee-1a:8000/v1/tables/shard-001"], ["http://lee-2a:8000/v1/tables/shard-002"]]}

``POST /v1/tables/lee/search`` is then answered here: the request is checked as any search is (the same model,
the same 422s), and every shard is asked, in parallel, for its part: its vector list and its keyword list, as
deep as the engine takes them for the page (``index.engine.door.depths``: ``offset + k``, hybrid's fusion
depth, diversity's candidates), filtered by the shard itself, each hit with its row in the whole table
(``include``). A shard's replicas are tried in turn from a rotating start (one that failed lately after the
others, :data:`FAIL_SECONDS`), each attempt within
``EMBEDDING_SHARD_TIMEOUT`` seconds, at most two attempts per shard, at most :data:`SHARD_REQUESTS` of them in
flight to a shard at once (more wait their turn here); a shard that did not answer one of a request's queries is
not asked again for its others (:data:`DOWN`). The lists merge by score (a cosine and a
BM25 score with the whole table's statistics are the same number on a shard as on the whole table,
``index.engine.shards``), equal scores by row, as the whole table orders them (``index.engine.door.merge``).
After writes a shard's own statistics are no longer the whole table's: for a keyword or hybrid search by text the
front gathers every shard's part of the statistics of the query's words (``POST <replica>/search/statistics``)
while it asks the search; when some shard was written to, it asks the search again with their sums
(``keyword_statistics``, ``index.engine.dfs``), so that every shard scores as one process serving the table whole.
Mode hybrid fuses the merged lists with the engine's RRF; diversity re-ranks the merged candidates (their unit
vectors sent by the shards) by the engine's MMR (``index.engine.door.diverse``); then the page and
``min_score`` are taken, as on one table.

A query by document id, or by positive/negative ids, becomes a vector here: each document's unit vector from
the shard that owns it (``index.store.shardmap.shard_of_id`` of the id as the table reads it,
``index.engine.door.routed``: on an integer-id table ``"007"`` is the id 7), averaged by the engine
(``index.engine.door.unit_mean``); the shards are asked that vector, as many hits deeper as it has documents,
which the merge leaves out (the whole table leaves a query's documents out).

Every shard request carries the client's ``X-API-Key`` (:data:`CLIENT_KEY`, kept by the :class:`ClientKey`
middleware), and the request's ``X-Request-ID`` when it has one (``service.http.request_id``); a shard that
refuses the key (401, 403) has not answered: the front took the key, its shards must too; nor has one whose server
has no table of the name its URL gives (404 ``unknown_table``: a URL the deployment got wrong, not the request).
A replica whose summary says it serves another shard, a shard of a table of another number of shards, or a
shard of another import than the table's other replicas checked (``shard_of``, its ``import``: asked before the
first request to it, again every few seconds and after it failed), has not answered either: it would miss the
ids routed to it, or merge another table's answers (:class:`Misplaced`).
A shard that does not answer (refused, failed, or past its deadline) fails the search (503 ``shard_unavailable``,
504 ``shard_timeout``), unless ``EMBEDDING_PARTIAL=true``: then the answer merges the shards that answered and
says which did not (``partial``). A shard's own 4xx (a bad filter, a text with no known word, an unknown
document) is the answer.

A sharded word table's search is by vector alone (``service.scatter_words``): each shard's ``offset + k`` best,
merged by cosine, equal cosines by row; its kind is asked of its shards (``GET <replica>``, again every
:data:`PLACE_SECONDS`: a table imported again may be of another kind, type of ids or string fields). Its routes by
token or row id (neighbours, similarity, analogies) are ``service.scatter_tokens``'.

A batch (``queries``, or ``vectors`` sharing the request's filter and page) is each of its queries scattered as
a request of its own, at once; an item's error (a shard's refusal of it) stands in its place. Not here: text
alone with diversity (the front has no encoder for the query's vector; a sharded table served whole by one
process answers it). The table's summary (and the list of tables) is ``service.scatter_summary``', its fields
``service.scatter_fields``'; its documents' writes and reads by id are ``service.scatter_writes``' and
``service.scatter_documents``'; its rows by id (``GET .../ids/{id}``) ``service.scatter_tokens``'. Its other
routes (a word table's rows by token, its map) answer a 404 that names the front (:func:`elsewhere`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import quote

import numpy as np
import orjson
from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from index.engine.door import (
    KEYWORD_HINT,
    LISTS,
    LOOKUP_LIMIT,
    STRING,
    DocumentSearch,
    UnknownDocument,
    by_vector_alone,
    depths,
    diverse,
    keyword_fallback,
    merge,
    owner,
    reaching,
    routed,
    rrf,
    summed_statistics,
    unit_mean,
    unit_queries,
    unknown_documents,
    vector_fallback,
)
from index.errors import EmbeddingError, InvalidQuery, OverLimit, UnknownTable
from service.errors import ApiError, item_error
from service.logs import REQUEST_ID
from service.respond import FastJSON
from service.scatter_words import WORDS, merged_neighbors, word_body
from service.schemas.common import LIMITS
from service.schemas.search import SearchRequest, words_only
from service.settings import without_passwords
from service.shard_settings import ShardSettings

if TYPE_CHECKING:  # imported where a front asks its shards: a server without shards never loads it
    import httpx

    from service.http.metrics import Metrics

EVERY_ROW = 1 << 62  # the front does not know the table's rows: a list is as deep as its shards make it
WRITTEN = 1 << 61  # the merge's order of a shard's written documents: after every row
TABLE = "/v1/tables/{table}"  # the table routes' prefix
ASKED = ("row", "vector")  # what a shard's hits carry for the front (``include``): the order and MMR's rows
KEY_HEADER = "x-api-key"
# The client's API key, kept by the front's middleware from each request: every shard request carries it.
CLIENT_KEY: ContextVar[str | None] = ContextVar("client_key", default=None)
# The shards that did not answer a client's request, by (table, shard), kept by the same middleware: the request's
# other queries (a batch's items) do not ask them again, each waiting out its deadline.
DOWN: ContextVar[dict[tuple[str, int], ShardFailed] | None] = ContextVar("down", default=None)
T = TypeVar("T")
log = logging.getLogger(__name__)


def segment(text: str) -> str:
    """``text`` (an id, a token) as one segment of a shard's URL: every reserved character escaped, and dots, so
    that ``"."`` and ``".."`` reach the shard as themselves, not as steps the URL's normalisation takes."""
    return quote(text, safe="").replace(".", "%2E")


def shard_headers() -> dict[str, str]:
    """The headers of a shard request: the client's key, and the request's X-Request-ID when it has one (the
    shards' log lines about it name it too)."""
    headers = {"content-type": "application/json"}
    if (key := CLIENT_KEY.get()) is not None:
        headers[KEY_HEADER] = key
    if (request_id := REQUEST_ID.get()) is not None:
        headers["x-request-id"] = request_id
    return headers


REFUSED_KEY = (401, 403)  # a shard refusing the key the front took: the deployment's fault, not the request's
# Requests in flight to one shard at once; more wait their turn here, each deadline counted from its sending. The
# HTTP client's pool holds as many connections per shard, so that no request queues in it: its queue costs the
# event loop time quadratic in its length (a big batch froze the front).
SHARD_REQUESTS = 16
# Seconds the front keeps a shard's limits (``GET <server>/v1/limits``): its server's settings, which change only
# with a restart (its refusal of a request for one has them asked again at once); a scroll without ``limit`` reads
# them for every page.
LIMITS_SECONDS = 10.0
# Seconds the front trusts a replica's place (its summary's ``shard_of``) before asking it again: a replica restarted
# on the same URL may serve another shard, or a shard of another import, without the front seeing it fail.
PLACE_SECONDS = 5.0
# Seconds a replica that failed (no answer in time, refused, misplaced) is tried after the shard's others, as nginx's
# ``fail_timeout``: a stopped or hung replica costs one request its deadline, not every other request.
FAIL_SECONDS = 5.0


@dataclass
class Shard:
    replicas: list[str]
    table: str  # the sharded table's name, which its messages say rather than the shard's own
    turn: itertools.count[int] = field(default_factory=itertools.count)
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(SHARD_REQUESTS))
    failed: dict[str, float] = field(default_factory=dict)  # replica: when it last failed

    def order(self) -> list[str]:
        """The replicas, from the next one in turn (requests spread over them), those that failed within
        :data:`FAIL_SECONDS` last."""
        start = next(self.turn) % len(self.replicas)
        turn = self.replicas[start:] + self.replicas[:start]
        recent = time.monotonic() - FAIL_SECONDS
        return sorted(turn, key=lambda replica: self.failed.get(replica, -FAIL_SECONDS) > recent)  # stable


class ShardFailed(Exception):
    def __init__(self, shard: int, reason: str, timed_out: bool) -> None:
        super().__init__(reason)
        self.shard, self.reason, self.timed_out = shard, reason, timed_out


# How a shard's messages name its own table: "table 'shard-000'", and an encoder's "the documents of 'shard-000'".
SHARD_TABLE = re.compile(rb"(table |the documents of )'shard-\d+'")


def shard_json(body: Any) -> bytes:
    """``body`` as JSON for a shard: orjson's bytes, or the standard library's when it holds an integer past 64
    bits (orjson cannot write one: a filter's value, or a field's in a write), so that the shard reads the request
    as the client sent it and answers as one process does (a 422 for an integer field, no document for an id)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def named(table: str, answer: bytes) -> bytes:
    """A shard's answer as the sharded table's: its messages name ``table``, not the shard's own table."""
    return SHARD_TABLE.sub(rb"\1'" + table.encode() + b"'", answer)  # table names are plain (validated) text


class Misplaced(Exception):
    """A replica whose server serves another shard than the one ``EMBEDDING_SHARDS`` lists it as (its summary's
    ``shard_of``): it would answer for ids it does not own, and miss those it should."""


class ShardRefused(Exception):
    """A shard's own 4xx answer: the request's fault, answered as it is."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status, self.body = status, body

    def error(self) -> dict[str, Any] | None:
        """The error of its envelope (None: its body holds none)."""
        try:
            error = orjson.loads(self.body)["error"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None
        return error if isinstance(error, dict) else None

    def names_limit(self) -> bool:
        """Whether the shard refused the request for one of its server's limits (``limit`` in its envelope)."""
        return (self.error() or {}).get("limit") is not None

    def names_no_table(self) -> bool:
        """Whether the shard's server has no table of the name its URL gives (404 ``unknown_table``): the
        deployment's fault, not the request's, so the replica failed (as one refusing the front's key)."""
        return self.status == 404 and (self.error() or {}).get("code") == UnknownTable.code

    def response(self) -> Response:
        """The shard's refusal as the front's answer (its messages already name the sharded table: :func:`named`)."""
        return Response(self.body, self.status, media_type="application/json")


def refusal_text(refused: ShardRefused) -> str:
    """The message of a shard's refusal (its envelope's, else the start of its body)."""
    error = refused.error()
    return str(error["message"]) if error and "message" in error else refused.body[:200].decode("utf-8", "replace")


def as_asked(refused: ShardRefused, document: str | int) -> ShardRefused:
    """A shard's refusal of the id ``document``, which a URL sent as text, naming it as the client wrote it (an
    integer as an integer), as the table's own refusal of a query by that id names it."""
    error = None if isinstance(document, str) else refused.error()
    if error is None or error.get("ids") != [str(document)]:
        return refused
    error["ids"] = [document]
    error["message"] = str(error["message"]).replace(f"id {str(document)!r}", f"id {document}", 1)
    return ShardRefused(refused.status, orjson.dumps({"error": error}))


def refused_ids(table: str, asked: list[Any], outcomes: Sequence[Any], positive: int) -> None:
    """Raise the refusal of a query's documents (``asked``, ``positive`` of them positive; ``outcomes``: each
    one's unit row or its owner's refusal) as the unsharded table words it when none of its shards was written
    to: its unknown positive ids all named in one 404 (else its unknown negative ids), in the query's order. A
    shard's refusal that is not an unknown id (or a deleted one: the table was written to, and names its first),
    and a shard that did not answer, are raised as they are, the first in the query's order."""
    failed = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, BaseException)]
    if not failed:
        return
    if len(failed) == 1 or not all(unknown_id(outcomes[i]) for i in failed):
        raise outcomes[failed[0]]
    named = [asked[i] for i in failed if i < positive] or [asked[i] for i in failed]
    raise unknown_documents(named[:LOOKUP_LIMIT], len(named), table)


def unknown_id(outcome: BaseException) -> bool:
    """Whether a shard refused a document's vector for an id it does not have (not for one it deleted)."""
    if not isinstance(outcome, ShardRefused) or outcome.status != 404 or (error := outcome.error()) is None:
        return False
    return bool(error.get("code") == UnknownDocument.code and not str(error.get("message")).endswith("(deleted)"))


def unanswered(shard: int, refused: ShardRefused) -> ShardFailed:
    """A shard's refusal of its own summary (``GET <replica>``) as its failure: its URL is no table's, the
    deployment's fault, not the request's."""
    return ShardFailed(shard, f"status {refused.status}: {refusal_text(refused)}", False)


class ClientKey:
    """The front's middleware: the client's API key (``X-API-Key``) kept for every shard request the request
    makes (:data:`CLIENT_KEY`), and the shards that did not answer it (:data:`DOWN`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            CLIENT_KEY.set(Headers(scope=scope).get(KEY_HEADER))
            DOWN.set({})
        await self.app(scope, receive, send)


def _import(identity: object) -> str:
    """A sharded import as a front's refusal names it (``shard_of``'s ``import``; null: imported before imports
    had an identity)."""
    return f"import {identity}" if identity is not None else "an import made before imports had an identity"


class Front:
    """The sharded tables this process fronts, and the one HTTP client it asks their shards with."""

    def __init__(self, settings: ShardSettings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics  # the replicas' failures counted
        self.tables = {
            name: [Shard(list(replicas), name) for replicas in shards] for name, shards in settings.shards.items()
        }
        self._client: httpx.AsyncClient | None = None
        self.kinds: dict[str, str] = {}  # each table's kind ("documents", "words"), as its shards say
        self.id_types: dict[str, str | None] = {}  # a documents table's type of ids, as its shards say (else None)
        self.string_fields: dict[str, frozenset[str]] = {}  # a documents table's fields of type string, as they say
        self.learned: dict[str, float] = {}  # when the three above were read of each table
        self.limits: dict[tuple[str, int], tuple[float, dict[str, Any]]] = {}  # by (table, shard): when, what
        # (table, shard, replica): when it said it is that shard, and its place (``shard_of``: None, no shard)
        self.placed: dict[tuple[str, int, str], tuple[float, dict[str, Any] | None]] = {}
        self.misplaced: set[tuple[str, int, str]] = set()  # (table, shard, replica): said to be another, logged
        self.warned: dict[tuple[str, int, str], float] = {}  # (table, shard, replica): when its failure was logged

    async def kind_of(self, name: str) -> str:
        """What sharded table ``name`` holds, from the first of its shards that answers (``GET <replica>``), with
        its type of ids and its string fields; read again :data:`PLACE_SECONDS` later, as a replica's place is (the
        shards imported again may hold another). A shard's refusal of that summary is its failure (a shard URL that
        names no table is the deployment's)."""
        if name not in self.kinds or time.monotonic() - self.learned[name] >= PLACE_SECONDS:
            failed: ShardFailed | None = None
            for number, shard in enumerate(self.tables[name]):
                try:
                    summary = await self.request(number, shard, "", None)
                    documents = summary.get("documents") or {}
                    self.id_types[name] = documents.get("id_type")
                    fields = (documents.get("fields") or {}).items()
                    self.string_fields[name] = frozenset(f for f, info in fields if info.get("type") == STRING)
                    self.kinds[name] = str(summary.get("kind", "documents"))
                    self.learned[name] = time.monotonic()
                    break
                except ShardFailed as exc:
                    failed = failed or exc
                except ShardRefused as refused:
                    failed = failed or unanswered(number, refused)
            else:
                assert failed is not None
                if name not in self.kinds:  # else what was read last stands until a shard answers
                    raise failed
        return self.kinds[name]

    async def check_place(self, table: str, number: int, replica: str, timeout: float) -> None:
        """Check that ``replica`` serves shard ``number`` of a table of as many shards as ``EMBEDDING_SHARDS`` lists
        for ``table``, of the import the table's other replicas serve, as its summary's ``shard_of`` says (``GET
        <replica>``; a table that is no shard passes): :class:`Misplaced` if not. Asked again :data:`PLACE_SECONDS`
        later, and after the replica failed (a restart may serve another import); a refusal of the summary is left
        to the request that follows."""
        key = (table, number, replica)
        if replica not in self.tables[table][number].replicas:  # a server's URL (its limits): no shard
            return
        checked = self.placed.get(key)
        if checked is not None and time.monotonic() - checked[0] < PLACE_SECONDS:
            return
        answer = await self.client.get(replica, headers=shard_headers(), timeout=timeout)
        if answer.status_code != 200:
            return  # its refusal (of the key, or of a table it does not have) is the following request's
        try:
            place = orjson.loads(answer.content).get("shard_of")
        except (orjson.JSONDecodeError, AttributeError):  # no table's summary: the following request says so
            return
        if place is not None:
            self.placed.pop(key, None)  # not among the replicas its own import is checked against
            problem = self.out_of_place(table, number, place)
            if problem:
                misplaced = Misplaced(
                    without_passwords(
                        f"{replica}: {problem}; list every shard's replicas in shard order, all of one import"
                    )
                )
                if key not in self.misplaced:  # the operator's to mend: said once, not at every request
                    self.misplaced.add(key)
                    log.error("table %r, shard %d: %s", table, number, misplaced)
                raise misplaced
        self.misplaced.discard(key)
        self.placed[key] = (time.monotonic(), place)

    def out_of_place(self, table: str, number: int, place: dict[str, Any]) -> str | None:
        """What is wrong with a replica listed as shard ``number`` of ``table`` whose summary says ``place``
        (``shard_of``): another shard, a shard of another number of shards, or of another import than the one the
        table's other replicas checked lately serve (None: nothing)."""
        count = len(self.tables[table])
        if (place.get("shard"), place.get("shards")) != (number, count):
            return (
                f"its server serves shard {place.get('shard')} of the {place.get('shards')} of table "
                f"{place.get('table')!r}, not shard {number} of {count} as EMBEDDING_SHARDS lists it"
            )
        # The imports of the table's replicas checked within PLACE_SECONDS (an older one may have been imported
        # again since: once every shard is, the new import is the one its replicas are checked against).
        recent = time.monotonic() - PLACE_SECONDS
        imports = {
            _import(p.get("import"))
            for (name, _, _), (when, p) in self.placed.items()
            if name == table and p and when > recent
        }
        if imports and _import(place.get("import")) not in imports:
            return (
                f"its server serves shard {number} of table {place.get('table')!r} of {_import(place.get('import'))}, "
                f"not of {', '.join(sorted(imports))} as the table's other replicas do"
            )
        return None

    def replica_failed(self, table: str, number: int, replica: str, reason: str, logged: bool) -> None:
        """Count a replica's failure in the metrics (``embedding_shard_failures_total``), and say it in the log, once
        every :data:`FAIL_SECONDS` while it keeps failing (``logged``: :meth:`check_place` said it): with partial
        answers (``EMBEDDING_PARTIAL``) a shard that does not answer fails no request."""
        if self.metrics is not None:
            self.metrics.count_shard_failure(table, number)
        key, now = (table, number, replica), time.monotonic()
        last = self.warned.get(key)
        if not logged and (last is None or now - last >= FAIL_SECONDS):
            self.warned[key] = now
            log.warning("table %r, shard %d: %s", table, number, reason)

    def refused(self, number: int, shard: Shard, refused: ShardRefused) -> None:
        """Note shard ``number``'s refusal: one for a limit of its server (lower than the one kept: it restarted)
        has the limits kept of it read again next time, so that a client reading the front's again sees it."""
        if refused.names_limit():
            self.limits.pop((shard.table, number), None)

    async def shard_limits(self) -> list[dict[str, Any]]:
        """The limits of each shard's servers (``GET <server>/v1/limits``, a replica of each in turn, all shards at
        once, each kept :data:`LIMITS_SECONDS`), which a request through the front must respect too; a shard that
        does not answer them (down, or a server without the route) is left out, and asked again next time."""

        async def limits(number: int, shard: Shard) -> dict[str, Any] | None:
            kept = self.limits.get((shard.table, number))
            if kept is not None and time.monotonic() - kept[0] < LIMITS_SECONDS:
                return kept[1]
            urls = [replica.rpartition("/v1/tables/")[0] for replica in shard.replicas]
            servers = Shard(urls, shard.table, slots=shard.slots)  # a request in the shard's slots, as any other
            try:
                answer = await self.request(number, servers, "/v1/limits", None)
            except (ShardFailed, ShardRefused):
                return None
            self.limits[shard.table, number] = (time.monotonic(), answer)
            return answer

        shards = [limits(number, shard) for shards in self.tables.values() for number, shard in enumerate(shards)]
        return [answer for answer in await asyncio.gather(*shards) if answer is not None]

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:  # made in the event loop that uses it
            import httpx

            most = SHARD_REQUESTS * sum(map(len, self.tables.values()))  # every shard's slots: none queue in the pool
            self._client = httpx.AsyncClient(limits=httpx.Limits(max_connections=most, max_keepalive_connections=most))
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    async def ask(self, shard_number: int, shard: Shard, body: dict[str, Any]) -> dict[str, Any]:
        """One shard's answer to ``body`` (``POST <replica>/search``): each replica in turn, at most two."""
        result = await self.request(shard_number, shard, "/search", shard_json(body))
        return result if "results" in result else {"results": [result]}  # a single query's answer

    async def unit_row(self, shards: list[Shard], document: str | int, id_type: str) -> np.ndarray:
        """The unit vector of ``document``, from the shard that owns it as the table reads the id
        (``GET <replica>/documents/{id}``, the id as the client gave it)."""
        try:
            found = await self.document(shards, document, id_type, "vector=true&normalized=true")
        except ShardRefused as refused:
            raise as_asked(refused, document) from None
        return np.asarray(found["vector"], dtype=np.float32)

    async def document(self, shards: list[Shard], document: str | int, id_type: str, query: str) -> dict[str, Any]:
        """``GET <replica>/documents/{id}?<query>`` of the shard that owns ``document`` as the table reads the id
        (``index.engine.door.routed``), the id as the client gave it."""
        shard = owner(routed([document], id_type)[0], len(shards))
        path = f"/documents/{segment(str(document))}" + (f"?{query}" if query else "")
        return await self.request(shard, shards[shard], path, None)

    async def request(self, shard_number: int, shard: Shard, path: str, payload: bytes | None) -> dict[str, Any]:
        """A shard's JSON answer to ``POST`` ``payload`` (``GET`` without one) at ``<replica><path>``: each replica
        in turn, at most two; its 4xx raises :class:`ShardRefused`, no answer :class:`ShardFailed`."""
        import httpx

        down = DOWN.get()
        reasons, timed_out = [], False
        headers = shard_headers()

        def note_failure(replica: str, reason: str, logged: bool = False) -> None:  # tried after the others a while
            reason = without_passwords(reason)  # the replica's URL, said to clients and in the log
            reasons.append(reason)
            shard.failed[replica] = time.monotonic()
            said = f"{reason}; tried after its other replicas for {FAIL_SECONDS:g} s"
            self.replica_failed(shard.table, shard_number, replica, said, logged)

        for replica in shard.order()[:2]:
            try:
                async with shard.slots:
                    if down is not None and (shard.table, shard_number) in down:  # failed while this one waited
                        raise down[shard.table, shard_number]
                    method = "GET" if payload is None else "POST"
                    url, timeout = f"{replica}{path}", self.settings.shard_timeout
                    await self.check_place(shard.table, shard_number, replica, timeout)
                    answer = await self.client.request(method, url, content=payload, headers=headers, timeout=timeout)
            except Misplaced as exc:
                note_failure(replica, str(exc), logged=True)
                continue
            except httpx.TimeoutException:
                self.placed.pop((shard.table, shard_number, replica), None)
                note_failure(replica, f"{replica}: no answer within {self.settings.shard_timeout:g} s")
                timed_out = True
                continue
            except httpx.TransportError as exc:
                self.placed.pop((shard.table, shard_number, replica), None)
                note_failure(replica, f"{replica}: {type(exc).__name__} ({exc})")
                continue
            if answer.status_code in REFUSED_KEY:
                refused = ShardRefused(answer.status_code, answer.content)
                note_failure(
                    replica,
                    f"{replica}: refused the request's API key (status {answer.status_code}: "
                    f"{refusal_text(refused)}); the front and its shards take the same keys",
                )
                continue
            if 400 <= answer.status_code < 500:
                refused = ShardRefused(answer.status_code, answer.content)
                if refused.names_no_table():
                    note_failure(replica, f"{replica}: its server has no such table ({refusal_text(refused)})")
                    continue
                shard.failed.pop(replica, None)  # it answered: the request's fault
                self.refused(shard_number, shard, refused)
                raise ShardRefused(answer.status_code, named(shard.table, answer.content))
            if answer.status_code != 200:
                note_failure(replica, f"{replica}: status {answer.status_code}")
                continue
            shard.failed.pop(replica, None)
            result: dict[str, Any] = orjson.loads(answer.content)
            return result
        failure = ShardFailed(shard_number, "; ".join(reasons), timed_out and len(reasons) == 1)
        if down is not None:
            down[shard.table, shard_number] = failure
        raise failure


async def every(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Each of ``calls``' answers, in order; the first to fail cancels the others (and their shard requests)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


def merge_lists(
    lists: Sequence[list[dict[str, Any]]], depth: int, drop: frozenset[Any], written: dict[Any, int] | None = None
) -> list[dict[str, Any]]:
    """The ``depth`` best hits of the shards' lists (each best first, each hit with its whole-table ``row``) but
    the documents ``drop`` names: by score, equal scores by row, as the whole table orders them
    (``index.engine.door.merge``). Each hit gets its place in that order (``order``: its row and shard; a shard
    built before shards knew their rows in the whole table gives its own, which then order equal scores). A
    document written since its shard's version has no row (null): among equal scores it comes after the rows,
    numbered in ``written`` (shared by the lists a hybrid search fuses, so a document is one in both)."""
    written = {} if written is None else written
    by_order = {}
    for shard, hits in enumerate(lists):
        for hit in hits:
            if hit["id"] in drop:
                continue
            if hit["row"] is None:
                order = written.setdefault((shard, str(hit["id"])), WRITTEN + len(written))
            else:
                order = hit["row"] * len(lists) + shard
            by_order[order] = {**hit, "order": order}
    orders = np.fromiter(by_order, dtype=np.int64, count=len(by_order))
    scores = np.array([hit["score"] for hit in by_order.values()], dtype=np.float64)
    best, _ = merge([(orders, scores)], depth)
    return [by_order[order] for order in best.tolist()]


def engine_search(body: SearchRequest) -> DocumentSearch:
    """What the engine would be asked for ``body``'s page: its depths (``index.engine.door.depths``) and its
    re-ranking (``diverse``) are the front's."""
    weights = None if body.weights is None else (body.weights.vector, body.weights.keyword)
    return DocumentSearch(
        body.mode,
        body.k,
        offset=body.offset,
        min_score=body.min_score,
        rrf_k=body.rrf_k,
        weights=weights,
        diversity=body.diversity or 0.0,
    )


def depth_of(body: SearchRequest) -> int:
    """How deep each shard's list is asked: the engine's depth of each list for the page (and its re-ranking)."""
    return depths(engine_search(body), EVERY_ROW)[0]


def merged_answer(
    body: SearchRequest,
    parts: list[dict[str, Any] | None],
    drop: frozenset[Any] = frozenset(),
    query: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """The page of hits from the shards' answers (``None``: a shard that did not answer), the documents ``drop``
    names left out (a query's own); with diversity, re-ranked by MMR for the unit vector ``query``."""
    search = engine_search(body)
    mode = body.mode
    per_list, pool = depths(search, EVERY_ROW)
    answered = [part for part in parts if part is not None]
    lists: dict[str, list[dict[str, Any]]] = {}
    written: dict[Any, int] = {}
    for position, name in enumerate(n for n in LISTS if mode in (n, "hybrid")):
        lists[name] = merge_lists([part["results"][position]["hits"] for part in answered], per_list, drop, written)
    if mode == "hybrid":
        by_order = {hit["order"]: hit for name in reversed(LISTS) for hit in lists[name]}
        ranked = [[hit["order"] for hit in lists[name]] for name in LISTS]
        fused = rrf(ranked, k=search.rrf_k, weights=search.weights, limit=pool)
        hits = []
        for key, score, ranks in zip(fused.ids.tolist(), fused.scores.tolist(), fused.ranks.tolist(), strict=True):
            hit = {k: v for k, v in by_order[key].items() if k != "ranks"}
            hit["score"] = score
            hit["ranks"] = {name: rank for name, rank in zip(LISTS, ranks, strict=True) if rank}
            hits.append(hit)
    else:
        hits = lists[mode][:pool]
        if mode == "keyword":
            hits = [{**hit, "ranks": {"keyword": rank}} for rank, hit in enumerate(hits, 1)]
    scores = np.array([hit["score"] for hit in hits], dtype=np.float64)
    order = reaching(scores, body.min_score)
    if search.diversity > 0 and query is not None and len(order):
        candidates = np.array([hits[i]["vector"] for i in order.tolist()], dtype=np.float32)
        order = order[diverse(search, query, candidates, scores[order])]
    shown = [hits[i] for i in order[body.offset : body.offset + body.k].tolist()]
    kept = tuple(body.include or ())
    return [{k: v for k, v in hit.items() if k != "order" and (k not in ASKED or k in kept)} for hit in shown]


def failed(name: str, outcome: ShardFailed) -> ApiError:
    """The error of a search that a shard did not answer: 504 past its deadline, else 503."""
    code = "shard_timeout" if outcome.timed_out else "shard_unavailable"
    message = f"shard {outcome.shard} of table {name!r} did not answer: {outcome.reason}"
    return ApiError(code, message, table=name, shard=outcome.shard)


def answer_of(name: str, outcome: Any) -> Any:
    """A shard's answer among ``asyncio.gather``'s outcomes for table ``name``: a shard that did not answer raised
    as the table's 503 or 504 (:func:`failed`), any other exception as it is."""
    if isinstance(outcome, ShardFailed):
        raise failed(name, outcome)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def every_shard(front: Front, name: str, ask: Callable[[int, Shard], Awaitable[dict[str, Any]]]) -> list[Any]:
    """``ask(number, shard)`` of the shards of ``name`` at once, the answers in shard order; a shard that does not
    answer raises the front's 503 or 504, a shard's refusal :class:`ShardRefused`."""
    outcomes = await asyncio.gather(
        *(ask(i, shard) for i, shard in enumerate(front.tables[name])), return_exceptions=True
    )
    for outcome in outcomes:  # the request's fault first (a word table's fields): the table's answer
        if isinstance(outcome, ShardRefused):
            raise outcome
    return [answer_of(name, outcome) for outcome in outcomes]


async def kind(front: Front, name: str) -> str:
    """What the sharded table ``name`` holds (its shards say, every :data:`PLACE_SECONDS`); no shard answering is the
    search's 503/504."""
    try:
        return await front.kind_of(name)
    except ShardFailed as outcome:
        raise failed(name, outcome) from None


async def string_fields(front: Front, name: str) -> frozenset[str]:
    """The fields of type string of the sharded documents table ``name``, as its shards say (:func:`kind`)."""
    await kind(front, name)
    return front.string_fields[name]


async def id_type(front: Front, name: str) -> str | None:
    """The type of the ids of the sharded table ``name`` (None: it holds no documents), as its shards say
    (:func:`kind`): how the table reads an id, and so how the front routes it (``index.engine.door.routed``)."""
    await kind(front, name)
    return front.id_types[name]


def shard_body(body: SearchRequest, given: dict[str, Any], extra: int = 0) -> dict[str, Any]:
    """What every shard is asked: the query once per list its mode needs, each ``depth_of`` deep (and ``extra``
    deeper, for the documents the front leaves out), from offset 0, its hits with their rows (and their unit
    vectors, for a diverse search or a client that asks for them)."""
    depth = depth_of(body) + extra
    if depth > LIMITS.get().max_k:  # a shard answers at most max_k: said here, as the word routes' front says it
        raise OverLimit(
            f"k: the front of a sharded table asks each shard for {depth} hits (the page, its re-ranking's "
            f"candidates and the query's own documents, which the merge leaves out), at most max_k "
            f"({LIMITS.get().max_k}): ask a smaller page",
            "max_k",
        )
    query: dict[str, Any] = {name: given[name] for name in ("vector", "text", "filter") if name in given}
    items: list[dict[str, Any]] = []
    if body.mode in ("vector", "hybrid"):
        probe = ("vector",) if "vector" in query else ("text",)  # a text with a vector is the keyword list's
        items.append({name: query[name] for name in (*probe, "filter") if name in query} | {"mode": "vector"})
    if body.mode in ("keyword", "hybrid"):
        items.append({name: query[name] for name in ("text", "filter") if name in query} | {"mode": "keyword"})
    # One list: the single query form (a shard answers it on its light path); two: a batch of both.
    out: dict[str, Any] = {**items[0], "k": depth} if len(items) == 1 else {"queries": items, "k": depth}
    for option in ("fields", "exact"):
        if option in given:
            out[option] = given[option]
    wanted = {"row", *(body.include or ()), *(("vector",) if body.diversity else ())}
    out["include"] = [name for name in ASKED if name in wanted]
    return out


async def keyword_statistics(
    front: Front, shards: list[Shard], text: str
) -> tuple[dict[str, Any] | None, dict[int, ShardFailed], bool]:
    """The whole table's keyword statistics for ``text``'s words, summed over the shards' parts
    (``POST <replica>/search/statistics``, ``index.engine.dfs``), None when no shard was written to since its
    version; the shards that did not answer; and whether a live document of those that answered holds a word of
    the text (mode hybrid falls back to its vector alone when none does and every shard answered). A shard's
    refusal raises :class:`ShardRefused`."""
    payload = orjson.dumps({"texts": [text]})
    outcomes = await asyncio.gather(
        *(front.request(i, shard, "/search/statistics", payload) for i, shard in enumerate(shards)),
        return_exceptions=True,
    )
    parts, gone = [], {}
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, ShardFailed):
            gone[i] = outcome
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            parts.append(outcome)
    held = any(live > 0 for part in parts for _, live in part["terms"].values())
    return summed_statistics(parts), gone, held


def _unembedded(outcome: Any) -> bool:
    """Whether a shard's answer holds an item whose text its encoder could not embed (``NoKnownWord``: it names
    the ``words``)."""
    items = outcome.get("results", ()) if isinstance(outcome, dict) else ()
    return any("words" in item.get("error", {}) for item in items)


def route(front: Front, name: str) -> APIRoute:
    """``POST /v1/tables/<name>/search`` for the sharded table ``name`` (ahead of the route of every table)."""
    shards = front.tables[name]

    async def by_vector(
        body: SearchRequest, given: dict[str, Any]
    ) -> tuple[dict[str, Any], frozenset[Any], np.ndarray | None]:
        """``given`` with its documents (``id``, ``positive``/``negative``) made the vector the whole table
        searches by (their unit rows from their shards, averaged by the engine), the documents its answer leaves
        out, and the unit query vector a diverse search re-ranks by."""
        if "restrict" in given:  # as the one-process server refuses it (index.engine.shards)
            raise InvalidQuery("restrict (the first rows of a table) is not for a sharded table")
        positive = [given["id"]] if "id" in given else list(given.get("positive", ()))
        negative = list(given.get("negative", ()))
        if not positive and not negative:
            if "vector" not in given:
                if body.diversity:
                    raise InvalidQuery(
                        f"diversity: the front of sharded table {name!r} re-ranks by the query's vector; give it "
                        "(vector, id or positive/negative ids) beside the text"
                    )
                return given, frozenset(), None
            return given, frozenset(), unit_queries(np.asarray([given["vector"]], dtype=np.float64))[0]
        ids = await id_type(front, name) or STRING
        asked = positive + negative
        rows = await asyncio.gather(*(front.unit_row(shards, d, ids) for d in asked), return_exceptions=True)
        refused_ids(name, asked, rows, len(positive))
        vector = unit_mean(np.vstack(cast(list[np.ndarray], rows)), len(positive), "documents")[0]
        rest = {k: v for k, v in given.items() if k not in ("id", "positive", "negative")}
        rest["vector"] = vector.astype(np.float64).tolist()  # each float32 exactly
        return rest, frozenset(routed(asked, ids)), vector  # as the hits' ids: as the table stores them

    async def one(body: SearchRequest, given: dict[str, Any]) -> dict[str, Any]:
        """One query's merged answer; a shard's refusal raises :class:`ShardRefused`, a shard that did not answer
        an ``ApiError`` (unless partial answers are taken)."""
        words = await kind(front, name) == WORDS
        sent = given  # as the client sent it: a fallback asks again in mode vector or keyword
        # Mode hybrid's fallbacks by the whole table's rules (docs/documents.md): a text whose vector cannot be made
        # searched by keyword, a text no live document holds a word of by its vector.
        asked_query = None if words else body.document_queries()[0]
        to_keyword = asked_query is not None and keyword_fallback(asked_query)
        to_vector = asked_query is not None and vector_fallback(asked_query)
        try:
            given, drop, query = await by_vector(body, given)
        except ShardFailed as silent:  # the shard that owns a query's document did not give its vector
            raise failed(name, silent) from None
        asked = word_body(body, given) if words else shard_body(body, given, len(drop))
        everyone = list(range(len(shards)))

        async def ask(numbers: list[int]) -> list[dict[str, Any] | BaseException]:
            return list(
                await asyncio.gather(*(front.ask(i, shards[i], asked) for i in numbers), return_exceptions=True)
            )

        if not words and body.mode != "vector" and "text" in given:
            # The statistics and the search are asked at once: when no shard was written to since its version
            # (statistics None) the answers stand; else the shards that gave their statistics are asked again
            # with the sums.
            (statistics, gone, held), outcomes = await asyncio.gather(
                keyword_statistics(front, shards, given["text"]), ask(everyone)
            )
            # A shard that did not answer may hold a word: no fallback then, which would say that no document does
            if to_vector and not held and not gone and not any(map(_unembedded, outcomes)):
                text_alone = asked_query is not None and not asked_query.vector_input
                skip = ("mode", "rrf_k", "weights") if text_alone else ("text", "mode", "rrf_k", "weights")
                alone = {key: value for key, value in sent.items() if key not in skip}
                answer = await one(SearchRequest.model_validate(alone), alone)
                return answer | {"fallback": by_vector_alone(name, given["text"])}
            if statistics is not None:
                asked["keyword_statistics"] = statistics
                ready = [i for i in everyone if i not in gone]
                again = await ask(ready)
                outcomes = [gone[i] if i in gone else again[ready.index(i)] for i in everyone]
        else:
            outcomes = await ask(everyone)
        parts: list[dict[str, Any] | None] = []
        missing = []
        for outcome in outcomes:
            if isinstance(outcome, ShardFailed):
                if not front.settings.partial:
                    raise failed(name, outcome)
                missing.append({"shard": outcome.shard, "reason": outcome.reason})
                parts.append(None)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                parts.append(outcome)
        for part in parts:  # an item's own error (a text with no known word): the request's
            for item in part["results"] if part is not None else ():
                if "error" in item:  # its envelope as the whole table's: its message naming it, its details
                    error = orjson.loads(named(name, orjson.dumps(item["error"])))
                    if to_keyword and "words" in error:
                        by_words = {key: v for key, v in sent.items() if key not in ("rrf_k", "weights")}
                        by_words["mode"] = "keyword"
                        answer = await one(SearchRequest.model_validate(by_words), by_words)
                        reason = error["message"].removesuffix(KEYWORD_HINT)
                        return answer | {"fallback": {"mode": "keyword", "reason": reason}}
                    raise ApiError(error.pop("code"), error.pop("message"), **error)
        if words:
            out: dict[str, Any] = {"neighbors": merged_neighbors(body, parts)}
        else:
            out = {"hits": merged_answer(body, parts, drop, query)}
        if "filter" in given:
            out["passing"] = sum(part["results"][0].get("passing", 0) for part in parts if part is not None)
        if missing:
            out["partial"] = {"shards": len(shards), "answered": len(shards) - len(missing), "missing": missing}
        return out

    async def item(common: dict[str, Any], query: dict[str, Any]) -> dict[str, Any]:
        """One query of a batch, answered as a request of its own; its error in its place."""
        try:
            # An item's mode null is the batch's, as the whole table reads it.
            own = {key: value for key, value in query.items() if key != "mode" or value is not None}
            given = {**common, **own}
            if given.get("mode") != "hybrid":  # the batch's rrf_k and weights are its hybrid items' alone
                given = {key: value for key, value in given.items() if key not in ("rrf_k", "weights")}
            return await one(SearchRequest.model_validate(given), given)
        except ShardRefused as refused:
            error: dict[str, Any] = orjson.loads(refused.body)
            return error
        except ValidationError as exc:
            return item_error(InvalidQuery("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())))
        except ApiError as exc:
            if exc.code in ("shard_timeout", "shard_unavailable"):
                raise
            return item_error(exc)
        except EmbeddingError as exc:
            return item_error(exc)

    async def search(request: Request, body: SearchRequest) -> Response:
        given = body.model_dump(exclude_unset=True, mode="json")
        if await kind(front, name) == WORDS:  # a documents table's fields are a 422, as on the whole table
            words_only(name, WORDS, body.model_fields_set)
        paged = {key: given[key] for key in ("filter", "offset", "min_score") if key in given}
        if "queries" in given:  # an item's own filter and page, else the request's
            shared = ("k", "fields", "mode", "rrf_k", "weights", "diversity", "include", "exact", "restrict")
            common: dict[str, Any] = {key: given[key] for key in shared if key in given}
            items = [{**paged, **query} for query in given["queries"]]
            return FastJSON({"results": await every(item(common, query) for query in items)})
        if "vectors" in given:  # each vector a query of its own, the request's filter and page shared
            common = {key: v for key, v in given.items() if key not in ("vectors", *paged)}
            items = [{"vector": vector, **paged} for vector in given["vectors"]]
            return FastJSON({"results": await every(item(common, query) for query in items)})
        try:
            return FastJSON(await one(body, given))
        except ShardRefused as refused:
            return refused.response()

    return APIRoute(
        f"/v1/tables/{name}/search",
        search,
        methods=["POST"],
        summary=f"Search the sharded table {name}: scattered to its shards, merged",
        include_in_schema=False,
    )


def elsewhere(front: Front, routes: Sequence[BaseRoute], answered: Sequence[BaseRoute]) -> list[Route]:
    """For each sharded table fronted here, a word table's routes by token and its rows by id
    (``service.scatter_tokens``), and its table routes among ``routes`` that the front does not answer (every one
    but ``POST .../search``, those and those among ``answered``: the writes and reads of documents, the summary and
    fields): a 404 that says so, not "no table named"."""
    from service.scatter_tokens import routes as token_routes  # a sharded word table's routes by token

    out: list[Route] = []
    for name in front.tables:

        async def refuse(request: Request, name: str = name) -> Response:
            raise ApiError(
                "not_found",
                f"table {name!r} is sharded and this server is its front: it answers its summary and fields, POST "
                f"/v1/tables/{name}/search, its rows by id and the writes and reads of documents only; "
                f"{request.method} {request.url.path} is for a server of one of its shards, or of the whole table",
                table=name,
            )

        tokens = token_routes(front, name, refuse)  # a documents table's: refuse
        taken = {
            (getattr(r, "path", ""), method)
            for r in (*tokens, *answered)  # ``answered`` is matched ahead of these (``service.app``)
            for method in getattr(r, "methods", None) or ()
        }
        out += tokens
        for route in routes:
            path = getattr(route, "path", "")
            if not path.startswith(TABLE) or path == f"{TABLE}/search":
                continue
            mine = path.replace(TABLE, f"/v1/tables/{name}", 1)
            methods = {m for m in getattr(route, "methods", None) or () if (mine, m) not in taken}
            if methods:
                out.append(Route(mine, own(refuse), methods=sorted(methods)))
    return out


def own(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint`` as a function of its own: the metrics know a plain route by its endpoint
    (``service.http.metrics.other_template``), so no two routes share one."""

    async def call(request: Request) -> Response:
        return await endpoint(request)

    return call


def metric_labels(front: Front, routes: Sequence[BaseRoute]) -> dict[str, tuple[str, str]]:
    """The metrics' labels of the front's ``routes``, whose paths name their table: by path, the route template a
    server of the table itself has (``/v1/tables/{table}/search``) and the table's name."""
    out = {}
    for route in routes:
        path = getattr(route, "path", "")
        for name in front.tables:
            prefix = f"/v1/tables/{name}"
            if path == prefix or path.startswith(f"{prefix}/"):
                out[path] = (TABLE + path[len(prefix) :], name)
    return out
