"""Analogy and word-pair benchmarks over a :class:`~index.table.Table`, counted exactly as gensim 4.4 counts.

``evaluate_analogies`` reproduces ``KeyedVectors.evaluate_word_analogies`` and ``evaluate_pairs`` reproduces
``KeyedVectors.evaluate_word_pairs``, question for question:

- the vocabulary is the first ``restrict`` rows; with ``case_insensitive`` every word is upper-cased and, of
  several rows with the same upper-cased label, the lowest id (the most frequent) stands for all of them;
- a question (pair) with a word outside that vocabulary is skipped and counted as out-of-vocabulary; a line that
  is not four (three) fields is ignored;
- 3CosAdd ranks the first ``restrict`` rows by cosine with the normalised mean of b, c and -a (gensim
  ``most_similar``); 3CosMul scores EVERY row, since gensim's ``most_similar_cosmul`` ignores ``restrict_vocab``;
- of the best ``5 + inputs`` rows the inputs are dropped and the first five kept; the prediction is the first of
  them whose upper-cased label is in the vocabulary and is none of a, b, c (else the last of them).

The search is exact and batched. Rather than scoring every (question, row) pair with a 50-term dot product, it
uses the shape of the queries: every score is a function of one term per (a, b) pair and one per c, both read
off a single product of the table with the few hundred distinct question words. Rows are streamed in chunks
and cut into blocks of 16; a block whose best possible score (the best pair term plus the best c term in it)
cannot reach a question's current k-th best score is skipped, and the survivors are scored exactly. Final
scores are recomputed the way gensim computes them, so the ranking is gensim's up to float rounding.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.errors import InputError, InvalidQuery
from index.table import COSMUL_EPSILON, Table, exact_knn

TOPN = 5  # gensim evaluates the top 5 answers of most_similar
BLOCK = 8  # rows per pruning block
SUPER = 16  # blocks per superblock (the first, coarser pruning level)
OFFSETS = np.arange(BLOCK)
CHUNK_ROWS = 16_384  # rows per streamed chunk (a multiple of BLOCK * SUPER) ...
CHUNK_BYTES = 1 << 26  # ... unless its terms would take more memory than this
SEED_ROWS = 16_384  # rows searched exhaustively (3CosAdd) first, for the initial k-th best scores
BOUND_CELLS = 1 << 22  # (question x block) cells per bound evaluation
THREADS = max(1, min(4, os.cpu_count() or 1))
MARGIN = 1e-4  # slack for float rounding between the block bounds and the exact scores
METHODS = ("3cosadd", "3cosmul")


def default_sets() -> tuple[Path, list[Path]]:
    """gensim's bundled Google analogy set and the WordSim353 and SimLex-999 pair sets."""
    from gensim.test.utils import datapath

    return Path(datapath("questions-words.txt")), [Path(datapath("wordsim353.tsv")), Path(datapath("simlex999.txt"))]


