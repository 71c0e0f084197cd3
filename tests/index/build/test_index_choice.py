"""The ``auto`` index choice, deferred indexes (``--defer-index`` then ``embedding-index index``) and progress."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest

from index import progress
from index.build import index_choice
from index.build.index_choice import (
    AUTO_FLAT_BELOW,
    AUTO_TARGET_RECALL,
    PLATEAU_GAIN,
    PLATEAU_STEPS,
    IndexSpec,
    RecallProbe,
    build_and_measure,
    build_index,
    choose_auto,
    default_nlist,
    hnsw_add_threads,
    parse_spec,
    recall_limit,
    scaled_build_seconds,
)
from index.build.recall import tied_recall
from index.build.sources import RawTable
from index.build.writer import build_table, index_table
from index.engine.knn import searched_index
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store import artifact
from tests import REPO
from tests.cli import progress_lines, run_cli


def clustered(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    """Rows around 300 seeded centres: neighbourhoods as real tables have them (uniform noise has none)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((300, dim)).astype(np.float32)
    return centres[rng.integers(0, 300, rows)] + 0.6 * rng.standard_normal((rows, dim)).astype(np.float32)


def raw_table(matrix: np.ndarray) -> RawTable:
    return RawTable(tokens=[f"w{i}" for i in range(len(matrix))], matrix=matrix.copy())


def exact_top10(unit: np.ndarray, queries: np.ndarray) -> np.ndarray:
    scores = queries.astype(np.float64) @ unit.astype(np.float64).T
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def recall_against_brute_force(table: Table, matrix: np.ndarray, rows: np.ndarray) -> float:
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    truth = exact_top10(unit, unit[rows])
    _, found = table.index.search(np.ascontiguousarray(unit[rows], dtype=np.float32), 10)
    return float(np.mean([len(np.intersect1d(t, f)) / 10 for t, f in zip(truth, found, strict=True)]))


@pytest.fixture(scope="module")
def large() -> np.ndarray:
    return clustered(AUTO_FLAT_BELOW + 5_000, 8)


def test_specs_parse_and_refuse() -> None:
    assert parse_spec("auto", AUTO_FLAT_BELOW - 1).kind == "flat"
    assert parse_spec("auto", AUTO_FLAT_BELOW).kind == "auto"
    ivf = parse_spec("ivf:nlist=64,nprobe=8", 10_000)
    assert (ivf.kind, ivf.nlist, ivf.nprobe) == ("ivf", 64, 8)
    assert parse_spec("ivf", 1_000_000).nlist == default_nlist(1_000_000) == 2048
    hnsw = parse_spec("hnsw:M=16,efSearch=32", 10)
    assert (hnsw.m, hnsw.ef_construction, hnsw.ef_search) == (16, 200, 32)
    for bad, why in [
        ("ivf:nlist=0", "positive"),
        ("ivf:nlist=20", "more than the 10 rows"),
        ("hnsw:efSearch=x", "KEY=INTEGER"),
        ("ivf:M=4", "unknown option 'M'"),
        ("hnsw:M=1", "M must be from 2 to 256"),  # FAISS crashes on M=1
        ("hnsw:M=100000", "M must be from 2 to 256"),
    ]:
        with pytest.raises(InvalidQuery, match=why):
            parse_spec(bad, 10)
    for factory in ("HNSW1", "garbage"):  # a factory string is made once when parsed: refused before any build
        with pytest.raises(InvalidQuery, match=r"M must be from 2|FAISS cannot build index 'garbage'"):
            parse_spec(factory, 10, 8)


@pytest.mark.parametrize(
    ("factory", "why"), [("IVF1000,Flat", "Number of training points"), ("IDMap,Flat", "add does not make sense")]
)
def test_a_factory_faiss_cannot_train_or_fill_is_one_line(tmp_path: Path, factory: str, why: str) -> None:
    """What FAISS refuses while training or adding is the builder's one-line error, nothing written."""
    with pytest.raises(InvalidQuery, match=f"FAISS cannot build index '{factory}': .*{why}"):
        build_table(
            raw_table(clustered(500, 8)), data_dir=tmp_path, name="t", source={"format": "t"}, index_spec=factory
        )
    assert not (tmp_path / "t").exists()


