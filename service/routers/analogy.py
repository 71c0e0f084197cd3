"""Analogies: a is to b as c is to ? by 3CosAdd (gensim most_similar) or 3CosMul (most_similar_cosmul); and a
table's part of a sharded table's analogy, by its words' unit rows."""

from __future__ import annotations

import functools
from typing import cast

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.door import analogy_part, expectation_part, whole_rows
from index.errors import InvalidQuery
from service import execute
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.respond import FastJSON, neighbors, results, words
from service.schemas.analogy import (
    AnalogyBatchResponse,
    AnalogyQuery,
    AnalogyRequest,
    AnalogyResponse,
    AnalogyRowsRequest,
    AnalogyRowsResponse,
)

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
        result = await execute.one(request, table, "analogy", body.query(question))
        return FastJSON(words(table, result))
    body.check_scored_rows(table.limit(body.search_options()))
    queries = [body.query(question) for question in body.queries]
    answers = await execute.batch(request, table, f"analogy_batch_{body.method}", queries)
    return FastJSON({"results": results(answers, functools.partial(words, table))})


@router.post(
    "/analogy/rows",
    response_model=AnalogyRowsResponse,
    responses=responses(*BODY_ERRORS),
    summary="A shard's part of a sharded word table's analogy: its best rows for the words' unit rows a, b and c",
    description="What the front of a sharded word table asks each shard (3CosMul scores a row from that row and the "
    "three words' rows, which may lie on other shards): the table's `k` best rows, scored as its analogies score "
    "them, each with its `row` in the whole table; the words' own rows are not left out. With `expect` (the "
    "expected answer's unit row), `expect` adds how many of the table's rows score higher than that answer, its "
    "score and the table's best score, the whole table's rows `leave_out` left out: the front sums the counts "
    "into the answer's rank.",
)
async def analogy_rows(request: Request, table: TableDep, body: AnalogyRowsRequest) -> Response:
    if table.kind != "words":
        raise InvalidQuery(f"table {table.name!r} holds {table.kind}: analogies are for word tables")
    if {len(body.a), len(body.b), len(body.c)} != {table.dim}:
        got = ", ".join(str(len(v)) for v in (body.a, body.b, body.c))
        raise InvalidQuery(f"a, b and c need {table.dim} values each (table {table.name!r}), got {got}")
    given = np.array([body.a, body.b, body.c], dtype=np.float64)
    if not np.isfinite(given.astype(np.float32)).all() or not np.allclose(np.linalg.norm(given, axis=1), 1, atol=1e-3):
        raise InvalidQuery("a, b and c must be unit rows (of length 1, in float32)")
    hits = await execute.compute(
        request, table, "analogy_rows", lambda: analogy_part(table, given.astype(np.float32), body.k, body.method)
    )
    shown = neighbors(table, hits)
    rows = whole_rows(table)
    for hit in shown:
        hit["row"] = int(rows[hit["id"]])
    if body.expect is None:
        return FastJSON({"neighbors": shown})
    if len(body.expect) != table.dim:
        raise InvalidQuery(f"a, b, c and expect need {table.dim} values each (table {table.name!r})")
    expected = np.asarray(body.expect, dtype=np.float32)
    higher, score, top = await execute.compute(
        request,
        table,
        "analogy_rows",
        lambda: expectation_part(table, given.astype(np.float32), expected, body.method, body.leave_out),
    )
    return FastJSON({"neighbors": shown, "expect": {"higher": higher, "score": score, "top": top}})
