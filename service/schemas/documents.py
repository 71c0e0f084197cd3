"""Request and response schemas of ``GET .../documents/{id}`` and ``POST .../documents/get`` (many ids at once)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from service.schemas.common import CHECK_BATCH, STRICT, DocumentId, Token, batch_of


class DocumentResponse(BaseModel):
    id: str | int
    text: str | None
    fields: dict[str, Any]
    vector: list[float] | None = Field(None, description="with ?vector=true: the document's vector as imported")


class DocumentsRequest(BaseModel):
    model_config = STRICT

    ids: Annotated[
        list[DocumentId],
        batch_of("the ids of the documents to read, 1..max_batch; an id asked twice is answered twice"),
        CHECK_BATCH,
    ]
    vector: bool = Field(False, description="also return each document's vector as imported")
    normalized: bool = Field(False, description="with vector: its unit vector, as searches use it")
    fields: Annotated[list[Token], Field(max_length=1024)] | None = Field(
        None, description="only these fields of each document (default: all of them)"
    )


class DocumentsResponse(BaseModel):
    documents: list[DocumentResponse] = Field(
        description="the documents found, in the order asked, each as GET .../documents/{id} answers it"
    )
    missing: list[str | int] = Field(description="the ids asked that no document has (deleted ones too), as asked")
