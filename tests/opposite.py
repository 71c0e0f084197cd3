"""A two-row table whose words cancel out: "heart" and "trah", the exact negative of its row. A text of both pools to
the zero vector, which the encoders, the writes and the documents import must name as cancelling out."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.table import Table

WORDS = ("heart", "trah")


def build_opposite(row: np.ndarray, data_dir: Path, name: str = "opposite") -> Table:
    """Table ``name`` of ``data_dir``: "heart" with ``row``, "trah" with ``-row``."""
    row = np.asarray(row, dtype=np.float32)
    build_table(RawTable(tokens=list(WORDS), matrix=np.stack([row, -row])), data_dir=data_dir, name=name, source={})
    return Table.load(data_dir / name)
