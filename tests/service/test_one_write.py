"""The server's HTTP protocol writes a response's head and body in one write (``service.http.one_write``), with
the same bytes as uvicorn's two writes, and keeps what must not wait: ``100 Continue``, a body-less answer's head,
the close of a ``Connection: close`` answer after its bytes."""

from __future__ import annotations

import asyncio
from typing import Any

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


async def exchange(protocol_class: type[HttpToolsProtocol], *requests: bytes) -> list[bytes | str]:
    """What the protocol writes for ``requests``, each sent once the answer before it is written."""
    config = Config(app=app, proxy_headers=False, date_header=False, server_header=False, log_level="warning")
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
