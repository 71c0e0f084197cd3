"""Texts to vectors with a table's rows: one :class:`Encoder`, chosen by the table's kind.

- Model-token tables (``kind == "tokens"``): the table's own tokenizer splits each text (no [CLS]/[SEP]
  added); special pieces ([UNK], or a special token typed in the text, matched as the tokenizer matches it) are
  left out and counted as unknown; a text of nothing else is refused naming them as typed ("[CLS] is a special
  token").
  The vector is the mean of the pieces' *original* rows, ``vectors * norms`` (the model's embedding rows, as
  model2vec and sentence-transformers' mean pooling see them; the unit rows would let a rare piece count as
  much as a frequent one), each times its weight when the table has per-token weights (a model2vec model's
  ``weights``), then scaled to unit length. A model2vec model's ``max_length`` keeps that many pieces a text
  (after cutting the text to ``max_length`` x the median label length in characters), as model2vec does.
- Word tables (``kind == "words"``): the text's words (:func:`split_words`: lower-cased, NFC, runs of word
  characters and combining marks, as the keyword index cuts them), each the row of exactly that label, else of
  its case-folded match; words not in the table are counted as unknown. ``sif``
  (Arora, Liang and Ma 2017, "A simple but tough-to-beat baseline for sentence embeddings"): the mean of the
  original rows weighted a / (a + p(w)), minus its projection on the table's common component (the first
  principal component of a reference corpus's such vectors, computed by ``embedding-index sif``, see
  :mod:`index.build.sif`), then unit length; ``mean``: the plain mean of the original rows, unit length. p(w) is
  count / total from a ``count`` (or ``counts``) metadata column when the table has one, else Zipf's law over
  the row order, which is frequency order for every source read here: p proportional to 1 / (rank + 1).

A table's default pooling is ``sif`` for a word table with its component, else ``mean``. A text without a
single known token is an :class:`InvalidQuery` naming it. The arithmetic is float64; vectors are float32.

A transformer table (``import --format transformer``) is encoded by its model instead: :func:`encoder_for` gives
its :class:`index.engine.transformer_encoder.TransformerEncoder`, which answers the same calls.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from index.engine.encoding import POOLINGS as POOLINGS  # re-exported: the routes import them from here
from index.engine.encoding import Encoded as Encoded
from index.engine.encoding import Pooling as Pooling
from index.engine.lookup import spellings
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store import artifact
from index.store.tokens import DOTTED_I, FLAG_SPECIAL, WEIGHTS

if TYPE_CHECKING:
    from index.engine.transformer_encoder import TransformerEncoder

DEFAULT_A = 1e-3  # SIF's a, as in the paper
COUNT_COLUMNS = ("count", "counts")  # metadata columns read as word counts
WORD = re.compile(r"\w+")
PREVIEW_CHARS = 60
DENSE_MIXING = 1 << 12  # cells of a mixing matrix multiplied dense (below) or sparse (above)


@dataclass(frozen=True, slots=True)
class Pieces:
    """The known tokens of a batch of texts, flattened: row ``ids[i]`` belongs to text ``text_of[i]``."""

    text_of: np.ndarray  # int64, non-decreasing
    ids: np.ndarray  # int64 rows
    unknown: np.ndarray  # int64 per text


def preview(text: str) -> str:
    return repr(text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…")


class NoKnownWord(InvalidQuery):
    """A text whose vector the encoder cannot make: none of its words is known, or its known words' rows cancel
    out (a keyword search can still find the words as written)."""


SHOWN_WORDS = 10  # unknown words a message names
INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}  # Unicode categories of characters that do not show


@cache
def _word_with_marks() -> re.Pattern[str]:
    """``\\w+`` that keeps combining marks (Unicode class M) inside a word, as the keyword index cuts words
    (Python's ``\\w`` has none: it would cut ``हिन्दी`` into ``ह``, ``न`` and ``द``); built on first use."""
    marks = [c for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c))[0] == "M"]
    starts = [c for i, c in enumerate(marks) if i == 0 or marks[i - 1] != c - 1]
    ends = [c for i, c in enumerate(marks) if i == len(marks) - 1 or marks[i + 1] != c + 1]
    ranges = "".join(f"{chr(a)}-{chr(b)}" for a, b in zip(starts, ends, strict=True))
    return re.compile(f"[\\w{ranges}]+")


