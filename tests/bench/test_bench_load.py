"""The HTTP load generators (bench/load.py) count every response that is not a 200, and a checked result refuses
to stand for requests served when there were any."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import load
from bench.common import wrk_path


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the drivers' connections expect

    def do_GET(self) -> None:
        status = 503 if self.path.startswith("/busy") else 200
        body = b'{"ok": true}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


DRIVERS = [False] + ([True] if wrk_path() else [])


@pytest.mark.parametrize("use_wrk", DRIVERS, ids=lambda w: "wrk" if w else "httpx")
def test_a_refused_request_is_an_error_and_a_checked_result_says_so(base: str, use_wrk: bool) -> None:
    served = load.run(base, [load.Request("GET", "/ok")], 2, 1.0, use_wrk, max_requests=50)
    assert served.errors == 0 and served.requests > 0 and served.checked() is served
    refused = load.run(base, [load.Request("GET", "/ok"), load.Request("GET", "/busy")], 2, 1.0, use_wrk, 50)
    assert 0 < refused.errors < refused.requests
    with pytest.raises(RuntimeError, match="responses were not a 200"):
        refused.checked()
