"""The app factory: ``create_app(settings)`` builds the API over the tables in ``settings.data_dir``.

Nothing happens at import time. Tables are loaded in the lifespan (memory-mapped read-only, verified against
their manifests) onto ``app.state.registry``; a table that fails to load is logged and skipped, and
``/readyz`` stays 503 until every requested table is loaded. ``POST /v1/admin/reload``, SIGHUP and the data
directory's watcher (``service.watch``) load new and changed tables while the server runs (``service.reload``).
``app_from_env`` is the uvicorn factory used by ``embedding-serve`` (``uvicorn --factory
service.app:app_from_env``), reading settings from ``EMBEDDING_*``.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import faiss
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from index.errors import counted
from service import api_docs, errors, live, scatter, scatter_documents, scatter_fields, scatter_summary, scatter_writes
from service.execute import Searcher
from service.http import auth
from service.http.app_state import AppState
from service.http.cache import AnswerCache, AnswerCacheMiddleware
from service.http.cors import JsonCORSMiddleware
from service.http.declared_query import declared_only
from service.http.drain import Drain
from service.http.fastroute import document_query_models
from service.http.head import HeadAsGetMiddleware
from service.http.known_routes import KnownRoutes
from service.http.limits import RequestLimitsMiddleware
from service.http.logged_once import LoggedOnce
from service.http.metrics import Metrics, MetricsMiddleware
from service.http.openai_errors import OpenAIErrorsMiddleware
from service.http.request_id import RequestIdMiddleware
from service.http.slashes import relative_slash_redirects
from service.logs import format_from_env, log_urls, own_line
from service.registry import Registry
from service.reload import CatchUp, Reloader
from service.respond import FastJSON
from service.routers import ROUTERS
from service.routers.embed import ROUTERS as EMBED_ROUTERS
from service.routers.embed import undeclare_422
from service.routers.writes import write_routes
from service.schemas.common import LIMITS, Limits
from service.settings import SUPERVISOR_VARIABLE, Settings, cores, describe_error
from service.shard_settings import front_settings
from service.watch import Watcher

log = logging.getLogger(__name__)

GC_YOUNG_THRESHOLD = 7000  # allocations between collections of the youngest generation (Python's default: 700)
STATIC = Path(__file__).resolve().parent / "static"

DESCRIPTION = """Nearest neighbours, similarity, analogies, raw-vector search and 2-D projection over every
embedding table built into the data directory; search and writes of documents tables; text embedded by a table.
Every error is `{"error": {"code", "message", ...}}`, except on the OpenAI-compatible `/v1/embeddings` and
`/v1/models`, which answer OpenAI's `{"error": {"message", "type", "param", "code"}}`.
A request may carry an `X-Request-ID` header (1 to 128 visible ASCII characters; any other value is ignored): its
answer carries it back, and the server's log lines about the request name it."""


# Response headers a page on an allowed origin may read (a browser hides all but a few otherwise): the request's id (a
# proxy's, when one names requests), to quote in a report, and how long to wait after an overloaded 503
EXPOSED = ["X-Request-ID", "Retry-After"]


