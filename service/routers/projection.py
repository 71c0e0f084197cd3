"""2-D projection of a handful of tokens: on their own first two principal components (``pca``), on axes given
by word pairs (``axes``: x along a - b, y along c - d or the first principal component of the rest), or by
openTSNE (``tsne``) or umap-learn (``umap``), seeded: ``index.engine.layout.project``."""

from __future__ import annotations

import threading

from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.door import Projection, project
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.execute import compute
from service.respond import FastJSON
from service.schemas.projection import ProjectRequest, ProjectResponse

router = APIRouter(prefix="/v1/tables/{table}", tags=["projection"])


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
    asked = Projection(**body.model_dump())  # the request's fields are the projection's
    answer = await compute(request, table, "project", lambda: project(table, asked, gone.is_set), long=long, gone=gone)
    return FastJSON(answer)
