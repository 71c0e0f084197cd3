"""Valid JSON the engine cannot take: lone UTF-16 surrogates (``"\\ud800"``), timestamps that an offset moves out of
years 1..9999, numbers beyond 64 bits. Each is a 422 in the JSON envelope naming where it is, on every route that
takes text, timestamps or ids, and the same request without the bad value is answered.

The bodies are written by hand (``json.dumps`` escapes a surrogate as ``\\ud800``), as a hostile client sends them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import client_for

LONE = "\ud800"
HUGE = 2**70
LEE, SMALL = "/v1/tables/lee", "/v1/tables/small"


@pytest.fixture(scope="module")
def client(lee_data_dir: Path, small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data_dir = tmp_path_factory.mktemp("hostile-input")
    for source in (lee_data_dir / "lee", small_data_dir / "small"):
        (data_dir / source.name).symlink_to(source)
    with client_for(data_dir=data_dir) as client:
        yield client


def post(client: TestClient, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    return response.status_code, response.json()


def refused(client: TestClient, path: str, body: dict[str, Any], *words: str) -> None:
    status, answer = post(client, path, body)
    assert status == 422, (status, answer)
    message = answer["error"]["message"]
    assert answer["error"]["code"] == "invalid_request" and all(word in message for word in words), message


SURROGATES = {
    "a filter's string value": (f"{LEE}/search", {"id": "lee-000", "filter": {"lang": LONE}}, "lang"),
    "a tag in a list": (f"{LEE}/search", {"id": "lee-000", "filter": {"tags": {"in": ["a", LONE]}}}, "tags.in[1]"),
    "a nested field name": (f"{LEE}/search", {"id": "lee-000", "filter": {"and": [{LONE: 1}]}}, "and[0]"),
    "an operator": (f"{LEE}/search", {"id": "lee-000", "filter": {"year": {LONE: 1}}}, "year"),
    "a batch item's filter": (f"{LEE}/search", {"queries": [{"id": "lee-000", "filter": {"lang": LONE}}]}, "queries.0"),
    "a document id": (f"{LEE}/search", {"id": LONE}, "id"),
    "a query text": (f"{LEE}/search", {"text": LONE, "mode": "keyword"}, "text"),
    "a field asked for": (f"{LEE}/search", {"id": "lee-000", "fields": [LONE]}, "fields"),
    "a token": (f"{SMALL}/neighbors", {"positive": ["king", LONE]}, "positive"),
    "a batch token": (f"{SMALL}/neighbors", {"queries": [LONE]}, "queries"),
    "a pair": (f"{SMALL}/similarity", {"pairs": [[LONE, "king"]]}, "pairs"),
    "an analogy": (f"{SMALL}/analogy", {"a": "man", "b": LONE, "c": "woman"}, "b"),
    "a projected token": (f"{SMALL}/project", {"tokens": ["king", LONE], "method": "tsne"}, "tokens"),
    "a word list": (f"{SMALL}/doesnt-match", {"words": ["king", LONE, "queen"], "skip_unknown": True}, "words"),
    "a word set": (f"{SMALL}/n-similarity", {"a": [LONE], "b": ["king"]}, "a"),
    "a compared token": ("/v1/compare", {"first": "small", "second": "small", "tokens": [LONE]}, "tokens"),
    "a text to tokenize": (f"{SMALL}/tokenize", {"text": LONE}, "text"),
    "an export group": (f"{SMALL}/export", {"rows": [{"token": "king", "group": LONE}], "file": "metadata"}, "group"),
    "a text to embed": (f"{LEE}/embed", {"texts": [LONE]}, "texts"),
}


@pytest.mark.parametrize("case", SURROGATES.values(), ids=SURROGATES.keys())
def test_a_lone_surrogate_is_a_422(client: TestClient, case: tuple[str, dict[str, Any], str]) -> None:
    path, body, where = case
    refused(client, path, body, where)


def test_a_lone_surrogate_in_openai_embeddings_is_a_400(client: TestClient) -> None:
    for body in (
        {"model": "lee", "input": LONE},
        {"model": "lee", "input": ["a", LONE]},
        {"model": LONE, "input": "a"},
    ):
        status, answer = post(client, "/v1/embeddings", body)
        assert status == 400 and answer["error"]["type"] == "invalid_request_error", answer


def test_openai_errors_name_the_right_param(client: TestClient) -> None:
    """A table that embeds no text is the model's fault whatever the dimensions asked (no model, as on
    ``GET /v1/models/lee``); a body that is not JSON names no param (its location is the body)."""
    status, answer = post(client, "/v1/embeddings", {"model": "lee", "input": "heart", "dimensions": 384})
    assert status == 404 and (answer["error"]["param"], answer["error"]["code"]) == ("model", "model_not_found")
    broken = client.post("/v1/embeddings", content=b'{"model": "lee", "input": "heart",}')
    assert broken.status_code == 400 and broken.json()["error"]["param"] is None, broken.text
    assert set(broken.json()["error"]) == {"message", "type", "param", "code"}


def test_the_filters_without_the_surrogate_are_answered(client: TestClient) -> None:
    status, answer = post(client, f"{LEE}/search", {"id": "lee-000", "filter": {"tags": {"in": ["a", "\u00e9"]}}})
    assert status == 200 and answer["passing"] == 0, answer
    status, answer = post(client, f"{LEE}/search", {"id": "lee-000", "filter": {"and": [{"lang": "\U0001f600"}]}})
    assert status == 200 and answer["passing"] == 0, answer


OUT_OF_RANGE = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+01:00"]


@pytest.mark.parametrize("moment", OUT_OF_RANGE)
@pytest.mark.parametrize("form", ["alone", "range", "in"])
def test_a_timestamp_outside_years_1_to_9999_in_utc_is_a_422(client: TestClient, moment: str, form: str) -> None:
    condition: Any = {"alone": moment, "range": {"gte": moment}, "in": {"in": ["2001-01-01T00:00:00Z", moment]}}[form]
    refused(client, f"{LEE}/search", {"id": "lee-000", "filter": {"published": condition}}, "published", "9999")


def test_timestamps_at_the_edges_within_the_years_are_answered(client: TestClient) -> None:
    edges = {"gte": "0001-01-01T00:59:59+00:59", "lte": "9999-12-31T00:00:00-23:59"}
    status, answer = post(client, f"{LEE}/search", {"id": "lee-000", "filter": {"published": edges}})
    assert status == 200 and answer["passing"] == 300, answer


BEYOND_64_BITS = {
    "an id": ({"id": HUGE}, "id"),
    "a positive id": ({"positive": [HUGE]}, "positive.0"),
    "a negative id": ({"positive": ["lee-000"], "negative": [-HUGE]}, "negative.0"),
    "a batch item's id": ({"queries": [{"id": HUGE}]}, "queries.0.id"),
}


@pytest.mark.parametrize("case", BEYOND_64_BITS.values(), ids=BEYOND_64_BITS.keys())
def test_an_id_beyond_64_bits_is_a_422(client: TestClient, case: tuple[dict[str, Any], str]) -> None:
    body, where = case
    refused(client, f"{LEE}/search", body, where)


def test_a_float_filter_beyond_float64_is_a_422(client: TestClient) -> None:
    refused(client, f"{LEE}/search", {"id": "lee-000", "filter": {"known": 10**400}}, "known", "finite number")
    refused(client, f"{LEE}/search", {"id": "lee-000", "filter": {"known": {"in": [1, -(10**400)]}}}, "known.in[1]")
    status, answer = post(client, f"{LEE}/search", {"id": "lee-000", "filter": {"known": {"lt": 10**300}}})
    assert status == 200 and answer["passing"] == 300, answer


LONG_NAME = "n" * (1 << 20)  # one key of a body within the limit


@pytest.mark.parametrize(
    "filter_",
    [{LONG_NAME: 1}, {"not": {LONG_NAME: 1}}, {"year": {LONG_NAME: 1}}],
    ids=["a field", "a field under not", "an operator"],
)
def test_a_long_filter_name_is_quoted_clipped(client: TestClient, filter_: dict[str, Any]) -> None:
    """A field or operator name of a megabyte is named by its start: the answer stays small."""
    response = client.post(f"{LEE}/search", json={"id": "lee-000", "filter": filter_})
    assert response.status_code == 422 and len(response.content) < 1000, (response.status_code, len(response.content))
    assert "nnnnnnnnnn..." in response.json()["error"]["message"]


def test_a_long_field_name_of_a_write_is_quoted_clipped(lee_data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "lee").symlink_to(lee_data_dir / "lee")
    document = {"id": "new", "vector": [0.5] * 50, "fields": {LONG_NAME: 1}}
    with client_for(data_dir=tmp_path, write_keys=["w"]) as client:
        response = client.post(f"{LEE}/documents", json={"documents": [document]}, headers={"X-API-Key": "w"})
        assert response.status_code == 422 and len(response.content) < 1000, len(response.content)
        error = response.json()["error"]
        assert "has no field 'nnnnnnnnnn" in error["message"] and error["field"].endswith("..."), error
        assert client.get(f"{LEE}/documents/new", headers={"X-API-Key": "w"}).status_code == 404  # nothing written
