"""``HEAD`` answered wherever ``GET`` is (RFC 9110): the request is routed as a ``GET`` and its answer sent
without the body, with the headers ``GET`` would have (``Content-Length`` included). Load balancers and uptime
checks probe with ``HEAD``; without this every route, declared for ``GET`` only, would answer 405.

The answer passes out with its body: the server sends a ``HEAD``'s answer without one (its own scope still says
``HEAD``), as Starlette's test client does, and the middleware outside reads the body it rewrites (an error on the
OpenAI-compatible paths, ``service.http.openai_errors``: its status and ``Content-Length`` are the ``GET``'s)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        # A copy: the server's own scope still says HEAD, and so it sends no body.
        as_get = {**scope, "method": "GET"}
        try:
            await self.app(as_get, receive, send)
        finally:  # what routing found (the route, its path parameters), for the middleware around (metrics)
            scope.update({key: value for key, value in as_get.items() if key != "method"})
