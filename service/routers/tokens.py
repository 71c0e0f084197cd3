"""Token lookup by text or row id, and the table's own tokenizer; a shard's parts of a sharded word table's lookups
(a row by its row in the whole table, suggestions)."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from index.engine.door import Resolved, Table, local_rows, suggestion_part, whole_rows
from index.errors import UnknownToken
from service import execute
from service.deps import TableDep
from service.errors import BODY_ERRORS, TABLE_ERRORS, responses
from service.respond import FastJSON
from service.schemas.bounds import MAX_TOKEN_CHARS
from service.schemas.tokens import TokenizeRequest, TokenizeResponse, TokenResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["tokens"])

Normalized = Annotated[bool, Query(description="return the unit-length row instead of the original vector")]
WholeRow = Annotated[bool, Query(description="add the row's row in the whole table (a shard's: in the sharded table)")]


def row_json(table: Table, found: Resolved, normalized: bool, whole_row: bool = False) -> dict[str, Any]:
    out = {
        "token": found.token,
        "id": found.id,
        # float32, serialised as shortest float32 text; a row of a Fortran-ordered table is a strided view
        "vector": np.ascontiguousarray(table.row(found.id, normalized=normalized)),
        "normalized": normalized,
        "norm": float(table.norms[found.id]),
        "query": found.as_dict(),
    }
    if whole_row:
        out["row"] = int(whole_rows(table)[found.id])
    if table.metadata:
        out["metadata"] = table.row_metadata(found.id)
    if "readable" in table.metadata:  # model tables
        out["readable"] = table.metadata["readable"][found.id]
    return out


@router.get(
    "/tokens/{token:path}",
    response_model=TokenResponse,
    responses=responses(*TABLE_ERRORS),
    summary="A token's row: exact match first, then case-folded (lowest id wins)",
)
async def get_token(
    table: TableDep,
    token: Annotated[str, Path(min_length=1, max_length=MAX_TOKEN_CHARS)],
    normalized: Normalized = False,
    row: WholeRow = False,
) -> Response:
    return FastJSON(row_json(table, table.resolve(token), normalized, row))


@router.get(
    "/ids/{id}", response_model=TokenResponse, responses=responses(*TABLE_ERRORS), summary="The row with this id"
)
async def get_id(table: TableDep, id: Annotated[int, Path(ge=0)], normalized: Normalized = False) -> Response:
    return FastJSON(row_json(table, table.resolve_id(id), normalized))


@router.get("/rows/{row}", include_in_schema=False)
async def get_whole_row(table: TableDep, row: Annotated[int, Path(ge=0)], normalized: Normalized = True) -> Response:
    """The table's row that is row ``row`` of the whole table (a shard's: of the sharded one), as its unit row
    (its vector as imported with ``normalized=false``) with that row (``GET .../tokens/{token}?normalized=true&
    row=true``): what the front of a sharded table asks every shard for a query by row id, or for ``GET
    .../ids/{id}``; 404 for a row the table does not hold."""
    held = local_rows(table, [row])
    if not len(held):
        raise UnknownToken(f"row {row} of the whole table is not in table {table.name!r}", suggestions=[])
    local = int(held[0])
    return FastJSON(row_json(table, Resolved(str(row), local, table.tokens[local], "id"), normalized, True))


@router.get("/suggestions/{text:path}", include_in_schema=False)
async def get_suggestions(
    request: Request, table: TableDep, text: Annotated[str, Path(min_length=1, max_length=MAX_TOKEN_CHARS)]
) -> Response:
    """The table's part of the whole table's suggestions for ``text`` (``index.engine.shards.suggestion_part``):
    what the front of a sharded word table merges for a token no shard holds."""
    return FastJSON(await execute.compute(request, table, "suggestions", lambda: suggestion_part(table, text)))


@router.post(
    "/tokenize",
    response_model=TokenizeResponse,
    responses=responses(*BODY_ERRORS),
    summary="Split text with the table's own tokenizer (model-token tables only; 422 otherwise)",
)
async def tokenize(table: TableDep, body: TokenizeRequest) -> Response:
    pieces = table.tokenize(body.text)
    return FastJSON({"text": body.text, "tokens": [{"id": i, "token": t} for i, t in pieces]})
