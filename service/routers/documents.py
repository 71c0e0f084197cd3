"""Documents of a documents table by id: one (``GET .../documents/{id}``) or many at once (``POST
.../documents/get``), and those a filter passes page by page (``POST .../documents/scroll``), each its text, fields
and (when asked) its vector, as the table's write log leaves it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from index.engine import door
from service import execute, live
from service.deps import TableDep
from service.errors import BODY_ERRORS, TABLE_ERRORS, responses
from service.respond import FastJSON, documents_bound
from service.schemas.bounds import MAX_TOKEN_CHARS
from service.schemas.documents import (
    DocumentResponse,
    DocumentsRequest,
    DocumentsResponse,
    ScrollRequest,
    ScrollResponse,
)

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
    fields: Annotated[str | None, Query(description="comma-separated fields")] = None,  # a URL's: max_header_bytes
) -> Response:
    names = None if fields is None else [name.strip() for name in fields.split(",") if name.strip()]
    bound = documents_bound(table, names, vector)
    return FastJSON(door.read_document(table, live.delta_of(table), document, names, vector, normalized, bound))


@router.post(
    "/documents/get",  # POST only: GET .../documents/get is the document whose id is "get"
    response_model=DocumentsResponse,
    responses=responses(*BODY_ERRORS),
    summary="Many documents by id at once: those found in the order asked, and the ids not found",
)
async def get_documents(request: Request, table: TableDep, body: DocumentsRequest) -> Response:
    bound = documents_bound(table, body.fields, body.vector)  # what the answer carries, bounded as a search's
    found, missing = await execute.compute(  # up to max_batch documents: in a worker thread, not on the loop
        request,
        table,
        "documents_get",
        lambda: door.read_documents(
            table, live.delta_of(table), body.ids, body.fields, body.vector, body.normalized, bound
        ),
    )
    return FastJSON({"documents": found, "missing": missing})


@router.post(
    "/documents/scroll",  # POST only, as documents/get
    response_model=ScrollResponse,
    responses=responses(*BODY_ERRORS),
    summary="The documents a filter passes, a page at a time in the ids' order: next is the page's last id",
)
async def scroll_documents(request: Request, table: TableDep, body: ScrollRequest) -> Response:
    bound = documents_bound(table, body.fields, body.vector)  # a page is cut short before it
    found, after = await execute.compute(  # a filter over every row: in a worker thread, not on the loop
        request,
        table,
        "documents_scroll",
        lambda: door.scroll_documents(
            table,
            live.delta_of(table),
            body.filter,
            body.page,
            body.after,
            body.fields,
            body.vector,
            body.normalized,
            bound,
        ),
    )
    return FastJSON({"documents": found, "next": after})
