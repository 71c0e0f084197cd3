"""Every router of the API, in the order they appear in the OpenAPI document."""

from __future__ import annotations

from fastapi import APIRouter

from service.routers import admin, analogy, health, neighbors, projection, search, similarity, tables, tokens

ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    tables.router,
    tokens.router,
    neighbors.router,
    similarity.router,
    analogy.router,
    search.router,
    projection.router,
    admin.router,
)
