"""The diagnostics routes through the real app, on the 20,000-row GloVe table ``small`` (flat, exact), against
gensim's KeyedVectors over the same rows: doesnt-match, rank, closer-than, n-similarity, analogy ``expect``, and
/v1/compare over two tables; error envelopes and limits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from gensim.models import KeyedVectors

from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine import diagnostics
from index.engine.table import Table
from service.deps import TABLE_NAME
from service.schemas.diagnostics import MAX_SET_WORDS, CompareParams, CompareRequest
from service_client import ApiError, Client
from tests.conftest import small_raw
from tests.index.engine.test_diagnostics import keyed_vectors
from tests.service.conftest import client_for

T = "/v1/tables/small"
TIE = 1e-6


@pytest.fixture(scope="module")
def kv(glove_raw: RawTable) -> KeyedVectors:
    return keyed_vectors(small_raw(glove_raw))


def assert_unknown(response, token: str) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["code"] == "unknown_token" and error["token"] == token and isinstance(error["suggestions"], list)


def assert_invalid(response, text: str = "") -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and text in error["message"]


# ------------------------------------------------------------------------------------------- doesnt-match
def test_doesnt_match(api: TestClient, kv: KeyedVectors) -> None:
    words = ["breakfast", "cereal", "dinner", "lunch"]
    body = api.post(f"{T}/doesnt-match", json={"words": words}).json()
    assert body["doesnt_match"]["token"] == kv.doesnt_match(words) == "cereal"
    theirs = kv.rank_by_centrality(words)
    assert [w["token"] for w in body["ranking"]] == [w for _, w in theirs]
    np.testing.assert_allclose([w["score"] for w in body["ranking"]], [s for s, _ in theirs], atol=TIE)
    assert body["unknown"] == []
    assert_unknown(api.post(f"{T}/doesnt-match", json={"words": [*words, "zzqqxx"]}), "zzqqxx")
    skipped = api.post(f"{T}/doesnt-match", json={"words": [*words, "zzqqxx"], "skip_unknown": True}).json()
    assert skipped["doesnt_match"]["token"] == kv.doesnt_match([*words, "zzqqxx"]) and skipped["unknown"] == ["zzqqxx"]
    assert_unknown(api.post(f"{T}/doesnt-match", json={"words": ["zzqqxx"], "skip_unknown": True}), "zzqqxx")


def test_doesnt_match_batch(api: TestClient, kv: KeyedVectors) -> None:
    lists = [["king", "queen", "man", "computer"], ["red", "zzqqxx"], ["paris", "london", "banana"]]
    results = api.post(f"{T}/doesnt-match", json={"queries": lists}).json()["results"]
    assert results[0]["doesnt_match"]["token"] == kv.doesnt_match(lists[0])
    assert results[1]["error"]["code"] == "unknown_token"
    assert results[2]["doesnt_match"]["token"] == kv.doesnt_match(lists[2]) == "banana"


def test_doesnt_match_limits(api: TestClient, small_data_dir: Path) -> None:
    assert_invalid(api.post(f"{T}/doesnt-match", json={"words": []}))
    assert_invalid(api.post(f"{T}/doesnt-match", json={"words": ["the"] * (MAX_SET_WORDS + 1)}))
    assert_invalid(api.post(f"{T}/doesnt-match", json={"words": ["a"], "queries": [["a"]]}), "exactly one of")
    assert_invalid(api.post(f"{T}/doesnt-match", json={"words": "cat dog"}))
    with client_for(data_dir=small_data_dir, max_batch=2) as client:
        too_many = client.post(f"{T}/doesnt-match", json={"queries": [["a"], ["b"], ["c"]]})
        assert_invalid(too_many, "at most 2 items")


# ---------------------------------------------------------------------------------------------------- rank
def test_rank(api: TestClient, small: Table, kv: KeyedVectors) -> None:
    for a, b in [("king", "queen"), ("paris", "london"), ("cat", "the"), ("heart", "heart")]:
        body = api.get(f"{T}/rank", params={"a": a, "b": b}).json()
        assert body["rank"] == kv.rank(a, b), (a, b)
        assert body["similarity"] == pytest.approx(float(kv.similarity(a, b)), abs=TIE)
        assert body["query"]["a"]["token"] == a and body["query"]["b"]["token"] == b
    assert api.get(f"{T}/rank", params={"a": "King", "b": "queen"}).json()["query"]["a"]["match"] == "casefold"
    assert_unknown(api.get(f"{T}/rank", params={"a": "king", "b": "zzqqxx"}), "zzqqxx")
    assert_invalid(api.get(f"{T}/rank", params={"a": "king"}))
    pairs = [["king", "queen"], ["zzqqxx", "cat"], ["paris", "london"]]
    body = api.post(f"{T}/rank", json={"pairs": pairs}).json()
    assert body["ranks"] == [kv.rank("king", "queen"), None, kv.rank("paris", "london")]
    assert body["similarities"][1] is None and body["errors"][1]["code"] == "unknown_token"
    assert body["errors"][0] is None and body["errors"][2] is None
    assert_invalid(api.post(f"{T}/rank", json={"pairs": [["king"]]}))


def test_rank_alone_equals_rank_in_a_batch(api: TestClient, small: Table) -> None:
    """A pair's rank and cosine are the same asked alone (GET), in a batch (POST) and as closer-than's count."""
    rng = np.random.default_rng(5)
    pairs = [[small.tokens[int(i)] for i in rng.integers(0, len(small.tokens), 2)] for _ in range(12)]
    batch = api.post(f"{T}/rank", json={"pairs": pairs}).json()
    for (a, b), rank, cosine in zip(pairs, batch["ranks"], batch["similarities"], strict=True):
        alone = api.get(f"{T}/rank", params={"a": a, "b": b}).json()
        assert (alone["rank"], alone["similarity"]) == (rank, cosine), (a, b)
        assert api.get(f"{T}/closer-than", params={"a": a, "b": b}).json()["count"] == rank - 1


def test_closer_than(api: TestClient, kv: KeyedVectors) -> None:
    body = api.get(f"{T}/closer-than", params={"a": "paris", "b": "london"}).json()
    theirs = kv.closer_than("paris", "london")
    assert body["count"] == len(theirs) == kv.rank("paris", "london") - 1
    assert [w["token"] for w in body["words"]] == theirs and body["order"] == "index"
    wide = api.get(f"{T}/closer-than", params={"a": "cat", "b": "the", "limit": 7}).json()
    assert wide["count"] == len(kv.closer_than("cat", "the")) and len(wide["words"]) == 7
    assert [w["token"] for w in wide["words"]] == kv.closer_than("cat", "the")[:7]
    best = api.get(f"{T}/closer-than", params={"a": "cat", "b": "the", "limit": 7, "order": "score"}).json()
    assert [w["token"] for w in best["words"]] == [w for w, _ in kv.most_similar("cat", topn=7)]
    assert all(w["score"] > best["similarity"] - TIE for w in best["words"])
    assert_invalid(api.get(f"{T}/closer-than", params={"a": "cat", "b": "the", "limit": 0}))
    over = api.get(f"{T}/closer-than", params={"a": "cat", "b": "the", "limit": 1001})
    assert_invalid(over, "limit: limit must be at most 1000 (the server's max_k)")
    assert_invalid(api.get(f"{T}/closer-than", params={"a": "cat", "b": "the", "order": "random"}))
    assert_unknown(api.get(f"{T}/closer-than", params={"a": "zzqqxx", "b": "the"}), "zzqqxx")


# ------------------------------------------------------------------------------------------- n-similarity
def test_n_similarity(api: TestClient, kv: KeyedVectors) -> None:
    a, b = ["king", "crown", "king"], ["queen", "palace"]
    body = api.post(f"{T}/n-similarity", json={"a": a, "b": b}).json()
    assert body["similarity"] == pytest.approx(float(kv.n_similarity(a, b)), abs=TIE)
    assert [q["token"] for q in body["a"]] == a and body["unknown"] == []
    assert_unknown(api.post(f"{T}/n-similarity", json={"a": ["zzqqxx"], "b": b}), "zzqqxx")
    skipped = api.post(f"{T}/n-similarity", json={"a": [*a, "zzqqxx"], "b": b, "skip_unknown": True}).json()
    assert skipped["similarity"] == pytest.approx(float(kv.n_similarity([*a, "zzqqxx"], b)), abs=TIE)
    assert skipped["unknown"] == ["zzqqxx"]
    queries = [{"a": a, "b": b}, {"a": ["zzqqxx"], "b": b}, {"a": ["cat"], "b": ["dog"]}]
    results = api.post(f"{T}/n-similarity", json={"queries": queries}).json()["results"]
    assert results[0]["similarity"] == pytest.approx(body["similarity"], abs=1e-12)
    assert results[1]["error"]["code"] == "unknown_token"
    assert results[2]["similarity"] == pytest.approx(float(kv.similarity("cat", "dog")), abs=TIE)
    assert_invalid(api.post(f"{T}/n-similarity", json={"a": a}), "give a and b")
    assert_invalid(api.post(f"{T}/n-similarity", json={"a": [], "b": b}))
    assert_invalid(api.post(f"{T}/n-similarity", json={"a": a, "b": b, "queries": queries}), "not both")


# ------------------------------------------------------------------------------------------ analogy expect
@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_analogy_expect(api: TestClient, small: Table, kv: KeyedVectors, method: str) -> None:
    question = {"a": "man", "b": "king", "c": "woman", "k": 3, "method": method}
    plain = api.post(f"{T}/analogy", json=question).json()
    assert "expect" not in plain
    body = api.post(f"{T}/analogy", json={**question, "expect": "princess"}).json()
    assert body["neighbors"] == plain["neighbors"]
    score = kv.most_similar if method == "3cosadd" else kv.most_similar_cosmul
    scores = np.array(score(positive=["king", "woman"], negative=["man"], topn=None), dtype=np.float64)
    scores[[kv.key_to_index[w] for w in ("man", "king", "woman")]] = -np.inf
    mine = scores[kv.key_to_index["princess"]]
    expect = body["expect"]
    assert expect["token"] == "princess" and expect["rank"] == int((scores > mine).sum()) + 1
    assert expect["score"] == pytest.approx(mine, abs=1e-5)
    assert expect["margin"] == pytest.approx(body["neighbors"][0]["score"] - mine, abs=1e-5)
    top = api.post(f"{T}/analogy", json={**question, "expect": "queen"}).json()["expect"]
    assert top["rank"] == 1 and top["margin"] == 0.0 and top["score"] == pytest.approx(plain["neighbors"][0]["score"])
    assert_invalid(
        api.post(f"{T}/analogy", json={**question, "expect": "Woman"}),
        "the expected word 'woman' is one of a, b and c, which are left out of the answers: expect another word",
    )
    assert_invalid(
        api.post(f"{T}/analogy", json={**question, "expect": "queen", "restrict": 1000}),
        "the expected word 'queen' is row 2,060, outside the first 1,000 rows searched (restrict): raise restrict "
        "above 2,060 or leave it out",
    )
    assert_unknown(api.post(f"{T}/analogy", json={**question, "expect": "zzqqxx"}), "zzqqxx")


def test_analogy_batch_expect(api: TestClient, small: Table) -> None:
    queries = [
        {"a": "man", "b": "king", "c": "woman", "expect": "queen"},
        {"a": "france", "b": "paris", "c": "japan"},
        {"a": "man", "b": "king", "c": "woman", "expect": "zzqqxx"},
        {"a": "good", "b": "better", "c": "bad", "expect": "worse"},
        {"a": "good", "b": "better", "c": "bad", "expect": "bad"},
    ]
    results = api.post(f"{T}/analogy", json={"queries": queries, "k": 2}).json()["results"]
    assert results[0]["expect"]["token"] == "queen" and "expect" not in results[1]
    assert results[2]["error"]["code"] == "unknown_token"
    assert results[4]["error"]["code"] == "invalid_request"
    triple = [small.find(w).id for w in ("good", "better", "bad")]  # type: ignore[union-attr]
    (worse,) = diagnostics.analogy_expectations(small, [tuple(triple)], [small.find("worse").id])  # type: ignore[list-item, union-attr]
    assert results[3]["expect"]["token"] == "worse" and results[3]["expect"]["rank"] == worse.rank
    assert results[3]["expect"]["score"] == pytest.approx(worse.score, abs=TIE)
    assert_invalid(api.post(f"{T}/analogy", json={"queries": queries[:1], "expect": "queen"}), "not both")


# ------------------------------------------------------------------------------------------------- compare
@pytest.fixture(scope="module")
def two_tables(glove_raw: RawTable, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The first 3,000 and the first 6,000 GloVe rows, two flat tables in one data directory; and the first 3,000
    with the row of "music" all zeros (an import keeps a zero row)."""
    data_dir = tmp_path_factory.mktemp("compare-data")
    for rows in (3_000, 6_000):
        raw = small_raw(glove_raw, rows)
        build_table(raw, data_dir=data_dir, name=f"first{rows}", source={"format": "test", "path": "glove"})
    zeroed = small_raw(glove_raw, 3_000)
    zeroed.matrix[zeroed.tokens.index("music")] = 0
    build_table(zeroed, data_dir=data_dir, name="zeroed", source={"format": "test", "path": "glove"})
    with client_for(data_dir=data_dir, map_tsne_rows=3_000) as client:
        yield client


