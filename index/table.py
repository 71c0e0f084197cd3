"""The read-only query engine over one built table.

Everything that answers a question about a table lives here, so the command line, the benchmarks and the
HTTP API run the very same code. Answers follow gensim's ``KeyedVectors`` semantics:

- ``most_similar``: the mean of the unit rows (positive +1, negative -1), re-normalised; the inputs left out;
- ``most_similar_cosmul``: 3CosMul of Levy and Goldberg with cosines shifted to [0, 1];
- ``similarity``: cosine of two rows.

Exact search is a brute-force inner product over the memory-mapped unit rows; an approximate FAISS index
(HNSW, IVF, ...) is used when the table has one and the caller does not ask for ``exact``. An index of
compressed codes (IVF-PQ) is asked for ``rerank`` x k candidates, which are re-scored exactly on the
memory-mapped rows: answers keep exact cosines.
"""

from __future__ import annotations

import json
import logging
import mmap
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

import faiss
import numpy as np
from rapidfuzz import fuzz, process

from index import artifact
from index.errors import ArtifactError, InvalidQuery, UnknownToken
from index.faiss_index import search_index, set_search_params
from index.sources.huggingface import byte_level_label
from index.tokens import Tokens

log = logging.getLogger(__name__)

COSMUL_EPSILON = 1e-6  # gensim's guard against division by zero in 3CosMul
SMALL_BATCH = 2  # up to this many queries a plain matrix product beats FAISS's blocked search
SUGGESTION_POOL = 50_000  # unknown tokens are matched against the most frequent rows
FLAGS = "token_flags.npy"
TOKENIZER = "tokenizer.json"
FLAG_SPECIAL = 1
FLAG_CONTINUATION = 2
SPACE_MARKERS = ("Ġ", "▁", " ")


@dataclass(frozen=True)
class Resolved:
    """The row a query word resolved to."""

    query: str
    id: int
    token: str
    match: str  # "exact", "space-marked", "casefold" or "id"

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.query, "token": self.token, "id": self.id, "match": self.match}


Neighbor = tuple[int, float]


