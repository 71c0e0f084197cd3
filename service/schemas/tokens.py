"""Request and response schemas of a table's rows and tokenizer: ``GET .../tokens/{token}``, ``POST .../tokenize``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from service.schemas.bounds import MAX_TEXT_CHARS
from service.schemas.common import STRICT, QueryInfo, TokenPiece


class TokenizeRequest(BaseModel):
    model_config = STRICT

    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class TokenResponse(BaseModel):
    token: str
    id: int
    readable: str | None = Field(None, description="model-token tables: the text the token stands for (' heart')")
    metadata: dict[str, str] | None = Field(None, description="the row's metadata columns, for tables that have them")
    vector: list[float]
    normalized: bool
    norm: float
    query: QueryInfo
    row: int | None = Field(None, description="with row=true: the row in the whole table (a shard's: sharded table's)")


class TokenizeResponse(BaseModel):
    text: str
    tokens: list[TokenPiece]
