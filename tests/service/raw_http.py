"""HTTP/1.1 by hand on raw sockets, for tests that need bytes no HTTP client would send (or send in one piece)."""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np

from index.engine.table import Table

Response = tuple[int, dict[str, str], bytes]


def connect(port: int, timeout: float = 30) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def request(method: str, target: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
    """One HTTP/1.1 request as bytes (kept alive unless ``headers`` say otherwise)."""
    fields = {"Host": "127.0.0.1"}
    if body is not None:
        fields |= {"Content-Type": "application/json", "Content-Length": str(len(body))}
    fields |= headers or {}
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
    return head.encode("latin-1") + (body or b"")


def read_head(sock: socket.socket, data: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Status and headers (lower-case names) of one response, and the bytes read past them."""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before a response: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, rest


def read_framed(sock: socket.socket, data: bytes = b"") -> tuple[Response, bytes]:
    """One response framed by its Content-Length (every answer of this server has one), and the bytes past it."""
    status, headers, body = read_head(sock, data)
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("connection closed inside the body")
        body += chunk
    return (status, headers, body[:length]), body[length:]


def read_response(sock: socket.socket, data: bytes = b"") -> Response:
    """One response framed by its Content-Length."""
    return read_framed(sock, data)[0]


def read_responses(sock: socket.socket, count: int) -> list[Response]:
    """``count`` responses in a row (to pipelined requests; one read may hold the end of one and the next)."""
    responses, data = [], b""
    for _ in range(count):
        response, data = read_framed(sock, data)
        responses.append(response)
    return responses


def closed(sock: socket.socket) -> bool:
    """True once the server has closed the connection (reads to the end, no more bytes expected)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def error_of(response: Response, status: int) -> dict[str, Any]:
    """The error of a JSON envelope answered with ``status``."""
    code, headers, body = response
    assert code == status, (code, body)
    assert headers["content-type"] == "application/json", headers
    error = json.loads(body)["error"]
    assert set(error) >= {"code", "message"} and error["message"], error
    return error


def queries(table: Table, count: int, seed: int) -> np.ndarray:
    """Seeded query vectors near real rows (so their neighbourhoods are real ones)."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(table.rows, size=count, replace=False)
    return np.asarray(table.vectors[rows], dtype=np.float64) + rng.normal(0, 0.05, (count, table.dim))


def search_body(vectors: np.ndarray, k: int) -> bytes:
    return json.dumps({"vectors": vectors.round(6).tolist(), "k": k, "exact": True}).encode()


def assert_exact_neighbours(table: Table, vectors: np.ndarray, k: int, answer: dict[str, Any]) -> None:
    """The answer of ``search_body`` against a float64 brute force over the table's unit rows: each neighbour's
    score is its float64 cosine, and the k scores are the k best (ids may differ only between equal scores)."""
    unit = np.asarray(table.vectors, dtype=np.float64)
    sent = np.asarray(vectors.round(6), dtype=np.float64)
    scores = unit @ (sent / np.linalg.norm(sent, axis=1, keepdims=True)).T  # (rows, queries)
    best = -np.sort(-np.partition(scores, -k, axis=0)[-k:], axis=0)  # (k, queries), best first
    results = answer["results"]
    assert len(results) == len(vectors)
    ids = np.array([[n["id"] for n in result["neighbors"]] for result in results]).T  # (k, queries)
    got = np.array([[n["score"] for n in result["neighbors"]] for result in results]).T
    assert ids.shape == (k, len(vectors)) and all(len(set(column)) == k for column in ids.T)
    np.testing.assert_allclose(got, np.take_along_axis(scores, ids, axis=0), atol=1e-5)
    np.testing.assert_allclose(got, best, atol=1e-5)
