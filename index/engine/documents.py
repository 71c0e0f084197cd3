"""A documents table's documents as the write log leaves them, read by id (:func:`read_documents`; ``GET
.../documents/{id}`` is a batch of one, :func:`read_document`). A written document is shown from the delta, a
version's row from the payload, a deleted or replaced row never. The live documents a filter passes are listed
page by page in the ids' order (:func:`scroll_documents`, ``POST .../documents/scroll``). What an answer carries
is bounded as the server says (:class:`Bound`): a page is cut short before it, any other answer past it refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from index.engine.delta import Delta, Document, Key
from index.engine.table import Table
from index.errors import InvalidQuery, shown
from index.store.payload import INTEGER, id_key

Shown = dict[str, Any]
CHUNK = 4096  # the rows a page's first look reads at least (each next look twice the last)
Refuse = Callable[[int, str, str], Exception]  # a bound's refusal: (total, counted, advice) -> the error


@dataclass(frozen=True)
class Bound:
    """What an answer of documents may carry (the server's ``max_answer_bytes``, weighed as a search's hits are):
    ``weigh(rows, written)`` each document's bytes (a version's row, or past them ``written[row - table.rows]``), at
    most ``most`` in all; ``refuse(total, counted, advice)`` the error of an answer past it."""

    weigh: Callable[[np.ndarray, Sequence[Document]], np.ndarray]
    most: int
    refuse: Refuse


def read_documents(
    table: Table,
    delta: Delta | None,
    ids: Sequence[str | int],
    names: Sequence[str] | None,
    vector: bool,
    normalized: bool,
    bound: Bound | None = None,
) -> tuple[list[Shown], list[str | int]]:
    """The documents of ``ids`` as ``GET .../documents/{id}`` shows each (in the order asked, an id asked twice
    shown twice), and the ids no live document has. The version's rows are read in one lookup; an unknown field
    is an error even when no document is found (``records`` of no rows checks the names). An answer that would
    carry more than the ``bound`` (weighed before anything is read) is refused."""
    found = _found(table, delta, ids)
    if bound is not None:
        check_weights(found.weighed(table, bound), ids, found.count(), bound.most, bound.refuse)
    return found.show(table, ids, names, vector, normalized)


def check_weights(weights: np.ndarray, ids: Sequence[str | int], count: int, most: int, refuse: Refuse) -> None:
    """The refusal of an answer of ``count`` documents by id, what each of ``ids`` carries ``weights``, more than
    ``most`` in all (the heaviest named when it alone passes it)."""
    total = int(weights.sum())
    if total > most:
        heavy = ids[int(weights.argmax())]
        counted = f"the document {shown(heavy)}" if weights.max() > most else f"{count:,} documents"
        raise refuse(total, counted, "ask fewer ids, fewer fields or no vector")


def page_within(weights: np.ndarray, page: Sequence[str | int], most: int, refuse: Refuse) -> int:
    """How many of a page's documents (``page``, what each carries ``weights``) come before the one that would take
    it past ``most``; a first document that alone passes it refused."""
    carried = np.cumsum(weights)
    kept = int(np.searchsorted(carried, most, side="right"))
    if kept == 0 and len(page):
        raise refuse(int(carried[0]), f"the document {shown(page[0])}", "ask fewer fields or no vector")
    return kept


@dataclass(frozen=True)
class _Found:
    """Where each id asked has its live document: written since the version (``written``), else the version's
    row (``rows``; -1: none, or written)."""

    written: list[Document | None]
    rows: np.ndarray

    def count(self) -> int:
        """How many of the ids asked have a live document."""
        return sum(document is not None for document in self.written) + int((self.rows >= 0).sum())

    def weighed(self, table: Table, bound: Bound) -> np.ndarray:
        """What each id's document carries (``bound.weigh``; 0 for an id no document has)."""
        places = [i for i, document in enumerate(self.written) if document is not None]
        rows = self.rows.copy()
        rows[places] = table.rows + np.arange(len(places))  # as a search's hits name written documents
        out = np.zeros(len(rows), dtype=np.int64)
        live = rows >= 0
        kept = [document for document in self.written if document is not None]
        out[live] = bound.weigh(rows[live], kept)
        return out

    def show(
        self, table: Table, ids: Sequence[str | int], names: Sequence[str] | None, vector: bool, normalized: bool
    ) -> tuple[list[Shown], list[str | int]]:
        """The documents of ``ids`` (those this holds), as :func:`read_documents` shows them, and the ids missing."""
        payload = table.documents("look rows up by id")
        out: list[Shown | None] = [None] * len(ids)
        for i, written in enumerate(self.written):
            if written is not None:
                shown = written.show(payload, names, vector)
                if vector and normalized:
                    shown["vector"] = written.vector
                out[i] = shown
        at = np.flatnonzero(self.rows >= 0)
        found = self.rows[at]
        vectors = table.rows_of(found, normalized) if vector else None
        for j, (key, text, record) in enumerate(
            zip(payload.ids(found), payload.text(found), payload.records(found, names), strict=True)
        ):
            row: Shown = {"id": key, "text": text, "fields": record}
            if vectors is not None:
                row["vector"] = vectors[j]
            out[at[j]] = row
        missing = [ids[i] for i, shown_one in enumerate(out) if shown_one is None]
        return [one for one in out if one is not None], missing


def _found(table: Table, delta: Delta | None, ids: Sequence[str | int]) -> _Found:
    """Where the live document of each of ``ids`` is (:class:`_Found`)."""
    payload = table.documents("look rows up by id")
    written = [None if delta is None else delta.written(asked_id) for asked_id in ids]
    places = [i for i, document in enumerate(written) if document is None]
    asked = [ids[i] for i in places]
    rows = np.full(len(ids), -1, dtype=np.int64)
    rows[places] = payload.find_rows(asked) if delta is None else delta.live_version_rows(asked)
    return _Found(written, rows)


def read_document(
    table: Table,
    delta: Delta | None,
    document: str,
    names: Sequence[str] | None,
    vector: bool,
    normalized: bool,
    bound: Bound | None = None,
) -> Shown:
    """:func:`read_documents` of one id; an id no live document has is ``UnknownDocument`` (a deleted one named
    so), before any unknown field is."""
    payload = table.documents("look a row up by token")
    if delta is None or delta.written(document) is None:
        (delta or payload).row_of([document])  # UnknownDocument when it has no live row
    (found,), _ = read_documents(table, delta, [document], names, vector, normalized, bound)
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
    bound: Bound | None = None,
) -> tuple[list[Shown], Key | None]:
    """A page of the live documents the filter ``spec`` passes (None: every one), in the ids' order (integer ids
    by number, text ids by code point), the first ``limit`` of those whose id comes after ``after`` (an id, there or
    not: a page goes on after a document deleted since), each shown as :func:`read_documents` shows it; and the id
    to pass as ``after`` for the next page (None: this page is the last). The filter is the search's
    (``Table.filter``, the same errors), over the version's rows and the written documents. A page is cut short
    before the document that would take it past the ``bound`` (its ``next`` the last one kept); a first document
    that alone passes it is refused."""
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
    more = len(keys) > limit
    found = _found(table, delta, page)
    if bound is not None and page:
        kept = page_within(found.weighed(table, bound), page, bound.most, bound.refuse)
        if kept < len(page):
            page, more = page[:kept], True
            found = _Found(found.written[:kept], found.rows[:kept])
    documents, _ = found.show(table, page, names, vector, normalized)
    return documents, page[-1] if more else None


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
