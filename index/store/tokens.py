"""Token labels stored as one UTF-8 blob plus offsets, searchable without a Python dict.

Every array is memory-mapped read-only, so several server processes share the pages. Lookup is a binary
search over a sorted permutation: exact match, and a case-folded match where the lowest id (the most
frequent token, for frequency-ordered tables) wins.
"""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from index.lazy import pa, pc

BLOB = "tokens.bin"
OFFSETS = "token_offsets.npy"
ORDER = "token_order.npy"
FOLDED_ORDER = "token_folded_order.npy"
FILES = (BLOB, OFFSETS, ORDER, FOLDED_ORDER)
PREFIX_BYTES = 8
DOTTED_I = "i\u0307"  # what "İ" (U+0130) lower-cases and folds to outside Turkic languages
FEW_LABELS = 64  # up to this many labels are read one by one (Tokens.labels)
# The longest label a request names (a word, a model token, a document id), the API's ``max_token_chars``: an
# import refuses a longer document id, which no route could read, delete or search by.
MAX_TOKEN_CHARS = 1024

# Model-token tables: one uint8 of kind bits per row (FLAGS), and the model's own tokenizer (TOKENIZER).
FLAGS = "token_flags.npy"
TOKENIZER = "tokenizer.json"
WEIGHTS = "token_weights.npy"  # model2vec tables: one float32 weight per row, used when text is embedded
FLAG_SPECIAL = 1  # [CLS], <s>, [UNK], ... and unused rows
FLAG_CONTINUATION = 2  # a piece that continues a word ("##ing"; no leading space marker)


def write_tokens(directory: Path, tokens: Sequence[str]) -> None:
    """Write the token files for ``tokens`` (row id = position) into ``directory``."""
    encoded = list(map(str.encode, tokens))  # UTF-8
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    (directory / BLOB).write_bytes(b"".join(encoded))
    np.save(directory / OFFSETS, offsets)
    np.save(directory / ORDER, sorted_rows(tokens))
    np.save(directory / FOLDED_ORDER, sorted_rows(list(map(str.casefold, tokens))))


def sorted_rows(strings: Sequence[str]) -> np.ndarray:
    """The rows of ``strings`` in their order (by code point, which is UTF-8's byte order; equal strings by row), as
    int32: Arrow's stable sort of the strings, not Python's sort of their rows by key (13 s for a million tokens)."""
    order: np.ndarray = pc.sort_indices(pa.array(strings, pa.large_string())).to_numpy().astype(np.int32)
    return order


class _Sorted(Sequence[Any]):
    """A lazy view of ``key(row)`` for the rows in a sorted ``order``, for ``bisect``."""

    def __init__(self, order: np.ndarray, key: Callable[[int], Any]) -> None:
        self._order, self._key = order, key

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._key(int(row)) for row in self._order[i]]
        return self._key(int(self._order[i]))


def _raw_reader(blob: np.ndarray | bytes, offsets: np.ndarray) -> Callable[[int], bytes]:
    """The UTF-8 bytes of token ``i`` (0 <= i < len), read from ``blob`` and ``offsets`` alone."""

    def raw(i: int) -> bytes:
        return bytes(blob[int(offsets[i]) : int(offsets[i + 1])])

    return raw


