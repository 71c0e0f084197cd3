"""Kernels over unit rows, plain functions over arrays: unit query vectors (a client's vector, gensim's mean of
rows), exact inner-product top-k and the best of a score vector, and FAISS searched (an index's search
parameters, the top-k of unit queries as a table serves them and the builder measures them, every candidate scored
as the exact kernel scores it, and the parameters that keep a search to a filter's rows). Building and choosing an
index is the builder's (``index.build.index_choice``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any, cast

import faiss
import numpy as np

from index.engine.budget import spend_exact
from index.errors import InvalidQuery

SMALL_BATCH = 2  # up to this many queries a plain matrix product beats FAISS's blocked search
GATHER_BELOW = 4  # a filtered exact search gathers its rows when fewer than 1 in GATHER_BELOW pass
MASKED_BLOCK_BYTES = 64 << 20  # scores of a filtered exact search computed at once
RESCORED_BYTES = 4 << 20  # the candidate rows candidate_products gathers at once
TAIL_BLOCK = 16  # a multiple of the rows BLAS's inner-product kernels take at once (see inner_products)
GRAPH_ROWS_CHECKED = 512  # rows at each end of a graph's own copy compared with the table's (graph_rows)
FILTER_MAX_EF = 4096  # the widest HNSW search a filter asks for
FLOAT32_MAX = 3.4028234663852886e38

Neighbor = tuple[int, float]  # (row id, score)
Hits = tuple[np.ndarray, np.ndarray]  # (scores, ids), one row per query, best first; id -1 pads


def within_float32(values: np.ndarray) -> bool:
    """Whether every one of (at least one) ``values`` is finite and within float32: one pass, as a NaN or an
    infinity fails the comparison too."""
    return bool(np.maximum.reduce(np.abs(values), axis=None) <= FLOAT32_MAX)  # ndarray.max without its wrapper


def unit_queries(queries: np.ndarray) -> np.ndarray:
    """Query vectors (m, dim; finite) scaled to unit length, in float32: a raw vector query as the engine reads it."""
    queries = np.asarray(queries, dtype=np.float64)
    if not np.isfinite(queries).all():
        raise InvalidQuery("query vectors must contain only finite numbers")
    norms = np.sqrt(np.add.reduce(queries * queries, axis=1))  # np.linalg.norm's arithmetic, without its dispatch
    if (norms == 0).any():
        raise InvalidQuery("a query vector is all zeros and has no direction")
    unit: np.ndarray = (queries / norms[:, None]).astype(np.float32)
    if not np.isfinite(unit).all():
        raise InvalidQuery("query vectors overflow float32")
    return unit


def pair_cosines(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The cosine of each pair of unit rows (two float32 matrices, one pair per row), summed in float64 in one
    order, so that a pair scores the same alone and in a batch (gensim ``similarity``)."""
    cosines: np.ndarray = np.einsum("ij,ij->i", left.astype(np.float64), right.astype(np.float64))
    return cosines


def unit_vector(values: np.ndarray) -> np.ndarray:
    """One query vector (dim; float64, within float32: :func:`within_float32`) scaled to unit length in float32, as
    :func:`unit_queries` scales it (the same sums; its quotients are finite once the norm is not zero), in a third of
    its numpy calls: a client's raw vector, asked for on every ``POST .../search``."""
    norm = math.sqrt(np.add.reduce(values * values))
    if norm == 0:
        raise InvalidQuery("a query vector is all zeros and has no direction")
    unit: np.ndarray = (values / norm).astype(np.float32)
    return unit


def unit_mean(rows: np.ndarray, positive: int, of: str = "tokens") -> np.ndarray:
    """gensim's ``most_similar`` query of unit ``rows`` (the first ``positive`` weighted +1, the others -1): their
    mean, normalised (1 x dim, float32). One positive row alone is itself, through the same float64 arithmetic.
    ``of``: what the rows are, as an error names them."""
    matrix = np.asarray(rows, dtype=np.float64)
    if len(matrix) == 1 and positive == 1:
        return _normalised(matrix[0], of)
    weights = np.array([1.0] * positive + [-1.0] * (len(matrix) - positive))
    return _normalised(weights @ matrix / len(matrix), of)


def _normalised(mean: np.ndarray, of: str) -> np.ndarray:
    """``mean`` (dim, float64) scaled to unit length: 1 x dim, float32."""
    norm = math.sqrt(mean @ mean)  # what np.linalg.norm computes for a vector (both round sqrt exactly)
    if norm < 1e-12:
        raise InvalidQuery(f"the positive and negative {of} cancel out: the query vector is zero")
    query: np.ndarray = (mean / norm).astype(np.float32)
    return query[None, :]