def create_app(settings: Settings) -> FastAPI:
    limits = Limits(
        max_k=settings.max_k,
        max_batch=settings.max_batch,
        max_hits=settings.max_hits,
        max_filter_conditions=settings.max_filter_conditions,
        max_words=settings.max_words,
        max_layout_work=settings.max_layout_work,
        max_encode_tokens=settings.max_encode_tokens,
        max_scored_rows=settings.max_scored_rows,
        max_exact_rows=settings.max_exact_rows,
        max_answer_bytes=settings.max_answer_bytes,
    )
    metrics = Metrics()
    table_names: set[str] = set()  # label values the metrics accept

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        if settings.threads:
            faiss.omp_set_num_threads(settings.threads)
        # FAISS's Python module checks for Ctrl-C after each search by taking the GIL, from whichever thread
        # searches: the searcher thread then waits for the busy event loop before it can finish a round. The
        # server stops through its own signal handlers; one search takes milliseconds at most.
        faiss.InterruptCallback.clear_instance()  # type: ignore[attr-defined]  # missing from faiss's stubs
        app.state.heavy_calls = anyio.CapacityLimiter(cores())  # see service.execute.compute
        app.state.long_calls = anyio.CapacityLimiter(settings.layout_slots)
        reloader = Reloader(app, on_loaded=lambda registry: table_names.update(registry.tables))
        app.state.reloader = reloader
        sighup = reloader.install_sighup()  # under uvicorn (main thread): SIGHUP reloads the tables
        watcher = Watcher(
            settings.data_dir, settings.watch_seconds, reloader, settings.tables
        )  # sees the directory before the load
        fronted = ", ".join(sorted(app.state.front.tables))  # sharded tables answered by their shards
        registry = await run_in_threadpool(
            Registry.load, settings.data_dir, settings.tables, settings.verify_checksums, bool(fronted)
        )
        table_names.update(registry.tables)
        app.state.registry = registry
        log.info("ready: %s loaded, %d failed", counted(len(registry.tables), "table"), len(registry.failed))
        if fronted:  # "answering sharded table lee from its shards", "sharded tables glove, lee from their shards"
            noun, whose = ("table", "its") if len(app.state.front.tables) == 1 else ("tables", "their")
            log.info("answering sharded %s %s from %s shards (EMBEDDING_SHARDS)", noun, fronted, whose)
        del registry  # the app's state holds it, until a reload replaces it: then nothing else may
        reloader.loaded()
        watcher.start()  # a table published, rebuilt or removed in the data directory is reloaded (service.watch)
        catch_up = CatchUp(reloader)
        catch_up.start()  # a worker behind its table's writes loads the newer version (service.live)
        app.state.searcher = Searcher(settings.threads, settings.searcher_nice)  # light searches: see service.execute
        # What start-up made (modules, schemas, the tables' labels and metadata) lives as long as the server: kept out
        # of the collector's scans, which then walk only what requests make, and less often (a request's objects are
        # freed by their counts; BENCHMARKS.md, "The search path, before and after").
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD)
        gc.enable()  # embedding-serve turns it off for the start-up (service.main)
        # Under uvicorn: SIGTERM fails readiness first, then the server shuts down (service.http.drain). The state
        # hands the drain to the HTTP protocol too (service.http.protocol), which closes connections while it lasts,
        # and the metrics, which count the requests it refuses.
        draining = drain.install()
        try:
            yield {"drain": drain, "metrics": metrics}
        finally:
            watcher.stop()
            catch_up.stop()
            if draining:
                drain.remove()
            if sighup:
                reloader.remove_sighup()
            app.state.searcher.close()
            await app.state.front.close()

    app = FastAPI(
        title="embedding-search",
        version=version("embedding-search"),
        description=DESCRIPTION,
        lifespan=lifespan,
        default_response_class=FastJSON,
        docs_url=None,  # service.api_docs: the page without a CDN
        redoc_url=None,
        redirect_slashes=False,  # relative_slash_redirects instead: a Location of the path alone
        telemetry={"tracing": settings.telemetry, "metrics": settings.telemetry, "logs": settings.telemetry},
    )
    app.router.default = relative_slash_redirects(app.router)
    app.state = AppState(app.state._state)  # read on every request: its values found at once
    app.state.settings = settings
    app.state.metrics = metrics
    # Once the drain begins, /readyz is answered ahead of the health router's route: 503, shutting down.
    drain = Drain(settings.drain_seconds, on_start=lambda: app.router.routes.insert(0, SHUTTING_DOWN))
    app.state.drain = drain
    errors.install(app)
    # The routes themselves, not include_router: FastAPI matches an included router's routes lazily, through a
    # layer that costs tens of microseconds on every request. Ahead of /openapi.json and /docs, which are
    # asked for far less often: routes are tried in order.
    routes = [route for router in (*ROUTERS, *EMBED_ROUTERS) for route in router.routes]
    declared_only(routes)  # a route refuses query parameters it does not declare
    app.router.routes[:0] = routes
    front = scatter.Front(front_settings(), metrics)  # sharded tables answered by their shards' servers
    app.state.front = front
    if front.tables:
        app.add_middleware(scatter.ClientKey)  # the client's key for the shard requests
    answered = [  # the documents' writes and reads by id, from the shards that own the ids; the summary, fields
        *(route for name in front.tables for route in scatter_writes.routes(front, name)),
        *(route for name in front.tables for route in scatter_documents.routes(front, name)),
        *(route for name in front.tables for route in scatter_fields.routes(front, name)),
        *(scatter_summary.routes(front) if front.tables else ()),
    ]
    fronting = [
        *answered,
        *(scatter.route(front, name) for name in front.tables),
        *scatter.elsewhere(front, routes, answered),
    ]
    declared_only(fronting)
    app.router.routes[:0] = fronting
    _mount_explorer(app)
    api_docs.mount(app)

    # The last middleware added runs first: metrics see every request, including refused ones and cache hits;
    # CORS answers preflights before the read key is asked for; the answer cache serves only allowed requests;
    # HEAD is routed as GET last, so it is counted as HEAD and never cached.
    app.add_middleware(KnownRoutes, fastapi=app)  # innermost: the hot routes found without the router
    app.add_middleware(HeadAsGetMiddleware)
    if settings.cache_bytes:
        app.state.answer_cache = AnswerCache(settings.cache_bytes)
        app.add_middleware(
            AnswerCacheMiddleware,
            cache=app.state.answer_cache,
            metrics=metrics,
            writes=live.log_lengths,
            uncached=tuple(f"/v1/tables/{name}/" for name in front.tables),
        )
    if settings.read_api_key is not None:
        keys = auth.server_keys(settings)  # every kind reads; a write route's refusal names a write key
        app.add_middleware(auth.ReadKeyMiddleware, keys=keys, writes=write_routes(routes))
    if settings.cors_origins:
        app.add_middleware(
            JsonCORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["*"],
            expose_headers=EXPOSED,
        )
    app.add_middleware(RequestLimitsMiddleware, max_body_bytes=settings.max_body_bytes, limits=limits)
    # Every error of the OpenAI-compatible paths in OpenAI's shape and status, the one the metrics count
    app.add_middleware(OpenAIErrorsMiddleware)
    app.add_middleware(
        MetricsMiddleware, metrics=metrics, tables=table_names, fronted=scatter.metric_labels(front, fronting)
    )
    # Around the whole stack, Starlette's error middleware included: a 500 and its log line carry the request's id,
    # and the unexpected error behind it is logged once (http.logged_once), not again by uvicorn; so is a request
    # cancelled at the shutdown timeout, answered 503 there.
    build_stack = app.build_middleware_stack
    app.build_middleware_stack = lambda: RequestIdMiddleware(LoggedOnce(build_stack(), drain))  # type: ignore[method-assign]

    build_openapi = app.openapi
    documented: list[dict[str, Any]] = []  # the schema FastAPI cached, once the query models are added to it

    def openapi() -> dict[str, Any]:
        token = LIMITS.set(limits)  # the schema shows this app's max_k and max_batch
        try:
            schema = build_openapi()  # cached by FastAPI until a route is added
            if not documented or documented[0] is not schema:
                document_query_models(ROUTERS, schema)
                undeclare_422(schema)
                errors.document_envelope(schema)
                if front.tables:  # a request naming a sharded table is answered from its shards
                    errors.declare(schema, "/v1/tables/{table}", "shard_unavailable", "shard_timeout")
                if settings.read_api_key is not None:
                    auth.document_read_key(schema)
                documented[:] = [schema]
            return schema
        finally:
            LIMITS.reset(token)

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema
    return app


