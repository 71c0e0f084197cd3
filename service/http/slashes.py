"""The trailing-slash redirect (``GET /v1/tables/`` -> 307 ``/v1/tables``) with a relative ``Location``.

Starlette's own (``redirect_slashes``) writes an absolute URL from the request's ``Host`` header: a client (or a
cache in front) that sends a Host of its choosing is redirected to that host. The path alone (RFC 9110's
``Location`` is a URI reference) is followed on the host the client asked, whatever the Host said. The path is
the decoded one the routes matched, encoded again: a ``%3F`` sent stays ``%3F`` (not a query), a ``%25`` stays ``%25``.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.responses import RedirectResponse
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Receive, Scope, Send

PCHARS = "/:@!$&'()*+,;="  # RFC 3986's pchar and "/", less "%": left as they are; every other byte escaped


def relative_slash_redirects(router: Router) -> ASGIApp:
    """The router's fallback (``router.default``, reached when no route matches) with Starlette's redirect_slashes
    on a relative ``Location``; ``router.redirect_slashes`` must be off."""
    not_found = router.default

    async def default(scope: Scope, receive: Receive, send: Send) -> None:
        route_path = _route_path(scope)
        if scope["type"] == "http" and route_path != "/":
            path = scope["path"]
            other = {**scope, "path": path.rstrip("/") if route_path.endswith("/") else path + "/"}
            if any(route.matches(other)[0] is not Match.NONE for route in router.routes):
                # one leading slash: "//host/..." would be a reference to another host; "?", "#" and "%"
                # escaped, so the path followed decodes to the one matched
                location = quote("/" + other["path"].lstrip("/"), safe=PCHARS)
                if scope["query_string"]:
                    location += "?" + scope["query_string"].decode("latin-1")
                await RedirectResponse(location)(scope, receive, send)
                return
        await not_found(scope, receive, send)

    return default


def _route_path(scope: Scope) -> str:
    """The path the routes match: the request's, less the ``root_path`` a proxy mounted the app under."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :]
    return path
