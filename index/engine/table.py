"""The read-only query engine over one built table.

The command line, the benchmarks and the HTTP API ask a table the same way: a typed request and one call,
:meth:`Table.run`, wherever it runs. The requests are here too:

- :class:`SearchOptions`: which rows may answer (``restrict``, token kinds) and whether to skip the
  approximate index (``exact``);
- :class:`VectorSearch`: the ``k`` nearest rows to each of some unit query vectors, each with its own rows left
  out (gensim leaves a query's input words out of its answer), optionally only among the rows a filter passes
  (``index.engine.filters``), from an offset (paging) and above a score;
- :class:`AnalogySearch`: "a is to b as c is to ?" questions, by 3CosAdd or 3CosMul.

:meth:`Table.plan` splits a nearest-row search into its FAISS part and the rest (:class:`Plan`), for the
service's searcher thread.
The pieces live beside it: words to rows in ``lookup``, the kernels (unit query vectors, exact top-k, FAISS) in
``knn``, 3CosMul and the batched exact analogy search in ``analogy``. Answers follow gensim's
``KeyedVectors`` semantics:

- ``most_similar``: the mean of the unit rows (positive +1, negative -1), re-normalised; the inputs left out;
- ``most_similar_cosmul``: 3CosMul of Levy and Goldberg with cosines shifted to [0, 1];
- ``similarity``: cosine of two rows.

Exact search is a brute-force inner product over the memory-mapped unit rows; an approximate FAISS index
(HNSW, IVF, ...) is used when the table has one and the caller does not ask for ``exact``. An index of
compressed codes (IVF-PQ) is asked for ``rerank`` x k candidates, which are re-scored exactly on the
memory-mapped rows: answers keep exact cosines.
"""

from __future__ import annotations

import errno
import json
import logging
import mmap
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path
from typing import Any, Literal, TypedDict, TypeVar, Unpack

import faiss
import numpy as np

from index.engine.analogy import analogy_top, cosmul_top
from index.engine.filters import RowSet, evaluate
from index.engine.keyword import KeywordIndex
from index.engine.knn import (
    Hits,
    Neighbor,
    exact_knn,
    exact_knn_rows,
    filtered_params,
    filtered_width,
    graph_rows,
    index_knn,
    index_top,
    mean_query,
    pair_cosines,
    search_width,
    set_search_params,
    unit_queries,
)
from index.engine.lookup import Lookup, Resolved
from index.errors import ArtifactError, InvalidQuery, not_documents, shown
from index.store import artifact, shardmap
from index.store.metadata import load_metadata
from index.store.payload import Payload
from index.store.tokens import FLAG_CONTINUATION, FLAG_SPECIAL, FLAGS, TOKENIZER, WEIGHTS, Tokens

log = logging.getLogger(__name__)

DROP_SLACK = 16  # extra hits asked for when token kinds are left out
# A filtered search uses the approximate index when at least this fraction of the rows pass, else it scores the
# passing rows exactly (BENCHMARKS.md, "Filtered search", measures both sides of the line).
FILTER_INDEX_FRACTION = 0.05
FILTER_CACHE = 64  # filters whose passing rows a table keeps, the most recently used ...
FILTER_CACHE_BYTES = 32 << 20  # ... while their masks and row ids take at most this much
T = TypeVar("T")

__all__ = [
    "AnalogySearch",
    "Answers",
    "Method",
    "Neighbor",
    "Resolved",
    "Search",
    "SearchOptions",
    "Table",
    "VectorSearch",
]


# ---------------------------------------------------------------------------------- what the table is asked
Method = Literal["3cosadd", "3cosmul"]
METHODS: tuple[Method, ...] = ("3cosadd", "3cosmul")


@dataclass(frozen=True, slots=True)
class SearchOptions:
    """Which rows a search may answer with, and how it searches."""

    exact: bool = False  # brute force over the rows even when the table has an approximate index
    restrict: int | None = None  # only the first ``restrict`` rows (the most frequent, in frequency order)
    skip_special: bool = False  # leave out special tokens ([CLS], <s>, ...) of a model-token table
    whole_words_only: bool = False  # leave out word-piece continuations ("##ing") of a model-token table


