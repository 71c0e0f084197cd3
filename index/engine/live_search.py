"""Keyword, hybrid and diverse search over a documents table's version and its delta, as one table.

:class:`LiveSource` is what ``index.engine.hybrid.run`` reads of a table (its rows, vectors, vector search and keyword
index) over the version's rows and the written documents: row ``table.rows + i`` is the ``i``-th written
document (write order), the version's deleted or replaced rows never answer. Its keyword index,
:class:`LiveKeyword`, scores BM25 with the statistics a fresh import of the live documents would have: their
count, their average length and each query word's document frequency, over the version's live rows and the
written documents. Only the query's words are scored: the version's postings of each word (its term frequency
recovered from the stored score, given the row's length and the version's statistics) and the written
documents' counts, cut by the table's own tokenizer. The arithmetic is ``index.engine.keyword.build``'s and bm25s's,
operation by operation, so scores and order equal a fresh import's.
A shard of a sharded table searched through a front scores with the whole table's statistics instead
(:meth:`LiveKeyword.scored_with`, ``index.engine.dfs``).
Mode hybrid's probe (whether a live document holds a word of its text) is a look-up, :meth:`LiveKeyword.holds`,
with the answer of a whole search of one hit.

The version's document lengths are read from its keyword index (``keyword_lengths.npy``, mapped); a table built
before they were kept has none, and the first search beside its delta cuts the version's text once (per process
and version) to count them. Each written document is cut once (:class:`WrittenWords`, kept across the delta's
changes while the document stays written).
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from index.engine.delta import Delta, Document, vector_search
from index.engine.filters import RowSet
from index.engine.keyword import (
    TEXTS_KEPT,
    KeywordIndex,
    Tokenizer,
    Tokens,
    best_positive,
    spend_postings,
    text_blocks,
)
from index.engine.knn import Neighbor
from index.engine.table import SearchOptions, Table, VectorSearch
from index.errors import InvalidQuery
from index.store.payload import contiguous

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from index.lazy import pa

Pair = tuple[int, int]  # (the version's, the live documents')


@dataclass(frozen=True)
class Statistics:
    """The whole table's BM25 statistics for a query's words: documents, words and each word's document
    frequency, each as (the version's, the live documents')."""

    documents: Pair
    words: Pair
    terms: tuple[tuple[str, Pair], ...]

    @classmethod
    def of(cls, documents: Pair, words: Pair, terms: dict[str, Pair]) -> Statistics:
        for name, (version, live) in (("documents", documents), ("words", words)):
            if min(version, live) < 0:
                raise InvalidQuery(f"keyword_statistics: {name} must not be negative")
        for word, (version, live) in terms.items():
            if not (0 <= version <= documents[0] and 0 <= live <= documents[1]):
                raise InvalidQuery(f"keyword_statistics: the documents holding {word!r} are not among the documents")
        return cls(documents, words, tuple(sorted(terms.items())))

    def frequency(self, word: str) -> Pair:
        """The document frequencies of ``word``; a word of the query the statistics lack is the request's fault."""
        found = dict(self.terms).get(word)
        if found is None:
            raise InvalidQuery(f"keyword_statistics: no document frequency for the query's word {word!r}")
        return found

    def average(self, live: bool) -> float:
        """The average document length, of the version's documents or the live ones."""
        documents, words = self.documents[live], self.words[live]
        return words / documents if documents else 0.0


def version_lengths(table: Table, index: KeywordIndex) -> np.ndarray:
    """Each version row's word count as the keyword index cut it: the index's own (``KeywordIndex.lengths``), else
    (a table built before they were kept) the version's text cut once per loaded table (``Table.cached``)."""
    if index.lengths is not None:
        return index.lengths
    return table.cached("version_lengths", lambda: _cut_lengths(table, index))


def _cut_lengths(table: Table, index: KeywordIndex) -> np.ndarray:
    """Each version row's word count, its text cut block by block by the index's tokenizer."""
    assert table.payload is not None
    texts = contiguous(table.payload.column(index.info["field"]))
    lengths = np.zeros(len(texts), dtype=np.int64)
    for start, stop in text_blocks(texts):
        tokens = index.tokenizer(texts.slice(start, stop - start))
        lengths[start:stop] = np.bincount(tokens.rows, minlength=stop - start)
    return lengths


@functools.lru_cache(maxsize=TEXTS_KEPT)
def cut_text(tokenizer: Tokenizer, text: str) -> Tokens:
    """The words of one text, kept for the last texts cut one at a time: a query's text is cut by the door's probe
    (:meth:`LiveKeyword.holds`), then by its search, each one tokenizer run otherwise. (Kept here rather than on the
    live index, which each change of the delta replaces.)"""
    tokens = tokenizer([text])
    tokens.rows.flags.writeable = False
    return tokens


