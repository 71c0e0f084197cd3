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
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from index.engine.analogy import analogy_top
from index.engine.diagnostics import analogy_scores
from index.engine.filters import RowSet
from index.engine.hybrid import DocumentSearch, Hit
from index.engine.hybrid import run as run_documents
from index.engine.keyword import KeywordIndex
from index.engine.knn import Hits, Neighbor
from index.engine.lookup import NEIGHBOURHOOD, SUGGESTION_POOL, best_suggestions, ranked_candidates
from index.engine.table import (
    AnalogySearch,
    Answers,
    Method,
    Search,
    SearchOptions,
    Table,
    VectorSearch,
    check_page,
    one_version,
)
from index.errors import ArtifactError, InvalidQuery, counted
from index.store import artifact, shardmap
from index.store.payload import KIND, Payload, sort_ids
from index.store.tokens import Tokens

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from index.lazy import pa


def merge(lists: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of several ranked lists of (rows, scores): by score, equal scores by row."""
    rows = np.concatenate([np.zeros(0, dtype=np.int64), *(np.asarray(r, dtype=np.int64) for r, _ in lists)])
    scores = np.concatenate([np.zeros(0, dtype=np.float64), *(np.asarray(s, dtype=np.float64) for _, s in lists)])
    order = np.lexsort((rows, -scores))[:k]
    return rows[order], scores[order]


class _Appended:
    """A table's unit rows with a question's unit vectors after them (row ``rows + i`` is ``extra[i]``): what
    ``analogy_top`` reads of a table (runs of its rows, and rows by id)."""

    def __init__(self, vectors: np.ndarray, extra: np.ndarray) -> None:
        self.rows, self.base, self.extra = len(vectors), vectors, extra

    def __len__(self) -> int:  # the table's own rows: those an analogy's answers are found among
        return self.rows

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):  # a run of the table's own rows
            return np.asarray(self.base[key])
        ids = np.asarray(key, dtype=np.int64)
        out = np.empty((len(ids), self.extra.shape[1]), dtype=np.float32)
        mine = ids < self.rows
        out[mine] = self.base[ids[mine]]
        out[~mine] = self.extra[ids[~mine] - self.rows]
        return out


class _Question:
    def __init__(self, vectors: _Appended) -> None:
        self.vectors = vectors


def analogy_part(table: Table, words: np.ndarray, k: int, method: Method) -> list[Neighbor]:
    """The ``k`` best of ``table``'s rows for an analogy whose words' unit rows ``words`` (a, b, c: float32, rows
    of the whole table, which may lie on another shard) are given: every row scored as ``analogy_top`` scores it
    (a row's score depends only on that row and the three words' rows), ties by row. A shard's part of a sharded
    table's analogy; the words' own rows are not left out here (the merge leaves them out)."""
    words = np.asarray(words, dtype=np.float32)
    if words.shape != (3, table.dim):
        raise InvalidQuery(f"the analogy's words need {table.dim} values each (table {table.name!r})")
    if method == "3cosadd" and np.linalg.norm(words[1].astype(np.float64) + words[2] - words[0]) < 1e-6:
        raise InvalidQuery("the analogy's b + c - a is zero: it has no direction")
    n = table.rows
    view = cast(Any, _Question(_Appended(table.vectors, words)))
    a, b, c = (np.array([n + i], dtype=np.int64) for i in range(3))
    ids, scores = analogy_top(view, a, b, c, min(k, n), method, n)
    kept = ids[0] >= 0
    return list(zip(ids[0][kept].tolist(), scores[0][kept].tolist(), strict=True))


def whole_rows(table: Table) -> np.ndarray:
    """Each row's row in the whole table: a shard's from the file its import wrote beside it, read at its load
    (``Table.in_whole``), any other table's its own."""
    if table.in_whole is not None:
        return table.in_whole
    return table.cached("whole_rows", lambda: np.arange(table.rows, dtype=np.int64))


def local_rows(table: Table, rows: Sequence[int]) -> np.ndarray:
    """The table's own rows of those of the whole table's ``rows`` it holds (a shard holds some, any other table
    every row of its own)."""
    whole = whole_rows(table)
    wanted = np.asarray([row for row in rows if 0 <= row <= np.iinfo(np.int64).max], dtype=np.int64)
    at = np.searchsorted(whole, wanted)  # a shard's rows keep the whole table's order
    held = at < len(whole)
    held[held] = whole[at[held]] == wanted[held]
    return at[held]


def expectation_part(
    table: Table, words: np.ndarray, expected: np.ndarray, method: Method, leave_out: Sequence[int]
) -> tuple[int, float, float | None]:
    """A table's part of the rank of an analogy's expected answer, as ``diagnostics.analogy_expectations`` scores
    the whole table's rows for the words' unit rows ``words`` (a, b, c) and the expected answer's unit row
    ``expected`` (rows of the whole table, which may lie on other shards): how many of its rows score strictly
    higher than the expected answer, that score, and its best row's score (None: no row left); the whole table's
    rows ``leave_out`` (a, b, c and the expected answer) are left out of both. Each row, and the answer's row given,
    is scored as the whole table scores it (``diagnostics.analogy_scores``)."""
    words = np.asarray(words, dtype=np.float32)
    expected = np.asarray(expected, dtype=np.float32).reshape(1, -1)
    if words.shape != (3, table.dim) or expected.shape != (1, table.dim):
        raise InvalidQuery(f"the analogy's words and expected answer need {table.dim} values each")
    scores = analogy_scores(words[None], table.vectors[: table.rows], method)[0]
    scores[local_rows(table, leave_out)] = -np.inf
    mine = float(analogy_scores(words[None], expected, method)[0, 0])
    best = float(scores.max()) if len(scores) else -np.inf
    return int(np.count_nonzero(scores > mine)), mine, best if np.isfinite(best) else None


def suggestion_part(table: Table, text: str, limit: int = 5) -> dict[str, list[tuple[str, int]]]:
    """A table's part of the whole table's suggestions for ``text`` (``Lookup.suggest``), each label with its row
    in the whole table: ``pool``, its best by spelling among the whole table's first ``SUGGESTION_POOL`` rows
    (equal scores by row, so that every shard's best hold the whole's); ``below`` and ``above``, its tokens that
    sort just before ``text`` case-folded and from it on."""
    whole, tokens = whole_rows(table), table.tokens
    head = int(np.searchsorted(whole, SUGGESTION_POOL))
    pool = table.cached("suggestion_pool", lambda: tokens[:head])
    best = [(label, int(whole[at])) for label, _, at in ranked_candidates(text, pool, limit)]
    below, above = tokens.folded_sides(text, NEIGHBOURHOOD)
    return {
        "pool": best,
        "below": [(tokens[i], int(whole[i])) for i in below],
        "above": [(tokens[i], int(whole[i])) for i in above],
    }


def merged_suggestions(text: str, parts: Sequence[dict[str, Any]], limit: int = 5) -> list[str]:
    """The whole table's suggestions for ``text`` from every shard's :func:`suggestion_part`: the pool's candidates
    in row order, then the whole table's case-folded neighbourhood (the shards' sides merged by case-folded label,
    then row), ranked as ``Lookup.suggest`` ranks the whole table's pool and neighbourhood."""
    pool = sorted({(int(row), str(label)) for part in parts for label, row in part["pool"]})

    def side(name: str) -> list[str]:
        near = sorted((str(label).casefold(), int(row), str(label)) for part in parts for label, row in part[name])
        return [label for _, _, label in near]

    candidates = [label for _, label in pool] + side("below")[-NEIGHBOURHOOD:] + side("above")[:NEIGHBOURHOOD]
    return best_suggestions(text, candidates, limit)


WRITE_TOTALS = ("written", "deleted", "log_bytes")  # what a sharded table's ``writes`` sums over its shards


def merged_writes(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A sharded table's ``writes`` from its shards' (in shard order): :data:`WRITE_TOTALS` summed, and each
    shard's own under ``shards``."""
    return {**{key: sum(part[key] for part in parts) for key in WRITE_TOTALS}, "shards": list(parts)}


def furthest_fallback(fallbacks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of the shards' ``index.fallback`` (each the index its build could not make), the shard's furthest from its
    index: one that could not build it (``unbuildable``, no recall) before the lowest recall. The table's summary
    and a compaction's line both name it."""
    return min(fallbacks, key=lambda fallback: fallback.get("recall_at_10", -1.0))


def merged_index(indexes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A sharded table's ``index`` from its shards' (in shard order): the first shard's where every shard has an
    index of one kind (their search parameters, each tuned on its shard's rows, may differ); else, where shards
    built different ones (a compaction that took exact search in place of one shard's index), ``{"kind": "mixed",
    "shards": [...]}``, each shard's."""
    if len({index.get("kind") for index in indexes}) == 1:
        return indexes[0]
    return {"kind": "mixed", "shards": list(indexes)}


def merged_summary(name: str, parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary of the sharded table ``name`` from its shards' summaries ``parts`` (in shard order), as
    ``Table.summary`` gives each in one process or a shard's server answers it (``GET /v1/tables/<shard>``):

    - ``rows`` summed; ``shards`` their count and rows; ``documents.fields`` each field's ``non_null`` summed (each
      document is on one shard); ``index`` by :func:`merged_index`; ``dim``, ``kind``, ``source`` and the rest of
      ``documents`` the first shard's (every shard's, from one import);
    - ``recall_at_10`` the lowest of the shards' (each measured on its own rows when it was built; None if one has
      none), ``built_at`` the latest;
    - ``metadata_columns`` empty; no ``model``, ``transformer`` or ``index_deferred``; ``index_fallback`` by
      :func:`furthest_fallback` among the shards' that have one;
    - what a server adds, when the parts carry it: ``approximate`` if any shard's index is, ``has_tokenizer``
      false (a sharded table tokenizes nothing), ``writes`` by :func:`merged_writes`."""
    first = parts[0]
    recalls = [part.get("recall_at_10") for part in parts]
    built = [part["built_at"] for part in parts if part.get("built_at")]
    out: dict[str, Any] = {
        "name": name,
        "rows": sum(part["rows"] for part in parts),
        "dim": first["dim"],
        "kind": first["kind"],
        "index": merged_index([part["index"] for part in parts]),
        "recall_at_10": None if None in recalls else min(r for r in recalls if r is not None),
        "source": first["source"],
        "metadata_columns": [],
        "built_at": max(built, default=None),
    }
    if "documents" in first:
        fields = {
            field: {**info, "non_null": sum(part["documents"]["fields"][field]["non_null"] for part in parts)}
            for field, info in first["documents"]["fields"].items()
        }
        out["documents"] = {**first["documents"], "fields": fields}
    if fallbacks := [part["index_fallback"] for part in parts if part.get("index_fallback")]:
        out["index_fallback"] = furthest_fallback(fallbacks)
    out["shards"] = {"count": len(parts), "rows": [part["rows"] for part in parts]}
    if "approximate" in first:
        out["approximate"] = any(part["approximate"] for part in parts)
    if "has_tokenizer" in first:
        out["has_tokenizer"] = False
    if all("writes" in part for part in parts):
        out["writes"] = merged_writes([part["writes"] for part in parts])
    return out


def is_sharded(directory: Path) -> bool:
    """Whether the table in ``directory`` is a sharded table (its manifest says so)."""
    return shardmap.is_sharded(artifact.read_manifest(directory))


def page(hits: list[Neighbor], offset: int, min_score: float | None) -> list[Neighbor]:
    """Hits from ``offset``, those below ``min_score`` left out (``Plan.finish``'s rule)."""
    floor = -np.inf if min_score is None else min_score
    return [hit for hit in hits[offset:] if hit[1] >= floor]


class _Rows:
    """The unit rows (or norms) of the whole table, read from their shards: ``rows[i]``, ``rows[[i, j]]``."""

    def __init__(self, table: ShardedTable, parts: Sequence[np.ndarray], dim: int | None) -> None:
        self._table, self._parts = table, list(parts)
        self.shape = (len(table.assignment),) if dim is None else (len(table.assignment), dim)
        self.dtype = np.dtype(np.float32)
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Every row, gathered (``np.asarray`` of the whole table's rows: a layout's)."""
        whole = self[slice(None)]
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __getitem__(self, rows: Any) -> np.ndarray:
        if isinstance(rows, (int, np.integer)):
            shard, local = self._table.shard_of(int(rows))
            return np.asarray(self._parts[shard][local])
        if isinstance(rows, slice):  # a run of rows (a layout's, a diagnostic's blocks): gathered from the shards
            rows = np.arange(*rows.indices(len(self)))
        wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty((len(wanted), *self.shape[1:]), dtype=np.float32)
        owner = self._table.assignment[wanted]
        for s, part in enumerate(self._parts):
            mine = owner == s
            if mine.any():
                out[mine] = part[self._table.local[wanted[mine]]]
        return out


class _Keyword(KeywordIndex):
    """The shards' keyword indexes as one (``KeywordIndex.search``'s answer, in the whole table's rows)."""

    def __init__(self, table: ShardedTable, first: KeywordIndex) -> None:  # the shards' indexes are mapped already
        self._table = table
        self.directory = table.directory
        self.info = table.manifest.get("keyword_statistics") or first.info
        self.tokenizer = first.tokenizer
        self.k1, self.b = first.k1, first.b
        self.rows = table.rows
        self.whole = None  # its postings are all the whole table's: its own statistics are the whole's
        self._lengths: tuple[np.ndarray | None] | None = None  # gathered when first read

    @property
    def lengths(self) -> np.ndarray | None:  # type: ignore[override]
        """Each row's word count: its shards' kept lengths in the whole table's rows (None when a shard has none,
        built before they were kept), gathered on the first search beside writes (not under a
        ``functools.cached_property``'s lock, one for every table before Python 3.12)."""
        if self._lengths is None:
            self._lengths = (self._gathered_lengths(),)
        return self._lengths[0]

    def _gathered_lengths(self) -> np.ndarray | None:
        table = self._table
        kept = [shard.keyword.lengths for shard in table.shards if shard.keyword is not None]
        found = [part for part in kept if part is not None]
        if len(found) < len(table.shards):
            return None
        lengths = np.zeros(table.rows, dtype=np.int32)
        for rows, part in zip(table.global_rows, found, strict=True):
            lengths[rows] = part
        return lengths

    def term_ids(self, terms: Any) -> np.ndarray:
        raise InvalidQuery("a sharded table's keyword index is its shards'")

    def document_counts(self, terms: Any) -> np.ndarray:
        """How many documents of the whole table hold each word: its shards' together."""
        counts = np.zeros(len(terms), dtype=np.int64)
        for shard in self._table.shards:
            if shard.keyword is not None:
                counts += shard.keyword.document_counts(terms)
        return counts

    def postings_of(self, words: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """The whole table's rows holding each of ``words`` and their scores: every shard's (scored with the whole
        table's statistics), in the whole table's rows."""
        rows: list[list[np.ndarray]] = [[np.zeros(0, dtype=np.int64)] for _ in words]
        data: list[list[np.ndarray]] = [[np.zeros(0, dtype=np.float64)] for _ in words]
        for s, shard in enumerate(self._table.shards):
            if shard.keyword is not None:
                for i, (local, scores) in enumerate(shard.keyword.postings_of(words)):
                    rows[i].append(self._table.global_rows[s][local])
                    data[i].append(scores)
        return [(np.concatenate(r), np.concatenate(d)) for r, d in zip(rows, data, strict=True)]

    def holds(self, text: str) -> bool:
        return any(shard.keyword is not None and shard.keyword.holds(text) for shard in self._table.shards)

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


def _whole_payload(
    directory: Path, info: dict[str, Any], shards: Sequence[Table], rows: Sequence[np.ndarray]
) -> Payload:
    """The shards' payloads as the whole table's (its rows in order), gathered in memory."""
    batches = []
    for shard in shards:
        assert shard.payload is not None
        batches.append(shard.payload._batch)
    joined = pa.Table.from_batches(batches).combine_chunks()
    at = np.empty(sum(map(len, rows)), dtype=np.int64)  # each row's place among the joined shards' rows
    at[np.concatenate(rows)] = np.arange(len(at))
    batch = joined.take(pa.array(at)).to_batches()[0] if len(at) else joined.to_batches()[0]
    ids = batch.column(0)
    order = sort_ids(ids)
    lookup = pa.RecordBatch.from_arrays([ids.take(pa.array(order)), pa.array(order, pa.int64())], names=["id", "row"])
    return Payload(directory, info, batch, lookup)


class ShardedTable(Table):
    """A sharded documents table's shards, loaded in one process and searched as the whole table: a ``Table``
    whose rows are read from their shards and whose searches are the shards' answers merged. Its ids, text and
    fields are gathered in memory in the whole table's order (for filters and answers); its rows stay mapped."""

    def __init__(self, shard_map: shardmap.ShardMap, shards: Sequence[Table]) -> None:
        if len(shards) != shard_map.count:
            raise InvalidQuery(f"{len(shards)} shards for a map of {shard_map.count}")
        self.map = shard_map
        self.shards = list(shards)
        self.assignment = np.asarray(shard_map.assignment, dtype=np.int64)
        self.global_rows = [shard_map.rows_of(s) for s in range(shard_map.count)]
        self.local = np.empty(len(self.assignment), dtype=np.int64)  # each row's row in its shard
        for rows in self.global_rows:
            self.local[rows] = np.arange(len(rows))
        manifest = shard_map.manifest
        dim = int(manifest["dim"])
        vectors = cast(np.ndarray, _Rows(self, [shard.vectors for shard in shards], dim))
        norms = cast(np.ndarray, _Rows(self, [shard.norms for shard in shards], None))
        of_documents = manifest.get("of", KIND) == KIND
        payload = (
            _whole_payload(shard_map.directory, manifest[KIND], shards, self.global_rows) if of_documents else None
        )
        keyword = next((shard.keyword for shard in shards if shard.keyword is not None), None)
        super().__init__(shard_map.directory, manifest, vectors, norms, Tokens(shard_map.directory), None)
        self.payload = payload
        self.keyword = None if keyword is None else _Keyword(self, keyword)

    @classmethod
    def load(cls, directory: Path, checksums: bool = True) -> ShardedTable:
        """Every shard of the sharded table in ``directory`` (each checked as ``Table.load`` checks a table), the
        whole table's keyword statistics read once for all of them; one version whole, however many are published
        meanwhile (``one_version``)."""
        directory = Path(directory)
        return one_version(directory, lambda: cls._load_shards(directory, checksums))

    @classmethod
    def _load_shards(cls, directory: Path, checksums: bool) -> ShardedTable:
        result = shardmap.verify(directory, checksums)
        if not result.ok:
            raise ArtifactError(f"table {directory.name!r} disagrees with its manifest: " + "; ".join(result.problems))
        shard_map = shardmap.read(directory)
        whole = shardmap.table_keyword(directory, shard_map.manifest, checked=checksums)
        shards = [
            Table.load_with(shard_map.shard_directory(s), checksums, whole, shard_map.place(s))
            for s in range(shard_map.count)
        ]
        return cls(shard_map, shards)

    @property
    def kind(self) -> str:
        return str(self.manifest.get("of", KIND))  # "documents", or "words": a word table's shards

    @property
    def approximate(self) -> bool:
        return any(shard.approximate for shard in self.shards)  # its searches are its shards'

    def summary(self) -> dict[str, Any]:
        """The table's summary, from its shards' (:func:`merged_summary`: what a front, which sees only the shards'
        summaries, says too)."""
        return merged_summary(self.name, [shard.summary() for shard in self.shards])

    def limit(self, options: SearchOptions) -> int:
        if options.restrict is not None:
            raise InvalidQuery("restrict (the first rows of a table) is not for a sharded table")
        return self.rows

    def shard_of(self, row: int) -> tuple[int, int]:
        """(shard, its row) of the whole table's ``row``."""
        if not 0 <= row < self.rows:
            raise InvalidQuery(f"row {row} is outside the table's {counted(self.rows, 'row')}")
        return int(self.assignment[row]), int(self.local[row])

    def ids(self, rows: Sequence[int]) -> list[Any]:
        """The document ids of the whole table's ``rows``."""
        return self.documents("it has no document ids").ids(rows)

    def _local_exclude(self, exclude: Sequence[Collection[int]], shard: int) -> list[Collection[int]]:
        out: list[Collection[int]] = []
        for rows in exclude:
            found = np.fromiter(rows, dtype=np.int64, count=len(rows))
            out.append(set(self.local[found[self.assignment[found] == shard]].tolist()))
        return out

    def is_light(self, search: Search) -> bool:
        return False  # every search is the shards' searches and a merge: a worker thread's

    def knn(
        self, queries: np.ndarray, k: int, options: SearchOptions = SearchOptions(), rows: RowSet | None = None
    ) -> Hits:
        """Top-``k`` (scores, rows) of the whole table: the shards' merged."""
        answers = self.run(VectorSearch(np.asarray(queries, dtype=np.float32), k, (), options, rows))
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        for q, hits in enumerate(answers):
            ids[q, : len(hits)] = [row for row, _ in hits]
            scores[q, : len(hits)] = [score for _, score in hits]
        return scores, ids

    def run(self, search: Search) -> Answers:
        """The whole table's answer to ``search``: every shard's ``offset + k`` best, merged, paged."""
        if isinstance(search, AnalogySearch):
            if search.method != "3cosadd":
                return self._analogies(search)
            search = self._analogy_search(search)
        check_page(search.k, search.offset)
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

    def _analogy_search(self, search: AnalogySearch) -> VectorSearch:
        """3CosAdd as the search for the normalised b + c - a, a, b and c left out (its scores are those cosines, as
        the whole table's)."""
        queries = np.vstack([self.mean_query([b, c], [a]) for a, b, c in search.questions])
        return VectorSearch(queries, search.k, [set(q) for q in search.questions], search.options)

    def _analogies(self, search: AnalogySearch) -> Answers:
        """3CosMul: each shard's ``k + 3`` best for the question's three rows (:func:`analogy_part`, the whole
        table's arithmetic), merged by score, then row, a, b and c left out."""
        self.limit(search.options)
        answers: Answers = []
        for question in search.questions:
            words = self.vectors[list(question)]
            lists = []
            for s, shard in enumerate(self.shards):
                hits = analogy_part(shard, words, search.k + 3, search.method)
                local = np.array([row for row, _ in hits], dtype=np.int64)
                lists.append((self.global_rows[s][local], np.array([score for _, score in hits])))
            rows, scores = merge(lists, search.k + 3)
            kept = [(r, x) for r, x in zip(rows.tolist(), scores.tolist(), strict=True) if r not in question]
            answers.append(kept[: search.k])
        return answers

    def search_documents(self, search: DocumentSearch) -> list[list[Hit]]:
        """A documents search (vector, keyword or hybrid; filters, paging, floor, diversity) of the whole table."""
        return run_documents(self, search)
