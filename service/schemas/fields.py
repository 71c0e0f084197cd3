"""Response schemas of ``GET .../fields``: what a documents table's fields hold."""

from __future__ import annotations

from pydantic import BaseModel, Field

from index.engine.door import TOP_VALUES


class FieldValue(BaseModel):
    value: str | bool
    count: int = Field(description="documents with this value (for a list field: with this tag)")


class FieldStats(BaseModel):
    type: str = Field(description="string, integer, float, boolean, timestamp or string_list")
    non_null: int = Field(description="documents with a value")
    distinct: int | None = Field(None, description="strings, tags, booleans: how many distinct values")
    values: list[FieldValue] | None = Field(
        None, description=f"strings, tags, booleans: the {TOP_VALUES} most common, most common first"
    )
    min: int | float | str | None = Field(None, description="numbers and timestamps (ISO 8601): the smallest")
    max: int | float | str | None = Field(None, description="numbers and timestamps (ISO 8601): the largest")


class FieldsResponse(BaseModel):
    table: str
    rows: int
    fields: dict[str, FieldStats]
