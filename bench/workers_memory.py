"""Resident memory of `embedding-serve --workers N`: what each extra worker costs beside the shared table.

Every worker maps the table's files (vectors, norms, tokens, the FAISS index) read-only, so their pages sit
once in the page cache and are shared; what a worker adds is its own anonymous memory (the interpreter, the
imported libraries, per-request buffers). This script starts the real server with each worker count on a
table, warms every worker with approximate and exact queries (touching the index and the whole vector matrix),
then reads /proc/<pid>/smaps_rollup of every process of the server:

    python bench/workers_memory.py --data-dir .cache/test-data --workers 1 2 4

RSS counts shared pages in full in every process; PSS divides each shared page among the processes that map
it, so the PSS of all processes adds up to the real footprint. PSS is split into anonymous memory (private to a
process: spawned workers share no heap) and file-backed pages (the table and the shared libraries).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from bench.common import free_port, own_session, wait_workers

MIB = 1 << 20
BASELINE = """
import service.app, service.main, faiss, numpy, uvicorn  # what a worker imports, but no table and no app
print(open('/proc/self/smaps_rollup').read())
"""


@dataclass
class Mem:
    rss: int
    pss: int
    anon: int  # Pss_Anon: anonymous memory (private for processes that are spawned, not forked)
    file: int  # Pss_File: this process's share of file-backed pages

    @classmethod
    def parse(cls, text: str) -> Mem:
        kb = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                kb[parts[0].rstrip(":")] = int(parts[1]) * 1024
        return cls(kb["Rss"], kb["Pss"], kb["Pss_Anon"], kb["Pss_File"])

    @classmethod
    def of(cls, pid: int) -> Mem:
        return cls.parse(Path(f"/proc/{pid}/smaps_rollup").read_text())

    def __add__(self, other: Mem) -> Mem:
        return Mem(self.rss + other.rss, self.pss + other.pss, self.anon + other.anon, self.file + other.file)


@dataclass
class Run:
    workers: int
    processes: list[tuple[str, Mem]]  # (role, memory) after the warm-up queries
    idle_anon: float  # mean anonymous memory of a worker once ready, before any query

    @property
    def total(self) -> Mem:
        total = Mem(0, 0, 0, 0)
        for _, mem in self.processes:
            total = total + mem
        return total

    def worker_mems(self) -> list[Mem]:
        return [mem for role, mem in self.processes if role == "worker"]


def table_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def warm(base: str, table: str, words: list[str], requests: int) -> None:
    """Approximate and exact queries, each on a new connection so the kernel spreads them over the workers."""
    local = threading.local()

    def one(i: int) -> None:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=base, timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
        params = {"token": words[i % len(words)], "k": 10, "exact": str(i % 4 == 0).lower()}
        local.client.get(f"/v1/tables/{table}/neighbors", params=params).raise_for_status()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(requests)))


def role(process: psutil.Process, root: psutil.Process, workers: int) -> str:
    if workers == 1:
        return "worker"  # one worker: uvicorn serves in the main process
    if process == root:
        return "supervisor"
    return "helper" if "resource_tracker" in " ".join(process.cmdline()) else "worker"


def measure(
    data_dir: Path, table: str, workers: int, words: list[str], requests: int, extra_env: dict[str, str]
) -> Run:
    serve = str(Path(sys.executable).parent / "embedding-serve")
    port = free_port()
    env = {**os.environ, "EMBEDDING_DATA_DIR": str(data_dir), "EMBEDDING_THREADS": "1", **extra_env}
    argv = [serve, "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--no-access-log"]
    with tempfile.TemporaryFile() as log:
        server = own_session(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_workers(server, base, workers, log, "server did not start", pause=0.2)  # while they load the table
            root = psutil.Process(server.pid)
            procs = [root, *root.children(recursive=True)]
            idle = [Mem.of(p.pid).anon for p in procs if role(p, root, workers) == "worker"]
            warm(base, table, words, requests)
            processes = [(role(p, root, workers), Mem.of(p.pid)) for p in procs]
            return Run(workers, processes, sum(idle) / len(idle))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)


def mib(value: float) -> str:
    return f"{value / MIB:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--table", default="glove-6b-50d")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--requests", type=int, default=2000, help="warm-up queries per worker count")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra server environment")
    args = parser.parse_args()
    extra_env = dict(item.split("=", 1) for item in args.env)

    from index.engine.table import Table

    source = args.data_dir / args.table
    words = Table.load(source, checksums=False).tokens[:5000]
    size = table_size(source)
    baseline = Mem.parse(subprocess.run([sys.executable, "-c", BASELINE], capture_output=True, text=True).stdout)

    print(f"table {args.table}: {mib(size)} MiB on disk; server environment: {extra_env or 'default'}")
    print(
        f"machine: {os.cpu_count()} CPUs, {psutil.virtual_memory().total / MIB / 1024:.1f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )
    print(
        f"a bare interpreter with the service's imports: RSS {mib(baseline.rss)} MiB, "
        f"anonymous {mib(baseline.anon)} MiB"
    )
    print()
    print(
        f"{'workers':>7} {'procs':>5} {'sum RSS':>8} {'sum PSS':>8} {'PSS anon':>9} {'PSS file':>9} "
        f"{'worker RSS':>11} {'worker anon':>12} {'(idle)':>7}   MiB"
    )
    runs = {}
    # A private copy of the table: other processes mapping the same files would otherwise take a share of
    # its pages and lower the PSS measured here.
    with tempfile.TemporaryDirectory(prefix="workers-memory-") as tmp:
        data_dir = Path(tmp)
        shutil.copytree(source, data_dir / args.table)
        for n in args.workers:
            run = measure(data_dir, args.table, n, words, args.requests, extra_env)
            runs[n] = run
            total, per = run.total, run.worker_mems()
            print(
                f"{n:>7} {len(run.processes):>5} {mib(total.rss):>8} {mib(total.pss):>8} {mib(total.anon):>9} "
                f"{mib(total.file):>9} {mib(sum(m.rss for m in per) / len(per)):>11} "
                f"{mib(sum(m.anon for m in per) / len(per)):>12} {mib(run.idle_anon):>7}",
                flush=True,
            )
    multi = sorted(n for n in runs if n > 1)
    print()
    if len(multi) >= 2:
        lo, hi = multi[0], multi[-1]
        extra = (runs[hi].total.pss - runs[lo].total.pss) / (hi - lo)
        print(
            f"each added worker ({lo} -> {hi} workers, sum of PSS): +{mib(extra)} MiB "
            f"= {100 * extra / size:.0f}% of the table's {mib(size)} MiB"
        )
    if 1 in runs and multi:
        hi = multi[-1]
        print(
            f"1 -> {hi} workers in all (supervisor and helper process included): "
            f"+{mib(runs[hi].total.pss - runs[1].total.pss)} MiB"
        )


if __name__ == "__main__":
    main()
