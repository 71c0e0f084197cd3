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

from index.search import Answers, Search, VectorSearch
from index.table import Table
from service import searcher
from service.main import main


def remember_searches() -> None:
    """Replace ``Searcher.run`` in this process by a memo of ``table.run`` (one worker: the server runs here)."""
    answers: dict[tuple[str, object, bytes, str], Answers] = {}

    async def run(self: searcher.Searcher, table: Table, search: Search) -> Answers:
        asked = search.queries.tobytes() if isinstance(search, VectorSearch) else b""
        key = (table.name, search.key(), asked, repr(getattr(search, "exclude", None) or search.questions))
        hits = answers.get(key)
        if hits is None:
            hits = answers[key] = table.run(search)
        return hits

    searcher.Searcher.run = run  # type: ignore[method-assign]


if __name__ == "__main__":
    remember_searches()
    sys.exit(main())
