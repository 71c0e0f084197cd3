"""Analogies: a is to b as c is to ? by 3CosAdd (gensim most_similar) or 3CosMul (most_similar_cosmul)."""

from __future__ import annotations

import functools
from typing import cast

from fastapi import APIRouter, Request
from starlette.responses import Response

from service import convert, execute
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.respond import FastJSON, results, words
from service.schemas.analogy import AnalogyBatchResponse, AnalogyQuery, AnalogyRequest, AnalogyResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["analogy"])


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
        result = await execute.one(request, table, "analogy", convert.analogy(question, body))
        return FastJSON(words(table, result))
    queries = [convert.analogy(question, body) for question in body.queries]
    answers = await execute.batch(request, table, f"analogy_batch_{body.method}", queries)
    return FastJSON({"results": results(answers, functools.partial(words, table))})
