"""FAISS index construction from a spec, recall measurement against exact search, and the ``auto`` choice.

Rows are unit-normalised, so inner product equals cosine. Specs:

- ``auto``: ``flat`` below 100,000 rows; else the index that is fastest to search among those whose build fits
  the build-time budget (``--build-budget``): HNSW (M=32, efConstruction=200) when a timed build of a 20,000-row
  sample, scaled to the whole table by the growth measured on it, fits; else IVF. Either way the search parameter
  (efSearch, nprobe) is raised until recall@10 >= 0.99 (or ``--min-recall``, if higher) on a sample of rows (each
  one's own row left out of its answers, as a neighbours query leaves it out), and the manifest records the
  estimate and why the index was chosen. A graph that stays below ``--min-recall`` (rows that tie massively) gives
  way to IVF (``fallback_spec``, ``build_or_instead``);
- ``flat``: exact inner product (the service then searches the memory-mapped matrix directly);
- ``hnsw`` or ``hnsw:M=32,efConstruction=200,efSearch=48`` (those are the defaults, efSearch apart);
- ``ivf`` or ``ivf:nlist=2048,nprobe=64`` (nlist defaults to about 2 sqrt(rows), nprobe is tuned when not given);
- ``ivfpq`` or ``ivfpq:nlist=4096,m=16,nbits=8,nprobe=64,rerank=8``: IVF over product-quantised codes (``m`` codes
  of ``nbits`` bits per row, ``m`` dividing the dimension; by default the largest divisor of the dimension up to a
  quarter of it, at most 64); ``opq=1``, or the spec ``opq`` / ``opq:...``, rotates the rows first (an OPQ matrix
  trained with the codes). Such an index holds a few bytes per row, not the rows: the engine asks it for
  ``rerank`` x k candidates and re-scores those exactly against the memory-mapped unit rows, so answers keep
  exact cosines; nprobe is tuned for the re-ranked recall, and the manifest records the codes' own recall too;
- any other string is passed to ``faiss.index_factory`` (e.g. ``IVF1024,Flat``, ``HNSW16``, ``IVF256,PQ10``): an
  HNSW index (``HNSW32``, ``HNSW16_SQ8``) has its efSearch tuned as ``hnsw``'s is, an index with an IVF layer its
  nprobe as ``ivf``'s is, behind a transform too (``PCA32,HNSW32``, ``L2norm,HNSW32``); an inverted file whose
  codes or projection hold less than the rows (PQ, SQ, PCA) stops at the recall they allow, as ``ivfpq``'s does
  (a graph's efSearch candidates are scored on the rows, so its efSearch is raised as any graph's); other search
  parameters are FAISS's defaults.

Recall is that of the answers a table serves from the index (``index.engine.knn.index_knn``), not FAISS's own top k.

Why these: HNSW answers a query several times faster than IVF at the same recall on word tables, so it is the
choice whenever its build is affordable; an IVF build costs seconds to minutes at any size.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast

import faiss
import numpy as np

from index.build.budget import AUTO_BUDGET_SECONDS
from index.build.faiss_stderr import faiss_warnings
from index.build.recall import kth_scores, others, tie_epsilon, tied_recall
from index.engine.knn import index_knn, index_path, search_width, searched_index, set_search_params
from index.errors import InvalidQuery
from index.progress import Progress, duration, note, record

AUTO_FLAT_BELOW = 100_000
AUTO_TARGET_RECALL = 0.99
ESTIMATE_SAMPLE = 20_000
EF_SEARCH_STEPS = (16, 24, 32, 40, 44, 48, 52, 56, 60, 64, 80, 96, 128, 160, 192, 256, 384, 512, 1024)
NPROBE_STEPS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
RECALL_SAMPLE = 1000
RECALL_K = 10
ADD_BLOCK_HNSW = 10_000  # rows per add call, the same on every machine: the graph depends on them
ADD_BLOCK = 100_000
HNSW_MAX_M = 256  # links per node of an HNSW graph, at most (FAISS needs at least 2)
HNSW_THREADS_PER_CORE = 2  # OpenMP threads per core while an HNSW graph is built (hnsw_add_threads)
IVF_TRAIN_POINTS_PER_LIST = 64
IVF_TRAIN_ITERATIONS = 10
PQ_NBITS = 8
PQ_RERANK = 8  # candidates per answer re-scored exactly, by default
PQ_TRAIN_POINTS_PER_CODE = 64  # training rows per PQ centroid (2 ** nbits of them per sub-quantiser)
OPQ_NBITS = 8  # the codes FAISS's OPQ rotation trains with, whatever the index's nbits
OPQ_ITERATIONS = 10  # fewer than FAISS's 50: the same re-ranked recall for less training (docs/builder.md)
PLATEAU_STEPS = 3  # indexes of codes: stop raising efSearch / nprobe once this many steps gained under PLATEAU_GAIN
PLATEAU_GAIN = 0.002


@dataclass
class IndexSpec:
    kind: str  # "flat", "auto", "hnsw", "ivf", "ivfpq" or "factory"
    factory: str = "Flat"
    m: int = 32
    # 200 rather than FAISS's 40: a better graph needs a lower efSearch for recall@10 0.99, so queries are faster
    # for a longer build; 400 builds nearly twice as long for no faster query (BENCHMARKS.md, section 7).
    ef_construction: int = 200
    ef_search: int | None = None  # None: tune for the target recall
    nlist: int | None = None  # IVF lists; None: about 2 sqrt(rows)
    nprobe: int | None = None  # None: tune for the target recall
    target_recall: float | None = None
    pq_m: int | None = None  # ivfpq: codes per row
    nbits: int = PQ_NBITS  # ivfpq: bits per code
    opq: bool = False  # ivfpq: an OPQ rotation before the codes
    rerank: int = 1  # candidates per answer re-scored exactly against the rows (1: none)
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def compressed(self) -> bool:
        """Whether the index holds codes rather than the rows (its answers are re-ranked on the rows)."""
        return self.kind == "ivfpq"

    def describe(self) -> dict[str, Any]:
        if self.kind == "hnsw":
            return {"kind": "hnsw", "M": self.m, "efConstruction": self.ef_construction, "efSearch": self.ef_search}
        if self.kind == "ivf":
            return {"kind": "ivf", "nlist": self.nlist, "nprobe": self.nprobe}
        if self.kind == "ivfpq":
            return {
                "kind": "ivfpq",
                "nlist": self.nlist,
                "nprobe": self.nprobe,
                "m": self.pq_m,
                "nbits": self.nbits,
                "opq": self.opq,
                "rerank": self.rerank,
                "code_bytes_per_row": (self.pq_m or 0) * self.nbits // 8,
            }
        if self.kind == "factory":  # with its tuned efSearch (HNSW) or nprobe (IVF), applied when loaded
            tuned = {"efSearch": self.ef_search, "nprobe": self.nprobe}
            return {"kind": "factory", "factory": self.factory, **{k: v for k, v in tuned.items() if v is not None}}
        return {"kind": self.kind, "factory": self.factory}


def _options(spec: str, allowed: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in filter(None, spec.partition(":")[2].split(",")):
        key, _, value = item.partition("=")
        try:
            number = int(value)
        except ValueError:
            raise InvalidQuery(f"index spec {spec!r}: {item!r} is not KEY=INTEGER") from None
        if key not in allowed:
            raise InvalidQuery(f"index spec {spec!r}: unknown option {key!r} ({', '.join(allowed)})")
        if number < 1:
            raise InvalidQuery(f"index spec {spec!r}: options must be positive")
        out[key] = number
    return out


def parse_spec(spec: str, rows: int, dim: int | None = None) -> IndexSpec:
    """Turn a command-line index spec into an :class:`IndexSpec` for a table of ``rows`` rows (of ``dim``
    dimensions: the ``ivfpq`` kinds check and default their code count with it); refused where it needs more rows
    (:func:`too_few_rows`)."""
    out = read_spec(spec, rows, dim)
    if short := too_few_rows(out, rows):
        raise InvalidQuery(f"index spec {spec.strip()!r}: {short}")
    return out


def too_few_rows(spec: IndexSpec, rows: int) -> str | None:
    """Why ``rows`` rows cannot build ``spec`` (more IVF lists, or product-code centroids, than rows), or None."""
    if spec.kind in ("ivf", "ivfpq") and spec.nlist is not None and spec.nlist > rows:
        return f"nlist {spec.nlist} is more than the {rows} rows"
    codes = 2 ** max(spec.nbits, OPQ_NBITS) if spec.opq else 2**spec.nbits  # FAISS's OPQ trains 8-bit codes
    if spec.kind == "ivfpq" and rows < codes:
        return f"{rows} rows cannot train {codes} codes per sub-quantiser"
    return None


def read_spec(spec: str, rows: int, dim: int | None = None) -> IndexSpec:
    """:func:`parse_spec` but for what depends on the rows' count: the spec as given, for ``rows`` rows."""
    spec = spec.strip()
    if not spec:  # as an unset variable gives it (--index "$SPEC"): not auto, nor the FAISS factory string ""
        raise InvalidQuery("index spec is empty: give auto, flat, hnsw, ivf, ivfpq, opq or a FAISS factory string")
    if spec == "auto":
        if rows < AUTO_FLAT_BELOW:
            return IndexSpec(kind="flat")
        return IndexSpec(kind="auto", target_recall=AUTO_TARGET_RECALL)
    if spec == "flat":
        return IndexSpec(kind="flat")
    if spec == "hnsw" or spec.startswith("hnsw:"):
        given = _options(spec, ("M", "efConstruction", "efSearch"))
        out = IndexSpec(kind="hnsw")
        out.m = given.get("M", out.m)
        if not 2 <= out.m <= HNSW_MAX_M:  # FAISS crashes on M=1; a huge M writes gigabytes of links
            raise InvalidQuery(f"index spec {spec!r}: M must be from 2 to {HNSW_MAX_M}")
        out.ef_construction = given.get("efConstruction", out.ef_construction)
        out.ef_search = given.get("efSearch")
        return out
    if spec == "ivf" or spec.startswith("ivf:"):
        given = _options(spec, ("nlist", "nprobe"))
        return IndexSpec(kind="ivf", nlist=given.get("nlist", default_nlist(rows)), nprobe=given.get("nprobe"))
    for prefix in ("ivfpq", "opq"):
        if spec == prefix or spec.startswith(prefix + ":"):
            return _parse_pq(spec, prefix, rows, dim)
    if dim is not None:
        _factory(dim, spec)  # a string FAISS cannot make is refused now, not when a deferred build comes to it
    return IndexSpec(kind="factory", factory=spec)


