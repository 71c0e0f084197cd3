"""Seeded random requests to the word routes of the full GloVe 6B 50d table, each checked against gensim's
``KeyedVectors`` on the same 400,000 rows, run in process (``tests.gensim_reference.load_glove_kv``); the same on
MiniLM's model-token table (its kinds left out as ``skip_special`` and ``whole_words_only`` ask, ``compose``), and
through the front of a sharded word table (``tests/service/test_shards_words.py``). The routes: neighbours by
token, id and positive/negative lists (GET, POST, batch), a vector's page (``offset``, ``min_score``), 3CosAdd and
3CosMul analogies with an expected answer (one, batch), similarity and rank of pairs, closer-than, doesnt-match,
n-similarity.

The generator draws words from the whole frequency range (a log-uniform row), and spells some of them as a client
might: upper-cased, title-cased, decomposed (NFD), unknown, repeated within positive/negative, in both lists; it
draws ``k`` up to its limit, ``restrict`` below and above the table, ``offset`` past the rows ``restrict`` leaves,
``min_score`` above every score, and the GET, POST and batch forms. gensim knows words only as spelled, so the
oracle resolves each word by the documented rule (as sent, NFC, then the lowest row case-folded) and hands gensim
the key. With ``exact`` the answers equal gensim's: the same rows in the same order, scores to float32 tolerance,
a swap only between rows whose scores differ by less than 1e-6 (gensim divides raw rows by their norms, the
table stores unit rows; equal scores go by row here, in argsort's order there). Without it (the table's HNSW
index) each hit's score is its true cosine, the order is by score, the inputs are left out, and the hits found
among gensim's top k are counted: their share must reach the index's recall. An invalid request must get the
status and code the docs give it. 3CosMul's scores beyond 1 (near-zero denominators) are compared to a relative
tolerance; ranks and counts within the bounds of rows tying the mark.
"""

from __future__ import annotations

import math
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from gensim.models import KeyedVectors

from index.build.sources import ReadOptions, glove_package, huggingface
from tests.gensim_reference import load_glove_kv
from tests.minilm import MINILM, minilm_dir, whole_text_tokenizer

pytestmark = pytest.mark.slow

MAX_K = 1000
CASES = 300  # requests per run of the GloVe table (exact, HNSW)
SCORE_TOL = 1e-5  # float32 scores; relative beyond 1 (3CosMul's quotients, whose denominators may be near 0)
TIE = 1e-6  # cosines this close may come in either order


def tie(score: float) -> float:
    """How close two scores may be and come in either order: ``TIE`` for cosines, the score tolerance beyond 1
    (3CosMul's quotients, where float32's rounding of a near-zero denominator is amplified)."""
    return TIE if abs(score) <= 1 else SCORE_TOL * abs(score)


Hits = list[tuple[int, float]]
ZERO_COSMUL = 0.5 * 0.5 / (0.5 + 1e-6)  # gensim's 3CosMul score of a row of cosine 0 with a, b and c (a zero row)


@pytest.fixture(scope="module")
def kv() -> KeyedVectors:
    return load_glove_kv()


