"""The Python client's bodies (orjson, ``json`` for what orjson cannot write) and answers, on the wire."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import numpy as np
import pytest

from service.settings import Settings
from service_client import WRITE_DOCUMENTS, ApiError, AsyncClient, Client

ANSWER = {"neighbors": [{"token": "heart", "id": 1, "score": 0.5}, {"token": "héart", "id": 2, "score": -0.25}]}


def client_seeing(sent: list[httpx.Request], answer: Any = ANSWER, status: int = 200) -> Client:
    """A client whose every request is kept in ``sent`` and answered ``answer``, but ``GET /v1/limits``: a 404, as a
    server without the route answers it (the client then sizes its requests by its defaults)."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/limits":
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "Not Found"}})
        sent.append(request)
        return httpx.Response(status, content=json.dumps(answer).encode(), headers={"content-type": "application/json"})

    return Client("http://test", http=httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler)))


def test_a_search_body_carries_the_vector_exactly_as_json() -> None:
    sent: list[httpx.Request] = []
    vector = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    hits = client_seeing(sent).search("t", vector, k=2, exact=True)
    (request,) = sent
    assert request.headers["content-type"] == "application/json"
    body = json.loads(request.content)
    assert body == {"vector": [float(x) for x in vector], "k": 2, "exact": True}
    assert [(h.token, h.id, h.score) for h in hits] == [("heart", 1, 0.5), ("héart", 2, -0.25)]


def test_a_batch_items_numpy_vector_is_written_as_its_floats() -> None:
    sent: list[httpx.Request] = []
    vector = np.random.default_rng(1).standard_normal(8).astype(np.float32)
    client = client_seeing(sent, {"results": []})
    client.search_documents_batch("docs", [{"vector": vector, "filter": {"year": np.int64(1990)}}], k=2)
    client.neighbors_batch("t", [{"vector": vector}], k=2)
    items = [json.loads(request.content)["queries"][0] for request in sent if request.method == "POST"]
    assert items == [{"vector": [float(x) for x in vector], "filter": {"year": 1990}}, {"vector": vector.tolist()}]


def test_an_integer_beyond_64_bits_is_written_by_json() -> None:
    sent: list[httpx.Request] = []
    client_seeing(sent, {"upserted": 1}).upsert_documents("docs", [{"id": 2**70, "text": "x"}])
    assert json.loads(sent[0].content) == {"documents": [{"id": 2**70, "text": "x"}]}


def test_text_utf8_cannot_encode_is_refused_unsent_as_the_server_refuses_it() -> None:
    """A lone UTF-16 surrogate (what ``json.loads('"\\ud800"')`` gives, and a file name decoded with
    ``surrogateescape`` holds) in a token, an id or a text is an ApiError 422, as the server refuses such text, not
    the encoder's UnicodeEncodeError; in a query string, a path or a body alike, and nothing is sent."""
    sent: list[httpx.Request] = []
    api = client_seeing(sent)
    transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(200, json=ANSWER))
    calls = [
        lambda: api.neighbors("t", "\ud800"),
        lambda: api.vector("t", "caf\udce9"),
        lambda: api.document("t", "\udc80"),
        lambda: api.most_similar("t", positive=["heart", "\ud800"]),
        lambda: api.embed("t", ["a text \udce9"]),
        lambda: api.upsert_many("t", [{"id": "a", "text": "fine"}, {"id": "b", "text": "\ud800"}]),
        lambda: asyncio.run(
            AsyncClient("http://test", http=httpx.AsyncClient(transport=transport)).neighbors("t", "\ud800")
        ),
    ]
    for call in calls:
        with pytest.raises(ApiError) as refused:
            call()
        assert (refused.value.status, refused.value.code) == (422, "invalid_request")
        assert "lone UTF-16 surrogate" in refused.value.message
    assert sent == []


def test_an_error_answer_is_still_the_servers_envelope() -> None:
    sent: list[httpx.Request] = []
    error = {"error": {"code": "invalid_request", "message": "the vector has 1 value; table 't' has 50 dimensions"}}
    with pytest.raises(ApiError) as raised:
        client_seeing(sent, error, 422).search("t", [1.0])
    assert (raised.value.status, raised.value.code) == (422, "invalid_request")


@pytest.mark.parametrize(("dim", "count"), [(8, 300), (1536, 200), (3072, 80)])
def test_many_documents_are_written_in_requests_under_the_servers_body_limit(dim: int, count: int) -> None:
    """``upsert_many`` splits by count and by size: every request holds at most ``WRITE_DOCUMENTS`` documents and
    stays under the server's default body limit, whatever the vectors' size; all go, in order, each once."""
    sent: list[httpx.Request] = []
    rng = np.random.default_rng(dim)
    documents = [{"id": f"d{i}", "text": f"chunk {i}", "vector": rng.standard_normal(dim)} for i in range(count)]
    answers = client_seeing(sent, {"upserted": 1}).upsert_many("docs", documents)
    described, *writes = sent
    assert (described.method, described.url.path) == ("GET", "/v1/tables/docs")  # its dimension, read first
    bodies = [json.loads(request.content)["documents"] for request in writes]
    assert len(answers) == len(writes) > 1
    assert [d["id"] for body in bodies for d in body] == [d["id"] for d in documents]
    assert all(len(body) <= WRITE_DOCUMENTS for body in bodies)
    assert max(len(request.content) for request in writes) < Settings.model_fields["max_body_bytes"].default
    assert bodies[0][0]["vector"] == [float(x) for x in documents[0]["vector"]]
