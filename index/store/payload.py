"""The payload of a documents table: ids, text and fields, columnar and memory-mapped.

Two Apache Arrow IPC files, each one record batch, written uncompressed so that opening them maps the file and
copies nothing (``pyarrow.memory_map`` + ``pyarrow.ipc.open_file``): every server worker shares the pages.

- ``payload.arrow``: row ``i`` is the table's row ``i``. The id column first, then the text column (when the
  documents have text), then one column per field;
- ``payload_ids.arrow``: the ids sorted (``id``) with their rows (``row``), for a vectorised binary search
  from id to row.

Field types and their Arrow types: string (utf8), integer (int64), float (float64), boolean (bool), timestamp
(timestamp[us, UTC]) and string_list (list<utf8>, e.g. tags).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from index.errors import ArtifactError, InvalidQuery, UnknownToken, counted
from index.store import artifact

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from index.lazy import pa, pc

PAYLOAD = "payload.arrow"
ID_LOOKUP = "payload_ids.arrow"
KIND = "documents"

STRING, INTEGER, FLOAT, BOOLEAN, TIMESTAMP, STRING_LIST = (
    "string",
    "integer",
    "float",
    "boolean",
    "timestamp",
    "string_list",
)


@cache
def timestamp_type() -> pa.DataType:
    """How a timestamp field is stored (a function, not a constant: pyarrow is imported on first use)."""
    return pa.timestamp("us", tz="UTC")


@cache
def arrow_types() -> dict[str, pa.DataType]:
    """The Arrow type each field type is stored as."""
    return {
        STRING: pa.string(),
        INTEGER: pa.int64(),
        FLOAT: pa.float64(),
        BOOLEAN: pa.bool_(),
        TIMESTAMP: timestamp_type(),
        STRING_LIST: pa.list_(pa.string()),
    }


ID_KEY = "id"  # a filter's key for the documents' own ids, so no field is named so (the import refuses one)
LOGICAL = ("and", "or", "not")  # a filter's keys that combine filters: no field is named so either
LOOKUP_LIMIT = 5  # unknown ids named in one error


class UnknownDocument(UnknownToken):
    """Ids that are not in the table (a document's id is its row's token)."""

    code = "unknown_document"


def unknown_documents(shown: Sequence[Any], count: int, table: str, deleted: bool = False) -> UnknownDocument:
    """The error naming ``shown``, the first (at most ``LOOKUP_LIMIT``) of ``count`` unknown ids, as asked
    (``deleted``: ids of the version's documents deleted since)."""
    more = f" and {count - len(shown):,} more" if count > len(shown) else ""
    names = ", ".join(repr(u) for u in shown)
    gone = " (deleted)" if deleted else ""
    return UnknownDocument(f"no document with id {names}{more} in table {table!r}{gone}", ids=list(shown), count=count)


def type_name(arrow_type: pa.DataType) -> str:
    """The field type a stored Arrow type stands for (large variants included)."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return STRING
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return STRING_LIST
    for name, stored in arrow_types().items():
        if arrow_type == stored:
            return name
    raise ArtifactError(f"no field type stores Arrow type {arrow_type}")


def contiguous(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One chunk; strings past the 2 GiB a 32-bit offset reaches become their large (64-bit offset) kind."""
    if isinstance(column, pa.Array):
        return column
    try:
        return column.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        large = {pa.string(): pa.large_string(), pa.list_(pa.string()): pa.large_list(pa.large_string())}
        return column.cast(large.get(column.type, column.type)).combine_chunks()


def string_offsets(strings: pa.Array) -> np.ndarray:
    """Where each of ``strings`` starts in its data buffer, and where the last ends (one more than the strings),
    zero-copy: string ``i``'s UTF-8 bytes are ``offsets[i]`` to ``offsets[i + 1]`` (int64 for a large string or
    binary array, else int32)."""
    wide = pa.types.is_large_string(strings.type) or pa.types.is_large_binary(strings.type)
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int64 if wide else np.int32)
    return offsets[strings.offset : strings.offset + len(strings) + 1]


