"""Keyword search over a documents table's text: BM25 (Lucene's variant) in the file layout of ``bm25s``.

The tokenizer lower-cases (Arrow's ``utf8_lower``, Unicode's per-character mapping) and cuts the text into
words: maximal runs of letters, combining marks, digits and underscores (Unicode classes L, M and N, and ``_``;
``\\w+`` that keeps a word's combining marks inside it). Stop words are optional (bm25s's English list); the words
themselves are kept in the manifest, so queries are always cut as the documents were.

A document's score for a query is the sum, over the query's words (a word given twice counts twice), of

    idf(t) * tf / (tf + k1 * (1 - b + b * len(d) / avglen)),   idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with ``tf`` the word's count in the document, ``len(d)`` the document's word count, ``N`` the table's rows (a
document without text counts, with length 0) and ``df(t)`` the documents holding the word: bm25s's default
method, ``lucene``. The index is built over whole columns (Arrow compute, numpy); its arrays are the ones
``bm25s.BM25.index`` computes for the same words (the tests hold them equal), kept in bm25s's file layout under
names of their own, and ``bm25s.BM25.load(mmap=True)`` maps them; the sorted words are an Arrow file, mapped too.

Files: ``keyword_data.npy`` (float32, each posting's score), ``keyword_indices.npy`` (int32, each posting's row),
``keyword_indptr.npy`` (int64, where each word's postings start: a CSC matrix, rows x words),
``keyword_params.json`` (bm25s's parameters) and ``keyword_terms.arrow`` (the words, sorted; word ``i`` is
column ``i``). The manifest's ``keyword`` records the tokenizer, k1, b and the counts.
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from index.errors import ArtifactError, InvalidQuery
from index.payload import contiguous, search_sorted
from index.progress import Progress, note

KEYWORD = "keyword"  # the manifest's section
DATA, INDICES, INDPTR = "keyword_data.npy", "keyword_indices.npy", "keyword_indptr.npy"
PARAMS, TERMS = "keyword_params.json", "keyword_terms.arrow"
FILES = (DATA, INDICES, INDPTR, PARAMS, TERMS)
METHOD = "lucene"
K1, B = 1.2, 0.75  # Lucene's and Elasticsearch's defaults
WORD = r"[\p{L}\p{M}\p{N}_]+"  # what a word is (RE2 syntax)
SEPARATOR = r"[^\p{L}\p{M}\p{N}_]+"  # what the text is cut at
LOWERCASE = "utf8_lower"
BLOCK_ROWS = 16_384  # documents tokenized at a time
FEW_TEXTS = 64  # up to this many texts are cut by Python's re (word_pattern), more by Arrow


def english_stopwords() -> tuple[str, ...]:
    """bm25s's English stop words (``bm25s.stopwords.STOPWORDS_EN``, 33 words)."""
    from bm25s.stopwords import STOPWORDS_EN

    return tuple(STOPWORDS_EN)


@dataclass(frozen=True)
class Tokens:
    terms: pa.Array  # utf8, every word of every text, in text order
    rows: np.ndarray  # int64, the text each word came from (ascending)


@functools.cache
def word_pattern() -> re.Pattern[str]:
    """:data:`WORD` for Python's ``re``: the code points RE2 (Arrow's regex engine) takes for word characters.

    Arrow compiles a pattern at every call, and these Unicode classes take milliseconds to compile: a few texts
    (queries) are cut by this pattern instead, derived once from RE2 itself, so both ways cut alike.
    """
    code_points = np.concatenate([np.arange(0xD800), np.arange(0xE000, sys.maxunicode + 1)]).astype(np.uint32)
    utf8 = code_points.astype("<u4").tobytes().decode("utf-32-le").encode("utf-8")
    sizes = 1 + (code_points >= 0x80) + (code_points >= 0x800) + (code_points >= 0x10000)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    each = pa.StringArray.from_buffers(len(code_points), pa.py_buffer(offsets), pa.py_buffer(utf8))
    word = code_points[bools(pc.match_substring_regex(each, pattern=f"^{WORD}$"))]
    starts = np.concatenate([[True], np.diff(word) != 1])
    ends = np.concatenate([np.diff(word) != 1, [True]])
    ranges = "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in zip(word[starts].tolist(), word[ends].tolist(), strict=True)
    )
    return re.compile(f"[{ranges}]+")


