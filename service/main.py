"""``embedding-serve``: run the API with uvicorn over the tables in a data directory.

Command-line options override the ``EMBEDDING_*`` environment; workers re-read the environment through the
app factory ``service.app:app_from_env``. Table files are memory-mapped read-only, so workers share pages.
SIGHUP makes every worker reload its tables (see ``service.reload``). SIGTERM (or SIGINT) makes every worker fail
readiness, serve ``EMBEDDING_DRAIN_SECONDS`` more, finish its requests in flight and exit 0 (``service.http.drain``).
The HTTP protocol (``service.http.protocol``) limits request heads, their time and the connections per worker.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import difflib
import gc
import logging
import logging.config
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, MutableMapping
from types import FrameType
from typing import Any, NoReturn

from pydantic import ValidationError

from service.logs import format_from_env, log_config, say
from service.settings import (
    INTERNAL_VARIABLES,
    KEY_FILE_VARIABLES,
    SUPERVISOR_VARIABLE,
    Settings,
    cores,
    describe_error,
)
from service.shard_settings import ShardSettings

APP = "service.app:app_from_env"
M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc mallopt options (malloc.h)
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h): the signal a process gets when its parent thread exits
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


class Parser(argparse.ArgumentParser):
    """argparse's, whose refusal of the command line is one JSON line (still exit 2) when logs are JSON."""

    log_format = "plain"

    def error(self, message: str) -> NoReturn:
        if self.log_format != "json":
            super().error(message)  # the usage, then the message
        say(message, self.log_format)
        sys.exit(2)


def requested_format(argv: list[str] | None) -> str:
    """The log format the command line (else the environment) asks for, before the command line is parsed."""
    early = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    early.add_argument("--log-format")
    try:
        asked = early.parse_known_args(argv)[0].log_format
    except argparse.ArgumentError:  # --log-format without its value: the parser proper says so
        asked = None
    return format_from_env(os.environ) if asked is None else asked


