"""The front of a sharded word table: ``POST .../search`` by vector scattered to every shard, the lists merged.

Each shard is asked the query's ``offset + k`` best (from offset 0, no floor), each hit with its row in the whole
table (``include``: the import writes each shard's rows beside it, ``whole_rows.npy``); the lists merge by cosine,
equal cosines by row, as the whole table orders them (``index.engine.door.merge``); then the page and
``min_score`` are taken, as ``Table.run`` takes them. A hit's ``id`` is its row in the whole table, as the
unsharded table names it.

The routes by token (``service.scatter_tokens``) build their query here: the tokens' unit rows averaged as the
engine averages them (:func:`query_vector`), searched as a vector, the query's own rows left out of the merge
(:func:`nearest`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from index.engine.door import merge, spellings, unit_mean
from service.schemas.search import SearchRequest

WORDS = "words"
ASKED = ("row", "vector")  # what a shard's hits carry for the front: the order, and a client's unit vectors


def word_body(body: SearchRequest, given: dict[str, Any]) -> dict[str, Any]:
    """What every shard is asked: the vector, ``offset + k`` deep from offset 0, its hits with their rows."""
    out: dict[str, Any] = {"vector": given["vector"], "k": body.offset + body.k}
    if "exact" in given:
        out["exact"] = given["exact"]
    wanted = {"row", *(body.include or ())}
    out["include"] = [name for name in ASKED if name in wanted]
    return out


def merged_neighbors(body: SearchRequest, parts: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The page of neighbours from the shards' answers (``None``: a shard that did not answer)."""
    hits = [hit for part in parts if part is not None for hit in part["results"][0]["neighbors"]]
    rows = np.array([hit["row"] for hit in hits], dtype=np.int64)
    scores = np.array([hit["score"] for hit in hits], dtype=np.float64)
    by_row = {hit["row"]: hit for hit in hits}
    best, _ = merge([(rows, scores)], body.offset + body.k)
    floor = -np.inf if body.min_score is None else body.min_score
    kept = tuple(body.include or ())
    shown = []
    for row in best.tolist()[body.offset :]:
        hit = by_row[row]
        if hit["score"] >= floor:
            shown.append({**{k: v for k, v in hit.items() if k not in ASKED or k in kept}, "id": row})
    return shown


def resolved(token: str, found: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The whole table's match of ``token`` among the shards' own (``GET .../tokens/{token}?row=true``; None: no
    match on that shard), as the unsharded table's lookup picks: an exact one, in the order it tries them (as sent,
    composed, decomposed: each spelling on the shard its hash names), else the case-folded one of the lowest row
    in the whole table."""
    matches = [f for f in found if f is not None]
    order = [token, *spellings(unicodedata.normalize("NFC", token))]
    tried = {label: rank for rank, label in reversed(list(enumerate(order)))}
    exact = [f for f in matches if f["query"]["match"] == "exact"]
    if exact:
        return min(exact, key=lambda f: tried.get(f["query"]["token"], len(order)))
    return min(matches, key=lambda f: int(f["row"]), default=None)


def query_of(found: dict[str, Any]) -> dict[str, Any]:
    """The query as the whole table echoes it: its id the row in the whole table."""
    return {**found["query"], "id": found["row"]}


def query_vector(found: Sequence[dict[str, Any]], positive: int) -> np.ndarray:
    """The unit query of the whole table's matches ``found`` (their unit rows; the first ``positive`` weighted +1,
    the others -1), as the engine builds it (``Table.mean_query``: gensim's normalised mean)."""
    rows = np.vstack([np.asarray(f["vector"], dtype=np.float32) for f in found])
    query: np.ndarray = unit_mean(rows, positive)[0]
    return query


def vector_body(vector: np.ndarray, depth: int, exact: bool) -> dict[str, Any]:
    """What every shard is asked for the neighbours of a unit query (each float32 exactly), ``depth`` deep, its
    hits with their rows."""
    out: dict[str, Any] = {"vector": vector.astype(np.float64).tolist(), "k": depth, "include": ["row"]}
    if exact:
        out["exact"] = True
    return out


def nearest(own: Collection[int], k: int, parts: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The ``k`` nearest rows, the query's own rows ``own`` left out: the shards' lists merged by cosine, then
    row."""
    hits = [h for part in parts if part is not None for h in part["results"][0]["neighbors"] if h["row"] not in own]
    rows = np.array([hit["row"] for hit in hits], dtype=np.int64)
    scores = np.array([hit["score"] for hit in hits], dtype=np.float64)
    by_row = {hit["row"]: hit for hit in hits}
    best, _ = merge([(rows, scores)], k)
    return [{**{key: v for key, v in by_row[row].items() if key not in ASKED}, "id": row} for row in best.tolist()]