def test_a_kind_faiss_cannot_train_is_named_as_given() -> None:
    """FAISS's refusal while training a kind of the builder's own (the spec's checks let it through) names that
    kind, not the factory string a spec of another kind carries unused ("Flat")."""
    with pytest.raises(InvalidQuery, match=r"FAISS cannot build index 'ivf': .*Number of training points"):
        build_index(clustered(500, 8), IndexSpec(kind="ivf", nlist=1_000))


def test_a_factory_ivf_has_its_nprobe_tuned_recorded_and_applied(tmp_path: Path, glove_raw: RawTable) -> None:
    """``IVF64,Flat`` is the index ``ivf:nlist=64`` is: its nprobe tuned to the target, kept in the manifest."""
    rows = RawTable(tokens=glove_raw.tokens[:5_000], matrix=glove_raw.matrix[:5_000].copy())
    manifest = build_table(rows, data_dir=tmp_path, name="t", source={"format": "t"}, index_spec="IVF64,Flat")
    info = manifest["index"]
    assert info["recall_at_10"] >= 0.99 and info["spec"]["factory"] == "IVF64,Flat"
    assert 1 < info["spec"]["nprobe"] <= 64
    assert faiss.extract_index_ivf(Table.load(tmp_path / "t").index).nprobe == info["spec"]["nprobe"]


def glove_5k(glove_raw: RawTable) -> RawTable:
    return RawTable(tokens=glove_raw.tokens[:5_000], matrix=glove_raw.matrix[:5_000].copy())


def built_5k(tmp_path: Path, glove_raw: RawTable, spec: str, min_recall: float) -> tuple[dict[str, Any], list[str]]:
    """The manifest of table ``t`` of :func:`glove_5k`'s rows indexed by ``spec``, and the builder's tuning lines."""
    with progress_lines() as stream:
        manifest = build_table(
            glove_5k(glove_raw),
            data_dir=tmp_path,
            name="t",
            source={"format": "t"},
            index_spec=spec,
            min_recall=min_recall,
        )
    tuning = [line for line in stream.getvalue().splitlines() if line.startswith("embedding-index: tuning: ")]
    return manifest, tuning


def test_a_factory_hnsw_has_its_ef_search_tuned_recorded_and_applied(tmp_path: Path, glove_raw: RawTable) -> None:
    """``HNSW8`` is tuned as ``hnsw:M=8`` is: FAISS's efSearch 16 misses the target on these rows, so efSearch is
    raised until the builder's sample reaches it, kept in the manifest and set when the table is loaded."""
    manifest, _ = built_5k(tmp_path, glove_raw, "HNSW8", 0.99)
    info = manifest["index"]
    assert info["spec"]["factory"] == "HNSW8" and info["recall_at_10"] >= AUTO_TARGET_RECALL
    assert info["spec"]["efSearch"] > 16  # FAISS's default, raised
    table = Table.load(tmp_path / "t")
    assert isinstance(table.index, faiss.IndexHNSW) and table.index.hnsw.efSearch == info["spec"]["efSearch"]
    assert recall_against_brute_force(table, glove_raw.matrix[:5_000], np.arange(5, 5_000, 10)) >= 0.98


@pytest.mark.parametrize("factory", ["L2norm,HNSW8", "PCA32,HNSW16"])
def test_a_graph_behind_a_transform_is_tuned_and_served_with_its_ef_search(
    tmp_path: Path, glove_raw: RawTable, factory: str
) -> None:
    """A graph inside an ``IndexPreTransform`` has its efSearch tuned as ``HNSW8``'s is, raised to the target: behind
    a PCA of 32 of the 50 dimensions too, whose own top 10 finds half the exact one, as the table scores the graph's
    efSearch candidates on the rows. The manifest records it, the loaded table searches with it and gives the recall
    the manifest says."""
    manifest, tuning = built_5k(tmp_path, glove_raw, factory, AUTO_TARGET_RECALL)
    info = manifest["index"]
    ef_search = info["spec"]["efSearch"]
    assert info["spec"]["factory"] == factory and info["faiss_description"] == "IndexPreTransform"
    table = Table.load(tmp_path / "t")
    graph = searched_index(table.index)
    assert isinstance(graph, faiss.IndexHNSW) and graph.hnsw.efSearch == ef_search == table.search_width
    probe = RecallProbe.draw(np.asarray(table.vectors))  # the builder's sample (seed 0) of the stored unit rows
    assert probe.recall(table.index) == info["recall_at_10"] >= AUTO_TARGET_RECALL
    assert tuning[0].startswith("embedding-index: tuning: efSearch 16 gives recall@10 ")
    assert ef_search > 16 and tuning[-1].startswith(f"embedding-index: tuning: efSearch {ef_search} gives ")


