"""From a folder of files to a demo, as docs/documents.md ("From a folder of files to a demo") shows it: the licence
texts of /usr/share/common-licenses in two sub-folders, imported as passages with ``--encoder glove-6b-50d`` and
served by a real ``embedding-serve`` beside the GloVe table, with CORS open to the explorer's two local origins.

A passage of a sub-folder's file fetched by its id (which holds "/"); a hybrid query whose only word GloVe does
not know ("merchantability") answered by keyword and saying so; the same word refused by name in mode vector and
by ``/v1/embeddings``; ``/v1/models``; the OpenAI, LangChain and LlamaIndex examples of the docs run as written,
the vector stores' printing what the docs show; CORS headers per request with the answer cache on; a JSON body sent
without its content type; batch items' statuses.
"""

from __future__ import annotations

import asyncio
import io
import re
import shlex
import shutil
from collections.abc import Iterator
from contextlib import redirect_stdout
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import openai
import pytest

from index.build.sources import glove_package
from index.engine.table import Table
from service_client import ApiError, AsyncClient, Client
from tests.cli import run_cli
from tests.conftest import link_table
from tests.examples import example, printed
from tests.service import real_server

LICENCES = Path("/usr/share/common-licenses")
GNU = ("GPL", "LGPL", "GFDL")
GLOVE = glove_package.DEFAULT_NAME
ORIGINS = ("http://localhost:8000", "http://127.0.0.1:8000")
UNKNOWN = "merchantability"  # in eight of the licences; not one of GloVe's 400,000 words
DOCS = "docs/documents.md"
DOCS_BASE = "http://127.0.0.1:8000"
WRITE_KEY = "folder-demo-write-key"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``licences/gnu/`` (GPL, LGPL, GFDL) and ``licences/other/``: each licence file once (no symlinks)."""
    folder = tmp_path_factory.mktemp("demo") / "licences"
    for path in sorted(LICENCES.iterdir()):
        if path.is_symlink() or not path.is_file():
            continue
        group = folder / ("gnu" if path.name.startswith(GNU) else "other")
        group.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, group / f"{path.name}.txt")
    return folder


@pytest.fixture(scope="module")
def data_dir(glove_data_dir: Path, folder: Path) -> Path:
    data = folder.parent / "data"
    data.mkdir()
    assert link_table(glove_data_dir / GLOVE, data)
    args = ("import", folder, "--format", "documents", "--name", "licences", "--encoder", GLOVE, "--data-dir", data)
    result = run_cli(*args)
    assert result.code == 0, result.err
    import_placeholder(data)
    return data


def import_placeholder(data: Path) -> None:
    """``notes``, the vector stores' table, made by the commands of the docs: its placeholder document's line
    written to ``notes.jsonl`` and imported with ``--encoder glove-6b-50d``, saying what the docs show."""
    lines = example(DOCS, "notes-placeholder").splitlines()
    echo = shlex.split(lines[0].removeprefix("$ "))
    assert echo[0] == "echo" and echo[2:] == [">", "notes.jsonl"], lines[0]
    source = data.parent / "notes.jsonl"
    source.write_text(echo[1] + "\n")
    command = shlex.split(lines[1].removeprefix("$ "))
    assert command[:3] == ["embedding-index", "import", "notes.jsonl"] and command[-2:] == ["--data-dir", "data"]
    result = run_cli("import", source, *command[3:-2], "--data-dir", data)
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == lines[-1], (result.out, lines)  # documents: 1 (... fields ...)


@pytest.fixture(scope="module")
def base(data_dir: Path) -> Iterator[str]:
    env = {"EMBEDDING_CORS_ORIGINS": ",".join(ORIGINS), "EMBEDDING_WRITE_KEYS": WRITE_KEY}
    with real_server.running(data_dir, data_dir.parent / "serve.log", env=env) as server:
        yield server.base


def search(base: str, body: dict[str, Any]) -> httpx.Response:
    return real_server.HTTP.post(f"{base}/v1/tables/licences/search", json=body, timeout=60)


def test_a_passage_of_a_sub_folder_by_its_id(base: str, folder: Path) -> None:
    """Every passage id of a folder with sub-folders holds "/": raw, %2F-encoded and through the Python client."""
    (hit,) = search(base, {"text": "Free Documentation License", "mode": "keyword", "k": 1}).json()["hits"]
    passage_id = hit["id"]
    assert "/" in passage_id and "#" in passage_id, passage_id
    raw = real_server.HTTP.get(f"{base}/v1/tables/licences/documents/{quote(passage_id, safe='/')}")
    encoded = real_server.HTTP.get(f"{base}/v1/tables/licences/documents/{quote(passage_id, safe='')}")
    assert raw.status_code == 200, raw.text
    assert encoded.status_code == 200, encoded.text
    with Client(base) as client:
        document = client.document("licences", passage_id)
    assert raw.json() == encoded.json() == document
    fields = document["fields"]
    assert document["id"] == passage_id and fields["source"] == passage_id.split("#")[0]
    assert document["text"] == (folder / fields["source"]).read_text()[fields["start"] : fields["end"]]
    missing = real_server.HTTP.get(f"{base}/v1/tables/licences/documents/gnu/GPL-3.txt%23999")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_document"


def test_hybrid_falls_back_to_keyword_for_words_the_encoder_does_not_know(base: str) -> None:
    answer = search(base, {"text": UNKNOWN, "mode": "hybrid", "k": 5, "fields": ["source"]})
    assert answer.status_code == 200, answer.text
    keyword = search(base, {"text": UNKNOWN, "mode": "keyword", "k": 5, "fields": ["source"]}).json()
    assert answer.json()["hits"] == keyword["hits"] and len(keyword["hits"]) == 5
    # Each hit holds the word or another of its forms (the keyword index stems: merchantable, merchant).
    assert all(re.search(r"\bmerchant", hit["text"], re.I) for hit in keyword["hits"])
    fallback = answer.json()["fallback"]
    assert fallback["mode"] == "keyword" and f"unknown {UNKNOWN}" in fallback["reason"], fallback
    assert "fallback" not in keyword
    # A text with a known word is fused as asked; in a batch, each item says for itself.
    items = [{"text": UNKNOWN}, {"text": f"warranty of {UNKNOWN}"}]
    results = search(base, {"queries": items, "mode": "hybrid", "k": 5}).json()["results"]
    assert (
        results[0]["fallback"]["mode"] == "keyword"
        and results[0]["hits"] == search(base, {"text": UNKNOWN, "mode": "keyword", "k": 5}).json()["hits"]
    )
    assert "fallback" not in results[1]
    assert any(set(hit["ranks"]) == {"vector", "keyword"} for hit in results[1]["hits"])
    with Client(base) as client:  # the Python clients' Hits say it too, a batch's items each for itself
        assert client.search_documents("licences", k=5, text=UNKNOWN, mode="hybrid").fallback == fallback
        first, second = client.search_documents_batch("licences", items, k=5, mode="hybrid")
        assert not isinstance(first, ApiError) and first.fallback == results[0]["fallback"]
        assert not isinstance(second, ApiError) and second.fallback is None and second.partial is None
    awaited = asyncio.run(AsyncClient(base).search_documents("licences", k=5, text=UNKNOWN, mode="hybrid"))
    assert awaited.fallback == fallback and awaited.partial is None


def test_hybrid_falls_back_to_vector_for_words_no_document_holds(base: str) -> None:
    text = "banana smoothie recipe"  # words GloVe knows; not one of them is in a licence
    answer = search(base, {"text": text, "mode": "hybrid", "k": 5, "fields": ["source"]})
    assert answer.status_code == 200, answer.text
    vector = search(base, {"text": text, "k": 5, "fields": ["source"]}).json()
    assert answer.json()["hits"] == vector["hits"] and len(vector["hits"]) == 5
    assert answer.json()["fallback"] == {
        "mode": "vector",
        "reason": f"no document of 'licences' holds a word of text '{text}' as the keyword index reads it",
    }
    assert search(base, {"text": text, "mode": "keyword", "k": 5}).json()["hits"] == []
    floor = search(base, {"text": text, "mode": "hybrid", "k": 5, "min_score": 0.001}).json()  # RRF scores kept
    assert "fallback" not in floor and all(set(hit["ranks"]) == {"vector"} for hit in floor["hits"])


@pytest.mark.parametrize(
    "body",
    [
        {"text": UNKNOWN},  # mode vector: nothing to search by
        {"text": UNKNOWN, "mode": "hybrid", "diversity": 0.5},  # diversity needs the vectors
    ],
)
def test_text_without_a_known_word_names_it_where_a_vector_is_needed(base: str, body: dict[str, Any]) -> None:
    response = search(base, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["words"] == [UNKNOWN]
    assert error["message"].startswith(
        f"text '{UNKNOWN}': no word of it is known to the vocabulary the documents of 'licences' were embedded "
        f"with ({GLOVE}): unknown {UNKNOWN}"
    ), error


def test_embeddings_name_the_input_without_a_known_word(base: str) -> None:
    oai = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        oai.embeddings.create(model=GLOVE, input=["warranty", f"{UNKNOWN} gnomovision", "licence"])
    error = caught.value.response.json()["error"]
    assert error == {
        "message": f"input[1] '{UNKNOWN} gnomovision': no word of it is known to table '{GLOVE}': unknown "
        f"{UNKNOWN}, gnomovision",
        "type": "invalid_request_error",
        "param": "input[1]",
        "code": None,
    }
    embed = real_server.HTTP.post(f"{base}/v1/tables/{GLOVE}/embed", json={"texts": ["warranty", UNKNOWN]})
    assert embed.status_code == 422
    assert embed.json()["error"]["message"].startswith(f"texts[1] '{UNKNOWN}': no word of it is known")


def test_embeddings_errors_name_fields_not_pydantic_types(base: str) -> None:
    for body in ({"model": GLOVE, "input": ["a" * 10_001]}, {"model": GLOVE, "input": ["a"] * 2000}):
        response = real_server.HTTP.post(f"{base}/v1/embeddings", json=body)
        assert response.status_code == 400
        message = response.json()["error"]["message"]
        assert not re.search(r"function-after|constrained-str|_check_batch|valid string", message), message
    too_long = real_server.HTTP.post(f"{base}/v1/embeddings", json={"model": GLOVE, "input": ["a" * 10_001]}).json()[
        "error"
    ]
    assert too_long["message"] == "input[0]: String should have at most 10000 characters"
    assert too_long["param"] == "input[0]"


def test_models_in_openais_shape(base: str, data_dir: Path) -> None:
    """The tables that embed text are the models; the documents table is not one."""
    listed = real_server.HTTP.get(f"{base}/v1/models").json()
    built = Table.load(data_dir / GLOVE, checksums=False).manifest["built_at"]
    model = {"id": GLOVE, "object": "model", "created": int(datetime.fromisoformat(built).timestamp()),
             "owned_by": "embedding-search"}  # fmt: skip
    assert listed == {"object": "list", "data": [model]}
    assert real_server.HTTP.get(f"{base}/v1/models/{GLOVE}").json() == model
    oai = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in oai.models.list()] == [GLOVE] and oai.models.retrieve(GLOVE).created == model["created"]
    for name, words in (("licences", "table 'licences' is a table of documents"), ("glove", "no table named")):
        with pytest.raises(openai.NotFoundError) as caught:
            oai.models.retrieve(name)
        error = caught.value.response.json()["error"]
        assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "model_not_found", "model")
        assert words in error["message"], error
        with pytest.raises(openai.NotFoundError) as embedding:  # no model to embed with either
            oai.embeddings.create(model=name, input="a licence", dimensions=3)
        assert embedding.value.response.json()["error"] == error


@pytest.mark.parametrize("name", ["langchain", "llamaindex"])
def test_the_documented_langchain_and_llamaindex_examples_run(
    base: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example as written (only the server's address differs) embeds as the server's own route does."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty: an example that needs tiktoken fails here
    code = example(DOCS, name)
    assert DOCS_BASE in code
    scope: dict[str, Any] = {}
    exec(compile(code.replace(DOCS_BASE, base), f"{DOCS}:{name}", "exec"), scope)
    texts, query = scope["texts"], scope["query"]
    expected = real_server.HTTP.post(f"{base}/v1/tables/{GLOVE}/embed", json={"texts": [*texts, query]}).json()[
        "vectors"
    ]
    np.testing.assert_allclose(scope["vectors"], expected[:-1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(scope["query_vector"], expected[-1], rtol=1e-6, atol=1e-7)


def run_printing(doc: str, name: str, base: str, scope: dict[str, Any]) -> str:
    """Run the example ``name`` of ``doc`` as written (only the server's address differs): what it prints."""
    code = example(doc, name)
    assert DOCS_BASE in code
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(code.replace(DOCS_BASE, base), f"{doc}:{name}", "exec"), scope)
    return out.getvalue()


