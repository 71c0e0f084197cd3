"""Request and response models of the text-embedding routes: ``POST /v1/tables/{table}/embed`` and the
OpenAI-compatible ``POST /v1/embeddings``. Limits as everywhere: a batch holds 1..max_batch texts, each of
1..``MAX_EMBED_CHARS`` characters (about 1,500 words: a longer text is better split into passages, whose
vectors say more than one mean of everything)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from index.engine.door import Pooling
from service.schemas.bounds import MAX_EMBED_CHARS
from service.schemas.common import CHECK_BATCH, STRICT, TABLE_NAME_PATTERN, Whole, batch_of

POOLING_HELP = (
    "word tables: 'sif' (SIF-weighted mean, common component removed; the default once `embedding-index sif` "
    "has computed the component) or 'mean'; model-token tables: 'mean' (the tokens' rows, weighted by a "
    "model2vec model's token weights); transformer tables: the model's own pooling, 'mean' or 'cls'"
)
Text = Annotated[str, Field(min_length=1, max_length=MAX_EMBED_CHARS)]
Texts = Annotated[list[Text], batch_of("the texts, 1..max_batch"), CHECK_BATCH]
PoolingField = Annotated[Pooling | None, Field(description=POOLING_HELP)]


class EmbedRequest(BaseModel):
    """``POST .../embed``: texts to vectors with the table's rows."""

    model_config = STRICT

    texts: Texts
    pooling: PoolingField = None


class EmbedResponse(BaseModel):
    table: str
    pooling: Pooling
    dim: int
    tokens: list[int] = Field(description="per text: the tokens (words, or model pieces) its vector is made of")
    unknown: list[int] = Field(description="per text: words not in the table (model tables: special pieces)")
    vectors: list[list[float]] = Field(description="one unit vector a text (float32 values)")
    truncated: list[bool] | None = Field(
        None, description="transformer tables: per text, whether it was cut to the model's max_seq_length"
    )


# ------------------------------------------------------------------------------ OpenAI-compatible
def _token_ids(value: Any) -> bool:
    """Whether ``value`` is token ids: an integer (not a boolean), or a non-empty list of them."""
    if isinstance(value, list):
        return bool(value) and all(type(item) is int for item in value)
    return type(value) is int


JSON_TYPES = {type(None): "null", bool: "a boolean", float: "a number", dict: "an object"}
# Who sends token ids without being asked to: LangChain's OpenAIEmbeddings, which cuts texts into tiktoken's ids
TOKEN_IDS = (
    "token-id input (integers, or lists of them) is not accepted: send text, a string or strings (LangChain's "
    "OpenAIEmbeddings sends tiktoken's token ids unless given check_embedding_ctx_length=False)"
)


def _text_input(value: Any) -> Any:
    """OpenAI's ``input`` is a text or texts here: token ids (integers, or lists of them) are refused by name; any
    other value is validated as text (an empty one is named by its place: ``input[2]``)."""
    if _token_ids(value) or (isinstance(value, list) and any(map(_token_ids, value))):
        raise ValueError(TOKEN_IDS)
    if not isinstance(value, str | list):  # one problem, not one for each form it is not
        raise ValueError(f"send a string or a list of strings, not {JSON_TYPES.get(type(value), 'that')}")
    return value


OpenAIInput = Annotated[
    Text | Texts, BeforeValidator(_text_input), Field(description="a text, or a list of texts (token ids are refused)")
]


# Checked by the registry, as a path's table name is (the pattern is the OpenAPI document's): a name that is no
# table name (``BAAI/bge-small-en-v1.5``) is OpenAI's 400 saying what a table name is, not a regular expression.
ModelField = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"pattern": TABLE_NAME_PATTERN},
        description="a table's name (GET /v1/models lists those that embed text)",
    ),
]


class OpenAIEmbeddingsRequest(BaseModel):
    """OpenAI's embeddings request; ``model`` names a table."""

    model_config = ConfigDict(strict=True, extra="forbid")

    model: ModelField
    input: OpenAIInput
    encoding_format: Literal["float", "base64"] | None = Field(
        "float",
        description="float (the default, null too): lists of numbers; base64: each vector's little-endian "
        "float32 bytes",
    )
    dimensions: Annotated[int, Field(ge=1), Whole] | None = Field(
        None, description="if given, the table's dimension (vectors are not cut)"
    )
    user: str | None = Field(None, max_length=256, description="accepted and not used")
    pooling: PoolingField = None


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class OpenAIUsage(BaseModel):
    prompt_tokens: int = Field(description="tokens of the inputs, known and unknown")
    total_tokens: int


class OpenAIEmbeddingsResponse(BaseModel):
    object: Literal["list"]
    data: list[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage


class OpenAIModel(BaseModel):
    id: str = Field(description="the table's name: the model to ask POST /v1/embeddings for")
    object: Literal["model"]
    created: int = Field(description="when the table was built (Unix seconds)")
    owned_by: str


class OpenAIModelList(BaseModel):
    """The tables that embed text (word tables, model-token tables with a tokenizer), as OpenAI lists models."""

    object: Literal["list"]
    data: list[OpenAIModel]


class OpenAIErrorBody(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error (4xx) or server_error (5xx)")
    param: str | None = Field(description="the request's field at fault (input[2] for the third input), if one is")
    code: str | None = Field(
        description="OpenAI's code where it has one (model_not_found, invalid_api_key), none for an invalid request "
        "or a missing key, else the service's error code"
    )


class OpenAIErrorResponse(BaseModel):
    """Every error of ``POST /v1/embeddings`` and ``/v1/models``, in OpenAI's shape and with OpenAI's status (400
    for an invalid request, 401 for a key missing or not valid, 404 for an unknown model)."""

    error: OpenAIErrorBody
