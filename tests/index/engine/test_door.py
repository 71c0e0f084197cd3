"""Every query form through the engine's door (``index.engine.door``), in process, against the oracles the HTTP
tests use: gensim's KeyedVectors for word queries and analogies, a float64 brute force for vectors, filters,
paging and score floors, a float64 BM25 and the keyword index (bm25s) for keyword search, RRF recomputed from the
two lists for hybrid search, a greedy float64 MMR for diversity; hybrid's fallbacks; the write log's delta; and
per-item errors in a batch, in order."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gensim.models import KeyedVectors

from index.engine import door, hybrid
from index.engine.delta import Delta
from index.engine.door import Analogy, Examples, Failed, Query, Result
from index.engine.encode import encoder_for
from index.engine.hybrid import DEPTH, DIVERSE, DocumentSearch
from index.engine.keyword import KeywordIndex
from index.engine.table import SearchOptions, Table
from index.errors import InvalidQuery
from index.store.writelog import Record
from tests.index.build.test_embed_documents import import_texts
from tests.index.engine.test_gensim_parity import ANALOGIES, QUERIES, assert_same
from tests.lee import Lee
from tests.service.test_hybrid_api import TEXTS, best, bm25, cosines, fused, greedy_mmr

K = 10
EXACT = SearchOptions(exact=True)
WORDS = ("king", "heart", "paris", "computer", "quixotic")


def one(table: Table, query: Query, **given: Any) -> Result:
    """``query``'s result through :func:`door.run`, and (for a plain query) the same through :func:`door.split`."""
    (answer,) = door.run(table, [query], **given)
    assert isinstance(answer, Result), answer
    split = door.split(table, query, **given) if query.plain else None  # as service.execute.one asks
    if split is not None:
        (alone,) = split.finish(table.run(split.search))
        assert isinstance(alone, Result)
        assert (alone.hits, alone.query, alone.expect) == (answer.hits, answer.query, answer.expect)
    return answer


def assert_ranked(result: Result, brute: np.ndarray, expected: list[int]) -> None:
    """The float64 brute force's rows in its order, bar swaps of equal scores (duplicate documents), scores to
    float32's precision."""
    found = rows(result)
    assert len(found) == len(expected)
    np.testing.assert_allclose(scores(result), brute[expected], atol=1e-5)
    for mine, theirs in zip(found, expected, strict=True):
        assert mine == theirs or abs(brute[mine] - brute[theirs]) < 1e-6, (found, expected)


def rows(result: Result) -> list[int]:
    return [hit.row if isinstance(hit, door.Hit) else hit[0] for hit in result.hits]


def scores(result: Result) -> list[float]:
    return [hit.score if isinstance(hit, door.Hit) else hit[1] for hit in result.hits]


# ------------------------------------------------------------------------------------------ word queries
@pytest.mark.parametrize("word", WORDS)
def test_a_token_and_its_row_are_gensims_most_similar(glove: Table, glove_kv: KeyedVectors, word: str) -> None:
    expected = glove_kv.most_similar(word, topn=K)
    by_token = one(glove, Query(token=word, k=K, options=EXACT))
    assert_same(by_token.hits, expected, glove_kv)  # type: ignore[arg-type]
    assert by_token.query == {"text": word, "token": word, "id": glove_kv.key_to_index[word], "match": "exact"}
    by_row = one(glove, Query(row=glove_kv.key_to_index[word], k=K, options=EXACT))
    assert by_row.hits == by_token.hits


@pytest.mark.parametrize(("positive", "negative"), QUERIES)
def test_examples_are_gensims_most_similar(
    glove: Table, glove_kv: KeyedVectors, positive: list[str], negative: list[str]
) -> None:
    found = one(glove, Query(examples=Examples(positive, negative), k=15, options=EXACT))
    assert_same(found.hits, glove_kv.most_similar(positive=positive, negative=negative, topn=15), glove_kv)  # type: ignore[arg-type]
    assert [r["token"] for r in found.query["positive"]] == positive


