"""A sharded documents table beside the same table whole: in process, and over HTTP in one run.

``python -m bench.shards --rows 100000 --shards 3 --out shards.json``

The documents: the first ``--rows`` rows of GloVe 6B 50d (the installed package), each word a document (its id
and text) with its vector. Imported twice with the same index (``--index``, default flat: the same exact answers
whole and merged): whole, and ``--shards N``.

- in process: one query's search (k 10), ``Table.run`` of the whole table beside ``ShardedTable.run`` (every
  shard searched, the lists merged), p50 over the queries; vector and keyword;
- over HTTP (wrk, POST .../search, vector k 10, the answer cache off): the whole table on one server; the sharded
  table on one server (its shards in one process); the front and N shard servers on this machine (one replica
  each). Requests/s and p50 at ``--connections`` connections for ``--seconds`` each, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BIN, dir_size, free_port, percentile, serve, server_env
from bench.load import Request, run

QUERIES = 200


def documents(rows: int, path: Path) -> tuple[np.ndarray, list[str]]:
    from index.build.sources import glove_package

    raw = glove_package.read()
    words, vectors = raw.tokens[:rows], raw.matrix[:rows]
    with path.open("w") as out:
        for word, vector in zip(words, vectors, strict=True):
            out.write(json.dumps({"id": word, "text": word, "vector": vector.tolist()}) + "\n")
    return vectors, words


def imported(source: Path, data_dir: Path, name: str, index: str, *extra: str) -> float:
    started = time.perf_counter()
    argv = [str(BIN / "embedding-index"), "-q", "import", str(source), "--name", name, "--data-dir", str(data_dir)]
    subprocess.run([*argv, "--index", index, *extra], check=True)
    return time.perf_counter() - started


def in_process(data: Path, queries: np.ndarray, words: list[str]) -> dict[str, Any]:
    import faiss

    from index.engine.hybrid import DocumentSearch
    from index.engine.hybrid import run as run_documents
    from index.engine.shards import ShardedTable
    from index.engine.table import Table, VectorSearch

    faiss.omp_set_num_threads(1)  # as the server searches: one FAISS thread per worker
    whole = Table.load(data / "whole" / "docs")
    sharded = ShardedTable.load(data / "sharded" / "docs")
    out: dict[str, Any] = {}
    for label, table in (("whole", whole), ("sharded", sharded)):
        for mode in ("vector", "keyword"):
            times = []
            for i, query in enumerate(queries):
                started = time.perf_counter()
                if mode == "vector":
                    table.run(VectorSearch(query[None, :], 10))
                else:
                    run_documents(table, DocumentSearch("keyword", 10, texts=[words[i]]))
                times.append(time.perf_counter() - started)
            out[f"{label}_{mode}_p50_ms"] = round(percentile(times, 50) * 1000, 3)
    return out


def http(data: Path, shards: int, queries: np.ndarray, connections: int, seconds: float) -> dict[str, Any]:
    env = server_env(cache=False)
    requests = [
        Request("POST", "/v1/tables/docs/search", json.dumps({"vector": q.tolist(), "k": 10}).encode()) for q in queries
    ]
    out: dict[str, Any] = {}

    def serve_on(directory: Path, extra: list[str] | None = None, more: dict[str, str] | None = None) -> Any:
        port = free_port()
        argv = [str(BIN / "embedding-serve"), "--data-dir", str(directory), "--port", str(port), *(extra or [])]
        return serve([*argv, "--no-access-log"], "/readyz", port, env={**env, **(more or {})})

    def measured(base: str, pids: list[int]) -> dict[str, Any]:
        """The load's result, and the servers' CPU seconds per answered request (every process of the path)."""
        before = cpu_seconds(pids)
        result = run(base, requests, connections, seconds, use_wrk=True).as_dict()
        spent = cpu_seconds(pids) - before
        result["server_cpu_ms_per_request"] = round(spent / max(int(result["requests"]), 1) * 1000, 3)
        return result

    for label, directory in (("whole", data / "whole"), ("one_process", data / "sharded")):
        with serve_on(directory) as server:
            out[label] = measured(server.base, [server.process.pid])
    from contextlib import ExitStack

    with ExitStack() as stack:
        replicas, pids = [], []
        for s in range(shards):
            server = stack.enter_context(serve_on(data / "sharded" / "docs", ["--tables", f"shard-{s:03d}"]))
            replicas.append([f"{server.base}/v1/tables/shard-{s:03d}"])
            pids.append(server.process.pid)
        front = stack.enter_context(serve_on(data / "front", more={"EMBEDDING_SHARDS": json.dumps({"docs": replicas})}))
        out["front"] = measured(front.base, [front.process.pid, *pids])
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds of the processes and their children."""
    import psutil

    total = 0.0
    for pid in pids:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--index", default="flat")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        vectors, words = documents(args.rows, data / "docs.jsonl")
        rng = np.random.default_rng(0)
        picked = rng.choice(len(words), QUERIES, replace=False)
        queries = vectors[picked] / np.linalg.norm(vectors[picked], axis=1, keepdims=True)
        result: dict[str, Any] = {
            "rows": args.rows,
            "shards": args.shards,
            "index": args.index,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "import_seconds": {
                "whole": round(imported(data / "docs.jsonl", data / "whole", "docs", args.index), 1),
                "sharded": round(
                    imported(data / "docs.jsonl", data / "sharded", "docs", args.index, "--shards", str(args.shards)),
                    1,
                ),
            },
        }
        (data / "front").mkdir()
        result["mib_on_disk"] = {
            "whole": round(dir_size(data / "whole" / "docs") / 2**20, 1),
            "sharded_map": round(
                sum(p.stat().st_size for p in (data / "sharded" / "docs").iterdir() if p.is_file()) / 2**20, 1
            ),
            "shards": [
                round(dir_size(data / "sharded" / "docs" / f"shard-{s:03d}") / 2**20, 1) for s in range(args.shards)
            ],
        }
        result["in_process"] = in_process(data, queries.astype(np.float32), [words[i] for i in picked])
        result["http"] = http(data, args.shards, queries, args.connections, args.seconds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
