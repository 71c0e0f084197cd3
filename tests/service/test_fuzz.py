"""Schemathesis against the app's own OpenAPI document, in process (ASGI), on the 20,000-row GloVe table.

Every operation, every default check, schemathesis' coverage phase (the schema's boundaries, missing and extra
parts, unsupported methods: about a hundred requests per operation) and fuzzing phase (``MAX_EXAMPLES`` random
valid and invalid requests per operation), seeded: no 5xx, every status documented, every response matching its
schema, schema-valid requests accepted and schema-invalid ones refused.

Two things the fuzzer is told, as a client would know them:

- the table names: the ``table`` path parameter lists the loaded tables (a client reads them from GET
  /v1/tables), so valid requests reach the query engine; invalid ones still get every other name;
- what the schema cannot say: a few valid-looking requests depend on what the table holds (its dimension, whether
  it has a tokenizer, which rows tokens resolve to) or pair query parameters ("token or id"); for those
  operations a 422 with one of the reasons below counts as accepting the request's form.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import jsonschema
import pytest
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, settings
from pydantic import BaseModel, ValidationError
from schemathesis import CheckContext
from schemathesis.python.asgi import ASGIClient
from schemathesis.specs.openapi.checks import allow_header_conformance, positive_data_acceptance

from service.app import create_app
from service.http.openai_errors import is_openai
from service.schemas.analogy import AnalogyRequest, AnalogyRowsRequest
from service.schemas.common import Whole
from service.schemas.diagnostics import DoesntMatchRequest, NSimilarityRequest
from service.schemas.map import ExportRow
from service.schemas.neighbors import NeighborsQuery, NeighborsRequest
from service.schemas.search import DocumentQuery, SearchRequest
from service.settings import Settings

TABLE = "small"
T = "/v1/tables/{table}"
NO_TOKENIZER = "has no tokenizer"  # compose=mean and tokenize on a table of words
NO_WORDS = ("no word of it is known", "has no words to embed", "has no known token", "pools to a zero vector")
CLS = "cls pooling is a transformer model's"  # pooling cls on a table of words
CONTENT_422 = {
    f"GET {T}/neighbors": ("give exactly one of token or id", NO_TOKENIZER),
    # positive and negative tokens whose mean is zero; compose beside an item's positive/negative lists
    f"POST {T}/neighbors": (NO_TOKENIZER, "cancel out", "compose is for token queries"),
    f"GET {T}/similarity": (NO_TOKENIZER,),
    f"POST {T}/similarity": (NO_TOKENIZER,),
    f"POST {T}/tokenize": (NO_TOKENIZER,),
    f"POST {T}/contextual": ("not a transformer table",),  # the fuzzed table is a table of words
    # document ids, filters and fields on a table of words; a page past max_k (offset + k)
    f"POST {T}/search": ("dimensions", "zero vector", "only for documents tables", "offset + k must be at most"),
    f"GET {T}/documents/{{document}}": ("not documents",),
    f"POST {T}/documents/get": ("not documents",),
    f"POST {T}/documents/scroll": ("not documents",),
    f"GET {T}/fields": ("not documents",),
    f"POST {T}/project": ("at least two distinct", "distinct tokens, got"),  # t-SNE and UMAP need 4
    # a and b resolve to the same row (e.g. "King" and "king"); an expected answer that is a, b or c, or past restrict
    f"POST {T}/analogy": ("offset b - a is zero", "the expected word "),
    # the words' rows of a shard's part of an analogy: the table's length, unit rows, a b + c - a with a direction
    f"POST {T}/analogy/rows": ("values each", "unit rows", "has no direction"),
    f"GET {T}/map": ("t-SNE maps are off",),  # method=tsne on a server without EMBEDDING_MAP_TSNE_ROWS
    f"GET {T}/map/info": ("t-SNE maps are off",),
    f"GET {T}/map/colours/{{column}}": ("no colour column",),  # the table has no metadata column of that name
    # a text without a known word; pooling sif on a table without its component, cls on a table that is no
    # transformer; dimensions other than the table's
    f"POST {T}/embed": (*NO_WORDS, "has no SIF component", CLS),
    "POST /v1/embeddings": (*NO_WORDS, "has no SIF", "dimensions must be", CLS),
}
MAX_EXAMPLES = 25  # per operation and phase: the fuzzing on top of the coverage phase's cases


def accepts_valid_requests(ctx: CheckContext, response: Any, case: Any) -> bool | None:
    """schemathesis' positive_data_acceptance, except the documented content-dependent 422s above (OpenAI's 400s on
    its paths)."""
    refused = 400 if is_openai(case.operation.path) else 422
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code != refused:
        return positive_data_acceptance(ctx, response, case)
    message = response.json()["error"]["message"]
    reasons = CONTENT_422.get(case.operation.label, ())
    assert any(reason in message for reason in reasons), f"{case.operation.label}: valid request refused: {message}"
    return None


@pytest.fixture
def api_schema(small_data_dir: Path, request: pytest.FixtureRequest) -> Any:
    # schemathesis 4.32's lazy loader reads the node's ``_nodeid``, an attribute pytest 9 no longer has.
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid
    app = create_app(Settings(data_dir=small_data_dir, api_key="fuzz-admin-key-0123456789"))
    document = copy.deepcopy(app.openapi())
    for item in document["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] in ("table", "model"):
                    parameter["schema"] = {"type": "string", "enum": [TABLE]}
    schema = schemathesis.openapi.from_dict(document)
    schema.app = app  # requests go to the app in process (ASGI), which schemathesis starts with its lifespan
    schema.location = "/openapi.json"
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")
CLIENTS: dict[int, ASGIClient] = {}  # the app's id -> the one in-process client that sends all its cases


def client_of(app: Any) -> ASGIClient:
    """One client for every case instead of one per case; it reads no proxy settings from the environment
    (``trust_env``), which ``requests`` would do twice for every request. The app sets no cookies to carry over."""
    if id(app) not in CLIENTS:
        CLIENTS.clear()
        CLIENTS[id(app)] = ASGIClient(app).__enter__()  # entered: the app's lifespan runs, as for a client a case
        CLIENTS[id(app)].trust_env = False
    return CLIENTS[id(app)]


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
def test_api_conforms_to_its_openapi_document(case: Any) -> None:
    excluded = [positive_data_acceptance]
    if case.operation.label in (f"POST {T}/documents/{name}" for name in ("delete", "get", "scroll")):  # also the
        excluded.append(allow_header_conformance)  # path of a document whose id is "delete", "get" or "scroll": its
        # GET and DELETE are rightly in Allow
    response = case.call_and_validate(
        session=client_of(case.operation.app), excluded_checks=excluded, additional_checks=[accepts_valid_requests]
    )
    assert response.status_code < 500, response.text
    if response.status_code >= 400:  # every error, whatever the request, is the envelope (OpenAI's on its paths)
        error = response.json()["error"]
        openai = is_openai(case.operation.path) and isinstance(error["type"], str)  # code null where OpenAI has none
        assert isinstance(error["code"], str) or (openai and error["code"] is None), error
        assert isinstance(error["message"], str) and error["message"]
        assert "Traceback" not in response.text


@pytest.fixture(scope="module")
def app(small_data_dir: Path) -> Any:
    """An app over the small table whose OpenAPI document the tests below read (FastAPI makes it once per app)."""
    return create_app(Settings(data_dir=small_data_dir))


def test_every_operation_is_fuzzed(app: Any) -> None:
    """The fuzzer covers the document; the document covers every API route (none is left out of it)."""
    documented = {(m.upper(), p) for p, item in app.openapi()["paths"].items() for m in item}
    api = [route for route in app.router.routes if isinstance(route, APIRoute) and route.include_in_schema]
    routes = {(m, r.path_format) for r in api for m in r.methods}
    assert documented == routes and len(documented) == 42


# Each request model's form fields, with a value each: every combination of them (given or left out) is one body.
FORM_FIELDS: dict[type[BaseModel], dict[str, Any]] = {
    SearchRequest: {
        "vector": [0.1, 0.2],
        "vectors": [[0.1, 0.2]],
        "id": "d1",
        "positive": ["d1"],
        "negative": ["d2"],
        "queries": [[{"vector": [0.1, 0.2]}], [{"text": "red", "mode": "hybrid"}], [{"id": 7, "mode": "vector"}]],
        "text": "red",
        "mode": ["vector", "keyword", "hybrid"],  # a list of choices: each is tried, and leaving it out
        "weights": {"keyword": 2},  # mode hybrid's alone
    },
    DocumentQuery: {"vector": [0.1], "id": 7, "positive": ["d1"], "negative": ["d2"], "text": "red"},
    NeighborsRequest: {"token": "red", "id": 3, "positive": ["red"], "negative": ["blue"], "queries": ["red"]},
    NeighborsQuery: {"token": "red", "id": 3, "positive": ["red"], "negative": ["blue"]},
    AnalogyRequest: {
        "a": "man",
        "b": "king",
        "c": "woman",
        "expect": "queen",
        "queries": [{"a": "man", "b": "king", "c": "woman"}],
    },
    NSimilarityRequest: {"a": ["red"], "b": ["blue"], "queries": [{"a": ["red"], "b": ["blue"]}]},
    DoesntMatchRequest: {"words": ["red", "blue", "dog"], "queries": [["red", "blue", "dog"]]},
    ExportRow: {"token": "red", "id": 3},
}


# Fields of FORM_FIELDS[SearchRequest] given as a list of the values to try (a batch's items: of the request's mode,
# of mode hybrid, of another).
CHOICES = ("mode", "queries")


def bodies(fields: dict[str, Any]) -> list[dict[str, Any]]:
    choices = [[(name, v) for v in (value if name in CHOICES else [value])] for name, value in fields.items()]
    every: list[dict[str, Any]] = [{}]
    for options in choices:
        every = [*every, *({**body, name: value} for body in every for name, value in options)]
    return every


def accepted(model: type[BaseModel], body: dict[str, Any]) -> bool:
    try:
        model.model_validate_json(json.dumps(body))
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("model", list(FORM_FIELDS), ids=lambda m: m.__name__)
def test_the_schema_accepts_what_the_validators_accept_in_every_combination_of_forms(
    app: Any, model: type[BaseModel]
) -> None:
    """The ``oneOf`` forms spell out "exactly one of ...": a body that gives any combination of the form fields
    is valid by the OpenAPI document exactly when the request model accepts it."""
    document = app.openapi()
    validator = jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{model.__name__}", **document})
    every = bodies(FORM_FIELDS[model])
    disagree = [body for body in every if validator.is_valid(body) != accepted(model, body)]
    assert disagree == [], disagree[:5]
    assert 0 < sum(map(validator.is_valid, every)) < len(every)  # some forms are valid, some are not


# ------------------------------------------------------------------------- findings, kept as regressions
def test_whole_numbers_are_integers(api: Any) -> None:
    """JSON Schema counts 5.0 and 1e1 as integers (OpenAPI 3.1): accepted; 1.5, true and "5" are not."""
    for k in (5.0, 1e1):
        response = api.post(f"/v1/tables/{TABLE}/neighbors", json={"token": "heart", "k": k})
        assert response.status_code == 200 and len(response.json()["neighbors"]) == int(k)
    assert len(api.get(f"/v1/tables/{TABLE}/neighbors", params={"token": "heart", "k": "4.0"}).json()["neighbors"]) == 4
    for k in (1.5, True, "5"):
        assert api.post(f"/v1/tables/{TABLE}/neighbors", json={"token": "heart", "k": k}).status_code == 422
    unit = [1.0] + [0.0] * 49
    rows = {"a": unit, "b": unit[1:] + unit[:1], "c": unit[2:] + unit[:2], "expect": unit[3:] + unit[:3]}
    answers = [api.post(f"/v1/tables/{TABLE}/analogy/rows", json={**rows, "leave_out": [row]}) for row in (135, 135.0)]
    assert [answer.status_code for answer in answers] == [200, 200] and answers[0].json() == answers[1].json()


def integers_without_whole(annotation: Any, metadata: list[Any], where: str) -> Iterator[str]:
    """Where in a request body an ``int`` is read without the validator that counts 5.0 as 5."""
    if get_origin(annotation) is Annotated:
        first, *more = get_args(annotation)
        yield from integers_without_whole(first, metadata + more, where)
    elif annotation is int:
        if not any(item is Whole for item in metadata):
            yield where
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, field in annotation.model_fields.items():
            yield from integers_without_whole(field.annotation, list(field.metadata), f"{where}.{name}")
    else:  # a union keeps its own constraints; a list's or a dict's items are their own
        union = get_origin(annotation) in (Union, UnionType)
        for argument in get_args(annotation):
            yield from integers_without_whole(argument, metadata if union else [], f"{where}[]")


def test_every_integer_of_a_request_body_takes_whole_numbers(app: Any) -> None:
    """A finding: ``leave_out: [135.0]`` was refused where ``k: 3.0`` was taken. Every body's integers, at any
    depth, go through the one validator that reads a whole number as JSON Schema does."""
    models = {
        route.body_field.field_info.annotation
        for route in app.routes
        if isinstance(route, APIRoute) and route.body_field
    }
    assert AnalogyRowsRequest in models and len(models) >= 15
    unread = [where for model in models for where in integers_without_whole(model, [], model.__name__)]
    assert unread == []


def test_request_forms_are_in_the_schema(api: Any) -> None:
    """What the validators enforce ("exactly one of ...") is written in the schema as oneOf."""
    components = api.get("/openapi.json").json()["components"]["schemas"]
    for name in ("NeighborsRequest", "NeighborsQuery", "SearchRequest", "AnalogyRequest"):
        assert "oneOf" in components[name]["allOf"][0], name
    assert components["ProjectRequest"]["properties"]["tokens"]["minItems"] == 2
    assert api.post(f"/v1/tables/{TABLE}/project", json={"tokens": ["red"]}).status_code == 422


def test_405_lists_every_method_of_the_path(api: Any) -> None:
    response = api.request("OPTIONS", f"/v1/tables/{TABLE}/neighbors")
    assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD, POST"
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_a_body_that_is_not_utf8_is_a_documented_400(api: Any) -> None:
    response = api.post(
        f"/v1/tables/{TABLE}/search", content=b'{"vector": "\xff\xfe"}', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"
    assert "UTF-8" in response.json()["error"]["message"]
    long_integer = api.post(f"/v1/tables/{TABLE}/search", content=b'{"k": ' + b"9" * 5000 + b"}")
    assert long_integer.status_code == 400 and "4,300 digits" in long_integer.json()["error"]["message"]
    documented = api.get("/openapi.json").json()["paths"][f"{T}/search"]["post"]["responses"]
    assert "400" in documented
