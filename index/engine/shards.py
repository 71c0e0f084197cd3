"""A sharded documents table searched as one: each shard answers, the answers merge into the whole table's.

Rows here are the WHOLE table's rows (a shard's row ``i`` is the table's row ``ShardMap.rows_of(s)[i]``: the
shards keep the import's order), so a merged answer names the rows the unsharded table would.

- vector: each shard gives its ``offset + k`` best (offset 0, no score floor), each with its own rows left out
  and its own part of the filter; the lists merge by cosine (:func:`merge`), then the page and ``min_score``
  are taken, as ``Table.run`` takes them. A cosine is the same number in a shard as in the whole table.
- keyword: every shard's keyword index was built with the whole table's BM25 statistics
  (``index.build.shard``), so its scores are the whole table's; the lists merge by score.
- hybrid and diversity: :func:`index.engine.hybrid.run` over a :class:`ShardedTable`, whose vector and keyword
  lists are the merged ones: Reciprocal Rank Fusion of the merged lists, Maximal Marginal Relevance over the
  merged candidates (their rows read from their shards), then the page and the floor.

Equal scores go by row, as in the unsharded table; a shard's best ``n`` are its best ``n`` by (score, row), so
the merge of the shards' lists is the whole table's list.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from index.engine.filters import RowSet
from index.engine.hybrid import DocumentSearch, Hit
from index.engine.hybrid import run as run_documents
from index.engine.knn import Neighbor
from index.engine.search import Answers, SearchOptions, VectorSearch
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store import shardmap


def merge(lists: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of several ranked lists of (rows, scores): by score, equal scores by row."""
    rows = np.concatenate([np.zeros(0, dtype=np.int64), *(np.asarray(r, dtype=np.int64) for r, _ in lists)])
    scores = np.concatenate([np.zeros(0, dtype=np.float64), *(np.asarray(s, dtype=np.float64) for _, s in lists)])
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


def page(hits: list[Neighbor], offset: int, min_score: float | None) -> list[Neighbor]:
    """Hits from ``offset``, those below ``min_score`` left out (``Plan.finish``'s rule)."""
    floor = -np.inf if min_score is None else min_score
    return [hit for hit in hits[offset:] if hit[1] >= floor]


class _Rows:
    """The unit rows of the whole table's rows, read from their shards (``table.vectors[rows]``)."""

    def __init__(self, table: ShardedTable) -> None:
        self._table = table

    def __getitem__(self, rows: Any) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty((len(rows), self._table.dim), dtype=np.float32)
        owner = self._table.assignment[rows]
        for s, shard in enumerate(self._table.shards):
            mine = owner == s
            if mine.any():
                out[mine] = shard.vectors[self._table.local[rows[mine]]]
        return out


