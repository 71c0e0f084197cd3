"""2-D projection of a handful of tokens: on their own first two principal components (``pca``), on axes given
by word pairs (``axes``: x along a - b, y along c - d or the first principal component of the rest), or by
openTSNE (``tsne``) or umap-learn (``umap``), seeded. The computations are in ``index.engine.layout``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.layout import axes_projection, pca_projection, require, tsne_projection, umap_projection
from index.engine.table import Table
from index.errors import InvalidQuery, UnknownToken
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.execute import compute
from service.respond import FastJSON
from service.schemas.projection import ProjectRequest, ProjectResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["projection"])


def project(table: Table, body: ProjectRequest, stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    require(body.method)  # a method whose package is missing: 422 naming it, before any work
    rows: dict[int, str] = {}  # id -> the token that asked for it; repeats of a row are projected once
    unknown = []
    for token in body.tokens:
        try:
            found = table.resolve(token)
        except UnknownToken:
            if not body.skip_unknown:
                raise
            unknown.append(token)
            continue
        rows.setdefault(found.id, found.token)
    ids = list(rows)
    vectors = np.asarray(table.vectors[ids])
    extra: dict[str, Any] = {}
    if body.method == "axes" and body.x_axis is not None:
        if len(ids) < 2:
            raise InvalidQuery("projection needs at least two distinct tokens")
        x_axis, x_pair = axis(table, body.x_axis)
        y_axis, y_pair = axis(table, body.y_axis) if body.y_axis is not None else (None, None)
        points, ratio = axes_projection(vectors, x_axis, y_axis)
        extra["axes"] = {"x": x_pair, "y": y_pair if y_pair is not None else "pca"}
    elif body.method in ("tsne", "umap"):
        if body.method == "tsne":
            layout = tsne_projection(vectors, body.perplexity, body.seed, stop=stop)
        else:
            layout = umap_projection(vectors, body.n_neighbors, body.min_dist, body.seed)
        points, ratio = layout.points, None
        extra["params"] = layout.info["params"]
    else:
        points, ratio = pca_projection(vectors)  # 422 below two distinct rows
    out: dict[str, Any] = {
        "method": body.method,
        "points": [{"token": rows[i], "id": i, "x": x, "y": y} for i, (x, y) in zip(ids, points.tolist(), strict=True)],
    }
    if ratio is not None:
        out["explained_variance_ratio"] = ratio.tolist()
    return {**out, "unknown": unknown, **extra}


def axis(table: Table, pair: list[str]) -> tuple[np.ndarray, list[str]]:
    """The direction a - b of two tokens' unit rows, and the tokens they resolved to (unknown: 404)."""
    a, b = (table.resolve(token) for token in pair)
    if a.id == b.id:
        raise InvalidQuery(f"an axis needs at least two distinct tokens: {pair[0]!r} and {pair[1]!r} are one row")
    direction = np.asarray(table.vectors[a.id], dtype=np.float64) - np.asarray(table.vectors[b.id], dtype=np.float64)
    return direction, [a.token, b.token]


@router.post(
    "/project",
    response_model=ProjectResponse,
    responses=responses(*BODY_ERRORS),
    summary="The tokens' rows on their own first two principal components (pca), on word-pair axes (axes), or laid "
    "out by t-SNE (tsne) or UMAP (umap)",
)
async def project_tokens(request: Request, table: TableDep, body: ProjectRequest) -> Response:
    long = body.method in ("tsne", "umap")  # a layout of seconds: in the long computations' slots
    gone = threading.Event()  # set when the client goes; t-SNE then stops within a few iterations
    answer = await compute(request, table, "project", lambda: project(table, body, gone.is_set), long=long, gone=gone)
    return FastJSON(answer)