def split_words(text: str) -> list[str]:
    """A word table's words of ``text``: lower-cased, composed (NFC: a decomposed ``café`` is the label ``café``),
    runs of word characters and combining marks."""
    if text.isascii():
        return WORD.findall(text.lower())
    return _word_with_marks().findall(unicodedata.normalize("NFC", text.lower()))


def words_of(text: str) -> list[str]:
    """The text's distinct words, as a word table's encoder looks them up (else its symbols)."""
    return list(dict.fromkeys(split_words(text) or text.split()))


def no_known_word(label: str, content: str, whose: str, **details: Any) -> NoKnownWord:
    """The error for a text (``content``, called ``label``) with no word ``whose`` vocabulary holds, naming its
    words."""
    words = words_of(content)
    if not any(map(visible, words)):  # none, or only zero-width spaces, NULs and other invisible characters
        return NoKnownWord(f"{label} {preview(content)} has no words to embed", words=[], **details)
    message = f"{label} {preview(content)}: no word of it is known to {whose}: unknown {listed(words, printable)}"
    return NoKnownWord(message, words=words, **details)


def visible(word: str) -> bool:
    """Whether ``word`` has a character that shows: not only format and control characters (a zero-width space,
    NUL) and separators (a private-use character shows, as a font draws it)."""
    return any(unicodedata.category(c) not in INVISIBLE for c in word)


def printable(word: str) -> str:
    """``word`` as a message names it: as it is, or quoted with its invisible characters escaped (``'a\\u200b'``),
    cut at :data:`PREVIEW_CHARS` as a text is."""
    shown = word if len(word) <= PREVIEW_CHARS else word[:PREVIEW_CHARS] + "…"
    return shown if shown.isprintable() else repr(shown)


def listed(words: list[str], show: Callable[[str], str] = str) -> str:
    """The first :data:`SHOWN_WORDS` of ``words``, each as ``show`` writes it, comma-separated, and how many more
    there are."""
    more = f" (and {len(words) - SHOWN_WORDS} more)" if len(words) > SHOWN_WORDS else ""
    return ", ".join(map(show, words[:SHOWN_WORDS])) + more


def cancelled_out(label: str, content: str, known: list[str], whose: str, **details: Any) -> NoKnownWord:
    """The error for a text whose ``known`` words (or pieces) pool to the zero vector, naming them."""
    shown = listed(known, repr)
    message = f"{label} {preview(content)}: its words known to {whose} ({shown}) cancel out: it pools to a zero vector"
    return NoKnownWord(message, words=known, **details)


def no_known_piece(
    label: str, content: str, unknown: list[str], special: list[str], whose: str, **details: Any
) -> NoKnownWord:
    """The error for a text a model-token table has no piece of, naming what its tokenizer left out as typed:
    ``unknown`` (made [UNK] of) and ``special`` (special tokens typed in the text, matched as the model's
    tokenizer matches them)."""
    parts = [f"unknown {listed(unknown, printable)}"] if unknown else []
    if special:
        are = "is a special token" if len(special) == 1 else "are special tokens"
        parts.append(f"{listed(special, printable)} {are}, which the table leaves out")
    message = f"{label} {preview(content)}: no word of it is known to {whose}: {'; '.join(parts)}"
    return NoKnownWord(message, words=unknown + special, **details)


def unembedded(encoded: Encoded, i: int, label: str, content: str, whose: str, **details: Any) -> NoKnownWord:
    """The error for text ``i`` of ``encoded`` (its tokens count 0): its known words cancel out, or none is known."""
    if i in encoded.cancelled:
        return cancelled_out(label, content, encoded.cancelled[i], whose, **details)
    if i in encoded.left_out:
        return no_known_piece(label, content, *encoded.left_out[i], whose, **details)
    return no_known_word(label, content, whose, **details)


def check_known(encoded: Encoded, texts: Sequence[str], whose: str, name: str, lone: bool = False) -> None:
    """A :class:`NoKnownWord` for the first of ``texts`` (called ``name[i]``, or ``name`` if it was sent ``lone``,
    not in a list) that ``encoded`` made no vector of, or that is blank: a transformer embeds one as [CLS] [SEP]
    alone, which a static encoder has no vector for."""
    for i, tokens in enumerate(encoded.tokens):
        if tokens == 0 or not visible(texts[i]):
            raise unembedded(encoded, i, name if lone else f"{name}[{i}]", texts[i], whose, text=i)


