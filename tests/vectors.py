"""Unit-length rows in float64, as the tests' oracles (brute force, gensim's formulas) compute them."""

from __future__ import annotations

import numpy as np


def unit(matrix: np.ndarray) -> np.ndarray:
    """``matrix``'s rows (or one vector) scaled to length 1, in float64; a zero row stays zero."""
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1)
