"""Every endpoint and field of the API contract, on 20,000 real GloVe rows (flat, exact) and on MiniLM tokens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from tokenizers import Tokenizer

from index.build.sources import RawTable
from index.engine.table import Table
from tests.cli import run_cli
from tests.service.conftest import client_for
from tests.vectors import unit

T = "/v1/tables/small"


def brute_force(
    table: Table, query: np.ndarray, k: int, exclude: set[int] = frozenset(), restrict: int | None = None
) -> list[int]:
    """Top-k rows (of the first ``restrict``) by cosine, computed here in float64 without the engine."""
    scores = unit(table.vectors[:restrict]) @ unit(query)
    return [int(i) for i in np.argsort(-scores, kind="stable") if int(i) not in exclude][:k]


def ids(neighbors: list[dict]) -> list[int]:
    return [n["id"] for n in neighbors]


def check_neighbors(table: Table, neighbors: list[dict], k: int) -> None:
    assert len(neighbors) == k
    for n in neighbors:
        assert set(n) >= {"token", "id", "score"}
        assert table.tokens[n["id"]] == n["token"]
        assert -1.0 - 1e-6 <= n["score"] <= 1.0 + 1e-6
    scores = [n["score"] for n in neighbors]
    assert scores == sorted(scores, reverse=True)


# ---------------------------------------------------------------------------------------------- health
def test_health_and_ready(api: TestClient) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "loaded": ["small"], "missing": []}


def test_docs_and_explorer_are_served(api: TestClient) -> None:
    docs = api.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    page = api.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert api.get("/openapi.json").json()["info"]["title"] == "embedding-search"


# ---------------------------------------------------------------------------------------------- tables
def test_tables_list_and_summary(api: TestClient, small: Table) -> None:
    body = api.get("/v1/tables").json()
    assert [t["name"] for t in body["tables"]] == ["small"]
    info = body["tables"][0]
    assert info["rows"] == 20_000 and info["dim"] == 50
    assert info["index"]["kind"] == "flat" and info["approximate"] is False and info["has_tokenizer"] is False
    assert body["unavailable"] == []
    one = api.get(T).json()
    assert one == info
    assert one["source"] == small.manifest["source"]


# ---------------------------------------------------------------------------------------------- tokens
def test_token_vector_original_and_normalized(api: TestClient, small: Table, glove_raw: RawTable) -> None:
    body = api.get(f"{T}/tokens/heart").json()
    row = glove_raw.tokens.index("heart")
    assert body["token"] == "heart" and body["id"] == row
    assert body["query"] == {"text": "heart", "token": "heart", "id": row, "match": "exact"}
    np.testing.assert_allclose(body["vector"], glove_raw.matrix[row], rtol=1e-6, atol=1e-6)
    assert body["normalized"] is False
    assert body["norm"] == pytest.approx(float(np.linalg.norm(glove_raw.matrix[row])), rel=1e-6)
    normal = api.get(f"{T}/tokens/heart", params={"normalized": "true"}).json()
    assert normal["normalized"] is True
    np.testing.assert_allclose(normal["vector"], unit(glove_raw.matrix[row]), atol=1e-6)
    assert math.isclose(float(np.linalg.norm(normal["vector"])), 1.0, rel_tol=1e-5)


def test_token_lookup_casefold_slash_and_dot(api: TestClient, small: Table) -> None:
    folded = api.get(f"{T}/tokens/HeArT").json()
    assert folded["token"] == "heart" and folded["query"]["match"] == "casefold"
    assert folded["query"]["text"] == "HeArT"
    half = api.get(f"{T}/tokens/1/2").json()  # tokens may contain a slash
    assert half["token"] == "1/2" and half["id"] == small.tokens.find("1/2")
    dot = api.get(f"{T}/tokens/%2E").json()
    assert dot["token"] == "." and dot["id"] == small.tokens.find(".")


def test_row_by_id(api: TestClient, small: Table) -> None:
    body = api.get(f"{T}/ids/1058").json()
    assert body["id"] == 1058 and body["token"] == small.tokens[1058]
    assert body["query"]["match"] == "id"
    assert api.get(f"{T}/ids/20000").status_code == 404
    assert api.get(f"{T}/ids/-1").status_code == 422


# ------------------------------------------------------------------------------------------ neighbours
@pytest.mark.parametrize("word", ["heart", "king", "paris", "computer"])
def test_neighbors_get_equal_brute_force(api: TestClient, small: Table, word: str) -> None:
    body = api.get(f"{T}/neighbors", params={"token": word, "k": 8}).json()
    row = small.tokens.find(word)
    assert body["query"] == {"text": word, "token": word, "id": row, "match": "exact"}
    check_neighbors(small, body["neighbors"], 8)
    assert ids(body["neighbors"]) == brute_force(small, small.vectors[row], 8, {row})
    assert row not in ids(body["neighbors"])


def test_neighbors_by_id_exact_and_restrict(api: TestClient, small: Table) -> None:
    row = small.tokens.find("heart")
    by_id = api.get(f"{T}/neighbors", params={"id": row, "k": 5, "exact": "true"}).json()
    by_token = api.get(f"{T}/neighbors", params={"token": "heart", "k": 5}).json()
    assert by_id["neighbors"] == by_token["neighbors"] and by_id["query"]["match"] == "id"
    limited = api.get(f"{T}/neighbors", params={"token": "heart", "k": 10, "restrict": 500}).json()
    assert ids(limited["neighbors"]) == brute_force(small, small.vectors[row], 10, {row}, restrict=500)


def test_query_string_integers_are_read_exactly(api: TestClient) -> None:
    """A long whole number of a query string is the integer written, not the float nearest it."""
    missing = api.get(f"{T}/neighbors", params={"id": "12345678901234567"})
    assert missing.status_code == 404 and "id 12345678901234567 is outside" in missing.json()["error"]["message"]
    too_many = api.get(f"{T}/neighbors", params={"token": "heart", "k": "9" * 400})
    assert too_many.status_code == 422 and "at most" in too_many.json()["error"]["message"]


def test_neighbors_post_positive_negative(api: TestClient, small: Table) -> None:
    body = api.post(f"{T}/neighbors", json={"positive": ["king", "woman"], "negative": ["man"], "k": 5}).json()
    king, woman, man = (small.tokens.find(w) for w in ("king", "woman", "man"))
    query = unit(small.vectors[king]) + unit(small.vectors[woman]) - unit(small.vectors[man])
    assert ids(body["neighbors"]) == brute_force(small, query, 5, {king, woman, man})
    assert body["neighbors"][0]["token"] == "queen"
    assert [q["token"] for q in body["query"]["positive"]] == ["king", "woman"]
    assert [q["token"] for q in body["query"]["negative"]] == ["man"]
    single = api.post(f"{T}/neighbors", json={"token": "heart", "k": 3}).json()
    assert single["neighbors"] == api.get(f"{T}/neighbors", params={"token": "heart", "k": 3}).json()["neighbors"]


def test_neighbors_batch_with_a_bad_item(api: TestClient, small: Table) -> None:
    queries = ["heart", {"token": "Paris"}, "no-such-wordzz", {"id": 7}, {"positive": ["red", "blue"]}]
    body = api.post(f"{T}/neighbors", json={"queries": queries, "k": 4})
    assert body.status_code == 200
    results = body.json()["results"]
    assert len(results) == len(queries)
    assert results[2]["error"]["code"] == "unknown_token" and len(results[2]["error"]["suggestions"]) <= 5
    assert results[1]["query"]["match"] == "casefold"
    singles = [
        api.get(f"{T}/neighbors", params={"token": "heart", "k": 4}).json(),
        api.get(f"{T}/neighbors", params={"token": "Paris", "k": 4}).json(),
        None,
        api.get(f"{T}/neighbors", params={"id": 7, "k": 4}).json(),
        api.post(f"{T}/neighbors", json={"positive": ["red", "blue"], "k": 4}).json(),
    ]
    for got, want in zip(results, singles, strict=True):
        if want is not None:
            assert ids(got["neighbors"]) == ids(want["neighbors"])
            np.testing.assert_allclose(
                [n["score"] for n in got["neighbors"]], [n["score"] for n in want["neighbors"]], rtol=1e-5
            )


# ---------------------------------------------------------------------------------------------- search
def test_search_vector_and_batch(api: TestClient, small: Table, glove_raw: RawTable) -> None:
    raw = glove_raw.matrix[glove_raw.tokens.index("heart")]
    body = api.post(f"{T}/search", json={"vector": (raw * 7.5).tolist(), "k": 5}).json()
    assert body["neighbors"][0]["token"] == "heart" and body["neighbors"][0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert ids(body["neighbors"]) == brute_force(small, raw, 5)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(3, 50))
    batch = api.post(f"{T}/search", json={"vectors": vectors.tolist(), "k": 6}).json()
    assert [ids(r["neighbors"]) for r in batch["results"]] == [brute_force(small, v, 6) for v in vectors]


def test_search_batch_bad_items_do_not_fail_it(api: TestClient, small: Table) -> None:
    good = np.ones(50).tolist()
    vectors = [good, [1.0] * 3, [0.0] * 50, [float("nan")] + [1.0] * 49, [1e39] + [1.0] * 49, good]
    body = json.dumps({"vectors": vectors, "k": 2})  # NaN as the non-standard literal Python's json accepts
    results = api.post(f"{T}/search", content=body, headers={"content-type": "application/json"}).json()["results"]
    assert [("error" in r) for r in results] == [False, True, True, True, True, False]
    assert all(r["error"]["code"] == "invalid_request" for r in results[1:5])
    assert "50" in results[1]["error"]["message"]
    assert results[0] == results[5]


# ------------------------------------------------------------------------------------------ similarity
def test_similarity_get_and_pairs(api: TestClient, small: Table, glove_raw: RawTable) -> None:
    body = api.get(f"{T}/similarity", params={"a": "red", "b": "blue"}).json()
    red, blue = (glove_raw.matrix[glove_raw.tokens.index(w)] for w in ("red", "blue"))
    assert body["a"] == "red" and body["b"] == "blue"
    assert body["similarity"] == pytest.approx(float(unit(red) @ unit(blue)), abs=1e-6)
    assert body["query"]["a"]["token"] == "red"
    pairs = [["red", "blue"], ["red", "no-such-wordzz"], ["King", "queen"]]
    many = api.post(f"{T}/similarity", json={"pairs": pairs}).json()
    assert many["similarities"][0] == pytest.approx(body["similarity"], abs=1e-9)
    assert many["similarities"][1] is None and many["errors"][1]["code"] == "unknown_token"
    assert many["errors"][0] is None and many["errors"][2] is None
    king = api.get(f"{T}/similarity", params={"a": "king", "b": "queen"}).json()["similarity"]
    assert many["similarities"][2] == pytest.approx(king, abs=1e-9)


def test_similarity_get_equals_pairs_to_the_bit(api: TestClient, small: Table) -> None:
    """A pair scores the same float alone (GET) and among others (POST pairs), itself included."""
    rng = np.random.default_rng(3)
    words = [small.tokens[int(i)] for i in rng.integers(0, len(small.tokens), 60)]
    pairs = [["heart", "heart"], *([a, b] for a, b in zip(words[::2], words[1::2], strict=True))]
    many = api.post(f"{T}/similarity", json={"pairs": pairs}).json()["similarities"]
    alone = [api.get(f"{T}/similarity", params={"a": a, "b": b}).json()["similarity"] for a, b in pairs]
    assert alone == many


# --------------------------------------------------------------------------------------------- analogy
@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_analogy_single_and_batch(api: TestClient, small: Table, method: str) -> None:
    body = api.post(f"{T}/analogy", json={"a": "man", "b": "king", "c": "woman", "k": 5, "method": method}).json()
    assert body["neighbors"][0]["token"] == "queen"
    assert {body["query"][x]["token"] for x in "abc"} == {"man", "king", "woman"}
    assert body["query"]["method"] == method
    inputs = {small.tokens.find(w) for w in ("man", "king", "woman")}
    assert not inputs & set(ids(body["neighbors"]))
    a, b, c = (small.tokens.find(w) for w in ("man", "king", "woman"))
    assert ids(body["neighbors"]) == [i for i, _ in small.analogy(a, b, c, k=5, method=method)]
    questions = [
        {"a": "man", "b": "king", "c": "woman"},
        {"a": "france", "b": "paris", "c": "nowhere-landzz"},
        {"a": "france", "b": "paris", "c": "germany"},
    ]
    results = api.post(f"{T}/analogy", json={"queries": questions, "k": 3, "method": method}).json()["results"]
    assert ids(results[0]["neighbors"]) == ids(body["neighbors"])[:3]
    assert results[1]["error"]["code"] == "unknown_token"
    assert results[2]["neighbors"][0]["token"] == "berlin"


# ------------------------------------------------------------------------------------------ projection
def test_projection_is_pca_of_the_rows(api: TestClient, small: Table) -> None:
    words = ["red", "blue", "green", "one", "two", "three", "Red"]
    body = api.post(f"{T}/project", json={"tokens": words, "method": "pca"}).json()
    assert [p["token"] for p in body["points"]] == words[:6]  # "Red" is the row of "red": projected once
    rows = unit(small.vectors[[small.tokens.find(w) for w in words[:6]]])
    centred = rows - rows.mean(axis=0)
    _, s, _ = np.linalg.svd(centred, full_matrices=False)
    np.testing.assert_allclose(body["explained_variance_ratio"], (s**2 / (s**2).sum())[:2], rtol=1e-6)
    points = np.array([[p["x"], p["y"]] for p in body["points"]])
    np.testing.assert_allclose(np.abs(points.T @ points).diagonal(), (s**2)[:2], rtol=1e-6)  # PC scores
    assert api.post(f"{T}/project", json={"tokens": ["red", "no-such-wordzz"]}).status_code == 404
    skipped = api.post(f"{T}/project", json={"tokens": ["red", "blue", "no-such-wordzz"], "skip_unknown": True})
    assert skipped.json()["unknown"] == ["no-such-wordzz"] and len(skipped.json()["points"]) == 2
    # two rows have one direction between them: the second coordinate is 0, not the SVD's rounding (2e-17)
    assert [p["y"] for p in skipped.json()["points"]] == [0.0, 0.0]
    assert skipped.json()["explained_variance_ratio"] == [1.0, 0.0]
    assert api.post(f"{T}/project", json={"tokens": ["red", "RED"]}).status_code == 422
    assert api.post(f"{T}/project", json={"tokens": ["red", "blue"], "method": "mds"}).status_code == 422  # unknown
    few = api.post(f"{T}/project", json={"tokens": ["red", "blue"], "method": "tsne"})  # t-SNE needs four
    assert few.status_code == 422 and "distinct tokens" in few.json()["error"]["message"]


# ------------------------------------------------------------------------------- model-token tables
def test_tokenize_only_with_a_tokenizer(api: TestClient, minilm_api: TestClient, minilm_data_dir: Path) -> None:
    refused = api.post(f"{T}/tokenize", json={"text": "heart"})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_request"
    body = minilm_api.post("/v1/tables/minilm/tokenize", json={"text": "Unbelievable hearts"}).json()
    tokenizer = Tokenizer.from_file(str(minilm_data_dir / "minilm" / "tokenizer.json"))
    tokenizer.no_padding()  # the saved file pads to 128 for the model; tokenizing a word does not
    expected = tokenizer.encode("Unbelievable hearts", add_special_tokens=False)
    assert [t["id"] for t in body["tokens"]] == expected.ids
    assert [t["token"] for t in body["tokens"]] == expected.tokens


def test_compose_mean_for_a_multi_token_word(minilm_api: TestClient) -> None:
    M = "/v1/tables/minilm"
    word = "unbelievableness"
    assert minilm_api.get(f"{M}/neighbors", params={"token": word}).status_code == 404
    body = minilm_api.get(f"{M}/neighbors", params={"token": word, "k": 5, "compose": "mean"}).json()
    pieces = minilm_api.post(f"{M}/tokenize", json={"text": word}).json()["tokens"]
    assert body["query"]["compose"] == "mean" and body["query"]["tokens"] == pieces and len(pieces) > 1
    assert not {p["id"] for p in pieces} & set(ids(body["neighbors"]))
    rows = np.array(
        [minilm_api.get(f"{M}/ids/{p['id']}", params={"normalized": True}).json()["vector"] for p in pieces]
    )
    mean = unit(rows.mean(axis=0))
    search = minilm_api.post(f"{M}/search", json={"vector": mean.tolist(), "k": 5 + len(pieces)}).json()
    expected = [n["id"] for n in search["neighbors"] if n["id"] not in {p["id"] for p in pieces}][:5]
    assert ids(body["neighbors"]) == expected
    known = minilm_api.get(f"{M}/neighbors", params={"token": "heart", "k": 3, "compose": "mean"}).json()
    assert known["query"]["match"] in {"exact", "space-marked"}  # a word that is one row is not composed
    sim = minilm_api.get(f"{M}/similarity", params={"a": word, "b": "heart", "compose": "mean"}).json()
    assert sim["query"]["a"]["compose"] == "mean" and -1 <= sim["similarity"] <= 1


def test_special_and_continuation_tokens_filtered(minilm_api: TestClient) -> None:
    M = "/v1/tables/minilm"
    cls = minilm_api.get(f"{M}/tokens/[CLS]", params={"normalized": True}).json()
    vector = cls["vector"]
    kept = minilm_api.post(f"{M}/search", json={"vector": vector, "k": 5, "skip_special": False}).json()
    assert kept["neighbors"][0]["token"] == "[CLS]"
    dropped = minilm_api.post(f"{M}/search", json={"vector": vector, "k": 20}).json()  # skip_special defaults on
    assert not {n["token"] for n in dropped["neighbors"]} & {"[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]"}
    words = minilm_api.get(f"{M}/neighbors", params={"token": "##ing", "k": 20, "whole_words_only": True}).json()
    assert words["neighbors"] and not any(n["token"].startswith("##") for n in words["neighbors"])


# ------------------------------------------------------------------------------------------------ metrics
def test_metrics_count_routes_and_tables(api: TestClient) -> None:
    api.get(f"{T}/neighbors", params={"token": "heart"})
    api.get("/v1/tables/nosuch/neighbors", params={"token": "heart"})
    text = api.get("/metrics").text
    assert 'route="/v1/tables/{table}/neighbors"' in text and 'table="small"' in text
    assert 'table="unknown"' in text and "nosuch" not in text  # unknown names never become labels
    assert 'embedding_search_seconds_count{operation="neighbors",table="small"}' in text


def test_metrics_label_the_docs_and_the_explorers_files_by_their_route(api: TestClient) -> None:
    """Routes FastAPI records none for are labelled by their path too, not as unmatched as a 404 is; any number of
    files under /static add one label value."""
    for path in ("/docs", "/openapi.json", "/static/app.js", "/static/style.css", "/static/nosuch.js", "/nosuch"):
        api.get(path)
    text = api.get("/metrics").text
    for route, status in [("/docs", 200), ("/openapi.json", 200), ("/static", 200), ("/static", 404)]:
        assert f'method="GET",route="{route}",status="{status}"' in text, route
    assert 'route="unmatched",status="200"' not in text and "app.js" not in text and "nosuch" not in text
    assert 'route="unmatched",status="404"' in text


def test_metrics_count_the_engine_calls_holding_a_slot(api: TestClient) -> None:
    """A batch runs in a worker thread's slot: its kind's gauge is there, back at zero once the batch is answered
    (a call counted while it runs, and one while it waits: tests/service/test_work_bounds.py)."""
    assert api.post(f"{T}/neighbors", json={"queries": ["heart", "brain"], "k": 3}).status_code == 200
    assert 'embedding_work{kind="heavy",state="running"} 0.0' in api.get("/metrics").text


def test_metrics_label_an_unknown_method_other(api: TestClient) -> None:
    """A method is the client's word: any number of made-up ones add one label value, not one each."""
    for i in range(3):
        assert api.request(f"MADEUP{i}", "/healthz").status_code == 405
    text = api.get("/metrics").text
    assert "MADEUP" not in text
    assert 'method="other",route="/healthz",status="405"' in text


