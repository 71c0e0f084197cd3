"""Word diagnostics against gensim's KeyedVectors built from the very rows of the ``small`` table (the 20,000 most
frequent GloVe 6B 50d rows, exact): doesnt_match, rank, closer_than, n_similarity, analogy ranks, and the table
comparison; ``eval --errors`` against gensim's evaluate_word_analogies.

gensim divides raw rows by their norms where the table stores unit rows, so cosines differ by float rounding
(about 1e-7): a count of rows "closer than" may differ only by rows whose cosine is that close to the threshold.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors
from typer.testing import CliRunner

from index.build.cli import app
from index.build.evaluate import default_sets, evaluate_analogies
from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine import diagnostics
from index.engine.table import SearchOptions, Table
from index.errors import InvalidQuery, UnknownToken
from tests.conftest import small_raw

EXACT = SearchOptions(exact=True)
TIE = 1e-6  # cosines this close to a threshold may fall either side of it (float rounding)
GOOGLE, _ = default_sets()


def keyed_vectors(raw: RawTable) -> KeyedVectors:
    kv = KeyedVectors(raw.matrix.shape[1])
    kv.add_vectors(list(raw.tokens), raw.matrix)
    kv.fill_norms()
    return kv


@pytest.fixture(scope="module")
def kv(glove_raw: RawTable) -> KeyedVectors:
    return keyed_vectors(small_raw(glove_raw))


@pytest.fixture(scope="module")
def words(kv: KeyedVectors) -> list[str]:
    return random.Random(7).sample(kv.index_to_key[:20_000], 60)


def ids(table: Table, words: list[str]) -> list[int]:
    found = [table.find(w) for w in words]
    assert all(f is not None and f.match == "exact" for f in found), words
    return [f.id for f in found]  # type: ignore[union-attr]


def near_threshold(kv: KeyedVectors, a: str, b: str) -> int:
    """Rows (a left out) whose gensim cosine with a is within TIE of b's."""
    sims = 1 - kv.distances(a)
    near = np.abs(sims - sims[kv.key_to_index[b]]) < TIE
    near[kv.key_to_index[a]] = False
    return int(near.sum())


# --------------------------------------------------------------------------------------------- doesnt_match
CURATED = [
    ["breakfast", "cereal", "dinner", "lunch"],
    ["king", "queen", "man", "computer"],
    ["paris", "london", "berlin", "banana", "rome"],
    ["red", "green", "blue", "seven"],
]


def test_doesnt_match_equals_gensim(small: Table, kv: KeyedVectors, words: list[str]) -> None:
    """gensim's ranking and odd one out, score for score: two words, whose scores are equal but for float32
    rounding, in 200 lists of their own."""
    rng = random.Random(3)
    cases = CURATED + [rng.sample(words, rng.randint(2, 8)) for _ in range(30)]
    cases += [rng.sample(words, 2) for _ in range(200)]
    for case in cases:
        ours = diagnostics.doesnt_match(small, case)
        theirs = kv.rank_by_centrality(case)
        assert [(r.token, s) for r, s in ours.ranking] == [(w, float(s)) for s, w in theirs], case
        assert ours.odd_one_out.token == kv.doesnt_match(case), case


def test_doesnt_match_edge_cases(small: Table, kv: KeyedVectors) -> None:
    one = diagnostics.doesnt_match(small, ["heart"])  # one word: itself, as gensim
    assert one.odd_one_out.token == kv.doesnt_match(["heart"]) == "heart"
    assert one.ranking[0][1] == pytest.approx(1.0, abs=TIE)
    repeated = ["cat", "cat", "cat", "dog", "car"]  # a repeated word counts once per occurrence
    ours = diagnostics.doesnt_match(small, repeated)
    assert ours.odd_one_out.token == kv.doesnt_match(repeated)
    assert [r.token for r, _ in ours.ranking] == [w for _, w in kv.rank_by_centrality(repeated)]
    with_unknown = ["breakfast", "zzqqxx", "cereal", "dinner", "lunch"]  # gensim ignores unknown words
    ours = diagnostics.doesnt_match(small, with_unknown)
    assert ours.odd_one_out.token == kv.doesnt_match(with_unknown) == "cereal"
    assert ours.unknown == ["zzqqxx"]
    with pytest.raises(UnknownToken):
        diagnostics.doesnt_match(small, with_unknown, skip_unknown=False)
    with pytest.raises(UnknownToken):  # gensim: ValueError, "cannot select a word from an empty list"
        diagnostics.doesnt_match(small, ["zzqqxx", "qqzzxx"])
    with pytest.raises(ValueError):
        kv.doesnt_match(["zzqqxx", "qqzzxx"])
    with pytest.raises(InvalidQuery):
        diagnostics.doesnt_match(small, [])


