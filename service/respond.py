"""Responses: JSON rendered fast, and the door's answers (``index.engine.door``) shaped as the API gives them, the
bytes they carry weighed first (:func:`row_bytes`, the server's max_answer_bytes)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from starlette.responses import JSONResponse

from index.engine.door import (
    STRING,
    Answer,
    Bound,
    Delta,
    Document,
    Failed,
    Hit,
    Neighbor,
    Payload,
    Result,
    Table,
    string_offsets,
    whole_rows,
)
from index.errors import OverLimit, counted
from service.errors import item_error
from service.schemas.common import LIMITS

MB = 1_000_000


class FastJSON(JSONResponse):
    """JSON rendered by orjson; numpy arrays (e.g. float32 rows) are serialised natively."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def neighbors(table: Table, hits: Sequence[Neighbor]) -> list[dict[str, Any]]:
    labels = table.tokens.labels([i for i, _ in hits])
    out = [{"token": label, "id": i, "score": score} for label, (i, score) in zip(labels, hits, strict=True)]
    if table.metadata:  # e.g. a projector table's "kind" per word; model tables' readable form
        readable = table.metadata.get("readable")  # " heart" for "Ġheart", "beat" for "##beat"
        for item, (i, _) in zip(out, hits, strict=True):
            item["metadata"] = table.row_metadata(i)
            if readable is not None:
                item["readable"] = readable[i]
    return out


def documents(
    table: Table, hits: Sequence[Neighbor], fields: list[str] | None = None, delta: Delta | None = None
) -> list[dict[str, Any]]:
    """Hits of a documents table: ``{"id", "score", "text", "fields"}``, with ``fields`` (default: all); with a
    ``delta``, hits of the written documents too (rows past the version's)."""
    payload = table.payload
    if payload is None:
        raise TypeError(f"table {table.name!r} is not a documents table")
    if delta is not None:
        return _live_documents(table, payload, delta, hits, fields)
    rows = [i for i, _ in hits]
    ids, texts, records = payload.ids(rows), payload.text(rows), payload.records(rows, fields)
    return [
        {"id": ident, "score": score, "text": text, "fields": record}
        for ident, text, record, (_, score) in zip(ids, texts, records, hits, strict=True)
    ]


def _live_documents(
    table: Table, payload: Payload, delta: Delta, hits: Sequence[Neighbor], fields: list[str] | None
) -> list[dict[str, Any]]:
    """:func:`documents` of hits from the version and from the written documents (rows past the version's)."""
    base = table.rows
    shown = documents(table, [hit for hit in hits if hit[0] < base], fields)
    written = delta.written_in_order()
    out, version = [], iter(shown)
    for row, score in hits:
        if row < base:
            out.append(next(version))
        else:
            document = written[row - base].show(payload, fields, False)
            out.append({"id": document["id"], "score": score, "text": document["text"], "fields": document["fields"]})
    return out


def ranked_documents(
    table: Table, hits: Sequence[Hit], fields: list[str] | None = None, delta: Delta | None = None
) -> list[dict[str, Any]]:
    """:func:`documents` of a keyword, hybrid or diverse search, each hit with its ``ranks`` when it has them."""
    out = documents(table, [(hit.row, hit.score) for hit in hits], fields, delta)
    for item, hit in zip(out, hits, strict=True):
        if hit.ranks is not None:
            item["ranks"] = hit.ranks
    return out


def include(
    table: Table, result: Result, shown: dict[str, Any], asked: Sequence[str], delta: Delta | None = None
) -> dict[str, Any]:
    """``shown`` (:func:`hits` of ``result``) with each hit's ``row`` (a shard's: in the whole table) and unit
    ``vector`` where ``asked``; a written document's row is null (it has none in the version)."""
    if not asked:
        return shown
    written = [] if delta is None else delta.written_in_order()
    rows = [hit.row if isinstance(hit, Hit) else hit[0] for hit in result.hits]
    kept = np.array([row for row in rows if row < table.rows], dtype=np.int64)
    whole = whole_rows(table)[kept].tolist() if "row" in asked else []
    vectors = table.vectors[kept] if "vector" in asked else None
    at = 0
    for item, row in zip(shown["hits"], rows, strict=True):
        if row >= table.rows:  # a written document (service.live)
            if "row" in asked:
                item["row"] = None
            if "vector" in asked:
                item["vector"] = written[row - table.rows].vector
            continue
        if "row" in asked:
            item["row"] = whole[at]
        if vectors is not None:
            item["vector"] = vectors[at]
        at += 1
    return shown