class WrittenWords:
    """The written documents' word counts, each document cut once (kept while it stays written, across changes of
    the delta), the words numbered in a vocabulary of their own. Each cut document is an entry: its (word, count)
    pairs, a run of the flat arrays ``words`` and ``counts``; a change gathers its documents' runs in one step,
    reading no document one by one (the entries of documents no longer written are dropped once they are most)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.vocabulary: dict[str, int] = {}
        self.entries: dict[int, int] = {}  # by id(document)
        self.kept: list[Document] = []  # each entry's document, held: no other document takes its id meanwhile
        self.starts = self.sizes = self.lengths = np.zeros(0, dtype=np.int64)  # each entry's run, its word count
        self.words, self.counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        self.lock = threading.Lock()

    def of(self, written: list[Document]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(word, document, count) triples sorted by word then document, and each document's length."""
        with self.lock:
            found = list(map(self.entries.get, map(id, written)))
            new = [d for d, entry in zip(written, found, strict=True) if entry is None]
            if new:
                self._count(new)
            entries = np.fromiter(map(self.entries.__getitem__, map(id, written)), np.int64, len(written))
            if len(self.kept) > 2 * len(written):
                self._keep(written, entries)
                entries = np.arange(len(written), dtype=np.int64)
            sizes, lengths = self.sizes[entries], self.lengths[entries]
            pairs = _runs(self.starts[entries], sizes)
            words, counts = self.words[pairs], self.counts[pairs]
        documents = np.repeat(np.arange(len(written), dtype=np.int64), sizes)
        order = np.lexsort((documents, words))
        return words[order], documents[order], counts[order], lengths

    def _count(self, new: list[Document]) -> None:
        """Cut the ``new`` documents and add their entries."""
        tokens = self.tokenizer(pa.array([d.text for d in new], pa.string()))
        terms: list[str] = tokens.terms.to_pylist()
        vocabulary = self.vocabulary
        ids = np.fromiter((vocabulary.setdefault(t, len(vocabulary)) for t in terms), np.int64, len(terms))
        rows = np.asarray(tokens.rows, dtype=np.int64)
        pairs, counts = np.unique(rows * max(len(vocabulary), 1) + ids, return_counts=True)  # by document, word
        documents, words = np.divmod(pairs, max(len(vocabulary), 1))
        sizes = np.bincount(documents, minlength=len(new))
        first = len(self.kept)
        self.entries.update(zip(map(id, new), range(first, first + len(new)), strict=True))
        self.kept += new
        self.starts = np.concatenate([self.starts, len(self.words) + np.cumsum(sizes) - sizes])
        self.sizes = np.concatenate([self.sizes, sizes])
        self.lengths = np.concatenate([self.lengths, np.bincount(rows, minlength=len(new))])
        self.words = np.concatenate([self.words, words])
        self.counts = np.concatenate([self.counts, counts.astype(np.int32)])

    def _keep(self, written: list[Document], entries: np.ndarray) -> None:
        """Keep the entries of ``written`` only (``entries``, theirs), in its order."""
        sizes = self.sizes[entries]
        pairs = _runs(self.starts[entries], sizes)
        self.words, self.counts = self.words[pairs], self.counts[pairs]
        self.starts, self.sizes, self.lengths = np.cumsum(sizes) - sizes, sizes, self.lengths[entries]
        self.kept = list(written)
        self.entries = dict(zip(map(id, written), range(len(written)), strict=True))