@pytest.mark.parametrize(
    ("spec", "min_recall"),
    [
        ("IVF64,PQ25x4", 0.3),
        ("HNSW8_SQ4", 0.3),
        ("ivfpq:nlist=64,m=10,nbits=4,rerank=2", 0.3),
        ("HNSW8", 0.99),
        ("ivf:nlist=256,nprobe=1", 0.3),  # lists of 20 rows: a query they leave short is searched again exactly
    ],
)
def test_the_recall_measured_is_that_of_the_neighbours_the_table_serves(
    tmp_path: Path, glove_raw: RawTable, spec: str, min_recall: float
) -> None:
    """The manifest's recall@10 is that of the loaded table's answers to neighbour queries of the builder's sampled
    rows (each row's own left out, as a neighbours query leaves it out), ties counted: the table scores every
    candidate the index keeps on the rows, so an index of codes without re-ranking (``IVF64,PQ25x4``, a graph of
    4-bit codes) serves a better top 10 than its codes' own, and a query an inverted file's probed lists leave short
    is searched again exactly; the tuning stops where the served answers do."""
    manifest, _ = built_5k(tmp_path, glove_raw, spec, min_recall)
    table = Table.load(tmp_path / "t")
    probe = RecallProbe.draw(np.asarray(table.vectors))  # the builder's sample (seed 0) of the stored unit rows
    answers = table.search(probe.queries, 10, exclude=[{int(row)} for row in probe.ids])
    found = np.array([[row for row, _ in hits] for hits in answers])
    served = tied_recall(probe.queries, probe.vectors, probe.kth, found, 10)
    assert round(served, 4) == manifest["index"]["recall_at_10"] >= min_recall, spec


def test_a_factory_ivfpq_stops_where_its_codes_cap_recall(tmp_path: Path, glove_raw: RawTable) -> None:
    """``IVF64,PQ10x4`` (10 four-bit codes for 50 dimensions) levels off far below the target: nprobe stops at the
    first step of the plateau, as ``ivfpq``'s does, rather than scanning all 64 lists."""
    manifest, tuning = built_5k(tmp_path, glove_raw, "IVF64,PQ10x4", 0.3)
    info = manifest["index"]
    nprobe = info["spec"]["nprobe"]
    assert info["spec"]["factory"] == "IVF64,PQ10x4" and 1 < nprobe < 64
    table = Table.load(tmp_path / "t")
    ivf = faiss.extract_index_ivf(table.index)
    assert ivf.nprobe == nprobe
    probe = RecallProbe.draw(np.asarray(table.vectors))  # the builder's sample (seed 0) of the stored unit rows
    assert probe.recall(table.index) == info["recall_at_10"] < AUTO_TARGET_RECALL
    ivf.nprobe = 64
    assert probe.recall(table.index) - info["recall_at_10"] < PLATEAU_GAIN * PLATEAU_STEPS  # all lists: no better
    assert tuning[0].startswith("embedding-index: tuning: nprobe 1 gives recall@10 ")  # the spec's lines
    assert tuning[-1] == (
        f"embedding-index: tuning: recall@10 stays near {info['recall_at_10']:.4f} from nprobe {nprobe} on: "
        "the codes limit it"
    )


