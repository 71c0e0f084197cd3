"""Request and response models of ``POST /v1/tables/{table}/contextual``: a transformer table's last-layer token
vectors, and one word's contextual vectors beside its static row."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from service.schemas.bounds import MAX_EMBED_CHARS
from service.schemas.common import STRICT, Whole

MAX_CONTEXT_TEXTS = 16  # texts a request: each answers hidden-size floats per token
Text = Annotated[str, Field(min_length=1, max_length=MAX_EMBED_CHARS)]


class ContextualRequest(BaseModel):
    model_config = STRICT

    texts: list[Text] = Field(min_length=1, max_length=MAX_CONTEXT_TEXTS, description="the texts, 1..16")
    token: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        None, description="a word to follow through the texts (split by the model's tokenizer)"
    )
    k: Annotated[int, Field(ge=1, le=50), Whole] = Field(5, description="nearest input rows per vector")


class ContextualToken(BaseModel):
    id: int
    token: str
    vector: list[float] = Field(description="its last-layer vector (float32)")


class ContextualText(BaseModel):
    text: str
    truncated: bool = Field(description="cut to the model's max_seq_length")
    tokens: list[ContextualToken] = Field(description="the model's tokens, [CLS] and [SEP] included")


class Row(BaseModel):
    id: int
    token: str
    score: float
    readable: str | None = None


class Piece(BaseModel):
    id: int
    token: str


class StaticRow(BaseModel):
    vector: list[float] = Field(description="the mean of the word's pieces' input rows (as the model stores them)")
    neighbors: list[Row]


class Occurrence(BaseModel):
    text: int = Field(description="which text")
    position: int = Field(description="of the word's first piece among the text's tokens")
    vector: list[float] = Field(description="the mean of its pieces' last-layer vectors")
    static_cosine: float = Field(description="cosine with the word's static row")
    neighbors: list[Row] = Field(description="nearest rows of the model's input table")


class WordView(BaseModel):
    token: str
    pieces: list[Piece]
    static: StaticRow
    occurrences: list[Occurrence]
    cosines: list[list[float]] = Field(description="between the occurrences, in their order")


class ContextualResponse(BaseModel):
    table: str
    texts: list[ContextualText]
    token: WordView | None = None