def mean_query(
    vectors: np.ndarray, positive: Sequence[int], negative: Sequence[int] = (), of: str = "tokens"
) -> np.ndarray:
    """gensim's ``most_similar`` query of the rows ``positive`` (+1) and ``negative`` (-1) of the unit rows
    ``vectors``: their weighted mean, normalised (1 x dim)."""
    if not positive and not negative:
        raise InvalidQuery("give at least one positive or negative token")
    if len(positive) == 1 and not negative:  # one word: its row, sliced rather than gathered
        return unit_mean(vectors[positive[0]][None], 1, of)
    return unit_mean(vectors[[*positive, *negative]], len(positive), of)


def exact_knn(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force inner-product top-``k``: one BLAS product for a few queries, FAISS's blocked search beyond. Its
    queries x rows count towards the request's bound (``max_exact_rows``)."""
    spend_exact(len(queries), len(base))
    if len(queries) > SMALL_BATCH:
        return faiss.knn(queries, base, k, metric=faiss.METRIC_INNER_PRODUCT)
    return best_of(inner_products(queries, base), k)


def inner_products(queries: np.ndarray, base: np.ndarray) -> np.ndarray:
    """``queries @ base.T`` (float32); for up to ``SMALL_BATCH`` queries, each row's score the same wherever the
    row sits in ``base``.

    BLAS computes the last rows of a matrix (its length modulo the kernel's block) with another kernel, whose
    sums round differently: the same row would score one unit in the last place apart at the end of a shard and
    in the middle of the whole table. The last ``len(base) % TAIL_BLOCK`` rows are scored in a zero-padded block
    of their own, through the main kernel as every other row. A larger batch is one matrix product, whose tiles
    round by their place in both matrices (so a batch's cosine may differ in the last place from one query's)."""
    matrix = np.asarray(base)
    if len(queries) > SMALL_BATCH:
        product: np.ndarray = queries @ matrix.T
        return product
    n = len(matrix)
    head = n - n % TAIL_BLOCK
    out = np.empty((len(queries), n), dtype=np.float32)
    np.matmul(queries, matrix[:head].T, out=out[:, :head])
    if head < n:
        tail = np.zeros((TAIL_BLOCK, matrix.shape[1]), dtype=np.float32)
        tail[: n - head] = matrix[head:]
        out[:, head:] = (queries @ tail.T)[:, : n - head]
    return out


def best_of(scores: np.ndarray, k: int) -> Hits:
    """The ``k`` best (scores, ids) of each row of a queries x rows score matrix, best first, equal scores by id
    (also at the k-th place: of equal scores there, the lowest ids are kept)."""
    n = scores.shape[1]
    if k >= n:
        best = np.broadcast_to(np.arange(n), scores.shape)
        top = scores
    else:
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(scores, best, axis=1)
        last = top.min(axis=1)
        for q in np.flatnonzero(np.count_nonzero(scores == last[:, None], axis=1) > (top == last[:, None]).sum(1)):
            # more rows score the k-th score than were kept: keep those of the lowest ids
            above = np.flatnonzero(scores[q] > last[q])
            tied = np.flatnonzero(scores[q] == last[q])[: k - len(above)]
            best[q] = np.concatenate([above, tied])
            top[q] = scores[q, best[q]]
    order = np.lexsort((best, -top), axis=1) if len(best) else np.zeros(best.shape, dtype=np.int64)
    return np.take_along_axis(top, order, axis=1), np.take_along_axis(best, order, axis=1).astype(np.int64)


def exact_knn_rows(queries: np.ndarray, base: np.ndarray, k: int, rows: np.ndarray, mask: np.ndarray) -> Hits:
    """:func:`exact_knn` over only the rows ``rows`` of ``base`` (``mask``: the same rows as a boolean per row).

    A few rows are gathered and searched; many are searched in place, the others' scores set to -inf (a gather
    would copy most of the matrix). Ids are rows of ``base``; ``k`` at most ``len(rows)``."""
    if len(rows) * GATHER_BELOW < len(base):
        scores, ids = exact_knn(queries, np.ascontiguousarray(base[rows]), k)
        return scores, np.where(ids >= 0, rows[np.maximum(ids, 0)], -1)
    spend_exact(len(queries), len(base))  # every row scored, the others' scores then dropped
    out_scores = np.empty((len(queries), k), dtype=np.float32)
    out_ids = np.empty((len(queries), k), dtype=np.int64)
    step = max(1, MASKED_BLOCK_BYTES // (4 * len(base)))
    for start in range(0, len(queries), step):
        scores = inner_products(queries[start : start + step], base)
        scores[:, ~mask] = -np.inf
        out_scores[start : start + step], out_ids[start : start + step] = best_of(scores, k)
    return out_scores, out_ids


def top_k(scores: np.ndarray, k: int, exclude: Collection[int] = ()) -> list[Neighbor]:
    """The ``k`` best (id, score) pairs of a full score vector, best first, equal scores by id (as
    :func:`best_of` keeps them: argpartition's order of equal values is the processor's), ``exclude`` left out."""
    top, best = best_of(scores[None, :], min(len(scores), k + len(exclude)))
    hits = zip(best[0].tolist(), top[0].tolist(), strict=True)
    return [(i, s) for i, s in hits if i not in exclude and np.isfinite(s)][:k]


# ---------------------------------------------------------------------------------------------- FAISS
def _inside(index: faiss.Index) -> faiss.Index | None:
    """The index a wrapper searches through: a transform's (``IndexPreTransform``: a PCA, OPQ or L2norm before the
    index), a refinement's base (``IndexRefine``), an id map's; None for an index that wraps none."""
    if isinstance(index, faiss.IndexPreTransform | faiss.IndexIDMap):
        return faiss.downcast_index(index.index)
    if isinstance(index, faiss.IndexRefine):
        return faiss.downcast_index(index.base_index)
    return None


def index_path(index: faiss.Index) -> list[faiss.Index]:
    """``index``, then each index its search goes through (:func:`searched_index` last)."""
    path = [index]
    while (inner := _inside(path[-1])) is not None:
        path.append(inner)
    return path


def searched_index(index: faiss.Index) -> faiss.Index:
    """The index whose search parameters (an HNSW graph's efSearch, an IVF's nprobe) a search of ``index`` uses:
    ``index`` itself, or the one inside its wrappers (``PCA32,HNSW32``'s graph, ``OPQ16,IVF256,PQ16``'s IVF)."""
    return index_path(index)[-1]


def outer_params(index: faiss.Index, params: faiss.SearchParameters) -> faiss.SearchParameters:
    """``params`` of :func:`searched_index` as ``index``'s own search takes them: inside a transform's or a
    refinement's parameters (an id map passes its own on)."""
    inner = _inside(index)
    if inner is None:
        return params
    params = outer_params(inner, params)
    outer: Any  # FAISS's stubs lack the search parameter classes' fields
    if isinstance(index, faiss.IndexPreTransform):
        outer = faiss.SearchParametersPreTransform()
        outer.index_params = params
    elif isinstance(index, faiss.IndexRefine):
        outer = faiss.IndexRefineSearchParameters()
        outer.k_factor = index.k_factor
        outer.base_index_params = params
    else:
        return params
    outer.keep = params  # the outer parameters do not own the inner ones: keep them alive together
    return cast(faiss.SearchParameters, outer)


def set_search_params(index: faiss.Index, ef_search: int | None = None, nprobe: int | None = None) -> None:
    """Search ``index`` with ``ef_search`` (an HNSW graph) or ``nprobe`` (an IVF), wherever in it the graph or the
    IVF is (:func:`searched_index`); None leaves a parameter as it is."""
    inner = searched_index(index)
    if ef_search is not None and isinstance(inner, faiss.IndexHNSW):
        inner.hnsw.efSearch = ef_search
    if nprobe is not None and isinstance(inner, faiss.IndexIVF):
        inner.nprobe = nprobe


def index_top(
    index: faiss.Index,
    queries: np.ndarray,
    k: int,
    width: int,
    vectors: np.ndarray,
    rerank: int = 1,
    params: faiss.SearchParameters | None = None,
) -> Hits:
    """The top-``k`` (scores, ids) of unit ``queries`` from ``index`` (``k`` at most its rows), of a search that
    keeps ``width`` candidates (an HNSW graph's efSearch, or ``k`` when that is more; ``k`` for any other index;
    ``rerank`` times that for an index of codes), scored on the unit rows ``vectors`` and ordered as the exact
    kernel scores and orders them. ``params``: the search's own parameters (:func:`deep_params`,
    :func:`filtered_params`).

    A graph's walk is the same whatever ``k`` is asked of it; of the rows it visits, FAISS keeps the best ``k``,
    and of equal scores at the ``k``-th place the first visited. Asked for all ``width`` and cut here, every ``k``
    gets the first hits of one list, so that the pages of a search at one efSearch are pages of one ranking. Each
    candidate is scored again by :func:`inner_products`: FAISS sums a row's products in its own order (an inverted
    file's and a graph's scores one unit in the last place from the exact search's at times), and an index of codes
    searched without re-ranking (``IVF64,PQ25x4``, ``IVF256,SQ8``) scores the codes, not the rows. So a row scores
    the same found by any index or exactly, and equal to a written copy of it, and equal scores go by id, at the
    ``k``-th place too (rows of equal codes come in FAISS's order, often the last first)."""
    _, ids = index.search(queries, min(max(k, width) * rerank, index.ntotal), params=params)
    return best_scored(candidate_products(queries, vectors, ids), ids, k)


def best_scored(scores: np.ndarray, ids: np.ndarray, k: int) -> Hits:
    """The ``k`` best of each row of candidates (``scores``, their ``ids``), best first, equal scores by id: the
    order of ``np.lexsort((ids, -scores), axis=1)``. A stable sort of the scores alone gives that order whenever no
    two of a row's scores are equal, which the sorted scores show (equal ones end up side by side); lexsort, several
    times slower on a graph search's candidates (BENCHMARKS.md, "HTTP floors: the candidates ranked by their scores
    alone"), runs only for a batch with a tie."""
    count, width = scores.shape
    order = np.argsort(-scores, axis=1, kind="stable")
    at = order + np.arange(0, count * width, width)[:, None]  # places in the flattened rows
    ranked = scores.ravel()[at]
    if (ranked[:, 1:] == ranked[:, :-1]).any():
        at = np.lexsort((ids, -scores), axis=1) + np.arange(0, count * width, width)[:, None]
    at = at[:, :k]
    return scores.ravel()[at], ids.ravel()[at]


def index_knn(
    index: faiss.Index,
    queries: np.ndarray,
    k: int,
    width: int | None,
    vectors: np.ndarray,
    rerank: int = 1,
    scored: np.ndarray | None = None,
) -> Hits:
    """The top-``k`` (scores, ids) of unit ``queries`` from ``index`` (``k`` at most its rows) as a table answers
    them (``Table.knn``), and as the builder measures its recall: :func:`index_top` ``width`` wide (an HNSW graph's
    efSearch, :func:`search_width`; None for any other index), its candidates scored on ``scored`` (the same rows
    as ``vectors``, a graph's own copy: :func:`graph_rows`), a graph asked for more than ``width`` searched ``k``
    wide (:func:`deep_params`), and any query the index leaves short of ``k`` (an inverted file's probed lists, a
    widened graph's walk) searched again exactly on the unit rows ``vectors``, to the exact search's bits (a mapped
    graph's copy starts at an offset of its file that is no multiple of 4 bytes: one query's product over it is
    summed otherwise)."""
    deep = deep_params(index, k) if width is not None and k > width else None
    scores, ids = index_top(index, queries, k, width or k, vectors if scored is None else scored, rerank, deep)
    if (deep is not None or width is None) and len(short := np.flatnonzero(ids[:, k - 1] < 0)):
        scores[short], ids[short] = exact_knn(queries[short], vectors, k)
    return scores, ids


def candidate_products(queries: np.ndarray, vectors: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Each query's inner products with its own candidate rows ``ids`` (an id -1, none found, scores -inf: the
    last row is gathered for it and its score then set, which costs less than a mask or a branch per query), each
    the same as :func:`inner_products` gives for one query and the whole table: the candidates are padded with zero
    rows to a whole number of ``TAIL_BLOCK`` rows, which BLAS sums as it sums the table's. One stacked product for
    ``RESCORED_BYTES`` of gathered rows at a time: NumPy runs it without the interpreter lock, which a loop over the
    queries would hold while the event loop waits for it."""
    count, width = ids.shape
    dim = vectors.shape[1]
    padded = -(-width // TAIL_BLOCK) * TAIL_BLOCK
    step = max(1, RESCORED_BYTES // (padded * dim * 4))
    scores = np.empty((count, width), dtype=np.float32)
    records = row_records(vectors)
    for start in range(0, count, step):
        part = ids[start : start + step]
        rows = np.zeros((len(part), padded, dim), dtype=np.float32)
        rows[:, :width] = records[part].view(vectors.dtype).reshape(len(part), width, dim)
        products = np.matmul(queries[start : start + step, None, :], rows.transpose(0, 2, 1))
        scores[start : start + step] = products[:, 0, :width]
    scores[ids < 0] = -np.inf  # after every hit
    return scores


def row_records(vectors: np.ndarray) -> np.ndarray:
    """The rows of ``vectors`` as one item of bytes each (a 1-D array of ``np.void``), so that a gather copies each
    row at once: a mapped graph's copy of the rows (:func:`graph_rows`) is not 4-byte aligned, and NumPy gathers its
    rows' values one by one through a buffer, about twice as long (BENCHMARKS.md, "HTTP floors: the candidates
    ranked by their scores alone")."""
    rows = vectors if vectors.strides[1] == vectors.itemsize else np.ascontiguousarray(vectors)  # rows of any stride
    return rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize)))[:, 0]


