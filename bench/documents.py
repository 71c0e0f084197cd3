"""Documents tables: importing 400,000 documents from Parquet against the same vectors as ``.npy``, filtered
search over HTTP at selectivities from 100% to 0.1% on a flat and an HNSW table, and the memory of 4 workers.

The table is synthetic and seeded: the GloVe 6B 50d rows as vectors, the GloVe words as ids, and three payload
fields: ``lang`` (seven values, 55% of the documents down to 0.1%), ``year`` (1925-2024, uniform) and ``tags``
(1-3 of 50 tags of Zipf frequencies, plus ``archive`` on 0.1% of the documents). :data:`FILTERS` pass about
100%, 10%, 1% and 0.1% of them; the fractions reported are the ones measured.

- import: ``embedding-index import`` of the Parquet file (``--format documents``) and of the same vectors as
  ``.npy`` + vocabulary (``--format npy``), both ``--index flat``, in alternating order: each child's wall time
  and peak RSS (``bench.peak``). The HNSW table is imported once, from the Parquet file;
- search: one ``embedding-serve`` (answer cache off) serving both tables. Every query vector is asked of each
  table unfiltered and with each filter, the twelve cases in rotating order, one request at a time: p50 and p90
  over the queries, the hits each answer holds; the HNSW answers against the flat table's (exact filtered
  search), the flat answers against a float64 brute force over the passing documents;
- workers: ``embedding-serve --workers 4`` (and ``--workers 1``, for the whole server's growth) over the HNSW
  table, warmed with filtered queries on new connections (spread over the workers); USS, PSS and RSS of every
  process (psutil). The workers are forked from a supervisor that imported their modules, so a worker's USS (its
  private pages) is what one more worker adds;
- engine: the same searches in one process (``Table.run``), and each filter's evaluation without the table's
  filter cache (what the first request with a filter pays), which splits the HTTP figures into their parts; and
  both sides of the line between exact search of the passing rows and the index (:func:`crossover`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import (
    BIN,
    MIB,
    Context,
    Stages,
    dir_size,
    display,
    free_port,
    own_session,
    paired,
    percentile,
    run_child,
    serve,
    stop,
    target,
    wait_workers,
)
from bench.common import server_env as default_env

ROWS, QUICK_ROWS = 400_000, 20_000
QUERIES, QUICK_QUERIES = 300, 20
WARMUP = 5  # untimed requests per case first
K = 10
HNSW_SPEC = "hnsw:M=32,efConstruction=40"  # the builder tunes efSearch to recall@10 >= 0.99
WORKERS = 4
WARM_REQUESTS, QUICK_WARM_REQUESTS = 400, 60
SWEEP_YEARS = (1, 2, 3, 5, 7, 10, 20, 50)  # years passing in the crossover sweep: 1% to 50% of the documents
SWEEP_QUERIES = 100
FIRST_YEAR, LAST_YEAR = 1925, 2024
LANGS = {"en": 0.55, "de": 0.20, "fr": 0.10, "es": 0.08, "ja": 0.05, "pt": 0.019, "la": 0.001}
TAGS = 50
RARE_TAG, RARE_SHARE = "archive", 0.001
FILTERS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "100%": {"year": {"gte": FIRST_YEAR}},
    "10%": {"lang": "fr"},
    "1%": {"lang": "fr", "year": {"gte": 2015}},
    "0.1%": {"tags": RARE_TAG},
}
TABLES = {"flat": "docs-flat", "hnsw": "docs-hnsw"}


@dataclass
class Corpus:
    ids: list[str]
    matrix: np.ndarray  # float32, as given
    lang: np.ndarray
    year: np.ndarray
    tag_offsets: np.ndarray
    tag_values: np.ndarray
    rare: np.ndarray  # has the rare tag

    def passing(self, case: str) -> np.ndarray:
        """The documents a case's filter passes, computed here with numpy (not with ``index.engine.filters``)."""
        fr = self.lang == "fr"
        masks: dict[str, np.ndarray] = {
            "none": np.ones(len(self.ids), dtype=bool),
            "100%": self.year >= FIRST_YEAR,
            "10%": fr,
            "1%": fr & (self.year >= 2015),
            "0.1%": self.rare,
        }
        return masks[case]