def check_spec(spec: str, dim: int | None = None) -> None:
    """Refuse a spec of the wrong form before any input is read or trained on: its options (names, integers, ranges)
    and, given the dimension, a factory string FAISS cannot make. What depends on the rows (nlist, codes) is checked
    when they are known."""
    parse_spec(spec, sys.maxsize, dim)


def _factory(dim: int, factory: str) -> faiss.Index:
    """The empty index of a FAISS factory string; InvalidQuery for one FAISS cannot make."""
    links = re.search(r"HNSW(\d+)", factory)
    if links and not 2 <= int(links.group(1)) <= HNSW_MAX_M:  # FAISS crashes on M=1
        raise InvalidQuery(f"index {factory!r}: an HNSW graph's M must be from 2 to {HNSW_MAX_M}")
    try:
        index: faiss.Index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise InvalidQuery(f"FAISS cannot build index {factory!r}: {str(exc).splitlines()[0]}") from None
    return index


def _parse_pq(spec: str, prefix: str, rows: int, dim: int | None) -> IndexSpec:
    keys = ("nlist", "nprobe", "m", "nbits", "rerank") + (("opq",) if prefix == "ivfpq" else ())
    given = _options(spec, keys)
    out = IndexSpec(kind="ivfpq", nlist=given.get("nlist", default_nlist(rows)), nprobe=given.get("nprobe"))
    out.nbits = given.get("nbits", PQ_NBITS)
    out.opq = prefix == "opq" or given.get("opq", 0) == 1
    out.rerank = given.get("rerank", PQ_RERANK)
    out.pq_m = given.get("m", default_pq_m(dim) if dim else None)
    if given.get("opq", 1) not in (0, 1) or not 1 <= out.nbits <= 16:
        raise InvalidQuery(f"index spec {spec!r}: opq is 0 or 1, nbits 1 to 16")
    if dim is not None and out.pq_m is not None and dim % out.pq_m:
        raise InvalidQuery(f"index spec {spec!r}: m={out.pq_m} does not divide the dimension {dim}")
    return out


