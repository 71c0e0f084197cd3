"""Schemathesis against the document operations of the app's OpenAPI document (writes, and many documents read
by id), in process (ASGI), with the write key and a copy of gensim's Lee corpus (a documents table whose vectors
came with it): every default check, the coverage and fuzzing phases, seeded. No 5xx, every status documented,
every response matching its schema, and a request the schema allows refused only for what the table holds (its
fields, their types, its dimension)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import CheckContext
from schemathesis.specs.openapi.checks import allow_header_conformance, positive_data_acceptance

from service.app import create_app
from service.schemas.common import INT64_MAX, INT64_MIN
from service.settings import Settings

KEY = "fuzz-writer-key-0123456789"
T = "/v1/tables/{table}"
# What the schema cannot say: a document's fields and vector must fit the table; a table whose vectors came with
# its documents embeds no text; an id of the wrong type for the table's ids; ids twice in one request.
CONTENT_422 = (
    "has no field",  # a field the table does not have
    " field, not ",  # a value of another type than the field's
    "a vector of",  # another length than the table's
    "all zeros",
    "records no encoder",  # text without a vector: this table's vectors came with its documents
    "give its vector",
    "comes twice",
    "the ids of table 'lee' are strings",  # an integer id
    "takes the operators",  # a filter's operator the field's type lacks
    "a filter is a non-empty object",
    "takes a non-empty list of filters",
)


def accepts_valid_requests(ctx: CheckContext, response: Any, case: Any) -> bool | None:
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != 422:
        return positive_data_acceptance(ctx, response, case)
    message = response.json()["error"]["message"]
    assert any(reason in message for reason in CONTENT_422), f"{case.operation.label}: valid request refused: {message}"
    return None


@pytest.fixture
def write_schema(lee_data_dir: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    app = create_app(Settings(data_dir=data, write_keys=[KEY]))
    document = copy.deepcopy(app.openapi())
    document["paths"] = {path: item for path, item in document["paths"].items() if "/documents" in path}
    for item in document["paths"].values():
        for method in [m for m in item if m == "get"]:
            del item[method]
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] == "table":
                    parameter["schema"] = {"type": "string", "enum": ["lee"]}
                if parameter["in"] == "header" and parameter["name"].lower() == "x-api-key":
                    parameter["schema"] = {"type": "string", "enum": [KEY]}
                    parameter["required"] = True
    exact_int64_bounds(document)
    schema = schemathesis.openapi.from_dict(document)
    schema.app = app
    schema.location = "/openapi.json"
    return schema


def exact_int64_bounds(node: Any) -> None:
    """An integer id's bounds as the server holds them (int64): the document states them a float's step inside
    (``service.schemas.common.int64_schema``), so ids between the two bounds are allowed, not refused data."""
    if isinstance(node, dict):
        if node.get("type") == "integer" and (node.get("minimum"), node.get("maximum")) == (
            INT64_MIN + 1024,
            INT64_MAX + 1 - 1024,
        ):
            node["minimum"], node["maximum"] = INT64_MIN, INT64_MAX
        for value in node.values():
            exact_int64_bounds(value)
    elif isinstance(node, list):
        for value in node:
            exact_int64_bounds(value)


schema = schemathesis.pytest.from_fixture("write_schema")


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
def test_writes_conform_to_the_openapi_document(case: Any) -> None:
    response = case.call_and_validate(
        excluded_checks=[positive_data_acceptance, allow_header_conformance],  # GET shares the paths (not fuzzed here)
        additional_checks=[accepts_valid_requests],
    )
    assert response.status_code < 500, response.text