def test_the_documented_openai_example_embeds_as_the_route_does(base: str) -> None:
    """docs/encoders.md's example with OpenAI's client: its texts' tokens as the docs print them, and the vectors of
    the server's own route (the docs print cosines after ``embedding-index sif``; this table has no SIF component)."""
    scope: dict[str, Any] = {}
    out = run_printing("docs/encoders.md", "openai", base, scope)
    usage = printed("docs/encoders.md", "openai").split(" [[")[0]
    assert out.startswith(usage + " [["), (out, usage)
    expected = real_server.HTTP.post(f"{base}/v1/tables/{GLOVE}/embed", json={"texts": scope["texts"]}).json()
    np.testing.assert_allclose(scope["vectors"], expected["vectors"], rtol=1e-6, atol=1e-7)


def test_the_documented_vector_store_examples_print_what_the_docs_show(base: str) -> None:
    """docs/documents.md's LangChain store, then its LlamaIndex store over the same table, then both stores' async
    methods (each example goes on from the one before), each printing exactly the block the docs show after it."""
    scope: dict[str, Any] = {"WRITE_KEY": WRITE_KEY}
    for name in ("langchain-store", "llamaindex-store", "stores-async"):
        assert run_printing(DOCS, name, base, scope) == printed(DOCS, name), name


