"""Documents of a documents table by id: one (``GET .../documents/{id}``) or many at once (``POST
.../documents/get``), each its text, fields and (when asked) its vector, as the table's write log leaves it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from index.engine.door import Table
from service import execute, live
from service.deps import TableDep
from service.errors import BODY_ERRORS, TABLE_ERRORS, responses
from service.respond import FastJSON
from service.schemas.common import MAX_TOKEN_CHARS
from service.schemas.documents import DocumentResponse, DocumentsRequest, DocumentsResponse

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


@router.post(
    "/documents/get",  # POST only: GET .../documents/get is the document whose id is "get"
    response_model=DocumentsResponse,
    responses=responses(*BODY_ERRORS),
    summary="Many documents by id at once: those found in the order asked, and the ids not found",
)
async def get_documents(request: Request, table: TableDep, body: DocumentsRequest) -> Response:
    found, missing = await execute.compute(  # up to max_batch documents: in a worker thread, not on the loop
        request,
        table,
        "documents_get",
        lambda: read_documents(table, body.ids, body.fields, body.vector, body.normalized),
    )
    return FastJSON({"documents": found, "missing": missing})


def read_documents(
    table: Table, ids: Sequence[str | int], names: Sequence[str] | None, vector: bool, normalized: bool
) -> tuple[list[dict[str, Any]], list[str | int]]:
    """The documents of ``ids`` as ``GET .../documents/{id}`` shows each (in the order asked, an id asked twice
    shown twice), and the ids no live document has. The version's rows are read in one lookup; an unknown field
    is an error even when no document is found (``records`` of no rows checks the names)."""
    payload = table.documents("look rows up by id")
    delta = live.delta_of(table)
    shown: list[dict[str, Any] | None] = [None] * len(ids)
    out: dict[str, Any]
    if delta is not None:
        for i, document in enumerate(ids):
            written = delta.written(document)
            if written is not None:
                out = written.show(payload, names, vector)
                if vector and normalized:
                    out["vector"] = written.vector
                shown[i] = out
    places = [i for i, one in enumerate(shown) if one is None]
    asked = [ids[i] for i in places]
    rows = payload.find_rows(asked) if delta is None else delta.live_version_rows(asked)
    at = np.flatnonzero(rows >= 0)
    found = rows[at]
    vectors = table.rows_of(found, normalized) if vector else None
    for j, (one, text, record) in enumerate(
        zip(payload.ids(found), payload.text(found), payload.records(found, names), strict=True)
    ):
        out = {"id": one, "text": text, "fields": record}
        if vectors is not None:
            out["vector"] = vectors[j]
        shown[places[at[j]]] = out
    missing = [ids[places[j]] for j in np.flatnonzero(rows < 0)]
    return [one for one in shown if one is not None], missing
