"""Texts to vectors with a transformer table (``import --format transformer``): its ONNX graph run by ONNX Runtime.

Tokenisation is sentence-transformers': the texts lower-cased first when the model says so (``do_lower_case`` in
its ``sentence_bert_config.json``, kept in the manifest), then the table's ``tokenizer.json`` with [CLS] and
[SEP] added, truncated to
the model's ``max_seq_length`` (``sentence_bert_config.json``, which overrides the truncation and the fixed
padding the file may carry) and padded to the longest text of a batch. Texts are sorted by length and run in
batches of about ``TOKENS`` tokens (texts x padded length, one text at least), so short texts are not padded to
long ones and a run's activations stay in a core's cache: larger runs cost more per text. A text longer than the
limit is cut as sentence-transformers cuts it, and ``truncated`` says so.

A request's tokens are bounded: the server sets :data:`ENCODE_BUDGET` per request (``EMBEDDING_MAX_ENCODE_TOKENS``),
and every forward pass of the request counts its tokens (the ids without padding, once the texts are tokenised)
against it before the model runs: past it, :class:`TooManyTokens` (its error's ``limit`` names the setting, so that
a client may send the texts in smaller requests). Without it (the builder) nothing is bounded.

The session is made once per loaded table, on first use; its intra-op threads are FAISS's (``EMBEDDING_THREADS``
when set, as ``embedding-serve`` sets it per worker, else OpenMP's count), they sleep between runs instead of
spinning (on cores shared with other work, spinning threads take the cores the running ones need), and ONNX
Runtime releases the GIL while it runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from index import threads as threads_variable
from index.engine.encoding import Encoded, Pooling
from index.engine.table import Table
from index.errors import InvalidQuery, OverLimit
from index.store.artifact import GRAPH
from index.store.tokens import TOKENIZER

TOKENS = 256  # texts x padded length a run, after sorting by length (one text at least)
SETTING = "max_encode_tokens"
# The request's bound and the tokens it has run so far, ``[bound, spent]``: a list, so that every copy of the
# request's context (the worker thread its encoding runs in has one) spends from the same count; None: no bound.
ENCODE_BUDGET: ContextVar[list[int] | None] = ContextVar("encode_budget", default=None)


class TooManyTokens(OverLimit):
    """Texts over the request's token bound (:data:`ENCODE_BUDGET`): the whole request is refused, a batch too
    (its items' texts count together), never one item of it."""


def spend(tokens: int, table: str, longest: int) -> None:
    """Count ``tokens`` the model is about to run against the request's bound; :class:`TooManyTokens` past it,
    saying how many texts always fit (the model cuts each at ``longest`` tokens): the batch size to give a client
    that cannot split a refused request itself (LangChain's or LlamaIndex's OpenAI embeddings)."""
    budget = ENCODE_BUDGET.get()
    if budget is None:
        return
    bound, spent = budget
    if spent + tokens > bound:
        before = f" ({spent:,} of them by this request's texts before)" if spent else ""
        fit = bound // longest
        fitting = (
            f": {fit:,} {'text' if fit == 1 else 'texts'} of any length {'fits' if fit == 1 else 'fit'} in one "
            f"request (the model cuts each at {longest:,} tokens)"
            if fit
            else ""
        )
        raise TooManyTokens(
            f"tokens for the model of table {table!r} to run: {spent + tokens:,}{before}, more than the server's "
            f"{SETTING} of {bound:,}; send fewer or shorter texts at a time{fitting}",
            SETTING,
        )
    budget[1] = spent + tokens


def threads() -> int:
    """ONNX Runtime's intra-op threads: as many as FAISS uses in this process."""
    given = threads_variable.given(os.environ)
    if given is not None:
        return threads_variable.parsed(given)
    import faiss

    return max(1, int(faiss.omp_get_max_threads()))


def batches(lengths: np.ndarray, order: np.ndarray) -> list[np.ndarray]:
    """``order`` (texts sorted by their ``lengths``, ascending) cut into runs of at most ``TOKENS`` tokens padded."""
    out = []
    start = 0
    for end in range(1, len(order) + 1):
        if end == len(order) or (end + 1 - start) * int(lengths[end]) > TOKENS:
            out.append(order[start:end])
            start = end
    return out


def first_cut(encoding: Any) -> int | None:
    """The first piece (not a special token) that truncation took off an encoded text; None when nothing was cut."""
    for part in encoding.overflowing[:1]:
        for piece, special in zip(part.ids, part.special_tokens_mask, strict=True):
            if not special:
                return int(piece)
    return None


@dataclass(frozen=True, slots=True)
class Tokenised:
    """The model's input ids of each text (with [CLS] and [SEP]), whether the text was cut, and the first piece it
    lost (None: nothing cut)."""

    ids: list[list[int]]
    truncated: list[bool]
    cut: list[int | None]


@dataclass(frozen=True, slots=True)
class Forward:
    vectors: np.ndarray  # (texts, hidden) float32: the pooled (and, if the model does, normalised) vectors
    tokens: list[np.ndarray] | None  # per text: (its ids, hidden) last-layer vectors, when asked for


class TransformerEncoder:
    """A transformer table's encoder: the same calls as :class:`index.engine.encode.Encoder`."""

    def __init__(self, table: Table, intra_op_threads: int | None = None) -> None:
        info = table.manifest.get("transformer")
        if not isinstance(info, dict):
            raise InvalidQuery(f"table {table.name!r} is not a transformer table")
        self.table = table
        self.info = info
        self.max_length = int(info["max_seq_length"])
        self.pooling: Pooling = "cls" if info["pooling"] == "cls" else "mean"
        self.intra_op_threads = intra_op_threads  # None: :func:`threads`
        self._tokenizer: Any = None
        self._session: Any = None
        self._loading = threading.Lock()  # one tokenizer and one session per table, however many ask at first

    @property
    def default_pooling(self) -> Pooling:
        return self.pooling

    def check(self, pooling: str | None) -> Pooling:
        """The model's own pooling; any other is an :class:`InvalidQuery`."""
        if pooling is not None and pooling != self.pooling:
            raise InvalidQuery(
                f"table {self.table.name!r} is a transformer that pools by {self.pooling}: ask for pooling "
                f"{self.pooling} or leave it out"
            )
        return self.pooling

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            with self._loading:
                if self._tokenizer is None:
                    self._tokenizer = self._open_tokenizer()
        return self._tokenizer

    @property
    def unknown_id(self) -> int | None:
        found: int | None = self.tokenizer.token_to_id("[UNK]")
        return found

    @property
    def session(self) -> Any:
        if self._session is None:
            with self._loading:
                if self._session is None:
                    self._session = self._open_session()
        return self._session

    def _open_tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self.table.opened.needed(TOKENIZER)))
        tokenizer.enable_truncation(max_length=self.max_length)
        tokenizer.no_padding()  # padded here, to the longest text of each batch
        return tokenizer

    def _open_session(self) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.intra_op_threads or threads()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # warnings and below stay quiet
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = str(self.table.opened.needed(GRAPH))
        return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def model_text(self, text: str) -> str:
        """``text`` as the model's tokenizer is given it (the table's :meth:`Lookup.model_text`)."""
        return self.table.lookup.model_text(text)

    def tokenise(self, texts: list[str]) -> Tokenised:
        texts = list(map(self.table.lookup.model_text, texts))
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=True)
        truncated = [bool(e.overflowing) for e in encodings]
        cut = [first_cut(e) if t else None for e, t in zip(encodings, truncated, strict=True)]
        return Tokenised([e.ids for e in encodings], truncated, cut)

    def forward(self, ids: list[list[int]], tokens: bool = False, done: Callable[[int], None] | None = None) -> Forward:
        """The graph run over ``ids`` sorted by length, in batches padded to their longest member, once the request's
        bound allows their tokens (:func:`spend`); ``done(texts)`` after each run (the builder's progress)."""
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        spend(int(lengths.sum()), self.table.name, self.max_length)
        order = np.argsort(lengths, kind="stable")
        vectors = np.zeros((len(ids), self.table.dim), dtype=np.float32)
        per_text: list[np.ndarray] = [np.zeros((0, self.table.dim), dtype=np.float32)] * len(ids)
        outputs = ["sentence_embedding", "token_embeddings"] if tokens else ["sentence_embedding"]
        for chosen in batches(lengths[order], order):
            width = int(lengths[chosen].max())
            batch = np.zeros((len(chosen), width), dtype=np.int64)
            for row, i in enumerate(chosen.tolist()):
                batch[row, : lengths[i]] = ids[i]
            mask = (np.arange(width) < lengths[chosen][:, None]).astype(np.int64)
            found = self.session.run(outputs, {"input_ids": batch, "attention_mask": mask})
            vectors[chosen] = found[0]
            if tokens:
                for row, i in enumerate(chosen.tolist()):
                    per_text[i] = np.asarray(found[1][row, : lengths[i]], dtype=np.float32)
            if done is not None:
                done(len(chosen))
        return Forward(vectors, per_text if tokens else None)

    def encode(
        self,
        texts: list[str],
        pooling: str | None = None,
        strict: bool = True,
        done: Callable[[int], None] | None = None,
    ) -> Encoded:
        """Unit vectors of ``texts`` (every text has one: an empty text is [CLS] [SEP]); ``done`` as in
        :meth:`forward`."""
        chosen = self.check(pooling)
        tokenised = self.tokenise(texts)
        vectors = self.forward(tokenised.ids, done=done).vectors
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
        vectors = (vectors / np.where(norms > 0, norms, 1.0)[:, None]).astype(np.float32)
        unknown_id = self.unknown_id
        unknown = [ids.count(unknown_id) if unknown_id is not None else 0 for ids in tokenised.ids]
        used = [len(ids) - u for ids, u in zip(tokenised.ids, unknown, strict=True)]
        return Encoded(vectors, used, unknown, chosen, tokenised.truncated)
