"""A replica that clients reach directly, without a proxy: the real ``embedding-serve`` on raw sockets.

Oversized request heads get 431/414 in the JSON envelope as soon as they pass the limit, slow and idle clients
are cut after their timeout, connections beyond the per-worker limit get a 503 with Retry-After; requests that
keep within the limits (big bodies in one read, headers just under the limit, pipelined requests) are answered
as before. Short limits and timeouts through the settings keep it to seconds.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from index.engine.table import Table
from service_client import ApiError, Client
from tests.service.raw_http import (
    assert_exact_neighbours,
    closed,
    connect,
    error_of,
    queries,
    read_response,
    read_responses,
    request,
    search_body,
)
from tests.service.real_server import Server, start, wait_for

MAX_HEADER_BYTES = 8192
# Timers are exact (``loop.call_later``), so short timeouts show the same behaviour in less time. The relations
# the assertions rely on: BODY_TIMEOUT - 0.05 > HEADER_TIMEOUT (a body timeout is not the header's), SLACK below
# each timeout (a timer re-armed one interval late is caught) and HEADER_TIMEOUT + SLACK <= KEEP_ALIVE (a head
# timed out is not an idle connection's close). Twice the shortest the settings take, so that the slack, a share of
# each timeout, covers how late a busy machine acts on a timer.
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 3.0
KEEP_ALIVE = 3.0
MAX_CONNECTIONS = 4
SLACK = 0.45 * HEADER_TIMEOUT  # how late a timeout may act on the shared two-core machine
ENV = {
    "EMBEDDING_MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
    "EMBEDDING_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
    "EMBEDDING_BODY_TIMEOUT": str(BODY_TIMEOUT),
    "EMBEDDING_KEEP_ALIVE_TIMEOUT": str(KEEP_ALIVE),
    "EMBEDDING_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
}
# The connection limit's tests keep their connections idle between requests as long as a busy machine takes to
# run them (KEEP_ALIVE closed some, freeing their slots): their server keeps an idle connection this long.
HELD_KEEP_ALIVE = 600.0


def serving(data_dir: Path, tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Server]:
    process = start(data_dir, tmp_path_factory.mktemp("exposure") / "server.log", env=env)
    try:
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def server(small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serving(small_data_dir, tmp_path_factory, ENV)


@pytest.fixture(scope="module")
def holding(small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose idle connections stay open for the limit's tests."""
    yield from serving(small_data_dir, tmp_path_factory, {**ENV, "EMBEDDING_KEEP_ALIVE_TIMEOUT": str(HELD_KEEP_ALIVE)})


def refused_while_sending(server: Server, raw: bytes) -> tuple[tuple[int, dict[str, str], bytes], int]:
    """Send ``raw`` from a thread, a piece at a time (a client on a slow link), while reading the answer; returns
    the answer and how many bytes went out before it came (the server drops what follows a refusal, so a fast
    writer could otherwise send everything before the reading thread is scheduled on a busy machine)."""
    sent = 0
    answered = threading.Event()
    with connect(server.port) as sock:

        def write() -> None:
            nonlocal sent
            with contextlib.suppress(OSError):  # the server answered and closed
                for start in range(0, len(raw), 65536):
                    if answered.is_set():
                        return
                    sock.sendall(raw[start : start + 65536])
                    sent = min(start + 65536, len(raw))
                    time.sleep(0.002)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            response = read_response(sock)
            answered.set()
            assert closed(sock)
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            writer.join()
    return response, sent


