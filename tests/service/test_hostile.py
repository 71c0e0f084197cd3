"""Hostile requests against the real ``embedding-serve`` process, written byte by byte on raw sockets.

Each one gets a 4xx with the JSON error envelope (a code and a message), never a 5xx, a hang or a plain-text
answer; afterwards the same server is healthy and still answers a real neighbours query correctly.

Clients that leave or never read in the middle of pipelined answers are let go (the latter at the send timeout).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from index.engine.table import Table
from tests.service.raw_http import read_response
from tests.service.real_server import Server, start

T = b"/v1/tables/small"
MB = 1 << 20
SHORT_TIMEOUT = 1  # the one-connection server's header, body and keep-alive timeouts
SEND_TIMEOUT = 5.0  # its EMBEDDING_SEND_TIMEOUT: above those by more than a busy machine's request takes
FIFTY = ", ".join(["1.0"] * 49)
HEART = b'{"token": "heart", "k": 2}'


@pytest.fixture(scope="module")
def server(small_server: Server) -> Server:
    """The shared server over the small table (tests/service/conftest.py)."""
    return small_server


def http(method: str, target: bytes, body: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
    """One HTTP/1.1 request as bytes, closing the connection after the answer."""
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    fields = {"Content-Type": "application/json"} if body is not None else {}
    fields |= {"Content-Length": str(len(body))} if body is not None else {}
    fields |= headers or {}
    lines += [f"{k}: {v}".encode() for k, v in fields.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def send(server: Server, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Write ``raw`` while reading the answer: the server may answer (413) and close before the body is all sent."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:

        def write() -> None:
            with contextlib.suppress(OSError):  # the server answered and closed the connection
                sock.sendall(raw)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            return read_response(sock)
        finally:
            with contextlib.suppress(OSError):  # already reset by the server
                sock.shutdown(socket.SHUT_RDWR)
            writer.join()


def assert_envelope(status: int, headers: dict[str, str], body: bytes, expected: int | None = None) -> dict:
    assert 400 <= status < 500, (status, body[:300])
    if expected is not None:
        assert status == expected, (status, body[:300])
    assert headers["content-type"] == "application/json", headers
    error = json.loads(body)["error"]
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in body.decode("utf-8", "replace")
    return error


def post(path: bytes, text: str | bytes) -> bytes:
    return http("POST", T + path, text.encode() if isinstance(text, str) else text)


CASES: dict[str, tuple[bytes | Callable[[], bytes], int | None]] = {
    # vectors
    "wrong vector length": (post(b"/search", '{"vector": [1.0, 2.0, 3.0]}'), 422),
    "empty vector": (post(b"/search", '{"vector": []}'), 422),
    "[] as the body": (post(b"/search", "[]"), 422),
    "NaN": (post(b"/search", '{"vector": [NaN, ' + FIFTY + "]}"), 422),
    "Infinity": (post(b"/search", '{"vector": [Infinity, ' + FIFTY + "]}"), 422),
    "-Infinity": (post(b"/search", '{"vector": [-Infinity, ' + FIFTY + "]}"), 422),
    "1e39 (beyond float32)": (post(b"/search", '{"vector": [1e39, ' + FIFTY + "]}"), 422),
    "1e400 (beyond float64)": (post(b"/search", '{"vector": [1e400, ' + FIFTY + "]}"), 422),
    "zero vector": (post(b"/search", '{"vector": [' + ", ".join(["0.0"] * 50) + "]}"), 422),
    "tokens that cancel out": (post(b"/neighbors", '{"positive": ["king"], "negative": ["king"]}'), 422),
    # analogies
    "analogy with a zero offset": (post(b"/analogy", '{"a": "king", "b": "King", "c": "woman"}'), 422),
    "the same token three times": (post(b"/analogy", '{"a": "king", "b": "king", "c": "king"}'), 422),
    "analogy with an unknown method": (
        post(b"/analogy", '{"a": "man", "b": "king", "c": "woman", "method": "x"}'),
        422,
    ),
    # k in the body and in the query string
    **{
        f"k={k} in the body": (post(b"/neighbors", '{"token": "heart", "k": ' + k + "}"), 422)
        for k in ("0", "-1", "1e9", "1.5", "true", '"5"', "null", "[]", "{}")
    },
    **{
        f"k={k} in the query": (http("GET", T + b"/neighbors?token=heart&k=" + k.encode()), 422)
        for k in ("0", "-1", "1e9", "1.5", "true", "%225%22", "", "99999999999999999999999999")
    },
    # batches and sizes
    "100,000 queries in a batch": (post(b"/neighbors", json.dumps({"queries": ["heart"] * 100_000})), 422),
    "1,025 vectors in a batch": (post(b"/search", json.dumps({"vectors": [[0.5] * 50] * 1025})), 422),
    "a batch over the body limit": (post(b"/search", json.dumps({"vectors": [[0.25] * 50] * 30_000})), 413),
    "100 MB declared, not sent": (
        http("POST", T + b"/search", headers={"Content-Type": "application/json", "Content-Length": str(100 * MB)}),
        413,
    ),
    "100 MB declared with Expect: 100-continue": (
        http("POST", T + b"/search", headers={"Content-Length": str(100 * MB), "Expect": "100-continue"}),
        413,
    ),
    "100 MB sent with its Content-Length": (lambda: post(b"/search", b"[" + b"[0.5]," * (100 * MB // 6) + b"[]]"), 413),
    # malformed bodies and requests
    "deeply nested arrays": (post(b"/neighbors", b"[" * 100_000 + b"]" * 100_000), 400),
    "deeply nested objects": (post(b"/neighbors", b'{"a": ' * 100_000 + b"1" + b"}" * 100_000), 400),
    "truncated JSON": (post(b"/neighbors", '{"token": "heart",'), 422),
    "a body that is not UTF-8": (post(b"/neighbors", b'{"token": "\xff\xfe"}'), 400),
    "not JSON at all": (post(b"/neighbors", b"\x00\x01\x02 binary"), 422),
    "text/plain body": (http("POST", T + b"/neighbors", b"token=heart", {"Content-Type": "text/plain"}), 422),
    "unknown fields": (post(b"/neighbors", '{"token": "heart", "__proto__": {"admin": true}}'), 422),
    "bad Content-Length": (http("POST", T + b"/search", headers={"Content-Length": "abc"}), 400),
    "raw non-UTF-8 bytes in the query": (http("GET", T + b"/neighbors?token=\xff\xfe"), 400),
    "percent-encoded non-UTF-8 query": (http("GET", T + b"/neighbors?token=%ff%fe"), 400),
    "percent-encoded non-UTF-8 token path": (http("GET", T + b"/tokens/%ff%fe"), 400),
    # table names
    "unknown table": (http("GET", b"/v1/tables/nosuch/neighbors?token=heart"), 404),
    "table ..": (http("GET", b"/v1/tables/../neighbors?token=heart"), 422),
    "table %2e%2e": (http("GET", b"/v1/tables/%2e%2e/neighbors?token=heart"), 422),
    "table %2e%2e/ (encoded slash)": (http("GET", b"/v1/tables/%2e%2e%2f/neighbors?token=heart"), 404),
    "table %2e%2e%2f%2e%2e%2fetc": (http("GET", b"/v1/tables/%2e%2e%2f%2e%2e%2fetc/neighbors?token=a"), 404),
    "table ..%2F..%2Fsmall": (http("GET", b"/v1/tables/..%2F..%2Fsmall/tokens/heart"), 404),
    "table .hidden": (http("GET", b"/v1/tables/.hidden"), 422),
    "table with a NUL": (http("GET", b"/v1/tables/sm%00all/neighbors?token=heart"), 422),
    "table with CR LF": (http("GET", b"/v1/tables/small%0d%0aX-Evil:%201/neighbors?token=heart"), 422),
    "table name of 5,000 characters": (http("GET", b"/v1/tables/" + b"a" * 5000 + b"/neighbors?token=heart"), 422),
    # tokens with control characters (unknown: 404 with suggestions)
    "token with a NUL": (http("GET", T + b"/neighbors?token=he%00art"), 404),
    "token with an ANSI escape": (http("GET", T + b"/neighbors?token=%1b%5b31mred"), 404),
    "token with CR LF": (http("GET", T + b"/tokens/heart%0d%0aSet-Cookie:%20x=1"), 404),
    "similarity of control characters": (http("GET", T + b"/similarity?a=%00&b=%7f"), 404),
    "token of 2,000 characters": (http("GET", T + b"/neighbors?token=" + b"a" * 2_000), 422),
    "request line of 100,000 characters": (http("GET", T + b"/neighbors?token=" + b"a" * 100_000), 414),
    # methods and paths
    "DELETE a table": (http("DELETE", T), 405),
    "unknown path": (http("GET", b"/v1/nothing/here"), 404),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_request_gets_a_4xx_envelope(server: Server, name: str) -> None:
    raw, expected = CASES[name]
    status, headers, body = send(server, raw() if callable(raw) else raw)  # a callable: made when needed
    assert_envelope(status, headers, body, expected)
    assert "set-cookie" not in headers and "x-evil" not in headers


def test_100_mb_streamed_is_cut_off_at_the_limit(server: Server) -> None:
    """A chunked upload (no Content-Length) is counted as it arrives: 413 at the limit, the rest never read."""
    total, block = 100 * MB, b"[" + b"0.5," * 16383 + b"0.5],"  # 64 KiB of JSON-looking text per chunk
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        head = b"POST /v1/tables/small/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        opening = b'{"vectors": ['
        sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(opening), opening))

        def upload() -> None:
            nonlocal sent
            with contextlib.suppress(OSError):  # the server answered and closed the connection
                while sent < total:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(block), block))
                    sent += len(block)
                sock.sendall(b"0\r\n\r\n")

        uploader = threading.Thread(target=upload)
        uploader.start()
        status, headers, body = read_response(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        uploader.join()
    error = assert_envelope(status, headers, body, 413)
    assert error["code"] == "body_too_large"
    assert sent < total  # refused while the client was still sending


@pytest.mark.parametrize(
    ("header", "value"),
    [("Content-Encoding", "gzip"), ("Content-Encoding", "br"), ("Transfer-Encoding", "gzip, chunked")],
)
def test_a_body_coding_the_server_does_not_read_is_named(server: Server, header: str, value: str) -> None:
    """Bodies are read as sent: a compressed one is not taken for malformed JSON, nor another for plain JSON."""
    if header == "Content-Encoding":  # gzip: the body compressed; br: the body as it is, which the server must not read
        raw = http("POST", T + b"/neighbors", gzip.compress(HEART) if value == "gzip" else HEART, {header: value})
    else:  # chunked framing, no Content-Length
        head = http("POST", T + b"/neighbors", headers={"Content-Type": "application/json", header: value})
        raw = head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(HEART), HEART)
    error = assert_envelope(*send(server, raw), 400)
    assert f"{header} '{value}' is not accepted" in error["message"], error
    assert send(server, http("POST", T + b"/neighbors", HEART))[0] == 200  # the same body, plainly sent


@pytest.mark.parametrize(
    ("body", "where"), [(b'{"token": "heart",', 18), (b"token=heart", 0), (b'{"vector": [0.5, 0.25', 21)]
)
def test_a_body_that_is_not_json_is_named_so(server: Server, body: bytes, where: int) -> None:
    """Not a bare "JSON decode error" after a number: the body, where it goes wrong and what to send."""
    path = T + (b"/search" if body.startswith(b'{"vector"') else b"/neighbors")
    error = assert_envelope(*send(server, http("POST", path, body)), 422)
    assert error["message"] == f"body: not valid JSON at character {where}: send one JSON object", error


def test_a_request_is_given_suggestions_for_its_first_64_unknown_words(server: Server) -> None:
    """Each unknown word's suggestions match it against 50,000 labels: a batch of 1,024 misspellings would take
    seconds of the worker. Its first 64 are given theirs, the others none; the next request has its own 64."""
    status, _, body = send(server, post(b"/neighbors", json.dumps({"queries": ["hearrt"] * 100, "k": 1})))
    assert status == 200
    suggested = [bool(result["error"]["suggestions"]) for result in json.loads(body)["results"]]
    assert suggested == [True] * 64 + [False] * 36, suggested
    status, _, body = send(server, http("GET", T + b"/neighbors?token=hearrt"))
    assert status == 404 and "heart" in json.loads(body)["error"]["suggestions"]


LONG_NAME = "n" * MB  # one key of a body within the limit
UNKNOWN_KEYS = {
    "an unknown field": (T + b"/neighbors", {"token": "heart", LONG_NAME: 1}),
    "an unknown field of a batch item": (T + b"/search", {"queries": [{"vector": [0.5] * 50, LONG_NAME: 1}]}),
    "an unknown field of the OpenAI route": (b"/v1/embeddings", {"model": "small", "input": "heart", LONG_NAME: 1}),
}


@pytest.mark.parametrize("name", list(UNKNOWN_KEYS))
def test_a_long_key_is_quoted_clipped(server: Server, name: str) -> None:
    """A key of a megabyte is named by its start: the answer is small, not the key twice over."""
    path, body = UNKNOWN_KEYS[name]
    status, _, answer = send(server, http("POST", path, json.dumps(body).encode()))
    assert status == (400 if path == b"/v1/embeddings" else 422) and len(answer) < 1000, (status, len(answer))
    error = json.loads(answer)["error"]
    assert "nnnnnnnnnn..." in error["message"] and ": check its spelling" in error["message"], error


NEIGHBOURS = b"GET /v1/tables/small/neighbors?id=%d&k=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
PIPELINED = b"".join(NEIGHBOURS % i for i in range(200))  # answers larger than the socket buffers


def non_reader(port: int) -> socket.socket:
    """A connection with a small receive buffer that sends ``PIPELINED`` and never reads its answers."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window stays small
    sock.settimeout(60)
    sock.connect(("127.0.0.1", port))
    sock.sendall(PIPELINED)
    return sock


