"""Where the engine's calls run, timed into the search-latency metric.

- :func:`search`: one engine request (``index.search``). A light one (a search of the approximate index) goes to
  the searcher (``service.searcher``): on the event loop when it comes alone, joined with the searches of
  overlapping requests in the searcher thread otherwise. Anything heavier runs as :func:`compute` does.
- :func:`compute`: any other engine work (a batch with its per-item parsing, exact scoring of every row) in a
  worker thread, at most ``app.state.heavy_calls`` at once (one per core); ``on_loop`` for calls of a few
  microseconds (one cosine), which a thread hand-off would only slow down.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import anyio.to_thread
import faiss
from fastapi import Request

from index.search import Answers, Search
from index.table import Table

T = TypeVar("T")


async def search(request: Request, table: Table, operation: str, search: Search) -> Answers:
    """``table.run(search)``, wherever it runs best."""
    if not table.is_light(search):
        return await compute(request, table, operation, lambda: table.run(search))
    started = time.perf_counter()
    answers: Answers = await request.app.state.searcher.run(table, search)
    request.app.state.metrics.observe_search(operation, table.name, time.perf_counter() - started)
    return answers


async def compute(request: Request, table: Table, operation: str, fn: Callable[[], T], on_loop: bool = False) -> T:
    """Run ``fn`` (an engine call): in a worker thread, or on the event loop with ``on_loop``."""
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
    # Heavy calls take turns, a few at a time: all at once they would share the CPU and all finish late.
    return await anyio.to_thread.run_sync(timed, limiter=request.app.state.heavy_calls)
