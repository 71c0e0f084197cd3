"""Answers through the API equal gensim's on the full GloVe 6B 50d table (exact=true): most_similar for
neighbours and 3CosAdd, most_similar_cosmul for 3CosMul, similarity; a few thousand Google analogy questions
through the batch endpoint. Differences are allowed only at float ties (equal scores).

gensim's answers to the Google questions are computed in the background from the start of the session and kept
in the test cache (the ``gensim_answers`` fixture, ``tests.gensim_reference.answers``)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from gensim.models import KeyedVectors

from index.build.sources import glove_package
from service.settings import Settings
from tests.gensim_reference import PARITY_SAMPLE as GOOGLE_SAMPLE
from tests.gensim_reference import PARITY_TOP5, google_sample

pytestmark = pytest.mark.slow

T = f"/v1/tables/{glove_package.DEFAULT_NAME}"
SCORE_TOL = 1e-5
WORDS = ["heart", "king", "paris", "computer", "music", "water", "run", "beautiful", "london", "science"]


@pytest.fixture(scope="session")
def kv() -> KeyedVectors:
    """gensim vectors straight from the package's .npy and parquet, independent of our builder."""
    import pyarrow.parquet as pq

    vectors_path, vocab_path = glove_package.package_files()
    matrix = np.load(vectors_path)
    tokens = [str(t) for t in pq.read_table(vocab_path).column(0).to_pylist()]
    vectors = KeyedVectors(vector_size=matrix.shape[1])
    vectors.add_vectors(tokens, matrix)
    return vectors


@pytest.fixture(scope="session")
def sample_words(kv: KeyedVectors) -> list[str]:
    rng = random.Random(4)
    return WORDS + rng.sample(kv.index_to_key[100:50_000], 40)


