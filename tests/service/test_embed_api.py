"""Text embedding over HTTP: ``POST /v1/tables/{table}/embed`` in process, and the OpenAI-compatible
``POST /v1/embeddings`` through OpenAI's own Python client against the real ``embedding-serve`` process, on
GloVe 6B 50d (SIF, with the Lee background corpus's component), all-MiniLM-L6-v2's token table and a model2vec
model written from it. Every answer is compared with the encoder called directly (``index.engine.encode``)."""

from __future__ import annotations

import base64
import shutil
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from tokenizers import Tokenizer

from index.build.sources import RawTable, read_source
from index.build.writer import build_table
from index.engine.encode import Encoder
from index.engine.table import Table
from service.schemas.bounds import MAX_EMBED_CHARS
from tests.index.engine.test_encode import minilm_rows, token_mean, write_model2vec
from tests.minilm import MINILM
from tests.service import real_server
from tests.service.conftest import client_for

openai = pytest.importorskip("openai")

TEXTS = [
    "The heart pumps blood through the body.",
    "Stock markets fell sharply on Monday as investors sold shares.",
    "☃ snowman in the snow",
]
TABLES = ("glove", "minilm", "m2v")
TOKEN_IDS = (  # what a user of LangChain's OpenAIEmbeddings, which sends them by default, is to change
    "input: token-id input (integers, or lists of them) is not accepted: send text, a string or strings (LangChain's "
    "OpenAIEmbeddings sends tiktoken's token ids unless given check_embedding_ctx_length=False)"
)


@pytest.fixture(scope="module")
def data_dir(
    tmp_path_factory: pytest.TempPathFactory,
    glove_raw: RawTable,
    glove_sif_dir: Path,
    minilm_data_dir: Path,
    m2v_parts: tuple[np.ndarray, ...],
) -> Path:
    """Copies of the session's ``glove`` (every row, exact, with its SIF component) and ``minilm``, beside
    ``glove-5k`` (no SIF component) and ``m2v`` (a model2vec model of MiniLM's rows) built here."""
    root = tmp_path_factory.mktemp("embed-api")
    data = root / "data"
    shutil.copytree(glove_sif_dir / "glove", data / "glove")
    words = RawTable(tokens=glove_raw.tokens[:5000], matrix=glove_raw.matrix[:5000].copy())
    build_table(words, data_dir=data, name="glove-5k", source={"format": "glove-package"})  # no SIF component
    shutil.copytree(minilm_data_dir / MINILM, data / "minilm")
    model = write_model2vec(root / "m2v-model", *m2v_parts)
    raw, fmt = read_source(model)
    build_table(raw, data_dir=data, name="m2v", source={"format": fmt})
    return data


@pytest.fixture(scope="module")
def tables(data_dir: Path) -> dict[str, Table]:
    return {name: Table.load(data_dir / name) for name in (*TABLES, "glove-5k")}


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=data_dir, max_batch=8) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_server.Server]:
    log = tmp_path_factory.mktemp("embed-serve") / "server.log"
    with real_server.running(data_dir, log, env={"EMBEDDING_VERIFY_CHECKSUMS": "false"}) as server:  # fresh tables
        yield server


@pytest.fixture(scope="module")
def oai(server: real_server.Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key="not-needed", max_retries=0)


def vectors(body: dict) -> np.ndarray:
    return np.array(body["vectors"], dtype=np.float32)


# ----------------------------------------------------------------------------------------- POST .../embed
@pytest.mark.parametrize("name", TABLES)
def test_embed_equals_the_encoder(client: TestClient, tables: dict[str, Table], name: str) -> None:
    response = client.post(f"/v1/tables/{name}/embed", json={"texts": TEXTS})
    assert response.status_code == 200, response.text
    body = response.json()
    direct = Encoder(tables[name]).encode(TEXTS)
    assert body["table"] == name and body["dim"] == tables[name].dim
    assert body["pooling"] == ("sif" if name == "glove" else "mean") == direct.pooling
    np.testing.assert_array_equal(vectors(body), direct.vectors)  # float32 values survive the JSON exactly
    assert (body["tokens"], body["unknown"]) == (direct.tokens, direct.unknown)


