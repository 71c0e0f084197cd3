"""Request and response schemas of ``POST .../project``: PCA, word-pair axes, t-SNE and UMAP layouts of chosen
rows."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from service.schemas.common import CHECK_BATCH, Form, Token, Whole, batch_of, check_work, one_form, unsent_default

ProjectTokens = Annotated[
    list[Token], batch_of("the tokens to project (at least two distinct)", min_items=2), CHECK_BATCH
]


AxisPair = Annotated[
    list[Token],
    Field(min_length=2, max_length=2, description="two tokens [a, b]: the axis runs along the direction a - b"),
]
TSNE_FIELDS, UMAP_FIELDS, SEEDED = ("perplexity",), ("n_neighbors", "min_dist"), ("seed",)
_NULL = {"type": "null"}


def _project_form(method: str, allowed: tuple[str, ...], required: tuple[str, ...] = ("method",)) -> dict[str, Any]:
    """The form of ``method``: the fields of the other methods absent (null)."""
    others = ("x_axis", "y_axis", *SEEDED, *TSNE_FIELDS, *UMAP_FIELDS)
    properties: dict[str, Any] = {"method": {"const": method}, **{f: _NULL for f in others if f not in allowed}}
    if "x_axis" in allowed:
        properties["x_axis"] = {"not": _NULL}
    return {"required": list(required), "properties": properties}


PROJECT_FORMS = (
    {**_project_form("pca", ()), "required": []},  # method may be left out: pca is the default
    _project_form("axes", ("x_axis", "y_axis"), ("method", "x_axis")),
    _project_form("tsne", (*SEEDED, *TSNE_FIELDS)),
    _project_form("umap", (*SEEDED, *UMAP_FIELDS)),
)
Seed = Annotated[
    int,
    Field(ge=0, le=2**32 - 1, description="tsne, umap: the random seed (the same seed, the same layout), default 42"),
    Whole,
]


class ProjectRequest(BaseModel):
    """``pca``: the tokens on their own first two principal components. ``axes``: x = v . (a - b) / |a - b|^2
    for ``x_axis`` [a, b], y the same for ``y_axis`` [c, d], or (without ``y_axis``) the first principal
    component of the tokens with the x direction removed. ``tsne`` (openTSNE) and ``umap`` (umap-learn): a
    seeded non-linear layout of the tokens (at least 4), cosine metric; ``perplexity`` is lowered to
    (n - 1) / 3 and ``n_neighbors`` to n - 1 for n tokens, and ``params`` in the answer says what was used."""

    model_config = one_form(*map(Form, PROJECT_FORMS))  # each form names its method

    tokens: ProjectTokens
    method: Literal["pca", "axes", "tsne", "umap"] = "pca"
    skip_unknown: bool = Field(False, description="leave unknown tokens out (listed in 'unknown') instead of 404")
    x_axis: AxisPair | None = Field(None, description="method axes: the pair [a, b] whose difference is the x axis")
    y_axis: AxisPair | None = Field(
        None, description="method axes: the pair [c, d] whose difference is the y axis (default: PCA of the rest)"
    )
    # Each method's own fields: their defaults are not the schema's (sent with another method, they are refused).
    seed: Seed = Field(42, json_schema_extra=unsent_default)
    perplexity: float = Field(
        30.0,
        ge=1,
        le=100,
        allow_inf_nan=False,
        json_schema_extra=unsent_default,
        description="method tsne: the perplexity asked for, default 30 (lowered to (n - 1) / 3 for n tokens)",
    )
    n_neighbors: Annotated[int, Field(ge=2, le=200), Whole] = Field(
        15,
        json_schema_extra=unsent_default,
        description="method umap: the neighbourhood size asked for, default 15 (lowered to n - 1 for n tokens)",
    )
    min_dist: float = Field(
        0.1,
        ge=0,
        le=1,
        allow_inf_nan=False,
        json_schema_extra=unsent_default,
        description="method umap: how tightly points may pack (umap-learn's), default 0.1",
    )

    @model_validator(mode="after")
    def _forms(self) -> ProjectRequest:
        given = self.model_fields_set
        if self.method == "axes" and self.x_axis is None:
            raise ValueError("method axes needs x_axis: [a, b]")
        if self.method != "axes" and (self.x_axis is not None or self.y_axis is not None):
            raise ValueError("x_axis and y_axis belong to method axes")
        if self.method not in ("tsne", "umap") and given & set(SEEDED):
            raise ValueError("seed belongs to methods tsne and umap")
        if self.method != "tsne" and given & set(TSNE_FIELDS):
            raise ValueError("perplexity belongs to method tsne")
        if self.method != "umap" and given & set(UMAP_FIELDS):
            raise ValueError("n_neighbors and min_dist belong to method umap")
        if self.method == "tsne":
            work = len(self.tokens) * math.ceil(self.perplexity)
            check_work(
                work, "max_layout_work", f"t-SNE work ({len(self.tokens):,} tokens x perplexity {self.perplexity:g})"
            )
        if self.method == "umap":
            work = len(self.tokens) * self.n_neighbors
            check_work(
                work, "max_layout_work", f"UMAP work ({len(self.tokens):,} tokens x n_neighbors {self.n_neighbors})"
            )
        return self


class Point(BaseModel):
    token: str
    id: int
    x: float
    y: float
    text: str = Field(description="the first of the tokens asked for that found this row, as sent")


class ProjectResponse(BaseModel):
    method: str
    points: list[Point]
    explained_variance_ratio: list[float] | None = Field(
        None,
        description="pca: each component's share of the variance; axes: each axis's share of it (tsne, umap: left out)",
    )
    unknown: list[str] = []
    axes: dict[str, Any] | None = Field(None, description="method axes: the token pairs of x and y (null: PCA)")
    params: dict[str, Any] | None = Field(
        None,
        description="methods tsne and umap: the parameters used (perplexity or n_neighbors as lowered for these "
        "tokens, beside the value asked for; seed, metric, initialisation, iterations) and the library's version",
    )