def test_within_the_limits_nothing_changes(server: Server, small: Table) -> None:
    with connect(server.port) as sock:  # headers just under the limit
        sock.sendall(request("GET", "/healthz", headers={"X-Filler": "x" * (MAX_HEADER_BYTES - 200)}))
        status, _, body = read_response(sock)
        assert status == 200 and json.loads(body) == {"status": "ok"}
    # A body of about 350 KB in one write: the head and much more than the head's limit arrive together.
    vectors = queries(small, 1024, seed=3)
    payload = search_body(vectors, k=3)
    assert len(payload) > 40 * MAX_HEADER_BYTES
    with connect(server.port) as sock:
        sock.sendall(request("POST", "/v1/tables/small/search", payload))
        status, _, body = read_response(sock)
    assert status == 200, body[:300]
    assert_exact_neighbours(small, vectors, 3, json.loads(body))
    with connect(server.port) as sock:  # twenty pipelined requests in one write, about 16 KB: twice the limit
        filler = "y" * 700
        sock.sendall(b"".join(request("GET", f"/healthz?n={i}", headers={"X-Filler": filler}) for i in range(20)))
        for status, _, body in read_responses(sock, 20):
            assert status == 200 and json.loads(body) == {"status": "ok"}


def test_a_20_mb_header_line_is_refused_at_the_limit(server: Server) -> None:
    raw = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: " + b"a" * (20 << 20) + b"\r\n\r\n"
    response, sent = refused_while_sending(server, raw)
    error = error_of(response, 431)
    assert error["code"] == "headers_too_large" and str(MAX_HEADER_BYTES) in error["message"]
    assert response[1]["connection"] == "close"
    assert sent < len(raw)  # refused while the client was still sending


def test_a_huge_head_pipelined_behind_a_body_is_refused(server: Server, small: Table) -> None:
    """A search with a body, and in the same write a request with 200 KB of headers: the search is answered, the
    next head refused (the protocol counts it even though it starts in the middle of a read)."""
    vectors = queries(small, 64, seed=4)
    search = request("POST", "/v1/tables/small/search", search_body(vectors, k=3))
    huge = request("GET", "/healthz", headers={"X-Huge": "h" * 200_000})
    with connect(server.port) as sock:
        sock.sendall(search + huge)
        (status, _, body), refused = read_responses(sock, 2)
        assert closed(sock)
    assert status == 200, body[:300]
    assert_exact_neighbours(small, vectors, 3, json.loads(body))
    assert error_of(refused, 431)["code"] == "headers_too_large"


def test_a_long_request_line_is_414(server: Server) -> None:
    raw = b"GET /v1/tables/small/neighbors?token=" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    response, _ = refused_while_sending(server, raw)
    assert error_of(response, 414)["code"] == "request_line_too_long"


def test_many_headers_adding_up_over_the_limit_are_431(server: Server) -> None:
    # 300 headers of 37 bytes: 11 KB, each one harmless, sent in one write.
    raw = request("GET", "/healthz", headers={f"X-Header-{i:03d}": "v" * 20 for i in range(300)})
    assert MAX_HEADER_BYTES < len(raw) < 2 * MAX_HEADER_BYTES
    response, _ = refused_while_sending(server, raw)
    assert error_of(response, 431)["code"] == "headers_too_large"


def trickle(sock: socket.socket, data: bytes, every: float, stop: threading.Event) -> threading.Thread:
    """Send ``data`` one byte at a time (a slowloris client) until it is sent, ``stop`` is set or the server
    closes."""

    def send() -> None:
        with contextlib.suppress(OSError):
            for byte in data:
                sock.send(bytes([byte]))
                if stop.wait(every):
                    return

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def timed_out_while_trickling(sock: socket.socket, data: bytes, started: float) -> tuple[dict[str, Any], float]:
    """Trickle ``data`` until the server answers: its 408 error and the seconds since ``started``; the server has
    closed the connection."""
    stop = threading.Event()
    sender = trickle(sock, data, 0.1, stop)
    try:
        error = error_of(read_response(sock), 408)
        elapsed = time.monotonic() - started
        assert closed(sock)
    finally:
        stop.set()
        sender.join()
    return error, elapsed


