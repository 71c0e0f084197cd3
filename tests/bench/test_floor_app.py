"""The HTTP floor answers its captured bodies after parsing what a FastAPI app parses (bench/floor_app.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from bench.floor_app import create_app


@pytest.fixture
def floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    bodies = {"get": '{"neighbors":[1]}', "post": '{"results":[]}', "search": '{"neighbors":[2]}'}
    (tmp_path / "bodies.json").write_text(json.dumps(bodies))
    monkeypatch.setenv("BENCH_FLOOR_BODIES", str(tmp_path / "bodies.json"))
    return TestClient(create_app())


def test_the_search_floor_parses_the_vector_body(floor: TestClient) -> None:
    answer = floor.post("/v1/tables/t/search", json={"vector": [0.5, 1], "k": 3})
    assert answer.status_code == 200 and answer.content == b'{"neighbors":[2]}'
    assert floor.post("/v1/tables/t/search", json={"vector": ["x"], "k": 3}).status_code == 422
    assert floor.post("/v1/tables/t/search", json={"k": 3}).status_code == 422


def test_the_get_floor_parses_the_query_string(floor: TestClient) -> None:
    assert floor.get("/v1/tables/t/neighbors", params={"token": "heart", "k": 10}).content == b'{"neighbors":[1]}'
    assert floor.get("/v1/tables/t/neighbors", params={"k": 10}).status_code == 422
