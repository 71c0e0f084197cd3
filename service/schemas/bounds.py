"""The fixed limits, the same on every server (``GET /v1/limits`` publishes them beside the settings' limits), and
the name a refusal gives each: a value over one is refused by its field's ``max_length``, whose pydantic error (its
type and that length) :data:`FIXED_LIMITS` names, as ``service.errors`` renders it."""

from __future__ import annotations

# The store's, as an import's: a token, a document id; the values of a vector
from index.engine.door import MAX_DIM as MAX_DIM
from index.engine.door import MAX_TOKEN_CHARS as MAX_TOKEN_CHARS

MAX_TEXT_CHARS = 100_000  # a document's text, a search's
MAX_EMBED_CHARS = 10_000  # a text to embed: about 1,500 words (a longer text is better split into passages)
# The words or ids of one positive or negative list: no published limit (a neighbours request's words are bounded
# by max_words), so not max_dim's length, which would name its refusal max_dim as if a vector were too long.
MAX_EXAMPLES = 100_000

FIXED_LIMITS: dict[tuple[str, object], str] = {
    ("string_too_long", MAX_TOKEN_CHARS): "max_token_chars",
    ("string_too_long", MAX_TEXT_CHARS): "max_text_chars",
    ("string_too_long", MAX_EMBED_CHARS): "max_embed_chars",
    ("too_long", MAX_DIM): "max_dim",
}
