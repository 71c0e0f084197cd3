"""FAISS index construction from a spec, recall measurement against exact search, and the ``auto`` choice.

Rows are unit-normalised, so inner product equals cosine. Specs:

- ``auto``: ``flat`` below 100,000 rows; else the index that is fastest to search among those whose build fits
  the build-time budget (``--build-budget``): HNSW (M=32, efConstruction=400) when a timed build of a 5,000-row
  sample, scaled to the whole table, fits; else IVF. Either way the search parameter (efSearch, nprobe) is raised
  until recall@10 >= 0.99 on a sample of rows, and the manifest records the estimate and why the index was chosen;
- ``flat``: exact inner product (the service then searches the memory-mapped matrix directly);
- ``hnsw`` or ``hnsw:M=32,efConstruction=400,efSearch=48`` (those are the defaults, efSearch apart);
- ``ivf`` or ``ivf:nlist=2048,nprobe=64`` (nlist defaults to about 2 sqrt(rows), nprobe is tuned when not given);
- any other string is passed to ``faiss.index_factory`` (e.g. ``IVF1024,Flat``, ``HNSW16``).

Why these: HNSW answers a query several times faster than IVF at the same recall on word tables, so it is the
choice whenever its build is affordable; an IVF build costs seconds to minutes at any size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, cast

import faiss
import numpy as np

from index.errors import InvalidQuery
from index.progress import Progress, duration, note

AUTO_FLAT_BELOW = 100_000
AUTO_TARGET_RECALL = 0.99
AUTO_BUDGET_SECONDS = 900.0
ESTIMATE_SAMPLE = 5_000
EF_SEARCH_STEPS = (16, 24, 32, 40, 48, 64, 96, 128, 192, 256, 384, 512, 1024)
NPROBE_STEPS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
RECALL_SAMPLE = 1000
RECALL_K = 10
ADD_BLOCK_HNSW = 10_000  # rows per add call: progress lines come often enough
ADD_BLOCK = 100_000
IVF_TRAIN_POINTS_PER_LIST = 64
IVF_TRAIN_ITERATIONS = 10


@dataclass
class IndexSpec:
    kind: str  # "flat", "auto", "hnsw", "ivf" or "factory"
    factory: str = "Flat"
    m: int = 32
    # 400 rather than FAISS's 40: a better graph needs a lower efSearch for recall@10 0.99, so queries are faster
    # for a longer build (BENCHMARKS.md, "Index choice").
    ef_construction: int = 400
    ef_search: int | None = None  # None: tune for the target recall
    nlist: int | None = None  # IVF lists; None: about 2 sqrt(rows)
    nprobe: int | None = None  # None: tune for the target recall
    target_recall: float | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        if self.kind == "hnsw":
            return {"kind": "hnsw", "M": self.m, "efConstruction": self.ef_construction, "efSearch": self.ef_search}
        if self.kind == "ivf":
            return {"kind": "ivf", "nlist": self.nlist, "nprobe": self.nprobe}
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


def parse_spec(spec: str, rows: int) -> IndexSpec:
    """Turn a command-line index spec into an :class:`IndexSpec` for a table of ``rows`` rows."""
    spec = spec.strip()
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
        out.ef_construction = given.get("efConstruction", out.ef_construction)
        out.ef_search = given.get("efSearch")
        return out
    if spec == "ivf" or spec.startswith("ivf:"):
        given = _options(spec, ("nlist", "nprobe"))
        out = IndexSpec(kind="ivf", nlist=given.get("nlist", default_nlist(rows)), nprobe=given.get("nprobe"))
        if out.nlist is not None and out.nlist > rows:
            raise InvalidQuery(f"index spec {spec!r}: nlist {out.nlist} is more than the {rows} rows")
        return out
    return IndexSpec(kind="factory", factory=spec)


def default_nlist(rows: int) -> int:
    """A power of two near 2 sqrt(rows): lists of a few hundred rows, k-means in seconds to minutes."""
    power: int = 2 ** round(math.log2(max(1.0, 2 * math.sqrt(rows))))  # int ** int is typed Any (negative powers)
    return max(1, min(rows, power))


def _add(index: faiss.Index, vectors: np.ndarray, block: int) -> None:
    with Progress("adding rows to the index", len(vectors)) as progress:
        for start in range(0, len(vectors), block):
            part = np.ascontiguousarray(vectors[start : start + block])
            index.add(part)
            progress.advance(len(part))


def _hnsw(dim: int, spec: IndexSpec) -> faiss.Index:
    index = faiss.IndexHNSWFlat(dim, spec.m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = spec.ef_construction
    return index


def build_index(vectors: np.ndarray, spec: IndexSpec, seed: int = 0) -> faiss.Index:
    """Build and fill an inner-product index over unit rows."""
    dim = vectors.shape[1]
    block = ADD_BLOCK
    index: faiss.Index
    if spec.kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif spec.kind == "hnsw":
        index = _hnsw(dim, spec)
        block = ADD_BLOCK_HNSW
    elif spec.kind == "ivf":
        nlist = spec.nlist or default_nlist(len(vectors))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.niter = IVF_TRAIN_ITERATIONS
        index.cp.max_points_per_centroid = IVF_TRAIN_POINTS_PER_LIST
        index.cp.seed = seed
    else:
        try:
            index = faiss.index_factory(dim, spec.factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise InvalidQuery(f"FAISS cannot build index {spec.factory!r}: {str(exc).splitlines()[0]}") from None
    if not index.is_trained:
        started = time.perf_counter()
        note(f"training the index ({type(index).__name__}) ...")
        train = np.ascontiguousarray(vectors)
        if spec.kind == "ivf":  # k-means sees IVF_TRAIN_POINTS_PER_LIST rows per list, drawn here with the seed
            size = min(len(vectors), cast(faiss.IndexIVF, index).nlist * IVF_TRAIN_POINTS_PER_LIST)  # IndexIVFFlat
            rows = np.sort(np.random.default_rng(seed).choice(len(vectors), size=size, replace=False))
            train = np.ascontiguousarray(vectors[rows])
        index.train(train)
        note(f"trained in {duration(time.perf_counter() - started)}")
    _add(index, vectors, block)
    return index


def set_search_params(index: faiss.Index, ef_search: int | None = None, nprobe: int | None = None) -> None:
    if ef_search is not None and hasattr(index, "hnsw"):
        index.hnsw.efSearch = ef_search
    if nprobe is not None:
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.nprobe = nprobe


def estimate_hnsw_seconds(vectors: np.ndarray, spec: IndexSpec, seed: int = 0) -> float:
    """Seconds to build ``spec``'s graph over all of ``vectors``: a sample's build, timed, scaled to the rows.

    An insertion into a larger graph costs more (a deeper search, rows no longer in the CPU caches): the cost per
    row grows about as the square of log(rows), which is how the sample's time is scaled (BENCHMARKS.md, "Index
    choice", compares the estimate with whole builds). It is the time on an otherwise idle machine: the
    sample's CPU time spread over FAISS's threads."""
    n = len(vectors)
    size = min(n, ESTIMATE_SAMPLE)
    rows = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    index = _hnsw(vectors.shape[1], spec)
    sample = np.ascontiguousarray(vectors[rows])
    started = time.process_time()  # CPU time over the build's threads: other load on the machine does not count
    index.add(sample)
    seconds = (time.process_time() - started) / max(1, faiss.omp_get_max_threads())
    if size < 2:
        return seconds
    return seconds * (n / size) * (math.log(n) / math.log(size)) ** 2


def choose_auto(vectors: np.ndarray, budget: float, seed: int = 0) -> tuple[IndexSpec, dict[str, Any]]:
    """The ``auto`` rule for a table of at least ``AUTO_FLAT_BELOW`` rows: HNSW if its build fits ``budget``."""
    hnsw = IndexSpec(kind="hnsw", target_recall=AUTO_TARGET_RECALL)
    note(f"estimating the HNSW build time from {min(len(vectors), ESTIMATE_SAMPLE):,} rows ...")
    estimate = estimate_hnsw_seconds(vectors, hnsw, seed)
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
    ivf = IndexSpec(kind="ivf", nlist=default_nlist(len(vectors)), target_recall=AUTO_TARGET_RECALL)
    why["chosen"] = "ivf"
    note(f"IVF: HNSW would take about {duration(estimate)}, over the budget of {duration(budget)}")
    return ivf, why


@dataclass
class RecallProbe:
    """``sample`` rows drawn with ``seed`` as queries, with their exact top-10 computed once."""

    queries: np.ndarray
    truth: np.ndarray

    @classmethod
    def draw(cls, vectors: np.ndarray, seed: int = 0, sample: int = RECALL_SAMPLE) -> RecallProbe:
        rng = np.random.default_rng(seed)
        ids = np.sort(rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False))
        queries = np.ascontiguousarray(vectors[ids])
        k = min(RECALL_K, len(vectors))
        _, truth = faiss.knn(queries, np.ascontiguousarray(vectors), k, metric=faiss.METRIC_INNER_PRODUCT)
        return cls(queries, truth)

    def recall(self, index: faiss.Index) -> float:
        """Recall@10 of ``index`` against exact search."""
        _, found = index.search(self.queries, self.truth.shape[1])
        hits = sum(len(np.intersect1d(t, f)) for t, f in zip(self.truth, found, strict=True))
        return hits / self.truth.size


@dataclass
class BuiltIndex:
    index: faiss.Index | None  # None for "flat"
    info: dict[str, Any]


def _tune(index: faiss.Index, spec: IndexSpec, probe: RecallProbe, target: float) -> float:
    """Raise efSearch / nprobe step by step until recall@10 reaches ``target``; return the recall reached."""
    hnsw = spec.kind == "hnsw"
    nlist = 0 if hnsw else cast(faiss.IndexIVF, index).nlist  # tuned: HNSW or IVF
    steps = EF_SEARCH_STEPS if hnsw else (*(s for s in NPROBE_STEPS if s < nlist), nlist)
    name = "efSearch" if hnsw else "nprobe"
    recall = 0.0
    for step in steps:
        if hnsw:
            set_search_params(index, ef_search=step)
            spec.ef_search = step
        else:
            set_search_params(index, nprobe=step)
            spec.nprobe = step
        recall = probe.recall(index)
        note(f"tuning: {name} {step} gives recall@10 {recall:.4f} (target {target})")
        if recall >= target:
            break
    return recall


def build_and_measure(
    vectors: np.ndarray, spec: IndexSpec, min_recall: float, seed: int = 0, budget: float = AUTO_BUDGET_SECONDS
) -> BuiltIndex:
    """Build the index, measure recall@10 (tuning efSearch/nprobe where asked) and refuse it below ``min_recall``."""
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
    note(f"measuring recall: the exact top {RECALL_K} of {min(RECALL_SAMPLE, len(vectors)):,} sampled rows ...")
    probe = RecallProbe.draw(vectors, seed)  # the exact answers, once: the tuning steps reuse them
    tunable = (spec.kind == "hnsw" and spec.ef_search is None) or (spec.kind == "ivf" and spec.nprobe is None)
    if tunable:
        recall = _tune(index, spec, probe, spec.target_recall or max(min_recall, AUTO_TARGET_RECALL))
    else:
        set_search_params(index, ef_search=spec.ef_search, nprobe=spec.nprobe)
        recall = probe.recall(index)
    info.update(recall_at_10=round(float(recall), 4), exact=False, recall_sample=min(RECALL_SAMPLE, len(vectors)))
    info["spec"] = spec.describe()
    if recall < min_recall:
        raise InvalidQuery(f"index {spec.describe()} reached recall@10 {recall:.4f}, below --min-recall {min_recall}")
    info["build_seconds"] = round(time.perf_counter() - started, 3)
    return BuiltIndex(index=index, info=info)
