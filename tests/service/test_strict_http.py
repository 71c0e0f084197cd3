"""The edges of HTTP a careful client or proxy meets, against the real ``embedding-serve`` process on raw sockets:
a query string's unknown parameter is refused as a body's unknown field is; a request with two Host headers (or
an invalid one), or an HTTP/1.1 request without one, is a 400; the trailing-slash redirect names a path, never the
Host a client sent; a refusal of the HTTP protocol layer carries the request's ``X-Request-ID`` when its header was
read.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from service.http import protocol
from tests.service import raw_http, real_server
from tests.service.real_server import Server

T = "/v1/tables/small"
ID = "req-strict-7"


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


NOT_A_PARAMETER = "not a parameter of this route: check its spelling"
IN_THE_BODY = "(this route reads its parameters from its JSON body)"  # a POST route's query parameter


@pytest.mark.parametrize("name", list(UNKNOWN))
def test_a_query_parameter_the_route_does_not_declare_is_refused(server: Server, name: str) -> None:
    """Answered as the route would answer without it, a misspelt parameter would look like an answer to the
    question asked: refused (422) in the words of a body's unknown field; the same request without it answers."""
    target, extra, unknown = UNKNOWN[name]
    assert get(server, target)[0] == 200
    error = raw_http.error_of(get(server, f"{target}&{extra}" if "?" in target else f"{target}?{extra}"), 422)
    assert error["code"] == "invalid_request", error
    assert error["message"] == f"{unknown}: {NOT_A_PARAMETER}", error
    assert error["details"] == [
        {"loc": ["query", unknown], "type": "extra_forbidden", "message": error["message"][len(unknown) + 2 :]}
    ]


VECTOR = [0.1] * 50  # the small table's dimension
POSTED = {
    "the plain vector search (its fast path)": (f"{T}/search", {"vector": VECTOR, "k": 3}, "k=1", "k"),
    "a search the route reads": (f"{T}/search", {"vector": VECTOR, "k": 3, "min_score": 0.1}, "k=1", "k"),
    "neighbours": (f"{T}/neighbors", {"token": "heart", "k": 3}, "min_scor=0.5", "min_scor"),
    "similarity pairs": (f"{T}/similarity", {"pairs": [["red", "blue"]]}, "compose=mean", "compose"),
    "embed": (f"{T}/embed", {"texts": ["red wine"]}, "normalize=false", "normalize"),
}


def post(server: Server, target: str, body: dict[str, object]) -> raw_http.Response:
    return ask(server, raw_http.request("POST", target, json.dumps(body).encode(), {"Connection": "close"}))


@pytest.mark.parametrize("name", list(POSTED))
def test_a_post_routes_query_parameter_is_refused(server: Server, name: str) -> None:
    """A POST route reads its body: ``POST .../search?k=1`` answered with the body's ``k`` (or its default) would
    look like an answer to the question asked. Refused as a GET's unknown parameter is; without it, answered."""
    target, body, extra, unknown = POSTED[name]
    assert post(server, target, body)[0] == 200
    error = raw_http.error_of(post(server, f"{target}?{extra}", body), 422)
    assert error["message"] == f"{unknown}: {NOT_A_PARAMETER} {IN_THE_BODY}", error
    assert error["details"][0]["loc"] == ["query", unknown], error


def test_the_openai_routes_query_parameter_is_refused_in_openais_shape(server: Server) -> None:
    body = {"model": "small", "input": ["red wine"]}
    assert post(server, "/v1/embeddings", body)[0] == 200
    status, _, answer = post(server, "/v1/embeddings?dimensions=8", body)
    error = json.loads(answer)["error"]
    assert status == 400 and error["type"] == "invalid_request_error", (status, error)
    assert error["message"] == f"dimensions: {NOT_A_PARAMETER} {IN_THE_BODY}" and error["param"] == "dimensions", error


