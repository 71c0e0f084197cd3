"""A table's rows as stored: unit rows and their original norms, computed block by block (never a full-size
temporary)."""

from __future__ import annotations

import numpy as np

BLOCK_ROWS_BYTES = 32 << 20  # row norms and scaling work on blocks of this size, never a full-size temporary
# The most values a vector of a request holds, the API's ``max_dim``: an import refuses a wider table, which no
# vector query could be sent to.
MAX_DIM = 65_536


def _step(matrix: np.ndarray) -> int:
    """Rows per block."""
    return max(1, BLOCK_ROWS_BYTES // max(1, matrix[:1].nbytes))


def row_norms(matrix: np.ndarray) -> np.ndarray:
    """``np.linalg.norm(matrix, axis=1)`` (same values), computed block by block to stay memory-lean."""
    norms = np.empty(matrix.shape[0], dtype=np.result_type(matrix.dtype, np.float32))
    step = _step(matrix)
    for start in range(0, matrix.shape[0], step):
        norms[start : start + step] = np.linalg.norm(matrix[start : start + step], axis=1)
    return norms


def normalise(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale the rows of ``matrix`` to unit length in place; return (unit rows, original norms).

    Zero rows stay zero. Norms are computed in float32 as gensim's ``fill_norms`` does.
    """
    norms = row_norms(matrix).astype(np.float32)
    divisor = np.where(norms > 0, norms, np.float32(1))[:, None]
    step = _step(matrix)
    for start in range(0, matrix.shape[0], step):
        block = matrix[start : start + step]
        np.divide(block, divisor[start : start + step], out=block)
    return matrix, norms