@pytest.mark.parametrize(
    ("spec", "limit"),
    [
        ("hnsw", ""),
        ("ivf:nlist=16", ""),
        ("ivfpq:nlist=16,m=10", "the codes limit it"),
        ("HNSW32", ""),
        ("HNSW32,Flat", ""),
        ("HNSW16_SQ8", ""),  # a graph: its candidates are scored on the rows
        ("HNSW16_PQ10np", ""),
        ("IVF16,Flat", ""),
        ("IVF16,SQ8", "the codes limit it"),
        ("IVF16,PQ10np", "the codes limit it"),
        ("PCA16,IVF16,Flat", "the PCA limits it (16 of 50 dimensions, centred)"),
        ("PCA16,HNSW16", ""),
        ("PCA50,IVF16,Flat", "the PCA limits it (it centres the rows)"),  # all the dimensions, centred
        ("PCA16,IVF16,PQ4np", "the PCA (16 of 50 dimensions, centred) and the codes limit it"),
        ("PCA16,IVF16,SQ8", "the PCA (16 of 50 dimensions, centred) and the codes limit it"),
        ("HNSW16,RFlat", ""),
        ("L2norm,HNSW16", ""),
        ("Flat", ""),
    ],
)
def test_an_index_of_codes_is_bounded_whatever_the_spec(spec: str, limit: str) -> None:
    """Tuning stops at a plateau for an inverted file that holds less than the rows (codes, a PCA), from a spec or a
    factory string, and says which limits it; never for one that holds the rows, nor for a graph, whose candidates
    the table scores on the rows. The factory strings' PQ codes are trained
    without FAISS's polysemous step (``np``): codes of the same size and centroids, not renumbered for a
    Hamming-distance search that these indexes do not use, at a small part of the CPU."""
    rows = clustered(2_000, 50)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    assert recall_limit(build_index(rows, parse_spec(spec, len(rows), 50))) == limit


def test_the_estimate_scales_the_sample_by_the_growth_measured_on_it() -> None:
    """The times a sample's build took to reach its parts give the power the build time grows by; the whole
    table's time follows it."""
    parts = [2_500, 5_000, 10_000, 20_000]

    def build_seconds(rows: int) -> float:  # a build whose time grows as rows ** 1.3
        return 1e-4 * rows**1.3

    estimate = scaled_build_seconds(parts, [build_seconds(r) for r in parts], 2_000_000)
    assert estimate == pytest.approx(build_seconds(2_000_000))
    assert scaled_build_seconds(parts, [1.0, 2.0, 4.0, 8.0], 80_000) == pytest.approx(32.0)  # a constant cost per row
    assert scaled_build_seconds(parts, [1.0, 8.0, 64.0, 512.0], 40_000) == pytest.approx(2048.0)  # the power stops at 2
    assert scaled_build_seconds(parts, [1.0, 2.0, 4.0, 8.0], 20_000) == 8.0  # the sample was the whole table


def test_auto_takes_ivf_when_hnsw_would_exceed_the_budget(tmp_path: Path, large: np.ndarray) -> None:
    manifest = build_table(raw_table(large), data_dir=tmp_path, name="big", source={"format": "test"}, budget=1)
    index = manifest["index"]
    choice = index["choice"]
    assert choice["chosen"] == "ivf" and choice["budget_seconds"] == 1
    assert choice["hnsw_estimate_seconds"] > 1
    assert index["spec"]["kind"] == "ivf" and index["spec"]["nlist"] == default_nlist(len(large))
    assert index["recall_at_10"] >= 0.99  # nprobe was raised until the builder's sample reached it
    table = Table.load(tmp_path / "big")
    assert table.approximate and table.index.nprobe == index["spec"]["nprobe"]
    held_out = np.random.default_rng(7).choice(len(large), 300, replace=False)
    assert recall_against_brute_force(table, large, held_out) >= 0.98


def test_auto_keeps_hnsw_within_the_budget(large: np.ndarray) -> None:
    unit = large / np.linalg.norm(large, axis=1, keepdims=True)
    spec, why = choose_auto(np.ascontiguousarray(unit, dtype=np.float32), budget=1e6)
    assert spec.kind == "hnsw" and (spec.m, spec.ef_construction) == (32, 200) and why["chosen"] == "hnsw"
    assert 0 < why["hnsw_estimate_seconds"] < 1e6


