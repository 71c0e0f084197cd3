"""A slice of the tests' GloVe rows as a word2vec text file, with two rows that differ from others only by case
("Paris" beside "paris", "The" beside "the"): a case-folded lookup ("PARIS") has two rows to choose from, and the
table's lowest wins."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from index.build.sources import RawTable

ROWS = 20_000
CASED = {"Paris": "paris", "The": "the"}  # a row of its own, half the vector of the lower-case word


def write_words(raw: RawTable, path: Path, rows: int = ROWS) -> Path:
    """The first ``rows`` GloVe rows and the :data:`CASED` rows, as a word2vec text file (float32 exactly)."""
    tokens = raw.tokens[:rows]
    extra = [tokens.index(lower) for lower in CASED.values()]
    matrix = np.vstack([raw.matrix[:rows], raw.matrix[extra] * np.float32(0.5)]).astype(np.float32)
    lines = [f"{len(tokens) + len(CASED)} {matrix.shape[1]}"]
    lines += [
        f"{token} {' '.join(map(repr, row.tolist()))}" for token, row in zip([*tokens, *CASED], matrix, strict=True)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
