"""``embedding-serve`` with its approximate-index searches answered from memory: the service without the search.

Each (table, query, k) is searched for real the first time and its hits kept, so every answer is the service's
own; the benchmark asks each query once before it measures, so no measured request searches. Everything else a
request does (routing, validation, token lookup, metrics, leaving rows out, shaping, JSON) runs as in the real
server. Beside the real server and the floor (``bench/floor_app.py``) it shows how the searched throughput splits
between the service's own work and the search.

    python -m bench.remembered <embedding-serve arguments>
"""

from __future__ import annotations

import sys

import numpy as np

from index.table import Table
from service import searcher
from service.main import main


def remember_searches() -> None:
    """Replace ``Searcher.knn`` in this process by a memo of ``table.knn`` (one worker: the server runs here)."""
    answers: dict[tuple[str, bytes, int], searcher.Hits] = {}

    async def knn(self: searcher.Searcher, table: Table, query: np.ndarray, k: int) -> searcher.Hits:
        key = (table.name, query.tobytes(), k)
        hits = answers.get(key)
        if hits is None:
            hits = answers[key] = table.knn(query, k)
        return hits

    searcher.Searcher.knn = knn  # type: ignore[method-assign]


if __name__ == "__main__":
    remember_searches()
    sys.exit(main())
