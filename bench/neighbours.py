"""Neighbours of a word: in process (Table) and over HTTP (embedding-serve, one worker), exact and HNSW,
one query at a time and batches of 64; against gensim ``most_similar`` and against the HTTP floor (a bare
FastAPI endpoint answering a same-size constant JSON, see ``bench/floor_app.py``).

Figures: p50/p99 latency at concurrency 1, requests/s at concurrency 32, and recall@10 for each HNSW efSearch.
Before any timing over HTTP, every request is answered 200 by embedding-serve, and the server with the answer cache
and the one with remembered searches answer the one-query requests byte for byte as it does.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np

from bench import load
from bench.common import (
    BIN,
    Context,
    embedding_serve,
    free_port,
    median,
    paired,
    percentile,
    serve,
    server_env,
    set_ef_search,
    target,
    wait_idle,
    wrk_path,
)
from index.build.recall import tied_recall
from index.engine.table import Table

K = 10
BATCH = 64
EF_SEARCH = (16, 24, 32, 40, 48, 64, 96, 128, 192, 256, 384, 512)
WORD_POOL = 50_000  # query words are drawn from the most frequent rows


def sample_words(table: Table, count: int, seed: int = 0) -> list[tuple[str, int]]:
    """``count`` distinct frequent words (seeded), each resolving to its own row."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(min(WORD_POOL, table.rows), size=min(count, WORD_POOL, table.rows), replace=False)
    out = []
    for i in ids.tolist():
        word = table.tokens[i]
        found = table.find(word)
        if found is not None and found.id == i:
            out.append((word, i))
    return out


def keyed_vectors(table: Table) -> Any:
    """gensim KeyedVectors over the table's own rows (original norms restored)."""
    from gensim.models import KeyedVectors

    kv = KeyedVectors(table.dim, dtype=np.float32)
    kv.add_vectors(list(table.tokens[: table.rows]), np.asarray(table.vectors) * np.asarray(table.norms)[:, None])
    kv.fill_norms()
    if len(kv) != table.rows:
        raise RuntimeError(f"KeyedVectors holds {len(kv)} rows, the table {table.rows}")
    return kv


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ----------------------------------------------------------------- in process
def in_process(ctx: Context, table: Table, kv: Any, words: list[tuple[str, int]]) -> dict[str, Any]:
    singles = words[: 20 if ctx.quick else 400]
    batches = [words[i : i + BATCH] for i in range(0, len(words) - BATCH + 1, BATCH)][: 1 if ctx.quick else 10]

    def ours_single(exact: bool) -> list[float]:
        return [
            timed(lambda w=w: table.most_similar([table.resolve(w).id], k=K, exact=exact)) * 1000 for w, _ in singles
        ]

    def ours_batch(exact: bool) -> list[float]:
        def one(batch: list[tuple[str, int]]) -> None:
            ids = [table.resolve(w).id for w, _ in batch]
            queries = np.vstack([table.mean_query([i]) for i in ids])
            table.search(queries, K, exact=exact, exclude=[{i} for i in ids])

        return [timed(lambda b=b: one(b)) * 1000 for b in batches]

    def gensim_single() -> list[float]:
        return [timed(lambda w=w: kv.most_similar(w, topn=K)) * 1000 for w, _ in singles]

    def gensim_batch() -> list[float]:
        return [timed(lambda b=b: [kv.most_similar(w, topn=K) for w, _ in b]) * 1000 for b in batches]

    cases: dict[str, Callable[[], list[float]]] = {
        "ours_hnsw_single": lambda: ours_single(False),
        "ours_exact_single": lambda: ours_single(True),
        "gensim_single": gensim_single,
        "ours_hnsw_batch64": lambda: ours_batch(False),
        "ours_exact_batch64": lambda: ours_batch(True),
        "gensim_batch64": gensim_batch,
    }
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for r in range(ctx.rounds):
        names = list(cases)
        names = names[r % len(names) :] + names[: r % len(names)]  # rotate the order from round to round
        for name in names:
            ms = cases[name]()
            rounds[name].append({"p50": percentile(ms, 50), "p99": percentile(ms, 99)})
    out = {
        name: {
            "p50_ms": round(median([x["p50"] for x in rs]), 4),
            "p99_ms": round(median([x["p99"] for x in rs]), 4),
            "rounds": rs,
            "calls_per_round": len(singles) if "single" in name else len(batches),
        }
        for name, rs in rounds.items()
    }
    # Same answers as gensim: exact top-10 of every single query word.
    same = 0
    for word, i in singles:
        ours = [table.tokens[j] for j, _ in table.most_similar([i], k=K, exact=True)]
        theirs = [w for w, _ in kv.most_similar(word, topn=K)]
        same += ours == theirs
    out["exact_equals_gensim"] = {"same": same, "queries": len(singles)}
    return out


