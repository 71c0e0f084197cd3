"""A documents table's documents as the write log leaves them, read by id (:func:`read_documents`; ``GET
.../documents/{id}`` is a batch of one, :func:`read_document`). A written document is shown from the delta, a
version's row from the payload, a deleted or replaced row never."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from index.engine.delta import Delta
from index.engine.table import Table

Shown = dict[str, Any]


def read_documents(
    table: Table,
    delta: Delta | None,
    ids: Sequence[str | int],
    names: Sequence[str] | None,
    vector: bool,
    normalized: bool,
) -> tuple[list[Shown], list[str | int]]:
    """The documents of ``ids`` as ``GET .../documents/{id}`` shows each (in the order asked, an id asked twice
    shown twice), and the ids no live document has. The version's rows are read in one lookup; an unknown field
    is an error even when no document is found (``records`` of no rows checks the names)."""
    payload = table.documents("look rows up by id")
    out: list[Shown | None] = [None] * len(ids)
    if delta is not None:
        for i, asked_id in enumerate(ids):
            written = delta.written(asked_id)
            if written is not None:
                shown = written.show(payload, names, vector)
                if vector and normalized:
                    shown["vector"] = written.vector
                out[i] = shown
    places = [i for i, shown_one in enumerate(out) if shown_one is None]
    asked = [ids[i] for i in places]
    rows = payload.find_rows(asked) if delta is None else delta.live_version_rows(asked)
    at = np.flatnonzero(rows >= 0)
    found = rows[at]
    vectors = table.rows_of(found, normalized) if vector else None
    for j, (key, text, record) in enumerate(
        zip(payload.ids(found), payload.text(found), payload.records(found, names), strict=True)
    ):
        row: Shown = {"id": key, "text": text, "fields": record}
        if vectors is not None:
            row["vector"] = vectors[j]
        out[places[at[j]]] = row
    missing = [ids[places[j]] for j in np.flatnonzero(rows < 0)]
    return [one for one in out if one is not None], missing


def read_document(
    table: Table, delta: Delta | None, document: str, names: Sequence[str] | None, vector: bool, normalized: bool
) -> Shown:
    """:func:`read_documents` of one id; an id no live document has is ``UnknownDocument`` (a deleted one named
    so), before any unknown field is."""
    payload = table.documents("look a row up by token")
    if delta is None or delta.written(document) is None:
        (delta or payload).row_of([document])  # UnknownDocument when it has no live row
    (found,), _ = read_documents(table, delta, [document], names, vector, normalized)
    return found
