"""Response schema of ``GET /v1/limits``: the limits a request must respect, named as the settings that set them."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ServerLimits(BaseModel):
    """Each limit a setting sets is named as the setting (``max_batch``: ``EMBEDDING_MAX_BATCH``); the others, marked
    fixed, are the same on every server."""

    max_k: int = Field(description="largest k (and offset + k) a query may ask for")
    max_batch: int = Field(
        description="most items in one batch: queries, pairs, texts, documents read, written or deleted by id"
    )
    max_hits: int = Field(description="most hits one batch request may ask for: items x (offset + k)")
    max_filter_conditions: int = Field(description="most conditions in all the filters of one request")
    max_words: int = Field(description="most words in all the word lists of one request")
    max_layout_work: int = Field(description="largest t-SNE or UMAP projection: tokens x perplexity or n_neighbors")
    max_encode_tokens: int = Field(description="most tokens one request has a transformer table's model run")
    max_scored_rows: int = Field(
        description="most rows one analogy batch scores one by one; also the rows one request's keyword words, "
        "filter conditions and diversity score or test, together"
    )
    max_exact_rows: int = Field(description="most rows one request's exact searches score: queries x rows")
    max_answer_bytes: int = Field(description="most bytes of text and vectors one search answers")
    max_body_bytes: int = Field(description="largest request body; larger is a 413")
    max_header_bytes: int = Field(description="largest request line plus headers; larger is a 431")
    max_token_chars: int = Field(description="longest token (and document id) in characters (fixed)")
    max_text_chars: int = Field(description="longest text of a document or a search in characters (fixed)")
    max_embed_chars: int = Field(description="longest text of an embed or embeddings request in characters (fixed)")
    max_dim: int = Field(description="most values in a vector (fixed)")
