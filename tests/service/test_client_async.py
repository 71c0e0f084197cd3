"""``AsyncClient`` against a real ``embedding-serve`` (a words table, a documents table it encodes and MiniLM as a
transformer table): every method of ``Client``, with its signature, and its answers on the same calls, its errors
(the server's, and status 0 for no server), its retry of an ``overloaded`` answer."""

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
import numpy as np
import pytest

from service_client import ApiError, AsyncClient, Client
from service_client.maps import MapColours
from tests.cli import run_cli
from tests.conftest import link_table
from tests.minilm import ST
from tests.service import real_server

KEY = "async-client-writer-key-0123456789"
ADMIN = "async-client-admin-key-0123456789"
UNKNOWN = "zzqqxx"
VECTOR = [0.1 * (i % 7) for i in range(50)]  # a query of the words table (50 dimensions)
READS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("ready", (), {}),
    ("limits", (), {}),
    ("tables", (), {}),
    ("table", ("notes",), {}),
    ("vector", ("small", "the"), {"normalized": True}),
    ("vector_of_id", ("small", 5), {}),
    ("tokenize", (ST, "heartache"), {}),
    ("neighbors", ("small", "the"), {"k": 4, "exact": True, "restrict": 100}),
    ("most_similar", ("small", ["king", "woman"], ["man"]), {"k": 3, "restrict": 5000}),
    ("neighbors_batch", ("small", ["the", UNKNOWN, {"positive": ["fire", "water"]}]), {"k": 3, "restrict": 1000}),
    ("similarity", ("small", "fire", "water"), {}),
    ("similarities", ("small", [("fire", "water"), ("fire", UNKNOWN)]), {}),
    ("similarity_batch", (ST, [("heartache", "sorrow"), ("fire", UNKNOWN)]), {"compose": "mean"}),
    ("analogy", ("small", "man", "king", "woman"), {"k": 3, "restrict": 5000}),
    (
        "analogies",
        ("small", [("man", "king", "woman"), ("man", UNKNOWN, "woman")]),
        {"k": 2, "method": "3cosmul", "restrict": 5000},
    ),
    ("search_documents", ("notes",), {"text": "fire", "k": 1, "filter": {"topic": "fire"}}),
    ("search", ("small", VECTOR), {"k": 3, "restrict": 300}),
    ("search_batch", ("small", [VECTOR, [0.0] * 49]), {"k": 2, "restrict": 300}),
    (
        "search_documents_batch",
        ("notes", [{"text": "water"}, {"id": "nowhere"}]),
        {"k": 2, "filter": {"topic": "water"}},
    ),
    ("document", ("notes", "n2"), {"vector": True, "fields": ["topic"]}),
    ("documents", ("notes", ["n2", "none", "n1", "n2"]), {"vector": True, "fields": ["topic"]}),
    ("scroll_documents", ("notes",), {"filter": {"topic": "fire"}, "limit": 1, "after": "n1", "vector": True}),
    ("list_documents", ("notes",), {"fields": ["topic"]}),
    ("fields", ("notes",), {}),
    ("embed", ("small", ["fire and water", "the fire"]), {}),
    ("embed_details", ("small", ["fire and water"]), {}),
    ("contextual", (ST, ["the river bank", "money at the bank"]), {"token": "bank", "k": 2}),
    ("project", ("small", ["king", "queen", "boy", "girl"]), {"method": "axes", "x_axis": ["man", "woman"]}),
    ("doesnt_match", ("small", ["breakfast", "cereal", "dinner", "lunch"]), {}),
    ("doesnt_match_batch", ("small", [["red", "blue", "two"], ["red", UNKNOWN]]), {}),
    ("rank", ("small", "king", "queen"), {}),
    ("ranks", ("small", [("king", "queen"), ("cat", UNKNOWN)]), {}),
    ("rank_batch", ("small", [("king", "queen"), ("cat", UNKNOWN)]), {}),
    ("closer_than", ("small", "paris", "london"), {"limit": 3, "order": "score"}),
    ("n_similarity", ("small", ["fire", "house"], ["water", "river"]), {}),
    ("n_similarity_batch", ("small", [(["fire"], ["water"]), (["fire"], [UNKNOWN])]), {"skip_unknown": False}),
    ("expected_rank", ("small", "man", "king", "woman", "prince"), {"restrict": 5000}),
    ("compare", ("small", ST, "heart"), {"k": 3, "restrict": 1000}),
    ("compare_batch", ("small", ST, ["heart", UNKNOWN]), {"k": 3, "restrict": 1000}),
    ("map_info", ("small",), {}),
    ("map_points", ("small",), {}),
    ("map_labels", ("small",), {}),
    ("map_colours", (ST, "token kind"), {}),
    ("export", ("small", ["red", 5, {"token": "blue", "group": "colours"}], "metadata"), {}),
]
# The calls the other tests make of both clients: with READS, every public method of Client.
CHECKED_ELSEWHERE = {"reload", "close"}
CHECKED_ELSEWHERE |= {"upsert_documents", "upsert_many", "delete_document", "delete_many", "delete_documents"}
NAMED_OTHERWISE = {"close": "aclose"}  # awaited, as httpx.AsyncClient names it: a plain close() could not close it


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path, minilm_st_dir: Path) -> Iterator[str]:
    data = tmp_path_factory.mktemp("async-client") / "data"
    shutil.copytree(small_data_dir / "small", data / "small")
    notes = data.parent / "notes.jsonl"
    rows = [("n1", "a fire in the forest", "fire"), ("n2", "water in the river", "water"), ("n3", "fire", "fire")]
    notes.write_text("".join(json.dumps({"id": i, "text": t, "topic": topic}) + "\n" for i, t, topic in rows))
    made = run_cli(
        "import", notes, "--format", "documents", "--name", "notes", "--encoder", "small", "--data-dir", data
    )
    assert made.code == 0, made.err
    assert link_table(minilm_st_dir / ST, data)
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_API_KEY": ADMIN}
    with real_server.running(data, data.parent / "serve.log", env=env) as server:
        yield server.base


