"""``POST .../search`` with one raw vector answered by ``service.plain_search``: every body
gets the same response (status, content type, bytes) as through the route's normal path (FastAPI and the request
model), and the fast handler answers exactly the plain bodies on a words table."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, request_response
from fastapi.testclient import TestClient

from service import plain_search
from tests.service.conftest import client_for

T = "/v1/tables/small/search"
L = "/v1/tables/lee/search"
JSON = {"content-type": "application/json"}
ONES = ["1.0"] * 49


@pytest.fixture(scope="module")
def both_dir(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path, lee_data_dir: Path) -> Path:
    """The words table ``small`` (50 dimensions) and the documents table ``lee`` side by side."""
    data_dir = tmp_path_factory.mktemp("plain-body")
    os.symlink(small_data_dir / "small", data_dir / "small")
    os.symlink(lee_data_dir / "lee", data_dir / "lee")
    return data_dir


def normal_path_only(client: TestClient) -> TestClient:
    """The app with the search route's own handler back: every body through the router, FastAPI and the request
    model. (The apps share their route objects: this one gets a copy.)"""
    routes = client.app.router.routes  # type: ignore[attr-defined]
    (at,) = [i for i, r in enumerate(routes) if isinstance(r, APIRoute) and r.path == "/v1/tables/{table}/search"]
    normal = copy.copy(routes[at])
    normal.app, normal.hot = request_response(normal.get_route_handler()), False
    routes[at] = normal
    return client


@pytest.fixture(scope="module")
def clients(both_dir: Path) -> Iterator[tuple[TestClient, TestClient]]:
    with client_for(data_dir=both_dir) as fast, normal_path_only(client_for(data_dir=both_dir)) as normal:
        yield fast, normal


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The answers the fast handler made (the normal path builds its own with search.py's FastJSON)."""
    made: list[Any] = []
    real = plain_search.FastJSON

    def counting(content: Any) -> Any:
        made.append(content)
        return real(content)

    monkeypatch.setattr(plain_search, "FastJSON", counting)
    return made


