"""Analogy and word-pair benchmarks over a :class:`~index.engine.table.Table`, counted exactly as gensim 4.4 counts.

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

The search itself is :func:`index.engine.analogy.analogy_top`; its progress (rows searched) goes to stderr with the
builder's other steps, the report to stdout.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.build.gensim_data import gensim_data
from index.build.sources import read_bytes
from index.engine.analogy import analogy_top
from index.engine.table import Table
from index.errors import InputError, InvalidQuery, counted
from index.progress import Progress

TOPN = 5  # gensim evaluates the top 5 answers of most_similar
METHODS = ("3cosadd", "3cosmul")


def default_sets() -> tuple[Path, list[Path]]:
    """gensim's bundled Google analogy set and the WordSim353 and SimLex-999 pair sets."""
    return gensim_data("questions-words.txt"), [gensim_data("wordsim353.tsv"), gensim_data("simlex999.txt")]


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
        keys = list(map(str.upper, labels)) if case_insensitive else labels
        ok = dict(zip(reversed(keys), range(limit - 1, -1, -1), strict=True))  # reversed: the lowest id wins
        if len(ok) == limit:  # every label its own: each row maps to itself
            canon = np.arange(limit, dtype=np.int64)
        else:
            canon = np.fromiter(map(ok.__getitem__, keys), dtype=np.int64, count=limit)
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
    """(1-based line number, text) of a UTF-8 file (gzip-compressed too, as gensim opens it), split on newlines as
    gensim reads analogy files."""
    try:
        data = read_bytes(Path(path))
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
    errors: bool = False,
) -> dict[str, Any]:
    """Accuracy on an analogy file (questions-words.txt format), as gensim ``evaluate_word_analogies``.

    With ``details`` every section also lists its correct and incorrect questions, as gensim returns them. With
    ``errors`` the report lists every incorrect question with the prediction and the expected word's rank among
    the rows the method scores (:func:`index.engine.diagnostics.analogy_expectations`).
    """
    if method not in METHODS:
        raise InvalidQuery(f"unknown analogy method {method!r}: use 3cosadd or 3cosmul")
    started = time.perf_counter()
    vocab = Vocabulary.build(table, restrict, case_insensitive)
    questions = read_questions(Path(path), vocab)
    a, b, c, expected = questions.ids.T
    correct = np.zeros(len(a), dtype=bool)
    predicted = np.full(len(a), -1, dtype=np.int64)
    limit = vocab.limit if method == "3cosadd" else table.rows  # gensim's 3CosMul ignores restrict_vocab
    if len(a):
        with Progress(f"analogies {Path(path).name} ({method})", limit) as progress:
            ids, _ = analogy_top(table, a, b, c, TOPN + 3, method, limit, done=progress.advance)
        predicted = _predict(vocab, ids, a, b, c)
        correct = predicted == expected
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
    extra = {"errors": _errors(vocab, questions, predicted, correct, method, limit)} if errors else {}
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
        **extra,
    }


def _errors(
    vocab: Vocabulary, questions: Questions, predicted: np.ndarray, correct: np.ndarray, method: str, limit: int
) -> list[dict[str, Any]]:
    """The incorrect questions, each with the prediction and the expected word's rank, score and margin."""
    from index.engine.diagnostics import analogy_expectations

    table = vocab.table
    wrong = np.flatnonzero(~correct)
    quads = questions.ids[wrong]
    rankable = (quads[:, 3:] != quads[:, :3]).all(axis=1)  # an expected word that is also a, b or c never ranks
    ranked = []
    if rankable.any():  # else no step to show
        with Progress("ranking the expected words of the incorrect answers", int(rankable.sum()), "questions") as step:
            ranked = analogy_expectations(
                table, quads[rankable, :3], quads[rankable, 3], method, restrict=limit, done=step.advance
            )
    found = iter(ranked)
    out = []
    for j, ok in zip(wrong.tolist(), rankable.tolist(), strict=True):
        guess = int(predicted[j])
        out.append(
            {
                "section": questions.sections[questions.section[j]],
                "question": list(questions.words[j]),
                "predicted": vocab.key(table.tokens[guess]) if guess >= 0 else None,
                **(next(found).as_dict() if ok else {"rank": None, "score": None, "margin": None}),
            }
        )
    return out


def _score(name: str, correct: int, total: int) -> dict[str, Any]:
    return {
        "section": name,
        "accuracy": correct / total if total else 0.0,
        "correct": correct,
        "incorrect": total - correct,
        "total": total,
    }


# ----------------------------------------------------------------------------------------------- word pairs
MIN_PAIRS = 3  # with 2, Spearman's p-value is undefined


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
        raise InputError(
            path, f"no word pair with both words in the first {counted(vocab.limit, 'row')} of {table.name!r}"
        )
    # Correlations and their p-values need MIN_PAIRS pairs and scores that differ (else scipy raises or gives NaN).
    if len(gold) < MIN_PAIRS:
        raise InputError(
            path,
            f"a correlation needs at least {MIN_PAIRS} word pairs with both words in the first "
            f"{counted(vocab.limit, 'row')} of {table.name!r}; found {len(gold)}",
        )
    if min(gold) == max(gold):
        raise InputError(path, f"all {len(gold):,} known pairs have the score {gold[0]:g}: no correlation to measure")
    model = table.similarities(np.asarray(left), np.asarray(right))
    if np.ptp(model) == 0:
        raise InputError(path, f"{table.name!r} gives all {len(gold):,} known pairs the same cosine: no correlation")
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
    lines = [f"table {report['table']}, vocabulary: first {counted(limit, 'row')}"]
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
    if analogies and "errors" in analogies:
        lines.append(
            f"incorrect analogies: {len(analogies['errors']):,} (a b c: expected, the prediction, and where the"
            " expected word ranks; margin: how far the best answer's score is ahead of it)"
        )
        for e in analogies["errors"]:
            a, b, c, expected = e["question"]
            rank = "never ranked (it is a, b or c)" if e["rank"] is None else f"rank {e['rank']:,}"
            margin = "" if e["margin"] is None else f", score {e['score']:.4f}, margin {e['margin']:.4f}"
            lines.append(f"  {e['section']}: {a} {b} {c}: expected {expected}, got {e['predicted']}; {rank}{margin}")
    for pairs in report.get("pairs", []):
        lines.append(
            f"pairs {Path(pairs['file']).name}: Spearman {pairs['spearman']:.4f} (p={pairs['spearman_pvalue']:.3g}),"
            f" Pearson {pairs['pearson']:.4f} (p={pairs['pearson_pvalue']:.3g}); {pairs['pairs']:,} pairs,"
            f" {pairs['oov_ratio']:.1f}% skipped for unknown words"
        )
    return "\n".join(lines)
