"""What every text encoder answers (the static poolings of ``encode`` and ``transformer_encoder``'s
model): the poolings there are, and the vectors of a batch of texts with what each was made of."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

Pooling = Literal["mean", "sif", "cls"]  # cls: a transformer model's own pooling
POOLINGS: tuple[Pooling, ...] = get_args(Pooling)


@dataclass(frozen=True, slots=True)
class Encoded:
    """The vectors of a batch of texts, with what each was made of."""

    vectors: np.ndarray  # (texts, dim) float32, unit rows
    tokens: list[int]  # per text: the tokens (words, or model pieces) its vector is the mean of
    unknown: list[int]  # per text: words not in the table, or special pieces left out
    pooling: Pooling
    truncated: list[bool] | None = None  # transformer tables: per text, whether it was cut to the model's limit
    # texts whose known tokens pool to the zero vector (their tokens count 0): their distinct tokens, by text
    cancelled: dict[int, list[str]] = field(default_factory=dict)
    # model-token tables' texts without a known piece: (what of each the tokenizer made [UNK] of, the special
    # tokens typed in it), as typed, by text
    left_out: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)
