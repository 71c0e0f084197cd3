"""Seeded random document searches and the answers an oracle gives them, for ``test_search_fuzz.py``.

A :class:`Corpus` is a documents table's content as the test wrote it (ids, texts, vectors, fields with their
types, nulls as None). :func:`request` draws a search: a filter tree up to three levels deep over random fields,
operators and values (from the data, absent from it, of the wrong type), a query by vector, id, text or both, a
mode, ``k``, ``offset``, ``min_score``, ``diversity``. :func:`expect` answers it from the corpus alone:

- the filter, evaluated row by row in Python from docs/documents.md's rules (a null passes ``ne`` and ``not``
  only; a list field's ``eq`` is "has this tag"), or the 422 its documented refusals give;
- the ranking, by the oracles of ``test_hybrid_api``: float64 cosines, bm25 written out, ``rrf`` of the two
  lists, a greedy MMR; equal scores by row, equal fused scores by the better rank.

:func:`check` compares a server's answer with it: the same ids in the same order (where two oracle scores are
within float32's reach of each other either order is taken), the same scores to float32 tolerance, the same
``ranks`` and ``passing``, the same status and error code.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from index.engine.fusion import rrf
from index.engine.hybrid import DEPTH, DIVERSE
from tests.lee import Lee
from tests.service.test_hybrid_api import best, bm25, greedy_mmr

OPERATORS = {
    "string": ("eq", "ne", "in", "prefix", "contains"),
    "string_list": ("eq", "ne", "in", "prefix", "contains"),
    "boolean": ("eq", "ne"),
    "integer": ("eq", "ne", "in", "gt", "gte", "lt", "lte"),
    "float": ("eq", "ne", "in", "gt", "gte", "lt", "lte"),
    "timestamp": ("eq", "ne", "in", "gt", "gte", "lt", "lte"),
}
ALL_OPERATORS = sorted({op for ops in OPERATORS.values() for op in ops})
INT64 = (-(2**63), 2**63 - 1)
FLOAT_MAX = float(np.finfo(np.float64).max)
OUTSIDE_WORDS = ("zzqx", "quixotic", "naïve", "日本語", "Straße", "the", "of and")
MAX_K = 1000


class Refused(Exception):
    """What a request must be answered with instead of hits: a status and an error code."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"{status} {code}")
        self.status, self.code = status, code


@dataclass
class Corpus:
    """A documents table's content as written: ``lee`` holds its ids, texts, vectors and fields."""

    name: str
    lee: Lee
    types: dict[str, str]
    integer_ids: bool = False
    words: list[str] = field(default_factory=list)  # words of its texts, to search for

    @cached_property
    def unit(self) -> np.ndarray:
        return np.asarray(self.lee.unit(), dtype=np.float64)

    @cached_property
    def row_of(self) -> dict[Any, int]:
        return {ident: i for i, ident in enumerate(self.lee.ids)}

    @cached_property
    def bm25(self) -> dict[str, np.ndarray]:
        return {}

    def scores(self, text: str) -> np.ndarray:
        if text not in self.bm25:
            self.bm25[text] = bm25(self.lee, text)
        return self.bm25[text]

    def id_key(self, value: Any) -> Any:
        """An id asked for, read as the table reads it (None: no document can have it)."""
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool):
            return None
        if self.integer_ids:
            if isinstance(value, int):
                return value
            text = value.strip() if isinstance(value, str) and value.isascii() else ""
            sign, digits = (text[:1], text[1:]) if text[:1] in ("+", "-") else ("", text)
            return int(sign + digits) if digits.isdigit() and len(digits) < 20 else None
        return str(value) if isinstance(value, int) else value


# ------------------------------------------------------------------------------------------------ filters


def _timestamp(value: Any) -> dt.datetime:
    if not isinstance(value, str):
        raise Refused(422, "invalid_request")
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise Refused(422, "invalid_request") from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)
    try:
        return moment.astimezone(dt.UTC)
    except OverflowError:
        raise Refused(422, "invalid_request") from None


