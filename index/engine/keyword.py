"""Keyword search over a documents table's text: BM25 (Lucene's variant) in the file layout of ``bm25s``.

The tokenizer composes the text (Unicode's NFC: ``e`` and U+0301 is ``é``, so that a word typed either way is one
word), lower-cases it (Arrow's ``utf8_lower``, Unicode's per-character mapping, then the final sigma ``ς`` folded
to ``σ`` as ``str.casefold`` folds it: letter by letter, a Greek word typed in capitals ends in ``σ``) and cuts
the text into words: maximal runs of letters, combining marks, digits and underscores (Unicode classes L, M and N,
and ``_``: ``\\w+`` that keeps a word's combining marks inside it), as RE2 classes the code points. The cut runs
over the UTF-8 bytes of many texts at once (numpy), documents and queries alike. Stop words (one of bm25s's lists)
and stemming (a Snowball stemmer of PyStemmer, the stemmer bm25s takes) are import options, applied in bm25s's order:
lower-case, cut, drop the stop words, stem. The manifest keeps the stop words themselves, the stemmer's name and
the normal form, so queries are always cut as the documents were (a table built before the text was composed
has no ``normalize``: its queries are not composed either; one built before the final sigma was folded has no
``final_sigma``: its queries keep their ``ς``).

A document's score for a query is the sum, over the query's words (a word given twice counts twice), of

    idf(t) * tf / (tf + k1 * (1 - b + b * len(d) / avglen)),   idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with ``tf`` the word's count in the document, ``len(d)`` the document's word count, ``N`` the table's rows (a
document without text counts, with length 0) and ``df(t)`` the documents holding the word: bm25s's default
method, ``lucene``. The index is built over whole columns (Arrow compute, numpy); its arrays are the ones
``bm25s.BM25.index`` computes for the same words (the tests hold them equal), kept in bm25s's file layout under
names of their own (``bm25s.BM25.load(mmap=True)`` reads them, as the tests do); the server maps them itself
(:class:`Postings`) and scores as bm25s scores; the sorted words are an Arrow file, mapped too.

Files: ``keyword_data.npy`` (float32, each posting's score), ``keyword_indices.npy`` (int32, each posting's row),
``keyword_indptr.npy`` (int64, where each word's postings start: a CSC matrix, rows x words),
``keyword_params.json`` (bm25s's parameters), ``keyword_terms.arrow`` (the words, sorted; word ``i`` is
column ``i``) and ``keyword_lengths.npy`` (int32, each row's word count, ``len(d)``: what a search beside writes
reads, ``index.engine.live_search``; a table built before it has none). The manifest's ``keyword`` records the
tokenizer, k1, b, the counts and the files.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from index.engine.budget import spend
from index.errors import ArtifactError, InvalidQuery, counted
from index.progress import Progress, note
from index.store import shardmap
from index.store.artifact import npy_bytes
from index.store.payload import contiguous, prefix_keys, search_sorted, serialise

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from index.lazy import pa, pc

KEYWORD = "keyword"  # the manifest's section
TEXTS_KEPT = 64  # query texts whose words a keyword index keeps looked up (KeywordIndex._text_columns)


def spend_postings(postings: int) -> None:
    """Count ``postings`` a keyword search is about to add up against the request's bound (a word given twice is
    scored twice, so a query of one common word repeated costs its postings per repetition): past it, the whole
    request is refused before they are scored."""
    aside = " (a word counted each time it is given)"
    spend(postings, "keyword scoring: the query words' documents", "send fewer words or queries at a time", aside)


DATA, INDICES, INDPTR = "keyword_data.npy", "keyword_indices.npy", "keyword_indptr.npy"
PARAMS, TERMS = "keyword_params.json", "keyword_terms.arrow"
LENGTHS = "keyword_lengths.npy"
FILES = (DATA, INDICES, INDPTR, LENGTHS, PARAMS, TERMS)
METHOD = "lucene"
K1, B = 1.2, 0.75  # Lucene's and Elasticsearch's defaults
# The import's default: bm25s's English stop words and PyStemmer's English stemmer, chosen by the known-item
# retrieval figures on the Lee corpus (BENCHMARKS.md).
DEFAULT_STOPWORDS, DEFAULT_STEMMER = "en", "english"
WORD = r"[\p{L}\p{M}\p{N}_]+"  # what a word is (RE2 syntax)
LOWERCASE = "utf8_lower"
FINAL_SIGMA = "folded"  # the tokenizer's final_sigma: "ς" is "σ" (none: a table built before it was folded)
NORMALIZE = "NFC"  # the text's normal form (Arrow's ``utf8_normalize``)
BLOCK_BYTES = 8 << 20  # text tokenized at a time


# bm25s's stop-word lists, by the names its tokenizer takes (``bm25s.stopwords``).
STOPWORD_LISTS = {
    "en": "STOPWORDS_EN",
    "en_plus": "STOPWORDS_EN_PLUS",
    "da": "STOPWORDS_DANISH",
    "de": "STOPWORDS_GERMAN",
    "es": "STOPWORDS_SPANISH",
    "fr": "STOPWORDS_FRENCH",
    "it": "STOPWORDS_ITALIAN",
    "ko": "STOPWORDS_KOREAN",
    "nl": "STOPWORDS_DUTCH",
    "no": "STOPWORDS_NORWEGIAN",
    "pt": "STOPWORDS_PORTUGUESE",
    "ru": "STOPWORDS_RUSSIAN",
    "sv": "STOPWORDS_SWEDISH",
    "tr": "STOPWORDS_TURKISH",
    "zh": "STOPWORDS_CHINESE",
}


def stopword_list(name: str) -> tuple[str, ...]:
    """One of bm25s's stop-word lists by name (``en``: its English list, 33 words)."""
    import bm25s.stopwords

    if name not in STOPWORD_LISTS:
        raise ValueError(f"no stop-word list {name!r}; the lists are {', '.join(STOPWORD_LISTS)}")
    return tuple(getattr(bm25s.stopwords, STOPWORD_LISTS[name]))


