"""Where the engine's calls run, timed into the search-latency metric.

- :func:`one` and :func:`batch`: queries through the engine's door (``index.engine.door``). A single plain query
  (a word's, a vector's, an analogy's; no filter, keyword or fusion) is split into its one engine request (a
  ``VectorSearch`` or ``AnalogySearch`` of ``index.engine.table``) and finished where the request is: a light
  request (a search of the approximate index) goes to the :class:`Searcher`, on the event loop when it comes
  alone, joined with the searches of overlapping requests in the searcher thread otherwise; a heavier one runs
  as :func:`compute` runs it. Anything else (a batch, a filtered, keyword, hybrid or diverse search, writes to
  merge) runs whole as :func:`compute` runs it.
- :func:`compute`: any other engine work (a batch with its per-item parsing, exact scoring of every row) in a
  worker thread, at most ``app.state.heavy_calls`` at once (one per core); ``on_loop`` for calls of a few
  microseconds (one cosine), which a thread hand-off would only slow down. Long computations (``long=True``:
  t-SNE and UMAP projections, t-SNE map layouts) take slots of their own, ``app.state.long_calls``
  (``EMBEDDING_LAYOUT_SLOTS``), so they never hold the slots searches wait for; at most
  ``EMBEDDING_LAYOUT_QUEUE`` wait for one, and a request beyond them is a 503 ``overloaded`` at once.

The metric ``embedding_work`` counts the calls holding a slot and those waiting for one, by kind (heavy, long).
Work that waited for a slot is not started when its client has gone meanwhile (status 499 in the request metrics);
work that can stop midway (a t-SNE projection) is given ``gone``, set when the client goes.

The searcher: a request that comes alone searches on the event loop, as a hand-off to a thread would only add
latency. When requests overlap (others reach their search within the same turn of the loop, or the thread is
still busy or was busy a moment ago), their searches go to one searcher thread, which takes up to ``MAX_BATCH``
queued searches at a time and runs their kernels (``index.engine.table.Plan``: the FAISS part of a search) as one
call per table and plan key, and answers them together (one wake-up of the loop per round), while the event loop
goes on reading and answering other requests; each request finishes its own search (exclusions, token kinds)
where it is, so that the thread holds the GIL as little as it can. FAISS releases the GIL while it searches, so
one worker keeps a second core busy (more searched requests/s than searching on the event loop: BENCHMARKS.md,
section 2). On Linux the thread can run at a lower CPU priority than the event loop (``nice``,
``EMBEDDING_SEARCHER_NICE``): the loop, which every request passes through, then goes first among the worker's
own threads, but every other process at normal priority goes first too, and on a machine where others compute
the searches starve (BENCHMARKS.md, section 6); so the default is the loop's own priority.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import anyio
import faiss
import numpy as np
from fastapi import Request

from index.engine import door
from index.engine.door import Answer, Answers, Delta, Failed, Hits, Plan, Query, Result, Search, Table
from index.errors import Abandoned
from service.errors import ApiError

log = logging.getLogger(__name__)

T = TypeVar("T")
BUSY_WINDOW = 0.002  # s: after an answer from the thread, keep handing off (the load is still on)
MAX_BATCH = 8  # searches per round of the thread: small rounds keep both threads busy (one round of all
# would leave the loop waiting while the thread searches, then the thread waiting while the loop answers)
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
    split = door.split(table, query, encoder, delta) if query.plain else None
    if split is None:  # not plain, or writes to merge: the door runs it whole
        answers = await compute(request, table, operation, lambda: _run(table, [query], encoder, delta))
    else:
        plan = table.light_plan(split.search)
        if plan is None:
            hits = await compute(request, table, operation, lambda: table.run(split.search))
        else:
            started = time.perf_counter()
            hits = await request.app.state.searcher.run_plan(plan)
            request.app.state.metrics.observe_search(operation, table.name, time.perf_counter() - started)
        answers = split.finish(hits)
        if split.expects:  # an analogy's expected answer: every row scored
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
    expecting = False
    for query in queries:  # read before the run: nothing here is called again after it
        expecting = expecting or door.expecting(query)
    answers = door.run(table, queries, encoder, delta)
    if expecting:
        door.expectations(table, queries, answers)  # the analogies answered
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
    ``on_loop``; not at all if it waited for a slot and its client has gone meanwhile (unless ``check_client`` is
    off: work that other requests wait for too). A slot free at once is taken without asking: the question costs a
    turn of the loop (the server's ``receive`` waits, and is cancelled), and the client was there a moment ago.
    ``gone`` is set if the client goes while ``fn`` runs, for work that can stop midway."""
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
    kind = "long" if long else "heavy"
    waited = False
    try:
        limiter.acquire_nowait()  # a free slot is taken without a turn of the loop (``async with`` yields one)
    except anyio.WouldBlock:
        waited = True
        waiting = metrics.children(metrics.work, kind, "waiting")
        waiting.inc()
        try:
            await limiter.acquire()
        finally:
            waiting.dec()
    running = metrics.children(metrics.work, kind, "running")
    running.inc()
    try:
        if waited and check_client and await request.is_disconnected():
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
        running.dec()
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


