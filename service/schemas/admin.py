"""Response schema of ``POST /v1/admin/reload``."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReloadResponse(BaseModel):
    loaded: list[str] = Field(description="new or changed tables, loaded and verified")
    unchanged: list[str]
    refused: list[str] = Field(description="changed tables whose new files were refused: the previous version serves")
    missing: list[str] = Field(description="requested tables that are not loaded")
    removed: list[str] = Field(description="tables no longer in the data directory, no longer served")
    ready: bool
    seconds: float
    other_workers_signalled: bool = Field(description="the embedding-serve supervisor passes the reload on (SIGHUP)")