def english_stopwords() -> tuple[str, ...]:
    """bm25s's English stop words (``bm25s.stopwords.STOPWORDS_EN``, 33 words)."""
    return stopword_list("en")


def stemmers() -> tuple[str, ...]:
    """The Snowball algorithms PyStemmer has (``english``, ``german``, ``porter``, ...)."""
    import Stemmer

    return tuple(sorted(Stemmer.algorithms()))


_stemmers = threading.local()  # a PyStemmer object is not to be shared between threads


def stem(algorithm: str, words: list[str]) -> list[str]:
    """``words`` stemmed by PyStemmer's ``algorithm``, as bm25s stems (``Stemmer.stemWords``)."""
    import Stemmer

    cache = _stemmers.__dict__
    if algorithm not in cache:
        try:
            cache[algorithm] = Stemmer.Stemmer(algorithm)
        except KeyError:
            raise ValueError(f"no stemmer {algorithm!r}; PyStemmer has {', '.join(stemmers())}") from None
    stemmed: list[str] = cache[algorithm].stemWords(words)
    return stemmed


@dataclass(frozen=True)
class Tokens:
    terms: pa.Array  # utf8, every word of every text, in text order
    rows: np.ndarray  # int64, the text each word came from (ascending)


WORD_BYTES = np.zeros(256, dtype=bool)  # the ASCII bytes that are word characters (no other byte is ASCII)
for first, last in (("0", "9"), ("A", "Z"), ("a", "z"), ("_", "_")):
    WORD_BYTES[ord(first) : ord(last) + 1] = True


@functools.cache
def word_characters() -> np.ndarray:
    """For every code point, whether it is a word character: what RE2 (Arrow's regex engine) matches to
    :data:`WORD`, asked once for all of them (the first time a text is not ASCII)."""
    code_points = np.concatenate([np.arange(0xD800), np.arange(0xE000, sys.maxunicode + 1)]).astype(np.uint32)
    utf8 = code_points.astype("<u4").tobytes().decode("utf-32-le").encode("utf-8")
    sizes = 1 + (code_points >= 0x80) + (code_points >= 0x800) + (code_points >= 0x10000)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    each = pa.StringArray.from_buffers(len(code_points), pa.py_buffer(offsets), pa.py_buffer(utf8))
    table = np.zeros(sys.maxunicode + 1, dtype=bool)
    table[code_points] = bools(pc.match_substring_regex(each, pattern=f"^{WORD}$"))
    return table