def test_embed_minilm_equals_brute_force(client: TestClient, minilm_tokenizer: Tokenizer) -> None:
    body = client.post("/v1/tables/minilm/embed", json={"texts": TEXTS}).json()
    expected, used, unknown = token_mean(TEXTS, minilm_tokenizer, minilm_rows())
    np.testing.assert_allclose(vectors(body), expected, atol=2e-7)
    assert (body["tokens"], body["unknown"]) == (used, unknown) and unknown == [0, 0, 1]


def test_embed_pooling_mean_on_a_word_table(client: TestClient, tables: dict[str, Table]) -> None:
    body = client.post("/v1/tables/glove/embed", json={"texts": TEXTS, "pooling": "mean"}).json()
    assert body["pooling"] == "mean"
    np.testing.assert_array_equal(vectors(body), Encoder(tables["glove"]).encode(TEXTS, "mean").vectors)
    assert client.post("/v1/tables/glove-5k/embed", json={"texts": TEXTS}).json()["pooling"] == "mean"


def test_embed_runs_in_a_worker_thread_and_is_timed(client: TestClient) -> None:
    client.post("/v1/tables/minilm/embed", json={"texts": TEXTS})
    metrics = client.get("/metrics").text
    assert 'embedding_search_seconds_count{operation="embed",table="minilm"}' in metrics


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v1/tables/glovee/embed", {"texts": ["a"]}, 404, "no table named 'glovee'"),
        (
            "/v1/tables/glove/embed",
            {"texts": ["heart", "zzqxv qqqzx"]},
            422,
            "texts[1] 'zzqxv qqqzx': no word of it is known to table 'glove': unknown zzqxv, qqqzx",
        ),
        ("/v1/tables/minilm/embed", {"texts": ["☃"]}, 422, "texts[0] '☃': no word of it is known to table 'minilm'"),
        # invisible characters are no words, and a word is named with them escaped, not as blank space
        ("/v1/tables/glove/embed", {"texts": ["\u200b\u200b"]}, 422, "texts[0] '\\u200b\\u200b' has no words to embed"),
        ("/v1/tables/minilm/embed", {"texts": ["a", "\x00"]}, 422, "texts[1] '\\x00' has no words to embed"),
        ("/v1/tables/glove/embed", {"texts": ["!!\u200b"]}, 422, "table 'glove': unknown '!!\\u200b'"),
        (  # a special token typed in the text is matched as the model's tokenizer matches it, and named as typed
            "/v1/tables/minilm/embed",
            {"texts": ["heart", "[CLS]"]},
            422,
            "texts[1] '[CLS]': no word of it is known to table 'minilm': [CLS] is a special token, which the table "
            "leaves out",
        ),
        ("/v1/tables/minilm/embed", {"texts": ["a"], "pooling": "sif"}, 422, "sif pooling is for word tables"),
        ("/v1/tables/glove-5k/embed", {"texts": ["a"], "pooling": "sif"}, 422, "`embedding-index sif glove-5k`"),
        ("/v1/tables/glove/embed", {"texts": ["a"], "pooling": "max"}, 422, "pooling: Input should be 'mean', 'sif'"),
        ("/v1/tables/glove/embed", {"texts": []}, 422, "texts: List should have at least 1 item"),
        ("/v1/tables/glove/embed", {"texts": ["a"] * 9}, 422, "a batch holds at most 8 items"),
        ("/v1/tables/glove/embed", {"texts": [""]}, 422, "texts.0: String should have at least 1 character"),
        ("/v1/tables/glove/embed", {"texts": ["a" * (MAX_EMBED_CHARS + 1)]}, 422, "at most 10000 characters"),
        ("/v1/tables/glove/embed", {"texts": "a heart"}, 422, "texts: Input should be a valid list"),
        (
            "/v1/tables/glove/embed",
            {"texts": ["a"], "k": 3},
            422,
            "k: not a parameter of this route: check its spelling",
        ),
    ],
)
def test_embed_errors(client: TestClient, path: str, body: dict, status: int, message: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) >= {"code", "message"} and message in error["message"], error


