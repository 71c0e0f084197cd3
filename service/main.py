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
import errno
import gc
import logging
import logging.config
import os
import re
import resource
import shutil
import signal
import socket
import sys
from collections.abc import Callable, Mapping, MutableMapping
from types import FrameType
from typing import Any, NoReturn

from pydantic import ValidationError

from index import threads
from index.errors import counted
from service.logs import format_from_env, log_config, say
from service.settings import (
    INTERNAL_VARIABLES,
    KEY_FILE_VARIABLES,
    SUPERVISOR_VARIABLE,
    Settings,
    cores,
    describe_error,
    memory,
)
from service.shard_settings import ShardSettings

APP = "service.app:app_from_env"
WORKERS_PER_CORE = 4  # the most worker processes a core is given (a typo such as --workers 1000 is refused)
M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc mallopt options (malloc.h)
# The descriptors a worker holds beside its connections: its tables' mapped files, the logs, pipes, its event loop's
SPARE_DESCRIPTORS = 128
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
OMP_LEVEL = re.compile(r"[ \t\n\v\f\r]*\+?([0-9]+)[ \t\n\v\f\r]*")  # one level's threads, as libgomp's strtoul reads it


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


def settings_problem(read: Callable[[], object], options: Mapping[str, str] | None = None) -> str:
    """What is wrong with the settings ``read()`` reads, in one line naming each variable (or the option that gave
    it: ``options``, setting -> option); "" when nothing."""
    try:
        read()
    except ValidationError as exc:
        return describe_error(exc, options=options)
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


