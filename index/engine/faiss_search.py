"""FAISS searched: an index's search parameters, the top-k of unit queries (re-scored exactly on the rows for an
index of codes) and the parameters that keep a search to a filter's rows. Building and choosing an index is the
builder's (``index.build.index_choice``)."""

from __future__ import annotations

from typing import Any, cast

import faiss
import numpy as np

RERANK_BLOCK_BYTES = 32 << 20  # candidate rows gathered at once when re-ranking a batch
FILTER_MAX_EF = 4096  # the widest HNSW search a filter asks for


def set_search_params(index: faiss.Index, ef_search: int | None = None, nprobe: int | None = None) -> None:
    if ef_search is not None and hasattr(index, "hnsw"):
        index.hnsw.efSearch = ef_search
    if nprobe is not None:
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.nprobe = nprobe


def search_index(
    index: faiss.Index,
    queries: np.ndarray,
    k: int,
    vectors: np.ndarray | None = None,
    rerank: int = 1,
    params: faiss.SearchParameters | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` (scores, ids) of unit ``queries`` from ``index``; with ``rerank`` > 1 (an index of codes), the
    index's ``rerank`` x k best candidates re-scored exactly against the unit rows ``vectors``. ``params``: the
    search's own parameters (e.g. :func:`filtered_params`)."""
    if rerank <= 1 or vectors is None:
        return index.search(queries, k, params=params)
    _, candidates = index.search(queries, min(k * rerank, index.ntotal), params=params)
    return rerank_exact(vectors, queries, candidates, k)


def filtered_params(index: faiss.Index, selector: faiss.IDSelector, fraction: float) -> faiss.SearchParameters | None:
    """Search parameters that keep an HNSW or IVF search to the rows ``selector`` passes (``fraction`` of all).

    A filter leaves fewer passing rows near a query, so the search looks wider by 1/sqrt(fraction): efSearch for
    HNSW, nprobe for IVF (BENCHMARKS.md, "Filtered search", measures the recall). None: ``index`` takes no
    selector (the caller searches the passing rows exactly)."""
    widen = 1 / np.sqrt(max(fraction, 1e-6))
    params: Any  # FAISS's stubs lack the search parameter classes' fields
    if isinstance(index, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
        params.efSearch = min(FILTER_MAX_EF, int(np.ceil(index.hnsw.efSearch * widen)))
        params.sel = selector
        return cast(faiss.SearchParameters, params)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or not isinstance(index, faiss.IndexIVF | faiss.IndexPreTransform):
        return None
    params = inner = faiss.SearchParametersIVF()
    inner.nprobe = min(ivf.nlist, int(np.ceil(ivf.nprobe * widen)))
    inner.sel = selector
    if isinstance(index, faiss.IndexPreTransform):  # OPQ + IVF: the selector goes to the IVF inside
        params = faiss.SearchParametersPreTransform()
        params.index_params = inner
        params.keep = inner  # the outer parameters do not own the inner ones: keep them alive together
    return cast(faiss.SearchParameters, params)


def rerank_exact(
    vectors: np.ndarray, queries: np.ndarray, candidates: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The top ``k`` of each query's ``candidates`` (ids, -1 for none) by exact inner product with its rows.

    Only the candidate rows are read (one gather per block of queries from the, possibly memory-mapped,
    matrix) and scored with one batched product; ties keep the index's order. Missing places are id -1 with
    score -inf."""
    m, width = candidates.shape
    scores = np.full((m, k), -np.inf, dtype=np.float32)
    ids = np.full((m, k), -1, dtype=np.int64)
    keep = min(k, width)
    step = max(1, RERANK_BLOCK_BYTES // max(1, width * vectors.shape[1] * 4))
    for start in range(0, m, step):
        block = candidates[start : start + step]
        valid = block >= 0
        rows = vectors[np.where(valid, block, 0)]  # (queries, candidates, dim): the candidate rows only
        exact = np.matmul(rows, queries[start : start + step, :, None])[..., 0]
        exact[~valid] = -np.inf
        order = np.argsort(-exact, axis=1, kind="stable")[:, :keep]
        scores[start : start + step, :keep] = np.take_along_axis(exact, order, axis=1)
        ids[start : start + step, :keep] = np.where(
            np.isfinite(scores[start : start + step, :keep]), np.take_along_axis(block, order, axis=1), -1
        )
    return scores, ids
