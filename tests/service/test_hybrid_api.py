"""Keyword, hybrid and diverse search of a documents table over HTTP, on a real ``embedding-serve`` process serving
gensim's Lee corpus (300 news documents; vectors: the mean GloVe row of their words).

Keyword hits are checked against the table's ``KeywordIndex`` called directly and a float64 BM25 brute force
written here; hybrid hits against ``index.engine.fusion.rrf`` of a float64 brute-force vector list and the keyword list;
diverse hits against a float64 greedy MMR written here. Filters, paging, batches and the errors of each mode.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from index.engine.fusion import rrf
from index.engine.hybrid import DEPTH, DIVERSE
from index.engine.keyword import KeywordIndex
from index.engine.table import Table
from tests.lee import Lee
from tests.service import real_server

K = 10
TEXTS = ("bushfires in Sydney", "Taliban fighters in Afghanistan", "the government said on Monday", "Qantas")


@pytest.fixture(scope="module")
def data_dir(documents_data_dir: Path) -> Path:
    """The Lee table, and beside it the same documents without their text (``no-text``, a table with no keyword
    index), shared with other modules (tests/service/conftest.py)."""
    return documents_data_dir


@pytest.fixture(scope="module")
def base(documents_server: real_server.Server) -> str:
    return documents_server.base


@pytest.fixture(scope="module")
def keyword(data_dir: Path) -> KeywordIndex:
    index = Table.load(data_dir / "lee").keyword
    assert index is not None
    return index


def post(base: str, body: dict[str, Any], table: str = "lee") -> httpx.Response:
    return real_server.HTTP.post(f"{base}/v1/tables/{table}/search", json=body, timeout=30)


def hits(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = post(base, {"fields": [], **body})
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["hits"]
    return found


def words(text: str) -> list[str]:
    """The import's default words: lower-cased ``\\w+`` runs, bm25s's English stop words dropped, the rest stemmed
    by PyStemmer's English stemmer."""
    import Stemmer
    from bm25s.stopwords import STOPWORDS_EN

    kept = [w for w in re.findall(r"\w+", text.lower()) if w not in STOPWORDS_EN]
    stems: list[str] = Stemmer.Stemmer("english").stemWords(kept)
    return stems


@cache
def counted(texts: tuple[str, ...]) -> list[Counter[str]]:
    """Each text's words and their counts, once per corpus."""
    return [Counter(words(t)) for t in texts]


