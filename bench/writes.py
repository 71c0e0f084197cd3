"""Live documents tables: writes over HTTP, when they are seen, searches beside a delta, compaction; beside Chroma.

- throughput: documents/s written one request after another, in batches of 1, 100 and 1,000, with each write
  fsynced (``EMBEDDING_WRITE_SYNC`` on, the default) and without; Chroma's ``add`` and ``upsert`` through its
  client (``chroma run``; its own durability, not configurable) on the same documents.
- visible: time from a write's answer to the first search that finds the document (a vector search for its own
  vector, k 1), polled; ours is zero by construction, measured all the same.
- search: median and p90 of vector searches (k 10, raw vectors, one after another) on the table with a delta
  of 0, 1,000 and 50,000 written documents (compaction held off).
- compaction: ``embedding-index compact`` of a documents table of all 400,000 GloVe rows after 10,000 changes
  (new documents, replacements and deletes), wall time and peak RSS of that process.

Documents are the GloVe 6B 50d rows: id ``w<row>``, the word as text, the row as vector; the server runs one
worker with the answer cache off.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import BIN, Context, free_port, median, percentile, rounded, run_child, serve
from bench.documents import serve_argv, server_env

KEY = "bench-writer-key-0123456789abcdef"
BATCHES = (1, 100, 1000)
TABLE = "live"


def glove() -> tuple[list[str], np.ndarray]:
    from index.build.sources import glove_package

    raw = glove_package.read()
    return list(raw.tokens), np.asarray(raw.matrix, dtype=np.float32)


def import_table(rows: range, tokens: list[str], matrix: np.ndarray, data_dir: Path, work: Path) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dim = matrix.shape[1]
    block = matrix[rows.start : rows.stop]
    vectors = pa.ListArray.from_arrays(
        pa.array(np.arange(0, len(block) * dim + 1, dim, dtype=np.int32)), pa.array(block.ravel())
    )
    ids = [f"w{i}" for i in rows]
    table = pa.table({"id": ids, "text": tokens[rows.start : rows.stop], "vector": vectors})
    path = work / f"{TABLE}-{len(rows)}.parquet"
    pq.write_table(table, path)
    argv = [str(BIN / "embedding-index"), "import", str(path), "--name", TABLE, "--format", "documents"]
    child = run_child([*argv, "--index", "flat", "--force", "--quiet", "--data-dir", str(data_dir)]).check()
    return {"rows": len(rows), "seconds": round(child.seconds, 2), "command": child.command}


def documents(rows: range, tokens: list[str], matrix: np.ndarray) -> list[dict[str, Any]]:
    return [{"id": f"w{i}", "text": tokens[i], "vector": matrix[i].tolist()} for i in rows]


def env(sync: bool) -> dict[str, str]:
    return {
        **server_env(),
        "EMBEDDING_WRITE_KEYS": KEY,
        "EMBEDDING_WRITE_SYNC": "true" if sync else "false",
        "EMBEDDING_COMPACT_ROWS": "0",  # no compaction while measuring
        "EMBEDDING_COMPACT_SECONDS": "0",
    }


def write_rate(http: httpx.Client, base: str, docs: list[dict[str, Any]], batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(docs), batch):
        answer = http.post(f"{base}/v1/tables/{TABLE}/documents", json={"documents": docs[start : start + batch]})
        answer.raise_for_status()
    return len(docs) / (time.perf_counter() - started)


def visible_ours(http: httpx.Client, base: str, docs: list[dict[str, Any]]) -> tuple[list[float], int]:
    delays, first = [], 0
    for document in docs:
        http.post(f"{base}/v1/tables/{TABLE}/documents", json={"documents": [document]}).raise_for_status()
        answered, tries = time.perf_counter(), 0
        while True:
            tries += 1
            hits = http.post(f"{base}/v1/tables/{TABLE}/search", json={"vector": document["vector"], "k": 1}).json()
            if hits["hits"] and hits["hits"][0]["id"] == document["id"]:
                break
        delays.append(time.perf_counter() - answered)
        first += tries == 1
    return delays, first


def search_times(http: httpx.Client, base: str, queries: np.ndarray) -> dict[str, float]:
    times = []
    for query in queries:
        started = time.perf_counter()
        http.post(f"{base}/v1/tables/{TABLE}/search", json={"vector": query.tolist(), "k": 10}).raise_for_status()
        times.append(time.perf_counter() - started)
    return {"p50_ms": rounded(median(times) * 1000), "p90_ms": rounded(percentile(times, 90) * 1000)}


def ours(ctx: Context, tokens: list[str], matrix: np.ndarray, base_rows: int, counts: dict[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {"throughput": {}, "visible_ms": None, "search": {}}
    data_dir = ctx.work_dir / "writes-data"
    out["import"] = import_table(range(base_rows), tokens, matrix, data_dir, ctx.work_dir)
    next_row = base_rows
    for sync in (True, False):
        port = free_port()
        with (
            serve(serve_argv(data_dir, [TABLE], port), "/readyz", port, env(sync)) as server,
            httpx.Client(timeout=120, headers={"X-API-Key": KEY}) as http,
        ):
            for batch in BATCHES:
                docs = documents(range(next_row, next_row + counts[batch]), tokens, matrix)
                next_row += counts[batch]
                out["throughput"][f"{'fsync' if sync else 'no fsync'}, batch {batch}"] = rounded(
                    write_rate(http, server.base, docs, batch)
                )
            if sync:
                docs = documents(range(next_row, next_row + 20), tokens, matrix)
                next_row += 20
                delays, first = visible_ours(http, server.base, docs)
                out["visible_ms"] = {
                    "median": rounded(median(delays) * 1000),
                    "max": rounded(max(delays) * 1000),
                    "first_search": first,
                }
        (data_dir / ".writes" / f"{TABLE}.log").unlink(missing_ok=True)  # the next server starts from the import
    # searches beside a delta of 0, 1,000 and 50,000 documents
    rng = np.random.default_rng(0)
    queries = matrix[rng.choice(base_rows, 200, replace=False)]
    port = free_port()
    with (
        serve(serve_argv(data_dir, [TABLE], port), "/readyz", port, env(False)) as server,
        httpx.Client(timeout=120, headers={"X-API-Key": KEY}) as http,
    ):
        written = 0
        for delta in (0, counts["delta_small"], counts["delta_large"]):
            docs = documents(range(next_row, next_row + delta - written), tokens, matrix)
            next_row += len(docs)
            write_rate(http, server.base, docs, 1000) if docs else None
            written = delta
            search_times(http, server.base, queries[:20])  # warm
            out["search"][f"delta {delta:,}"] = search_times(http, server.base, queries)
    return out


def chroma(
    ctx: Context, tokens: list[str], matrix: np.ndarray, base_rows: int, counts: dict[int, int]
) -> dict[str, Any]:
    import chromadb
    from chromadb.config import Settings

    out: dict[str, Any] = {"throughput": {}, "visible_ms": None, "version": chromadb.__version__}
    port = free_port()
    argv = [str(BIN / "chroma"), "run", "--path", str(ctx.work_dir / "chroma-db"), "--host", "127.0.0.1"]
    argv += ["--port", str(port)]
    with serve(argv, "/api/v2/heartbeat", port, {**os.environ, "ANONYMIZED_TELEMETRY": "False"}):
        api = chromadb.HttpClient(host="127.0.0.1", port=port, settings=Settings(anonymized_telemetry=False))
        collection = api.create_collection("live", configuration={"hnsw": {"space": "cosine"}}, embedding_function=None)
        for start in range(0, base_rows, 1000):
            stop = min(start + 1000, base_rows)
            collection.add(
                ids=[f"w{i}" for i in range(start, stop)], embeddings=matrix[start:stop], documents=tokens[start:stop]
            )
        next_row = base_rows
        for method in ("add", "upsert"):
            for batch in BATCHES:
                rows = range(next_row, next_row + counts[batch])
                next_row += counts[batch]
                call = getattr(collection, method)
                started = time.perf_counter()
                for start in range(rows.start, rows.stop, batch):
                    stop = min(start + batch, rows.stop)
                    call(
                        ids=[f"w{i}" for i in range(start, stop)],
                        embeddings=matrix[start:stop],
                        documents=tokens[start:stop],
                    )
                out["throughput"][f"{method}, batch {batch}"] = rounded(len(rows) / (time.perf_counter() - started))
        delays, first = [], 0
        for i in range(next_row, next_row + 20):
            collection.add(ids=[f"w{i}"], embeddings=matrix[i : i + 1], documents=[tokens[i]])
            answered, tries = time.perf_counter(), 0
            while time.perf_counter() - answered < 60:
                tries += 1
                if collection.query(query_embeddings=matrix[i : i + 1], n_results=1, include=[])["ids"][0] == [f"w{i}"]:
                    break
            delays.append(time.perf_counter() - answered)
            first += tries == 1
        out["visible_ms"] = {
            "median": rounded(median(delays) * 1000),
            "max": rounded(max(delays) * 1000),
            "first_search": first,
        }
    return out


def compaction(ctx: Context, tokens: list[str], matrix: np.ndarray, rows: int, changes: int) -> dict[str, Any]:
    data_dir = ctx.work_dir / "compact-data"
    imported = import_table(range(rows), tokens, matrix, data_dir, ctx.work_dir)
    rng = np.random.default_rng(1)
    picked = rng.choice(rows, changes // 2, replace=False)
    replaced, deleted = picked[: len(picked) // 2], picked[len(picked) // 2 :]
    new = [{**d, "id": f"new-{d['id']}"} for d in documents(range(changes - len(picked)), tokens, matrix)]
    swapped = [{**d, "vector": [-x for x in d["vector"]]} for d in documents(replaced.tolist(), tokens, matrix)]
    port = free_port()
    with (
        serve(serve_argv(data_dir, [TABLE], port), "/readyz", port, env(False)) as server,
        httpx.Client(timeout=300, headers={"X-API-Key": KEY}) as http,
    ):
        write_rate(http, server.base, new + swapped, 1000)
        for start in range(0, len(deleted), 1000):
            ids = [f"w{i}" for i in deleted[start : start + 1000].tolist()]
            http.post(f"{server.base}/v1/tables/{TABLE}/documents/delete", json={"ids": ids}).raise_for_status()
    argv = [str(BIN / "embedding-index"), "compact", TABLE, "--quiet", "--data-dir", str(data_dir)]
    child = run_child(argv).check()
    return {
        "rows": rows,
        "import_seconds": imported["seconds"],
        "new": len(new),
        "replaced": len(replaced),
        "deleted": len(deleted),
        "seconds": round(child.seconds, 2),
        "peak_rss_mib": round(child.max_rss / 2**20),
        "command": child.command,
    }


def run(ctx: Context) -> dict[str, Any]:
    tokens, matrix = glove()
    quick = ctx.quick
    base_rows = 2_000 if quick else 20_000
    counts = {1: 50 if quick else 300, 100: 1_000 if quick else 5_000, 1000: 2_000 if quick else 20_000}
    counts["delta_small"], counts["delta_large"] = (100, 1_000) if quick else (1_000, 50_000)
    result: dict[str, Any] = {
        "documents": "GloVe 6B 50d rows (id, word as text, row as vector)",
        "base_rows": base_rows,
    }
    result["ours"] = ours(ctx, tokens, matrix, base_rows, counts)
    try:
        result["chroma"] = chroma(ctx, tokens, matrix, base_rows, counts)
    except ImportError:
        result["chroma"] = None  # the bench extra is not installed
    compact_rows = 20_000 if quick else int(os.environ.get("BENCH_COMPACT_ROWS", "400000"))
    result["compaction"] = compaction(ctx, tokens, matrix, compact_rows, 1_000 if quick else 10_000)
    return result
