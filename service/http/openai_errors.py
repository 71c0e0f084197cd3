"""Errors of the OpenAI-compatible paths in OpenAI's shape.

The service answers every error as ``{"error": {"code", "message", ...}}``; on the paths an OpenAI client calls
(``POST /v1/embeddings``, ``GET /v1/models`` and ``/v1/models/{model}``) this pure ASGI middleware rewrites such
an answer, whoever gave it (validation, the body limit, the read key, the route), into ``{"error": {"message",
"type", "param", "code"}}``, with the status and code OpenAI's API gives where they differ from the service's: an
invalid request (a field, too many inputs, a body over the limit) is a 400, a key that is not valid a 401
(``invalid_api_key``), so OpenAI's clients raise what code written for OpenAI catches (``BadRequestError``,
``AuthenticationError``). Answers below 400 pass through untouched.
"""

from __future__ import annotations

from typing import Any, cast

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import ValidationDetail, dotted, listed, status_of

PATHS = frozenset({"/v1/embeddings", "/v1/models"})
PREFIXES = ("/v1/models/",)  # every path under it, even one that names no model, answers in OpenAI's shape
# OpenAI's code where it differs: its name (model_not_found, invalid_api_key), or none (null) where it gives none
# for a request it refuses, an invalid field or a missing key. The service's other codes are kept.
CODES: dict[str, str | None] = {
    "unknown_table": "model_not_found",
    "forbidden": "invalid_api_key",
    "invalid_request": None,
    "unauthorized": None,
}
STATUSES = {"invalid_request": 400, "body_too_large": 400, "forbidden": 401}  # OpenAI's, where it differs
PARAMS = {"unknown_table": "model"}
# What OpenAI's client asks when its base_url lacks /v1 (``/embeddings``, ``/models``) is told so
NO_V1 = (
    "no such path: OpenAI's paths here are /v1/embeddings and /v1/models: give OpenAI's client the server's "
    "address with /v1 as its base_url (http://127.0.0.1:8000/v1)"
)


def is_openai(path: str) -> bool:
    """Whether errors on ``path`` are answered in OpenAI's shape."""
    return path in PATHS or path.startswith(PREFIXES)


def _problems(details: Any) -> list[ValidationDetail]:
    """The validation problems an error lists (none for any other error)."""
    if not isinstance(details, list):
        return []
    found = [d for d in details if isinstance(d, dict) and isinstance(d.get("loc"), list) and "message" in d]
    return cast(list[ValidationDetail], found)


def _place(problem: ValidationDetail) -> str | None:
    """``input`` or ``input[2]``: a problem's field (its location after "body") and the list's item (union tags
    left out); none for a body that is not JSON (``json_invalid``: its location is the body) or not an object."""
    loc = [str(part) for part in problem["loc"]][1:]
    if not loc or problem.get("type") == "json_invalid":
        return None
    item = next((part for part in loc[1:] if part.isdigit()), None)
    return loc[0] + (f"[{item}]" if item is not None else "")


def openai_status(code: str) -> int:
    """The status of the service's error ``code`` on the OpenAI-compatible paths."""
    return STATUSES.get(code, status_of(code))


def openai_error(status: int, body: bytes) -> tuple[int, bytes]:
    """The service's error answer as OpenAI's: its status and body (a body that is not the service's envelope is
    kept as the message); a validation error's problems are named as ``param`` names them (``input[2]``, where
    the service says ``input.2``)."""
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        error = None
    if not isinstance(error, dict):
        error = {"message": body.decode("utf-8", "replace") or "error"}
    if {"type", "param"} <= error.keys():  # already OpenAI's
        return status, body
    code = str(error.get("code"))
    problems = _problems(error.get("details"))
    param = error.get("param") or PARAMS.get(code) or (_place(problems[0]) if problems else None)
    message = listed(problems, lambda p: _place(p) or dotted(p)) if problems else str(error.get("message", ""))
    shaped = {
        "message": message,
        "type": "server_error" if status >= 500 else "invalid_request_error",
        "param": param,
        "code": CODES.get(code, error.get("code")),
    }
    return STATUSES.get(code, status), orjson.dumps({"error": shaped})


def without_v1(status: int, body: bytes) -> tuple[int, bytes]:
    """The answer to a path an OpenAI client asks when its base_url lacks ``/v1``: a 404 says so, in the service's
    envelope (the path is none of OpenAI's); any other answer is kept."""
    if status != 404:
        return status, body
    return status, orjson.dumps({"error": {"code": "not_found", "message": NO_V1}})


class OpenAIErrorsMiddleware:
    """Rewrite error answers on the OpenAI-compatible paths into OpenAI's error shape (and the 404 of one asked
    without ``/v1`` into one saying so)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        reshape = openai_error if is_openai(path) else without_v1 if is_openai(f"/v1{path}") else None
        if reshape is None:
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def reshaped(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message  # held until the whole body is there
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            status, body = reshape(start["status"], b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            length = (b"content-length", str(len(body)).encode())
            await send({**start, "status": status, "headers": [*headers, length]})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, reshaped)
