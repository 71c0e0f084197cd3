"""The path of two requests through the project's modules (``tests.request_path``), from the route to FAISS and
back: how many modules they enter besides the HTTP middleware, and how often they go back into one they had left.
Each request is made once before it is followed (its one-time set-up is no part of its path); the answer cache
is off, so the followed request is answered by the route."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from index.build.sources import glove_package
from tests.lee import Lee
from tests.request_path import RequestPath, TracedClient, traced_client

GLOVE = glove_package.DEFAULT_NAME
# The most modules each path may enter, and the most times it may go back into any one of them.
NEIGHBORS_LIMITS = (13, 2)
HYBRID_LIMITS = (18, 2)


@pytest.fixture(scope="module")
def glove(glove_data_dir: Path) -> Iterator[TracedClient]:
    with traced_client(data_dir=glove_data_dir, tables=[GLOVE], cache_bytes=0) as client:
        yield client


@pytest.fixture(scope="module")
def lee(lee_data_dir: Path) -> Iterator[TracedClient]:
    with traced_client(data_dir=lee_data_dir, cache_bytes=0) as client:
        yield client


def followed(client: TracedClient, method: str, url: str, **kwargs: Any) -> RequestPath:
    first = client.client.request(method, url, **kwargs)
    response, path = client.request(method, url, **kwargs)
    assert response.status_code == 200, response.text
    assert response.json() == first.json()
    print(f"{method} {url}\n{path.report()}")
    return path


def within(path: RequestPath, limits: tuple[int, int]) -> bool:
    modules, returns = limits
    return len(path.modules) <= modules and path.most_returns <= returns


def test_neighbours_of_a_token(glove: TracedClient) -> None:
    path = followed(glove, "GET", f"/v1/tables/{GLOVE}/neighbors?token=heart&k=8")
    assert {"service.routers.neighbors", "index.engine.table", "index.engine.knn"} <= set(path.modules)
    assert within(path, NEIGHBORS_LIMITS), path.report()


def test_a_hybrid_search_with_a_filter(lee: TracedClient, lee_docs: Lee) -> None:
    body = {
        "text": "bushfires in Sydney",
        "vector": lee_docs.vectors[5].tolist(),
        "filter": {"lang": "en"},
        "mode": "hybrid",
        "k": 5,
    }
    path = followed(lee, "POST", "/v1/tables/lee/search", json=body)
    # the filter's rows are the table's, kept from the first request (Table.filter): no evaluation here
    assert {"index.engine.hybrid", "index.engine.keyword", "index.engine.fusion"} <= set(path.modules)
    assert within(path, HYBRID_LIMITS), path.report()
    # The query is made once, with the body, and reads the mode rules on itself there: the engine's query module is
    # entered for it and again only for the result, never to check the same rules a second time.
    assert path.returns["index.engine.query"] <= 1, path.report()


def test_the_path_counts_modules_and_returns() -> None:
    path = RequestPath(visits=["a", "b", "a", "c", "b", "a"], middleware=["service.http.metrics"])
    assert path.modules == ["a", "b", "c"]
    assert path.returns == {"a": 2, "b": 1} and path.most_returns == 2
    assert within(path, (3, 2)) and not within(path, (2, 2)) and not within(path, (3, 1))