def bools(array: pa.Array) -> np.ndarray:
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=bool)


@dataclass(frozen=True)
class Tokenizer:
    """Lower-case, cut into words, drop the stop words (none by default)."""

    stopwords: tuple[str, ...] = ()
    stopwords_name: str | None = None  # "en" for bm25s's English list

    @classmethod
    def english(cls) -> Tokenizer:
        return cls(english_stopwords(), "en")

    def __call__(self, texts: pa.Array | Sequence[str | None]) -> Tokens:
        try:
            column = texts if isinstance(texts, pa.Array) else pa.array(list(texts), pa.string())
        except (UnicodeError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidQuery(f"texts must be valid Unicode strings ({exc})") from None
        lowered = pc.utf8_lower(column)
        if len(column) <= FEW_TEXTS:
            found = [word_pattern().findall(text) if text else [] for text in lowered.to_pylist()]
            terms = pa.array([w for words in found for w in words], pa.string())
            rows = np.repeat(np.arange(len(found), dtype=np.int64), [len(words) for words in found])
        else:
            pieces = pc.split_pattern_regex(lowered, pattern=SEPARATOR)
            terms, parents = pc.list_flatten(pieces), pc.list_parent_indices(pieces)
            nonempty = pc.greater(pc.binary_length(terms), 0)  # the pieces before a leading / after a last separator
            terms, rows = terms.filter(nonempty), np.asarray(parents.filter(nonempty).to_numpy(), dtype=np.int64)
        if self.stopwords and len(terms):
            keep = pc.invert(pc.is_in(terms, value_set=pa.array(self.stopwords, terms.type)))
            terms, rows = terms.filter(keep), rows[bools(keep)]
        return Tokens(terms, rows)

    def words(self, text: str) -> list[str]:
        """The words of one text, as the index sees them."""
        result: list[str] = self([text]).terms.to_pylist()
        return result

    def settings(self) -> dict[str, Any]:
        return {
            "lowercase": LOWERCASE,
            "word": WORD,
            "stopwords": self.stopwords_name if self.stopwords else None,
            "stopword_list": list(self.stopwords),
        }

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Tokenizer:
        if settings.get("lowercase") != LOWERCASE or settings.get("word") != WORD:
            raise ArtifactError(f"keyword index tokenized otherwise than this version does: {settings}")
        return cls(tuple(settings.get("stopword_list") or ()), settings.get("stopwords"))


# ---------------------------------------------------------------------------------------------- building


@dataclass
class Built:
    files: dict[str, bytes | memoryview]
    info: dict[str, Any]  # the manifest's "keyword"


@dataclass
class _Counts:
    """(word, row, count) of every word in a row, with the words as text until the vocabulary is known."""

    words: list[pa.Array] = field(default_factory=list)  # each block's distinct words
    word_of: list[np.ndarray] = field(default_factory=list)  # per pair: the word, as an index into its block's words
    rows: list[np.ndarray] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)