class Oracle:
    """gensim's answers, its words resolved first as the service resolves them. On a model-token table
    (``kinds``: its special and continuation rows) a word is also tried as the model's tokenizer normalises it
    (``normalize``), and the rows of the kinds a request leaves out are cut from gensim's scores of every row."""

    def __init__(
        self,
        kv: KeyedVectors,
        kinds: tuple[np.ndarray, np.ndarray] | None = None,
        normalize: Callable[[str], str] | None = None,
        zeros: int = 0,
        pieces: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.kv = kv
        self.pieces = pieces  # a model-token table's tokenizer: a word's pieces' rows
        self.zeros = zeros  # zero rows after gensim's (an import keeps them): gensim divides by their norm, 0
        self.kinds = kinds
        self.normalize = normalize
        self.keys: list[str] = kv.index_to_key
        self.folded: dict[str, int] = {}
        for row, key in enumerate(self.keys):
            self.folded.setdefault(key.casefold(), row)
        self.unit = kv.get_normed_vectors()

    def row(self, word: str) -> int | None:
        """The documented lookup: as sent, in NFC, then the lowest row case-folded (``İ`` folded as Turkish
        folds it when nothing else matches); then the model's normalised text by the same rules."""
        text = unicodedata.normalize("NFC", word)
        found = self.spelled(word, text)
        if found is None and self.normalize is not None:
            normal = self.normalize(text)
            if normal != text and normal.strip():
                found = self.spelled(normal, normal)
        return found

    def spelled(self, word: str, text: str) -> int | None:
        for form in (word, text):
            if form in self.kv.key_to_index:
                return int(self.kv.key_to_index[form])
        folded = text.casefold()
        found = self.folded.get(folded)
        if found is None and "i\u0307" in folded:
            found = self.folded.get(folded.replace("i\u0307", "i"))
        return found

    def hits(self, answer: list[tuple[str, float]]) -> Hits:
        return [(int(self.kv.key_to_index[key]), float(score)) for key, score in answer]

    def most_similar(
        self, positive: list[int], negative: list[int], k: int, restrict: int | None, skip: np.ndarray | None = None
    ) -> Hits:
        keys = self.keys
        pos, neg = [keys[i] for i in positive], [keys[i] for i in negative]
        if skip is None and not self.zeros:
            return self.hits(self.kv.most_similar(positive=pos, negative=neg, topn=k, restrict_vocab=restrict))
        scores = self.kv.most_similar(positive=pos, negative=neg, topn=None, restrict_vocab=restrict)
        return best(self.with_zeros(scores, 0.0, restrict), k, {*positive, *negative}, skip)

    def by_vector(self, vector: np.ndarray, k: int, restrict: int | None, skip: np.ndarray | None = None) -> Hits:
        if skip is None and not self.zeros:
            return self.hits(self.kv.most_similar(positive=[vector], topn=k, restrict_vocab=restrict))
        scores = self.kv.most_similar(positive=[vector], topn=None, restrict_vocab=restrict)
        return best(self.with_zeros(scores, 0.0, restrict), k, set(), skip)

    def cosmul(
        self, a: int, b: int, c: int, k: int, restrict: int | None = None, skip: np.ndarray | None = None
    ) -> Hits:
        """gensim's most_similar_cosmul; ``restrict`` cuts its scores of every row to the first rows, as the
        docs say the service's restrict does (gensim's own ignores restrict_vocab)."""
        keys = self.keys
        positive, negative = [keys[b], keys[c]], [keys[a]]
        if skip is None and restrict is None and not self.zeros:
            return self.hits(self.kv.most_similar_cosmul(positive=positive, negative=negative, topn=k))
        scores = self.kv.most_similar_cosmul(positive=positive, negative=negative, topn=None)
        return best(self.with_zeros(scores, ZERO_COSMUL, None)[:restrict], k, {a, b, c}, skip)

    def with_zeros(self, scores: np.ndarray, score: float, restrict: int | None) -> np.ndarray:
        """gensim's ``scores`` of its rows, and ``score`` for each zero row after them within ``restrict``."""
        zeros = min(self.zeros, max(0, (restrict or len(self.keys) + self.zeros) - len(self.keys)))
        return np.concatenate([np.asarray(scores, dtype=np.float64), np.full(zeros, score)])

    def similarity(self, a: int, b: int) -> float:
        return float(self.kv.similarity(self.keys[a], self.keys[b]))

    def pair(self, a: int, b: int, rank: bool) -> tuple[float, int, int]:
        """The cosine of rows a and b, and with ``rank`` the bounds of gensim's ``rank(a, b)`` within near ties."""
        cosine = self.similarity(a, b)
        if not rank:
            return cosine, 0, 0
        distances = np.asarray(self.kv.distances(self.keys[a]), dtype=np.float64)
        distances[a] = np.inf
        if self.zeros:  # a zero row's distance is 1
            distances = np.concatenate([distances, np.ones(self.zeros)])
        mark = distances[b] if a != b else 0.0
        low = int((distances < mark - TIE).sum())
        high = int((distances < mark + TIE).sum()) - (a != b)  # b itself left out
        exact = int(self.kv.rank(self.keys[a], self.keys[b])) if a != b and not self.zeros else None
        if exact is not None:
            low, high = min(low + 1, exact), max(high + 1, exact)
            return cosine, low, high
        return cosine, low + 1, high + 1

    def cancels(self, positive: list[int], negative: list[int]) -> bool:
        """The weighted mean of the unit rows is zero: the service's 422."""
        mean = self.unit[positive].astype(np.float64).sum(0) - self.unit[negative].astype(np.float64).sum(0)
        return bool(math.sqrt(mean @ mean) / (len(positive) + len(negative)) < 1e-12)


def best(scores: np.ndarray, k: int, left_out: set[int], skip: np.ndarray | None) -> Hits:
    """The ``k`` best of gensim's scores of the first rows, ``left_out`` and the ``skip`` rows cut; equal scores by
    row."""
    scores = np.asarray(scores, dtype=np.float64).copy()
    scores[[i for i in left_out if i < len(scores)]] = -np.inf
    if skip is not None:
        scores[skip[: len(scores)]] = -np.inf
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [(int(i), float(scores[i])) for i in order if scores[i] > -np.inf]


@dataclass
class Case:
    """One request and what it must answer: hits (in order), a similarity, or an error's (status, code)."""

    kind: str
    method: str
    path: str
    body: dict[str, Any]
    hits: Hits | None = None
    similarity: float | None = None
    error: tuple[int, str] | None = None
    exact: bool = True
    left_out: set[int] = field(default_factory=set)
    query: np.ndarray | None = None  # the unit query vector, for the scores of an approximate answer
    items: list[Case] = field(default_factory=list)  # a batch's: each item's answer, in order
    expect: tuple[int, int, float] | None = None  # an analogy's expected answer: its rank's bounds, its score
    pairs: list[tuple[float, int, int] | None] | None = None  # each pair's cosine and rank bounds, or None: unknown
    count: tuple[int, int] | None = None  # closer-than's count: its bounds within near ties


class Draw:
    """Seeded random words and options."""

    def __init__(
        self, seed: int, oracle: Oracle, table: str, max_k: int = MAX_K, rows: int | None = None, restricts: float = 0.5
    ) -> None:
        self.rng = random.Random(seed)
        self.restricts = restricts  # the share of requests given a restrict
        self.pair_routes = ["similarity", "rank"]  # the front of a sharded table has no rank
        self.oracle = oracle
        self.path = f"/v1/tables/{table}"
        self.max_k = max_k
        self.rows = len(oracle.keys)
        self.past = self.rows if rows is None else rows  # the first row id past the table
        accented = [i for i, key in enumerate(oracle.keys[:100_000]) if unicodedata.normalize("NFD", key) != key]
        self.accented = accented or [0]
        self.cased = [key for key in oracle.keys if key != key.casefold()]  # rows a case-folded word may also find

    def options(self, exact: bool, restrict: int | None) -> dict[str, Any]:
        """``exact``, ``restrict`` when drawn, and on a model-token table the token kinds left out."""
        options: dict[str, Any] = {"exact": exact}
        if restrict is not None:
            options["restrict"] = restrict
        if self.oracle.kinds is not None:
            options["skip_special"] = self.rng.random() < 0.7
            options["whole_words_only"] = self.rng.random() < 0.3
        return options

    def skipped(self, options: dict[str, Any]) -> np.ndarray | None:
        """The rows the options leave out by their kind (None on a table of words)."""
        kinds = self.oracle.kinds
        if kinds is None:
            return None
        special, continuation = kinds
        return (special & options.get("skip_special", True)) | (continuation & options.get("whole_words_only", False))

    def row(self) -> int:
        """A row from the whole frequency range: log-uniform, so the most frequent and the rarest both come up."""
        return min(self.rows - 1, int(math.exp(self.rng.uniform(0, math.log(self.rows)))) - 1)

    def word(self) -> str:
        """A known word, spelled as sent, upper-cased, title-cased or decomposed; now and then an unknown one."""
        roll = self.rng.random()
        if roll < 0.05:
            return "".join(self.rng.choice("qxzjv") for _ in range(self.rng.randint(6, 12)))
        if roll < 0.15:
            return unicodedata.normalize("NFD", self.oracle.keys[self.rng.choice(self.accented)])
        word = self.oracle.keys[self.row()]
        if roll < 0.25:
            return word.upper()
        if roll < 0.35:
            return word.title()
        if roll < 0.4 and self.cased:  # a row beside its case-folded twin, as sent or in another case
            word = self.rng.choice(self.cased)
            return self.rng.choice([word, word.casefold(), word.upper()])
        if roll < 0.45 and self.oracle.normalize is not None:
            return word.replace("e", "\u00e9").title()  # the model's normaliser strips the accent
        return word

    def k(self) -> int:
        return self.rng.choice([1, 2, 3, 5, 10, 10, 25, 100, self.max_k, self.rng.randint(1, self.max_k)])

    def restrict(self) -> int | None:
        if self.rng.random() >= self.restricts:
            return None
        roll = self.rng.random()
        if roll < 0.2:
            return self.rng.randint(1, 20)
        if roll < 0.4:
            return self.rows + self.rng.randint(0, 10)
        return self.rng.randint(100, self.rows)


def neighbours_case(draw: Draw, exact: bool) -> Case:
    """A token's neighbours by GET or POST, or positive/negative lists by POST."""
    k = draw.k()
    options = {"k": k, **draw.options(exact, draw.restrict())}
    item, case = neighbours_item(draw, k, options)
    if isinstance(item, str):
        item = {"token": item}
    case.exact = exact
    case.method = "GET" if "token" in item and draw.rng.random() < 0.5 else "POST"
    case.body = {**item, **options}
    return case


def neighbours_item(draw: Draw, k: int, options: dict[str, Any]) -> tuple[str | dict[str, Any], Case]:
    """A query of ``POST .../neighbors`` (alone or in a batch) and its answer: a token (as a string or an object),
    a row id, or positive/negative lists with duplicates and words in both."""
    rng, oracle = draw.rng, draw.oracle
    roll = rng.random()
    item: str | dict[str, Any]
    if roll < 0.5:
        word = draw.word()
        item = word if rng.random() < 0.5 else {"token": word}
        case = Case("token", "POST", f"{draw.path}/neighbors", {})
        row = oracle.row(word)
        if row is None:
            case.error = (404, "unknown_token")
            return item, case
        positive, negative = [row], []
    elif roll < 0.6:
        row = rng.choice([draw.row(), draw.past + rng.randint(0, 5)])
        item = {"id": row}
        case = Case("id", "POST", f"{draw.path}/neighbors", {})
        if row >= draw.past:
            case.error = (404, "unknown_token")
            return item, case
        positive, negative = [row], []
    else:
        positive_words = [draw.word() for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        negative_words = [draw.word() for _ in range(rng.choice([0, 0, 1, 2]))]
        if positive_words and rng.random() < 0.2:
            positive_words.append(rng.choice(positive_words))  # a duplicate
        if positive_words and rng.random() < 0.15:
            negative_words.append(rng.choice(positive_words))  # a word in both lists
        item = {"positive": positive_words, "negative": negative_words}
        case = Case("examples", "POST", f"{draw.path}/neighbors", {})
        if not positive_words and not negative_words:
            case.error = (422, "invalid_request")
            return item, case
        rows = [oracle.row(w) for w in positive_words + negative_words]
        if None in rows:
            case.error = (404, "unknown_token")
            return item, case
        positive = [r for r in rows[: len(positive_words)] if r is not None]
        negative = [r for r in rows[len(positive_words) :] if r is not None]
        if oracle.cancels(positive, negative):
            case.error = (422, "invalid_request")
            return item, case
    case.left_out = {*positive, *negative}
    case.query = query_vector(oracle, positive, negative)
    case.hits = oracle.most_similar(positive, negative, k, options.get("restrict"), draw.skipped(options))
    return item, case


def neighbours_batch_case(draw: Draw, exact: bool) -> Case:
    """``queries``: 1..6 items sharing ``k``, ``restrict`` and ``exact``, each answered or refused alone (an empty
    positive/negative item refuses the whole batch, as the request's schema does)."""
    k = draw.rng.choice([1, 5, 10, 50, 100])
    options = draw.options(exact, draw.restrict())
    items, cases = zip(*(neighbours_item(draw, k, options) for _ in range(draw.rng.randint(1, 6))), strict=True)
    body: dict[str, Any] = {"queries": list(items), "k": k, **options}
    batch = Case("batch", "POST", f"{draw.path}/neighbors", body, exact=exact)
    if any(isinstance(item, dict) and item.get("positive") == item.get("negative") == [] for item in items):
        batch.error = (422, "invalid_request")
        return batch
    for case in cases:
        case.kind, case.exact = f"batch-{case.kind}", exact
    batch.items = list(cases)
    return batch


def query_vector(oracle: Oracle, positive: list[int], negative: list[int]) -> np.ndarray:
    mean = oracle.unit[positive].astype(np.float64).sum(0) - oracle.unit[negative].astype(np.float64).sum(0)
    return mean / np.linalg.norm(mean)


def search_case(draw: Draw, exact: bool) -> Case:
    """A raw vector's page: ``offset`` and ``min_score`` over gensim's longer list."""
    rng, oracle = draw.rng, draw.oracle
    vector = np.asarray([rng.gauss(0, 1) for _ in range(oracle.unit.shape[1])], dtype=np.float32)
    if rng.random() < 0.5:
        vector = oracle.kv.vectors[draw.row()]
    k, restrict = draw.k(), draw.restrict()
    offset = rng.choice([0, 0, 0, rng.randint(0, MAX_K - k)])
    options = draw.options(exact, restrict)
    body: dict[str, Any] = {"vector": [float(v) for v in vector], "k": k, **options}
    if offset:
        body["offset"] = offset
    floor = rng.choice([None, None, rng.uniform(0.3, 0.9), 1.0, -1.0, rng.choice([-1.5, 1.5])])
    if floor is not None:
        body["min_score"] = floor
    case = Case("search", "POST", f"{draw.path}/search", body, exact=exact)
    if floor is not None and abs(floor) > 1:  # not a cosine
        case.error = (422, "invalid_request")
        return case
    if rng.random() < 0.1:  # past max_k
        body["offset"] = MAX_K - k + 1
        case.error = (422, "invalid_request")
        return case
    hits = oracle.by_vector(vector, offset + k, restrict, draw.skipped(options))[offset:]
    case.hits = [(i, s) for i, s in hits if floor is None or s >= floor - SCORE_TOL]
    if floor is not None and any(abs(s - floor) < SCORE_TOL for _, s in case.hits):
        case.hits = None  # a score at the floor itself may fall on either side: skip the comparison
        case.kind = "search-at-floor"
    case.query = np.asarray(vector, dtype=np.float64) / np.linalg.norm(vector)
    return case


def analogy_case(draw: Draw, exact: bool, shared: dict[str, Any] | None = None) -> Case:
    """A question (a is to b as c is to ?), by 3CosAdd or 3CosMul, now and then with an expected answer; its
    method, ``k`` and options drawn, or ``shared`` (a batch's)."""
    rng, oracle = draw.rng, draw.oracle
    words = [draw.word() for _ in range(3)]
    if rng.random() < 0.05:
        words[1] = words[0].upper()  # a and b one row
    if shared is None:
        shared = {"k": draw.k(), "method": rng.choice(["3cosadd", "3cosmul"]), **draw.options(exact, draw.restrict())}
    options = {key: value for key, value in shared.items() if key not in ("k", "method")}
    k, method, restrict = shared["k"], shared["method"], shared.get("restrict")
    body: dict[str, Any] = {"a": words[0], "b": words[1], "c": words[2], **shared}
    if rng.random() < 0.3:
        body["expect"] = rng.choice([draw.word(), draw.word(), rng.choice(words)])
    case = Case(method, "POST", f"{draw.path}/analogy", body, exact=exact or method == "3cosmul")
    a, b, c = (oracle.row(w) for w in words)
    if a is None or b is None or c is None:
        case.error = (404, "unknown_token")
        return case
    if np.array_equal(oracle.unit[a], oracle.unit[b]):  # one row, or two of one direction: b - a is zero
        case.error = (422, "invalid_request")
        return case
    case.left_out = {a, b, c}
    case.query = query_vector(oracle, [b, c], [a])
    skip = draw.skipped(options)
    if method == "3cosadd":
        case.hits = oracle.most_similar([b, c], [a], k, restrict, skip)
    else:
        case.hits = oracle.cosmul(a, b, c, k, restrict, skip)
    if "expect" in body:
        case.kind += "-expect"
        expect_answer(case, oracle, method, (a, b, c), body["expect"], restrict, skip)
    return case


def analogy_batch_case(draw: Draw, exact: bool) -> Case:
    """``queries``: 1..4 questions sharing the method, ``k`` and options, each with its own ``expect`` or none,
    each answered or refused alone."""
    shared = {
        "k": draw.rng.choice([1, 5, 10, 50]),
        "method": draw.rng.choice(["3cosadd", "3cosmul"]),
        **draw.options(exact, draw.restrict()),
    }
    items = [analogy_case(draw, exact, shared) for _ in range(draw.rng.randint(1, 4))]
    questions = [{key: case.body[key] for key in ("a", "b", "c", "expect") if key in case.body} for case in items]
    for case in items:
        case.kind = f"batch-{case.kind}"
    return Case("analogy-batch", "POST", f"{draw.path}/analogy", {"queries": questions, **shared}, items=items)


def expect_answer(
    case: Case,
    oracle: Oracle,
    method: str,
    words: tuple[int, int, int],
    expect: str,
    restrict: int | None,
    skip: np.ndarray | None,
) -> None:
    """The expected answer's rank among the candidates gensim scores (a, b, c, rows past ``restrict`` and the
    kinds left out are none): 1 + those scoring strictly higher, within the bounds of near ties; its score. One
    that can never be an answer is a 422, an unknown word a 404."""
    row = oracle.row(expect)
    if row is None:
        case.error, case.hits = (404, "unknown_token"), None
        return
    a, b, c = (oracle.keys[i] for i in words)
    if method == "3cosadd":
        scores = oracle.kv.most_similar(positive=[b, c], negative=[a], topn=None, restrict_vocab=restrict)
        scores = oracle.with_zeros(scores, 0.0, restrict)
    else:
        scores = oracle.kv.most_similar_cosmul(positive=[b, c], negative=[a], topn=None)
        scores = oracle.with_zeros(scores, ZERO_COSMUL, None)[:restrict]
    if row in words or row >= len(scores) or (skip is not None and skip[row]):
        case.error, case.hits = (422, "invalid_request"), None
        return
    candidates = np.asarray(scores, dtype=np.float64).copy()
    candidates[[i for i in words if i < len(candidates)]] = -np.inf
    if skip is not None:
        candidates[skip[: len(candidates)]] = -np.inf
    score = float(candidates[row])
    lo, hi = int((candidates > score + tie(score)).sum()), int((candidates > score - tie(score)).sum())
    case.expect = (1 + lo, 1 + hi, score)


def similarity_case(draw: Draw, exact: bool) -> Case:
    first, second = draw.word(), draw.word()
    case = Case("similarity", "GET", f"{draw.path}/similarity", {"a": first, "b": second})
    a, b = draw.oracle.row(first), draw.oracle.row(second)
    if a is None or b is None:
        case.error = (404, "unknown_token")
    else:
        case.similarity = draw.oracle.similarity(a, b)
    return case


def compose_case(draw: Draw, exact: bool) -> Case:
    """``compose=mean`` on a model-token table: a word that is no row is gensim's ``most_similar`` of its
    tokenizer pieces' rows (the pieces left out); one that is a row is that row's neighbours. Elsewhere: a token's
    neighbours."""
    oracle = draw.oracle
    if oracle.pieces is None:
        return neighbours_case(draw, exact)
    k = draw.k()
    words = [w for w in (oracle.keys[draw.rng.randrange(draw.rows)] for _ in range(8)) if w.isalpha()][:2]
    word = "".join(words) or "unbelievableness"
    word = word.title() if draw.rng.random() < 0.3 else word
    options = {"k": k, **draw.options(exact, draw.restrict())}
    body = {"token": word, "compose": "mean", **options}
    case = Case("compose", draw.rng.choice(["GET", "POST"]), f"{draw.path}/neighbors", body, exact=exact)
    row = oracle.row(word)
    positive = [row] if row is not None else oracle.pieces(word)
    case.left_out = set(positive)
    case.query = query_vector(oracle, positive, [])
    case.hits = oracle.most_similar(positive, [], k, options.get("restrict"), draw.skipped(options))
    return case


def pairs_case(draw: Draw, exact: bool) -> Case:
    """``POST .../similarity`` (``pairs``) or ``POST .../rank``: each pair's cosine (gensim ``similarity``) and
    rank (gensim ``rank``: 1 + the rows closer to a than b, a left out, within the bounds of near ties), a pair with
    an unknown word null with its error."""
    route = draw.rng.choice(draw.pair_routes)
    words = [[draw.word(), draw.word()] for _ in range(draw.rng.randint(1, 5))]
    case = Case(f"pairs-{route}", "POST", f"{draw.path}/{route}", {"pairs": words})
    case.pairs = []
    for first, second in words:
        a, b = draw.oracle.row(first), draw.oracle.row(second)
        case.pairs.append(None if a is None or b is None else draw.oracle.pair(a, b, route == "rank"))
    return case


def closer_case(draw: Draw, exact: bool) -> Case:
    """``GET .../closer-than``: gensim ``closer_than(a, b)``, the rows closer to a than b (a left out), their
    count and the first ``limit`` in row order or by score; compared where no row ties b's distance."""
    first, second = draw.word(), draw.word()
    limit, order = draw.rng.choice([1, 5, 100, draw.max_k]), draw.rng.choice(["index", "score"])
    body = {"a": first, "b": second, "limit": limit, "order": order}
    case = Case("closer-than", "GET", f"{draw.path}/closer-than", body)
    a, b = draw.oracle.row(first), draw.oracle.row(second)
    if a is None or b is None:
        case.error = (404, "unknown_token")
        return case
    _, low, high = draw.oracle.pair(a, b, True)
    case.count = (low - 1, high - 1)
    if low != high:  # a row ties b's distance: the count within the bounds, the words not compared
        case.kind = "closer-than-at-a-tie"
        return case
    kv = draw.oracle.kv
    keys = kv.closer_than(draw.oracle.keys[a], draw.oracle.keys[b])
    rows = np.array([kv.key_to_index[key] for key in keys], dtype=np.int64)
    # gensim's cosines of a with those rows, in one call (its similarity() row by row: seconds a case)
    scores = np.asarray(kv.cosine_similarities(kv[draw.oracle.keys[a]], kv.vectors[rows]), dtype=np.float64)
    if order == "score":
        by_score = np.lexsort((rows, -scores))
        rows, scores = rows[by_score], scores[by_score]
    case.hits = [(int(row), float(score)) for row, score in zip(rows[:limit], scores[:limit], strict=True)]
    return case


def word_list(draw: Draw, most: int) -> list[str]:
    """1..``most`` words, now and then one of them twice."""
    words = [draw.word() for _ in range(draw.rng.randint(1, most))]
    if draw.rng.random() < 0.3:
        words.append(draw.rng.choice(words))
    return words


def known(oracle: Oracle, words: list[str], skip_unknown: bool) -> list[int] | tuple[int, str]:
    """The rows of ``words`` (the unknown left out with ``skip_unknown``), or the 404 of an unknown one or of none
    known."""
    rows = [oracle.row(w) for w in words]
    found = [r for r in rows if r is not None]
    if (None in rows and not skip_unknown) or not found:
        return (404, "unknown_token")
    return found


def doesnt_match_case(draw: Draw, exact: bool) -> Case:
    """gensim ``rank_by_centrality``: the ranking, most central first, repeated words once per occurrence."""
    words, skip = word_list(draw, 6), draw.rng.random() < 0.5
    case = Case("doesnt-match", "POST", f"{draw.path}/doesnt-match", {"words": words, "skip_unknown": skip})
    rows = known(draw.oracle, words, skip)
    if isinstance(rows, tuple):
        case.error = rows
        return case
    keys = draw.oracle.keys
    ranking = draw.oracle.kv.rank_by_centrality([keys[r] for r in rows])
    case.hits = [(int(draw.oracle.kv.key_to_index[word]), float(score)) for score, word in ranking]
    return case


def n_similarity_case(draw: Draw, exact: bool) -> Case:
    """gensim ``n_similarity``: the cosine of the two sets' means of their original rows."""
    first, second, skip = word_list(draw, 4), word_list(draw, 4), draw.rng.random() < 0.5
    case = Case("n-similarity", "POST", f"{draw.path}/n-similarity", {"a": first, "b": second, "skip_unknown": skip})
    a, b = known(draw.oracle, first, skip), known(draw.oracle, second, skip)
    if isinstance(a, tuple) or isinstance(b, tuple):
        case.error = (404, "unknown_token")
        return case
    keys = draw.oracle.keys
    case.similarity = float(draw.oracle.kv.n_similarity([keys[r] for r in a], [keys[r] for r in b]))
    return case


def invalid_case(draw: Draw, exact: bool) -> Case:
    """Options outside their ranges: each a 422."""
    rng = draw.rng
    bodies = [
        {"token": "king", "k": 0},
        {"token": "king", "k": MAX_K + 1},
        {"token": "king", "restrict": 0},
        {"positive": [], "negative": []},
        {"token": "king", "positive": ["queen"]},
        {"token": ""},
    ]
    return Case(
        "invalid",
        rng.choice(["POST", "GET"]),
        f"{draw.path}/neighbors",
        rng.choice(bodies),
        error=(422, "invalid_request"),
    )


KINDS: list[tuple[Callable[[Draw, bool], Case], float]] = [
    (neighbours_case, 0.3),
    (neighbours_batch_case, 0.1),
    (search_case, 0.2),
    (analogy_case, 0.2),
    (similarity_case, 0.05),
    (pairs_case, 0.05),
    (closer_case, 0.03),
    (compose_case, 0.05),
    (analogy_batch_case, 0.05),
    (doesnt_match_case, 0.05),
    (n_similarity_case, 0.05),
    (invalid_case, 0.05),
]


def send(api: Any, case: Case) -> Any:
    if case.method == "GET":
        return api.get(case.path, params=case.body)
    return api.post(case.path, json=case.body)


def same_hits(ours: Hits, theirs: Hits) -> str | None:
    """None when ``ours`` equals ``theirs`` up to swaps of rows whose scores differ by less than :func:`tie`; else why
    not."""
    if len(ours) != len(theirs):
        return f"{len(ours)} hits, gensim {len(theirs)}"
    for pos, ((mine, score), (their, their_score)) in enumerate(zip(ours, theirs, strict=True)):
        if abs(score - their_score) > SCORE_TOL * max(1.0, abs(their_score)):
            return f"position {pos}: score {score} (row {mine}), gensim {their_score} (row {their})"
    their_rows = {row: score for row, score in theirs}
    last = theirs[-1][1] if theirs else 0.0
    for pos, (mine, score) in enumerate(ours):
        their, their_score = theirs[pos]
        if mine == their:
            continue
        if mine not in their_rows and abs(score - last) > tie(last):
            return f"position {pos}: row {mine} ({score}), gensim row {their} ({their_score}), not a tie at the cut"
        if mine in their_rows and abs(their_rows[mine] - their_score) > tie(their_score):
            return f"position {pos}: row {mine}, gensim scores it {their_rows[mine]}, not a tie with {their_score}"
    return None


def check_pairs(case: Case, body: Any, tally: Tally, where: str) -> None:
    assert case.pairs is not None
    for pos, expected in enumerate(case.pairs):
        cosine = body["similarities"][pos]
        if expected is None:
            if cosine is not None or body["errors"][pos]["code"] != "unknown_token":
                tally.failures.append(f"{where}: pair {pos}: {cosine} {body['errors'][pos]}, expected unknown_token")
            continue
        if cosine is None or abs(cosine - expected[0]) > SCORE_TOL:
            tally.failures.append(f"{where}: pair {pos}: {cosine}, gensim {expected[0]}")
        if "ranks" in body and not expected[1] <= (body["ranks"][pos] or 0) <= expected[2]:
            tally.failures.append(f"{where}: pair {pos}: rank {body['ranks'][pos]}, gensim {expected[1:]}")


@dataclass
class Tally:
    checked: Counter[str] = field(default_factory=Counter)
    found: int = 0  # approximate hits among gensim's
    asked: int = 0
    failures: list[str] = field(default_factory=list)


def check(case: Case, response: Any, tally: Tally, oracle: Oracle) -> None:
    """``case``'s answer; a batch's items one by one (an item's error: its code, in the batch's 200)."""
    body = response.json()
    if not case.items or response.status_code != 200:
        check_answer(case, response.status_code, body, tally, oracle)
        return
    tally.checked["batch"] += 1
    if len(body["results"]) != len(case.items):
        tally.failures.append(f"{case.path} {str(case.body)[:300]}: {len(body['results'])} results")
        return
    for item, result in zip(case.items, body["results"], strict=True):
        item.body = case.body
        status = 200 if "error" not in result or item.error is None else item.error[0]
        check_answer(item, status, result, tally, oracle)


def check_answer(case: Case, status: int, body: Any, tally: Tally, oracle: Oracle) -> None:
    tally.checked[case.kind + ("" if case.exact else "-hnsw") + (f"-{case.error[0]}" if case.error else "")] += 1
    where = f"{case.method} {case.path} {str(case.body)[:300]}"
    if case.error is not None:
        got = (status, body.get("error", {}).get("code"))
        if got != case.error:
            tally.failures.append(f"{where}: {got}, expected {case.error}: {str(body)[:300]}")
        return
    if status != 200 or "error" in body:
        tally.failures.append(f"{where}: {status} {str(body)[:300]}")
        return
    if case.similarity is not None:
        if abs(body["similarity"] - case.similarity) > SCORE_TOL:
            tally.failures.append(f"{where}: {body['similarity']}, gensim {case.similarity}")
        return
    if case.pairs is not None:
        check_pairs(case, body, tally, where)
        return
    if case.expect is not None:
        low, high, score = case.expect
        got = body.get("expect", {})
        if not low <= got.get("rank", 0) <= high or abs(got["score"] - score) > SCORE_TOL * max(1.0, abs(score)):
            tally.failures.append(f"{where}: expect {got}, gensim rank {low}..{high}, score {score}")
    if case.hits is None:
        return
    if case.count is not None and not case.count[0] <= body["count"] <= case.count[1]:
        tally.failures.append(f"{where}: count {body['count']}, gensim {case.count}")
    listed = "ranking" if "ranking" in body else "words" if "words" in body else "neighbors"
    ours = [(n["id"], n["score"]) for n in body[listed]]
    if case.exact:
        problem = same_hits(ours, case.hits)
        if problem:
            tally.failures.append(f"{where}: {problem}")
        return
    assert case.query is not None
    scores = [s for _, s in ours]
    true = [float(oracle.unit[i] @ case.query) for i, _ in ours]
    if len(ours) > len(case.hits) or not np.allclose(scores, true, atol=SCORE_TOL) or scores != sorted(scores)[::-1]:
        tally.failures.append(f"{where}: approximate hits {ours[:5]} not scored by their cosines, in order")
    if case.left_out & {i for i, _ in ours}:
        tally.failures.append(f"{where}: an input among the hits")
    tally.found += len({i for i, _ in ours} & {i for i, _ in case.hits})
    tally.asked += len(case.hits)


def run(api: Any, draw: Draw, exact: bool, cases: int = CASES, kinds: Any = KINDS, front: bool = False) -> Tally:
    """``cases`` drawn requests sent (``api``: a TestClient, or :class:`Remote`) and checked; what was checked
    printed. At the front of a sharded table, ``restrict`` is a 422."""
    tally = Tally()
    makers, weights = zip(*kinds, strict=True)
    for _ in range(cases):
        case = draw.rng.choices(makers, weights)[0](draw, exact)
        if front and "restrict" in case.body:
            case.error, case.items, case.kind = (422, "invalid_request"), [], f"{case.kind}-restrict"
        check(case, send(api, case), tally, draw.oracle)
    print(f"\n{draw.path} exact={exact}: {sum(tally.checked.values())} cases {dict(sorted(tally.checked.items()))}")
    if tally.asked:
        print(f"HNSW: {tally.found} of gensim's {tally.asked} hits found ({tally.found / tally.asked:.4f})")
    return tally


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "hnsw"])
def test_random_word_requests_answer_as_gensim(glove_api: TestClient, kv: KeyedVectors, exact: bool) -> None:
    tally = run(glove_api, Draw(20261207 + exact, Oracle(kv), glove_package.DEFAULT_NAME), exact)
    assert tally.failures == [], "\n".join(tally.failures[:20])
    if not exact:
        assert tally.found >= 0.95 * tally.asked


