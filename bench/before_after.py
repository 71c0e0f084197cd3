"""The service of another commit against this one, side by side in one run, route by route over HTTP.

    python -m bench.before_after --before <git ref> [--data-dir data] [--rounds 5] [--seconds 5]

The other commit's ``service`` and ``index`` packages are exported (``git archive``) into a scratch directory
and served from there (``PYTHONPATH``), this tree's from here, both over the same tables with the answer cache
off, so every request searches. The routes measured:

- ``neighbors``: searched ``GET .../neighbors?token=<word>&k=10`` on the GloVe table;
- ``search_vector``: ``POST .../search`` with a raw vector (a word's row) and ``k`` on the GloVe table;
- ``search_hybrid``: ``POST .../search`` on a documents table of gensim's Lee background corpus (each document's
  vector the mean GloVe row of its words, its text keyword-indexed, built in the scratch directory as
  ``bench.retrieval`` builds its table), each query a document's first ten words with their mean GloVe row,
  ``mode: hybrid`` (vector and BM25 fused).

First every request is sent to both: the answers must be byte for byte the same (``--answers close``: the same
hits, their scores within 1e-5, for a change that moves scores in their last bits). Then each round measures both,
in alternating order, route by route: one connection (p50) and ``--connections`` connections (requests/s), with
``wrk`` when it is installed, and the server's CPU per request in the many-connection run (all its threads,
``bench.thread_cpu``: on a shared machine it varies far less from round to round than requests/s); a response
that is not a 200 stops the run. The
after/before ratios of the medians (and of each round's pair) are printed as a small table and written as JSON
with every round; a change to the serving path is judged on those ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench import load, thread_cpu
from bench.common import (
    REPO,
    TABLE,
    Context,
    embedding_serve,
    exit_on_sigterm,
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

DOCUMENTS = "lee-documents"
K = 10


def export(ref: str, into: Path) -> str:
    """The packages of commit ``ref`` under ``into``; its full hash."""
    commit = subprocess.run(["git", "rev-parse", ref], cwd=REPO, check=True, capture_output=True, text=True)
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref, "index", "service"], cwd=REPO, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return commit.stdout.strip()


def documents_table(work: Path) -> tuple[Path, list[load.Request]]:
    """The Lee documents table (built under ``work/data``) and its hybrid search requests."""
    from bench.retrieval import halves, import_documents, mean_glove

    firsts, seconds = halves()
    texts = [f"{a} {b}".strip() for a, b in zip(firsts, seconds, strict=True)]
    table_dir = import_documents(texts, work, name=DOCUMENTS)
    queries = [" ".join(text.split()[:10]) for text in texts]
    path = f"/v1/tables/{DOCUMENTS}/search"
    bodies = [
        json.dumps({"vector": [round(float(x), 6) for x in v], "text": q, "mode": "hybrid", "k": K}).encode()
        for q, v in zip(queries, mean_glove(queries), strict=True)
    ]
    return table_dir, [load.Request("POST", path, body) for body in bodies]


def vector_requests(table: Table, name: str, words: list[tuple[str, int]]) -> list[load.Request]:
    """``POST .../search`` with each word's row as a raw vector (six decimals, as a client would send it)."""
    path = f"/v1/tables/{name}/search"
    rows = table.vectors[[row for _, row in words]]
    return [
        load.Request("POST", path, json.dumps({"vector": [round(float(x), 6) for x in v], "k": K}).encode())
        for v in rows
    ]