def make_corpus(rows: int, seed: int = 0) -> Corpus:
    from index.build.sources import glove_package

    raw = glove_package.read()
    rng = np.random.default_rng(seed)
    names = np.array(list(LANGS))
    lang = names[rng.choice(len(names), size=rows, p=list(LANGS.values()))]
    year = rng.integers(FIRST_YEAR, LAST_YEAR + 1, size=rows)
    zipf = 1 / np.arange(1, TAGS + 1)
    common = rng.integers(1, 4, size=rows)
    rare = rng.random(rows) < RARE_SHARE
    offsets = np.concatenate([[0], np.cumsum(common + rare)]).astype(np.int32)
    is_rare = np.zeros(offsets[-1], dtype=bool)
    is_rare[offsets[1:][rare] - 1] = True  # the rare tag comes last
    codes = np.full(offsets[-1], TAGS)
    codes[~is_rare] = rng.choice(TAGS, size=int(common.sum()), p=zipf / zipf.sum())
    vocabulary = np.array([f"topic-{i:02d}" for i in range(TAGS)] + [RARE_TAG])
    return Corpus(raw.tokens[:rows], raw.matrix[:rows], lang, year, offsets, vocabulary[codes], rare)


def write_inputs(corpus: Corpus, directory: Path) -> dict[str, Path]:
    """The documents as Parquet (id, lang, year, tags, vector), and the vectors as .npy + vocabulary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, dim = corpus.matrix.shape
    vectors = pa.ListArray.from_arrays(
        pa.array(np.arange(0, rows * dim + 1, dim, dtype=np.int32)), pa.array(corpus.matrix.ravel())
    )
    documents = pa.table(
        {
            "id": pa.array(corpus.ids),
            "lang": pa.array(corpus.lang),
            "year": pa.array(corpus.year),
            "tags": pa.ListArray.from_arrays(pa.array(corpus.tag_offsets), pa.array(corpus.tag_values)),
            "vector": vectors,
        }
    )
    paths = {"parquet": directory / "documents.parquet", "npy": directory / "vectors.npy"}
    paths["vocab"] = directory / "vectors.vocab.txt"
    pq.write_table(documents, paths["parquet"])
    np.save(paths["npy"], corpus.matrix)
    paths["vocab"].write_text("\n".join(corpus.ids) + "\n", encoding="utf-8")
    return paths


# ------------------------------------------------------------------- import
def import_argv(source: Path, fmt: str, name: str, spec: str, data_dir: Path, vocab: Path | None = None) -> list[str]:
    argv = [str(BIN / "embedding-index"), "import", str(source), "--name", name, "--format", fmt]
    argv += ["--index", spec, "--force", "--data-dir", str(data_dir)]
    return argv + (["--vocab", str(vocab)] if vocab is not None else [])


def one_import(argv: list[str], table_dir: Path) -> dict[str, Any]:
    done = run_child(argv).check()
    manifest = json.loads((table_dir / "manifest.json").read_text())
    return {
        "seconds": round(done.seconds, 3),
        "peak_rss_mib": round(done.max_rss / MIB, 1),
        "read_seconds": manifest["build"].get("read_seconds"),
        "build_seconds": manifest.get("build_seconds"),
        "disk_mib": round(dir_size(table_dir) / MIB, 1),
        "index": manifest["index"]["spec"],
        "recall_at_10": manifest["index"].get("recall_at_10"),
        "command": done.command,
    }


def imports(ctx: Context, inputs: dict[str, Path], data_dir: Path) -> dict[str, Any]:
    sides = {
        "documents": import_argv(inputs["parquet"], "documents", TABLES["flat"], "flat", data_dir),
        "npy": import_argv(inputs["npy"], "npy", "npy-flat", "flat", data_dir, inputs["vocab"]),
    }
    names = {"documents": TABLES["flat"], "npy": "npy-flat"}
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    order = list(sides)
    for r in range(ctx.rounds):
        for side in order[r % 2 :] + order[: r % 2]:
            runs[side].append(one_import(sides[side], data_dir / names[side]))
    shutil.rmtree(data_dir / "npy-flat")
    hnsw = one_import(
        import_argv(inputs["parquet"], "documents", TABLES["hnsw"], HNSW_SPEC, data_dir), data_dir / TABLES["hnsw"]
    )
    out: dict[str, Any] = {"flat": {}, "hnsw_documents": hnsw}
    for side, items in runs.items():
        out["flat"][side] = {
            "seconds": float(np.median([x["seconds"] for x in items])),
            "peak_rss_mib": max(x["peak_rss_mib"] for x in items),
            "read_seconds": float(np.median([x["read_seconds"] for x in items])),
            "build_seconds": float(np.median([x["build_seconds"] for x in items])),
            "disk_mib": items[-1]["disk_mib"],
            "rounds": items,
            "command": items[0]["command"],
        }
    docs, npy = out["flat"]["documents"], out["flat"]["npy"]
    out["time_ratio"] = paired([x["seconds"] for x in docs["rounds"]], [x["seconds"] for x in npy["rounds"]])
    out["peak_ratio"] = docs["peak_rss_mib"] / npy["peak_rss_mib"]
    out["sizes"] = {p.name: p.stat().st_size for p in inputs.values()}
    return out


# ------------------------------------------------------------------- search
def serve_argv(data_dir: Path, tables: list[str], port: int, workers: int = 1, log_level: str = "warning") -> list[str]:
    argv = [str(BIN / "embedding-serve"), "--data-dir", str(data_dir), "--tables", ",".join(tables)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--log-level", log_level]
    return [*argv, "--no-access-log"]


def server_env() -> dict[str, str]:
    return default_env(cache=False)  # every request is searched


def request_body(vector: np.ndarray, case: str) -> bytes:
    body: dict[str, Any] = {"vector": vector.tolist(), "k": K}
    if FILTERS[case] is not None:
        body["filter"] = FILTERS[case]
    return json.dumps(body).encode()


def http_search(base: str, queries: np.ndarray) -> dict[str, Any]:
    """Each query asked of every (table, case), one request at a time in rotating order: latencies and hits."""
    cases = [(table, case) for table in TABLES for case in FILTERS]
    bodies = {(table, case): [request_body(q, case) for q in queries] for table, case in cases}
    latencies: dict[tuple[str, str], list[float]] = {key: [] for key in cases}
    hits: dict[tuple[str, str], list[list[str]]] = {key: [] for key in cases}
    passing: dict[tuple[str, str], int | None] = {}
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=base, timeout=120) as client:

        def ask(key: tuple[str, str], i: int) -> tuple[float, dict[str, Any]]:
            started = time.perf_counter()
            response = client.post(f"/v1/tables/{TABLES[key[0]]}/search", content=bodies[key][i], headers=headers)
            seconds = time.perf_counter() - started
            response.raise_for_status()
            return seconds, response.json()

        for key in cases:  # the filter cache, the pages of the table and the connection
            for i in range(min(WARMUP, len(queries))):
                ask(key, i)
        for i in range(len(queries)):
            turn = i % len(cases)
            for key in cases[turn:] + cases[:turn]:
                seconds, answer = ask(key, i)
                latencies[key].append(seconds * 1000)
                hits[key].append([hit["id"] for hit in answer["hits"]])
                passing[key] = answer.get("passing")
    return {"latencies": latencies, "hits": hits, "passing": passing}


def unit64(matrix: np.ndarray) -> np.ndarray:
    out = matrix.astype(np.float64)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def kth_best(
    unit: np.ndarray, queries: np.ndarray, masks: dict[str, np.ndarray], block: int = 32
) -> dict[str, np.ndarray]:
    """Per case, the float64 cosine of each query's k-th best passing document (a float64 brute force)."""
    out = {case: np.empty(len(queries)) for case in masks}
    for start in range(0, len(queries), block):
        scores = queries[start : start + block] @ unit.T
        for case, mask in masks.items():
            k = min(K, int(mask.sum()))
            masked = np.where(mask, scores, -np.inf)
            out[case][start : start + block] = -np.partition(-masked, k - 1, axis=1)[:, k - 1]
    return out


