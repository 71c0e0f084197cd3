"""Writes to a sharded table served whole by one process: each document's write lands in the log of the shard
that owns its id, and the door answers every search form over the shards and their writes exactly as the
unsharded table answers with the same writes (``service.live`` and ``service.writes`` as the write routes call
them, in-process, over gensim's Lee corpus imported whole and as 3 shards).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from index.engine import delta as delta_module
from index.engine import dfs, door, live_search
from index.engine.delta import Delta
from index.engine.query import Examples, Failed, Query, Result
from index.engine.shards import ShardedTable
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store import artifact, shardmap, writelog
from service import live, writes
from service.schemas.writes import WriteDocument
from tests.cli import run_cli
from tests.index.build.test_shards import EXE, door_queries, run
from tests.index.engine.test_keyword import assert_lengths_are_the_cut
from tests.lee import Lee, jsonl_records
from tests.logs import recovered
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.test_live_search import as_write, written

SHARDS = 3


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, lee_imports: Path) -> Path:
    """``lee`` whole and as ``SHARDS`` shards (``lee_imports``)."""
    root = tmp_path_factory.mktemp("shard-writes")
    assert SHARDS == LEE_SHARDS
    for where in ("whole", "sharded"):
        lee_copy(lee_imports, "plain", where, root / where)
    return root


def load(data: Path) -> tuple[Table, ShardedTable]:
    whole = Table.load(data / "whole" / "lee")
    live.attach(whole, data / "whole" / "lee")
    sharded = ShardedTable.load(data / "sharded" / "lee")
    live.attach(sharded, data / "sharded" / "lee")
    return whole, sharded


def upsert(whole: Table, sharded: ShardedTable, documents: list[dict[str, Any]]) -> list[Any]:
    models = [WriteDocument.model_validate(d) for d in documents]
    state = live.live_of(whole)
    assert state is not None
    state.write(lambda delta: (writes.upsert_body(whole, None, models, delta), len(models)), True)
    shards = live.sharded_of(sharded)
    assert shards is not None
    return shards.write(writes.sharded_upsert(sharded, None, models, shards.whole.delta), True)


def delete(whole: Table, sharded: ShardedTable, body: dict[str, Any]) -> tuple[int, int]:
    state, shards = live.live_of(whole), live.sharded_of(sharded)
    assert state is not None and shards is not None
    if "ids" in body:
        _, expected = state.write(lambda d: writes.delete_body(writes.delete_ids(whole, body["ids"], d)), True)
        done = shards.write(writes.sharded_delete(sharded, body["ids"], shards.whole.delta), True)
    else:
        _, expected = state.write(lambda d: writes.delete_body(writes.filter_ids(whole, body["filter"], d)), True)
        done = shards.write(writes.sharded_filter_delete(sharded, body["filter"]), True)
    return expected, sum(d.answer for d in done)


def history(lee: Lee) -> tuple[list[list[dict[str, Any]]], list[Any]]:
    """``test_live_search.written``'s writes, each new document's text made its own (a copy of an imported
    document's text would tie with the document replacing it: equal scores among written documents go by write
    order in the whole table, by shard then write order in a sharded one)."""
    _, batches, deletes = written(lee)
    batches = [
        [{**r, "text": f"{r['text']} note{r['id'][4:]}"} if r["id"].startswith("new/") else r for r in batch]
        for batch in batches
    ]
    return batches, deletes


@pytest.fixture(scope="module")
def tables(data: Path, lee_docs: Lee) -> tuple[Table, ShardedTable]:
    """Both tables after the same writes: new documents, replaced ones, deletes by id and by filter."""
    whole, sharded = load(data)
    batches, deletes = history(lee_docs)
    for batch in batches:
        done = upsert(whole, sharded, [as_write(r) for r in batch])
        assert sum(d.answer for d in done) == len(batch) and len(done) > 1  # a batch spans shards
    for body in deletes:
        expected, got = delete(whole, sharded, body)
        assert got == expected > 0
    return whole, sharded


def queries(lee: Lee) -> list[Query]:
    vector = (lee.vectors[5] * 1.5).tolist()
    out = door_queries(lee)
    out += [
        Query(document="new/07", k=8),
        Query(document="lee-006", k=6),  # replaced
        Query(document="lee-100"),  # deleted: fails
        Query(examples=Examples(["new/02", "lee-200"], ["lee-030"], documents=True), k=6),
        Query(vector=vector, k=20, filter={"year": {"gte": 1970, "lt": 1990}}),
        Query(vector=vector, k=10, offset=5, min_score=0.5),
        Query(text="police", mode="keyword", k=20),
        Query(text="police", mode="keyword", k=10, filter={"year": 1980}),
        Query(vector=vector, text="fire Sydney", mode="hybrid", k=15, diversity=0.3),
        Query(vector=vector, k=10, filter={"id": {"in": ["new/01", "lee-006", "lee-100", "new/20", "lee-250"]}}),
        Query(text="police", mode="keyword", k=10, filter={"not": {"id": {"in": ["new/05", "lee-110", "lee-120"]}}}),
    ]
    return out


def ids_of(table: Table, delta: Delta | None, hits: Sequence[Any]) -> list[tuple[Any, float]]:
    """(id, score) of each hit: a row past the version's is a written document (its place in write order)."""
    written_docs = [] if delta is None else delta.written_in_order()
    out = []
    for hit in hits:
        row, score = (hit.row, hit.score) if hasattr(hit, "row") else hit
        assert table.payload is not None
        out.append((table.payload.ids([row])[0] if row < table.rows else written_docs[row - table.rows].id, score))
    return out