def test_deferred_index_is_built_later_and_published_atomically(tmp_path: Path) -> None:
    matrix = clustered(6_000, 24, seed=3)
    spec = "hnsw:M=16,efConstruction=80"
    first = build_table(
        raw_table(matrix), data_dir=tmp_path, name="t", source={"format": "test"}, index_spec=spec, defer_index=True
    )
    assert first["index"]["exact"] and first["index"]["deferred"]["spec"] == spec
    assert not (tmp_path / "t" / artifact.INDEX).exists()
    exact = Table.load(tmp_path / "t")
    assert not exact.approximate
    vectors_inode = os.stat(tmp_path / "t" / artifact.VECTORS).st_ino

    second = index_table(tmp_path, "t")
    assert second["index"]["spec"]["kind"] == "hnsw" and "deferred" not in second["index"]
    assert second["built_at"] == first["built_at"] and "indexed_at" in second
    assert artifact.verify(tmp_path / "t").ok
    assert os.stat(tmp_path / "t" / artifact.VECTORS).st_ino == vectors_inode  # linked, not copied
    assert not list(tmp_path.glob(".tmp-*")) and not list(tmp_path.glob(".old-*"))
    table = Table.load(tmp_path / "t")
    assert table.approximate and table.tokens.labels(np.arange(3)) == exact.tokens.labels(np.arange(3))
    np.testing.assert_array_equal(np.asarray(table.vectors), np.asarray(exact.vectors))
    assert recall_against_brute_force(table, matrix, np.arange(0, 6_000, 20)) >= 0.95


def test_index_keeps_the_recorded_options_it_is_not_given(tmp_path: Path) -> None:
    """``embedding-index index TABLE`` without --min-recall or --build-budget recorded the defaults (0.95, 900; seed 0)
    in the manifest's build, which the next compaction builds with: a table imported with --min-recall 0.5 was
    compacted at 0.95. The options not given keep the table's recorded ones; those given replace them."""
    spec = "ivf:nlist=16,nprobe=16"
    build_table(
        raw_table(clustered(3_000, 8)),
        data_dir=tmp_path,
        name="t",
        source={"format": "test"},
        index_spec=spec,
        min_recall=0.5,
        seed=7,
        budget=60,
        params={"index": spec, "min_recall": 0.5, "seed": 7, "budget_seconds": 60},  # what the command line records
    )
    done = run_cli("index", "t", "--data-dir", tmp_path, "--index", spec)
    assert done.code == 0, done.err
    build = Table.load(tmp_path / "t").manifest["build"]
    assert build == {"index": spec, "min_recall": 0.5, "seed": 7, "budget_seconds": 60}
    done = run_cli("index", "t", "--data-dir", tmp_path, "--min-recall", "0.6", "--build-budget", "30")
    assert done.code == 0, done.err
    build = Table.load(tmp_path / "t").manifest["build"]
    assert build == {"index": "auto", "min_recall": 0.6, "seed": 7, "budget_seconds": 30}
    build = index_table(tmp_path, "t", index_spec=spec, seed=3)["build"]  # the command takes no --seed: its function
    assert build == {"index": spec, "min_recall": 0.6, "seed": 3, "budget_seconds": 30}


def test_a_failed_index_build_leaves_the_table_as_it_was(tmp_path: Path) -> None:
    build_table(
        raw_table(clustered(3_000, 8)),
        data_dir=tmp_path,
        name="t",
        source={"format": "test"},
        index_spec="hnsw",
        defer_index=True,
    )
    before = (tmp_path / "t" / artifact.MANIFEST).read_text()
    with pytest.raises(InvalidQuery, match="below --min-recall"):
        index_table(tmp_path, "t", index_spec="ivf:nlist=64,nprobe=1", min_recall=1.0)
    assert (tmp_path / "t" / artifact.MANIFEST).read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    assert Table.load(tmp_path / "t").manifest["index"]["deferred"]["spec"] == "hnsw"


@pytest.mark.parametrize("spec", ["", " "])
def test_an_empty_index_spec_is_refused_not_taken_for_auto(tmp_path: Path, spec: str) -> None:
    """``--index "$SPEC"`` with SPEC unset: `index` rebuilt the table with auto (a hand-built HNSW graph replaced by
    exact search) and `import` read the whole file before FAISS refused the factory string ''."""
    build_table(
        raw_table(clustered(3_000, 8)), data_dir=tmp_path, name="t", source={"format": "test"}, index_spec="hnsw"
    )
    before = (tmp_path / "t" / artifact.MANIFEST).read_text()
    done = run_cli("index", "t", "--data-dir", tmp_path, "--index", spec, quiet=False)
    assert (done.code, done.out) == (1, ""), done.out
    assert done.err.startswith("embedding-index: error: index spec is empty: ") and done.err.count("\n") == 1
    assert (tmp_path / "t" / artifact.MANIFEST).read_text() == before
    rows = tmp_path / "rows.txt"
    rows.write_text("".join(f"w{i} {i % 7} {i % 5} {i % 3}\n" for i in range(200)), encoding="utf-8")
    done = run_cli("import", rows, "--name", "u", "--data-dir", tmp_path, "--index", spec, quiet=False)
    assert done.code == 1 and done.err.startswith("embedding-index: error: index spec is empty: "), done.err
    assert done.err.count("\n") == 1 and not (tmp_path / "u").exists(), done.err