def search_figures(corpus: Corpus, queries: np.ndarray, answers: dict[str, Any]) -> dict[str, Any]:
    from index.build.recall import tied_found

    row_of = {token: i for i, token in enumerate(corpus.ids)}
    unit, q = unit64(corpus.matrix), unit64(queries)
    masks = {case: corpus.passing(case) for case in FILTERS}
    kth = kth_best(unit, q, masks)
    out: dict[str, Any] = {}
    for case, mask in masks.items():
        expected = min(K, int(mask.sum()))
        flat_hits, hnsw_hits = answers["hits"][("flat", case)], answers["hits"][("hnsw", case)]
        exact_ok = 0
        for i, ids in enumerate(flat_hits):  # every hit passes and scores within float32 rounding of the k-th best
            rows = np.array([row_of[x] for x in ids], dtype=np.int64)
            good = len(rows) == expected and bool(np.all(mask[rows]))
            exact_ok += good and bool(np.all(unit[rows] @ q[i] >= kth[case][i] - 1e-5))
        # a passing HNSW hit counts when it ties the exact k-th (imported copies of a document are equal rows)
        found = np.full((len(hnsw_hits), K), -1, dtype=np.int64)
        for row, ids in zip(found, hnsw_hits, strict=True):
            row[: len(ids)] = [row_of[x] for x in ids]
        found[(found >= 0) & ~mask[found]] = -1
        tied = tied_found(q, unit, kth[case], found).sum(axis=1)
        recall = [min(1.0, hits / max(1, len(b))) for hits, b in zip(tied, flat_hits, strict=True)]
        row: dict[str, Any] = {
            "passing": int(mask.sum()),
            "fraction": float(mask.mean()),
            "passing_reported": {t: answers["passing"][(t, case)] for t in TABLES},
            "flat_equals_brute_force": int(exact_ok),
            "queries": len(queries),
            "hnsw_recall_at_10": float(np.mean(recall)),
            "hnsw_recall_min": float(np.min(recall)),
        }
        for table in TABLES:
            ms = answers["latencies"][(table, case)]
            got = [len(ids) for ids in answers["hits"][(table, case)]]
            row[table] = {
                "p50_ms": percentile(ms, 50),
                "p90_ms": percentile(ms, 90),
                "hits_min": min(got),
                "hits_mean": float(np.mean(got)),
            }
        out[case] = row
    for case in FILTERS:
        for table in TABLES:
            out[case][table]["ratio_p50"] = out[case][table]["p50_ms"] / out["none"][table]["p50_ms"]
            out[case][table]["ratio_p90"] = out[case][table]["p90_ms"] / out["none"][table]["p90_ms"]
    return out