def load_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a run that measures the GloVe table's hot routes (this module's and ``bench.floors``)."""
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--table", default=TABLE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--words", type=int, default=2048)


def hot_routes(table: Table, name: str, words: list[tuple[str, int]]) -> dict[str, list[load.Request]]:
    """The requests of the two hot routes over table ``name``: ``neighbors`` (GET) and ``search_vector``."""
    return {"neighbors": http_requests(name, words)["hnsw_get"], "search_vector": vector_requests(table, name, words)}


def measure(
    base: str, pid: int, items: list[load.Request], connections: int, seconds: float
) -> tuple[load.LoadResult, float]:
    """A load run and the serving process's CPU per request during it (microseconds, all threads); a response that
    is not a 200 stops the run."""
    serving = thread_cpu.serving_pid(pid)
    before = thread_cpu.snapshot(serving)
    result = load.run(base, items, connections, seconds, use_wrk=wrk_path() is not None).checked()
    used = thread_cpu.per_request(serving, before, thread_cpu.snapshot(serving), result.requests)
    wait_idle(pid)
    return result, used["loop"] + used["others"]


SCORE_TOLERANCE = 1e-5  # ``--answers close``: a score in the last float32 bits, not a different answer


def close(a: Any, b: Any) -> bool:
    """Two JSON answers the same but for their scores' last bits: scores within ``SCORE_TOLERANCE``, and a list of
    scored hits the same hits in any order (an order that differs is one of near-ties)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(
            abs(a[key] - b[key]) <= SCORE_TOLERANCE if key == "score" else close(a[key], b[key]) for key in a
        )
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        if a and all(isinstance(x, dict) and "score" in x and "id" in x for x in a + b):
            a, b = sorted(a, key=lambda hit: hit["id"]), sorted(b, key=lambda hit: hit["id"])
        return all(close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def same_answers(bases: dict[str, str], items: list[load.Request], exact: bool = True) -> None:
    """Every request answered 200 by each server, byte for byte the same (``exact``) or :func:`close`."""
    headers = {"Content-Type": "application/json"}
    with httpx.Client(timeout=60) as client:
        for item in items:
            answers = [
                client.request(item.method, base + item.path, content=item.body, headers=headers)
                for base in bases.values()
            ]
            if answers[0].status_code != 200:
                raise SystemExit(f"{item.method} {item.path}: {answers[0].status_code} {answers[0].text[:300]}")
            if any(a.status_code != answers[0].status_code for a in answers) or not all(
                a.content == answers[0].content if exact else close(a.json(), answers[0].json()) for a in answers
            ):
                raise SystemExit(f"answers differ for {item.method} {item.path} {(item.body or b'')[:80]!r}")


def table_of(summary: dict[str, dict[str, dict[str, float]]], ratios: dict[str, dict[str, float]]) -> str:
    lines = [
        f"{'route':14} {'p50 before':>11} {'p50 after':>10} {'after/before':>12} "
        f"{'rps before':>11} {'rps after':>10} {'after/before':>12} {'CPU us before':>14} {'CPU us after':>13} "
        f"{'after/before':>12}"
    ]
    for route, r in ratios.items():
        b, a = summary[route]["before"], summary[route]["after"]
        lines.append(
            f"{route:14} {b['p50_ms']:9.3f}ms {a['p50_ms']:8.3f}ms {r['p50']:12.2f} "
            f"{b['rps']:11,.0f} {a['rps']:10,.0f} {r['rps']:12.2f} "
            f"{b['cpu_us']:14,.0f} {a['cpu_us']:13,.0f} {r['cpu']:12.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the git ref to compare this tree with")
    load_arguments(parser)
    parser.add_argument("--routes", default="neighbors,search_vector,search_hybrid", help="comma-separated")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for both servers (repeatable)")
    parser.add_argument(
        "--answers",
        choices=["exact", "close"],
        default="exact",
        help="exact: byte for byte; close: scores within 1e-5 and near-ties in any order (a change of the scoring)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "before_after.json")
    args = parser.parse_args(argv)
    load_start = [round(x, 2) for x in os.getloadavg()]

    table = Table.load(args.data_dir / args.table, checksums=False)
    words = sample_words(table, args.words)
    env = server_env(cache=False) | dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="before-") as scratch:
        work = Path(scratch)
        routes = hot_routes(table, args.table, words)
        tables = [args.table]
        data_dir = args.data_dir
        if "search_hybrid" in args.routes.split(","):
            # Both tables in one data directory: the GloVe table linked in, the documents table built beside it.
            data_dir = work / "data"
            data_dir.mkdir()
            os.symlink((args.data_dir / args.table).resolve(), data_dir / args.table)
            _, routes["search_hybrid"] = documents_table(work)
            tables.append(DOCUMENTS)
        routes = {name: items for name, items in routes.items() if name in args.routes.split(",")}
        ctx = Context(data_dir=data_dir, work_dir=work, results_dir=args.out.parent, table=",".join(tables))
        before_tree = work / "before"
        before_tree.mkdir()
        commit = export(args.before, before_tree)
        # Each server imports its own tree first (PYTHONPATH comes before the installed packages).
        before_env = {**env, "PYTHONPATH": str(before_tree)}
        after_env = {**env, "PYTHONPATH": str(REPO)}
        before_port, after_port = free_port(), free_port()
        with (
            serve(embedding_serve(ctx, before_port), "/readyz", before_port, before_env, cwd=before_tree) as before,
            serve(embedding_serve(ctx, after_port), "/readyz", after_port, after_env) as after,
        ):
            servers = {"before": before, "after": after}
            for items in routes.values():
                same_answers({name: s.base for name, s in servers.items()}, items, exact=args.answers == "exact")
            for server in servers.values():  # warm: connections, caches, the index pages
                for items in routes.values():
                    measure(server.base, server.process.pid, items, 4, 1.0)
            rounds: dict[str, dict[str, list[dict[str, Any]]]] = {r: {n: [] for n in servers} for r in routes}
            for r in range(args.rounds):
                for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    server = servers[name]
                    for route, items in routes.items():
                        one, _ = measure(server.base, server.process.pid, items, 1, args.seconds)
                        many, cpu = measure(server.base, server.process.pid, items, args.connections, args.seconds)
                        rounds[route][name].append({"c1": one.as_dict(), "many": many.as_dict(), "cpu_us": cpu})
                        print(
                            f"round {r + 1} {name} {route}: p50 {one.p50_ms:.3f} ms, {many.rps:,.0f} requests/s, "
                            f"{cpu:,.0f} us CPU a request",
                            flush=True,
                        )
    summary = {
        route: {
            name: {
                "p50_ms": median([x["c1"]["p50_ms"] for x in rs]),
                "rps": median([x["many"]["rps"] for x in rs]),
                "cpu_us": median([x["cpu_us"] for x in rs]),
                "errors": sum(x["c1"]["errors"] + x["many"]["errors"] for x in rs),
            }
            for name, rs in by_server.items()
        }
        for route, by_server in rounds.items()
    }
    ratios: dict[str, dict[str, Any]] = {}
    for route, by_server in rounds.items():
        pairs = list(zip(by_server["after"], by_server["before"], strict=True))
        ratios[route] = {
            "rps": summary[route]["after"]["rps"] / summary[route]["before"]["rps"],
            # a ratio of times: under 1 is faster
            "p50": summary[route]["after"]["p50_ms"] / summary[route]["before"]["p50_ms"],
            "cpu": summary[route]["after"]["cpu_us"] / summary[route]["before"]["cpu_us"],
            # per round, the two measured next to each other
            "rps_rounds": [a["many"]["rps"] / b["many"]["rps"] for a, b in pairs],
            "p50_rounds": [a["c1"]["p50_ms"] / b["c1"]["p50_ms"] for a, b in pairs],
            "cpu_rounds": [a["cpu_us"] / b["cpu_us"] for a, b in pairs],
        }
    out = {
        "before": commit,
        "after": "working tree",
        "tables": tables,
        "requests": {route: len(items) for route, items in routes.items()},
        "driver": "wrk" if wrk_path() else "httpx",
        "connections": args.connections,
        "seconds": args.seconds,
        "load_average": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
        "machine": machine(),
        "summary": summary,
        "ratios": ratios,
        "rounds": rounds,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(table_of(summary, ratios))
    print(
        "p50: after/before time (under 1 is faster); rps: after/before (over 1 is faster); "
        "CPU a request: after/before (under 1 is less); load average "
        f"{load_start[0]:.2f} at the start, {out['load_average']['end'][0]:.2f} at the end"
    )
    return 0


if __name__ == "__main__":
    with exit_on_sigterm():  # a run stopped by SIGTERM stops its servers too
        sys.exit(main())