def parser() -> Parser:
    p = Parser(
        prog="embedding-serve",
        description="Serve every embedding table in a data directory as a JSON API (docs at /docs). "
        "The settings are environment variables (EMBEDDING_DATA_DIR, EMBEDDING_MAX_K, ...: README.md, "
        "Configuration); an option naming one overrides it. --host, --port, --workers and --no-access-log are "
        "options only.",
    )
    p.add_argument("--data-dir", help="directory of built tables (EMBEDDING_DATA_DIR, default ./data)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    p.add_argument("--workers", type=int, default=1, help="worker processes sharing the mapped tables (default 1)")
    p.add_argument(
        "--threads", type=int, help="FAISS/BLAS threads per worker (EMBEDDING_THREADS; default OMP_NUM_THREADS, else 1)"
    )
    p.add_argument("--tables", help="comma-separated table names to load (EMBEDDING_TABLES; default all)")
    p.add_argument(
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        help="EMBEDDING_LOG_LEVEL (default info)",
    )
    p.add_argument("--log-format", choices=["plain", "json"], help="EMBEDDING_LOG_FORMAT (default plain)")
    p.add_argument("--no-access-log", action="store_true", help="do not log one line per request")
    return p


def settings_problem(read: Callable[[], object]) -> str:
    """What is wrong with the settings ``read()`` reads, in one line naming each variable; "" when nothing."""
    try:
        read()
    except ValidationError as exc:
        return describe_error(exc)
    except ValueError as exc:
        return f"invalid settings: {exc}"
    return ""


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A line for each ``EMBEDDING_*`` variable that is no setting, naming the nearest one: the settings ignore
    such a variable, and a misspelt one would change nothing without a word (``EMBEDDING_READ_KEY`` would leave
    every read open)."""
    known = {f"EMBEDDING_{name.upper()}" for model in (Settings, ShardSettings) for name in model.model_fields}
    known |= INTERNAL_VARIABLES | KEY_FILE_VARIABLES
    lines = []
    for variable in sorted(v for v in environ if v.upper().startswith("EMBEDDING_") and v.upper() not in known):
        nearest = difflib.get_close_matches(variable.upper(), known, n=1)
        hint = f" (did you mean {nearest[0]}?)" if nearest else ""
        lines.append(f"{variable} is not a setting of embedding-serve and is ignored{hint}")
    return lines


def metrics_dir_problem(environ: MutableMapping[str, str]) -> str:
    """What is wrong with ``PROMETHEUS_MULTIPROC_DIR`` (or prometheus_client's older lower-case name), "" when
    nothing. Once it is set, even empty, prometheus_client keeps every metric in files there: a directory that is
    not there or not writable fails every request, and an empty name writes them into the working directory, so
    an empty one is taken as unset (``--workers N`` then makes one)."""
    for variable in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
        directory = environ.get(variable)
        if directory is not None and not directory.strip():
            del environ[variable]
        elif directory is not None and not os.path.isdir(directory):
            return f"{variable}: {directory} is not a directory (where the workers keep their metrics)"
        elif directory is not None and not os.access(directory, os.W_OK | os.X_OK):
            return f"{variable}: {directory} is not writable by this user (where the workers keep their metrics)"
    return ""


def listen_problem(host: str, port: int) -> str:
    """Why ``host:port`` cannot be listened on (in use, an address of no interface here, a name that does not
    resolve), bound as uvicorn binds it; "" when it can. uvicorn would say so only once the tables are loaded."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # uvicorn's rule
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:  # socket.gaierror included
            address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
            return f"cannot listen on {address}: {exc.strerror or exc}"
    return ""


def threads_per_worker() -> int:
    """EMBEDDING_THREADS, else OMP_NUM_THREADS, else 1: a worker answers concurrent requests on several threads,
    and BLAS threads per request would fight over the cores (concurrent exact queries slow down by orders of
    magnitude with two each), while a whole analogy batch gains little from a second thread (BENCHMARKS.md)."""
    for variable in ("EMBEDDING_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(variable, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def tune_malloc() -> None:
    """glibc's allocator, unless its environment says otherwise: two arenas instead of eight per core, and
    buffers over 128 KiB always mapped and unmapped (an exact search's score buffer for 400,000 rows is 1.6 MB;
    glibc's default would keep such buffers in the heap once freed). A worker then holds about half the private
    memory after exact queries (bench/workers_memory.py, BENCHMARKS.md). Forked workers inherit the settings.

    Arrow allocates through the same allocator (``ARROW_DEFAULT_MEMORY_POOL=system``) rather than its own pool,
    which keeps what a filter's evaluation allocated over a documents table's columns (BENCHMARKS.md, section 8).
    """
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # read when pyarrow first allocates
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:  # not glibc (e.g. musl)
        return
    settings = (("MALLOC_ARENA_MAX", M_ARENA_MAX, 2), ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, 128 << 10))
    for variable, option, value in settings:
        if variable not in os.environ:
            libc.mallopt(option, value)


def main(argv: list[str] | None = None) -> int:
    # SIGTERM during the start-up ends it at once, exit 0. As a container's PID 1 the process would otherwise ignore
    # SIGTERM until a handler is in place, and the pod wait out its grace period. uvicorn installs its own handlers
    # once it serves (graceful shutdown), and raises the signal again with this one when done: exit 0 then too.
    previous = signal.signal(signal.SIGTERM, _stopped)
    # SIGHUP (reload the tables) is ignored until the app, or the workers' supervisor, handles it: a reload before
    # the tables are read is moot, and one must not stop the server. A deferred index build started below sends
    # one to this process when it publishes (service.indexing), at any moment of the start-up.
    previous_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # Start-up makes long-lived objects only (modules, schemas, routes, the tables' labels): the collector's passes
    # over them would find almost nothing. The app's lifespan collects once and freezes them (service.app), then
    # turns the collector back on; so does the end of the start-up here, whatever its outcome.
    gc.disable()
    try:
        return _main(argv)
    finally:
        gc.enable()
        if previous is not None:  # the caller's own handlers back (a test calling main in its process)
            signal.signal(signal.SIGTERM, previous)
        if previous_hup is not None:
            signal.signal(signal.SIGHUP, previous_hup)


def _main(argv: list[str] | None) -> int:
    log_format = requested_format(argv)  # of the lines before logging is configured
    command_line = parser()
    command_line.log_format = log_format
    args = command_line.parse_args(argv)
    if args.workers < 1:
        say("--workers must be at least 1", log_format)
        return 2
    if not 0 <= args.port <= 65535:
        say(f"--port must be from 0 to 65535, not {args.port}", log_format)
        return 2
    tune_malloc()
    overrides = {
        "EMBEDDING_DATA_DIR": args.data_dir,
        "EMBEDDING_THREADS": args.threads,
        "EMBEDDING_TABLES": args.tables,
        "EMBEDDING_LOG_LEVEL": args.log_level,
        "EMBEDDING_LOG_FORMAT": args.log_format,
    }
    for variable, value in overrides.items():
        if value is not None:
            os.environ[variable] = str(value)
    for line in unknown_variables(os.environ):  # before a refusal: a misspelt variable may be why
        say(line, log_format, logging.WARNING)
    problem = settings_problem(Settings)  # before EMBEDDING_THREADS is read and written again below
    if problem:
        say(problem, log_format)
        return 2
    # Before numpy/FAISS load (in the factory), so BLAS and OpenMP start with this many threads.
    threads = threads_per_worker()
    os.environ["EMBEDDING_THREADS"] = str(threads)
    for variable in THREAD_VARIABLES:
        os.environ[variable] = str(threads)
    from service.shard_settings import front_settings  # here: a front's check loads numpy, which reads them

    problem = settings_problem(front_settings)  # EMBEDDING_SHARDS, ...: checked here, not in every worker
    if problem:
        say(problem, log_format)
        return 2
    problem = metrics_dir_problem(os.environ) or listen_problem(args.host, args.port)  # before the tables load
    if problem:
        say(problem, log_format)
        return 2
    settings = Settings()
    if args.workers * threads > cores():
        say(f"{args.workers} workers x {threads} threads exceeds {cores()} cores", log_format, logging.WARNING)
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = tempfile.mkdtemp(prefix="embedding-metrics-")
        atexit.register(shutil.rmtree, metrics_dir, ignore_errors=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    start_deferred_builds(settings)
    start_compaction(settings)

    # The HTTP stack (uvicorn, FastAPI) once the settings are known to be good: a wrong one stops the server at once.
    from service.http.protocol import ConnectionLimits, JsonErrorsProtocol

    limits = ConnectionLimits(
        settings.max_header_bytes,
        settings.header_timeout,
        settings.max_connections,
        settings.body_timeout,
        settings.send_timeout,
    )
    options: dict[str, Any] = {
        "factory": True,
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "log_config": log_config(settings.log_format, settings.log_level),
        "log_level": settings.log_level,
        "access_log": not args.no_access_log,
        "server_header": False,
        "http": JsonErrorsProtocol.with_limits(limits),  # uvicorn's httptools protocol, limits and JSON refusals
        "ws": "none",  # no WebSocket routes: an upgrade request is answered as the plain request it also is
        "h11_max_incomplete_event_size": settings.max_header_bytes,  # the same limit, should h11 ever be used
        "timeout_keep_alive": settings.keep_alive_timeout,
        "timeout_graceful_shutdown": settings.shutdown_timeout,
    }
    if args.workers == 1:
        os.environ.pop(SUPERVISOR_VARIABLE, None)
        import uvicorn

        uvicorn.run(APP, **options)  # SIGHUP reaches the app itself, which reloads its tables
    else:
        serve_workers(options, settings.drain_seconds + settings.shutdown_timeout + WORKER_EXIT_MARGIN_SECONDS)
    return 0


def _stopped(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def start_deferred_builds(settings: Settings) -> None:
    """Build, in the background, the indexes that tables' builds deferred (``service.indexing``), at start-up and
    as such tables are published: one process for the whole server, whatever the number of workers, reloading
    them all when an index is published."""
    if not settings.build_deferred:
        return
    from service import indexing

    logging.config.dictConfig(log_config(settings.log_format, settings.log_level))  # uvicorn's, a bit sooner
    indexing.start(settings.data_dir, settings.tables, settings.watch_seconds)


def start_compaction(settings: Settings) -> None:
    """Compact documents tables whose writes pass EMBEDDING_COMPACT_ROWS or EMBEDDING_COMPACT_SECONDS
    (``service.compacting``): one thread for the whole server, which is sent SIGHUP after each compaction."""
    if not settings.write_keys or not (settings.compact_rows or settings.compact_seconds):
        return
    from service.compacting import AutoCompaction

    logging.config.dictConfig(log_config(settings.log_format, settings.log_level))
    compaction = AutoCompaction(settings.data_dir, settings.compact_rows, settings.compact_seconds)
    compaction.start()
    atexit.register(compaction.stop)


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
    import pickle
    import time

    import uvicorn
    from uvicorn.supervisors import Multiprocess, multiprocess

    class Worker(multiprocess.Process):
        """uvicorn's worker, whose end of its health-check pipe the supervisor closes once the worker holds it:
        when the worker dies, the pipe closes with it, and a health check waiting on it (for up to
        ``WORKER_SILENCE_SECONDS``, as one of a busy worker may) ends at once and the worker is replaced. With the
        supervisor's copy open, a worker killed during the check (the kernel's OOM killer picks a busy one) went
        unreplaced until the check's timeout, and the other workers' deaths with it."""

        def start(self) -> None:
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
                return started
            except (OSError, EOFError, pickle.UnpicklingError):
                return None

    # uvicorn's supervisor creates its workers through this name (init, restart, a dead worker's replacement)
    setattr(multiprocess, "Process", Worker)  # noqa: B010  (an assignment mypy reads as redefining the class)

    class ReloadingSupervisor(Multiprocess):
        def keep_subprocess_alive(self) -> None:
            """uvicorn's restart of dead workers, then each dead worker's live gauges (the work in flight) taken out
            of ``/metrics``, which would otherwise count it for ever."""
            before = {p.pid for p in self.processes}
            super().keep_subprocess_alive()
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                from prometheus_client import multiprocess

                for pid in before - {p.pid for p in self.processes}:
                    if pid is not None:
                        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]  # unannotated there

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
            log = logging.getLogger("uvicorn.error")
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
            pids = [p.pid for p in self.processes if p.pid is not None and p.process.is_alive()]
            logging.getLogger("uvicorn.error").info("Received SIGHUP, workers %s reload their tables.", pids)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGHUP)

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
    signal.signal(signal.SIGTERM, _stopped)
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor:  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
