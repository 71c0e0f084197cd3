"""Prometheus metrics: requests and latency per route template and table, the requests the HTTP protocol refused
before the app (``service.http.protocol``), the shard replicas a sharded table's front found failing
(``service.scatter``), time spent in the query engine, the engine calls holding or awaiting a worker thread's
slot, and the background compactions (``service.compacting``).

Each app has its own registry (tests build many apps in one process). With several worker processes set
``PROMETHEUS_MULTIPROC_DIR`` (``embedding-serve --workers N`` does) and ``/metrics`` aggregates every worker.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import os
import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    mmap_dict,
    values,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import status_of
from service.http.logged_once import CUT_STATUS

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# In a request's scope: the HTTP protocol answered it itself while its app waited for its body (a body that stalls
# or that the client cut; service.http.protocol), and counted it by its code: the app's answer is dropped, and not
# counted.
REFUSED = "embedding.refused"
# In a request's scope: its client left before its answer began (service.http.protocol, which logged its access line
# with this status): counted so, not with the status of the answer the app then sends to no one.
GONE = "embedding.gone"
GONE_STATUS = status_of("client_closed_request")

log = logging.getLogger(__name__)


class AllocatedFile(mmap_dict.MmapedDict):
    """prometheus_client's file of one process's metrics (in ``PROMETHEUS_MULTIPROC_DIR``), its blocks allocated
    before they are mapped: a mapped page its disk has no room for kills the process with SIGBUS when it is first
    written, so a full temporary directory would kill every worker at its first requests, and each replacement. A
    file that cannot be made or given room is kept in memory instead, with a warning: the worker serves on, its
    metrics in ``/metrics`` as they last were."""

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if not read_mode:
            try:
                _made_with_room(filename)
            except OSError as exc:
                _kept_in_memory(filename, exc)
                memory = os.memfd_create("embedding-metrics")
                try:
                    super().__init__(f"/proc/self/fd/{memory}")  # type: ignore[no-untyped-call]
                finally:
                    os.close(memory)
                return
        super().__init__(filename, read_mode)  # type: ignore[no-untyped-call]

    def _init_value(self, key: str) -> None:
        encoded = len(key.encode("utf-8"))
        needed = self._used + 4 + encoded + (8 - (encoded + 4) % 8) + 16  # as the parent lays out an entry
        capacity = self._capacity
        while needed > capacity:
            capacity *= 2
        if capacity != self._capacity:
            try:
                _allocate(self._f.fileno(), capacity)
            except OSError as exc:
                _kept_in_memory(self._fname, exc)
                self._to_memory()
        super()._init_value(key)  # type: ignore[no-untyped-call]

    def _to_memory(self) -> None:
        """Go on in a file in memory holding what the file on disk holds."""
        memory = os.memfd_create("embedding-metrics")
        os.ftruncate(memory, self._capacity)
        os.pwrite(memory, self._m[: self._capacity], 0)
        self._m.close()
        self._f.close()
        self._f = open(memory, "a+b")  # noqa: SIM115  # the parent keeps it open, as its own
        self._m = mmap.mmap(memory, self._capacity)


def _made_with_room(filename: str) -> None:
    """The metric file ``filename`` made, with room for its first entries; one this made and could give no room is
    taken away again (``/metrics`` cannot read an empty file)."""
    fd = os.open(filename, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            _allocate(fd, max(size, mmap_dict._INITIAL_MMAP_SIZE))
        except OSError:
            if not size:
                os.unlink(filename)
            raise
    finally:
        os.close(fd)


def _allocate(fd: int, size: int) -> None:
    """The blocks of the first ``size`` bytes of ``fd`` allocated (OSError when its disk has no room for them);
    where the file system cannot allocate ahead, nothing is done, as before."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def _kept_in_memory(filename: str, exc: OSError) -> None:
    log.warning(
        "metrics file %s: %s: this worker's metrics are kept in memory from now on (/metrics shows them as they "
        "were); free room in the temporary directory and restart the server to have them counted again",
        filename,
        exc.strerror or exc,
    )


setattr(values, "MmapedDict", AllocatedFile)  # noqa: B010  # the class prometheus_client makes its metric files with


# The server's background compactions (``service.compacting``), counted by the process that runs them: the server,
# or the supervisor of its workers (in its own file of ``PROMETHEUS_MULTIPROC_DIR``); in every app's registry.
COMPACTIONS = Counter(
    "embedding_compactions",
    "Background compactions of a documents table by table and outcome (compacted, or failed: the table keeps its "
    "version and its log, and is tried again)",
    ("table", "outcome"),
    registry=None,
)
LAST_COMPACTED = Gauge(
    "embedding_compaction_last_success_timestamp_seconds",
    "Unix time of a documents table's last background compaction that succeeded",
    ("table",),
    multiprocess_mode="max",
    registry=None,
)