# ---------------------------------------------------------------------------------------------- vocabulary
@dataclass
class Vocabulary:
    """gensim's ``ok_vocab``: label (upper-cased if case-insensitive) -> lowest row id among the first rows."""

    table: Table
    limit: int
    case_insensitive: bool
    ok: dict[str, int]
    canon: np.ndarray  # row -> the id its label maps to, for the first ``limit`` rows

    @classmethod
    def build(cls, table: Table, restrict: int | None, case_insensitive: bool) -> Vocabulary:
        limit = table.rows if restrict is None else min(restrict, table.rows)
        if limit < 1:
            raise InvalidQuery("restrict must be at least 1")
        labels = table.tokens[:limit]
        keys = [t.upper() for t in labels] if case_insensitive else labels
        ok: dict[str, int] = {}
        for i in range(limit - 1, -1, -1):  # reversed, so the lowest id wins
            ok[keys[i]] = i
        canon = np.fromiter((ok[k] for k in keys), dtype=np.int64, count=limit)
        return cls(table, limit, case_insensitive, ok, canon)

    def key(self, word: str) -> str:
        return word.upper() if self.case_insensitive else word

    def canonical(self, ids: np.ndarray) -> np.ndarray:
        """The vocabulary id of each row's label, -1 where the label is not in the vocabulary."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.full(ids.shape, -1, dtype=np.int64)
        inside = (ids >= 0) & (ids < self.limit)
        out[inside] = self.canon[ids[inside]]
        for pos in zip(*np.nonzero(ids >= self.limit), strict=True):  # only 3CosMul reaches past the vocabulary
            out[pos] = self.ok.get(self.key(self.table.tokens[int(ids[pos])]), -1)
        return out


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of a UTF-8 file, split on newlines as gensim reads analogy files."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    for number, raw in enumerate(io.BytesIO(data), start=1):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})", number) from None


# ------------------------------------------------------------------------------------------------ analogies
@dataclass
class Questions:
    sections: list[str]
    section: np.ndarray  # section index of each kept question
    ids: np.ndarray  # (n, 4) vocabulary ids of a, b, c, expected
    words: list[tuple[str, str, str, str]]  # as gensim records them (upper-cased if case-insensitive)
    seen: int  # well-formed questions, gensim's quadruplets_no
    skipped: int  # of them, questions with a word outside the vocabulary


def read_questions(path: Path, vocab: Vocabulary) -> Questions:
    sections: list[str] = []
    section: list[int] = []
    ids: list[tuple[int, int, int, int]] = []
    words: list[tuple[str, str, str, str]] = []
    seen = skipped = 0
    for number, line in _lines(path):
        if line.startswith(": "):
            sections.append(line.lstrip(": ").strip())
            continue
        if not sections:
            raise InputError(path, "question before the first ': section' line", number)
        quad = [vocab.key(w) for w in line.split()]
        if len(quad) != 4:
            continue
        seen += 1
        found = [vocab.ok.get(w, -1) for w in quad]
        if min(found) < 0:
            skipped += 1
            continue
        section.append(len(sections) - 1)
        ids.append((found[0], found[1], found[2], found[3]))
        words.append((quad[0], quad[1], quad[2], quad[3]))
    if seen == 0:
        raise InputError(path, "no analogy questions (lines of four words after a ': section' line)")
    return Questions(
        sections,
        np.asarray(section, dtype=np.int64),
        np.asarray(ids, dtype=np.int64).reshape(-1, 4),
        words,
        seen,
        skipped,
    )


def _rows(table: Table, start: int, stop: int) -> np.ndarray:
    return np.asarray(table.vectors[start:stop], dtype=np.float32)


class _Terms:
    """Score terms: one per distinct (a, b) pair and one per distinct c, for a run of rows.

    3CosAdd: ``x.(b - a) + x.c`` is ``|b + c - a|`` times the cosine of row x with the query. 3CosMul: the ratio
    ``sb / (sa + eps)`` times ``sc``, where ``s = (1 + cos) / 2``.
    """

    def __init__(self, table: Table, method: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        self.add = method == "3cosadd"
        n = len(a)
        words, inverse = np.unique(np.concatenate([a, b, c]), return_inverse=True)
        ia, ib, ic = inverse[:n], inverse[n : 2 * n], inverse[2 * n :]
        pairs, self.pair_of = np.unique(ia * len(words) + ib, return_inverse=True)
        self.pair_a, self.pair_b = np.divmod(pairs, len(words))
        self.c_words, c_of = np.unique(ic, return_inverse=True)
        self.pairs = len(pairs)
        self.c_of = c_of + self.pairs  # c terms follow the pair terms
        self.unit = _rows_at(table, words)
        mean = self.unit[ib].astype(np.float64) + self.unit[ic] - self.unit[ia]
        norm = np.linalg.norm(mean, axis=1)
        self.query = (mean / norm[:, None]).astype(np.float32)  # 3CosAdd: gensim's most_similar query
        self.scale = norm if self.add else np.ones(n)
        if self.add:
            self.matrix = np.concatenate([self.unit[self.pair_b] - self.unit[self.pair_a], self.unit[self.c_words]])
        self.vectors = {"a": self.unit[ia], "b": self.unit[ib], "c": self.unit[ic]}

    @property
    def width(self) -> int:
        return self.pairs + len(self.c_words)

    def compute(self, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The terms of ``rows`` into ``out`` (rows x terms: pair terms, then c terms)."""
        if self.add:
            return np.matmul(rows, self.matrix.T, out=out)
        shifted = (1 + rows @ self.unit.T) / 2
        np.divide(
            shifted[:, self.pair_b], shifted[:, self.pair_a] + np.float32(COSMUL_EPSILON), out=out[:, : self.pairs]
        )
        out[:, self.pairs :] = shifted[:, self.c_words]
        return out

    def combine(self, pair: np.ndarray, word: np.ndarray) -> np.ndarray:
        return pair + word if self.add else pair * word

    def bound(self, pair_max: np.ndarray, word_max: np.ndarray) -> np.ndarray:
        if self.add:
            return pair_max + word_max
        return np.maximum(pair_max, 0) * np.maximum(word_max, 0)

    def exact(self, table: Table, q: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Scores of rows ``r`` for questions ``q``, computed as gensim computes them (float32)."""
        rows = _rows_at(table, r)
        if self.add:
            return np.einsum("ij,ij->i", rows, self.query[q])
        b, c, a = ((1 + np.einsum("ij,ij->i", rows, self.vectors[w][q])) / 2 for w in "bca")
        return b * c / (a + np.float32(COSMUL_EPSILON))


def _rows_at(table: Table, ids: np.ndarray) -> np.ndarray:
    return np.asarray(table.vectors[ids], dtype=np.float32)


def _threshold(best: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """k-th best score so far, in the terms' scale, lowered by the rounding slack."""
    level = best.min(axis=1) * scale
    return (level - MARGIN * np.maximum(np.abs(level), 1)).astype(np.float32)


def _merge_best(best: np.ndarray, q: np.ndarray, scores: np.ndarray, width: int = 32) -> np.ndarray:
    """Fold new scores into each question's k best (up to ``width`` new ones per question, its best)."""
    if not len(q):
        return best
    order = np.lexsort((-scores, q))
    q, scores = q[order], scores[order]
    rank = np.arange(len(q)) - np.searchsorted(q, np.arange(len(best)))[q]
    keep = rank < width
    extra = np.full((len(best), width), -np.inf, dtype=best.dtype)
    extra[q[keep], rank[keep]] = scores[keep]
    k = best.shape[1]
    return -np.partition(-np.concatenate([best, extra], axis=1), k - 1, axis=1)[:, :k]


@dataclass
class _ChunkScan:
    """The rows of one chunk that can still reach the k best of questions ``lo:hi``: (questions, rows, scores)."""

    terms: _Terms
    values: np.ndarray  # blocks x BLOCK x terms
    super_max: np.ndarray  # terms x superblocks
    block_max: np.ndarray  # terms x superblocks x SUPER
    threshold: np.ndarray
    start: int
    size: int
    seed: np.ndarray | None  # rows already counted per question, when the chunk overlaps the seeds

    def __call__(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        terms, threshold = self.terms, self.threshold
        bound = terms.bound(self.super_max[terms.pair_of[lo:hi]], self.super_max[terms.c_of[lo:hi]])
        q, sup = np.nonzero(bound >= threshold[lo:hi, None])
        q += lo
        pairs, words = terms.pair_of[q], terms.c_of[q]
        bound = terms.bound(self.block_max[pairs, sup], self.block_max[words, sup])
        hit, sub = np.nonzero(bound >= threshold[q, None])
        q, blk, pairs, words = q[hit], sup[hit] * SUPER + sub, pairs[hit], words[hit]
        values = self.values
        exact = terms.combine(
            values[blk[:, None], OFFSETS, pairs[:, None]], values[blk[:, None], OFFSETS, words[:, None]]
        )
        hit, offset = np.nonzero(exact >= threshold[q, None])
        row = blk[hit] * BLOCK + offset
        keep = row < self.size
        if self.seed is not None:  # leave out the seeds, already counted
            keep &= ~(self.seed[q[hit]] == (self.start + row)[:, None]).any(axis=1)
        hit, offset, row = hit[keep], offset[keep], row[keep]
        return q[hit], self.start + row, exact[hit, offset] / terms.scale[q[hit]]


def analogy_top(
    table: Table, a: np.ndarray, b: np.ndarray, c: np.ndarray, k: int, method: str, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` (ids, scores) among the first ``limit`` rows for questions "a is to b as c is to ?".

    3CosAdd scores are cosines with the normalised ``b + c - a``; 3CosMul scores are Levy and Goldberg's, with
    gensim's shift to [0, 1]. Best first; ties by lower id; ``-1`` pads when ``limit < k``.
    """
    n = len(a)
    k = min(k, limit)
    terms = _Terms(table, method, a, b, c)
    scale = terms.scale
    head = min(SEED_ROWS, limit)
    # 1. Seeds: the exact 3CosAdd top k among the first rows (one blocked product); their exact scores for the
    # method give every question a k-th best score to beat before the rest is searched.
    _, seed = exact_knn(terms.query, _rows(table, 0, head), k)
    found_q, found_r = [np.repeat(np.arange(n), k)], [seed.ravel()]
    best = terms.exact(table, found_q[0], found_r[0]).reshape(n, k).astype(np.float64)
    found_s = [best.ravel()]
    threshold = _threshold(best, scale)
    # 2. The other rows, chunk by chunk: a superblock (SUPER blocks), then a block of BLOCK rows, is skipped
    # when its best pair term combined with its best c term cannot reach the question's k-th best so far.
    span = BLOCK * SUPER
    chunk_rows = max(span, min(CHUNK_ROWS, CHUNK_BYTES // (4 * terms.width)) // span * span)
    buffer = np.empty((chunk_rows, terms.width), dtype=np.float32)
    with ThreadPoolExecutor(THREADS) as pool:  # numpy releases the GIL in the heavy steps: slices run in parallel
        start = head if terms.add else 0  # 3CosAdd seeds are exhaustive over the first rows; 3CosMul ones are not
        while start < limit:
            # Chunks double up to chunk_rows, so the thresholds tighten before the bulk of the rows.
            stop = min(limit, start + min(chunk_rows, max(span, start)))
            size = stop - start
            padded = -(-size // span) * span
            values = terms.compute(_rows(table, start, stop), buffer[:size])
            buffer[size:padded] = -np.inf
            values = buffer[:padded].reshape(padded // BLOCK, BLOCK, terms.width)
            block_max = values.max(axis=1)  # blocks x terms
            super_max = np.ascontiguousarray(block_max.reshape(-1, SUPER, terms.width).max(axis=1).T)  # terms x supers
            block_max = np.ascontiguousarray(block_max.T).reshape(terms.width, -1, SUPER)  # terms x supers x SUPER
            step = max(1, min(BOUND_CELLS // super_max.shape[1], -(-n // THREADS)))
            scan = _ChunkScan(
                terms, values, super_max, block_max, threshold, start, size, seed if start < head else None
            )
            parts = list(pool.map(scan, range(0, n, step), [min(n, lo + step) for lo in range(0, n, step)]))
            q, r, s = (np.concatenate(column) for column in zip(*parts, strict=True))
            found_q.append(q)
            found_r.append(r)
            found_s.append(s)
            best = _merge_best(best, q, s)
            threshold = _threshold(best, scale)
            start = stop
    # 3. Exact scores (as gensim computes them) of the candidates that can still make it; best k per question.
    q, r, s = np.concatenate(found_q), np.concatenate(found_r), np.concatenate(found_s)
    keep = s * scale[q] >= threshold[q]
    q, r = q[keep], r[keep]
    scores = terms.exact(table, q, r)
    order = np.lexsort((r, -scores, q))
    q, r, scores = q[order], r[order], scores[order]
    rank = np.arange(len(q)) - np.searchsorted(q, np.arange(n))[q]
    first = rank < k
    ids = np.full((n, k), -1, dtype=np.int64)
    top = np.full((n, k), -np.inf, dtype=np.float32)
    ids[q[first], rank[first]] = r[first]
    top[q[first], rank[first]] = scores[first]
    return ids, top


def _predict(vocab: Vocabulary, ids: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """gensim's pick among the candidates: vocabulary id of the predicted word, -1 for none."""
    inputs = (ids == a[:, None]) | (ids == b[:, None]) | (ids == c[:, None])
    usable = (ids >= 0) & ~inputs
    order = np.cumsum(usable, axis=1)
    sims = usable & (order <= TOPN)  # most_similar(topn=5): the first five rows that are not inputs
    count = sims.sum(axis=1)
    label = vocab.canonical(np.where(sims, ids, -1))
    good = sims & (label >= 0) & (label != a[:, None]) & (label != b[:, None]) & (label != c[:, None])
    last = np.where(count > 0, np.argmax(np.where(sims, order, 0), axis=1), 0)
    pick = np.where(good.any(axis=1), np.argmax(good, axis=1), last)
    predicted = label[np.arange(len(ids)), pick]
    return np.where(count > 0, predicted, -1)


def evaluate_analogies(
    table: Table,
    path: Path,
    restrict: int | None = 300_000,
    method: str = "3cosadd",
    case_insensitive: bool = True,
    details: bool = False,
) -> dict[str, Any]:
    """Accuracy on an analogy file (questions-words.txt format), as gensim ``evaluate_word_analogies``.

    With ``details`` every section also lists its correct and incorrect questions, as gensim returns them.
    """
    if method not in METHODS:
        raise InvalidQuery(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
    started = time.perf_counter()
    vocab = Vocabulary.build(table, restrict, case_insensitive)
    questions = read_questions(Path(path), vocab)
    a, b, c, expected = questions.ids.T
    correct = np.zeros(len(a), dtype=bool)
    if len(a):
        limit = vocab.limit if method == "3cosadd" else table.rows  # gensim's 3CosMul ignores restrict_vocab
        ids, _ = analogy_top(table, a, b, c, TOPN + 3, method, limit)
        correct = _predict(vocab, ids, a, b, c) == expected
    n_sections = len(questions.sections)
    right = np.bincount(questions.section[correct], minlength=n_sections)
    asked = np.bincount(questions.section, minlength=n_sections)
    sections = []
    for i, name in enumerate(questions.sections):
        entry = _score(name, int(right[i]), int(asked[i]))
        if details:
            mine = np.nonzero(questions.section == i)[0]
            entry["correct_questions"] = [list(questions.words[j]) for j in mine if correct[j]]
            entry["incorrect_questions"] = [list(questions.words[j]) for j in mine if not correct[j]]
        sections.append(entry)
    total = _score("Total accuracy", int(correct.sum()), len(a))
    return {
        "file": str(path),
        "method": method,
        "restrict": vocab.limit,
        "case_insensitive": case_insensitive,
        **{key: total[key] for key in ("accuracy", "correct", "incorrect", "total")},
        "questions": questions.seen,
        "skipped": questions.skipped,
        "oov_ratio": round(100.0 * questions.skipped / questions.seen, 4),
        "sections": sections,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _score(name: str, correct: int, total: int) -> dict[str, Any]:
    return {
        "section": name,
        "accuracy": correct / total if total else 0.0,
        "correct": correct,
        "incorrect": total - correct,
        "total": total,
    }


# ----------------------------------------------------------------------------------------------- word pairs
def evaluate_pairs(
    table: Table, path: Path, restrict: int | None = 300_000, case_insensitive: bool = True, delimiter: str = "\t"
) -> dict[str, Any]:
    """Pearson and Spearman correlation with human judgements, as gensim ``evaluate_word_pairs``.

    ``oov_ratio`` is gensim's: the percentage of well-formed pairs skipped for a word outside the vocabulary.
    """
    from scipy import stats

    vocab = Vocabulary.build(table, restrict, case_insensitive)
    gold: list[float] = []
    left: list[int] = []
    right: list[int] = []
    oov = 0
    text = "".join(line for _, line in _lines(path))
    for line in io.StringIO(text, newline=None):  # gensim reads pair files in text mode (universal newlines)
        if not line or line.startswith("#"):
            continue
        fields = [vocab.key(w) for w in line.split(delimiter)]
        if len(fields) != 3:
            continue
        try:
            similarity = float(fields[2])
        except ValueError:
            continue
        first, second = vocab.ok.get(fields[0], -1), vocab.ok.get(fields[1], -1)
        if first < 0 or second < 0:
            oov += 1
            continue
        gold.append(similarity)
        left.append(first)
        right.append(second)
    if not gold:
        raise InputError(path, f"no word pair with both words in the first {vocab.limit:,} rows of {table.name!r}")
    model = table.similarities(np.asarray(left), np.asarray(right))
    pearson = stats.pearsonr(gold, model)
    spearman = stats.spearmanr(gold, model)
    return {
        "file": str(path),
        "restrict": vocab.limit,
        "case_insensitive": case_insensitive,
        "pearson": float(pearson[0]),
        "pearson_pvalue": float(pearson[1]),
        "spearman": float(spearman[0]),
        "spearman_pvalue": float(spearman[1]),
        "pairs": len(gold),
        "oov": oov,
        "oov_ratio": 100.0 * oov / (len(gold) + oov),
    }


# ------------------------------------------------------------------------------------------------- printing
def format_report(report: dict[str, Any]) -> str:
    """The ``embedding-index eval`` text report."""
    analogies = report.get("analogies")
    parts = [analogies] if analogies else []
    limit = min([p["restrict"] for p in parts + report.get("pairs", [])], default=report["restrict"])
    lines = [f"table {report['table']}, vocabulary: first {limit:,} rows"]
    if analogies:
        lines.append(
            f"analogies {Path(analogies['file']).name} ({analogies['method']}): accuracy {analogies['accuracy']:.4f}"
            f" ({analogies['correct']:,}/{analogies['total']:,}); {analogies['skipped']:,} of"
            f" {analogies['questions']:,} questions skipped for unknown words ({analogies['oov_ratio']:.1f}%)"
            f"; {analogies['seconds']:.1f} s"
        )
        width = max(len(s["section"]) for s in analogies["sections"])
        for s in analogies["sections"]:
            lines.append(f"  {s['section']:<{width}}  {s['accuracy']:.4f}  ({s['correct']:,}/{s['total']:,})")
    for pairs in report.get("pairs", []):
        lines.append(
            f"pairs {Path(pairs['file']).name}: Spearman {pairs['spearman']:.4f} (p={pairs['spearman_pvalue']:.3g}),"
            f" Pearson {pairs['pearson']:.4f} (p={pairs['pearson_pvalue']:.3g}); {pairs['pairs']:,} pairs,"
            f" {pairs['oov_ratio']:.1f}% skipped for unknown words"
        )
    return "\n".join(lines)