class _Keyword:
    """The shards' keyword indexes as one (``KeywordIndex.search``'s answer, in the whole table's rows)."""

    def __init__(self, table: ShardedTable) -> None:
        self._table = table

    def search(self, texts: Sequence[str], k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        table = self._table
        if k < 1:
            raise InvalidQuery(f"k must be at least 1, not {k}")
        if allowed is not None and np.asarray(allowed).shape != (table.rows,):
            raise InvalidQuery(f"allowed must be a boolean per row ({table.rows:,})")
        answers = []
        for s, shard in enumerate(table.shards):
            if shard.keyword is None:
                continue
            mine = None if allowed is None else np.asarray(allowed, dtype=bool)[table.global_rows[s]]
            answers.append((s, shard.keyword.search(texts, k, mine)))
        scores = np.full((len(texts), k), -np.inf, dtype=np.float32)
        ids = np.full((len(texts), k), -1, dtype=np.int64)
        for q in range(len(texts)):
            lists = []
            for s, (shard_scores, shard_ids) in answers:
                real = shard_ids[q] >= 0
                lists.append((table.global_rows[s][shard_ids[q][real]], shard_scores[q][real]))
            rows, best = merge(lists, k)
            scores[q, : len(rows)], ids[q, : len(rows)] = best, rows
        return scores, ids


class ShardedTable:
    """A sharded documents table's shards, loaded in one process and searched as the whole table."""

    def __init__(self, shard_map: shardmap.ShardMap, shards: Sequence[Table]) -> None:
        if len(shards) != shard_map.count:
            raise InvalidQuery(f"{len(shards)} shards for a map of {shard_map.count}")
        self.map = shard_map
        self.manifest = shard_map.manifest
        self.directory = shard_map.directory
        self.shards = list(shards)
        self.assignment = np.asarray(shard_map.assignment, dtype=np.int64)
        self.global_rows = [shard_map.rows_of(s) for s in range(shard_map.count)]
        self.local = np.empty(len(self.assignment), dtype=np.int64)  # each row's row in its shard
        for rows in self.global_rows:
            self.local[rows] = np.arange(len(rows))
        self.vectors = _Rows(self)
        self.keyword = _Keyword(self) if any(shard.keyword is not None for shard in shards) else None

    @classmethod
    def load(cls, directory: Path, checksums: bool = True) -> ShardedTable:
        """Every shard of the sharded table in ``directory`` (each checked as ``Table.load`` checks a table)."""
        shard_map = shardmap.read(Path(directory))
        return cls(shard_map, [Table.load(shard_map.shard_directory(s), checksums) for s in range(shard_map.count)])

    @property
    def name(self) -> str:
        return self.map.name

    @property
    def rows(self) -> int:
        return len(self.assignment)

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def kind(self) -> str:
        return "documents"

    def limit(self, options: SearchOptions) -> int:
        if options.restrict is not None:
            raise InvalidQuery("restrict (the first rows of a word table) is not for a sharded documents table")
        return self.rows

    def shard_of(self, row: int) -> tuple[int, int]:
        """(shard, its row) of the whole table's ``row``."""
        return int(self.assignment[row]), int(self.local[row])

    def row(self, row: int) -> np.ndarray:
        shard, local = self.shard_of(row)
        return np.asarray(self.shards[shard].vectors[local])

    def ids(self, rows: Sequence[int]) -> list[Any]:
        """The document ids of the whole table's ``rows``."""
        found = []
        for row in rows:
            shard, local = self.shard_of(int(row))
            payload = self.shards[shard].payload
            assert payload is not None
            found.append(payload.ids([local])[0])
        return found

    def filter(self, spec: Any) -> RowSet:
        """The whole table's rows passing the filter ``spec``: each shard's rows that pass."""
        mask = np.zeros(self.rows, dtype=bool)
        for s, shard in enumerate(self.shards):
            mask[self.global_rows[s]] = shard.filter(spec).mask
        return RowSet(mask)

    def _local_exclude(self, exclude: Sequence[Collection[int]], shard: int) -> list[Collection[int]]:
        out: list[Collection[int]] = []
        for rows in exclude:
            found = np.fromiter(rows, dtype=np.int64, count=len(rows))
            out.append(set(self.local[found[self.assignment[found] == shard]].tolist()))
        return out

    def run(self, search: VectorSearch) -> Answers:
        """The whole table's answer to ``search``: every shard's ``offset + k`` best, merged, paged."""
        if not isinstance(search, VectorSearch):
            raise InvalidQuery("a sharded table answers searches of documents only")
        if search.k < 1 or search.offset < 0:
            raise InvalidQuery("k must be at least 1 and offset at least 0")
        rows, options = search.rows, search.options
        self.limit(options)
        want = search.offset + search.k
        answers = []
        for s, shard in enumerate(self.shards):
            local_rows = None if rows is None else RowSet(rows.mask[self.global_rows[s]])
            exclude = self._local_exclude(search.exclude, s) if search.exclude else ()
            answers.append(shard.run(VectorSearch(search.queries, want, exclude, options, local_rows)))
        merged: Answers = []
        for q in range(len(search)):
            lists = []
            for s, answer in enumerate(answers):
                hits = answer[q]
                local = np.array([row for row, _ in hits], dtype=np.int64)
                lists.append((self.global_rows[s][local], np.array([score for _, score in hits])))
            best_rows, best_scores = merge(lists, want)
            hits = list(zip(best_rows.tolist(), best_scores.tolist(), strict=True))
            merged.append(page(hits, search.offset, search.min_score))
        return merged

    def search(self, search: DocumentSearch) -> list[list[Hit]]:
        """A documents search (vector, keyword or hybrid; filters, paging, floor, diversity) of the whole table."""
        return run_documents(self, search)
