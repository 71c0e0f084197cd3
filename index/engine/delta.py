"""The delta of a documents table: what its write log holds beyond the table's published version.

Upserts (``{"op": "upsert", "documents": [{"id", "text", "vector", "fields"}]}``) and deletes (``{"op":
"delete", "ids": [...]}``) are applied in sequence order into the documents written since the version (their
unit vectors, norms, text and fields, kept in write order) and a deletion mask over the version's rows (a row
deleted, or replaced by a newer document of its id). The log's records were checked when they were written;
replaying them is deterministic, so every worker that applies the same records holds the same delta.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import itertools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from index.engine.filters import RowSet, evaluate
from index.engine.knn import inner_products
from index.engine.table import Table, VectorSearch
from index.errors import InvalidQuery
from index.store.payload import INTEGER, LOOKUP_LIMIT, TIMESTAMP, Payload, arrow_types, id_key, unknown_documents
from index.store.rows import normalise, row_norms
from index.store.writelog import LogMismatch, Record, Shape, first_misfit, recover_pieces

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from index.lazy import pa

Key = str | int
T = TypeVar("T")


@dataclass(frozen=True)
class Document:
    id: Key
    vector: np.ndarray  # unit float32, as the builder makes it (index.store.rows.normalise)
    norm: float
    text: str | None
    fields: dict[str, Any]  # JSON-ready: timestamps as ISO 8601 text

    def show(self, payload: Payload, names: Sequence[str] | None, vector: bool) -> dict[str, Any]:
        """As ``GET .../documents/{id}`` shows a document: id, text, the fields (``names``: these), its vector."""
        record: dict[str, Any] = {}
        for name in list(payload.fields) if names is None else names:
            if name == payload.id_field:
                record[name] = self.id
            elif name == payload.text_field:
                record[name] = self.text
            elif name in payload.fields:
                record[name] = self.fields.get(name)
            else:
                payload.column(name)  # the error naming the table's fields
        out: dict[str, Any] = {"id": self.id, "text": self.text, "fields": record}
        if vector:
            out["vector"] = self.vector * np.float32(self.norm)
        return out


def parse_timestamp(text: str) -> dt.datetime:
    """ISO 8601 text as a UTC datetime (no zone: UTC); ValueError when it is not one, or falls outside the years
    1 to 9999 in UTC."""
    stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    try:
        return stamp.replace(tzinfo=dt.UTC) if stamp.tzinfo is None else stamp.astimezone(dt.UTC)
    except OverflowError:
        raise ValueError(f"{text!r} falls outside the years 1 to 9999 in UTC") from None


def timestamp_text(moment: dt.datetime) -> str:
    """A timestamp as the payload shows it: ``2001-12-24T05:30:00Z`` in UTC, fractions of a second only when set
    (``.5``, not ``.500000``); the year in four digits (``0999``, as ``%Y`` does not write it)."""
    utc = moment.astimezone(dt.UTC)
    text = f"{utc.year:04d}" + utc.strftime("-%m-%dT%H:%M:%S")
    return text + (f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else "") + "Z"


def written_row(values: Sequence[float]) -> list[float]:
    """A written document's vector as the table keeps it (float32 values), checked as the builder checks an
    imported row (``index.build.clean``) and as the delta normalises it (:func:`normalise`, its norm in float32):
    InvalidQuery for values beyond float32 or a norm that overflows float32 (refused at import too), and for a
    norm of zero (all zeros, or values too small for float32's squares: no direction to search by)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        row = np.asarray(values, dtype=np.float32)
        norm = row_norms(row[None])[0]
    if not np.isfinite(norm):
        raise InvalidQuery("the vector has values beyond float32, or its norm overflows float32")
    if norm == 0:
        raise InvalidQuery("the vector has no direction to search by (all zeros, or too small for float32)")
    values_kept: list[float] = row.tolist()
    return values_kept


class Delta:
    """The documents written and deleted since a documents table's version (sequence ``covered``)."""

    def __init__(self, payload: Payload, rows: int, dim: int, covered: int) -> None:
        self.payload = payload
        self.rows = rows
        self.dim = dim
        self.covered = covered
        self.last = 0  # sequence number of the last record read from the log
        self.offset = 0  # bytes of the log read
        self.documents: dict[Key, Document] = {}
        self.deleted = np.zeros(rows, dtype=bool)
        self._matrix: tuple[list[Key], np.ndarray, np.ndarray] | None = None
        self._written: list[Document] = []
        # Every unit row written, appended in write order (a replaced document's old row left where it was): each
        # written document's slot there, in write order; rows past ``_used`` are free. Rows a snapshot reads are
        # never written again (a full store is copied into a larger one), so snapshots share it.
        self._store = np.zeros((0, dim), dtype=np.float32)
        self._store_norms = np.zeros(0, dtype=np.float32)
        self._used = 0
        self._slots: dict[Key, int] = {}
        self._cache: dict[str, Any] = {}  # what searches derive from the delta, shared by its snapshots
        self.shape = Shape(dim, payload.id_type, payload.text_field is not None, payload.fields)  # what a record fits
        self._lasting: dict[str, Any] = {}  # what searches keep across changes (never replaced)

    @property
    def seq(self) -> int:
        """The table's sequence number: the last write it holds."""
        return max(self.covered, self.last)

    def key(self, value: Any) -> Key | None:
        """An id as the table stores it, looked up as the version's ids are (``Payload.row_of``): digits are an
        integer id's text, an integer a string id's digits; None when no id can equal it (beyond 64 bits too)."""
        return id_key(value, self.payload.id_type)

    def version_rows(self, keys: Sequence[Key]) -> np.ndarray:
        """The version's row of each id (-1 when it has none), deleted or not."""
        return self.payload.find_rows(list(keys))

    def live_version_rows(self, keys: Sequence[Key]) -> np.ndarray:
        """The version's row of each id while it is not deleted or replaced (else -1)."""
        rows = self.version_rows(keys)
        found = rows >= 0
        rows[found] = np.where(self.deleted[rows[found]], -1, rows[found])
        return rows

    def written(self, value: Any) -> Document | None:
        """The document of id ``value`` written since the version (None: not written, or deleted)."""
        key = self.key(value)
        return None if key is None else self.documents.get(key)

    def row_of(self, ids: Sequence[Any]) -> np.ndarray:
        """``Payload.row_of`` for the version's rows that are not deleted or replaced (the others are unknown)."""
        rows = self.payload.row_of(ids)
        gone = self.deleted[rows]
        if gone.any():
            shown = list(np.asarray(ids, dtype=object)[gone][:LOOKUP_LIMIT])
            raise unknown_documents(shown, int(gone.sum()), self.payload.directory.name, deleted=True)
        return rows

    def exists(self, keys: Sequence[Key]) -> np.ndarray:
        """A boolean per id: a live document has it (written since the version, or in it and not deleted)."""
        written = np.array([k in self.documents for k in keys], dtype=bool)
        return written | (self.live_version_rows(keys) >= 0)

    def snapshot(self) -> Delta:
        """A view that later writes leave as it is (``apply`` replaces the documents and the mask, never changes
        them in place): what one search reads, whatever other requests apply meanwhile."""
        self.matrix()  # made once per change, shared by the snapshots taken until the next
        return copy.copy(self)

    def replace(self, parts: Sequence[Delta], deleted: np.ndarray, covered: int, last: int) -> None:
        """Hold the written documents of ``parts`` (snapshots of a sharded table's shards' deltas, in shard order;
        no id in two of them) and the mask ``deleted`` instead, as ``apply`` changes a delta: what snapshots hold
        is left as it was. The parts' matrices, made already, are joined: no document's row is read one by one."""
        matrices = [part.matrix() for part in parts]
        documents: dict[Key, Document] = {}
        for part in parts:
            documents.update(part.documents)
        self.documents, self.deleted = documents, deleted
        self.covered, self.last = covered, last
        self._store = np.concatenate([self._store[:0], *(m[1] for m in matrices)])
        self._store_norms = np.concatenate([self._store_norms[:0], *(m[2] for m in matrices)])
        self._used = len(self._store)
        self._slots = dict(zip(itertools.chain.from_iterable(m[0] for m in matrices), itertools.count(), strict=False))
        self._matrix = None
        self._cache = {}

    def replay(self, records: list[Record]) -> None:
        """Apply the log's records at load (all at once, or a piece of the log after another): they must follow the
        version without a gap (else :class:`LogMismatch` names the writes missing: an older version restored over a
        newer log)."""
        first = next((r.seq for r in records if r.seq > self.seq), None)
        if first is not None and first > self.seq + 1:
            raise LogMismatch(
                f"its first record has sequence {first}, but its version holds the writes up to {self.covered} "
                f"only: writes {self.covered + 1} to {first - 1} are in neither (an older version restored over a "
                "newer log?); restore the newest version of the table, or move the log aside to serve this "
                "version without its writes"
            )
        self.apply(records)

    def replay_log(self, path: Path, done: Callable[[int], object] = lambda end: None) -> int:
        """:meth:`replay` the log at ``path`` (a torn tail cut: ``writelog.recover_pieces``) a piece at a time, so
        that what is held is the delta and one piece of the log, never the log's records; ``done(end)`` after each
        piece, ``end`` the log's bytes replayed so far. Returns the number of records replayed."""
        count = 0
        with contextlib.closing(recover_pieces(path)) as pieces:
            for records in pieces:
                self.replay(records)
                self.matrix()  # the rows of documents written again let go, once they are most of the delta's
                count += len(records)
                done(records[-1].end)
        return count

    def apply(self, records: Iterable[Record]) -> None:
        """Apply the records not applied yet; :class:`LogMismatch` (nothing applied) when one does not fit the
        table (another id type, dimension or field types: written to an earlier version of another schema)."""
        records = list(records)
        if not records:
            return
        found = first_misfit([r for r in records if r.seq > self.seq], self.shape)
        if found is not None:
            record, problem = found
            raise LogMismatch(
                f"its record of sequence {record.seq} does not fit this version ({problem}): it was written to an "
                "earlier version of another schema; restore that version and compact it, or move the log aside to "
                "serve this version without its writes"
            )
        # copies: snapshots keep theirs
        self.documents, self.deleted, self._slots = dict(self.documents), self.deleted.copy(), dict(self._slots)
        self._matrix = None
        self._cache = {}
        # The records' ids in order, their documents made afterwards in one block: the version's rows of every id
        # written or deleted looked up at once, the vectors normalised at once (a log replayed at load holds
        # thousands of records).
        touched: list[Key] = []  # the ids whose version row goes (replaced or deleted)
        pending: dict[Key, dict[str, Any]] = {}  # the documents upserted and still written, in write order
        for record in records:
            self.offset = record.end
            if record.seq <= self.seq:  # folded into the version, or applied before the log was cut
                self.last = max(self.last, record.seq)
                continue
            self.last = record.seq
            body = record.body
            upserts = body["documents"] if body.get("op") == "upsert" else []
            deletes = body["ids"] if body.get("op") == "delete" else []
            for key, document in zip(map(self.key, (d["id"] for d in upserts)), upserts, strict=True):
                if key is not None:  # a replaced document moves to the end, as a fresh import would order it
                    self.documents.pop(key, None)
                    self._slots.pop(key, None)
                    pending.pop(key, None)
                    pending[key] = document
                    touched.append(key)
            for key in map(self.key, deletes):
                if key is not None:
                    self.documents.pop(key, None)
                    self._slots.pop(key, None)
                    pending.pop(key, None)
                    touched.append(key)
        rows = self.version_rows(touched)
        self.deleted[rows[rows >= 0]] = True
        vectors = np.array([d["vector"] for d in pending.values()], dtype=np.float32).reshape(-1, self.dim)
        units, norms = normalise(vectors)
        first = self._stored(units, norms)
        for slot, (key, document) in enumerate(pending.items(), first):  # after every document kept: all moved
            self.documents[key] = Document(
                key, units[slot - first], float(norms[slot - first]), document.get("text"), document.get("fields") or {}
            )
            self._slots[key] = slot

    def _stored(self, units: np.ndarray, norms: np.ndarray) -> int:
        """Append ``units`` and ``norms`` to the store; the first one's slot. A full store is copied into one
        twice as large (snapshots keep the one they read)."""
        first, end = self._used, self._used + len(units)
        if end > len(self._store):
            size = max(end, 2 * len(self._store), 64)
            store, store_norms = np.empty((size, self.dim), dtype=np.float32), np.empty(size, dtype=np.float32)
            store[:first], store_norms[:first] = self._store[:first], self._store_norms[:first]
            self._store, self._store_norms = store, store_norms
        self._store[first:end], self._store_norms[first:end] = units, norms
        self._used = end
        return first

    def matrix(self) -> tuple[list[Key], np.ndarray, np.ndarray]:
        """The written documents' ids, unit vectors (n, dim) and norms, in write order: the store's rows of their
        slots (a view of it while no written document was replaced or deleted; no document read one by one)."""
        if self._matrix is None:
            self._written = list(self.documents.values())
            slots = np.fromiter(self._slots.values(), dtype=np.int64, count=len(self._slots))
            if len(slots) == self._used:  # slots rise in write order: every row of the store, in its order
                vectors, norms = self._store[: self._used], self._store_norms[: self._used]
            else:
                vectors, norms = self._store[slots], self._store_norms[slots]
                if 2 * len(slots) < self._used:  # more rows replaced or deleted than live: the store made again
                    self._store, self._store_norms, self._used = vectors, norms, len(slots)
                    self._slots = dict(zip(self.documents, range(len(slots)), strict=True))
            self._matrix = (list(self.documents), vectors, norms)
        return self._matrix

    def cached(self, name: str, make: Callable[[], T]) -> T:
        """``make()`` once per change of the delta, shared by the snapshots taken until the next."""
        if name not in self._cache:
            self._cache[name] = make()
        result: T = self._cache[name]
        return result

    def lasting(self, name: str, make: Callable[[], T]) -> T:
        """``make()`` once for this delta and every later state of it (what it holds must follow changes itself)."""
        result: T = self._lasting.setdefault(name, make()) if name not in self._lasting else self._lasting[name]
        return result

    def written_in_order(self) -> list[Document]:
        """The written documents in write order (a hit's row past the version's is its place here)."""
        self.matrix()
        return self._written

    def places(self) -> dict[Key, int]:
        """Each written document's place in write order (its hit row past the version's), made once per change."""
        return self.cached("places", lambda: dict(zip(self.documents, range(len(self.documents)), strict=True)))

    def columns(self) -> DeltaColumns:
        """The written documents' fields as Arrow columns, for the search filter language."""
        kept = self.lasting("columns", lambda: WrittenColumns(self.payload))
        return DeltaColumns(self.payload, self.written_in_order(), self.places, kept)

    def passing(self, spec: Any) -> np.ndarray:
        """A boolean per written document, in write order: whether it passes the filter ``spec`` (a search's). The
        last filter's is kept until the next change: the pages of a listing, or searches of one filter, evaluate
        it once, not each over every written document."""
        key = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        last = self._cache.get("passing")
        if last is not None and last[0] == key:
            kept: np.ndarray = last[1]
            return kept
        columns = self.columns()
        mask = evaluate(columns, spec).mask if columns.documents else np.zeros(0, dtype=bool)  # type: ignore[arg-type]
        mask.flags.writeable = False  # shared by the requests that ask it
        self._cache["passing"] = (key, mask)
        return mask


class DeltaColumns:
    """What ``filters.evaluate`` reads of a payload (``fields``, ``column``), over the written documents."""

    def __init__(
        self, payload: Payload, documents: list[Document], places: Callable[[], dict[Key, int]], kept: WrittenColumns
    ) -> None:
        self.fields = payload.fields
        self.id_field = payload.id_field
        self.text_field = payload.text_field
        self.id_type = payload.id_type
        self.documents = documents
        self.places = places  # the delta's, made once per change when an id filter first asks
        self.kept = kept  # the delta's, across its changes

    def __len__(self) -> int:
        return len(self.documents)

    def find_rows(self, ids: Sequence[str | int]) -> np.ndarray:
        """Each id's written document's place in write order, -1 for an id none has (``Payload.find_rows``)."""
        keys, places = (id_key(i, self.id_type) for i in ids), self.places()
        return np.array([-1 if key is None else places.get(key, -1) for key in keys], dtype=np.int64)

    def column(self, name: str) -> pa.Array:
        return self.kept.of(self.documents, name)


class WrittenColumns:
    """The written documents' columns (id, text, fields), each document's values read once: kept while it stays
    written, across changes of the delta, so that a filter after a write reads no document one by one. Each
    document read is an entry, a row of every column read so far; the entries of documents no longer written are
    dropped once they are most."""

    def __init__(self, payload: Payload) -> None:
        self.payload = payload
        self.entries: dict[int, int] = {}  # by id(document)
        self.kept: list[Document] = []  # each entry's document, held: no other document takes its id meanwhile
        self.columns: dict[str, pa.Array] = {}  # by name: a value per entry
        self.written: list[Document] = []  # the documents last asked of (a delta's, for one state of it)
        self.order: pa.Array | None = None  # their entries (None: the entries are theirs, in their order)
        self.lock = threading.Lock()

    def of(self, written: list[Document], name: str) -> pa.Array:
        """Column ``name`` of the ``written`` documents, in their order."""
        with self.lock:
            if written is not self.written:
                self._enter(written)
            if name not in self.columns:
                self.columns[name] = self._values(self.kept, name)
            values, order = self.columns[name], self.order
        return values if order is None else values.take(order)

    def _enter(self, written: list[Document]) -> None:
        """Add the entries of ``written`` not read yet; drop those of other documents once they are most."""
        found = list(map(self.entries.get, map(id, written)))
        new = [d for d, entry in zip(written, found, strict=True) if entry is None]
        if new:
            first = len(self.kept)
            self.entries.update(zip(map(id, new), range(first, first + len(new)), strict=True))
            self.kept += new
            for known, values in self.columns.items():
                self.columns[known] = pa.concat_arrays([values, self._values(new, known)])
        order = pa.array(np.fromiter(map(self.entries.__getitem__, map(id, written)), np.int64, len(written)))
        self.written, self.order = written, order
        if len(self.kept) > 2 * len(written):
            self.columns = {known: values.take(order) for known, values in self.columns.items()}
            self.kept, self.order = list(written), None
            self.entries = dict(zip(map(id, written), range(len(written)), strict=True))

    def _values(self, documents: list[Document], name: str) -> pa.Array:
        payload = self.payload
        if name == payload.id_field:
            return pa.array([d.id for d in documents], pa.int64() if payload.id_type == INTEGER else pa.string())
        if name == payload.text_field:
            return pa.array([d.text for d in documents], pa.string())
        kind = payload.fields[name]
        values = [d.fields.get(name) for d in documents]
        if kind == TIMESTAMP:  # ISO 8601 text in UTC as writes keep it (timestamp_text): cast at once
            try:
                return pa.array(values, pa.string()).cast(arrow_types()[kind])
            except pa.ArrowInvalid:
                values = [None if v is None else parse_timestamp(v) for v in values]
        return pa.array(values, arrow_types()[kind])


def unwritten(table: Table) -> Delta:
    """The delta of a documents table nothing was written to since its version, made once per loaded table: what
    a keyword search scored with other statistics than the table's own (a sharded table's whole ones) runs over
    when no write is to be merged, so that what it derives (``cached``, ``lasting``) is kept with the table
    rather than made per request."""
    payload = table.payload
    if payload is None:
        raise TypeError(f"table {table.name!r} is not a documents table")
    covered = int(table.manifest.get("log_sequence", 0))
    return table.cached("unwritten_delta", lambda: Delta(payload, table.rows, table.dim, covered))


def vector_search(
    table: Table, delta: Delta, search: VectorSearch, written: np.ndarray | None
) -> list[list[tuple[int, float]]]:
    """``Table.run(search)`` over the version and the delta as one source: the version's rows that are not
    deleted (and pass ``search.rows``), and the written documents (those ``written`` lets through, a boolean per
    document in write order; None: all), scored exactly. A written document's hit row is ``table.rows`` plus its
    place in write order; exclusions name such rows too. Equal scores keep the version's rows first, as a fresh
    import that appends the written documents would order them."""
    mask = ~delta.deleted if search.rows is None else search.rows.mask & ~delta.deleted
    want = search.offset + search.k
    base = table.rows
    widest = max((len(e) for e in search.exclude), default=0)
    version_exclude = [{r for r in e if r < base} for e in search.exclude] if search.exclude else []
    rows = RowSet(mask)
    found = (
        table.run(VectorSearch(search.queries, want + widest, version_exclude, search.options, rows))
        if len(rows)
        else []
    )
    _, vectors, _ = delta.matrix()
    usable = np.ones(len(vectors), dtype=bool) if written is None else written.copy()
    if search.options.restrict is not None:  # the first rows of the version only
        usable[:] = False
    candidates = np.flatnonzero(usable)
    chosen = vectors if len(candidates) == len(vectors) else vectors[candidates]  # no copy without a filter
    # scored as the version's exact search scores its rows: a written copy of a row ties with it, to the bit
    scores = inner_products(np.asarray(search.queries, dtype=np.float32), chosen) if len(candidates) else None
    answers = []
    for q in range(len(search.queries)):
        hits = list(found[q]) if found else []
        if scores is not None:
            excluded = [r - base for r in search.excluded(q) if r >= base]
            allowed = ~np.isin(candidates, excluded) if excluded else np.ones(len(candidates), dtype=bool)
            mine, places = scores[q][allowed], candidates[allowed]
            top = min(want, len(places))
            if top:
                best = np.arange(len(places))
                if top < len(places):  # the best, and every score equal to the last of them: ties are cut below
                    best = np.flatnonzero(mine >= mine[np.argpartition(-mine, top - 1)[top - 1]])
                best = best[np.lexsort((places[best], -mine[best]))][:top]  # by score, equal scores in write order
                hits += list(zip((places[best] + base).tolist(), mine[best].astype(np.float64).tolist(), strict=True))
        hits.sort(key=lambda hit: -hit[1])  # stable: the version's rows first among equal scores
        page = hits[search.offset : want]
        if search.min_score is not None:
            page = [hit for hit in page if hit[1] >= search.min_score]
        answers.append(page)
    return answers
