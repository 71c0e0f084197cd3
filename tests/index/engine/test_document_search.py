"""Filtered search of documents tables against plain Python and a float64 brute force.

Filters are checked on gensim's Lee corpus imported as a documents table (``lee_data_dir``): every operator of
every field type against the same condition evaluated row by row in Python on the values the test itself wrote.
Filtered searches are checked against a float64 brute force over the passing rows: on Lee (exact), and on the
full GloVe 6B 50d table with its HNSW index at selectivities from 100% to 0.001% (recall@10, and always the k
best that pass when at least k pass), and on an IVF index of GloVe rows (the selector reaches FAISS).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest

from index.engine.filters import RowSet
from index.engine.knn import filtered_params, filtered_width, index_top
from index.engine.table import FILTER_INDEX_FRACTION, Table, VectorSearch
from index.errors import InvalidQuery
from tests.lee import Lee

K = 10


@pytest.fixture(scope="module")
def lee_table(lee_data_dir: Path) -> Table:
    return Table.load(lee_data_dir / "lee")


def when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# filter, and the same condition on one document's Python values (None: missing)
CASES: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
    ({"lang": "en"}, lambda d: d["lang"] == "en"),
    ({"lang": {"ne": "en"}}, lambda d: d["lang"] != "en"),
    ({"lang": {"in": ["en", "fr"]}}, lambda d: d["lang"] in ("en", "fr")),
    ({"year": 1995}, lambda d: d["year"] == 1995),
    ({"year": {"gte": 1994, "lt": 1998}}, lambda d: 1994 <= d["year"] < 1998),
    ({"year": {"in": [1990, 2001.0]}}, lambda d: d["year"] in (1990, 2001)),
    ({"year": {"gt": 1999}}, lambda d: d["year"] > 1999),
    ({"known": {"lte": 0.99}}, lambda d: d["known"] <= 0.99),
    ({"known": {"gt": 0.97, "lt": 1}}, lambda d: 0.97 < d["known"] < 1),
    ({"long": True}, lambda d: d["long"] is True),
    ({"long": {"ne": True}}, lambda d: d["long"] is not True),
    ({"tags": "government"}, lambda d: "government" in (d["tags"] or [])),
    (
        {"tags": {"in": ["palestinian", "australian"]}},
        lambda d: bool({"palestinian", "australian"} & set(d["tags"] or [])),
    ),
    ({"tags": {"ne": "government"}}, lambda d: "government" not in (d["tags"] or [])),
    ({"tags": {"prefix": "australia"}}, lambda d: any(t.startswith("australia") for t in d["tags"] or [])),
    (
        {"tags": {"contains": ["government", "minister"]}},
        lambda d: {"government", "minister"} <= set(d["tags"] or []),
    ),
    ({"tags": {"contains": "palestinian"}}, lambda d: "palestinian" in (d["tags"] or [])),
    ({"lang": {"prefix": "e"}}, lambda d: (d["lang"] or "").startswith("e")),
    ({"lang": {"contains": "n"}}, lambda d: "n" in (d["lang"] or "")),
    ({"not": {"lang": {"prefix": "en"}}}, lambda d: not (d["lang"] or "").startswith("en")),
    (
        {"published": {"gte": "2001-03-01T00:00:00Z", "lt": "2001-06-01"}},
        lambda d: when("2001-03-01T00:00:00Z") <= d["published"] < when("2001-06-01T00:00:00Z"),
    ),
    ({"published": {"lt": "2001-01-05T03:00:00+02:00"}}, lambda d: d["published"] < when("2001-01-05T01:00:00Z")),
    ({"not": {"lang": "en"}}, lambda d: d["lang"] != "en"),
    ({"lang": "en", "year": {"lt": 1995}}, lambda d: d["lang"] == "en" and d["year"] < 1995),
    (
        {"or": [{"year": 1990}, {"and": [{"long": True}, {"not": {"tags": "government"}}]}]},
        lambda d: d["year"] == 1990 or (d["long"] and "government" not in (d["tags"] or [])),
    ),
    ({"id": "lee-010"}, lambda d: d["id"] == "lee-010"),
    ({"id": {"in": ["lee-102", "lee-010", "lee-999", "x"]}}, lambda d: d["id"] in ("lee-010", "lee-102")),
    ({"id": {"ne": "lee-010"}, "year": {"lt": 1995}}, lambda d: d["id"] != "lee-010" and d["year"] < 1995),
    (
        {"or": [{"id": {"in": ["lee-001", "lee-002"]}}, {"tags": "government"}]},
        lambda d: d["id"] in ("lee-001", "lee-002") or "government" in (d["tags"] or []),
    ),
    ({"not": {"id": {"in": ["lee-001", "lee-299"]}}}, lambda d: d["id"] not in ("lee-001", "lee-299")),
]


def documents(lee: Lee) -> list[dict[str, Any]]:
    return [
        {"id": ident, **{name: column[i] for name, column in lee.fields.items()}} for i, ident in enumerate(lee.ids)
    ]


@pytest.mark.parametrize("spec, condition", CASES, ids=[str(spec) for spec, _ in CASES])
def test_filter_equals_python(
    lee_table: Table, lee_docs: Lee, spec: dict[str, Any], condition: Callable[[dict[str, Any]], bool]
) -> None:
    expected = np.array([bool(condition(d)) for d in documents(lee_docs)])
    rows = lee_table.filter(spec)
    assert 0 < len(rows) < lee_table.rows or spec == {"long": {"ne": True}}, "a case that cannot tell rows apart"
    assert np.array_equal(rows.mask, expected)
    assert np.array_equal(rows.ids, np.flatnonzero(expected))


@pytest.mark.parametrize(
    "spec, words",
    [
        ({"yeer": 1}, "no field 'yeer'"),
        ({"year": "1990"}, "an integer field is compared with a whole number, got '1990'"),
        ({"year": 1.5}, "got 1.5"),
        ({"year": {"gt": 2**63}}, "filter.year.gt: 9223372036854775808 is beyond an integer field's 64 bits"),
        ({"year": {"in": [1990, -(2**63) - 1]}}, "filter.year.in[1]: -9223372036854775809 is beyond"),
        ({"lang": 3}, "string field is compared with text"),
        ({"long": 1}, "boolean field is compared with true or false"),
        ({"lang": {"gte": "a"}}, "string field 'lang' takes the operators eq, ne, in, prefix, contains, not 'gte'"),
        (
            {"year": {"prefix": "19"}},
            "integer field 'year' takes the operators eq, ne, in, gt, gte, lt, lte, not 'prefix'",
        ),
        ({"lang": {"prefix": 3}}, "filter.lang.prefix: a string field is compared with text, got 3"),
        ({"tags": {"contains": []}}, "filter.tags.contains: takes a tag or a list of 1 to 10,000 tags"),
        (
            {"tags": {"contains": ["a", 2]}},
            "filter.tags.contains[1]: a string_list field is compared with text (a tag)",
        ),
        ({"long": {"in": [True]}}, "not 'in'"),
        ({"year": {"in": []}}, "takes a list of 1 to"),
        ({"published": {"gt": "yesterday"}}, "ISO 8601"),
        ({"and": {"lang": "en"}}, "filter.and: takes a non-empty list"),
        ({"or": [{"lang": "en"}, 3]}, "filter.or[1]: a filter is a non-empty object"),
        ({}, "a filter is a non-empty object"),
        ({"year": {}}, "give a value or an operator"),
        ({"id": {"prefix": "lee"}}, "filter.id: the documents' ids take the operators eq, ne, in, not 'prefix'"),
        ({"id": True}, "filter.id.eq: a document's id is text or a whole number, got true"),
        ({"id": {"in": ["lee-001", 1.5]}}, "filter.id.in[1]: a document's id is text or a whole number, got 1.5"),
        ({"id": {"in": ["lee-001"] * 10_001}}, "filter.id.in: takes a list of 1 to 10,000 ids"),
        ({"id": {}}, "filter.id: give a value or an operator (eq, ne, in)"),
    ],
)
def test_bad_filters_name_the_problem(lee_table: Table, spec: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidQuery) as error:
        lee_table.filter(spec)
    assert words in error.value.message


def test_deep_filters_are_refused(lee_table: Table) -> None:
    spec: dict[str, Any] = {"lang": "en"}
    for _ in range(40):
        spec = {"not": spec}
    with pytest.raises(InvalidQuery, match="nests at most"):
        lee_table.filter(spec)


def brute_force(vectors: np.ndarray, queries: np.ndarray, mask: np.ndarray, k: int) -> list[list[int]]:
    """The ``k`` best passing rows of each query by float64 inner product, ties by row."""
    scores = queries.astype(np.float64) @ np.asarray(vectors, dtype=np.float64).T
    scores[:, ~mask] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")
    return [[int(i) for i in row[: min(k, int(mask.sum()))]] for row in order]


def test_filtered_search_on_lee_is_exact(lee_table: Table) -> None:
    rows = lee_table.filter({"or": [{"year": {"lt": 1995}}, {"tags": "government"}]})
    queries = np.asarray(lee_table.vectors[[0, 5, 17, 250]])
    answers = lee_table.run(VectorSearch(queries, K, (), rows=rows))
    assert [[i for i, _ in hits] for hits in answers] == brute_force(lee_table.vectors, queries, rows.mask, K)
    for hits in answers:
        assert all(rows.mask[i] for i, _ in hits)


def test_a_search_among_ids_is_exact(lee_table: Table, lee_docs: Lee) -> None:
    """A re-rank of candidates: the search of the documents named, and only them, is the brute force's."""
    chosen = [lee_docs.ids[i] for i in range(3, 300, 13)]
    rows = lee_table.filter({"id": {"in": chosen}})
    assert [lee_docs.ids[i] for i in rows.ids] == sorted(chosen)
    queries = np.asarray(lee_table.vectors[[0, 5, 250]])
    answers = lee_table.run(VectorSearch(queries, K, (), rows=rows))
    assert [[i for i, _ in hits] for hits in answers] == brute_force(lee_table.vectors, queries, rows.mask, K)