def test_embed_error_names_the_text(client: TestClient) -> None:
    error = client.post("/v1/tables/glove/embed", json={"texts": ["heart", "qqqzx"]}).json()["error"]
    assert (error["code"], error["text"]) == ("invalid_request", 1)


# ----------------------------------------------------------------------------- POST /v1/embeddings (OpenAI)
@pytest.mark.parametrize("name", TABLES)
@pytest.mark.parametrize("encoding", ["base64", "float"])
def test_openai_client_gets_the_encoders_vectors(
    oai: openai.OpenAI, tables: dict[str, Table], name: str, encoding: str
) -> None:
    answer = oai.embeddings.create(model=name, input=TEXTS, encoding_format=encoding)  # type: ignore[arg-type]
    direct = Encoder(tables[name]).encode(TEXTS)
    assert answer.object == "list" and answer.model == name
    assert [item.index for item in answer.data] == [0, 1, 2] and {item.object for item in answer.data} == {"embedding"}
    if encoding == "base64":  # asked for by name, the client hands it over as it came
        got = np.stack([np.frombuffer(base64.b64decode(item.embedding), dtype="<f4") for item in answer.data])
    else:
        got = np.array([item.embedding for item in answer.data], dtype=np.float32)
    np.testing.assert_array_equal(got, direct.vectors)
    used = sum(direct.tokens) + sum(direct.unknown)
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (used, used)


def test_openai_client_default_format_and_one_string(oai: openai.OpenAI, tables: dict[str, Table]) -> None:
    """The client asks for base64 unless told otherwise, and decodes it; one string is one embedding."""
    answer = oai.embeddings.create(model="glove", input="The heart pumps blood through the body.")
    assert len(answer.data) == 1 and len(answer.data[0].embedding) == 50
    expected = Encoder(tables["glove"]).encode(TEXTS[:1]).vectors[0]
    np.testing.assert_array_equal(np.float32(answer.data[0].embedding), expected)


def test_decomposed_text_embeds_as_composed(oai: openai.OpenAI) -> None:
    """Text typed decomposed (``i`` and U+0308, as macOS and some PDFs write it) is the same words."""
    text = "a naïve résumé from Zürich"
    answer = oai.embeddings.create(model="glove", input=[text, unicodedata.normalize("NFD", text)])
    assert answer.data[0].embedding == answer.data[1].embedding and answer.usage.prompt_tokens == 10


def test_raw_http_answer(server: real_server.Server, tables: dict[str, Table]) -> None:
    body = {"model": "minilm", "input": TEXTS[:2]}
    response = real_server.HTTP.post(f"{server.base}/v1/embeddings", json=body)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    answer = response.json()
    assert set(answer) == {"object", "data", "model", "usage"}
    assert set(answer["data"][0]) == {"object", "index", "embedding"}
    got = np.array([item["embedding"] for item in answer["data"]], dtype=np.float32)  # floats by default
    np.testing.assert_array_equal(got, Encoder(tables["minilm"]).encode(TEXTS[:2]).vectors)


