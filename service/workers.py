"""``embedding-serve --workers N``: uvicorn's worker supervisor over workers forked from it, which share the imported
libraries' memory. SIGHUP is passed on to every worker (each reloads its tables), signals are handled while a health
check waits on a silent worker, a worker that dies is replaced (at once, or after a wait when the workers of its
slot keep dying at their start: ``service.restarts``) and the others reload once its replacement (or a worker
SIGTTIN adds) serves, a hung one is killed once its minute of silence (or, when stopping, its shutdown's time) is
over, and the workers stop with the supervisor however it ends.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
from typing import Any

from index.progress import stop_with_parent
from service.main import APP, exit_at_once
from service.restarts import RestartWaits
from service.settings import SUPERVISOR_VARIABLE

# How long a worker may leave the supervisor's health check unanswered before it is killed as hung and replaced.
# uvicorn's default kills workers that are only slow, e.g. starved of CPU on a loaded host or hashing a large
# table at start-up: the requests they were answering are lost and the new worker starts over.
WORKER_SILENCE_SECONDS = 60
# How long, past its drain and its shutdown timeout, a worker sent SIGTERM may take to exit before it is killed.
WORKER_EXIT_MARGIN_SECONDS = 5


def serve_workers(options: dict[str, Any], exit_seconds: float) -> None:
    """uvicorn's worker supervisor, except that SIGHUP is passed on to every worker (each reloads its tables)
    instead of restarting them all, and that a worker still running ``exit_seconds`` after the supervisor sent it
    SIGTERM is killed; the workers learn the supervisor's pid to ask it for a reload themselves."""
    import time

    import uvicorn
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess, multiprocess

    log = logging.getLogger("uvicorn.error")

    class Worker(multiprocess.Process):
        """uvicorn's worker, whose end of its health-check pipe the supervisor closes once the worker holds it:
        when the worker dies, the pipe closes with it, and a health check waiting on it (for up to
        ``WORKER_SILENCE_SECONDS``, as one of a busy worker may) ends at once and the worker is replaced. With the
        supervisor's copy open, a worker killed during the check (the kernel's OOM killer picks a busy one) went
        unreplaced until the check's timeout, and the other workers' deaths with it."""

        late = ""  # why it started after the server's first workers (a dead one's replacement, SIGTTIN): the
        # others reload once it serves, and its failure to start does not stop the supervisor
        serving = False  # its last health check said its server has started (its tables loaded)
        mourned = False  # dead, its death handled: its slot waits for the replacement's turn
        started_at = 0.0  # time.monotonic()

        def start(self) -> None:
            self.started_at = time.monotonic()
            super().start()
            self.child_conn.close()  # forked: the worker has its own copy, and no worker forked later inherits it

        def _healthcheck(self, timeout: float) -> bool | None:
            """uvicorn's check, whose wait for the answer is cut in half seconds, between which the supervisor
            handles the SIGTERM, SIGINT or SIGHUP that came meanwhile: while it waited out one silent worker (a
            minute), the others went that long without their SIGTERM or SIGHUP. Once the supervisor is exiting,
            the wait ends, and the worker is stopped as the others are."""
            try:
                self.parent_conn.send(b"ping")
                deadline = time.monotonic() + timeout
                while not self.parent_conn.poll(min(max(deadline - time.monotonic(), 0), 0.5)):
                    supervisor.handle_urgent_signals()
                    if supervisor.should_exit.is_set():
                        return True  # as good as alive: not killed as hung, but sent SIGTERM
                    if time.monotonic() >= deadline:
                        return None
                started: bool = self.parent_conn.recv()
                self.serving = started is True
                return started
            except Exception:  # the pipe closed or broke, or the answer was garbled (its own worker's): no answer
                return None

    # uvicorn's supervisor creates its workers through this name (init, restart, a dead worker's replacement)
    setattr(multiprocess, "Process", Worker)  # noqa: B010  (an assignment mypy reads as redefining the class)

    class ReloadingSupervisor(Multiprocess):
        def __init__(self, config: uvicorn.Config, sockets: list[socket.socket]) -> None:
            super().__init__(config, sockets)
            self.waits = RestartWaits()

        def keep_subprocess_alive(self) -> None:
            """uvicorn's replacement of dead (and hung) workers, with three changes. A worker that died soon after
            its start is replaced after a wait, which doubles while its slot's workers keep dying so
            (``service.restarts``); the others serve on meanwhile. The failure to start of a replacement, or of a
            worker SIGTTIN added, does not stop the supervisor (uvicorn's rule for a server that never started) but
            waits its turn. Once such a worker serves, the others reload: it loaded the tables as they are on disk
            now, where the version they serve may be gone (a publish removes it), and every worker answers from the
            same version. Each dead worker's live gauges (the work in flight) are taken out of ``/metrics``, which
            would otherwise count it for ever."""
            for idx, worker in enumerate(self.processes):
                if self.should_exit.is_set():
                    return  # exiting: no worker is replaced
                assert isinstance(worker, Worker)
                if worker.mourned:
                    if self.waits.waiting(idx, time.monotonic()):
                        continue
                elif worker.is_alive(timeout=self.config.timeout_worker_healthcheck):
                    if worker.late and worker.serving:
                        others = [w for w in self.processes if w is not worker]
                        self.reload(others, f"Child process [{worker.pid}] serves {worker.late}")
                        worker.late = ""
                    continue
                else:
                    worker.kill()  # hung, or dead
                    worker.join()
                    if worker.exitcode == STARTUP_FAILURE and not worker.late:
                        log.error("Child process [%s] failed to start, stopping the parent process.", worker.pid)
                        self.should_exit.set()  # the server never started: its app, or its socket, is broken
                        return
                    if self.should_exit.is_set():
                        return
                    self.metrics_of_dead(worker.pid)
                    lived = time.monotonic() - worker.started_at
                    wait = self.waits.died(idx, lived, time.monotonic())
                    if wait:
                        worker.mourned = True
                        log.warning(
                            "Child process [%s], started %.1f s ago, died (exit code %s): replacing it in %.1f s",
                            *(worker.pid, lived, worker.exitcode, wait),
                        )
                        continue
                    log.info("Child process [%s] died", worker.pid)
                replacement = Worker(self.config, self.sockets)
                replacement.late = "in place of a dead one"
                replacement.start()
                self.processes[idx] = replacement

        def metrics_of_dead(self, pid: int | None) -> None:
            if pid is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # unannotated there

        def reload(self, workers: list[multiprocess.Process], why: str) -> None:
            """SIGHUP to each of ``workers`` alive: each reloads its tables."""
            pids = [w.pid for w in workers if w.pid is not None and w.process.is_alive()]
            log.info("%s, workers %s reload their tables.", why, pids)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGHUP)

        # uvicorn queues each signal its handler catches and handles the queue every half second: a SIGTERM that
        # reaches the process twice (to it and to its process group, as timeout(1) sends it) would log its exit
        # twice. Once exiting, another SIGTERM or SIGINT is the same request.
        def handle_term(self) -> None:
            if not self.should_exit.is_set():
                super().handle_term()

        def handle_int(self) -> None:
            if not self.should_exit.is_set():
                super().handle_int()

        def join_all(self) -> None:
            """uvicorn's wait for the workers sent SIGTERM to exit, up to ``exit_seconds`` in all: a worker still
            running then (hung, its event loop stuck, or stopped) is killed, instead of holding the supervisor, and
            the server's exit with it, for ever."""
            deadline = time.monotonic() + exit_seconds
            for worker in self.processes:
                log.info("Waiting for child process [%s]", worker.pid)
                worker.process.join(max(deadline - time.monotonic(), 0))
                if worker.exitcode is None:
                    log.warning("Child process [%s] did not exit in %.0f s, killing it", worker.pid, exit_seconds)
                    worker.kill()
                    worker.process.join()

        def handle_urgent_signals(self) -> None:
            """The SIGTERM, SIGINT and SIGHUP queued, handled (in the order they came); the others wait for the
            supervisor's loop, as uvicorn's handling of SIGTTIN and SIGTTOU changes the workers' list."""
            for sig in [sig for sig in self.signal_queue if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)]:
                self.signal_queue.remove(sig)
                getattr(self, f"handle_{multiprocess.SIGNALS[sig].lower()}")()

        def handle_hup(self) -> None:
            self.reload(self.processes, "Received SIGHUP")

        def handle_ttin(self) -> None:
            """uvicorn's added worker, which loads the tables as they are on disk now, as a replacement does."""
            super().handle_ttin()
            added = self.processes[-1]
            assert isinstance(added, Worker)
            added.late = "added on SIGTTIN"

        def handle_ttou(self) -> None:
            """uvicorn's removal of the last worker, its slot's wait with it: a worker SIGTTIN adds later in that slot
            starts with none."""
            slots = len(self.processes)
            super().handle_ttou()
            if len(self.processes) < slots:
                self.waits.forget(len(self.processes))

    os.environ[SUPERVISOR_VARIABLE] = str(os.getpid())
    config = uvicorn.Config(APP, **options, timeout_worker_healthcheck=WORKER_SILENCE_SECONDS)
    preload_for_fork()
    supervisor = ReloadingSupervisor(config, sockets=[config.bind_socket()])
    supervisor.run()


