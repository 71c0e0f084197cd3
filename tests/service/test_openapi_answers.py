"""The OpenAPI document as a client generated from it reads it: the statuses and their error codes each operation
declares, and real answers of the documents tables (single, batch, per-item errors) valid by the document."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.errors import ERRORS
from service.http.openai_errors import is_openai
from service.settings import Settings
from tests.minilm import MINILM, ST
from tests.service import real_server
from tests.service.conftest import client_for
from tests.service.documented import check_answer

T = "/v1/tables/{table}"


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, item in document["paths"].items() for method, op in item.items()]


def test_every_operation_but_the_liveness_probe_declares_overloaded(api: TestClient) -> None:
    """A worker at its connections' limit answers every path 503 ``overloaded`` with Retry-After, except
    /healthz, which it still answers alive; the OpenAI paths name their codes as they send them."""
    document = api.get("/openapi.json").json()
    for path, method, op in operations(document):
        responses = op["responses"]
        if path == "/healthz":
            assert "503" not in responses
            continue
        assert "`overloaded`" in responses["503"]["description"], (path, method)
        assert responses["503"]["headers"]["Retry-After"]["schema"] == {"type": "integer"}, (path, method)
    model = document["paths"]["/v1/models/{model}"]["get"]["responses"]
    assert model["404"]["description"].startswith("OpenAI's error shape; `model_not_found`: No loaded table")
    assert "`unknown_table`" not in model["404"]["description"]


# Each operation's operationId, which a client generated from the document names its methods after: a route's
# function renamed renames it.
OPERATION_IDS = """
GET    /v1/tables/{table}/neighbors            neighbors_get_v1_tables__table__neighbors_get
POST   /v1/tables/{table}/neighbors            neighbors_post_v1_tables__table__neighbors_post
GET    /v1/tables/{table}/similarity           similarity_get_v1_tables__table__similarity_get
POST   /v1/tables/{table}/similarity           similarity_post_v1_tables__table__similarity_post
POST   /v1/tables/{table}/analogy              analogy_v1_tables__table__analogy_post
POST   /v1/tables/{table}/analogy/rows         analogy_rows_v1_tables__table__analogy_rows_post
POST   /v1/tables/{table}/search               search_v1_tables__table__search_post
GET    /v1/tables/{table}/documents/{document} get_document_v1_tables__table__documents__document__get
DELETE /v1/tables/{table}/documents/{document} delete_one_v1_tables__table__documents__document__delete
POST   /v1/tables/{table}/documents            upsert_v1_tables__table__documents_post
POST   /v1/tables/{table}/documents/delete     delete_many_v1_tables__table__documents_delete_post
POST   /v1/tables/{table}/documents/get        get_documents_v1_tables__table__documents_get_post
POST   /v1/tables/{table}/documents/scroll     scroll_documents_v1_tables__table__documents_scroll_post
GET    /v1/tables/{table}/fields               get_fields_v1_tables__table__fields_get
GET    /v1/tables/{table}/tokens/{token}       get_token_v1_tables__table__tokens__token__get
GET    /v1/tables/{table}/ids/{id}             get_id_v1_tables__table__ids__id__get
POST   /v1/tables/{table}/tokenize             tokenize_v1_tables__table__tokenize_post
POST   /v1/tables/{table}/contextual           post_contextual_v1_tables__table__contextual_post
POST   /v1/tables/{table}/project              project_tokens_v1_tables__table__project_post
POST   /v1/tables/{table}/doesnt-match         doesnt_match_v1_tables__table__doesnt_match_post
GET    /v1/tables/{table}/rank                 rank_get_v1_tables__table__rank_get
POST   /v1/tables/{table}/rank                 rank_post_v1_tables__table__rank_post
GET    /v1/tables/{table}/closer-than          closer_than_v1_tables__table__closer_than_get
POST   /v1/tables/{table}/n-similarity         n_similarity_v1_tables__table__n_similarity_post
GET    /v1/compare                             compare_get_v1_compare_get
POST   /v1/compare                             compare_post_v1_compare_post
GET    /v1/tables/{table}/map/info             map_info_v1_tables__table__map_info_get
GET    /v1/tables/{table}/map                  map_points_v1_tables__table__map_get
GET    /v1/tables/{table}/map/labels           map_labels_v1_tables__table__map_labels_get
GET    /v1/tables/{table}/map/colours/{column} map_colours_v1_tables__table__map_colours__column__get
POST   /v1/tables/{table}/export               export_rows_v1_tables__table__export_post
GET    /v1/explorer                            explorer_config_v1_explorer_get
GET    /v1/tables                              list_tables_v1_tables_get
GET    /v1/limits                              get_limits_v1_limits_get
GET    /v1/tables/{table}                      get_table_v1_tables__table__get
GET    /healthz                                healthz_healthz_get
GET    /readyz                                 readyz_readyz_get
POST   /v1/admin/reload                        reload_v1_admin_reload_post
POST   /v1/tables/{table}/embed                embed_v1_tables__table__embed_post
POST   /v1/embeddings                          create_embeddings_v1_embeddings_post
GET    /v1/models                              list_models_v1_models_get
GET    /v1/models/{model}                      get_model_v1_models__model__get
"""


def test_the_operation_ids_are_as_clients_know_them(api: TestClient) -> None:
    document = api.get("/openapi.json").json()
    found = sorted((method.upper(), path, op["operationId"]) for path, method, op in operations(document))
    assert found == sorted(tuple(line.split()) for line in OPERATION_IDS.strip().splitlines())


def test_a_schema_of_fields_is_their_model_for_a_generated_client(api: TestClient) -> None:
    """A schema with ``properties`` and its own ``oneOf``, ``anyOf`` or ``not`` is read by openapi-python-client as a
    union of those fragments: its models (``SearchRequestType0``, ...) had no ``k``, ``vector`` or ``text``, sent
    only as untyped extras. The request forms sit in ``allOf`` instead, beside the fields, in every schema."""
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    beside = [
        (name, key) for name, s in schemas.items() if "properties" in s for key in ("oneOf", "anyOf", "not") if key in s
    ]
    assert beside == []
    forms = [name for name, s in schemas.items() if "properties" in s and "allOf" in s]
    assert {"NeighborsRequest", "SearchRequest", "ProjectRequest", "DocumentQuery"} <= set(forms)


@pytest.fixture(scope="module")
def documents(documents_server: real_server.Server) -> tuple[str, dict[str, Any]]:
    base = documents_server.base
    return base, real_server.HTTP.get(f"{base}/openapi.json").json()


VECTOR = [0.1] * 50
LIMIT = Settings.model_fields["max_body_bytes"].default
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
    ("POST", f"{T}/documents/get", "/v1/tables/lee/documents/get", {"ids": ["lee-003", "nosuch"], "vector": True}, 200),
    ("POST", f"{T}/documents/get", "/v1/tables/small/documents/get", {"ids": ["king"]}, 422),
    ("POST", f"{T}/documents/scroll", "/v1/tables/lee/documents/scroll", {"filter": {"lang": "en"}, "limit": 2}, 200),
    ("POST", f"{T}/documents/scroll", "/v1/tables/small/documents/scroll", {}, 422),
    ("GET", f"{T}/fields", "/v1/tables/lee/fields", None, 200),
    ("GET", f"{T}/fields", "/v1/tables/small/fields", None, 422),
    ("POST", f"{T}/documents", "/v1/tables/lee/documents", {"documents": []}, 403),  # a read-only server
    ("POST", f"{T}/similarity", "/v1/tables/small/similarity", {"pairs": [["king", "queen"], ["king", "zqx"]]}, 200),
    ("POST", f"{T}/rank", "/v1/tables/small/rank", {"pairs": [["king", "queen"], ["king", "zqx"]]}, 200),
    ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "nosuch", "input": "king"}, 404),
    ("POST", "/v1/embeddings", "/v1/embeddings", {"model": "small", "input": "king", "encoding_format": "base64"}, 200),
    ("GET", f"{T}/fields", "/v1/tables/lee/fields", {"pad": " " * LIMIT}, 413),  # a GET's body over the limit too
    ("GET", "/v1/models", "/v1/models", {"pad": " " * LIMIT}, 400),  # OpenAI's status there
]


@pytest.mark.parametrize(("method", "template", "path", "body", "status"), ANSWERS, ids=[a[2] for a in ANSWERS])
def test_answers_are_as_documented(
    documents: tuple[str, dict[str, Any]], method: str, template: str, path: str, body: Any, status: int
) -> None:
    base, document = documents
    response = real_server.HTTP.request(method, base + path, json=body)
    assert response.status_code == status, response.text
    check_answer(document, method, template, response)


# Requests as a generated client sends them: every field its schema gives a default, sent with that default.
DEFAULTED = [  # (path asked, schema, body)
    ("/v1/tables/small/search", "SearchRequest", {"vector": VECTOR, "k": 2}),
    ("/v1/tables/lee/search", "SearchRequest", {"vector": VECTOR, "k": 2}),
    ("/v1/tables/lee/search", "SearchRequest", {"text": "election", "k": 2, "mode": "keyword"}),
    ("/v1/tables/small/project", "ProjectRequest", {"tokens": ["king", "queen", "man", "woman"]}),
    (
        "/v1/tables/small/project",
        "ProjectRequest",
        {"tokens": ["king", "queen"], "method": "axes", "x_axis": ["man", "woman"]},
    ),
    ("/v1/tables/small/neighbors", "NeighborsRequest", {"token": "king", "k": 2}),
    ("/v1/tables/small/analogy", "AnalogyRequest", {"a": "man", "b": "king", "c": "woman", "k": 2}),
]


@pytest.mark.parametrize(("path", "schema", "body"), DEFAULTED, ids=[f"{d[0]}:{next(iter(d[2]))}" for d in DEFAULTED])
def test_the_defaults_a_schema_declares_may_be_sent(
    documents: tuple[str, dict[str, Any]], path: str, schema: str, body: dict[str, Any]
) -> None:
    """openapi-python-client's models send each field's declared default: ``rrf_k: 60`` (a hybrid search's), ``mode:
    "vector"`` to a table of words and ``seed: 42`` with method pca were refused, 422. A field whose default holds
    only where it belongs declares none (its description names it); every default declared is taken."""
    base, document = documents
    properties = document["components"]["schemas"][schema]["properties"]
    defaults = {name: p["default"] for name, p in properties.items() if "default" in p and name not in body}
    response = real_server.HTTP.post(base + path, json={**body, **defaults})
    assert response.status_code == 200, (defaults, response.text)
    assert response.json() == real_server.HTTP.post(base + path, json=body).json()


def test_the_fields_of_real_answers_are_declared(documents: tuple[str, dict[str, Any]]) -> None:
    """A generated client types only the fields a schema names, and keeps the others as untyped extras: a table's
    summary carried ``recall_at_10``, ``source``, ``built_at`` and more, a search's neighbours with ``include``
    ``row`` and ``vector``, doesnt-match's words their ``match``, and the error envelope its ``suggestions``,
    ``token``, ``limit``, ``details``, an unknown document's ``ids`` and ``count``, none of them in their schemas."""
    base, document = documents
    schemas = document["components"]["schemas"]
    post = real_server.HTTP.post
    search = post(f"{base}/v1/tables/small/search", json={"vector": VECTOR, "k": 2, "include": ["row", "vector"]})
    odd = post(f"{base}/v1/tables/small/doesnt-match", json={"words": ["king", "queen", "banana"]}).json()
    batch = post(f"{base}/v1/tables/small/similarity", json={"pairs": [["king", "qeen"]]}).json()
    documents = post(f"{base}/v1/tables/lee/search", json={"queries": [{"id": "nosuch"}], "k": 1}).json()
    errors = [
        post(f"{base}/v1/tables/lee/search", json={"id": "nosuch", "k": 1}),
        real_server.HTTP.get(f"{base}/v1/tables/small/neighbors", params={"token": "qeen"}),
        real_server.HTTP.get(f"{base}/v1/tables/small/neighbors", params={"token": "king", "k": 5000}),
        post(f"{base}/v1/tables/small/neighbors", json={"token": "king", "k": True}),
    ]
    found = {
        "TableSummary": real_server.HTTP.get(f"{base}/v1/tables").json()["tables"],
        "Neighbor": search.json()["neighbors"],
        "RankedWord": [odd["doesnt_match"], *odd["ranking"]],
        "ItemError": [*batch["errors"], documents["results"][0]["error"]],
        "ErrorBody": [error.json()["error"] for error in errors],
    }
    undeclared = {
        name: {key for answer in answers for key in answer} - set(schemas[name]["properties"])
        for name, answers in found.items()
    }
    assert undeclared == {name: set() for name in found}
    assert {"suggestions", "limit", "details"} <= {key for error in found["ErrorBody"] for key in error}


def test_the_fields_of_model_tables_answers_are_declared(minilm_api: TestClient, minilm_st_dir: Path) -> None:
    """As for the documents tables: a model table's summary carried ``model`` and a transformer table's
    ``transformer``, and a word composed of its pieces (``compose: "mean"``) its ``compose`` and ``tokens``,
    outside their schemas."""
    schemas = minilm_api.get("/openapi.json").json()["components"]["schemas"]
    composed = minilm_api.get(f"/v1/tables/{MINILM}/neighbors", params={"token": "unbelievableness", "compose": "mean"})
    with client_for(data_dir=minilm_st_dir) as transformer:
        summaries = [minilm_api.get(f"/v1/tables/{MINILM}").json(), transformer.get(f"/v1/tables/{ST}").json()]
    found = {"TableSummary": summaries, "QueryInfo": [composed.json()["query"]]}
    undeclared = {
        name: {key for answer in answers for key in answer} - set(schemas[name]["properties"])
        for name, answers in found.items()
    }
    assert undeclared == {"TableSummary": set(), "QueryInfo": set()}
    assert {"model", "transformer"} <= {key for summary in summaries for key in summary}
    assert {"compose", "tokens"} <= set(found["QueryInfo"][0])


def read_as(schemas: dict[str, Any], schema: dict[str, Any], answer: dict[str, Any]) -> str:
    """The component a generated client reads ``answer`` as: of a union, the first whose required fields it has."""
    for member in schema.get("anyOf", [schema]):
        if "$ref" in member:
            name = member["$ref"].rsplit("/", 1)[1]
            if set(schemas[name].get("required", [])) <= set(answer):
                return name
    return "an untyped object"


def test_a_query_is_read_as_its_own_schema(documents: tuple[str, dict[str, Any]]) -> None:
    """A union whose first member reads any object cannot be told apart: a positive/negative neighbours query and
    an analogy's ``{a, b, c, method}`` were read as QueryInfo (every field optional), their rows untyped extras,
    and similarity's, rank's and closer-than's ``{a, b}`` were untyped objects."""
    base, document = documents
    schemas = document["components"]["schemas"]
    get, post = real_server.HTTP.get, real_server.HTTP.post
    table = f"{base}/v1/tables/small"
    answers = {
        "NeighborsResponse": [
            get(f"{table}/neighbors", params={"token": "king", "k": 1}),
            post(f"{table}/neighbors", json={"positive": ["king", "woman"], "negative": ["man"], "k": 1}),
        ],
        "AnalogyResponse": [post(f"{table}/analogy", json={"a": "man", "b": "king", "c": "woman", "k": 1})],
        "SimilarityResponse": [get(f"{table}/similarity", params={"a": "king", "b": "queen"})],
        "RankResponse": [get(f"{table}/rank", params={"a": "king", "b": "queen"})],
        "CloserThanResponse": [get(f"{table}/closer-than", params={"a": "king", "b": "queen"})],
    }
    found = []
    for name, responses in answers.items():
        for response in responses:
            query = response.json()["query"]
            read = read_as(schemas, schemas[name]["properties"]["query"], query)
            declared = set(schemas[read]["properties"]) if read in schemas else set()
            found.append((name, read, sorted(set(query) - declared)))
    assert found == [
        ("NeighborsResponse", "QueryInfo", []),
        ("NeighborsResponse", "ExamplesQuery", []),
        ("AnalogyResponse", "AnalogyQueryInfo", []),
        ("SimilarityResponse", "PairQuery", []),
        ("RankResponse", "PairQuery", []),
        ("CloserThanResponse", "PairQuery", []),
    ]


def test_a_front_declares_its_shards_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A front (EMBEDDING_SHARDS) answers 503 ``shard_unavailable`` for a shard that refuses the connection and 504
    ``shard_timeout`` for one that does not answer in time: its document declares both on the table operations."""
    refusing = f"http://127.0.0.1:{real_server.free_port()}/v1/tables/shard-000"  # nothing listens
    with socket.socket() as silent:  # listens, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        mute = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/tables/shard-000"
        shards = {"refusing": [[refusing]], "mute": [[mute]]}
        monkeypatch.setenv("EMBEDDING_SHARDS", json.dumps(shards))
        monkeypatch.setenv("EMBEDDING_SHARD_TIMEOUT", "0.5")
        with client_for(data_dir=tmp_path) as client:
            document = client.get("/openapi.json").json()
            answers = [client.post(f"/v1/tables/{name}/search", json={"vector": [0.5] * 4}) for name in shards]
    assert [a.json()["error"]["code"] for a in answers] == ["shard_unavailable", "shard_timeout"]
    for answer in answers:
        check_answer(document, "POST", f"{T}/search", answer)
    for path, _, op in operations(document):
        if path.startswith(T):
            assert "`shard_unavailable`" in op["responses"]["503"]["description"], path
            assert op["responses"]["504"]["description"].startswith("`shard_timeout`"), path


def test_the_error_schemas_name_every_code(api: TestClient) -> None:
    """A client reads the codes an error can carry from the envelope's schema, a batch item's error's too."""
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    for name in ("ErrorBody", "ItemError"):
        described = schemas[name]["properties"]["code"]["description"]
        assert all(f" {code}," in described or f" {code} (" in described for code in ERRORS), name
    assert "model_not_found" in schemas["OpenAIErrorBody"]["properties"]["code"]["description"]


def test_the_description_names_both_error_shapes(api: TestClient) -> None:
    description = api.get("/openapi.json").json()["info"]["description"]
    assert '`{"error": {"code", "message", ...}}`, except on the OpenAI-compatible' in description
    assert '`{"error": {"message", "type", "param", "code"}}`' in description


def test_a_body_over_the_limit_is_a_declared_413_on_every_operation(documents: tuple[str, dict[str, Any]]) -> None:
    """The body limit (the server's default) answers before any route, whatever the method, the admin routes' too
    (which read no body); on the OpenAI-compatible paths with OpenAI's 400."""
    base, document = documents
    refusal = {path: "400" if is_openai(path) else "413" for path, _, _ in operations(document)}
    assert [(method, path) for path, method, op in operations(document) if refusal[path] not in op["responses"]] == []
    response = real_server.HTTP.post(f"{base}/v1/admin/reload", content=b" " * (LIMIT + 1))
    assert response.json()["error"]["code"] == "body_too_large"
    check_answer(document, "POST", "/v1/admin/reload", response)
