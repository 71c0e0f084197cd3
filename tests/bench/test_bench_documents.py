"""``python -m bench --quick --only documents``: the documents benchmark's steps work and its figures hold together.

Its 20,000-document table (GloVe rows with seeded fields) is imported from Parquet and from .npy, served by real
``embedding-serve`` processes and searched with every filter. Timings are not checked (``make bench`` measures
them); answers and structure are: the flat table's filtered answers equal a float64 brute force over the
passing documents, every answer holds k hits, the passing counts are the ones computed from the fields.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from bench.documents import FILTERS, QUICK_ROWS, TABLES, WORKERS, K, make_corpus
from tests.bench.quick import quick_early
from tests.bench.quick import quick_run as run_quick

pytestmark = pytest.mark.slow


QUICK = quick_early(__name__, "quick_run", "documents")  # started at collection (tests/early.py)


@pytest.fixture(scope="module")
def quick_run() -> dict[str, Any]:
    return run_quick(QUICK, "documents")


def test_the_filters_pass_what_the_fields_say() -> None:
    corpus = make_corpus(QUICK_ROWS)
    fractions = {case: float(corpus.passing(case).mean()) for case in FILTERS}
    assert fractions["none"] == fractions["100%"] == 1.0
    assert 0.08 < fractions["10%"] < 0.12 and 0.005 < fractions["1%"] < 0.015 and 0.0005 < fractions["0.1%"] < 0.002
    tags = np.split(corpus.tag_values, corpus.tag_offsets[1:-1])
    assert [("archive" in t) for t in tags] == corpus.rare.tolist()
    assert make_corpus(QUICK_ROWS).year.tolist() == corpus.year.tolist()  # seeded


def test_both_imports_measured(quick_run: dict[str, Any]) -> None:
    r = quick_run["result"]
    flat = r["import"]["flat"]
    for side in ("documents", "npy"):
        assert flat[side]["seconds"] > 0 and flat[side]["peak_rss_mib"] > 0 and flat[side]["disk_mib"] > 0
        assert flat[side]["read_seconds"] > 0
    assert flat["documents"]["disk_mib"] > flat["npy"]["disk_mib"]  # the payload is stored beside the vectors
    hnsw = r["import"]["hnsw_documents"]
    assert hnsw["index"]["kind"] == "hnsw" and hnsw["index"]["efSearch"] > 0 and hnsw["recall_at_10"] >= 0.95
    assert hnsw["disk_mib"] > flat["documents"]["disk_mib"]


def test_filtered_answers_are_exact_and_full(quick_run: dict[str, Any]) -> None:
    r = quick_run["result"]
    corpus = make_corpus(QUICK_ROWS)
    for case in FILTERS:
        cell = r["search"][case]
        passing = int(corpus.passing(case).sum())
        assert cell["passing"] == passing >= K, case
        if FILTERS[case] is not None:
            assert cell["passing_reported"] == {table: passing for table in TABLES}, case
        assert cell["flat_equals_brute_force"] == cell["queries"] > 0, case  # the exact side is exact
        assert 0.5 < cell["hnsw_recall_at_10"] <= 1, case
        if case in ("1%", "0.1%"):  # under 5% passing: the passing rows are searched exactly
            assert cell["hnsw_recall_at_10"] == 1.0, case
        for table in TABLES:
            assert cell[table]["hits_min"] == K, (case, table)
            assert 0 < cell[table]["p50_ms"] <= cell[table]["p90_ms"], (case, table)
            assert cell[table]["ratio_p50"] > 0


def test_engine_and_workers_measured(quick_run: dict[str, Any]) -> None:
    r = quick_run["result"]
    engine = r["engine"]
    assert set(engine["filter_evaluation_ms"]) == {c for c in FILTERS if FILTERS[c] is not None}
    assert all(engine["p50_ms"][f"{t}:{c}"] > 0 for t in TABLES for c in FILTERS)
    points = engine["crossover"]
    assert [p["fraction"] for p in points] == sorted(p["fraction"] for p in points) and len(points) >= 4
    for point in points:
        assert point["engine_uses"] == ("index" if point["fraction"] >= 0.05 else "exact")
        assert all(ms > 0 for ms in point["p50_ms"].values()) and point["gathered_mib"] > 0
        ef = point["efSearch"]
        assert ef["index"] >= ef["index_fourth_root"] >= ef["index_unwidened"] > 0
        assert all(0 <= x <= 1 for x in point["recall_at_10"].values())
    assert points[-1]["recall_at_10"]["index"] > 0.8  # half the rows pass: the graph finds them
    warm = r["workers"][str(WORKERS)]["warm"]
    roles = [p["role"] for p in warm["processes"]]
    assert roles.count("worker") == WORKERS and roles.count("supervisor") == 1
    for proc in warm["processes"]:
        assert 0 < proc["uss"] <= proc["pss"] <= proc["rss"]
        assert proc["private_dirty"] + proc["private_clean"] == pytest.approx(proc["uss"], abs=1)
    assert r["workers_table_mib"] > 0


def test_targets_and_section(quick_run: dict[str, Any]) -> None:
    r = quick_run["result"]
    rows = r["targets"]
    assert len(rows) == 2 + 2 * (len(FILTERS) - 1) + 3
    for row in rows:
        assert row["figure"] and row["command"] and row["unit"]
        assert row["ours"] > 0 and row["other"] > 0 and math.isfinite(row["ratio"]) and row["ratio"] > 0
    text = quick_run["markdown"]
    assert "## 8. Documents tables: import, filtered search, worker memory" in text
    assert "cannot render" not in text and '| `{"lang": "fr"}` |' in text
