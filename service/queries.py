"""Turn request items into engine queries, one item at a time, so one bad item never fails a batch.

A :class:`Probe` is a unit query vector, the rows to leave out of its answer (its inputs, as gensim does),
and the ``query`` object the response echoes (which row or rows were used).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from index.engine.encode import WORD, Encoded, encoder_for, preview
from index.engine.knn import Neighbor
from index.engine.table import Table
from index.errors import EmbeddingError, InvalidQuery
from service.errors import item_error
from service.respond import neighbors
from service.schemas.common import FLOAT32_MAX
from service.schemas.search import DocumentQuery

T = TypeVar("T")


@dataclass
class Probe:
    vector: np.ndarray  # (dim,) float32, unit length
    exclude: set[int]
    info: dict[str, Any]


def word(table: Table, text: str, compose: str | None = None) -> Probe:
    """One word: its row if the table has it, else (with ``compose="mean"``) the mean of its tokenizer pieces."""
    found = table.find(text)
    if found is None and compose == "mean":
        vector, pieces = table.compose(text)
        info = {
            "text": text,
            "match": "composed",
            "compose": "mean",
            "tokens": [{"id": i, "token": t} for i, t in pieces],
        }
        return Probe(vector[0], {i for i, _ in pieces}, info)
    if found is None:
        found = table.resolve(text)  # raises UnknownToken with suggestions
    return Probe(table.mean_query([found.id])[0], {found.id}, found.as_dict())


def row_id(table: Table, row: int) -> Probe:
    found = table.resolve_id(row)
    return Probe(table.mean_query([row])[0], {row}, found.as_dict())


def mean_of(table: Table, positive: Sequence[str], negative: Sequence[str]) -> Probe:
    """gensim ``most_similar``: the normalised mean of the unit rows, positive +1 and negative -1."""
    pos = [table.resolve(t) for t in positive]
    neg = [table.resolve(t) for t in negative]
    vector = table.mean_query([r.id for r in pos], [r.id for r in neg])[0]
    info = {"positive": [r.as_dict() for r in pos], "negative": [r.as_dict() for r in neg]}
    return Probe(vector, {r.id for r in pos + neg}, info)


def raw_vector(table: Table, values: Sequence[float]) -> Probe:
    """A client's vector: right length, finite, within float32, not zero; normalised here."""
    array = np.asarray(values, dtype=np.float64)
    if array.shape != (table.dim,):
        raise InvalidQuery(f"the vector has {array.size} values; table {table.name!r} has {table.dim} dimensions")
    if not np.isfinite(array).all():
        raise InvalidQuery("the vector must contain only finite numbers (no NaN or Infinity)")
    if np.abs(array).max() > FLOAT32_MAX:
        raise InvalidQuery(f"vector values must fit in float32 (|x| <= {FLOAT32_MAX:.4g})")
    return Probe(table.normalize_queries(array[None, :])[0], set(), {})


def document(table: Table, query: DocumentQuery) -> Probe:
    """A documents table's query: a vector, more like one document (itself left out), or the normalised mean of
    positive and negative documents' unit vectors (gensim ``most_similar``; they are left out)."""
    if query.vector is not None:
        return raw_vector(table, query.vector)
    payload = table.payload
    if payload is None:
        raise InvalidQuery(f"table {table.name!r} is not a documents table: search it by vector")
    if query.id is not None:
        (row,) = payload.row_of([query.id]).tolist()
        return Probe(table.mean_query([row])[0], {row}, {"id": query.id})
    pos, neg = payload.row_of(query.positive).tolist(), payload.row_of(query.negative).tolist()
    info = {"positive": query.positive, "negative": query.negative}
    return Probe(table.mean_query(pos, neg)[0], set(pos) | set(neg), info)


class NoKnownWord(InvalidQuery):
    """A text none of whose words the encoder knows: its vector cannot be made (a keyword search can still
    find the words as written)."""


SHOWN_WORDS = 10  # unknown words a message names