def test_more_like_this_paging_and_score_floor(lee_table: Table) -> None:
    """Pages of a filtered search laid end to end are the one long answer; min_score cuts it; the query
    document itself is left out."""
    rows = lee_table.filter({"lang": "en"})
    query = np.asarray(lee_table.vectors[[3]])
    whole = lee_table.run(VectorSearch(query, 60, [{3}], rows=rows))[0]
    assert 3 not in [i for i, _ in whole] and len(whole) == 60
    assert [i for i, _ in whole] == [i for i in brute_force(lee_table.vectors, query, rows.mask, 61)[0] if i != 3]
    pages = [lee_table.run(VectorSearch(query, 7, [{3}], rows=rows, offset=start))[0] for start in range(0, 56, 7)]
    assert [hit for page in pages for hit in page] == whole[:56]
    floor = whole[20][1]
    cut = lee_table.run(VectorSearch(query, 60, [{3}], rows=rows, min_score=floor))[0]
    assert cut == [hit for hit in whole if hit[1] >= floor]
    last = lee_table.run(VectorSearch(query, 10, [{3}], rows=rows, offset=len(rows) - 4))[0]
    assert len(last) == 3  # the passing documents but the query, from the offset on


def test_a_filter_nothing_passes(lee_table: Table) -> None:
    rows = lee_table.filter({"year": {"gt": 3000}})
    assert len(rows) == 0
    assert lee_table.run(VectorSearch(np.asarray(lee_table.vectors[[0]]), K, (), rows=rows)) == [[]]