def _value(kind: str, value: Any) -> Any:
    """A filter's value as docs/documents.md says each field type takes it, or :class:`Refused`."""
    if kind in ("string", "string_list") and isinstance(value, str):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "integer" and not isinstance(value, bool) and isinstance(value, int | float):
        if isinstance(value, float) and not value.is_integer():
            raise Refused(422, "invalid_request")
        if INT64[0] <= value <= INT64[1]:
            return int(value)
    number = not isinstance(value, bool) and isinstance(value, int | float)
    if kind == "float" and number and abs(value) <= FLOAT_MAX:
        return float(value)  # a JSON number read as float64, the field's type
    if kind == "timestamp":
        return _timestamp(value)
    raise Refused(422, "invalid_request")


def _test(kind: str, op: str, value: Any) -> Any:
    """One operator as a test of one row's value (None: missing), after checking its value."""
    if op == "in":
        if not isinstance(value, list) or not value or len(value) > 10_000:
            raise Refused(422, "invalid_request")
        values = [_value(kind, v) for v in value]
        if kind == "string_list":
            return lambda tags: tags is not None and any(t in values for t in tags)
        return lambda v: v is not None and any(v == x for x in values)
    if op == "contains" and kind == "string_list":
        tags = value if isinstance(value, list) else [value]
        if not tags:
            raise Refused(422, "invalid_request")
        wanted = [_value(kind, t) for t in tags]
        return lambda have: have is not None and all(t in have for t in wanted)
    if op in ("prefix", "contains"):
        text = _value(kind, value)
        match = (lambda s: s.startswith(text)) if op == "prefix" else (lambda s: text in s)
        if kind == "string_list":
            return lambda tags: tags is not None and any(match(t) for t in tags)
        return lambda v: v is not None and match(v)
    wanted = _value(kind, value)
    if kind == "string_list":
        if op == "ne":
            return lambda tags: tags is None or wanted not in tags
        return lambda tags: tags is not None and wanted in tags
    compare = {
        "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b,
        "gt": lambda a, b: a > b,
        "gte": lambda a, b: a >= b,
        "lt": lambda a, b: a < b,
        "lte": lambda a, b: a <= b,
    }[op]
    return lambda v: (op == "ne") if v is None else compare(v, wanted)


def passing(corpus: Corpus, spec: Any, depth: int = 0) -> np.ndarray:
    """The rows ``spec`` passes, row by row, or :class:`Refused`."""
    rows = len(corpus.lee.ids)
    if not isinstance(spec, dict) or not spec:
        raise Refused(422, "invalid_request")
    result = np.ones(rows, dtype=bool)
    for key, value in spec.items():
        if key == "not":
            result &= ~passing(corpus, value, depth + 1)
        elif key in ("and", "or"):
            if not isinstance(value, list) or not value:
                raise Refused(422, "invalid_request")
            parts = [passing(corpus, item, depth + 1) for item in value]
            result &= np.logical_and.reduce(parts) if key == "and" else np.logical_or.reduce(parts)
        elif key == "id":
            result &= _ids(corpus, value)
        else:
            kind = corpus.types.get(key)
            if kind is None:
                raise Refused(422, "invalid_request")
            condition = value if isinstance(value, dict) else {"eq": value}
            if not condition or any(op not in OPERATORS[kind] for op in condition):
                raise Refused(422, "invalid_request")
            column = corpus.lee.fields[key]
            for op, operand in condition.items():
                test = _test(kind, op, operand)
                result &= np.array([bool(test(v)) for v in column], dtype=bool)
    return result