def words(table: Table, result: Result) -> dict[str, Any]:
    """A word table's answer: the query as it was read, its neighbours, an analogy's expected answer."""
    out = {"query": result.query, "neighbors": neighbors(table, result.hits)}  # type: ignore[arg-type]
    if result.expect is not None:
        out["expect"] = result.expect
    return out


def hits(table: Table, result: Result, fields: list[str] | None = None, delta: Delta | None = None) -> dict[str, Any]:
    """A documents table's answer: its hits, how many documents its filter passes, the fallback mode taken."""
    if result.ranked:
        shown = ranked_documents(table, result.hits, fields, delta)  # type: ignore[arg-type]
    else:
        shown = documents(table, result.hits, fields, delta)  # type: ignore[arg-type]
    out: dict[str, Any] = {"hits": shown}
    if result.passing is not None:
        out["passing"] = result.passing
    if result.fallback is not None:
        out["fallback"] = result.fallback
    return out


VALUE_BYTES = 12  # a unit vector's value as JSON, about: "-0.08746538,"


def check_answer_bytes(
    table: Table,
    answers: Sequence[Answer],
    fields: list[str] | None,
    include: Sequence[str],
    delta: Delta | None,
) -> None:
    """422 when the hits of a search's ``answers`` would carry more bytes of text and vectors than the server's
    max_answer_bytes (:func:`row_bytes`)."""
    vector = "vector" in include
    if table.payload is None and not vector:
        return
    hits = (hit for answer in answers if isinstance(answer, Result) for hit in answer.hits)
    rows = np.array([hit.row if isinstance(hit, Hit) else hit[0] for hit in hits], dtype=np.int64)
    written = delta.written_in_order() if delta is not None and (rows >= table.rows).any() else []
    total = int(row_bytes(table, rows, fields, vector, written).sum())
    limit = LIMITS.get().max_answer_bytes
    if total > limit:
        advice = "ask fewer hits (a smaller k or fewer queries)"
        advice += ', or fewer string fields ("fields")' if table.payload is not None else ""
        advice += ' or no "vector" in include' if vector else ""
        raise too_much(table.payload is not None, vector, limit, total, counted(len(rows), "hit"), advice)


def documents_bound(table: Table, fields: Sequence[str] | None, vector: bool) -> Bound:
    """The bound of the documents read by id or a page at a time (``index.engine.door.read_documents``,
    ``scroll_documents``): the server's max_answer_bytes, each document weighed as a search's hit is."""
    limit = LIMITS.get().max_answer_bytes
    return Bound(
        weigh=lambda rows, written: row_bytes(table, rows, fields, vector, written),
        most=limit,
        refuse=lambda total, counted, advice: too_much(
            table.payload is not None, vector, limit, total, counted, advice
        ),
    )


def row_bytes(
    table: Table, rows: np.ndarray, fields: Sequence[str] | None, vector: bool, written: Sequence[Document]
) -> np.ndarray:
    """The bytes each of ``rows`` carries (int64), measured before anything is read: a version's row (below
    ``table.rows``) its text and the string ``fields`` shown (None: all) from the stored strings' offsets, a
    written document (row ``table.rows + i``: ``written[i]``) its text's UTF-8 length; with ``vector``, the row's
    vector at :data:`VALUE_BYTES` a value."""
    out = np.full(len(rows), table.dim * VALUE_BYTES if vector else 0, dtype=np.int64)
    if table.payload is None:
        return out
    stored = np.flatnonzero(rows < table.rows)
    for ends in _offsets(table.payload, fields):
        out[stored] += ends[rows[stored] + 1] - ends[rows[stored]]
    for at in np.flatnonzero(rows >= table.rows):
        out[at] += len((written[rows[at] - table.rows].text or "").encode())
    return out