@pytest.mark.parametrize(("a", "b", "c"), ANALOGIES)
def test_analogies_are_gensims(glove: Table, glove_kv: KeyedVectors, a: str, b: str, c: str) -> None:
    add = one(glove, Query(analogy=Analogy(a, b, c), k=K, options=EXACT))
    assert_same(add.hits, glove_kv.most_similar(positive=[b, c], negative=[a], topn=K), glove_kv)  # type: ignore[arg-type]
    assert add.query == {
        "a": glove.resolve(a).as_dict(),
        "b": glove.resolve(b).as_dict(),
        "c": glove.resolve(c).as_dict(),
        "method": "3cosadd",
    }
    mul = one(glove, Query(analogy=Analogy(a, b, c), k=K, method="3cosmul"))
    assert_same(mul.hits, glove_kv.most_similar_cosmul(positive=[b, c], negative=[a], topn=K), glove_kv)  # type: ignore[arg-type]


def test_an_expected_answer_is_ranked_among_every_candidate(glove: Table, glove_kv: KeyedVectors) -> None:
    queries = [
        Query(analogy=Analogy("man", "king", "woman", expect="queen"), k=3),
        Query(analogy=Analogy("man", "king", "woman", expect="princess"), k=3),
    ]
    assert all(door.expecting(query) for query in queries)
    assert not door.expecting(Query(analogy=Analogy("man", "king", "woman"), k=3))
    answers = door.run(glove, queries)
    door.expectations(glove, queries, answers)
    candidates = glove_kv.most_similar(positive=["king", "woman"], negative=["man"], topn=None)
    order = np.argsort(-candidates, kind="stable")
    left_out = {glove_kv.key_to_index[w] for w in ("man", "king", "woman")}
    ranked = [int(i) for i in order if int(i) not in left_out]
    for answer, word in zip(answers, ("queen", "princess"), strict=True):
        assert isinstance(answer, Result) and answer.expect is not None
        row = glove_kv.key_to_index[word]
        assert answer.expect["token"] == word and answer.expect["id"] == row
        assert answer.expect["rank"] == ranked.index(row) + 1
        assert answer.expect["score"] == pytest.approx(float(candidates[row]), abs=1e-5)
        assert answer.expect["margin"] == pytest.approx(float(candidates[ranked[0]] - candidates[row]), abs=1e-5)


def test_a_batch_answers_each_item_or_its_error_in_order(glove: Table) -> None:
    queries = [
        Query(token="heart", k=5),
        Query(token="zzqxqqzv", k=5),  # unknown
        Query(row=glove.rows + 5, k=5),  # no such row
        Query(analogy=Analogy("king", "king", "queen"), k=5),  # the offset b - a is zero
        Query(vector=[0.5] * (glove.dim - 1), k=5),  # the wrong length
        Query(vector=[float("nan")] * glove.dim, k=5),
        Query(examples=Examples(["paris"], ["france"]), k=5),
        Query(analogy=Analogy("man", "king", "woman"), k=5),
    ]
    answers = door.run(glove, queries)
    codes = [answer.error.code if isinstance(answer, Failed) else "ok" for answer in answers]
    assert codes == ["ok", "unknown_token", "unknown_token", *["invalid_request"] * 3, "ok", "ok"]
    assert "b - a is zero" in answers[3].error.message  # type: ignore[union-attr]
    for query, answer in zip(queries, answers, strict=True):
        if isinstance(answer, Result):
            assert answer.hits == one(glove, query).hits
        else:
            with pytest.raises(type(answer.error)):
                door.probe(glove, query)


def test_composed_words_and_raw_vectors(glove: Table) -> None:
    vector = np.asarray(glove.vectors[glove.resolve("ocean").id], dtype=np.float64) * 3.0
    found = one(glove, Query(vector=vector.tolist(), k=K, options=EXACT))
    brute = np.asarray(glove.vectors, dtype=np.float64) @ (vector / np.linalg.norm(vector))
    assert rows(found) == [int(i) for i in np.argsort(-brute, kind="stable")[:K]]  # the word itself is not left out
    np.testing.assert_allclose(scores(found), np.sort(brute)[::-1][:K], atol=1e-5)