# ------------------------------------------------------------------------------------ the searcher
@dataclass
class Job:
    plan: Plan
    answer: asyncio.Future[Hits]


class Searcher:
    """``await searcher.run(table, search)``: the answers of ``table.run(search)``, for light searches
    (approximate-index ones, whose answers do not depend on the queries searched with them). The search's plan
    (``Table.plan``) runs whole on the loop when it comes alone; otherwise its kernel runs in the searcher thread
    with those of the overlapping requests, and its finish back on the loop."""

    def __init__(self, threads: int | None = None, nice: int = 0) -> None:
        self._threads = threads  # OpenMP threads of the searcher thread (None: FAISS's default)
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()  # None: stop
        self._gathering: list[Job] | None = None  # jobs of one loop turn, while its first job waits
        self._outstanding = 0  # jobs handed to the thread and not yet answered
        self._last_answer = -BUSY_WINDOW
        self._thread = threading.Thread(target=self._run, name="searcher", daemon=True)
        self._thread.start()
        lower_priority(self._thread.native_id, nice)

    async def run(self, table: Table, search: Search) -> Answers:
        return await self.run_plan(table.plan(search))

    async def run_plan(self, plan: Plan) -> Answers:
        """:meth:`run` given the search's plan (``Table.light_plan``)."""
        job = Job(plan, asyncio.get_running_loop().create_future())
        if self._outstanding or time.perf_counter() - self._last_answer < BUSY_WINDOW:
            self._hand_off([job])
            return plan.finish(await job.answer)
        if self._gathering is not None:
            self._gathering.append(job)
            return plan.finish(await job.answer)
        self._gathering = [job]
        try:
            await asyncio.sleep(0)  # one turn of the loop: requests already read reach their search too
        except asyncio.CancelledError:  # this request went away: the others still need their answers
            others, self._gathering = self._gathering[1:], None
            if others:
                self._hand_off(others)
            raise
        gathered, self._gathering = self._gathering, None
        if len(gathered) == 1:
            return plan.run()
        self._hand_off(gathered)
        return plan.finish(await job.answer)

    def close(self) -> None:
        """Stop the thread once it has answered every search handed to it."""
        self._queue.put(None)
        self._thread.join()

    def _hand_off(self, jobs: list[Job]) -> None:
        self._outstanding += len(jobs)
        for job in jobs:
            self._queue.put(job)

    def _run(self) -> None:
        if self._threads:
            faiss.omp_set_num_threads(self._threads)  # per calling thread
        while True:
            job = self._queue.get()  # waits without the GIL
            jobs: list[Job] = []
            while job is not None:
                jobs.append(job)
                if len(jobs) == MAX_BATCH or self._queue.empty():
                    break
                job = self._queue.get()
            if jobs:
                jobs[0].answer.get_loop().call_soon_threadsafe(self._answer, jobs, self._search(jobs))
            if job is None:
                return

    @staticmethod
    def _search(jobs: list[Job]) -> list[Hits | BaseException]:
        """One kernel call per (table, plan key) for all its jobs (each call releases and then waits to take back
        the GIL, which the busy loop holds: one call per round, not one per query). An approximate index answers
        each row of a batch exactly as it answers that query alone. A failure answers only its call's jobs."""
        groups: dict[tuple[int, object], list[int]] = {}
        for position, job in enumerate(jobs):
            groups.setdefault((id(job.plan.table), job.plan.key()), []).append(position)
        answers: list[Hits | BaseException] = [RuntimeError("not searched")] * len(jobs)
        for positions in groups.values():
            plans = [jobs[p].plan for p in positions]
            first = plans[0]
            try:
                queries = first.search.queries if len(plans) == 1 else np.concatenate([p.search.queries for p in plans])
                scores, ids = first.table.knn(queries, first.fetch, first.search.options)
            except Exception as exc:  # handed to the requests, raised there
                for p in positions:
                    answers[p] = exc
                continue
            start = 0
            for p, plan in zip(positions, plans, strict=True):
                stop = start + len(plan.search)
                answers[p] = (scores[start:stop], ids[start:stop])
                start = stop
        return answers

    def _answer(self, jobs: list[Job], answers: list[Hits | BaseException]) -> None:
        self._outstanding -= len(jobs)
        self._last_answer = time.perf_counter()
        for job, answer in zip(jobs, answers, strict=True):
            if job.answer.done():  # the request went away (cancelled)
                continue
            if isinstance(answer, BaseException):
                job.answer.set_exception(answer)
            else:
                job.answer.set_result(answer)


def lower_priority(thread_id: int | None, nice: int) -> None:
    """Raise the nice value of the thread ``thread_id`` (its native id) by ``nice``, up to 19. Linux only: there
    the nice value belongs to each thread (elsewhere the id would name a process). Refused (e.g. by a seccomp
    profile): the thread keeps the process's priority."""
    if not nice or thread_id is None or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, thread_id, min(19, os.getpriority(os.PRIO_PROCESS, thread_id) + nice))