def same(
    clients: tuple[TestClient, TestClient], path: str, text: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    fast, normal = (c.post(path, content=text, headers=JSON if headers is None else headers) for c in clients)
    assert (fast.status_code, fast.headers.get("content-type"), fast.content) == (
        normal.status_code,
        normal.headers.get("content-type"),
        normal.content,
    ), text[:200]
    return fast


def body(vector: list[str], extra: str = ', "k": 3') -> str:
    return '{"vector": [' + ", ".join(vector) + "]" + extra + "}"


PLAIN = [
    body(["0.5", *ONES]),
    body(["1"] + ["0"] * 49),  # integers are numbers
    body(["-0.25", *ONES], ""),  # k left out: 10
    body(["1e-3", *ONES], ', "k": 1000'),  # max_k
    body(["2.5", *ONES], ', "k": 5, "offset": 995'),
    body(["2.5", *ONES], ', "k": 5, "offset": 0, "min_score": 0.2'),
    body(["2.5", *ONES], ', "min_score": -1'),
    body(["2.5", *ONES], ', "min_score": 1, "k": 2'),  # nothing above: no neighbours
    body(["3.4028234663852886e38", *ONES]),  # float32's largest
    body(["0.5"] + ["1.0"] * 48 + ["-1.0"]) + "  \n",
    '{"k": 4, "vector": [' + ", ".join(["0.125"] * 50) + "]}",
]


@pytest.mark.parametrize("text", PLAIN)
def test_plain_bodies_are_answered_by_the_fast_handler_as_by_the_route(
    clients: tuple[TestClient, TestClient], answered: list[Any], text: str
) -> None:
    response = same(clients, T, text)
    assert response.status_code == 200, response.text
    assert len(answered) == 1 and "neighbors" in response.json()


REFUSED_VECTORS = [  # test_errors.test_bad_vectors and more
    ["NaN", *ONES],
    ["Infinity", *ONES],
    ["-Infinity", *ONES],
    ["1e39", *ONES],  # beyond float32
    ["-3.5e38", *ONES],
    ["1e400", *ONES],  # beyond float64
    ["0.0"] * 50,  # zero vector
    [],
    ['"1.0"', *ONES],  # strings are not numbers
    ["true", *ONES],
    ["false", *ONES],
    ["null", *ONES],
    ["[1.0]", *ONES],
    ['{"a": 1}', *ONES],
    ONES,  # 49 values for 50 dimensions
    ["1.0", *ONES, "1.0"],  # 51
    ["1"] * 65_537,  # over MAX_DIM
]


@pytest.mark.parametrize("vector", REFUSED_VECTORS, ids=lambda v: " ".join(v[:1]) + f"...{len(v)}")
def test_refused_vectors_get_the_routes_error(clients: tuple[TestClient, TestClient], vector: list[str]) -> None:
    response = same(clients, T, body(vector))
    assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_request"


OTHER_BODIES = [
    ', "k": 0',
    ', "k": -1',
    ', "k": 1001',
    ', "k": 1.5',
    ', "k": 3.0',  # the model reads 3.0 as 3: left to it
    ', "k": true',
    ', "k": "3"',
    ', "k": null',
    ', "k": 1e4',
    ', "k": 10, "offset": 991',  # offset + k over max_k
    ', "offset": -1',
    ', "offset": 1.0',
    ', "offset": false',
    ', "min_score": 1.5',
    ', "min_score": -2',
    ', "min_score": true',
    ', "min_score": "0.5"',
    ', "min_score": null',
    ', "exact": true',  # a field the fast handler does not take: the route's answer
    ', "restrict": 100',
    ', "skip_special": false',
    ', "whole_words_only": true',
    ', "filter": {"year": 2001}',  # documents only: 422
    ', "fields": ["lang"]',
    ', "mode": "vector"',
    ', "text": "heart"',
    ', "vectors": [[1.0]]',
    ', "unknown": 1',
    ', "k": 3, "k": 4',  # a repeated name: the last, both ways
]


@pytest.mark.parametrize(
    "text",
    [
        body(["123456789012345678901234567890", *ONES]),  # beyond 64-bit integers: orjson refuses, json reads
        "\ufeff" + body(["0.5", *ONES]),  # a byte order mark: orjson refuses, the route reads
    ],
)
def test_bodies_orjson_refuses_get_the_routes_answer(clients: tuple[TestClient, TestClient], text: str) -> None:
    assert same(clients, T, text).status_code == 200


@pytest.mark.parametrize("extra", OTHER_BODIES)
def test_other_fields_and_numbers_get_the_routes_answer(clients: tuple[TestClient, TestClient], extra: str) -> None:
    same(clients, T, body(["0.5", *ONES], extra))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        "[]",
        '"vector"',
        '{"vector": [1.0, }',  # malformed
        "{'vector': [1.0]}",
        body(["0.5", *ONES]).replace("}", ""),
        "{}",
        '{"vector": null}',
        '{"vector": "1.0"}',
    ],
)
def test_malformed_bodies_get_the_routes_error(clients: tuple[TestClient, TestClient], text: str) -> None:
    assert same(clients, T, text).status_code in (400, 422)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"content-type": "text/plain"},
        {"content-type": "application/json; charset=utf-8"},
        {"content-type": "application/vnd.api+json"},
        {"content-type": "APPLICATION/JSON"},
    ],
)
def test_other_content_types_get_the_routes_answer(
    clients: tuple[TestClient, TestClient], headers: dict[str, str]
) -> None:
    same(clients, T, body(["0.5", *ONES]), headers)


@pytest.mark.parametrize(
    "path",
    ["/v1/tables/nope/search", "/v1/tables/smal/search", "/v1/tables/..x/search", "/v1/tables/" + "a" * 65 + "/search"],
)
def test_unknown_and_refused_tables_get_the_routes_error(
    clients: tuple[TestClient, TestClient], answered: list[Any], path: str
) -> None:
    assert same(clients, path, body(["0.5", *ONES])).status_code in (404, 422)
    assert answered == []


def test_a_documents_table_is_left_to_the_route(clients: tuple[TestClient, TestClient], answered: list[Any]) -> None:
    response = same(clients, L, body(["0.5", *ONES]))
    assert response.status_code == 200 and "hits" in response.json()
    assert answered == []