class SearchKeywords(TypedDict, total=False):
    """:class:`SearchOptions` as keyword arguments, for the gensim-style methods of :class:`Table`."""

    exact: bool
    restrict: int | None
    skip_special: bool
    whole_words_only: bool


def check_page(k: Any, offset: Any) -> None:
    """A search's page, as any caller may give it: ``k`` hits, a whole number from 1, after ``offset`` skipped, a
    whole number from 0; else an InvalidQuery saying which."""
    for name, value, least in (("k", k, 1), ("offset", offset, 0)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < least:
            raise InvalidQuery(f"{name} must be a whole number of at least {least}, not {shown(value)}")


# Requests are made once per query on the hot path and never changed after: plain slotted classes (a frozen
# dataclass pays for every field it sets).
@dataclass(slots=True, eq=False)
class VectorSearch:
    """The ``k`` nearest rows to each unit query (``queries``: m x dim float32), ``exclude[i]`` left out."""

    queries: np.ndarray
    k: int
    exclude: Sequence[Collection[int]] = ()  # empty, or one collection per query
    options: SearchOptions = field(default_factory=SearchOptions)
    rows: RowSet | None = None  # only these rows may answer (a filter's), None: every row
    offset: int = 0  # hits skipped first (paging): the answer is hits offset .. offset + k - 1
    min_score: float | None = None  # hits scoring below it left out

    def __len__(self) -> int:
        return len(self.queries)

    def excluded(self, position: int) -> Collection[int]:
        return self.exclude[position] if self.exclude else ()


@dataclass(slots=True, eq=False)
class AnalogySearch:
    """For each question (a, b, c) of row ids: the ``k`` best d for "a is to b as c is to d", a, b, c left out."""

    questions: Sequence[tuple[int, int, int]]
    k: int
    method: Method = "3cosadd"
    options: SearchOptions = field(default_factory=SearchOptions)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidQuery(f"unknown analogy method {self.method!r}: use 3cosadd or 3cosmul")
        check_page(self.k, 0)

    def __len__(self) -> int:
        return len(self.questions)


Search = VectorSearch | AnalogySearch
Answers = list[list[Neighbor]]  # per query, its hits best first


LOAD_ATTEMPTS = 3  # of a load that versions published under the table's name meanwhile make load again
Loaded = TypeVar("Loaded")


def one_version(directory: Path, load: Callable[[], Loaded]) -> Loaded:
    """``load()`` of the table at ``directory``, which reads its files by their paths one after another: a version
    published under its name meanwhile (its directory exchanged, the older one deleted) would pair the manifest of
    one version with files of the other, or fail midway. So the directory there is the same one before and after
    ``load()``, or it is loaded again, the newer version whole; :class:`ArtifactError` when a version was published
    during each of ``LOAD_ATTEMPTS`` loads."""
    for _ in range(LOAD_ATTEMPTS):
        there = artifact.directory_identity(directory)
        try:
            loaded = load()
        except Exception:  # whatever failed, it failed on a version since replaced: loaded again
            if artifact.directory_identity(directory) == there:
                raise
            continue
        if artifact.directory_identity(directory) == there:
            return loaded
    raise ArtifactError(
        f"table {directory.name!r}: a new version was published during each of its {LOAD_ATTEMPTS} loads; load it "
        "again once it is published less often"
    )


def read_later(manifest: dict[str, Any]) -> list[str]:
    """The files of a table's version read after its load, when first asked for: its tokenizer, its token weights,
    its transformer's graph and its SIF component (those it has)."""
    sif = manifest.get("sif")
    return [TOKENIZER, WEIGHTS, artifact.GRAPH] + ([artifact.sif_file(sif)] if isinstance(sif, dict) else [])


class Table:
    """A loaded table: tokens, unit rows, their original norms and an optional FAISS index."""

    def __init__(
        self,
        directory: Path,
        manifest: dict[str, Any],
        vectors: np.ndarray,
        norms: np.ndarray,
        tokens: Tokens,
        index: faiss.Index | None,
        flags: np.ndarray | None = None,
        metadata: Mapping[str, Sequence[str]] | None = None,
        payload: Payload | None = None,
        keyword: KeywordIndex | None = None,
        in_whole: np.ndarray | None = None,
        place: shardmap.Place | None = None,
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self.vectors = vectors
        # Read on every search: plain attributes (a version's files never change).
        self.name = str(manifest["name"])
        self.rows = int(vectors.shape[0])
        self.dim = int(vectors.shape[1])
        # A documents table's record of the table that embedded its text at import (``--encoder``); None when its
        # vectors came with the documents.
        self.encoder_record: dict[str, Any] | None = (manifest.get("documents") or {}).get("encoder")
        self.norms = norms
        self.tokens = tokens
        self.index = index
        spec = manifest.get("index", {}).get("spec", {})
        # Candidates per answer re-scored on the rows (an index of codes: IVF-PQ); 1 for every other index.
        self.rerank = int(spec.get("rerank") or 1) if index is not None else 1
        self.search_width = search_width(index)  # an HNSW index's efSearch: a deeper search is widened
        self.scored_rows = graph_rows(index, vectors)  # the rows an index's candidates are scored on
        self.flags = flags
        self.metadata = metadata or {}
        self.payload = payload  # a documents table's ids, text and fields
        self.keyword = keyword  # a documents table's BM25 index of its text (None: no text)
        self.in_whole = in_whole  # a shard's: each row's row in its whole table (None: not a shard)
        self.place = place  # a shard's place in its sharded table, as loaded (None: not a shard)
        # The directory loaded (device, inode; one_version checks it is the same after the load as before): another
        # is in its place once a version is published there
        self.directory_id = artifact.directory_identity(directory)
        self._filters: OrderedDict[str, RowSet] = OrderedDict()
        self._filters_lock = threading.Lock()
        self._derived: dict[str, Any] = {}  # what callers derive from the table's files (see cached)
        self._derived_lock = threading.Lock()
        # The files read after the load (first text embedded, first tokenize), held open as this version's.
        self.opened = artifact.Opened(directory, read_later(manifest))
        # A transformer's texts lower-cased before its tokenizer (a table imported before the flag was read: not).
        lower_case = bool((manifest.get("transformer") or {}).get("do_lower_case", False))
        self.lookup = Lookup(self.name, tokens, self.opened, flags, self.kind == "tokens", self.byte_level, lower_case)

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, directory: Path, checksums: bool = True) -> Table:
        """Map a table read-only after checking its files against the manifest; a shard's place in its sharded table
        read from the manifest beside it (a table of a data directory has none: one look), within the load that
        :func:`one_version` checks, so that it is the loaded version's."""
        directory = Path(directory)
        return one_version(directory, lambda: cls._load_once(directory, checksums, None, shardmap.place(directory)))

    @classmethod
    def load_with(
        cls,
        directory: Path,
        checksums: bool = True,
        whole: shardmap.WholeKeyword | None = None,
        place: shardmap.Place | None = None,
    ) -> Table:
        """:meth:`load`, given a shard's whole table's keyword statistics (``whole``: ``KeywordIndex.open`` reads
        them otherwise) and its ``place`` when the loader of its sharded table read them already; one version whole,
        however many are published meanwhile (:func:`one_version`)."""
        directory = Path(directory)
        return one_version(directory, lambda: cls._load_once(directory, checksums, whole, place))

    @classmethod
    def _load_once(
        cls, directory: Path, checksums: bool, whole: shardmap.WholeKeyword | None, place: shardmap.Place | None
    ) -> Table:
        manifest = artifact.read_manifest(directory)
        if moved := artifact.column_major(directory, manifest):  # not a disagreement with the manifest
            raise ArtifactError(f"table {directory.name!r}: {moved}")
        result = artifact.verify(directory, checksums=checksums)
        if not result.ok:
            raise ArtifactError(f"table {directory.name!r} disagrees with its manifest: " + "; ".join(result.problems))
        manifest = artifact.read_manifest(directory)
        vectors = np.load(directory / artifact.VECTORS, mmap_mode="r")
        norms = np.load(directory / artifact.NORMS, mmap_mode="r")
        if (
            vectors.dtype != np.float32
            or vectors.ndim != 2
            or not vectors.flags.c_contiguous
            or norms.shape != (vectors.shape[0],)
        ):
            raise ArtifactError(
                f"table {directory.name!r}: vectors must be a row-major float32 matrix with one norm per row"
            )
        index = None
        index_info = manifest.get("index", {})
        if (directory / artifact.INDEX).is_file() and not index_info.get("exact", False):
            index = read_index(directory / artifact.INDEX)
            spec = index_info.get("spec", {})
            set_search_params(index, ef_search=spec.get("efSearch"), nprobe=spec.get("nprobe"))
            if index.ntotal != vectors.shape[0] or index.d != vectors.shape[1]:
                raise ArtifactError(f"table {directory.name!r}: index size disagrees with the vectors")
        if index is not None and index_info.get("spec", {}).get("rerank", 1) > 1:
            # Re-ranking reads a few scattered rows per query: no read-ahead around them, or a table bigger than
            # memory would be read in whole through its first thousand queries.
            advise_random(vectors)
        flags = np.load(directory / FLAGS, mmap_mode="r") if (directory / FLAGS).is_file() else None
        metadata = load_metadata(directory)
        # Plain ndarray views of the read-only maps: indexing a np.memmap costs microseconds on every query.
        vectors, norms = vectors.view(np.ndarray), norms.view(np.ndarray)
        flags = None if flags is None else flags.view(np.ndarray)
        payload = Payload.open(directory, manifest)
        keyword = KeywordIndex.open(directory, manifest, whole)
        in_whole = shardmap.read_whole_rows(directory, vectors.shape[0])
        tokens = Tokens(directory)
        return cls(
            directory, manifest, vectors, norms, tokens, index, flags, metadata, payload, keyword, in_whole, place
        )

    def serve_as(self, name: str) -> None:
        """Take the name it is served under (a table copied or renamed on disk keeps its built name inside)."""
        self.manifest["name"] = self.name = self.lookup.name = name

    # ---------------------------------------------------------------- properties
    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind", "words"))

    @property
    def approximate(self) -> bool:
        return self.index is not None

    @property
    def vectors_sha256(self) -> str | None:
        """The checksum its manifest records for its rows (what identifies an encoder's vectors)."""
        digest: str | None = self.manifest.get("files", {}).get(artifact.VECTORS, {}).get("sha256")
        return digest

    @property
    def sif_sha256(self) -> str | None:
        """The checksum of its SIF component (``embedding-index sif``), None when it has none."""
        sif = self.manifest.get("sif")
        if not isinstance(sif, dict):
            return None
        digest: str | None = self.manifest.get("files", {}).get(str(sif.get("file")), {}).get("sha256")
        return digest

    @property
    def graph_sha256(self) -> str | None:
        """A transformer table's checksum of its model graph (what identifies it as an encoder beside its rows);
        None for other tables."""
        graph = (self.manifest.get("transformer") or {}).get("graph")
        digest: str | None = self.manifest.get("files", {}).get(graph, {}).get("sha256") if graph else None
        return digest

    @property
    def byte_level(self) -> bool:
        """Whether labels are byte-level BPE strings (GPT-2, Llama 3: "Ġ" for a space, bytes as characters)."""
        scheme: str | None = self.manifest.get("model", {}).get("readable_labels", {}).get("scheme")
        return scheme == "byte-level"

    def summary(self) -> dict[str, Any]:
        """What a client needs to know about the table, without the per-file checksums."""
        m = self.manifest
        out = {
            "name": self.name,
            "rows": self.rows,
            "dim": self.dim,
            "kind": self.kind,
            "index": m.get("index", {}).get("spec", {"kind": "flat"}),
            "recall_at_10": m.get("index", {}).get("recall_at_10"),
            "source": m.get("source", {}),
            "metadata_columns": sorted(self.metadata),
            "built_at": m.get("built_at"),
        }
        if "model" in m:
            out["model"] = m["model"]
        if "transformer" in m:  # the model a worker loads on its first text: its graph's bytes, held in memory
            graph = m["transformer"].get("graph")
            out["transformer"] = {**m["transformer"], "graph_bytes": m.get("files", {}).get(graph, {}).get("bytes")}
        if self.payload is not None:
            info = self.payload.info
            out["documents"] = {key: info.get(key) for key in ("id_field", "id_type", "text_field", "fields")}
            out["documents"]["keyword"] = self.keyword is not None  # keyword and hybrid search
            out["documents"]["encoder"] = info.get("encoder")  # what embeds text queries (None: the client does)
        if deferred := m.get("index", {}).get("deferred"):
            out["index_deferred"] = deferred["spec"]  # exact search until this index is built
        if fallback := m.get("index", {}).get("fallback"):
            out["index_fallback"] = fallback  # the table's index its build could not make within its recall
        return out

    # ------------------------------------------------------------------- lookup (index.engine.lookup)
    def find(self, text: str) -> Resolved | None:
        return self.lookup.find(text)

    def resolve(self, text: str) -> Resolved:
        return self.lookup.resolve(text)

    def resolve_id(self, row: int) -> Resolved:
        return self.lookup.resolve_id(row)

    def suggest(self, text: str, limit: int = 5) -> list[str]:
        return self.lookup.suggest(text, limit)

    @property
    def has_tokenizer(self) -> bool:
        return self.lookup.has_tokenizer

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        return self.lookup.tokenize(text)

    def compose(self, text: str) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """A multi-token word as the normalised mean of its token rows: (1 x dim unit query, its tokens)."""
        pieces = self.lookup.pieces(text)
        return self.mean_query([i for i, _ in pieces]), pieces

    def row_metadata(self, row: int) -> dict[str, str]:
        """The metadata columns of one row (e.g. a projector table's "kind")."""
        return {name: values[row] for name, values in self.metadata.items()}

    def row(self, row: int, normalized: bool = False) -> np.ndarray:
        """The row as float32: unit length, or scaled back to its original norm."""
        unit = np.asarray(self.vectors[row], dtype=np.float32)
        return unit if normalized else unit * self.norms[row]

    def rows_of(self, rows: np.ndarray, normalized: bool = False) -> np.ndarray:
        """:meth:`row` of each of ``rows`` at once: (len(rows), dim) float32."""
        unit = np.asarray(self.vectors[rows], dtype=np.float32).reshape(len(rows), self.dim)
        return unit if normalized else unit * np.asarray(self.norms[rows])[:, None]

    # ------------------------------------------------------------------- derived
    def documents(self, use: str) -> Payload:
        """The payload of a documents table; for any other table an InvalidQuery that names ``use``."""
        if self.payload is None:
            raise not_documents(self.name, self.kind, use)
        return self.payload

    def cached(self, name: str, make: Callable[[], T]) -> T:
        """``make()`` once per loaded table (a version's files never change), shared by every caller; two first
        callers at once may both make it, and the first one kept is the answer."""
        with self._derived_lock:
            if name in self._derived:
                known: T = self._derived[name]
                return known
        made = make()
        with self._derived_lock:
            kept: T = self._derived.setdefault(name, made)
        return kept

    # ------------------------------------------------------------------- search
    def normalize_queries(self, vectors: np.ndarray) -> np.ndarray:
        """Validate raw query vectors (m, dim) and scale them to unit length."""
        queries = np.asarray(vectors, dtype=np.float64)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InvalidQuery(f"query vectors must have {self.dim} values each, got shape {list(queries.shape)}")
        return unit_queries(queries)

    def limit(self, options: SearchOptions) -> int:
        """How many rows a search with ``options`` may answer from (the first ones)."""
        if options.restrict is None:
            return self.rows
        if options.restrict < 1:
            raise InvalidQuery("restrict must be at least 1")
        return min(options.restrict, self.rows)

    def drop_bits(self, options: SearchOptions) -> int:
        """Bit mask of the token kinds ``options`` leave out (0: keep every row; always 0 without flags)."""
        if self.flags is None:
            return 0
        return (FLAG_SPECIAL if options.skip_special else 0) | (FLAG_CONTINUATION if options.whole_words_only else 0)

    def dropped(self, options: SearchOptions) -> np.ndarray | None:
        """A boolean per row for the token kinds ``options`` leave out (``None``: none)."""
        drop = self.drop_bits(options)
        return None if not drop or self.flags is None else (self.flags & drop) != 0

    # ------------------------------------------------------------------- search: the engine's one call
    def run(self, search: Search) -> Answers:
        """Answer one request: for each of its queries, the hits best first."""
        if isinstance(search, AnalogySearch):
            return self._analogies(search)
        return self.plan(search).run()

    def is_light(self, search: Search) -> bool:
        """Whether ``search`` is a search of the approximate index (3CosAdd analogies are one), well under a
        millisecond a query, rather than scoring every row (exact, restricted, 3CosMul) or filtered."""
        options = search.options
        light = self.approximate and not options.exact and options.restrict is None
        if isinstance(search, VectorSearch):
            return light and search.rows is None
        return light and search.method == "3cosadd"

    def light_plan(self, search: Search) -> Plan | None:
        """The :class:`Plan` of ``search`` when it is light (:meth:`is_light`), else None: a search the service's
        searcher runs."""
        return self.plan(search) if self.is_light(search) else None

    def knn(
        self, queries: np.ndarray, k: int, options: SearchOptions = SearchOptions(), rows: RowSet | None = None
    ) -> Hits:
        """Top-``k`` (scores, ids) for unit queries, among ``rows`` when given; exact brute force unless the
        approximate index applies."""
        limit = self.limit(options)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if rows is not None:
            return self._filtered_knn(queries, k, options, rows if limit == self.rows else rows.head(limit))
        k = min(k, limit)
        if options.exact or self.index is None or limit < self.rows:
            return exact_knn(queries, self.vectors[:limit], k)
        return index_knn(self.index, queries, k, self.search_width, self.vectors, self.rerank, self.scored_rows)

    def _filtered_knn(self, queries: np.ndarray, k: int, options: SearchOptions, rows: RowSet) -> Hits:
        """The ``k`` best of ``rows`` (all of them when fewer pass): from the approximate index told to keep to
        them when enough pass, exactly otherwise, and exactly again for any query the index left short."""
        k = min(k, rows.count)
        if k == 0:
            return np.zeros((len(queries), 0), dtype=np.float32), np.zeros((len(queries), 0), dtype=np.int64)
        index, params = self.index, None
        if index is not None and not options.exact and rows.fraction >= FILTER_INDEX_FRACTION:
            params = filtered_params(index, rows.selector(), rows.fraction, k)
        if index is None or params is None:
            return exact_knn_rows(queries, self.vectors, k, rows.ids, rows.mask)
        width = k if self.search_width is None else filtered_width(self.search_width, rows.fraction, k)
        scores, ids = index_top(index, queries, k, width, self.scored_rows, self.rerank, params)
        short = np.flatnonzero(ids[:, k - 1] < 0)
        if len(short):
            scores[short], ids[short] = exact_knn_rows(queries[short], self.vectors, k, rows.ids, rows.mask)
        return scores, ids

    def filter(self, spec: Any) -> RowSet:
        """The rows passing the filter ``spec`` (``index.engine.filters``) of a documents table; the last
        :data:`FILTER_CACHE` filters asked are remembered, within :data:`FILTER_CACHE_BYTES`."""
        payload = self.documents("it has no payload fields to filter on")
        key = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        with self._filters_lock:
            if (cached := self._filters.get(key)) is not None:
                self._filters.move_to_end(key)
                return cached
        rows = evaluate(payload, spec)
        with self._filters_lock:
            self._filters[key] = rows
            held = sum(kept.nbytes for kept in self._filters.values())
            while len(self._filters) > 1 and (len(self._filters) > FILTER_CACHE or held > FILTER_CACHE_BYTES):
                held -= self._filters.popitem(last=False)[1].nbytes
        return rows

    def plan(self, search: Search) -> Plan:
        """The nearest-row search behind ``search`` (a 3CosAdd analogy's is the normalised b + c - a), in two
        steps: see :class:`Plan`."""
        if isinstance(search, AnalogySearch):
            if search.method != "3cosadd":
                raise TypeError("3CosMul scores every row: it has no nearest-row search to plan")
            queries = np.vstack([self.mean_query([b, c], [a]) for a, b, c in search.questions])
            search = VectorSearch(queries, search.k, [set(q) for q in search.questions], search.options)
        check_page(search.k, search.offset)
        drop, limit = self.drop_bits(search.options), self.limit(search.options)
        if search.rows is not None:
            limit = min(limit, int(search.rows.mask[:limit].sum()) if limit < self.rows else search.rows.count)
        want = search.offset + search.k
        fetch = want + max(map(len, search.exclude), default=0) + (DROP_SLACK if drop else 0)
        return Plan(self, search, min(fetch, limit), drop, limit)

    def _analogies(self, search: AnalogySearch) -> Answers:
        """3CosAdd on the approximate index, or when token kinds are left out: a search for the normalised
        b + c - a (``most_similar([b, c], [a])``); otherwise the exact batched analogy search
        (:func:`analogy.analogy_top`), or plain 3CosMul (:func:`analogy.cosmul_top`) when token
        kinds are left out."""
        questions, options, k = search.questions, search.options, search.k
        drop = self.drop_bits(options)
        if search.method == "3cosadd" and (drop or self.is_light(search)):
            return self.plan(search).run()
        if drop:
            pairs = [([b, c], [a]) for a, b, c in questions]
            return cosmul_top(self.vectors, pairs, k, self.limit(options), self.dropped(options))
        a, b, c = (np.array(column, dtype=np.int64) for column in zip(*questions, strict=True))
        ids, scores = analogy_top(self, a, b, c, k + 3, search.method, self.limit(options))
        results = []
        for row, top, inputs in zip(ids.tolist(), scores.tolist(), questions, strict=True):
            results.append([(i, s) for i, s in zip(row, top, strict=True) if i >= 0 and i not in inputs][:k])
        return results

    def mean_query(self, positive: Sequence[int], negative: Sequence[int] = ()) -> np.ndarray:
        """gensim's ``most_similar`` query: the weighted mean of unit rows, normalised (1 x dim)."""
        return mean_query(self.vectors, positive, negative)

    # ------------------------------------------------------------------- the same, gensim's way of asking
    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        exclude: Sequence[Collection[int]] = (),
        **keywords: Unpack[SearchKeywords],
    ) -> Answers:
        """Top-``k`` neighbours of each unit query, leaving out ``exclude[i]`` and filtered token kinds."""
        options = SearchOptions(**keywords)
        return self.run(VectorSearch(queries, k, exclude, options))

    def most_similar(
        self,
        positive: Sequence[int],
        negative: Sequence[int] = (),
        k: int = 10,
        **keywords: Unpack[SearchKeywords],
    ) -> list[Neighbor]:
        """gensim ``most_similar``: neighbours of the mean of the inputs, the inputs left out."""
        options = SearchOptions(**keywords)
        exclude = [set(positive) | set(negative)]
        return self.run(VectorSearch(self.mean_query(positive, negative), k, exclude, options))[0]

    def most_similar_cosmul(
        self,
        positive: Sequence[int],
        negative: Sequence[int] = (),
        k: int = 10,
        *,
        restrict: int | None = None,
        skip_special: bool = False,
        whole_words_only: bool = False,
    ) -> list[Neighbor]:
        """gensim ``most_similar_cosmul`` (always exact: it scores every row)."""
        options = SearchOptions(True, restrict, skip_special, whole_words_only)
        return cosmul_top(self.vectors, [(positive, negative)], k, self.limit(options), self.dropped(options))[0]

    def analogy(
        self,
        a: int,
        b: int,
        c: int,
        k: int = 10,
        method: Method = "3cosadd",
        **keywords: Unpack[SearchKeywords],
    ) -> list[Neighbor]:
        """a is to b as c is to ?: 3CosAdd (``most_similar``) or 3CosMul, with a, b and c left out."""
        options = SearchOptions(**keywords)
        return self.run(AnalogySearch([(a, b, c)], k, method, options))[0]

    def analogies(
        self,
        questions: Sequence[tuple[int, int, int]],
        k: int = 10,
        method: Method = "3cosadd",
        **keywords: Unpack[SearchKeywords],
    ) -> Answers:
        """:meth:`analogy` for many (a, b, c) questions at once."""
        options = SearchOptions(**keywords)
        return self.run(AnalogySearch(questions, k, method, options))

    def similarity(self, a: int, b: int) -> float:
        return float(self.similarities([a], [b])[0])

    def similarities(self, a: np.ndarray | Sequence[int], b: np.ndarray | Sequence[int]) -> np.ndarray:
        """Cosine of each pair of rows (vectorised; a pair's the same alone or among others)."""
        return pair_cosines(np.asarray(self.vectors[a]), np.asarray(self.vectors[b]))


