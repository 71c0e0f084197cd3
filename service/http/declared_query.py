"""A query string's unknown parameters are refused, as a JSON body's unknown fields are: ``?min_scor=0.5``
answered without the filter it meant would look like an answer to the question asked, and ``POST .../search?k=3``
answered with the body's ``k`` (or its default) would too.

The hot GET routes validate their query string with a model that forbids other fields
(``service.http.fastroute``, ``service.schemas.common.QUERY``). The other routes, of every method, are FastAPI's,
which ignores a parameter it does not declare: :func:`declared_only` checks theirs against the names the route
declares (a route that reads its body only declares none).
Either way the refusal is the body's: 422 ``invalid_request``, "<name>: Extra inputs are not permitted". The
probes and the metrics (``PROBES``) are left as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette._exception_handler import wrap_app_handling_exceptions
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

EXTRA = "Extra inputs are not permitted"  # pydantic's words for a field a model forbids
# The probes and the metrics answer whatever their query string: a monitor's cache-buster (``/healthz?t=...``) must
# not make a healthy server look dead to a load balancer or a kubelet, nor a scraper's parameters lose its metrics.
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


def unknown_parameters(query_string: bytes, declared: frozenset[str]) -> list[str]:
    """The names in ``query_string`` that are not ``declared``, each once, in their order."""
    names = (name for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True))
    return list(dict.fromkeys(name for name in names if name not in declared))


def declared_only(routes: Iterable[Any]) -> None:
    """Make each FastAPI route among ``routes`` refuse query parameters it does not declare (the routes of
    :func:`service.http.fastroute.query_params` models are left to their models)."""
    for route in routes:
        if not isinstance(route, APIRoute) or route.path in PROBES:
            continue
        if getattr(route.endpoint, "query_model", None) is not None or hasattr(route.app, "declared"):
            continue  # a model's route, or checked already (the routers are shared by every app made)
        route.app = _checked(route.app, _query_names(route.dependant))


def _query_names(dependant: Dependant) -> frozenset[str]:
    """The query parameters a route declares, its dependencies' included."""
    names: set[str] = set()
    pending = [dependant]
    while pending:
        current = pending.pop()
        names.update(field.alias for field in current.query_params)
        pending.extend(current.dependencies)
    return frozenset(names)


def _checked(app: Any, declared: frozenset[str]) -> Any:
    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        query = scope["query_string"]
        if query and (unknown := unknown_parameters(query, declared)):
            # answered by the app's handler of validation errors, as the route's own would be (a hot route is
            # handed requests without the exception middleware: service.http.known_routes)
            refused = RequestValidationError(
                [{"type": "extra_forbidden", "loc": ("query", n), "msg": EXTRA} for n in unknown]
            )
            await wrap_app_handling_exceptions(_raising(refused), Request(scope))(scope, receive, send)
            return
        await app(scope, receive, send)

    checked.declared = declared  # type: ignore[attr-defined]  # a function attribute, read back by hasattr
    return checked


def _raising(error: Exception) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise error

    return app
