"""gensim's bundled test data (the Lee corpora, the Google analogy set, the word-pair sets), found on disk without
importing gensim's test helpers, which import scipy.stats (BENCHMARKS.md section 4)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from index.errors import InputError


def gensim_data(name: str) -> Path:
    """The path of gensim's test data file ``name`` (as ``gensim.test.utils.datapath(name)``)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"gensim:{name}", "gensim is not installed (it holds this file): give the file's path")
    return Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data" / name
