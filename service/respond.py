"""Fast JSON responses, neighbour shaping, and running engine calls off the event loop when they are heavy."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import faiss
import orjson
from fastapi import Request
from starlette.responses import JSONResponse

from index.table import Neighbor, Table

T = TypeVar("T")


class FastJSON(JSONResponse):
    """JSON rendered by orjson; numpy arrays (e.g. float32 rows) are serialised natively."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def neighbors(table: Table, hits: list[Neighbor]) -> list[dict[str, Any]]:
    tokens = table.tokens
    out = [{"token": tokens[i], "id": i, "score": score} for i, score in hits]
    if table.metadata:  # e.g. a projector table's "kind" per word; model tables' readable form
        readable = table.metadata.get("readable")  # " heart" for "Ġheart", "beat" for "##beat"
        for item, (i, _) in zip(out, hits, strict=True):
            item["metadata"] = table.row_metadata(i)
            if readable is not None:
                item["readable"] = readable[i]
    return out


def is_light(table: Table, queries: int, exact: bool = False, restrict: int | None = None) -> bool:
    """A single approximate-index search takes well under a millisecond: answer it on the event loop."""
    return queries <= 2 and table.approximate and not exact and restrict is None


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
