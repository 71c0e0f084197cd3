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

from index.engine.filters import RowSet
from index.engine.knn import Hits
from index.engine.table import SearchOptions, Table
from service.main import main


def remember_searches() -> None:
    """Replace ``Table.knn`` (the index search) in this process by a memo of its answer for each query row (one
    worker: the server runs here); everything around it, the searcher thread included, still runs."""
    answers: dict[tuple[str, bytes, int, SearchOptions], tuple[np.ndarray, np.ndarray]] = {}
    knn = Table.knn

    def remembered(
        table: Table, queries: np.ndarray, k: int, options: SearchOptions = SearchOptions(), rows: RowSet | None = None
    ) -> Hits:
        if rows is not None:  # a filtered search: its passing rows are part of the question, so it is not remembered
            return knn(table, queries, k, options, rows)
        found_rows = []
        for query in queries:
            key = (table.name, query.tobytes(), k, options)
            found = answers.get(key)
            if found is None:
                scores, ids = knn(table, query[None, :], k, options)  # a row searched alone answers as in a batch
                found = answers[key] = (scores[0], ids[0])
            found_rows.append(found)
        return np.vstack([r[0] for r in found_rows]), np.vstack([r[1] for r in found_rows])

    Table.knn = remembered  # type: ignore[method-assign]


if __name__ == "__main__":
    remember_searches()
    sys.exit(main())
