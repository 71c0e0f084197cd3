"""A documents table's documents as the write log leaves them, read by id (:func:`read_documents`; ``GET
.../documents/{id}`` is a batch of one, :func:`read_document`). A written document is shown from the delta, a
version's row from the payload, a deleted or replaced row never. The live documents a filter passes are listed
page by page in the ids' order (:func:`scroll_documents`, ``POST .../documents/scroll``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from index.engine.delta import Delta, Key
from index.engine.table import Table
from index.errors import InvalidQuery, shown
from index.store.payload import INTEGER, id_key

Shown = dict[str, Any]
CHUNK = 4096  # the rows a page's first look reads at least (each next look twice the last)


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


def scroll_documents(
    table: Table,
    delta: Delta | None,
    spec: Any,
    limit: int,
    after: str | int | None,
    names: Sequence[str] | None,
    vector: bool,
    normalized: bool,
) -> tuple[list[Shown], Key | None]:
    """A page of the live documents the filter ``spec`` passes (None: every one), in the ids' order (integer ids
    by number, text ids by code point), the first ``limit`` of those whose id comes after ``after`` (an id, there or
    not: a page goes on after a document deleted since), each shown as :func:`read_documents` shows it; and the id
    to pass as ``after`` for the next page (None: this page is the last). The filter is the search's
    (``Table.filter``, the same errors), over the version's rows and the written documents."""
    payload = table.documents("list documents")
    start = None if after is None else id_key(after, payload.id_type)
    if after is not None and start is None:
        kind = "integers within 64 bits" if payload.id_type == INTEGER else "text"
        raise InvalidQuery(f"after: the ids of table {table.name!r} are {kind}, got {shown(after)}")
    passes = None if spec is None else table.filter(spec).mask
    rows = _live_rows(payload.rows_after(start), passes, None if delta is None else delta.deleted, limit + 1)
    keys: list[Key] = payload.ids(rows)
    if delta is not None and delta.documents:
        keys += _written_after(delta, spec, start, limit + 1)
        keys.sort()  # one table's ids: all integers or all text
    page = keys[:limit]
    found, _ = read_documents(table, delta, page, names, vector, normalized)
    return found, page[-1] if len(keys) > limit else None


def _live_rows(rows: np.ndarray, passes: np.ndarray | None, deleted: np.ndarray | None, most: int) -> np.ndarray:
    """The first ``most`` of ``rows`` that ``passes`` (None: every row) and are not ``deleted`` (None: none is),
    read a chunk at a time, each twice the last: a page's work follows the rows it reads, not the table's."""
    if passes is None and deleted is None:
        return rows[:most]
    found, held, start, step = [rows[:0]], 0, 0, max(4 * most, CHUNK)
    while held < most and start < len(rows):
        chunk = rows[start : start + step]
        keep = np.ones(len(chunk), dtype=bool) if passes is None else passes[chunk]
        if deleted is not None:
            keep &= ~deleted[chunk]
        found.append(chunk[keep])
        held, start, step = held + len(found[-1]), start + step, 2 * step
    return np.concatenate(found)[:most]


def _written_after(delta: Delta, spec: Any, start: Key | None, most: int) -> list[Key]:
    """The first ``most`` ids, in the ids' order, of the written documents that pass the filter ``spec`` and come
    after ``start``."""
    ids, places = delta.cached("id_order", lambda: _id_order(delta))
    begin = 0 if start is None else int(np.searchsorted(ids, start, side="right"))
    ids, places = ids[begin:], places[begin:]
    if spec is not None:
        ids = ids[delta.passing(spec)[places]]
    found: list[Key] = ids[:most].tolist()
    return found


def _id_order(delta: Delta) -> tuple[np.ndarray, np.ndarray]:
    """The written documents' ids sorted (integers as int64, text as Python strings) and each one's place in
    write order."""
    keys = list(delta.documents)
    ids = np.array(keys, dtype=np.int64 if delta.payload.id_type == INTEGER else object)
    order = np.argsort(ids, kind="stable")
    return ids[order], order