def _count(texts: pa.Array, tokenizer: Tokenizer, lengths: np.ndarray) -> _Counts:
    """Each block's words counted per row (one sort per block); ``lengths`` gets each row's word count."""
    counts = _Counts()
    with Progress("keyword index", len(texts)) as progress:
        for start in range(0, len(texts), BLOCK_ROWS):
            block = texts.slice(start, BLOCK_ROWS)
            tokens = tokenizer(block)
            encoded = pc.dictionary_encode(tokens.terms)
            word = np.asarray(encoded.indices.to_numpy(), dtype=np.int64)
            lengths[start : start + len(block)] = np.bincount(tokens.rows, minlength=len(block))
            pairs, tf = np.unique(tokens.rows * len(encoded.dictionary) + word, return_counts=True)
            counts.words.append(encoded.dictionary)
            counts.word_of.append(pairs % max(len(encoded.dictionary), 1))
            counts.rows.append(pairs // max(len(encoded.dictionary), 1) + start)
            counts.counts.append(tf)
            progress.advance(len(block))
    return counts


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _arrow_file(batch: pa.RecordBatch) -> memoryview:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return memoryview(sink.getvalue())


def build(texts: pa.Array, tokenizer: Tokenizer | None = None, k1: float = K1, b: float = B) -> Built | None:
    """The keyword index of ``texts`` (row ``i`` is the table's row ``i``; nulls are documents without text);
    None when no text holds a word."""
    tokenizer = tokenizer or Tokenizer()
    texts = contiguous(texts)
    n = len(texts)
    lengths = np.zeros(n, dtype=np.int64)
    counts = _count(texts, tokenizer, lengths)
    if not lengths.any():
        return None
    vocabulary = contiguous(pc.unique(pa.chunked_array(counts.words, counts.words[0].type)))
    terms = vocabulary.take(pc.sort_indices(vocabulary))  # byte order, as search_sorted needs
    term = np.concatenate(
        [search_sorted(terms, words)[word_of] for words, word_of in zip(counts.words, counts.word_of, strict=True)]
    )
    rows, tf = np.concatenate(counts.rows), np.concatenate(counts.counts)
    order = np.argsort(term, kind="stable")  # by word, then row (each block's rows follow the previous block's)
    term, rows, tf = term[order], rows[order], tf[order]

    # The arithmetic of bm25s's scoring.py, operation by operation (idf in float64 stored as float32, the term
    # frequency part in float64, their product stored as float32), so that the arrays are the ones it computes.
    df = np.bincount(term, minlength=len(terms))
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)
    average = lengths.mean()
    tfc = tf / (k1 * ((1 - b) + b * lengths[rows] / average) + tf)
    data = (idf[term] * tfc).astype(np.float32)
    indptr = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])

    params = {
        "k1": k1,
        "b": b,
        "delta": 0.5,
        "method": METHOD,
        "idf_method": METHOD,
        "dtype": "float32",
        "int_dtype": "int32",
        "num_docs": n,
        "version": importlib.metadata.version("bm25s"),
        "backend": "numpy",
    }
    files: dict[str, bytes | memoryview] = {
        DATA: _npy(data),
        INDICES: _npy(rows.astype(np.int32)),
        INDPTR: _npy(indptr),
        PARAMS: (json.dumps(params, indent=4) + "\n").encode(),
        TERMS: _arrow_file(pa.RecordBatch.from_arrays([terms], names=["term"])),
    }
    info = {
        "tokenizer": tokenizer.settings(),
        "method": METHOD,
        "k1": k1,
        "b": b,
        "documents": n,
        "documents_with_words": int(np.count_nonzero(lengths)),
        "terms": len(terms),
        "postings": len(data),
        "words": int(lengths.sum()),
        "average_length": round(float(average), 3),
        "files": list(FILES),
    }
    note(f"keyword index: {len(terms):,} words, {len(data):,} postings over {n:,} documents")
    return Built(files, info)


def for_documents(payload: pa.Table, info: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bytes | memoryview]]:
    """What a documents table's import adds for keyword search: (manifest fields, files); nothing without text."""
    text_field = info.get("text_field")
    if not text_field or not info.get("text_non_null"):
        return {}, {}
    built = build(contiguous(payload.column(text_field)))
    if built is None:
        return {}, {}
    return {KEYWORD: {"field": text_field, **built.info}}, built.files


# ---------------------------------------------------------------------------------------------- searching


