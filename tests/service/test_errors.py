"""One error envelope with one status per error kind, for every error a client can cause; OpenAPI lists them."""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient
from starlette.responses import Response

from service.deps import AdminDep
from service.errors import ERRORS
from service.http.fastroute import QueryRoute, query_params
from service.logs import PlainFormatter
from service.schemas.neighbors import NeighborsParams
from tests import REPO
from tests.index.build.test_embed_documents import import_texts
from tests.lee import Lee
from tests.service.conftest import client_for

T = "/v1/tables/small"
HEART = {"token": "heart"}


def envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert the status and the envelope shape; return the error object."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == code and ERRORS[code].status == status
    assert isinstance(error["message"], str) and error["message"]
    return error


def post_json(client: TestClient, path: str, text: str) -> httpx.Response:
    return client.post(path, content=text, headers={"content-type": "application/json"})


# ---------------------------------------------------------------------------------------------- 404
def test_unknown_table_with_suggestions(api: TestClient) -> None:
    error = envelope(api.get("/v1/tables/smal/neighbors", params=HEART), 404, "unknown_table")
    assert error["suggestions"] == ["small"]
    envelope(api.get("/v1/tables/zzzzqqq"), 404, "unknown_table")
    envelope(api.post("/v1/tables/nope/search", json={"vector": [1.0] * 50}), 404, "unknown_table")


def test_invalid_table_name_is_refused_before_use(api: TestClient) -> None:
    error = envelope(api.get("/v1/tables/.hidden/neighbors", params=HEART), 422, "invalid_request")
    assert "table name" in error["message"]
    envelope(api.get("/v1/tables/a%20b"), 422, "invalid_request")


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", f"{T}/neighbors", {"params": {"token": "hearrt"}}),
        ("GET", f"{T}/tokens/hearrt", {}),
        ("GET", f"{T}/similarity", {"params": {"a": "hearrt", "b": "red"}}),
        ("POST", f"{T}/neighbors", {"json": {"positive": ["hearrt"]}}),
        ("POST", f"{T}/analogy", {"json": {"a": "man", "b": "king", "c": "hearrt"}}),
        ("POST", f"{T}/project", {"json": {"tokens": ["red", "hearrt"]}}),
    ],
)
def test_unknown_token_with_suggestions(api: TestClient, method: str, path: str, kwargs: dict) -> None:
    error = envelope(api.request(method, path, **kwargs), 404, "unknown_token")
    assert "heart" in error["suggestions"] and len(error["suggestions"]) <= 5
    assert "hearrt" in error["message"]


LONG_TOKEN = "heart" * 60  # 300 characters


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("GET", f"{T}/neighbors", {"params": {"token": LONG_TOKEN}}),
        ("POST", f"{T}/neighbors", {"json": {"token": LONG_TOKEN}}),
        ("POST", f"{T}/neighbors", {"json": {"queries": [LONG_TOKEN]}}),
        ("GET", f"{T}/tokens/{LONG_TOKEN}", {}),
    ],
)
def test_a_long_unknown_token_is_quoted_clipped(api: TestClient, method: str, path: str, kwargs: dict) -> None:
    """The message quotes the start of a long token, as of any long value; ``token`` gives it whole."""
    answer = api.request(method, path, **kwargs)
    error = answer.json()["results"][0]["error"] if "queries" in kwargs.get("json", {}) else answer.json()["error"]
    assert error["message"] == f"token '{LONG_TOKEN[:56]}... is not in table 'small'", error
    assert error["token"] == LONG_TOKEN


def test_unknown_path_and_method(api: TestClient) -> None:
    envelope(api.get("/v2/nothing"), 404, "not_found")
    envelope(api.get("/static/no-such-file.js"), 404, "not_found")
    envelope(api.delete(f"{T}/neighbors"), 405, "method_not_allowed")
    envelope(api.put("/healthz"), 405, "method_not_allowed")


# ---------------------------------------------------------------------------------------------- 422
@pytest.mark.parametrize(
    "vector",
    [
        "[1.0, 2.0, 3.0]",  # wrong length
        "[" + ", ".join(["NaN"] + ["1.0"] * 49) + "]",
        "[" + ", ".join(["Infinity"] + ["1.0"] * 49) + "]",
        "[" + ", ".join(["-Infinity"] + ["1.0"] * 49) + "]",
        "[" + ", ".join(["1e39"] + ["1.0"] * 49) + "]",  # beyond float32
        "[" + ", ".join(["1e400"] + ["1.0"] * 49) + "]",  # beyond float64: parsed as infinity
        "[" + ", ".join(["0.0"] * 50) + "]",  # zero vector: no direction
        "[]",
        '["1.0"' + ", 1.0" * 49 + "]",  # strings are not numbers
        "[true" + ", 1.0" * 49 + "]",
    ],
)
def test_bad_vectors(api: TestClient, vector: str) -> None:
    envelope(post_json(api, f"{T}/search", f'{{"vector": {vector}, "k": 3}}'), 422, "invalid_request")