def test_a_client_leaving_in_the_middle_of_pipelined_answers_is_let_go(server: Server) -> None:
    """The client closes while an answer waits for it to read (the running request is not the last one parsed):
    the answer is dropped, no traceback is logged."""
    before = server.log().count("Traceback")
    for _ in range(5):
        sock = non_reader(server.port)
        time.sleep(0.5)  # the server fills the buffers and waits for the client to read
        sock.close()
    time.sleep(1)
    assert server.log().count("Traceback") == before, server.log()[-3000:]
    assert send(server, http("GET", b"/healthz"))[0] == 200


def send_head(server: Server, path: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and everything after the head up to the server's close, of a HEAD request."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(http("HEAD", path))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    return int(status_line.split()[1]), {k.lower(): v for k, v in (line.split(": ", 1) for line in lines)}, rest


@pytest.mark.parametrize("path", [b"/healthz", b"/readyz", b"/", b"/v1/tables", T, T + b"/neighbors?token=heart"])
def test_head_is_answered_as_get_without_the_body(server: Server, path: bytes) -> None:
    status, headers, body = send(server, http("GET", path))
    assert status == 200
    head_status, head_headers, rest = send_head(server, path)
    assert head_status == 200 and rest == b""  # no body, nothing else
    assert head_headers["content-length"] == headers["content-length"] == str(len(body))
    assert head_headers["content-type"] == headers["content-type"]


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/models/nope",  # OpenAI's error shape (404 model_not_found)
        b"/v1/models?user=x",  # OpenAI's status: its 400 where the service answers 422
        T + b"/neighbors?token=hearrt",
        b"/v1/nope",
    ],
)
def test_head_of_an_error_is_answered_as_get_without_the_body(server: Server, path: bytes) -> None:
    """The GET's status and headers: on the OpenAI-compatible paths a HEAD's error was reshaped from the empty body
    HEAD left it (the status the service's, 422 for OpenAI's 400; Content-Length that of an error saying "error")."""
    status, headers, body = send(server, http("GET", path))
    assert status >= 400 and json.loads(body)["error"]["message"], (status, body)
    head_status, head_headers, rest = send_head(server, path)
    assert (head_status, rest) == (status, b"")
    assert head_headers["content-length"] == headers["content-length"] == str(len(body))
    assert head_headers["content-type"] == headers["content-type"]