class Encoder:
    """Text vectors from one table (see the module docstring for what each kind of table does)."""

    def __init__(self, table: Table, a: float | None = None) -> None:
        if table.kind not in ("words", "tokens"):
            raise InvalidQuery(f"table {table.name!r} holds {table.kind}: text is embedded with a word or model table")
        if table.kind == "tokens" and not table.has_tokenizer:
            raise InvalidQuery(f"table {table.name!r} has no tokenizer to split text with")
        self.table = table
        self.sif_info: dict[str, Any] | None = table.manifest.get("sif")
        self.a = float(a if a is not None else (self.sif_info or {}).get("a", DEFAULT_A))
        if not self.a > 0:
            raise InvalidQuery(f"SIF's a must be positive, got {self.a}")
        model2vec = table.manifest.get("model2vec") or {}
        self.max_length: int | None = model2vec.get("max_length")
        self.max_chars = None if self.max_length is None else self.max_length * int(model2vec["median_token_length"])

    # ------------------------------------------------------------------ what the table offers
    @property
    def default_pooling(self) -> Pooling:
        return "sif" if self.table.kind == "words" and self.sif_info is not None else "mean"

    def check(self, pooling: str | None) -> Pooling:
        """The pooling asked for (the table's default for None); :class:`InvalidQuery` if the table cannot."""
        if pooling is None:
            return self.default_pooling
        if pooling not in POOLINGS:
            raise InvalidQuery(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        if pooling == "cls":
            raise InvalidQuery(f"cls pooling is a transformer model's; table {self.table.name!r} pools its rows")
        if pooling == "sif" and self.table.kind != "words":
            raise InvalidQuery(f"sif pooling is for word tables; table {self.table.name!r} is a model-token table")
        if pooling == "sif" and self.sif_info is None:
            raise InvalidQuery(
                f"table {self.table.name!r} has no SIF component yet: `embedding-index sif {self.table.name}` "
                "computes it (or ask for pooling mean)"
            )
        return "sif" if pooling == "sif" else "mean"

    @cached_property
    def component(self) -> np.ndarray:
        """The word table's SIF common component (unit length, float64)."""
        if self.sif_info is None:
            raise InvalidQuery(f"table {self.table.name!r} has no SIF component")
        component = np.load(self.table.opened.needed(artifact.sif_file(self.sif_info)), allow_pickle=False)
        if component.shape != (self.table.dim,):
            raise InvalidQuery(f"table {self.table.name!r}: its SIF component has shape {list(component.shape)}")
        unit: np.ndarray = np.asarray(component, dtype=np.float64) / np.linalg.norm(component)
        return unit

    @cached_property
    def frequencies(self) -> np.ndarray:
        """p(w) of every row: from the counts column, else Zipf over the row order (float64, sums to 1)."""
        column = next((name for name in COUNT_COLUMNS if name in self.table.metadata), None)
        if column is None:
            zipf: np.ndarray = 1.0 / np.arange(1, self.table.rows + 1, dtype=np.float64)
            zipf /= zipf.sum()
            return zipf
        values = self.table.metadata[column]
        try:
            counts = np.asarray(values, dtype=np.float64)
        except ValueError:
            row = next(i for i, v in enumerate(values) if not _is_number(v))
            raise InvalidQuery(f"table {self.table.name!r}: {column} of row {row} is {values[row]!r}") from None
        bad = ~np.isfinite(counts) | (counts < 0)
        if bad.any() or counts.sum() <= 0:
            row = int(np.argmax(bad))
            raise InvalidQuery(f"table {self.table.name!r}: the {column} column must hold counts (row {row})")
        frequencies: np.ndarray = counts / counts.sum()
        return frequencies

    @property
    def frequency_source(self) -> str:
        column = next((name for name in COUNT_COLUMNS if name in self.table.metadata), None)
        return f"column {column}" if column else "zipf"

    @cached_property
    def cased(self) -> bool:
        """Whether some label is not in lower case (then a word that is no label may match one case-folded)."""
        blob, offsets = self.table.tokens.blob_and_offsets()
        if np.any((blob >= ord("A")) & (blob <= ord("Z"))):
            return True
        wide = np.unique(np.searchsorted(offsets, np.flatnonzero(blob >= 0x80), "right") - 1)  # non-ASCII labels
        return any(label != label.lower() for label in self.table.tokens.labels(wide.tolist()))

    @property
    def tokenizer(self) -> Any:
        return self.table.lookup.tokenizer  # the one the table's lookups tokenize with

    @cached_property
    def token_weights(self) -> np.ndarray | None:
        path = self.table.opened.path(WEIGHTS)
        if path is None:
            return None
        weights: np.ndarray = np.load(path, mmap_mode="r").view(np.ndarray)
        return weights

    # ------------------------------------------------------------------ the steps
    def pieces(self, texts: list[str]) -> Pieces:
        """The known tokens of every text, in order, and how many were left out."""
        return self._token_pieces(texts) if self.table.kind == "tokens" else self._word_pieces(texts)

    def _word_pieces(self, texts: list[str]) -> Pieces:
        words = [split_words(text) for text in texts]
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(texts))
        flat = list(chain.from_iterable(words))
        distinct = list(dict.fromkeys(flat))
        found = self.table.tokens.find_many(distinct)
        missed = [i for i in np.flatnonzero(found < 0).tolist() if not distinct[i].isascii()]
        if missed:  # a table whose labels are decomposed (NFD) spells "café" with "e" and U+0301
            found[missed] = self.table.tokens.find_many([unicodedata.normalize("NFD", distinct[i]) for i in missed])
        for i in np.flatnonzero(found < 0).tolist():  # the case-folded match, if any (İ's fold: in any table)
            if self.cased or DOTTED_I in distinct[i]:
                folded = self.table.lookup.folded(*spellings(distinct[i]))  # either spelling's, as the word routes'
                found[i] = -1 if folded is None else folded
        rows = dict(zip(distinct, found.tolist(), strict=True))
        ids = np.fromiter(map(rows.__getitem__, flat), dtype=np.int64, count=len(flat))
        return self._split(ids, lengths, ids < 0)

    def _token_pieces(self, texts: list[str]) -> Pieces:
        if self.max_chars is not None:  # model2vec: no text needs more characters than max_length pieces take
            texts = [text[: self.max_chars] for text in texts]
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        lists = [encoding.ids for encoding in encodings]
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(texts))
        ids = np.fromiter(chain.from_iterable(lists), dtype=np.int64, count=int(lengths.sum()))
        if self.max_length is not None and len(ids):  # model2vec: the first max_length pieces of each text
            starts = np.cumsum(lengths) - lengths
            position = np.arange(len(ids)) - np.repeat(starts, lengths)
            keep = position < self.max_length
            ids, lengths = ids[keep], np.minimum(lengths, self.max_length)
        outside = (ids < 0) | (ids >= self.table.rows)
        left_out = outside
        if self.table.flags is not None:
            left_out = outside | (self.table.flags[np.where(outside, 0, ids)] & FLAG_SPECIAL != 0)
        return self._split(ids, lengths, left_out)

    @staticmethod
    def _split(ids: np.ndarray, lengths: np.ndarray, left_out: np.ndarray) -> Pieces:
        text_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        unknown = np.bincount(text_of[left_out], minlength=len(lengths)).astype(np.int64)
        return Pieces(text_of[~left_out], ids[~left_out], unknown)

    def weights(self, ids: np.ndarray, pooling: Pooling) -> np.ndarray:
        """Each piece's weight (float64): SIF's a / (a + p(w)), a model2vec table's token weights, or 1."""
        if pooling == "sif":
            weights: np.ndarray = self.a / (self.a + self.frequencies[ids])
            return weights
        if self.token_weights is not None:
            return np.asarray(self.token_weights[ids], dtype=np.float64)
        return np.ones(len(ids), dtype=np.float64)

    def means(self, pieces: Pieces, weights: np.ndarray, texts: int) -> tuple[np.ndarray, np.ndarray]:
        """Each text's weighted mean of its pieces' original rows (float64; zero for a text with none), and
        how many pieces each has: a (texts x distinct rows) mixing matrix times those rows, dense when it is
        small (a few texts), sparse otherwise."""
        unique, inverse = np.unique(pieces.ids, return_inverse=True)
        inverse = inverse.ravel()
        rows = np.asarray(self.table.vectors[unique], dtype=np.float64)
        rows *= np.asarray(self.table.norms[unique], dtype=np.float64)[:, None]
        used = np.bincount(pieces.text_of, minlength=texts)
        share = weights / np.maximum(used, 1)[pieces.text_of]
        if texts * len(unique) <= DENSE_MIXING:
            cells = np.bincount(pieces.text_of * len(unique) + inverse, share, minlength=texts * len(unique))
            means: np.ndarray = cells.reshape(texts, len(unique)) @ rows
        else:
            from scipy import sparse  # on first use: a server that never embeds a large batch does not load scipy

            mixing = sparse.csr_matrix((share, (pieces.text_of, inverse)), shape=(texts, len(unique)))
            means = np.asarray(mixing @ rows, dtype=np.float64).reshape(texts, self.table.dim)
        return means, used

    def encode(self, texts: list[str], pooling: Pooling | None = None, strict: bool = True) -> Encoded:
        """Unit vectors of ``texts`` (one row each), by ``pooling`` (the table's default for None).

        A text without a known token, or whose pooled vector is zero, is an :class:`InvalidQuery`; with
        ``strict=False`` its row is zeros instead (and its ``tokens`` count 0), for the caller to leave out."""
        chosen = self.check(pooling)
        pieces = self.pieces(texts)
        means, used = self.means(pieces, self.weights(pieces.ids, chosen), len(texts))
        for i in np.flatnonzero(used == 0)[:1].tolist() if strict else ():
            unknown = int(pieces.unknown[i])
            if unknown and self.table.kind == "tokens":  # what was left out, as typed (as Encoded.left_out names it)
                typed = self._left_out(texts[i])
                raise no_known_piece(f"text {i}", texts[i], *typed, f"table {self.table.name!r}", text=i)
            what = f"{unknown} unknown" if unknown else "it has no tokens"
            message = f"text {i} ({preview(texts[i])}) has no known token in table {self.table.name!r}: {what}"
            raise InvalidQuery(message, text=i)
        if chosen == "sif":
            means -= np.outer(means @ self.component, self.component)
        norms = np.linalg.norm(means, axis=1)
        empty = ~(norms > 1e-12)
        for i in np.flatnonzero(empty)[:1].tolist() if strict else ():
            message = f"text {i} ({preview(texts[i])}) pools to a zero vector in table {self.table.name!r}"
            raise InvalidQuery(message, text=i)
        vectors = (means / np.where(empty, 1.0, norms)[:, None]).astype(np.float32)
        vectors[empty] = 0
        cancelled = {i: self._distinct(pieces, i) for i in np.flatnonzero(empty & (used > 0)).tolist()}
        nothing = np.flatnonzero((used == 0) & (pieces.unknown > 0) & (self.table.kind == "tokens")).tolist()
        left_out = {i: self._left_out(texts[i]) for i in nothing}
        used[empty] = 0
        return Encoded(vectors, used.tolist(), pieces.unknown.tolist(), chosen, cancelled=cancelled, left_out=left_out)

    def _left_out(self, text: str) -> tuple[list[str], list[str]]:
        """What the tokenizer left out of ``text`` (which has no known piece), as typed, each once: the spans it
        made [UNK] (or a row the table lacks) of, and the special tokens typed in the text."""
        encoding = self.tokenizer.encode(text[: self.max_chars] if self.max_chars else text, add_special_tokens=False)
        cut = len(encoding.ids) if self.max_length is None else min(self.max_length, len(encoding.ids))
        flags = self.table.flags
        unknown: dict[str, None] = {}
        special: dict[str, None] = {}
        pieces = zip(encoding.ids[:cut], encoding.tokens[:cut], encoding.offsets[:cut], strict=True)
        for row, piece, (start, end) in pieces:
            typed = text[start:end]
            flagged = flags is not None and 0 <= row < self.table.rows and flags[row] & FLAG_SPECIAL != 0
            (special if flagged and typed == piece else unknown)[typed] = None
        return list(unknown), list(special)

    def _distinct(self, pieces: Pieces, text: int) -> list[str]:
        """The labels of text ``text``'s known pieces, each once, in order."""
        ids = pieces.ids[pieces.text_of == text].tolist()
        return self.table.tokens.labels(list(dict.fromkeys(ids)))


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def embeds_text(table: Table) -> bool:
    """Whether ``encoder_for(table)`` embeds text: a word table, a model-token table with a tokenizer."""
    return table.kind == "words" or (table.kind == "tokens" and table.has_tokenizer)


def encoder_for(table: Table) -> Encoder | TransformerEncoder:
    """The table's encoder, made once per loaded table (its tokenizer, frequencies or model session are loaded on
    first use): a transformer table's model, else the pooling of its rows."""
    return table.cached("encoder", lambda: _make_encoder(table))


def _make_encoder(table: Table) -> Encoder | TransformerEncoder:
    if "transformer" in table.manifest:
        from index.engine.transformer_encoder import TransformerEncoder

        return TransformerEncoder(table)
    return Encoder(table)
