"""Admin endpoints (need ``EMBEDDING_API_KEY`` in the ``X-API-Key`` header): reload the tables."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from service.deps import AdminDep
from service.errors import ApiError, responses
from service.reload import signal_supervisor
from service.respond import FastJSON
from service.schemas.admin import ReloadResponse

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post(
    "/reload",
    response_model=ReloadResponse,
    responses=responses("unauthorized", "forbidden", "invalid_request", "not_ready"),
    summary="Re-scan the data directory: load new and changed tables (verified), keep the rest; swap atomically",
)
async def reload(request: Request, _: AdminDep) -> Response:
    if getattr(request.app.state, "registry", None) is None:
        raise ApiError("not_ready", "the server is still loading its tables")
    report = await request.app.state.reloader()
    report["other_workers_signalled"] = signal_supervisor(request.app)
    return FastJSON(report)