@dataclass(slots=True, eq=False)
class Plan:
    """A nearest-row search in two steps. :meth:`kernel`: the index (or exact) search of every query for
    ``fetch`` hits, FAISS's work, which runs without the GIL; :meth:`finish`: the ``k`` best left of each after
    the excluded rows and token kinds, searching again for the queries left short (rare). :meth:`run` does
    both; the service's searcher runs the kernels of overlapping requests as one call in its own thread and each
    finish where the request is, so that its thread holds the GIL as little as it can."""

    table: Table
    search: VectorSearch
    fetch: int  # hits asked for first: k plus the widest exclusion, and some slack when token kinds are dropped
    drop: int  # bit mask of the token kinds left out
    limit: int  # rows searched (the first ones)

    def key(self) -> tuple[int, SearchOptions]:
        """Plans of one table with the same key can share one kernel call (and answer as they would alone);
        only plans without a filter (``rows``) are joined."""
        return self.fetch, self.search.options

    def kernel(self) -> Hits:
        return self.table.knn(self.search.queries, self.fetch, self.search.options, self.search.rows)

    def finish(self, hits: Hits) -> Answers:
        search, flags, drop, exclude = self.search, self.table.flags, self.drop, self.search.exclude
        want = search.offset + search.k
        n = len(search.queries)
        answers: list[list[Neighbor]] = [[]] * n  # every place is set in the first round
        todo: Sequence[int] = range(n)
        (scores, ids), fetch = hits, self.fetch
        while True:
            short = []
            for row, position in enumerate(todo):
                kept = keep_hits(scores[row], ids[row], want, exclude[position] if exclude else (), flags, drop)
                answers[position] = kept
                if len(kept) < want and fetch < self.limit:
                    short.append(position)
            if not short:
                break
            todo, fetch = short, min(fetch * 4, self.limit)
            scores, ids = self.table.knn(search.queries[short], fetch, search.options, search.rows)
        if search.offset or search.min_score is not None:
            floor = -np.inf if search.min_score is None else search.min_score
            answers = [[hit for hit in hits[search.offset :] if hit[1] >= floor] for hits in answers]
        return answers

    def run(self) -> Answers:
        return self.finish(self.kernel())


