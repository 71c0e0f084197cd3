"""What the async tests of the client and the vector stores check with: that an async method touches no
synchronous client (one that fell back on the synchronous method would), and that requests overlap in time."""

from __future__ import annotations

from typing import NoReturn

import httpx


class NoSyncClient:
    """In place of a store's synchronous client: any use of it fails the test."""

    def __getattr__(self, name: str) -> NoReturn:
        raise AssertionError(f"an async method used the synchronous client's {name!r}")


class Overlaps(httpx.AsyncHTTPTransport):
    """httpx's transport, counting the requests in flight at once (``most``: above 1 when some overlapped)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = self.most = self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.now, self.sent = self.now + 1, self.sent + 1
        self.most = max(self.most, self.now)
        try:
            return await super().handle_async_request(request)
        finally:
            self.now -= 1
