"""Writes to a documents table: the documents of an upsert checked against the table and made into a log record,
and deletes by id or by filter counted against what the table holds (``service.live``).

A document's fields are checked against the table's field types (a field the table does not have, or a value of
another type, is an error naming the document and the field); a document without a vector is embedded by the
table's encoder, as at import, before the write takes its log's lock; a vector's length must be the table's
dimension.

A shard served alone by its own server takes the writes of the ids it owns only (``check_owned``): a write of
another shard's id is refused whole, naming the owner, rather than left in the wrong shard's log.

A sharded table's write is made per shard (``sharded_*``): each shard's part of it, for the shard that owns each
id (``index.engine.door.owner``, the import's assignment), as the record of that shard's own log.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from index.engine.door import (
    BOOLEAN,
    FLOAT,
    INTEGER,
    STRING,
    STRING_LIST,
    TIMESTAMP,
    Delta,
    Key,
    Payload,
    ShardedTable,
    ShardPlace,
    Table,
    by_owner,
    encoder_for,
    filters,
    id_key,
    parse_timestamp,
    shard_name,
    timestamp_text,
    unembedded,
    visible,
    written_row,
)
from index.errors import WRITES_ONLY, InvalidQuery, clipped, counted, shown
from service.schemas.writes import WriteDocument

Make = Callable[[Delta], tuple[dict[str, Any] | None, int]]  # a write's record made under its log's lock


def _field_value(kind: str, value: Any) -> Any:
    """The value as the log keeps it (timestamps as ISO 8601 text in UTC); ValueError when it is not of ``kind``."""
    if value is None:
        return None
    if kind == STRING and isinstance(value, str):
        return value
    if kind == INTEGER and isinstance(value, float) and value.is_integer():
        value = int(value)  # 2000.0 is the integer 2000, as in filters (JSON Schema's rule)
    if kind == INTEGER and isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
        return value
    if kind == FLOAT and isinstance(value, int | float) and not isinstance(value, bool):
        try:  # an integer too large for a float overflows
            if math.isfinite(value):
                return float(value)
        except OverflowError:
            pass
    if kind == BOOLEAN and isinstance(value, bool):
        return value
    if kind == TIMESTAMP and isinstance(value, str):
        return timestamp_text(parse_timestamp(value))
    if kind == STRING_LIST and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise ValueError(kind)


def named(i: int, ident: object) -> str:
    """An upsert's document ``i`` (of id ``ident``) as its errors name it."""
    return f"documents[{i}] (id {ident!r})"


def refused(i: int, ident: object, problem: str, **details: Any) -> InvalidQuery:
    """The 422 of an upsert's document ``i`` (of id ``ident``), named so; its index in the request is the error's
    ``document``, as the client's refusal of it before sending gives it."""
    return InvalidQuery(f"{named(i, ident)}: {problem}", document=i, **details)


