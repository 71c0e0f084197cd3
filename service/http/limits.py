"""Request limits: the body-size cap (413 in the error envelope), the model limits of this app, the tokens a request
may have a transformer run (``index.engine.door.ENCODE_BUDGET``), the rows it may score one by one
(``SCORE_BUDGET``), those its exact searches may score (``EXACT_BUDGET``) and the unknown words it is given
suggestions for (``SUGGESTION_BUDGET``); and every POST body read as JSON whatever its ``Content-Type`` says
(``curl -d`` sends ``application/x-www-form-urlencoded``, which FastAPI would hand to the models as bytes: a 422
that names no cause); a body in a coding the server does not read (``refused_coding``) is a 400.

A pure ASGI middleware (no per-request task), so it costs next to nothing on the hot path.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from index.engine.door import ENCODE_BUDGET, EXACT_BUDGET, SCORE_BUDGET, SUGGESTED_MISSES, SUGGESTION_BUDGET
from index.errors import shown
from service.errors import error_response
from service.schemas.common import LIMITS, Limits


class BodyTooLarge(HTTPException):
    limit = "max_body_bytes"  # the limit's name, in the answer (as in the 413 for a declared length)

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body is larger than the limit of {limit} bytes")


def is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def as_json(scope: Scope) -> None:
    """``Content-Type: application/json`` in ``scope`` in place of any other (or of none). The scope itself is
    changed, not a copy: the metrics middleware around this one reads the route the router records in it."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    if any(name == b"content-type" and is_json(value) for name, value in headers):
        return
    kept = [(name, value) for name, value in headers if name != b"content-type"]
    scope["headers"] = [*kept, (b"content-type", b"application/json")]


def refused_coding(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why the body's coding is refused, if it is: a ``Content-Encoding`` (bodies are read as sent, never
    decompressed: a compressed one would be refused as not JSON, another read as if it were not) or a
    ``Transfer-Encoding`` other than ``chunked`` (httptools reads ``gzip, chunked`` as ``chunked``)."""
    for name, value in headers:
        if name not in (b"content-encoding", b"transfer-encoding"):
            continue
        coding = value.strip().lower()
        if name == b"content-encoding" and coding not in (b"", b"identity"):
            return (
                f"Content-Encoding {shown(value.decode('latin-1'))} is not accepted: send the request body "
                "uncompressed, without a Content-Encoding header"
            )
        if name == b"transfer-encoding" and coding != b"chunked":
            return (
                f"Transfer-Encoding {shown(value.decode('latin-1'))} is not accepted: send chunked or a Content-Length"
            )
    return None


class RequestLimitsMiddleware:
    """Refuse bodies over ``max_body_bytes``, publish ``limits`` to the request models and give the request its
    token budget."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, limits: Limits) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        LIMITS.set(self.limits)
        ENCODE_BUDGET.set([self.limits.max_encode_tokens, 0])  # this request's, whatever its connection served before
        SCORE_BUDGET.set([self.limits.max_scored_rows, 0])  # its keyword words' postings, filters' rows, MMR's
        EXACT_BUDGET.set([self.limits.max_exact_rows, 0])  # the rows its exact searches score
        SUGGESTION_BUDGET.set([SUGGESTED_MISSES])  # the unknown words it is given suggestions for
        if (refused := refused_coding(scope["headers"])) is not None:
            await error_response("bad_request", refused)(scope, receive, send)
            return
        if scope["method"] == "POST":
            as_json(scope)
        limit = self.max_body_bytes
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit():
                    await error_response("bad_request", "invalid Content-Length header")(scope, receive, send)
                    return
                if int(value) > limit:
                    over = BodyTooLarge(limit)
                    await error_response("body_too_large", over.detail, limit=over.limit)(scope, receive, send)
                    return
                await self.app(scope, receive, send)  # the server enforces the declared length
                return
        received = 0

        async def counted() -> Message:  # chunked bodies: count as they arrive
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)