@pytest.mark.parametrize("k", ["0", "-1", "1001", "1.5", "true", '"3"', "null", "1e4"])
def test_bad_k_in_body(api: TestClient, k: str) -> None:
    error = envelope(post_json(api, f"{T}/neighbors", f'{{"token": "heart", "k": {k}}}'), 422, "invalid_request")
    assert error["details"][0]["loc"] == ["body", "k"]
    assert "input" not in json.dumps(error["details"])  # the client's input is never echoed back


@pytest.mark.parametrize("k", ["0", "-1", "1001", "1.5", "true", "x"])
def test_bad_k_in_query(api: TestClient, k: str) -> None:
    error = envelope(api.get(f"{T}/neighbors", params={"token": "heart", "k": k}), 422, "invalid_request")
    assert error["details"][0]["loc"] == ["query", "k"]


def test_k_at_the_limits_is_accepted(api: TestClient) -> None:
    assert len(api.get(f"{T}/neighbors", params={"token": "heart", "k": 1}).json()["neighbors"]) == 1
    assert len(api.get(f"{T}/neighbors", params={"token": "heart", "k": 1000}).json()["neighbors"]) == 1000


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("neighbors", {"token": "heart", "exact": 1}),  # strict booleans
        ("neighbors", {"token": "heart", "restrict": 0}),
        ("neighbors", {"token": "heart", "postive": ["x"]}),  # unknown field (a typo)
        ("neighbors", {}),  # no query
        ("neighbors", {"token": "heart", "queries": ["red"]}),  # two forms at once
        ("neighbors", {"queries": []}),
        ("neighbors", {"token": "heart", "compose": "max"}),
        ("neighbors", {"positive": ["heart"], "compose": "mean"}),  # lists are not composed: not silently ignored
        ("neighbors", {"queries": ["heart", {"negative": ["heart"]}], "compose": "mean"}),
        ("neighbors", {"positive": ["heart"], "negative": ["heart"]}),  # cancels out: zero query vector
        ("search", {"vector": [1.0] * 50, "vectors": [[1.0] * 50]}),
        ("analogy", {"a": "man", "b": "king", "c": "woman", "method": "3cosfoo"}),  # unknown method
        ("analogy", {"a": "man", "b": "king"}),
        ("similarity", {"pairs": [["red"]]}),
        ("similarity", {"pairs": [["red", "blue", "green"]]}),
        ("project", {"tokens": ["red"]}),
        ("tokenize", {"text": 5}),
    ],
)
def test_invalid_requests(api: TestClient, path: str, body: dict) -> None:
    envelope(api.post(f"{T}/{path}", json=body), 422, "invalid_request")


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [  # pydantic's words reworded: what is wrong and what to do, no "Extra inputs", no "after validation"
        (
            "neighbors",
            {"token": "heart", "min_scor": 0.5},
            "min_scor: not a parameter of this route: check its spelling",
        ),
        (
            "search",
            {"queries": [{"vector": [1.0] * 50, "k": 3}]},
            "queries.0.k: not a field of queries.0: check its spelling",
        ),
        ("similarity", {"pairs": [["red"]]}, "pairs.0: List should have at least 2 items, not 1"),
        ("similarity", {"pairs": [["red", "blue", "green"]]}, "pairs.0: List should have at most 2 items, not 3"),
        ("search", {"vector": [1e39] + [1.0] * 49}, "vector.0: vector values must fit in float32 (|x| <= 3.403e+38)"),
    ],
)
def test_validation_messages_say_what_to_do(api: TestClient, path: str, body: dict, message: str) -> None:
    error = envelope(api.post(f"{T}/{path}", json=body), 422, "invalid_request")
    assert error["message"] == message and error["details"][0]["message"] == message.split(": ", 1)[1], error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "body: the request has no body: send a JSON object"),
        ('"heart"', "body: Input should be a JSON object ({...})"),
        ('["heart"]', "body: Input should be a JSON object ({...})"),
        ('{"queries": [7]}', "queries.0: Input should be a JSON object ({...})"),
    ],
)
def test_a_body_that_is_no_object_is_told_to_send_one(api: TestClient, text: str, message: str) -> None:
    error = envelope(post_json(api, f"{T}/search", text), 422, "invalid_request")
    assert error["message"] == message, error


