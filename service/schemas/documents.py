"""Response schema of ``GET .../documents/{id}``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class DocumentResponse(BaseModel):
    id: str | int
    text: str | None
    fields: dict[str, Any]
    vector: list[float] | None = Field(None, description="with ?vector=true: the document's vector as imported")
