"""uvicorn's HTTP protocols, answering a request they cannot parse with the API's JSON error envelope.

A request that is not valid HTTP/1.1 (raw non-ASCII bytes or a NUL in the request line, a bad Content-Length, a
broken header) never reaches the app: uvicorn answers 400 itself, in plain text. These subclasses give the same
400 as ``{"error": {"code": "bad_request", "message": ...}}``; ``embedding-serve`` runs with this protocol.
"""

from __future__ import annotations

import importlib.util

import orjson

from service.errors import error_body

MESSAGE = "the request is not valid HTTP/1.1 (request line, headers or body framing)"
BODY = orjson.dumps(error_body("bad_request", MESSAGE))
HEADERS = [(b"content-type", b"application/json"), (b"connection", b"close")]


def _head(default_headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [b"HTTP/1.1 400 Bad Request\r\n"]
    for name, value in [*default_headers, *HEADERS, (b"content-length", str(len(BODY)).encode())]:
        lines.append(name + b": " + value + b"\r\n")
    return b"".join([*lines, b"\r\n"])


if importlib.util.find_spec("httptools") is not None:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class JsonErrorsProtocol(HttpToolsProtocol):
        def send_400_response(self, msg: str) -> None:
            self.transport.write(_head(self.server_state.default_headers) + BODY)
            self.transport.close()

else:  # pragma: no cover (uvicorn without httptools)
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class JsonErrorsProtocol(H11Protocol):  # type: ignore[no-redef]
        def send_400_response(self, msg: str) -> None:
            headers = [*HEADERS, (b"content-length", str(len(BODY)).encode())]
            for event in (h11.Response(status_code=400, headers=headers), h11.Data(data=BODY), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()
