"""The answer cache: whole ``GET /v1/tables/{table}/...`` answers kept in memory, so a repeated query costs no search.

A table's version never changes once loaded (a rebuild is a new registry, see ``service.registry``), and its
writes grow its log (``service.live``), so an answer is a function of the URL, the registry that computed it and
the lengths of the write logs. Only 200 answers are kept; the cache is emptied when the app publishes a new
registry or a log grows, and an answer computed by an older registry is never stored. Least recently used
answers go first once ``max_bytes`` is reached (``EMBEDDING_CACHE_BYTES``, 0 turns the cache off). A table's
summary (``GET /v1/tables/{table}``) is not kept: it costs no search, and its ``building`` changes while a
background index build runs, with no new registry. Nor is any answer a front gives of a sharded table
(``service.scatter``): its shards' versions and logs, which reloads and writes through any front change, are not
the front's.

The middleware sits inside the read-key check (a request without the key never reaches it) and inside the
metrics middleware, which sees a hit under its route as any other request;
``embedding_answer_cache_total{result="hit"|"miss"}`` counts the lookups.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.http.metrics import Metrics

CACHED_PREFIX = "/v1/tables/"
ENTRY_OVERHEAD = 200  # bytes a cached answer costs beside its body and key (tuple, headers, dict slot)


def cacheable(method: str, path: str) -> bool:
    """Whether the answer to ``method path`` may be kept: a GET of a table's resource, not of its summary."""
    if method != "GET" or not path.startswith(CACHED_PREFIX):
        return False
    return "/" in path[len(CACHED_PREFIX) :].rstrip("/")


@dataclass(frozen=True)
class Answer:
    headers: list[tuple[bytes, bytes]]
    body: bytes
    route: Any  # the matched route and its path parameters, for the metrics labels of a hit
    path_params: dict[str, Any]


class AnswerCache:
    """Least-recently-used answers by (path, query string), for the registry they were computed with."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._answers: OrderedDict[tuple[str, bytes], Answer] = OrderedDict()
        # Whose answers the cache holds, weakly: a registry a reload replaced is not kept alive (mapped) by it.
        self._registry: Callable[[], object] = lambda: None
        self._writes: tuple[int, ...] = ()  # and the lengths of the write logs they saw (service.live)

    def get(self, registry: object, key: tuple[str, bytes], writes: tuple[int, ...] = ()) -> Answer | None:
        if registry is not self._registry() or writes != self._writes:
            self.clear()
            self._registry, self._writes = weakref.ref(registry), writes
        answer = self._answers.get(key)
        if answer is None:
            self.misses += 1
            return None
        self._answers.move_to_end(key)
        self.hits += 1
        return answer

    def put(self, registry: object, key: tuple[str, bytes], answer: Answer, writes: tuple[int, ...] = ()) -> None:
        size = self._size(key, answer)
        if registry is not self._registry() or writes != self._writes:
            return  # computed before a reload or a write
        if size > self.max_bytes // 8 or key in self._answers:
            return  # too big to be worth a place, or stored meanwhile
        self._answers[key] = answer
        self.bytes += size
        while self.bytes > self.max_bytes:
            old_key, old = self._answers.popitem(last=False)
            self.bytes -= self._size(old_key, old)

    def clear(self) -> None:
        self._answers.clear()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._answers)

    @staticmethod
    def _size(key: tuple[str, bytes], answer: Answer) -> int:
        return len(key[0]) + len(key[1]) + len(answer.body) + ENTRY_OVERHEAD


class AnswerCacheMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        cache: AnswerCache,
        metrics: Metrics,
        writes: Callable[[], tuple[int, ...]] = tuple,
        uncached: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.cache = cache
        self.writes = writes  # the lengths of the tables' write logs (service.live.log_lengths)
        self.uncached = uncached  # path prefixes whose answers are never kept
        self.hit = metrics.cache.labels("hit")
        self.miss = metrics.cache.labels("miss")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not cacheable(scope["method"], scope["path"])
            or scope["path"].startswith(self.uncached)
        ):
            await self.app(scope, receive, send)
            return
        registry = getattr(scope["app"].state, "registry", None)
        if registry is None:  # still loading: the route answers 503
            await self.app(scope, receive, send)
            return
        key = (scope["path"], scope["query_string"])
        writes = self.writes()  # a write to any table empties the cache, in every worker
        answer = self.cache.get(registry, key, writes)
        if answer is not None:
            self.hit.inc()
            scope["route"], scope["path_params"] = answer.route, answer.path_params
            # A copy: the middlewares outside (CORS) add this request's own headers to the list they are sent.
            await send({"type": "http.response.start", "status": 200, "headers": list(answer.headers)})
            await send({"type": "http.response.body", "body": answer.body})
            return
        self.miss.inc()
        start: Message = {}
        whole = True  # the body came in one message (a streamed answer is not kept)

        async def keep(message: Message) -> None:
            nonlocal start, whole
            if message["type"] == "http.response.start":
                start = {**message, "headers": list(message.get("headers", []))}  # before CORS adds its own
            elif message["type"] == "http.response.body":
                if message.get("more_body", False):
                    whole = False
                elif whole and start.get("status") == 200:
                    answer = Answer(
                        list(start["headers"]), message["body"], scope.get("route"), scope.get("path_params", {})
                    )
                    self.cache.put(registry, key, answer, writes)
            await send(message)

        await self.app(scope, receive, keep)
