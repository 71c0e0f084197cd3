"""The exact kernel's scores do not depend on where a row sits, and equal scores go by row; one raw vector is made a
unit query as a batch's rows are."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from index.engine.knn import (
    FLOAT32_MAX,
    TAIL_BLOCK,
    best_of,
    best_scored,
    deep_params,
    exact_knn,
    filtered_params,
    filtered_width,
    graph_rows,
    index_top,
    inner_products,
    row_records,
    search_width,
    searched_index,
    set_search_params,
    top_k,
    unit_queries,
    unit_vector,
    within_float32,
)
from index.engine.table import keep_hits
from index.errors import InvalidQuery


def rows(n: int, seed: int = 3) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(n, 50)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_a_row_scores_the_same_wherever_it_sits() -> None:
    """The same rows, cut at every offset (as a shard holds some of the whole table's), score bit for bit alike,
    and the rows before the tail as the plain matrix product scores them."""
    matrix = rows(301)
    for queries in (matrix[[7]], matrix[[7, 120]]):
        whole = inner_products(queries, matrix)
        for start in range(2 * TAIL_BLOCK + 1):
            np.testing.assert_array_equal(inner_products(queries, matrix[start:]), whole[:, start:])
        head = len(matrix) - len(matrix) % TAIL_BLOCK
        np.testing.assert_array_equal(whole[:, :head], (queries @ matrix.T)[:, :head])  # the same kernel as before


def test_equal_scores_go_by_row_also_at_the_kth_place() -> None:
    matrix = rows(200)
    copies = np.vstack([matrix, matrix[[5, 5, 5]], matrix[:10]])  # row 5 again at 200, 201, 202 and 208
    for k in (2, 3, 4, 5, 10):
        scores, ids = exact_knn(copies[[5]], copies, k)
        assert ids[0].tolist() == [5, 200, 201, 202, 208, *ids[0, 5:].tolist()][:k], (k, ids)
        assert len(set(scores[0, : min(k, 5)].tolist())) == 1
    scores = np.array([[0.5, 0.9, 0.5, 0.9, 0.1, 0.5]], dtype=np.float32)
    top, ids = best_of(scores, 4)
    assert ids.tolist() == [[1, 3, 0, 2]] and np.allclose(top, [[0.9, 0.9, 0.5, 0.5]])
    _, every = best_of(scores, 6)
    assert every.tolist() == [[1, 3, 0, 2, 5, 4]]


def test_a_score_vector_s_best_go_by_id_among_equal_scores() -> None:
    """``top_k`` (the plain 3CosMul's) orders equal scores by id and keeps the lowest ids at the k-th place: not in
    argpartition's order, which another processor's sorting kernels (AVX-512, AVX2 or none) give otherwise."""
    scores = np.random.default_rng(1).integers(0, 50, 100_000).astype(np.float32)  # about 2,000 rows per score
    scores[77] = -np.inf
    for k, exclude in ((10, ()), (300, (22_041, 3)), (100_000, ())):
        got = top_k(scores, k, exclude)
        ranked = sorted((-s, i) for i, s in enumerate(scores.tolist()) if i not in exclude and s > -np.inf)
        assert got == [(i, -s) for s, i in ranked[: min(k, len(ranked))]], k


def test_candidates_are_ranked_by_score_then_id_as_lexsort_ranks_them() -> None:
    """``best_scored`` (every index search's order of its scored candidates) keeps lexsort's order of (score
    descending, id ascending) bit for bit: rows of distinct scores, rows of equal scores (ties at any place, 0.0
    beside -0.0), padding (id -1 at -inf), any k."""
    rng = np.random.default_rng(7)
    cases = 0
    for trial in range(600):
        count, width = int(rng.integers(1, 9)), int(rng.integers(1, 70))
        if trial % 3:  # few distinct values: ties in most rows
            scores = (rng.integers(-3, 4, (count, width)) / 4).astype(np.float32)
            scores[rng.random((count, width)) < 0.3] *= -1  # 0.0 and -0.0 side by side
        else:
            scores = rng.normal(size=(count, width)).astype(np.float32)
        ids = np.stack([rng.permutation(10 * width)[:width] for _ in range(count)]).astype(np.int64)
        padding = rng.random((count, width)) < 0.1
        ids[padding], scores[padding] = -1, -np.inf
        for k in {1, min(5, width), width}:
            order = np.lexsort((ids, -scores), axis=1)[:, :k]
            at = np.arange(count)[:, None]
            got = best_scored(scores, ids, k)
            assert got[0].tobytes() == scores[at, order].tobytes(), (trial, k)
            assert got[1].tobytes() == ids[at, order].tobytes(), (trial, k)
            cases += 1
    assert cases > 1_500


def test_rows_at_an_unaligned_address_are_gathered_whole_as_their_own_bytes() -> None:
    """``row_records`` (how candidates' rows are gathered) gives each row's bytes as one item, also for rows that
    start off a 4-byte boundary, as a mapped graph's copy does: gathered, they are the rows' values bit for bit."""
    matrix = rows(40)
    raw = np.zeros(matrix.nbytes + 2, dtype=np.uint8)
    raw[2:] = matrix.view(np.uint8).ravel()
    unaligned = raw[2:].view(np.float32).reshape(matrix.shape)
    assert not unaligned.flags.aligned
    ids = np.array([[3, 39, 0], [-1, 7, 7]])
    for source in (matrix, unaligned):
        records = row_records(source)
        assert records.shape == (40,) and np.shares_memory(records, source)
        gathered = records[ids].view(np.float32).reshape(2, 3, 50)
        assert gathered.tobytes() == matrix[ids].tobytes()
    every_other = matrix[::2]  # rows apart in memory, each row's values side by side: still a view
    assert np.shares_memory(row_records(every_other), matrix)
    assert row_records(every_other)[[4, 0]].tobytes() == every_other[[4, 0]].tobytes()
    assert row_records(matrix[:, ::2])[[1]].tobytes() == matrix[[1], ::2].tobytes()  # values apart: a copy


def test_one_vector_is_made_a_unit_query_as_a_batch_row_is() -> None:
    """``unit_vector`` (a client's one vector) answers bit for bit as ``unit_queries`` does for it, at every length
    and magnitude float32 holds, down to squares that underflow; a zero vector is refused alike."""
    rng = np.random.default_rng(5)
    for trial in range(600):
        dim = int(rng.choice([1, 2, 7, 50, 300, 384, 1024, 4096])) if trial % 3 else int(rng.integers(1, 4097))
        scale = 10.0 ** rng.choice([rng.uniform(-170, -150), rng.uniform(-45, 0), rng.uniform(0, 38)])
        values = np.clip(rng.standard_normal(dim) * scale, -FLOAT32_MAX, FLOAT32_MAX)
        if trial % 5 == 0:
            values = np.round(values, 6)  # a vector as JSON carries it, often all zeros at these scales
        assert within_float32(values)
        try:
            expected = unit_queries(values[None, :])[0]
        except InvalidQuery as exc:
            with pytest.raises(InvalidQuery, match=str(exc)):
                unit_vector(values)
            continue
        assert unit_vector(values).tobytes() == expected.tobytes(), (dim, scale)


def test_within_float32_is_false_for_nan_infinity_and_beyond() -> None:
    ok = np.array([1.0, -FLOAT32_MAX, FLOAT32_MAX])
    assert within_float32(ok) and within_float32(ok[None, :])
    for bad in (np.nan, np.inf, -np.inf, FLOAT32_MAX * 1.0001):
        values = np.array([0.5, bad, 2.0])
        assert not within_float32(values) and not within_float32(np.vstack([ok, values]))


@pytest.mark.parametrize("factory", ["HNSW8", "L2norm,HNSW8", "HNSW8,RFlat"])
def test_an_hnsw_search_deeper_than_its_ef_finds_every_hit_asked(factory: str) -> None:
    """FAISS's graph search finds little more than efSearch rows whatever k asks: a search k wide, with or without
    a filter's selector, finds them; equal scores are put in row order as the exact kernel gives them. A graph
    behind a transform or a refinement is set and widened as one on its own is."""
    matrix = rows(300)
    copies = np.vstack([matrix, matrix[[5, 5, 5]], matrix[:4]])  # row 5 again at 300, 301, 302
    index = faiss.index_factory(50, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(copies)
    set_search_params(index, ef_search=16)
    index.add(copies)
    assert isinstance(searched_index(index), faiss.IndexHNSW) and searched_index(index).hnsw.efSearch == 16
    assert search_width(index) == 16 and search_width(faiss.IndexFlatIP(50)) is None
    queries = copies[[5, 17, 250]]
    exact_scores, exact_ids = exact_knn(queries, copies, 300)
    everything = faiss.IDSelectorRange(0, len(copies))
    for params in (deep_params(index, 300), filtered_params(index, everything, 1.0, 300)):
        scores, ids = index_top(index, queries, 300, 300, copies, params=params)
        assert (ids >= 0).all()
        recall = np.mean([len(set(a) & set(b)) / 300 for a, b in zip(ids.tolist(), exact_ids.tolist(), strict=True)])
        assert recall >= 0.99, recall
        np.testing.assert_allclose(scores[:, :50], exact_scores[:, :50], rtol=1e-6)
        kept = keep_hits(scores[0], ids[0], 4, (), None, 0)
        assert [i for i, _ in kept] == [5, 300, 301, 302]  # four equal scores, by row
    _, shallow = index_top(index, queries, 300, 16, copies)
    assert (shallow < 0).any()  # what the widening is for
    half = filtered_params(index, faiss.IDSelectorRange(0, 150), 0.5, 10)
    _, kept = index_top(index, queries, 10, filtered_width(16, 0.5, 10), copies, params=half)
    assert (kept >= 0).all() and (kept < 150).all()  # the selector reaches the graph


@pytest.mark.parametrize("factory", ["IVF16,Flat", "IVF16,PQ10x4", "IVF16,SQ8", "PCA32,IVF16,Flat"])
def test_an_inverted_file_s_hits_score_as_the_exact_search_scores_them(factory: str) -> None:
    """FAISS scores an inverted file's rows with its own sums (one unit in the last place from the exact kernel's
    at times) and an index of codes by its codes (PQ, SQ: hundredths off): each hit is scored again as the exact
    search scores it, so a row's score is the same found either way, to the bit, and equal scores go by row."""
    matrix = rows(2_000)
    copies = np.vstack([matrix, matrix[[5, 5, 5]]])  # row 5 again at 2000, 2001, 2002
    index = faiss.index_factory(50, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(copies)
    index.add(copies)
    set_search_params(index, nprobe=16)  # every list: the rows an index of the rows finds are the exact top
    queries = copies[[5, 17, 250, 1_999]]
    scores, ids = index_top(index, queries, 20, 20, copies)
    assert (ids >= 0).all()
    for q in range(len(queries)):
        np.testing.assert_array_equal(scores[q], inner_products(queries[q : q + 1], copies[ids[q]])[0])
        assert list(zip(-scores[q], ids[q], strict=True)) == sorted(zip(-scores[q], ids[q], strict=True))
    assert ids[0, :4].tolist() == [5, 2000, 2001, 2002]  # four equal scores, by row
    exact_scores, exact_ids = exact_knn(queries[1:2], copies, 20)
    if factory == "IVF16,Flat":  # the exact top, every score to the bit
        np.testing.assert_array_equal(ids[1], exact_ids[0])
        np.testing.assert_array_equal(scores[1], exact_scores[0])


def test_a_re_ranked_index_of_codes_keeps_equal_scores_by_row_at_the_kth_place() -> None:
    """Rows of equal codes come from FAISS last first (2002, 2001, 2000, 5): re-ranked, the ``k`` kept of equal
    scores are the lowest rows, so a page of one and the next page of one are rows 5 and 2000, not 2002 twice."""
    matrix = rows(2_000)
    copies = np.vstack([matrix, matrix[[5, 5, 5]]])  # row 5 again at 2000, 2001, 2002
    index = faiss.index_factory(50, "IVF16,PQ10x4", faiss.METRIC_INNER_PRODUCT)
    index.train(copies)
    index.add(copies)
    set_search_params(index, nprobe=16)
    query = copies[[5]]
    assert [index_top(index, query, k, k, copies, rerank=8)[1][0].tolist() for k in (1, 2, 4)] == [
        [5],
        [5, 2000],
        [5, 2000, 2001, 2002],
    ]


def test_a_flat_graph_s_candidates_are_scored_on_its_own_rows_to_the_same_bits() -> None:
    """An HNSW graph over the rows holds a copy of them, read by its search just before the candidates are scored:
    they are scored there, to the same scores and order as on the table's rows. A graph behind a transform or an
    id map, or whose rows are not the table's, scores on the table's rows."""
    matrix = rows(2_000)
    graph = faiss.index_factory(50, "HNSW8", faiss.METRIC_INNER_PRODUCT)
    graph.add(matrix)
    own = graph_rows(graph, matrix)
    assert own is not matrix and not np.shares_memory(own, matrix) and not own.flags.writeable
    np.testing.assert_array_equal(own, matrix)
    queries = matrix[[5, 17, 250, 1_999]]
    for count in (1, 4):
        scored = index_top(graph, queries[:count], 10, 16, own)
        for mine, theirs in zip(scored, index_top(graph, queries[:count], 10, 16, matrix), strict=True):
            np.testing.assert_array_equal(mine, theirs)
    transformed = faiss.index_factory(50, "PCA32,HNSW8", faiss.METRIC_INNER_PRODUCT)
    transformed.train(matrix)
    transformed.add(matrix)
    assert graph_rows(transformed, matrix) is matrix and graph_rows(None, matrix) is matrix
    mapped = faiss.index_factory(50, "IDMap,HNSW8", faiss.METRIC_INNER_PRODUCT)  # its rows' ids are not their places
    mapped.add_with_ids(matrix, np.arange(len(matrix))[::-1].copy())
    assert graph_rows(mapped, matrix) is matrix
    short, renormalised, reordered = matrix[:100], matrix * np.float32(1.0000001), matrix[::-1].copy()
    for other in (short, renormalised, reordered):
        assert graph_rows(graph, other) is other
