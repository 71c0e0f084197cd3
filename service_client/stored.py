"""What the LangChain and LlamaIndex stores read back of a document's fields: the metadata they keep whole, as a
JSON object, in the table's string field ``metadata``."""

from __future__ import annotations

import json
from typing import Any

METADATA = "metadata"  # the table's string field holding each document's metadata as JSON


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