def bools(array: pa.Array) -> np.ndarray:
    """A boolean Arrow array (nulls as False) as NumPy booleans."""
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=bool)


def word_bytes(data: np.ndarray) -> np.ndarray:
    """Whether each byte of UTF-8 text belongs to a word character: a table lookup per ASCII byte; the other
    characters decoded (from their first byte and the low six bits of the next ones) and looked up."""
    word = WORD_BYTES[data]
    beyond = np.flatnonzero(data >= 0x80)
    if len(beyond):
        leads = data[beyond] >= 0xC0  # a character's first byte (the others are 10xxxxxx)
        at = beyond[leads]
        padded = np.concatenate([data, np.zeros(3, dtype=np.uint8)])
        b0 = padded[at].astype(np.uint32)
        b1, b2, b3 = (padded[at + i].astype(np.uint32) & 0x3F for i in (1, 2, 3))
        code = np.where(
            b0 < 0xE0,
            (b0 & 0x1F) << 6 | b1,
            np.where(b0 < 0xF0, (b0 & 0x0F) << 12 | b1 << 6 | b2, (b0 & 0x07) << 18 | b1 << 12 | b2 << 6 | b3),
        )
        word[beyond] = word_characters()[code][np.cumsum(leads) - 1]
    return np.asarray(word, dtype=bool)


def _utf8(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The texts' UTF-8 bytes end to end and where each text starts in them (int64, one more than the texts)."""
    wide = pa.types.is_large_string(texts.type)
    _, offsets_buffer, data_buffer = texts.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)[
        texts.offset : texts.offset + len(texts) + 1
    ]
    everything = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    return everything[offsets[0] : offsets[-1]], (offsets - offsets[0]).astype(np.int64)


def composed(texts: pa.Array) -> pa.Array:
    """``texts`` (no nulls) in Unicode's composed form, NFC (Arrow's ``utf8_normalize``). Only the texts holding a
    code point from U+0300 on (a UTF-8 byte from 0xCC on, the first byte of one) are normalised: every character
    before it is its own NFC and composes with none before it (the first combining mark is U+0300)."""
    data, starts = _utf8(texts)
    at = np.flatnonzero(data >= 0xCC)
    if not len(at):
        return texts
    other = np.zeros(len(texts), dtype=bool)
    other[np.searchsorted(starts, at, side="right") - 1] = True
    mask = pa.array(other)
    return pc.replace_with_mask(texts, mask, pc.utf8_normalize(texts.filter(mask), NORMALIZE))


def sigma_folded(lowered: pa.Array) -> pa.Array:
    """``lowered`` (no nulls) with the final sigma ``ς`` as ``σ``, as ``str.casefold`` folds it: lower-cased letter
    by letter, ``ΟΔΟΣ`` is ``οδοσ``, which the word typed in lower case, ``οδος``, is then too. Only the texts holding
    a UTF-8 byte CF (the first byte of ``ς``, U+03C2, and of the Greek letters around it) are searched."""
    data, starts = _utf8(lowered)
    at = np.flatnonzero(data == 0xCF)
    if not len(at):
        return lowered
    holds = np.zeros(len(lowered), dtype=bool)
    holds[np.searchsorted(starts, at, side="right") - 1] = True
    mask = pa.array(holds)
    return pc.replace_with_mask(lowered, mask, pc.replace_substring(lowered.filter(mask), "ς", "σ"))