def recall_sweep(ctx: Context, table: Table, words: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """recall@10 of the HNSW index against exact search (query words left out, as in answers; a row tying the
    exact 10th counts, as in the builder's) per efSearch."""
    if table.search_width is None:  # no graph: exact search, or an inverted file
        return []
    queries = words[: 100 if ctx.quick else 1000]
    ids = [i for _, i in queries]
    vectors = np.vstack([table.mean_query([i]) for i in ids])
    exclude = [{i} for i in ids]
    kth = np.array([answer[-1][1] for answer in table.search(vectors, K, exact=True, exclude=exclude)], np.float32)
    saved = table.search_width
    out = []
    try:
        for ef in EF_SEARCH[:3] if ctx.quick else EF_SEARCH:
            set_ef_search(table, ef)
            found = np.array([[j for j, _ in answer] for answer in table.search(vectors, K, exclude=exclude)])
            recall = tied_recall(vectors, np.asarray(table.vectors), kth, found, K)
            ms = [timed(lambda v=v: table.search(v[None, :], K)) * 1000 for v in vectors[:200]]
            out.append({"efSearch": ef, "recall_at_10": round(recall, 4), "p50_ms": percentile(ms, 50)})
    finally:
        set_ef_search(table, saved)
    return out


# ---------------------------------------------------------------------- HTTP
def floor_command(port: int) -> list[str]:
    """uvicorn with the settings embedding-serve uses (factory, one worker, no access log, no server header)."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.floor_app:create_app",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--log-level",
        "warning",
        "--no-access-log",
        "--no-server-header",
    ]


def remembered_command(ctx: Context, port: int) -> list[str]:
    """``embedding-serve`` with the same arguments, its searches answered from memory (``bench/remembered.py``)."""
    return [sys.executable, "-m", "bench.remembered", *embedding_serve(ctx, port)[1:]]


def http_requests(table_name: str, words: list[tuple[str, int]]) -> dict[str, list[load.Request]]:
    base = f"/v1/tables/{table_name}/neighbors"
    gets = [f"{base}?token={quote(w, safe='')}&k={K}" for w, _ in words]
    batches = [[w for w, _ in words[i : i + BATCH]] for i in range(0, len(words) - BATCH + 1, BATCH)]

    def post(batch: list[str], exact: bool) -> bytes:
        return json.dumps({"queries": batch, "k": K, "exact": exact}).encode()

    return {
        "hnsw_get": [load.Request("GET", p) for p in gets],
        "exact_get": [load.Request("GET", p + "&exact=true") for p in gets],
        "hnsw_post64": [load.Request("POST", base, post(b, False)) for b in batches],
        "exact_post64": [load.Request("POST", base, post(b, True)) for b in batches],
    }


def check_answers(base: str, requests: dict[str, list[load.Request]]) -> dict[str, list[bytes]]:
    """Every distinct request once: all must be 200. Their answers (the first become the floor's constant bodies)."""
    answers: dict[str, list[bytes]] = {}
    with httpx.Client(base_url=base, timeout=60, verify=False) as client:
        for name, items in requests.items():
            for item in items:
                response = client.request(
                    item.method, item.path, content=item.body, headers={"Content-Type": "application/json"}
                )
                if response.status_code != 200:
                    raise RuntimeError(f"{item.method} {item.path}: {response.status_code} {response.text[:300]}")
                answers.setdefault(name, []).append(response.content)
    return answers


def same_answers(base: str, items: list[load.Request], expected: list[bytes], server: str) -> None:
    """``server`` answers every request 200, byte for byte as ``expected`` (embedding-serve's answers)."""
    if check_answers(base, {"items": items})["items"] != expected:
        raise RuntimeError(f"{server} answers differently from embedding-serve")


@dataclass(frozen=True)
class HttpLoad:
    """How the HTTP measurements load a server (smaller in the quick mode). Each waits until the server is idle
    again, so the next measurement does not pay for requests the load generator abandoned."""

    use_wrk: bool
    seconds: float  # of each measurement
    warm_seconds: float
    cap: int  # the quick mode stops after this many requests per measurement (0: no cap)
    many: int  # connections of the throughput measurement
    words: int  # query words replayed

    @classmethod
    def of(cls, ctx: Context) -> HttpLoad:
        if ctx.quick:
            return cls(use_wrk=False, seconds=0.5, warm_seconds=0.2, cap=20, many=4, words=64)
        seconds = float(ctx.options.get("seconds", 5))
        return cls(use_wrk=wrk_path() is not None, seconds=seconds, warm_seconds=1.0, cap=0, many=32, words=2048)

    def _run(
        self, server: Any, items: list[load.Request], connections: int, seconds: float, cap: int
    ) -> load.LoadResult:
        result = load.run(server.base, items, connections, seconds, self.use_wrk, max_requests=cap)
        wait_idle(server.process.pid)
        return result

    def warm(self, server: Any, items: list[load.Request]) -> None:
        """Connections, caches, the index pages."""
        self._run(server, items, 4, self.warm_seconds, self.cap)

    def latency(self, server: Any, items: list[load.Request]) -> load.LoadResult:
        """One connection."""
        return self._run(server, items, 1, self.seconds, self.cap)

    def throughput(self, server: Any, items: list[load.Request], seconds: float | None = None) -> load.LoadResult:
        """``many`` connections."""
        return self._run(server, items, self.many, seconds or self.seconds, self.cap * 2)


def over_http(ctx: Context, words: list[tuple[str, int]]) -> dict[str, Any]:
    plan = HttpLoad.of(ctx)
    seconds, many = plan.seconds, plan.many
    requests = http_requests(ctx.table, words[: plan.words])
    ours_port, cached_port, floor_port, remembered_port = free_port(), free_port(), free_port(), free_port()
    # "ours" searches every request (answer cache off); "cached" is the default server, whose answer cache serves
    # the query words again once the warm-up has asked each of them; "remembered" is ours with its searches
    # answered from memory (bench/remembered.py), i.e. everything a request costs but the search.
    ours_argv = embedding_serve(ctx, ours_port)
    with (
        serve(ours_argv, "/readyz", ours_port, server_env(cache=False)) as ours,
        serve(embedding_serve(ctx, cached_port), "/readyz", cached_port, server_env()) as cached,
        serve(remembered_command(ctx, remembered_port), "/readyz", remembered_port, server_env(cache=False)) as memo,
    ):
        answers = check_answers(ours.base, requests)
        same_answers(memo.base, requests["hnsw_get"], answers["hnsw_get"], "the server with remembered searches")
        same_answers(cached.base, requests["hnsw_get"], answers["hnsw_get"], "the server with the answer cache")
        sample = {name: bodies[0] for name, bodies in answers.items()}
        bodies = ctx.work_dir / "floor-bodies.json"
        bodies.write_text(json.dumps({"get": sample["hnsw_get"].decode(), "post": sample["hnsw_post64"].decode()}))
        env = server_env()
        env["BENCH_FLOOR_BODIES"] = str(bodies)
        with serve(floor_command(floor_port), "/readyz", floor_port, env) as floor:
            cases = {
                "floor_get": (floor, requests["hnsw_get"]),
                "hnsw_get": (ours, requests["hnsw_get"]),
                "cached_get": (cached, requests["hnsw_get"]),
                "remembered_get": (memo, requests["hnsw_get"]),
                "exact_get": (ours, requests["exact_get"]),
                "floor_post64": (floor, requests["hnsw_post64"]),
                "hnsw_post64": (ours, requests["hnsw_post64"]),
                "exact_post64": (ours, requests["exact_post64"]),
            }
            for server, items in cases.values():
                plan.warm(server, items)
            rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
            for r in range(ctx.rounds):
                names = list(cases)
                names = names[r % len(names) :] + names[: r % len(names)]
                for name in names:
                    server, items = cases[name]
                    c1 = plan.latency(server, items)
                    # Heavy requests share the CPU in the server: run long enough for several waves to finish.
                    longer = seconds if ctx.quick else min(60.0, max(seconds, 3 * many * c1.p50_ms / 1000))
                    c32 = plan.throughput(server, items, longer)
                    rounds[name].append({"c1": c1.as_dict(), "c32": c32.as_dict()})
    out: dict[str, Any] = {
        "driver": "wrk" if plan.use_wrk else "httpx",
        "seconds_per_measurement": seconds,
        "connections": many,
        "servers": {
            "ours": "EMBEDDING_CACHE_BYTES=0 " + ours.command,
            "cached": cached.command,
            "remembered": "EMBEDDING_CACHE_BYTES=0 " + memo.command,
            "floor": "BENCH_FLOOR_BODIES=<captured bodies> " + floor.command,
        },
        "response_bytes": {"get": len(sample["hnsw_get"]), "post64": len(sample["hnsw_post64"])},
    }
    for name, rs in rounds.items():
        out[name] = {
            "p50_ms": round(median([x["c1"]["p50_ms"] for x in rs]), 4),
            "p99_ms": round(median([x["c1"]["p99_ms"] for x in rs]), 4),
            "rps_c32": round(median([x["c32"]["rps"] for x in rs]), 1),
            "p50_ms_c32": round(median([x["c32"]["p50_ms"] for x in rs]), 4),
            "errors": sum(x["c1"]["errors"] + x["c32"]["errors"] for x in rs),
            "requests": sum(x["c1"]["requests"] + x["c32"]["requests"] for x in rs),
            "command_c1": rs[0]["c1"]["command"],
            "command_c32": rs[0]["c32"]["command"],
            "rounds": rs,
        }
    return out


def with_ef_search(ctx: Context, ef: int) -> Path:
    """A data dir serving the same table files (symlinked) with another efSearch in its manifest."""
    data_dir = ctx.work_dir / f"ef{ef}-data"
    directory = data_dir / ctx.table
    shutil.rmtree(data_dir, ignore_errors=True)
    directory.mkdir(parents=True)
    for path in ctx.table_dir.iterdir():
        if path.name != "manifest.json":
            (directory / path.name).symlink_to(path.resolve())
    manifest = json.loads((ctx.table_dir / "manifest.json").read_text())
    manifest["index"]["spec"]["efSearch"] = ef
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return data_dir


def tuning(ctx: Context, words: list[tuple[str, int]], ef: int) -> list[dict[str, Any]]:
    """What the one-query throughput (answer cache off) would gain from a lower efSearch."""
    plan = HttpLoad.of(ctx)
    items = http_requests(ctx.table, words[: plan.words])["hnsw_get"]
    low = with_ef_search(ctx, ef)
    out = []
    for label, data_dir in (("as served", ctx.data_dir), (f"efSearch {ef}", low)):
        port = free_port()
        variant = Context(data_dir=data_dir, work_dir=ctx.work_dir, results_dir=ctx.results_dir, table=ctx.table)
        with serve(embedding_serve(variant, port), "/readyz", port, server_env(cache=False)) as server:
            plan.warm(server, items)
            c1 = plan.latency(server, items)
            c32 = plan.throughput(server, items)
            command = "EMBEDDING_CACHE_BYTES=0 " + server.command
            out.append({"variant": label, "p50_ms": c1.p50_ms, "rps_c32": c32.rps, "command": command})
    shutil.rmtree(low, ignore_errors=True)
    return out


def targets_of(http: dict[str, Any], proc: dict[str, Any], command: str) -> list[dict[str, Any]]:
    """The summary's rows: over HTTP against the floor (ours over the floor's p50 plus the in-process search: > 1 is
    slower; ours over the floor's requests/s: < 1 is fewer), in process against gensim (gensim's p50 over ours:
    > 1 is faster); every ratio paired by round."""
    targets = []
    for kind, floor, call in (
        ("get", "floor_get", "ours_hnsw_single"),
        ("post64", "floor_post64", "ours_hnsw_batch64"),
    ):
        ours, base = http[f"hnsw_{kind}"], http[floor]
        search_ms = proc[call]["p50_ms"]
        bound = base["p50_ms"] + search_ms
        label = "one query" if kind == "get" else "a batch of 64"
        over = paired(
            [r["c1"]["p50_ms"] for r in ours["rounds"]], [r["c1"]["p50_ms"] + search_ms for r in base["rounds"]]
        )
        targets.append(
            target(
                f"neighbours over HTTP, {label} (HNSW), p50 at concurrency 1 vs floor p50 + in-process search",
                ours["p50_ms"],
                bound,
                "ms",
                over,
                "<= 1.5x" if kind == "get" else "reported",
                over <= 1.5,
                ours["command_c1"],
                "bare FastAPI + search",
            )
        )
        share = paired([r["c32"]["rps"] for r in ours["rounds"]], [r["c32"]["rps"] for r in base["rounds"]])
        targets.append(
            target(
                f"neighbours over HTTP, {label} (HNSW), requests/s at concurrency {http['connections']} vs the floor",
                ours["rps_c32"],
                base["rps_c32"],
                "req/s",
                share,
                ">= 0.6x" if kind == "get" else "reported",
                share >= 0.6,
                ours["command_c32"],
                "bare FastAPI",
            )
        )
    base = http["floor_get"]
    for name, label in (
        ("cached_get", "one query asked before (answer cache hit)"),
        ("remembered_get", "one query, its search answered from memory (bench/remembered.py)"),
    ):
        variant = http[name]
        share = paired([r["c32"]["rps"] for r in variant["rounds"]], [r["c32"]["rps"] for r in base["rounds"]])
        targets.append(
            target(
                f"neighbours over HTTP, {label}, requests/s at concurrency {http['connections']} vs the floor",
                variant["rps_c32"],
                base["rps_c32"],
                "req/s",
                share,
                "reported",
                share >= 0.6,
                variant["command_c32"],
                "bare FastAPI",
            )
        )
    for mode in ("hnsw", "exact"):
        for size in ("single", "batch64"):
            label = "one query" if size == "single" else "a batch of 64"
            ours, theirs = proc[f"ours_{mode}_{size}"], proc[f"gensim_{size}"]
            speedup = paired([r["p50"] for r in theirs["rounds"]], [r["p50"] for r in ours["rounds"]])
            targets.append(
                target(
                    f"neighbours in process, {label} ({mode}), p50 vs gensim most_similar",
                    ours["p50_ms"],
                    theirs["p50_ms"],
                    "ms",
                    speedup,
                    "reported",
                    speedup > 1,
                    command,
                    "gensim",
                )
            )
    return targets


# ----------------------------------------------------------------------- run
def run(ctx: Context) -> dict[str, Any]:
    table = Table.load(ctx.table_dir)
    words = sample_words(table, 600 if ctx.quick else 5000)
    kv = keyed_vectors(table)
    proc = in_process(ctx, table, kv, words)
    sweep = recall_sweep(ctx, table, words)
    del kv
    http = over_http(ctx, words)
    good = [x["efSearch"] for x in sweep if x["recall_at_10"] >= 0.99]
    tuned = tuning(ctx, words, good[0] if good else 64)
    command = ctx.bench_command("neighbours")
    ef = table.search_width

    targets = targets_of(http, proc, command)
    return {
        "table": ctx.table,
        "table_rows": table.rows,
        "index": table.manifest.get("index", {}).get("spec"),
        "served_efSearch": ef,
        "k": K,
        "query_words": len(words),
        "in_process": proc,
        "recall": sweep,
        "http": http,
        "tuning": tuned,
        "targets": targets,
        "command": command,
        "floor_app": str(Path("bench/floor_app.py")),
        "serve_binary": str(BIN / "embedding-serve"),
    }
