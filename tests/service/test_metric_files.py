"""A worker's metric files (``PROMETHEUS_MULTIPROC_DIR``, in the temporary directory with ``--workers N``) on a disk
that fills: the worker serves on, its metrics kept in memory with a warning, rather than die of SIGBUS at the first
write to a mapped page the disk has no room for (and each replacement with it).

Each case runs in a process of its own: prometheus_client picks its multi-process values when it is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.index.store.test_writelog import small_tmpfs

ROOT = Path(__file__).resolve().parents[2]

# Counts requests under 2,000 label sets (far past one file's first 64 KiB), then reads them back through the
# multi-process collector as /metrics does, and prints the total and the counter of this process.
COUNTING = """
import os, sys
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
if sys.argv[1] == "inject":  # no room from the second allocation on, as on a disk that fills
    import errno
    from service.http import metrics as module
    calls = []
    def full(fd, offset, size):
        calls.append(size)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    module.os.posix_fallocate = full
from service.http.metrics import Metrics
metrics = Metrics()
for i in range(2000):
    count, latency = metrics.request_children("GET", f"/route/{i}", "", 200)
    count.inc()
    latency.observe(0.01)
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
generate_latest(registry)  # every file in the directory readable
own = sum(s.value for m in metrics.registry.collect() for s in m.samples if s.name == "embedding_http_requests_total")
print("counted", int(own))
"""


def count(metrics_dir: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", COUNTING, mode]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_metric_files_that_find_no_room_are_kept_in_memory(tmp_path: Path) -> None:
    done = count(tmp_path, "inject")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["counted", "2000"], done.stdout  # every request counted, in memory past the first
    assert "No space left on device: this worker's metrics are kept in memory from now on" in done.stderr
    assert all(path.stat().st_size for path in tmp_path.iterdir())  # no empty file left for /metrics to choke on


def test_a_full_temporary_directory_does_not_kill_the_worker(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "tmp", "256k") as metrics_dir:
        (metrics_dir / "filler").write_bytes(b"\0" * (200 << 10))  # room for less than the files will take
        done = count(metrics_dir, "real")
    assert done.returncode == 0, f"exit {done.returncode} (-7: SIGBUS): {done.stderr}"
    assert done.stdout.split() == ["counted", "2000"], done.stdout
    assert "No space left on device: this worker's metrics are kept in memory from now on" in done.stderr