def test_head_on_a_post_route_is_405(server: Server) -> None:
    status, headers, rest = send_head(server, T + b"/search")
    assert status == 405 and headers["allow"] == "POST" and rest == b""


def test_a_websocket_upgrade_is_answered_as_the_plain_request(server: Server) -> None:
    """No route takes a WebSocket: an upgrade request gets the HTTP answer (the JSON envelope for a bad path), not
    a bare 403 from a WebSocket handshake."""
    upgrade = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    status, _, body = send(server, http("GET", T, headers=upgrade))
    assert status == 200 and json.loads(body)["name"] == "small"
    status, _, body = send(server, http("GET", b"/nowhere", headers=upgrade))
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_still_healthy_and_correct_afterwards(server: Server, small: Table) -> None:
    # Runs after the hostile requests above (pytest keeps file order): the same process still answers.
    assert server.process.poll() is None
    status, _, body = send(server, http("GET", b"/healthz"))
    assert status == 200 and json.loads(body) == {"status": "ok"}
    status, _, body = send(server, http("GET", b"/readyz"))
    assert status == 200
    status, _, body = send(server, http("GET", T + b"/neighbors?token=heart&k=8"))
    assert status == 200
    heart = small.tokens.find("heart")
    assert [n["id"] for n in json.loads(body)["neighbors"]] == [i for i, _ in small.most_similar([heart], k=8)]
    log = server.log()
    assert "Traceback" not in log and "Exception in ASGI application" not in log


