"""The hot GET routes reached without the router's layers.

A searched ``GET .../neighbors`` passes, after this app's own middleware, through FastAPI's exception middleware,
its exit-stack middleware and the router, which tries the routes in order until one matches. On the event loop
of a busy server that is about a fifth of what the app spends on such a request outside the search
(BENCHMARKS.md, "HTTP floors"). :class:`HotDoor`, the innermost of this app's middleware, matches the hot GET
routes (those whose handler validates its own query string, ``service.http.fastroute.query_params``) itself and
hands the request to the route as the router would: the same route object, the same scope keys, the same
exception handlers around the handler, so the same answers and errors.

It only takes a route when nothing could answer the request differently: the route is the first one the
router would pick for such a path (checked once, on the first request, when every route is in place), no
sharded table is fronted here (those tables' own routes come first), and FastAPI's request telemetry is off
(the router records the chosen route for it). Anything else goes down the usual way.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi.routing import APIRoute
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

PARAM = re.compile(r"{[^}]*}")


def _first_match(routes: list[BaseRoute], path: str) -> BaseRoute | None:
    """The route the router picks for ``GET path``: the first full match."""
    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "query_string": b"", "headers": []}
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route
    return None


def hot_routes(routes: list[BaseRoute]) -> list[APIRoute]:
    """The query-string GET routes among ``routes`` that the router would pick for their own paths."""
    hot = []
    for route in routes:
        if not isinstance(route, APIRoute) or "GET" not in (route.methods or ()):
            continue
        if getattr(route.endpoint, "query_model", None) is None:
            continue
        if _first_match(routes, PARAM.sub("x", route.path_format)) is route:
            hot.append(route)
    return hot


class HotDoor:
    """Hand a request for a hot GET route straight to that route (module docstring); the rest to ``app``."""

    def __init__(self, app: ASGIApp, sharded: bool) -> None:
        self.app = app
        # FastAPI's exception middleware is the next layer in: its handlers are the ones the route's wrapper uses
        self.open = isinstance(app, ExceptionMiddleware) and not sharded
        self.routes: list[APIRoute] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.open or scope["type"] != "http" or scope["method"] != "GET" or scope.get("fastapi.telemetry"):
            await self.app(scope, receive, send)
            return
        if self.routes is None:
            self.routes = hot_routes(scope["app"].router.routes)
        for route in self.routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                break
        else:
            await self.app(scope, receive, send)
            return
        handlers: Any = self.app
        scope["starlette.exception_handlers"] = (handlers._exception_handlers, handlers._status_handlers)
        scope.setdefault("router", scope["app"].router)
        scope.update(child)
        await route.handle(scope, receive, send)