def test_metrics_count_each_status_and_time_every_request(api: TestClient) -> None:
    def counted(text: str, prefix: str, *labels: str) -> float:
        lines = [line for line in text.splitlines() if line.startswith(prefix) and all(x in line for x in labels)]
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines)

    route = ('method="GET"', 'route="/v1/tables/{table}/neighbors"', 'table="small"')
    before = api.get("/metrics").text
    for token in ("heart", "no-such-wordzz", "heart", "heart"):
        api.get(f"{T}/neighbors", params={"token": token})
    after = api.get("/metrics").text
    for status, times in (("200", 3), ("404", 1)):
        label = f'status="{status}"'
        added = counted(after, "embedding_http_requests_total{", *route, label)
        assert added - counted(before, "embedding_http_requests_total{", *route, label) == times
    timed = "embedding_http_request_seconds_count{"
    assert counted(after, timed, *route) - counted(before, timed, *route) == 4
    # A POST body sent without its JSON type (curl -d) is read as JSON, and counted under its route too
    posted = ('method="POST"', 'route="/v1/tables/{table}/neighbors"', 'table="small"', 'status="200"')
    before = api.get("/metrics").text
    answer = api.post(f"{T}/neighbors", content=b'{"positive": ["heart"]}', headers={"content-type": "text/plain"})
    assert answer.status_code == 200, answer.text
    after = api.get("/metrics").text
    assert (
        counted(after, "embedding_http_requests_total{", *posted)
        - counted(before, "embedding_http_requests_total{", *posted)
        == 1
    )