# ---------------------------------------------------------------------------------------- documents tables
@pytest.fixture(scope="module")
def lee(lee_data_dir: Path) -> Table:
    return Table.load(lee_data_dir / "lee")


@pytest.fixture(scope="module")
def keyword(lee: Table) -> KeywordIndex:
    assert lee.keyword is not None
    return lee.keyword


def passing_of(lee_docs: Lee, spec: dict[str, Any]) -> np.ndarray:
    assert spec == {"year": {"gte": 1995}}
    return np.array([y >= 1995 for y in lee_docs.fields["year"]])


def test_vectors_filters_pages_and_floors_are_the_brute_force(lee: Table, lee_docs: Lee) -> None:
    spec = {"year": {"gte": 1995}}
    passing = passing_of(lee_docs, spec)
    query = lee_docs.vectors[48].astype(np.float64) + lee_docs.vectors[7]
    brute = cosines(lee_docs, query)
    expected = best(brute, passing)
    whole = one(lee, Query(vector=query.tolist(), k=20, filter=spec))
    assert_ranked(whole, brute, expected[:20])
    assert whole.passing == int(passing.sum())
    np.testing.assert_allclose(scores(whole), brute[expected[:20]], atol=1e-5)
    page = one(lee, Query(vector=query.tolist(), k=5, offset=5, filter=spec))
    assert rows(page) == rows(whole)[5:10]
    floor = float(brute[expected[12]]) - 1e-6
    cut = one(lee, Query(vector=query.tolist(), k=20, filter=spec, min_score=floor))
    assert rows(cut) == rows(whole)[:13]
    plain = one(lee, Query(vector=query.tolist(), k=K))
    assert_ranked(plain, brute, best(brute)[:K])
    assert plain.passing is None


def test_documents_stand_for_their_vectors_and_are_left_out(lee: Table, lee_docs: Lee) -> None:
    unit = lee_docs.unit()
    like = one(lee, Query(document=lee_docs.ids[12], k=K))
    assert rows(like) == best(unit @ unit[12], leave_out={12})[:K]
    assert like.query == {"id": lee_docs.ids[12]}
    mean = unit[3] + unit[40] - unit[100]
    found = one(lee, Query(examples=Examples(lee_docs.ids[3:4] + lee_docs.ids[40:41], [lee_docs.ids[100]], True), k=K))
    assert rows(found) == best(cosines(lee_docs, mean), leave_out={3, 40, 100})[:K]


@pytest.mark.parametrize("text", TEXTS)
def test_keyword_hits_are_bm25(lee: Table, lee_docs: Lee, keyword: KeywordIndex, text: str) -> None:
    found = one(lee, Query(text=text, mode="keyword", k=K))
    expected_scores, expected_rows = keyword.search([text], K)
    assert rows(found) == [int(r) for r in expected_rows[0] if r >= 0]
    brute = bm25(lee_docs, text)
    assert rows(found) == [i for i in best(brute) if brute[i] > 0][:K]
    np.testing.assert_allclose(scores(found), expected_scores[0][: len(found.hits)], rtol=1e-6)
    assert [hit.ranks for hit in found.hits] == [{"keyword": i} for i in range(1, len(found.hits) + 1)]  # type: ignore[union-attr]
    assert found.ranked and found.fallback is None


def test_hybrid_is_the_rrf_of_both_lists(lee: Table, lee_docs: Lee, keyword: KeywordIndex) -> None:
    for row, text in zip((33, 209, 150, 7), TEXTS, strict=True):
        query = lee_docs.vectors[row].astype(np.float64) + lee_docs.vectors[row + 1]
        found = one(lee, Query(vector=query.tolist(), text=text, mode="hybrid", k=K))
        ids, fused_scores, ranks = fused(lee_docs, keyword, query, text, K)
        assert rows(found) == ids, text
        np.testing.assert_allclose(scores(found), fused_scores, rtol=1e-12)
        assert [hit.ranks for hit in found.hits] == ranks  # type: ignore[union-attr]
    spec = {"year": {"gte": 1995}}
    query, text = lee_docs.vectors[48].astype(np.float64), "firefighters winds"
    ids, _, _ = fused(lee_docs, keyword, query, text, 20, passing_of(lee_docs, spec), k=10, weights=[1, 2])
    pages: list[int] = []
    for offset in range(0, 20, 5):
        page = one(
            lee,
            Query(
                vector=query.tolist(),
                text=text,
                mode="hybrid",
                k=5,
                offset=offset,
                filter=spec,
                rrf_k=10,
                weights=(1, 2),
            ),
        )
        pages += rows(page)
    assert pages == ids