def keep_hits(
    scores: np.ndarray, ids: np.ndarray, k: int, exclude: Collection[int], flags: np.ndarray | None, drop: int
) -> list[Neighbor]:
    """The first ``k`` of one query's hits (best first) that are not padding (-1), not in ``exclude`` and not of
    a token kind in the bit mask ``drop`` (``flags``: the kind bits of every row; read only when ``drop``)."""
    out: list[Neighbor] = []
    for score, i in zip(scores.tolist(), ids.tolist(), strict=True):
        if i < 0 or i in exclude or (drop and flags is not None and flags[i] & drop):
            continue
        out.append((i, score))
        if len(out) == k:
            break
    if len({score for _, score in out}) < len(out):  # equal scores by row, as the exact kernel gives them
        out.sort(key=lambda hit: (-hit[1], hit[0]))
    return out


ERRNO_OF = {os.strerror(code): code for code in errno.errorcode}


def read_index(path: Path) -> faiss.Index:
    """The FAISS index at ``path``, mapped. A file FAISS could not open is its RuntimeError, naming the cause in
    words: raised as the OSError it stands for, so that no descriptor left (``ulimit -n``) is the passing want
    it is to its reader (the server's registry tries the table again at its next reload), not a damaged index."""
    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
    except RuntimeError as exc:
        cause = re.search(r"could not open .* for reading: (.+)$", str(exc))
        code = ERRNO_OF.get(cause[1]) if cause else None
        if code is None:
            raise
        raise OSError(code, os.strerror(code), str(path)) from exc


def advise_random(matrix: np.ndarray) -> None:
    """Tell the kernel a memory-mapped matrix is read at random (MADV_RANDOM: no read-ahead), where it can."""
    mapping = getattr(matrix, "_mmap", None)
    if mapping is not None and hasattr(mmap, "MADV_RANDOM"):
        mapping.madvise(mmap.MADV_RANDOM)