def words_of(text: str) -> list[str]:
    """The text's distinct words, lower-cased, as a word table's encoder looks them up (else its symbols)."""
    return list(dict.fromkeys(WORD.findall(text.lower()) or text.split()))


def no_known_word(content: str, whose: str, **details: Any) -> NoKnownWord:
    """The error for a text (``content``) with no word ``whose`` vocabulary holds, naming its words."""
    words = words_of(content)
    if not words:
        return NoKnownWord(f"{preview(content)} has no words to embed", words=[], **details)
    more = f" (and {len(words) - SHOWN_WORDS} more)" if len(words) > SHOWN_WORDS else ""
    shown = ", ".join(words[:SHOWN_WORDS]) + more
    message = f"{preview(content)}: no word of it is known to {whose}: unknown {shown}"
    return NoKnownWord(message, words=words, **details)


def check_known(encoded: Encoded, texts: Sequence[str], whose: str, name: str) -> None:
    """A :class:`NoKnownWord` for the first of ``texts`` (called ``name[i]``) that ``encoded`` made no vector of."""
    for i, tokens in enumerate(encoded.tokens):
        if tokens == 0:
            error = no_known_word(texts[i], whose, text=i)
            raise NoKnownWord(f"{name}[{i}] {error.message}", **error.details)


KEYWORD_HINT = "; mode keyword (and hybrid, which falls back to it) finds the words by the keyword index"


def document_text(encoder: Table | None, table: Table, text: str) -> Probe:
    """A documents table's text query, embedded by ``encoder``: the table that embedded its documents at import
    (``Registry.encoder_of``), with the same pooling. A text with no word the encoder knows is a
    :class:`NoKnownWord`."""
    record = table.encoder_record
    if record is None or encoder is None:
        raise InvalidQuery(
            f"table {table.name!r} records no encoder (its vectors came with the documents): send the query's "
            "vector from your own model, or search by keyword"
        )
    encoded = encoder_for(encoder).encode([text], record.get("pooling"), strict=False)
    if encoded.tokens[0] == 0:
        whose = f"the vocabulary the documents of {table.name!r} were embedded with ({encoder.name})"
        error = no_known_word(text, whose)
        raise NoKnownWord(f"text {error.message}{KEYWORD_HINT}", **error.details)
    info = {"text": text, "encoder": encoder.name, "tokens": encoded.tokens[0], "unknown": encoded.unknown[0]}
    return Probe(encoded.vectors[0], set(), info)


@dataclass
class Batch:
    """The items of a request, built one by one: good queries, and an error envelope for each bad item."""

    size: int
    queries: list[Probe]
    positions: list[int]  # request position of each good query
    errors: dict[int, dict[str, Any]]

    @classmethod
    def build(cls, make: Callable[[T], Probe], items: Sequence[T]) -> Batch:
        batch = cls(len(items), [], [], {})
        for position, item in enumerate(items):
            try:
                batch.queries.append(make(item))
                batch.positions.append(position)
            except EmbeddingError as exc:
                batch.errors[position] = item_error(exc)
        return batch

    def matrix(self) -> np.ndarray:
        """The good queries as one (m, dim) float32 matrix, for one search."""
        return np.vstack([q.vector for q in self.queries]).astype(np.float32)

    def excludes(self) -> list[set[int]]:
        return [q.exclude for q in self.queries]

    def results(self, table: Table, hits: Sequence[list[Neighbor]], echo: bool = True) -> list[dict[str, Any]]:
        """In request order: ``{"query", "neighbors"}`` per good item, the error envelope per bad one."""
        out: list[dict[str, Any]] = [{} for _ in range(self.size)]
        for position, error in self.errors.items():
            out[position] = error
        for position, query, found in zip(self.positions, self.queries, hits, strict=True):
            shaped = {"neighbors": neighbors(table, found)}
            out[position] = {"query": query.info, **shaped} if echo else shaped
        return out