def _prefixes(blob: np.ndarray | bytes, offsets: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each token in ``order`` as a big-endian integer (zero-padded): sorted like the tokens."""
    out = np.zeros(len(order), dtype=np.uint64)
    if not len(blob):  # every token is empty (the blob is then b"")
        return out
    starts = offsets[order]
    lengths = offsets[order + 1] - starts
    for b in range(PREFIX_BYTES):
        byte = np.where(lengths > b, blob[np.minimum(starts + b, len(blob) - 1)], 0)
        out |= byte.astype(np.uint64) << np.uint64(8 * (PREFIX_BYTES - 1 - b))
    return out


class Tokens(Sequence[str]):
    """Read-only token labels of one table."""

    def __init__(self, directory: Path) -> None:
        # Plain ndarray views of the read-only maps: indexing a np.memmap costs microseconds, and lookups index a lot.
        self._offsets = np.load(directory / OFFSETS, mmap_mode="r").view(np.ndarray)
        blob: np.ndarray | bytes = (
            np.memmap(directory / BLOB, dtype=np.uint8, mode="r").view(np.ndarray) if self._offsets[-1] else b""
        )
        self._blob = blob
        self._order = np.load(directory / ORDER, mmap_mode="r").view(np.ndarray)
        self._folded_order = np.load(directory / FOLDED_ORDER, mmap_mode="r").view(np.ndarray)
        # The views' keys read the arrays, not ``self``: a cycle through ``self`` would keep the files mapped
        # after the table is dropped, until the collector's rare full pass.
        raw = _raw_reader(blob, self._offsets)
        self._exact = _Sorted(self._order, raw)  # UTF-8 bytes sort as the code points do
        self._folded = _Sorted(self._folded_order, lambda i: raw(i).decode("utf-8").casefold())
        self._exact_prefixes: np.ndarray | None = None  # made on the first lookup: 8 bytes a token

    def __len__(self) -> int:
        return len(self._offsets) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1 or stop <= start:
                return [self[j] for j in range(start, stop, step)]
            # A contiguous run: one copy of its bytes, then one decode per label.
            offsets = np.asarray(self._offsets[start : stop + 1])
            raw = bytes(self._blob[int(offsets[0]) : int(offsets[-1])])
            ends = (offsets - offsets[0]).tolist()
            return [raw[s:e].decode("utf-8") for s, e in pairwise(ends)]
        return self.raw(i).decode("utf-8")

    def raw(self, i: int) -> bytes:
        """The UTF-8 bytes of token ``i``."""
        if i < 0:
            i += len(self)
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        return bytes(self._blob[start:end])

    def labels(self, ids: Sequence[int]) -> list[str]:
        """The labels of rows ``ids`` (0 <= id < len): the offsets of many in one numpy lookup, twice as fast as
        one by one; of a few (a search's hits), one by one, faster than numpy's lookup of so few."""
        if len(ids) and min(ids) < 0:
            raise IndexError("token ids must not be negative")
        blob = memoryview(self._blob)  # type: ignore[arg-type]  # numpy declares ndarray.__buffer__ for Python 3.12+ only
        if len(ids) <= FEW_LABELS:  # a search's hits: an offset read each costs less than numpy's gathers of so few
            at = self._offsets.item
            return [str(blob[at(i) : at(i + 1)], "utf-8") for i in ids]
        rows = np.asarray(ids, dtype=np.int64)
        starts, ends = self._offsets[rows].tolist(), self._offsets[rows + 1].tolist()
        return [str(blob[start:end], "utf-8") for start, end in zip(starts, ends, strict=True)]

    def blob_and_offsets(self) -> tuple[np.ndarray, np.ndarray]:
        """Every label's UTF-8 bytes back to back (uint8), and where each starts (len + 1 offsets)."""
        blob = np.frombuffer(self._blob, dtype=np.uint8) if isinstance(self._blob, bytes) else self._blob
        return blob, self._offsets

    def prepare_lookup(self) -> np.ndarray:
        """The sorted 8-byte prefixes :meth:`find` searches, made on first use (50 ms for 400,000 tokens)."""
        if self._exact_prefixes is None:
            self._exact_prefixes = _prefixes(self._blob, self._offsets, self._order)
        return self._exact_prefixes

    def find(self, token: str) -> int | None:
        """Row id of exactly ``token``, or None: the sorted 8-byte prefixes narrow the search (a numpy binary
        search); a token of up to 8 bytes is then the first label with its prefix or none, a longer one is found by
        a binary search over the few labels that share the prefix, comparing bytes."""
        prefixes = self.prepare_lookup()
        key = token.encode("utf-8", "surrogatepass")  # a lone surrogate matches no token, but must not raise
        prefix = np.uint64(int.from_bytes(key[:PREFIX_BYTES].ljust(PREFIX_BYTES, b"\0"), "big"))
        lo = int(prefixes.searchsorted(prefix, "left"))
        if len(key) <= PREFIX_BYTES and not key.endswith(b"\0"):
            # Every other label with this prefix extends ``key``, so sorts after it: it is the first, or absent.
            if lo == len(prefixes) or prefixes[lo] != prefix:
                return None
            row: int = self._order.item(lo)
            return row if self._offsets.item(row + 1) - self._offsets.item(row) == len(key) else None
        hi = int(prefixes.searchsorted(prefix, "right"))
        pos = bisect.bisect_left(self._exact, key, lo, hi)
        if pos < hi and self._exact[pos] == key:
            return int(self._order[pos])
        return None

    def find_many(self, tokens: Sequence[str]) -> np.ndarray:
        """Row id of exactly each of ``tokens`` (-1: none), as :meth:`find` gives it, for many at once in numpy:
        the 8-byte prefixes narrow each to a range of labels; a token of up to 8 bytes is the range's first label
        when their lengths agree (it sorts before every longer label with its prefix), a longer one is compared
        byte by byte with the labels of its range that have its length."""
        prefixes = self.prepare_lookup()
        keys = [token.encode("utf-8", "surrogatepass") for token in tokens]
        out = np.full(len(keys), -1, dtype=np.int64)
        if not len(self._order) or not keys:
            return out
        padded = b"".join(key[:PREFIX_BYTES].ljust(PREFIX_BYTES, b"\0") for key in keys)
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        wanted = np.frombuffer(padded, dtype=">u8").astype(np.uint64)
        lo, hi = prefixes.searchsorted(wanted, "left"), prefixes.searchsorted(wanted, "right")
        first = self._order[np.minimum(lo, len(self._order) - 1)].astype(np.int64)
        short = (hi > lo) & (lengths <= PREFIX_BYTES) & (self._offsets[first + 1] - self._offsets[first] == lengths)
        out[short] = first[short]
        long = np.flatnonzero((hi > lo) & (lengths > PREFIX_BYTES))
        if not len(long):
            return out
        # Every (long token, label of its range) pair of equal length, then all their bytes side by side.
        spans = (hi - lo)[long]
        word = np.repeat(long, spans)
        rank = np.arange(len(word)) - np.repeat(np.cumsum(spans) - spans, spans)
        label = self._order[np.repeat(lo[long], spans) + rank].astype(np.int64)
        starts = self._offsets[label]
        same = self._offsets[label + 1] - starts == lengths[word]
        word, label, starts = word[same], label[same], starts[same]
        size = lengths[word]
        pair = np.repeat(np.arange(len(word)), size)
        offset = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
        blob = self.blob_and_offsets()[0]
        given = np.frombuffer(b"".join([keys[i] for i in word.tolist()]), dtype=np.uint8)
        differ = np.bincount(pair, weights=blob[starts[pair] + offset] != given, minlength=len(word))
        hit = np.flatnonzero(differ == 0)[::-1]  # reversed: of equal labels, the first in sorted order is kept
        out[word[hit]] = label[hit]
        return out

    def find_folded(self, token: str) -> int | None:
        """Lowest row id whose case-folded label equals ``token`` case-folded, or None. A miss whose fold holds
        an i with a dot above (U+0307), as ``İ`` (U+0130) folds and lower-cases, is tried again with a plain i:
        the Turkic folding of ``İ``, so that ``İstanbul`` finds ``istanbul``."""
        key = token.casefold()
        found = self._find_folded_key(key)
        if found is None and DOTTED_I in key:
            found = self._find_folded_key(unicodedata.normalize("NFC", key.replace(DOTTED_I, "i")))
        return found

    def _find_folded_key(self, key: str) -> int | None:
        pos = bisect.bisect_left(self._folded, key)
        if pos < len(self._folded) and self._folded[pos] == key:
            return int(self._folded_order[pos])
        return None

    def folded_neighbourhood(self, token: str, width: int) -> list[int]:
        """Ids of the tokens that sort next to ``token`` case-folded (candidates for suggestions)."""
        below, above = self.folded_sides(token, width)
        return below + above

    def folded_sides(self, token: str, width: int) -> tuple[list[int], list[int]]:
        """Ids of the ``width`` tokens that sort just before ``token`` case-folded, and of the ``width`` from it on
        (by case-folded label, then id); ``token`` in Unicode's composed form (NFC), as labels mostly are."""
        pos = bisect.bisect_left(self._folded, unicodedata.normalize("NFC", token).casefold())
        lo, hi = max(0, pos - width), min(len(self._folded), pos + width)
        return [int(i) for i in self._folded_order[lo:pos]], [int(i) for i in self._folded_order[pos:hi]]


# ------------------------------------------------------- byte-level BPE labels
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (byte-level BPE labels use it)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars, strict=True)}


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}
BYTE_LEVEL_TO_LATIN1 = str.maketrans({c: chr(b) for c, b in BYTE_DECODER.items()})


def byte_level_label(text: str) -> str:
    """How a byte-level BPE vocabulary spells ``text`` (" café" -> "ĠcafÃ©")."""
    return "".join(BYTE_ENCODER[b] for b in text.encode("utf-8"))