def test_a_zero_row_scores_zero_and_names_itself_as_a_query(tmp_path: Path) -> None:
    """A word table's zero row (an import keeps it): its cosine with every token is 0 in both similarity forms,
    as gensim's; as a neighbours query it has no direction, a 422 that names it."""
    from gensim.models import KeyedVectors

    source = tmp_path / "zero.txt"
    source.write_text("6 3\na 1 0 0\nb 0 1 0\nc 0 0 1\nd 1 1 0\ne 1 0 1\nz 0 0 0\n")
    assert run_cli("import", source, "--name", "zero", "--data-dir", tmp_path / "data").code == 0
    kv = KeyedVectors.load_word2vec_format(str(source))
    pairs = [("z", "a"), ("a", "z"), ("z", "z"), ("d", "a"), ("d", "e")]
    with client_for(data_dir=tmp_path / "data") as client:
        base = "/v1/tables/zero"
        batch = client.post(f"{base}/similarity", json={"pairs": [list(p) for p in pairs]}).json()
        for (a, b), value in zip(pairs, batch["similarities"], strict=True):
            single = client.get(f"{base}/similarity", params={"a": a, "b": b})
            assert single.status_code == 200, single.text
            assert single.json()["similarity"] == value == pytest.approx(float(kv.similarity(a, b)), abs=1e-6)
        assert batch["similarities"][0] == 0.0
        for method, params in (
            ("GET", {"params": {"token": "z"}}),
            ("POST", {"json": {"token": "z"}}),
            ("POST", {"json": {"positive": ["z"]}}),
        ):
            answer = client.request(method, f"{base}/neighbors", **params)
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"]["message"] == (
                "the vector of token 'z' is all zeros: no direction to find neighbours by (a zero row's cosine "
                "with every row is 0)"
            )
        by_id = client.get(f"{base}/neighbors", params={"id": 5}).json()["error"]["message"]
        assert by_id.startswith("the vector of id 5 is all zeros")
        cancel = client.post(f"{base}/neighbors", json={"positive": ["a"], "negative": ["a"]}).json()
        assert "cancel out" in cancel["error"]["message"]
        assert client.get(f"{base}/neighbors", params={"token": "d", "k": 2}).status_code == 200
        # its neighbours in two tables side by side: the same 422, alone or as an item of a batch
        compared = client.get("/v1/compare", params={"first": "zero", "second": "zero", "token": "z"})
        assert compared.status_code == 422 and compared.json()["error"]["message"].startswith(
            "the vector of token 'z' is all zeros"
        )
        items = client.post("/v1/compare", json={"first": "zero", "second": "zero", "tokens": ["z", "d"], "k": 2})
        first, second = items.json()["results"]
        assert first["error"]["code"] == "invalid_request" and second["overlap"] == 1.0