def test_filters_on_a_table_without_fields_are_refused(small: Table) -> None:
    with pytest.raises(InvalidQuery, match="'small' holds words, not documents: it has no payload fields to filter on"):
        small.filter({"lang": "en"})


@pytest.fixture(scope="module")
def glove(glove_data_dir: Path) -> Table:
    return Table.load(glove_data_dir / "glove-6b-50d", checksums=False)


@pytest.mark.parametrize("fraction", [1.0, 0.1, 0.02, 0.001, 0.00001])
def test_filtered_hnsw_search(glove: Table, fraction: float) -> None:
    """On the full GloVe table: the index (with a selector) where enough rows pass, exact search where few do;
    never fewer than k hits when k pass, every hit passes, recall@10 against the brute force >= 0.95."""
    assert glove.index is not None and isinstance(glove.index, faiss.IndexHNSW)
    rng = np.random.default_rng(int(fraction * 1e6))
    mask = rng.random(glove.rows) < fraction
    rows = RowSet(mask)
    queries = np.asarray(glove.vectors[rng.choice(glove.rows, 60, replace=False)])
    answers = [glove.run(VectorSearch(queries[i : i + 1], K, (), rows=rows))[0] for i in range(len(queries))]
    truth = brute_force(glove.vectors, queries, mask, K)
    assert all(len(hits) == min(K, len(rows)) for hits in answers)
    assert all(mask[i] for hits in answers for i, _ in hits)
    recall = np.mean(
        [len({i for i, _ in hits} & set(best)) / len(best) for hits, best in zip(answers, truth, strict=True)]
    )
    if fraction < FILTER_INDEX_FRACTION:
        assert recall == 1.0  # searched exactly
    assert recall >= 0.95, recall
    batched = glove.run(VectorSearch(queries, K, (), rows=rows))  # many queries at once: the same answers
    assert [[i for i, _ in hits] for hits in batched] == [[i for i, _ in hits] for hits in answers]