def _ids(corpus: Corpus, value: Any) -> np.ndarray:
    condition = value if isinstance(value, dict) else {"eq": value}
    if not condition or any(op not in ("eq", "ne", "in") for op in condition):
        raise Refused(422, "invalid_request")
    result = np.ones(len(corpus.lee.ids), dtype=bool)
    for op, operand in condition.items():
        if op == "in" and (not isinstance(operand, list) or not operand or len(operand) > 10_000):
            raise Refused(422, "invalid_request")
        asked = operand if op == "in" else [operand]
        for one in asked:
            if isinstance(one, float) and one.is_integer():
                one = int(one)
            if isinstance(one, bool) or not isinstance(one, str | int):
                raise Refused(422, "invalid_request")
        rows = {corpus.row_of[key] for key in map(corpus.id_key, asked) if key in corpus.row_of}
        hit = np.zeros(len(corpus.lee.ids), dtype=bool)
        hit[list(rows)] = True
        result &= ~hit if op == "ne" else hit
    return result


# ------------------------------------------------------------------------------------------------ generator


def _datum(rng: random.Random, corpus: Corpus, name: str) -> Any:
    """A value of field ``name`` for a filter: from the data, beside it, or of another type."""
    kind = corpus.types[name]
    present = [v for v in corpus.lee.fields[name] if v is not None]
    roll = rng.random()
    if roll < 0.08:  # the wrong type, or no value at all
        return rng.choice(["x", 3, 2.5, True, None, [1], {"a": 1}, "2001-01-01", 2**70, -0.0, 1e308])
    if kind == "string_list":
        tags = [t for tags in present for t in tags]
        return rng.choice(tags) if tags and roll < 0.75 else rng.choice(["", "zz", "Ünïcode", "a", "gov"])
    if kind == "string":
        if present and roll < 0.75:
            return rng.choice(present)
        return rng.choice(["", "e", "zz", "é", "EN", "日本", ".", "(", "\\", "%", "_", "É", "\u0000", "e\u0301"])
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "timestamp":
        moment = rng.choice(present) if present else dt.datetime(2001, 1, 1, tzinfo=dt.UTC)
        moment += dt.timedelta(seconds=rng.choice([0, 0, -1, 1, 3600 * 24 * 30, -86400 * 400]))
        form = rng.random()
        if form < 0.5:
            return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        if form < 0.7:
            return moment.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).isoformat()
        if form < 0.85:
            return moment.strftime("%Y-%m-%d")
        return rng.choice(["yesterday", "2001-13-01", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
    beside = [0, -1, 1, 0.5, 1e9, 2**53 - 1, 2**53 + 1, -(2**53) - 1, 2.0**63, -0.0, 1e-300, 5e-324]
    number = rng.choice(present) if present and roll < 0.7 else rng.choice(beside)
    shifted = rng.random()
    if kind == "integer" and shifted < 0.2:
        return number + rng.choice([-1, 1])
    if kind == "integer" and shifted < 0.3:
        return float(number)  # a whole number as a float: past 2**53 the nearest float, past 2**63 refused
    if kind == "float" and shifted < 0.2:
        return number * rng.choice([0.999, 1.001, -1])
    return number


def _condition(rng: random.Random, corpus: Corpus, name: str) -> Any:
    kind = corpus.types[name]
    if rng.random() < 0.35:
        return _datum(rng, corpus, name)
    ops = OPERATORS[kind] if rng.random() > 0.05 else ALL_OPERATORS
    chosen = rng.sample(ops, rng.choice([1, 1, 1, 2]) if len(ops) > 1 else 1)
    condition: dict[str, Any] = {}
    for op in chosen:
        if op == "in" or (op == "contains" and kind == "string_list" and rng.random() < 0.5):
            condition[op] = [_datum(rng, corpus, name) for _ in range(rng.choice([1, 2, 3, 5]))]
        else:
            condition[op] = _datum(rng, corpus, name)
    if rng.random() < 0.01:
        return {}
    return condition


def _id_value(rng: random.Random, corpus: Corpus) -> Any:
    ident = rng.choice(corpus.lee.ids)
    roll = rng.random()
    if roll < 0.6:
        return ident
    if roll < 0.75:
        return str(ident) if corpus.integer_ids else "lee-999"
    if roll < 0.85:
        return float(ident) if isinstance(ident, int) else 7
    return rng.choice(["nope", -1, 2**64, 1.5, True, None])


def filter_tree(rng: random.Random, corpus: Corpus, depth: int = 3) -> dict[str, Any]:
    """A random filter, up to ``depth`` levels of and/or/not."""
    spec: dict[str, Any] = {}
    for _ in range(rng.choice([1, 1, 1, 2])):
        roll = rng.random()
        if depth > 1 and roll < 0.25:
            logic = rng.choice(["and", "or", "not"])
            if logic == "not":
                spec["not"] = filter_tree(rng, corpus, depth - 1)
            else:
                spec[logic] = [filter_tree(rng, corpus, depth - 1) for _ in range(rng.choice([1, 2, 2, 3]))]
        elif roll < 0.33:
            if rng.random() < 0.5:
                spec["id"] = {"in": [_id_value(rng, corpus) for _ in range(rng.choice([1, 3, 8]))]}
            else:
                spec["id"] = rng.choice([_id_value(rng, corpus), {"ne": _id_value(rng, corpus)}])
        elif roll < 0.35:
            spec[rng.choice(["yeer", "Year", "", "text"])] = 1
        elif roll < 0.37:  # and/or/not given what is not a filter
            spec[rng.choice(["and", "or", "not"])] = rng.choice([{}, [], [{}], 3, {"and": []}, [3], None])
        else:
            name = rng.choice(sorted(corpus.types))
            spec[name] = _condition(rng, corpus, name)
    return spec


def _text(rng: random.Random, corpus: Corpus) -> str:
    if rng.random() < 0.05:  # no word a document holds: mode hybrid searches by the vector alone
        return rng.choice(["the", "of and", "zzqx", "such the qqzzv"])
    words = [rng.choice(corpus.words) for _ in range(rng.choice([1, 1, 2, 3, 5]))]
    if rng.random() < 0.2:
        words.append(rng.choice(OUTSIDE_WORDS))
    return " ".join(words)


def request(rng: random.Random, corpus: Corpus) -> dict[str, Any]:
    """A random search of ``corpus``'s table."""
    body: dict[str, Any] = {"fields": []}
    mode = rng.choice(["vector", "vector", "keyword", "hybrid"])
    if mode != "vector" or rng.random() < 0.1:
        body["mode"] = mode
    if mode != "keyword":
        if rng.random() < 0.15:  # more like these, less like those: all of them left out
            chosen = rng.sample(corpus.lee.ids, rng.choice([1, 2, 3, 4]))
            cut = rng.randint(1, len(chosen))
            body["positive"], body["negative"] = chosen[:cut], chosen[cut:]
        elif rng.random() < 0.5:
            row = rng.randrange(len(corpus.lee.ids))
            noise = np.random.default_rng(rng.randrange(2**32)).normal(size=corpus.unit.shape[1]) * 0.3
            body["vector"] = (corpus.unit[row] + noise).tolist()
        else:
            body["id"] = rng.choice(corpus.lee.ids) if rng.random() < 0.97 else "lee-1000"
    if mode != "vector":
        body["text"] = _text(rng, corpus)
    if rng.random() < 0.6:
        body["filter"] = filter_tree(rng, corpus)
    body["k"] = rng.choice([1, 2, 3, 5, 10, 10, 20, 50])
    if rng.random() < 0.4:
        body["offset"] = rng.choice([1, 3, 10, 40, 95, 120])
    if rng.random() < 0.02:
        body["k"], body["offset"] = 900, 101  # past max_k
    if rng.random() < 0.2:
        body["min_score"] = {"vector": rng.uniform(-0.1, 1.05), "keyword": rng.uniform(0, 6)}.get(
            mode, rng.uniform(0.005, 0.03)
        )
    if mode != "keyword" and rng.random() < 0.15:
        body["diversity"] = rng.choice([0, 0.3, 0.7, 1])
    elif mode == "keyword" and rng.random() < 0.02:
        body["diversity"] = 0.5  # refused: no query vector
    if mode == "hybrid" and rng.random() < 0.2:
        body["rrf_k"] = rng.choice([0, 1, 10, 60])
        body["weights"] = {"keyword": rng.choice([0, 0.5, 2])}
    return body


# ------------------------------------------------------------------------------------------------ oracle


@dataclass
class Expected:
    """The whole ranking a search's pages come from, and the page asked."""

    rows: list[int]
    scores: list[float]
    ranks: list[dict[str, int]] | None
    passing: int | None
    offset: int
    k: int
    fallback: bool = False
    near: list[tuple[int, int]] = field(default_factory=list)  # mode hybrid: (list, place) tied with the next
    close: int | None = None  # diversity: the first pick whose runner-up was within float32's reach of it

    def tied(self, a: int, b: int, tolerance: float) -> bool:
        """Whether rows ``a`` and ``b`` may stand in either order: their scores are within float32's reach."""
        scores = dict(zip(self.rows, self.scores, strict=True))
        return abs(scores[a] - scores[b]) <= tolerance

    @property
    def page(self) -> list[int]:
        return self.rows[self.offset : self.offset + self.k]


def _near_picks(
    corpus: Corpus, candidates: list[int], relevance: list[float], diversity: float, picks: list[int]
) -> int | None:
    """The first of MMR's ``picks`` (places in ``candidates``) whose best rival's value was within 1e-6 of its own:
    a float32 engine may pick either there, and the picks after it follow from that one."""
    rows = corpus.unit[candidates]
    closest = np.full(len(candidates), -np.inf)
    left = np.ones(len(candidates), dtype=bool)
    gain = np.asarray(relevance, dtype=np.float64)
    for step, pick in enumerate(picks):
        value = gain if step == 0 else (1 - diversity) * gain - diversity * closest
        rivals = np.flatnonzero(left & (np.arange(len(candidates)) != pick))
        if len(rivals) and value[rivals].max() >= value[pick] - 1e-6:
            return step
        left[pick] = False
        closest = np.maximum(closest, rows @ rows[pick])
    return None


def _query(corpus: Corpus, body: dict[str, Any]) -> tuple[np.ndarray | None, set[int]]:
    if "vector" in body:
        vector = np.asarray(body["vector"], dtype=np.float64)
        return vector / np.linalg.norm(vector), set()
    if "id" in body:
        row = corpus.row_of.get(corpus.id_key(body["id"]))
        if row is None:
            raise Refused(404, "unknown_document")
        return corpus.unit[row], {row}
    if "positive" in body:
        positive = [corpus.row_of[corpus.id_key(i)] for i in body["positive"]]
        negative = [corpus.row_of[corpus.id_key(i)] for i in body["negative"]]
        mean = corpus.unit[positive].sum(axis=0) - corpus.unit[negative].sum(axis=0)
        return mean / np.linalg.norm(mean), {*positive, *negative}
    return None, set()


def expect(corpus: Corpus, body: dict[str, Any], swaps: tuple[tuple[int, int], ...] = ()) -> Expected:
    """The answer docs/documents.md gives ``body`` on ``corpus``'s table, or :class:`Refused`. ``swaps``: in mode
    hybrid, (list, place) of neighbours whose scores are within float32's reach, fused in the other order, in
    turn (two swaps of three neighbours make any order of them but the reverse)."""
    mode = body.get("mode", "vector")
    k, offset = body["k"], body.get("offset", 0)
    if offset + k > MAX_K or (mode == "keyword" and body.get("diversity") is not None):
        raise Refused(422, "invalid_request")
    if mode == "vector" and not -1 <= body.get("min_score", 0) <= 1:  # a cosine's floor
        raise Refused(422, "invalid_request")
    fallback = mode == "hybrid" and "min_score" not in body and not corpus.scores(body["text"]).any()
    mode = "vector" if fallback else mode  # no document holds a word of the text: by vector alone, said so
    query, leave_out = _query(corpus, body)  # an unknown id is named before a bad filter
    mask = passing(corpus, body["filter"]) if "filter" in body else np.ones(len(corpus.lee.ids), dtype=bool)
    want, floor, diversity = offset + k, body.get("min_score"), body.get("diversity") or 0
    ranks: list[dict[str, int]] | None = None
    near: list[tuple[int, int]] = []
    close: int | None = None
    cosines = None if query is None else corpus.unit @ query
    if mode == "vector":
        assert cosines is not None
        rows = best(cosines, mask, leave_out)
        scores = [float(cosines[i]) for i in rows]
    else:
        bm = corpus.scores(body["text"])
        words = [i for i in best(bm, mask, leave_out) if bm[i] > 0]
        if mode == "keyword":
            rows, scores = words, [float(bm[i]) for i in words]
            ranks = [{"keyword": n} for n in range(1, len(rows) + 1)]
        else:
            assert cosines is not None
            depth = max(DIVERSE * want if diversity > 0 else want, DEPTH)  # a diverse search's lists are deeper
            weights = [1.0, body.get("weights", {}).get("keyword", 1.0)]
            # Each list as the engine ranks it: equal float32 scores by row (the float64 ones may differ below that).
            by_row = [best(cosines.astype(np.float32), mask, leave_out), best(bm.astype(np.float32), mask, leave_out)]
            lists = [by_row[0][:depth], [i for i in by_row[1] if bm[i] > 0][:depth]]
            for which, place in swaps:
                ranked = lists[which]
                ranked[place], ranked[place + 1] = ranked[place + 1], ranked[place]
            for j, (ranked, by) in enumerate(zip(lists, (cosines, bm), strict=True)):
                gaps = np.abs(np.diff(by[ranked])) <= 1e-6 * np.maximum(1.0, np.abs(by[ranked][1:]))
                near += [(j, int(place)) for place in np.flatnonzero(gaps)]
            fused = rrf(lists, k=body.get("rrf_k", 60), weights=weights)
            rows, scores = fused.ids.tolist(), fused.scores.tolist()
            ranks = [{n: int(r) for n, r in zip(("vector", "keyword"), rs, strict=True) if r} for rs in fused.ranks]
    places = [i for i, s in enumerate(scores) if floor is None or s >= floor]
    if diversity > 0:
        pool = DIVERSE * want if mode == "vector" else max(DIVERSE * want, DEPTH)
        places = [i for i in places if i < pool]
        assert query is not None
        relevance = [scores[i] for i in places]
        if mode == "hybrid":
            top = (1.0 + body.get("weights", {}).get("keyword", 1.0)) / (body.get("rrf_k", 60) + 1)
            relevance = [r / top for r in relevance] if top > 0 else relevance
        candidates = [rows[i] for i in places]
        order = greedy_mmr(corpus.lee, query, candidates, want, diversity, relevance)
        places = [places[candidates.index(r)] for r in order]
        close = _near_picks(corpus, candidates, relevance, diversity, [candidates.index(r) for r in order])
    return Expected(
        [rows[i] for i in places],
        [scores[i] for i in places],
        None if ranks is None else [ranks[i] for i in places],
        int(mask.sum()) if "filter" in body else None,
        offset,
        k,
        fallback,
        near,
        close,
    )


def check(corpus: Corpus, body: dict[str, Any], status: int, answer: dict[str, Any]) -> str | None:
    """What is wrong with ``answer`` (None: nothing), as the oracle sees ``body``."""
    try:
        expected = expect(corpus, body)
    except Refused as refused:
        code = answer.get("error", {}).get("code")
        if (status, code) != (refused.status, refused.code):
            return f"expected {refused.status} {refused.code}, got {status} {str(answer)[:300]}"
        return None
    problem = _compare(corpus, body, expected, status, answer)
    near = expected.near if problem else []
    for swaps in [*((one,) for one in near), *itertools.permutations(near, 2)]:
        if _compare(corpus, body, expect(corpus, body, swaps), status, answer) is None:
            return None
    return problem


def _compare(
    corpus: Corpus, body: dict[str, Any], expected: Expected, status: int, answer: dict[str, Any]
) -> str | None:
    if status != 200:
        return f"expected hits, got {status} {str(answer)[:300]}"
    hits = answer["hits"]
    rows = [corpus.row_of.get(hit["id"]) for hit in hits]
    page = expected.page
    if len(rows) != len(page):
        return f"{len(rows)} hits, expected {len(page)}: {rows} vs {page}"
    if ("fallback" in answer) != expected.fallback:
        return f"fallback {answer.get('fallback')}, expected {'one' if expected.fallback else 'none'}"
    if answer.get("passing") != expected.passing:
        return f"passing {answer.get('passing')}, expected {expected.passing}"
    score_of = dict(zip(expected.rows, expected.scores, strict=True))
    top = max((abs(s) for s in expected.scores), default=1.0)
    tolerance = 1e-5 * max(1.0, top) if body.get("mode") != "hybrid" or expected.fallback else 1e-12
    if expected.close is None and (len(set(rows)) != len(rows) or any(row not in score_of for row in rows)):
        return f"rows {rows} are not the ranking's (a repeat, or a document that fails the filter or is left out)"
    for place, (row, hit) in enumerate(zip(rows, hits, strict=True)):
        assert row is not None
        at = expected.offset + place
        if abs(hit["score"] - expected.scores[at]) > tolerance:
            return f"hit {place} (row {row}): score {hit['score']}, expected {expected.scores[at]}"
        if expected.close is not None and at >= expected.close:
            break  # past a pick the oracle cannot make for float32 scores: either was right, and all after it
        if row != expected.rows[at] and not expected.tied(row, expected.rows[at], tolerance):
            return f"hit {place}: row {row}, expected {expected.rows[at]} ({rows} vs {page})"
    if expected.ranks is not None and rows == page and not body.get("diversity"):
        got = [hit.get("ranks") for hit in hits]
        want = expected.ranks[expected.offset : expected.offset + expected.k]
        if got != want:
            return f"ranks {got} vs {want}"
    return None


# ------------------------------------------------------------------------------------------------ scroll


def scroll_request(rng: random.Random, corpus: Corpus) -> dict[str, Any]:
    """A random page of ``POST .../documents/scroll``."""
    body: dict[str, Any] = {"limit": rng.choice([1, 2, 5, 20, 100])}
    if rng.random() < 0.8:
        body["filter"] = filter_tree(rng, corpus)
    roll = rng.random()
    ident = rng.choice(corpus.lee.ids)
    if roll < 0.4:
        body["after"] = ident
    elif roll < 0.55:  # between ids, or past them all
        body["after"] = ident + 1 if corpus.integer_ids else f"{ident}a"
    elif roll < 0.6:
        body["after"] = rng.choice(["zzz", "", str(ident), -(2**63), 2**63 - 1])
    if rng.random() < 0.5:
        body["fields"] = rng.sample(sorted(corpus.types), rng.choice([0, 1, 2]))
    return body


def shown(corpus: Corpus, row: int, names: list[str] | None) -> dict[str, Any]:
    """Document ``row`` as ``GET .../documents/{id}`` shows it (timestamps as ISO 8601 text, nulls as None)."""
    fields = {}
    for name in corpus.types if names is None else names:
        value = corpus.lee.fields[name][row]
        fields[name] = value.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(value, dt.datetime) else value
    return {"id": corpus.lee.ids[row], "text": corpus.lee.texts[row], "fields": fields}


def expect_scroll(corpus: Corpus, body: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """A scroll page's documents and ``next``, or :class:`Refused`."""
    start = None
    if "after" in body:
        start = corpus.id_key(body["after"])
        if start is None or body["after"] == "" or (corpus.integer_ids and not INT64[0] <= start <= INT64[1]):
            raise Refused(422, "invalid_request")
    mask = passing(corpus, body["filter"]) if "filter" in body else np.ones(len(corpus.lee.ids), dtype=bool)
    rows = sorted((i for i in np.flatnonzero(mask)), key=lambda i: corpus.lee.ids[i])
    rows = [i for i in rows if start is None or corpus.lee.ids[i] > start]
    page = rows[: body["limit"]]
    documents = [shown(corpus, i, body.get("fields")) for i in page]
    return documents, corpus.lee.ids[page[-1]] if len(rows) > len(page) else None


def check_scroll(corpus: Corpus, body: dict[str, Any], status: int, answer: dict[str, Any]) -> str | None:
    try:
        documents, after = expect_scroll(corpus, body)
    except Refused as refused:
        if (status, answer.get("error", {}).get("code")) != (refused.status, refused.code):
            return f"expected {refused.status} {refused.code}, got {status} {str(answer)[:300]}"
        return None
    if status != 200:
        return f"expected a page, got {status} {str(answer)[:300]}"
    if [d["id"] for d in answer["documents"]] != [d["id"] for d in documents]:
        return f"ids {[d['id'] for d in answer['documents']]}, expected {[d['id'] for d in documents]}"
    for got, want in zip(answer["documents"], documents, strict=True):
        if got != want or any(_sign(got["fields"][n]) != _sign(v) for n, v in want["fields"].items()):
            return f"document {got}, expected {want}"
    if answer["next"] != after:
        return f"next {answer['next']!r}, expected {after!r}"
    return None


def _sign(value: Any) -> Any:
    """A float's sign bit beside its value (``-0.0 == 0.0``, but a document stored as -0.0 shows it so)."""
    return (value, math.copysign(1.0, value)) if isinstance(value, float) else value


# ------------------------------------------------------------------------------------------------ batches

ITEM_KEYS = ("vector", "id", "positive", "negative", "text", "mode", "filter", "offset", "min_score")


def batch_request(rng: random.Random, corpus: Corpus) -> dict[str, Any]:
    """A random batch: ``queries`` of two to four searches, each with its own filter, offset and floor or the
    request's, the request's ``k`` and, when every item is of mode hybrid, its ``rrf_k`` and ``weights``."""
    items = [request(rng, corpus) for _ in range(rng.randint(2, 4))]
    body: dict[str, Any] = {"fields": [], "k": items[0]["k"]}
    for key in ("filter", "offset", "min_score"):
        if rng.random() < 0.3 and key in items[0]:
            body[key] = items[0][key]
    if all(item.get("mode") == "hybrid" for item in items) and "rrf_k" in items[0]:
        body["rrf_k"], body["weights"] = items[0]["rrf_k"], items[0]["weights"]
    body["queries"] = [{key: item[key] for key in ITEM_KEYS if key in item} for item in items]
    return body


def check_batch(corpus: Corpus, body: dict[str, Any], status: int, answer: dict[str, Any]) -> str | None:
    """Each item's answer as the oracle answers it alone (the request's filter, offset and floor where the item
    has none): its hits, or its own error (an unknown document), or the request's refusal."""
    shared = {key: value for key, value in body.items() if key != "queries"}
    alone = [{**shared, **item} for item in body["queries"]]
    refusals = []
    for one in alone:
        try:
            expect(corpus, one)
        except Refused as refused:
            refusals.append(refused)
    if status != 200:
        code = answer.get("error", {}).get("code")
        if not any((status, code) == (r.status, r.code) for r in refusals):
            return f"batch refused {status} {code}, no item is: {str(answer)[:300]}"
        return None
    for n, (one, result) in enumerate(zip(alone, answer["results"], strict=True)):
        if "error" in result:
            status = 404 if result["error"]["code"] == "unknown_document" else 422  # an item's error has no status
            problem = check(corpus, one, status, result)
        else:
            problem = check(corpus, one, 200, result)
        if problem is not None:
            return f"queries[{n}]: {problem}"
    return None
