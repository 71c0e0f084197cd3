"""Analogies: a is to b as c is to ? by 3CosAdd (gensim most_similar) or 3CosMul (most_similar_cosmul)."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.errors import InvalidQuery
from index.table import Neighbor, Table
from service import queries
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.models import AnalogyQuery, AnalogyRequest, NeighborsBatchResponse, NeighborsResponse
from service.respond import FastJSON, compute, is_light, neighbors, search_one
from service.routers.neighbors import search_options

router = APIRouter(prefix="/v1/tables/{table}", tags=["analogy"])


def probe(table: Table, question: AnalogyQuery) -> queries.Probe:
    """b + c - a as gensim ``most_similar(positive=[b, c], negative=[a])``; a, b and c are left out.

    A question whose offset b - a is zero ("a is to a as c is to ?") has no answer beyond c itself: 422.
    """
    query = queries.mean_of(table, [question.b, question.c], [question.a])
    a, b, c = query.info["negative"][0], *query.info["positive"]
    if a["id"] == b["id"] or np.array_equal(table.vectors[a["id"]], table.vectors[b["id"]]):
        raise InvalidQuery(
            f"the analogy's offset b - a is zero ({question.a!r} and {question.b!r} are the same vector): "
            "give two different words for a and b"
        )
    query.info = {"a": a, "b": b, "c": c}
    return query


def solve(table: Table, body: AnalogyRequest, probes: list[queries.Probe]) -> list[list[Neighbor]]:
    """Every question at once: one index search, or the batched exact analogy search."""
    questions = [(p.info["a"]["id"], p.info["b"]["id"], p.info["c"]["id"]) for p in probes]
    return table.analogies(questions, body.k, body.method, **search_options(body))


@router.post(
    "/analogy",
    response_model=NeighborsResponse | NeighborsBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="a is to b as c is to ? (3cosadd or 3cosmul), a, b and c left out; or a batch of questions",
)
async def analogy(request: Request, table: TableDep, body: AnalogyRequest) -> Response:
    if body.queries is None:
        question = AnalogyQuery(a=body.a, b=body.b, c=body.c)  # type: ignore[arg-type]
        query = probe(table, question)  # 404 for an unknown token
        if body.method == "3cosadd" and is_light(table, body.exact, body.restrict):  # one index search
            options = search_options(body)
            hits = await search_one(request, table, "analogy", query.vector[None, :], body.k, query.exclude, options)
        else:
            hits = (await compute(request, table, "analogy", lambda: solve(table, body, [query])))[0]
        return FastJSON({"query": {**query.info, "method": body.method}, "neighbors": neighbors(table, hits)})
    questions = body.queries

    def many() -> dict[str, Any]:
        batch = queries.Batch.build(lambda question: probe(table, question), questions)
        results = batch.results(table, solve(table, body, batch.queries) if batch.queries else [])
        for result in results:
            if "query" in result:
                result["query"]["method"] = body.method
        return {"results": results}

    return FastJSON(await compute(request, table, f"analogy_batch_{body.method}", many))