def test_a_vector_beyond_float32_is_worded_alike_alone_and_in_a_batch(api: TestClient) -> None:
    vector = [1.0] * 49 + [-1e39]
    alone = envelope(api.post(f"{T}/search", json={"vector": vector}), 422, "invalid_request")
    (item,) = api.post(f"{T}/search", json={"vectors": [vector]}).json()["results"]
    assert alone["details"][0]["message"] == item["error"]["message"], (alone, item)


def test_malformed_json_and_wrong_top_level(api: TestClient) -> None:
    envelope(post_json(api, f"{T}/neighbors", '{"token": "heart",'), 422, "invalid_request")
    envelope(post_json(api, f"{T}/neighbors", '["heart"]'), 422, "invalid_request")
    envelope(api.get(f"{T}/neighbors"), 422, "invalid_request")  # neither token nor id


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("neighbors", {"queries": ["heart"] * 1025}),
        ("analogy", {"queries": [{"a": "man", "b": "king", "c": "woman"}] * 1025}),
        ("search", {"vectors": [[1.0] * 50] * 1025}),
        ("similarity", {"pairs": [["red", "blue"]] * 1025}),
        ("project", {"tokens": ["red"] * 1025}),
    ],
)
def test_batch_over_max(api: TestClient, path: str, body: dict) -> None:
    error = envelope(api.post(f"{T}/{path}", json=body), 422, "invalid_request")
    assert "1024" in error["message"]


def test_limits_follow_the_settings(small_data_dir: Path) -> None:
    with client_for(data_dir=small_data_dir, max_k=5, max_batch=2, max_body_bytes=2048) as client:
        assert (
            "at most 5"
            in envelope(client.get(f"{T}/neighbors", params={"token": "a", "k": 6}), 422, "invalid_request")["message"]
        )
        assert client.get(f"{T}/neighbors", params={"token": "heart", "k": 5}).status_code == 200
        envelope(client.post(f"{T}/neighbors", json={"queries": ["a", "b", "c"]}), 422, "invalid_request")
        assert client.post(f"{T}/neighbors", json={"queries": ["a", "b"]}).status_code == 200
        envelope(client.post(f"{T}/search", json={"vector": [1.0] * 1000}), 413, "body_too_large")
        schema = client.get("/openapi.json").json()
        k = next(p for p in schema["paths"]["/v1/tables/{table}/neighbors"]["get"]["parameters"] if p["name"] == "k")
        assert k["schema"]["maximum"] == 5


# ---------------------------------------------------------------------------------------------- 413
def test_body_over_the_limit(api: TestClient) -> None:
    big = json.dumps({"vectors": [[0.123456789] * 50] * 8000})
    assert len(big) > 4 << 20
    error = envelope(post_json(api, f"{T}/search", big), 413, "body_too_large")
    assert f"{4 << 20} bytes" in error["message"] and error["limit"] == "max_body_bytes"