def _runs(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The positions of the runs ``starts[i]`` to ``starts[i] + sizes[i]``, one after the other."""
    ends = np.cumsum(sizes)
    positions: np.ndarray = np.arange(ends[-1] if len(ends) else 0, dtype=np.int64)
    positions += np.repeat(starts - (ends - sizes), sizes)
    return positions


class LiveKeyword:
    """BM25 over the version's live rows and the written documents (``KeywordIndex.search``'s contract)."""

    def __init__(self, table: Table, delta: Delta) -> None:
        assert table.keyword is not None
        self.index = index = table.keyword
        self.tokenizer = index.tokenizer
        self.base = table.rows
        self.deleted = delta.deleted
        written = delta.written_in_order()
        self.rows = self.base + len(written)
        counts = delta.lasting("keyword", lambda: WrittenWords(index.tokenizer))
        self.vocabulary = counts.vocabulary
        self.words, self.documents, self.tf, self.written_lengths = counts.of(written)
        self.lengths = version_lengths(table, index)
        whole = index.whole  # a shard served alone: its version's scores were made with its whole table's
        self.old_average = whole.average_length if whole is not None else self.lengths.mean()
        everything = np.concatenate([self.lengths[~self.deleted], self.written_lengths])
        self.n = len(everything)
        self.average = everything.mean() if self.n else 0.0
        self.all_lengths = np.concatenate([self.lengths, self.written_lengths])
        self.word_counts = (
            int(self.lengths.sum()),
            int(everything.sum()),
        )  # the version's documents' and the live ones'
        self.statistics: Statistics | None = None

    def scored_with(self, statistics: Statistics | None) -> LiveKeyword:
        """This index scoring with ``statistics`` (a sharded table's whole, ``index.engine.dfs``) rather than its
        own documents'; refused when they hold fewer documents or words than this table's live ones."""
        if statistics is None:
            return self
        # A shard that keeps the whole table's statistics its version was scored with reads its stored scores
        # back with those, not with the version parts summed over the shards: while the replicas reload a
        # compaction, the other shards' parts may be another version's. The live parts are every version's alike.
        own = self.index.whole is not None
        if (not own and statistics.documents[0] < self.base) or statistics.documents[1] < self.n:
            raise InvalidQuery("keyword_statistics: fewer documents than this table holds")
        if (not own and statistics.words[0] < self.word_counts[0]) or statistics.words[1] < self.word_counts[1]:
            raise InvalidQuery("keyword_statistics: fewer words than this table's documents hold")
        other = copy.copy(self)
        other.statistics = statistics
        other.n, other.average = statistics.documents[1], statistics.average(True)
        if not own:
            other.old_average = statistics.average(False)
        return other

    def _written_postings(self, word: str) -> tuple[np.ndarray, np.ndarray]:
        """The written documents holding ``word`` (places in write order, ascending) and its count in each."""
        ident = self.vocabulary.get(word, -1)
        low, high = np.searchsorted(self.words, [ident, ident + 1]) if ident >= 0 else (0, 0)
        return self.documents[low:high], self.tf[low:high]

    def _version_postings(
        self, word: str, stored: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The version's live rows holding ``word`` and its count in each, recovered from its ``stored`` postings
        (``KeywordIndex.postings``, read when not given: rows and scores; a sharded table's: its shards', scored
        with its statistics)."""
        rows, data = self.index.postings(word) if stored is None else stored
        if not len(rows):
            return rows, np.zeros(0, dtype=np.int32)
        n, df = self.base, len(rows)
        if self.index.whole is not None:  # a shard's version: scored with its whole table's statistics at import
            whole = self.index.whole
            n, df = whole.documents, int(whole.of(pa.array([word], pa.string()))[0])
        elif self.statistics is not None:  # the same, summed over the shards by the front
            n, df = self.statistics.documents[0], self.statistics.frequency(word)[0]
            if df < len(rows):
                raise InvalidQuery(f"keyword_statistics: fewer documents hold {word!r} than in this table")
        idf = float(np.log(1 + (n - np.array([df]) + 0.5) / (np.array([df]) + 0.5)).astype(np.float32)[0])
        k1, b = self.index.k1, self.index.b
        norm = k1 * ((1 - b) + b * self.lengths[rows] / self.old_average)
        x = np.minimum(data / idf, 1 - 1e-12)
        tf = np.rint(norm * x / (1 - x)).astype(np.int32)
        live = ~self.deleted[rows]
        return rows[live], tf[live]

    def holds(self, text: str) -> bool:
        """Whether some live document holds a word of ``text`` as the index reads it: whether :meth:`search` finds it
        a hit, every live row allowed. A written document holding one does (its count is at least 1); else a
        version row not deleted whose count, recovered from its stored score, is above zero. Looked up word by word
        until one is held, without scoring a document."""
        terms = cut_text(self.tokenizer, text).terms
        words: list[str] = terms.to_pylist()
        if self._written_holding(words).any():
            return True
        counts = self.index.document_counts(terms).tolist()
        known = dict.fromkeys(word for word, count in zip(words, counts, strict=True) if count)
        return any((self._version_postings(word)[1] > 0).any() for word in known)

    def _written_holding(self, words: list[str]) -> np.ndarray:
        """How many written documents hold each of ``words``."""
        written = np.array([self.vocabulary.get(word, -1) for word in words], dtype=np.int64)
        held = np.searchsorted(self.words, written + 1) - np.searchsorted(self.words, written)
        return np.where(written >= 0, held, 0)

    def _documents_holding(self, terms: pa.Array, words: list[str]) -> int:
        """The documents holding each of ``words`` (``terms``), added up, a word counted each time it is given: the
        version's postings (a deleted or replaced document's too) and the written documents'."""
        return int(self.index.document_counts(terms).sum() + self._written_holding(words).sum())

    def search(self, texts: Sequence[str], k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        if k < 1:
            raise InvalidQuery(f"k must be at least 1, not {k}")
        m = len(texts)
        out_scores = np.full((m, k), -np.inf, dtype=np.float32)
        out_ids = np.full((m, k), -1, dtype=np.int64)
        # one query's text, which the door's probe has just cut
        tokens = cut_text(self.tokenizer, texts[0]) if m == 1 else self.tokenizer(pa.array(list(texts), pa.string()))
        words: list[str] = tokens.terms.to_pylist()
        spend_postings(self._documents_holding(tokens.terms, words))  # before any word's postings are read
        bounds = np.searchsorted(tokens.rows, np.arange(m + 1))
        k1, b = self.index.k1, self.index.b
        distinct = list(dict.fromkeys(words))
        stored = dict(zip(distinct, self.index.postings_of(distinct), strict=True))
        cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for q in range(m):
            query = words[bounds[q] : bounds[q + 1]]
            lists = []
            for word in query:
                if word not in cache:
                    rows, tf = self._version_postings(word, stored[word])
                    documents, written_tf = self._written_postings(word)
                    cache[word] = (
                        np.concatenate([rows, documents + self.base]),
                        np.concatenate([tf, written_tf]),
                    )
                if len(cache[word][0]):
                    lists.append(cache[word])
            if not lists:
                continue
            df = np.array([len(rows) for rows, _ in lists], dtype=np.int64)
            if self.statistics is not None:
                given = np.array([self.statistics.frequency(w)[1] for w in query if len(cache[w][0])])
                if (given < df).any():
                    raise InvalidQuery("keyword_statistics: fewer documents hold a word of the query than here")
                df = given.astype(np.int64)
            idf = np.log(1 + (self.n - df + 0.5) / (df + 0.5)).astype(np.float32)
            scores = np.zeros(self.rows, dtype=np.float32)
            for weight, (rows, tf) in zip(idf, lists, strict=True):
                tfc = tf / (k1 * ((1 - b) + b * self.all_lengths[rows] / self.average) + tf)
                np.add.at(scores, rows, (weight * tfc).astype(np.float32))
            if allowed is not None:
                scores[~allowed] = 0
            scores[: self.base][self.deleted] = 0
            best_scores, best_rows = best_positive(scores, k)
            out_scores[q, : len(best_rows)], out_ids[q, : len(best_rows)] = best_scores, best_rows
        return out_scores, out_ids


class _Rows:
    """The unit rows of the version and the written documents, by merged row number (``vectors[ids]``)."""

    def __init__(self, version: np.ndarray, written: np.ndarray) -> None:
        self.version = version
        self.written = written

    def __getitem__(self, ids: Any) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        base = len(self.version)
        out = np.empty((len(ids), self.version.shape[1]), dtype=np.float32)
        mine = ids < base
        out[mine] = self.version[ids[mine]]
        out[~mine] = self.written[ids[~mine] - base]
        return out


class LiveSource:
    """What ``index.engine.hybrid.run`` reads of a table, over the version's live rows and the written documents."""

    def __init__(self, table: Table, delta: Delta, statistics: Statistics | None = None) -> None:
        self.table = table
        self.delta = delta
        self.name = table.name
        _, written, _ = delta.matrix()
        self.rows = table.rows + len(written)
        self.dim = table.dim
        self.vectors = _Rows(table.vectors, written)
        self.statistics = statistics
        self._keyword: LiveKeyword | None = None

    @property
    def keyword(self) -> LiveKeyword | None:
        """The live keyword index, made when a search first reads it (a vector search, diverse or not, never does).
        Not a ``functools.cached_property``: before Python 3.12 its lock is one for every instance, so a slow first
        cut of one search's would hold up every other search beside writes."""
        table, delta = self.table, self.delta
        if self._keyword is None and table.keyword is not None:
            self._keyword = delta.cached("keyword", lambda: LiveKeyword(table, delta)).scored_with(self.statistics)
        return self._keyword

    def limit(self, options: SearchOptions) -> int:
        """Every row, written ones too; ``restrict``: the version's first rows (as ``vector_search`` reads it)."""
        return self.rows if options.restrict is None else self.table.limit(options)

    def run(self, search: VectorSearch) -> list[list[Neighbor]]:
        base = self.table.rows
        mask = np.ones(self.rows, dtype=bool) if search.rows is None else search.rows.mask
        version = VectorSearch(
            search.queries,
            search.k,
            search.exclude,
            search.options,
            RowSet(mask[:base]),
            offset=search.offset,
            min_score=search.min_score,
        )
        return vector_search(self.table, self.delta, version, mask[base:])
