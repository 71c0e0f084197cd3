"""Error kinds raised by the builder and the query engine.

Each error carries a stable ``code``; the HTTP layer maps codes to status codes in one place.
"""

from __future__ import annotations

from typing import Any

SHOWN_CHARS = 60  # of a client's value or name quoted in a message (a whole body may be one name)

# What a compaction that waited in vain for another's lock says to do, in its command's words (compact --wait); a
# server's background compaction (service.compacting) says what the server does instead.
WAIT_LONGER = "compact it again once that one is done, or with a longer --wait"
EVERY_DOCUMENT_DELETED = "every one of its documents is deleted"  # a compaction's refusal until the next write
WRITES_ONLY = "only documents tables take writes"  # why a table that is not a documents table refuses a write


def clipped(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text``, or its start and "..." when longer than ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def counted(count: int, noun: str) -> str:
    """``count`` ``noun``s as a message says them: "1 row", "2,000 rows" (every noun counted takes an "s")."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def every(count: int, noun: str) -> str:
    """All ``count`` ``noun``s as a message names them: "the only row" for one, "all 2,000 rows" for more."""
    return f"the only {noun}" if count == 1 else f"all {counted(count, noun)}"


def shown(value: Any) -> str:
    """A client's value as a message quotes it: its repr, clipped."""
    return clipped(repr(value))


class EmbeddingError(Exception):
    """Base class: a problem the caller can understand and act on."""

    code = "error"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class UnknownTable(EmbeddingError):
    code = "unknown_table"


class UnknownToken(EmbeddingError):
    code = "unknown_token"


class InvalidQuery(EmbeddingError):
    code = "invalid_request"


def not_documents(name: str, kind: str, use: str) -> InvalidQuery:
    """The refusal of table ``name``, which holds ``kind`` (words, model tokens), where only a documents table does:
    ``use`` says what it is refused (``Table.documents``; a compaction, before the table is loaded)."""
    return InvalidQuery(f"table {name!r} holds {kind}, not documents: {use}")


class OverLimit(InvalidQuery, ValueError):
    """A request over one of the server's limits: ``limit``, its name as ``GET /v1/limits`` gives it, is in the
    error's envelope, so that a client knows which to read again. A ValueError too: a request model's validator
    raises it as pydantic expects (``service.errors`` finds it in the validation error)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message, limit=limit)
        self.limit = limit


class Abandoned(EmbeddingError):
    """A computation stopped because no one waits for its answer any more (its client has gone)."""

    code = "client_closed_request"


class InputError(EmbeddingError):
    """A builder input file is malformed; names the file and, where it applies, the line."""

    code = "bad_input"

    def __init__(self, path: object, problem: str, line: int | None = None, unit: str = "line") -> None:
        """``unit``: what ``line`` counts in a file without lines ("row" of a .npy from 0, "token id", "vector")."""
        where = f"{path}" if line is None else f"{path}:{line}" if unit == "line" else f"{path}, {unit} {line}"
        super().__init__(f"{where}: {problem}", path=str(path), line=line)


class ArtifactError(EmbeddingError):
    """A table on disk is missing files or disagrees with its manifest."""

    code = "bad_artifact"