def test_chunked_body_over_the_limit(api: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the server counts the bytes as they arrive
        yield b'{"vectors": ['
        for _ in range(100_000):
            yield b"[" + b"0.5," * 49 + b"0.5],"
        yield b"[1.0]]}"

    response = api.post(f"{T}/search", content=chunks(), headers={"content-type": "application/json"})
    assert envelope(response, 413, "body_too_large")["limit"] == "max_body_bytes"  # as for a declared length


# ---------------------------------------------------------------------------------------------- 503
def test_a_table_not_served_says_why(tmp_path: Path, small_data_dir: Path, lee_docs: Lee) -> None:
    """A documents table whose encoder table is not served, or a table asked for that is not in the data
    directory: the 503 says why (a table's refused files are the server log's)."""
    data = tmp_path / "data"
    import_texts(data, small_data_dir, lee_docs, tmp_path / "lee-text.jsonl")
    with client_for(data_dir=data, tables=["lee", "nope"]) as client:
        error = envelope(client.post("/v1/tables/lee/search", json={"text": "budget", "k": 3}), 503, "not_ready")
        assert error["message"] == (
            "table 'lee' is not loaded: its documents were embedded with table 'small', which is not loaded; "
            "serve that table too (it embeds the query texts)"
        )
        error = envelope(client.get("/v1/tables/nope"), 503, "not_ready")
        assert error["message"] == "table 'nope' is not loaded: no table of that name in the data directory"
    with client_for(data_dir=data) as client:
        assert client.post("/v1/tables/lee/search", json={"text": "budget", "k": 3}).status_code == 200


# ---------------------------------------------------------------------------------------- 401/403/500
def test_admin_key_and_unexpected_errors(small_data_dir: Path) -> None:
    with client_for(data_dir=small_data_dir, api_key="s3cret") as client:
        app = client.app

        @app.get("/v1/admin/ping")
        async def ping(_: AdminDep) -> dict[str, str]:
            return {"pong": "yes"}

        @app.get("/v1/boom")
        async def boom() -> None:
            raise RuntimeError("secret internal detail /etc/passwd")

        envelope(client.get("/v1/admin/ping"), 401, "unauthorized")
        envelope(client.get("/v1/admin/ping", headers={"x-api-key": "wrong"}), 403, "forbidden")
        assert client.get("/v1/admin/ping", headers={"x-api-key": "s3cret"}).json() == {"pong": "yes"}
        logged = logging.StreamHandler(io.StringIO())
        logged.setFormatter(PlainFormatter())
        logging.getLogger("service.errors").addHandler(logged)
        try:
            failure = client.get("/v1/boom", headers={"X-Request-ID": "boom-1"})
        finally:
            logging.getLogger("service.errors").removeHandler(logged)
        error = envelope(failure, 500, "internal")
        assert "secret" not in failure.text and "RuntimeError" not in failure.text
        assert error == {"code": "internal", "message": "internal server error"}
        # The request's id comes back with the 500 too, and the error's log line names it.
        assert failure.headers["x-request-id"] == "boom-1"
        assert "unhandled error on GET /v1/boom request_id=boom-1\n" in logged.stream.getvalue()


# ---------------------------------------------------------------------------------------------- X-Request-ID
def test_a_request_id_comes_back_with_every_answer(api: TestClient) -> None:
    """A valid X-Request-ID is sent back with the answer, a cached one and a refusal alike; a request without one
    is given none."""
    url = f"{T}/neighbors?token=heart&k=4"
    cache = api.app.state.answer_cache
    hits = cache.hits
    for request_id in ("first-0f3c", "second/9e4b"):  # the second one is answered from the cache
        answered = api.get(url, headers={"X-Request-ID": request_id})
        assert answered.status_code == 200 and answered.headers["x-request-id"] == request_id
    assert cache.hits == hits + 1
    assert "x-request-id" not in api.get(url).headers
    named = {"X-Request-ID": "~" * 128}
    assert envelope(api.get(f"{T}/neighbors?token=hearrt", headers=named), 404, "unknown_token")
    too_large = api.post(f"{T}/search", content=b" " * ((4 << 20) + 1), headers=named)
    assert envelope(too_large, 413, "body_too_large") and too_large.headers["x-request-id"] == "~" * 128
    openai = api.post("/v1/embeddings", json={}, headers=named)
    assert openai.status_code == 400 and openai.headers["x-request-id"] == "~" * 128


@pytest.mark.parametrize("request_id", [b"", b"x" * 129, b"a b", b"a\tb", b"a\x01b", b"a\x7fb", "café".encode()])
def test_an_invalid_request_id_is_ignored(api: TestClient, request_id: bytes) -> None:
    """Only 1 to 128 visible ASCII characters are an id: any other value is not sent back."""
    answered = api.get(f"{T}/neighbors?token=heart&k=4", headers={"X-Request-ID": request_id})
    assert answered.status_code == 200 and "x-request-id" not in answered.headers


# ---------------------------------------------------------------------------------------------- OpenAPI
def test_openapi_lists_error_responses_for_every_operation(api: TestClient) -> None:
    schema = api.get("/openapi.json").json()
    operations = [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]
    table = "/v1/tables/{table}"
    assert {(path, method) for path, method, _ in operations} == {
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/v1/tables", "get"),
        ("/v1/limits", "get"),
        (table, "get"),
        (f"{table}/tokens/{{token}}", "get"),
        (f"{table}/ids/{{id}}", "get"),
        (f"{table}/tokenize", "post"),
        (f"{table}/contextual", "post"),
        (f"{table}/neighbors", "get"),
        (f"{table}/neighbors", "post"),
        (f"{table}/similarity", "get"),
        (f"{table}/similarity", "post"),
        (f"{table}/analogy", "post"),
        (f"{table}/analogy/rows", "post"),
        (f"{table}/search", "post"),
        (f"{table}/documents/{{document}}", "get"),
        (f"{table}/documents", "post"),
        (f"{table}/documents/get", "post"),
        (f"{table}/documents/scroll", "post"),
        (f"{table}/documents/delete", "post"),
        (f"{table}/documents/{{document}}", "delete"),
        (f"{table}/fields", "get"),
        (f"{table}/project", "post"),
        (f"{table}/doesnt-match", "post"),
        (f"{table}/rank", "get"),
        (f"{table}/rank", "post"),
        (f"{table}/closer-than", "get"),
        (f"{table}/n-similarity", "post"),
        ("/v1/compare", "get"),
        ("/v1/compare", "post"),
        (f"{table}/map", "get"),
        (f"{table}/map/info", "get"),
        (f"{table}/map/labels", "get"),
        (f"{table}/map/colours/{{column}}", "get"),
        (f"{table}/export", "post"),
        (f"{table}/embed", "post"),
        ("/v1/embeddings", "post"),
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
        ("/v1/explorer", "get"),
        ("/v1/admin/reload", "post"),
    }
    envelope_ref = "#/components/schemas/ErrorResponse"
    for path, method, op in operations:
        responses = op["responses"]
        assert "500" in responses, (path, method)
        if path.startswith("/v1/tables/{table}"):
            expected = {"404", "413", "422", "503"}
            assert expected <= set(responses), (path, method, sorted(responses))
        for status, response in responses.items():
            if status != "200":
                openai_paths = ("/v1/embeddings", "/v1/models", "/v1/models/{model}")
                ref = "#/components/schemas/OpenAIErrorResponse" if path in openai_paths else envelope_ref
                assert response["content"]["application/json"]["schema"]["$ref"] == ref, (path, status)
    assert "503" in schema["paths"]["/readyz"]["get"]["responses"]
    query = {
        (path, p["name"]): p["required"]
        for path in (f"{table}/neighbors", f"{table}/similarity")
        for p in schema["paths"][path]["get"]["parameters"]
        if p["in"] == "query"
    }
    neighbors = {"token", "id", "k", "exact", "restrict", "skip_special", "whole_words_only", "compose"}
    assert {name for path, name in query if path.endswith("neighbors")} == neighbors
    assert query[(f"{table}/similarity", "a")] and query[(f"{table}/similarity", "b")]
    error_schema = schema["components"]["schemas"]["ErrorResponse"]
    assert error_schema["required"] == ["error"] and error_schema["properties"]["error"]["$ref"].endswith("/ErrorBody")
    assert schema["components"]["schemas"]["ErrorBody"]["required"] == ["code", "message"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]  # 422 uses the envelope too


def readme_operations() -> set[tuple[str, str]]:
    """The (method, path) of each operation in README.md's table of the API, every path parameter as ``{}``:
    ``.../x`` is ``/v1/tables/{table}/x``, and a bare method is the path before it in its row."""
    rows = (REPO / "README.md").read_text().split("| Method and path |")[1].split("\n\n")[0].splitlines()[2:]
    operations = set()
    for row in rows:
        path = ""
        for item in re.findall(r"`([^`]*)`", row.split("|")[1]):
            method, _, named = item.partition(" ")
            if method in ("GET", "POST", "DELETE"):
                path = named.split("?")[0].replace("...", "/v1/tables/{table}") if named else path
                operations.add((method.lower(), re.sub(r"\{\w+\}", "{}", path)))
    return operations


def test_the_readme_table_lists_every_operation(api: TestClient) -> None:
    """README.md's table of the API names every operation of the OpenAPI document, and nothing else but
    ``/metrics`` (Prometheus', not in the document)."""
    paths = api.get("/openapi.json").json()["paths"]
    schema = {(method, re.sub(r"\{\w+\}", "{}", path)) for path, item in paths.items() for method in item}
    assert readme_operations() == schema | {("get", "/metrics")}


def readme_curls() -> set[tuple[str, str]]:
    """The (method, path) of each ``curl`` in README.md's examples (``$ `` lines, continued after ``\\``): the
    method of ``-X``, else POST with a body (``-d``), else GET."""
    text = (REPO / "README.md").read_text().replace("\\\n", " ")
    calls = set()
    for command in re.findall(r"^\$ (.*)", text, flags=re.MULTILINE):
        for call in command.split("curl ")[1:]:
            method = re.search(r"-X (\w+)", call)
            verb = method.group(1) if method else "POST" if re.search(r"\s-d\s", call) else "GET"
            url = re.search(r"(?:127\.0\.0\.1|localhost):8000(/[^\s'\"?]*)", call)
            if url:
                calls.add((verb.lower(), url.group(1)))
    return calls


def test_the_readme_has_a_curl_for_every_operation(api: TestClient) -> None:
    """Every operation of the OpenAPI document has a ``curl`` example in README.md."""
    paths = api.get("/openapi.json").json()["paths"]
    calls = readme_curls()
    missing = []
    for path, item in paths.items():
        template = re.escape(path).replace(r"\{document\}", ".+")  # a document id may hold "/"
        pattern = re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", template) + "$")
        for method in item:
            if not any(verb == method and pattern.match(url) for verb, url in calls):
                missing.append(f"{method.upper()} {path}")
    assert not missing, missing


def test_query_routes_check_path_parameters_as_fastapi_does(api: TestClient) -> None:
    """GET neighbours and similarity skip FastAPI's parameter solving (``service.http.fastroute.QueryRoute``); a
    bad table name gets the very error a route that FastAPI validates gives."""
    for name in (".hidden", "a" * 65):
        search = api.post(f"/v1/tables/{name}/search", json={"vector": [1.0] * 50})
        expected = envelope(search, 422, "invalid_request")
        for path in ("neighbors?token=heart", "similarity?a=red&b=blue"):
            assert envelope(api.get(f"/v1/tables/{name}/{path}"), 422, "invalid_request") == expected


def test_query_route_refuses_parameters_it_would_not_check() -> None:
    router = APIRouter(route_class=QueryRoute)
    with pytest.raises(TypeError, match=r"takes \(request, <path parameters>\) only"):

        @router.get("/x/{table}")
        @query_params(NeighborsParams)
        async def endpoint(request: Request, table: str, k: int = 1) -> Response:
            return Response()


def test_query_route_passes_the_request_by_its_name() -> None:
    router = APIRouter(route_class=QueryRoute)

    @router.get("/x/{table}")
    @query_params(NeighborsParams)
    async def endpoint(table: str, incoming: Request) -> Response:
        return Response(f"{table} {incoming.url.query}")

    app = FastAPI()
    app.router.routes.extend(router.routes)
    with TestClient(app) as client:
        assert client.get("/x/small?token=heart").text == "small token=heart"


def no_descriptor(*args: object, **kwargs: object) -> Any:
    """A file opened with no descriptor left (a documents table's write log, under ulimit -n and many
    connections)."""
    raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), "/data/.writes/lee.log")


