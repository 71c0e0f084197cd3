"""Growth with table size: synthetic seeded tables from 100k to 2M rows at d=128 and d=300, built as flat and as
HNSW through ``embedding-index import`` (.npy + vocabulary), and a table of Llama-3 shape (128,256 x 4,096)
written as bf16 safetensors with a byte-level BPE tokenizer and imported through the Hugging Face reader.

Per table: build time and peak RSS of the build process, size on disk, single-query latency (flat: exact brute
force; HNSW: each efSearch of a sweep, with the recall@10 of its served answers against exact search on held-out
queries, and the smallest efSearch reaching recall@10 >= 0.95). Rows are Gaussian with a power-law spectrum (variance of
coordinate j proportional to 1/(j+1)), so most of the variance sits in a few dozen directions, as in real
embedding tables; queries are 1,000 more rows drawn from the same distribution.

Tables bigger than memory (``--growth-compressed-rows``, e.g. 10,000,000; off by default): the same rows at d=128
built with a compressed index (OPQ + IVF-PQ codes, answers re-ranked exactly on the memory-mapped rows), served by
a real ``embedding-serve``: its resident memory (RSS, USS, PSS; anonymous and file-backed) after a warm-up of
queries against the table's size on disk, recall@10 with and without re-ranking against exact answers (faiss.knn
over the rows, block by block; without re-ranking: the codes' own top 10 from FAISS, the index itself on purpose),
p50 per query in process and over HTTP, build time and peak build RSS. ``--quick`` measures a 20,000 x 32 one.

Expensive: every finished table is saved to the results file at once, and a rerun skips what is there
(``--fresh`` measures the selected sizes again; ``--growth-rows``/``--growth-dims`` select sizes). Generated
inputs and built tables are deleted as soon as a table is measured.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import faiss
import httpx
import numpy as np
import psutil

from bench.common import (
    BIN,
    MIB,
    Context,
    dir_size,
    free_port,
    median,
    paired,
    percentile,
    run_child,
    serve,
    server_env,
    set_ef_search,
    target,
)
from bench.neighbours import timed
from bench.workers_memory import Mem
from index.build.recall import kth_scores, tied_recall
from index.engine.table import Table

K = 10
EF_SEARCH = (16, 32, 64, 128, 256, 512, 1024)
RECALL_GOAL = 0.95
# The graph measured for the growth table (efSearch tuned by the builder). The builder's default graph has a
# higher efConstruction and builds more slowly: these sizes were measured once with 80 and are kept.
HNSW = "hnsw:M=32,efConstruction=80"
LLAMA = (128_256, 4_096)
LLAMA_SPECIAL = 256  # Llama 3 reserves its last 256 ids for special tokens
BLOCK_ROWS = 65_536
# Tables bigger than memory: one-byte codes after an OPQ rotation (the power-law spectrum puts most of the
# variance in the first coordinates; the rotation spreads it over the codes), the candidates re-ranked on the rows.
COMPRESSED = "opq:nlist=1024,m=32,rerank=16"
COMPRESSED_QUICK = (20_000, 32, "ivfpq:nlist=64,m=8,rerank=8")
COMPRESSED_DIM = 128
TRUTH_BLOCK = 1_000_000  # rows per faiss.knn call of the exact answers
WARMUP = 1_000  # HTTP queries before the server's memory is read


def compressed_rows(ctx: Context) -> list[int]:
    return [] if ctx.quick else list(ctx.options.get("growth_compressed_rows") or [])


def sizes(ctx: Context) -> list[tuple[int, int]]:
    if ctx.quick:
        return [(16, 5_000)]
    rows = ctx.options.get("growth_rows") or [100_000, 500_000, 1_000_000, 2_000_000]
    dims = ctx.options.get("growth_dims") or [128, 300]
    return [(d, n) for d in dims for n in rows]


# ------------------------------------------------------------------ inputs
def spectrum(dim: int) -> np.ndarray:
    return (1.0 / np.sqrt(np.arange(1, dim + 1))).astype(np.float32)


def sample(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
    return rng.standard_normal((rows, dim), dtype=np.float32) * spectrum(dim)


def write_npy(path: Path, rows: int, dim: int, seed: int) -> Path:
    """A seeded rows x dim float32 matrix, written block by block, and its vocabulary ``r0``, ``r1``, ..."""
    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, dim))
    for start in range(0, rows, BLOCK_ROWS):
        out[start : start + BLOCK_ROWS] = sample(rng, min(BLOCK_ROWS, rows - start), dim)
    out.flush()
    del out
    vocab = path.with_suffix(".vocab.txt")
    vocab.write_text("".join(f"r{i}\n" for i in range(rows)))
    return vocab


def import_argv(path: Path, name: str, index: str, data_dir: Path, vocab: Path | None = None) -> list[str]:
    argv = [str(BIN / "embedding-index"), "import", str(path), "--name", name, "--index", index]
    if vocab is not None:
        argv += ["--format", "npy", "--vocab", str(vocab)]
    else:
        argv += ["--format", "hf"]
    return [*argv, "--min-recall", "0", "--force", "--data-dir", str(data_dir)]


# -------------------------------------------------------------- measuring
def latencies(table: Table, queries: np.ndarray, exact: bool) -> list[float]:
    return [timed(lambda q=q: table.search(q[None, :], K, exact=exact)) * 1000 for q in queries]


def sweep(table: Table, queries: np.ndarray, kth: np.ndarray, quick: bool) -> list[dict[str, Any]]:
    """recall@10 of the answers the table serves (ties with the exact 10th, ``kth``, counted, as the builder's)
    and p50 per efSearch, up to recall 0.999."""
    out = []
    for ef in EF_SEARCH[:2] if quick else EF_SEARCH:
        set_ef_search(table, ef)
        _, found = table.knn(queries, K)
        recall = recall_of(queries, table.vectors, kth, found)
        ms = latencies(table, queries[:100], exact=False)
        out.append({"efSearch": ef, "recall_at_10": recall, "p50_ms": round(percentile(ms, 50), 4)})
        if recall >= 0.999:
            break
    return out


@contextmanager
def generated(ctx: Context, label: str, rows: int, dim: int) -> Iterator[tuple[Path, Path, Path]]:
    """A scratch directory with a seeded ``rows`` x ``dim`` input (matrix, vocabulary) and a data dir; removed after."""
    work = ctx.work_dir / f"growth-{label}d{dim}-r{rows}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        matrix = work / "rows.npy"
        vocab = write_npy(matrix, rows, dim, seed=dim * 1_000_003 + rows)
        yield matrix, vocab, work / "data"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure_cell(ctx: Context, dim: int, rows: int) -> dict[str, Any]:
    with generated(ctx, "", rows, dim) as (matrix, vocab, data_dir):
        builds = {}
        for kind, spec in (("flat", "flat"), ("hnsw", HNSW)):
            done = run_child(import_argv(matrix, kind, spec, data_dir, vocab)).check()
            builds[kind] = {
                "seconds": round(done.seconds, 2),
                "peak_rss_mib": round(done.max_rss / MIB, 1),
                "disk_mib": round(dir_size(data_dir / kind) / MIB, 1),
                "command": done.command,
            }
        matrix.unlink()
        vocab.unlink()
        queries = np.ascontiguousarray(sample(np.random.default_rng(7), 100 if ctx.quick else 1000, dim))
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        flat, hnsw = Table.load(data_dir / "flat", checksums=False), Table.load(data_dir / "hnsw", checksums=False)
        scores, _ = faiss.knn(queries, np.asarray(flat.vectors), K, metric=faiss.METRIC_INNER_PRODUCT)
        builder_ef = hnsw.index.hnsw.efSearch
        recall = sweep(hnsw, queries, kth_scores(scores), ctx.quick)
        good = [r for r in recall if r["recall_at_10"] >= RECALL_GOAL]
        chosen = good[0]["efSearch"] if good else recall[-1]["efSearch"]
        set_ef_search(hnsw, chosen)
        probes = queries[: 20 if ctx.quick else 200]
        rounds: dict[str, list[float]] = {"flat": [], "hnsw": []}
        for r in range(ctx.rounds):
            order = ("flat", "hnsw") if r % 2 == 0 else ("hnsw", "flat")
            for name in order:
                ms = latencies(flat if name == "flat" else hnsw, probes, exact=name == "flat")
                rounds[name].append(percentile(ms, 50))
        builds["flat"]["p50_ms"] = round(median(rounds["flat"]), 4)
        builds["hnsw"]["p50_ms"] = round(median(rounds["hnsw"]), 4)
        builds["hnsw"].update(
            efSearch=chosen,
            recall_at_10=next(r["recall_at_10"] for r in recall if r["efSearch"] == chosen),
            builder_efSearch=builder_ef,
            builder_recall_at_10=hnsw.manifest["index"].get("recall_at_10"),
        )
        return {
            "dim": dim,
            "rows": rows,
            "float32_mib": round(rows * dim * 4 / MIB, 1),
            "flat": builds["flat"],
            "hnsw": builds["hnsw"],
            "recall_sweep": recall,
            "latency_rounds_p50_ms": rounds,
        }


# ------------------------------------------------------- bigger than memory
def exact_kth(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """The ``k``-th exact score by inner product of each query, ``TRUTH_BLOCK`` rows at a time (never the whole
    matrix at once)."""
    best = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    for start in range(0, len(vectors), TRUTH_BLOCK):
        block = np.ascontiguousarray(vectors[start : start + TRUTH_BLOCK])
        scores, _ = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
        best = -np.sort(-np.hstack([best, scores]), axis=1)[:, :k]
    return kth_scores(best)


def recall_of(queries: np.ndarray, vectors: np.ndarray, kth: np.ndarray, found: list[list[int]] | np.ndarray) -> float:
    """recall@10 of the ``found`` ids (fewer than 10 padded as none), ties with the exact 10th counted."""
    ids = np.full((len(found), K), -1, dtype=np.int64)
    for row, answer in zip(ids, found, strict=True):
        row[: len(answer)] = answer
    return round(tied_recall(queries[: len(ids)], vectors, kth[: len(ids)], ids, K), 4)


def server_memory(pid: int) -> dict[str, float]:
    """RSS, USS and PSS (psutil) of the server and its children, and PSS split into anonymous and file pages."""
    root = psutil.Process(pid)
    rss = uss = pss = anon = file = 0
    for proc in [root, *root.children(recursive=True)]:
        full = proc.memory_full_info()
        rss, uss, pss = rss + full.rss, uss + full.uss, pss + full.pss
        mem = Mem.of(proc.pid)
        anon, file = anon + mem.anon, file + mem.file
    return {
        "rss_mib": round(rss / MIB, 1),
        "uss_mib": round(uss / MIB, 1),
        "pss_mib": round(pss / MIB, 1),
        "pss_anon_mib": round(anon / MIB, 1),
        "pss_file_mib": round(file / MIB, 1),
    }


def evict(path: Path) -> None:
    """Drop one file's pages from the page cache (as after a reboot, or for a table bigger than memory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure_compressed(ctx: Context, rows: int, dim: int, spec: str) -> dict[str, Any]:
    """Build a table of ``rows`` x ``dim`` with a compressed index, serve it, and measure memory and recall."""
    with generated(ctx, "compressed-", rows, dim) as (matrix, vocab, data_dir):
        done = run_child(import_argv(matrix, "big", spec, data_dir, vocab)).check()
        matrix.unlink()
        vocab.unlink()
        directory = data_dir / "big"
        files = {p.name: p.stat().st_size for p in directory.iterdir() if p.is_file()}
        queries = np.ascontiguousarray(sample(np.random.default_rng(7), 100 if ctx.quick else 1000, dim))
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        table = Table.load(directory, checksums=False)
        kth = exact_kth(table.vectors, queries, K)
        reranked = recall_of(queries, table.vectors, kth, [[i for i, _ in hits] for hits in table.search(queries, K)])
        without_rerank = recall_of(queries, table.vectors, kth, table.index.search(queries, K)[1])
        probes = queries[: 20 if ctx.quick else 200]
        rounds = [percentile(latencies(table, probes, exact=False), 50) for _ in range(ctx.rounds)]
        del table
        for name in ("vectors.npy", "index.faiss"):  # a cold start: the table's pages are read from disk on demand
            evict(directory / name)
        port = free_port()
        argv = [str(BIN / "embedding-serve"), "--data-dir", str(data_dir), "--tables", "big", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--workers", "1", "--log-level", "warning", "--no-access-log"]
        env = {**server_env(cache=False), "EMBEDDING_VERIFY_CHECKSUMS": "false"}
        with serve(argv, "/readyz", port, env) as server, httpx.Client(base_url=server.base, timeout=60) as client:
            idle = server_memory(server.process.pid)
            warm = min(WARMUP, len(queries)) if not ctx.quick else len(queries)
            ms, answers = [], []
            for query in queries[:warm]:
                started = time.perf_counter()
                response = client.post("/v1/tables/big/search", json={"vector": query.tolist(), "k": K})
                ms.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                answers.append(response.json()["neighbors"])
            warmed = server_memory(server.process.pid)
            served_ids = [[h["id"] for h in hits] for hits in answers]
            vectors = Table.load(directory, checksums=False).vectors
            served_recall = recall_of(queries, vectors, kth, served_ids)
            rows_check = np.asarray(vectors[served_ids[0]], dtype=np.float64)
            exact_scores = rows_check @ queries[0].astype(np.float64)
            score_error = float(np.max(np.abs(exact_scores - [h["score"] for h in answers[0]])))
            command = server.command
        disk = dir_size(directory)
        return {
            "rows": rows,
            "dim": dim,
            "spec": spec,
            "index": json.loads((directory / "manifest.json").read_text())["index"],
            "build": {"seconds": round(done.seconds, 2), "peak_rss_mib": round(done.max_rss / MIB, 1)},
            "build_command": done.command,
            "disk_mib": round(disk / MIB, 1),
            "files_mib": {name: round(size / MIB, 1) for name, size in sorted(files.items())},
            "float32_mib": round(rows * dim * 4 / MIB, 1),
            "server": {"idle": idle, "after_warmup": warmed, "warmup_queries": warm, "command": command},
            "rss_over_disk": round(warmed["rss_mib"] * MIB / disk, 4),
            "recall_at_10": reranked,
            "recall_at_10_served": served_recall,
            "recall_at_10_without_rerank": without_rerank,
            "served_score_max_error": score_error,
            "queries": len(queries),
            "p50_ms": round(median(rounds), 4),
            "http_p50_ms": round(percentile(ms, 50), 4),
        }


# -------------------------------------------------------------------- Llama
def write_safetensors(path: Path, name: str, rows: int, dim: int, seed: int) -> None:
    """One bf16 tensor (float32 draws truncated to their top 16 bits), written block by block."""
    header = json.dumps({name: {"dtype": "BF16", "shape": [rows, dim], "data_offsets": [0, rows * dim * 2]}})
    encoded = header.encode()
    encoded += b" " * (-len(encoded) % 8)
    rng = np.random.default_rng(seed)
    block = max(1, (64 << 20) // (dim * 4))
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(encoded)) + encoded)
        for start in range(0, rows, block):
            values = rng.standard_normal((min(block, rows - start), dim), dtype=np.float32) * np.float32(0.02)
            out.write((values.view(np.uint32) >> 16).astype("<u2").tobytes())


def write_tokenizer(path: Path, size: int) -> None:
    """A byte-level BPE tokenizer of ``size`` ids: the 256 byte symbols, ``Ġw<i>`` words, special tokens last."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    words = size - LLAMA_SPECIAL - len(alphabet)
    vocab = {symbol: i for i, symbol in enumerate(alphabet)}
    vocab.update({f"Ġw{i}": len(alphabet) + i for i in range(words)})
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([f"<|reserved_special_token_{i}|>" for i in range(LLAMA_SPECIAL)])
    tokenizer.save(str(path))


def brute_force(path: Path, rows: int, dim: int, row: int, k: int) -> list[int]:
    """Top-``k`` cosine neighbours of ``row`` computed straight from the bf16 safetensors (the row itself and
    the special tokens left out, as the API does by default)."""
    with open(path, "rb") as handle:
        offset = 8 + struct.unpack("<Q", handle.read(8))[0]
    raw = np.memmap(path, dtype="<u2", mode="r", offset=offset, shape=(rows, dim))

    def widen(block: np.ndarray) -> np.ndarray:
        return (block.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    query = widen(raw[row : row + 1])[0]
    query /= np.linalg.norm(query)
    scores = np.empty(rows)
    for start in range(0, rows, BLOCK_ROWS // 4):
        block = widen(raw[start : start + BLOCK_ROWS // 4])
        scores[start : start + len(block)] = block @ query / np.linalg.norm(block, axis=1)
    scores[row] = -np.inf
    scores[rows - LLAMA_SPECIAL :] = -np.inf
    return np.argsort(-scores, kind="stable")[:k].tolist()


def measure_llama(ctx: Context) -> dict[str, Any]:
    rows, dim = (1_024, 64) if ctx.quick else LLAMA
    work = ctx.work_dir / "growth-llama"
    shutil.rmtree(work, ignore_errors=True)
    model = work / "model"
    model.mkdir(parents=True)
    try:
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": rows,
            "hidden_size": dim,
            "tie_word_embeddings": False,
            "_name_or_path": "synthetic-llama-3-shape",
        }
        (model / "config.json").write_text(json.dumps(config))
        write_safetensors(model / "model.safetensors", "model.embed_tokens.weight", rows, dim, seed=3)
        write_tokenizer(model / "tokenizer.json", rows)
        data_dir = work / "data"
        done = run_child(import_argv(model, "llama", "flat", data_dir)).check()
        float32 = rows * dim * 4
        table = Table.load(data_dir / "llama")
        word = "w123"
        found = table.resolve(word)
        answer = [i for i, _ in table.most_similar([found.id], k=K, exact=True, skip_special=True)]
        expected = brute_force(model / "model.safetensors", rows, dim, found.id, K)
        ids = np.random.default_rng(5).choice(rows - LLAMA_SPECIAL, size=20 if ctx.quick else 100, replace=False)
        rounds = []
        for _ in range(ctx.rounds):
            ms = [timed(lambda i=i: table.most_similar([int(i)], k=K, exact=True)) * 1000 for i in ids]
            rounds.append(percentile(ms, 50))
        return {
            "rows": rows,
            "dim": dim,
            "source_bytes": (model / "model.safetensors").stat().st_size,
            "float32_mib": round(float32 / MIB, 1),
            "import_seconds": round(done.seconds, 2),
            "peak_rss_mib": round(done.max_rss / MIB, 1),
            "peak_over_float32": round(done.max_rss / float32, 3),
            "disk_mib": round(dir_size(data_dir / "llama") / MIB, 1),
            "query": {"word": word, "resolved": found.as_dict(), "neighbors": [table.tokens[i] for i in answer]},
            "query_equals_brute_force": answer == expected,
            "p50_ms": round(median(rounds), 4),
            "command": done.command,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------- run
def run(ctx: Context, save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    previous = ctx.results_dir / "growth.json"
    result: dict[str, Any] = {"cells": {}, "llama": None}
    if previous.is_file():
        old = json.loads(previous.read_text())
        if old.get("quick") == ctx.quick:
            result["cells"] = old.get("result", {}).get("cells", {})
            result["llama"] = old.get("result", {}).get("llama")
            result["compressed"] = old.get("result", {}).get("compressed", {})
    fresh = bool(ctx.options.get("fresh"))
    only_compressed = bool(compressed_rows(ctx)) and not ctx.options.get("growth_rows")
    for dim, rows in [] if only_compressed else sizes(ctx):
        key = f"d{dim}-r{rows}"
        if key in result["cells"] and not fresh:
            print(f"growth: {key} already measured, skipped (--fresh to measure it again)", file=sys.stderr)
            continue
        print(f"growth: {key} ...", file=sys.stderr)
        result["cells"][key] = measure_cell(ctx, dim, rows)
        if save:
            save(result)
    big = [COMPRESSED_QUICK] if ctx.quick else [(n, COMPRESSED_DIM, COMPRESSED) for n in compressed_rows(ctx)]
    result.setdefault("compressed", {})
    for rows, dim, spec in big:
        key = f"d{dim}-r{rows}"
        if key in result["compressed"] and not fresh:
            print(f"growth: compressed {key} already measured, skipped (--fresh to measure it again)", file=sys.stderr)
            continue
        print(f"growth: compressed {key} ({spec}) ...", file=sys.stderr)
        result["compressed"][key] = measure_compressed(ctx, rows, dim, spec)
        if save:
            save(result)
    chosen = ctx.options.get("growth_rows") or ctx.options.get("growth_dims")
    if not only_compressed and (result["llama"] is None or (fresh and not chosen)):
        print("growth: Llama-3 shape ...", file=sys.stderr)
        result["llama"] = measure_llama(ctx)
    command = ctx.bench_command("growth")
    llama = result["llama"]
    targets = []
    if llama is not None:
        targets.append(
            target(
                f"Llama-3 shape {llama['rows']:,} x {llama['dim']:,} bf16 import (hf reader, --index flat): peak RSS "
                "vs the float32 table",
                llama["peak_rss_mib"],
                llama["float32_mib"],
                "MiB",
                llama["peak_over_float32"],
                "<= 1.5x, neighbours query works",
                llama["peak_over_float32"] <= 1.5 and llama["query_equals_brute_force"],
                llama["command"],
                "float32 table",
            )
        )
    largest = max(result["cells"].values(), key=lambda c: (c["rows"], c["dim"]), default=None)
    if largest is not None:
        flat, hnsw = largest["flat"]["p50_ms"], largest["hnsw"]["p50_ms"]
        targets.append(
            target(
                f"single query at {largest['rows']:,} x {largest['dim']}: HNSW (efSearch {largest['hnsw']['efSearch']},"
                f" recall@10 {largest['hnsw']['recall_at_10']}) vs flat",
                hnsw,
                flat,
                "ms",
                paired(largest["latency_rounds_p50_ms"]["flat"], largest["latency_rounds_p50_ms"]["hnsw"]),
                "reported",
                True,
                command,
                "flat (exact)",
            )
        )
    for cell in result.get("compressed", {}).values():
        targets.append(
            target(
                f"{cell['rows']:,} x {cell['dim']} {cell['spec']}: embedding-serve RSS after "
                f"{cell['server']['warmup_queries']:,} queries (recall@10 {cell['recall_at_10']} re-ranked, "
                f"{cell['recall_at_10_without_rerank']} codes alone) vs the table on disk",
                cell["server"]["after_warmup"]["rss_mib"],
                cell["disk_mib"],
                "MiB",
                cell["rss_over_disk"],
                "reported",
                True,
                cell["build_command"],
                "table on disk",
            )
        )
    result["targets"] = targets
    result["command"] = command
    return result
