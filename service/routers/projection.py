"""2-D projection of a handful of tokens on their own first two principal components."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from index.errors import UnknownToken
from index.table import Table
from service.deps import TableDep
from service.errors import BODY_ERRORS, responses
from service.models import ProjectRequest, ProjectResponse
from service.respond import FastJSON, compute

router = APIRouter(prefix="/v1/tables/{table}", tags=["projection"])


def project(table: Table, body: ProjectRequest) -> dict[str, Any]:
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
    points, ratio = table.project(ids)  # 422 below two distinct rows
    return {
        "method": body.method,
        "points": [{"token": rows[i], "id": i, "x": x, "y": y} for i, (x, y) in zip(ids, points.tolist(), strict=True)],
        "explained_variance_ratio": ratio.tolist(),
        "unknown": unknown,
    }


@router.post(
    "/project",
    response_model=ProjectResponse,
    responses=responses(*BODY_ERRORS),
    summary="The tokens' rows on their own first two principal components (PCA)",
)
async def project_tokens(request: Request, table: TableDep, body: ProjectRequest) -> Response:
    return FastJSON(await compute(request, table, "project", lambda: project(table, body)))
