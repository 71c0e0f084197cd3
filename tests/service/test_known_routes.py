"""``service.http.known_routes``: a request whose method and path the router gave a hot route before is handed to
that route without the router, and gets what the router would have given it: the same status, headers and bytes
(answers and errors alike), the same request metrics; and the router's choice still wins when the routes change."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.responses import Response
from starlette.routing import Route

from service.http import known_routes
from service.http.known_routes import KnownRoutes
from tests.service.conftest import client_for

T = "/v1/tables/small"
VARYING = ("date", "x-request-id")  # headers that differ between any two requests


@pytest.fixture
def client(small_data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=small_data_dir, cache_bytes=0) as client:
        yield client


def middleware(client: TestClient) -> KnownRoutes:
    app: Any = client.app.middleware_stack  # type: ignore[attr-defined]
    while not isinstance(app, KnownRoutes):
        app = app.app
    return app


def answer(client: TestClient, method: str, url: str, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
    response = client.request(method, url, **kwargs)
    headers = {name: value for name, value in response.headers.items() if name not in VARYING}
    return response.status_code, headers, response.content


def vector(client: TestClient, token: str) -> list[float]:
    found: list[float] = client.get(f"{T}/tokens/{token}").json()["vector"]
    return found


REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", f"{T}/neighbors?token=heart&k=5", {}),
    ("GET", f"{T}/neighbors?token=heart&k=5&exact=true&offset=2", {}),
    ("GET", f"{T}/neighbors?token=no-such-word-here", {}),  # 404 with suggestions
    ("GET", f"{T}/neighbors?token=heart&k=0", {}),  # 422
    ("GET", f"{T}/neighbors?token=heart&kk=3", {}),  # 422, an undeclared parameter
    ("GET", f"{T}/similarity?a=king&b=queen", {}),
    ("GET", f"{T}/rank?a=king&b=queen", {}),
    ("GET", f"{T}/closer-than?a=king&b=queen&limit=3", {}),
    ("GET", "/v1/tables/nowhere/neighbors?token=heart", {}),  # 404, an unknown table
    ("GET", "/v1/tables/.hidden/neighbors?token=heart", {}),  # 422, a name that is not a table's
    ("HEAD", f"{T}/neighbors?token=heart", {}),
    ("DELETE", f"{T}/neighbors", {}),  # 405: a method the hot route does not take
    ("PUT", "/v1/compare", {}),  # 405, the same outside a table's path
    ("POST", f"{T}/neighbors", {}),  # 422 without a body (not a hot route: the router every time)
    ("POST", f"{T}/search", {"json": {"token": "heart", "k": 3}}),  # not a plain body: the route's own path
    ("POST", f"{T}/search", {"json": {"vector": [0.0] * 50, "k": 3}}),  # 422, a zero vector
    ("POST", f"{T}/search", {"content": b"{", "headers": {"content-type": "application/json"}}),  # 422
    ("POST", f"{T}/search", {"json": {"vector": [0.5] * 50, "k": 3}}),  # a plain body: the fast handler
    ("POST", f"{T}/search?k=3", {"json": {"vector": [0.5] * 50, "k": 3}}),  # 422, an undeclared query parameter
    ("POST", f"{T}/search", {"json": {"vector": [0.5] * 49, "k": 3}}),  # 422, plain but of the wrong length
]


@pytest.mark.parametrize(("method", "url", "kwargs"), REQUESTS, ids=[f"{m} {u}" for m, u, _ in REQUESTS])
def test_a_known_request_is_answered_as_the_routed_one(
    client: TestClient, method: str, url: str, kwargs: dict[str, Any]
) -> None:
    known, path = middleware(client).known, url.split("?")[0]
    assert all(key[1] != path for key in known)  # a fresh app: the first request is routed
    routed = answer(client, method, url, **kwargs)
    for _ in range(2):
        assert answer(client, method, url, **kwargs) == routed


def test_a_chunked_body_over_the_limit_known_is_refused_as_routed(small_data_dir: Path) -> None:
    """The body of a known ``POST .../search`` is read by the route's own app, where the limit's error is raised
    as the body arrives: it is answered as through the router, a 413."""

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server counts the bytes as they arrive
        yield b'{"vector": ['
        for _ in range(200):
            yield b"0.5, " * 10
        yield b"0.5]}"

    with client_for(data_dir=small_data_dir, cache_bytes=0, max_body_bytes=4096) as client:
        answers = [answer(client, "POST", f"{T}/search", content=chunks()) for _ in range(3)]
        assert ("POST", f"{T}/search", "") in middleware(client).known
    assert answers[0][0] == 413 and b"body_too_large" in answers[0][2]
    assert answers[1] == answers[2] == answers[0]


def test_hot_routes_are_remembered_and_others_are_not(client: TestClient) -> None:
    known = middleware(client).known
    client.get(f"{T}/neighbors?token=heart")
    client.get(f"{T}/neighbors?token=king")  # the same method and path
    client.get(f"{T}/tokens/heart")  # not a hot route
    client.post(f"{T}/search", json={"vector": vector(client, "heart"), "k": 3})
    client.get("/v1/tables/nowhere/neighbors?token=heart")  # the route is hot whatever the table
    assert set(known) == {
        ("GET", f"{T}/neighbors", ""),
        ("POST", f"{T}/search", ""),
        ("GET", "/v1/tables/nowhere/neighbors", ""),
    }


def test_a_plain_body_known_is_answered_as_routed(client: TestClient) -> None:
    body = {"vector": vector(client, "river"), "k": 4}
    routed = answer(client, "POST", f"{T}/search", json=body)
    assert ("POST", f"{T}/search", "") in middleware(client).known
    assert routed[0] == 200
    assert answer(client, "POST", f"{T}/search", json=body) == routed
    refused = answer(client, "POST", f"{T}/search?k=3", json=body)  # a query parameter the route does not declare
    assert (
        refused[0] == 422
        and b"k: not a parameter of this route: check its spelling (this route reads its parameters from its JSON body)"
        in refused[2]
    )


def test_the_metrics_count_known_requests_under_their_route(client: TestClient) -> None:
    for _ in range(3):
        assert client.get(f"{T}/neighbors?token=heart").status_code == 200
    metrics = client.get("/metrics").text
    line = 'embedding_http_requests_total{method="GET",route="/v1/tables/{table}/neighbors",status="200",table="small"}'
    assert f"{line} 3.0" in metrics


def test_a_route_put_first_later_is_the_one_that_answers(client: TestClient) -> None:
    url = f"{T}/neighbors?token=heart"
    assert client.get(url).status_code == 200
    assert client.get(url).status_code == 200  # known
    client.app.router.routes.insert(  # type: ignore[attr-defined]
        0, Route("/v1/tables/{table}/neighbors", lambda request: Response(b"first", status_code=418))
    )
    try:
        response = client.get(url)
        assert (response.status_code, response.content) == (418, b"first")
    finally:
        del client.app.router.routes[0]  # type: ignore[attr-defined]
    assert client.get(url).status_code == 200


def test_what_is_remembered_is_bounded(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(known_routes, "KNOWN", 2)
    known = middleware(client).known
    for name in ("a", "b", "c"):
        client.get(f"/v1/tables/{name}/neighbors?token=heart")
        assert len(known) <= 2
    assert ("GET", "/v1/tables/c/neighbors", "") in known


def test_a_long_path_is_not_remembered(client: TestClient) -> None:
    """What is remembered stays small whatever paths clients send: a table name of 30,000 characters, refused, would
    otherwise keep its path twice (the key, the path parameter) for every such request, up to ``KNOWN`` of them."""
    url = f"/v1/tables/{'x' * 30_000}/neighbors?token=heart"
    routed = answer(client, "GET", url)
    assert routed[0] == 422
    assert answer(client, "GET", url) == routed
    assert sum(len(path) for _, path, _ in middleware(client).known) < 1000


def test_a_request_routed_while_the_routes_change_is_not_remembered(client: TestClient) -> None:
    known_routes_ = middleware(client)
    routes = client.app.router.routes  # type: ignore[attr-defined]
    inner = known_routes_.app
    put_first = Route("/elsewhere", lambda request: Response(b""))

    async def routes_change_meanwhile(scope: Any, receive: Any, send: Any) -> None:
        await inner(scope, receive, send)
        routes.insert(0, put_first)  # as a drain puts its /readyz first while requests are under way

    known_routes_.app = routes_change_meanwhile
    try:
        assert client.get(f"{T}/neighbors?token=heart").status_code == 200
    finally:
        known_routes_.app = inner
        routes.remove(put_first)
    assert ("GET", f"{T}/neighbors", "") not in known_routes_.known
