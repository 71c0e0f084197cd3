"""The hot routes reached without the router: a request whose method and path the router gave one of them before
goes straight to that route.

The routes asked for most are those :class:`service.http.fastroute.QueryRoute` answers with a handler of its own
(the hot GET routes, ``POST .../search``'s plain bodies). Between our middleware and such a handler, FastAPI puts
its exception middleware, an exit stack and the router, which tests the routes in order at a microsecond or two
each (``POST .../search`` is the seventh): together more of the event loop's time per request than any one step
of the search (BENCHMARKS.md, "HTTP floors: the hot routes found without the router").

So the first request of a method and path goes through them as any request does, and if the router gave it a hot
route that takes its method (the 405 of another is raised by the route's ``handle``, outside the route's own
wrapper, for the exception middleware), the route and what the router put in the scope (its endpoint, its path
parameters) are remembered (at most ``KNOWN`` method and path pairs, of paths up to ``LONGEST_PATH`` characters,
then they start again). A later request with that method and path is given the same scope and handed to the route,
which answers every error itself, by the exception handlers the exception middleware gave the first request's
scope. Every other request goes through the router, and so does every request while FastAPI's telemetry follows it
(the router names its route) or once the routes changed (a drain puts its own ``/readyz`` first): what was
remembered is then forgotten.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

KNOWN = 1024  # method and path pairs remembered: a table's name is part of the path
# The longest path remembered: a hot route's path naming a table (at most 64 characters) is under 100, and a client's
# longer one (a refused name) would otherwise keep its path twice, up to KNOWN times (60 MB at a 32 KiB head limit)
LONGEST_PATH = 256
HANDLERS = "starlette.exception_handlers"  # what Starlette's exception middleware gives the scope
ROUTED = ("endpoint", "path_params", "route", "router")  # what the router gives the scope of a request it routes


class KnownRoutes:
    """The innermost ASGI middleware: ``app`` is what it wraps (FastAPI's exception middleware, then its router),
    ``fastapi`` the app whose routes it hands requests to."""

    def __init__(self, app: ASGIApp, fastapi: FastAPI) -> None:
        self.app = app
        self.router = fastapi.router
        # Each hot route's app, by id (a route compares by its path, endpoint and methods: it has no hash)
        self.apps: dict[int, ASGIApp] = {
            id(route): route.handle for route in self.router.routes if getattr(route, "hot", False)
        }
        self.routes = len(self.router.routes)  # when this changes, what was remembered is forgotten
        self.handlers: Any = None  # the exception middleware's handlers, as it gave them to a scope
        # (method, path, root path) -> the hot route the router gave it (its id) and what it put in the scope
        self.known: dict[tuple[str, str, str], tuple[int, Scope]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "fastapi.telemetry" in scope:
            await self.app(scope, receive, send)
            return
        if len(self.router.routes) != self.routes:
            self.known.clear()
            self.routes = len(self.router.routes)
        key = (scope["method"], scope["path"], scope.get("root_path", ""))
        known = self.known.get(key)
        if known is None:
            routes = self.routes
            await self.app(scope, receive, send)
            if self.routes == routes == len(self.router.routes):  # the routes it was routed by are still the ones
                self.remember(key, scope)
            return
        route, routed = known
        scope.update(routed)
        scope["path_params"] = dict(routed["path_params"])  # this request's own, as the router makes it
        scope[HANDLERS] = self.handlers
        await self.apps[route](scope, receive, send)

    def remember(self, key: tuple[str, str, str], scope: Scope) -> None:
        """The hot route the router gave a request of a method it takes, and what it put in the scope (of any other,
        nothing)."""
        self.handlers = scope.get(HANDLERS, self.handlers)
        route = scope.get("route")
        routed = {name: scope[name] for name in ROUTED if name in scope}
        if route is None or id(route) not in self.apps or len(routed) < len(ROUTED) or self.handlers is None:
            return
        if key[0] not in route.methods or len(key[1]) > LONGEST_PATH:
            return
        if len(self.known) >= KNOWN:
            self.known.clear()
        self.known[key] = id(route), routed