def preload_for_fork() -> None:
    """Import what a worker imports once, in the supervisor, and fork the workers from it instead of spawning
    fresh interpreters: the imported modules' pages are then shared by every worker (copy-on-write), which saves
    most of a worker's private memory. Nothing here starts a thread, so forking is safe; each worker still builds
    its own app and maps the tables itself. A forked worker also inherits the supervisor's SIGHUP handler, so a
    SIGHUP that reaches it before its app handles them does no harm (its tables are not read yet, or the app
    reloads once they are: ``service.reload``)."""
    import multiprocessing

    import pyarrow
    from uvicorn import _subprocess
    from uvicorn.supervisors import multiprocess

    import service.app  # noqa: F401  (numpy, FAISS, FastAPI, pydantic: the bulk of a worker's memory)

    pyarrow.array([0])  # pyarrow imports pandas (when installed) on its first array: here, once, for all workers

    fork = multiprocessing.get_context("fork")
    supervisor = os.getpid()

    def worker_started(**kwargs: Any) -> None:
        stop_with_supervisor(supervisor)
        _subprocess.subprocess_started(**kwargs)

    def forked_worker(config: Any, target: Any, sockets: list[socket.socket]) -> Any:
        kwargs = {"config": config, "target": target, "sockets": sockets, "stdin_fileno": None}
        return fork.Process(target=worker_started, kwargs=kwargs)

    # uvicorn's Process creates its worker through this name (imported there, so not among the module's exports)
    multiprocess.get_subprocess = forked_worker  # type: ignore[attr-defined]
    gc.freeze()  # keep the collector from touching (and so copying) the shared objects in every worker
    gc.enable()  # the supervisor's own objects are collected as usual (main turned the collector off)


def stop_with_supervisor(supervisor: int) -> None:
    """In a worker just forked: SIGTERM when the supervisor dies (Linux), so the worker drains and exits as on
    the supervisor's own SIGTERM. Otherwise a supervisor killed outright (kill -9, the OOM killer) left its workers
    serving for ever, orphans holding the port: a new ``embedding-serve`` could not listen on it.

    Until uvicorn takes SIGTERM over, it ends the worker at once, exit 0 (nothing served yet, nothing to drain):
    the handler inherited from the supervisor would only queue it where nothing reads it."""
    signal.signal(signal.SIGTERM, exit_at_once)
    stop_with_parent(supervisor)
