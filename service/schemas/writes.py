"""Request and response bodies of the write routes (``service.routers.writes``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, model_validator

from service.schemas.bounds import MAX_TEXT_CHARS
from service.schemas.common import (
    CHECK_BATCH,
    STRICT,
    DocumentId,
    ValidText,
    Vector,
    batch_of,
    check_work,
    conditions,
    given,
    one_form,
)


class WriteDocument(BaseModel):
    model_config = STRICT

    id: DocumentId = Field(description="the document's id: a new id adds it, an existing id replaces it")
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] | None = Field(
        None, description="its text (stored, searched by keyword; embedded when no vector is given)"
    )
    vector: Vector | None = Field(None, description="its vector (default: its text embedded by the table's encoder)")
    fields: Annotated[dict[str, Any], ValidText] | None = Field(
        None, description="its fields, of the table's fields and their types"
    )


class UpsertRequest(BaseModel):
    model_config = STRICT

    documents: Annotated[list[WriteDocument], batch_of("documents to add or replace, by id"), CHECK_BATCH]


class DeleteRequest(BaseModel):
    model_config = STRICT | one_form(given("ids"), given("filter"))

    ids: Annotated[list[DocumentId], batch_of("ids of the documents to delete"), CHECK_BATCH] | None = None
    filter: Annotated[dict[str, Any], ValidText] | None = Field(
        None, description="delete every document this filter lets through"
    )

    @model_validator(mode="after")
    def _one(self) -> DeleteRequest:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give exactly one of ids or filter")
        if self.filter is not None:  # bounded as a search's filters are
            check_work(conditions(self.filter), "max_filter_conditions", "conditions in the filter")
        return self


class ShardWrite(BaseModel):
    shard: int = Field(description="the shard, numbered from 0")
    sequence: int = Field(description="the shard's sequence number after this write")
    upserted: int | None = None
    deleted: int | None = None


class WriteResponse(BaseModel):
    table: str
    sequence: int = Field(description="the table's sequence number after this write (its last write)")
    upserted: int | None = Field(None, description="documents added or replaced")
    deleted: int | None = Field(None, description="documents deleted (ids that were not there are not counted)")
    shards: list[ShardWrite] | None = Field(
        None, description="a sharded table: what each shard written to did (sequence above: the highest of theirs)"
    )