def test_progress_lines_and_status_file(tmp_path: Path) -> None:
    stream = io.StringIO()
    status = tmp_path / "status.json"
    progress.CONFIG.stream = stream
    try:
        progress.configure(quiet=False, status_file=status, interval=0)  # whatever an earlier test left
        progress.record(hnsw_estimate_seconds=12.5)
        with progress.Progress("adding rows to the index", 400) as step:
            step.advance(100)
            written = progress.read_status(status)
            assert written == {
                "step": "adding rows to the index",
                "done": 0.25,
                "seconds_left": pytest.approx(written["seconds_left"]),
                "state": "running",
                "nice": os.getpriority(os.PRIO_PROCESS, 0),
                "elapsed_seconds": pytest.approx(written["elapsed_seconds"]),
                "cpu_seconds": pytest.approx(written["cpu_seconds"]),
                "hnsw_estimate_seconds": 12.5,
            }
            assert 0 <= written["elapsed_seconds"] < 60 and 0 < written["cpu_seconds"] <= time.process_time() + 0.05
            step.advance(300)
        progress.configure(quiet=True)
        with progress.Progress("silent", 10) as step:
            step.advance(10)
    finally:
        progress.CONFIG.stream = None
        progress.CONFIG.status_file = None
        progress.CONFIG.facts.clear()
        progress.configure(quiet=False, interval=progress.INTERVAL)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("embedding-index: adding rows to the index: 25% (100 of 400 rows), ")
    assert lines[0].endswith(" left")
    assert lines[-1].startswith("embedding-index: adding rows to the index: done (400 of 400 rows) in ")
    assert not any("silent" in line for line in lines)


