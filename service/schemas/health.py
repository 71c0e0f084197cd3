"""Response schemas of ``/healthz`` and ``/readyz``."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Health(BaseModel):
    status: str


class BuildStatus(BaseModel):
    state: str = Field(description="queued, running or failed")
    step: str = Field(description="what the build is doing, e.g. adding rows to the index")
    done: float = Field(description="fraction of the step done, 0 to 1")
    seconds_left: float | None = Field(None, description="estimated seconds left in the step, at the rate so far")
    nice: int | None = Field(None, description="the build process's nice level (it yields the CPU to requests)")
    elapsed_seconds: float | None = Field(None, description="seconds since the build started")
    cpu_seconds: float | None = Field(None, description="CPU seconds the build has used so far, all its threads")
    hnsw_estimate_seconds: float | None = Field(
        None, description="the estimated time of the HNSW build, when the auto rule estimated it"
    )


class Ready(BaseModel):
    status: str
    loaded: list[str]
    missing: list[str]
    stale: list[str] = Field(
        [], description="tables still serving their previous version because their new files were refused (if any)"
    )
    building: dict[str, BuildStatus] = Field(
        {}, description="tables whose approximate index is being built in the background (exact answers meanwhile)"
    )
