"""gensim's KeyedVectors over the very matrix and tokens the ``glove`` table is built from, for parity tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gensim.models import KeyedVectors

from tests.gensim_reference import load_glove_kv


@pytest.fixture(scope="session")
def glove_kv() -> KeyedVectors:
    return load_glove_kv()


@pytest.fixture(scope="session")
def gensim_data() -> dict[str, Path]:
    from gensim.test.utils import datapath

    names = ("questions-words.txt", "wordsim353.tsv", "simlex999.txt", "lee_background.cor")
    return {name: Path(datapath(name)) for name in names}


# The modules that import documents with --encoder; a module that needs another data directory defines its own.
@pytest.fixture
def data_dir(tmp_path: Path, small_data_dir: Path) -> Path:
    """A data directory holding the 20,000-row GloVe table ``small`` (the encoder)."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(small_data_dir / "small", data / "small")
    return data