def test_compare(two_tables: TestClient, glove_raw: RawTable) -> None:
    first, second = keyed_vectors(small_raw(glove_raw, 3_000)), keyed_vectors(small_raw(glove_raw, 6_000))
    tables = {"first": "first3000", "second": "first6000"}
    body = two_tables.get("/v1/compare", params={**tables, "token": "heart", "k": 10}).json()
    mine, theirs = [w for w, _ in first.most_similar("heart")], [w for w, _ in second.most_similar("heart")]
    assert [n["token"] for n in body["first"]["neighbors"]] == mine
    assert [n["token"] for n in body["second"]["neighbors"]] == theirs
    assert body["first"]["table"] == "first3000" and body["second"]["table"] == "first6000"
    assert body["overlap"] == len(set(mine) & set(theirs)) / 10 and body["k"] == 10
    assert body["shared"] == [w for w in mine if w in theirs]
    batch = two_tables.post("/v1/compare", json={**tables, "tokens": ["heart", "zzqqxx", "music"], "k": 10}).json()
    for side in ("first", "second"):  # a batch is one search per table: scores equal up to float rounding
        assert [n["id"] for n in batch["results"][0][side]["neighbors"]] == [n["id"] for n in body[side]["neighbors"]]
    assert batch["results"][0]["overlap"] == body["overlap"] and batch["results"][0]["shared"] == body["shared"]
    assert batch["results"][1]["error"]["code"] == "unknown_token"
    music = [w for w, _ in first.most_similar("music")], [w for w, _ in second.most_similar("music")]
    assert batch["results"][2]["overlap"] == len(set(music[0]) & set(music[1])) / 10
    assert_unknown(two_tables.get("/v1/compare", params={**tables, "token": "zzqqxx"}), "zzqqxx")
    missing = two_tables.get("/v1/compare", params={**tables, "second": "nope", "token": "heart"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_table"
    assert_invalid(two_tables.get("/v1/compare", params={**tables, "second": "../x", "token": "heart"}))
    assert_invalid(two_tables.get("/v1/compare", params={**tables, "token": "heart", "k": 0}))
    assert_invalid(two_tables.post("/v1/compare", json={**tables, "tokens": []}))
    for model in (CompareParams, CompareRequest):  # the table names' schema is the path parameter's rule
        properties = model.model_json_schema()["properties"]
        assert properties["first"]["pattern"] == properties["second"]["pattern"] == TABLE_NAME


def test_a_zero_row_has_no_neighbours_to_compare_nor_a_tsne_place(two_tables: TestClient, glove_raw: RawTable) -> None:
    """As a neighbours query, a zero row has no direction: compare says so (422, or that item's error in a batch)
    instead of giving the first rows at cosine 0; t-SNE by cosine cannot place it (422, not openTSNE's NaN), in a
    projection of words or in the whole-table map, which names it by its token and row."""
    tables = {"first": "first3000", "second": "zeroed"}
    message = (
        "the vector of token 'music' is all zeros: no direction to find neighbours by (a zero row's cosine with "
        "every row is 0)"
    )
    assert_invalid(two_tables.get("/v1/compare", params={**tables, "token": "music"}), message)
    batch = two_tables.post("/v1/compare", json={**tables, "tokens": ["music", "heart"], "k": 3}).json()["results"]
    assert batch[0]["error"] == {"code": "invalid_request", "message": message} and batch[1]["overlap"] == 1.0
    words = ["music", "red", "blue", "one", "two"]
    tsne = two_tables.post("/v1/tables/zeroed/project", json={"tokens": words, "method": "tsne"})
    assert_invalid(tsne, "the vector of token 'music' is all zeros: t-SNE by cosine cannot place a row")
    assert two_tables.post("/v1/tables/zeroed/project", json={"tokens": words[1:], "method": "tsne"}).status_code == 200
    assert two_tables.post("/v1/tables/zeroed/project", json={"tokens": words}).status_code == 200  # pca places it
    row = glove_raw.tokens.index("music")
    refused = f"the vector of token 'music' (row {row}) is all zeros: t-SNE by cosine cannot place a row"
    assert_invalid(two_tables.get("/v1/tables/zeroed/map/info?method=tsne"), refused)


# ------------------------------------------------------------------------------------------------- OpenAPI
def test_documented(api: TestClient) -> None:
    paths = api.get("/openapi.json").json()["paths"]
    routes = [
        (f"{T}/doesnt-match", "post"),
        (f"{T}/rank", "get"),
        (f"{T}/rank", "post"),
        (f"{T}/closer-than", "get"),
        (f"{T}/n-similarity", "post"),
        ("/v1/compare", "get"),
        ("/v1/compare", "post"),
    ]
    for path, method in routes:
        operation = paths[path.replace("small", "{table}")][method]
        assert operation["summary"] and operation["description"], path
        assert {"404", "422"} <= set(operation["responses"]), path
    params = {p["name"] for p in paths[f"{T.replace('small', '{table}')}/closer-than"]["get"]["parameters"]}
    assert {"a", "b", "limit", "order"} <= params
    assert "expect" in paths["/v1/tables/{table}/analogy"]["post"]["description"]


def test_python_client(api: TestClient, kv: KeyedVectors) -> None:
    client = Client("http://testserver", http=api)
    assert client.doesnt_match("small", ["breakfast", "cereal", "dinner", "lunch"]) == "cereal"
    assert client.rank("small", "king", "queen") == kv.rank("king", "queen")
    assert client.ranks("small", [("paris", "london"), ("paris", "zzqqxx")]) == [kv.rank("paris", "london"), None]
    count, words = client.closer_than("small", "paris", "london", limit=3)
    assert (
        count == len(kv.closer_than("paris", "london"))
        and [w.token for w in words] == kv.closer_than("paris", "london")[:3]
    )
    assert client.n_similarity("small", ["king"], ["queen"]) == pytest.approx(
        float(kv.similarity("king", "queen")), abs=TIE
    )
    assert client.expected_rank("small", "man", "king", "woman", "queen")["rank"] == 1
    assert client.compare("small", "small", "heart", k=3)["overlap"] == 1.0
    with pytest.raises(ApiError) as raised:
        client.rank("small", "king", "qween")
    assert raised.value.status == 404 and raised.value.code == "unknown_token" and "queen" in raised.value.suggestions


def test_python_client_batches_keep_each_items_error(api: TestClient, kv: KeyedVectors) -> None:
    """The batch forms answer per item the value or that item's ApiError, with the server's reason."""
    client = Client("http://testserver", http=api)
    pairs = [("paris", "london"), ("paris", "zzqqxx")]
    similarity, unknown = client.similarity_batch("small", pairs)
    assert similarity == pytest.approx(float(kv.similarity("paris", "london")), abs=TIE)
    assert isinstance(unknown, ApiError) and (unknown.status, unknown.code) == (404, "unknown_token")
    assert unknown.details["token"] == "zzqqxx" and "zzqqxx" in unknown.message
    assert client.similarities("small", pairs)[1] is None  # the documented default is kept
    rank, unranked = client.rank_batch("small", [("paris", "london"), ("qween", "king")])
    assert rank == kv.rank("paris", "london")
    assert isinstance(unranked, ApiError) and unranked.code == "unknown_token" and "queen" in unranked.suggestions
    odd, missing = client.doesnt_match_batch("small", [["breakfast", "cereal", "dinner", "lunch"], ["zzqqxx"]])
    assert odd == "cereal" and isinstance(missing, ApiError) and missing.status == 404
    assert client.doesnt_match_batch("small", [["red", "blue", "zzqqxx", "dog"]], skip_unknown=True) == ["dog"]
    sets, lost = client.n_similarity_batch("small", [(["king"], ["queen"]), (["king"], ["zzqqxx"])])
    assert sets == pytest.approx(float(kv.similarity("king", "queen")), abs=TIE)
    assert isinstance(lost, ApiError) and lost.code == "unknown_token"
    compared, absent = client.compare_batch("small", "small", ["heart", "zzqqxx"], k=3)
    assert isinstance(compared, dict) and compared["overlap"] == 1.0 and compared["token"] == "heart"
    assert isinstance(absent, ApiError) and absent.code == "unknown_token"
