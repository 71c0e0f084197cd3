"""``AsyncClient`` against a real ``embedding-serve`` (a words table and a documents table it encodes): the answers
of ``Client`` on the same calls, its errors (the server's, and status 0 for no server), its retry of an
``overloaded`` answer, its signatures."""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service_client import ApiError, AsyncClient, Client
from tests.cli import run_cli
from tests.service import real_server

KEY = "async-client-writer-key-0123456789"
READS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("ready", (), {}),
    ("tables", (), {}),
    ("table", ("notes",), {}),
    ("vector", ("small", "the"), {"normalized": True}),
    ("neighbors", ("small", "the"), {"k": 4, "exact": True}),
    ("neighbors_batch", ("small", ["the", "zzqqxx", {"positive": ["fire", "water"]}]), {"k": 3}),
    ("similarity", ("small", "fire", "water"), {}),
    ("search_documents", ("notes",), {"text": "fire", "k": 1, "filter": {"topic": "fire"}}),
    ("search_documents_batch", ("notes", [{"text": "water"}, {"id": "nowhere"}]), {"k": 2}),
    ("document", ("notes", "n2"), {"vector": True, "fields": ["topic"]}),
    ("fields", ("notes",), {}),
    ("embed", ("small", ["fire and water", "the fire"]), {}),
    ("embed_details", ("small", ["fire and water"]), {}),
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path) -> Iterator[str]:
    data = tmp_path_factory.mktemp("async-client") / "data"
    shutil.copytree(small_data_dir / "small", data / "small")
    notes = data.parent / "notes.jsonl"
    rows = [("n1", "a fire in the forest", "fire"), ("n2", "water in the river", "water"), ("n3", "fire", "fire")]
    notes.write_text("".join(json.dumps({"id": i, "text": t, "topic": topic}) + "\n" for i, t, topic in rows))
    made = run_cli(
        "import", notes, "--format", "documents", "--name", "notes", "--encoder", "small", "--data-dir", data
    )
    assert made.code == 0, made.err
    with real_server.running(data, data.parent / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        yield server.base


def test_the_async_calls_are_the_clients() -> None:
    """Each call of AsyncClient is a call of Client's, with its signature: the same arguments, the same answer."""
    called = {name for name, method in vars(AsyncClient).items() if inspect.iscoroutinefunction(method)}
    assert {name for name, _, _ in READS} | {"search", "search_batch", "upsert_many"} <= called
    for name in called - {"__aenter__", "__aexit__", "aclose", "_run", "_request", "_once"}:
        assert inspect.signature(getattr(AsyncClient, name)) == inspect.signature(getattr(Client, name)), name


async def test_the_same_answers_as_client(base: str) -> None:
    with Client(base) as client:
        expected = [getattr(client, name)(*args, **kwargs) for name, args, kwargs in READS]
        vector = client.vector("small", "fire")
        searched = client.search("small", vector, k=3), client.search_batch("small", [vector, vector], k=2)
    async with AsyncClient(base) as api:
        answers = await asyncio.gather(*(getattr(api, name)(*args, **kwargs) for name, args, kwargs in READS))
        assert (await api.search("small", vector, k=3), await api.search_batch("small", [vector] * 2, k=2)) == searched
    for (name, _, _), answer, wanted in zip(READS, answers, expected, strict=True):
        assert type(answer) is type(wanted) and repr(answer) == repr(wanted), name  # items' ApiError compared too
    assert answers[0] is True and isinstance(answers[5][1], ApiError) and answers[5][1].status == 404


async def test_writes_are_the_clients(base: str) -> None:
    documents = [{"id": f"w{i}", "text": "fire and water", "topic": "w"} for i in range(5)]
    documents = [{"id": d["id"], "text": d["text"], "fields": {"topic": d["topic"]}} for d in documents]
    async with AsyncClient(base, api_key=KEY) as api:
        assert (await api.upsert_documents("notes", documents[:1]))["upserted"] == 1
        assert [a["upserted"] for a in await api.upsert_many("notes", documents)] == [5]
        with Client(base) as client:
            assert await api.document("notes", "w3") == client.document("notes", "w3")
            assert (await api.delete_document("notes", "w0"))["deleted"] == 1
            assert [a["deleted"] for a in await api.delete_many("notes", ["w1", "w2", "none"])] == [2]
            assert (await api.delete_documents("notes", filter={"topic": "w"}))["deleted"] == 2
            assert client.search_documents("notes", k=10, text="fire", filter={"topic": "w"}).hits == []


async def test_errors_are_the_clients(base: str) -> None:
    with Client(base) as client, pytest.raises(ApiError) as expected:
        client.neighbors("small", "hearrt")
    async with AsyncClient(base) as api:
        with pytest.raises(ApiError) as raised:
            await api.neighbors("small", "hearrt")
        with pytest.raises(ApiError) as unwritten:  # no write key
            await api.delete_document("notes", "n1")
    error, wanted = raised.value, expected.value
    assert (error.status, error.code, error.message, error.details) == (
        404,
        "unknown_token",
        wanted.message,
        wanted.details,
    )
    assert error.suggestions and unwritten.value.status == 401


async def test_no_server_is_status_0() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        nothing = f"http://127.0.0.1:{listener.getsockname()[1]}"
        async with AsyncClient(nothing, timeout=0.3) as api:
            with pytest.raises(ApiError) as silent:  # it takes the connection and never answers
                await api.tables()
    async with AsyncClient(nothing) as api:  # the port is free again: nothing listens
        assert not await api.ready()
        with pytest.raises(ApiError) as refused:
            await api.tables()
    assert (silent.value.status, silent.value.code) == (0, "timeout")
    assert (refused.value.status, refused.value.code) == (0, "connection_error")
    assert nothing in refused.value.message and isinstance(refused.value.__cause__, httpx.ConnectError)


async def test_an_overloaded_answer_is_retried_after_its_retry_after() -> None:
    overloaded = httpx.Response(
        503, json={"error": {"code": "overloaded", "message": "busy"}}, headers={"Retry-After": "0"}
    )
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return (
            overloaded
            if len(sent) < 3
            else httpx.Response(200, json={"neighbors": [{"token": "a", "id": 1, "score": 1}]})
        )

    async with httpx.AsyncClient(base_url="http://test", transport=httpx.MockTransport(handler)) as http:
        assert (await AsyncClient("http://test", http=http).neighbors("t", "a", k=1))[0].token == "a"
        assert len(sent) == 3
        sent.clear()
        with pytest.raises(ApiError) as raised:
            await AsyncClient("http://test", http=http, retries=1).neighbors("t", "a")
        assert (raised.value.status, raised.value.code, raised.value.retry_after, len(sent)) == (
            503,
            "overloaded",
            0.0,
            2,
        )
