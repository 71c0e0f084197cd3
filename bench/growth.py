"""Growth with table size: synthetic seeded tables from 100k to 2M rows at d=128 and d=300, built as flat and as
HNSW through ``embedding-index import`` (.npy + vocabulary), and a table of Llama-3 shape (128,256 x 4,096)
written as bf16 safetensors with a byte-level BPE tokenizer and imported through the Hugging Face reader.

Per table: build time and peak RSS of the build process, size on disk, single-query latency (flat: exact brute
force; HNSW: each efSearch of a sweep, with its recall@10 against exact search on held-out queries, and the
smallest efSearch reaching recall@10 >= 0.95). Rows are Gaussian with a power-law spectrum (variance of
coordinate j proportional to 1/(j+1)), so most of the variance sits in a few dozen directions, as in real
embedding tables; queries are 1,000 more rows drawn from the same distribution.

Expensive: every finished table is saved to the results file at once, and a rerun skips what is there
(``--fresh`` measures the selected sizes again; ``--growth-rows``/``--growth-dims`` select sizes). Generated
inputs and built tables are deleted as soon as a table is measured.
"""

from __future__ import annotations

import json
import shutil
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bench.common import BIN, MIB, Context, dir_size, median, paired, percentile, run_child, target
from bench.neighbours import timed
from index.table import Table

K = 10
EF_SEARCH = (16, 32, 64, 128, 256, 512, 1024)
RECALL_GOAL = 0.95
# The graph measured for the growth table (efSearch tuned by the builder). The builder's default has
# efConstruction 400, about 3x slower to build: these sizes were measured once with 80 and are kept.
HNSW = "hnsw:M=32,efConstruction=80"
LLAMA = (128_256, 4_096)
LLAMA_SPECIAL = 256  # Llama 3 reserves its last 256 ids for special tokens
BLOCK_ROWS = 65_536


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


def sweep(table: Table, queries: np.ndarray, truth: np.ndarray, quick: bool) -> list[dict[str, Any]]:
    out = []
    for ef in EF_SEARCH[:2] if quick else EF_SEARCH:
        table.index.hnsw.efSearch = ef
        _, found = table.index.search(queries, K)
        hits = sum(len(np.intersect1d(t, f)) for t, f in zip(truth, found, strict=True))
        ms = latencies(table, queries[:100], exact=False)
        out.append(
            {"efSearch": ef, "recall_at_10": round(hits / truth.size, 4), "p50_ms": round(percentile(ms, 50), 4)}
        )
        if hits / truth.size >= 0.999:
            break
    return out


def measure_cell(ctx: Context, dim: int, rows: int) -> dict[str, Any]:
    work = ctx.work_dir / f"growth-d{dim}-r{rows}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        matrix = work / "rows.npy"
        vocab = write_npy(matrix, rows, dim, seed=dim * 1_000_003 + rows)
        data_dir = work / "data"
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
        _, truth = faiss.knn(queries, np.asarray(flat.vectors), K, metric=faiss.METRIC_INNER_PRODUCT)
        builder_ef = hnsw.index.hnsw.efSearch
        recall = sweep(hnsw, queries, truth, ctx.quick)
        good = [r for r in recall if r["recall_at_10"] >= RECALL_GOAL]
        chosen = good[0]["efSearch"] if good else recall[-1]["efSearch"]
        hnsw.index.hnsw.efSearch = chosen
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
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
    fresh = bool(ctx.options.get("fresh"))
    for dim, rows in sizes(ctx):
        key = f"d{dim}-r{rows}"
        if key in result["cells"] and not fresh:
            print(f"growth: {key} already measured, skipped (--fresh to measure it again)", file=sys.stderr)
            continue
        print(f"growth: {key} ...", file=sys.stderr)
        result["cells"][key] = measure_cell(ctx, dim, rows)
        if save:
            save(result)
    chosen = ctx.options.get("growth_rows") or ctx.options.get("growth_dims")
    if result["llama"] is None or (fresh and not chosen):
        print("growth: Llama-3 shape ...", file=sys.stderr)
        result["llama"] = measure_llama(ctx)
    command = ctx.bench_command("growth")
    llama = result["llama"]
    targets = [
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
    ]
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
    result["targets"] = targets
    result["command"] = command
    return result