def _cut(lowered: pa.Array) -> Tokens:
    """The words of each text: the runs of word bytes, a text's end ending a run (all vectorised)."""
    data, starts_of_texts = _utf8(lowered)
    word = word_bytes(data)
    step = np.diff(word.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(step == 1), np.flatnonzero(step == -1)  # ends: one past a run's last byte
    inner = starts_of_texts[(starts_of_texts > 0) & (starts_of_texts < len(data))]
    joined = np.unique(inner[word[inner] & word[inner - 1]])  # runs that go on from one text into the next
    if len(joined):
        starts = np.insert(starts, np.searchsorted(starts, joined), joined)
        ends = np.insert(ends, np.searchsorted(ends, joined), joined)
    term_offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(ends - starts, out=term_offsets[1:])
    large = term_offsets[-1] >= 2**31
    terms = (pa.LargeStringArray if large else pa.StringArray).from_buffers(
        len(starts),
        pa.py_buffer(term_offsets if large else term_offsets.astype(np.int32)),
        pa.py_buffer(np.ascontiguousarray(data[word])),  # the word bytes, run after run: the words end to end
    )
    per_text = np.diff(np.searchsorted(starts, starts_of_texts))
    return Tokens(terms, np.repeat(np.arange(len(per_text), dtype=np.int64), per_text))


@dataclass(frozen=True)
class Tokenizer:
    """Compose, lower-case, cut into words, drop the stop words, stem (no stop words and no stemming by default).
    ``normalize`` None: the text is cut as it comes (a table built before it was composed); ``final_sigma`` None:
    a ``ς`` stays a ``ς`` (a table built before it was folded)."""

    stopwords: tuple[str, ...] = ()
    stopwords_name: str | None = None  # the list's name ("en": bm25s's English list)
    stemmer: str | None = None  # a Snowball algorithm of PyStemmer ("english")
    normalize: str | None = NORMALIZE
    final_sigma: str | None = FINAL_SIGMA

    @classmethod
    def english(cls) -> Tokenizer:
        return cls(english_stopwords(), "en")

    @classmethod
    def named(cls, stopwords: str | None = None, stemmer: str | None = None) -> Tokenizer:
        """The tokenizer of a stop-word list and a stemmer, by name (None: none); ValueError for unknown names."""
        if stemmer is not None:
            stem(stemmer, [])  # an unknown algorithm is refused here, not at the first text
        return cls(stopword_list(stopwords) if stopwords else (), stopwords, stemmer)

    def __call__(self, texts: pa.Array | Sequence[str | None]) -> Tokens:
        try:
            column = texts if isinstance(texts, pa.Array) else pa.array(list(texts), pa.string())
        except (UnicodeError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidQuery(f"texts must be valid Unicode strings ({exc})") from None
        column = column.fill_null("")
        if self.normalize:
            column = composed(column)
        lowered = pc.utf8_lower(column)
        if self.final_sigma:
            lowered = sigma_folded(lowered)
        cut = _cut(lowered)
        terms, rows = cut.terms, cut.rows
        if self.stopwords and len(terms):
            keep = pc.invert(pc.is_in(terms, value_set=pa.array(self.stopwords, terms.type)))
            terms, rows = terms.filter(keep), rows[bools(keep)]
        if self.stemmer and len(terms):
            encoded = pc.dictionary_encode(terms)  # each distinct word stemmed once
            stems = pa.array(stem(self.stemmer, encoded.dictionary.to_pylist()), terms.type)
            terms = stems.take(encoded.indices)
        return Tokens(terms, rows)

    def words(self, text: str) -> list[str]:
        """The words of one text, as the index sees them."""
        result: list[str] = self([text]).terms.to_pylist()
        return result

    def settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "lowercase": LOWERCASE,
            "word": WORD,
            "normalize": self.normalize,
            "final_sigma": self.final_sigma,
            "stopwords": self.stopwords_name if self.stopwords else None,
            "stopword_list": list(self.stopwords),
            "stemmer": self.stemmer,
        }
        if self.stemmer:
            settings["stemmer_library"] = f"PyStemmer {importlib.metadata.version('PyStemmer')}"
        return settings

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Tokenizer:
        """The tokenizer a manifest records (a table built before stemming was an option has no ``stemmer``, one built
        before the text was composed no ``normalize``, one built before the final sigma was folded no
        ``final_sigma``)."""
        normalize, final_sigma = settings.get("normalize"), settings.get("final_sigma")
        if (
            settings.get("lowercase") != LOWERCASE
            or settings.get("word") != WORD
            or normalize not in (None, NORMALIZE)
            or final_sigma not in (None, FINAL_SIGMA)
        ):
            raise ArtifactError(f"keyword index tokenized otherwise than this version does: {settings}")
        stemmer = settings.get("stemmer")
        if stemmer is not None and stemmer not in stemmers():
            raise ArtifactError(f"keyword index stemmed by {stemmer!r}, which PyStemmer does not have")
        stopwords = tuple(settings.get("stopword_list") or ())
        return cls(stopwords, settings.get("stopwords"), stemmer, normalize, final_sigma)


# ---------------------------------------------------------------------------------------------- building


@dataclass
class Built:
    files: dict[str, bytes | memoryview]
    info: dict[str, Any]  # the manifest's "keyword"


@dataclass
class _Counts:
    """Each row's distinct words and their counts, block by block, the words as text until all are known."""

    words: list[pa.Array] = field(default_factory=list)  # each block's distinct words
    word_of: list[np.ndarray] = field(default_factory=list)  # per (row, word) pair: the word, in its block's words
    rows: list[np.ndarray] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)


