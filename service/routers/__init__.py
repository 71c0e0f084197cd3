"""Every router of the API, in the order they appear in the OpenAPI document. Routes are matched in this order
too, so the most requested come first."""

from __future__ import annotations

from fastapi import APIRouter

from service.routers import (
    admin,
    analogy,
    contextual,
    diagnostics,
    documents,
    fields,
    health,
    limits,
    map,
    neighbors,
    projection,
    search,
    similarity,
    tables,
    tokens,
    writes,
)

ROUTERS: tuple[APIRouter, ...] = (
    neighbors.router,
    similarity.router,
    analogy.router,
    search.router,
    documents.router,
    writes.router,
    fields.router,
    tokens.router,
    contextual.router,
    projection.router,
    diagnostics.router,
    map.router,
    tables.router,
    limits.router,
    health.router,
    admin.router,
)
