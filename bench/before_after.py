"""The service of another commit against this one, side by side in one run: searched neighbours over HTTP.

    python -m bench.before_after --before <git ref> [--data-dir data] [--rounds 5] [--seconds 5]

The other commit's ``service`` and ``index`` packages are exported (``git archive``) into a scratch directory
and served from there (``PYTHONPATH``), this tree's from here, both over the same table with the answer cache
off, so every request searches. First every query word is asked of both: the answers must be byte for byte the
same. Then each round measures both, in alternating order: one connection (p50) and ``--connections``
connections (requests/s), with ``wrk`` when it is installed. The medians and the after/before ratios are
printed and written as JSON; a change to the search path is judged on those ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench import load
from bench.common import (
    REPO,
    TABLE,
    Context,
    embedding_serve,
    free_port,
    machine,
    median,
    serve,
    server_env,
    wait_idle,
    wrk_path,
)
from bench.neighbours import http_requests, sample_words
from index.engine.table import Table


def export(ref: str, into: Path) -> str:
    """The packages of commit ``ref`` under ``into``; its full hash."""
    commit = subprocess.run(["git", "rev-parse", ref], cwd=REPO, check=True, capture_output=True, text=True)
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref, "index", "service"], cwd=REPO, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return commit.stdout.strip()


def measure(base: str, pid: int, items: list[load.Request], connections: int, seconds: float) -> load.LoadResult:
    result = load.run(base, items, connections, seconds, use_wrk=wrk_path() is not None)
    wait_idle(pid)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the git ref to compare this tree with")
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--table", default=TABLE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--words", type=int, default=2048)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for both servers (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "before_after.json")
    args = parser.parse_args(argv)

    table = Table.load(args.data_dir / args.table, checksums=False)
    ctx = Context(data_dir=args.data_dir, work_dir=args.out.parent, results_dir=args.out.parent, table=args.table)
    items = http_requests(args.table, sample_words(table, args.words))["hnsw_get"]
    env = server_env(cache=False) | dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="before-") as scratch:
        before_tree = Path(scratch)
        commit = export(args.before, before_tree)
        # Each server imports its own tree first (PYTHONPATH comes before the installed packages).
        before_env = {**env, "PYTHONPATH": str(before_tree)}
        after_env = {**env, "PYTHONPATH": str(REPO)}
        before_port, after_port = free_port(), free_port()
        with (
            serve(
                embedding_serve(ctx, before_port),
                "/readyz",
                before_port,
                before_env,
                cwd=before_tree,
            ) as before,
            serve(embedding_serve(ctx, after_port), "/readyz", after_port, after_env) as after,
        ):
            servers = {"before": before, "after": after}
            with httpx.Client(timeout=60) as client:
                for item in items:
                    bodies = {name: client.get(s.base + item.path).content for name, s in servers.items()}
                    if bodies["before"] != bodies["after"]:
                        raise SystemExit(f"answers differ for {item.path}")
            for server in servers.values():  # warm: connections, caches, the index pages
                measure(server.base, server.process.pid, items, 4, 1.0)
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
            for r in range(args.rounds):
                for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    server = servers[name]
                    one = measure(server.base, server.process.pid, items, 1, args.seconds)
                    many = measure(server.base, server.process.pid, items, args.connections, args.seconds)
                    rounds[name].append({"c1": one.as_dict(), "many": many.as_dict()})
                    print(f"round {r + 1} {name}: p50 {one.p50_ms:.3f} ms, {many.rps:,.0f} requests/s", flush=True)
    summary = {
        name: {
            "p50_ms": median([x["c1"]["p50_ms"] for x in rs]),
            "rps": median([x["many"]["rps"] for x in rs]),
            "errors": sum(x["c1"]["errors"] + x["many"]["errors"] for x in rs),
        }
        for name, rs in rounds.items()
    }
    ratios = {
        "rps": summary["after"]["rps"] / summary["before"]["rps"],
        "p50": summary["after"]["p50_ms"] / summary["before"]["p50_ms"],
        # per round, the two measured next to each other
        "rps_rounds": [
            a["many"]["rps"] / b["many"]["rps"] for a, b in zip(rounds["after"], rounds["before"], strict=True)
        ],
        "p50_rounds": [
            a["c1"]["p50_ms"] / b["c1"]["p50_ms"] for a, b in zip(rounds["after"], rounds["before"], strict=True)
        ],
    }
    out = {
        "before": commit,
        "after": "working tree",
        "table": args.table,
        "words": len(items),
        "driver": "wrk" if wrk_path() else "httpx",
        "connections": args.connections,
        "seconds": args.seconds,
        "machine": machine(),
        "summary": summary,
        "ratios": ratios,
        "rounds": rounds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(json.dumps({"summary": summary, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
