"""Request and response schemas of the explorer's routes: the whole-table map, its colours, the export and
``GET /v1/explorer``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from service.schemas.common import STRICT, RowId, Token, given, one_form

MAX_EXPORT_ROWS = 50_000


class ExportRow(BaseModel):
    model_config = one_form(given("token"), given("id"))

    token: Token | None = None
    id: RowId | None = None
    group: Annotated[str, Field(max_length=200)] | None = Field(
        None, description="a label written as the 'group' column of metadata.tsv"
    )

    @model_validator(mode="after")
    def _one_form(self) -> ExportRow:
        if (self.token is None) == (self.id is None):
            raise ValueError("give exactly one of token or id")
        return self


class ExportRequest(BaseModel):
    """``POST .../export``: the rows of a view as one file of the Embedding Projector's pair."""

    model_config = STRICT

    rows: Annotated[list[ExportRow], Field(min_length=1, max_length=MAX_EXPORT_ROWS)]
    file: Literal["vectors", "metadata"] = Field(
        description="vectors: vectors.tsv (the original rows, tab-separated); metadata: metadata.tsv (token, "
        "group if any row has one, and the table's metadata columns)"
    )


class MapBounds(BaseModel):
    x: list[float]
    y: list[float]


class MapInfo(BaseModel):
    """A whole-table layout: what ``GET .../map`` returns as int16 pairs and how to read them back."""

    table: str
    method: str
    rows: int = Field(description="points in the layout: row ids 0..rows-1")
    bounds: MapBounds
    format: str = Field(description="'int16-le-xy': x, y per row; value = lo + (code + 32767) / 65534 * (hi - lo)")
    params: dict[str, Any]
    explained_variance_ratio: list[float] | None = None
    seconds: float = Field(description="how long the layout took to compute")
    computed_at: str | None = None
    cached: bool = Field(description="read from the on-disk cache rather than computed by this request")
    columns: list[str] = Field(description="the columns the map can be coloured by (GET .../map/colours/{column})")


class MapColours(BaseModel):
    column: str
    categories: list[str]
    codes: str = Field(description="base64 of one uint8 per row: the index of its category")


class ExplorerConfig(BaseModel):
    default_table: str | None = Field(description="the table the explorer opens on")
    default_reason: str = Field(description="why that table: 'EMBEDDING_TABLES', 'glove-6b-50d' or 'first'")
    tsne_rows: int = Field(description="rows of the t-SNE layout (EMBEDDING_MAP_TSNE_ROWS; 0: t-SNE off)")
    tsne_available: bool
    map_install: str = Field(description="how this server would get t-SNE and UMAP (the map extra), when it has not")
    max_export_rows: int