def test_cors_headers_are_each_requests_own_with_the_answer_cache(base: str) -> None:
    url = f"{base}/v1/tables/{GLOVE}/neighbors?token=licence&k=3"
    answers = [real_server.HTTP.get(url, headers={"origin": origin}) for origin in (*ORIGINS, ORIGINS[0])]
    plain = real_server.HTTP.get(url)
    assert all(answer.content == plain.content for answer in answers)
    for answer, origin in zip(answers, (*ORIGINS, ORIGINS[0]), strict=True):
        assert answer.headers["access-control-allow-origin"] == origin
        assert answer.headers.get_list("vary") == ["Origin"], answer.headers
    other = real_server.HTTP.get(url, headers={"origin": "http://localhost:5500"})  # an origin not allowed
    for refused in (plain, other):  # no stale origin from the cache; Starlette's one "Vary: Origin" on every answer
        assert "access-control-allow-origin" not in refused.headers and refused.headers.get_list("vary") == ["Origin"]
    metrics = real_server.HTTP.get(f"{base}/metrics").text
    assert re.search(r'embedding_answer_cache_total\{result="hit"\} [1-9]', metrics)  # the answers came from it


@pytest.mark.parametrize("content_type", [None, "application/x-www-form-urlencoded", "text/plain"])
def test_a_json_body_is_read_whatever_its_content_type(base: str, content_type: str | None) -> None:
    """``curl -d`` without ``-H 'content-type: application/json'`` sends a form's content type."""
    body = b'{"text": "warranty", "mode": "keyword", "k": 2}'
    headers = {} if content_type is None else {"content-type": content_type}
    response = real_server.HTTP.post(f"{base}/v1/tables/licences/search", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json() == search(base, {"text": "warranty", "mode": "keyword", "k": 2}).json()
    broken = real_server.HTTP.post(f"{base}/v1/tables/licences/search", content=b"text=warranty", headers=headers)
    assert broken.status_code == 422 and "JSON" in broken.json()["error"]["message"], broken.text


def test_batch_items_errors_carry_their_own_status(base: str) -> None:
    with Client(base) as client:
        results = client.search_documents_batch(
            "licences", [{"id": "other/BSD.txt#0"}, {"id": "no/such.txt#0"}, {"text": UNKNOWN}], k=2
        )
    good, missing, unknown = results
    assert not isinstance(good, ApiError) and len(good.hits) == 2
    assert isinstance(missing, ApiError) and (missing.status, missing.code) == (404, "unknown_document")
    assert isinstance(unknown, ApiError) and (unknown.status, unknown.code) == (422, "invalid_request")
