"""Analogies: a is to b as c is to ? by 3CosAdd (gensim most_similar) or 3CosMul (most_similar_cosmul)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine import diagnostics
from index.engine.search import AnalogySearch
from index.engine.table import Table
from index.errors import InvalidQuery
from service import execute, queries
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.respond import FastJSON, neighbors
from service.schemas.analogy import AnalogyBatchResponse, AnalogyQuery, AnalogyRequest, AnalogyResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["analogy"])


def probe(table: Table, question: AnalogyQuery, body: AnalogyRequest) -> queries.Probe:
    """b + c - a as gensim ``most_similar(positive=[b, c], negative=[a])``; a, b and c are left out.

    A question whose offset b - a is zero ("a is to a as c is to ?") has no answer beyond c itself: 422. So is
    an expected answer that can never be given (one of a, b and c, or a row the search leaves out).
    """
    query = queries.mean_of(table, [question.b, question.c], [question.a])
    a = query.info["negative"][0]
    b, c = query.info["positive"]
    if a["id"] == b["id"] or np.array_equal(table.vectors[a["id"]], table.vectors[b["id"]]):
        raise InvalidQuery(
            f"the analogy's offset b - a is zero ({question.a!r} and {question.b!r} are the same vector): "
            "give two different words for a and b"
        )
    query.info = {"a": a, "b": b, "c": c}
    if question.expect is not None:
        expect = table.resolve(question.expect)
        diagnostics.check_expected(table, (a["id"], b["id"], c["id"]), expect.id, body.search_options())
        query.info["expect"] = expect.as_dict()
    return query


def expectations(table: Table, body: AnalogyRequest, probes: list[queries.Probe]) -> list[dict[str, Any] | None]:
    """For each question with an expected answer: its rank, score and margin (``index.engine.diagnostics``)."""
    asked = [p.info for p in probes if "expect" in p.info]
    found = diagnostics.analogy_expectations(
        table,
        [(q["a"]["id"], q["b"]["id"], q["c"]["id"]) for q in asked],
        [q["expect"]["id"] for q in asked],
        body.method,
        restrict=body.restrict,
        skip_special=body.skip_special,
        whole_words_only=body.whole_words_only,
    )
    answers = iter(found)
    out: list[dict[str, Any] | None] = []
    for p in probes:
        expect = p.info.get("expect")
        out.append(
            None if expect is None else {"token": expect["token"], "id": expect["id"], **next(answers).as_dict()}
        )
    return out


def engine_request(body: AnalogyRequest, probes: list[queries.Probe]) -> AnalogySearch:
    """Every question at once, for one engine call (one index search, or the batched exact analogy search)."""
    asked = [(p.info["a"]["id"], p.info["b"]["id"], p.info["c"]["id"]) for p in probes]
    return AnalogySearch(asked, body.k, body.method, body.search_options())


@router.post(
    "/analogy",
    response_model=AnalogyResponse | AnalogyBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="a is to b as c is to ? (3cosadd or 3cosmul), a, b and c left out; or a batch of questions",
    description="With `expect` (a question's expected answer), the answer also reports that word's `rank` among "
    "every candidate the method scores (1: it is the answer), its `score`, and the `margin` the best candidate's "
    "score has over it (0 when it is the answer); the rank is exact even on an approximate table.",
)
async def analogy(request: Request, table: TableDep, body: AnalogyRequest) -> Response:
    if body.queries is None:
        # The request's validator requires a, b and c when there is no batch.
        question = AnalogyQuery(a=cast(str, body.a), b=cast(str, body.b), c=cast(str, body.c), expect=body.expect)
        query = probe(table, question, body)  # 404 for an unknown token
        (hits,) = await execute.search(request, table, "analogy", engine_request(body, [query]))
        info = {k: v for k, v in query.info.items() if k != "expect"}
        answer: dict[str, Any] = {"query": {**info, "method": body.method}, "neighbors": neighbors(table, hits)}
        if "expect" in query.info:
            answer["expect"] = (
                await execute.compute(request, table, "analogy_expect", lambda: expectations(table, body, [query]))
            )[0]
        return FastJSON(answer)
    questions = body.queries

    def many() -> dict[str, Any]:
        batch = queries.Batch.build(lambda question: probe(table, question, body), questions)
        results = batch.results(table, table.run(engine_request(body, batch.queries)) if batch.queries else [])
        expected = expectations(table, body, batch.queries) if any("expect" in p.info for p in batch.queries) else []
        for position, found in zip(batch.positions, expected, strict=False):
            if found is not None:
                results[position]["expect"] = found
        for result in results:
            if "query" in result:
                result["query"].pop("expect", None)
                result["query"]["method"] = body.method
        return {"results": results}

    return FastJSON(await execute.compute(request, table, f"analogy_batch_{body.method}", many))
