"""Response schemas of ``GET .../fields``: what a documents table's fields hold."""

from __future__ import annotations

from pydantic import BaseModel, Field

from index.engine.door import MOST_LISTED, MOST_LISTED_BYTES, TOP_VALUES


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
    exact: bool | None = Field(
        None,
        description=(
            "only at the front of a sharded table, only false: a string, tag or boolean field some shard holds more "
            f"than {MOST_LISTED:,} distinct values of (or values of more than {MOST_LISTED_BYTES >> 20} MiB in all), "
            "whose figures are lower bounds: `distinct` at least the "
            "largest shard's, each count the sum of those the shards listed among their most common (no more than the "
            "value's true count), the values those with the highest sums"
        ),
    )


class FieldsResponse(BaseModel):
    table: str
    rows: int
    fields: dict[str, FieldStats]
