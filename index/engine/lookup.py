"""From what a person types to a row: exact, space-marked (model tokens), case-folded or (model tokens) normalised
as the model's tokenizer normalises its text, spelling suggestions for a miss, and a model-token table's own
tokenizer."""

from __future__ import annotations

import string
import unicodedata
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
from rapidfuzz import fuzz, process

from index.errors import InvalidQuery, UnknownToken, shown
from index.store.artifact import Opened
from index.store.tokens import FLAG_SPECIAL, TOKENIZER, Tokens, byte_level_label

SUGGESTION_POOL = 50_000  # unknown tokens are matched against the most frequent rows
NEIGHBOURHOOD = 10  # and the tokens that sort next to it case-folded, on either side
SUGGESTED_MISSES = 64  # unknown tokens of one request given suggestions (each costs a match against the pool)
# The suggestions a request may still be given, ``[left]``: a list, so that every copy of the request's context (the
# worker thread its lookups run in) spends from the same count. The server sets it per request (a batch of 1,024
# unknown words would match each against 50,000 labels, seconds of a worker); None (the builder) bounds nothing.
SUGGESTION_BUDGET: ContextVar[list[int] | None] = ContextVar("suggestion_budget", default=None)
SPACE_MARKERS = ("Ġ", "▁", " ")
BLANK = "".join(SPACE_MARKERS) + string.whitespace  # what a normalised text of no word may be left with


def ranked_candidates(text: str, pool: list[str], limit: int) -> list[tuple[str, float, int]]:
    """The ``3 * limit`` labels of ``pool`` spelled most like ``text`` (label, score, place in ``pool``): by
    score, equal scores by place. ``text`` is compared in Unicode's composed form, as labels mostly are."""
    key = unicodedata.normalize("NFC", text).casefold()
    found: list[tuple[str, float, int]] = process.extract(
        key, pool, scorer=fuzz.ratio, processor=str.casefold, limit=limit * 3
    )
    return found


def best_suggestions(text: str, pool: list[str], limit: int = 5) -> list[str]:
    """Up to ``limit`` distinct labels of ``pool`` spelled like ``text``: the best :func:`ranked_candidates`, those
    scoring at least 50."""
    out: list[str] = []
    for label, score, _ in ranked_candidates(text, pool, limit):
        if score >= 50 and label not in out:
            out.append(label)
    return out[:limit]


@dataclass(frozen=True)
class Resolved:
    """The row a query word resolved to."""

    query: str
    id: int
    token: str
    match: str  # "exact", "space-marked", "casefold", "normalized" or "id"

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.query, "token": self.token, "id": self.id, "match": self.match}


def spellings(text: str) -> list[str]:
    """A word composed (NFC, ``text``) and, when that differs, decomposed (NFD): the spellings a table's labels may
    have of it (a table whose labels are decomposed spells "café" with "e" and U+0301)."""
    if text.isascii():
        return [text]
    decomposed = unicodedata.normalize("NFD", text)
    return [text] if decomposed == text else [text, decomposed]