def shown_bytes(document: dict[str, Any], strings: Container[str]) -> int:
    """The bytes a document as shown (``GET .../documents/{id}``) carries, as :func:`row_bytes` weighs a version's
    row: its text, its fields of type string (``strings``), its vector (what a front weighs its shards' documents
    by; a written document's string fields counted too)."""
    fields = (document.get("fields") or {}).items()
    vector = document.get("vector")
    return (
        len((document.get("text") or "").encode())
        + sum(len(value.encode()) for name, value in fields if name in strings and isinstance(value, str))
        + (0 if vector is None else len(vector) * VALUE_BYTES)
    )


def too_much(texts: bool, vector: bool, limit: int, total: int, counted: str, advice: str) -> OverLimit:
    """The refusal of an answer that would carry ``total`` bytes (of ``counted``: "12 hits"), over ``limit``, of a
    documents table's (``texts``) or another's."""
    what = "document text" if not vector else "document text and vectors" if texts else "vectors"
    return OverLimit(
        f"this answer would carry {_size(total)} of {what} ({counted}), more than the server's max_answer_bytes of "
        f"{_size(limit)}: {advice}",
        "max_answer_bytes",
    )


def _size(amount: int) -> str:
    return f"{amount / MB:,.1f} MB" if amount >= MB else f"{amount:,} bytes"


# The offsets of each payload's string columns, read once per payload (as long as it serves).
_OFFSETS: weakref.WeakKeyDictionary[Payload, dict[str, np.ndarray]] = weakref.WeakKeyDictionary()


def _offsets(payload: Payload, fields: Sequence[str] | None) -> list[np.ndarray]:
    """Where each row's string starts and ends in the text column (every hit carries it) and in the string
    fields of ``fields`` (default: all): row ``i``'s bytes are ``ends[i + 1] - ends[i]``."""
    shown = list(payload.fields) if fields is None else fields
    strings = [name for name in shown if payload.fields.get(name) == STRING and name != payload.text_field]
    names = ([payload.text_field] if payload.text_field else []) + strings
    kept = _OFFSETS.setdefault(payload, {})
    for name in names:
        if name not in kept:
            kept[name] = string_offsets(payload.column(name))
    return [kept[name] for name in names]


@dataclass(frozen=True)
class Shown:
    """What a search's hits show: the documents' ``fields`` (None: all), what ``include`` asks for (row, vector),
    the documents written since the version (``delta``)."""

    fields: list[str] | None
    include: Sequence[str]
    delta: Delta | None


def searched(table: Table, answers: Sequence[Answer], shown: Shown) -> list[dict[str, Any]]:
    """A search's answers, each result shaped (a word table's neighbours, a documents table's hits) or its error's
    envelope, once :func:`check_answer_bytes` has bounded what they carry."""
    check_answer_bytes(table, answers, shown.fields, shown.include, shown.delta)

    def shape(result: Result) -> dict[str, Any]:
        if table.payload is None:
            found = neighbors(table, result.hits)  # type: ignore[arg-type]
            if shown.include:  # each hit's row in the whole table (a shard's), its unit vector: in place
                include(table, result, {"hits": found}, shown.include)
            return {"neighbors": found}
        return include(table, result, hits(table, result, shown.fields, shown.delta), shown.include, shown.delta)

    return results(answers, shape)


def results(answers: Sequence[Answer], shape: Callable[[Result], dict[str, Any]]) -> list[dict[str, Any]]:
    """A batch's answers in order: each result shaped, each error as its envelope."""
    return [item_error(answer.error) if isinstance(answer, Failed) else shape(answer) for answer in answers]
