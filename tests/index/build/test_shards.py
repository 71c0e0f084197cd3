"""Sharded documents tables: ``embedding-index import --shards 3`` of gensim's Lee corpus against the same
documents imported whole.

The union of the shards is the whole table (ids, vectors, payload, in the import's order); each shard is a
table that verifies and loads alone; each shard's keyword postings are the whole table's postings of its rows
(BM25 with the whole table's statistics), and every search form of the merged shards (vector, keyword, hybrid,
filters, paging, score floor, diversity, documents left out) answers exactly as the unsharded table does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from index.engine import door
from index.engine.delta import Delta
from index.engine.filters import RowSet
from index.engine.hybrid import DocumentSearch, Hit
from index.engine.hybrid import run as run_documents
from index.engine.live_search import LiveKeyword
from index.engine.query import Examples, Failed, Query, Result
from index.engine.shards import ShardedTable, merge
from index.engine.table import SearchOptions, Table, VectorSearch
from index.store import artifact, shardmap, writelog
from tests.index.engine.test_keyword import assert_lengths_are_the_cut
from tests.lee import Lee, jsonl_records, write_jsonl

EXE = Path(sys.executable).parent / "embedding-index"
SHARDS = 3


def run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*map(str, args)], capture_output=True, text=True, timeout=300)


def import_whole_and_sharded(source: Path, data: Path, name: str) -> str:
    """``name`` (whole) and ``name`` + "3" (``SHARDS`` shards) imported into ``data`` by the command from ``source``;
    what the sharded import said."""
    whole = run(EXE, "import", source, "--name", name, "--data-dir", data, "-q")
    assert whole.returncode == 0, whole.stderr
    sharded = run(EXE, "import", source, "--name", f"{name}3", "--shards", SHARDS, "--data-dir", data, "-q")
    assert sharded.returncode == 0, sharded.stderr
    return sharded.stdout


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, lee_docs: Lee) -> Path:
    """``lee`` (whole) and ``lee3`` (3 shards), imported by the command from one JSON Lines file."""
    root = tmp_path_factory.mktemp("shards")
    source = write_jsonl(root / "lee.jsonl", jsonl_records(lee_docs))
    data = root / "data"
    said = import_whole_and_sharded(source, data, "lee")
    assert said.startswith(f"built 'lee3': 300 rows x 50 in {SHARDS} shards (")
    return data


@pytest.fixture(scope="module")
def whole(data_dir: Path) -> Table:
    return Table.load(data_dir / "lee")


@pytest.fixture(scope="module")
def sharded(data_dir: Path) -> ShardedTable:
    return ShardedTable.load(data_dir / "lee3")


def test_the_shards_union_is_the_whole_table(whole: Table, sharded: ShardedTable, lee_docs: Lee) -> None:
    assert whole.payload is not None
    shard_map = sharded.map
    assert shard_map.count == SHARDS and shard_map.manifest["shards"]["hash"] == shardmap.HASH
    assert re.fullmatch("[0-9a-f]{32}", shard_map.manifest["shards"][shardmap.IMPORT])  # the import's identity
    expected = np.array([shardmap.shard_of_id(i, SHARDS) for i in lee_docs.ids])
    np.testing.assert_array_equal(shard_map.assignment, expected)
    assert sorted(np.bincount(expected).tolist()) == sorted(shard_map.manifest["shards"]["rows"])
    rows = np.concatenate(sharded.global_rows)
    assert sorted(rows.tolist()) == list(range(whole.rows))  # every row in exactly one shard
    for s, shard in enumerate(sharded.shards):
        mine = sharded.global_rows[s]
        assert shard.payload is not None and shard.rows == len(mine) > 0
        assert shard.payload.ids(range(shard.rows)) == whole.payload.ids(mine)
        assert shard.payload.records(range(shard.rows)) == whole.payload.records(mine)
        assert shard.payload.text(range(shard.rows)) == whole.payload.text(mine)
        np.testing.assert_array_equal(shard.vectors, whole.vectors[mine])
        np.testing.assert_array_equal(shard.norms, whole.norms[mine])
        assert shard.manifest["documents"]["count"] == len(mine)
    assert sharded.ids([0, 299]) == [lee_docs.ids[0], lee_docs.ids[299]]


def test_each_shard_is_a_table_alone(data_dir: Path, sharded: ShardedTable) -> None:
    for s in range(SHARDS):
        directory = sharded.map.shard_directory(s)
        assert artifact.verify(directory).ok
        alone = Table.load(directory)
        assert alone.kind == "documents" and alone.keyword is not None
    assert shardmap.verify(data_dir / "lee3").ok
    done = run(EXE, "verify", "lee3", "--data-dir", data_dir)
    assert done.returncode == 0 and done.stdout.strip() == "lee3: ok", done.stderr


def test_a_shard_keeps_the_whole_rows_of_its_own_version_once_a_compaction_publishes_the_next(
    tmp_path: Path, data_dir: Path, lee_docs: Lee
) -> None:
    """A shard served alone, loaded, then compacted (its version replaced under its name, as a server's watcher
    finds it later): until it is loaded again, the rows of its hits in the whole table are its own version's (read
    at its load), not the next one's file's (another count of rows: an ArtifactError, a 500 at a front's search)."""
    data = tmp_path / "data"
    shutil.copytree(data_dir / "lee3", data / "lee3")
    shard = data / "lee3" / shardmap.shard_name(0)
    before = np.load(shard / shardmap.WHOLE_ROWS)
    loaded = Table.load(shard)
    owned = [ident for ident in lee_docs.ids if shardmap.shard_of_id(ident, SHARDS) == 0]
    with writelog.appending(writelog.table_log(shard)) as log:
        log.append(1, {"op": "delete", "ids": owned[:5]})
    done = run(EXE, "compact", "lee3", "--data-dir", data, "-q")
    assert done.returncode == 0, done.stderr
    assert len(np.load(shard / shardmap.WHOLE_ROWS)) == len(before) - 5  # the next version's, under the same path
    np.testing.assert_array_equal(door.whole_rows(loaded), before)


def imported_again(directory: Path) -> None:
    """The sharded table at ``directory`` imported again (its files linked, another import's identity), published
    over it."""
    again = directory.with_name(".tmp-again")
    shutil.copytree(directory, again, copy_function=os.link)
    manifest = json.loads((again / artifact.MANIFEST).read_text())
    manifest["shards"][shardmap.IMPORT] = "imported-again"
    (again / artifact.MANIFEST).unlink()  # a link to the loaded version's
    (again / artifact.MANIFEST).write_text(json.dumps(manifest))
    artifact.publish(again, directory)


def test_a_shard_keeps_the_place_of_its_own_version_once_its_table_is_imported_again(
    tmp_path: Path, data_dir: Path
) -> None:
    """A shard served alone says the import of the version it loaded, not the one imported since under its name."""
    data = tmp_path / "data"
    shutil.copytree(data_dir / "lee3", data / "lee3", copy_function=os.link)
    shard = data / "lee3" / shardmap.shard_name(0)
    loaded = Table.load(shard, checksums=False)
    mine = artifact.read_manifest(data / "lee3")["shards"][shardmap.IMPORT]
    imported_again(data / "lee3")
    now = shardmap.place(shard)
    assert now is not None and now.identity == "imported-again"
    assert loaded.place is not None and loaded.place.identity == mine


def test_a_shard_loaded_alone_as_its_table_is_imported_again_has_the_place_of_the_version_it_loaded(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sharded table imported again just after a shard's load read its place, before it read the shard's
    files: the load answers the new import's shard with the new import's place, never the place of one import
    with the files of the other."""
    data = tmp_path / "data"
    shutil.copytree(data_dir / "lee3", data / "lee3", copy_function=os.link)
    shard = data / "lee3" / shardmap.shard_name(1)
    read_place, reads = shardmap.place, 0

    def place_read(directory: Path) -> shardmap.Place | None:
        nonlocal reads
        reads += 1
        found = read_place(directory)
        if reads == 1:
            imported_again(data / "lee3")
        return found

    monkeypatch.setattr(shardmap, "place", place_read)
    loaded = Table.load(shard, checksums=False)
    monkeypatch.undo()
    assert loaded.directory_id == artifact.directory_identity(shard)  # the new import's shard
    assert loaded.place == shardmap.place(shard)
    assert loaded.place is not None and loaded.place.identity == "imported-again"
    assert reads > 1  # read again with the shard's files, once the publish was seen


def test_a_sharded_table_reads_its_manifest_once_for_its_shards_places(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded whole, a sharded table gives each shard its place from the map it read: the place a shard loaded
    alone reads from the manifest beside it, without that manifest read again for every shard (a table of a
    thousand shards read it a thousand times)."""
    directory = data_dir / "lee3"
    alone = [shardmap.place(directory / shardmap.shard_name(s)) for s in range(SHARDS)]
    read = artifact.read_manifest
    reads: list[Path] = []

    def counted(path: Path) -> dict[str, Any]:
        reads.append(Path(path))
        return read(path)

    monkeypatch.setattr(artifact, "read_manifest", counted)
    loaded = ShardedTable.load(directory, checksums=False)
    assert [shard.place for shard in loaded.shards] == alone
    assert alone[0] is not None and alone[0].count == SHARDS
    assert reads.count(directory) <= 2, reads  # verified, then read for its map


def test_the_summary_says_the_lowest_of_the_shards_recall(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Served whole, a sharded table's summary gives the lowest recall@10 its shards measured (not null), and the
    table is approximate when one of its shards searches an approximate index."""
    table = ShardedTable.load(data_dir / "lee3", checksums=False)
    assert table.summary()["recall_at_10"] == 1.0 and not table.approximate  # flat shards: exact
    shard = table.shards[1]
    monkeypatch.setitem(shard.manifest, "index", {**shard.manifest["index"], "recall_at_10": 0.93})
    monkeypatch.setattr(shard, "index", object())  # as if it searched an approximate index
    assert table.summary()["recall_at_10"] == 0.93 and table.approximate


def test_the_summary_says_each_shard_s_index_where_their_kinds_differ(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Served whole, a sharded table's ``index`` is its first shard's where every shard's index is of one kind (an
    IVF's nprobe tuned on each shard's rows may differ), and each shard's, as ``{"kind": "mixed", "shards": [...]}``,
    where a shard has another (one a compaction rebuilt as exact search): it said the first shard's IVF whatever the
    others searched."""
    table = ShardedTable.load(data_dir / "lee3", checksums=False)

    def served(shard: int, spec: dict[str, object]) -> None:
        manifest = table.shards[shard].manifest
        monkeypatch.setitem(manifest, "index", {**manifest["index"], "spec": spec})

    for shard, nprobe in enumerate((2, 3, 4)):
        served(shard, {"kind": "ivf", "nlist": 4, "nprobe": nprobe})
    assert table.summary()["index"] == {"kind": "ivf", "nlist": 4, "nprobe": 2}
    served(1, {"kind": "flat", "factory": "Flat"})
    assert table.summary()["index"] == {
        "kind": "mixed",
        "shards": [
            {"kind": "ivf", "nlist": 4, "nprobe": 2},
            {"kind": "flat", "factory": "Flat"},
            {"kind": "ivf", "nlist": 4, "nprobe": 4},
        ],
    }


def test_the_summary_says_the_latest_of_the_shards_build_times(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Served whole, a sharded table's ``built_at`` is the latest of its shards' (what its front, which sees only
    the shards, says), not its own manifest's, written a moment after its last shard's."""
    table = ShardedTable.load(data_dir / "lee3", checksums=False)
    monkeypatch.setitem(table.manifest, "built_at", "2000-01-01T00:00:00Z")
    monkeypatch.setitem(table.shards[1].manifest, "built_at", "2099-01-01T00:00:01Z")
    assert table.summary()["built_at"] == "2099-01-01T00:00:01Z"


def test_a_damaged_shard_or_map_fails_verify(tmp_path: Path, data_dir: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir / "lee3", copy / "lee3")
    vectors = copy / "lee3" / "shard-001" / artifact.VECTORS
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 1
    vectors.write_bytes(bytes(data))
    done = run(EXE, "verify", "lee3", "--data-dir", copy)
    assert done.returncode == 1 and "shard-001/vectors.npy: sha256 differs from the manifest" in done.stderr
    shutil.rmtree(copy / "lee3")
    shutil.copytree(data_dir / "lee3", copy / "lee3")
    manifest = copy / "lee3" / "shard-002" / artifact.MANIFEST
    changed = json.loads(manifest.read_text())
    changed["built_at"] = "2000-01-01T00:00:00Z"
    manifest.write_text(json.dumps(changed))
    done = run(EXE, "verify", "lee3", "--data-dir", copy)
    assert done.returncode == 1 and "shard-002: its manifest is not the one the shard map names" in done.stderr


@pytest.mark.parametrize("damage", ["a damaged record", "a gap"])
def test_verify_replays_each_shards_write_log_as_a_server_would(tmp_path: Path, data_dir: Path, damage: str) -> None:
    """A sharded table's verify checked its files alone: a shard's write log that a server's load refuses (a damaged
    record with good ones after it, writes missing between the shard's version and its log) passed ("lee3: ok"),
    and the table was then refused at load; so did the shard verified alone in its server's data directory
    ("shard-001: ok"). Each shard's log is replayed as a single table's is, and named."""
    copy = tmp_path / "data"
    shutil.copytree(data_dir / "lee3", copy / "lee3")
    shard = copy / "lee3" / "shard-001"
    ids = Table.load(shard).payload.ids(range(3))  # type: ignore[union-attr]
    path = writelog.table_log(shard)
    first = 1 if damage == "a damaged record" else 3
    with writelog.appending(path) as log:
        records = [log.append(first + i, {"op": "delete", "ids": [ident]}) for i, ident in enumerate(ids)]
    if damage == "a damaged record":
        data = bytearray(path.read_bytes())
        data[records[1].end - 2] ^= 0x20  # the second record's payload: good ones before and after it
        path.write_bytes(bytes(data))
        why = f"record at byte {records[1].offset} (after sequence number 1) is damaged: a checksum that does not match"
    else:
        why = "its first record has sequence 3, but its version holds the writes up to 0 only"
    done = run(EXE, "verify", "lee3", "--data-dir", copy)
    said = f"embedding-index: error: {copy / 'lee3'}: its write log lee3/shard-001.log would refuse it: "
    assert done.returncode == 1 and said in done.stderr and why in done.stderr, done.stderr
    assert "replaying its write log lee3/shard-001.log as a server would ..." in done.stderr, done.stderr
    alone = run(EXE, "verify", "shard-001", "--data-dir", copy / "lee3")  # on a shard's server: its own log
    assert alone.returncode == 1 and "its write log lee3/shard-001.log would refuse it: " in alone.stderr, alone
    path.unlink()  # the log moved aside: the table verifies
    done = run(EXE, "verify", "lee3", "--data-dir", copy)
    assert done.returncode == 0 and done.stdout.strip() == "lee3: ok", done.stderr


def test_keyword_statistics_are_the_whole_tables(whole: Table, sharded: ShardedTable) -> None:
    """Each shard's postings hold the scores the whole table gives its rows, bit for bit."""
    assert whole.keyword is not None
    stats = sharded.manifest["keyword_statistics"]
    assert stats["documents"] == whole.rows and stats["words"] == whole.keyword.info["words"]
    assert stats["terms"] == whole.keyword.info["terms"]
    full = whole.keyword._postings
    full_terms = whole.keyword._terms
    for s, shard in enumerate(sharded.shards):
        assert shard.keyword is not None
        part = shard.keyword._postings
        terms = shard.keyword._terms
        columns = whole.keyword.term_ids(terms)
        assert (columns >= 0).all() and pa.compute.all(pa.compute.equal(full_terms.take(columns), terms)).as_py()
        mine = sharded.global_rows[s]
        is_mine = np.zeros(whole.rows, dtype=bool)
        is_mine[mine] = True
        for j, column in enumerate(columns.tolist()):
            rows = full.indices[full.indptr[column] : full.indptr[column + 1]]
            data = full.data[full.indptr[column] : full.indptr[column + 1]]
            shard_rows = part.indices[part.indptr[j] : part.indptr[j + 1]]
            shard_data = part.data[part.indptr[j] : part.indptr[j + 1]]
            np.testing.assert_array_equal(mine[shard_rows], rows[is_mine[rows]])
            np.testing.assert_array_equal(shard_data, data[is_mine[rows]])


def test_each_shard_keeps_its_documents_lengths(whole: Table, sharded: ShardedTable) -> None:
    """Each shard keeps its own documents' word counts; the sharded table reads them in the whole table's rows:
    the whole table's own."""
    for shard in sharded.shards:
        assert_lengths_are_the_cut(shard)
    assert whole.keyword is not None and sharded.keyword is not None and whole.keyword.lengths is not None
    assert sharded.keyword.lengths is not None
    np.testing.assert_array_equal(sharded.keyword.lengths, whole.keyword.lengths)


def test_a_sharded_tables_lengths_gathered_slowly_hold_up_no_other_tables(data_dir: Path) -> None:
    """A sharded table gathers its shards' lengths when first read: one gathering slowly holds up no other
    table's."""
    slow, other = (ShardedTable.load(data_dir / "lee3") for _ in range(2))
    gathering, gathered = threading.Event(), threading.Event()

    class Slow(list[Any]):
        def __iter__(self) -> Iterator[Any]:
            gathering.set()
            gathered.wait(30)
            return super().__iter__()

    slow.global_rows = Slow(slow.global_rows)
    reading = threading.Thread(target=lambda: slow.keyword and slow.keyword.lengths)
    pool = ThreadPoolExecutor(1)
    reading.start()
    try:
        assert gathering.wait(30)
        assert pool.submit(lambda: other.keyword and other.keyword.lengths).result(timeout=5) is not None
    finally:
        gathered.set()
        reading.join()
        pool.shutdown()


def test_a_shard_alone_reads_its_scores_back_with_its_whole_tables_statistics(
    whole: Table, sharded: ShardedTable
) -> None:
    """A shard served alone searches beside writes by the term counts its stored scores hold: they were made with
    the whole table's statistics (beside the map), so they are read back with those, as the whole table reads its
    own: every posting's count equals the whole table's."""
    assert whole.keyword is not None and whole.payload is not None
    expected = LiveKeyword(whole, Delta(whole.payload, whole.rows, whole.dim, 0))
    words = whole.keyword._terms.to_pylist()[::7]
    for s in range(SHARDS):
        alone = Table.load(sharded.map.shard_directory(s))
        assert alone.keyword is not None and alone.keyword.whole is not None and alone.payload is not None
        live = LiveKeyword(alone, Delta(alone.payload, alone.rows, alone.dim, 0))
        mine = sharded.global_rows[s]
        checked = 0
        for word in words:
            rows, counts = live._version_postings(word)
            whole_rows, whole_counts = expected._version_postings(word)
            of_row = dict(zip(whole_rows.tolist(), whole_counts.tolist(), strict=True))
            assert counts.tolist() == [of_row[r] for r in mine[rows].tolist()], word
            checked += len(rows)
        assert checked > 500


@pytest.mark.parametrize("checksums", [True, False])
def test_the_whole_tables_statistics_are_read_once_for_every_shard(
    data_dir: Path, whole: Table, monkeypatch: pytest.MonkeyPatch, checksums: bool
) -> None:
    """Loading the sharded table whole checksums its statistics files once (``shardmap.verify``'s, or the
    loader's own when checksums are off), not once more per shard; every shard scores with the same statistics,
    the ones a shard loaded alone reads itself."""
    hashed: list[str] = []
    sha256_file = artifact.sha256_file

    def counted(path: Path, *args: object, **kwargs: object) -> str:
        if Path(path).parent == data_dir / "lee3":
            hashed.append(Path(path).name)
        return sha256_file(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(artifact, "sha256_file", counted)
    loaded = ShardedTable.load(data_dir / "lee3", checksums=checksums)
    assert hashed.count(shardmap.TERMS) == 1 and hashed.count(shardmap.DF) == 1, hashed
    hashed.clear()
    alone = Table.load(loaded.map.shard_directory(0), checksums=False)
    assert hashed.count(shardmap.TERMS) == 1 and hashed.count(shardmap.DF) == 1, hashed  # alone: read by itself
    assert alone.keyword is not None and alone.keyword.whole is not None
    given = [shard.keyword.whole for shard in loaded.shards if shard.keyword is not None]
    first = given[0]
    assert len(given) == SHARDS and first is not None
    assert all(statistics is not None and statistics.df is first.df for statistics in given)
    np.testing.assert_array_equal(first.df, alone.keyword.whole.df)
    assert first.terms.equals(alone.keyword.whole.terms)
    assert (first.documents, first.average_length, first.words) == (
        alone.keyword.whole.documents,
        alone.keyword.whole.average_length,
        alone.keyword.whole.words,
    )
    assert loaded.keyword is not None and whole.keyword is not None
    texts = ["bushfires in Sydney", "the Australian cricket team", "Arafat and Israel"]
    for got, expected in zip(loaded.keyword.search(texts, 20), whole.keyword.search(texts, 20), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_merge_by_score_then_row() -> None:
    rows, scores = merge([(np.array([4, 9]), np.array([0.9, 0.5])), (np.array([2, 7]), np.array([0.9, 0.6]))], 3)
    assert rows.tolist() == [2, 4, 7] and scores.tolist() == [0.9, 0.9, 0.6]


def queries(lee_docs: Lee, count: int = 24) -> tuple[np.ndarray, list[str], list[int]]:
    picked = list(range(0, 300, 300 // count))[:count]
    vectors = lee_docs.unit()[picked].astype(np.float32)
    texts = [" ".join(lee_docs.texts[i].split()[:12]) for i in picked]
    return vectors, texts, picked


# A batch's cosines are one matrix product, whose rounding depends on where a row sits in the matrix (the BLAS
# kernel's blocks): a shard's and the whole table's may differ in the last bit of a float32 (one ulp near 1 is 6e-8).
ROUNDING = 2.5e-7


def equal_up_to_ties(got: list[tuple[int, float]], expected: list[tuple[int, float]], vectors: np.ndarray) -> None:
    """The same scores up to the batch's float32 rounding and the same rows in the same order but among scores that
    close (the merge gives those by row, ``Table.run`` as FAISS gives them); at a page's edge a row may stand for
    another of the same vector (Lee's duplicate documents: 230 and 236, 263 and 271, ...)."""
    mine_scores, their_scores = np.array([s for _, s in got]), np.array([s for _, s in expected])
    assert len(mine_scores) == len(their_scores)
    np.testing.assert_allclose(mine_scores, their_scores, rtol=0, atol=ROUNDING)
    if not len(got):
        return
    tie = np.concatenate([[0], np.cumsum(np.abs(np.diff(their_scores)) > ROUNDING)])  # runs of scores that close
    for group in np.unique(tie):
        at = np.flatnonzero(tie == group)
        mine, theirs = sorted(got[i][0] for i in at), sorted(expected[i][0] for i in at)
        if mine != theirs:  # at a page's edge, one of two equal documents is in, the other out
            assert all(any(np.array_equal(vectors[a], vectors[b]) for b in theirs) for a in mine), (mine, theirs)


def test_vector_search_equals_the_whole_tables(whole: Table, sharded: ShardedTable, lee_docs: Lee) -> None:
    """Cosines up to the batch's rounding; equal cosines by row (``Table.run`` leaves their order to FAISS: Lee has two
    documents at one cosine from some queries, and the whole table gives them in either order)."""
    vectors, _, picked = queries(lee_docs)
    for search in (
        VectorSearch(vectors, 10),
        VectorSearch(vectors, 7, [{i} for i in picked]),
        VectorSearch(vectors, 5, offset=6),
        VectorSearch(vectors, 10, min_score=0.97),
        VectorSearch(vectors, 10, options=SearchOptions(exact=True)),
        VectorSearch(vectors, 8, rows=whole.filter({"lang": "en", "year": {"lt": 1997}})),
        VectorSearch(vectors, 300),
    ):
        expected = whole.run(search)
        if search.rows is not None:
            search.rows = sharded.filter({"lang": "en", "year": {"lt": 1997}})
        got = sharded.run(search)
        for hits, wanted in zip(got, expected, strict=True):
            equal_up_to_ties(hits, wanted, whole.vectors)
        assert any(len(hits) for hits in got)


def document_searches(vectors: np.ndarray, texts: list[str], picked: list[int]) -> list[DocumentSearch]:
    left_out = [{i} for i in picked]
    return [
        DocumentSearch("vector", 10, vectors),
        DocumentSearch("keyword", 10, texts=texts),
        DocumentSearch("keyword", 10, texts=texts, exclude=left_out),
        DocumentSearch("hybrid", 10, vectors, texts),
        DocumentSearch("hybrid", 10, vectors, texts, exclude=left_out, weights=(1.0, 2.0), rrf_k=10),
        DocumentSearch("keyword", 5, texts=texts, offset=5),
        DocumentSearch("hybrid", 5, vectors, texts, offset=10),
        DocumentSearch("keyword", 10, texts=texts, min_score=8.0),
        DocumentSearch("vector", 10, vectors, diversity=0.5),
        DocumentSearch("hybrid", 6, vectors, texts, diversity=0.3, offset=2),
        DocumentSearch("vector", 10, vectors, offset=3, min_score=0.95, diversity=0.2),
    ]


def filtered(search: DocumentSearch, table: Table | ShardedTable, spec: dict[str, object]) -> DocumentSearch:
    rows: RowSet = table.filter(spec)
    return DocumentSearch(
        search.mode,
        search.k,
        search.queries,
        search.texts,
        search.exclude,
        search.options,
        rows,
        search.offset,
        search.min_score,
        search.rrf_k,
        search.weights,
        search.diversity,
    )


def same(got: list[list[Hit]], expected: list[list[Hit]], vectors: np.ndarray) -> None:
    """Equal answers (:func:`equal_up_to_ties`), each hit with its ranks in the fused lists."""
    assert sum(map(len, got)) > 0
    for hits, wanted in zip(got, expected, strict=True):
        equal_up_to_ties([(h.row, h.score) for h in hits], [(h.row, h.score) for h in wanted], vectors)
        ranks = {h.row: h.ranks for h in wanted}
        assert all(h.ranks == ranks[h.row] for h in hits if h.row in ranks)


def test_every_document_search_equals_the_whole_tables(whole: Table, sharded: ShardedTable, lee_docs: Lee) -> None:
    vectors, texts, picked = queries(lee_docs)
    for search in document_searches(vectors, texts, picked):
        same(sharded.search_documents(search), run_documents(whole, search), whole.vectors)
        spec = {"or": [{"long": True}, {"tags": {"prefix": "australia"}}]}
        got = sharded.search_documents(filtered(search, sharded, spec))
        same(got, run_documents(whole, filtered(search, whole, spec)), whole.vectors)


def test_keyword_answers_equal_on_every_lee_document(whole: Table, sharded: ShardedTable, lee_docs: Lee) -> None:
    """Each Lee document's first sentence as a keyword query: the merged shards' BM25 list is the whole table's,
    scores bit for bit, 50 deep."""
    assert whole.keyword is not None and sharded.keyword is not None
    texts = [text.split(".")[0] for text in lee_docs.texts]
    expected_scores, expected_rows = whole.keyword.search(texts, 50)
    scores, rows = sharded.keyword.search(texts, 50)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_array_equal(scores, expected_scores)
    assert (rows[:, 0] >= 0).all()


def test_index_refuses_a_sharded_table(data_dir: Path) -> None:
    done = run(EXE, "index", "lee3", "--data-dir", data_dir)
    why = "each shard's index is built by its import"
    assert done.returncode == 1 and f"table 'lee3' is sharded: {why}" in done.stderr, done.stderr
    done = run(EXE, "compact", "lee3", "--data-dir", data_dir)  # no writes: nothing to do
    assert done.returncode == 0 and "no writes since its version" in done.stdout, done.stderr


def test_index_refuses_a_shard_of_a_sharded_table(data_dir: Path, tmp_path: Path) -> None:
    """A shard's server has the sharded table as its data directory (EMBEDDING_TABLES=shard-000): ``embedding-index
    index shard-000`` there built the shard a new version, which the shard map does not name, and the whole table
    failed its checks from then on. Refused, the table left as it was."""
    shutil.copytree(data_dir / "lee3", tmp_path / "lee3")
    done = run(EXE, "index", "shard-000", "--index", "ivf:nlist=4,nprobe=4", "--data-dir", tmp_path / "lee3")
    why = "each shard's index is built by its import"
    said = f"{tmp_path / 'lee3'} is the sharded table 'lee3', 'shard-000' one of its shards: {why}"
    assert done.returncode == 1 and said in done.stderr, done.stderr
    done = run(EXE, "verify", "lee3", "--data-dir", tmp_path)
    assert done.returncode == 0, done.stderr


def test_compact_refuses_a_shard_of_a_sharded_table(data_dir: Path, tmp_path: Path) -> None:
    """``embedding-index compact shard-000`` in a shard server's data directory (the sharded table's) looked for a
    log of its own there, said "no writes" whatever the shard's log held, and left a .writes folder inside the table,
    which every check then refused ('.writes: not listed in the manifest'): the table no longer loaded. Refused,
    the table left as it was; its writes are folded by compacting the whole table."""
    shutil.copytree(data_dir / "lee3", tmp_path / "lee3")
    done = run(EXE, "compact", "shard-000", "--data-dir", tmp_path / "lee3")
    why = "its writes are folded by compacting that table, in the data directory that holds it"
    said = f"{tmp_path / 'lee3'} is the sharded table 'lee3', 'shard-000' one of its shards: {why}"
    assert done.returncode == 1 and said in done.stderr, (done.stdout, done.stderr)
    done = run(EXE, "verify", "lee3", "--data-dir", tmp_path)
    assert done.returncode == 0, done.stderr


def test_no_table_is_made_inside_a_sharded_table(data_dir: Path, tmp_path: Path) -> None:
    """An import into a shard server's data directory (the sharded table's) wrote a table beside the shards, which
    every check of the sharded table then refused ('extra: not listed in the manifest'); with --force over a shard,
    a shard the map does not name. Refused, the table left as it was."""
    shutil.copytree(data_dir / "lee3", tmp_path / "lee3")
    words = tmp_path / "words.vec"
    words.write_text("2 3\nheart 0.1 0.2 0.3\nlove 0.3 0.2 0.1\n")
    why = "a table is made in the data directory that holds it, beside it"
    for name, what in (("extra", "not a data directory"), ("shard-000", "'shard-000' one of its shards")):
        done = run(EXE, "import", words, "--name", name, "--force", "--data-dir", tmp_path / "lee3")
        said = f"{tmp_path / 'lee3'} is the sharded table 'lee3', {what}: {why}"
        assert done.returncode == 1 and said in done.stderr, (done.stdout, done.stderr)
    assert not (tmp_path / "lee3" / "extra").exists()
    done = run(EXE, "verify", "lee3", "--data-dir", tmp_path)
    assert done.returncode == 0, done.stderr


def test_shards_with_a_deferred_index_are_refused(tmp_path: Path, lee_docs: Lee) -> None:
    """No command would ever build the shards' deferred indexes: the import says so, and writes nothing."""
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    args = ("import", source, "--name", "d", "--shards", "2", "--defer-index", "--data-dir", tmp_path / "data")
    done = run(EXE, *args)
    assert done.returncode == 1 and "--defer-index: not with --shards" in done.stderr, done.stderr
    assert not (tmp_path / "data" / "d").exists()


def door_queries(lee: Lee) -> list[Query]:
    vector = lee.vectors[7].tolist()
    spec = {"or": [{"long": True}, {"tags": {"prefix": "australia"}}]}
    queries = [
        Query(document="lee-010"),
        Query(document="lee-011", k=7, offset=3, filter={"lang": "en"}),
        Query(examples=Examples(["lee-010", "lee-020"], ["lee-030"], documents=True)),
        Query(vector=vector, min_score=0.97),
        Query(vector=vector, diversity=0.4, k=8),
        Query(document="lee-099", diversity=0.2, filter=spec),
        Query(document="lee-123", fields=["year"]),
        Query(document="nope"),  # an unknown id fails alone
    ]
    for text in ("bushfires in Sydney", "Taliban fighters in Afghanistan", "the government said on Monday"):
        queries += [
            Query(text=text, mode="keyword"),
            Query(text=text, mode="keyword", offset=4, filter=spec),
            Query(vector=vector, text=text, mode="hybrid"),
            Query(document="lee-050", text=text, mode="hybrid", rrf_k=10, weights=(1.0, 2.0), k=6, offset=2),
            Query(vector=vector, text=text, mode="hybrid", diversity=0.3),
        ]
    return queries


def test_a_sharded_table_answers_the_doors_batch_as_the_whole_table(
    whole: Table, sharded: ShardedTable, lee_docs: Lee
) -> None:
    """A batch of the engine door's queries (by id, examples, vector, text; keyword, hybrid; filters, pages,
    floors, diversity; a failing item) answered by the sharded table as by the whole table: the same results
    (hits, ranks, passing counts, the echoed query), the same failures."""
    queries = door_queries(lee_docs)
    got, expected = door.run(sharded, queries), door.run(whole, queries)
    assert len(got) == len(expected) == len(queries)
    for query, mine, theirs in zip(queries, got, expected, strict=True):
        if isinstance(theirs, Failed):
            assert isinstance(mine, Failed) and mine.error.message.replace("lee3", "lee") == theirs.error.message
            continue
        assert isinstance(mine, Result), (query, mine)
        assert (mine.query, mine.passing, mine.fallback, mine.ranked) == (
            theirs.query,
            theirs.passing,
            theirs.fallback,
            theirs.ranked,
        )
        if mine.ranked:
            same([mine.hits], [theirs.hits], whole.vectors)  # type: ignore[list-item]
        else:
            equal_up_to_ties(mine.hits, theirs.hits, whole.vectors)  # type: ignore[arg-type]
    assert sum(isinstance(answer, Failed) for answer in got) == 1


@pytest.mark.parametrize("shard", range(SHARDS))
def test_a_sharded_table_imported_again_while_it_loads_is_loaded_whole(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, shard: int
) -> None:
    """The sharded table imported again (published over it) just before its load loads shard ``shard``: the load
    answers the new import whole, its map's identity the one every shard knows as its place, never the map of one
    import with shards of the other."""
    data = tmp_path / "data"
    shutil.copytree(data_dir / "lee3", data / "lee3", copy_function=os.link)
    load_with, loads = Table.load_with, 0

    def shard_loaded(directory: Path, *args: Any) -> Table:
        nonlocal loads
        loads += 1
        if loads == shard + 1:
            imported_again(data / "lee3")
        return load_with(directory, *args)

    monkeypatch.setattr(Table, "load_with", shard_loaded)
    table = ShardedTable.load(data / "lee3", checksums=False)
    assert table.manifest["shards"][shardmap.IMPORT] == "imported-again"
    assert [part.place.identity if part.place else None for part in table.shards] == ["imported-again"] * SHARDS
    assert loads > SHARDS  # the publish came in the middle of the load, which loaded the shards again