@pytest.fixture(scope="session")
def google(kv: KeyedVectors, gensim_answers: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The Google analogy questions (lower-cased, all four words in the table), a seeded sample: the ones
    gensim's answers in ``gensim_answers`` are to."""
    questions = google_sample(kv.key_to_index)
    assert len(questions) == GOOGLE_SAMPLE and gensim_answers["google"] == questions
    return questions


def same_ranking(api: list[dict], gensim: list[tuple[str, float]]) -> int:
    """Scores equal position by position; return how many positions hold a different token (ties)."""
    assert len(api) == len(gensim)
    np.testing.assert_allclose([n["score"] for n in api], [s for _, s in gensim], atol=SCORE_TOL)
    return sum(n["token"] != token for n, (token, _) in zip(api, gensim, strict=True))


def test_neighbours_equal_most_similar(glove_api: TestClient, kv: KeyedVectors, sample_words: list[str]) -> None:
    body = glove_api.post(f"{T}/neighbors", json={"queries": sample_words, "k": 10, "exact": True}).json()
    differing = 0
    for word, result in zip(sample_words, body["results"], strict=True):
        assert result["query"]["token"] == word
        differing += same_ranking(result["neighbors"], kv.most_similar(word, topn=10))
        for n in result["neighbors"]:  # each score is the cosine of that very token
            assert abs(n["score"] - kv.similarity(word, n["token"])) < SCORE_TOL
    assert differing <= len(sample_words) * 10 // 100
    for word in WORDS[:4]:  # the single GET form answers the same
        single = glove_api.get(f"{T}/neighbors", params={"token": word, "k": 10, "exact": True}).json()
        assert same_ranking(single["neighbors"], kv.most_similar(word, topn=10)) == 0


def test_most_similar_positive_negative_and_restrict(glove_api: TestClient, kv: KeyedVectors) -> None:
    cases = [(["king", "woman"], ["man"]), (["paris", "germany"], ["france"]), (["walking", "swam"], ["walked"])]
    for positive, negative in cases:
        body = {"positive": positive, "negative": negative, "k": 10, "exact": True}
        got = glove_api.post(f"{T}/neighbors", json=body).json()["neighbors"]
        assert same_ranking(got, kv.most_similar(positive=positive, negative=negative, topn=10)) == 0
    for word in WORDS[:5]:
        params = {"token": word, "k": 10, "exact": True, "restrict": 10_000}
        got = glove_api.get(f"{T}/neighbors", params=params).json()["neighbors"]
        assert same_ranking(got, kv.most_similar(word, topn=10, restrict_vocab=10_000)) == 0


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_analogy_equals_gensim(
    glove_api: TestClient,
    kv: KeyedVectors,
    google: list[tuple[str, str, str, str]],
    gensim_answers: dict[str, Any],
    method: str,
) -> None:
    gensim = kv.most_similar if method == "3cosadd" else kv.most_similar_cosmul
    questions = google[:PARITY_TOP5]
    results = []
    per_batch = (
        Settings.model_fields["max_scored_rows"].default
        // glove_api.app.state.registry.tables[glove_package.DEFAULT_NAME].rows
    )
    for start in range(0, len(questions), per_batch):  # 3CosMul scores every row: batches within max_scored_rows
        part = questions[start : start + per_batch]
        body = {"queries": [{"a": a, "b": b, "c": c} for a, b, c, _ in part], "k": 5, "method": method, "exact": True}
        results += glove_api.post(f"{T}/analogy", json=body).json()["results"]
    differing = 0
    # gensim's most_similar / most_similar_cosmul(positive=[b, c], negative=[a], topn=5) of each question
    for result, theirs in zip(results, gensim_answers[method], strict=True):
        differing += same_ranking(result["neighbors"], theirs)
    assert differing <= len(questions) * 5 // 100
    single = glove_api.post(f"{T}/analogy", json={"a": "man", "b": "king", "c": "woman", "k": 5, "method": method})
    assert same_ranking(single.json()["neighbors"], gensim(positive=["king", "woman"], negative=["man"], topn=5)) == 0


def test_similarity_equals_gensim(glove_api: TestClient, kv: KeyedVectors) -> None:
    rng = random.Random(1)
    words = kv.index_to_key[:100_000]
    pairs = [(rng.choice(words), rng.choice(words)) for _ in range(500)]
    got = glove_api.post(f"{T}/similarity", json={"pairs": [list(p) for p in pairs]}).json()["similarities"]
    np.testing.assert_allclose(got, [kv.similarity(a, b) for a, b in pairs], atol=1e-6)
    for a, b in pairs[:5]:
        single = glove_api.get(f"{T}/similarity", params={"a": a, "b": b}).json()["similarity"]
        assert abs(single - kv.similarity(a, b)) < 1e-6


def test_google_analogies_by_batch_equal_gensim(
    glove_api: TestClient, google: list[tuple[str, str, str, str]], gensim_answers: dict[str, Any]
) -> None:
    answers: list[dict] = []
    for start in range(0, len(google), 1000):
        chunk = google[start : start + 1000]
        body = {"queries": [{"a": a, "b": b, "c": c} for a, b, c, _ in chunk], "k": 1, "exact": True}
        answers += glove_api.post(f"{T}/analogy", json=body).json()["results"]
    differing = 0
    api_correct = gensim_correct = 0
    # gensim's most_similar(positive=[b, c], negative=[a], topn=1) of each question
    for (_, _, _, expected), result, top in zip(google, answers, gensim_answers["top1"], strict=True):
        differing += same_ranking(result["neighbors"], top)
        api_correct += result["neighbors"][0]["token"] == expected
        gensim_correct += top[0][0] == expected
    assert differing <= 2  # float ties only
    assert abs(api_correct - gensim_correct) <= differing


def test_approximate_index_agrees_with_exact(glove_api: TestClient, sample_words: list[str]) -> None:
    overlaps = []
    for exact in (False, True):
        body = {"queries": sample_words, "k": 10, "exact": exact}
        overlaps.append(
            [{n["id"] for n in r["neighbors"]} for r in glove_api.post(f"{T}/neighbors", json=body).json()["results"]]
        )
    recall = np.mean([len(a & e) / 10 for a, e in zip(*overlaps, strict=True)])
    assert recall >= 0.9  # the built HNSW index measured recall@10 >= 0.95 on its own sample


def test_token_rows_equal_gensim_vectors(glove_api: TestClient, kv: KeyedVectors) -> None:
    for word in WORDS[:5]:
        row = glove_api.get(f"{T}/tokens/{word}").json()
        np.testing.assert_allclose(row["vector"], kv[word], rtol=1e-5, atol=1e-6)
        unit = glove_api.get(f"{T}/tokens/{word.upper()}", params={"normalized": True}).json()
        assert unit["token"] == word and unit["query"]["match"] == "casefold"
        np.testing.assert_allclose(unit["vector"], kv.get_vector(word, norm=True), atol=1e-6)