async def _shutting_down(_: Request) -> Response:
    return errors.error_response("not_ready", "the server is shutting down", shutting_down=True)


SHUTTING_DOWN = Route("/readyz", _shutting_down, methods=["GET"], include_in_schema=False)


def _mount_explorer(app: FastAPI) -> None:
    """The explorer page at ``/`` and its files under ``/static``."""
    app.mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static")

    @app.get("/", include_in_schema=False)
    async def explorer() -> Response:
        page = STATIC / "index.html"
        if page.is_file():
            return FileResponse(page)
        return HTMLResponse('<!doctype html><title>embedding-search</title><p>API docs: <a href="/docs">/docs</a>')


def app_from_env() -> FastAPI:
    """uvicorn factory: settings from the ``EMBEDDING_*`` environment."""
    # Under plain uvicorn a refusal is embedding-serve's one line (exit 1), not a traceback showing the values (keys).
    try:
        settings = Settings()
    except ValidationError as exc:
        raise SystemExit(own_line(describe_error(exc), format_from_env(os.environ))) from None
    except ValueError as exc:  # a key file (service.secret_files)
        raise SystemExit(own_line(f"invalid settings: {exc}", format_from_env(os.environ))) from None
    log_urls(key.decode("ascii") for keys in auth.server_keys(settings).values() for key in keys)
    app = create_app(settings)
    # Set by ``embedding-serve --workers N``: the process that passes SIGHUP on to every worker.
    supervisor = os.environ.get(SUPERVISOR_VARIABLE, "")
    app.state.supervisor_pid = int(supervisor) if supervisor.isdigit() else None
    return app
