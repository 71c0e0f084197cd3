"""Train a word2vec table (skip-gram or CBOW, negative sampling) with gensim's ``Word2Vec``.

Tokenisation, exactly as gensim's ``LineSentence`` and the original word2vec tool read text:

- every line of every corpus file is one sentence (files are read in the order given; ``.gz`` is read
  transparently, xz, bzip2 and zstd files are refused);
- a line is split on Unicode whitespace (``str.split()``); nothing else is done: no lowercasing, no punctuation
  stripping, no Unicode normalisation. Preprocess the corpus first if you want any of these;
- lines longer than 10,000 tokens are cut into sentences of 10,000 tokens (gensim's ``MAX_WORDS_IN_BATCH``);
- files must be UTF-8; a byte-order mark at the start of a file is no part of its first word (gensim would keep
  it there: ``\ufeffThe``, a word no one types).

Rows come out in gensim's order: descending corpus frequency, ties in order of first appearance.

Reproducibility: ``seed`` fixes the initial vectors, negative sampling and downsampling. With ``workers=1`` the
same corpus and parameters give the same vectors bit for bit; with more threads the order in which they update
the shared weights varies. The word hash gensim may use for seeding is a fixed CRC32, so results do not depend
on ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.build.sources import BOM, BinaryHandle, RawTable, open_text, read_on_disk, reading, refuse_unread
from index.errors import InputError
from index.progress import Progress

log = logging.getLogger(__name__)

MAX_SENTENCE = 10_000  # gensim's MAX_WORDS_IN_BATCH: longer lines are cut, as LineSentence does
# Bounds of train's options. gensim's training threads take the window and the negative samples as C ints: a value
# past one kills the thread and leaves gensim waiting for it for ever, and a million negative samples per word train
# without end; a thread the system cannot start is a traceback. A window wider than the longest sentence
# (MAX_SENTENCE) reaches no further word.
MAX_NEGATIVE = 1_000
MAX_WORKERS = 256
PROGRESS_LINES = 10_000  # reading the corpus: its progress advanced every this many lines


@dataclass(frozen=True)
class TrainParams:
    dim: int = 100
    window: int = 5
    min_count: int = 5
    epochs: int = 5
    negative: int = 5
    sg: bool = True  # skip-gram; False: CBOW
    seed: int = 1
    workers: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "method": "skip-gram" if self.sg else "cbow", "hs": 0}


def stable_hash(text: str) -> int:
    """A hash that does not change between interpreter runs (unlike ``hash`` on str)."""
    return zlib.crc32(text.encode("utf-8"))


class Corpus:
    """The corpus files as a re-iterable stream of sentences (lists of tokens); ``progress``, while set, advances by
    the words of each sentence read."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = [Path(p) for p in paths]
        self.progress: Progress | None = None

    def check(self) -> tuple[int, int]:
        """Read every file once: refuse missing, unreadable, non-UTF-8 or wordless files; return (lines, words)."""
        if not self.paths:
            raise InputError("corpus", "give at least one corpus file")
        for path in self.paths:
            if not path.is_file():
                raise InputError(path, "corpus file not found" if not path.exists() else "not a regular file")
        lines = words = 0
        with Progress("reading the corpus", sum(path.stat().st_size for path in self.paths), "bytes") as progress:
            for path in self.paths:
                file_words = read = 0
                with open_text(path) as handle, reading(path):
                    refuse_unread(path, handle.peek(16)[:16])
                    for number, raw in enumerate(_lines(handle), start=1):
                        try:
                            file_words += len(raw.decode("utf-8").split())
                        except UnicodeDecodeError as exc:
                            problem = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
                            raise InputError(path, problem, number) from None
                        lines += 1
                        if number % PROGRESS_LINES == 0:  # by the bytes read from the disk (of a .gz: compressed)
                            position = read_on_disk(handle)
                            progress.advance(position - read)
                            read = position
                progress.advance(path.stat().st_size - read)
                if file_words == 0:
                    raise InputError(path, "corpus file has no words")
                words += file_words
        return lines, words

    def __iter__(self) -> Iterator[list[str]]:
        for path in self.paths:
            with open_text(path) as handle:
                for raw in _lines(handle):
                    tokens = raw.decode("utf-8").split()
                    for start in range(0, len(tokens), MAX_SENTENCE):
                        sentence = tokens[start : start + MAX_SENTENCE]
                        yield sentence
                        if self.progress is not None:
                            self.progress.advance(len(sentence))


def _lines(handle: BinaryHandle) -> Iterator[bytes]:
    """The lines of a corpus file, a UTF-8 byte-order mark at its start left out."""
    first = handle.readline()
    if first:
        yield first.removeprefix(BOM)
    yield from handle


def train_word2vec(corpus_paths: list[Path], params: TrainParams) -> RawTable:
    """Train word2vec on the corpus files; rows in gensim's frequency order."""
    corpus = Corpus(corpus_paths)
    lines, words = corpus.check()  # a bad corpus is refused before gensim is imported
    from gensim.models import Word2Vec

    model = Word2Vec(
        vector_size=params.dim,
        window=params.window,
        min_count=params.min_count,
        sg=1 if params.sg else 0,
        hs=0,
        negative=params.negative,
        seed=params.seed,
        workers=params.workers,
        epochs=params.epochs,
        hashfxn=stable_hash,
    )
    started = time.perf_counter()
    with Progress("counting the words of the corpus", words, "words") as corpus.progress:
        model.build_vocab(corpus_iterable=corpus)
    where = ", ".join(str(p) for p in corpus.paths)
    if len(model.wv) == 0:
        raise InputError(where, f"no word occurs at least {params.min_count} times (--min-count)")
    with Progress("training", words * params.epochs, "words") as corpus.progress:  # epoch after epoch
        model.train(corpus_iterable=corpus, total_examples=model.corpus_count, epochs=params.epochs)
    tokens = list(model.wv.index_to_key)
    matrix = np.array(model.wv.vectors, dtype=np.float32)
    log.info("trained %d x %d on %d lines, %d words", len(tokens), params.dim, lines, words)
    corpus_info = {"lines": lines, "words": words, "train_seconds": round(time.perf_counter() - started, 3)}
    return RawTable(tokens=tokens, matrix=matrix, info={"corpus": corpus_info})
