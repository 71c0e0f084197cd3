"""``HEAD`` answered wherever ``GET`` is (RFC 9110): the request is routed as a ``GET`` and its answer sent
without the body, with the headers ``GET`` would have (``Content-Length`` included). Load balancers and uptime
checks probe with ``HEAD``; without this every route, declared for ``GET`` only, would answer 405."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                message = {**message, "body": b""}
            await send(message)

        # A copy: the server's own scope still says HEAD, and so it sends no body either.
        as_get = {**scope, "method": "GET"}
        try:
            await self.app(as_get, receive, without_body)
        finally:  # what routing found (the route, its path parameters), for the middleware around (metrics)
            scope.update({key: value for key, value in as_get.items() if key != "method"})