def graph_rows(index: faiss.Index | None, vectors: np.ndarray) -> np.ndarray:
    """The rows :func:`index_top` scores candidates on: those an HNSW graph over flat rows (``HNSW32``) holds, a
    read-only view of the index's own memory (valid while ``index`` lives), when they are the unit rows ``vectors``;
    ``vectors`` for any other index. The graph's search has just read its candidates' rows there, so they are in the
    processor's cache, and the table's copy, a memory map, stays unread (BENCHMARKS.md, "What exact scores and one
    ranking per page cost"). Rows that differ (the first and last ``GRAPH_ROWS_CHECKED``, read in two runs of pages
    rather than one page a row) keep ``vectors``."""
    if not isinstance(index, faiss.IndexHNSW):
        return vectors
    storage = faiss.downcast_index(index.storage)
    if not isinstance(storage, faiss.IndexFlat) or storage.ntotal != len(vectors) or storage.d != vectors.shape[1]:
        return vectors
    rows = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d).reshape(storage.ntotal, storage.d)
    rows.flags.writeable = False  # a mapped index's memory is read-only
    ends = slice(None, GRAPH_ROWS_CHECKED), slice(-GRAPH_ROWS_CHECKED, None)
    return rows if all(np.array_equal(rows[end], vectors[end]) for end in ends) else vectors