def count_compaction(table: str, compacted: bool) -> None:
    COMPACTIONS.labels(table, "compacted" if compacted else "failed").inc()
    if compacted:
        LAST_COMPACTED.labels(table).set(time.time())


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(COMPACTIONS)
        self.registry.register(LAST_COMPACTED)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._request_children: dict[tuple[str, str, str, int], tuple[Any, Any]] = {}
        self.requests = Counter(
            "embedding_http_requests",
            "HTTP requests by route template, table and status code",
            ("method", "route", "table", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "embedding_http_request_seconds",
            "HTTP request latency by route template and table",
            ("method", "route", "table"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.cache = Counter(
            "embedding_answer_cache",
            "GET /v1/tables answers looked up in the answer cache, by result (hit or miss)",
            ("result",),
            registry=self.registry,
        )
        self.refused = Counter(
            "embedding_http_refused",
            "Requests the HTTP protocol answered with an error before they reached the app, by error code: "
            "overloaded (a connection past EMBEDDING_MAX_CONNECTIONS), request_timeout, headers_too_large, "
            "request_line_too_long, bad_request, http_version_not_supported",
            ("code",),
            registry=self.registry,
        )
        self.shard_failures = Counter(
            "embedding_shard_failures",
            "Requests a sharded table's front sent a shard replica that failed (no answer in time, not reachable, "
            "an error status, the key refused, no such table, another shard), by table and shard",
            ("table", "shard"),
            registry=self.registry,
        )
        self.search = Histogram(
            "embedding_search_seconds",
            "Time spent in the query engine per operation and table",
            ("operation", "table"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.work = Gauge(
            "embedding_work",
            "Engine calls in worker threads by kind (heavy: searches, analyses, encoding; long: projections, maps) "
            "and state (running: holding a slot; waiting: queued for one)",
            ("kind", "state"),
            multiprocess_mode="livesum",
            registry=self.registry,
        )

    def count_refusal(self, code: str) -> None:
        self.children(self.refused, code).inc()

    def count_shard_failure(self, table: str, shard: int) -> None:
        self.children(self.shard_failures, table, str(shard)).inc()

    def observe_search(self, operation: str, table: str, seconds: float) -> None:
        self.children(self.search, operation, table).observe(seconds)

    def children(self, metric: Counter | Gauge | Histogram, *labels: str) -> Any:
        """``metric.labels(*labels)``, remembered: prometheus_client checks and locks on every ``labels`` call."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def request_children(self, method: str, route: str, table: str, status: int) -> tuple[Any, Any]:
        """The request counter's and the latency histogram's children of one request's labels, in one look-up."""
        key = (method, route, table, status)
        children = self._request_children.get(key)
        if children is None:
            count = self.requests.labels(method, route, table, str(status))
            children = self._request_children[key] = (count, self.latency.labels(method, route, table))
        return children

    def exposition(self) -> tuple[bytes, str]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            # prometheus_client leaves MultiProcessCollector.__init__ unannotated
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})  # label values; others are "other"


class MetricsMiddleware:
    """Count and time every HTTP request; labels use the route template, never the raw path."""

    def __init__(
        self, app: ASGIApp, metrics: Metrics, tables: set[str], fronted: dict[str, tuple[str, str]] | None = None
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.tables = tables  # only known names become label values, so labels stay few
        # A fronted sharded table's routes, whose paths name it: (the route template, the table) by route path
        self.fronted = fronted or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None  # until the answer starts

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except asyncio.CancelledError:  # cut at the shutdown timeout: answered 503 outside (service.http.logged_once)
            status = status or CUT_STATUS
            raise
        finally:
            if REFUSED not in scope:
                route = scope.get("route")
                template = getattr(route, "path", None) or other_template(scope)
                table = (scope.get("path_params") or {}).get("table", "")
                if table and table not in self.tables:
                    table = "unknown"
                elif not table and template in self.fronted:
                    template, table = self.fronted[template]
                method = scope["method"] if scope["method"] in METHODS else "other"  # a client's word: not a label
                status = GONE_STATUS if GONE in scope else status or 500
                count, latency = self.metrics.request_children(method, template, table, status)
                count.inc()
                latency.observe(time.perf_counter() - started)


def other_template(scope: Scope) -> str:
    """The path of a matched route FastAPI records no ``route`` for (the docs, the OpenAPI document, the
    explorer's files under their mount, ``/readyz`` while draining), by the endpoint the router recorded; else
    "unmatched"."""
    endpoint = scope.get("endpoint")
    app = scope.get("app")
    if endpoint is not None and app is not None:
        for route in app.router.routes:
            if getattr(route, "endpoint", None) is endpoint or getattr(route, "app", None) is endpoint:
                return str(route.path)
    return "unmatched"