def same_answers(whole: Table, sharded: ShardedTable, lee: Lee, written: bool = True) -> int:
    """The door's batch over each table and its delta: the same failures, and the same ids and scores (among
    equal scores, the same set); returns how many queries were compared."""
    qs = queries(lee)
    expected_delta, delta = live.delta_of(whole), live.delta_of(sharded)
    assert (expected_delta is not None and delta is not None) == written
    expected, got = door.run(whole, qs, None, expected_delta), door.run(sharded, qs, None, delta)
    for query, mine, theirs in zip(qs, got, expected, strict=True):
        if isinstance(theirs, Failed):
            assert isinstance(mine, Failed), query
            assert mine.error.message == theirs.error.message, query
            continue
        assert isinstance(mine, Result), (query, mine)
        assert (mine.query, mine.passing, mine.fallback) == (theirs.query, theirs.passing, theirs.fallback), query
        a, b = ids_of(sharded, delta, mine.hits), ids_of(whole, expected_delta, theirs.hits)
        if not written:  # FAISS over the shards' and the whole table's rows: a cosine may differ in its last bit
            a, b = ([(i, round(s, 6)) for i, s in pairs] for pairs in (a, b))
        assert [s for _, s in a] == [s for _, s in b], query
        for score in {s for _, s in b}:
            edge = score == b[-1][1]  # at a page's edge, either of two equal documents may stand
            mine_ids = {i for i, s in a if s == score}
            assert edge or mine_ids == {i for i, s in b if s == score}, query
    return len(qs)


def test_each_write_lands_in_its_owners_log(data: Path, tables: tuple[Table, ShardedTable]) -> None:
    logs = data / "sharded" / writelog.DIRECTORY / "lee"
    assert sorted(p.name for p in logs.glob("*.log")) == [f"{shardmap.shard_name(s)}.log" for s in range(SHARDS)]
    for s in range(SHARDS):
        records = recovered(logs / f"{shardmap.shard_name(s)}.log")
        ids = [d["id"] for r in records for d in r.body.get("documents", ())]
        ids += [i for r in records for i in r.body.get("ids", ())]
        assert ids and all(shardmap.shard_of_id(i, SHARDS) == s for i in ids), s
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
    assert not (data / "sharded" / "lee" / writelog.DIRECTORY).exists()  # outside the version
    assert shardmap.verify(data / "sharded" / "lee").ok


