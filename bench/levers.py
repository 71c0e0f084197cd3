"""One server setting against another, through the peers' Python client, quiet and busy, paired by round.

    python -m bench.levers --data-dir data [--table glove-6b-50d] --b-arg=--workers --b-arg=2 [--b-env NAME=VALUE]
                           [--rounds 3] [--seconds 5]

Two ``embedding-serve`` processes over the same table side by side (answer cache off, every request searched):
A at its defaults, B with ``--b-arg`` arguments and ``--b-env`` variables. Each round measures A and B (in an
order alternated round by round) quiet, then again under ``bench.peers.background_load`` (two processes spinning
NumPy matrix products): one-query p50 through one client, queries/s with ``bench.peers``' 16 client threads, and
the servers' memory (RSS and USS of the process tree). The B/A ratios (per round and their medians; > 1: B
better) and the load average at the start and the end of each phase are printed and written as JSON. A lever
that stays in the defaults is judged on these ratios (BENCHMARKS.md section 6's notes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import REPO, TABLE, Context, embedding_serve, free_port, median, serve, server_env, wait_idle
from bench.peers import CLIENTS, K, background_load, service_client, throughput, tree_memory
from index.engine.table import Table


class Server:
    """What ``bench.peers.throughput`` needs of a side: a new client's one-vector search and its close."""

    def __init__(self, base: str, table: str) -> None:
        self.base, self.table = base, table

    def client(self) -> tuple[Callable[[np.ndarray], list[int]], Callable[[], None]]:
        api, close = service_client(self.base)
        return (lambda v: [n.id for n in api.search(self.table, v.tolist(), k=K)]), close


def one_query_p50(server: Server, queries: np.ndarray, seconds: float) -> float:
    search, close = server.client()
    try:
        search(queries[0])
        ms: list[float] = []
        deadline = time.perf_counter() + seconds
        for q in queries:
            started = time.perf_counter()
            search(q)
            ms.append((time.perf_counter() - started) * 1000)
            if started > deadline:
                break
    finally:
        close()
    return float(np.percentile(ms, 50))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--table", default=TABLE)
    parser.add_argument("--b-arg", action="append", default=[], help="an embedding-serve argument of B (repeatable)")
    parser.add_argument("--b-env", action="append", default=[], help="NAME=VALUE in B's environment (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "levers.json")
    args = parser.parse_args(argv)

    table = Table.load(args.data_dir / args.table, checksums=False)
    rng = np.random.default_rng(1)
    queries = np.asarray(table.vectors[np.sort(rng.choice(table.rows, args.queries, replace=False))], dtype=np.float32)
    ctx = Context(data_dir=args.data_dir, work_dir=args.out.parent, results_dir=args.out.parent, table=args.table)
    env = server_env(cache=False)
    b_env = env | dict(item.split("=", 1) for item in args.b_env)
    port_a, port_b = free_port(), free_port()
    loads: dict[str, list[list[float]]] = {"quiet": [], "busy": []}
    rounds: dict[str, dict[str, list[dict[str, float]]]] = {p: {"A": [], "B": []} for p in loads}
    with ExitStack() as stack:
        a = stack.enter_context(serve(embedding_serve(ctx, port_a), "/readyz", port_a, env))
        b = stack.enter_context(serve(embedding_serve(ctx, port_b, extra=args.b_arg), "/readyz", port_b, b_env))
        servers = {"A": (a, Server(a.base, args.table)), "B": (b, Server(b.base, args.table))}
        for _, client in servers.values():  # warm: connections, the index pages
            throughput(client, queries, 1.0)  # type: ignore[arg-type]  # duck-typed: client() is all it uses
        for r in range(args.rounds):
            for phase in loads:
                with ExitStack() as busy:
                    if phase == "busy":
                        busy.enter_context(background_load())
                    start = list(os.getloadavg())
                    for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
                        process, client = servers[name]
                        p50 = one_query_p50(client, queries, args.seconds)
                        wait_idle(process.process.pid)
                        qps = throughput(client, queries, args.seconds)["qps"]  # type: ignore[arg-type]
                        wait_idle(process.process.pid)
                        memory = tree_memory(process.process.pid)
                        rounds[phase][name].append({"p50_ms": p50, "qps": qps, **memory})
                        print(f"round {r + 1} {phase} {name}: p50 {p50:.2f} ms, {qps:,.0f} queries/s", flush=True)
                    loads[phase].append([round(start[0], 2), round(os.getloadavg()[0], 2)])
    ratios: dict[str, dict[str, Any]] = {}
    for phase, by in rounds.items():
        pairs = list(zip(by["A"], by["B"], strict=True))
        p50 = [x["p50_ms"] / y["p50_ms"] for x, y in pairs]  # B better when > 1
        qps = [y["qps"] / x["qps"] for x, y in pairs]
        ratios[phase] = {"p50": median(p50), "qps": median(qps), "p50_rounds": p50, "qps_rounds": qps}
        print(
            f"{phase}: B/A one-query p50 {median(p50):.2f}x (rounds {', '.join(f'{x:.2f}' for x in p50)}), "
            f"queries/s ({CLIENTS} threads) {median(qps):.2f}x (rounds {', '.join(f'{x:.2f}' for x in qps)}); "
            f"load average {loads[phase]}"
        )
    out = {
        "table": args.table,
        "b": {"args": args.b_arg, "env": args.b_env},
        "load_average": loads,
        "ratios": ratios,
        "rounds": rounds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