@pytest.fixture(scope="module")
def one_connection(small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server taking one connection at a time, with short timeouts (the send timeout is its own)."""
    env = {
        "EMBEDDING_MAX_CONNECTIONS": "1",
        "EMBEDDING_HEADER_TIMEOUT": str(SHORT_TIMEOUT),
        "EMBEDDING_BODY_TIMEOUT": str(SHORT_TIMEOUT),
        "EMBEDDING_KEEP_ALIVE_TIMEOUT": str(SHORT_TIMEOUT),
        "EMBEDDING_SEND_TIMEOUT": str(SEND_TIMEOUT),
    }
    server = start(small_data_dir, tmp_path_factory.mktemp("one-connection") / "server.log", env=env)
    try:
        yield server
    finally:
        server.stop()


def test_a_client_that_never_reads_its_answers_is_cut_at_the_send_timeout(one_connection: Server) -> None:
    """Its answers wait in the write buffer: it holds the only connection slot (others get 503) until the send
    timeout finds nothing sent for that long and closes the connection; then new clients are served."""
    sock = non_reader(one_connection.port)
    try:
        time.sleep(1.5 * SHORT_TIMEOUT)  # past the header, body and keep-alive timeouts
        assert send(one_connection, http("GET", b"/readyz"))[0] == 503
        started = time.monotonic()
        while send(one_connection, http("GET", b"/readyz"))[0] == 503:
            assert time.monotonic() - started < 2 * SEND_TIMEOUT + 10, "the connection is still held"
            time.sleep(0.25)
        assert "of answer not read for" in one_connection.log()
        sock.settimeout(10)
        with contextlib.suppress(ConnectionResetError):  # closed (reset): what the client reads now ends
            while sock.recv(1 << 20):
                pass
    finally:
        sock.close()