def text_blocks(texts: pa.Array) -> list[tuple[int, int]]:
    """(start, stop) rows of about BLOCK_BYTES of text each (at least one row)."""
    ends = np.cumsum(np.asarray(pc.binary_length(texts).fill_null(0).to_numpy(), dtype=np.int64))
    blocks, start = [], 0
    while start < len(texts):
        before = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, before + BLOCK_BYTES, side="right")))
        blocks.append((start, stop))
        start = stop
    return blocks


def _count(texts: pa.Array, tokenizer: Tokenizer, lengths: np.ndarray) -> _Counts:
    """Each block's words counted per row (one sort per block); ``lengths`` gets each row's word count."""
    counts = _Counts()
    with Progress("keyword index", len(texts)) as progress:
        for start, stop in text_blocks(texts):
            tokens = tokenizer(texts.slice(start, stop - start))
            encoded = pc.dictionary_encode(tokens.terms)
            size = max(len(encoded.dictionary), 1)
            lengths[start:stop] = np.bincount(tokens.rows, minlength=stop - start)
            pairs, tf = np.unique(tokens.rows * size + encoded.indices.to_numpy(), return_counts=True)
            counts.words.append(encoded.dictionary)
            counts.word_of.append((pairs % size).astype(np.int32))
            counts.rows.append((pairs // size + start).astype(np.int32))
            counts.counts.append(tf.astype(np.int32))
            progress.advance(stop - start)
    return counts


@dataclass(frozen=True)
class Statistics:
    """What BM25 scores a document against beyond the document itself: the table's documents, their average
    length and each word's document frequency (``terms`` sorted, ``df[i]`` the documents holding ``terms[i]``).
    A shard of a table is indexed with its whole table's, so that it scores as the whole table does."""

    documents: int
    average_length: float
    words: int  # every document's words, summed
    terms: pa.Array
    df: np.ndarray  # int64

    def of(self, terms: pa.Array) -> np.ndarray:
        """The document frequency of each of ``terms`` (sorted words every one of which these statistics hold)."""
        at = search_sorted(self.terms, terms.cast(self.terms.type) if terms.type != self.terms.type else terms)
        if (at < 0).any():
            raise ValueError("statistics of other documents: a word of these is missing from them")
        return np.asarray(self.df[at], dtype=np.int64)


def _terms_of(texts: pa.Array, tokenizer: Tokenizer) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sorted words, each posting's word, row and count, each row's length) of ``texts``; no words: empty."""
    texts = contiguous(texts)
    lengths = np.zeros(len(texts), dtype=np.int64)
    counts = _count(texts, tokenizer, lengths)
    if not lengths.any():
        empty = np.zeros(0, dtype=np.int64)
        return pa.array([], pa.string()), empty, empty, empty, lengths
    vocabulary = contiguous(pc.unique(pa.chunked_array(counts.words, counts.words[0].type)))
    terms = vocabulary.take(pc.sort_indices(vocabulary))  # byte order, as search_sorted needs
    term = np.concatenate(
        [search_sorted(terms, words)[word_of] for words, word_of in zip(counts.words, counts.word_of, strict=True)]
    )
    del counts.word_of
    rows, tf = np.concatenate(counts.rows), np.concatenate(counts.counts)
    return terms, term, rows, tf, lengths


def statistics(texts: pa.Array, tokenizer: Tokenizer) -> Statistics:
    """The BM25 statistics of ``texts`` (a whole table's, for its shards)."""
    terms, term, _, _, lengths = _terms_of(texts, tokenizer)
    df = np.bincount(term, minlength=len(terms)).astype(np.int64)
    return Statistics(len(lengths), float(lengths.mean()) if len(lengths) else 0.0, int(lengths.sum()), terms, df)


def build(
    texts: pa.Array,
    tokenizer: Tokenizer | None = None,
    k1: float = K1,
    b: float = B,
    whole: Statistics | None = None,
) -> Built | None:
    """The keyword index of ``texts`` (row ``i`` is the table's row ``i``; nulls are documents without text);
    None when no text holds a word, unless ``whole`` is given: the statistics to score with (a shard's table's),
    by default those of ``texts``; a shard's index is built even of no word (a shard can be compacted empty),
    so that every shard answers keyword searches."""
    tokenizer = tokenizer or Tokenizer()
    terms, term, rows, tf, lengths = _terms_of(texts, tokenizer)
    n = len(lengths)
    if not lengths.any() and whole is None:
        return None

    # The arithmetic of bm25s's scoring.py, operation by operation (idf in float64 stored as float32, the term
    # frequency part in float64, their product stored as float32), so that the arrays are the ones it computes.
    df = np.bincount(term, minlength=len(terms)) if whole is None else whole.of(terms)
    scored = n if whole is None else whole.documents
    idf = np.log(1 + (scored - df + 0.5) / (df + 0.5)).astype(np.float32)
    average = lengths.mean() if whole is None else whole.average_length
    tfc = tf / (k1 * ((1 - b) + b * lengths[rows] / average) + tf)
    data = (idf[term] * tfc).astype(np.float32)
    del tfc
    # Rows x words, by word: scipy's COO to CSC is a counting sort, which keeps each word's rows ascending. scipy
    # is imported here, not with the module: the processes that only search (every server) never need it.
    import scipy.sparse

    matrix = scipy.sparse.csc_matrix((data, (rows, term)), shape=(n, len(terms)))
    del data, rows, term
    indptr = matrix.indptr.astype(np.int64)

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
        DATA: npy_bytes(matrix.data),
        INDICES: npy_bytes(matrix.indices.astype(np.int32)),
        INDPTR: npy_bytes(indptr),
        LENGTHS: npy_bytes(lengths.astype(np.int32)),
        PARAMS: (json.dumps(params, indent=4) + "\n").encode(),
        TERMS: serialise(pa.RecordBatch.from_arrays([terms], names=["term"])),
    }
    info = {
        "tokenizer": tokenizer.settings(),
        "method": METHOD,
        "k1": k1,
        "b": b,
        "documents": n,
        "documents_with_words": int(np.count_nonzero(lengths)),
        "terms": len(terms),
        "postings": matrix.nnz,
        "words": int(lengths.sum()),
        "average_length": round(float(average), 3),
        "files": list(FILES),
    }
    if whole is not None:
        info["statistics"] = {"documents": whole.documents, "words": whole.words, "terms": len(whole.terms)}
    note(
        f"keyword index: {counted(len(terms), 'word')}, {counted(matrix.nnz, 'posting')} over {counted(n, 'document')}"
    )
    return Built(files, info)


def for_documents(
    payload: pa.Table, info: dict[str, Any], tokenizer: Tokenizer | None = None
) -> tuple[dict[str, Any], dict[str, bytes | memoryview]]:
    """What a documents table's import adds for keyword search: (manifest fields, files); nothing without text.
    ``tokenizer``: the import's (by default its default stop words and stemmer)."""
    text_field = info.get("text_field")
    if not text_field or not info.get("text_non_null"):
        return {}, {}
    tokenizer = tokenizer or Tokenizer.named(DEFAULT_STOPWORDS, DEFAULT_STEMMER)
    built = build(contiguous(payload.column(text_field)), tokenizer)
    if built is None:
        return {}, {}
    return {KEYWORD: {"field": text_field, **built.info}}, built.files


# ---------------------------------------------------------------------------------------------- searching


def best_positive(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
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


@dataclass(frozen=True)
class Postings:
    """The stored scores in bm25s's layout, mapped: for word (column) ``c``, the rows
    ``indices[indptr[c]:indptr[c + 1]]`` that hold it and their scores for it, ``data`` at the same places."""

    data: np.ndarray  # float32
    indices: np.ndarray  # int32
    indptr: np.ndarray
    rows: int  # the documents

    def column(self, column: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding word ``column`` and their stored scores for it (int32, float32, as mapped)."""
        start, stop = int(self.indptr[column]), int(self.indptr[column + 1])
        return self.indices[start:stop], self.data[start:stop]

    def scores(self, columns: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
        """Every row's score for the words ``columns`` (times ``weight``, per row): the sum of its stored scores,
        added up as bm25s's ``BM25.get_scores_from_ids`` adds them (float32, word by word, in order), so that the
        scores are its own to the bit. (Read here rather than through bm25s: importing it imports numba and scipy,
        a cost at every server's start, BENCHMARKS.md section 4.)"""
        scores = np.zeros(self.rows, dtype=np.float32)
        for column in np.asarray(columns, dtype=np.int32).tolist():  # the query's words, a handful
            np.add.at(scores, *self.column(column))
        if weight is not None:
            scores *= weight
        return scores


class KeywordIndex:
    """A table's BM25 index, mapped read-only."""

    def __init__(
        self,
        directory: Path,
        info: dict[str, Any],
        postings: Postings,
        terms: pa.Array,
        whole: Statistics | None = None,
        lengths: np.ndarray | None = None,
    ) -> None:
        self.directory = directory
        self.info = info
        self.tokenizer = Tokenizer.from_settings(info["tokenizer"])
        self.k1: float = info["k1"]
        self.b: float = info["b"]
        self.rows: int = postings.rows
        self._postings = postings
        self._terms = terms
        # A shard's: the whole table's statistics its scores were made with (None: its own documents')
        self.whole = whole
        self.lengths = lengths  # each row's word count (int32, mapped); None: a table built before they were kept
        # The words of the last texts looked up one at a time: a query's text is looked up by the door (whether a
        # document holds one of its words, :meth:`holds`), then by its search, each one tokenizer run otherwise.
        # Kept here, not by ``functools.lru_cache`` of a bound method: that would refer back to the index, which a
        # reload then leaves to the collector (never, for a server's frozen start-up objects), its files held open.
        self._texts: OrderedDict[str, np.ndarray] = OrderedDict()
        self._texts_lock = threading.Lock()

    @classmethod
    def open(
        cls, directory: Path, manifest: dict[str, Any], whole: shardmap.WholeKeyword | None = None
    ) -> KeywordIndex | None:
        """Map the keyword index of the table in ``directory``; None when the table has none. A shard's whole
        table's statistics are ``whole`` when its loader read them already, else read beside the map.

        The files are not checksummed here: ``Table.load`` (``artifact.verify``) checks them with the rest.
        """
        info = manifest.get(KEYWORD)
        if info is None:
            return None
        directory = Path(directory)
        try:
            params = json.loads((directory / PARAMS).read_bytes())
            # Plain ndarray views of the read-only maps, as the table's vectors: indexing a np.memmap costs
            # microseconds on every query's every word.
            data, indices, indptr = (
                np.load(directory / name, mmap_mode="r").view(np.ndarray) for name in (DATA, INDICES, INDPTR)
            )
            postings = Postings(data, indices, indptr, params["num_docs"])
            kept = LENGTHS in info.get("files", ())  # not by a table built before the lengths were kept
            lengths = np.load(directory / LENGTHS, mmap_mode="r").view(np.ndarray) if kept else None
            reader = pa.ipc.open_file(pa.memory_map(str(directory / TERMS), "r"))
            terms = reader.get_batch(0).column(0)
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowInvalid) as exc:
            raise ArtifactError(f"table {directory.name!r}: unreadable keyword index ({exc})") from exc
        problems = []
        if postings.rows != manifest.get("rows"):
            problems.append(f"{postings.rows:,} documents for {manifest.get('rows'):,} rows")
        if len(postings.indptr) != len(terms) + 1 or len(terms) != info.get("terms"):
            problems.append(f"{len(terms):,} words for {len(postings.indptr) - 1:,} postings lists")
        if any(params.get(name) != info.get(name) for name in ("k1", "b", "method")):
            problems.append(f"{PARAMS} disagrees with the manifest on k1, b or the method")
        if (postings.data.dtype, postings.indices.dtype) != (np.dtype(np.float32), np.dtype(np.int32)):
            problems.append(f"scores of {postings.data.dtype} and rows of {postings.indices.dtype}")
        if lengths is not None and (lengths.dtype != np.int32 or lengths.shape != (postings.rows,)):
            problems.append(f"{lengths.dtype} lengths of shape {lengths.shape} for {postings.rows:,} documents")
        if problems:
            raise ArtifactError(f"table {directory.name!r}: keyword index: " + "; ".join(problems))
        word_characters()  # once per process, before a first query that is not ASCII
        statistics = None
        if "statistics" in info:  # a shard, scored with its whole table's statistics
            found = whole if whole is not None else shardmap.whole_keyword(directory)
            if found is not None:
                statistics = Statistics(found.documents, found.average_length, found.words, found.terms, found.df)
        return cls(directory, info, postings, terms, statistics, lengths)

    def term_ids(self, terms: pa.Array) -> np.ndarray:
        """The column of each word, -1 for a word no document holds."""
        if terms.type != self._terms.type:
            terms = terms.cast(self._terms.type)
        return search_sorted(self._terms, terms, self._term_keys) if len(terms) else np.zeros(0, dtype=np.int64)

    @functools.cached_property
    def _term_keys(self) -> np.ndarray:
        """The sorted words' :func:`prefix_keys`, made on the first look-up."""
        return prefix_keys(self._terms)

    def document_counts(self, terms: pa.Array) -> np.ndarray:
        """How many documents hold each word (0: none), read from where its postings start and stop."""
        columns = self.term_ids(terms)
        known = columns >= 0
        counts = np.zeros(len(columns), dtype=np.int64)
        indptr = self._postings.indptr
        counts[known] = indptr[columns[known] + 1] - indptr[columns[known]]
        return counts

    def postings(self, word: str) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding ``word`` and their stored scores for it (none when no document holds it)."""
        return self.postings_of([word])[0]

    def postings_of(self, words: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`postings` of each of ``words``, their columns looked up together (one search of the sorted
        words, not one a word)."""
        out = []
        for column in self.term_ids(pa.array(list(words), pa.string())).tolist():
            if column < 0:
                out.append((np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)))
                continue
            rows, scores = self._postings.column(column)
            out.append((np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float64)))
        return out

    def holds(self, text: str) -> bool:
        """Whether some document holds a word of ``text`` as the index reads it: whether :meth:`search` finds it a
        hit, every row not filtered out (each word of the index is some document's, which it scores above zero),
        found in the words without scoring a document."""
        return bool((self._text_columns(text) >= 0).any())

    def _text_columns(self, text: str) -> np.ndarray:
        """The column of each word of ``text`` (-1: a word no document holds), for the last ``TEXTS_KEPT`` texts
        kept."""
        with self._texts_lock:
            columns = self._texts.get(text)
            if columns is not None:
                self._texts.move_to_end(text)
                return columns
        columns = self.term_ids(self.tokenizer([text]).terms)
        columns.flags.writeable = False  # kept
        with self._texts_lock:
            self._texts[text] = columns
            if len(self._texts) > TEXTS_KEPT:
                self._texts.popitem(last=False)
        return columns

    def _query_columns(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The column of each word of ``texts`` (-1: a word no document holds) and the text it is a word of."""
        if len(texts) == 1:  # one query's text, which the door's :meth:`holds` has just looked up
            columns = self._text_columns(texts[0])
            return columns, np.zeros(len(columns), dtype=np.int64)
        tokens = self.tokenizer(pa.array(list(texts), pa.string()))
        return self.term_ids(tokens.terms), tokens.rows

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
        columns, owners = self._query_columns(texts)
        known = columns >= 0
        columns, owners = columns[known], owners[known]
        indptr = self._postings.indptr
        spend_postings(int((indptr[columns + 1] - indptr[columns]).sum()))
        bounds = np.searchsorted(owners, np.arange(m + 1))
        for q in np.flatnonzero(np.diff(bounds)):  # the queries with a known word
            row_scores = self._postings.scores(columns[bounds[q] : bounds[q + 1]], weight)
            best_scores, best_rows = best_positive(row_scores, k)
            scores[q, : len(best_rows)], ids[q, : len(best_rows)] = best_scores, best_rows
        return scores, ids
