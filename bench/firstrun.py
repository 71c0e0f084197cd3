"""The first run: how soon a new default table answers, and the index candidates for it side by side.

- First answer, as ``make run`` does it: ``embedding-index build --defer-index`` into an empty data directory,
  then ``embedding-serve``. Seconds to the table's publication, to the first 200 from
  ``/v1/tables/glove-6b-50d/neighbors?token=heart``, and to the background index's publication and reload
  (``/readyz`` no longer reports a build); one-query p50 over HTTP while exact and once indexed (answer cache off).
- Candidates: each index the builder could choose for GloVe 6B 50d, built in this process one after another with
  the builder's own code: build seconds, the search parameter tuned to recall@10 >= 0.99 on the builder's
  sample, recall@10 on 1,000 frequent words (the query words left in, against exact search), one-query p50 on
  one thread, index size; and the ``auto`` rule's HNSW build estimate beside the real build.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import faiss
import httpx
import numpy as np

from bench.common import BIN, REPO, Context, free_port, median, percentile, server_env, stop, wait_ready
from index.clean import normalise
from index.faiss_index import IndexSpec, build_and_measure, estimate_hnsw_seconds, parse_spec
from index.sources import glove_package

K = 10
QUERIES = 1_000
FREQUENT = 20_000  # queries are drawn from the most frequent words, as people ask
CANDIDATES = ("hnsw", "hnsw:efConstruction=100", "ivf", "flat")
QUICK_ROWS = 30_000
QUICK_SPEC = "hnsw:M=8,efConstruction=20"


def p50_one_by_one(index: faiss.Index | None, unit: np.ndarray, queries: np.ndarray) -> float:
    """Median milliseconds of one query at a time on one thread (flat: the exact matrix-vector product)."""
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


def candidates(unit: np.ndarray, quick: bool) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1)
    ids = rng.choice(min(FREQUENT, len(unit)), size=min(QUERIES, len(unit)), replace=False)
    queries = np.ascontiguousarray(unit[ids])
    _, truth = faiss.knn(queries, unit, K, metric=faiss.METRIC_INNER_PRODUCT)
    out = []
    for text in (QUICK_SPEC, "ivf", "flat") if quick else CANDIDATES:
        spec = parse_spec(text, len(unit))
        spec.target_recall = 0.99
        estimate = None
        if spec.kind == "hnsw":
            graph = IndexSpec(kind="hnsw", m=spec.m, ef_construction=spec.ef_construction)
            estimate = estimate_hnsw_seconds(unit, graph)
        cpu, wall = time.process_time(), time.perf_counter()
        built = build_and_measure(unit, spec, min_recall=0.0)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        index = built.index
        found = truth if index is None else index.search(queries, K)[1]
        recall = float(np.mean([len(np.intersect1d(t, f)) / K for t, f in zip(truth, found, strict=True)]))
        size = 0 if index is None else len(faiss.serialize_index(index))
        out.append(
            {
                "spec": text,
                "described": built.info["spec"],
                "build_seconds": round(wall, 1),
                "build_cpu_seconds": round(cpu, 1),
                "hnsw_estimate_seconds": None if estimate is None else round(estimate, 1),
                "builder_recall_at_10": built.info["recall_at_10"],
                "frequent_words_recall_at_10": round(recall, 4),
                "p50_ms": round(p50_one_by_one(index, unit, queries[:300]), 4),
                "index_mib": round(size / 2**20, 1),
            }
        )
        print(f"bench: firstrun: {text}: {out[-1]}", file=sys.stderr, flush=True)
    return out


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
        process = subprocess.Popen(
            serve, stdout=log, stderr=subprocess.STDOUT, env=server_env(cache=False), cwd=REPO, start_new_session=True
        )
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
    unit, _ = normalise(np.ascontiguousarray(raw.matrix[:rows]))
    words = raw.tokens[100 : 100 + (20 if ctx.quick else 200)]
    result = {"rows": rows, "first_answer": first_answer(ctx, words), "candidates": candidates(unit, ctx.quick)}
    print(f"bench: firstrun: {json.dumps(result['first_answer'])}", file=sys.stderr, flush=True)
    return result
