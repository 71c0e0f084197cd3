"""Start-up and memory of ``embedding-serve`` on the benchmark table.

- time from process start to the first ``/readyz`` 200, with the manifest checksums verified (the default) and
  without (``EMBEDDING_VERIFY_CHECKSUMS=false``), interleaved round by round (5 rounds at least); the page cache
  is warm after the first round, as on a server that restarts; the ratio is the median of the rounds' ratios;
- resident memory with 1 and 4 workers, measured by ``bench/workers_memory.py`` (RSS, PSS and private memory
  of every process after warming every worker).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from bench.common import (
    REPO,
    Context,
    display,
    embedding_serve,
    free_port,
    median,
    paired,
    run_child,
    serve,
    server_env,
    target,
)


def parse_table(text: str) -> list[dict[str, int]]:
    """The rows of the script's right-aligned table: each number is labelled by the header text above it."""
    lines = text.splitlines()
    for i, header in enumerate(lines):
        if not header.lstrip().startswith("workers"):
            continue
        rows = []
        for line in lines[i + 1 :]:
            if not line.strip() or not line.strip()[0].isdigit():
                break
            row, previous = {}, 0
            for match in re.finditer(r"\d+", line):
                row[header[previous : match.end()].strip() or f"column {len(row)}"] = int(match.group())
                previous = match.end()
            rows.append(row)
        return rows
    return []


def ready_times(ctx: Context) -> dict[str, Any]:
    variants = {"verified": server_env(), "unverified": {**server_env(), "EMBEDDING_VERIFY_CHECKSUMS": "false"}}
    times: dict[str, list[float]] = {name: [] for name in variants}
    commands: dict[str, str] = {}
    rounds = ctx.rounds if ctx.quick else max(ctx.rounds, 5)
    for r in range(rounds):
        names = list(variants)
        for name in names[r % 2 :] + names[: r % 2]:
            port = free_port()
            with serve(embedding_serve(ctx, port), "/readyz", port, variants[name]) as server:
                times[name].append(round(server.ready_seconds, 3))
                prefix = "" if name == "verified" else "EMBEDDING_VERIFY_CHECKSUMS=false "
                commands[name] = prefix + server.command
    return {
        name: {"median_seconds": median(values), "seconds": values, "command": commands[name]}
        for name, values in times.items()
    }


def workers_memory(ctx: Context) -> dict[str, Any]:
    """Run the memory script (it starts the real server with each worker count) and read its table."""
    argv = [sys.executable, str(REPO / "bench" / "workers_memory.py"), "--data-dir", str(ctx.data_dir)]
    argv += ["--table", ctx.table, "--workers", *(["1", "2"] if ctx.quick else ["1", "4"])]
    if ctx.quick:
        argv += ["--requests", "40"]
    done = run_child(argv, env=server_env()).check()
    return {
        "workers": {str(row.get("workers")): row for row in parse_table(done.stdout)},
        "output": done.stdout,
        "command": display(argv),
    }


def run(ctx: Context) -> dict[str, Any]:
    ready = ready_times(ctx)
    memory = workers_memory(ctx)
    targets = []
    verified, unverified = ready["verified"], ready["unverified"]
    targets.append(
        target(
            "start-up to /readyz 200 (checksums verified vs not)",
            verified["median_seconds"],
            unverified["median_seconds"],
            "s",
            paired(verified["seconds"], unverified["seconds"]),  # both started in each round
            "reported",
            True,
            verified["command"],
            "checksums off",
        )
    )
    ns = sorted(memory["workers"], key=int)
    if len(ns) >= 2 and all("sum PSS" in memory["workers"][n] for n in ns):
        lo, hi = memory["workers"][ns[0]], memory["workers"][ns[-1]]
        grown = hi["sum PSS"] / lo["sum PSS"]
        targets.append(
            target(
                f"resident memory (sum PSS), {ns[-1]} workers vs {ns[0]}",
                hi["sum PSS"],
                lo["sum PSS"],
                "MiB",
                grown,
                f"< {ns[-1]}x (pages shared)",
                grown < int(ns[-1]),
                memory["command"],
                f"{ns[0]} worker",
            )
        )
    return {
        "table": ctx.table,
        "ready": ready,
        "memory": memory,
        "targets": targets,
        "command": ctx.bench_command("startup"),
    }