# ------------------------------------------------------------------------------------- rank and closer_than
def test_rank_equals_gensim(small: Table, kv: KeyedVectors, words: list[str]) -> None:
    rng = random.Random(5)
    pairs = [("king", "queen"), ("paris", "london"), ("cat", "the"), ("heart", "heart")]
    pairs += [(rng.choice(words), rng.choice(words)) for _ in range(20)]
    left, right = ids(small, [a for a, _ in pairs]), ids(small, [b for _, b in pairs])
    batch, cosines = diagnostics.ranks(small, left, right)
    for (a, b), i, j, ours, cosine in zip(pairs, left, right, batch.tolist(), cosines.tolist(), strict=True):
        theirs, single = kv.rank(a, b), diagnostics.rank(small, i, j)
        if ours != theirs or single != theirs:
            assert max(abs(ours - theirs), abs(single - theirs)) <= near_threshold(kv, a, b), (a, b, ours, theirs)
        assert cosine == pytest.approx(float(kv.similarity(a, b)), abs=TIE)
    assert diagnostics.rank(small, *ids(small, ["heart", "heart"])) == kv.rank("heart", "heart") == 1


def test_closer_than_equals_gensim(small: Table, kv: KeyedVectors, words: list[str]) -> None:
    rng = random.Random(6)
    pairs = [("paris", "london"), ("king", "queen"), ("king", "king"), ("music", "guitar")]
    pairs += [(rng.choice(words), rng.choice(words)) for _ in range(6)]
    for a, b in pairs:
        i, j = ids(small, [a, b])
        found, scores = diagnostics.closer_than(small, i, j)
        theirs = kv.closer_than(a, b)
        ours = small.tokens.labels(found.tolist())
        assert found.tolist() == sorted(found.tolist())  # row order, as gensim returns them
        differ = set(ours) ^ set(theirs)
        assert not differ or len(differ) <= near_threshold(kv, a, b), (a, b, sorted(differ))
        if not differ:
            assert ours == theirs
        assert len(found) + 1 == diagnostics.rank(small, i, j) or differ
        assert (scores > small.similarity(i, j) - TIE).all()
        if ours:  # (gensim's distances of no words are those of every word)
            np.testing.assert_allclose(scores, 1 - kv.distances(a, ours), atol=TIE)


# ------------------------------------------------------------------------------------------------ n_similarity
def test_n_similarity_equals_gensim(small: Table, kv: KeyedVectors, words: list[str]) -> None:
    rng = random.Random(8)
    cases = [(["sushi", "shop"], ["japanese", "restaurant"]), (["king"], ["queen"]), (["a", "a", "b"], ["b"])]
    cases += [(rng.sample(words, rng.randint(1, 6)), rng.sample(words, rng.randint(1, 6))) for _ in range(30)]
    cases += [(["heart", "zzqqxx"], ["blood", "qqzzxx", "pain"])]  # unknown words are left out, as gensim
    for first, second in cases:
        known = [w for w in first if w in kv.key_to_index], [w for w in second if w in kv.key_to_index]
        if not all(all(small.find(w) is not None for w in side) for side in known):
            continue  # a word the 20,000 rows lack (sushi): gensim leaves it out, so does the table
        ours = diagnostics.n_similarity(small, first, second)
        assert ours.similarity == pytest.approx(float(kv.n_similarity(first, second)), abs=TIE), (first, second)
    assert diagnostics.n_similarity(small, ["king"], ["queen"]).similarity == pytest.approx(
        float(kv.similarity("king", "queen")), abs=TIE
    )
    mixed = diagnostics.n_similarity(small, ["heart", "zzqqxx"], ["blood"])
    assert mixed.first.unknown == ["zzqqxx"] and [r.token for r in mixed.first.found] == ["heart"]
    # A set with no known word: gensim scores a zero mean as 0.0; the table refuses it.
    assert float(kv.n_similarity(["zzqqxx"], ["heart"])) == 0.0
    with pytest.raises(UnknownToken):
        diagnostics.n_similarity(small, ["zzqqxx"], ["heart"])
    with pytest.raises(UnknownToken):
        diagnostics.n_similarity(small, ["heart", "zzqqxx"], ["blood"], skip_unknown=False)


