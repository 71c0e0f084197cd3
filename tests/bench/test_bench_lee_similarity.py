"""``python -m bench.lee_similarity``: the Lee ratings are read as gensim reads them, the statistics agree with a
float64 brute force, and a run (all 400,000 GloVe rows, as BENCHMARKS.md's section is measured) gives figures that
hold together and are the section's, to the digits shown.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gensim.test.utils import datapath

from bench import lee_similarity as lee
from index.build.sources import RawTable
from tests.bench.stated import section_rows, shown
from tests.early import Early


def run_argv(out: Path) -> list[str]:
    argv = [sys.executable, "-m", "bench.lee_similarity", "--work-dir", str(out / "work")]
    return [*argv, "--json", str(out / "lee.json"), "--markdown", str(out / "lee.md")]


RUN = Early(__name__, "lee_run", run_argv)  # started at collection (tests/early.py)
SECTION = "## Document similarity on the Lee corpus"


@pytest.fixture(scope="module")
def lee_run() -> dict[str, Any]:
    done = RUN.result()
    assert done.returncode == 0, done.stderr[-4000:]
    out = done.out
    payload = json.loads((out / "lee.json").read_text())
    return {"payload": payload, "markdown": (out / "lee.md").read_text(), "work": out / "work"}


def by_name(lee_run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in lee_run["payload"]["result"]["methods"]}


# ----------------------------------------------------------------------------------------------- the data
def test_ratings_are_read_as_gensim_reads_them() -> None:
    human = lee.rating_matrix()
    gensim_pairs = np.loadtxt(datapath(lee.RATINGS))[np.triu_indices(50, 1)]  # test_lee.py's reading
    assert human.shape == (50, 50) and np.array_equal(human, human.T) and np.all(np.diag(human) == 1)
    assert np.array_equal(lee.upper(human), gensim_pairs) and len(gensim_pairs) == 1225
    assert gensim_pairs.min() == pytest.approx(0.2) and gensim_pairs.max() == pytest.approx(1.0)
    # each figure is a mean of 1-5 ratings over 8-12 raters, divided by 5
    means = gensim_pairs * 5
    fits = [np.abs(means * n - np.round(means * n)) < 1e-4 for n in range(8, 13)]
    assert np.logical_or.reduce(fits).all()
    assert len(lee.lee_documents()) == 50


@pytest.mark.parametrize(
    ("matrix", "problem"),
    [
        (np.ones((4, 4)), "below the diagonal"),
        (np.triu(np.full((4, 4), 0.5), 1), "diagonal 0.0"),
        (np.triu(np.full((4, 4), 1.5), 1) + np.eye(4), "outside (0, 1]"),
        (np.ones((3, 4)), "square matrix"),
    ],
)
def test_other_layouts_are_refused(tmp_path: Path, matrix: np.ndarray, problem: str) -> None:
    path = tmp_path / "ratings.txt"
    np.savetxt(path, matrix)
    with pytest.raises(ValueError, match=re.escape(problem)) as raised:
        lee.rating_matrix(path)
    assert str(path) in str(raised.value)


# ----------------------------------------------------------------------------------------------- statistics
def test_statistics_equal_a_float64_brute_force() -> None:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(12, 5)).astype(np.float32)
    human = lee.rating_matrix()[:12, :12]
    cosine = lee.cosines(vectors)
    for i in range(12):
        for j in range(12):
            a, b = vectors[i].astype(np.float64), vectors[j].astype(np.float64)
            assert cosine[i, j] == pytest.approx(a @ b / np.sqrt((a @ a) * (b @ b)), abs=1e-12)
    x, y = lee.upper(cosine), lee.upper(human)
    figures = lee.correlations(cosine, human)
    assert figures["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
    x_ranks = np.argsort(np.argsort(x)).astype(np.float64)  # no ties among the cosines
    first = np.empty(len(y))
    first[np.argsort(y, kind="stable")] = np.arange(len(y))
    y_ranks = np.array([first[y == v].mean() for v in y])  # tied ratings share their mean rank
    assert len(np.unique(y)) < len(y)  # the ratings do tie
    assert figures["spearman"] == pytest.approx(np.corrcoef(x_ranks, y_ranks)[0, 1], abs=1e-12)
    a, b = lee.draws(12, count=5, seed=3)
    boot = lee.bootstrap_pearson(cosine, human, a, b)
    for d in range(5):
        keep = a[d] != b[d]
        expected = np.corrcoef(cosine[a[d], b[d]][keep], human[a[d], b[d]][keep])[0, 1]
        assert boot[d] == pytest.approx(expected, abs=1e-12)
    other = lee.bootstrap_pearson(lee.cosines(rng.normal(size=(12, 5))), human, a, b)
    d = lee.paired({"x": boot, "y": other}, "x", "y")
    assert d["median"] == pytest.approx(np.median(boot - other)) and d["first_ahead"] == np.mean(boot > other)


def test_zero_vectors_are_refused() -> None:
    with pytest.raises(ValueError, match="document 1 has a zero vector"):
        lee.cosines(np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]))


# ----------------------------------------------------------------------------------------------- the run
def test_every_method_is_measured(lee_run: dict[str, Any]) -> None:
    payload = lee_run["payload"]
    r = payload["result"]
    assert r["documents"] == 50 and r["pairs"] == 1225 and r["quick"] is False
    assert r["glove_rows"] == 400_000 and r["tables"]["minilm_rows"] == 30522
    assert r["tables"]["sif"]["corpus"]["texts"] == 300  # lee_background.cor, every line
    methods = by_name(lee_run)
    expected = {
        "GloVe 6B 50d mean",
        "GloVe 6B 50d SIF",
        "MiniLM token mean",
        "MiniLM transformer",
        "BM25 cosine",
        "gensim LSI",
    }
    assert set(methods) == expected
    for m in methods.values():
        low, high = m["pearson_95"]
        assert -1 < low < m["pearson"] < high < 1, m["name"]
        assert 0.2 < m["pearson"] < 0.8 and 0 < m["spearman"] < 0.8, m["name"]
        assert m["pearson_p"] < 1e-10, m["name"]
        assert m["tokens"] > 1000 and m["seconds"] >= 0, m["name"]
    assert payload["machine"]["cores"] >= 1 and payload["started"]


def test_figures_hold_together(lee_run: dict[str, Any]) -> None:
    methods = by_name(lee_run)
    # gensim's own test asserts this of its recipe
    assert methods["gensim LSI"]["pearson"] > 0.6
    # the common component is what every plain mean shares (docs/encoders.md): SIF removes it
    mean, sif = methods["GloVe 6B 50d mean"], methods["GloVe 6B 50d SIF"]
    assert mean["mean_cosine"] > 0.85 and sif["mean_cosine"] < 0.5
    assert sif["pearson"] > mean["pearson"]
    assert mean["unknown"] == sif["unknown"] and methods["MiniLM token mean"]["unknown"] == 0
    differences = {(d["first"], d["second"]): d for d in lee_run["payload"]["result"]["differences"]}
    assert set(differences) == set(lee.DIFFERENCES)
    for d in differences.values():
        low, high = d["difference_95"]
        assert low <= d["median"] <= high and 0 <= d["first_ahead"] <= 1
    assert differences[("GloVe 6B 50d SIF", "GloVe 6B 50d mean")]["first_ahead"] > 0.9
    # the model's own sentence vectors follow the ratings better than the static mean of its input rows
    assert methods["MiniLM transformer"]["pearson"] > methods["MiniLM token mean"]["pearson"] + 0.1


def test_glove_mean_equals_a_brute_force(lee_run: dict[str, Any], glove_raw: RawTable) -> None:
    """The GloVe mean row, recomputed from the package's raw rows in float64, gives the reported Pearson."""
    raw = glove_raw
    row = {token: i for i, token in enumerate(raw.tokens)}
    vectors = []
    for text in lee.lee_documents():
        found = [row[w] for w in re.findall(r"\w+", text.lower()) if w in row]
        vectors.append(raw.matrix[found].astype(np.float64).mean(axis=0))
    cosine = lee.cosines(np.array(vectors))
    r = np.corrcoef(lee.upper(cosine), lee.upper(lee.rating_matrix()))[0, 1]
    assert by_name(lee_run)["GloVe 6B 50d mean"]["pearson"] == pytest.approx(r, abs=1e-5)


