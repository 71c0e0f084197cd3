"""A compaction whose rows tie massively: a writer that reuses the Lee table's 300 vectors for 16,000 documents
(templated documents, deduplicated content, a client's test data). An HNSW graph over clusters of identical rows
links each row to its copies and loses its way among them, so the table's recorded graph no longer reaches its
``--min-recall``; the compaction still folds the log, into the index an import of that many rows takes by default
(exact search below ``AUTO_FLAT_BELOW`` rows), records why in the manifest, says so, and cuts the log. ``auto``'s
graph that misses the recall gives way to the rule's other index, IVF, at import too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.build import compact, index_choice
from index.build.index_choice import (
    AUTO_FLAT_BELOW,
    AUTO_TARGET_RECALL,
    IndexSpec,
    build_and_measure,
    build_or_instead,
    fallback_spec,
    parse_spec,
)
from index.build.sources import RawTable
from index.build.writer import index_table
from index.engine.shards import ShardedTable
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store import artifact, shardmap, writelog
from tests.cli import run_cli
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.logs import recovered
from tests.service import real_server
from tests.vectors import unit

WRITTEN = 16_000
BATCH = 500
GRAPH = "hnsw:M=8"  # a small graph: its 16 links a row at the lowest level are all taken by a row's copies
ROWS = 20_000  # the rows of the tests of the auto rule's graph and IVF: the rule's threshold is lowered to them


def templated(lee: Lee, count: int = WRITTEN) -> list[dict[str, Any]]:
    """``count`` new documents in upserts of ``BATCH``, document i with the vector of Lee's document i mod 300."""
    rows = len(lee.ids)
    return [
        {
            "op": "upsert",
            "documents": [
                {"id": f"copy/{i}", "text": f"templated notice {i % rows}", "vector": lee.vectors[i % rows].tolist()}
                for i in range(start, min(count, start + BATCH))
            ],
        }
        for start in range(0, count, BATCH)
    ]


@pytest.fixture
def graph_table(lee_data_dir: Path, tmp_path: Path) -> Path:
    """A copy of the Lee table indexed by ``GRAPH`` (its recorded index, which a compaction builds again)."""
    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    index_table(tmp_path, "lee", index_spec=GRAPH)
    return tmp_path


def logged(data_dir: Path, bodies: list[dict[str, Any]]) -> Path:
    path = writelog.log_path(data_dir, "lee")
    with writelog.appending(path, sync=False) as log:
        for seq, body in enumerate(bodies, 1):
            log.append(seq, body)
    return path


def test_a_compaction_whose_graph_misses_its_recall_folds_the_log_into_exact_search(
    graph_table: Path, lee_docs: Lee
) -> None:
    before = artifact.read_manifest(graph_table / "lee")
    assert before["build"]["index"] == GRAPH and before["index"]["spec"]["kind"] == "hnsw"
    bodies = templated(lee_docs)
    path = logged(graph_table, bodies)
    done = compact.compact(graph_table, "lee")
    assert done["written"] == len(bodies) and done["rows"] == 300 + WRITTEN
    assert recovered(path) == []  # the log is cut: bounded again
    manifest = artifact.read_manifest(graph_table / "lee")
    assert manifest["log_sequence"] == len(bodies)
    assert manifest["index"]["exact"] is True and manifest["index"]["recall_at_10"] == 1.0
    fallback = manifest["index"]["fallback"]
    assert fallback["index"]["kind"] == "hnsw" and fallback["index"]["M"] == 8
    assert fallback["recall_at_10"] < fallback["min_recall"] == 0.95
    assert fallback["instead"] == "flat"
    assert manifest["build"]["index"] == GRAPH  # the table's own choice stays: the next compaction tries it again
    assert done["fallback"] == fallback
    # Every document is there, written ones with the vector written (as a unit row).
    table = Table.load(graph_table / "lee")
    assert table.payload is not None and table.rows == 300 + WRITTEN
    ids = [str(i) for i in table.payload.column(table.payload.id_field).to_pylist()]
    assert ids == [*lee_docs.ids, *(f"copy/{i}" for i in range(WRITTEN))]
    expected = unit(np.vstack([lee_docs.vectors, lee_docs.vectors[np.arange(WRITTEN) % 300]]))
    assert np.allclose(np.asarray(table.vectors, dtype=np.float64), expected, atol=1e-6)