def test_diversity_is_greedy_mmr(lee: Table, lee_docs: Lee, keyword: KeywordIndex) -> None:
    row, k = 12, 6
    query = lee_docs.vectors[row].astype(np.float64)
    cos = cosines(lee_docs, query)
    candidates = best(cos, leave_out={row})[: DIVERSE * k]
    expected = greedy_mmr(lee_docs, query, candidates, k, 0.6, [float(cos[i]) for i in candidates])
    assert rows(one(lee, Query(document=lee_docs.ids[row], k=k, diversity=0.6))) == expected
    assert expected != candidates[:k]
    ids, fused_scores, _ = fused(lee_docs, keyword, query, TEXTS[0], DEPTH, None, {row})  # at least DEPTH fused
    expected = greedy_mmr(lee_docs, query, ids, k, 0.9, [s / (2 / 61) for s in fused_scores])
    found = one(lee, Query(document=lee_docs.ids[row], text=TEXTS[0], mode="hybrid", k=k, diversity=0.9))
    assert rows(found) == expected
    pages = [  # the same candidates for every page within DEPTH / DIVERSE hits: pages of one ranking
        rows(
            one(lee, Query(document=lee_docs.ids[row], text=TEXTS[0], mode="hybrid", k=3, offset=offset, diversity=0.9))
        )
        for offset in (0, 3)
    ]
    assert pages[0] + pages[1] == expected


def test_a_score_floor_leaves_a_diverse_page_short_only_when_too_few_reach_it(lee: Table, lee_docs: Lee) -> None:
    """MMR's order is not the scores' order: the candidates below the floor are left out before the re-ranking,
    not from its page."""
    row, k = 12, 6
    query = lee_docs.vectors[row].astype(np.float64)
    cos = cosines(lee_docs, query)
    candidates = best(cos, leave_out={row})[: DIVERSE * k]
    floor = float(cos[candidates[2 * k]])  # two pages' worth of candidates reach it
    passing = [i for i in candidates if cos[i] >= floor]
    expected = greedy_mmr(lee_docs, query, passing, k, 0.8, [float(cos[i]) for i in passing])
    page_then_floor = greedy_mmr(lee_docs, query, candidates, k, 0.8, [float(cos[i]) for i in candidates])
    assert len(expected) == k > len([i for i in page_then_floor if cos[i] >= floor])  # the case in point
    found = one(lee, Query(document=lee_docs.ids[row], k=k, diversity=0.8, min_score=floor))
    assert rows(found) == expected


def test_a_documents_batch_groups_by_filter_page_and_mode(lee: Table, lee_docs: Lee) -> None:
    queries = [
        Query(text=TEXTS[0], mode="keyword", k=4),
        Query(document=lee_docs.ids[3], k=4),
        Query(text=TEXTS[1], document=lee_docs.ids[209], mode="hybrid", filter={"lang": "en"}, k=4),
        Query(text=TEXTS[2], k=4),  # mode vector: the table records no encoder
        Query(text=TEXTS[3], mode="keyword", offset=2, k=4),
        Query(document=lee_docs.ids[4], mode="keyword", k=4),  # keyword needs text
        Query(document="no-such-document", k=4),
        Query(document=lee_docs.ids[5], filter={"no_such_field": 1}, k=4),
    ]
    answers = door.run(lee, queries)
    errors = {i: a.error for i, a in enumerate(answers) if isinstance(a, Failed)}
    assert sorted(errors) == [3, 5, 6, 7]
    assert "records no encoder" in errors[3].message and "mode keyword needs text" in errors[5].message
    assert errors[6].code == "unknown_document" and errors[7].code == "invalid_request"
    for position in (0, 1, 2, 4):
        answer = answers[position]
        assert isinstance(answer, Result)
        assert answer.hits == one(lee, queries[position]).hits, position
    assert answers[2].passing == sum(lang == "en" for lang in lee_docs.fields["lang"])  # type: ignore[union-attr]