def search_width(index: faiss.Index | None) -> int | None:
    """An HNSW graph's efSearch (:func:`searched_index`), None for any other index: the graph search finds little
    more than that many rows, however many are asked (:func:`deep_params` widens it)."""
    inner = None if index is None else searched_index(index)
    return int(inner.hnsw.efSearch) if isinstance(inner, faiss.IndexHNSW) else None


def deep_params(index: faiss.Index, k: int) -> faiss.SearchParameters:
    """The search parameters of a search of ``index``, an HNSW graph (:func:`search_width`), ``k`` wide."""
    params: Any = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
    params.efSearch = k
    return outer_params(index, cast(faiss.SearchParameters, params))


def filtered_width(ef_search: int, fraction: float, k: int) -> int:
    """The efSearch of a search of ``k`` hits of an HNSW graph searched at ``ef_search``, kept to ``fraction`` of
    its rows (:func:`filtered_params`)."""
    return max(k, min(FILTER_MAX_EF, int(np.ceil(ef_search * (1 / np.sqrt(max(fraction, 1e-6)))))))


def filtered_params(
    index: faiss.Index, selector: faiss.IDSelector, fraction: float, k: int = 0
) -> faiss.SearchParameters | None:
    """Search parameters that keep an HNSW or IVF search of ``k`` hits to the rows ``selector`` passes
    (``fraction`` of all), the graph or IVF wherever in ``index`` it is (:func:`searched_index`).

    A filter leaves fewer passing rows near a query, so the search looks wider by 1/sqrt(fraction): efSearch for
    HNSW, nprobe for IVF (BENCHMARKS.md, "Filtered search", measures the recall). None: ``index`` takes no
    selector (the caller searches the passing rows exactly)."""
    widen = 1 / np.sqrt(max(fraction, 1e-6))
    inner = searched_index(index)
    params: Any  # FAISS's stubs lack the search parameter classes' fields
    if isinstance(inner, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
        params.efSearch = filtered_width(int(inner.hnsw.efSearch), fraction, k)
    elif isinstance(inner, faiss.IndexIVF):
        params = faiss.SearchParametersIVF()
        params.nprobe = min(inner.nlist, int(np.ceil(inner.nprobe * widen)))
    else:
        return None
    params.sel = selector
    return outer_params(index, cast(faiss.SearchParameters, params))