def test_random_requests_to_a_model_token_table_answer_as_gensim(minilm_api: TestClient) -> None:
    """MiniLM's token rows (the model's file read again, not the table) in gensim; the kinds by their labels,
    counted as the table's summary counts them."""
    raw = huggingface.read(minilm_dir(), ReadOptions())
    kv = KeyedVectors(raw.matrix.shape[1])
    kv.add_vectors(list(raw.tokens), raw.matrix)
    special = np.array([re.fullmatch(r"\[[A-Za-z0-9_]+\]", t) is not None for t in raw.tokens])
    continuation = np.array([t.startswith("##") for t in raw.tokens])
    summary = minilm_api.get(f"/v1/tables/{MINILM}").json()
    assert summary["rows"] == len(raw.tokens)
    assert (special.sum(), continuation.sum()) == (
        summary["model"]["special_tokens"],
        summary["model"]["continuation_tokens"],
    )
    tokenizer = whole_text_tokenizer()
    oracle = Oracle(
        kv,
        (special, continuation),
        lambda text: tokenizer.normalizer.normalize_str(text.lower()),
        pieces=lambda word: tokenizer.encode(word, add_special_tokens=False).ids,
    )
    tally = run(minilm_api, Draw(7, oracle, MINILM), True, CASES)
    assert tally.failures == [], "\n".join(tally.failures[:20])