def test_a_batch_item_its_mode_cannot_search_is_its_own_error(lee: Table, lee_docs: Lee) -> None:
    """What a documents search needs of its mode is the door's to refuse, item by item (``hybrid.run`` checks none
    of it): diversity in mode keyword, mode hybrid without text, text beside an id in mode vector; the items
    beside them are answered as alone."""
    queries = [
        Query(text=TEXTS[0], mode="keyword", k=4, diversity=0.5),
        Query(document=lee_docs.ids[3], mode="hybrid", k=4, diversity=0.5),
        Query(document=lee_docs.ids[3], text=TEXTS[0], k=4),
        Query(document=lee_docs.ids[3], text=TEXTS[0], mode="hybrid", k=4, diversity=0.5),
        Query(text=TEXTS[1], mode="keyword", k=4),
    ]
    answers = door.run(lee, queries)
    errors = [answer.error.message if isinstance(answer, Failed) else "" for answer in answers]
    assert "diversity needs a query vector" in errors[0] and "mode hybrid needs text" in errors[1]
    assert "use mode hybrid to search by both" in errors[2]
    for position in (3, 4):
        answer = answers[position]
        assert isinstance(answer, Result) and answer.hits == one(lee, queries[position]).hits, position


# Queries no request model made (a caller in process): each answered by its own error, naming what is wrong
MALFORMED = {
    "k must be a whole number of at least 1, not 0": {"k": 0},
    "k must be a whole number of at least 1, not -3": {"k": -3, "mode": "hybrid", "text": TEXTS[0]},
    "k must be a whole number of at least 1, not 2.5": {"k": 2.5},
    "offset must be a whole number of at least 0, not -1": {"offset": -1, "mode": "keyword", "text": TEXTS[0]},
    "unknown mode 'fuzzy': use one of vector, keyword, hybrid": {"mode": "fuzzy"},
    "diversity must be between 0 and 1, not -0.5": {"diversity": -0.5},
    "diversity must be between 0 and 1, not 2": {"diversity": 2, "mode": "hybrid", "text": TEXTS[0]},
}


def test_a_malformed_query_is_its_own_error(small_data_dir: Path, lee: Table, lee_docs: Lee) -> None:
    """A query made in process with a page, mode or diversity no request model lets through is its item's error
    (not an AssertionError, a NumPy error or hits of another page), on a documents table and a word table alike,
    through run and split; the batch's other items are answered as alone."""
    vector = lee_docs.vectors[5].tolist()
    queries = [Query(vector=vector, **given) for given in MALFORMED.values()] + [Query(vector=vector, k=3)]
    answers = door.run(lee, queries)
    for (message, given), answer in zip(MALFORMED.items(), answers, strict=False):
        assert isinstance(answer, Failed) and answer.error.message == message, (given, answer)
        assert answer.error.code == "invalid_request"
    assert isinstance(answers[-1], Result) and answers[-1].hits == one(lee, queries[-1]).hits
    words = Table.load(small_data_dir / "small")
    for query in (Query(token="heart", k=0), Query(analogy=Analogy("man", "king", "woman"), k=-1)):
        (answer,) = door.run(words, [query])
        assert isinstance(answer, Failed) and answer.error.message.startswith("k must be a whole number"), answer
        with pytest.raises(InvalidQuery, match="k must be a whole number of at least 1"):
            door.split(words, query)


