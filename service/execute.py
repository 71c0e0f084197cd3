"""Where the engine's calls run, timed into the search-latency metric.

- :func:`one` and :func:`batch`: queries through the engine's door (``index.engine.door``). A single plain query
  (a word's, a vector's, an analogy's; no filter, keyword or fusion) is split into its one engine request, run as
  :func:`search` runs it, and finished where the request is; anything else (a batch, a filtered, keyword, hybrid
  or diverse search, writes to merge) runs whole as :func:`compute` runs it.
- :func:`search`: one engine request (``index.engine.search``). A light one (a search of the approximate index) goes to
  the searcher (``service.searcher``): on the event loop when it comes alone, joined with the searches of
  overlapping requests in the searcher thread otherwise. Anything heavier runs as :func:`compute` does.
- :func:`compute`: any other engine work (a batch with its per-item parsing, exact scoring of every row) in a
  worker thread, at most ``app.state.heavy_calls`` at once (one per core); ``on_loop`` for calls of a few
  microseconds (one cosine), which a thread hand-off would only slow down. Long computations (``long=True``:
  t-SNE and UMAP projections, t-SNE map layouts) take slots of their own, ``app.state.long_calls``
  (``EMBEDDING_LAYOUT_SLOTS``), so they never hold the slots searches wait for; at most
  ``EMBEDDING_LAYOUT_QUEUE`` wait for one, and a request beyond them is a 503 ``overloaded`` at once.

Work that waited for a slot is not started when its client has gone meanwhile (status 499 in the request metrics);
work that can stop midway (a t-SNE projection) is given ``gone``, set when the client goes.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio
import faiss
from fastapi import Request

from index.engine import door
from index.engine.door import Answer, Answers, Delta, Failed, Query, Result, Search, Table
from index.errors import Abandoned
from service.errors import ApiError

log = logging.getLogger(__name__)

T = TypeVar("T")
WORKER_THREADS = 40  # anyio's default thread limit: the heavy and long slots bound what runs at once
# Each event loop's worker threads (an app's), as anyio keeps them: they go when the loop goes.
_WORKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ThreadPoolExecutor] = weakref.WeakKeyDictionary()


async def one(
    request: Request,
    table: Table,
    operation: str,
    query: Query,
    encoder: Table | None = None,
    delta: Delta | None = None,
) -> Result:
    """The result of one query, wherever it runs best; its error raises."""
    split = door.split(table, query, encoder, delta) if query.plain else None  # not plain: never split
    if split is None:
        answers = await compute(request, table, operation, lambda: _run(table, [query], encoder, delta))
    else:
        answers = split.finish(await search(request, table, operation, split.search))
        if _expects(query):  # an analogy's expected answer: every row scored
            await compute(request, table, f"{operation}_expect", lambda: door.expectations(table, [query], answers))
    (answer,) = answers
    if isinstance(answer, Failed):
        raise answer.error
    return answer


async def batch(
    request: Request,
    table: Table,
    operation: str,
    queries: list[Query],
    encoder: Table | None = None,
    delta: Delta | None = None,
) -> list[Answer]:
    """Each query's result or error, in order, in a worker thread."""
    return await compute(request, table, operation, lambda: _run(table, queries, encoder, delta))


def _run(table: Table, queries: list[Query], encoder: Table | None, delta: Delta | None) -> list[Answer]:
    expecting = any(_expects(query) for query in queries)  # read before the run: no call back here after it
    answers = door.run(table, queries, encoder, delta)
    if expecting:
        door.expectations(table, queries, answers)  # the analogies answered
    return answers


def _expects(query: Query) -> bool:
    """Whether ``query`` is an analogy with an expected answer to report (every row scored, after its search)."""
    return query.analogy is not None and query.analogy.expect is not None


async def search(request: Request, table: Table, operation: str, search: Search) -> Answers:
    """``table.run(search)``, wherever it runs best."""
    plan = table.light_plan(search)
    if plan is None:
        return await compute(request, table, operation, lambda: table.run(search))
    started = time.perf_counter()
    answers: Answers = await request.app.state.searcher.run_plan(plan)
    request.app.state.metrics.observe_search(operation, table.name, time.perf_counter() - started)
    return answers


async def compute(
    request: Request,
    table: Table,
    operation: str,
    fn: Callable[[], T],
    on_loop: bool = False,
    long: bool = False,
    check_client: bool = True,
    gone: threading.Event | None = None,
) -> T:
    """Run ``fn`` (an engine call): in a worker thread (a long one with ``long``), or on the event loop with
    ``on_loop``; not at all if, by the time it has a slot, its client has gone (unless ``check_client`` is off: work
    that other requests wait for too). ``gone`` is set if the client goes while ``fn`` runs, for work that can
    stop midway."""
    metrics = request.app.state.metrics
    threads = request.app.state.settings.threads

    def timed() -> T:
        if threads:  # OpenMP's thread count is per calling thread: set it in the thread that searches
            faiss.omp_set_num_threads(threads)
        started = time.perf_counter()
        try:
            return fn()
        finally:
            metrics.observe_search(operation, table.name, time.perf_counter() - started)

    if on_loop:
        return timed()
    state = request.app.state
    if long:
        limiter: anyio.CapacityLimiter = state.long_calls
        queue = state.settings.layout_queue
        if limiter.available_tokens == 0 and limiter.statistics().tasks_waiting >= queue:
            raise ApiError(
                "overloaded",
                f"{limiter.total_tokens} long computations (projections, maps) are running and {queue} waiting: "
                "retry in a moment",
            )
    else:
        # Heavy calls take turns, a few at a time: all at once they would share the CPU and all finish late.
        limiter = state.heavy_calls
    try:
        limiter.acquire_nowait()  # a free slot is taken without a turn of the loop (``async with`` yields one)
    except anyio.WouldBlock:
        await limiter.acquire()
    try:
        if check_client and await request.is_disconnected():
            log.info("%s %s: the client has gone, its work is not started", request.method, request.url.path)
            raise ApiError("client_closed_request", "the client closed the connection before its work started")
        if gone is None:
            return await _in_thread(timed)
        watching = asyncio.ensure_future(_watch(request, gone))
        try:
            return await _in_thread(timed)
        except Abandoned:
            log.info("%s %s: the client has gone, its work is stopped", request.method, request.url.path)
            raise
        finally:
            watching.cancel()
    finally:
        limiter.release()


def _workers(loop: asyncio.AbstractEventLoop) -> ThreadPoolExecutor:
    workers = _WORKERS.get(loop)
    if workers is None:
        workers = _WORKERS[loop] = ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="worker")
    return workers


async def _in_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in a worker thread with the request's context variables, awaited in one turn of the loop
    (``anyio.to_thread.run_sync`` takes three). A cancelled request still waits for its thread, which holds its
    slot."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(_workers(loop), contextvars.copy_context().run, fn)
    with anyio.CancelScope(shield=True):
        result = await future
    return result


async def _watch(request: Request, gone: threading.Event) -> None:
    """Set ``gone`` once the client disconnects (its request's body is read: what comes next is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()