def clear_live_gauges(metrics_dir: str | None) -> None:
    """The live gauges' files (the work in flight) of an earlier server's processes taken out of a metrics directory
    one sets: a server killed outright leaves them, and ``/metrics`` would add up that server's work in flight for
    ever (a worker given the pid of one of its would even count on from it). Counters and histograms stay: they only
    add up, as prometheus_client's files of dead processes do."""
    if not metrics_dir:
        return
    for entry in os.scandir(metrics_dir):
        if entry.name.startswith("gauge_live") and entry.name.endswith(".db"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


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
            problem = f"cannot listen on {address}: {exc.strerror or exc}"
            if exc.errno == errno.EADDRINUSE:
                other = port + 1 if port < 65535 else port - 1  # an example that is not the port in use
                problem += (
                    f"; another process listens there: stop it, or choose another port (--port {other}, make run "
                    f"PORT={other})"
                )
            return problem
    return ""


def descriptors_for(connections: int) -> str:
    """Raise this process's descriptor limit (``ulimit -n``: its soft limit, up to the hard one; the workers inherit
    it) to what ``connections`` connections per worker take beside the tables' files. What it cannot raise is said
    (a warning, "" when none): a connection opened when no descriptor is left is closed unanswered, not answered
    503 as one past ``EMBEDDING_MAX_CONNECTIONS`` is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = connections + SPARE_DESCRIPTORS
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return ""
    raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised >= needed:
        return ""
    return (
        f"the descriptor limit (ulimit -n) is {raised}, short of the {needed} that EMBEDDING_MAX_CONNECTIONS "
        f"({connections} connections per worker) and the tables' files take: a connection opened when no descriptor "
        "is left is closed unanswered, not answered 503; raise the limit (the service's or container's nofile) or "
        "lower EMBEDDING_MAX_CONNECTIONS"
    )


def sharded_here(settings: Settings, sharded: Mapping[str, object]) -> str:
    """What is wrong with sharded tables (``EMBEDDING_SHARDS``) this server would also load, from EMBEDDING_TABLES
    or its data directory, "" when none: the front answers every request naming one from its shards, so the table
    loaded here was only memory spent, and listed as unavailable."""
    from index.store import list_tables

    here = settings.tables if settings.tables is not None else list_tables(settings.data_dir)
    both = sorted(set(sharded) & set(here))
    if not both:
        return ""
    return (
        f"EMBEDDING_SHARDS names {', '.join(map(repr, both))}, which this server also loads from "
        f"{'EMBEDDING_TABLES' if settings.tables is not None else settings.data_dir}: a table is answered from its "
        "shards or from here, not both; leave it out of one"
    )


def threads_given(environ: Mapping[str, str]) -> int | None:
    """EMBEDDING_THREADS as the settings read it (``index.threads``), before they are checked; None when unset, or
    no number of threads (the check then refuses it)."""
    value = threads.given(environ)
    try:
        return threads.parsed(value) if value is not None else None
    except ValueError:
        return None


def threads_per_worker(given: int | None) -> int:
    """EMBEDDING_THREADS (``given``, as the settings read it), else OMP_NUM_THREADS (``omp_threads``), else 1: a
    worker answers concurrent requests on several threads, and BLAS threads per request would fight over the cores
    (concurrent exact queries slow down by orders of magnitude with two each), while a whole analogy batch gains
    little from a second thread (BENCHMARKS.md). An empty OMP_NUM_THREADS is unset (as an environment file's
    ``OMP_NUM_THREADS=`` means); ValueError for one it cannot take."""
    if given is not None:
        return given
    value = os.environ.get("OMP_NUM_THREADS", "")
    return omp_threads(value) if value.strip() else 1


def omp_threads(value: str) -> int:
    """OMP_NUM_THREADS's threads, read as libgomp reads it: positive whole numbers, one per nesting level, comma
    separated, spaces around each taken (" 4" is 4; "4,2" is 4, the outer level's). What libgomp refuses ("",
    "0", "4,", "abc"), or more than a worker's bound, ValueError naming the value and the range: libgomp would
    warn and run on every core, which is what this setting keeps a worker from."""
    levels = [OMP_LEVEL.fullmatch(level) for level in value.split(",")]
    numbers = [int(level.group(1)) if level else 0 for level in levels]
    if min(numbers) < 1 or numbers[0] > threads.MAX_THREADS:
        raise ValueError(
            f"OMP_NUM_THREADS={value!r}: must be a whole number from 1 to {threads.MAX_THREADS}, or OpenMP's "
            "comma-separated list of them whose first is a worker's threads (or set EMBEDDING_THREADS)"
        )
    return numbers[0]


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
    previous = signal.signal(signal.SIGTERM, exit_at_once)
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
    if args.workers > WORKERS_PER_CORE * cores():
        say(
            f"--workers must be at most {WORKERS_PER_CORE * cores()} ({WORKERS_PER_CORE} x the "
            f"{counted(cores(), 'core')} this process may use), not {args.workers}: each worker is a process of its "
            "own, and more than the cores only take memory and share them",
            log_format,
        )
        return 2
    if not args.host.strip():  # an empty address is every interface to the socket, not the default loopback
        say("--host is empty: name an interface (the default is 127.0.0.1; 0.0.0.0 for all of them)", log_format)
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
    given_by = {}  # setting -> the option that gave it, which a refusal names: the user typed it, not the variable
    for variable, value in overrides.items():
        if value is not None:
            os.environ[variable] = str(value)
            name = variable.removeprefix("EMBEDDING_").lower()
            given_by[name] = f"--{name.replace('_', '-')}"
    for line in unknown_variables(os.environ):  # before a refusal: a misspelt variable may be why
        say(line, log_format, logging.WARNING)
    # Before numpy loads (the check of EMBEDDING_TABLES loads it; FAISS the factory), so that BLAS and OpenMP start
    # with this many threads; EMBEDDING_THREADS itself is written only once the settings' check has read it.
    try:
        per_worker, omp_problem = threads_per_worker(threads_given(os.environ)), ""
    except ValueError as exc:  # said after the settings' check: a refused EMBEDDING_THREADS, which wins, first
        per_worker, omp_problem = 1, str(exc)
    for variable in THREAD_VARIABLES:
        os.environ[variable] = str(per_worker)
    problem = settings_problem(Settings, given_by) or omp_problem
    if problem:
        say(problem, log_format)
        return 2
    os.environ[threads.VARIABLE] = str(per_worker)
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
    clash = sharded_here(settings, front_settings().shards)
    if clash:
        say(clash, log_format)
        return 2
    available = memory()
    if settings.cache_bytes * args.workers > available:
        say(
            f"EMBEDDING_CACHE_BYTES={settings.cache_bytes} x {counted(args.workers, 'worker')} is more than the "
            f"{available} bytes of memory this process may use: each worker fills its cache up to it; lower it",
            log_format,
        )
        return 2
    if args.workers * per_worker > cores():
        say(f"{args.workers} workers x {per_worker} threads exceeds {cores()} cores", log_format, logging.WARNING)
    short = descriptors_for(settings.max_connections)
    if short:
        say(short, log_format, logging.WARNING)
    clear_live_gauges(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))  # before any process of this server writes one
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from service.temp_dirs import METRICS, locked_temp_dir

        metrics_dir = locked_temp_dir(METRICS)  # those of servers killed outright removed
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
        from service.workers import WORKER_EXIT_MARGIN_SECONDS, serve_workers

        serve_workers(options, settings.drain_seconds + settings.shutdown_timeout + WORKER_EXIT_MARGIN_SECONDS)
    return 0


def exit_at_once(signum: int, frame: FrameType | None) -> None:
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
    from service.compacting import AutoCompaction, shards_alone

    logging.config.dictConfig(log_config(settings.log_format, settings.log_level))
    if (why := shards_alone(settings.data_dir)) is not None:
        logging.getLogger("service.compacting").warning(why)
        return
    compaction = AutoCompaction(settings.data_dir, settings.compact_rows, settings.compact_seconds)
    compaction.start()
    atexit.register(compaction.stop)


if __name__ == "__main__":
    sys.exit(main())