def test_hybrid_run_refuses_a_search_it_cannot_run(lee: Table, lee_docs: Lee) -> None:
    """``hybrid.run`` called with a ``DocumentSearch`` the door did not make: the engine's error naming what is
    missing or out of range, never an AssertionError or a search of another mode."""
    queries = lee_docs.unit()[:1].astype(np.float32)
    words = lee_docs.unit()[:1, :10].astype(np.float32)
    refused = {
        "mode keyword needs texts, one per query": DocumentSearch("keyword", 3),
        "mode vector needs query vectors, one row of 50 values per query, not none": DocumentSearch("vector", 3),
        "mode hybrid needs texts, one per query": DocumentSearch("hybrid", 3, queries),
        "diversity needs query vectors": DocumentSearch("keyword", 3, texts=TEXTS[:1], diversity=0.5),
        "not shape [1, 10]": DocumentSearch("vector", 3, words),
        "unknown mode 'fuzzy'": DocumentSearch("fuzzy", 3, queries, TEXTS[:1]),  # type: ignore[arg-type]
        "k must be a whole number of at least 1, not 0": DocumentSearch("vector", 0, queries),
        "k must be a whole number of at least 1, not -1": DocumentSearch("keyword", -1, texts=TEXTS[:1]),
        "offset must be a whole number of at least 0, not -2": DocumentSearch("keyword", 3, texts=TEXTS[:1], offset=-2),
        "diversity must be between 0 and 1, not -1": DocumentSearch("vector", 3, queries, diversity=-1),
        "texts holds 2 items, not one per query (1)": DocumentSearch("hybrid", 3, queries, TEXTS[:2]),
        "exclude holds 2 items, not one per query (1)": DocumentSearch("vector", 3, queries, exclude=[{1}, {2}]),
    }
    for message, search in refused.items():
        with pytest.raises(InvalidQuery, match=re.escape(message)):
            hybrid.run(lee, search)
    vectors_only = Table.load(lee.directory)
    vectors_only.keyword = None  # as a table whose documents have no text
    with pytest.raises(InvalidQuery, match="mode keyword: table 'lee' has no keyword index; search it by vector"):
        hybrid.run(vectors_only, DocumentSearch("keyword", 3, texts=TEXTS[:1]))
    assert hybrid.run(lee, DocumentSearch("hybrid", 3, queries, TEXTS[:1]))[0]  # a whole search is answered


# --------------------------------------------------------------------------------------------- the delta
def test_the_delta_is_searched_beside_the_version(lee: Table, lee_docs: Lee) -> None:
    """A document deleted since the version is never found; a written one is, as row ``rows + its place``."""
    assert lee.payload is not None
    delta = Delta(lee.payload, lee.rows, lee.dim, 0)
    written = {
        "id": "w0",
        "text": lee_docs.texts[20],
        "vector": (lee_docs.vectors[20] * 2).tolist(),
        "fields": {"year": 2000},
    }
    delta.apply([Record(1, 0, 0, {"op": "upsert", "documents": [written]})])
    delta.apply([Record(2, 0, 0, {"op": "delete", "ids": [lee_docs.ids[20], lee_docs.ids[21]]})])
    query = lee_docs.vectors[20].astype(np.float64)
    found = one(lee, Query(vector=query.tolist(), k=K), delta=delta)
    live = np.append(cosines(lee_docs, query), cosines(lee_docs, query)[20])
    expected = best(live, leave_out={20, 21})[:K]
    assert_ranked(found, live, expected)
    assert rows(found)[0] == lee.rows
    spec = {"year": {"gte": 1995}}
    filtered = one(lee, Query(vector=query.tolist(), k=K, filter=spec), delta=delta)
    passing = np.append(passing_of(lee_docs, spec), True)
    passing[[20, 21]] = False
    assert filtered.passing == int(passing.sum())
    assert_ranked(filtered, live, best(live, passing)[:K])
    by_text = one(lee, Query(text=lee_docs.texts[20][:200], mode="keyword", k=3), delta=delta)
    assert lee.rows in rows(by_text) and 20 not in rows(by_text)
    assert door.split(lee, Query(vector=query.tolist(), k=K), delta=delta) is None  # merged in a worker, not joined


# ------------------------------------------------------------------------------------ text and its fallbacks
@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path, lee_docs: Lee) -> tuple[Table, Table]:
    """Lee imported without vectors, embedded by the 20,000-row GloVe table ``small``: (lee, small)."""
    data = tmp_path_factory.mktemp("door-text")
    import_texts(data, small_data_dir, lee_docs, data.parent / "door-lee.jsonl")
    return Table.load(data / "lee"), Table.load(data / "small")