def serialise(batch: pa.RecordBatch) -> memoryview:
    """The batch as an Arrow IPC file in memory (a view of Arrow's buffer: no copy into bytes)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return memoryview(sink.getvalue())


def sort_ids(ids: pa.Array) -> np.ndarray:
    """The rows of ``ids`` in id order (byte order for strings, as ``pyarrow.compute.less`` compares them)."""
    if pa.types.is_integer(ids.type):
        return np.argsort(ids.to_numpy(), kind="stable")
    return np.asarray(pc.sort_indices(ids).to_numpy(), dtype=np.int64)


def payload_files(table: pa.Table) -> dict[str, bytes | memoryview]:
    """The two payload files of ``table`` (id column first, then text and fields, one row per document)."""
    columns = [contiguous(column) for column in table.columns]
    batch = pa.RecordBatch.from_arrays(columns, names=table.column_names)
    ids = columns[0]
    order = sort_ids(ids)
    lookup = pa.RecordBatch.from_arrays([ids.take(pa.array(order)), pa.array(order, pa.int64())], names=["id", "row"])
    return {PAYLOAD: serialise(batch), ID_LOOKUP: serialise(lookup)}


def open_batch(path: Path) -> pa.RecordBatch:
    """The file's one record batch, its buffers pointing into a read-only map of the file."""
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        if reader.num_record_batches != 1:
            raise ArtifactError(f"{path}: {reader.num_record_batches} record batches, expected one")
        return reader.get_batch(0)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ArtifactError(f"{path}: unreadable Arrow file ({exc})") from exc


def prefix_keys(strings: pa.Array) -> np.ndarray:
    """Each string's first 8 UTF-8 bytes as one big-endian number, zeros after a shorter string's end: uint64 keys
    in the strings' byte order (a key below another's is a string below the other's, equal keys say nothing), so
    that numpy's binary search over a sorted array's keys narrows each string's place to the few that share them
    (:func:`insertion_points`)."""
    offsets = string_offsets(strings)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets)
    data = strings.buffers()[2]
    bytes_ = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    keys = np.zeros(len(strings), dtype=np.uint64)
    for position in range(8):  # one vectorised pass a byte, over every string
        held = lengths > position
        byte = np.zeros(len(strings), dtype=np.uint64)
        byte[held] = bytes_[starts[held] + position]
        keys = (keys << np.uint64(8)) | byte
    return keys


def insertion_points(
    haystack: pa.Array, needles: pa.Array, right: bool = False, keys: np.ndarray | None = None
) -> np.ndarray:
    """For each needle, where it would go in the sorted ``haystack``: before the ids equal to it (``right``: after
    them), as numpy's ``searchsorted``.

    Integers use numpy's binary search; strings a binary search of all needles at once, one Arrow gather and
    comparison per halving: from the whole array (about 20 steps for a million strings, whatever the number of
    needles), or, given the haystack's :func:`prefix_keys`, from the few strings that share each needle's key.
    """
    if pa.types.is_integer(haystack.type):
        wanted = needles.to_numpy(zero_copy_only=False)
        found: np.ndarray = np.searchsorted(haystack.to_numpy(), wanted, side="right" if right else "left")
        return found.astype(np.int64)
    n, m = len(haystack), len(needles)
    before = pc.less_equal if right else pc.less
    if keys is None:
        lo, hi = np.zeros(m, dtype=np.int64), np.full(m, n, dtype=np.int64)
    else:  # the place is after every string of a lower key and before every one of a higher key
        wanted = prefix_keys(needles)
        lo = np.searchsorted(keys, wanted, side="left").astype(np.int64)
        hi = np.searchsorted(keys, wanted, side="right").astype(np.int64)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        probe = haystack.take(pa.array(np.minimum(mid, n - 1)))
        below = np.asarray(before(probe, needles).to_numpy(zero_copy_only=False), dtype=bool)
        lo = np.where(active & below, mid + 1, lo)
        hi = np.where(active & ~below, mid, hi)


def search_sorted(haystack: pa.Array, needles: pa.Array, keys: np.ndarray | None = None) -> np.ndarray:
    """For each needle, its position in the sorted ``haystack``, or -1 when absent (:func:`insertion_points`, with
    the haystack's ``keys`` when given)."""
    n, m = len(haystack), len(needles)
    lo = insertion_points(haystack, needles, keys=keys)
    found = np.zeros(m, dtype=bool)
    inside = lo < n
    if inside.any():
        at = haystack.take(pa.array(np.where(inside, lo, 0)))
        found = inside & np.asarray(pc.equal(at, needles).to_numpy(zero_copy_only=False), dtype=bool)
    return np.where(found, lo, -1).astype(np.int64)