# ------------------------------------------------------------------ workers
SMAPS = {"Private_Dirty": "private_dirty", "Private_Clean": "private_clean", "Pss_Anon": "pss_anon"}


def smaps(pid: int) -> dict[str, float]:
    """Private pages split into written (heap: Private_Dirty) and clean (mostly file pages that no other process
    has touched), and the anonymous part of the PSS, in MiB, from /proc/PID/smaps_rollup."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0].rstrip(":") in SMAPS:
            out[SMAPS[parts[0].rstrip(":")]] = round(int(parts[1]) / 1024, 1)
    return out


def memory(root: Any, workers: int) -> list[dict[str, Any]]:
    """USS, PSS and RSS (MiB, psutil) of every process of a server, each with its role and its smaps split."""
    import psutil

    out = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info()
            line = " ".join(proc.cmdline())
            split = smaps(proc.pid)
        except (psutil.NoSuchProcess, FileNotFoundError):
            continue
        if workers == 1:
            role = "worker"  # uvicorn serves in the main process
        elif proc.pid == root.pid:
            role = "supervisor"
        else:
            role = "helper" if "resource_tracker" in line else "worker"
        sizes = {k: round(getattr(info, k) / MIB, 1) for k in ("uss", "pss", "rss")}
        out.append({"role": role, **sizes, **split})
    return out


def warm(base: str, table: str, bodies: list[bytes], requests: int) -> None:
    """Filtered and unfiltered searches, each on a new connection, so the kernel spreads them over the workers."""
    headers = {"content-type": "application/json"}
    local = threading.local()

    def one(i: int) -> None:
        if not hasattr(local, "client"):  # one client per thread (making one costs milliseconds), no keep-alive
            limits = httpx.Limits(max_keepalive_connections=0)
            local.client = httpx.Client(base_url=base, timeout=120, limits=limits)
        response = local.client.post(f"/v1/tables/{table}/search", content=bodies[i % len(bodies)], headers=headers)
        response.raise_for_status()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(requests)))


def worker_memory(data_dir: Path, table: str, workers: int, bodies: list[bytes], requests: int) -> dict[str, Any]:
    import psutil

    port = free_port()
    argv = serve_argv(data_dir, [table], port, workers, log_level="info")  # info: each worker logs its start-up
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        process = own_session(argv, stdout=log, stderr=subprocess.STDOUT, env=server_env())
        try:
            wait_workers(process, base, workers, log, f"embedding-serve --workers {workers} did not start", pause=0.1)
            root = psutil.Process(process.pid)
            idle = memory(root, workers)
            try:
                warm(base, table, bodies, requests)
            except httpx.HTTPError as e:
                log.seek(0)
                tail = log.read().decode(errors="replace")[-3000:]
                raise RuntimeError(f"embedding-serve --workers {workers}: {e!r}; its log ends:\n{tail}") from e
            time.sleep(0.5)
            after = memory(root, workers)
        finally:
            stop(process)

    def summary(procs: list[dict[str, Any]]) -> dict[str, Any]:
        mine = [p for p in procs if p["role"] == "worker"]
        return {
            "processes": procs,
            "sum_pss_mib": round(sum(p["pss"] for p in procs), 1),
            "worker_uss_mib": round(float(np.mean([p["uss"] for p in mine])), 1),
            "worker_pss_mib": round(float(np.mean([p["pss"] for p in mine])), 1),
            "worker_rss_mib": round(float(np.mean([p["rss"] for p in mine])), 1),
            "worker_private_dirty_mib": round(float(np.mean([p["private_dirty"] for p in mine])), 1),
            "worker_private_clean_mib": round(float(np.mean([p["private_clean"] for p in mine])), 1),
        }

    return {"workers": workers, "idle": summary(idle), "warm": summary(after), "command": display(argv)}


# ------------------------------------------------------------------- engine
def engine_child(data_dir: Path, queries_path: Path, out: Path) -> None:
    """In one process on one thread (as a server worker): each filter's evaluation without the cache, and the
    p50 of ``Table.run`` for every (table, case), in the HTTP measurement's order."""
    import faiss

    from index.engine.filters import evaluate
    from index.engine.table import SearchOptions, Table, VectorSearch

    faiss.omp_set_num_threads(1)
    queries = np.load(queries_path)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    tables = {name: Table.load(data_dir / TABLES[name], checksums=False) for name in TABLES}
    payload = tables["hnsw"].payload
    assert payload is not None
    evaluation = {}
    for case, spec in FILTERS.items():
        if spec is None:
            continue
        times = []
        for _ in range(5):
            started = time.perf_counter()
            evaluate(payload, spec)
            times.append((time.perf_counter() - started) * 1000)
        evaluation[case] = float(np.median(times))
    cases = [(table, case) for table in TABLES for case in FILTERS]
    rows = {key: None if FILTERS[key[1]] is None else tables[key[0]].filter(FILTERS[key[1]]) for key in cases}
    times_ms: dict[str, list[float]] = {f"{t}:{c}": [] for t, c in cases}
    for i in range(len(queries)):
        turn = i % len(cases)
        for table, case in cases[turn:] + cases[:turn]:
            search = VectorSearch(queries[i : i + 1], K, (), SearchOptions(), rows[(table, case)])
            started = time.perf_counter()
            tables[table].run(search)
            times_ms[f"{table}:{case}"].append((time.perf_counter() - started) * 1000)
    result = {
        "filter_evaluation_ms": evaluation,
        "p50_ms": {key: float(np.median(v[WARMUP:] or v)) for key, v in times_ms.items()},
        "crossover": crossover(tables["hnsw"], queries[:SWEEP_QUERIES]),
        "sweep_queries": min(SWEEP_QUERIES, len(queries)),
    }
    out.write_text(json.dumps(result))


