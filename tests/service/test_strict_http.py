"""The edges of HTTP a careful client or proxy meets, against the real ``embedding-serve`` process on raw sockets:
a query string's unknown parameter is refused as a body's unknown field is.
"""

from __future__ import annotations

import json

import pytest

from tests.service import raw_http
from tests.service.real_server import Server

T = "/v1/tables/small"


@pytest.fixture(scope="module")
def server(small_server: Server) -> Server:
    """The shared server over the small table (tests/service/conftest.py)."""
    return small_server


def ask(server: Server, raw: bytes) -> raw_http.Response:
    with raw_http.connect(server.port) as sock:
        sock.sendall(raw)
        return raw_http.read_response(sock)


def get(server: Server, target: str, headers: dict[str, str] | None = None) -> raw_http.Response:
    return ask(server, raw_http.request("GET", target, headers={"Connection": "close", **(headers or {})}))


# ---------------------------------------------------------------------------------------------- query strings
UNKNOWN = {
    "neighbours (a hot route)": (f"{T}/neighbors?token=heart&k=5", "min_scor=0.5", "min_scor"),
    "similarity (a hot route)": (f"{T}/similarity?a=red&b=blue", "compsoe=mean", "compsoe"),
    "rank (a hot route)": (f"{T}/rank?a=king&b=queen", "k=3", "k"),
    "closer-than (a hot route)": (f"{T}/closer-than?a=paris&b=london", "limt=3", "limt"),
    "compare (a hot route)": ("/v1/compare?first=small&second=small&token=heart", "tokens=heart", "tokens"),
    "a token's row": (f"{T}/tokens/heart?normalized=true", "normalised=true", "normalised"),
    "a row by id": (f"{T}/ids/1058", "normalised=true", "normalised"),
    "the tables": ("/v1/tables", "verbose=1", "verbose"),
    "a table": (T, "x=", "x"),
}


@pytest.mark.parametrize("name", list(UNKNOWN))
def test_a_query_parameter_the_route_does_not_declare_is_refused(server: Server, name: str) -> None:
    """Answered as the route would answer without it, a misspelt parameter would look like an answer to the
    question asked: refused (422) in the words of a body's unknown field; the same request without it answers."""
    target, extra, unknown = UNKNOWN[name]
    assert get(server, target)[0] == 200
    error = raw_http.error_of(get(server, f"{target}&{extra}" if "?" in target else f"{target}?{extra}"), 422)
    assert error["code"] == "invalid_request", error
    assert error["message"] == f"{unknown}: Extra inputs are not permitted", error
    assert error["details"] == [
        {"loc": ["query", unknown], "type": "extra_forbidden", "message": error["message"][len(unknown) + 2 :]}
    ]


def test_the_query_refusal_is_the_bodys(server: Server) -> None:
    """The GET and the POST of neighbours refuse a misspelt ``min_score`` with the same message."""
    body = json.dumps({"token": "heart", "k": 5, "min_scor": 0.5}).encode()
    posted = raw_http.error_of(
        ask(server, raw_http.request("POST", f"{T}/neighbors", body, {"Connection": "close"})), 422
    )
    got = raw_http.error_of(get(server, f"{T}/neighbors?token=heart&k=5&min_scor=0.5"), 422)
    assert (got["code"], got["message"]) == (posted["code"], posted["message"]), (got, posted)


def test_repeated_and_head_requests_are_checked_too(server: Server) -> None:
    """Every unknown name is named once; HEAD (answered as GET) is refused alike."""
    error = raw_http.error_of(get(server, f"{T}/neighbors?token=heart&kk=1&kk=2&zz"), 422)
    assert error["message"] == "kk: Extra inputs are not permitted; zz: Extra inputs are not permitted", error
    raw = raw_http.request("HEAD", f"{T}/tokens/heart?nomalized=1", headers={"Connection": "close"})
    with raw_http.connect(server.port) as sock:
        sock.sendall(raw)
        status, headers, _ = raw_http.read_head(sock)
    assert (status, headers["content-type"]) == (422, "application/json")
