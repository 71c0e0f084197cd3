"""Responses: JSON rendered fast, and hits shaped as the API gives them."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse

from index.engine.hybrid import Hit
from index.engine.knn import Neighbor
from index.engine.table import Table


class FastJSON(JSONResponse):
    """JSON rendered by orjson; numpy arrays (e.g. float32 rows) are serialised natively."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def neighbors(table: Table, hits: list[Neighbor]) -> list[dict[str, Any]]:
    labels = table.tokens.labels([i for i, _ in hits])
    out = [{"token": label, "id": i, "score": score} for label, (i, score) in zip(labels, hits, strict=True)]
    if table.metadata:  # e.g. a projector table's "kind" per word; model tables' readable form
        readable = table.metadata.get("readable")  # " heart" for "Ġheart", "beat" for "##beat"
        for item, (i, _) in zip(out, hits, strict=True):
            item["metadata"] = table.row_metadata(i)
            if readable is not None:
                item["readable"] = readable[i]
    return out


def documents(table: Table, hits: list[Neighbor], fields: list[str] | None = None) -> list[dict[str, Any]]:
    """Hits of a documents table: ``{"id", "score", "text", "fields"}``, with ``fields`` (default: all)."""
    payload = table.payload
    if payload is None:
        raise TypeError(f"table {table.name!r} is not a documents table")
    rows = [i for i, _ in hits]
    ids, texts, records = payload.ids(rows), payload.text(rows), payload.records(rows, fields)
    return [
        {"id": ident, "score": score, "text": text, "fields": record}
        for ident, text, record, (_, score) in zip(ids, texts, records, hits, strict=True)
    ]


def ranked_documents(table: Table, hits: list[Hit], fields: list[str] | None = None) -> list[dict[str, Any]]:
    """:func:`documents` of a keyword, hybrid or diverse search, each hit with its ``ranks`` when it has them."""
    out = documents(table, [(hit.row, hit.score) for hit in hits], fields)
    for item, hit in zip(out, hits, strict=True):
        if hit.ranks is not None:
            item["ranks"] = hit.ranks
    return out