def crossover(table: Any, queries: np.ndarray) -> list[dict[str, Any]]:
    """Both sides of the line between exact search of the passing rows and the index told to keep to them, at
    fractions around it (year ranges): each way's p50 (ms, one query at a time) and the index's recall@10
    against the exact answer, with efSearch widened as the engine does (1/sqrt(fraction)), by 1/fraction^(1/4)
    and not at all; and the exact search over rows gathered beforehand (what caching a filter's gathered rows
    would leave)."""
    return [
        sweep_point(table, table.filter({"year": {"gte": LAST_YEAR + 1 - years}}), queries) for years in SWEEP_YEARS
    ]


def sweep_point(table: Any, rows: Any, queries: np.ndarray) -> dict[str, Any]:
    import faiss

    from index.build.recall import tied_recall
    from index.engine.knn import exact_knn, exact_knn_rows, filtered_params, index_top
    from index.engine.table import FILTER_INDEX_FRACTION

    index, vectors = table.index, table.vectors
    gathered = np.ascontiguousarray(vectors[rows.ids])
    widened: Any = filtered_params(index, rows.selector(), rows.fraction)
    plain: Any = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
    plain.efSearch, plain.sel = index.hnsw.efSearch, rows.selector()
    fourth: Any = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
    fourth.efSearch, fourth.sel = int(np.ceil(index.hnsw.efSearch * rows.fraction**-0.25)), rows.selector()
    ways: dict[str, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
        "exact": lambda q: exact_knn_rows(q, vectors, K, rows.ids, rows.mask),
        "exact_gathered": lambda q: exact_knn(q, gathered, K),
        "index": lambda q: index_top(index, q, K, widened.efSearch, vectors, table.rerank, widened),
        "index_fourth_root": lambda q: index_top(index, q, K, fourth.efSearch, vectors, table.rerank, fourth),
        "index_unwidened": lambda q: index_top(index, q, K, plain.efSearch, vectors, table.rerank, plain),
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    answers: dict[str, list[np.ndarray]] = {way: [] for way in ways}
    kth = np.empty(len(queries), dtype=np.float32)
    for i in range(len(queries)):
        for way, search in ways.items():
            started = time.perf_counter()
            scores, ids = search(queries[i : i + 1])
            times[way].append((time.perf_counter() - started) * 1000)
            answers[way].append(ids[0] if way != "exact_gathered" else rows.ids[ids[0]])
            if way == "exact":
                kth[i] = scores[0][-1]
    recall = {  # a hit tying the exact k-th counts (:mod:`index.build.recall`)
        way: tied_recall(queries, vectors, kth, np.vstack(answers[way]), K)
        for way in ("index", "index_fourth_root", "index_unwidened")
    }
    return {
        "fraction": rows.fraction,
        "engine_uses": "index" if rows.fraction >= FILTER_INDEX_FRACTION else "exact",
        "efSearch": {
            "index": widened.efSearch,
            "index_fourth_root": fourth.efSearch,
            "index_unwidened": plain.efSearch,
        },
        "p50_ms": {way: float(np.median(v)) for way, v in times.items()},
        "recall_at_10": recall,
        "gathered_mib": round(gathered.nbytes / MIB, 2),
    }


def engine(data_dir: Path, queries: np.ndarray, work: Path) -> dict[str, Any]:
    queries_path, out = work / "queries.npy", work / "engine.json"
    np.save(queries_path, queries)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "bench.documents", "engine", str(data_dir), str(queries_path), str(out)]
    done = run_child(argv, env=env).check()
    result: dict[str, Any] = json.loads(out.read_text())
    result["command"] = done.command
    return result


