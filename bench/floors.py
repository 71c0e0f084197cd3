"""The HTTP floors: the service's hot routes against a bare FastAPI app on the same paths, side by side.

    python -m bench.floors [--data-dir data] [--rounds 5] [--seconds 5] [--connections 32] [--busy]

The floor (``bench/floor_app.py``, uvicorn with embedding-serve's settings) answers each route with a constant
body captured from the service, after doing what any FastAPI app does with the request: the query parameters of
``GET .../neighbors`` parsed, the body of ``POST .../search`` parsed into a pydantic model of a vector and ``k``.
The service is ``embedding-serve`` at its defaults with the answer cache off, so every request searches:
searched ``GET .../neighbors?token=<word>&k=10`` and ``POST .../search`` with ``{"vector": <the word's row>,
"k": 10}`` on the GloVe table. Each round measures every (server, route) pair at ``--connections`` connections
(wrk when installed), in an order rotated round by round; the figure is the service's requests/s over the
floor's in the same round, each round's and their median (not the ratio of the two medians), beside each server's
CPU per request (its event loop's, and its other threads' together: the searcher thread's; ``bench.thread_cpu``),
which requests/s follow when the cores are saturated. ``--busy`` runs the same under ``bench.peers``' background
load (two processes spinning NumPy matrix products), both sides under it. A response that is not a 200 stops the
run (a refusal is not a request served). The load average is recorded at the start and at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import load, thread_cpu
from bench.before_after import hot_routes, load_arguments
from bench.common import (
    REPO,
    Context,
    embedding_serve,
    exit_on_sigterm,
    free_port,
    machine,
    median,
    paired,
    serve,
    server_env,
)
from bench.neighbours import check_answers, floor_command, sample_words
from index.engine.table import Table


def route_ratio(route: str, rounds: dict[str, list[float]], cpu: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """One route's figures: each server's median requests/s and CPU per request, and the service's requests/s over
    the floor's, round by round and their median (both ran in the same round: ``bench.common.paired``)."""
    ours_rps, floor_rps = rounds[f"ours:{route}"], rounds[f"floor:{route}"]
    return {
        "ours_rps": median(ours_rps),
        "floor_rps": median(floor_rps),
        "ratio": paired(ours_rps, floor_rps),
        "ratio_rounds": [a / b for a, b in zip(ours_rps, floor_rps, strict=True)],
        "cpu_us_per_request": {
            server: {part: median([x[part] for x in cpu[f"{server}:{route}"]]) for part in ("loop", "others")}
            for server in ("ours", "floor")
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    load_arguments(parser)
    parser.add_argument("--busy", action="store_true", help="under bench.peers' background load")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "floors.json")
    args = parser.parse_args(argv)
    load_start = [round(x, 2) for x in os.getloadavg()]

    table = Table.load(args.data_dir / args.table, checksums=False)
    words = sample_words(table, args.words)
    routes = hot_routes(table, args.table, words)
    ctx = Context(data_dir=args.data_dir, work_dir=args.out.parent, results_dir=args.out.parent, table=args.table)
    ours_port, floor_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="floors-") as scratch, ExitStack() as stack:
        ours = stack.enter_context(serve(embedding_serve(ctx, ours_port), "/readyz", ours_port, server_env(False)))
        answers = check_answers(ours.base, routes)
        bodies = Path(scratch) / "floor-bodies.json"
        bodies.write_text(
            json.dumps(
                {
                    "get": answers["neighbors"][0].decode(),
                    "post": "{}",
                    "search": answers["search_vector"][0].decode(),
                }
            )
        )
        floor_env = {**server_env(), "BENCH_FLOOR_BODIES": str(bodies)}
        floor = stack.enter_context(serve(floor_command(floor_port), "/readyz", floor_port, floor_env))
        check_answers(floor.base, routes)
        if args.busy:
            from bench.peers import background_load

            stack.enter_context(background_load())
        servers = {"ours": ours, "floor": floor}
        cases = [(server, route) for route in routes for server in servers]
        for server, route in cases:  # warm
            load.run(servers[server].base, routes[route], 4, 1.0, use_wrk=True)
        pids = {name: thread_cpu.serving_pid(s.process.pid) for name, s in servers.items()}
        rounds: dict[str, list[float]] = {f"{s}:{r}": [] for s, r in cases}
        cpu: dict[str, list[dict[str, float]]] = {f"{s}:{r}": [] for s, r in cases}
        for r in range(args.rounds):
            for server, route in cases[r % len(cases) :] + cases[: r % len(cases)]:
                before = thread_cpu.snapshot(pids[server])
                result = load.run(servers[server].base, routes[route], args.connections, args.seconds, use_wrk=True)
                result.checked()  # a refusal is not a request served
                used = thread_cpu.per_request(pids[server], before, thread_cpu.snapshot(pids[server]), result.requests)
                rounds[f"{server}:{route}"].append(result.rps)
                cpu[f"{server}:{route}"].append(used)
                print(
                    f"round {r + 1} {server} {route}: {result.rps:,.0f} requests/s, CPU per request: loop "
                    f"{used['loop']:,.0f} us, other threads {used['others']:,.0f} us",
                    flush=True,
                )
    ratios = {route: route_ratio(route, rounds, cpu) for route in routes}
    load_end = [round(x, 2) for x in os.getloadavg()]
    out = {
        "table": args.table,
        "busy": args.busy,
        "connections": args.connections,
        "seconds": args.seconds,
        "load_average": {"start": load_start, "end": load_end},
        "machine": machine(),
        "ratios": ratios,
        "rounds": rounds,
        "cpu_us_per_request": cpu,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    for route, r in ratios.items():
        spread = ", ".join(f"{x:.2f}" for x in r["ratio_rounds"])
        print(
            f"{route:14} ours {r['ours_rps']:8,.0f}  floor {r['floor_rps']:8,.0f} requests/s  "
            f"ours/floor {r['ratio']:.2f} (rounds {spread})"
        )
        used = r["cpu_us_per_request"]
        print(
            f"{'':14} CPU per request (medians): ours loop {used['ours']['loop']:,.0f} us + other threads "
            f"{used['ours']['others']:,.0f} us, floor loop {used['floor']['loop']:,.0f} us"
        )
    print(
        f"load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end{' (busy)' if args.busy else ''}"
    )
    return 0


if __name__ == "__main__":
    with exit_on_sigterm():  # a run stopped by SIGTERM stops its servers too
        sys.exit(main())
