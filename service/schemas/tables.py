"""Response schemas of ``GET /v1/tables`` and ``GET /v1/tables/{table}``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.health import BuildStatus


class TableSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    rows: int
    dim: int
    kind: str
    index: dict[str, Any]
    approximate: bool
    has_tokenizer: bool
    recall_at_10: float | None = Field(
        None, description="the index's recall@10 measured at build (1.0: exact; a sharded table: its shards' lowest)"
    )
    source: dict[str, Any] = Field({}, description="what the table was imported from (format, path, sha256, ...)")
    metadata_columns: list[str] = Field([], description="the rows' metadata columns")
    built_at: str | None = Field(None, description="when the table was built, ISO 8601 UTC")
    model: dict[str, Any] | None = Field(None, description="model-token tables: the model the rows come from")
    documents: dict[str, Any] | None = Field(
        None, description="documents tables: id_field, id_type, text_field, fields, keyword, encoder"
    )
    transformer: dict[str, Any] | None = Field(
        None, description="transformer tables: the model a worker loads on its first text (graph_bytes: its size)"
    )
    index_deferred: str | None = Field(None, description="the index a background build makes (exact search until then)")
    index_fallback: dict[str, Any] | None = Field(
        None,
        description="the table's own index (index), which its build (auto's graph at import, or any index at a "
        "documents table's compaction) left below its --min-recall (recall_at_10 reached, min_recall) or a "
        "compaction could not build over the rows left (unbuildable: why), and the one taken instead (instead); a "
        "compaction tries its own again",
    )
    building: BuildStatus | None = Field(None, description="that build, while it runs or after it failed")
    shard_of: dict[str, Any] | None = Field(
        None, description="a shard served alone: its sharded table, its place there and its import (table, shard, ...)"
    )
    shards: dict[str, Any] | None = Field(None, description="a sharded table served whole: its shards' count and rows")
    writes: dict[str, Any] | None = Field(
        None, description="documents tables: the write log (version_sequence, sequence, written, deleted, log_bytes)"
    )


class TablesResponse(BaseModel):
    tables: list[TableSummary]
    unavailable: list[str] = Field([], description="requested tables that failed to load")
