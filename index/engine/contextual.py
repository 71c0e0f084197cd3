"""Contextual token vectors of a transformer table: what the model's layers make of each token of a text.

For each text, every token's last-layer vector (``[CLS]`` and ``[SEP]`` included). For a chosen word (split by
the model's tokenizer; a word of several pieces is the mean of its pieces' vectors at each place it occurs), each
occurrence's vector, its cosine with the word's static row (the mean of its pieces' original input rows), its
nearest rows in the model's own input table, and the cosines between the occurrences: "bank" by a river and
"bank" of money are one static row and two contextual vectors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from index.engine.encode import encoder_for
from index.engine.table import Table, VectorSearch
from index.engine.transformer_encoder import TransformerEncoder
from index.errors import InvalidQuery, shown


@dataclass(frozen=True)
class Occurrence:
    text: int
    position: int  # of the word's first piece among the text's tokens
    vector: np.ndarray  # float32, the mean of its pieces' last-layer vectors


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    out: np.ndarray = a @ b.T
    return out


MAX_OCCURRENCES = 256  # of the word followed through the texts: the cosines between them are their square
CONTINUATION = "##"  # a WordPiece label that continues the word before it ("heart ##ache")


def _occurrences(
    ids: list[list[int]], vectors: list[np.ndarray], pieces: list[int], labels: list[list[str]], cut: list[str]
) -> list[Occurrence]:
    """Where the word of ``pieces`` occurs whole: its pieces, not followed by a piece that continues the word (so
    "heart" is not found in "heartache", nor in a text cut between "heart" and "##ache": ``cut`` holds the first
    piece each text lost, "" when nothing was cut)."""
    width = len(pieces)
    found = []
    for text, row in enumerate(ids):
        after = [*labels[text][1:], ""]  # the piece after each place
        if cut[text]:
            after[-2] = cut[text]  # the last piece kept, before [SEP], went on with the first piece cut
        for start in range(len(row) - width + 1):
            end = start + width
            if row[start:end] == pieces and not after[end - 1].startswith(CONTINUATION):
                found.append(Occurrence(text, start, vectors[text][start:end].mean(axis=0)))
    return found


def _cut_off(ids: list[list[int]], pieces: list[int], cut: list[str], encoder: TransformerEncoder) -> str:
    """Why a text that ends in the word's pieces holds it nowhere whole: truncation cut it from its continuation
    (the text shows the word, so the 422 says where it went); "" when no text was cut so."""
    width = len(pieces)
    for text, row in enumerate(ids):
        if cut[text].startswith(CONTINUATION) and row[-1 - width : -1] == pieces:  # the pieces before [SEP]
            return (
                f": where texts[{text}] ends, truncation to the model's {encoder.max_length} pieces cut it from its "
                f"continuation {cut[text]!r}"
            )
    return ""


def _neighbours(table: Table, vectors: np.ndarray, k: int) -> list[list[dict[str, Any]]]:
    units = table.normalize_queries(np.asarray(vectors, dtype=np.float32))
    readable = table.metadata.get("readable")
    out = []
    for hits in table.run(VectorSearch(units, k)):
        rows = [row for row, _ in hits]
        labels = table.tokens.labels(rows)
        out.append(
            [
                {"id": row, "token": label, "score": score, **({"readable": readable[row]} if readable else {})}
                for (row, score), label in zip(hits, labels, strict=True)
            ]
        )
    return out


def transformer_of(table: Table) -> TransformerEncoder:
    """The encoder of a transformer table; an InvalidQuery for any other table."""
    encoder = encoder_for(table) if "transformer" in table.manifest else None
    if not isinstance(encoder, TransformerEncoder):
        raise InvalidQuery(f"table {table.name!r} is not a transformer table (import --format transformer)")
    return encoder


def contextual(encoder: TransformerEncoder, texts: list[str], token: str | None = None, k: int = 5) -> dict[str, Any]:
    """Every text's tokens with their last-layer vectors; with ``token``, that word's view (module docstring)."""
    table = encoder.table
    tokenised = encoder.tokenise(texts)
    forward = encoder.forward(tokenised.ids, tokens=True)
    assert forward.tokens is not None  # asked for
    answer: dict[str, Any] = {"table": table.name, "texts": []}
    every_label = [table.tokens.labels(ids) for ids in tokenised.ids]
    each = zip(texts, tokenised.ids, every_label, tokenised.truncated, forward.tokens, strict=True)
    for text, ids, labels, truncated, vectors in each:
        tokens = [{"id": i, "token": t, "vector": v} for i, t, v in zip(ids, labels, vectors, strict=True)]
        answer["texts"].append({"text": text, "truncated": truncated, "tokens": tokens})
    if token is None:
        return answer
    pieces = encoder.tokenizer.encode(encoder.model_text(token), add_special_tokens=False).ids
    if not pieces:
        raise InvalidQuery(f"token {shown(token)} has no piece in the tokenizer of table {table.name!r}")
    unknown = encoder.unknown_id
    if unknown is not None and unknown in pieces and token.strip() != table.tokens[unknown]:
        # the unknown piece stands for any word the vocabulary lacks: every one of them would be this word
        raise InvalidQuery(  # a 422 as for a word in none of the texts: the explorer then lists the texts' words
            f"token {shown(token)} is not in table {table.name!r}, "
            f"and its tokenizer gives {table.tokens[unknown]!r} for it"
        )
    cut = ["" if piece is None else table.tokens[piece] for piece in tokenised.cut]
    found = _occurrences(tokenised.ids, forward.tokens, pieces, every_label, cut)
    if not found:
        split = " ".join(table.tokens.labels(pieces))
        raise InvalidQuery(
            f"{token!r} ({split}) occurs in none of the texts{_cut_off(tokenised.ids, pieces, cut, encoder)}"
        )
    if len(found) > MAX_OCCURRENCES:  # the answer's cosines grow as their square
        raise InvalidQuery(
            f"{token!r} occurs {len(found):,} times in the texts; at most {MAX_OCCURRENCES} are followed (give fewer "
            "texts, or leave token out)"
        )
    rows = (
        np.asarray(table.vectors[pieces], dtype=np.float64) * np.asarray(table.norms[pieces], dtype=np.float64)[:, None]
    )
    static = rows.mean(axis=0)
    matrix = np.vstack([o.vector for o in found])
    static_cosine = _cosines(matrix, static[None, :])[:, 0]
    neighbours = _neighbours(table, matrix, k)
    static_neighbours = _neighbours(table, static[None, :], k)[0]
    answer["token"] = {
        "token": token,
        "pieces": [{"id": i, "token": t} for i, t in zip(pieces, table.tokens.labels(pieces), strict=True)],
        "static": {"vector": static.astype(np.float32), "neighbors": static_neighbours},
        "occurrences": [
            {
                "text": o.text,
                "position": o.position,
                "vector": o.vector,
                "static_cosine": float(static_cosine[n]),
                "neighbors": neighbours[n],
            }
            for n, o in enumerate(found)
        ],
        "cosines": _cosines(matrix, matrix).round(6).tolist(),
    }
    return answer