def test_deep_hnsw_pages_are_full(glove: Table) -> None:
    """k 1,000 from the HNSW index (efSearch 48) is 1,000 hits, nearly all the exact ones, and a page at offset 990
    is its last ten."""
    queries = np.ascontiguousarray(glove.vectors[[0, 5, 77]], dtype=np.float32)
    deep = glove.run(VectorSearch(queries, 1000))
    truth = brute_force(glove.vectors, queries, np.ones(glove.rows, dtype=bool), 1000)
    assert [len(hits) for hits in deep] == [1000] * 3
    assert all(len({i for i, _ in hits} & set(best)) >= 990 for hits, best in zip(deep, truth, strict=True))
    page = glove.run(VectorSearch(queries, 10, offset=990))
    assert [[i for i, _ in hits] for hits in page] == [[i for i, _ in hits[990:]] for hits in deep]


def test_the_selector_reaches_an_ivf_index(glove_raw: Any) -> None:
    first = glove_raw.matrix[:50_000]
    vectors = np.ascontiguousarray(first / np.linalg.norm(first, axis=1, keepdims=True), dtype=np.float32)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(50), 50, 128, faiss.METRIC_INNER_PRODUCT)
    ivf.train(vectors[::5])
    ivf.add(vectors)
    ivf.nprobe = 8
    mask = np.random.default_rng(3).random(len(vectors)) < 0.1
    rows = RowSet(mask)
    queries = vectors[:50]
    params = filtered_params(ivf, rows.selector(), rows.fraction)
    assert params is not None
    _, ids = index_top(ivf, queries, K, K, vectors, params=params)
    assert mask[ids[ids >= 0]].all()
    truth = brute_force(vectors, queries, mask, K)
    recall = np.mean([len(set(found.tolist()) & set(best)) / K for found, best in zip(ids, truth, strict=True)])
    assert recall >= 0.9, recall


