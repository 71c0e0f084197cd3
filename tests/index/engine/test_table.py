"""The query engine on real GloVe rows: lookup, neighbours, analogies, projection, against brute force."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.layout import pca_projection
from index.engine.lookup import SUGGESTION_BUDGET, Resolved
from index.engine.table import SearchOptions, Table
from index.errors import InvalidQuery, UnknownToken


def brute_force(table: Table, query: np.ndarray, k: int, exclude: set[int]) -> list[int]:
    scores = np.asarray(table.vectors, dtype=np.float64) @ query.astype(np.float64)
    order = [int(i) for i in np.argsort(-scores) if int(i) not in exclude]
    return order[:k]


def test_lookup_exact_then_casefold(small: Table) -> None:
    heart = small.resolve("heart")
    assert small.tokens[heart.id] == "heart" and heart.match == "exact"
    folded = small.resolve("HeArT")
    assert folded.id == heart.id and folded.match == "casefold"
    assert small.find("no-such-token-xyz") is None
    with pytest.raises(UnknownToken) as info:
        small.resolve("hearrt")
    assert "heart" in info.value.details["suggestions"]


def test_lookup_finds_labels_not_in_composed_form(tmp_path: Path) -> None:
    """A label as an import keeps it, decomposed or a compatibility character, is its own row (gensim's key); a
    query in another form still finds the composed row, and ``text`` is what was sent."""
    labels = ["cafe\u0301", "caf\u00e9", "K", "\u212a", "\uf900", "\u00c5ngstr\u00f6m"]
    raw = RawTable(tokens=labels, matrix=np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32))
    build_table(raw, data_dir=tmp_path, name="t", source={"format": "test", "path": "rows"}, index_spec="flat")
    table = Table.load(tmp_path / "t")
    for row, label in enumerate(labels):
        assert table.resolve(label) == Resolved(label, row, label, "exact")
    assert table.resolve("\u212bngstro\u0308m") == Resolved("\u212bngstro\u0308m", 5, labels[5], "exact")
    assert table.resolve("CAFE\u0301").token == "cafe\u0301"  # case-folded: the lowest row of either spelling


def test_lookup_finds_decomposed_labels_typed_composed(tmp_path: Path) -> None:
    """A table whose labels are decomposed (NFD: "e" and U+0301, as some sources write them) finds them typed
    composed, as typed and case-folded, rather than calling "café" unknown while suggesting a "café" that looks the
    same; a composed label of the same word is still the one a composed query finds."""
    labels = ["cafe\u0301", "nai\u0308ve", "A\u030angstro\u0308m", "re\u0301sume\u0301", "r\u00e9sum\u00e9"]
    raw = RawTable(tokens=labels, matrix=np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    build_table(raw, data_dir=tmp_path, name="t", source={"format": "test", "path": "rows"}, index_spec="flat")
    table = Table.load(tmp_path / "t")
    assert table.resolve("caf\u00e9") == Resolved("caf\u00e9", 0, labels[0], "exact")
    assert table.resolve("na\u00efve") == Resolved("na\u00efve", 1, labels[1], "exact")
    assert table.resolve("\u212bngstr\u00f6m") == Resolved("\u212bngstr\u00f6m", 2, labels[2], "exact")  # Å sign
    assert table.resolve("CAF\u00c9") == Resolved("CAF\u00c9", 0, labels[0], "casefold")
    assert table.resolve("NAI\u0308VE") == Resolved("NAI\u0308VE", 1, labels[1], "casefold")
    assert table.resolve("r\u00e9sum\u00e9").id == 4 and table.resolve(labels[3]).id == 3
    assert table.find("cafe") is None


def test_a_word_spelled_decomposed_is_found_before_another_word_case_folded(tmp_path: Path) -> None:
    """A word decomposed ("café") is the same word as composed (canonically equivalent): its row is found before
    "Café", a word whose case differs. Case-folded, the lowest row of either spelling is found, as a sharded
    table's front picks among its shards' (``service.scatter_words.resolved``) and the text encoder does."""
    labels = ["Caf\u00e9", "cafe\u0301", "the", "NAI\u0308VE", "Na\u00efve"]
    raw = RawTable(tokens=labels, matrix=np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    build_table(raw, data_dir=tmp_path, name="t", source={"format": "test", "path": "rows"}, index_spec="flat")
    table = Table.load(tmp_path / "t")
    assert table.resolve("caf\u00e9") == Resolved("caf\u00e9", 1, labels[1], "exact")
    assert table.resolve("Caf\u00e9") == Resolved("Caf\u00e9", 0, labels[0], "exact")
    assert table.resolve("CAF\u00c9").id == 0  # folded: the lowest row of either spelling
    assert table.resolve("na\u00efve") == Resolved("na\u00efve", 3, labels[3], "casefold")


def test_the_dotted_capital_i_folds_to_i_as_turkish_folds_it(small: Table, tmp_path: Path) -> None:
    """``İstanbul`` (U+0130) lower-cases and folds to i and U+0307, no label of a lower-cased table: it finds
    "istanbul" case-folded, as does "i" typed with the dot above; a label spelled with the dot is found first."""
    istanbul = small.resolve("istanbul")
    assert istanbul.match == "exact"
    for typed in ("İstanbul", "İSTANBUL", "i\u0307stanbul", "I\u0307stanbul"):
        assert small.resolve(typed) == Resolved(typed, istanbul.id, "istanbul", "casefold")
    labels = ["i\u0307zmir", "izmir", "\u0130zmir"]
    raw = RawTable(tokens=labels, matrix=np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    build_table(raw, data_dir=tmp_path, name="t", source={"format": "test", "path": "rows"}, index_spec="flat")
    table = Table.load(tmp_path / "t")
    for row, label in enumerate(labels):
        assert table.resolve(label) == Resolved(label, row, label, "exact")
    assert table.resolve("İZMIR") == Resolved("İZMIR", 0, labels[0], "casefold")  # folded with the dot first
    assert table.resolve("İZMİR") == Resolved("İZMİR", 1, "izmir", "casefold")  # no label folds so: then plain
    assert table.resolve("IZMIR") == Resolved("IZMIR", 1, "izmir", "casefold")


def test_suggestions_for_decomposed_text(small: Table) -> None:
    """A misspelling typed decomposed ("e" + combining acute) is matched as the composed labels are spelled."""
    assert small.suggest("andre\u0301s") == small.suggest("andr\u00e9s")
    assert small.suggest("andre\u0301s")[0] == "andr\u00e9"


def test_a_word_too_long_for_any_suggestion_spends_none_of_the_requests(small: Table) -> None:
    """A request's suggestions are counted (``SUGGESTION_BUDGET``); a text longer than three times every label can
    be spelled like none, is matched against none, and leaves the count as it was."""
    token = SUGGESTION_BUDGET.set([1])
    try:
        assert small.suggest("x" * 500) == []
        assert SUGGESTION_BUDGET.get() == [1]
        assert "king" in small.suggest("kinq")
        assert SUGGESTION_BUDGET.get() == [0] and small.suggest("quenn") == []
    finally:
        SUGGESTION_BUDGET.reset(token)


def test_token_order_matches_source(small: Table, glove_raw) -> None:
    assert len(small.tokens) == 20_000
    assert small.tokens[:5] == glove_raw.tokens[:5]
    assert all(small.tokens.find(t) == i for i, t in enumerate(glove_raw.tokens[:2000]))


@pytest.mark.parametrize("word", ["heart", "king", "paris", "computer"])
def test_neighbours_equal_brute_force(small: Table, word: str) -> None:
    row = small.resolve(word).id
    got = [i for i, _ in small.most_similar([row], k=8)]
    assert got == brute_force(small, np.asarray(small.vectors[row]), 8, {row})


def test_batch_search_equals_single(small: Table) -> None:
    ids = [small.resolve(w).id for w in ("red", "blue", "green", "one", "two")]
    queries = np.asarray(small.vectors[ids])
    batch = small.search(queries, 10, exclude=[{i} for i in ids])
    for row, result in zip(ids, batch, strict=True):
        single = small.most_similar([row], k=10)
        assert [i for i, _ in result] == [i for i, _ in single]
        np.testing.assert_allclose([s for _, s in result], [s for _, s in single], rtol=1e-5)


def test_analogy_king_queen(small: Table) -> None:
    a, b, c = (small.resolve(w).id for w in ("man", "king", "woman"))
    for method in ("3cosadd", "3cosmul"):
        top = small.analogy(a, b, c, k=3, method=method)
        assert small.tokens[top[0][0]] == "queen"
        assert not {a, b, c} & {i for i, _ in top}
    with pytest.raises(InvalidQuery):
        small.analogy(a, b, c, method="bogus")


def test_restrict_limits_candidates(small: Table) -> None:
    row = small.resolve("heart").id
    assert all(i < 1000 for i, _ in small.most_similar([row], k=10, restrict=1000))


def test_zero_query_and_bad_vectors_refused(small: Table) -> None:
    row = small.resolve("heart").id
    with pytest.raises(InvalidQuery, match="cancel"):
        small.most_similar([row], [row], k=5)
    for bad in (np.zeros((1, small.dim)), np.full((1, small.dim), np.nan), np.ones((1, 3))):
        with pytest.raises(InvalidQuery):
            small.normalize_queries(bad)


def test_projection_is_pca(small: Table) -> None:
    ids = [small.resolve(w).id for w in ("red", "blue", "green", "one", "two", "three")]
    points, ratio = pca_projection(small.vectors[ids])
    rows = np.asarray(small.vectors[ids], dtype=np.float64)
    centred = rows - rows.mean(axis=0)
    _, s, _ = np.linalg.svd(centred)
    np.testing.assert_allclose(ratio, (s**2 / (s**2).sum())[:2], rtol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(points, axis=0), s[:2], rtol=1e-9)
    # colours and numbers fall on opposite sides of the first component
    assert np.sign(points[:3, 0]).tolist() != np.sign(points[3:, 0]).tolist()


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_batched_analogies_equal_one_by_one(small: Table, method: str) -> None:
    words = [
        ("man", "king", "woman"),
        ("france", "paris", "japan"),
        ("walk", "walked", "swim"),
        ("big", "bigger", "small"),
    ]
    questions = [tuple(small.resolve(w).id for w in q) for q in words]
    batch = small.analogies(questions, k=6, method=method, exact=True)
    for (a, b, c), hits in zip(questions, batch, strict=True):
        single = small.analogy(a, b, c, k=6, method=method, exact=True)
        assert [i for i, _ in hits] == [i for i, _ in single]
        np.testing.assert_allclose([s for _, s in hits], [s for _, s in single], rtol=1e-5)
        assert not {a, b, c} & {i for i, _ in hits}


def test_an_ivf_search_left_short_is_searched_exactly(tmp_path: Path) -> None:
    """An IVF index probing fewer rows than asked leaves its answer short (ids -1): the exact search answers those
    queries, as after a widened HNSW search."""
    rows = np.random.default_rng(1).standard_normal((2_000, 8)).astype(np.float32)
    raw = RawTable(tokens=[f"w{i}" for i in range(len(rows))], matrix=rows)
    build_table(raw, data_dir=tmp_path, name="t", source={"format": "test", "path": "rows"}, index_spec="ivf")
    table = Table.load(tmp_path / "t")
    faiss.extract_index_ivf(table.index).nprobe = 1  # one list: fewer rows than k
    queries = table.vectors[:3]
    scores, ids = table.knn(queries, 300)
    exact_scores, exact_ids = table.knn(queries, 300, SearchOptions(exact=True))
    np.testing.assert_array_equal(ids, exact_ids)
    np.testing.assert_array_equal(scores, exact_scores)


def test_a_widened_graph_search_left_short_answers_the_exact_search_s_scores(glove_raw, tmp_path: Path) -> None:
    """A graph asked for all its rows is searched that wide and still leaves the query short: the exact search
    answers it, on the table's rows, to the bit. The graph's own copy of the rows (``Table.scored_rows``) sits at
    an offset in the index file that is no multiple of a float's size, and one query's product over it sums
    otherwise (a few of the 3,000 scores 1e-7 apart)."""
    raw = RawTable(tokens=list(glove_raw.tokens[:3_000]), matrix=np.array(glove_raw.matrix[:3_000]))
    spec = "hnsw:M=4,efConstruction=40,efSearch=16"
    build_table(raw, data_dir=tmp_path, name="t", source={}, index_spec=spec, min_recall=0)
    table = Table.load(tmp_path / "t")
    assert table.scored_rows is not table.vectors and not table.scored_rows.flags.aligned
    for query in table.vectors[:3, None]:
        scores, ids = table.knn(query, table.rows)
        exact_scores, exact_ids = table.knn(query, table.rows, SearchOptions(exact=True))
        np.testing.assert_array_equal(ids, exact_ids)
        np.testing.assert_array_equal(scores, exact_scores)


@pytest.mark.parametrize("spec", ["ivf", "IVF16,PQ10x4"])
def test_an_inverted_file_table_answers_the_exact_search_s_scores(glove_raw, spec: str, tmp_path: Path) -> None:
    """An IVF table's hits carry the scores the exact search gives the same rows, to the bit (FAISS's own sums
    differ from it in the last place for about half of them), and an index of codes searched without re-ranking
    (a factory string's PQ) carries the rows' cosines, not its codes' (hundredths apart)."""
    raw = RawTable(tokens=list(glove_raw.tokens[:3_000]), matrix=np.array(glove_raw.matrix[:3_000]))
    build_table(
        raw, data_dir=tmp_path, name="t", source={"format": "test", "path": "rows"}, index_spec=spec, min_recall=0.0
    )
    table = Table.load(tmp_path / "t")
    queries = table.vectors[::100]
    scores, ids = table.knn(queries, 10)
    exact = np.asarray(table.vectors, dtype=np.float64) @ queries.astype(np.float64).T
    np.testing.assert_allclose(scores, np.take_along_axis(exact.T, ids, axis=1), rtol=0, atol=1e-6)
    for query in queries[:, None]:  # each alone: a batch of more than two is one product, rounded by its place
        alone, found = table.knn(query, 10)
        every, order = table.knn(query, table.rows, SearchOptions(exact=True))
        exact_score = np.empty(table.rows, dtype=np.float32)
        exact_score[order[0]] = every[0]
        np.testing.assert_array_equal(alone[0], exact_score[found[0]])
        if spec == "ivf":  # nprobe tuned to recall@10 0.99: the exact top 10
            assert len(set(found[0]) & set(order[0, :10])) >= 9