# ------------------------------------------------------------------------------------------------ analogies
QUESTIONS = [
    ("man", "king", "woman", "queen"),
    ("man", "king", "woman", "princess"),
    ("france", "paris", "japan", "tokyo"),
    ("good", "better", "bad", "worse"),
    ("athens", "greece", "canberra", "australia"),
    ("walking", "walked", "swimming", "swam"),
    ("big", "bigger", "small", "tiny"),
]


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
@pytest.mark.parametrize("restrict", [None, 5_000])
def test_analogy_expectations_equal_gensim(small: Table, kv: KeyedVectors, method: str, restrict: int | None) -> None:
    questions = [q for q in QUESTIONS if restrict is None or max(ids(small, list(q))) < restrict]
    triples = [tuple(ids(small, list(q[:3]))) for q in questions]
    expected = ids(small, [q[3] for q in questions])
    found = diagnostics.analogy_expectations(small, triples, expected, method, restrict=restrict)
    for (a, b, c, want), ours in zip(questions, found, strict=True):
        if method == "3cosadd":
            scores = kv.most_similar(positive=[b, c], negative=[a], topn=None, restrict_vocab=restrict)
        else:  # gensim's most_similar_cosmul scores every row of a restricted vocabulary too; ours only those
            scores = kv.most_similar_cosmul(positive=[b, c], negative=[a], topn=None)[:restrict]
        scores = np.array(scores, dtype=np.float64)
        scores[[kv.key_to_index[w] for w in (a, b, c)]] = -np.inf
        mine = scores[kv.key_to_index[want]]
        rank = int((scores > mine).sum()) + 1
        near = int((np.abs(scores - mine) < TIE).sum()) - 1
        assert abs(ours.rank - rank) <= near, (a, b, c, want, ours, rank)
        assert ours.score == pytest.approx(mine, abs=1e-5)
        assert ours.margin == pytest.approx(scores.max() - mine, abs=1e-5)
        top = small.analogy(*ids(small, [a, b, c]), k=1, method=method, exact=True, restrict=restrict)[0]
        assert (ours.rank == 1) == (top[0] == kv.key_to_index[want])
        assert ours.margin >= 0


def test_analogy_expectations_refuse_impossible_answers(small: Table) -> None:
    a, b, c, queen = ids(small, ["man", "king", "woman", "queen"])
    with pytest.raises(InvalidQuery, match="one of a, b and c"):
        diagnostics.analogy_expectations(small, [(a, b, c)], [c])
    with pytest.raises(InvalidQuery, match="outside the first"):
        diagnostics.analogy_expectations(small, [(a, b, c)], [queen], restrict=queen)
    with pytest.raises(InvalidQuery, match="unknown analogy method"):
        diagnostics.analogy_expectations(small, [(a, b, c)], [queen], "3cosfoo")


# --------------------------------------------------------------------------------------------------- compare
@pytest.fixture(scope="module")
def other(glove_raw: RawTable, tmp_path_factory: pytest.TempPathFactory) -> tuple[Table, KeyedVectors]:
    """A second table: the first 5,000 rows (flat), and gensim over the same rows."""
    data_dir = tmp_path_factory.mktemp("diagnostics-other")
    build_table(
        small_raw(glove_raw, 5_000), data_dir=data_dir, name="first5k", source={"format": "test", "path": "glove"}
    )
    return Table.load(data_dir / "first5k"), keyed_vectors(
        small_raw(glove_raw, 5_000)
    )  # the rows as read, not the build's


