"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from service import indexing
from service.deps import RegistryDep
from service.errors import error_response, responses
from service.respond import FastJSON
from service.schemas.health import Health, Ready

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    response_model=Health,
    responses=responses(busy=False),  # a saturated worker still answers it alive (service.http.protocol)
    summary="Liveness: the process answers",
)
async def healthz() -> Response:
    return FastJSON({"status": "ok"})


@router.get(
    "/readyz",
    response_model=Ready,
    responses=responses("not_ready"),
    summary="Readiness: 200 once every requested table is loaded and verified, else 503 naming the missing ones",
)
async def readyz(request: Request, registry: RegistryDep) -> Response:
    fronted = sorted(request.app.state.front.tables)  # sharded tables answered by their shards (service.scatter)
    loaded, missing = sorted([*registry.tables, *fronted]), sorted(registry.failed)
    # Names only: why a table was refused is in the server log (reasons can name files).
    stale: dict[str, Any] = {"stale": sorted(registry.stale)} if registry.stale else {}
    building = indexing.builds_of(registry.tables)
    if building:
        stale["building"] = building
    if registry.ready or (fronted and not registry.failed):
        return FastJSON({"status": "ready", "loaded": loaded, "missing": missing, **stale})
    message = f"tables not loaded: {', '.join(missing)}" if missing else "no tables found in the data directory"
    if registry.data_dir_missing:
        message = "the data directory is missing" + (f"; {message}" if missing else "")
    return error_response("not_ready", message, loaded=loaded, missing=missing, **stale)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.metrics.exposition()
    return Response(body, media_type=content_type)
