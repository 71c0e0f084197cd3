"""Cleaning shared by every source: duplicate tokens, invalid rows, empty tokens, zero rows.

Duplicates keep their first row. Rows with NaN/Inf (or values whose norm overflows float32) and empty tokens
are refused with the source line number unless ``drop_invalid`` is set. Zero rows are kept (they have no
direction, so their cosine with everything is 0) and counted. Model tables keep every row, since row id is
token id there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from index.build.sources import RawTable
from index.errors import InputError
from index.store.rows import row_norms


def clean(
    raw: RawTable, path: Path | str, drop_invalid: bool = False, allow_empty: bool = False
) -> tuple[RawTable, dict[str, Any]]:
    """Return the cleaned table and a report of what was changed; ``allow_empty``: no rows is no error (a shard a
    compaction left without documents)."""
    matrix = raw.matrix
    if matrix.ndim != 2 or (matrix.shape[0] == 0 and not allow_empty) or matrix.shape[1] == 0:
        raise InputError(path, f"no vectors found (matrix shape {list(matrix.shape)})")
    if len(raw.tokens) != matrix.shape[0]:
        raise InputError(path, f"{len(raw.tokens)} tokens for {matrix.shape[0]} vectors")
    # Row-major float32 (a no-op when it already is): searches and row reads need contiguous rows.
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    report: dict[str, Any] = dict(raw.report)
    rows = matrix.shape[0]

    with np.errstate(over="ignore", invalid="ignore"):
        norms = row_norms(matrix)
    invalid = ~np.isfinite(norms)
    empty = np.fromiter((not t for t in raw.tokens), dtype=bool, count=rows)
    bad = invalid | empty
    keep = np.ones(rows, dtype=bool)
    if bad.any():
        first = int(np.argmax(bad))
        if raw.kind == "tokens" or not drop_invalid:
            what = "an empty token" if empty[first] else invalid_problem(raw.tokens[first])
            hint = "" if raw.kind == "tokens" else " (use --drop-invalid to skip such rows)"
            raise InputError(raw.rows_file or path, what + hint, line=raw.first_line + first)
        keep &= ~bad
        report["invalid_rows_dropped"] = int(bad.sum())
        if not keep.any():
            raise InputError(path, f"no rows left: all {rows:,} rows are invalid (NaN, Inf or overflowing values)")

    if raw.kind != "tokens":
        # The first row of each token among the valid ones: an invalid row dropped does not hide a later one.
        kept = np.flatnonzero(keep)[::-1].tolist()
        first_of = dict(zip(map(raw.tokens.__getitem__, kept), kept, strict=True))
        if len(first_of) < len(kept):
            unique = np.zeros(rows, dtype=bool)
            unique[np.fromiter(first_of.values(), dtype=np.int64, count=len(first_of))] = True
            report["duplicate_tokens_dropped"] = int((keep & ~unique).sum())
            keep &= unique

    report["zero_rows"] = int(((norms == 0) & keep).sum())
    if not keep.all():
        ids = np.flatnonzero(keep)
        raw = RawTable(
            tokens=[raw.tokens[i] for i in ids],
            matrix=matrix[ids],
            first_line=raw.first_line,
            metadata={k: [v[i] for i in ids] for k, v in raw.metadata.items()},
            flags=None if raw.flags is None else raw.flags[ids],
            report=report,
            info=raw.info,
            kind=raw.kind,
            extra_files=raw.extra_files,
        )
    else:
        raw.matrix = matrix
    raw.report = report
    return raw, report


def invalid_problem(token: str) -> str:
    """What is wrong with a row holding NaN, Inf or values whose norm overflows float32."""
    return f"NaN, Inf or overflowing values for {token!r}"


def first_invalid(matrix: np.ndarray) -> int | None:
    """The position of the first such row of ``matrix``, if any (vectorised: for a reader refusing a later row)."""
    with np.errstate(over="ignore", invalid="ignore"):
        invalid = ~np.isfinite(row_norms(matrix))
    return int(np.argmax(invalid)) if invalid.any() else None