class RowFilters(TypedDict):
    """Which rows a search may answer with: the first ``restrict`` rows, less the token kinds left out."""

    restrict: int | None
    skip_special: bool
    whole_words_only: bool


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
        metadata: dict[str, list[str]] | None = None,
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self.vectors = vectors
        self.norms = norms
        self.tokens = tokens
        self.index = index
        spec = manifest.get("index", {}).get("spec", {})
        # Candidates per answer re-scored on the rows (an index of codes: IVF-PQ); 1 for every other index.
        self.rerank = int(spec.get("rerank") or 1) if index is not None else 1
        self.flags = flags
        self.metadata = metadata or {}
        self._suggestion_pool: list[str] | None = None
        self._tokenizer: Any = None

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(cls, directory: Path, checksums: bool = True) -> Table:
        """Map a table read-only after checking its files against the manifest."""
        directory = Path(directory)
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
            index = faiss.read_index(str(directory / artifact.INDEX), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
            spec = index_info.get("spec", {})
            set_search_params(index, ef_search=spec.get("efSearch"), nprobe=spec.get("nprobe"))
            if index.ntotal != vectors.shape[0] or index.d != vectors.shape[1]:
                raise ArtifactError(f"table {directory.name!r}: index size disagrees with the vectors")
        if index is not None and index_info.get("spec", {}).get("rerank", 1) > 1:
            # Re-ranking reads a few scattered rows per query: no read-ahead around them, or a table bigger than
            # memory would be read in whole through its first thousand queries.
            advise_random(vectors)
        flags = np.load(directory / FLAGS, mmap_mode="r") if (directory / FLAGS).is_file() else None
        metadata = None
        if (directory / artifact.METADATA).is_file():
            metadata = json.loads((directory / artifact.METADATA).read_text())
        # Plain ndarray views of the read-only maps: indexing a np.memmap costs microseconds on every query.
        vectors, norms = vectors.view(np.ndarray), norms.view(np.ndarray)
        flags = None if flags is None else flags.view(np.ndarray)
        return cls(directory, manifest, vectors, norms, Tokens(directory), index, flags, metadata)

    # ---------------------------------------------------------------- properties
    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    @property
    def rows(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind", "words"))

    @property
    def approximate(self) -> bool:
        return self.index is not None

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
        if deferred := m.get("index", {}).get("deferred"):
            out["index_deferred"] = deferred["spec"]  # exact search until this index is built
        return out

    # ------------------------------------------------------------------- lookup
    def find(self, text: str) -> Resolved | None:
        """Resolve a word: exact, then the space-marked form for model tokens, then case-folded."""
        text = unicodedata.normalize("NFC", text)
        forms = [text]
        if self.byte_level:
            forms.append(byte_level_label(text))  # byte-level BPE labels spell "café" as "cafÃ©"
        for form in dict.fromkeys(forms):
            found = self.tokens.find(form)
            if found is not None:
                return Resolved(text, found, form, "exact")
        if self.kind == "tokens":
            for form in dict.fromkeys(forms):
                for marker in SPACE_MARKERS:
                    found = self.tokens.find(marker + form)
                    if found is not None:
                        return Resolved(text, found, marker + form, "space-marked")
        found = self.tokens.find_folded(text)
        if found is not None:
            return Resolved(text, found, self.tokens[found], "casefold")
        return None

    def resolve(self, text: str) -> Resolved:
        """Like :meth:`find`, but raise :class:`UnknownToken` with suggestions when nothing matches."""
        found = self.find(text)
        if found is None:
            raise UnknownToken(
                f"token {text!r} is not in table {self.name!r}", suggestions=self.suggest(text), token=text
            )
        return found

    def resolve_id(self, row: int) -> Resolved:
        if not 0 <= row < self.rows:
            raise UnknownToken(f"id {row} is outside table {self.name!r} (0..{self.rows - 1})", suggestions=[])
        return Resolved(str(row), row, self.tokens[row], "id")

    def suggest(self, text: str, limit: int = 5) -> list[str]:
        """Up to ``limit`` known tokens spelled like ``text`` (most frequent rows, and alphabetical neighbours)."""
        if self._suggestion_pool is None:
            self._suggestion_pool = self.tokens[: min(self.rows, SUGGESTION_POOL)]
        pool = self._suggestion_pool + self.tokens.labels(self.tokens.folded_neighbourhood(text, 10))
        matches = process.extract(text.casefold(), pool, scorer=fuzz.ratio, processor=str.casefold, limit=limit * 3)
        out: list[str] = []
        for label, score, _ in matches:
            if score >= 50 and label not in out:
                out.append(label)
        return out[:limit]

    def row_metadata(self, row: int) -> dict[str, str]:
        """The metadata columns of one row (e.g. a projector table's "kind")."""
        return {name: values[row] for name, values in self.metadata.items()}

    def row(self, row: int, normalized: bool = False) -> np.ndarray:
        """The row as float32: unit length, or scaled back to its original norm."""
        unit = np.asarray(self.vectors[row], dtype=np.float32)
        return unit if normalized else unit * self.norms[row]

    # ---------------------------------------------------------------- tokenizer
    @property
    def has_tokenizer(self) -> bool:
        return (self.directory / TOKENIZER).is_file()

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """The (id, label) pairs the table's own tokenizer gives for ``text``, special tokens left out."""
        if not self.has_tokenizer:
            raise InvalidQuery(f"table {self.name!r} has no tokenizer (only model-token tables do)")
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self.directory / TOKENIZER))
            tokenizer.no_padding()  # a model's saved padding/truncation would add [PAD]s or cut the text
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return [(int(i), self.tokens[int(i)]) for i in encoding.ids if 0 <= int(i) < self.rows]

    def compose(self, text: str) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """A multi-token word as the normalised mean of its token rows: (1 x dim unit query, its tokens)."""
        pieces = self.tokenize(text)
        if not pieces:
            raise InvalidQuery(f"{text!r} gives no tokens")
        special = [label for i, label in pieces if self.flags is not None and self.flags[i] & FLAG_SPECIAL]
        if special:  # e.g. [UNK]: its row says nothing about the text
            raise UnknownToken(
                f"token {text!r} is not in table {self.name!r}, and its tokenizer gives {special[0]!r} for it",
                suggestions=self.suggest(text),
                token=text,
            )
        return self.mean_query([i for i, _ in pieces]), pieces

    # ------------------------------------------------------------------- search
    def normalize_queries(self, vectors: np.ndarray) -> np.ndarray:
        """Validate raw query vectors (m, dim) and scale them to unit length."""
        queries = np.asarray(vectors, dtype=np.float64)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise InvalidQuery(f"query vectors must have {self.dim} values each, got shape {list(queries.shape)}")
        if not np.isfinite(queries).all():
            raise InvalidQuery("query vectors must contain only finite numbers")
        norms = np.linalg.norm(queries, axis=1)
        if (norms == 0).any():
            raise InvalidQuery("a query vector is all zeros and has no direction")
        unit: np.ndarray = (queries / norms[:, None]).astype(np.float32)
        if not np.isfinite(unit).all():
            raise InvalidQuery("query vectors overflow float32")
        return unit

    def _limit(self, restrict: int | None) -> int:
        if restrict is None:
            return self.rows
        if restrict < 1:
            raise InvalidQuery("restrict must be at least 1")
        return min(restrict, self.rows)

    def drop_flags(self, skip_special: bool, whole_words_only: bool) -> int:
        """Bit mask of the token kinds to leave out (0: keep every row)."""
        if self.flags is None:
            return 0
        return (FLAG_SPECIAL if skip_special else 0) | (FLAG_CONTINUATION if whole_words_only else 0)

    def knn(
        self, queries: np.ndarray, k: int, exact: bool = False, restrict: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, ids) for unit queries; exact brute force unless an approximate index applies."""
        limit = self._limit(restrict)
        k = min(k, limit)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if exact or self.index is None or limit < self.rows:
            return exact_knn(queries, self.vectors[:limit], k)
        return search_index(self.index, queries, k, self.vectors, self.rerank)

    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        exact: bool = False,
        restrict: int | None = None,
        exclude: Sequence[Collection[int]] | None = None,
        skip_special: bool = False,
        whole_words_only: bool = False,
    ) -> list[list[Neighbor]]:
        """Top-``k`` neighbours of each unit query, leaving out ``exclude[i]`` and filtered token kinds."""
        limit = self._limit(restrict)
        drop = self.drop_flags(skip_special, whole_words_only)
        fetch = self.fetch_size(k, exclude, drop)
        while True:
            fetch = min(fetch, limit)
            scores, ids = self.knn(queries, fetch, exact=exact, restrict=restrict)
            results = self.pick(scores, ids, k, exclude, drop, partial=fetch >= limit)
            if results is not None:
                return results
            fetch *= 4

    def fetch_size(self, k: int, exclude: Sequence[Collection[int]] | None, drop: int) -> int:
        """How many hits to ask the index for first, so that ``k`` are left after leaving rows out."""
        return k + (max((len(e) for e in exclude), default=0) if exclude else 0) + (16 if drop else 0)

    def pick(
        self,
        scores: np.ndarray,
        ids: np.ndarray,
        k: int,
        exclude: Sequence[Collection[int]] | None,
        drop: int,
        partial: bool = False,
    ) -> list[list[Neighbor]] | None:
        """Each query's top ``k`` hits once excluded and dropped rows are left out; ``None`` when one is left
        with fewer than ``k`` (fetch more), unless ``partial`` (there is no more)."""
        flags = cast(np.ndarray, self.flags)  # read only when ``drop``, which drop_flags gives only with flags
        results = []
        for qi in range(len(scores)):
            skip = exclude[qi] if exclude else ()
            row: list[Neighbor] = []
            for score, i in zip(scores[qi].tolist(), ids[qi].tolist(), strict=True):
                if i < 0 or i in skip or (drop and flags[i] & drop):
                    continue
                row.append((i, score))
                if len(row) == k:
                    break
            if len(row) < k and not partial:
                return None
            results.append(row)
        return results

    def mean_query(self, positive: Sequence[int], negative: Sequence[int] = ()) -> np.ndarray:
        """gensim's ``most_similar`` query: the weighted mean of unit rows, normalised (1 x dim)."""
        if not positive and not negative:
            raise InvalidQuery("give at least one positive or negative token")
        if len(positive) == 1 and not negative:  # one word: its row (the same float64 arithmetic, faster)
            mean = self.vectors[positive[0]].astype(np.float64)
        else:
            ids = list(positive) + list(negative)
            weights = np.array([1.0] * len(positive) + [-1.0] * len(negative))
            mean = weights @ np.asarray(self.vectors[ids], dtype=np.float64) / len(ids)
        norm = np.sqrt(mean @ mean)  # what np.linalg.norm computes for a vector
        if norm < 1e-12:
            raise InvalidQuery("the positive and negative tokens cancel out: the query vector is zero")
        query: np.ndarray = (mean / norm).astype(np.float32)[None, :]
        return query

    def most_similar(
        self, positive: Sequence[int], negative: Sequence[int] = (), k: int = 10, **options: Any
    ) -> list[Neighbor]:
        """gensim ``most_similar``: neighbours of the mean of the inputs, the inputs left out."""
        query = self.mean_query(positive, negative)
        return self.search(query, k, exclude=[set(positive) | set(negative)], **options)[0]

    def cosmul_scores(
        self, positive: Sequence[int], negative: Sequence[int], restrict: int | None = None
    ) -> np.ndarray:
        """3CosMul score of every row (first ``restrict`` rows), as gensim ``most_similar_cosmul``."""
        if not positive:
            raise InvalidQuery("3CosMul needs at least one positive token")
        limit = self._limit(restrict)
        terms = np.asarray(self.vectors[list(positive) + list(negative)], dtype=np.float32)
        shifted = (1 + self.vectors[:limit] @ terms.T) / 2
        pos, neg = shifted[:, : len(positive)], shifted[:, len(positive) :]
        scores: np.ndarray = np.prod(pos, axis=1) / (np.prod(neg, axis=1) + COSMUL_EPSILON)
        return scores

    def most_similar_cosmul(
        self,
        positive: Sequence[int],
        negative: Sequence[int] = (),
        k: int = 10,
        restrict: int | None = None,
        skip_special: bool = False,
        whole_words_only: bool = False,
        **_: Any,
    ) -> list[Neighbor]:
        """gensim ``most_similar_cosmul`` (always exact: it scores every row)."""
        scores = self.cosmul_scores(positive, negative, restrict)
        drop = self.drop_flags(skip_special, whole_words_only)
        if drop:  # drop_flags gives 0 for a table without flags
            scores = np.where(cast(np.ndarray, self.flags)[: len(scores)] & drop, -np.inf, scores)
        return top_k(scores, k, set(positive) | set(negative))

    def most_similar_cosmul_batch(
        self,
        queries: Sequence[tuple[Sequence[int], Sequence[int]]],
        k: int = 10,
        restrict: int | None = None,
        skip_special: bool = False,
        whole_words_only: bool = False,
        chunk_bytes: int = 64 << 20,
        **_: Any,
    ) -> list[list[Neighbor]]:
        """:meth:`most_similar_cosmul` for many (positive, negative) queries: one matrix product per chunk."""
        if any(not positive for positive, _ in queries):
            raise InvalidQuery("3CosMul needs at least one positive token")
        limit = self._limit(restrict)
        drop = self.drop_flags(skip_special, whole_words_only)
        dropped = (cast(np.ndarray, self.flags)[:limit] & drop) != 0 if drop else None  # drop implies flags
        per_chunk = max(1, chunk_bytes // (4 * limit * 4))  # about 3 term rows and 1 score row per query
        results: list[list[Neighbor]] = []
        for start in range(0, len(queries), per_chunk):
            chunk = queries[start : start + per_chunk]
            terms = [i for positive, negative in chunk for i in (*positive, *negative)]
            shifted = (1 + np.asarray(self.vectors[terms], dtype=np.float32) @ self.vectors[:limit].T) / 2
            scores = np.empty((len(chunk), limit), dtype=np.float32)
            row = 0
            for qi, (positive, negative) in enumerate(chunk):
                pos = shifted[row : row + len(positive)]
                neg = shifted[row + len(positive) : row + len(positive) + len(negative)]
                row += len(positive) + len(negative)
                scores[qi] = np.prod(pos, axis=0) / (np.prod(neg, axis=0) + COSMUL_EPSILON)
                inputs = [i for i in (*positive, *negative) if i < limit]
                scores[qi, inputs] = -np.inf
            if dropped is not None:
                scores[:, dropped] = -np.inf
            results.extend(top_k(s, k) for s in scores)
        return results

    def analogy(self, a: int, b: int, c: int, k: int = 10, method: str = "3cosadd", **options: Any) -> list[Neighbor]:
        """a is to b as c is to ?: 3CosAdd (``most_similar``) or 3CosMul, with a, b and c left out."""
        if method == "3cosadd":
            return self.most_similar([b, c], [a], k, **options)
        if method == "3cosmul":
            return self.most_similar_cosmul([b, c], [a], k, **options)
        raise InvalidQuery(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")

    def analogies(
        self,
        questions: Sequence[tuple[int, int, int]],
        k: int = 10,
        method: str = "3cosadd",
        *,
        exact: bool = False,
        restrict: int | None = None,
        skip_special: bool = False,
        whole_words_only: bool = False,
    ) -> list[list[Neighbor]]:
        """:meth:`analogy` for many (a, b, c) questions at once.

        Exact answers come from :func:`index.analogy.analogy_top`, which prunes whole blocks of rows using the
        words the questions share; 3CosAdd without ``exact`` on an approximate table is one index search.
        """
        if method not in ("3cosadd", "3cosmul"):
            raise InvalidQuery(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
        options = RowFilters(restrict=restrict, skip_special=skip_special, whole_words_only=whole_words_only)
        if self.drop_flags(skip_special, whole_words_only):  # filtered token kinds: the general paths
            if method == "3cosmul":
                return self.most_similar_cosmul_batch([([b, c], [a]) for a, b, c in questions], k, **options)
            queries = np.vstack([self.mean_query([b, c], [a]) for a, b, c in questions])
            return self.search(queries, k, exact=exact, exclude=[set(q) for q in questions], **options)
        if method == "3cosadd" and not exact and self.approximate and restrict is None:
            queries = np.vstack([self.mean_query([b, c], [a]) for a, b, c in questions])
            return self.search(queries, k, exclude=[set(q) for q in questions])
        from index.analogy import analogy_top

        a, b, c = (np.array(column, dtype=np.int64) for column in zip(*questions, strict=True))
        ids, scores = analogy_top(self, a, b, c, k + 3, method, self._limit(restrict))
        results = []
        for row, top, inputs in zip(ids.tolist(), scores.tolist(), questions, strict=True):
            hits = [(i, s) for i, s in zip(row, top, strict=True) if i >= 0 and i not in inputs]
            results.append(hits[:k])
        return results

    def similarity(self, a: int, b: int) -> float:
        return float(np.dot(self.vectors[a].astype(np.float64), self.vectors[b].astype(np.float64)))

    def similarities(self, a: np.ndarray | Sequence[int], b: np.ndarray | Sequence[int]) -> np.ndarray:
        """Cosine of each pair of rows (vectorised)."""
        left = np.asarray(self.vectors[a], dtype=np.float64)
        right = np.asarray(self.vectors[b], dtype=np.float64)
        cosines: np.ndarray = np.einsum("ij,ij->i", left, right)
        return cosines

    def project(self, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The rows on their own first two principal components: (points n x 2, explained variance ratio)."""
        if len(ids) < 2:
            raise InvalidQuery("projection needs at least two distinct tokens")
        rows = np.asarray(self.vectors[list(ids)], dtype=np.float64)
        centred = rows - rows.mean(axis=0)
        u, s, vt = np.linalg.svd(centred, full_matrices=False)
        # Fix the sign of each component (largest loading positive) so the picture is stable.
        signs = np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)])
        signs[signs == 0] = 1
        points = (u * s * signs)[:, :2]
        if points.shape[1] < 2:
            points = np.pad(points, ((0, 0), (0, 2 - points.shape[1])))
        variance = s**2
        total = variance.sum()
        ratio = variance[:2] / total if total > 0 else np.zeros(2)
        return points, np.pad(ratio, (0, 2 - len(ratio)))


def advise_random(matrix: np.ndarray) -> None:
    """Tell the kernel a memory-mapped matrix is read at random (MADV_RANDOM: no read-ahead), where it can."""
    mapping = getattr(matrix, "_mmap", None)
    if mapping is not None and hasattr(mmap, "MADV_RANDOM"):
        mapping.madvise(mmap.MADV_RANDOM)


def exact_knn(queries: np.ndarray, base: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force inner-product top-``k``: one BLAS product for a few queries, FAISS's blocked search beyond."""
    if len(queries) > SMALL_BATCH:
        return faiss.knn(queries, base, k, metric=faiss.METRIC_INNER_PRODUCT)
    scores = queries @ np.asarray(base).T  # queries x rows
    if k < scores.shape[1]:
        best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        best = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    top = np.take_along_axis(scores, best, axis=1)
    order = np.argsort(-top, axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1), np.take_along_axis(best, order, axis=1).astype(np.int64)


def top_k(scores: np.ndarray, k: int, exclude: Collection[int] = ()) -> list[Neighbor]:
    """The ``k`` best (id, score) pairs of a full score vector, best first, ``exclude`` left out."""
    want = min(len(scores), k + len(exclude))
    best = np.argpartition(-scores, want - 1)[:want] if want < len(scores) else np.arange(len(scores))
    best = best[np.argsort(-scores[best], kind="stable")]
    out = [(int(i), float(scores[i])) for i in best if int(i) not in exclude and np.isfinite(scores[i])]
    return out[:k]
