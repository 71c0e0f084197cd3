"""The neighbours benchmark (bench/neighbours.py) times only servers whose answers it has checked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench import load
from bench.neighbours import same_answers


class Handler(BaseHTTPRequestHandler):
    """Answers ``/neighbors?token=W`` with ``{"token": "W"}``, but ``heart`` as ``cache`` would if it mixed up keys."""

    def do_GET(self) -> None:
        token = self.path.split("token=", 1)[1]
        body = ('{"token": "%s"}' % ("cache" if token == "heart" else token)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_answering_as_embedding_serve_does_passes(base: str) -> None:
    items = [load.Request("GET", f"/neighbors?token={w}") for w in ("love", "hate")]
    same_answers(base, items, [b'{"token": "love"}', b'{"token": "hate"}'], "the server with the answer cache")


def test_a_server_answering_one_request_otherwise_is_not_timed(base: str) -> None:
    items = [load.Request("GET", f"/neighbors?token={w}") for w in ("love", "heart")]
    with pytest.raises(RuntimeError, match="the server with the answer cache answers differently"):
        same_answers(base, items, [b'{"token": "love"}', b'{"token": "heart"}'], "the server with the answer cache")