# ---------------------------------------------------------------------- run
def run(ctx: Context) -> dict[str, Any]:
    rows = QUICK_ROWS if ctx.quick else ROWS
    work = Path(tempfile.mkdtemp(prefix="documents-", dir=ctx.work_dir))
    data_dir = work / "data"
    stages = Stages()
    done = stages.done

    try:
        corpus = make_corpus(rows)
        inputs = write_inputs(corpus, work)
        result: dict[str, Any] = {"rows": rows, "dim": int(corpus.matrix.shape[1]), "k": K, "filters": FILTERS}
        done("inputs")
        result["import"] = imports(ctx, inputs, data_dir)
        done("imports")
        for path in inputs.values():
            path.unlink()
        rng = np.random.default_rng(1)
        picked = np.sort(rng.choice(rows, QUICK_QUERIES if ctx.quick else QUERIES, replace=False))
        queries = corpus.matrix[picked]
        port = free_port()
        with serve(serve_argv(data_dir, list(TABLES.values()), port), "/readyz", port, server_env()) as server:
            answers = http_search(server.base, queries)
            result["server_command"] = server.command
        done("http_search")
        result["search"] = search_figures(corpus, queries, answers)
        done("brute_force")
        bodies = [request_body(q, case) for q in queries[:50] for case in FILTERS]
        requests = QUICK_WARM_REQUESTS if ctx.quick else WARM_REQUESTS
        result["workers"] = {str(n): worker_memory(data_dir, TABLES["hnsw"], n, bodies, requests) for n in (1, WORKERS)}
        result["workers_table_mib"] = round(dir_size(data_dir / TABLES["hnsw"]) / MIB, 1)
        done("workers")
        result["engine"] = engine(data_dir, queries, work)
        done("engine")
        result["stage_seconds"] = stages.seconds
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["targets"] = targets(ctx, result)
    return result


