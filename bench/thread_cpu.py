"""CPU time per thread of a running process on Linux (``/proc/<pid>/task/*/stat``), for CPU per request.

A server's requests/s on a machine whose cores are shared follows the CPU each request costs, thread by thread
(BENCHMARKS.md, "HTTP floors"): :func:`per_request` turns two snapshots around a load run into microseconds per
request for the process's main thread (the event loop) and for all its other threads together.
"""

from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def serving_pid(pid: int) -> int:
    """The process that serves: ``pid`` itself, or its first child's first child and so on (a launcher's)."""
    while True:
        children = Path(f"/proc/{pid}/task/{pid}/children")
        kids = children.read_text().split() if children.exists() else []
        if not kids:
            return pid
        pid = int(kids[0])


def snapshot(pid: int) -> dict[int, float]:
    """CPU seconds (user and system) of each live thread of ``pid``, by thread id; empty off Linux."""
    out: dict[int, float] = {}
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return out
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


def per_request(pid: int, before: dict[int, float], after: dict[int, float], requests: int) -> dict[str, float]:
    """Microseconds of CPU per request between two snapshots: ``loop`` (the main thread), ``others`` (the rest)."""
    if requests <= 0 or not after:
        return {"loop": 0.0, "others": 0.0}
    spent = {tid: seconds - before.get(tid, 0.0) for tid, seconds in after.items()}
    loop = spent.pop(pid, 0.0)
    return {"loop": loop / requests * 1e6, "others": sum(spent.values()) / requests * 1e6}