@pytest.mark.parametrize("kept_alive", [False, True], ids=["new connection", "kept-alive connection"])
def test_a_slowloris_client_is_cut_after_the_header_timeout(server: Server, kept_alive: bool) -> None:
    with connect(server.port) as sock:
        if kept_alive:  # the next request on a connection that has had an answer
            sock.sendall(request("GET", "/healthz"))
            assert read_response(sock)[0] == 200
        started = time.monotonic()
        # Headers that would take 30 s at one byte per 0.1 s (and never end).
        error, elapsed = timed_out_while_trickling(
            sock, request("GET", "/healthz", headers={"X-Slow": "z" * 300}), started
        )
    assert error["code"] == "request_timeout"
    assert HEADER_TIMEOUT - 0.05 <= elapsed < HEADER_TIMEOUT + SLACK


@pytest.mark.parametrize("then", [b"", b"lthz HTTP/1.1\r\nX-Slow: " + b"z" * 300], ids=["silence", "a trickle"])
def test_a_head_begun_behind_an_answered_request_is_408_at_the_header_timeout(server: Server, then: bytes) -> None:
    """A kept-alive client that turns slowloris: the next head begins in the same write as the request before it
    (so the protocol counts none of its bytes), then stalls or trickles."""
    with connect(server.port) as sock:
        sock.sendall(request("GET", "/healthz") + b"GET /hea")
        started = time.monotonic()
        assert read_response(sock)[0] == 200
        error, elapsed = timed_out_while_trickling(sock, then, started)
    assert error["code"] == "request_timeout"
    assert HEADER_TIMEOUT - 0.05 <= elapsed < HEADER_TIMEOUT + SLACK


def test_a_connection_that_sends_nothing_is_closed(server: Server) -> None:
    # Timed from before the connection: the server's clock starts once it accepts, which may come before connect
    # returns here (the handshake is the kernel's), so timing from after would see it act early.
    started = time.monotonic()
    with connect(server.port) as sock:
        assert sock.recv(65536) == b""  # closed, without an answer
        elapsed = time.monotonic() - started
    assert HEADER_TIMEOUT - 0.05 <= elapsed < HEADER_TIMEOUT + SLACK


def test_an_idle_kept_alive_connection_is_closed(server: Server) -> None:
    with connect(server.port) as sock:
        started = time.monotonic()  # before the answer is sent, when the server's clock starts (as above)
        sock.sendall(request("GET", "/healthz"))
        assert read_response(sock)[0] == 200
        assert closed(sock)
        elapsed = time.monotonic() - started
    assert KEEP_ALIVE - 0.05 <= elapsed < KEEP_ALIVE + SLACK