def no_memory(*args: object, **kwargs: object) -> Any:
    """An array numpy cannot allocate: its MemoryError, not an OSError."""
    return np.empty(1 << 62, dtype=np.uint8)  # 4 EiB: more than any address space


def no_access(*args: object, **kwargs: object) -> Any:
    raise OSError(errno.EACCES, os.strerror(errno.EACCES), "/data/.writes/lee.log")


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/tables/small/neighbors?token=heart&k=3", None),  # a hot route: its own errors, by the handlers
        ("POST", "/v1/tables/small/search", {"vector": [0.1] * 50, "k": 3, "exact": True}),
    ],
)
@pytest.mark.parametrize(
    ("run", "short", "logged"),
    [
        (no_descriptor, "file descriptors (Too many open files)", "[Errno 24] Too many open files: '/data/.writes/"),
        (no_memory, "memory (Cannot allocate memory)", "Unable to allocate 4.00 EiB"),
    ],
)
def test_a_request_short_of_descriptors_or_memory_is_503_overloaded(
    api: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    run: Any,
    short: str,
    logged: str,
) -> None:
    """No descriptor or memory left for a request is the worker's passing want: 503 with Retry-After and one log
    line, not a 500 and a traceback; other system errors stay unexpected (500)."""
    from index.engine import table

    with monkeypatch.context() as patched, caplog.at_level(logging.WARNING):
        patched.setattr(table.Table, "run", run)
        answer = api.request(method, path, json=body)
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"
    assert answer.json()["error"] == {
        "code": "overloaded",
        "message": f"the server is short of {short}: retry in a moment",
    }
    assert f"answered 503: {logged}" in caplog.text
    assert "Traceback" not in caplog.text
    with monkeypatch.context() as patched:
        patched.setattr(table.Table, "run", no_access)
        assert api.request(method, path, json=body).status_code == 500
