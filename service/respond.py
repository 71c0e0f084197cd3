"""Fast JSON responses, neighbour shaping, and where engine calls run: light single searches through the
searcher (``service.searcher``), heavy calls in worker threads."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import anyio.to_thread
import faiss
import numpy as np
import orjson
from fastapi import Request
from starlette.responses import JSONResponse

from index.table import Neighbor, RowFilters, Table

T = TypeVar("T")


class FastJSON(JSONResponse):
    """JSON rendered by orjson; numpy arrays (e.g. float32 rows) are serialised natively."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def neighbors(table: Table, hits: list[Neighbor]) -> list[dict[str, Any]]:
    labels = table.tokens.labels([i for i, _ in hits])
    out = [{"token": label, "id": i, "score": score} for label, (i, score) in zip(labels, hits, strict=True)]
    if table.metadata:  # e.g. a projector table's "kind" per word; model tables' readable form
        readable = table.metadata.get("readable")  # " heart" for "Ġheart", "beat" for "##beat"
        for item, (i, _) in zip(out, hits, strict=True):
            item["metadata"] = table.row_metadata(i)
            if readable is not None:
                item["readable"] = readable[i]
    return out


def is_light(table: Table, exact: bool = False, restrict: int | None = None) -> bool:
    """A single approximate-index search takes well under a millisecond: no worker thread for it."""
    return table.approximate and not exact and restrict is None


class SearchOptions(RowFilters):
    """What a search route passes to the engine beside the queries and ``k``: keywords of ``Table.search``."""

    exact: bool


async def search_one(
    request: Request,
    table: Table,
    operation: str,
    query: np.ndarray,
    k: int,
    exclude: Collection[int],
    options: SearchOptions,
) -> list[Neighbor]:
    """``table.search`` of one (1, dim) unit query with ``options`` (exact, restrict, skip_special,
    whole_words_only): a light one through the searcher, a heavy one as a heavy call."""
    if not is_light(table, options["exact"], options["restrict"]):
        hits = await compute(request, table, operation, lambda: table.search(query, k, exclude=[exclude], **options))
        return hits[0]
    drop = table.drop_flags(options["skip_special"], options["whole_words_only"])
    fetch = min(table.fetch_size(k, [exclude], drop), table.rows)
    started = time.perf_counter()
    scores, ids = await request.app.state.searcher.knn(table, query, fetch)
    request.app.state.metrics.observe_search(operation, table.name, time.perf_counter() - started)
    picked = table.pick(scores, ids, k, [exclude], drop, partial=fetch == table.rows)
    if picked is None:  # too many of the hits left out: widen the search (rare), as table.search does
        return table.search(query, k, exclude=[exclude], **options)[0]
    return picked[0]


async def compute(request: Request, table: Table, operation: str, fn: Callable[[], T], light: bool = False) -> T:
    """Run ``fn`` (an engine call), timed into the search-latency metric; heavy calls run in worker threads, at
    most ``app.state.heavy_calls`` at once (one per core)."""
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

    if light:
        return timed()
    # Heavy calls take turns, a few at a time: all at once they would share the CPU and all finish late.
    return await anyio.to_thread.run_sync(timed, limiter=request.app.state.heavy_calls)
