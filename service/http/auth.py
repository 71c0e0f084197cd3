"""API keys: the admin key (``EMBEDDING_API_KEY``), the optional read key (``EMBEDDING_READ_API_KEY``) and the
write keys (``EMBEDDING_WRITE_KEYS``).

All travel in the ``X-API-Key`` header and are compared in constant time; on the OpenAI-compatible paths a key may
also come as the bearer token (``Authorization: Bearer``), which is how OpenAI's clients send their ``api_key``
(``X-API-Key`` wins when both are sent). Without a read key, reads are open;
with one, every path needs the read key, a write key or the admin key, except the open ones below (health,
readiness, metrics, the docs, the explorer page and its files) and ``/v1/admin/*``, which checks the admin key
itself. On a route that needs a write key, the read-key check's refusal names what that route needs, as the route's
own check does: a write key (or, on a server without one, that its tables are read-only). A refused key of the
server is named for what it is (its holder knows it already); any other key is only "not valid", which tells
nothing of the keys the server has.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import SecretStr
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import ERRORS, ApiError, envelope, error_response
from service.http.openai_errors import is_openai, openai_status

if TYPE_CHECKING:
    from service.settings import Settings

HEADER = "X-API-Key"
IN_HEADER = f"in the {HEADER} header"
# Where OpenAI's clients send their api_key: the read key is taken from there too on the OpenAI-compatible paths.
IN_HEADER_OR_BEARER = f"{IN_HEADER} or as the bearer token (an OpenAI client's api_key)"
BEARER = b"bearer "
ADMIN_PREFIX = "/v1/admin/"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/docs", "/openapi.json", "/"})
OPEN_PREFIXES = ("/static/", "/docs/", ADMIN_PREFIX)  # /docs/: the API page's files (service.api_docs)


class Kind(NamedTuple):
    """A kind of key, as the messages name it."""

    name: str
    may: str
    setting: str


READ = Kind("the read key", "read", "EMBEDDING_READ_API_KEY")
WRITE = Kind("a write key", "read and write documents", "EMBEDDING_WRITE_KEYS")
ADMIN = Kind("the admin key", "read and use the admin endpoints", "EMBEDDING_API_KEY")
KINDS = (READ, WRITE, ADMIN)
ANY_KEY = "the read key (EMBEDDING_READ_API_KEY), a write key or the admin key"
READ_ONLY = (
    "this server's tables are read-only: start it with EMBEDDING_WRITE_KEYS (one or more keys, comma-separated) to "
    f"accept writes from clients sending one in the {HEADER} header"
)

Keys = dict[Kind, tuple[bytes, ...]]


def key_bytes(key: SecretStr | None) -> bytes | None:
    return key.get_secret_value().encode("ascii") if key is not None else None


def server_keys(settings: Settings) -> Keys:
    """The server's keys by kind (none of a kind not set)."""
    admin, read = key_bytes(settings.api_key), key_bytes(settings.read_api_key)
    return {
        READ: (read,) if read else (),
        WRITE: tuple(key.encode("ascii") for key in settings.write_keys),
        ADMIN: (admin,) if admin else (),
    }


def needs(kind: Kind) -> str:
    return f"{kind.name} ({kind.setting})"


def matches(given: bytes, keys: tuple[bytes, ...]) -> bool:
    """Constant-time comparison against every key (no early exit reveals which key came close)."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key)
    return found


def check(
    given: str | bytes | None,
    keys: Keys,
    wanted: tuple[Kind, ...],
    need: str,
    action: str,
    where: str = IN_HEADER,
) -> None:
    """401 without a key; 403 with a key of none of the ``wanted`` kinds, saying which kind it is when it is a key
    of the server, "not valid" otherwise. ``need`` says what to send, ``action`` what the request does, ``where``
    where to send it."""
    if given is None:
        raise ApiError("unauthorized", f"this endpoint needs {need} {where}")
    raw = given.encode("latin-1") if isinstance(given, str) else given  # Starlette decodes headers as latin-1
    held = [kind for kind, some in keys.items() if matches(raw, some)]  # every kind compared: no early exit
    if any(kind in wanted for kind in held):
        return
    if held:
        kind = held[0]
        raise ApiError("forbidden", f"this is {kind.name}: it may {kind.may} but not {action}; send {need} {where}")
    raise ApiError("forbidden", f"the API key is not valid: send {need} {where}")


def bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme in any case), if there is one."""
    value = next((value for name, value in headers if name == b"authorization"), None)
    if value is None or value[: len(BEARER)].lower() != BEARER:
        return None
    return value[len(BEARER) :].strip() or None  # an empty token is no key


def check_any(given: str | bytes | None, keys: Keys, writing: Callable[[], bool], where: str = IN_HEADER) -> None:
    """The read-key check: any key of the server passes (a route that needs one kind checks it itself). Refused,
    the message names what the route needs: on a write route (``writing()``, asked only then) a write key, or that
    the tables are read-only."""
    try:
        check(given, keys, KINDS, ANY_KEY, "read", where)
    except ApiError:
        if not writing():
            raise
        if not keys[WRITE]:  # no key would do: refused as the route itself refuses it, whatever was sent
            raise ApiError("forbidden", READ_ONLY) from None
        check(given, keys, KINDS, needs(WRITE), "write documents", where)  # refused as above, naming a write key
        raise


class ReadKeyMiddleware:
    """Refuse requests without a key of the server (any kind reads): 401 without one, 403 with a wrong one.
    ``writes`` are the routes that need a write key, whose refusals name it."""

    def __init__(self, app: ASGIApp, keys: Keys, writes: Iterable[BaseRoute] = ()) -> None:
        self.app = app
        self.keys = keys
        self.writes = tuple(writes)

    def writing(self, scope: Scope) -> bool:
        return any(route.matches(scope)[0] is Match.FULL for route in self.writes)  # path and method

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"] if name == b"x-api-key"), None)
        openai = is_openai(path)
        if given is None and openai:
            given = bearer_token(scope["headers"])
        try:
            check_any(given, self.keys, lambda: self.writing(scope), IN_HEADER_OR_BEARER if openai else IN_HEADER)
        except ApiError as exc:
            await error_response(exc.code, exc.message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def document_read_key(schema: dict[str, Any]) -> None:
    """Mark every operation that needs the read key in the OpenAPI document, with its 401 and 403 answers."""
    components = schema.setdefault("components", {})
    schemes = components.setdefault("securitySchemes", {})
    schemes["ReadKey"] = {"type": "apiKey", "in": "header", "name": HEADER}
    schemes["ReadKeyBearer"] = {"type": "http", "scheme": "bearer", "description": "the OpenAI-compatible paths only"}
    for path, item in schema["paths"].items():
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            continue
        content = envelope("OpenAIErrorResponse" if is_openai(path) else "ErrorResponse")  # as answered there
        for operation in item.values():
            operation["security"] = [{"ReadKey": []}, {"ReadKeyBearer": []}] if is_openai(path) else [{"ReadKey": []}]
            for code in ("unauthorized", "forbidden"):
                status = str(openai_status(code) if is_openai(path) else ERRORS[code].status)
                said = ERRORS[code].description
                answer = operation["responses"].setdefault(status, {"description": said, "content": content})
                if said not in answer["description"] and is_openai(path):  # both are OpenAI's 401
                    answer["description"] += f" / {said}"