def test_the_sharded_table_answers_as_the_whole_table_with_the_same_writes(
    tables: tuple[Table, ShardedTable], lee_docs: Lee
) -> None:
    whole, sharded = tables
    assert same_answers(whole, sharded, lee_docs) >= 32
    shards = live.sharded_of(sharded)
    state = live.live_of(whole)
    assert shards is not None and state is not None
    summary, expected = shards.summary(), live.summary(state)
    assert summary["written"] == expected["written"] and summary["deleted"] == expected["deleted"]


def test_a_reload_replays_every_shards_log(data: Path, tables: tuple[Table, ShardedTable], lee_docs: Lee) -> None:
    whole, sharded = load(data)  # new table objects: every log recovered and replayed
    assert same_answers(whole, sharded, lee_docs) >= 32
    got = door.run(sharded, [Query(document="new/07", k=3)], None, live.delta_of(sharded))[0]
    assert isinstance(got, Result) and len(got.hits) == 3


def test_a_refused_document_writes_nothing(tables: tuple[Table, ShardedTable], lee_docs: Lee) -> None:
    _, sharded = tables
    shards = live.sharded_of(sharded)
    assert shards is not None
    before = shards.summary()
    good = {"id": "fine", "vector": lee_docs.vectors[0].tolist()}
    bad = {"id": "bad", "vector": lee_docs.vectors[0].tolist(), "fields": {"nope": 1}}
    documents = [WriteDocument.model_validate(d) for d in (good, bad)]
    with pytest.raises(door.InvalidQuery, match="the table has no field 'nope'"):
        writes.sharded_upsert(sharded, None, documents, shards.whole.delta)
    with pytest.raises(door.InvalidQuery):
        shards.write(writes.sharded_filter_delete(sharded, {"nope": 1}), True)
    assert shards.summary() == before


