"""``X-Request-ID``: a client's or a proxy's name for one request, sent back with its answer and written on the
server's log lines about it (``service.logs``), so the request can be followed through a proxy and the server.

A valid id is 1 to 128 visible ASCII characters; any other value is ignored: neither sent back nor logged. A
request without one is given none. This pure ASGI middleware wraps the whole app, Starlette's error middleware
included (``create_app``): every answer, a 500 of an unexpected error too, passes through it.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.logs import REQUEST_ID

HEADER = b"x-request-id"  # as servers hand header names to the app: lower case
VALID = re.compile(rb"[\x21-\x7e]{1,128}")


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == HEADER:
                    if VALID.fullmatch(value):
                        await self._named(value, scope, receive, send)
                        return
                    break  # the first one counts
            # None, whatever the connection's request before had: a request pipelined behind another runs in a
            # task started inside that one's send, in a copy of its context
            REQUEST_ID.set(None)
        await self.app(scope, receive, send)

    async def _named(self, request_id: bytes, scope: Scope, receive: Receive, send: Send) -> None:
        header = (HEADER, request_id)

        async def send_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        token = REQUEST_ID.set(request_id.decode("ascii"))
        await self.app(scope, receive, send_id)  # the server's access line is written in send: with the id
        REQUEST_ID.reset(token)  # an unexpected error was logged, with the id, and ended inside (http.logged_once)
