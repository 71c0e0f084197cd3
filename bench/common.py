"""What every benchmark shares: the run context, machine facts, timing statistics, child processes, servers."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
TABLE = "glove-6b-50d"
SECONDS = 5.0  # each HTTP load measurement, unless --seconds says otherwise
PEERS_OPTIONS = ("peers_rows", "peers_latency_seconds", "peers_systems", "peers_busy")
# The options of python -m bench that only some benchmarks read, by benchmark: their rerun commands carry them.
OPTIONS_OF = {
    "peers": PEERS_OPTIONS,
    "peers-text": PEERS_OPTIONS,
    "growth": ("fresh", "growth_rows", "growth_dims", "growth_compressed_rows"),
}
MIB = 1 << 20
# A server's start-up, and one readiness poll, on a machine whose cores are taken by other work (the tests run the
# quick benchmarks beside them at nice 19): its requests can wait seconds for a CPU.
START_SECONDS = 600.0
POLL_SECONDS = 60.0


@dataclass
class Context:
    """One run of the benchmarks."""

    data_dir: Path
    work_dir: Path  # scratch space for generated inputs, removed at the end of the run
    results_dir: Path
    quick: bool = False
    rounds: int = 3
    table: str = TABLE
    command: str = ""  # the command line that produced the figures
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def table_dir(self) -> Path:
        return self.data_dir / self.table

    def bench_command(self, name: str) -> str:
        """The command that reruns one benchmark with this run's options."""
        parts = [".venv/bin/python", "-m", "bench", "--data-dir", str(self.data_dir), "--only", name]
        if self.table != TABLE:
            parts += ["--table", self.table]
        if self.quick:
            parts.append("--quick")
        parts += ["--rounds", str(self.rounds)]
        seconds = self.options.get("seconds")
        if seconds is not None and seconds != SECONDS:
            parts += ["--seconds", f"{seconds:g}"]
        for option in OPTIONS_OF.get(name, ()):
            value = self.options.get(option)
            if value:
                flag = "--" + option.replace("_", "-")
                parts += [flag] if value is True else [flag, *map(str, value if isinstance(value, list) else [value])]
        return shlex.join(parts)


# ------------------------------------------------------------------ machine
def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, kernel and load, from /proc."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "ram_gib": round(mem_kib / (1 << 20), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


VERSIONED = ("numpy", "faiss-cpu", "gensim", "fastapi", "starlette", "uvicorn", "pydantic", "orjson", "httpx")


def versions() -> dict[str, str]:
    out = {}
    for name in VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    wrk = wrk_path()
    if wrk:
        first = subprocess.run([wrk, "-v"], capture_output=True, text=True).stdout.splitlines()
        out["wrk"] = first[0].split()[1] if first and len(first[0].split()) > 1 else "unknown"
    return out


