"""CORS (Starlette's middleware), its refused preflight in the service's error envelope.

A preflight from an origin, for a method or with headers that are not allowed is answered 400 as Starlette answers
it (the same CORS headers), but with ``{"error": {"code": "bad_request", "message": ...}}`` instead of plain text:
every error of the API has that shape.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from service.errors import error_response


class JsonCORSMiddleware(CORSMiddleware):
    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code != 400:
            return answer
        headers = {k: v for k, v in answer.headers.items() if k.lower().startswith("access-control-")}
        return error_response("bad_request", bytes(answer.body).decode(), headers=headers)
