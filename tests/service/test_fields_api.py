"""``GET /v1/tables/{t}/fields`` on gensim's Lee corpus imported as a documents table, and on a small table with
repeated and missing tags: every count and range is checked against plain Python over the values the test
wrote, and every common value's count against the ``passing`` of the filter that asks for it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from index.build.sources import read_source
from index.build.writer import build_table
from index.engine.field_stats import TOP_VALUES
from service.routers import fields
from tests.lee import TYPES, Lee
from tests.service.conftest import client_for


@pytest.fixture(scope="module")
def lee_api(lee_data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=lee_data_dir) as client:
        yield client


def ranked(counts: Counter[Any]) -> list[dict[str, Any]]:
    """Most common first, ties by value, at most TOP_VALUES."""
    order = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [{"value": value, "count": count} for value, count in order[:TOP_VALUES]]


def passing(api: TestClient, table: str, spec: dict[str, Any]) -> int:
    body = {"id": "lee-000" if table == "lee" else "d0", "k": 1, "fields": [], "filter": spec}
    response = api.post(f"/v1/tables/{table}/search", json=body)
    assert response.status_code == 200, response.text
    count: int = response.json()["passing"]
    return count


def test_lee_fields_hold_what_was_imported(lee_api: TestClient, lee_docs: Lee) -> None:
    answer = lee_api.get("/v1/tables/lee/fields").json()
    assert (answer["table"], answer["rows"]) == ("lee", 300)
    stats = answer["fields"]
    assert {name: field["type"] for name, field in stats.items()} == TYPES
    values = lee_docs.fields
    for name in TYPES:
        assert stats[name]["non_null"] == sum(v is not None for v in values[name]), name

    lang = Counter(v for v in values["lang"] if v is not None)
    assert stats["lang"]["distinct"] == len(lang) and stats["lang"]["values"] == ranked(lang)
    tags = Counter(tag for row in values["tags"] if row for tag in set(row))
    assert stats["tags"]["distinct"] == len(tags) > TOP_VALUES
    assert stats["tags"]["values"] == ranked(tags)
    assert stats["long"]["values"] == ranked(Counter(values["long"]))
    for name in ("year", "known"):
        assert (stats[name]["min"], stats[name]["max"]) == (min(values[name]), max(values[name])), name
    records = [lee_docs.record(i)["published"] for i in range(300)]
    assert (stats["published"]["min"], stats["published"]["max"]) == (min(records), max(records))
    assert "values" not in stats["year"] and "min" not in stats["lang"]


def test_common_values_count_what_their_filters_pass(lee_api: TestClient) -> None:
    stats = lee_api.get("/v1/tables/lee/fields").json()["fields"]
    for name in ("lang", "tags", "long"):
        for item in stats[name]["values"][:3]:
            assert passing(lee_api, "lee", {name: item["value"]}) == item["count"], (name, item)
    published = stats["published"]
    assert passing(lee_api, "lee", {"published": {"gte": published["min"], "lte": published["max"]}}) == 300
    assert passing(lee_api, "lee", {"year": {"lt": stats["year"]["min"]}}) == 0


def test_repeated_and_missing_tags(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"id": "d0", "tags": ["b", "a", "a"], "kind": "x", "size": 2.5},
        {"id": "d1", "tags": ["a"], "kind": "y", "size": None},
        {"id": "d2", "tags": None, "kind": None, "size": -1.0},
        {"id": "d3", "tags": [], "kind": "x", "size": 7.0},
    ]
    for i, row in enumerate(rows):
        row["vector"] = [1.0, float(i + 1), 0.5]
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    raw, fmt = read_source(path, "documents")
    build_table(raw, data_dir=tmp_path / "data", name="tiny", source={"format": fmt, "path": path.name})
    with client_for(data_dir=tmp_path / "data") as api:
        stats = api.get("/v1/tables/tiny/fields").json()["fields"]
        assert stats["tags"] == {
            "type": "string_list",
            "non_null": 3,
            "distinct": 2,
            "values": [{"value": "a", "count": 2}, {"value": "b", "count": 1}],
        }
        assert passing(api, "tiny", {"tags": "a"}) == 2
        assert stats["kind"]["values"] == [{"value": "x", "count": 2}, {"value": "y", "count": 1}]
        assert (stats["size"]["non_null"], stats["size"]["min"], stats["size"]["max"]) == (3, -1.0, 7.0)


def test_computed_once_per_table(lee_api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    first = lee_api.get("/v1/tables/lee/fields").json()
    calls: list[str] = []
    monkeypatch.setattr(fields, "field_stats", lambda *args: calls.append("again") or {})
    assert lee_api.get("/v1/tables/lee/fields").json() == first
    assert calls == []


def test_word_tables_and_unknown_tables(api: TestClient) -> None:
    response = api.get("/v1/tables/small/fields")
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and "not documents" in error["message"]
    missing = api.get("/v1/tables/nope/fields")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_table"
