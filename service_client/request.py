"""One request of a call (:mod:`service_client.calls`) as the clients send it, and how its answer is read: decoded,
its error raised, or, for a request sized by the server's limits (:mod:`service_client.runs`), its refusal for one
of them handed back to the call that sized it."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from service_client.shapes import ApiError, _decoded, _encoded, _error, counted_from, renumbered

ENCODE_LIMIT = "max_encode_tokens"  # the ``limit`` of the refusal of a request's texts for their tokens
ANSWER_LIMIT = "max_answer_bytes"  # the ``limit`` of the refusal of an answer of too many bytes (documents read)
# The limits the clients size their requests of many items by (as far as they can know an item's cost beforehand).
SIZING = frozenset({"max_batch", "max_body_bytes", "max_hits", "max_words", "max_exact_rows", "max_scored_rows"})
T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """One request: ``json``, a body to encode (see :func:`~service_client.shapes._encoded`), or ``content``, one
    encoded already; ``raw``: the answer is the response itself (a binary or text body), not its JSON."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    content: bytes | None = None
    raw: bool = False
    first: int = 0  # the index of its first item among the whole call's, which its error counts from
    items: str | None = None  # a batch's: its items' field (``queries``), which its error names them by
    missing: Any = None  # not None: the answer of a server without the route (404), in place of its error
    halves: str | None = None  # a request of several items: its refusal for this limit is its answer (sent in halves)
    sized: bool = False  # sized by the limits read before: its refusal for one of SIZING is its answer (resent)

    def arguments(self) -> dict[str, Any]:
        """httpx's arguments for the request."""
        arguments: dict[str, Any] = {} if self.params is None else {"params": self.params}
        content = _encoded(self.json) if self.json is not None else self.content
        if content is not None:
            arguments.update(content=content, headers={"Content-Type": "application/json"})
        return arguments

    def answer(self, response: httpx.Response) -> Any:
        """The successful answer (decoded, unless ``raw``), or its error raised."""
        if response.status_code == 404 and self.missing is not None:
            return self.missing
        if not response.is_success:
            error = _error(response)
            if (self.halves is not None and refused_for(error, self.halves)) or (self.sized and error.limit in SIZING):
                return error
            raise counted_from(error, self.first) if self.items is None else renumbered(error, self.items, self.first)
        return response if self.raw else _decoded(response)


Call = Generator[Request, Any, T]


def refused_for(error: ApiError, limit: str) -> bool:
    """Whether ``error`` is a server's refusal of a whole request for ``limit``: the tokens its texts have the model
    run (before the model runs: nothing of it is written), or the bytes of its answer (before any is read)."""
    return error.status == 422 and error.code == "invalid_request" and error.details.get("limit") == limit