def test_connections_over_the_limit_get_503(holding: Server) -> None:
    kept = [connect(holding.port) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in kept:
            sock.sendall(request("GET", "/healthz"))
            assert read_response(sock)[0] == 200
        with connect(holding.port) as extra:
            extra.sendall(request("GET", "/readyz", headers={"X-Request-ID": "over-the-limit-7"}))
            response = read_response(extra)
            assert closed(extra)
        error = error_of(response, 503)
        assert error["code"] == "overloaded" and response[1]["retry-after"] == "1"
        assert response[1]["x-request-id"] == "over-the-limit-7"  # sent back, and its access line names it
        assert '"GET /readyz HTTP/1.1" 503 request_id=over-the-limit-7\n' in holding.log()
        with connect(holding.port) as extra:  # the liveness probe: saturated is not dead (no restart for it)
            extra.sendall(request("GET", "/healthz"))
            response = read_response(extra)
            assert closed(extra)
        assert response[0] == 200 and json.loads(response[2]) == {"status": "ok"}
        with connect(holding.port) as extra:  # on an OpenAI-compatible path, in OpenAI's shape
            extra.sendall(request("GET", "/v1/models"))
            error = error_of(read_response(extra), 503)
        assert error == {"message": error["message"], "type": "server_error", "param": None, "code": "overloaded"}
        with Client(holding.base, retries=0) as client, pytest.raises(ApiError) as busy:  # the Python client's error
            client.tables()
        assert (busy.value.status, busy.value.code, busy.value.retry_after) == (503, "overloaded", 1.0)
        for sock in kept:  # the connections within the limit are served as before
            sock.sendall(request("GET", "/readyz"))
            assert read_response(sock)[0] == 200
        kept.pop().close()

        def served() -> bool:  # once the server has seen the close, a new connection fits again
            with connect(holding.port) as sock:
                sock.sendall(request("GET", "/healthz"))
                return read_response(sock)[0] == 200

        wait_for(served, what="a free connection slot")
    finally:
        for sock in kept:
            sock.close()
    assert f"over {MAX_CONNECTIONS} connections: answering 503" in holding.log()


SEARCH = "/v1/tables/small/search"
CHUNKED = request("POST", SEARCH, headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
BROKEN_BODIES = {
    "a chunk size that is not hex": CHUNKED + b"zz\r\n",
    "a chunk size of 20 hex digits": CHUNKED + b"f" * 20 + b"\r\n",
    "a negative chunk size": CHUNKED + b"-1\r\n",
    "a chunk shorter than its size, then the end": CHUNKED + b"4\r\nab\r\n0\r\n\r\n",
    "gzip without chunked": request("POST", SEARCH, headers={"Transfer-Encoding": "gzip"}) + b"\x1f\x8b\x08",
}


def first_answered(sock: socket.socket) -> None:
    """A request answered on ``sock``, which then stays open (kept alive)."""
    sock.sendall(request("GET", "/healthz"))
    assert read_response(sock)[0] == 200


@pytest.mark.parametrize("kept_alive", [False, True], ids=["new connection", "kept-alive connection"])
@pytest.mark.parametrize("raw", BROKEN_BODIES.values(), ids=BROKEN_BODIES.keys())
def test_a_broken_body_framing_is_400_at_once(server: Server, raw: bytes, kept_alive: bool) -> None:
    with connect(server.port, timeout=10) as sock:
        if kept_alive:
            first_answered(sock)
        started = time.monotonic()
        sock.sendall(raw)
        error = error_of(read_response(sock), 400)
        assert closed(sock)
        elapsed = time.monotonic() - started
    assert error["code"] == "bad_request"
    assert elapsed < min(HEADER_TIMEOUT, BODY_TIMEOUT)  # refused at once, not at a timeout


def test_a_broken_chunk_pipelined_behind_a_search_is_400_after_it(server: Server, small: Table) -> None:
    vectors = queries(small, 16, seed=6)
    with connect(server.port, timeout=10) as sock:
        sock.sendall(request("POST", SEARCH, search_body(vectors, k=3)) + BROKEN_BODIES["a negative chunk size"])
        (status, _, body), refused = read_responses(sock, 2)
        assert closed(sock)
    assert status == 200, body[:300]
    assert_exact_neighbours(small, vectors, 3, json.loads(body))
    assert error_of(refused, 400)["code"] == "bad_request"


@pytest.mark.parametrize("kept_alive", [False, True], ids=["new connection", "kept-alive connection"])
def test_a_body_that_stalls_is_408_at_the_body_timeout(server: Server, kept_alive: bool) -> None:
    with connect(server.port, timeout=10) as sock:
        if kept_alive:
            first_answered(sock)
        started = time.monotonic()  # before the head: the server's wait cannot start sooner, however late this runs
        sock.sendall(request("POST", SEARCH, headers={"Content-Type": "application/json", "Content-Length": "100"}))
        sock.sendall(b'{"vector":')  # 10 of 100 bytes, then nothing
        error = error_of(read_response(sock), 408)
        elapsed = time.monotonic() - started
        assert closed(sock)
    assert error["code"] == "request_timeout" and "body" in error["message"]
    assert BODY_TIMEOUT - 0.05 <= elapsed < BODY_TIMEOUT + SLACK


def test_a_body_refused_by_its_declared_length_gets_one_answer_then_the_connection_closes(server: Server) -> None:
    """413 before the body is read; the body never comes: the connection is closed at the body timeout, with no
    second answer to the same request."""
    with connect(server.port, timeout=10) as sock:
        sock.sendall(
            request("POST", SEARCH, headers={"Content-Type": "application/json", "Content-Length": "99999999"})
        )
        sock.sendall(b'{"vector":')
        started = time.monotonic()
        assert error_of(read_response(sock), 413)["code"] == "body_too_large"
        assert sock.recv(65536) == b""  # nothing more: closed
        elapsed = time.monotonic() - started
    assert elapsed < BODY_TIMEOUT + SLACK


def test_a_client_that_leaves_after_its_413_gets_no_second_answer(server: Server) -> None:
    """413 before the body is read; the client reads it and ends its side, as curl does: the request has had its
    answer, so there is no body to refuse: no 400 after the 413, no refusal counted or logged, one line (the
    413's access line)."""
    before = refusals(server)[0].get("bad_request", 0.0)
    headers = {"Content-Type": "application/json", "Content-Length": "99999999", "X-Request-ID": "left-after-413"}
    with connect(server.port, timeout=10) as sock:
        sock.sendall(request("POST", SEARCH, headers=headers))
        assert error_of(read_response(sock), 413)["code"] == "body_too_large"
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(65536) == b""  # closed, with nothing more to read
    assert refusals(server)[0].get("bad_request", 0.0) == before
    wait_for(lambda: "request_id=left-after-413" in server.log(), what="the 413's access line")
    [line] = [line for line in server.log().splitlines() if "request_id=left-after-413" in line]
    assert line.endswith(f'"POST {SEARCH} HTTP/1.1" 413 request_id=left-after-413')


def test_a_body_sent_slowly_within_the_body_timeout_is_answered(server: Server, small: Table) -> None:
    vectors = queries(small, 2, seed=7)
    payload = search_body(vectors, k=3)
    with connect(server.port, timeout=10) as sock:  # the body in four pieces over half the body timeout
        head = request("POST", SEARCH, payload)[: -len(payload)]
        sock.sendall(head)
        for start in range(0, len(payload), len(payload) // 4 + 1):
            time.sleep(BODY_TIMEOUT / 8)
            sock.sendall(payload[start : start + len(payload) // 4 + 1])
        status, _, body = read_response(sock)
    assert status == 200, body[:300]
    assert_exact_neighbours(small, vectors, 3, json.loads(body))


def test_a_body_cut_by_the_client_is_400(server: Server) -> None:
    with connect(server.port, timeout=10) as sock:
        sock.sendall(request("POST", SEARCH, headers={"Content-Type": "application/json", "Content-Length": "100"}))
        sock.sendall(b'{"vector":')
        sock.shutdown(socket.SHUT_WR)  # the client's end: the other 90 bytes can never come
        error = error_of(read_response(sock), 400)
        assert closed(sock)
    assert error["code"] == "bad_request" and "inside the request body" in error["message"]


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/0.9", b"HTTP/3.0", b"HTTP/1.2"])
def test_a_request_line_of_another_http_version_is_505(server: Server, version: bytes) -> None:
    with connect(server.port, timeout=10) as sock:
        sock.sendall(b"GET /healthz " + version + b"\r\nHost: 127.0.0.1\r\n\r\n")
        response = read_response(sock)
        assert closed(sock)
    assert error_of(response, 505)["code"] == "http_version_not_supported"
    with connect(server.port, timeout=10) as sock:  # HTTP/1.0 is still answered
        sock.sendall(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        status, _, body = read_response(sock)
    assert status == 200 and json.loads(body) == {"status": "ok"}


def refusals(server: Server) -> tuple[dict[str, float], int]:
    """``embedding_http_refused_total`` by code, from the server's ``/metrics``, and how many of the asks for them
    were refused themselves, over the connection limit (the server not yet done with connections just closed)."""
    over = 0
    while True:
        with connect(server.port) as sock:
            sock.sendall(request("GET", "/metrics"))
            status, _, body = read_response(sock)
        if status != 503:
            break
        over += 1
        time.sleep(0.1)
    assert status == 200, body[:300]
    found = re.findall(r'^embedding_http_refused_total\{code="(\w+)"\} (\S+)$', body.decode(), re.MULTILINE)
    return {code: float(value) for code, value in found}, over


def test_the_refusals_are_counted_in_the_metrics(holding: Server) -> None:
    """The requests the protocol refuses never reach the app, whose request metrics count its answers: each is
    counted in ``embedding_http_refused_total`` by its code, the liveness probe answered alive over the connection
    limit not."""
    before, _ = refusals(holding)
    kept = [connect(holding.port) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in kept:
            sock.sendall(request("GET", "/healthz"))
            assert read_response(sock)[0] == 200
        for path in ("/v1/tables", "/healthz", "/v1/tables"):
            with connect(holding.port) as extra:
                extra.sendall(request("GET", path))
                assert read_response(extra)[0] == (200 if path == "/healthz" else 503)
    finally:
        for sock in kept:
            sock.close()
    with connect(holding.port, timeout=10) as sock:
        sock.sendall(request("GET", "/healthz", headers={"X-Big": "z" * MAX_HEADER_BYTES}))
        assert error_of(read_response(sock), 431)["code"] == "headers_too_large"
    with connect(holding.port, timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n")
        assert error_of(read_response(sock), 505)["code"] == "http_version_not_supported"
    after, over = refusals(holding)
    added = {code: count - before.get(code, 0.0) for code, count in after.items()}
    assert {code: count for code, count in added.items() if count} == {
        "overloaded": 2 + over,
        "headers_too_large": 1,
        "http_version_not_supported": 1,
    }


def searches_counted(server: Server) -> dict[str, float]:
    """``embedding_http_requests_total`` of ``POST /v1/tables/{table}/search`` by status, from ``/metrics``."""
    with connect(server.port) as sock:
        sock.sendall(request("GET", "/metrics"))
        status, _, body = read_response(sock)
    assert status == 200, body[:300]
    line = (
        r'^embedding_http_requests_total\{method="POST",route="/v1/tables/\{table\}/search",status="(\d+)",'
        r'table="small"\} (\S+)$'
    )
    return {code: float(value) for code, value in re.findall(line, body.decode(), re.MULTILINE)}


def test_a_body_the_protocol_refuses_is_counted_once_by_its_code(server: Server) -> None:
    """A body that stalls (408) or that the client cuts (400) while the route waits for it is answered by the
    protocol: counted in ``embedding_http_refused_total`` by its code, and not again under the route with the
    status of an answer the client never got (the route's own 400 for a body it could not read)."""
    before, searched = refusals(server)[0], searches_counted(server)
    headers = {"Content-Type": "application/json", "Content-Length": "100"}
    with connect(server.port, timeout=10) as sock:
        sock.sendall(request("POST", SEARCH, headers=headers) + b'{"vector":')
        assert error_of(read_response(sock), 408)["code"] == "request_timeout"
    with connect(server.port, timeout=10) as sock:
        sock.sendall(request("POST", SEARCH, headers=headers) + b'{"vector":')
        sock.shutdown(socket.SHUT_WR)
        assert error_of(read_response(sock), 400)["code"] == "bad_request"
    with connect(server.port, timeout=10) as sock:  # a body the route reads whole and refuses: counted there
        sock.sendall(request("POST", SEARCH, b'{"vector": [1, 2]}'))
        assert read_response(sock)[0] == 422
    after, _ = refusals(server)
    added = {code: count - before.get(code, 0.0) for code, count in after.items()}
    assert added["request_timeout"] == 1 and added["bad_request"] == 1
    counted = {code: count - searched.get(code, 0.0) for code, count in searches_counted(server).items()}
    assert {code: count for code, count in counted.items() if count} == {"422": 1}


def test_healthy_afterwards(server: Server, small: Table) -> None:
    vectors = queries(small, 4, seed=5)
    with connect(server.port) as sock:
        sock.sendall(request("POST", "/v1/tables/small/search", search_body(vectors, k=10)))
        status, _, body = read_response(sock)
    assert status == 200
    assert_exact_neighbours(small, vectors, 10, json.loads(body))
    log = server.log()
    assert "Traceback" not in log and "Exception in ASGI application" not in log