def bm25(lee: Lee, text: str, k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """Every document's BM25 score for ``text`` (Lucene's variant), in float64, one document at a time."""
    docs = counted(tuple(lee.texts))
    lengths = np.array([sum(c.values()) for c in docs], dtype=np.float64)
    average, n = lengths.mean(), len(docs)
    scores = np.zeros(n)
    for word in words(text):
        df = sum(word in c for c in docs)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, c in enumerate(docs):
            if (tf := c[word]) > 0:
                scores[i] += idf * tf / (tf + k1 * (1 - b + b * lengths[i] / average))
    return scores


def best(scores: np.ndarray, passing: np.ndarray | None = None, leave_out: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Rows by score, best first (equal scores by row), the failing and left-out ones dropped."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [int(i) for i in order if (passing is None or passing[i]) and int(i) not in leave_out]


def cosines(lee: Lee, query: np.ndarray) -> np.ndarray:
    scores: np.ndarray = lee.unit() @ (query / np.linalg.norm(query))
    return scores


def rows_of(lee: Lee, found: list[dict[str, Any]]) -> list[int]:
    return [lee.ids.index(hit["id"]) for hit in found]


def greedy_mmr(
    lee: Lee, query: np.ndarray, candidates: list[int], k: int, diversity: float, relevance: list[float]
) -> list[int]:
    """Maximal Marginal Relevance, one pick at a time in plain float64 (Qdrant's definition): each candidate's
    highest cosine with a hit already chosen is kept up to date as hits are chosen."""
    rows = np.asarray(lee.unit()[candidates], dtype=np.float64)
    cosines = rows @ rows.T
    closest = np.full(len(candidates), -np.inf)
    chosen: list[int] = []
    left = list(range(len(candidates)))
    while left and len(chosen) < k:
        value = relevance if not chosen else ((1 - diversity) * np.asarray(relevance) - diversity * closest).tolist()
        keys = {i: (value[i], relevance[i], -i) for i in left}
        pick = max(keys, key=keys.__getitem__)
        chosen.append(pick)
        left.remove(pick)
        closest = np.maximum(closest, cosines[pick])
    return [candidates[i] for i in chosen]


def test_the_summary_says_the_table_has_a_keyword_index(base: str) -> None:
    assert real_server.HTTP.get(f"{base}/v1/tables/lee").json()["documents"]["keyword"] is True
    assert real_server.HTTP.get(f"{base}/v1/tables/no-text").json()["documents"]["keyword"] is False


@pytest.mark.parametrize("text", TEXTS)
def test_keyword_hits_are_bm25(base: str, lee_docs: Lee, keyword: KeywordIndex, text: str) -> None:
    found = hits(base, {"text": text, "mode": "keyword", "k": K})
    scores, rows = keyword.search([text], K)
    assert rows_of(lee_docs, found) == [int(r) for r in rows[0] if r >= 0]
    np.testing.assert_allclose([hit["score"] for hit in found], scores[0][: len(found)], rtol=1e-6)
    assert [hit["ranks"] for hit in found] == [{"keyword": i} for i in range(1, len(found) + 1)]
    brute = bm25(lee_docs, text)
    positive = [i for i in best(brute) if brute[i] > 0]
    assert rows_of(lee_docs, found) == positive[:K]
    np.testing.assert_allclose([hit["score"] for hit in found], brute[positive[:K]], rtol=1e-5)


def test_keyword_search_is_filtered_and_paged(base: str, lee_docs: Lee) -> None:
    spec = {"lang": "en", "long": True}
    passing = np.array(
        [lang == "en" and long for lang, long in zip(lee_docs.fields["lang"], lee_docs.fields["long"], strict=True)]
    )
    brute = bm25(lee_docs, TEXTS[2])
    expected = [i for i in best(brute, passing) if brute[i] > 0]
    answer = post(base, {"text": TEXTS[2], "mode": "keyword", "k": K, "filter": spec, "fields": ["lang"]}).json()
    assert answer["passing"] == int(passing.sum())
    assert rows_of(lee_docs, answer["hits"]) == expected[:K]
    page = hits(base, {"text": TEXTS[2], "mode": "keyword", "k": 5, "offset": 5, "filter": spec})
    assert rows_of(lee_docs, page) == expected[5:10]
    assert [hit["ranks"]["keyword"] for hit in page] == [6, 7, 8, 9, 10]
    floor = answer["hits"][3]["score"]
    cut = hits(base, {"text": TEXTS[2], "mode": "keyword", "k": K, "filter": spec, "min_score": floor})
    assert rows_of(lee_docs, cut) == expected[:4]


def fused(
    lee: Lee,
    keyword: KeywordIndex,
    query: np.ndarray,
    text: str,
    want: int,
    passing: np.ndarray | None = None,
    leave_out: set[int] = frozenset(),  # type: ignore[assignment]
    **options: Any,
) -> tuple[list[int], list[float], list[dict[str, int]]]:
    """The hybrid answer computed here: RRF of the float64 vector list and the keyword list, DEPTH deep each."""
    depth = max(want, DEPTH)
    vector = best(cosines(lee, query), passing, leave_out)[:depth]
    _, rows = keyword.search([text], depth + len(leave_out), passing)
    words = [int(r) for r in rows[0] if r >= 0 and int(r) not in leave_out][:depth]
    result = rrf([vector, words], limit=want, **options)
    ranks = [{name: int(r) for name, r in zip(("vector", "keyword"), row, strict=True) if r} for row in result.ranks]
    return result.ids.tolist(), result.scores.tolist(), ranks


def test_hybrid_is_the_rrf_of_both_lists(base: str, lee_docs: Lee, keyword: KeywordIndex) -> None:
    every = []
    for row, text in zip((33, 209, 150, 7), TEXTS, strict=True):
        query = lee_docs.vectors[row].astype(np.float64) + lee_docs.vectors[row + 1]
        found = hits(base, {"vector": query.tolist(), "text": text, "mode": "hybrid", "k": K})
        ids, scores, ranks = fused(lee_docs, keyword, query, text, K)
        assert rows_of(lee_docs, found) == ids, text
        np.testing.assert_allclose([hit["score"] for hit in found], scores, rtol=1e-12)
        assert [hit["ranks"] for hit in found] == ranks
        every += ranks
    assert any(len(r) == 2 for r in every) and any(len(r) == 1 for r in every)  # from both lists, and from one
    # By document id (left out of both lists), with weights and another RRF constant
    row, text = 10, "bushfires firefighters"
    body = {"id": lee_docs.ids[row], "text": text, "mode": "hybrid", "k": K, "rrf_k": 10, "weights": {"keyword": 2}}
    found = hits(base, body)
    ids, scores, ranks = fused(lee_docs, keyword, lee_docs.vectors[row], text, K, None, {row}, k=10, weights=[1, 2])
    assert rows_of(lee_docs, found) == ids and row not in ids
    np.testing.assert_allclose([hit["score"] for hit in found], scores, rtol=1e-12)
    assert [hit["ranks"] for hit in found] == ranks


def test_hybrid_pages_and_filters(base: str, lee_docs: Lee, keyword: KeywordIndex) -> None:
    passing = np.array([y >= 1995 for y in lee_docs.fields["year"]])
    query, text, spec = lee_docs.vectors[48].astype(np.float64), "firefighters winds", {"year": {"gte": 1995}}
    ids, _, _ = fused(lee_docs, keyword, query, text, 20, passing)
    assert all(passing[i] for i in ids)
    pages = []
    for offset in range(0, 20, 5):
        body = {"vector": query.tolist(), "text": text, "mode": "hybrid", "k": 5, "offset": offset, "filter": spec}
        pages += rows_of(lee_docs, hits(base, body))
    assert pages == ids
    whole = hits(base, {"vector": query.tolist(), "text": text, "mode": "hybrid", "k": 20, "filter": spec})
    floor = whole[7]["score"]
    cut = hits(
        base, {"vector": query.tolist(), "text": text, "mode": "hybrid", "k": 20, "filter": spec, "min_score": floor}
    )
    assert rows_of(lee_docs, cut) == [i for i, hit in zip(ids, whole, strict=True) if hit["score"] >= floor]


def test_every_mode_keeps_to_the_filter(base: str, lee_docs: Lee) -> None:
    spec = {"or": [{"tags": {"in": ["government", "australian"]}}, {"long": False, "year": {"lt": 1994}}]}
    fields = zip(lee_docs.fields["tags"], lee_docs.fields["long"], lee_docs.fields["year"], strict=True)
    passing = np.array(
        [
            bool(set(tags or []) & {"government", "australian"}) or (not long and year < 1994)
            for tags, long, year in fields
        ]
    )
    vector, text = lee_docs.vectors[20].tolist(), "government police"
    for body in (
        {"text": text, "mode": "keyword"},
        {"vector": vector, "text": text, "mode": "hybrid"},
        {"vector": vector, "text": text, "mode": "hybrid", "diversity": 0.7},
        {"vector": vector, "diversity": 0.7},
    ):
        answer = post(base, {**body, "k": 20, "filter": spec, "fields": []}).json()
        assert answer["passing"] == int(passing.sum()), body
        assert len(answer["hits"]) == 20 and all(passing[row] for row in rows_of(lee_docs, answer["hits"])), body


def test_diversity_zero_is_the_plain_search(base: str, lee_docs: Lee) -> None:
    for body in (
        {"id": lee_docs.ids[12], "k": K},
        {"id": lee_docs.ids[12], "k": K, "filter": {"lang": "en"}, "offset": 3},
        {"vector": lee_docs.vectors[5].tolist(), "text": TEXTS[1], "mode": "hybrid", "k": K},
    ):
        assert hits(base, {**body, "diversity": 0}) == hits(base, body)


def test_diversity_is_greedy_mmr(base: str, lee_docs: Lee, keyword: KeywordIndex) -> None:
    row, k, diversity = 12, 6, 0.6
    query = lee_docs.vectors[row].astype(np.float64)
    scores = cosines(lee_docs, query)
    candidates = best(scores, leave_out={row})[: DIVERSE * k]
    expected = greedy_mmr(lee_docs, query, candidates, k, diversity, [float(scores[i]) for i in candidates])
    found = hits(base, {"id": lee_docs.ids[row], "k": k, "diversity": diversity})
    assert rows_of(lee_docs, found) == expected
    assert expected != candidates[:k]  # the re-ranking changes the answer
    np.testing.assert_allclose([hit["score"] for hit in found], scores[expected], atol=1e-5)  # each keeps its cosine
    # Hybrid: the fused list's best (at least DEPTH), relevance their fused score over the highest it can be (2 / 61)
    text, diversity = TEXTS[0], 0.9
    ids, fused_scores, _ = fused(lee_docs, keyword, query, text, max(DIVERSE * k, DEPTH), None, {row})
    expected = greedy_mmr(lee_docs, query, ids, k, diversity, [s / (2 / 61) for s in fused_scores])
    found = hits(base, {"id": lee_docs.ids[row], "text": text, "mode": "hybrid", "k": k, "diversity": diversity})
    assert rows_of(lee_docs, found) == expected
    assert expected != ids[:k]


def test_a_batch_mixes_modes(base: str, lee_docs: Lee) -> None:
    items = [
        {"text": TEXTS[0], "mode": "keyword"},
        {"id": lee_docs.ids[3]},
        {"text": TEXTS[1], "id": lee_docs.ids[209], "mode": "hybrid", "filter": {"lang": "en"}},
        {"text": TEXTS[2]},  # mode vector (the request's): no encoder
        {"text": TEXTS[3], "mode": "keyword", "offset": 2},
        {"id": lee_docs.ids[4], "mode": "keyword"},
    ]
    results = post(base, {"queries": items, "k": 4, "fields": []}).json()["results"]
    assert "no encoder" in results[3]["error"]["message"]
    assert "mode keyword needs text" in results[5]["error"]["message"]
    for position in (0, 1, 2, 4):
        assert results[position]["hits"] == hits(base, {**items[position], "k": 4}), position
    fusion = {"rrf_k": 10, "weights": {"keyword": 3}}  # the batch's hybrid item's
    weighed = post(base, {"queries": items[:3], "k": 4, "fields": [], **fusion}).json()["results"]
    assert weighed[:2] == results[:2] and weighed[2]["hits"] == hits(base, {**items[2], "k": 4, **fusion})
    assert weighed[2] != results[2]
    keyword_batch = post(base, {"queries": [{"text": t} for t in TEXTS], "mode": "keyword", "k": 3}).json()["results"]
    for text, result in zip(TEXTS, keyword_batch, strict=True):
        assert result["hits"] == hits(base, {"text": text, "mode": "keyword", "k": 3, "fields": None})


def test_a_batch_s_score_floor_is_each_item_s_in_its_mode(base: str, lee_docs: Lee) -> None:
    """The request's min_score goes to the items without their own, each scored in its mode: a BM25 floor above 1
    for keyword items is no cosine to refuse, and a vector item that takes it fails alone, as with its own."""
    floor = hits(base, {"text": TEXTS[0], "mode": "keyword", "k": 10})[4]["score"]
    assert floor > 1  # BM25's, beyond any cosine
    items = [{"text": TEXTS[0], "mode": "keyword"}, {"id": lee_docs.ids[3]}, {"text": TEXTS[1], "mode": "keyword"}]
    results = post(base, {"queries": items, "k": 10, "min_score": floor, "fields": []}).json()["results"]
    assert "min_score of mode vector is a cosine" in results[1]["error"]["message"]
    for position in (0, 2):
        assert results[position]["hits"] == hits(base, {**items[position], "k": 10, "min_score": floor}), position
    assert len(results[0]["hits"]) == 5
    alike = post(base, {"queries": items[::2], "mode": "keyword", "k": 10, "min_score": floor, "fields": []})
    assert [r["hits"] for r in alike.json()["results"]] == [results[0]["hits"], results[2]["hits"]]


@pytest.mark.parametrize(
    "body, words",
    [
        ({"mode": "keyword"}, "give exactly one of"),
        ({"positive": ["lee-003"], "negative": ["lee-003"]}, "the positive and negative documents cancel out"),
        ({"text": "fire", "vector": [0.1] * 50, "mode": "keyword"}, "text alone"),
        ({"id": "lee-001", "mode": "hybrid"}, "mode hybrid needs text (with a vector"),
        ({"text": "fire", "mode": "hybrid"}, "records no encoder"),  # its vectors came with the documents
        ({"text": "fire"}, "records no encoder"),
        ({"text": "fire", "vector": [0.1] * 50}, "use mode hybrid to search by both"),
        ({"text": "fire", "mode": "keyword", "diversity": 0.5}, "diversity needs a query vector"),
        ({"id": "lee-001", "diversity": 1.5}, "diversity"),
        ({"id": "lee-001", "min_score": 2}, "between -1 and 1"),
        ({"id": "lee-001", "mode": "fuzzy"}, "mode"),
        ({"id": "lee-001", "text": "fire", "mode": "hybrid", "weights": {"vector": -1}}, "weights.vector"),
        ({"id": "lee-001", "text": "fire", "mode": "hybrid", "rrf_k": -1}, "rrf_k"),
        ({"id": "lee-001", "rrf_k": 10}, "rrf_k: for mode hybrid, which fuses a vector and a keyword list; this"),
        ({"text": "fire", "mode": "keyword", "rrf_k": 0, "weights": {"keyword": 2}}, "rrf_k and weights: for mode"),
        ({"queries": [{"id": "lee-001"}], "weights": {"vector": 2}}, "weights: for mode hybrid, which fuses a vector"),
        ({"queries": [{"id": "lee-001", "mode": "vector"}], "mode": "hybrid", "rrf_k": 1}, "no query of the batch is"),
        ({"queries": [{"id": "lee-001"}], "text": "fire"}, "give each item of queries its own text"),
        ({"text": "", "mode": "keyword"}, "text"),
    ],
)
def test_bad_requests_are_422s_that_say_why(base: str, body: dict[str, Any], words: str) -> None:
    response = post(base, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and words in error["message"], error


def test_a_table_without_text_has_no_keyword_search(base: str, lee_docs: Lee) -> None:
    for body in ({"text": "fire", "mode": "keyword"}, {"id": lee_docs.ids[1], "text": "fire", "mode": "hybrid"}):
        response = post(base, body, table="no-text")
        assert response.status_code == 422
        assert "has no keyword index" in response.json()["error"]["message"]
    plain = post(base, {"id": lee_docs.ids[1], "k": 3, "diversity": 0.5}, table="no-text")
    assert plain.status_code == 200 and len(plain.json()["hits"]) == 3


def test_word_tables_refuse_the_document_modes(api: Any) -> None:
    vector = [0.1] * 50
    for extra in ({"text": "heart"}, {"mode": "vector"}, {"diversity": 0.5}, {"text": "heart", "mode": "hybrid"}):
        response = api.post("/v1/tables/small/search", json={"vector": vector, **extra})
        assert response.status_code == 422
        assert "only for documents tables" in response.json()["error"]["message"]