def test_the_query_refusal_is_the_bodys(server: Server) -> None:
    """The GET and the POST of neighbours refuse a misspelt ``min_score`` with the same message."""
    body = json.dumps({"token": "heart", "k": 5, "min_scor": 0.5}).encode()
    posted = raw_http.error_of(
        ask(server, raw_http.request("POST", f"{T}/neighbors", body, {"Connection": "close"})), 422
    )
    got = raw_http.error_of(get(server, f"{T}/neighbors?token=heart&k=5&min_scor=0.5"), 422)
    assert (got["code"], got["message"]) == (posted["code"], posted["message"]), (got, posted)


@pytest.mark.parametrize("target", ["/v1/tables?=x", f"{T}/neighbors?token=heart&="])
def test_a_parameter_with_no_name_is_named_as_in_the_query(server: Server, target: str) -> None:
    """``?=x`` names no parameter the route declares: refused as the query's, not the body's (a GET has none)."""
    error = raw_http.error_of(get(server, target), 422)
    assert error["message"] == f"query: {NOT_A_PARAMETER}", error
    assert error["details"][0]["loc"] == ["query", ""], error


def test_repeated_and_head_requests_are_checked_too(server: Server) -> None:
    """Every unknown name is named once; HEAD (answered as GET) is refused alike."""
    error = raw_http.error_of(get(server, f"{T}/neighbors?token=heart&kk=1&kk=2&zz"), 422)
    assert error["message"] == f"kk: {NOT_A_PARAMETER}; zz: {NOT_A_PARAMETER}", error
    raw = raw_http.request("HEAD", f"{T}/tokens/heart?nomalized=1", headers={"Connection": "close"})
    with raw_http.connect(server.port) as sock:
        sock.sendall(raw)
        status, headers, _ = raw_http.read_head(sock)
    assert (status, headers["content-type"]) == (422, "application/json")


@pytest.mark.parametrize(
    ("target", "again"),
    [
        (f"{T}/neighbors?token=heart&k=5", "token=love"),
        (f"{T}/similarity?a=red&b=blue", "b=green"),
        (f"{T}/rank?a=king&b=queen", "a=prince"),
        (f"{T}/closer-than?a=paris&b=london", "b=rome"),
        ("/v1/compare?first=small&second=small&token=heart", "token=love"),
    ],
)
def test_a_word_routes_parameter_given_twice_is_refused(server: Server, target: str, again: str) -> None:
    """``?token=heart&token=love`` answered for love alone would look like an answer for both words: refused,
    naming the parameter."""
    name = again.split("=")[0]
    error = raw_http.error_of(get(server, f"{target}&{again}"), 422)
    assert error["message"] == f"{name}: given 2 times; give it once", error
    assert error["details"][0]["loc"] == ["query", name], error


@pytest.mark.parametrize("probe", ["/healthz", "/readyz", "/metrics"])
def test_a_probe_answers_whatever_its_query_string(server: Server, probe: str) -> None:
    """A monitor's cache-buster on a probe does not make a healthy server look dead, nor lose its metrics."""
    status, _, body = get(server, f"{probe}?t=1733430000&n=2")
    assert status == 200, body


# ---------------------------------------------------------------------------------------------- Host
def with_hosts(*hosts: str, request_id: str | None = ID) -> bytes:
    lines = [f"GET {T}/neighbors?token=heart&k=2 HTTP/1.1", *(f"Host: {host}" for host in hosts), "Connection: close"]
    lines += [f"X-Request-ID: {request_id}"] if request_id is not None else []
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@pytest.mark.parametrize(
    "hosts",
    [("127.0.0.1", "evil.example"), ("127.0.0.1", "127.0.0.1"), ("evil.example/x",), ("a@b",), ("[::1",), ("a:b",)],
)
def test_two_host_headers_or_an_invalid_one_are_a_400(server: Server, hosts: tuple[str, ...]) -> None:
    """RFC 9112, 3.2: a server must answer 400 to a request with more than one Host header, or an invalid one."""
    response = ask(server, with_hosts(*hosts))
    error = raw_http.error_of(response, 400)
    assert error["code"] == "bad_request" and "one Host header" in error["message"], error
    assert response[1]["x-request-id"] == ID  # read before the refusal


