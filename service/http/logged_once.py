"""An unexpected error logged once, with its traceback and the request's id.

Starlette's error middleware answers an unexpected error with the service's 500 (``service.errors``) and raises it
again for the server; uvicorn would then log its traceback a second time ("Exception in ASGI application") and close
the connection. Around that middleware (inside the request id's), the error is logged here and ends.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("service.errors")  # the service's error lines, as the docs show them


class LoggedOnce:
    """The ASGI middleware around Starlette's error middleware."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            if scope["type"] != "http":  # the lifespan's failure is uvicorn's to report
                raise
            log.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=exc)