def public_methods(client: type) -> set[str]:
    return {name for name in dir(client) if not name.startswith("_") and callable(getattr(client, name))}


def test_async_client_has_every_method_of_client() -> None:
    """Each public method of Client is a coroutine of AsyncClient's with its signature (the same arguments, the
    same answer), and AsyncClient has no other but ``like``; each one is checked against Client's below."""
    async_methods = {NAMED_OTHERWISE.get(name, name) for name in public_methods(Client)}
    assert public_methods(AsyncClient) == async_methods | {"like"}
    for name in public_methods(Client) - NAMED_OTHERWISE.keys():
        method = getattr(AsyncClient, name)
        assert inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(getattr(Client, name)), name
        assert method.__doc__ == getattr(Client, name).__doc__, name
    assert {name for name, _, _ in READS} | CHECKED_ELSEWHERE == public_methods(Client)


def same(answer: Any, wanted: Any) -> bool:
    """Whether two answers are the same: of one type, with the same repr (a batch's ApiError items compared too),
    NumPy arrays by their values."""
    if isinstance(wanted, np.ndarray):
        return isinstance(answer, np.ndarray) and answer.dtype == wanted.dtype and np.array_equal(answer, wanted)
    if isinstance(wanted, MapColours):
        return isinstance(answer, MapColours) and same(answer.codes, wanted.codes) and repr(answer) == repr(wanted)
    return type(answer) is type(wanted) and repr(answer) == repr(wanted)


async def test_the_same_answers_as_client(base: str) -> None:
    with Client(base) as client:
        expected = [getattr(client, name)(*args, **kwargs) for name, args, kwargs in READS]
    async with AsyncClient(base) as api:
        answers = await asyncio.gather(*(getattr(api, name)(*args, **kwargs) for name, args, kwargs in READS))
    for (name, _, _), answer, wanted in zip(READS, answers, expected, strict=True):
        assert same(answer, wanted), name
    by_name = dict(zip((name for name, _, _ in READS), answers, strict=True))
    assert by_name["ready"] is True and by_name["analogy"][0].token == "queen"
    assert isinstance(by_name["neighbors_batch"][1], ApiError) and by_name["neighbors_batch"][1].status == 404
    assert by_name["map_points"].shape == (len(by_name["map_labels"]), 2) == (by_name["map_info"]["rows"], 2)
    assert [d["id"] for d in by_name["scroll_documents"]["documents"]] == ["n3"] and by_name["scroll_documents"][
        "next"
    ] is None
    assert [d["id"] for d in by_name["list_documents"]] == ["n1", "n2", "n3"]


async def test_reload_is_the_clients(base: str) -> None:
    with Client(base, api_key=ADMIN) as client:
        expected = client.reload()
    async with AsyncClient(base, api_key=ADMIN) as api:
        report = await api.reload()
    assert report["unchanged"] == ["notes", "small", ST] and report["ready"] is True
    assert {**report, "seconds": 0} == {**expected, "seconds": 0}


async def test_writes_are_the_clients(base: str) -> None:
    documents = [{"id": f"w{i}", "text": "fire and water", "topic": "w"} for i in range(5)]
    documents = [{"id": d["id"], "text": d["text"], "fields": {"topic": d["topic"]}} for d in documents]
    async with AsyncClient(base, api_key=KEY) as api:
        assert (await api.upsert_documents("notes", documents[:1]))["upserted"] == 1
        assert [a["upserted"] for a in await api.upsert_many("notes", documents)] == [5]
        with Client(base) as client:
            assert await api.document("notes", "w3") == client.document("notes", "w3")
            assert await api.documents("notes", ["w3", "w0"]) == client.documents("notes", ["w3", "w0"])
            assert (await api.delete_document("notes", "w0"))["deleted"] == 1
            assert [a["deleted"] for a in await api.delete_many("notes", ["w1", "w2", "none"])] == [2]
            assert (await api.delete_documents("notes", filter={"topic": "w"}))["deleted"] == 2
            assert client.search_documents("notes", k=10, text="fire", filter={"topic": "w"}).hits == []


FAILING: list[tuple[str, tuple[Any, ...]]] = [
    ("neighbors", ("small", "hearrt")),
    ("tokenize", ("small", "heart")),  # a words table has no tokenizer
    ("contextual", ("small", ["a bank"])),  # nor a model to run
    ("map_colours", (ST, "nowhere")),
    ("closer_than", ("small", "paris", UNKNOWN)),
    ("reload", ()),  # no admin key
]


async def test_errors_are_the_clients(base: str) -> None:
    expected = []
    with Client(base) as client:
        for name, args in FAILING:
            with pytest.raises(ApiError) as raised:
                getattr(client, name)(*args)
            expected.append(raised.value)
    async with AsyncClient(base) as api:
        for (name, args), wanted in zip(FAILING, expected, strict=True):
            with pytest.raises(ApiError) as raised:
                await getattr(api, name)(*args)
            error = raised.value
            assert (error.status, error.code, error.message, error.details) == (
                wanted.status,
                wanted.code,
                wanted.message,
                wanted.details,
            ), name
        with pytest.raises(ApiError) as unwritten:  # no write key
            await api.delete_document("notes", "n1")
    assert (expected[0].status, expected[0].code) == (404, "unknown_token") and expected[0].suggestions
    assert len({(error.status, error.code, error.message) for error in expected}) == len(FAILING)
    assert unwritten.value.status == 401


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