def test_null_options_are_the_defaults(server: real_server.Server, tables: dict[str, Table]) -> None:
    """Clients generated from OpenAI's schema send the options they were not given as null."""
    body = {"model": "glove", "input": TEXTS, "encoding_format": None, "dimensions": None, "user": None}
    response = real_server.HTTP.post(f"{server.base}/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    got = np.array([item["embedding"] for item in response.json()["data"]], dtype=np.float32)
    np.testing.assert_array_equal(got, Encoder(tables["glove"]).encode(TEXTS).vectors)


@pytest.mark.parametrize(("given", "named"), [(None, "null"), ({"text": "a"}, "an object"), (1.5, "a number")])
def test_input_of_another_type_is_one_problem(server: real_server.Server, given: object, named: str) -> None:
    body = {"model": "glove", "input": given}
    response = real_server.HTTP.post(f"{server.base}/v1/embeddings", json=body)
    error = {"message": f"input: send a string or a list of strings, not {named}", "param": "input"}
    assert response.status_code == 400 and response.json()["error"].items() >= error.items()


def test_openai_pooling_as_an_extra_field(oai: openai.OpenAI, tables: dict[str, Table]) -> None:
    answer = oai.embeddings.create(model="glove", input=TEXTS, extra_body={"pooling": "mean"})
    got = np.array([item.embedding for item in answer.data], dtype=np.float32)
    np.testing.assert_array_equal(got, Encoder(tables["glove"]).encode(TEXTS, "mean").vectors)


def openai_error(exc: openai.APIStatusError) -> dict:
    body = exc.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


NO_V1 = (
    "no such path: OpenAI's paths here are /v1/embeddings and /v1/models: give OpenAI's client the server's "
    "address with /v1 as its base_url (http://127.0.0.1:8000/v1)"
)
AZURE_VERSION = "2024-10-21"  # any: the server ignores it


def test_azure_openais_client_is_answered_as_openais(server: real_server.Server, oai: openai.OpenAI) -> None:
    """Azure OpenAI's client adds ``?api-version=`` to every request: accepted, and ignored, on the OpenAI-compatible
    routes (any other query parameter is still refused). Pointed at ``/v1`` by ``base_url=``, it lists the models as
    OpenAI's client does; its embeddings go to Azure's path, ``/v1/deployments/{model}/embeddings``, which the
    server does not have, so ``/v1/embeddings`` is checked with the parameter sent by OpenAI's client."""
    azure = openai.AzureOpenAI(
        base_url=f"{server.base}/v1", api_key="not-needed", api_version=AZURE_VERSION, max_retries=0
    )
    assert azure.models.list().model_dump() == oai.models.list().model_dump()
    assert azure.models.retrieve("glove") == oai.models.retrieve("glove")
    versioned = oai.with_options(default_query={"api-version": AZURE_VERSION})
    assert versioned.embeddings.create(model="glove", input=TEXTS) == oai.embeddings.create(model="glove", input=TEXTS)
    with pytest.raises(openai.NotFoundError) as caught:
        azure.embeddings.create(model="glove", input=TEXTS)
    assert caught.value.response.url.path == "/v1/deployments/glove/embeddings"
    with pytest.raises(openai.BadRequestError) as refused:
        oai.with_options(default_query={"api_version": AZURE_VERSION}).models.list()
    assert openai_error(refused.value)["message"] == "api_version: not a parameter of this route: check its spelling"


# OpenAI's statuses: 400 for an invalid request, 404 for an unknown model; its code where it has one, else none.
@pytest.mark.parametrize(
    ("kwargs", "kind", "param", "code", "message"),
    [
        ({"model": "glovee", "input": "a"}, "NotFoundError", "model", "model_not_found", "no table named 'glovee'"),
        ({"model": "BAAI/bge-small-en-v1.5", "input": "a"}, "BadRequestError", "model", None,
         "invalid table name 'BAAI/bge-small-en-v1.5': use 1-64 letters, digits"),
        ({"model": "glove", "input": [[1, 2, 3]]}, "BadRequestError", "input", None, TOKEN_IDS),
        ({"model": "glove", "input": [1, 2, 3]}, "BadRequestError", "input", None, TOKEN_IDS),
        ({"model": "glove", "input": ["heart", "qqqzx"]}, "BadRequestError", "input[1]", None,
         "input[1] 'qqqzx': no word of it is known to table 'glove': unknown qqqzx"),
        ({"model": "glove", "input": "qqqzx"}, "BadRequestError", "input", None,
         "input 'qqqzx': no word of it is known to table 'glove': unknown qqqzx"),  # one string: no [0]
        ({"model": "glove", "input": " "}, "BadRequestError", "input", None, "input ' ' has no words to embed"),
        ({"model": "glove", "input": ""}, "BadRequestError", "input", None,
         "input: String should have at least 1 character"),
        ({"model": "glove", "input": ["a", "b", ""]}, "BadRequestError", "input[2]", None,
         "input[2]: String should have at least 1 character"),
        ({"model": "glove", "input": ["a", True]}, "BadRequestError", "input[1]", None,
         "input[1]: Input should be a valid string"),
        ({"model": "glove", "input": [["a heart"]]}, "BadRequestError", "input[0]", None,
         "input[0]: Input should be a valid string"),
        ({"model": "glove", "input": "a", "dimensions": 8}, "BadRequestError", "dimensions", None,
         "dimensions must be 50"),
        ({"model": "minilm", "input": "a", "extra_body": {"pooling": "sif"}}, "BadRequestError", "pooling", None,
         "sif pooling is for word tables"),
        ({"model": "glove", "input": ["a"] * 1025}, "BadRequestError", "input", None, "at most 1024 items"),
    ],
)  # fmt: skip
def test_openai_errors_in_openais_shape(
    oai: openai.OpenAI, kwargs: dict, kind: str, param: str, code: str | None, message: str
) -> None:
    with pytest.raises(getattr(openai, kind)) as caught:
        oai.embeddings.create(encoding_format="float", **kwargs)
    error = openai_error(caught.value)
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert message in error["message"] and message in str(caught.value)
    assert (caught.value.type, caught.value.param, caught.value.code) == ("invalid_request_error", param, code)


def test_a_long_unknown_word_is_named_by_its_start(oai: openai.OpenAI) -> None:
    """A text of one unknown word as long as a text may be is named as the text is, by its first characters, not
    echoed whole into the message the client raises."""
    word = "q" * MAX_EMBED_CHARS
    with pytest.raises(openai.BadRequestError) as caught:
        oai.embeddings.create(model="glove", input=["heart", word])
    start = word[:60] + "…"
    assert openai_error(caught.value)["message"] == (
        f"input[1] {start!r}: no word of it is known to table 'glove': unknown {start}"
    )


def test_a_base_url_without_v1_is_told_so(server: real_server.Server) -> None:
    """OpenAI's client given the server's address without ``/v1`` asks ``/embeddings`` and ``/models``: the 404
    says what base_url to give it; any other missing path is still only missing."""
    bare = openai.OpenAI(base_url=server.base, api_key="not-needed", max_retries=0)
    for call in (lambda: bare.embeddings.create(model="glove", input="heart"), bare.models.list):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.response.json() == {"error": {"code": "not_found", "message": NO_V1}}
    missing = real_server.HTTP.get(f"{server.base}/v1/v1/models")
    assert missing.json() == {"error": {"code": "not_found", "message": "no such path"}}


@pytest.mark.parametrize("model", ["nomic-embed-text:latest", "BAAI/bge-small-en-v1.5"])
def test_a_model_that_is_no_table_name_is_named(oai: openai.OpenAI, model: str) -> None:
    """As ``POST /v1/embeddings`` names it, a slash too (the client puts it in the path as it is)."""
    with pytest.raises(openai.BadRequestError) as caught:
        oai.models.retrieve(model)
    error = openai_error(caught.value)
    assert (error["param"], error["code"]) == ("model", None)
    assert f"invalid table name {model!r}: use 1-64 letters" in error["message"]


def test_models_with_a_trailing_slash_are_redirected(server: real_server.Server) -> None:
    for path, to in [("/v1/models/", "/v1/models"), ("/v1/models/glove/", "/v1/models/glove")]:
        response = real_server.HTTP.get(f"{server.base}{path}")
        assert response.status_code == 307 and response.headers["location"] == to


READ_KEY = "r" * 32


@pytest.fixture(scope="module")
def keyed(small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server over ``small`` with a read key and a body limit of 1 KiB: its base URL."""
    log = tmp_path_factory.mktemp("keyed-serve") / "server.log"
    env = {"EMBEDDING_READ_API_KEY": READ_KEY, "EMBEDDING_MAX_BODY_BYTES": "1024", "EMBEDDING_MAX_BATCH": "8"}
    with real_server.running(small_data_dir, log, "--threads", "1", env=env) as server:
        yield server.base


def test_the_refusals_before_the_route_are_openais(keyed: str) -> None:
    """The read key and the body limit answer ahead of the route, as OpenAI's API answers: a key missing or not
    valid is a 401 (``AuthenticationError``; ``invalid_api_key`` for one not valid), a body over the limit and too
    many inputs a 400 (``BadRequestError``). A client that sends the read key (as X-API-Key, or as its api_key:
    the bearer token) is let in."""

    def client(api_key: str, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{keyed}/v1", api_key=api_key, max_retries=0, **options)

    refusals = [
        (client("x"), {}, openai.AuthenticationError, "invalid_api_key", "the API key is not valid"),
        (client("x"), {"extra_headers": {"Authorization": openai.Omit()}}, openai.AuthenticationError, None, "needs"),
        (client(READ_KEY), {"input": ["a heart"] * 200}, openai.BadRequestError, "body_too_large", "1024 bytes"),
        (client(READ_KEY), {"input": ["a"] * 9}, openai.BadRequestError, None, "at most 8 items"),
    ]
    for sender, kwargs, kind, code, message in refusals:
        with pytest.raises(kind) as caught:
            sender.embeddings.create(**{"model": "small", "input": "a heart", **kwargs})
        error = openai_error(caught.value)
        assert (error["type"], error["code"]) == ("invalid_request_error", code) and message in error["message"]
        assert error["param"] == ("input" if "items" in message else None), error
    with pytest.raises(openai.AuthenticationError):  # the models too
        client("x").models.list()
    assert client(READ_KEY).models.retrieve("small").id == "small"
    keyed_header = client("x", default_headers={"X-API-Key": READ_KEY})  # X-API-Key wins over the bearer token
    for sender in (client(READ_KEY), keyed_header):
        assert len(sender.embeddings.create(model="small", input="a heart").data[0].embedding) == 50
    answered = real_server.HTTP.get(f"{keyed}/v1/embeddings", headers={"X-API-Key": READ_KEY})
    assert answered.status_code == 405 and answered.json()["error"]["type"] == "invalid_request_error"
    # the table routes read X-API-Key only, and keep the service's envelope and statuses
    bearer = {"Authorization": f"Bearer {READ_KEY}"}
    table = real_server.HTTP.post(f"{keyed}/v1/tables/small/embed", json={"texts": ["a heart"]}, headers=bearer)
    assert table.status_code == 401 and table.json()["error"]["code"] == "unauthorized", table.text
    error = real_server.HTTP.post(
        f"{keyed}/v1/tables/small/embed", json={"texts": "x"}, headers={"X-API-Key": READ_KEY}
    )
    assert error.status_code == 422 and set(error.json()["error"]) >= {"code", "message"}
    assert "type" not in error.json()["error"]
    # the metrics count each refusal by the status its client got: OpenAI's, none of the service's 403 or 413
    counted = real_server.HTTP.get(f"{keyed}/metrics").text
    assert 'route="/v1/embeddings",status="400"' in counted and 'route="unmatched",status="400"' in counted
    assert 'status="403"' not in counted and 'status="413"' not in counted


def test_openapi_documents_both_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert "/v1/tables/{table}/embed" in paths and "/v1/embeddings" in paths
    responses = paths["/v1/embeddings"]["post"]["responses"]
    errors = responses["400"]["content"]["application/json"]["schema"]  # OpenAI's status for an invalid request
    assert errors["$ref"].endswith("/OpenAIErrorResponse") and not {"413", "422"} & set(responses)  # nor FastAPI's
    assert "`null`: Invalid request" in responses["400"]["description"]
