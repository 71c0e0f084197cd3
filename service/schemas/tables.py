"""Response schemas of ``GET /v1/tables`` and ``GET /v1/tables/{table}``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class TableSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    rows: int
    dim: int
    kind: str
    index: dict[str, Any]
    approximate: bool
    has_tokenizer: bool


class TablesResponse(BaseModel):
    tables: list[TableSummary]
    unavailable: list[str] = Field([], description="requested tables that failed to load")
