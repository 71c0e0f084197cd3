"""The hot GET routes reached past the router (``service.http.hot_door``): every request gets the same response
(status, headers, bytes) and the same request metrics with the door open as through the router, and the door
only takes the routes the router would pick."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import Route

from service.http.hot_door import HotDoor, hot_routes
from tests.service.conftest import client_for

T = "/v1/tables/small"
HOT = [
    "/v1/tables/{table}/neighbors",
    "/v1/tables/{table}/similarity",
    "/v1/tables/{table}/rank",
    "/v1/tables/{table}/closer-than",
    "/v1/compare",
]
REQUESTS = [
    f"{T}/neighbors?token=heart&k=3",
    f"{T}/neighbors?token=Heart&k=10&exact=true",
    f"{T}/neighbors?id=1058&k=2",
    f"{T}/neighbors?token=heart&k=5&restrict=500",
    f"{T}/neighbors?token=heart&token=brain",  # the last value of a repeated name
    f"{T}/neighbors?token=%C3%A9t%C3%A9&k=3",
    f"{T}/neighbors?token=qwxzzq",  # unknown: 404 with suggestions
    f"{T}/neighbors?token=heart&k=0",
    f"{T}/neighbors?token=heart&k=abc",
    f"{T}/neighbors?k=3",
    f"{T}/neighbors?token=heart&id=3",
    f"{T}/neighbors",
    "/v1/tables/nope/neighbors?token=heart",
    "/v1/tables/" + "x" * 300 + "/neighbors?token=heart",
    "/v1/tables/sm%20all/neighbors?token=heart",
    f"{T}/neighbors/?token=heart",  # the router's slash redirect
    f"{T}//neighbors?token=heart",
    f"{T}/similarity?a=red&b=blue",
    f"{T}/similarity?a=red&b=qwxzzq",
    f"{T}/similarity?a=red",
    f"{T}/rank?a=red&b=blue",
    f"{T}/closer-than?a=red&b=blue&limit=3",
    "/v1/compare?first=small&second=small&token=heart&k=3",
    "/v1/compare?first=small&second=nope&token=heart",
    f"{T}/tokens/heart",  # not a hot route: the router's
    "/healthz",
]


def door_of(client: TestClient) -> HotDoor:
    app: Any = client.app.middleware_stack  # type: ignore[attr-defined]  # built by the lifespan
    while not isinstance(app, HotDoor):
        app = app.app
    return app


@pytest.fixture(scope="module")
def clients(small_data_dir: Path) -> Iterator[tuple[TestClient, TestClient]]:
    # No answer cache: it sits outside the door and would answer repeated requests itself.
    with (
        client_for(data_dir=small_data_dir, cache_bytes=0) as door,
        client_for(data_dir=small_data_dir, cache_bytes=0) as router,
    ):
        door.get("/healthz")
        router.get("/healthz")
        door_of(router).open = False
        yield door, router


def shown(response: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    return response.status_code, sorted(response.headers.items()), response.content


@pytest.mark.parametrize("path", REQUESTS)
def test_same_answer_either_way(clients: tuple[TestClient, TestClient], path: str) -> None:
    door, router = clients
    for method in ("GET", "HEAD"):
        assert shown(door.request(method, path, follow_redirects=False)) == shown(
            router.request(method, path, follow_redirects=False)
        ), (method, path)


def test_same_request_metrics(clients: tuple[TestClient, TestClient]) -> None:
    door, router = clients
    for path in REQUESTS:
        door.get(path, follow_redirects=False)
        router.get(path, follow_redirects=False)

    def counted(client: TestClient) -> list[str]:
        lines = client.get("/metrics").text.splitlines()
        return sorted(line for line in lines if line.startswith("embedding_http_requests_total{"))

    assert counted(door) == counted(router)
    assert any('route="/v1/tables/{table}/neighbors",status="404",table="unknown"' in line for line in counted(door))


def test_the_door_takes_the_hot_routes_past_the_router(
    clients: tuple[TestClient, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    door, router = clients
    assert door_of(door).open and [route.path for route in door_of(door).routes or []] == HOT
    passed: list[str] = []
    real = ExceptionMiddleware.__call__

    async def counting(self: ExceptionMiddleware, scope: Any, receive: Any, send: Any) -> None:
        passed.append(scope["path"])
        await real(self, scope, receive, send)

    monkeypatch.setattr(ExceptionMiddleware, "__call__", counting)
    assert door.get(f"{T}/neighbors?token=heart").status_code == 200
    assert door.get(f"{T}/similarity?a=red&b=blue").status_code == 200
    assert passed == []
    assert door.get(f"{T}/tokens/heart").status_code == 200  # not a hot route
    assert door.head(f"{T}/neighbors?token=heart").status_code == 405  # HEAD: the router refuses it
    assert router.get(f"{T}/neighbors?token=heart").status_code == 200  # the door closed
    assert passed == [f"{T}/tokens/heart", f"{T}/neighbors", f"{T}/neighbors"]


def test_a_route_ahead_keeps_its_paths(clients: tuple[TestClient, TestClient]) -> None:
    door, _ = clients
    routes = list(door.app.router.routes)  # type: ignore[attr-defined]

    async def ahead(_: Any) -> Any:
        raise AssertionError

    shadow = Route("/v1/tables/{name}/rank", ahead, methods=["GET"])
    assert [r.path for r in hot_routes([shadow, *routes])] == [p for p in HOT if not p.endswith("/rank")]
    post_only = Route("/v1/tables/{name}/rank", ahead, methods=["POST"])  # the router passes it by for GET
    assert [r.path for r in hot_routes([post_only, *routes])] == HOT