def _iso(timestamps: pa.Array) -> pa.Array:
    """timestamp[us, UTC] as ISO 8601 text: ``2001-12-24T05:30:00Z``, fractions of a second only when set."""
    text = pc.strftime(timestamps, format="%Y-%m-%dT%H:%M:%S")  # seconds with 6 decimals
    text = pc.replace_substring_regex(text, pattern=r"(\.[0-9]*[1-9])0+$", replacement=r"\1")
    text = pc.replace_substring_regex(text, pattern=r"\.0+$", replacement="")
    return pc.binary_join_element_wise(text, "Z", "")


class Payload:
    """Read-only ids, text and fields of a documents table; row ``i`` is the table's row ``i``."""

    def __init__(self, directory: Path, info: dict[str, Any], batch: pa.RecordBatch, lookup: pa.RecordBatch) -> None:
        self.directory = directory
        self.info = info
        self._batch = batch
        self.id_field: str = info["id_field"]
        self.text_field: str | None = info.get("text_field")
        self.id_type: str = info["id_type"]
        self.fields: dict[str, str] = {name: field["type"] for name, field in info["fields"].items()}
        self._sorted_ids = lookup.column(0)
        self._sorted_rows = lookup.column(1).to_numpy()

    @classmethod
    def open(cls, directory: Path, manifest: dict[str, Any] | None = None) -> Payload | None:
        """Map the payload of the table in ``directory``; None when the table is not a documents table.

        The files are not checksummed here: ``Table.load`` (``artifact.verify``) checks them with the rest.
        """
        directory = Path(directory)
        manifest = manifest if manifest is not None else artifact.read_manifest(directory)
        if manifest.get("kind") != KIND:
            return None
        info = manifest.get(KIND)
        if not isinstance(info, dict):
            raise ArtifactError(f"table {directory.name!r}: a documents table whose manifest has no 'documents'")
        batch = open_batch(directory / PAYLOAD)
        lookup = open_batch(directory / ID_LOOKUP)
        expected = [info["id_field"], *([info["text_field"]] if info.get("text_field") else []), *info["fields"]]
        rows = manifest.get("rows")
        problems = []
        if batch.schema.names != expected:
            problems.append(f"{PAYLOAD} has columns {batch.schema.names}, the manifest says {expected}")
        if batch.num_rows != rows or lookup.num_rows != rows:
            problems.append(f"{batch.num_rows:,} payload rows and {lookup.num_rows:,} ids for {rows:,} rows")
        for name, field in info["fields"].items():
            if name in batch.schema.names and type_name(batch.schema.field(name).type) != field["type"]:
                problems.append(f"field {name!r} is stored as {batch.schema.field(name).type}, not {field['type']}")
        if problems:
            raise ArtifactError(f"table {directory.name!r}: " + "; ".join(problems))
        return cls(directory, info, batch, lookup)

    def __len__(self) -> int:
        return int(self._batch.num_rows)

    # ------------------------------------------------------------------ rows and ids
    def _rows(self, rows: Sequence[int] | np.ndarray) -> pa.Array:
        indices = np.asarray(rows, dtype=np.int64).reshape(-1)
        if len(indices) and (indices.min() < 0 or indices.max() >= len(self)):
            bad = indices[(indices < 0) | (indices >= len(self))][0]
            raise InvalidQuery(f"row {int(bad)} is outside the table's {counted(len(self), 'row')}")
        return pa.array(indices, pa.int64())

    def _needles(self, ids: Sequence[str | int] | np.ndarray | pa.Array) -> pa.Array:
        """The ids as an Arrow array of the stored ids' type (large_string when they need 64-bit offsets); a value
        no id can equal becomes null."""
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        parse, want = (_as_int, pa.int64()) if self.id_type == INTEGER else (_as_str, pa.string())
        if isinstance(ids, pa.Array) and ids.type == want:
            needles = ids
        elif isinstance(ids, np.ndarray) and ids.dtype.kind in "iu" and self.id_type == INTEGER:
            needles = pa.array(ids.astype(np.int64, copy=False))
        else:
            values = ids.to_pylist() if isinstance(ids, pa.Array) else list(ids)
            needles = pa.array([parse(v) for v in values], want)
        return needles if needles.type == self._sorted_ids.type else needles.cast(self._sorted_ids.type)

    def row_of(self, ids: Sequence[str | int] | np.ndarray | pa.Array) -> np.ndarray:
        """The rows of ``ids`` (int64); :class:`UnknownDocument` names the ids that are not in the table.

        For an integer-id table, digit strings (``"12"``, as a URL carries them) are taken as the integer.
        """
        rows = self.find_rows(ids)
        missing = rows < 0
        if missing.any():
            asked = ids.to_pylist() if isinstance(ids, pa.Array) else list(ids)
            unknown = [asked[i] for i in np.flatnonzero(missing)[:LOOKUP_LIMIT]]
            raise unknown_documents(unknown, int(missing.sum()), self.directory.name)
        return rows

    def find_rows(self, ids: Sequence[str | int] | np.ndarray | pa.Array) -> np.ndarray:
        """The row of each id, -1 for an id the table does not have (a write's upsert or delete)."""
        needles = self._needles(ids)
        if not len(needles) or not len(self._sorted_rows):  # nothing asked, or a table of no rows (a shard)
            return np.full(len(needles), -1, dtype=np.int64)
        wanted = needles.fill_null(0 if self.id_type == INTEGER else "")
        positions = search_sorted(self._sorted_ids, wanted, self._id_keys)
        positions[np.asarray(needles.is_null().to_numpy(zero_copy_only=False), dtype=bool)] = -1
        return np.where(positions >= 0, self._sorted_rows[np.maximum(positions, 0)], -1).astype(np.int64)

    def rows_after(self, key: str | int | None) -> np.ndarray:
        """The rows in the ids' order (integer ids by number, text ids by code point), from the first whose id
        comes after ``key`` (an id as the table stores it, there or not; None: from the first row)."""
        if key is None:
            return np.asarray(self._sorted_rows)
        (start,) = insertion_points(self._sorted_ids, self._needles([key]), right=True, keys=self._id_keys)
        return np.asarray(self._sorted_rows[int(start) :])

    @cached_property
    def _id_keys(self) -> np.ndarray | None:
        """The sorted text ids' :func:`prefix_keys` (None for integer ids), made on the first look-up."""
        return None if pa.types.is_integer(self._sorted_ids.type) else prefix_keys(self._sorted_ids)

    def ids(self, rows: Sequence[int] | np.ndarray) -> list[str | int]:
        """The ids of ``rows``."""
        result: list[str | int] = self._batch.column(0).take(self._rows(rows)).to_pylist()
        return result

    def text(self, rows: Sequence[int] | np.ndarray) -> list[str | None]:
        """The text of ``rows`` (None for a document without text, and for every row of a table without text)."""
        indices = self._rows(rows)
        if self.text_field is None:
            return [None] * len(indices)
        result: list[str | None] = self._batch.column(1).take(indices).to_pylist()
        return result

    def records(self, rows: Sequence[int] | np.ndarray, fields: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The fields of ``rows`` as JSON-ready dicts (timestamps as ISO 8601 text, nulls as None).

        ``fields`` picks and orders the fields (the id and text columns may be named too); by default every field.
        """
        names = list(self.fields) if fields is None else list(fields)
        indices = self._rows(rows)
        columns = []
        for name in names:
            column = self.column(name).take(indices)
            columns.append(_iso(column) if column.type == timestamp_type() else column)
        if not columns:
            return [{} for _ in range(len(indices))]
        result: list[dict[str, Any]] = pa.RecordBatch.from_arrays(columns, names=names).to_pylist()
        return result

    def column(self, name: str) -> pa.Array:
        """A whole column (a field, or the id or text column), zero-copy over the mapped file: for filters."""
        index = self._batch.schema.get_field_index(name)
        if index < 0:
            known = ", ".join(repr(f) for f in self._batch.schema.names)
            raise InvalidQuery(f"table {self.directory.name!r} has no field {name!r}; its fields: {known}")
        return self._batch.column(index)


INT64 = (-(2**63), 2**63 - 1)


def _as_int(value: object) -> int | None:
    """An integer id asked for as an int or as digits (one sign at most: "+-7" is no integer, and leading zeros
    dropped: "007" is 7); None for anything else, and past 64 bits (no id equals it)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        number = int(value)
    else:
        text = value.strip() if isinstance(value, str) and value.isascii() else ""
        sign, digits = (text[:1], text[1:]) if text[:1] in ("+", "-") else ("", text)
        digits = (digits.lstrip("0") or "0") if digits.isdigit() else ""
        if not digits or len(digits) > len(str(INT64[1])):  # not read by int(): past 4,300 digits it raises
            return None
        number = int(sign + digits)
    return number if INT64[0] <= number <= INT64[1] else None


def id_key(value: object, id_type: str) -> str | int | None:
    """``value`` as the id of a table whose ids are ``id_type`` would equal it: an integer (within 64 bits) or its
    digits for an integer id, a string or an integer's digits for a string id; None when no id can equal it."""
    return _as_int(value) if id_type == INTEGER else _as_str(value)


def _as_str(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return str(int(value))
    return None
