"""Request and response schemas of ``GET``/``POST .../similarity``."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.schemas.common import COMPOSE_HELP, QUERY, STRICT, Compose, ItemError, PairBatch, PairQuery, Token


class SimilarityParams(BaseModel):
    model_config = QUERY

    a: Token
    b: Token
    compose: Compose | None = Field(None, description=COMPOSE_HELP)


class SimilarityRequest(BaseModel):
    model_config = STRICT

    pairs: PairBatch
    compose: Compose | None = Field(None, description=COMPOSE_HELP)


class SimilarityResponse(BaseModel):
    a: str
    b: str
    similarity: float
    query: PairQuery


class SimilaritiesResponse(BaseModel):
    similarities: list[float | None]
    errors: list[ItemError | None] = Field(description="why a pair's similarity is null (null when it is not)")