@pytest.mark.parametrize(
    "host",
    [
        *("127.0.0.1", "localhost:8000", "[::1]:8000", "search.example.com", "", "Search.Example.COM.:80"),
        *("[fe80::1%25eth0]:8000", "[fe80::1%eth0]", "[v1.fe]:8000"),  # RFC 3986's IP-literals: a zone, an IPvFuture
    ],
)
def test_one_valid_host_is_answered(server: Server, host: str) -> None:
    assert ask(server, with_hosts(host))[0] == 200


def test_an_http_1_1_request_without_host_is_a_400(server: Server) -> None:
    """RFC 9112, 3.2: a server must answer 400 to an HTTP/1.1 request without a Host header; the message says what
    to send. HTTP/1.0 requests may omit it."""
    response = ask(server, with_hosts())
    error = raw_http.error_of(response, 400)
    assert error == {"code": "bad_request", "message": protocol.NO_HOST_MESSAGE}, error
    assert "Host: " in error["message"] and response[1]["x-request-id"] == ID
    assert ask(server, with_hosts().replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n"))[0] == 200


def test_a_raw_non_ascii_word_in_the_url_is_a_400_that_says_to_percent_encode_it(server: Server) -> None:
    """curl sends a query string as typed (``?token=josé``), its UTF-8 bytes raw, which HTTP does not allow in a
    request line: the 400 says to percent-encode the word, and the word percent-encoded is answered."""
    raw = "GET {}/neighbors?token={} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    error = raw_http.error_of(ask(server, raw.format(T, "jos\u00e9").encode()), 400)
    assert error == {"code": "bad_request", "message": protocol.URL_MESSAGE}, error
    assert "%C3%A9" in error["message"], error
    status, _, body = ask(server, raw.format(T, "jos%C3%A9").encode())
    assert status == 200 and json.loads(body)["query"]["token"] == "jos\u00e9", body[:300]


@pytest.mark.parametrize(
    "target",
    [f"{T}/neighbors?token=jos%E9", f"{T}/tokens/jos%E9", f"{T}/similarity?a=%ED%A0%80&b=red", f"{T}/tokens/%FF"],
)
def test_percent_escapes_that_are_not_utf8_are_a_400(server: Server, target: str) -> None:
    """A URL's escapes are UTF-8, as a body is (a Latin-1 client's josé is jos%E9, a surrogate's UTF-8 is none):
    others are a 400 saying so, not a word of U+FFFD looked up and not found."""
    error = raw_http.error_of(get(server, target), 400)
    assert error == {"code": "bad_request", "message": protocol.ESCAPES_MESSAGE}, error


@pytest.mark.parametrize("target", ["/healthz?t=%E9", "/readyz?x=%FF", "/metrics?name=%E9"])
def test_the_probes_answer_whatever_their_query_string_escapes(server: Server, target: str) -> None:
    """A monitor's cache-buster must not make a healthy server look dead: the probes' query strings are not read."""
    status, _, body = get(server, target)
    assert status == 200, body[:300]
    assert raw_http.error_of(get(server, "/healthz%E9"), 400)["message"] == protocol.ESCAPES_MESSAGE  # the path is


@pytest.mark.parametrize(
    "raw",
    [
        raw_http.request("HEAD", f"{T}/tokens/%E9", headers={"Connection": "close"}),
        b"HEAD /v1/tables HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ],
)
def test_a_head_request_the_protocol_refuses_is_answered_without_a_body(server: Server, raw: bytes) -> None:
    """RFC 9110, 9.3.2: its 400 is the GET's head (its Content-Length too), as the app answers HEAD."""
    with raw_http.connect(server.port) as sock:
        sock.sendall(raw)
        status, headers, rest = raw_http.read_head(sock)
        while chunk := sock.recv(1 << 16):
            rest += chunk
    assert (status, headers["content-type"], rest) == (400, "application/json", b""), (status, headers, rest)
    assert int(headers["content-length"]) > 0, headers


@pytest.mark.parametrize(
    ("after", "bodied"),
    [
        (b"FOO /v1/tables HTTP/1.1\r\nHost: x\r\n\r\n", True),  # a method the parser does not know
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", True),  # a TLS hello sent to the plain port
        (b"HEAD /v1/tables HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", False),
        (b"GET /v1/tables HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", True),
    ],
)
def test_a_refusal_after_a_head_on_the_connection_is_framed_as_its_own_method(
    server: Server, after: bytes, bodied: bool
) -> None:
    """The parser keeps the method of the request before until it reads the next one's: a refusal of a request
    line it could not read, behind a HEAD, was sent without the body its Content-Length announced, and a client or
    proxy (nginx: "upstream prematurely closed connection", a 502) waited for bytes that never came."""
    with raw_http.connect(server.port, timeout=10) as sock:
        sock.sendall(raw_http.request("HEAD", "/healthz"))
        status, headers, rest = raw_http.read_head(sock)
        assert (status, rest) == (200, b""), (status, rest)
        sock.sendall(after)
        status, headers, rest = raw_http.read_head(sock)
        while chunk := sock.recv(1 << 16):
            rest += chunk
    assert (status, headers["content-type"]) == (400, "application/json"), (status, headers, rest)
    assert len(rest) == (int(headers["content-length"]) if bodied else 0), (headers, rest)
    if bodied:
        assert json.loads(rest)["error"]["code"] == "bad_request", rest


@pytest.mark.parametrize(
    "raw",
    [
        raw_http.request("GET", "/v1/models/caf%E9", headers={"Connection": "close"}),
        raw_http.request("POST", "/v1/embeddings?user=%E9", b"{}", {"Connection": "close"}),
        b"GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ],
)
def test_the_protocols_refusals_on_the_openai_paths_are_in_openais_shape(server: Server, raw: bytes) -> None:
    """As every other error there: OpenAI's clients read ``type`` and ``param`` (a refusal pipelined behind an
    answer was already so)."""
    error = raw_http.error_of(ask(server, raw), 400)
    assert error.keys() == {"message", "type", "param", "code"} and error["code"] == "bad_request", error


@pytest.mark.parametrize(
    "raw",
    [
        b"get /v1/tables HTTP/1.1\r\nHost: x\r\n\r\n",  # methods are case-sensitive
        b"FETCH /v1/tables HTTP/1.1\r\nHost: x\r\n\r\n",  # a method the parser does not know
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(32),  # a TLS hello: curl https:// on this port
    ],
)
def test_a_request_line_without_a_method_says_so(server: Server, raw: bytes) -> None:
    """Not "not valid HTTP/1.1 (request line, headers or body framing)", which names no cause."""
    error = raw_http.error_of(ask(server, raw), 400)
    assert error["message"] == protocol.METHOD_MESSAGE, error


# ---------------------------------------------------------------------------------------------- upgrades
SEARCH = json.dumps({"vector": [round(0.1 * (i % 7) - 0.3, 1) for i in range(50)], "k": 4}).encode()
H2C = {"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c", "HTTP2-Settings": "AAMAAABkAAQCAAAAAAIAAAAA"}


def test_an_http_1_0_request_is_sent_no_100_continue(server: Server) -> None:
    """RFC 9110, 15.2: no 1xx answer to an HTTP/1.0 client, which would take "100 Continue" for its answer
    (10.1.1: its ``Expect: 100-continue`` is ignored). An HTTP/1.1 client is sent one."""
    head = f"POST {T}/search HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: {len(SEARCH)}\r\n\r\n".encode()
    with raw_http.connect(server.port, timeout=10) as sock:
        sock.sendall(head)
        sock.settimeout(1)
        with pytest.raises(TimeoutError):  # nothing before the body
            sock.recv(1 << 16)
        sock.settimeout(10)
        sock.sendall(SEARCH)
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"100 Continue" not in answer, answer
    with raw_http.connect(server.port, timeout=10) as sock:
        sock.sendall(head.replace(b"HTTP/1.0", b"HTTP/1.1").replace(b"\r\n\r\n", b"\r\nHost: x\r\n\r\n"))
        assert sock.recv(1 << 16) == b"HTTP/1.1 100 Continue\r\n\r\n"


def chunked(body: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:100], body[100:])) + b"0\r\n\r\n"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_sent_with_an_upgrade_is_read_and_the_connection_goes_on(server: Server, framing: str) -> None:
    """RFC 9110, 7.8: a server that takes no upgrade answers the request as it is. A Java HttpClient (and
    ``curl --http2`` on plain HTTP) sends ``Upgrade: h2c``: the search it POSTed was a 422 "the request has no
    body", and the requests after it on the connection were never answered."""
    plain = ask(server, raw_http.request("POST", f"{T}/search", SEARCH, {"Connection": "close"}))
    assert plain[0] == 200, plain
    if framing == "chunked":
        upgrade = raw_http.request("POST", f"{T}/search", None, H2C | {"Transfer-Encoding": "chunked"})
        upgrade += chunked(SEARCH)
    else:
        upgrade = raw_http.request("POST", f"{T}/search", SEARCH, H2C)
    pipelined = raw_http.request("POST", f"{T}/search", SEARCH, {"Upgrade": "websocket", "Connection": "Upgrade"})
    after = raw_http.request("GET", f"{T}/neighbors?token=heart&k=2", headers={"Connection": "close"})
    with raw_http.connect(server.port, timeout=10) as sock:
        sock.sendall(upgrade)
        first = raw_http.read_response(sock)
        sock.sendall(pipelined + after)
        second, third = raw_http.read_responses(sock, 2)
    assert first[::2] == second[::2] == plain[::2], (first, second)
    assert third[0] == 200 and [n["token"] for n in json.loads(third[2])["neighbors"]] == ["pain", "suffering"]


@pytest.mark.parametrize("pieces", ["one write", "byte by byte"])
def test_an_upgrade_request_pipelined_with_another_is_answered_however_its_bytes_arrive(
    server: Server, pieces: str
) -> None:
    """A chunked upgrade request with a trailer and the request behind it, in one read, or split at every byte
    (the head replayed from whichever read ends the real one): both answered, the first as without Upgrade."""
    plain = ask(server, raw_http.request("POST", f"{T}/search", SEARCH, {"Connection": "close"}))
    upgrade = raw_http.request("POST", f"{T}/search", None, H2C | {"Transfer-Encoding": "chunked"})
    upgrade += chunked(SEARCH).replace(b"0\r\n\r\n", b"0\r\nX-Trailer: 1\r\n\r\n")
    after = raw_http.request("GET", f"{T}/neighbors?token=heart&k=2", headers={"Connection": "close"})
    sent = upgrade + after
    with raw_http.connect(server.port, timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for start in range(0, len(sent), len(sent) if pieces == "one write" else 1):
            sock.sendall(sent[start : start + (len(sent) if pieces == "one write" else 1)])
            if pieces != "one write":
                time.sleep(0.001)  # a read each, as far as the machine's scheduling allows
        first, second = raw_http.read_responses(sock, 2)
    assert first[::2] == plain[::2], (first, plain)
    assert second[0] == 200 and [n["token"] for n in json.loads(second[2])["neighbors"]] == ["pain", "suffering"]


@pytest.mark.parametrize(
    ("line", "connection"),
    [("HTTP/1.0", "Upgrade"), ("HTTP/1.1", "close, Upgrade")],
    ids=["an HTTP/1.0 request", "Connection: close"],
)
@pytest.mark.parametrize("upgrade", [False, True], ids=["plain", "with Upgrade"])
def test_what_follows_a_request_the_connection_ends_with_is_not_read(
    server: Server, line: str, connection: str, upgrade: bool
) -> None:
    """The connection ends with a request that does not keep it alive (HTTP/1.0, ``Connection: close``), with an
    ``Upgrade`` as without: bytes sent behind it are not read as requests. Read, they were queued never to run and
    had 499 access lines, or were refused (a missing Host) in log lines, both naming requests no one made."""
    name = f"behind-{line[5:]}-{connection[:5]}-{upgrade}"
    head = f"GET /healthz {line}\r\nHost: x\r\nConnection: {connection}\r\nX-Request-ID: {name}-first\r\n"
    head += "Upgrade: h2c\r\n" if upgrade else ""
    behind = [f"GET /healthz HTTP/1.1\r\n{host}X-Request-ID: {name}\r\n\r\n" for host in ("Host: x\r\n", "")]
    with raw_http.connect(server.port, timeout=10) as sock:
        sock.sendall(f"{head}\r\n{''.join(behind)}".encode())
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.count(b"HTTP/1.1") == 1, answer
    marker = f"{name}-marker"
    assert get(server, "/healthz", {"X-Request-ID": marker})[0] == 200  # the server's log is written in order
    real_server.wait_for(lambda: f"request_id={marker}" in server.log(), what="the marker's access line")
    lines = [logged for logged in server.log().splitlines() if f"request_id={name}" in logged]
    assert len(lines) == 2 and lines[0].endswith(f"200 request_id={name}-first"), lines


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is the client here")
def test_curl_http2_on_plain_http_posts_its_body(server: Server, tmp_path: Path) -> None:
    """``curl --http2`` asks for h2c; answered in HTTP/1.1, with the answer the body asks for."""
    body = tmp_path / "search.json"
    body.write_bytes(SEARCH)
    url = f"{server.base}{T}/search"
    answers = [
        subprocess.run(["curl", "-s", *http2, "--data-binary", f"@{body}", url], capture_output=True, check=True)
        for http2 in ([], ["--http2"], ["--http2", "-H", "Transfer-Encoding: chunked"])
    ]
    assert len(json.loads(answers[0].stdout)["neighbors"]) == 4, answers[0]
    assert answers[1].stdout == answers[2].stdout == answers[0].stdout, answers


@pytest.mark.parametrize(
    "raw",
    [
        b"CONNECT /v1/tables HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT /v1/tables HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcdeGET /healthz HTTP/1.1\r\n\r\n",
        # as a client sends it to its proxy (curl -x, https_proxy): its target a host and port, no path
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Connection: Keep-Alive\r\n\r\n",
    ],
)
def test_connect_is_a_400_and_the_worker_goes_on(server: Server, raw: bytes) -> None:
    """httptools takes CONNECT for an upgrade whatever its headers: read on as a plain request, it is one again
    (the worker would parse its head forever). This server is no proxy: a 400 that says so."""
    error = raw_http.error_of(ask(server, raw), 400)
    assert error["message"] == protocol.CONNECT_MESSAGE, error
    assert get(server, "/healthz")[0] == 200


JAVA_SEARCH = """
import java.net.URI;
import java.net.http.*;
import java.nio.file.*;

public class Search {
    public static void main(String[] args) throws Exception {
        HttpClient client = HttpClient.newHttpClient();  // HTTP/2 first: Upgrade: h2c on an http:// URL
        HttpRequest post = HttpRequest.newBuilder(URI.create(args[0]))
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofFile(Path.of(args[1]))).build();
        for (int i = 0; i < 2; i++) {
            HttpResponse<String> answer = client.send(post, HttpResponse.BodyHandlers.ofString());
            System.out.println(answer.statusCode() + " " + answer.body());
        }
    }
}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="Java's own HttpClient is the client here")
def test_javas_http_client_posts_its_body(server: Server, tmp_path: Path) -> None:
    """java.net.http.HttpClient, as built, asks every plain-HTTP request to upgrade to h2c: its POSTs were 422."""
    (tmp_path / "Search.java").write_text(JAVA_SEARCH)
    (tmp_path / "search.json").write_bytes(SEARCH)
    run = [str(tmp_path / "Search.java"), f"{server.base}{T}/search", str(tmp_path / "search.json")]
    answers = subprocess.run(["java", *run], capture_output=True, text=True, check=True, timeout=120).stdout
    plain = ask(server, raw_http.request("POST", f"{T}/search", SEARCH, {"Connection": "close"}))
    assert answers.splitlines() == [f"200 {plain[2].decode()}"] * 2, answers


# ---------------------------------------------------------------------------------------------- methods
@pytest.mark.parametrize(
    ("target", "allow"),
    [
        ("/healthz", "GET, HEAD"),
        (f"{T}/neighbors", "GET, HEAD, POST"),
        (f"{T}/search", "POST"),
        ("/v1/embeddings", "POST"),
        ("/", "GET, HEAD"),
        ("/static/app.js", "GET, HEAD"),
        ("/docs", "GET, HEAD"),
        ("/openapi.json", "GET, HEAD"),
    ],
)
def test_a_405_names_every_method_the_path_takes(server: Server, target: str, allow: str) -> None:
    """RFC 9110, 15.5.6: a 405's Allow lists the methods the path takes: HEAD wherever GET (the answer without its
    body), and the explorer's page, its files and the API docs too (their Allow was empty)."""
    status, headers, _ = ask(server, raw_http.request("PUT", target, b"{}", {"Connection": "close"}))
    assert (status, headers["allow"]) == (405, allow), (status, headers)
    for method in allow.split(", "):
        with raw_http.connect(server.port) as sock:
            sock.sendall(raw_http.request(method, target, None if method == "HEAD" else b"{}", {"Connection": "close"}))
            status, headers, _ = raw_http.read_head(sock)
        assert status != 405, (method, target, status)


# ---------------------------------------------------------------------------------------------- redirects
@pytest.mark.parametrize(
    ("target", "location"),
    [
        ("/v1/tables/", "/v1/tables"),
        (f"{T}/", T),
        (f"{T}/ids/1058/?normalized=true", f"{T}/ids/1058?normalized=true"),
    ],
)
def test_the_trailing_slash_redirect_names_the_path_only(server: Server, target: str, location: str) -> None:
    """The Location is the path: a Host of the client's choosing is not sent back as where to go."""
    status, headers, _ = get(server, target, {"Host": "evil.example"})
    assert (status, headers["location"]) == (307, location)


@pytest.mark.parametrize("target", ["/v1/tables/a%3Fb/", "/v1/tables/a%23b/", f"{T}/ids/10%2558/"])
def test_the_redirect_leads_to_the_path_the_routes_matched(server: Server, target: str) -> None:
    """An escaped "?", "#" or "%" stays escaped in the Location: followed, it is answered as the
    request without its slash is, not as another path (a query, a fragment, another escape)."""
    status, headers, _ = get(server, target)
    assert (status, headers["location"]) == (307, target[:-1])
    followed, direct = get(server, headers["location"]), get(server, target[:-1])
    assert followed[0] == direct[0] and followed[2] == direct[2], (followed, direct)


def test_a_path_of_two_leading_slashes_is_not_redirected_elsewhere(server: Server) -> None:
    status, headers, _ = get(server, "//v1/tables/")
    assert status == 404 and "location" not in headers


# ---------------------------------------------------------------------------------------------- request ids
def test_a_protocol_refusal_carries_the_request_id_read_before_it(server: Server) -> None:
    """A head over the limit, a broken header, a body cut short: refused by the protocol, before the app's
    middleware, with the id the request named."""
    padding = {f"X-Pad-{i}": "p" * 1000 for i in range(40)}  # over the 32 KiB head limit
    too_large = raw_http.request("GET", f"{T}/neighbors?token=heart", headers={"X-Request-ID": ID, **padding})
    response = ask(server, too_large)
    assert raw_http.error_of(response, 431) and response[1]["x-request-id"] == ID

    # the parser hands a header on once the next one begins: the id, then another, then the broken one
    broken_after = {"X-Request-ID": ID, "Accept": "*/*", "Bad Name": "x"}
    response = ask(server, raw_http.request("GET", f"{T}/neighbors?token=heart", headers=broken_after))
    assert raw_http.error_of(response, 400) and response[1]["x-request-id"] == ID

    with raw_http.connect(server.port) as sock:
        sock.sendall(
            raw_http.request("POST", f"{T}/neighbors", b'{"token": "he', {"X-Request-ID": ID, "Content-Length": "100"})
        )
        sock.shutdown(socket.SHUT_WR)  # the body will never be complete
        response = raw_http.read_response(sock)
    assert raw_http.error_of(response, 400) and response[1]["x-request-id"] == ID


def test_a_protocol_refusal_carries_no_id_it_did_not_read(server: Server) -> None:
    """An invalid id is not sent back; nor is one of a request line the parser refuses (its headers are not
    read); nor the id of the request before on the same connection."""
    response = ask(server, with_hosts("a", "b", request_id="has space"))
    assert raw_http.error_of(response, 400) and "x-request-id" not in response[1]
    line = b"GET /v1/tables\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-ID: " + ID.encode() + b"\r\n\r\n"
    response = ask(server, line)
    assert raw_http.error_of(response, 400) and "x-request-id" not in response[1]
    with raw_http.connect(server.port) as sock:
        sock.sendall(
            raw_http.request("GET", "/v1/tables", headers={"X-Request-ID": ID}) + b"\x01BAD / HTTP/1.1\r\n\r\n"
        )
        first, second = raw_http.read_responses(sock, 2)
    assert first[0] == 200 and first[1]["x-request-id"] == ID
    assert raw_http.error_of(second, 400) and "x-request-id" not in second[1]


def refused(server: Server, raw: bytes, then_shut: bool = False) -> tuple[int, int]:
    """The status answered to ``raw``, and the client port the server's log lines name the connection by."""
    with raw_http.connect(server.port) as sock:
        sock.sendall(raw)
        if then_shut:
            sock.shutdown(socket.SHUT_WR)
        return raw_http.read_response(sock)[0], sock.getsockname()[1]


def refusal_line(server: Server, port: int) -> str:
    """The protocol's line about its refusal on the connection from ``port``."""
    [line] = [line for line in server.log().splitlines() if f" uvicorn.error: 127.0.0.1:{port} - " in line]
    return line


def test_a_protocol_refusal_is_logged_with_the_id_read_before_it(server: Server) -> None:
    """The protocol's line about a refusal names the request's id, as the app's lines name theirs."""
    padding = {f"X-Pad-{i}": "p" * 1000 for i in range(40)}  # over the 32 KiB head limit
    broken_after = {"X-Request-ID": "log-broken", "Accept": "*/*", "Bad Name": "x"}
    cut = raw_http.request("POST", f"{T}/search", b"{", {"X-Request-ID": "log-cut", "Content-Length": "9"})
    cases = [
        ("log-431", raw_http.request("GET", T, headers={"X-Request-ID": "log-431", **padding}), 431, "over 32768"),
        ("log-broken", raw_http.request("GET", T, headers=broken_after), 400, "not valid HTTP/1.1"),
        ("log-hosts", with_hosts("a", "b", request_id="log-hosts"), 400, "more than one"),
        ("log-no-host", with_hosts(request_id="log-no-host"), 400, "no Host header"),
        ("log-version", with_hosts("a", request_id="log-version").replace(b"HTTP/1.1", b"HTTP/2.0"), 505, "version"),
        ("log-cut", cut, 400, "inside a request body"),
        ("log-escapes", raw_http.request("GET", f"{T}/tokens/%FF", headers={"X-Request-ID": "log-escapes"}), 400, "%-"),
    ]
    for name, raw, status, what in cases:
        answered, port = refused(server, raw, then_shut=name == "log-cut")
        line = refusal_line(server, port)
        assert answered == status and what in line, (name, line)
        assert line.endswith(f": answering {status} request_id={name}"), line


def test_a_protocol_refusal_is_logged_without_an_id_it_did_not_read(server: Server) -> None:
    """A refused request line's id was not read: its refusal's line names none; nor does it name the id of the
    request before it on the same connection (whose access line does)."""
    unread = b"GET /v1/tables\x00 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-ID: log-unread\r\n\r\n"
    status, port = refused(server, unread)
    assert status == 400 and refusal_line(server, port).endswith(" - not valid HTTP/1.1: answering 400")
    assert "log-unread" not in server.log()
    pipelined = (
        raw_http.request("GET", "/v1/tables", headers={"X-Request-ID": "log-before"}) + b"\x01BAD / HTTP/1.1\r\n\r\n"
    )
    with raw_http.connect(server.port) as sock:
        sock.sendall(pipelined)
        assert [response[0] for response in raw_http.read_responses(sock, 2)] == [200, 400]
        port = sock.getsockname()[1]
    assert refusal_line(server, port).endswith(" - not valid HTTP/1.1: answering 400")
    [access] = [line for line in server.log().splitlines() if "log-before" in line]
    assert access.endswith(f'127.0.0.1:{port} - "GET /v1/tables HTTP/1.1" 200 request_id=log-before'), access