def test_an_import_of_a_graph_that_misses_its_recall_names_the_copies(lee_docs: Lee) -> None:
    """Outside a compaction a spec given by hand that misses ``--min-recall`` is refused, as before, and the refusal
    says why here: the sampled rows with 10 or more copies. It names the index as JSON, as the line of a build that
    falls back and ``indexed ...`` do (it gave Python's repr)."""
    rows = np.ascontiguousarray(unit(lee_docs.vectors[np.arange(300 + WRITTEN) % 300]).astype(np.float32))
    with pytest.raises(
        InvalidQuery, match=r"below --min-recall 0\.95; 1,000 of the 1,000 sampled rows have 10 or more copies"
    ) as refused:
        build_and_measure(rows, parse_spec(GRAPH, len(rows), rows.shape[1]), min_recall=0.95)
    index = json.dumps({"kind": "hnsw", "M": 8, "efConstruction": 200, "efSearch": 1024})
    assert refused.value.message.startswith(f"index {index} reached recall@10 "), refused.value.message


@pytest.fixture
def auto_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto rule from ``ROWS`` rows on (``AUTO_FLAT_BELOW``), not from 100,000: its tuning and its fallbacks are
    tested, not its threshold (``test_the_index_taken_instead_is_exact_search_but_for_a_large_graph``), on a fifth of
    the rows, whose recall still reaches auto's target at a lower efSearch or nprobe than the ``--min-recall`` above
    it that the tests below ask."""
    monkeypatch.setattr(index_choice, "AUTO_FLAT_BELOW", ROWS)


@pytest.mark.usefixtures("auto_rule")
def test_auto_falls_back_to_ivf_when_its_graph_misses_the_recall(
    lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auto`` over ``ROWS`` rows of 300 vectors, its graph (here a small one, as if the rule had chosen it) below
    ``--min-recall``: an import takes the rule's other index, IVF, whose lists hold each row's copies together, and
    the manifest's ``choice`` and ``fallback`` say why."""
    rows = np.ascontiguousarray(unit(lee_docs.vectors[np.arange(ROWS) % 300]).astype(np.float32))
    small = IndexSpec(kind="hnsw", m=4, ef_construction=16, target_recall=AUTO_TARGET_RECALL)
    monkeypatch.setattr(index_choice, "choose_auto", lambda *_: (small, {"chosen": "hnsw"}))
    built = build_or_instead(rows, "auto", min_recall=0.95)
    assert built.info["spec"]["kind"] == "ivf" and built.info["recall_at_10"] >= AUTO_TARGET_RECALL
    assert built.info["choice"] == {"chosen": "hnsw"}
    assert built.info["fallback"]["index"]["M"] == 4 and built.info["fallback"]["recall_at_10"] < 0.95
    assert built.info["fallback"]["instead"] == "ivf"


def test_the_index_taken_instead_is_exact_search_but_for_a_large_graph() -> None:
    """Exact search below ``AUTO_FLAT_BELOW`` rows, and in place of any index but a graph (an index of codes, which
    a table takes to hold less than its rows: IVF would hold them again); IVF in place of a large graph."""
    assert fallback_spec(300 + WRITTEN, "hnsw").kind == "flat"
    assert fallback_spec(AUTO_FLAT_BELOW, "hnsw").kind == "ivf"
    assert fallback_spec(AUTO_FLAT_BELOW, "auto").kind == "ivf"
    assert fallback_spec(AUTO_FLAT_BELOW, "ivfpq").kind == "flat"
    assert fallback_spec(AUTO_FLAT_BELOW, "factory").kind == "flat"