class Lookup:
    """Word -> row for one table (``name`` for messages; ``model_tokens``: try space-marked forms;
    ``byte_level``: labels are byte-level BPE strings, "Ġ" for a space; ``lower_case``: the model lower-cases
    texts before its tokenizer, a transformer table's ``do_lower_case``)."""

    def __init__(
        self,
        name: str,
        tokens: Tokens,
        opened: Opened,
        flags: np.ndarray | None,
        model_tokens: bool,
        byte_level: bool,
        lower_case: bool = False,
    ) -> None:
        self.name = name
        self.tokens = tokens
        self.opened = opened  # the loaded version's files read later: its tokenizer
        self.flags = flags
        self.model_tokens = model_tokens
        self.byte_level = byte_level
        self.lower_case = lower_case
        self._suggestion_pool: list[str] | None = None
        self._longest = 0  # the pool's longest label, case-folded
        self._tokenizer: Any = None

    def find(self, sent: str) -> Resolved | None:
        """Resolve a word: exact (as sent, then in Unicode's composed form NFC, then decomposed NFD: a table whose
        labels are decomposed), then the space-marked forms for model tokens, then case-folded, the lowest row of
        either form (``Tokens.find_folded``: ``İ`` as Turkish folds it when nothing else matches; for model tokens
        the space-marked forms too; :meth:`spelled`), then for model tokens as the model's tokenizer normalises it
        (:meth:`normalized`), by the same rules. A label that is not NFC (a decomposed "café", the Kelvin sign) is
        found as it is spelled, as gensim finds it, before the composed form could match another row."""
        found = self.tokens.find(sent)
        if found is not None:  # the usual case, before any other form is made
            return Resolved(sent, found, sent, "exact")
        text = unicodedata.normalize("NFC", sent)
        labelled = self.spelled(*spellings(text))
        if labelled is not None:
            return Resolved(sent, *labelled)
        normal = self.normalized(text)
        labelled = None if normal is None else self.spelled(normal)
        return None if labelled is None else Resolved(sent, labelled[0], labelled[1], "normalized")

    def spelled(self, *texts: str) -> tuple[int, str, str] | None:
        """The row of a word spelled ``texts`` (composed, then decomposed: ``spellings``), as (row, label,
        match), or None, by the first rule that finds one: an exact label, for model tokens also the byte-level BPE
        spelling ("exact"), each space-marked ("space-marked"); then the lowest row of any of them case-folded
        (``folded``; for model tokens then space-marked: "casefold"). Byte-level spellings are not folded: their
        characters stand for bytes, which case folding would change into others."""
        forms = list(texts)
        if self.byte_level:  # byte-level BPE labels spell "café" as "cafÃ©"
            forms += [label for text in texts if (label := byte_level_label(text)) != text]
        marked = [marker + form for form in forms for marker in SPACE_MARKERS] if self.model_tokens else []
        for label in forms:
            if (found := self.tokens.find(label)) is not None:
                return found, label, "exact"
        for label in marked:
            if (found := self.tokens.find(label)) is not None:
                return found, label, "space-marked"
        markers = ["", *(SPACE_MARKERS if self.model_tokens else ())]
        for marker in markers:
            if (found := self.folded(*(marker + text for text in texts))) is not None:
                return found, self.tokens[found], "casefold"
        return None

    def folded(self, *texts: str) -> int | None:
        """The lowest row whose case-folded label is one of ``texts`` (a word's spellings) case-folded, or None: the
        case-folded match of the whole table, of its text encoder, and of a sharded table's front (the lowest row
        of its shards' matches)."""
        return min((row for text in texts if (row := self.tokens.find_folded(text)) is not None), default=None)

    def normalized(self, text: str) -> str | None:
        """``text`` as a model-token table's tokenizer normalises a text before it splits it, when that differs:
        uncased BERT lower-cases and strips accents, so the model reads "Café" as the row ``cafe``. None for a
        table without a tokenizer or whose tokenizer has no normaliser, for a text the normaliser cannot read (a
        lone surrogate) and for one it leaves nothing of but spaces (control characters: no row stands for them,
        not a space marker's)."""
        if not self.model_tokens or not self.has_tokenizer or self.tokenizer.normalizer is None:
            return None
        try:
            normal: str = self.tokenizer.normalizer.normalize_str(self.model_text(text))
        except UnicodeEncodeError:
            return None
        return normal if normal != text and normal.strip(BLANK) else None

    def resolve(self, text: str) -> Resolved:
        """Like :meth:`find`, but raise :class:`UnknownToken` with suggestions when nothing matches."""
        found = self.find(text)
        if found is None:
            raise UnknownToken(
                f"token {shown(text)} is not in table {self.name!r}", suggestions=self.suggest(text), token=text
            )
        return found

    def resolve_id(self, row: int) -> Resolved:
        rows = len(self.tokens)
        if not 0 <= row < rows:
            raise UnknownToken(f"id {row} is outside table {self.name!r} (0..{rows - 1})", suggestions=[])
        return Resolved(str(row), row, self.tokens[row], "id")

    def suggest(self, text: str, limit: int = 5) -> list[str]:
        """Up to ``limit`` known tokens spelled like ``text`` (most frequent rows, and alphabetical neighbours); none
        once the request has had its :data:`SUGGESTION_BUDGET`, and none for a text too long to be spelled like
        any of them (``fuzz.ratio`` is at most ``200 * len(label) / (len(text) + len(label))``: under 50 for a text
        over three times the longest label)."""
        budget = SUGGESTION_BUDGET.get()
        if budget is not None and budget[0] <= 0:
            return []
        if self._suggestion_pool is None:
            self._suggestion_pool = self.tokens[: min(len(self.tokens), SUGGESTION_POOL)]
            self._longest = max((len(label.casefold()) for label in self._suggestion_pool), default=0)
        near = self.tokens.labels(self.tokens.folded_neighbourhood(text, NEIGHBOURHOOD))
        longest = max([self._longest, *(len(label.casefold()) for label in near)])
        if len(unicodedata.normalize("NFC", text).casefold()) > 3 * longest:
            return []  # matched against nothing: it spends none of the request's suggestions
        if budget is not None:
            budget[0] -= 1
        return best_suggestions(text, self._suggestion_pool + near, limit)

    @property
    def has_tokenizer(self) -> bool:
        return self.opened.path(TOKENIZER) is not None

    def model_text(self, text: str) -> str:
        """``text`` as the model's tokenizer is given it: lower-cased as sentence-transformers does (``str.lower``)
        when the model asks for it."""
        return text.lower() if self.lower_case else text

    @property
    def tokenizer(self) -> Any:
        """The table's own tokenizer (``tokenizers``), loaded on first use, neither padding nor truncating."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(self.opened.needed(TOKENIZER)))
            tokenizer.no_padding()  # a model's saved padding/truncation would add [PAD]s or cut the text
            tokenizer.no_truncation()
            self._tokenizer = tokenizer
        return self._tokenizer

    def tokenize(self, text: str) -> list[tuple[int, str]]:
        """The (id, label) pairs the table's own tokenizer gives for ``text`` (as the model is given it, see
        :meth:`model_text`), special tokens left out."""
        if not self.has_tokenizer:
            raise InvalidQuery(f"table {self.name!r} has no tokenizer (only model-token tables do)")
        encoding = self.tokenizer.encode(self.model_text(text), add_special_tokens=False)
        rows = len(self.tokens)
        return [(int(i), self.tokens[int(i)]) for i in encoding.ids if 0 <= int(i) < rows]

    def pieces(self, text: str) -> list[tuple[int, str]]:
        """The tokenizer's pieces of a word that is not one row; :class:`UnknownToken` when one of them is a
        special token (e.g. [UNK]: its row says nothing about the text)."""
        pieces = self.tokenize(text)
        if not pieces:
            raise InvalidQuery(f"{shown(text)} gives no tokens")
        special = [label for i, label in pieces if self.flags is not None and self.flags[i] & FLAG_SPECIAL]
        if special:
            raise UnknownToken(
                f"token {shown(text)} is not in table {self.name!r}, and its tokenizer gives {special[0]!r} for it",
                suggestions=self.suggest(text),
                token=text,
            )
        return pieces
