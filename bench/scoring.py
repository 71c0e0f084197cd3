"""The searcher's kernel per query, in process: an HNSW graph's search alone, and the search whose candidates are
scored exactly (``knn.index_top``) on the table's rows (a memory map) or on the graph's own copy of them
(``knn.graph_rows``).

    python -m bench.scoring --data-dir data [--table glove-6b-50d] [--queries 4000] [--rounds 5] [--out F]

Batches of 1 (a search alone, run on the event loop) and of the searcher's batch (``MAX_BATCH`` searches), on one
thread, the table's own words as queries. The cases run in an order rotated round by round; each figure is the
median over the rounds of the microseconds a query. Both scorings must answer the same, to the bit, or nothing is
timed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from bench.common import REPO, TABLE, machine, median
from index.engine.knn import index_top
from index.engine.table import Table

K = 10
BATCHES = (1, 8)  # a search alone; the searcher's batch (service.execute.MAX_BATCH)


def cases(table: Table) -> dict[str, Callable[[np.ndarray], object]]:
    """The timed calls, each given a batch of unit queries."""
    index, width = table.index, table.search_width
    if index is None or width is None:
        raise SystemExit(f"table {table.name!r} has no HNSW graph to time")
    return {
        f"graph search, {K} asked": lambda q: index.search(q, K),
        f"graph search, its width ({width}) asked": lambda q: index.search(q, width),
        "scored on the table's rows": lambda q: index_top(index, q, K, width, table.vectors),
        "scored on the graph's rows": lambda q: index_top(index, q, K, width, table.scored_rows),
    }


def same_answers(table: Table, queries: np.ndarray) -> None:
    """Refuse to time scorings that answer differently."""
    index, width = table.index, table.search_width
    assert index is not None and width is not None
    for batch in BATCHES:
        for start in range(0, min(len(queries), 64 * batch), batch):
            q = queries[start : start + batch]
            mapped = index_top(index, q, K, width, table.vectors)
            own = index_top(index, q, K, width, table.scored_rows)
            if not all(np.array_equal(a, b) for a, b in zip(mapped, own, strict=True)):
                raise SystemExit(f"the two scorings differ on queries {start}..{start + batch}")


def per_query_us(call: Callable[[np.ndarray], object], queries: np.ndarray, batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(queries) - batch + 1, batch):
        call(queries[start : start + batch])
    return (time.perf_counter() - started) / (len(queries) // batch * batch) * 1e6


def measure(table: Table, queries: np.ndarray, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Microseconds a query, per batch size and case, one figure a round."""
    timed = cases(table)
    names = list(timed)
    out: dict[str, dict[str, list[float]]] = {str(b): {name: [] for name in names} for b in BATCHES}
    for round_ in range(rounds):
        for batch in BATCHES:
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                out[str(batch)][name].append(per_query_us(timed[name], queries, batch))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--table", default=TABLE)
    parser.add_argument("--queries", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scoring.json")
    args = parser.parse_args(argv)
    faiss.omp_set_num_threads(1)  # the searcher's default (EMBEDDING_THREADS 1)
    load_start = machine()["load_average"]
    table = Table.load(args.data_dir / args.table, checksums=False)
    rows = np.random.default_rng(0).integers(0, min(table.rows, 50_000), args.queries)
    queries = np.ascontiguousarray(table.vectors[rows], dtype=np.float32)
    same_answers(table, queries)
    figures = measure(table, queries, args.rounds)
    result: dict[str, Any] = {
        "machine": machine(),
        "load_average_start": load_start,
        "table": args.table,
        "ef_search": table.search_width,
        "queries": args.queries,
        "rounds": args.rounds,
        "us_per_query": figures,
    }
    for batch, by_case in figures.items():
        for name, values in by_case.items():
            rounds = ", ".join(f"{v:.1f}" for v in values)
            print(f"batch {batch:>2}  {name:<40} {median(values):7.1f} us a query (rounds {rounds})")
    print(f"load average {load_start} at the start, {result['machine']['load_average']} at the end")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