def default_pq_m(dim: int) -> int:
    """The largest divisor of ``dim`` up to a quarter of it (at most 64): 32 one-byte codes for 128 dimensions."""
    return max(m for m in range(1, max(1, min(64, dim // 4)) + 1) if dim % m == 0)


def default_nlist(rows: int) -> int:
    """A power of two near 2 sqrt(rows): lists of a few hundred rows, k-means in seconds to minutes."""
    power: int = 2 ** round(math.log2(max(1.0, 2 * math.sqrt(rows))))  # int ** int is typed Any (negative powers)
    return max(1, min(rows, power))


def _add(index: faiss.Index, vectors: np.ndarray, block: int, threads: int | None = None) -> None:
    before = faiss.omp_get_max_threads()
    if threads is not None:
        faiss.omp_set_num_threads(threads)
    try:
        with Progress("adding rows to the index", len(vectors)) as progress:
            for start in range(0, len(vectors), block):
                part = np.ascontiguousarray(vectors[start : start + block])
                index.add(part)
                progress.advance(len(part))
    finally:
        faiss.omp_set_num_threads(before)


def hnsw_add_threads() -> int:
    """OpenMP threads for an HNSW graph's inserts: twice FAISS's default (one per core), unless OMP_NUM_THREADS
    sets them. The inserts of a level end at a barrier and take each touched node's lock; with a thread per core,
    libgomp waits there by spinning, and a thread slowed by other work on the machine keeps its static share of the
    rows while the rest spin. With more threads than cores libgomp sleeps instead of spinning and the kernel
    spreads the threads over the cores: the same graph for less CPU, and on a machine shared with other work
    often in less time (BENCHMARKS.md, "Server memory and load + index, before and after")."""
    threads = max(1, faiss.omp_get_max_threads())
    return threads if os.environ.get("OMP_NUM_THREADS") else HNSW_THREADS_PER_CORE * threads


def _hnsw(dim: int, spec: IndexSpec) -> faiss.Index:
    index = faiss.IndexHNSWFlat(dim, spec.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = spec.ef_construction
    return index


def build_index(vectors: np.ndarray, spec: IndexSpec, seed: int = 0) -> faiss.Index:
    """Build and fill an inner-product index over unit rows."""
    dim = vectors.shape[1]
    index: faiss.Index
    if spec.kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif spec.kind == "hnsw":
        index = _hnsw(dim, spec)
    elif spec.kind == "ivf":
        nlist = spec.nlist or default_nlist(len(vectors))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        _seed_ivf(index, seed)
    elif spec.kind == "ivfpq":
        index = _ivfpq(dim, len(vectors), spec, seed)
    else:
        index = _factory(dim, spec.factory or "")
    try:
        _fill(index, vectors, spec, seed)
    except RuntimeError as exc:  # FAISS refuses what it cannot train or fill (e.g. more lists than rows)
        what = spec.factory if spec.kind == "factory" else spec.kind
        raise Unbuildable(f"FAISS cannot build index {what!r}: {str(exc).splitlines()[0]}") from None
    return index


def _fill(index: faiss.Index, vectors: np.ndarray, spec: IndexSpec, seed: int) -> None:
    """Train ``index`` when it needs it, then add ``vectors`` (a graph, from a spec or a factory string, in smaller
    blocks and on :func:`hnsw_add_threads`)."""
    if not index.is_trained:
        step = f"training the index ({type(index).__name__})"
        note(f"{step} ...")
        train = np.ascontiguousarray(vectors)
        if spec.kind in ("ivf", "ivfpq"):  # k-means sees IVF_TRAIN_POINTS_PER_LIST rows per list (and PQ its
            # PQ_TRAIN_POINTS_PER_CODE rows per code), drawn here with the seed
            size = (
                cast(faiss.IndexIVF, index).nlist * IVF_TRAIN_POINTS_PER_LIST  # "ivf": an IndexIVFFlat
                if spec.kind == "ivf"
                else _pq_train_size(spec)
            )
            size = min(len(vectors), size)
            rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size=size, replace=False))
            train = np.ascontiguousarray(vectors[rows])
        with faiss_warnings(), Progress(step, None):  # FAISS's own warnings, as the builder's lines
            index.train(train)  # k-means reports nothing: the step's clock says how long it has run
    if isinstance(searched_index(index), faiss.IndexHNSW):
        _add(index, vectors, ADD_BLOCK_HNSW, hnsw_add_threads())
    else:
        _add(index, vectors, ADD_BLOCK)


def _seed_ivf(index: faiss.IndexIVF, seed: int) -> None:
    index.cp.niter = IVF_TRAIN_ITERATIONS
    index.cp.max_points_per_centroid = IVF_TRAIN_POINTS_PER_LIST
    index.cp.seed = seed


def _pq_train_size(spec: IndexSpec) -> int:
    codes: int = 2**spec.nbits  # int ** int is typed Any (negative powers)
    return max((spec.nlist or 1) * IVF_TRAIN_POINTS_PER_LIST, codes * PQ_TRAIN_POINTS_PER_CODE)


def _ivfpq(dim: int, rows: int, spec: IndexSpec, seed: int) -> faiss.Index:
    """IVF over PQ codes of the (OPQ-rotated) rows, k-means seeded."""
    spec.nlist = spec.nlist or default_nlist(rows)
    spec.pq_m = spec.pq_m or default_pq_m(dim)
    if dim % spec.pq_m:
        raise InvalidQuery(f"index spec ivfpq: m={spec.pq_m} does not divide the dimension {dim}")
    ivf = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, spec.nlist, spec.pq_m, spec.nbits, faiss.METRIC_INNER_PRODUCT)
    _seed_ivf(ivf, seed)
    ivf.pq.cp.seed = seed
    ivf.pq.cp.niter = IVF_TRAIN_ITERATIONS
    ivf.pq.cp.max_points_per_centroid = PQ_TRAIN_POINTS_PER_CODE
    if not spec.opq:
        return ivf
    opq = faiss.OPQMatrix(dim, spec.pq_m)
    opq.niter = opq.niter_pq_0 = OPQ_ITERATIONS
    opq.max_train_points = 2**spec.nbits * PQ_TRAIN_POINTS_PER_CODE
    return faiss.IndexPreTransform(opq, ivf)


def estimate_hnsw_seconds(vectors: np.ndarray, spec: IndexSpec, seed: int = 0) -> float:
    """Seconds to build ``spec``'s graph over all of ``vectors``: a sample's build, timed, scaled to the rows.

    An insertion into a larger graph costs more (a longer search, rows no longer in the CPU caches), by how much
    depends on the rows (more for high-dimensional noise than for word vectors), so the growth is measured: the
    sample, in random order, is added in parts (an eighth, a quarter, a half, all of it) and the build time taken
    to grow as a power of the rows, fitted to the times at those points (``scaled_build_seconds``; the notes to
    BENCHMARKS.md section 7 compare the estimate with whole builds). The sample is built on one thread, whose CPU time
    does not depend on other load on the machine (several threads spend more of it on so few rows); the estimate
    is that time spread over FAISS's threads, as the whole build spreads it."""
    n = len(vectors)
    size = min(n, ESTIMATE_SAMPLE)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(n, size=size, replace=False))
    sample = np.ascontiguousarray(vectors[rows][rng.permutation(size)])
    index = _hnsw(vectors.shape[1], spec)
    points = sorted({max(1, size // part) for part in (8, 4, 2, 1)})  # rows added when each time is taken
    threads = max(1, faiss.omp_get_max_threads())
    faiss.omp_set_num_threads(1)
    try:
        with Progress("estimating the HNSW build time", size) as progress:
            started, seconds, done = time.process_time(), [], 0
            for point in points:
                index.add(sample[done:point])
                seconds.append(time.process_time() - started)
                progress.advance(point - done)
                done = point
    finally:
        faiss.omp_set_num_threads(threads)
    return scaled_build_seconds(points, seconds, n) / threads


def scaled_build_seconds(rows: list[int], seconds: list[float], total: int) -> float:
    """The build time of ``total`` rows, from the times ``seconds`` a sample's build took to reach ``rows`` rows:
    time = a * rows ** power, fitted (least squares on the logarithms), the power between 1 (a constant cost per
    row) and 2, scaled from the last point."""
    if total <= rows[-1] or len(rows) < 2 or min(seconds) <= 0:
        return seconds[-1] * total / rows[-1]
    power = float(np.polyfit(np.log(rows), np.log(seconds), 1)[0])
    return float(seconds[-1] * (total / rows[-1]) ** min(2.0, max(1.0, power)))


def choose_auto(vectors: np.ndarray, budget: float, seed: int = 0) -> tuple[IndexSpec, dict[str, Any]]:
    """The ``auto`` rule for a table of at least ``AUTO_FLAT_BELOW`` rows: HNSW if its build fits ``budget``."""
    hnsw = IndexSpec(kind="hnsw", target_recall=AUTO_TARGET_RECALL)
    note(f"estimating the HNSW build time from {min(len(vectors), ESTIMATE_SAMPLE):,} rows ...")
    estimate = estimate_hnsw_seconds(vectors, hnsw, seed)
    record(hnsw_estimate_seconds=round(estimate, 1))
    why: dict[str, Any] = {
        "rule": "flat below 100,000 rows; else HNSW when its estimated build time fits the budget, else IVF; "
        "the search parameter tuned to recall@10 >= 0.99",
        "budget_seconds": budget,
        "hnsw_estimate_seconds": round(estimate, 1),
    }
    if estimate <= budget:
        why["chosen"] = "hnsw"
        note(f"HNSW: about {duration(estimate)} to build, within the budget of {duration(budget)}")
        return hnsw, why
    ivf = auto_ivf(len(vectors))
    why["chosen"] = "ivf"
    note(f"IVF: HNSW would take about {duration(estimate)}, over the budget of {duration(budget)}")
    return ivf, why


class Unbuildable(InvalidQuery):
    """An index FAISS cannot train or fill over the rows given (a factory string's IVF of more lists than rows)."""


class BelowRecall(InvalidQuery):
    """An index whose recall@10 stays below ``--min-recall``: the spec it was built from (``describe``), the recall
    it reached and, for ``auto``, why it was chosen."""

    def __init__(self, message: str, index: dict[str, Any], recall: float, choice: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.index = index
        self.recall = recall
        self.choice = choice


def fallback_spec(rows: int, refused: str) -> IndexSpec:
    """The index taken where the ``refused`` kind of index misses ``--min-recall``: what ``auto`` takes, exact search
    below ``AUTO_FLAT_BELOW`` rows, else IVF, whose recall rises to that of exact search as nprobe nears its lists
    (they hold the rows), so that it reaches any recall asked. In place of an index other than ``auto``'s or
    ``hnsw``'s graph (which hold the rows), exact search at any size: ``ivfpq`` or a factory string may hold codes
    of a few bytes a row, whose rows an IVF index would hold again, in memory (an ``ivf`` misses only with its
    nprobe fixed by hand)."""
    if rows < AUTO_FLAT_BELOW or refused not in ("auto", "hnsw"):
        return IndexSpec(kind="flat")
    return auto_ivf(rows)


def auto_ivf(rows: int) -> IndexSpec:
    """``auto``'s IVF for ``rows`` rows, where the graph's build would exceed the budget or the graph misses the
    recall: ``default_nlist`` lists, nprobe tuned to ``AUTO_TARGET_RECALL`` (or the ``--min-recall`` above it)."""
    return IndexSpec(kind="ivf", nlist=default_nlist(rows), target_recall=AUTO_TARGET_RECALL)


@dataclass
class RecallProbe:
    """``sample`` rows drawn with ``seed`` as queries, with the k-th score of their exact top 10 computed once, each
    query's own row left out of its answers (:func:`index.build.recall.others`) as a neighbours query leaves it out;
    recall counts a found row whose exact score ties the k-th (:mod:`index.build.recall`)."""

    queries: np.ndarray
    ids: np.ndarray  # the queries' own rows
    kth: np.ndarray
    vectors: np.ndarray  # the unit rows the found ones are scored on
    k: int

    @classmethod
    def draw(cls, vectors: np.ndarray, seed: int = 0, sample: int = RECALL_SAMPLE) -> RecallProbe:
        rng = np.random.default_rng(seed)
        ids = np.sort(rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False))
        queries = np.ascontiguousarray(vectors[ids])
        k = min(RECALL_K, len(vectors) - 1)
        if k == 0:  # a table of one row: no neighbour to find
            return cls(queries, ids, np.zeros(len(ids), dtype=np.float32), vectors, k)
        scores, found = faiss.knn(queries, np.ascontiguousarray(vectors), k + 1, metric=faiss.METRIC_INNER_PRODUCT)
        return cls(queries, ids, kth_scores(others(scores, found, ids)), vectors, k)

    def recall(self, index: faiss.Index, rerank: int = 1) -> float:
        """Recall@10 of ``index`` against exact search, ties counted, of the answers a table serves from it
        (:func:`index.engine.knn.index_knn` at its search width; ``rerank``: its candidates per answer)."""
        if self.k == 0:
            return 1.0
        _, found = index_knn(index, self.queries, self.k + 1, search_width(index), self.vectors, rerank)
        return tied_recall(self.queries, self.vectors, self.kth, others(found, found, self.ids), self.k)

    def copied(self) -> int:
        """The sampled rows with at least k copies (each one's k-th exact score is 1, rounding apart): a graph's
        links from such a row go to its copies, among which its search loses its way."""
        if self.k == 0:
            return 0
        return int(np.count_nonzero(self.kth >= 1.0 - tie_epsilon(self.vectors.shape[1])))


@dataclass
class BuiltIndex:
    index: faiss.Index | None  # None for "flat"
    info: dict[str, Any]


def search_param(index: faiss.Index) -> str | None:
    """The search parameter tuned on ``index``, built from a spec or a factory string alike: ``efSearch`` for an HNSW
    graph, ``nprobe`` for an index with an IVF layer, None for any other; behind a transform too (``PCA32,HNSW32``,
    ``OPQ16,IVF256,PQ16``: :func:`searched_index`, where the loader sets it)."""
    inner = searched_index(index)
    if isinstance(inner, faiss.IndexHNSW):
        return "efSearch"
    return "nprobe" if isinstance(inner, faiss.IndexIVF) else None


def recall_limit(index: faiss.Index) -> str:
    """What levels an inverted file's recall off below 1 however many lists it scans, as the tuning says it, or
    ``""``: codes of fewer bytes per row than the rows' float32s (PQ, SQ: "the codes limit it"), or a PCA, which
    keeps fewer dimensions or at least centres the rows, so that their inner products are no longer the cosines
    ("the PCA limits it (32 of 50 dimensions, centred)"). A graph's is ``""`` whatever its codes or PCA: the table
    scores its efSearch candidates on the rows, so a wider search finds more of the exact top 10."""
    inner = searched_index(index)  # its codes, measured against the dimensions it holds (after any transform)
    if not isinstance(inner, faiss.IndexIVF):
        return ""
    # FAISS's stubs type a chain as a list; it is a SWIG vector, read with at() and size()
    chains: list[Any] = [wrapper.chain for wrapper in index_path(index) if isinstance(wrapper, faiss.IndexPreTransform)]
    transforms = (faiss.downcast_VectorTransform(chain.at(i)) for chain in chains for i in range(chain.size()))
    pcas = [
        f"{t.d_out} of {t.d_in} dimensions, centred" if t.d_out < t.d_in else "it centres the rows"
        for t in transforms
        if isinstance(t, faiss.PCAMatrix)
    ]
    codes = int(inner.code_size) < 4 * inner.d
    pca = f"the PCA ({'; '.join(pcas)})" if pcas else ""
    if pca and codes:
        return f"{pca} and the codes limit it"
    if pca:
        return f"the PCA limits it ({'; '.join(pcas)})"
    return "the codes limit it" if codes else ""


def _tune(index: faiss.Index, spec: IndexSpec, probe: RecallProbe, target: float) -> float:
    """Raise efSearch / nprobe (``search_param``) step by step until recall@10 reaches ``target``; return the recall
    reached.

    A compressed spec's recall is that of its re-ranked answers, as the table serves them. An inverted file of codes
    (``recall_limit``: ``ivfpq``, or a factory string's PQ, SQ or PCA) is bounded by them: the steps stop once
    ``PLATEAU_STEPS`` in a row gained less than ``PLATEAU_GAIN``."""
    name = search_param(index)
    if name == "efSearch":
        steps: tuple[int, ...] = EF_SEARCH_STEPS
    else:
        nlist = cast(faiss.IndexIVF, searched_index(index)).nlist
        steps = (*(s for s in NPROBE_STEPS if s < nlist), nlist)
    limit = recall_limit(index)
    rerank = spec.rerank if spec.compressed else 1
    recall, history = 0.0, []
    for step in steps:
        _set_step(index, spec, step)
        recall = probe.recall(index, rerank)
        note(f"tuning: {name} {step} gives recall@10 {recall:.4f} (target {target})")
        if recall >= target:
            break
        history.append((step, recall))
        gain = recall - history[-1 - PLATEAU_STEPS][1] if len(history) > PLATEAU_STEPS else 1.0
        if limit and gain < PLATEAU_GAIN * PLATEAU_STEPS:
            # the first step of the plateau: as good, within PLATEAU_GAIN, and cheaper than the last
            step, recall = next((s, r) for s, r in history if r >= recall - PLATEAU_GAIN)
            _set_step(index, spec, step)
            note(f"tuning: recall@10 stays near {recall:.4f} from {name} {step} on: {limit}")
            break
    return recall


def _set_step(index: faiss.Index, spec: IndexSpec, step: int) -> None:
    """Search ``index`` with ``step`` as its ``search_param`` and record it in ``spec``."""
    if search_param(index) == "efSearch":
        set_search_params(index, ef_search=step)
        spec.ef_search = step
    else:
        set_search_params(index, nprobe=step)
        spec.nprobe = step


def build_or_instead(
    vectors: np.ndarray,
    index_spec: str,
    min_recall: float,
    seed: int = 0,
    budget: float = AUTO_BUDGET_SECONDS,
    fallback: bool = False,
) -> BuiltIndex:
    """The index ``index_spec`` names, built over ``vectors`` and measured (:func:`build_and_measure`), or
    :func:`fallback_spec`'s where these rows cannot make it: it needs more rows than they are
    (:func:`too_few_rows`, or FAISS's training: :class:`Unbuildable`), or its recall@10 stays below ``min_recall``
    (:class:`BelowRecall`). With ``fallback`` (a compaction, which must fold its log) any such index gives way, else
    ``auto``'s graph below the recall alone (a spec given by hand is refused). ``info["fallback"]`` says it in one
    shape: ``index`` (as described in a manifest's ``index.spec``), then ``recall_at_10`` and ``min_recall``, or
    ``unbuildable`` (the refusal's words), and ``instead``, the kind taken."""
    spec = read_spec(index_spec, len(vectors), vectors.shape[1])
    index, choice = spec.describe(), None  # as given: the build that misses the recall says the index it tuned
    refused: InvalidQuery
    try:
        if short := too_few_rows(spec, len(vectors)):
            raise Unbuildable(f"index spec {index_spec.strip()!r}: {short}")
        return build_and_measure(vectors, spec, min_recall, seed, budget)
    except BelowRecall as exc:
        if not (fallback or spec.kind == "auto"):
            raise
        refused, index, choice = exc, exc.index, exc.choice
        why: dict[str, Any] = {"recall_at_10": round(exc.recall, 4), "min_recall": min_recall}
    except Unbuildable as exc:
        if not fallback:
            raise
        refused, why = exc, {"unbuildable": exc.message}
    instead = fallback_spec(len(vectors), spec.kind)
    note(f"{refused.message}; building {instead.kind} instead")
    built = build_and_measure(vectors, instead, min_recall, seed, budget)
    if choice is not None:
        built.info["choice"] = choice
    built.info["fallback"] = {"index": index, **why, "instead": instead.kind}
    return built


def build_and_measure(
    vectors: np.ndarray, spec: IndexSpec, min_recall: float, seed: int = 0, budget: float = AUTO_BUDGET_SECONDS
) -> BuiltIndex:
    """Build the index, measure recall@10 (tuning efSearch/nprobe where asked) and refuse it below ``min_recall``
    (:class:`BelowRecall`); :class:`Unbuildable` where FAISS cannot train or fill it over these rows."""
    started = time.perf_counter()
    if spec.kind == "flat":  # exact search runs on the stored matrix: no index, and no copy of the vectors
        info: dict[str, Any] = {"spec": spec.describe(), "faiss_description": "IndexFlatIP"}
        info.update(recall_at_10=1.0, exact=True, build_seconds=round(time.perf_counter() - started, 3))
        return BuiltIndex(index=None, info=info)
    choice = None
    if spec.kind == "auto":
        spec, choice = choose_auto(vectors, budget, seed)
    index = build_index(vectors, spec, seed)
    info = {"spec": spec.describe(), "faiss_description": type(index).__name__}
    if choice is not None:
        info["choice"] = choice
    step = f"measuring recall: the exact top {RECALL_K} of {min(RECALL_SAMPLE, len(vectors)):,} sampled rows"
    note(f"{step} ...")
    with Progress(step, None):  # one FAISS call: the step's clock says how long it has run
        probe = RecallProbe.draw(vectors, seed)  # the exact answers, once: the tuning steps reuse them
    param = search_param(index)  # a factory string's HNSW or IVF is tuned as the spec's is
    tunable = (param == "efSearch" and spec.ef_search is None) or (param == "nprobe" and spec.nprobe is None)
    rerank = spec.rerank if spec.compressed else 1
    if tunable:  # to auto's target, or the --min-recall above it (so auto's graph is not given up short of it)
        with Progress(f"tuning {search_param(index)}", None):  # a line per step; the clock says a long one
            recall = _tune(index, spec, probe, max(min_recall, spec.target_recall or AUTO_TARGET_RECALL))
    else:
        set_search_params(index, ef_search=spec.ef_search, nprobe=spec.nprobe)
        recall = probe.recall(index, rerank)
    info.update(recall_at_10=round(float(recall), 4), exact=False, recall_sample=min(RECALL_SAMPLE, len(vectors)))
    if spec.compressed:  # the answers are re-ranked; the codes' own top 10 for comparison
        info["recall_at_10_without_rerank"] = round(float(probe.recall(index)), 4)
    info["spec"] = spec.describe()
    if recall < min_recall:
        why = f"index {json.dumps(spec.describe())} reached recall@10 {recall:.4f}, below --min-recall {min_recall}"
        if spec.kind == "factory" and param is None:
            why += " (a factory string's search parameters are FAISS's defaults; hnsw:... or ivf:... are tuned)"
        if param == "efSearch" and (copied := probe.copied()):
            why += (
                f"; {copied:,} of the {len(probe.ids):,} sampled rows have {probe.k} or more copies, among which a "
                "graph loses its way (--index flat, or ivf for a large table, finds them)"
            )
        raise BelowRecall(why, spec.describe(), recall, choice)
    info["build_seconds"] = round(time.perf_counter() - started, 3)
    return BuiltIndex(index=index, info=info)
