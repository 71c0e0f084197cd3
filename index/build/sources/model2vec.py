"""A model2vec static model directory (``--format model2vec``): a model-token table with optional token weights.

The directory holds ``model.safetensors`` with an ``embeddings`` tensor (rows x dim, F32, F16, BF16, F64 or
I8) and optionally ``weights`` (one per token) and ``mapping`` (each token's row of ``embeddings``, for a
vocabulary-quantised model), ``tokenizer.json`` and ``config.json``. Row id = token id: a quantised model's
rows are written out per token (``embeddings[mapping]``). The weights are kept as ``token_weights.npy`` and
used when text is embedded (``index.engine.encode``); the config's ``max_length`` (pieces kept a text, 512 unless it
says otherwise, as in model2vec) goes into the manifest with the rest of the config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from index.build.sources import RawTable, ReadOptions
from index.build.sources.huggingface import (
    DTYPE_NAMES,
    TensorInfo,
    read_exact,
    read_header,
    read_json,
    read_matrix,
    read_vocabulary,
    tensor_listing,
    token_flags,
    token_kinds,
    token_metadata,
)
from index.errors import InputError
from index.store.artifact import npy_bytes
from index.store.tokens import TOKENIZER, WEIGHTS

MODEL = "model.safetensors"
TENSORS = ("embeddings", "weights", "mapping")
VECTOR_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "U32": "<u4"}
CONFIG_KEYS = ("normalize", "max_length", "hidden_dim", "apply_pca", "apply_zipf", "sif_coefficient", "tokenizer_name")


def is_model2vec(directory: Path) -> bool:
    """Whether a model directory is a model2vec model (its config says so, or its tensors are model2vec's)."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    if isinstance(config, dict) and (
        config.get("model_type") == "model2vec" or "StaticModel" in (config.get("architectures") or [])
    ):
        return True
    try:
        names = set(read_header(directory / MODEL))
    except (InputError, OSError):
        return False
    return "embeddings" in names and names <= set(TENSORS)


def read_vector(tensor: TensorInfo, length: int) -> np.ndarray:
    """A small 1-D tensor (weights, mapping) of ``length`` values, as stored."""
    if tensor.dtype not in VECTOR_DTYPES:
        raise InputError(tensor.file, f"tensor {tensor.name!r} has dtype {tensor.dtype}; expected a number type")
    if tensor.shape != (length,):
        raise InputError(
            tensor.file, f"tensor {tensor.name!r} has shape {list(tensor.shape)}; expected [{length}] (one per token)"
        )
    dtype = np.dtype(VECTOR_DTYPES[tensor.dtype])
    if tensor.end - tensor.start != length * dtype.itemsize:
        raise InputError(tensor.file, f"tensor {tensor.name!r}: byte range disagrees with its shape and dtype")
    out = np.empty(length, dtype=dtype)
    with open(tensor.file, "rb") as handle:
        handle.seek(tensor.start)
        read_exact(handle, memoryview(out).cast("B"), tensor.file)  # type: ignore[arg-type]  # ndarray.__buffer__: 3.12+
    return out


def read_embeddings(tensor: TensorInfo) -> np.ndarray:
    """The ``embeddings`` matrix as float32 (int8-quantised values are taken as they are, as model2vec does)."""
    if tensor.dtype != "I8":
        return read_matrix(tensor)
    size = tensor.shape[0] * tensor.shape[1] if len(tensor.shape) == 2 else -1
    if size < 1 or tensor.end - tensor.start != size:
        raise InputError(tensor.file, f"tensor {tensor.name!r} has shape {list(tensor.shape)}; expected rows x dim")
    raw = np.empty(tensor.shape, dtype=np.int8)
    with open(tensor.file, "rb") as handle:
        handle.seek(tensor.start)
        read_exact(handle, memoryview(raw).cast("B"), tensor.file)  # type: ignore[arg-type]  # as above
    return raw.astype(np.float32)


def read(path: Path, options: ReadOptions) -> RawTable:
    """Read a model2vec model directory (or its ``model.safetensors``) as a model-token table."""
    path = Path(path)
    if path.is_file() and path.name != MODEL:
        raise InputError(path, f"--format model2vec reads a model directory (or its {MODEL}), not this file")
    directory = path.parent if path.is_file() else path
    model = directory / MODEL
    if not model.is_file():
        raise InputError(directory, f"no {MODEL} (a model2vec model holds {MODEL}, {TOKENIZER} and config.json)")
    config = read_json(directory / "config.json")
    tensors = read_header(model)
    if "embeddings" not in tensors:
        raise InputError(
            model, f"no 'embeddings' tensor (tensors: {tensor_listing(tensors)}); is this a model2vec model?"
        )
    embeddings = tensors["embeddings"]
    vocab = read_vocabulary(directory)
    size = len(vocab.labels)
    matrix = read_embeddings(embeddings)
    rows = matrix.shape[0]
    mapping = None
    if "mapping" in tensors:
        mapping = read_vector(tensors["mapping"], size)
        if mapping.dtype.kind not in "iu":
            raise InputError(model, f"tensor 'mapping' has dtype {tensors['mapping'].dtype}; expected integers")
        outside = (mapping < 0) | (mapping >= rows)
        if outside.any():
            token = int(np.argmax(outside))
            raise InputError(model, f"tensor 'mapping' sends token {token} to row {mapping[token]} of {rows}")
        matrix = matrix[mapping]
    elif rows != size:
        raise InputError(
            model, f"'embeddings' has {rows} rows but {TOKENIZER} has {size} tokens (and there is no 'mapping')"
        )
    extra_files: dict[str, bytes | memoryview] = {TOKENIZER: vocab.tokenizer_json}
    if "weights" in tensors:
        weights = read_vector(tensors["weights"], size).astype(np.float32)
        if not np.isfinite(weights).all():
            token = int(np.argmax(~np.isfinite(weights)))
            raise InputError(model, f"tensor 'weights' is not finite for token {token} ({vocab.labels[token]!r})")
        extra_files[WEIGHTS] = npy_bytes(weights)

    flags = token_flags(vocab)
    settings: dict[str, Any] = {key: config[key] for key in CONFIG_KEYS if key in config}
    max_length = config.get("max_length", 512)  # model2vec's default
    info = {
        "model": {
            "name": str(config.get("_name_or_path") or config.get("model_name") or directory.name),
            "architecture": "StaticModel",
            "model_type": "model2vec",
            "tensor": embeddings.name,
            "tensor_file": model.name,
            "dtype": DTYPE_NAMES.get(embeddings.dtype, embeddings.dtype.lower()),
            "shape": list(embeddings.shape),
            "tokenizer_type": vocab.tokenizer_type,
            "vocab_size": size,
            **token_kinds(vocab, flags),
        },
        "model2vec": {
            "weights": "weights" in tensors,
            "quantized_rows": rows if mapping is not None else None,
            "max_length": int(max_length) if isinstance(max_length, int) and max_length > 0 else None,
            # model2vec cuts a text to max_length x this many characters before it tokenizes it
            "median_token_length": int(np.median([len(label) for label in vocab.labels])),
            "config": settings,
        },
    }
    return RawTable(
        tokens=vocab.labels,
        matrix=matrix,
        first_line=0,
        rows_are="token id",
        metadata=token_metadata(vocab, vocab.labels, flags),
        flags=flags,
        info=info,
        kind="tokens",
        extra_files=extra_files,
    )
