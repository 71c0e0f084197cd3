"""What the LangChain and LlamaIndex stores write and read back of a document: the metadata they keep whole, as a
JSON object, in the table's string field ``metadata``; its values as JSON has them; the ids the server takes."""

from __future__ import annotations

import json
from typing import Any

METADATA = "metadata"  # the table's string field holding each document's metadata as JSON
MAX_ID_CHARS = 1024  # a document's id: a string of 1 to this many characters, as the server's tokens


def plain(value: Any) -> Any:
    """``value`` with NumPy's scalars and arrays (anything with ``tolist``), in dicts and lists too, as the numbers,
    booleans and lists JSON holds: metadata as an application has it (a count from pandas, a score from NumPy)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


def is_id(ident: str) -> bool:
    """Whether the server takes ``ident`` as a document's id: one it refuses (empty, too long) names no document."""
    return 1 <= len(ident) <= MAX_ID_CHARS


def metadata_of(fields: dict[str, Any]) -> dict[str, Any]:
    """The JSON object in ``fields["metadata"]``; for a document written otherwise (that field null, or its own
    text rather than a JSON object), its fields that are not null."""
    stored = fields.get(METADATA)
    try:
        metadata = json.loads(stored) if isinstance(stored, str) else None
    except ValueError:
        metadata = None
    if isinstance(metadata, dict):
        return metadata
    return {name: value for name, value in fields.items() if value is not None}