def test_bm25_rows_are_the_documents_words() -> None:
    from index.engine.keyword import Tokenizer

    texts = lee.lee_documents()
    vectors = lee.bm25_vectors(texts)
    distinct = [len(set(Tokenizer().words(text))) for text in texts]
    assert (np.count_nonzero(vectors.matrix, axis=1) == distinct).all()
    assert (vectors.matrix >= 0).all()


def test_the_section_renders(lee_run: dict[str, Any]) -> None:
    text = lee_run["markdown"]
    assert text.startswith("## Document similarity on the Lee corpus\n")
    for name in by_name(lee_run):
        assert f"| {name} (" in text
    for published in lee.PUBLISHED:
        assert published["source"] in text and published["read_at"] in text
    assert "Command: `.venv/bin/python -m bench.lee_similarity --work-dir" in text


def test_the_stated_figures_are_measured(lee_run: dict[str, Any]) -> None:
    """Every method's Pearson, interval, Spearman, mean cosine and unknown tokens, every difference of r and the
    SIF row for each a, as BENCHMARKS.md states them."""
    result = lee_run["payload"]["result"]
    rows = section_rows(SECTION)
    wrong = []
    for m in result["methods"]:
        _, pearson, interval, spearman, mean_cosine, unknown, _ = rows[f"{m['name']} ({m['kind']})"]
        low, _, high = interval.partition(" to ")
        pairs = [(m["pearson"], pearson), (m["pearson_95"][0], low), (m["pearson_95"][1], high)]
        pairs += [(m["spearman"], spearman), (m["mean_cosine"], mean_cosine)]
        wrong += [
            f"{m['name']}: {stated} stated, {value:.4f} measured" for value, stated in pairs if not shown(value, stated)
        ]
        if unknown != f"{m['unknown']:,} of {m['tokens'] + m['unknown']:,}":
            wrong.append(f"{m['name']}: unknown {unknown} stated, {m['unknown']} of {m['tokens'] + m['unknown']}")
    for d in result["differences"]:
        median, interval, ahead = rows[f"{d['first']} - {d['second']}"]
        low, _, high = interval.partition(" to ")
        pairs = [(d["median"], median), (d["difference_95"][0], low), (d["difference_95"][1], high)]
        pairs.append((d["first_ahead"], ahead))
        wrong += [
            f"{d['first']} - {d['second']}: {stated} stated, {value:.4f}"
            for value, stated in pairs
            if not shown(value, stated)
        ]
    for x in result["sif_a"]:
        label = f"{x['a']:g}{' (default)' if x['a'] == lee.DEFAULT_A else ''}"
        pearson, spearman, mean_cosine, along = rows[label]
        pairs = [(x["pearson"], pearson), (x["spearman"], spearman), (x["mean_cosine"], mean_cosine)]
        pairs.append((x["explained"], along))
        wrong += [
            f"SIF a = {label}: {stated} stated, {value:.4f}" for value, stated in pairs if not shown(value, stated)
        ]
    assert not wrong, "\n".join(wrong)
