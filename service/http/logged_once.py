"""What would reach uvicorn from a request, answered and logged here: an unexpected error, logged once with its
traceback and the request's id; a request still running at the shutdown timeout, answered 503 in the envelope.

Starlette's error middleware answers an unexpected error with the service's 500 (``service.errors``) and raises it
again for the server; uvicorn would then log its traceback a second time ("Exception in ASGI application") and close
the connection. Around that middleware (inside the request id's), the error is logged here and ends.

After SIGTERM uvicorn gives the requests in flight ``EMBEDDING_SHUTDOWN_TIMEOUT`` seconds, then cancels them; the
cancellation would reach uvicorn, which logged a traceback and answered a plain-text 500, as if the request had
broken the server. Here the client gets ``503 not_ready`` (``"shutting_down": true``; OpenAI's shape on its paths),
which says to send it again (to another replica), and the log one line naming the request.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import error_body, status_of
from service.http.drain import Drain
from service.http.openai_errors import is_openai, openai_error

log = logging.getLogger("service.errors")  # the service's error lines, as the docs show them

CUT = "not_ready"
CUT_MESSAGE = "the server shut down before this request was answered: send it again"
CUT_STATUS = status_of(CUT)


class LoggedOnce:
    """The ASGI middleware around Starlette's error middleware."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            if scope["type"] != "http":  # the lifespan's failure is uvicorn's to report
                raise
            log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=exc)
        except asyncio.CancelledError:
            if scope["type"] != "http" or not self.drain.draining:  # not the shutdown's: uvicorn's to handle
                raise
            log.warning(
                "%s %s still running at the shutdown timeout (EMBEDDING_SHUTDOWN_TIMEOUT): cancelled, answering 503",
                *(scope["method"], scope["path"]),
            )
            await _cut(scope, send)


async def _cut(scope: Scope, send: Send) -> None:
    """Answer a request cancelled at the shutdown timeout, unless its answer had begun (uvicorn then closes the
    connection, as it would have)."""
    status = CUT_STATUS
    body = orjson.dumps(error_body(CUT, CUT_MESSAGE, shutting_down=True))
    if is_openai(scope["path"]):
        status, body = openai_error(status, body)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
    except RuntimeError:  # uvicorn's refusal of a second start: the answer had begun
        return
    await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
