"""Document search on the READMEs of ``/usr/share/doc`` against independent computations.

The READMEs installed on the machine (plain and gzip, one document each) are imported with ``embedding-index
import`` as a documents table with fields of every type and a vector each (seeded random rows, some repeated so
that cosines tie). Every mode is checked against an oracle of its own: vector against a float64 brute force over
the stored unit rows, keyword against ``bm25s`` over the words cut as docs/documents.md says (lower-cased,
composed, ``[\\p{L}\\p{M}\\p{N}_]+``, bm25s's English stop words, PyStemmer's English stemmer), hybrid against
Reciprocal Rank Fusion computed by hand from those two lists; pages against one long page, a score floor
against the long page cut, and a batch against its queries one by one.
"""

from __future__ import annotations

import gzip
import json
import shutil
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.engine.hybrid import DEPTH, DocumentSearch, Hit, Mode, run
from index.engine.table import Table
from tests.cli import run_cli

DIM = 16
ALIKE = 12  # documents sharing one vector: a tie group that pages cut through


@dataclass
class Readmes:
    table: Table
    texts: list[str]
    unit: np.ndarray  # float64 unit rows, as stored
    raw: np.ndarray  # float32 rows, as imported


def readme_texts(limit: int = 240) -> list[str]:
    texts = []
    for path in sorted(Path("/usr/share/doc").glob("*/README*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        try:
            text = data.decode("utf-8")[:20_000]
        except UnicodeDecodeError:
            continue
        if text.strip() and "\0" not in text:
            texts.append(text)
    return texts[:limit]


@pytest.fixture(scope="module")
def readmes(tmp_path_factory: pytest.TempPathFactory) -> Readmes:
    texts = readme_texts()
    if len(texts) < 50:
        pytest.skip(f"only {len(texts)} READMEs under /usr/share/doc")
    texts += ["Straße ÉTÉ été café naïve Zürich", "ÉTÉ été ete", "the of and"]  # unicode, case, stop words only
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((len(texts), DIM)).astype(np.float32)
    vectors[1 : 1 + ALIKE] = vectors[0]
    work = tmp_path_factory.mktemp("readmes")
    with open(work / "readmes.jsonl", "w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            record = {"id": f"r{i}", "text": text, "vector": vectors[i].tolist(), **fields_of(i, text)}
            out.write(json.dumps(record) + "\n")
    result = run_cli("import", work / "readmes.jsonl", "--name", "readmes", "--data-dir", work / "data")
    assert result.code == 0, result.err
    table = Table.load(work / "data" / "readmes")
    unit = np.asarray(table.vectors, dtype=np.float64)
    return Readmes(table, texts, unit / np.linalg.norm(unit, axis=1, keepdims=True), vectors)


NAMES = [
    "Ünïcode",
    "ünïcode",
    "ÜNÏCODE",
    "Straße",
    "strasse",
    "日本語",
    "e\u0301te\u0301",
]  # case, scripts, a decomposed é


def fields_of(i: int, text: str) -> dict[str, Any]:
    """Document ``i``'s fields, one of every type, some missing: ``size`` integer, ``ratio`` float, ``gz``
    boolean, ``stamp`` timestamp (written with an offset on odd rows), ``name`` string, ``tags`` string list
    (empty on some rows)."""
    moment = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(hours=5 * i, minutes=13 * i)
    zone = timezone(timedelta(hours=2)) if i % 2 else UTC
    long = sorted({w for w in text.lower().split() if len(w) > 9 and w.isalpha()})
    fields: dict[str, Any] = {
        "size": len(text),
        "ratio": round(sum(c.isalpha() for c in text) / len(text), 6),
        "gz": i % 3 == 0,
        "stamp": None if i % 7 == 3 else moment.astimezone(zone).isoformat(),
        "name": None if i % 11 == 5 else NAMES[i % len(NAMES)],
        "tags": None if i % 13 == 4 else long[:3],
    }
    return fields


def words(text: str) -> list[str]:
    """The words docs/documents.md says the keyword index cuts: lower-cased, composed, runs of letters, marks,
    digits and ``_`` (Unicode classes L, M and N), less bm25s's English stop words, stemmed by PyStemmer."""
    import Stemmer

    from index.engine.keyword import english_stopwords

    stem = Stemmer.Stemmer("english")
    stop = set(english_stopwords())
    composed = unicodedata.normalize("NFC", text).lower()
    cut = "".join(c if c == "_" or unicodedata.category(c)[0] in "LMN" else " " for c in composed).split()
    return [stem.stemWord(w) for w in cut if w not in stop]


@pytest.fixture(scope="module")
def bm25(readmes: Readmes) -> Any:
    import bm25s

    model = bm25s.BM25(k1=1.2, b=0.75)
    model.index([words(t) for t in readmes.texts], show_progress=False, create_empty_token=False)
    return model


def keyword_scores(model: Any, text: str, rows: int) -> np.ndarray:
    known = [model.vocab_dict[w] for w in words(text) if w in model.vocab_dict]
    return np.asarray(model.get_scores_from_ids(known), dtype=np.float32) if known else np.zeros(rows, np.float32)


def ranked(scores: np.ndarray, depth: int, keep: np.ndarray) -> list[int]:
    """Rows by score, best first, equal scores by row, those ``keep`` allows."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [int(r) for r in order if keep[r]][:depth]


def queries(readmes: Readmes) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(11)
    out = []
    for i in range(0, len(readmes.texts), 3):
        split = readmes.texts[i].split()
        start = int(rng.integers(0, max(1, len(split) - 4)))
        text = " ".join(split[start : start + 4]) or "licence"
        out.append((text, readmes.unit[(i * 7) % len(readmes.texts)]))
    out.append(("ÉTÉ", readmes.unit[0]))  # the tie group's own vector
    return out


def search(readmes: Readmes, mode: Mode, text: str, query: np.ndarray, **options: Any) -> list[Hit]:
    texts = None if mode == "vector" else [text]
    return run(readmes.table, DocumentSearch(mode, texts=texts, queries=query[None, :], **options))[0]


def oracle(
    unit: np.ndarray, bm25: Any, mode: Mode, text: str, query: np.ndarray, depth: int, keep: np.ndarray
) -> list[tuple[int, float]]:
    """The ``depth`` best rows (of those ``keep`` allows) and their scores: cosines over the float64 unit rows
    ``unit``, bm25s's BM25, or the RRF (k 60, both lists ``max(depth, DEPTH)`` deep) of the two."""
    n = len(unit)
    cosines = unit @ query
    vector = ranked(cosines, max(depth, DEPTH), keep)
    bm = keyword_scores(bm25, text, n)
    keyword = ranked(bm, max(depth, DEPTH), keep & (bm > 0))
    if mode == "vector":
        return [(r, float(cosines[r])) for r in vector[:depth]]
    if mode == "keyword":
        return [(r, float(bm[r])) for r in keyword[:depth]]
    fused: dict[int, float] = {}
    best: dict[int, tuple[int, int]] = {}
    for which, ranking in enumerate((vector, keyword)):
        for rank, row in enumerate(ranking, 1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (60 + rank)
            best[row] = min(best.get(row, (rank, which)), (rank, which))
    order = sorted(fused, key=lambda row: (-fused[row], best[row]))
    return [(r, fused[r]) for r in order[:depth]]


def check(hits: list[Hit], expected: list[tuple[int, float]], what: str) -> None:
    assert [h.row for h in hits] == [r for r, _ in expected], what
    np.testing.assert_allclose([h.score for h in hits], [s for _, s in expected], rtol=1e-6, atol=1e-7, err_msg=what)


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_every_mode_equals_its_oracle(readmes: Readmes, bm25: Any, mode: Mode) -> None:
    every = np.ones(len(readmes.texts), dtype=bool)
    short = readmes.table.filter({"size": {"lt": 2000}})
    for text, query in queries(readmes):
        check(search(readmes, mode, text, query, k=20), oracle(readmes.unit, bm25, mode, text, query, 20, every), text)
        expected = oracle(readmes.unit, bm25, mode, text, query, 10, short.mask)
        check(search(readmes, mode, text, query, k=10, rows=short), expected, f"{text} (filtered)")


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_pages_floors_and_batches_are_one_ranking(readmes: Readmes, bm25: Any, mode: Mode) -> None:
    for text, query in queries(readmes)[::4] + queries(readmes)[-1:]:
        long = search(readmes, mode, text, query, k=40)
        pages = [h for offset in range(0, 40, 7) for h in search(readmes, mode, text, query, k=7, offset=offset)]
        assert [(h.row, h.score) for h in pages[:40]] == [(h.row, h.score) for h in long], text
        if long:
            floor = long[len(long) // 2].score
            cut = search(readmes, mode, text, query, k=40, min_score=floor)
            assert [h.row for h in cut] == [h.row for h in long if h.score >= floor], text
    batch = queries(readmes)[:20]
    texts = None if mode == "vector" else [t for t, _ in batch]
    together = run(readmes.table, DocumentSearch(mode, k=9, texts=texts, queries=np.stack([q for _, q in batch])))
    for (text, query), answer in zip(batch, together, strict=True):
        alone = search(readmes, mode, text, query, k=9)
        assert [(h.row, h.ranks) for h in answer] == [(h.row, h.ranks) for h in alone], text
        # a batch's cosines come from one matrix product, a query's alone from a vector one: float32 apart
        np.testing.assert_allclose([h.score for h in answer], [h.score for h in alone], rtol=2e-7, err_msg=text)


def test_equal_cosines_go_by_row_across_pages(readmes: Readmes) -> None:
    """The tie group (documents 0 to ALIKE, one vector) comes first, by row, however a page cuts it."""
    query = readmes.unit[0]
    for k in range(1, ALIKE + 2):
        hits = [h.row for o in range(0, ALIKE + 1, k) for h in search(readmes, "vector", "", query, k=k, offset=o)]
        assert hits[: ALIKE + 1] == list(range(ALIKE + 1)), k


@dataclass
class Live:
    ids: list[str]  # each live row's id, in the row order searches number them
    texts: list[str]
    unit: np.ndarray


def written_readmes(readmes: Readmes) -> tuple[list[dict[str, Any]], Live]:
    """Writes over the table (new documents, imported ones replaced with other texts, deletes of imported and
    written ones, the tie group cut), and the live documents they leave, as the oracle sees them."""
    n = len(readmes.texts)
    rng = np.random.default_rng(5)

    def doc(ident: str, text: str) -> dict[str, Any]:
        return {"id": ident, "text": text, "vector": rng.standard_normal(DIM).tolist(), "fields": {"size": len(text)}}

    new = [doc(f"w{i}", readmes.texts[(37 * i) % n][::-1][:3000]) for i in range(30)]  # reversed: new words
    replaced = [doc(f"r{i}", readmes.texts[(i + 100) % n]) for i in (3, 50, 120, n - 3)]
    new[7]["vector"] = readmes.raw[0].tolist()  # joins the tie group: normalised as the import normalised it
    bodies = [
        {"op": "upsert", "documents": new[:20]},
        {"op": "upsert", "documents": replaced},
        {"op": "delete", "ids": ["r1", "r5", "r60", "w2", "w11"]},
        {"op": "upsert", "documents": [*new[20:], {**new[4], "text": "ÉTÉ café Zürich"}]},  # w4 written again
    ]
    live: dict[str, tuple[str, np.ndarray]] = {
        f"r{i}": (readmes.texts[i], readmes.unit[i]) for i in range(n) if f"r{i}" not in {"r1", "r5", "r60"}
    }
    version = [k for k in live if all(k != d["id"] for d in replaced)]
    written: dict[str, tuple[str, np.ndarray]] = {}
    for body in bodies:
        if body["op"] == "delete":
            for ident in body["ids"]:
                written.pop(ident, None)
            continue
        for d in body["documents"]:
            tied = d["vector"] == readmes.raw[0].tolist()  # the import's unit row, which the write's must equal
            vector = readmes.unit[0] if tied else np.asarray(d["vector"], dtype=np.float64)
            written.pop(d["id"], None)  # a document written again moves to the end
            written[d["id"]] = (d["text"], vector / np.linalg.norm(vector))
    ids = version + list(written)
    rows = {**{k: live[k] for k in version}, **written}
    return bodies, Live(ids, [rows[i][0] for i in ids], np.stack([rows[i][1] for i in ids]))


def live_oracle(
    live: Live, model: Any, mode: Mode, text: str, query: np.ndarray, depth: int
) -> list[tuple[str, float]]:
    expected = oracle(live.unit, model, mode, text, query, depth, np.ones(len(live.ids), dtype=bool))
    return [(live.ids[r], s) for r, s in expected]


def test_searches_after_writes_and_after_compaction_equal_the_oracle(readmes: Readmes, tmp_path: Path) -> None:
    import bm25s

    from index.build.compact import compact
    from index.engine.delta import Delta
    from index.engine.live_search import LiveSource
    from index.store import writelog

    data = tmp_path / "data"
    shutil.copytree(readmes.table.directory.parent, data)
    bodies, live = written_readmes(readmes)
    with writelog.appending(writelog.log_path(data, "readmes")) as log:
        records = [log.append(seq, body) for seq, body in enumerate(bodies, 1)]
    table = Table.load(data / "readmes")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    delta.apply(records)
    model = bm25s.BM25(k1=1.2, b=0.75)
    model.index([words(t) for t in live.texts], show_progress=False, create_empty_token=False)
    source = LiveSource(table, delta.snapshot())
    version_ids = table.payload.column(table.payload.id_field).to_pylist()
    written_ids = [d.id for d in delta.written_in_order()]

    def named(hits: list[Hit], base: int) -> list[tuple[str, float]]:
        return [(version_ids[h.row] if h.row < base else written_ids[h.row - base], h.score) for h in hits]

    compacted: Table | None = None
    for stage in ("written", "compacted"):
        for mode in ("vector", "keyword", "hybrid"):
            for text, query in [*queries(readmes)[::2], ("ÉTÉ café", readmes.unit[0])]:
                what = f"{stage} {mode} {text!r}"
                expected = live_oracle(live, model, mode, text, query, 25)
                texts = None if mode == "vector" else [text]
                search = DocumentSearch(mode, k=25, texts=texts, queries=query[None, :])
                if compacted is None:
                    got = named(run(source, search)[0], table.rows)
                else:
                    got = named(run(compacted, search)[0], compacted.rows)
                assert [i for i, _ in got] == [i for i, _ in expected], what
                np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-6, err_msg=what)
        if stage == "written":
            assert compact(data, "readmes")["written"] > 0
            compacted = Table.load(data / "readmes")
            version_ids, written_ids = compacted.payload.column(compacted.payload.id_field).to_pylist(), []
            assert version_ids == live.ids


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


Doc = dict[str, Any]
# a filter, and the same condition in Python over one document's fields (a missing one: None)
FILTERS: list[tuple[dict[str, Any], Any]] = [
    ({"name": "Ünïcode"}, lambda d: d["name"] == "Ünïcode"),
    ({"name": {"ne": "ünïcode"}}, lambda d: d["name"] != "ünïcode"),
    ({"name": {"in": ["ÜNÏCODE", "Straße", "nobody"]}}, lambda d: d["name"] in ("ÜNÏCODE", "Straße")),
    ({"name": {"prefix": "Ü"}}, lambda d: (d["name"] or "").startswith("Ü")),
    ({"name": {"contains": "nïc"}}, lambda d: "nïc" in (d["name"] or "")),
    ({"name": {"contains": "ße"}}, lambda d: "ße" in (d["name"] or "")),
    ({"name": "日本語"}, lambda d: d["name"] == "日本語"),
    ({"name": "e\u0301te\u0301"}, lambda d: d["name"] == "e\u0301te\u0301"),
    ({"not": {"name": {"prefix": "s"}}}, lambda d: not (d["name"] or "").startswith("s")),
    ({"size": {"gt": 1000, "lte": 5000}}, lambda d: 1000 < d["size"] <= 5000),
    ({"size": {"in": [d for d in range(0, 20_000, 7)]}}, lambda d: d["size"] % 7 == 0),
    ({"size": {"ne": 0}, "gz": True}, lambda d: d["size"] != 0 and d["gz"]),
    ({"ratio": {"gte": 0.7}}, lambda d: d["ratio"] >= 0.7),
    ({"ratio": {"lt": 0.65, "gt": 0.5}}, lambda d: 0.5 < d["ratio"] < 0.65),
    ({"gz": {"ne": True}}, lambda d: d["gz"] is not True),
    (
        {"stamp": {"gte": "2020-01-20", "lt": "2020-02-01T12:00:00+05:00"}},
        lambda d: (
            d["stamp"] is not None and at("2020-01-20T00:00:00+00:00") <= d["stamp"] < at("2020-02-01T07:00:00+00:00")
        ),
    ),
    ({"stamp": {"ne": "2020-01-01T00:00:00Z"}}, lambda d: d["stamp"] != at("2020-01-01T00:00:00+00:00")),
    (
        {"tags": {"contains": ["configuration", "documentation"]}},
        lambda d: {"configuration", "documentation"} <= set(d["tags"] or []),
    ),
    ({"tags": {"ne": "documentation"}}, lambda d: "documentation" not in (d["tags"] or [])),
    ({"tags": {"prefix": "config"}}, lambda d: any(t.startswith("config") for t in d["tags"] or [])),
    (
        {"or": [{"and": [{"gz": True}, {"not": {"name": {"in": ["Straße", "strasse"]}}}]}, {"ratio": {"lt": 0.6}}]},
        lambda d: (d["gz"] and d["name"] not in ("Straße", "strasse")) or d["ratio"] < 0.6,
    ),
    (
        {"not": {"or": [{"tags": "documentation"}, {"stamp": {"lt": "2020-02-01"}}]}},
        lambda d: (
            not (
                "documentation" in (d["tags"] or [])
                or (d["stamp"] is not None and d["stamp"] < at("2020-02-01T00:00:00+00:00"))
            )
        ),
    ),
]


@pytest.mark.parametrize(
    ("spec", "condition"), FILTERS, ids=[json.dumps(f, ensure_ascii=False)[:60] for f, _ in FILTERS]
)
def test_filters_of_every_type_equal_python(readmes: Readmes, spec: dict[str, Any], condition: Any) -> None:
    documents = []
    for i, text in enumerate(readmes.texts):
        fields = fields_of(i, text)
        fields["stamp"] = None if fields["stamp"] is None else at(fields["stamp"])
        documents.append(fields)
    expected = np.array([bool(condition(d)) for d in documents])
    rows = readmes.table.filter(spec)
    assert 0 < expected.sum() < len(expected), "a case that cannot tell documents apart"
    np.testing.assert_array_equal(rows.mask, expected)
    # and the search among them is the brute force's
    query = readmes.unit[1]
    hits = search(readmes, "vector", "", query, k=15, rows=rows)
    check(hits, oracle(readmes.unit, None, "vector", "", query, 15, expected), json.dumps(spec))


def greedy_mmr(
    unit: np.ndarray, pool: list[tuple[int, float]], k: int, lam: float, best: float
) -> list[tuple[int, float]]:
    """docs/documents.md's MMR, step by step in float64: the most relevant first, then the candidate with the best
    ``(1 - lam) * relevance - lam * (its highest cosine with one chosen)``; equal values by relevance, then by
    place. Relevance is the score over ``best`` (1 for cosines)."""
    relevance = np.array([s for _, s in pool]) / best
    rows = unit[[r for r, _ in pool]]
    chosen: list[int] = []
    while len(chosen) < min(k, len(pool)):
        values = []
        for i in range(len(pool)):
            if i in chosen:
                continue
            closest = max((float(rows[i] @ rows[j]) for j in chosen), default=0.0)
            values.append(((1 - lam) * relevance[i] - lam * closest if chosen else relevance[i], relevance[i], -i))
        chosen.append(-max(values)[2])
    return [pool[i] for i in chosen]


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
@pytest.mark.parametrize("lam", [0.3, 0.8])
def test_diversity_is_greedy_mmr(readmes: Readmes, bm25: Any, mode: Mode, lam: float) -> None:
    every = np.ones(len(readmes.texts), dtype=bool)
    for text, query in [*queries(readmes)[::6], queries(readmes)[-1]]:
        k, offset = 6, 2
        want = offset + k
        depth = max(4 * want, DEPTH) if mode == "hybrid" else 4 * want
        pool = oracle(readmes.unit, bm25, mode, text, query, depth, every)
        best = 1.0 if mode == "vector" else 2 / 61
        expected = greedy_mmr(readmes.unit, pool, want, lam, best)[offset:]
        hits = search(readmes, mode, text, query, k=k, offset=offset, diversity=lam)
        check(hits, expected, f"{mode} {lam} {text!r}")
        # a floor between two candidates' unequal scores from a third of the way down: those below it miss it
        third = next(i for i in range(len(pool) // 3, len(pool) - 1) if pool[i][1] - pool[i + 1][1] > 1e-6)
        floor = (pool[third][1] + pool[third + 1][1]) / 2
        reaching = [(r, s) for r, s in pool if s >= floor]
        expected = greedy_mmr(readmes.unit, reaching, want, lam, best)[offset:]
        hits = search(readmes, mode, text, query, k=k, offset=offset, diversity=lam, min_score=floor)
        check(hits, expected, f"{mode} {lam} {text!r} min_score {floor}")