def _best(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows with a positive score, at most ``k``, best first; equal scores by row."""
    rows = np.flatnonzero(scores > 0)
    values = scores[rows]
    if len(rows) > k:
        kth = np.partition(values, len(values) - k)[len(values) - k]  # the k-th best score
        above = np.flatnonzero(values > kth)
        tied = np.flatnonzero(values == kth)[: k - len(above)]
        chosen = np.sort(np.concatenate([above, tied]))
        rows, values = rows[chosen], values[chosen]
    order = np.lexsort((rows, -values))
    return values[order], rows[order]


class KeywordIndex:
    """A table's BM25 index, mapped read-only."""

    def __init__(self, directory: Path, info: dict[str, Any], model: Any, terms: pa.Array) -> None:
        self.directory = directory
        self.info = info
        self.tokenizer = Tokenizer.from_settings(info["tokenizer"])
        self.k1: float = info["k1"]
        self.b: float = info["b"]
        self.rows: int = model.scores["num_docs"]
        self._model = model
        self._terms = terms

    @classmethod
    def open(cls, directory: Path, manifest: dict[str, Any]) -> KeywordIndex | None:
        """Map the keyword index of the table in ``directory``; None when the table has none.

        The files are not checksummed here: ``Table.load`` (``artifact.verify``) checks them with the rest.
        """
        info = manifest.get(KEYWORD)
        if info is None:
            return None
        directory = Path(directory)
        import bm25s

        try:
            model = bm25s.BM25.load(
                directory,
                data_name=DATA,
                indices_name=INDICES,
                indptr_name=INDPTR,
                params_name=PARAMS,
                load_vocab=False,
                mmap=True,
            )
            reader = pa.ipc.open_file(pa.memory_map(str(directory / TERMS), "r"))
            terms = reader.get_batch(0).column(0)
        except (OSError, ValueError, KeyError, pa.ArrowInvalid) as exc:
            raise ArtifactError(f"table {directory.name!r}: unreadable keyword index ({exc})") from exc
        problems = []
        if model.scores["num_docs"] != manifest.get("rows"):
            problems.append(f"{model.scores['num_docs']:,} documents for {manifest.get('rows'):,} rows")
        if len(model.scores["indptr"]) != len(terms) + 1 or len(terms) != info.get("terms"):
            problems.append(f"{len(terms):,} words for {len(model.scores['indptr']) - 1:,} postings lists")
        if (model.k1, model.b, model.method) != (info.get("k1"), info.get("b"), info.get("method")):
            problems.append(f"{PARAMS} disagrees with the manifest on k1, b or the method")
        if problems:
            raise ArtifactError(f"table {directory.name!r}: keyword index: " + "; ".join(problems))
        word_pattern()  # derived once per process, before the first query
        return cls(directory, info, model, terms)

    def term_ids(self, terms: pa.Array) -> np.ndarray:
        """The column of each word, -1 for a word no document holds."""
        if terms.type != self._terms.type:
            terms = terms.cast(self._terms.type)
        return search_sorted(self._terms, terms) if len(terms) else np.zeros(0, dtype=np.int64)

    def search(self, texts: Sequence[str], k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents of each query text: (scores float32, rows int64), shaped (queries, k), best
        first, equal scores by row; -1 (score -inf) pads. ``allowed``: a boolean per row; only those rows are
        ranked (the ``k`` best that pass, not the ``k`` best then filtered). A query with no known word has no
        hits."""
        if k < 1:
            raise InvalidQuery(f"k must be at least 1, not {k}")
        weight = None
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.dtype != np.bool_ or allowed.shape != (self.rows,):
                raise InvalidQuery(
                    f"allowed must be a boolean per row ({self.rows:,}), not {allowed.dtype} {allowed.shape}"
                )
            weight = allowed.astype(np.float32)
        m = len(texts)
        scores = np.full((m, k), -np.inf, dtype=np.float32)
        ids = np.full((m, k), -1, dtype=np.int64)
        tokens = self.tokenizer(pa.array(list(texts), pa.string()))
        columns = self.term_ids(tokens.terms)
        known = columns >= 0
        columns, owners = columns[known], tokens.rows[known]
        bounds = np.searchsorted(owners, np.arange(m + 1))
        for q in np.flatnonzero(np.diff(bounds)):  # the queries with a known word
            row_scores = self._model.get_scores_from_ids(columns[bounds[q] : bounds[q + 1]], weight_mask=weight)
            best_scores, best_rows = _best(row_scores, k)
            scores[q, : len(best_rows)], ids[q, : len(best_rows)] = best_scores, best_rows
        return scores, ids
