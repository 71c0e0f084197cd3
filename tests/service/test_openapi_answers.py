"""The OpenAPI document as a client generated from it reads it: the statuses and their error codes each operation
declares, and real answers of the documents tables (single, batch, per-item errors) valid by the document."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service import real_server
from tests.service.documented import check_answer

T = "/v1/tables/{table}"


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in document["paths"].items() for method, op in item.items()]


def test_every_operation_but_the_liveness_probe_declares_overloaded(api: TestClient) -> None:
    """A worker at its connections' limit answers every path 503 ``overloaded`` (with Retry-After), except
    /healthz, which it still answers alive; the OpenAI paths name their codes as they send them."""
    document = api.get("/openapi.json").json()
    for path, method, op in operations(document):
        responses = op["responses"]
        if path == "/healthz":
            assert "503" not in responses
            continue
        assert "`overloaded`" in responses["503"]["description"], (path, method)
    model = document["paths"]["/v1/models/{model}"]["get"]["responses"]
    assert model["404"]["description"].startswith("OpenAI's error shape; `model_not_found`: No loaded table")
    assert "`unknown_table`" not in model["404"]["description"]


@pytest.fixture(scope="module")
def documents(documents_server: real_server.Server) -> tuple[str, dict[str, Any]]:
    base = documents_server.base
    return base, real_server.HTTP.get(f"{base}/openapi.json").json()


VECTOR = [0.1] * 50
ANSWERS = [  # (method, operation's path, path asked, body, status)
    ("POST", f"{T}/search", "/v1/tables/lee/search", {"vector": VECTOR, "k": 2, "include": ["row", "vector"]}, 200),
    ("POST", f"{T}/search", "/v1/tables/lee/search", {"text": "election", "k": 2, "mode": "keyword"}, 200),
    ("POST", f"{T}/search", "/v1/tables/lee-text/search", {"text": "election", "k": 2, "mode": "hybrid"}, 200),
    ("POST", f"{T}/search", "/v1/tables/lee/search", {"queries": [{"vector": VECTOR}, {"text": "x"}], "k": 2}, 200),
    ("POST", f"{T}/search", "/v1/tables/lee/search", {"id": "nosuch", "k": 2}, 404),
    ("POST", f"{T}/search", "/v1/tables/lee/search", {"vector": VECTOR, "filter": {"nosuch": 1}}, 422),
    ("POST", f"{T}/search", "/v1/tables/no-text/search", {"text": "x", "mode": "keyword"}, 422),
    ("GET", f"{T}/documents/{{document}}", "/v1/tables/lee/documents/lee-003", None, 200),
    ("GET", f"{T}/documents/{{document}}", "/v1/tables/lee/documents/nosuch", None, 404),
    ("GET", f"{T}/fields", "/v1/tables/lee/fields", None, 200),
    ("GET", f"{T}/fields", "/v1/tables/small/fields", None, 422),
    ("POST", f"{T}/documents", "/v1/tables/lee/documents", {"documents": []}, 403),  # a read-only server
    ("POST", f"{T}/similarity", "/v1/tables/small/similarity", {"pairs": [["king", "queen"], ["king", "zqx"]]}, 200),
    ("POST", f"{T}/rank", "/v1/tables/small/rank", {"pairs": [["king", "queen"], ["king", "zqx"]]}, 200),
    ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "nosuch", "input": "king"}, 404),
    ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "small", "input": "king", "encoding_format": "base64"}, 200),
]


@pytest.mark.parametrize(("method", "template", "path", "body", "status"), ANSWERS, ids=[a[2] for a in ANSWERS])
def test_answers_are_as_documented(
    documents: tuple[str, dict[str, Any]], method: str, template: str, path: str, body: Any, status: int
) -> None:
    base, document = documents
    response = real_server.HTTP.request(method, base + path, json=body)
    assert response.status_code == status, response.text
    check_answer(document, method, template, response)
