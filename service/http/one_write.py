"""A response's head and body written to the socket together: one ``send`` system call and one TCP segment.

uvicorn writes a response's status line and headers when the app sends ``http.response.start`` and its body when
the app sends ``http.response.body``: two writes, and so two system calls and two TCP segments (uvloop sends at
once, with ``TCP_NODELAY``), for an answer of a few hundred bytes. On a busy event loop each is CPU the loop
spends beside the request, and the client wakes up twice. :class:`OneWriteCycle` is uvicorn's request cycle with
the head held back until the first part of the body (or the end of a body-less answer, e.g. to ``HEAD``) and
then written with it; uvicorn still builds and checks both. Nothing else changes: ``100 Continue`` is written
when the body is asked for, as before, and an app that sends its head and then waits (none here does) sends it
with its first part of the body.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


class _Held:
    """What the cycle writes during one ``send``, kept; a close it asks for and the end of the answer, remembered."""

    __slots__ = ("closing", "complete", "data")

    def __init__(self) -> None:
        self.data = b""
        self.closing = False
        self.complete = False

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        self.closing = True

    def answered(self) -> None:
        self.complete = True


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's cycle, writing the head with the first part of the body (module docstring)."""

    head = b""  # the head held back, until the body's first part

    async def send(self, message: Any) -> None:
        if self.disconnected:
            await super().send(message)
            return
        transport, held, on_response = self.transport, _Held(), self.on_response
        self.transport = held  # type: ignore[assignment]  # only write and close are called during a send
        self.on_response = held.answered  # after the bytes are written (a refusal queued behind them writes next)
        try:
            await super().send(message)
        finally:
            self.transport, self.on_response = transport, on_response
        if message["type"] == "http.response.start":
            self.head = held.data
            return
        data, self.head = self.head + held.data, b""
        if transport.is_closing():  # the client left while the app worked: nothing more can be sent
            self.disconnected = True
        elif data:
            transport.write(data)
        if held.closing:
            transport.close()
        if held.complete:
            on_response()


def use_one_write(cycle: RequestResponseCycle | None) -> None:
    """Make the cycle uvicorn has just made for a request (its task not yet run) a :class:`OneWriteCycle`."""
    if type(cycle) is RequestResponseCycle:
        cycle.__class__ = OneWriteCycle
