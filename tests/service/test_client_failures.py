"""The Python client when there is no answer, an answer that is not the server's, or a server that asks to retry:
each an :class:`ApiError`; an ``overloaded`` answer retried after its ``Retry-After``."""

from __future__ import annotations

import asyncio
import json
import pickle
import re
import socket
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from service_client import ApiError, AsyncClient, Client

ANSWER = {"neighbors": [{"token": "heart", "id": 1, "score": 0.5}]}
OVERLOADED = {"error": {"code": "overloaded", "message": "the server is busy; retry"}}
BAD_GATEWAY = b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>nginx</body></html>"


def answering(*answers: httpx.Response, sent: list[httpx.Request] | None = None, **options: object) -> Client:
    """A client whose server answers ``answers`` in turn (the last one from then on)."""
    seen = [] if sent is None else sent

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1]

    http = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    return Client("http://test", http=http, **options)  # type: ignore[arg-type]


def overloaded(retry_after: str | None = "0") -> httpx.Response:
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    return httpx.Response(503, json=OVERLOADED, headers=headers)


def test_an_overloaded_answer_is_retried_after_its_retry_after() -> None:
    sent: list[httpx.Request] = []
    client = answering(overloaded(), overloaded(), httpx.Response(200, json=ANSWER), sent=sent)
    assert client.neighbors("t", "heart", k=1)[0].token == "heart"
    assert len(sent) == 3 and all(json.loads(r.content) == {"token": "heart", "k": 1} for r in sent)


def test_retries_run_out_into_the_overloaded_error() -> None:
    sent: list[httpx.Request] = []
    with pytest.raises(ApiError) as raised:
        answering(overloaded(), sent=sent, retries=1).neighbors("t", "heart")
    error = raised.value
    assert (error.status, error.code, error.retry_after) == (503, "overloaded", 0.0)
    assert error.message == "the server is busy; retry"
    assert len(sent) == 2
    copied = pickle.loads(pickle.dumps(error))  # as a process pool hands it back
    assert (copied.status, copied.code, copied.message, copied.retry_after) == (503, "overloaded", error.message, 0.0)
    sent.clear()
    with pytest.raises(ApiError) as unavailable:  # a 503 without Retry-After (not_ready, a shard down) is not retried
        answering(overloaded(None), sent=sent).neighbors("t", "heart")
    assert unavailable.value.retry_after is None and len(sent) == 1


def test_a_rate_limits_429_with_retry_after_is_retried_as_overloaded() -> None:
    """A 429 with ``Retry-After`` (a gateway's rate limit in front of the server, which did not pass the request
    on) is sent again after its seconds, as an ``overloaded`` answer is; without one it is raised at once."""
    limited = httpx.Response(429, content=b"<html>Too Many Requests</html>", headers={"Retry-After": "0"})
    sent: list[httpx.Request] = []
    assert answering(limited, httpx.Response(200, json=ANSWER), sent=sent).neighbors("t", "heart")[0].id == 1
    assert len(sent) == 2
    sent.clear()
    with pytest.raises(ApiError) as raised:
        answering(limited, sent=sent).neighbors("t", "heart")
    assert (raised.value.status, raised.value.retry_after, len(sent)) == (429, 0.0, 3)  # the 2 retries run out
    sent.clear()
    with pytest.raises(ApiError) as unsaid:
        answering(httpx.Response(429, content=b"slow down"), sent=sent).neighbors("t", "heart")
    assert (unsaid.value.status, unsaid.value.code, len(sent)) == (429, "http_error", 1)


async def test_the_async_client_retries_a_429_with_retry_after() -> None:
    sent: list[httpx.Request] = []
    answers = [httpx.Response(429, headers={"Retry-After": "0"}), httpx.Response(200, json=ANSWER)]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[len(sent) - 1]

    http = httpx.AsyncClient(base_url="http://test", transport=httpx.MockTransport(handler))
    async with http:
        assert (await AsyncClient("http://test", http=http).neighbors("t", "heart"))[0].id == 1
    assert len(sent) == 2


def test_a_proxys_html_page_is_an_api_error() -> None:
    page = httpx.Response(502, content=BAD_GATEWAY, headers={"content-type": "text/html"})
    with pytest.raises(ApiError) as raised:
        answering(page).neighbors("t", "heart")
    assert (raised.value.status, raised.value.code) == (502, "http_error")
    assert raised.value.message.startswith("<html> <head><title>502 Bad Gateway</title>")
    portal = httpx.Response(200, content=BAD_GATEWAY.replace(b"502 Bad Gateway", b"Sign in"))
    with pytest.raises(ApiError) as signed:  # a 200 that is not JSON
        answering(portal).tables()
    assert (signed.value.status, signed.value.code) == (200, "invalid_response")
    assert "Sign in" in signed.value.message


def test_a_batch_items_shard_error_has_its_own_status() -> None:
    item = {"error": {"code": "shard_unavailable", "message": "shard 1 did not answer", "shard": 1}}
    results = {"results": [ANSWER, item]}
    first, second = answering(httpx.Response(200, json=results)).neighbors_batch("t", ["heart", "love"])
    assert not isinstance(first, ApiError) and first[0].token == "heart"
    assert isinstance(second, ApiError)
    assert (second.status, second.code, second.details) == (503, "shard_unavailable", {"shard": 1})