def targets(ctx: Context, r: dict[str, Any]) -> list[dict[str, Any]]:
    command = ctx.bench_command("documents")
    flat = r["import"]["flat"]
    out = [
        target(
            f"documents import: {r['rows']:,} documents from Parquet vs the same vectors as .npy + vocabulary "
            "(embedding-index import --index flat, whole process)",
            flat["documents"]["seconds"],
            flat["npy"]["seconds"],
            "s",
            r["import"]["time_ratio"],
            "<= 2x",
            r["import"]["time_ratio"] <= 2,
            command,
            ".npy import",
        ),
        target(
            "documents import: peak RSS of the Parquet import vs the .npy import",
            flat["documents"]["peak_rss_mib"],
            flat["npy"]["peak_rss_mib"],
            "MiB",
            r["import"]["peak_ratio"],
            "reported",
            True,
            command,
            ".npy import",
        ),
    ]
    search = r["search"]
    for table in TABLES:
        for case in FILTERS:
            if case == "none":
                continue
            cell, base = search[case][table], search["none"][table]
            out.append(
                target(
                    f"filtered search over HTTP, {table} table, {case} of the documents pass "
                    f"({100 * search[case]['fraction']:.3g}%): p50 vs unfiltered",
                    cell["p50_ms"],
                    base["p50_ms"],
                    "ms",
                    cell["ratio_p50"],
                    "<= 2x",
                    cell["ratio_p50"] <= 2,
                    command,
                    "unfiltered",
                )
            )
    worst = min((c for c in FILTERS if c != "none"), key=lambda c: search[c]["hnsw_recall_at_10"])
    recall = search[worst]["hnsw_recall_at_10"]
    out.append(
        target(
            f"filtered HNSW search: recall@10 against exact filtered search (lowest: {worst} passing)",
            recall,
            1.0,
            "recall",
            recall,
            ">= 0.95",
            recall >= 0.95,
            command,
            "exact",
        )
    )
    fewest = min(search[c][t]["hits_min"] for c in FILTERS for t in TABLES if search[c]["passing"] >= K)
    out.append(
        target(
            "filtered search: fewest hits in an answer where at least k pass (every table and selectivity)",
            fewest,
            K,
            "hits",
            fewest / K,
            "always k",
            fewest == K,
            command,
            "k",
        )
    )
    warm = r["workers"][str(WORKERS)]["warm"]
    extra = warm["worker_uss_mib"]  # a forked worker's private memory: what one more worker adds
    out.append(
        target(
            f"memory per worker ({WORKERS} workers, mean USS after filtered queries) vs the table on disk",
            extra,
            r["workers_table_mib"],
            "MiB",
            extra / r["workers_table_mib"],
            "< 0.2x",
            extra < 0.2 * r["workers_table_mib"],
            command,
            "table on disk",
        )
    )
    return out


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "engine":
        engine_child(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.exit("usage: python -m bench.documents engine DATA_DIR QUERIES.npy OUT.json")
