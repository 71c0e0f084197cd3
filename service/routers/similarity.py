"""Cosine similarity of two tokens (gensim ``similarity``), or of many pairs at once."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine import door
from index.engine.door import EmbeddingError, Query, Table
from service.deps import TableDep, TableName, table_named
from service.errors import BODY_ERRORS, TABLE_ERRORS, item_error, responses
from service.execute import compute
from service.http.fastroute import QueryRoute, parse_query, query_params
from service.respond import FastJSON
from service.schemas.similarity import SimilaritiesResponse, SimilarityParams, SimilarityRequest, SimilarityResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["similarity"], route_class=QueryRoute)


def side(table: Table, token: str, compose: Any) -> tuple[int | np.ndarray, dict[str, Any]]:
    """A token's row and its lookup when the table holds it (a zero row too: its cosine with every token is 0, as
    gensim's), else, with ``compose``, the unit mean of its tokenizer pieces."""
    found = table.lookup.find(token)
    if found is None:  # composed, or UnknownToken with suggestions
        probed = door.probe(table, Query(token=token, compose=compose))
        return probed.vector, probed.info
    return found.id, found.as_dict()


def pair(table: Table, a: str, b: str, compose: Any) -> tuple[float, dict[str, Any]]:
    """The cosine of two tokens (``Table.similarity``) and how each was found."""
    (left, found_a), (right, found_b) = side(table, a, compose), side(table, b, compose)
    info = {"a": found_a, "b": found_b}
    if isinstance(left, int) and isinstance(right, int):
        return table.similarity(left, right), info
    one, other = (table.vectors[s] if isinstance(s, int) else s for s in (left, right))
    return float(np.dot(one.astype(np.float64), other.astype(np.float64))), info


@router.get(
    "/similarity",
    response_model=SimilarityResponse,
    responses=responses(*TABLE_ERRORS),
    summary="Cosine similarity of two tokens",
)
@query_params(SimilarityParams)
async def similarity_get(request: Request, table: TableName) -> Response:
    found = await table_named(request, table)
    params = parse_query(request, SimilarityParams)
    value, info = await compute(
        request, found, "similarity", lambda: pair(found, params.a, params.b, params.compose), on_loop=True
    )
    return FastJSON({"a": params.a, "b": params.b, "similarity": value, "query": info})


@router.post(
    "/similarity",
    response_model=SimilaritiesResponse,
    responses=responses(*BODY_ERRORS),
    summary="Cosine similarity of many pairs; null (with the reason in errors) for a pair with an unknown token",
)
async def similarity_post(request: Request, table: TableDep, body: SimilarityRequest) -> Response:
    def run() -> dict[str, Any]:
        values: list[float | None] = [None] * len(body.pairs)
        errors: list[dict[str, Any] | None] = [None] * len(body.pairs)
        rows: list[tuple[int, int, int]] = []  # (position, id a, id b) of plain row pairs, scored together
        for position, (a, b) in enumerate(body.pairs):
            try:
                if body.compose is None:
                    rows.append((position, table.resolve(a).id, table.resolve(b).id))
                else:
                    values[position] = pair(table, a, b, body.compose)[0]
            except EmbeddingError as exc:
                errors[position] = item_error(exc)["error"]
        if rows:
            positions, left, right = (list(column) for column in zip(*rows, strict=True))
            for position, value in zip(positions, table.similarities(left, right).tolist(), strict=True):
                values[position] = value
        return {"similarities": values, "errors": errors}

    return FastJSON(await compute(request, table, "similarity_batch", run))