def test_a_record_too_long_for_one_shards_log_writes_none(
    lee_imports: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard's record longer than its log takes (``writelog.MAX_RECORD``) is refused, 422, and the records
    appended to the shards before it are cut off again: the write writes none, as a log that fails does."""
    lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    sharded = ShardedTable.load(tmp_path / "data" / "lee")
    live.attach(sharded, tmp_path / "data" / "lee")
    shards = live.sharded_of(sharded)
    assert shards is not None
    records = jsonl_records(lee_docs)[:40]
    documents = [WriteDocument.model_validate({**as_write(r), "id": f"long/{r['id']}"}) for r in records]
    makes = writes.sharded_upsert(sharded, None, documents, shards.whole.delta)
    sizes = {shard: len(writelog.frame(1, make(shards.shards[shard].delta)[0] or {})) for shard, make in makes.items()}
    first, last = min(sizes), max(sizes)
    assert sizes[first] < sizes[last], sizes  # the last shard's record alone is too long
    monkeypatch.setattr(writelog, "MAX_RECORD", sizes[last] - 100)
    logs = [state.path for state in shards.shards]
    with pytest.raises(InvalidQuery, match="more than the write log takes in one"):
        shards.write(makes, True)
    assert [path.stat().st_size if path.exists() else 0 for path in logs] == [0] * SHARDS
    assert shards.summary()["written"] == 0


def test_compaction_folds_every_shards_log(data: Path, tables: tuple[Table, ShardedTable], lee_docs: Lee) -> None:
    """``embedding-index compact`` of the sharded table: every shard rebuilt with its log folded in (the map
    valid, each document still in the shard that owns its id), the logs cut; the compacted sharded table answers
    as the compacted whole table, and a later write is numbered after what was folded; the import's identity,
    which a front checks every shard against, is the same after."""
    identity = shardmap.read(data / "sharded" / "lee").manifest["shards"][shardmap.IMPORT]
    for where in ("whole", "sharded"):
        done = run(EXE, "compact", "lee", "--data-dir", data / where)
        assert done.returncode == 0 and done.stdout.startswith("compacted 'lee': "), done.stderr
    directory = data / "sharded" / "lee"
    assert shardmap.verify(directory).ok
    shard_map = shardmap.read(directory)
    assert shard_map.manifest["shards"][shardmap.IMPORT] == identity and len(identity) == 32
    places = [shardmap.place(shard_map.shard_directory(s)) for s in range(SHARDS)]
    assert [place and place.identity for place in places] == [identity] * SHARDS
    sharded = ShardedTable.load(directory)
    assert sharded.payload is not None
    owners = [shardmap.shard_of_id(i, SHARDS) for i in sharded.payload.ids(range(sharded.rows))]
    assert owners == shard_map.assignment.tolist()
    for s in range(SHARDS):
        log = writelog.table_log(shard_map.shard_directory(s))
        assert log.stat().st_size == 0 and int(sharded.shards[s].manifest["log_sequence"]) > 0
    whole, sharded = load(data)
    for table in (whole, *sharded.shards):  # the keyword indexes rebuilt: the folded documents' lengths
        assert_lengths_are_the_cut(table)
    assert same_answers(whole, sharded, lee_docs, written=False) >= 32
    done = upsert(whole, sharded, [{"id": "after", "vector": lee_docs.vectors[1].tolist()}])
    owner = shardmap.shard_of_id("after", SHARDS)
    assert [(d.shard, d.sequence) for d in done] == [(owner, sharded.shards[owner].manifest["log_sequence"] + 1)]


def test_a_table_imported_before_imports_had_an_identity_keeps_none_through_a_compaction(
    lee_imports: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A sharded table whose map has no import identity (as sharded imports wrote it before they had one): its
    compaction keeps none, so the replicas of its shards that serve the compacted version and those still on the
    version before are of one import to a front (a new identity would have it refuse one or the other until every
    replica had loaded the new version)."""
    for where in ("whole", "sharded"):
        lee_copy(lee_imports, "plain", where, tmp_path / where)
    directory = tmp_path / "sharded" / "lee"
    path = directory / artifact.MANIFEST
    manifest = json.loads(path.read_text())
    del manifest["shards"][shardmap.IMPORT]
    path.write_text(json.dumps(manifest, indent=2))
    whole, sharded = load(tmp_path)
    assert delete(whole, sharded, {"ids": lee_docs.ids[:5]}) == (5, 5)
    done = run_cli("compact", "lee", "--data-dir", tmp_path / "sharded")
    assert done.code == 0 and f"{len(lee_docs.ids) - 5} documents" in done.out, done.err
    assert shardmap.verify(directory).ok
    shard_map = shardmap.read(directory)
    assert shard_map.manifest["shards"].get(shardmap.IMPORT) is None
    assert [shardmap.place(shard_map.shard_directory(s)) for s in range(SHARDS)] == [
        shardmap.Place("lee", s, SHARDS, None) for s in range(SHARDS)
    ]
    assert ShardedTable.load(directory).rows == len(lee_docs.ids) - 5


def test_a_shard_whose_every_document_is_deleted_compacts_empty(
    lee_imports: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Every document of shard 1 deleted: the compaction folds the deletes in and leaves that shard empty (the
    table verifies; the shard has no rows, its log is cut); the table answers as the unsharded table compacted
    with the same deletes, the shard served alone answers with no hit, and it takes writes again, which the next
    compaction folds in."""
    for where in ("whole", "sharded"):
        lee_copy(lee_imports, "plain", where, tmp_path / where)
    whole, sharded = load(tmp_path)
    gone = [i for i in lee_docs.ids if shardmap.shard_of_id(i, SHARDS) == 1]
    assert delete(whole, sharded, {"ids": gone}) == (len(gone), len(gone))
    for where in ("whole", "sharded"):
        done = run_cli("compact", "lee", "--data-dir", tmp_path / where)
        assert done.code == 0, done.err
    directory = tmp_path / "sharded" / "lee"
    assert shardmap.verify(directory).ok
    assert writelog.table_log(directory / shardmap.shard_name(1)).stat().st_size == 0
    whole, sharded = load(tmp_path)
    assert [shard.rows for shard in sharded.shards][1] == 0 and sharded.rows == whole.rows
    assert same_answers(whole, sharded, lee_docs, written=False) >= 32
    alone = Table.load(directory / shardmap.shard_name(1))
    assert_lengths_are_the_cut(alone)  # none
    vector = lee_docs.vectors[3].tolist()
    searches = [Query(vector=vector), Query(text="police fire", mode="keyword"), Query(vector=vector, diversity=0.3)]
    searches.append(Query(vector=vector, text="police", mode="hybrid", k=5))
    assert [answer.hits for answer in door.run(alone, searches, None, None)] == [[]] * len(searches)  # type: ignore[union-attr]
    assert dfs.gather(alone, None, ["police fire"])["documents"] == [0, 0]
    done = upsert(whole, sharded, [owned(lee_docs, 1, "new-1")])
    assert [(d.shard, d.sequence) for d in done] == [(1, 2)]
    assert same_answers(whole, sharded, lee_docs) >= 32
    done = run_cli("compact", "lee", "--data-dir", tmp_path / "sharded")
    assert done.code == 0, done.err
    assert ShardedTable.load(directory).manifest["shards"]["rows"][1] == 1


def test_a_compaction_that_would_leave_the_table_empty_is_refused(
    lee_imports: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Every document deleted: the compaction says why it leaves the table as it is, its version and its logs
    whole."""
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    shard_map = shardmap.read(data / "lee")
    logs = [writelog.table_log(shard_map.shard_directory(s)) for s in range(SHARDS)]
    for s, log in enumerate(logs):
        with writelog.appending(log) as appender:
            appender.append(
                1, {"op": "delete", "ids": [i for i in lee_docs.ids if shardmap.shard_of_id(i, SHARDS) == s]}
            )
    manifest = (data / "lee" / artifact.MANIFEST).read_bytes()
    done = run_cli("compact", "lee", "--data-dir", data)
    message = "every one of its documents is deleted"
    assert done.code == 1 and done.err.startswith(f"embedding-index: error: table 'lee' not compacted: {message}; ")
    assert "Traceback" not in done.err, done.err
    assert (data / "lee" / artifact.MANIFEST).read_bytes() == manifest and shardmap.verify(data / "lee").ok
    assert [[r.seq for r in recovered(log)] for log in logs] == [[1], [1], [1]]


def owned(lee: Lee, shard: int, prefix: str) -> dict[str, Any]:
    """A new document (the first Lee document's text and vector) whose id shard ``shard`` owns."""
    ident = next(f"{prefix}-{i}" for i in range(100) if shardmap.shard_of_id(f"{prefix}-{i}", SHARDS) == shard)
    return {"id": ident, "text": lee.texts[0], "vector": lee.vectors[0].tolist(), "fields": {}}


def test_a_shard_knows_its_place_and_refuses_another_shards_ids(data: Path, lee_docs: Lee) -> None:
    """What a shard's own server checks a write against: the map beside it names the shard, and an upsert of an id
    another shard owns is refused (before any embedding) with the owner named; the shard's own ids pass."""
    root = data / "sharded" / "lee"
    identity = shardmap.read(root).manifest["shards"][shardmap.IMPORT]
    assert shardmap.place(root / shardmap.shard_name(1)) == shardmap.Place("lee", 1, SHARDS, identity)
    assert shardmap.place(root) is None and shardmap.place(data / "whole" / "lee") is None
    shard = Table.load(root / shardmap.shard_name(1))
    place = shardmap.place(shard.directory)
    delta = Delta(shard.documents("documents"), shard.rows, shard.dim, 0)
    mine, theirs = owned(lee_docs, 1, "place"), owned(lee_docs, 2, "place")
    models = [WriteDocument.model_validate(d) for d in (mine, theirs)]
    assert len(writes.upsert_body(shard, None, models[:1], delta, place)["documents"]) == 1
    with pytest.raises(InvalidQuery, match=rf"^documents\[1\] \(id '{theirs['id']}'\): shard-002 owns this id"):
        writes.upsert_body(shard, None, models, delta, place)
    writes.check_ids_owned(place, [mine["id"]], delta)
    with pytest.raises(InvalidQuery, match=rf"^id '{theirs['id']}': shard-002 owns this id"):
        writes.check_ids_owned(place, [theirs["id"]], delta)
    writes.check_ids_owned(None, [theirs["id"]], delta)  # a table that is no shard takes every id


def test_remove_takes_the_shards_logs_along(data: Path, tables: tuple[Table, ShardedTable], tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data / "sharded", copy)
    logs = copy / writelog.DIRECTORY / "lee"
    assert sorted(p.name for p in logs.glob("*.log")) == [f"{shardmap.shard_name(s)}.log" for s in range(SHARDS)]
    done = run(EXE, "remove", "lee", "--data-dir", copy)
    assert done.returncode == 0, done.stderr
    assert not (copy / "lee").exists() and not logs.exists()


def test_a_shard_scored_with_its_whole_tables_statistics_before_writes_answers_as_imported(data: Path) -> None:
    """The statistics a front gathers, summed, are the ones every shard's keyword index was built with: a shard
    scoring with them (its stored scores read back into term counts and scored again) answers as it stored."""
    shards = [Table.load(data / "sharded" / "lee" / shardmap.shard_name(s)) for s in range(SHARDS)]
    text = "police fire in Sydney police"
    parts = [dfs.gather(shard, None, [text]) for shard in shards]
    assert dfs.summed(parts) is None  # nothing written: the shards score with the whole table's already
    whole = dfs.summed([{**part, "written": True} for part in parts])
    assert (
        whole is not None
        and whole["documents"] == [sum(s.rows for s in shards)] * 2
        and set(whole["terms"]) == {"polic", "fire", "sydney"}
    )
    terms = {word: (version, live) for word, (version, live) in whole["terms"].items()}
    statistics = door.Statistics.of(tuple(whole["documents"]), tuple(whole["words"]), terms)  # type: ignore[arg-type]
    for shard in shards:
        for query in (
            Query(text=text, mode="keyword", k=30),
            Query(vector=shard.vectors[0].tolist(), text=text, mode="hybrid", k=10),
        ):
            (stored,) = door.run(shard, [query])
            query.statistics = statistics
            (scored,) = door.run(shard, [query])
            assert isinstance(stored, Result) and isinstance(scored, Result) and stored.hits
            assert [(h.row, h.score) for h in scored.hits] == [(h.row, h.score) for h in stored.hits]
    fewer = door.Statistics((1, 1), statistics.words, statistics.terms)  # past Statistics.of's own checks
    with pytest.raises(InvalidQuery, match="fewer documents"):
        door.run(shards[0], [Query(text=text, mode="keyword", k=5, statistics=fewer)])


def test_a_shard_scored_with_whole_statistics_keeps_its_keyword_state_with_the_table(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing written to merge, the door scores a query sent with the whole table's statistics over the
    table's one unwritten delta (``index.engine.delta.unwritten``): the live keyword index (each document's length)
    is made once per loaded table, for the searches and the statistics' gathering alike, not once per request."""
    made: list[Table] = []
    init = live_search.LiveKeyword.__init__

    def counted(self: live_search.LiveKeyword, table: Table, delta: Delta) -> None:
        made.append(table)
        init(self, table, delta)

    monkeypatch.setattr(live_search.LiveKeyword, "__init__", counted)
    shard = Table.load(data / "sharded" / "lee" / shardmap.shard_name(1))
    text = "police fire in Sydney"
    part = dfs.gather(shard, None, [text])
    whole = dfs.summed([{**part, "written": True}])
    assert whole is not None
    terms = {word: (version, live) for word, (version, live) in whole["terms"].items()}
    statistics = door.Statistics.of(tuple(whole["documents"]), tuple(whole["words"]), terms)  # type: ignore[arg-type]
    answers = []
    for _ in range(3):
        query = Query(text=text, mode="keyword", k=10, statistics=statistics)
        (answer,) = door.run(shard, [query])
        assert isinstance(answer, Result) and answer.hits
        answers.append([(h.row, h.score) for h in answer.hits])
        assert dfs.gather(shard, None, [text]) == part
    assert made == [shard] and answers[0] == answers[1] == answers[2]
    assert delta_module.unwritten(shard) is delta_module.unwritten(shard)