def _fields(payload: Payload, i: int, ident: object, given: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in (given or {}).items():
        kind = payload.fields.get(field)
        if kind is None:
            known = ", ".join(repr(f) for f in payload.fields) or "none"
            problem = f"the table has no field {shown(field)} (its fields: {known})"
            raise refused(i, ident, problem, field=clipped(field))
        try:
            out[field] = _field_value(kind, value)
        except ValueError:
            kind_text = "an integer field (a whole number within 64 bits)" if kind == INTEGER else f"a {kind} field"
            raise refused(i, ident, f"field {field!r} is {kind_text}, not {shown(value)}", field=field) from None
    return out


def check_owned(place: ShardPlace | None, keys: Sequence[Key], name: Callable[[int], str]) -> None:
    """Refuse a write to a shard served alone (``place``; None: no shard) of ids another shard owns; ``name(i)``
    names the ``i``-th of ``keys`` in the message."""
    if place is None:
        return
    places, owners = place.foreign(keys)
    if not len(places):
        return
    first, owner = int(places[0]), shard_name(int(owners[0]))
    more = f" (and {len(places) - 1} more of this request's ids)" if len(places) > 1 else ""
    raise InvalidQuery(
        f"{name(first)}: {owner} owns this id{more}, not {shard_name(place.shard)}, which this server serves alone "
        f"(shard {place.shard} of the {place.count} of table {place.table!r}): send the write to the sharded "
        f"table's front, or to the server of {owner}; nothing was written"
    )


def check_ids_owned(place: ShardPlace | None, ids: Sequence[str | int], delta: Delta) -> None:
    """:func:`check_owned` of the ids of a delete (those the table could hold)."""
    if place is not None:
        keys = [k for k in (delta.key(i) for i in ids) if k is not None]
        check_owned(place, keys, lambda i: f"id {keys[i]!r}")


def upsert_keys(table: str, id_type: str, ids: Sequence[str | int]) -> list[Key]:
    """The ids of an upsert's documents as table ``table`` (of ids ``id_type``) stores them (``id_key``, as its
    reads find them: ``"007"`` is the integer id 7); 422 at the first the table's ids cannot be, or that comes twice.
    A sharded table's front checks an upsert's ids with it too, before it routes them."""
    keys: list[Key] = []
    seen: set[Key] = set()
    for i, ident in enumerate(ids):
        key = id_key(ident, id_type)
        if key is None or (id_type != INTEGER and not isinstance(ident, str)):
            kind = "integers of 64 bits" if id_type == INTEGER else "strings"
            raise refused(i, ident, f"the ids of table {table!r} are {kind}")
        if key in seen:
            raise refused(i, ident, "the id comes twice in this request")
        seen.add(key)
        keys.append(key)
    return keys


def upsert_body(
    table: Table,
    encoder: Table | None,
    documents: Sequence[WriteDocument],
    delta: Delta,
    place: ShardPlace | None = None,
) -> dict[str, Any]:
    """The log record of an upsert of ``documents``: ids, text, vectors (embedded when not given), typed fields;
    refused when ``place`` (a shard served alone) does not own every id. Of ``delta`` it reads only how the table
    keys its ids, never what was written."""
    payload = table.documents(WRITES_ONLY)
    keys = upsert_keys(table.name, delta.payload.id_type, [document.id for document in documents])
    out: list[dict[str, Any]] = []
    to_embed: list[int] = []
    for i, (document, key) in enumerate(zip(documents, keys, strict=True)):
        if document.text is not None and payload.text_field is None:
            raise refused(i, document.id, f"table {table.name!r} keeps no text (its documents were imported without)")
        vector = None
        if document.vector is not None:
            if len(document.vector) != table.dim:
                got = counted(len(document.vector), "value")
                raise refused(i, document.id, f"a vector of {got}; the table's have {table.dim}")
            try:
                vector = written_row(document.vector)
            except InvalidQuery as error:
                raise refused(i, document.id, str(error)) from None
        elif document.text is None:
            raise refused(i, document.id, "give its vector, or its text for the table's encoder to embed")
        else:
            to_embed.append(i)
        fields = _fields(payload, i, document.id, document.fields)
        out.append({"id": key, "text": document.text, "vector": vector, "fields": fields})
    check_owned(place, [d["id"] for d in out], lambda i: named(i, documents[i].id))
    if to_embed:
        record = table.encoder_record
        if record is None or encoder is None:
            i = to_embed[0]
            raise refused(
                i,
                documents[i].id,
                f"it has no vector, and table {table.name!r} records no encoder (its vectors came with the "
                "documents): send each document's vector",
            )
        texts = [documents[i].text or "" for i in to_embed]
        encoded = encoder_for(encoder).encode(texts, record.get("pooling"), strict=False)
        for j, (i, text, vector) in enumerate(zip(to_embed, texts, encoded.vectors, strict=True)):
            # a blank text is no document, as at import (a transformer would embed it as [CLS] [SEP] alone)
            if encoded.tokens[j] == 0 or not visible(text):
                label = f"{named(i, documents[i].id)}: its text"
                failed = unembedded(encoded, j, label, text, f"{encoder.name!r}, this table's encoder", document=i)
                raise InvalidQuery(failed.message + "; send its vector", **failed.details) from None
            out[i]["vector"] = vector.astype(np.float64).tolist()
    return {"op": "upsert", "documents": out}


def upserting(
    table: Table,
    encoder: Table | None,
    documents: Sequence[WriteDocument],
    delta: Delta,
    place: ShardPlace | None = None,
) -> Make:
    """An upsert, its record made (checked and embedded) now, before its log's lock: it depends on the table's
    fields and encoder only, so other writes to the table do not wait for the encoder."""
    return _upserting(upsert_body(table, encoder, documents, delta, place)["documents"])


def delete_body(ids: list[Key]) -> tuple[dict[str, Any] | None, int]:
    """The log record of a delete of ``ids`` (None: none is there, nothing to write) and how many it deletes."""
    return ({"op": "delete", "ids": ids} if ids else None), len(ids)


def delete_ids(table: Table, ids: Sequence[str | int], delta: Delta) -> list[Key]:
    """The ids among ``ids`` that a live document has (each once): what a delete of them removes."""
    table.documents(WRITES_ONLY)
    keys = list(dict.fromkeys(k for k in (delta.key(i) for i in ids) if k is not None))
    found = delta.exists(keys)
    return [k for k, there in zip(keys, found.tolist(), strict=True) if there]


def filter_ids(table: Table, spec: Any, delta: Delta) -> list[Key]:
    """The ids of the live documents the search filter ``spec`` lets through."""
    payload = table.documents(WRITES_ONLY)
    rows = np.flatnonzero(filters.evaluate(payload, spec).mask & ~delta.deleted)
    passing = delta.passing(spec).tolist()
    keys: list[Key] = payload.ids(rows) if len(rows) else []
    return keys + [d.id for d, ok in zip(delta.written_in_order(), passing, strict=True) if ok]


def _upserting(documents: list[dict[str, Any]]) -> Make:
    def make(_: Delta) -> tuple[dict[str, Any], int]:
        return {"op": "upsert", "documents": documents}, len(documents)

    return make


def deleting(table: Table, ids: Sequence[str | int]) -> Make:
    """A delete of ``ids`` from ``table`` (or a shard), those a live document has counted under its log's lock."""

    def make(delta: Delta) -> tuple[dict[str, Any] | None, int]:
        return delete_body(delete_ids(table, ids, delta))

    return make


def filtering(table: Table, spec: Any) -> Make:
    """A delete of what the search filter ``spec`` lets through of ``table`` (or a shard), under its log's lock."""

    def make(delta: Delta) -> tuple[dict[str, Any] | None, int]:
        return delete_body(filter_ids(table, spec, delta))

    return make


def sharded_upsert(
    table: Table, encoder: Table | None, documents: Sequence[WriteDocument], whole: Delta
) -> dict[int, Make]:
    """An upsert of a sharded table, by shard: every document checked (and embedded) first, as one batch (a
    refused document writes none), then each owner's documents as its record."""
    assert isinstance(table, ShardedTable)
    checked = upsert_body(table, encoder, documents, whole)["documents"]
    groups = by_owner((d["id"] for d in checked), table.map.count)
    return {shard: _upserting([checked[i] for i in places]) for shard, places in groups.items()}


def sharded_delete(table: Table, ids: Sequence[str | int], whole: Delta) -> dict[int, Make]:
    """A delete by id of a sharded table, by shard: each id to its owner (none the table could hold: shard 0,
    which writes nothing)."""
    assert isinstance(table, ShardedTable)
    table.documents(WRITES_ONLY)
    keys = list(dict.fromkeys(k for k in (whole.key(i) for i in ids) if k is not None))
    groups = by_owner(keys, table.map.count) or {0: []}
    return {shard: deleting(table.shards[shard], [keys[i] for i in places]) for shard, places in groups.items()}


def sharded_filter_delete(table: Table, spec: Any) -> dict[int, Make]:
    """A delete by filter of a sharded table: every shard deletes what the filter lets through of its own."""
    assert isinstance(table, ShardedTable)
    table.documents(WRITES_ONLY)
    return {shard: filtering(part, spec) for shard, part in enumerate(table.shards)}
