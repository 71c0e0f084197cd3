"""API keys: the admin key (``EMBEDDING_API_KEY``) and the optional read key (``EMBEDDING_READ_API_KEY``).

Both travel in the ``X-API-Key`` header and are compared in constant time. Without a read key, reads are open;
with one, every path needs the read key or the admin key, except the open ones below (health, readiness, metrics,
the docs, the explorer page and its files) and ``/v1/admin/*``, which checks the admin key itself.
"""

from __future__ import annotations

import hmac
from typing import Any

from pydantic import SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import ERRORS, ApiError, envelope, error_response
from service.http.openai_errors import is_openai

HEADER = "X-API-Key"
ADMIN_PREFIX = "/v1/admin/"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/"})
OPEN_PREFIXES = ("/static/", ADMIN_PREFIX)


def key_bytes(key: SecretStr | None) -> bytes | None:
    return key.get_secret_value().encode("ascii") if key is not None else None


def matches(given: bytes, keys: tuple[bytes, ...]) -> bool:
    """Constant-time comparison against every key (no early exit reveals which key came close)."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key)
    return found


def check(given: str | bytes | None, keys: tuple[bytes, ...]) -> None:
    """401 without a key, 403 with a wrong one."""
    if given is None:
        raise ApiError("unauthorized", f"this endpoint needs an API key in the {HEADER} header")
    raw = given.encode("latin-1") if isinstance(given, str) else given  # Starlette decodes headers as latin-1
    if not matches(raw, keys):
        raise ApiError("forbidden", "the API key is not valid")


class ReadKeyMiddleware:
    """Refuse requests without the read key (or the admin key): 401 without one, 403 with a wrong one."""

    def __init__(self, app: ASGIApp, keys: tuple[bytes, ...]) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"] if name == b"x-api-key"), None)
        try:
            check(given, self.keys)
        except ApiError as exc:
            await error_response(exc.code, exc.message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def document_read_key(schema: dict[str, Any]) -> None:
    """Mark every operation that needs the read key in the OpenAPI document, with its 401 and 403 answers."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["ReadKey"] = {"type": "apiKey", "in": "header", "name": HEADER}
    for path, item in schema["paths"].items():
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            continue
        content = envelope("OpenAIErrorResponse" if is_openai(path) else "ErrorResponse")  # as answered there
        for operation in item.values():
            operation["security"] = [{"ReadKey": []}]
            for code in ("unauthorized", "forbidden"):
                status = str(ERRORS[code].status)
                operation["responses"].setdefault(status, {"description": ERRORS[code].description, "content": content})