def test_the_filter_cache_keeps_the_latest_within_its_bytes(lee_table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    import index.engine.table

    specs = [{"year": 1990 + i} for i in range(6)]
    sizes = [lee_table.filter(spec).nbytes for spec in specs]
    assert sizes[0] == 300 + 8 * len(lee_table.filter(specs[0]))  # a bool per row and the passing rows' ids
    lee_table._filters.clear()
    monkeypatch.setattr(index.engine.table, "FILTER_CACHE_BYTES", int(2.5 * max(sizes)))
    first = [lee_table.filter(spec) for spec in specs]
    assert len(lee_table._filters) == 2
    assert lee_table.filter(specs[-1]) is first[-1]  # kept
    assert lee_table.filter(specs[0]) is not first[0]  # the oldest made room
    assert sum(rows.nbytes for rows in lee_table._filters.values()) <= index.engine.table.FILTER_CACHE_BYTES


def test_string_filters_compare_exactly(tmp_path: Path) -> None:
    """Filters on strings compare code points as stored, as docs/documents.md says: a composed and a decomposed
    'café' are different values to eq, prefix and contains, on a string and on a list of strings; upper case is not
    lower case. (Keyword search normalises and folds; filters do not.)"""
    from tests.cli import run_cli

    composed, decomposed = "caf\u00e9", "cafe\u0301"
    titles = [f"{composed} de flore", f"{decomposed} du monde", "CAF\u00c9 NOIR", "cafe sans accent"]
    lines = [
        json.dumps({"id": f"c{i}", "vector": [1.0, float(i), 0.5], "title": title, "tags": [title.split()[0]]})
        for i, title in enumerate(titles)
    ]
    (tmp_path / "cafes.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run_cli("import", tmp_path / "cafes.jsonl", "--name", "cafes", "--data-dir", tmp_path)
    assert done.code == 0, done.err
    table = Table.load(tmp_path / "cafes")
    passing = [
        [int(row) for row in table.filter(spec).ids]
        for spec in [
            {"title": {"eq": f"{composed} de flore"}},
            {"title": {"eq": f"{decomposed} de flore"}},
            {"title": {"prefix": composed}},
            {"title": {"prefix": decomposed}},
            {"title": {"contains": composed}},
            {"title": {"contains": decomposed}},
            {"title": {"contains": "CAF\u00c9"}},
            {"tags": composed},
            {"tags": {"prefix": decomposed}},
            {"tags": {"contains": [composed]}},
            {"tags": {"prefix": "caf"}},
        ]
    ]
    assert passing == [[0], [], [0], [1], [0], [1], [2], [0], [1], [0], [0, 1, 3]]


@pytest.fixture(scope="module")
def copied_hnsw(lee_docs: Lee, tmp_path_factory: pytest.TempPathFactory) -> Table:
    """The Lee documents and four more copies of three of them (equal vectors under other ids), under a small HNSW
    graph (efSearch 16), so that equal scores fall at the end of pages."""
    from tests.cli import run_cli
    from tests.lee import jsonl_records, write_jsonl

    root = tmp_path_factory.mktemp("copied-hnsw")
    records = jsonl_records(lee_docs)
    copies = [{**records[i], "id": f"{records[i]['id']}-copy-{c}"} for i in (5, 17, 40) for c in range(4)]
    source = write_jsonl(root / "copied.jsonl", records + copies)
    spec = "hnsw:M=8,efSearch=16"
    done = run_cli("import", source, "--name", "copied", "--index", spec, "--min-recall", "0.5", "--data-dir", root)
    assert done.code == 0, done.err
    return Table.load(root / "copied")


@pytest.mark.parametrize("spec", [None, {"year": {"gte": 1993}}])
def test_pages_of_one_hnsw_search_are_one_ranking_through_equal_scores(
    copied_hnsw: Table, lee_docs: Lee, spec: dict[str, Any] | None
) -> None:
    """At one efSearch (pages within it), pages of every size are the first page as deep: each copy once, equal
    scores by row, whichever of them the graph visited first."""
    table = copied_hnsw
    rows = None if spec is None else table.filter(spec)
    assert table.search_width == 16
    width = 16 if rows is None else filtered_width(16, rows.fraction, 1)
    queries = np.ascontiguousarray(table.vectors[[*range(0, 300, 5), 5, 17, 40]], dtype=np.float32)
    for query in queries:
        one = table.run(VectorSearch(query[None], width, rows=rows))[0]
        assert len({i for i, _ in one}) == len(one) == width
        for k in (1, 2, 3, 5):
            pages = [
                hit
                for offset in range(0, width, k)
                for hit in table.run(VectorSearch(query[None], min(k, width - offset), rows=rows, offset=offset))[0]
            ]
            assert pages == one, (k, one, pages)
