"""One document of a documents table, by its id: text, fields and (when asked) its vector."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from service import live
from service.deps import TableDep
from service.errors import TABLE_ERRORS, responses
from service.respond import FastJSON
from service.schemas.common import MAX_TOKEN_CHARS
from service.schemas.documents import DocumentResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["documents"])


@router.get(
    "/documents/{document:path}",  # an id may hold "/" (a passage of a sub-folder's file), raw or as %2F
    response_model=DocumentResponse,
    responses=responses(*TABLE_ERRORS),
    summary="One document by its id: text and fields, with ?vector=true its vector",
)
async def get_document(
    table: TableDep,
    document: Annotated[str, Path(min_length=1, max_length=MAX_TOKEN_CHARS, description="the document's id")],
    vector: Annotated[bool, Query(description="also return the document's vector as imported")] = False,
    normalized: Annotated[bool, Query(description="with vector: its unit vector, as searches use it")] = False,
    fields: Annotated[str | None, Query(max_length=MAX_TOKEN_CHARS, description="comma-separated fields")] = None,
) -> Response:
    payload = table.documents("look a row up by token")
    names = None if fields is None else [name.strip() for name in fields.split(",") if name.strip()]
    delta = live.delta_of(table)
    if delta is not None:
        written = delta.written(document)
        if written is not None:
            shown = written.show(payload, names, vector)
            if vector and normalized:
                shown["vector"] = written.vector
            return FastJSON(shown)
    (row,) = (delta or payload).row_of([document]).tolist()  # 404 unknown_document (deleted too)
    out: dict[str, Any] = {
        "id": payload.ids([row])[0],
        "text": payload.text([row])[0],
        "fields": payload.records([row], names)[0],
    }
    if vector:
        out["vector"] = table.row(row, normalized=normalized)
    return FastJSON(out)
