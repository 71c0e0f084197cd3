"""gensim ``.model`` / ``.kv`` files (``Word2Vec.save``, ``KeyedVectors.save``, FastText, ...).

These are Python pickles: loading one can run arbitrary code. They are read only when the caller passes
``allow_pickle`` (the ``--allow-pickle`` flag), and only for files the user trusts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from index.build.sources import RawTable, ReadOptions
from index.errors import InputError


def read(path: Path, options: ReadOptions) -> RawTable:
    path = Path(path)
    if not options.allow_pickle:
        raise InputError(
            path,
            "gensim .model/.kv files are Python pickles, which can run arbitrary code when loaded; "
            "re-run with --allow-pickle only if you trust this file",
        )
    from gensim.models import KeyedVectors
    from gensim.utils import SaveLoad

    try:
        loaded = SaveLoad.load(str(path))
    except Exception as exc:  # unpickling can fail in any way; report it as bad input
        raise InputError(path, f"cannot load as a gensim model ({type(exc).__name__}: {exc})") from None
    vectors = getattr(loaded, "wv", loaded)
    if not isinstance(vectors, KeyedVectors):
        raise InputError(path, f"holds a {type(loaded).__name__}, not gensim word vectors")
    tokens = [str(key) for key in vectors.index_to_key]
    matrix = np.asarray(vectors.vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != len(tokens):
        raise InputError(path, f"{len(tokens):,} keys for a vector matrix of shape {list(matrix.shape)}")
    return RawTable(
        tokens=tokens, matrix=matrix, first_line=0, rows_are="row", info={"gensim_class": type(loaded).__name__}
    )
