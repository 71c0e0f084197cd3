"""``EMBEDDING_THREADS``, the FAISS, BLAS and ONNX Runtime threads of a process, read here alone: by
``embedding-serve`` before numpy loads and in its settings, by ``embedding-index`` and by a transformer table's
encoder. It imports nothing but the standard library, so that the server reads it before BLAS starts its threads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

VARIABLE = "EMBEDDING_THREADS"
MAX_THREADS = 512  # per process: a server's worker, a build
RANGE = f"must be a whole number from 1 to {MAX_THREADS}"
NUMBER = re.compile(r"\+?([0-9]+)(?:\.0+)?")  # "2", "+2", "2.0": a whole number as the settings have read it


def given(environ: Mapping[str, str]) -> str | None:
    """The variable's value in ``environ``, its name in any case (as the server's settings read it); None when
    unset."""
    return next((value for variable, value in environ.items() if variable.upper() == VARIABLE), None)


def parsed(value: object) -> int:
    """A number of threads from 1 to ``MAX_THREADS``: an int, or a text of one (surrounding spaces taken); else
    ValueError naming the value and the range."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = NUMBER.fullmatch(value.strip()) if isinstance(value, str) else None
        number = int(match.group(1)) if match else 0
    if not 1 <= number <= MAX_THREADS:
        raise ValueError(f"{VARIABLE}={value!r}: {RANGE}")
    return number
