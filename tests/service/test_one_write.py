"""The server's HTTP protocol writes a response's head and body in one write (``service.http.one_write``), with
the same bytes as uvicorn's two writes, and keeps what must not wait: ``100 Continue``, a body-less answer's head,
the close of a ``Connection: close`` answer after its bytes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from service.http.protocol import JsonErrorsProtocol

BODY = b'{"neighbors":[]}'


class Transport(asyncio.Transport):
    """Every write and the close, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[bytes | str] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.events.append(bytes(data))

    def close(self) -> None:
        self.events.append("close")
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0  # every write sent at once

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    request = Request(scope, receive)
    body = await request.body()
    await Response(BODY + body, media_type="application/json")(scope, receive, send)


async def exchange(protocol_class: type[HttpToolsProtocol], *requests: bytes, asgi: Any = app) -> list[bytes | str]:
    """What the protocol writes for ``requests`` to ``asgi``, each sent once the answer before it is written."""
    config = Config(app=asgi, proxy_headers=False, date_header=False, server_header=False, log_level="warning")
    config.load()
    transport = Transport()
    protocol = protocol_class(config, ServerState(), {})  # type: ignore[call-arg]
    protocol.connection_made(transport)
    for request in requests:
        protocol.data_received(request)
        for _ in range(50):
            await asyncio.sleep(0)
    protocol.connection_lost(None)
    return transport.events


def test_head_and_body_in_one_write_with_uvicorns_bytes() -> None:
    request = b"GET /v1/tables/t/neighbors?token=a HTTP/1.1\r\nhost: x\r\n\r\n"
    ours = asyncio.run(exchange(JsonErrorsProtocol, request, request))
    theirs = asyncio.run(exchange(HttpToolsProtocol, request, request))
    assert len(theirs) == 5 and theirs[4] == "close"  # uvicorn: head, body, head, body; closed when lost
    assert ours == [theirs[0] + theirs[1], theirs[2] + theirs[3], "close"]  # type: ignore[operator]
    assert ours[0].endswith(b"\r\n\r\n" + BODY)  # type: ignore[union-attr]


def test_a_head_request_gets_its_head() -> None:
    request = b"HEAD /readyz HTTP/1.1\r\nhost: x\r\n\r\n"
    ours = asyncio.run(exchange(JsonErrorsProtocol, request))
    assert ours == asyncio.run(exchange(HttpToolsProtocol, request))
    assert len(ours) == 2 and ours[0].startswith(b"HTTP/1.1 200 OK\r\n")  # type: ignore[union-attr]


def test_continue_is_not_held_and_close_follows_the_answer() -> None:
    head = b"POST /v1/tables/t/search HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n"
    request = head + b"connection: close\r\n\r\n"

    async def run() -> list[bytes | str]:
        config = Config(app=app, proxy_headers=False, date_header=False, server_header=False, log_level="warning")
        config.load()
        transport = Transport()
        protocol = JsonErrorsProtocol(config, ServerState(), {})
        protocol.connection_made(transport)
        protocol.data_received(request)
        for _ in range(50):
            await asyncio.sleep(0)
        assert transport.events == [b"HTTP/1.1 100 Continue\r\n\r\n"]  # asked for the body: not held
        protocol.data_received(b"{}")
        for _ in range(50):
            await asyncio.sleep(0)
        return transport.events

    events = asyncio.run(run())
    assert len(events) == 3 and events[2] == "close"
    answer = events[1]
    assert isinstance(answer, bytes)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"connection: close\r\n" in answer
    assert answer.endswith(b"\r\n\r\n" + BODY + b"{}")


def answering(*messages: dict[str, Any]) -> Any:
    """An ASGI app that sends ``messages`` as they are."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for message in messages:
                await send(message)

    return asgi


def start(*headers: tuple[bytes, bytes], status: int = 200) -> dict[str, Any]:
    return {"type": "http.response.start", "status": status, "headers": list(headers)}


def body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


LENGTH = (b"content-length", b"%d" % len(BODY))
ANSWERS = {
    "whole body": [start(LENGTH, (b"Content-Type", b"application/json")), body(BODY)],
    "connection close": [start(LENGTH, (b"connection", b"keep-alive, Close")), body(BODY)],
    "no content": [start(status=204), body(b"")],
    "chunked": [start(), body(BODY[:5], more=True), body(BODY[5:], more=True), body(b"")],
    "in parts": [start(LENGTH), body(BODY[:5], more=True), body(BODY[5:])],
    "invalid header name": [start(LENGTH, (b"bad name", b"x")), body(BODY)],
    "invalid header value": [start(LENGTH, (b"x-ok", b"a\nb")), body(BODY)],
}


def until_closed(events: list[bytes | str]) -> list[bytes | str]:
    """The events up to the first close: what reaches the client (uvicorn writes on after it, to no effect; the
    protocol writes nothing to a closing transport)."""
    return events[: events.index("close") + 1] if "close" in events else events


@pytest.mark.parametrize("name", ANSWERS)
def test_every_answer_as_uvicorn_writes_it(name: str) -> None:
    """Whole, body-less, streamed and refused answers: the same bytes as uvicorn's (the head joined with the body's
    first part), the same close, the same 500 for a header uvicorn refuses."""
    request = b"GET /v1/tables/t/neighbors?token=a HTTP/1.1\r\nhost: x\r\n\r\n"
    asgi = answering(*ANSWERS[name])
    ours = until_closed(asyncio.run(exchange(JsonErrorsProtocol, request, request, asgi=asgi)))
    theirs = until_closed(asyncio.run(exchange(HttpToolsProtocol, request, request, asgi=asgi)))
    assert b"".join(e for e in ours if isinstance(e, bytes)) == b"".join(e for e in theirs if isinstance(e, bytes))
    assert ours[-1] == theirs[-1]
    if name in ("whole body", "connection close", "no content"):  # one write per answer
        assert len([e for e in ours if isinstance(e, bytes)]) == len([e for e in theirs if isinstance(e, bytes)]) // 2


def test_a_body_longer_than_its_length_closes_the_connection() -> None:
    """uvicorn refuses the body after writing the head; the held head is not written: the connection closes."""
    request = b"GET /v1/tables/t/neighbors?token=a HTTP/1.1\r\nhost: x\r\n\r\n"
    asgi = answering(start((b"content-length", b"2")), body(BODY))
    ours = asyncio.run(exchange(JsonErrorsProtocol, request, asgi=asgi))
    theirs = asyncio.run(exchange(HttpToolsProtocol, request, asgi=asgi))
    assert ours[-1] == theirs[-1] == "close"
    assert not [e for e in ours if isinstance(e, bytes)]
    assert next(e for e in theirs if isinstance(e, bytes)).startswith(b"HTTP/1.1 200 OK\r\n")  # the head alone
