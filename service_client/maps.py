"""The whole-table map's answers read back: ``GET .../map`` (int16 x, y pairs within ``map/info``'s bounds),
``.../map/labels`` (one gzip-compressed JSON array) and ``.../map/colours/{column}`` (one uint8 code a row)."""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

HALF = 32767.0  # the int16 codes run from -HALF (an axis's low bound) to HALF (its high bound)


@dataclass(frozen=True)
class MapColours:
    """A column as categories and, per row (row id = position), the index of its category."""

    column: str
    categories: list[str]
    codes: np.ndarray  # uint8, one a row: np.asarray(categories)[codes] is each row's category


def points(body: bytes, bounds: dict[str, list[float]]) -> np.ndarray:
    """The rows' positions (float64, rows x 2) from the int16 codes of ``GET .../map`` and ``map/info``'s bounds."""
    codes = np.frombuffer(body, dtype="<i2").reshape(-1, 2)
    out = np.empty(codes.shape, dtype=np.float64)
    for axis, name in enumerate(("x", "y")):
        lo, hi = bounds[name]
        span = hi - lo if hi > lo else 1.0
        out[:, axis] = lo + (codes[:, axis].astype(np.float64) + HALF) / (2 * HALF) * span
    return out


def labels(body: bytes) -> list[str]:
    """Every row's label, from ``GET .../map/labels``."""
    found: list[str] = json.loads(gzip.decompress(body))
    return found


def colours(answer: dict[str, Any]) -> MapColours:
    codes = np.frombuffer(base64.b64decode(answer["codes"]), dtype=np.uint8)
    return MapColours(answer["column"], list(answer["categories"]), codes)