def test_compare_equals_gensim_on_both_tables(
    small: Table, kv: KeyedVectors, other: tuple[Table, KeyedVectors]
) -> None:
    table, other_kv = other
    tokens = ["heart", "king", "paris", "music", "computer", "river"]
    rows = [(small.find(t).id, table.find(t).id) for t in tokens]  # type: ignore[union-attr]
    for token, result in zip(tokens, diagnostics.compare(small, table, rows, k=10, options=EXACT), strict=True):
        mine = [w for w, _ in kv.most_similar(token, topn=10)]
        theirs = [w for w, _ in other_kv.most_similar(token, topn=10)]
        assert small.tokens.labels([i for i, _ in result.first]) == mine
        assert table.tokens.labels([i for i, _ in result.second]) == theirs
        assert result.shared == [w for w in mine if w in theirs]
        assert result.overlap == len(set(mine) & set(theirs)) / 10
    same = diagnostics.compare(small, small, rows[:1], k=5, options=EXACT)[0]
    assert same.overlap == 1.0 and same.first == same.second
    assert diagnostics.compare(small, table, [], k=5) == []


# ----------------------------------------------------------------------------------------------- eval --errors
@pytest.fixture(scope="module")
def question_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sections of gensim's Google analogies, 15 questions each."""
    lines, sections = [], 0
    for line in GOOGLE.read_text().splitlines():
        if line.startswith(": "):
            sections += 1
            if sections > 3:
                break
            lines.append(line)
            kept = 0
        elif kept < 15:
            lines.append(line)
            kept += 1
    path = tmp_path_factory.mktemp("analogies") / "questions.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_eval_errors_equal_gensim(small: Table, kv: KeyedVectors, question_file: Path, method: str) -> None:
    restrict = 20_000
    report = evaluate_analogies(small, question_file, restrict=restrict, method=method, errors=True)
    if method == "3cosmul":
        kv.most_similar = lambda positive, negative, topn, restrict_vocab: KeyedVectors.most_similar_cosmul(
            kv, positive, negative, topn=topn, restrict_vocab=restrict_vocab
        )
    try:
        _, sections = kv.evaluate_word_analogies(str(question_file), restrict_vocab=restrict)
    finally:
        kv.__dict__.pop("most_similar", None)
    incorrect = [tuple(q) for s in sections[:-1] for q in s["incorrect"]]
    assert [tuple(e["question"]) for e in report["errors"]] == incorrect and incorrect
    assert len(report["errors"]) == report["incorrect"]
    score = kv.most_similar if method == "3cosadd" else kv.most_similar_cosmul
    for error in report["errors"]:
        a, b, c, want = (w.lower() for w in error["question"])
        scores = np.array(score(positive=[b, c], negative=[a], topn=None), dtype=np.float64)
        scores[[kv.key_to_index[w] for w in (a, b, c)]] = -np.inf
        mine = scores[kv.key_to_index[want]]
        rank = int((scores > mine).sum()) + 1
        assert error["rank"] == rank or abs(error["rank"] - rank) < (np.abs(scores - mine) < TIE).sum(), error
        assert error["rank"] > 1 or error["predicted"] != error["question"][3]
        assert error["margin"] == pytest.approx(scores.max() - mine, abs=1e-5)


def test_eval_errors_command(small_data_dir: Path, question_file: Path) -> None:
    args = ["eval", "small", "--data-dir", str(small_data_dir), "--analogies", str(question_file)]
    plain = CliRunner().invoke(app, args)
    listed = CliRunner().invoke(app, [*args, "--errors"])
    assert plain.exit_code == 0 and listed.exit_code == 0, listed.output
    assert "incorrect analogies" not in plain.output
    report = evaluate_analogies(Table.load(small_data_dir / "small"), question_file, errors=True)
    lines = listed.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("incorrect analogies:"))
    assert lines[start].startswith(f"incorrect analogies: {report['incorrect']:,} ")
    shown = lines[start + 1 : start + 1 + report["incorrect"]]
    for line, error in zip(shown, report["errors"], strict=True):
        a, b, c, want = error["question"]
        assert line.startswith(f"  {error['section']}: {a} {b} {c}: expected {want}, got {error['predicted']}; ")
        assert f"rank {error['rank']:,}, score {error['score']:.4f}, margin {error['margin']:.4f}" in line