def test_a_given_http_client_carries_the_key_and_stays_open(api: TestClient) -> None:
    """The key goes with a caller's ``httpx.Client`` too, and closing the client leaves the caller's open."""
    sent: list[httpx.Request] = []
    with answering(httpx.Response(200, json={"tables": []}), sent=sent, api_key="s3cret") as client:
        assert client.tables() == []
    assert sent[0].headers["X-API-Key"] == "s3cret"
    with Client("http://testserver", http=api) as client:
        assert client.tables()[0].name == "small"
    assert not api.is_closed and api.get("/v1/tables/small").status_code == 200


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that takes connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_a_server_that_does_not_answer_in_time_is_a_timeout(silent: str) -> None:
    with Client(silent, timeout=0.5) as client, pytest.raises(ApiError) as raised:
        client.neighbors("small", "heart")
    assert (raised.value.status, raised.value.code) == (0, "timeout")
    assert isinstance(raised.value.__cause__, httpx.TimeoutException)


def test_a_refused_connection_is_a_connection_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    with Client(base) as client:  # the port is free again: nothing listens
        assert not client.ready()
        with pytest.raises(ApiError) as raised:
            client.tables()
    assert (raised.value.status, raised.value.code) == (0, "connection_error")
    assert base in raised.value.message and isinstance(raised.value.__cause__, httpx.ConnectError)


def test_a_connection_through_the_environments_proxy_names_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """With HTTP_PROXY set, httpx sends the request to the proxy: a proxy that refuses the connection or does not
    answer is named in the error, not taken for the server (which may well be up), until NO_PROXY names it."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    with socket.create_server(("127.0.0.1", 0)) as server:  # listening: the connection refused is the proxy's
        base = f"http://127.0.0.1:{server.getsockname()[1]}"
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy)
        with Client(base) as client, pytest.raises(ApiError) as raised:
            client.tables()
        assert raised.value.code == "connection_error"
        named = f"{base}/v1/tables through the proxy {proxy} (HTTP_PROXY; NO_PROXY=127.0.0.1 reaches the server"
        assert named in raised.value.message
        with pytest.raises(ApiError) as awaited:
            asyncio.run(AsyncClient(base).tables())
        assert awaited.value.code == "connection_error" and named in awaited.value.message
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        with Client(base, timeout=0.5) as client, pytest.raises(ApiError) as direct:
            client.tables()  # straight to the server, which never answers
        assert direct.value.code == "timeout" and "proxy" not in direct.value.message


def test_the_proxy_named_is_the_one_httpx_took_and_without_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy a connection error names is decided as httpx decides it, whose NO_PROXY rules are not urllib's
    (``host:port`` skips the proxy for that port, ``.localhost`` does not skip it for ``localhost``), and is shown
    without the user and password its address may hold."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    with socket.create_server(("127.0.0.1", 0)) as server:  # listening, never answering: a direct request times out
        base = f"http://localhost:{server.getsockname()[1]}"
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://alice:s3cret@127.0.0.1:{port}")
        for no_proxy, through in ((".localhost", True), (f"localhost:{server.getsockname()[1]}", False)):
            monkeypatch.setenv("NO_PROXY", no_proxy)
            with Client(base, timeout=0.5) as client, pytest.raises(ApiError) as raised:
                client.tables()
            message = raised.value.message
            assert "s3cret" not in message and "alice" not in message, message
            if through:  # the proxy refuses the connection
                assert raised.value.code == "connection_error", message
                assert f"through the proxy http://127.0.0.1:{port} (HTTP_PROXY; NO_PROXY=localhost" in message
            else:  # straight to the server, which never answers
                assert raised.value.code == "timeout" and "proxy" not in message, message


def test_a_partial_answer_of_a_sharded_tables_front_is_said() -> None:
    """The front of a sharded table with EMBEDDING_PARTIAL=true answers a search without a shard that did not
    answer and says so (docs/deployment.md): the client's Hits carry it, a batch's items each their own."""
    partial = {"shards": 3, "answered": 2, "missing": [{"shard": 2, "reason": "no answer in 2 s"}]}
    hit = {"id": "lee-001", "score": 0.5, "text": "a", "fields": {}}
    one = answering(httpx.Response(200, json={"hits": [hit], "partial": partial}))
    assert one.search_documents("lee", k=1, text="fire").partial == partial
    results = {"results": [{"hits": [hit], "partial": partial}, {"hits": []}]}
    first, second = answering(httpx.Response(200, json=results)).search_documents_batch("lee", [{"id": "a"}] * 2)
    assert not isinstance(first, ApiError) and first.partial == partial
    assert not isinstance(second, ApiError) and second.partial is None


@pytest.mark.parametrize(
    "base_url", ["localhost:8000", "127.0.0.1:8000", "http//127.0.0.1:8000", "", "http://", "http://[::1", "http://h:x"]
)
def test_an_address_without_its_scheme_is_refused_at_once(base_url: str) -> None:
    """An address httpx could never send a request to (no ``http://``: "localhost:8000" is read as the scheme
    ``localhost``) is a ValueError when the client is made, not every call's connection_error and a ``ready()``
    that answers False for ever."""
    for made in (Client, AsyncClient):
        with pytest.raises(ValueError, match=re.escape(f"base_url {base_url!r} is not an address of the form http://")):
            made(base_url)