@pytest.fixture
def glove_auto(glove_raw: RawTable, auto_rule: None) -> np.ndarray:
    """GloVe's first ``ROWS`` rows, as unit rows, which the auto rule indexes here: no copies, where a wider search
    finds more."""
    return np.ascontiguousarray(unit(glove_raw.matrix[:ROWS]).astype(np.float32))


def test_the_ivf_taken_instead_is_tuned_to_a_min_recall_above_auto_s_target(glove_auto: np.ndarray) -> None:
    """A compaction of ``ROWS`` rows (IVF's, not exact search's) whose graph (its efSearch fixed by hand) misses a
    ``--min-recall`` of 0.999: the IVF taken instead raises its nprobe until it reaches 0.999, not only auto's 0.99,
    else it too is refused and the log grows at every write."""
    built = build_or_instead(glove_auto, "hnsw:M=4,efConstruction=16,efSearch=16", min_recall=0.999, fallback=True)
    assert built.info["spec"]["kind"] == "ivf" and built.info["recall_at_10"] >= 0.999
    assert built.info["fallback"]["index"]["efSearch"] == 16 and built.info["fallback"]["min_recall"] == 0.999


def test_auto_s_graph_is_tuned_to_a_min_recall_above_its_target_before_it_gives_way(
    glove_auto: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auto``'s graph with ``--min-recall`` 0.995: its efSearch is raised to 0.995, and the graph kept, rather than
    stopped at 0.99 and replaced by IVF as if it could not reach the recall asked."""
    graph = IndexSpec(kind="hnsw", m=16, ef_construction=40, target_recall=AUTO_TARGET_RECALL)
    monkeypatch.setattr(index_choice, "choose_auto", lambda *_: (graph, {"chosen": "hnsw"}))
    built = build_or_instead(glove_auto, "auto", min_recall=0.995)
    assert built.info["spec"]["kind"] == "hnsw" and built.info["recall_at_10"] >= 0.995
    assert "fallback" not in built.info


def test_the_next_compaction_builds_the_table_s_own_index_again_once_it_reaches_the_recall(
    graph_table: Path, lee_docs: Lee
) -> None:
    """Once the copies are deleted, the next compaction builds the table's own graph again, within its recall, and
    its manifest (and so the summary) no longer says a fallback."""
    bodies = templated(lee_docs)
    path = logged(graph_table, bodies)
    assert compact.compact(graph_table, "lee")["fallback"]["instead"] == "flat"
    with writelog.appending(path, sync=False) as log:
        log.append(len(bodies) + 1, {"op": "delete", "ids": [f"copy/{i}" for i in range(WRITTEN)]})
    done = compact.compact(graph_table, "lee")
    assert "fallback" not in done and done["rows"] == 300
    manifest = artifact.read_manifest(graph_table / "lee")
    assert manifest["index"]["spec"]["kind"] == "hnsw" and manifest["index"]["spec"]["M"] == 8
    assert manifest["index"]["recall_at_10"] >= 0.95 and "fallback" not in manifest["index"]
    assert "index_fallback" not in Table.load(graph_table / "lee").summary()


def test_the_refusal_of_a_graph_over_rows_without_copies_does_not_speak_of_copies(glove_auto: np.ndarray) -> None:
    """GloVe has no copies (no sampled word's 10th nearest other word scores above 0.99): a graph refused over it
    says the recall it reached, and nothing of copies."""
    graph = parse_spec("hnsw:M=4,efConstruction=16,efSearch=16", len(glove_auto), glove_auto.shape[1])
    with pytest.raises(InvalidQuery) as refused:
        build_and_measure(glove_auto, graph, min_recall=0.99)
    assert "below --min-recall 0.99" in refused.value.message and "copies" not in refused.value.message


@pytest.mark.usefixtures("auto_rule")
def test_an_import_whose_auto_graph_misses_the_recall_says_the_index_it_took_instead(
    lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``embedding-index import --quiet`` of ``ROWS`` words over Lee's 300 vectors, ``auto``'s graph (a small one, as
    if the rule had chosen it) below ``--min-recall``: its one line says the IVF taken in place of the graph and why,
    as a compaction's line does, not only ``(ivf, ...)``."""
    rows = lee_docs.vectors[np.arange(ROWS) % 300]
    np.savez(tmp_path / "dup.npz", vectors=rows, tokens=np.array([f"w{i}" for i in range(len(rows))], dtype=str))
    small = IndexSpec(kind="hnsw", m=4, ef_construction=16, target_recall=AUTO_TARGET_RECALL)
    monkeypatch.setattr(index_choice, "choose_auto", lambda *_: (small, {"chosen": "hnsw"}))
    done = run_cli("import", tmp_path / "dup.npz", "--name", "dup", "--data-dir", tmp_path / "data")
    assert done.code == 0, done.err
    fallback = artifact.read_manifest(tmp_path / "data" / "dup")["index"]["fallback"]
    said = (
        f"; index ivf in place of {json.dumps(fallback['index'])}, whose recall@10 {fallback['recall_at_10']} is "
        "below --min-recall 0.95"
    )
    assert done.out.startswith(f"built 'dup': {ROWS:,} rows x 50 (ivf, ") and done.out.rstrip().endswith(said), done.out


@pytest.mark.parametrize("spec", ["ivf:nlist=200", "ivfpq:nlist=8,m=10", "IVF200,Flat"])
def test_a_compaction_whose_index_its_rows_cannot_build_folds_the_log_into_exact_search(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, spec: str
) -> None:
    """Deletes take the Lee table below what its recorded index needs (200 lists, or 256 codes per sub-quantiser,
    over 150 rows): the compaction folds the log all the same, into exact search, and says why, as one below its
    recall does; the table's own index stays recorded for the next compaction. ``index.fallback`` names the index
    as one below its recall does, described as the manifest's ``index.spec`` describes an index (it was the spec's
    text, and one below its recall the description: two types under one key)."""
    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    index_table(tmp_path, "lee", index_spec=spec)
    path = logged(tmp_path, [{"op": "delete", "ids": lee_docs.ids[150:]}])
    done = run_cli("compact", "lee", "--data-dir", tmp_path)
    assert done.code == 0, done.err
    manifest = artifact.read_manifest(tmp_path / "lee")
    assert manifest["rows"] == 150 and manifest["index"]["exact"] is True and manifest["build"]["index"] == spec
    fallback = manifest["index"]["fallback"]
    described = {
        "ivf:nlist=200": {"kind": "ivf", "nlist": 200, "nprobe": None},
        "ivfpq:nlist=8,m=10": {
            **{"kind": "ivfpq", "nlist": 8, "nprobe": None, "m": 10, "nbits": 8, "opq": False, "rerank": 8},
            "code_bytes_per_row": 10,
        },
        "IVF200,Flat": {"kind": "factory", "factory": "IVF200,Flat"},
    }
    assert fallback["index"] == described[spec] and fallback["instead"] == "flat"
    assert sorted(fallback) == ["index", "instead", "unbuildable"]
    whys = {
        "ivf:nlist=200": "nlist 200 is more than the 150 rows",
        "ivfpq:nlist=8,m=10": "150 rows cannot train 256 codes",
        "IVF200,Flat": "Number of training points (150) should be at least as large as number of clusters (200)",
    }  # the last FAISS's alone, refused as it trains: the compaction failed at every try, its log growing
    assert whys[spec] in fallback["unbuildable"]
    assert done.out.rstrip().endswith(
        f"; index flat in place of {json.dumps(described[spec])}: {fallback['unbuildable']}"
    ), done.out
    assert recovered(path) == []


def test_an_index_the_rows_cannot_build_is_refused_outside_a_compaction(lee_data_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    done = run_cli("index", "lee", "--index", "ivf:nlist=400", "--data-dir", tmp_path)
    assert done.code != 0 and "nlist 400 is more than the 300 rows" in done.err


def test_a_sharded_compaction_s_line_names_the_shard_whose_index_its_rows_cannot_build(
    lee_docs: Lee, tmp_path: Path
) -> None:
    """Lee as 3 shards indexed ``ivf:nlist=60``; deletes take shard 1 below 60 rows, the others keep theirs. The
    compaction builds exact search for shard 1 alone, and its line names that, as the table's summary does: it named
    the first shard's index (none taken instead), ranking a shard that could not build its index (no recall) as one
    that built it."""
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    data = tmp_path / "data"
    spec = "ivf:nlist=60"
    done = run_cli("import", source, "--name", "lee", "--shards", 3, "--index", spec, "--data-dir", data)
    assert done.code == 0, done.err
    owned = [ident for ident in lee_docs.ids if shardmap.shard_of_id(ident, 3) == 1]
    assert len(owned) > 60
    with writelog.appending(writelog.table_log(data / "lee" / "shard-001"), sync=False) as log:
        log.append(1, {"op": "delete", "ids": owned[: len(owned) - 50]})
    done = run_cli("compact", "lee", "--data-dir", data)
    assert done.code == 0, done.err
    shards = [artifact.read_manifest(data / "lee" / shardmap.shard_name(s))["index"] for s in range(3)]
    assert [("fallback" in shard) for shard in shards] == [False, True, False], shards
    fallback = ShardedTable.load(data / "lee").summary()["index_fallback"]
    assert fallback == shards[1]["fallback"] and "nlist 60 is more than the 50 rows" in fallback["unbuildable"]
    assert fallback["index"] == {"kind": "ivf", "nlist": 60, "nprobe": None}
    line = f"; index flat in place of {json.dumps(fallback['index'])}: {fallback['unbuildable']}"
    assert done.out.rstrip().endswith(line), done.out
    # The summary's ``index``, from a real server (the table and the list): the shards serve ivf, flat and ivf, so
    # it says they differ, each shard's; it said the first shard's ivf, as if every shard had its index.
    with real_server.running(data, tmp_path / "serve.log") as server:
        summary = real_server.HTTP.get(f"{server.base}/v1/tables/lee").json()
        [listed] = real_server.HTTP.get(f"{server.base}/v1/tables").json()["tables"]
    served = [artifact.read_manifest(data / "lee" / shardmap.shard_name(s))["index"]["spec"] for s in range(3)]
    assert [index["kind"] for index in served] == ["ivf", "flat", "ivf"]
    assert summary["index"] == listed["index"] == {"kind": "mixed", "shards": served}, summary
    assert summary["index_fallback"] == fallback and summary["approximate"] is True


def test_a_manifest_written_before_the_fallback_had_one_shape_shows_the_same_index_fallback(
    lee_data_dir: Path, tmp_path: Path
) -> None:
    """A compaction of the release before recorded an index its rows could not build by the spec's text
    (``{"index": "ivf:nlist=200", "unbuildable": ..., "instead": "flat"}``): such a manifest still loads, the
    summary shows its ``index_fallback`` as it was, and a line that says it names the spec as it did."""
    from index.build.cli import taken_instead

    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    directory = tmp_path / "lee"
    manifest = artifact.read_manifest(directory)
    old = {"index": "ivf:nlist=200", "unbuildable": "index spec 'ivf:nlist=200': nlist 200 is more than the 150 rows"}
    old["instead"] = "flat"
    artifact.write_manifest(directory, {**manifest, "index": {**manifest["index"], "fallback": old}})
    assert artifact.verify(directory).ok
    assert Table.load(directory).summary()["index_fallback"] == old
    assert taken_instead(old) == f'; index flat in place of "ivf:nlist=200": {old["unbuildable"]}'