def test_index_command_and_quiet(tmp_path: Path) -> None:
    build_table(
        raw_table(clustered(3_000, 8)),
        data_dir=tmp_path,
        name="t",
        source={"format": "test"},
        index_spec="ivf:nlist=32",
        defer_index=True,
    )
    command = [sys.executable, "-m", "index"]
    done = subprocess.run([*command, "index", "t", "--data-dir", tmp_path], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith('indexed \'t\': ivf {"kind": "ivf", "nlist": 32, "nprobe": ')
    assert "embedding-index: tuning: nprobe 1 gives recall@10" in done.stderr
    assert "embedding-index: adding rows to the index: done (3,000 of 3,000 rows)" in done.stderr
    manifest = json.loads((tmp_path / "t" / artifact.MANIFEST).read_text())
    assert manifest["index"]["recall_at_10"] >= 0.99

    quiet = subprocess.run(
        [*command, "--quiet", "index", "t", "--data-dir", tmp_path, "--index", "flat"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert not Table.load(tmp_path / "t").approximate
    missing = subprocess.run(
        [*command, "index", "nope", "--data-dir", tmp_path], capture_output=True, text=True, cwd=REPO
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"embedding-index: error: no table 'nope' in {tmp_path}"


def test_the_graph_is_built_on_twice_faiss_s_threads_unless_omp_num_threads_sets_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads = faiss.omp_get_max_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert hnsw_add_threads() == 2 * threads
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads))
    assert hnsw_add_threads() == threads


def test_an_hnsw_build_adds_on_those_threads_and_gives_faiss_its_own_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = faiss.omp_get_max_threads()
    during: list[int] = []
    add = faiss.IndexHNSWFlat.add

    def counted(index: faiss.IndexHNSWFlat, rows: np.ndarray) -> None:
        during.append(faiss.omp_get_max_threads())
        add(index, rows)

    monkeypatch.setattr(faiss.IndexHNSWFlat, "add", counted)
    unit = clustered(12_000, 32)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    built = build_and_measure(unit, parse_spec("hnsw:M=16,efConstruction=80", len(unit)), min_recall=0.99)
    assert during == [2 * before, 2 * before] and faiss.omp_get_max_threads() == before
    queries = unit[:: len(unit) // 200]
    _, found = built.index.search(queries, 10)
    truth = exact_top10(unit, queries)
    recall = np.mean([len(np.intersect1d(t, f)) / 10 for t, f in zip(truth, found, strict=True)])
    assert built.info["recall_at_10"] >= 0.99 and recall >= 0.99


LINE_WAIT = 120  # seconds a test waits for a line it is owed: a bound for a hung step, not a timing


def lines_until(stream: io.StringIO, count: int, prefix: str) -> list[str]:
    """The lines of ``stream`` starting with ``prefix`` once there are ``count`` of them (a step's clock writes
    them from its own thread while the caller's thread waits)."""
    deadline = time.monotonic() + LINE_WAIT
    while len(lines := [line for line in stream.getvalue().splitlines() if line.startswith(prefix)]) < count:
        assert time.monotonic() < deadline, f"a step silent for {LINE_WAIT}s: {stream.getvalue()!r}"
        time.sleep(0.01)
    return lines


def status_until(path: Path, done: float) -> dict[str, Any]:
    """The status file once it says ``done`` (a step's clock writes it just after its line)."""
    deadline = time.monotonic() + LINE_WAIT
    while (status := progress.read_status(path)) is None or status["done"] != done:
        assert time.monotonic() < deadline, f"a status file still at {status} after {LINE_WAIT}s"
        time.sleep(0.01)
    return status


def test_a_step_whose_work_does_not_move_still_says_where_it_is(tmp_path: Path) -> None:
    """Lines on a clock, not on the work: a step that takes a piece of work longer than the interval (an HNSW
    graph's 10,000 rows, one FAISS call) wrote nothing until the piece was done (7-20 s apart on the default
    table). Now it says where it is every interval, and so does its status file (its cost so far); a step of
    unknown length says how long it has run."""
    stream = io.StringIO()
    status = tmp_path / "status.json"
    progress.CONFIG.stream = stream
    try:
        progress.configure(quiet=False, status_file=status, interval=0.05)
        step = progress.Progress("adding rows to the index", 400_000)
        step.advance(10_000)  # before its clock starts (it may speak at once on a busy machine), then nothing:
        with step:  # the next piece of work takes "long"
            first = status_until(status, 0.025)
            lines_until(stream, 3, "embedding-index: adding rows to the index: ")
            later = progress.read_status(status)
        with progress.Progress("training the index (IndexIVFPQ)", None):
            unknown = lines_until(stream, 2, "embedding-index: training the index (IndexIVFPQ): ")
        with progress.Progress("training", 10, "words") as fed:  # all counted (fed to the workers), not all done
            fed.advance(10)
            finishing = lines_until(stream, 1, "embedding-index: training: 100% ")[0]
    finally:
        progress.CONFIG.stream = None
        progress.CONFIG.status_file = None
        progress.configure(quiet=False, interval=progress.INTERVAL)
    *lines, last = [line for line in stream.getvalue().splitlines() if "adding rows to the index" in line]
    assert len(lines) >= 3, lines
    for line in lines:
        assert re.fullmatch(r"embedding-index: adding rows to the index: 2% \(10,000 of 400,000 rows\), \S+ left", line)
    assert last.startswith("embedding-index: adding rows to the index: done (400,000 of 400,000 rows) in "), last
    assert later is not None and later["done"] == 0.025
    assert later["elapsed_seconds"] >= first["elapsed_seconds"]
    for line in unknown:
        assert re.fullmatch(r"embedding-index: training the index \(IndexIVFPQ\): \S+ so far", line), line
    assert "embedding-index: training the index (IndexIVFPQ): done in " in stream.getvalue()
    assert re.fullmatch(r"embedding-index: training: 100% \(10 of 10 words\), \S+ so far", finishing), finishing
    assert stream.getvalue().splitlines()[-1].startswith("embedding-index: training: done (10 of 10 words) in ")


def test_an_hnsw_block_is_said_while_faiss_adds_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """FAISS adds a block of rows to an HNSW graph in one call, without the interpreter's lock: the step's clock
    says where it is meanwhile (here every 0.01 s), not only when the block is in. The add outlasts the interval
    by construction, not by the machine: on one thread (as long on a machine of many cores as on two), 5,000
    rows are a second of CPU on a Xeon core, a hundred intervals."""
    monkeypatch.setattr(index_choice, "hnsw_add_threads", lambda: 1)
    rows = np.random.default_rng(0).standard_normal((5_000, 50)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    stream = io.StringIO()
    progress.CONFIG.stream = stream
    try:
        progress.configure(quiet=False, interval=0.01)
        build_index(rows, IndexSpec(kind="hnsw"))
    finally:
        progress.CONFIG.stream = None
        progress.configure(quiet=False, interval=progress.INTERVAL)
    lines = [line for line in stream.getvalue().splitlines() if "adding rows to the index" in line]
    assert lines[0].startswith("embedding-index: adding rows to the index: 0% (0 of 5,000 rows), "), lines
    assert lines[0].endswith(" so far") and len(lines) >= 2, lines
    assert lines[-1].startswith("embedding-index: adding rows to the index: done (5,000 of 5,000 rows) in "), lines


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_whose_count_does_not_move_is_redrawn_every_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the bar was drawn only as work ended: between two HNSW blocks its elapsed time stood still.
    The step's clock redraws it every ``BAR_SECONDS`` (here 0.05 s) while its count stays where it is."""
    terminal = Terminal()
    monkeypatch.setattr(progress, "BAR_SECONDS", 0.05)
    progress.CONFIG.stream = terminal
    try:
        progress.configure(quiet=False, interval=progress.INTERVAL)
        with progress.Progress("adding rows to the index", 400_000) as step:
            step.advance(10_000)
            drawn = terminal.getvalue().count("\r")
            deadline = time.monotonic() + LINE_WAIT
            while terminal.getvalue().count("\r") < drawn + 3:  # three redraws, the count unchanged
                assert time.monotonic() < deadline, f"a bar not redrawn for {LINE_WAIT}s: {terminal.getvalue()!r}"
                time.sleep(0.01)
            assert step.done == 10_000
    finally:
        progress.CONFIG.stream = None
    assert "10000/400000" in terminal.getvalue().replace(",", "")


def test_a_quiet_step_says_nothing_and_runs_no_clock() -> None:
    stream = io.StringIO()
    progress.CONFIG.stream = stream
    try:
        progress.configure(quiet=True, interval=0.01)
        with progress.Progress("silent", 10) as step:
            assert step._clock is None
            time.sleep(0.05)
            step.advance(10)
    finally:
        progress.CONFIG.stream = None
        progress.configure(quiet=False, interval=progress.INTERVAL)
    assert stream.getvalue() == ""


def test_faiss_training_warnings_are_the_builders_lines(capfd: pytest.CaptureFixture[str]) -> None:
    """FAISS's k-means warning (printed from C++, once per sub-quantiser of a PQ index) is one line of the builder's,
    none with --quiet; the index is the same."""
    rows = clustered(300, 8)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    stream, was = io.StringIO(), progress.CONFIG.quiet
    progress.CONFIG.stream = stream
    try:
        progress.configure(quiet=False)
        loud = build_index(rows, parse_spec("IVF16,PQ2x5", len(rows), 8))
        progress.configure(quiet=True)
        quiet = build_index(rows, parse_spec("IVF16,PQ2x5", len(rows), 8))
    finally:
        progress.CONFIG.stream, progress.CONFIG.quiet = None, was
    assert capfd.readouterr().err == ""
    warnings = [line for line in stream.getvalue().splitlines() if "warning" in line]
    assert warnings == [
        "embedding-index: warning: the index trained 16 centroids on 300 rows, fewer than the 624 FAISS asks for "
        "(39 per centroid)",
        "embedding-index: warning: the index trained 32 centroids on 300 rows (2 times), fewer than the 1,248 FAISS "
        "asks for (39 per centroid)",
    ]
    assert faiss.serialize_index(loud).tobytes() == faiss.serialize_index(quiet).tobytes()
