"""Cleaning shared by every source: duplicate tokens, invalid rows, empty tokens, overlong tokens, zero rows.

Duplicates keep their first row. Rows with NaN/Inf (or values whose norm overflows float32) and empty tokens
are refused with the source line number unless ``drop_invalid`` is set. A word longer than the API's
``max_token_chars`` is dropped and counted, as a duplicate is: no request could name it. Zero rows are kept (they
have no direction, so their cosine with everything is 0) and counted. Model tables keep every row, since row id is
token id there. A table wider than the API's ``max_dim`` is refused: no vector query could be sent to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from index.build.sources import RawTable
from index.errors import InputError, counted, every, shown
from index.progress import warn
from index.store.rows import MAX_DIM, row_norms
from index.store.tokens import MAX_TOKEN_CHARS


def clean(
    raw: RawTable, path: Path | str, drop_invalid: bool = False, allow_empty: bool = False
) -> tuple[RawTable, dict[str, Any]]:
    """Return the cleaned table and a report of what was changed; ``allow_empty``: no rows is no error (a shard a
    compaction left without documents)."""
    matrix = raw.matrix
    if matrix.ndim != 2 or (matrix.shape[0] == 0 and not allow_empty) or matrix.shape[1] == 0:
        raise InputError(path, f"no vectors found (matrix shape {list(matrix.shape)})")
    if len(raw.tokens) != matrix.shape[0]:
        raise InputError(path, f"{counted(len(raw.tokens), 'token')} for {counted(matrix.shape[0], 'vector')}")
    if matrix.shape[1] > MAX_DIM:
        raise InputError(
            raw.rows_file or path,
            f"vectors of {matrix.shape[1]:,} values, more than the {MAX_DIM:,} a request's vector may hold "
            "(max_dim): no vector query could be sent to the table",
        )
    # Row-major float32 (a no-op when it already is): searches and row reads need contiguous rows.
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    report: dict[str, Any] = dict(raw.report)
    rows = matrix.shape[0]

    with np.errstate(over="ignore", invalid="ignore"):
        norms = row_norms(matrix)
    invalid = ~np.isfinite(norms)
    lengths = np.fromiter(map(len, raw.tokens), dtype=np.int64, count=rows)
    empty = lengths == 0
    keep = np.ones(rows, dtype=bool)
    if raw.kind == "words":  # a model table keeps every row; a documents import refused such an id already
        keep = lengths <= MAX_TOKEN_CHARS
        if not keep.all():
            report["long_tokens_dropped"] = int(rows - keep.sum())
    bad = (invalid | empty) & keep
    if bad.any():
        first = int(np.argmax(bad))
        if raw.kind == "tokens" or not drop_invalid:
            what = "an empty token" if empty[first] else invalid_problem(raw.tokens[first])
            hint = "" if raw.kind == "tokens" else " (use --drop-invalid to skip such rows)"
            raise InputError(raw.rows_file or path, what + hint, line=raw.first_line + first, unit=raw.rows_are)
        keep &= ~bad
        report["invalid_rows_dropped"] = int(bad.sum())
    if rows and not keep.any():
        raise InputError(path, f"no rows left: {all_dropped(rows, report)}")

    if raw.kind != "tokens":
        # The first row of each token among the valid ones: an invalid row dropped does not hide a later one.
        kept = np.flatnonzero(keep)[::-1].tolist()
        first_of = dict(zip(map(raw.tokens.__getitem__, kept), kept, strict=True))
        if len(first_of) < len(kept):
            unique = np.zeros(rows, dtype=bool)
            unique[np.fromiter(first_of.values(), dtype=np.int64, count=len(first_of))] = True
            repeated = keep & ~unique
            report["duplicate_tokens_dropped"] = int(repeated.sum())
            warn(
                f"dropped {counted(report['duplicate_tokens_dropped'], 'row')} whose token an earlier row has, the "
                f"first row of each kept (first: {shown(raw.tokens[int(np.argmax(repeated))])})"
            )
            keep &= unique

    report["zero_rows"] = int(((norms == 0) & keep).sum())
    if report.get("long_tokens_dropped"):
        first_long = raw.tokens[int(np.argmax(lengths > MAX_TOKEN_CHARS))]
        warn(
            f"dropped {counted(report['long_tokens_dropped'], 'token')} longer than {MAX_TOKEN_CHARS:,} characters "
            f"(max_token_chars), which no request could name (first: {shown(first_long)})"
        )
    if not keep.all():
        ids = np.flatnonzero(keep)
        raw = RawTable(
            tokens=[raw.tokens[i] for i in ids],
            matrix=matrix[ids],
            first_line=raw.first_line,
            rows_are=raw.rows_are,
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


def all_dropped(rows: int, report: dict[str, Any]) -> str:
    """Why every one of ``rows`` rows was dropped: invalid values, overlong tokens, or some of each ("all 2 rows
    are invalid ...", "the only row has a token longer than ...")."""
    one = rows == 1
    reasons = [
        what
        for key, what in (
            ("invalid_rows_dropped", f"{'is' if one else 'are'} invalid (NaN, Inf or overflowing values)"),
            (
                "long_tokens_dropped",
                f"{'has a token' if one else 'have tokens'} longer than {MAX_TOKEN_CHARS:,} characters "
                "(max_token_chars)",
            ),
        )
        if report.get(key)
    ]
    return f"{every(rows, 'row')} {' or '.join(reasons)}"


def invalid_problem(token: str) -> str:
    """What is wrong with a row holding NaN, Inf or values whose norm overflows float32."""
    return f"NaN, Inf or overflowing values for {token!r}"


def first_invalid(matrix: np.ndarray) -> int | None:
    """The position of the first such row of ``matrix``, if any (vectorised: for a reader refusing a later row)."""
    with np.errstate(over="ignore", invalid="ignore"):
        invalid = ~np.isfinite(row_norms(matrix))
    return int(np.argmax(invalid)) if invalid.any() else None
