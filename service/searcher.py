"""Approximate-index searches of overlapping requests, joined in one thread beside the event loop.

A request that comes alone searches on the event loop: a hand-off to a thread would only add latency. When
requests overlap (others reach their search within the same turn of the loop, or the thread is still busy or
was busy a moment ago), their searches go to one searcher thread, which takes up to ``MAX_BATCH`` queued
searches at a time and runs their kernels (``index.engine.table.Plan``: the FAISS part of a search) as one call per
table and plan key, and answers them together (one wake-up of the loop per round), while the event loop goes on
reading and answering other requests; each request finishes its own search (exclusions, token kinds) where it
is, so that the thread holds the GIL as little as it can. FAISS releases the
GIL while it searches, so one worker keeps a second core busy (more searched requests/s than searching on the
event loop: BENCHMARKS.md, section 2). On Linux the thread can run at a lower CPU priority
than the event loop (``nice``, ``EMBEDDING_SEARCHER_NICE``): the loop, which every request passes through, then
goes first among the worker's own threads, but every other process at normal priority goes first too, and on a
machine where others compute the searches starve (BENCHMARKS.md, section 6); so the default is the loop's own
priority.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass

import faiss
import numpy as np

from index.engine.door import Answers, Hits, Plan, Search, Table

BUSY_WINDOW = 0.002  # s: after an answer from the thread, keep handing off (the load is still on)
MAX_BATCH = 8  # searches per round of the thread: small rounds keep both threads busy (one round of all
# would leave the loop waiting while the thread searches, then the thread waiting while the loop answers)


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
                queries = first.search.queries if len(plans) == 1 else np.vstack([p.search.queries for p in plans])
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
