"""Request and response schemas of ``GET .../documents/{id}``, ``POST .../documents/get`` (many ids at once) and
``POST .../documents/scroll`` (the documents a filter passes, page by page)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator

from index.errors import OverLimit
from service.schemas.common import (
    CHECK_BATCH,
    LIMITS,
    STRICT,
    DocumentId,
    Int64,
    Token,
    ValidText,
    Whole,
    batch_of,
    check_work,
    conditions,
)


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


PAGE = 100  # a scroll's documents in a page, unless it says


def _check_limit(limit: int) -> int:
    most = LIMITS.get().max_batch
    if limit > most:
        raise OverLimit(f"limit must be at most {most} (the server's max_batch)", "max_batch")
    return limit


def _limit_schema(schema: dict[str, Any]) -> None:
    schema["maximum"] = LIMITS.get().max_batch


class ScrollRequest(BaseModel):
    model_config = STRICT

    filter: Annotated[dict[str, Any], Field(min_length=1), ValidText] | None = Field(
        None, description="only the documents this filter lets through, as a search's filter (default: every one)"
    )
    limit: (
        Annotated[
            int,
            Field(ge=1, json_schema_extra=_limit_schema, description="documents in a page, 1..max_batch"),
            Whole,
            AfterValidator(_check_limit),
        ]
        | None
    ) = Field(None, description=f"documents in a page, 1..max_batch (default {PAGE}, or max_batch when lower)")
    after: Annotated[str, Field(min_length=1)] | Int64 | None = Field(  # longer than any id: a page starts after it
        None,
        description="the page starts after this id (the last answer's next; an id the table need not hold)",
        union_mode="left_to_right",
    )
    vector: bool = Field(False, description="also return each document's vector as imported")
    normalized: bool = Field(False, description="with vector: its unit vector, as searches use it")
    fields: Annotated[list[Token], Field(max_length=1024)] | None = Field(
        None, description="only these fields of each document (default: all of them)"
    )

    @model_validator(mode="after")
    def _bounded(self) -> ScrollRequest:
        if self.filter is not None:  # bounded as a search's filters are
            check_work(conditions(self.filter), "max_filter_conditions", "conditions in the filter")
        return self

    @property
    def page(self) -> int:
        """The documents a page holds at most: ``limit``, by default :data:`PAGE` (or max_batch when lower)."""
        return min(PAGE, LIMITS.get().max_batch) if self.limit is None else self.limit


class ScrollResponse(BaseModel):
    documents: list[DocumentResponse] = Field(
        description="the page: live documents in the ids' order (integer ids by number, text ids by code point), "
        "each as GET .../documents/{id} answers it"
    )
    next: str | int | None = Field(description="the id to pass as after for the next page; null: this page is the last")