def test_text_is_embedded_by_the_encoder(encoded: tuple[Table, Table]) -> None:
    lee, small = encoded
    text = "bushfires burn homes near Sydney as firefighters battle the wind"
    found = one(lee, Query(text=text, k=5), encoder=small)
    vector = encoder_for(small).encode([text]).vectors[0].astype(np.float64)
    brute = np.asarray(lee.vectors, dtype=np.float64) @ vector
    assert rows(found) == [int(i) for i in np.argsort(-brute, kind="stable")[:5]]
    assert found.query["encoder"] == "small" and found.query["tokens"] > 0
    (alone,) = door.run(lee, [Query(text=text)])  # no encoder given
    assert isinstance(alone, Failed) and "records no encoder" in alone.error.message


def test_a_text_of_no_words_is_not_sent_to_the_keyword_index(encoded: tuple[Table, Table]) -> None:
    """A blank text (or one of no words) is refused without the hint to search it by keyword: that finds no words
    in it either."""
    lee, small = encoded
    for text in ("  ", " \n\t"):
        (refused,) = door.run(lee, [Query(text=text, k=5)], encoder=small)
        assert isinstance(refused, Failed) and refused.error.message == f"text {text!r} has no words to embed"
        assert one(lee, Query(text=text, mode="keyword", k=5), encoder=small).hits == []


def test_hybrids_fallbacks(encoded: tuple[Table, Table]) -> None:
    lee, small = encoded
    assert lee.keyword is not None
    unknown = one(lee, Query(text="zzqx qqzv", mode="hybrid", k=5), encoder=small)
    assert unknown.fallback is not None and unknown.fallback["mode"] == "keyword"
    assert unknown.fallback["reason"].startswith("text 'zzqx qqzv': no word of it is known to")
    assert unknown.hits == one(lee, Query(text="zzqx qqzv", mode="keyword", k=5), encoder=small).hits
    (kept,) = door.run(lee, [Query(text="zzqx qqzv", mode="hybrid", min_score=0.01)], encoder=small)
    assert isinstance(kept, Failed) and kept.error.message.endswith(door.KEYWORD_HINT)
    assert kept.error.details == {"words": ["zzqx", "qqzv"]}
    # A word the encoder knows that no document holds: searched by vector alone.
    absent = next(
        word
        for word in small.tokens.labels(list(range(5000, 6000)))
        if word.isalpha() and lee.keyword.search([word], 1)[1][0, 0] < 0
    )
    vector_only = one(lee, Query(text=absent, mode="hybrid", k=5), encoder=small)
    assert vector_only.fallback is not None and vector_only.fallback["mode"] == "vector"
    assert vector_only.hits == one(lee, Query(text=absent, k=5), encoder=small).hits
    assert not vector_only.ranked


def test_split_gives_plain_queries_one_joinable_request(glove: Table, lee: Table, lee_docs: Lee) -> None:
    """A plain query (an input that stands for a vector, mode vector, no filter, diversity or writes) is one engine
    request the searcher can join, light on an approximate table; anything else is not plain (the caller reads
    Query.plain before it splits) and is answered whole by run."""
    for query in (
        Query(token="heart"),
        Query(row=3),
        Query(examples=Examples(["king"], ["man"])),
        Query(vector=[0.5] * glove.dim),
        Query(analogy=Analogy("man", "king", "woman")),
    ):
        split = door.split(glove, query)
        assert split is not None and glove.is_light(split.search), query
    assert not glove.is_light(door.split(glove, Query(token="heart", options=EXACT)).search)  # type: ignore[union-attr]
    vector = lee_docs.vectors[3].tolist()
    assert door.split(lee, Query(document=lee_docs.ids[3])) is not None
    for query in (
        Query(vector=vector, filter={"lang": "en"}),
        Query(vector=vector, diversity=0.5),
        Query(text="fire", mode="keyword"),
        Query(vector=vector, text="fire", mode="hybrid"),
        Query(text="fire"),
    ):
        assert not query.plain, query  # not split (service.execute.one asks): answered whole by run