def wrk_path() -> str | None:
    for candidate in ("/usr/bin/wrk", "/usr/local/bin/wrk"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


# --------------------------------------------------------------- statistics
@dataclass
class Stages:
    """Seconds per stage of a run: ``done(name)`` closes the stage that began at the previous call."""

    seconds: dict[str, float] = field(default_factory=dict)
    _clock: float = field(default_factory=time.perf_counter)

    def done(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(now - self._clock, 1)
        self._clock = now


def set_ef_search(table: Any, ef_search: int) -> None:
    """Search ``table``'s HNSW graph (an ``index.engine.table.Table``) as a table loaded with ``ef_search`` searches
    it: the graph's efSearch, wherever in the index the graph is (as the load sets it), and the candidates the
    table asks of it and scores (``Table.search_width``)."""
    from index.engine.knn import set_search_params  # FAISS: only for the benchmarks that search a graph

    set_search_params(table.index, ef_search=ef_search)
    table.search_width = ef_search


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def paired(slow: Sequence[float], fast: Sequence[float]) -> float:
    """Median over rounds of ``slow[i] / fast[i]``: both sides of a round ran back to back, so the machine's
    load drifts less within a round than between rounds. Unrounded, so a target is judged on the measured ratio
    (:func:`target` rounds it for display)."""
    return median([s / f for s, f in zip(slow, fast, strict=True) if f > 0])


def rounded(value: float, digits: int = 3) -> float:
    return float(f"{value:.{digits}g}") if value else 0.0


def target(
    figure: str,
    ours: float,
    other: float,
    unit: str,
    measured: float,
    goal: str,
    met: bool,
    command: str,
    other_name: str,
) -> dict[str, Any]:
    """One row of the summary table: our figure, the other side's, the measured ratio, and whether it meets the goal."""
    return {
        "figure": figure,
        "ours": rounded(ours),
        "other": rounded(other),
        "other_name": other_name,
        "unit": unit,
        "ratio": rounded(measured),  # significant digits: a small ratio is not shown as 0
        "target": goal,
        "met": bool(met),
        "command": command,
    }


# ------------------------------------------------------------ child processes
@dataclass
class Child:
    argv: list[str]
    seconds: float  # wall time from spawn to exit
    max_rss: int  # bytes, peak resident set of that process (ru_maxrss)
    returncode: int
    stdout: str
    stderr: str

    @property
    def command(self) -> str:
        return display(self.argv)

    def check(self) -> Child:
        if self.returncode != 0:
            raise RuntimeError(f"{self.command} exited {self.returncode}: {self.stderr.strip()[-2000:]}")
        return self

    def json(self) -> dict[str, Any]:
        """stdout as one JSON document, else its last line as JSON."""
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError:
            return json.loads(self.stdout.strip().splitlines()[-1])


def run_child(argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> Child:
    """Run a process to completion: its wall time and its own peak RSS, taken by the small ``bench.peak``
    launcher (a child of this large process would inherit this process's peak)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "peak.json"
        launcher = [sys.executable, "-m", "bench.peak", str(report), *map(str, argv)]
        child_env = dict(env if env is not None else os.environ)
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), child_env.get("PYTHONPATH", "")]))
        proc = subprocess.run(launcher, stdout=out, stderr=err, env=child_env, cwd=cwd)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        if not report.is_file():
            raise RuntimeError(f"{display(argv)}: the launcher failed ({proc.returncode}): {stderr[-2000:]}")
        peak = json.loads(report.read_text())
    return Child(list(map(str, argv)), peak["seconds"], peak["max_rss"], peak["returncode"], stdout, stderr)


def display(argv: Sequence[str]) -> str:
    """A command line as a reader would type it from the repository root."""
    shown = []
    for arg in argv:
        text = str(arg)
        if text.startswith(str(BIN) + "/"):
            text = ".venv/bin/" + text[len(str(BIN)) + 1 :]
        elif text == sys.executable:
            text = ".venv/bin/python"
        shown.append(text)
    return shlex.join(shown)


def current_rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# ------------------------------------------------------------------ servers
RESERVED: list[socket.socket] = []  # the ports free_port handed out, held until this process ends


def free_port() -> int:
    """A loopback port for a server this process starts, held here until this process ends: bound (not listening)
    with SO_REUSEADDR, which lets the server (uvicorn, nginx and Chroma's set it too) bind the same port while the
    kernel gives it to no other process's bind. A port let go at once could be handed to another process's server
    before this one's bound it, and then that server answers this one's readiness poll."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    RESERVED.append(sock)
    return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base: str
    argv: list[str]
    ready_seconds: float  # from spawn to the first 200 on the readiness path

    @property
    def command(self) -> str:
        return display(self.argv)


def wait_ready(process: subprocess.Popen[bytes], url: str, log: Any, timeout: float = START_SECONDS) -> float:
    """Poll ``url`` until it answers 200; the seconds this waited (from its call, not from the spawn)."""
    with httpx.Client(timeout=POLL_SECONDS, verify=False) as client:  # plain HTTP: no TLS context to load
        return wait_until(
            process,
            lambda: client.get(url).status_code == 200,
            log,
            f"server did not become ready at {url}",
            timeout=timeout,
            pause=0.01,
            not_yet=(httpx.TransportError,),
        )


def wait_workers(
    process: subprocess.Popen[bytes], base: str, workers: int, log: Any, failed: str, *, pause: float
) -> float:
    """:func:`wait_until` every one of a server's ``workers`` has started (uvicorn's start-up line in its ``log``, at
    log level info) and ``base``'s ``/readyz`` answers 200."""

    def ready() -> bool:
        log.seek(0)
        started = log.read().decode(errors="replace").count("Application startup complete")
        return started >= workers and httpx.get(f"{base}/readyz", timeout=POLL_SECONDS, verify=False).status_code == 200

    return wait_until(process, ready, log, failed, pause=pause, not_yet=(httpx.TransportError,))


def wait_until(
    process: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    log: Any,
    failed: str,
    *,
    timeout: float = START_SECONDS,
    pause: float,
    not_yet: tuple[type[Exception], ...],
) -> float:
    """Call ``ready`` every ``pause`` seconds until it answers True (one of the ``not_yet`` errors: not yet); the
    seconds that took. ``process`` ending first, or ``timeout`` passing, raises ``RuntimeError``: ``failed`` and the
    tail of the process's ``log`` (its output, an open binary file)."""
    started = time.perf_counter()
    while True:
        if process.poll() is not None or time.perf_counter() - started > timeout:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"{failed}:\n{tail}")
        try:
            if ready():
                return time.perf_counter() - started
        except not_yet:
            pass
        time.sleep(pause)


def own_session(argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` of a server in a session of its own (:func:`stop` stops its whole group), weighed by
    the scheduler as this process is. With Linux's autogroups (``sched_autogroup_enabled``) every session is one
    group whose weight is that of nice 0 whatever its processes' nice values: a server started by a benchmark
    that runs below other work (as the tests run their benchmarks, at nice 19) would otherwise take the cores
    from that work. Its session's group is given this process's nice value (a nice 0 benchmark changes
    nothing)."""
    process = subprocess.Popen(list(argv), start_new_session=True, **kwargs)
    nice = os.nice(0)
    if nice > 0:
        with contextlib.suppress(OSError):  # no autogroups here (another kernel or system)
            Path(f"/proc/{process.pid}/autogroup").write_text(str(nice))
    return process


@contextmanager
def serve(
    argv: Sequence[str], ready_path: str, port: int, env: dict[str, str] | None = None, cwd: Path = REPO
) -> Iterator[Server]:
    """Start a server process in its own session, wait for ``ready_path``, stop the whole group afterwards."""
    with tempfile.TemporaryFile() as log:
        started = time.perf_counter()
        process = own_session(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(process, base + ready_path, log)
            yield Server(process, base, list(argv), time.perf_counter() - started)
        finally:
            stop(process)


def wait_idle(pid: int, timeout: float = 300.0) -> float:
    """Wait until the process (and its children) stop using CPU: a load generator that stops on time leaves the
    requests it abandoned queued in the server, and the next measurement must not pay for them."""
    import psutil

    root = psutil.Process(pid)

    def cpu() -> float:
        total = 0.0
        for proc in [root, *root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return total

    started = time.perf_counter()
    last = cpu()
    while time.perf_counter() - started < timeout:
        time.sleep(0.1)
        now = cpu()
        if now - last < 0.01:
            break
        last = now
    return time.perf_counter() - started


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM (``timeout``, ``kill``, a CI job cancelled) as an exit through every ``finally``: the servers a
    benchmark started run in sessions of their own (:func:`own_session`), and Python's default SIGTERM ends the
    process without stopping them, leaving them on their ports and the cores."""

    def leave(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def server_env(cache: bool = True) -> dict[str, str]:
    """The server's environment: the defaults, or without the answer cache (every request is searched)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    if not cache:
        env["EMBEDDING_CACHE_BYTES"] = "0"
    return env


def embedding_serve(ctx: Context, port: int, workers: int = 1, extra: Sequence[str] = ()) -> list[str]:
    """The real ``embedding-serve`` over the benchmark table, without the per-request access log."""
    return [
        str(BIN / "embedding-serve"),
        "--data-dir",
        str(ctx.data_dir),
        "--tables",
        ctx.table,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
        "--no-access-log",
        *extra,
    ]
