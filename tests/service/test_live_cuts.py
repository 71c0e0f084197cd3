"""The write logs beside the versions compactions publish: a worker that keeps serving an older version while
compactions cut the log (in process: ``writelog``, ``live``, ``compact``), and which logs automatic compaction
counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.build.compact import compact
from index.engine.table import Table
from index.store import artifact, shardmap, writelog
from service import live
from service.compacting import AutoCompaction
from service.errors import ApiError
from tests.cli import run_cli
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.logs import recovered
from tests.service.conftest import lee_copy
from tests.service.test_compaction_faults import append, lee_with_log


def attached(data: Path) -> live.Live:
    """A worker's live state of the table's version now on disk (a table object of its own)."""
    table = Table.load(data / "lee")
    live.attach(table, data / "lee")
    state = live.live_of(table)
    assert state is not None
    return state


def refused(state: live.Live) -> str:
    """The 503 a worker's read of the table answers."""
    with pytest.raises(ApiError) as caught:
        state.refresh()
    assert caught.value.code == "not_ready"
    return caught.value.message


def written(state: live.Live, count: int) -> list[bool]:
    delta = state.refresh()
    return [delta.written(f"k/{i}") is not None for i in range(count)]


def test_a_record_damaged_while_a_worker_serves_says_how_to_repair_it_and_the_worker_reads_on_after(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Records written after a worker's last read, the middle one damaged (good records after it): the worker's
    reads answer 503 naming the record and saying what to do, which lasts; truncated at that record as it says, the
    log is read on by the same worker, without a reload."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    state = attached(data)
    append(path, lee_docs, 0, 3)
    records = recovered(path)
    damaged = bytearray(path.read_bytes())
    damaged[records[1].end - 5] ^= 0x10
    path.write_bytes(bytes(damaged))
    message = refused(state)
    assert f"record at byte {records[1].offset} (after sequence number 1) is damaged" in message
    assert message.endswith(
        "; nothing was cut: copy the log aside, then truncate it at that record (losing the writes after it) or "
        "restore it from a backup"
    )
    assert refused(state) == message
    with path.open("r+b") as log:
        log.truncate(records[1].offset)
    assert written(state, 3) == [True, False, False]


def test_a_worker_one_cut_behind_reads_on_and_one_two_cuts_behind_answers_503(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Two workers on the first version read writes 1 and 2. A compaction folds 1..4 and cuts the log; one worker
    reads then (one cut behind: it reads on from the file the cut replaced), the other not. A second compaction
    folds 5 and 6 and cuts again: the first worker, one cut behind again, still holds every write; the other has
    lost the file holding 3 and 4 (in the newer versions only), and answers 503 rather than without them."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    reading, idle = attached(data), attached(data)
    append(path, lee_docs, 0, 2)  # 1, 2
    assert written(reading, 2) == written(idle, 2) == [True, True]
    append(path, lee_docs, 2, 2)  # 3, 4: another worker's
    assert compact(data, "lee")["log_sequence"] == 4
    assert written(reading, 4) == [True] * 4
    append(path, lee_docs, 4, 2)  # 5, 6
    assert compact(data, "lee")["log_sequence"] == 6
    append(path, lee_docs, 6, 1)  # 7, to the file the second cut left
    assert written(reading, 7) == [True] * 7 and reading.delta.seq == 7
    assert "up to sequence 4" in refused(idle)
    assert "up to sequence 4" in refused(idle)  # until it loads the newest version
    newest = attached(data)
    assert written(newest, 7) == [False] * 6 + [True]  # 1..6 in the version, 7 in the log
    assert newest.delta.payload.find_rows([f"k/{i}" for i in range(6)]).min() >= 0


def test_a_worker_two_cuts_behind_that_read_every_write_the_first_folded_reads_on(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A compaction by hand folds writes 1 and 2, which a worker on the first version had read, and cuts the log;
    writes 3 and 4 follow, and the server's compaction folds them and cuts again, before the worker has loaded
    either version (the server reloads after its own compaction only). Writes 3 and 4 are in the file the second
    cut replaced: the worker reads them there and answers with every write, and writes after them, rather than
    answer 503 as if it had lost some."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    idle = attached(data)
    append(path, lee_docs, 0, 2)  # 1, 2
    assert written(idle, 2) == [True, True]
    assert compact(data, "lee")["log_sequence"] == 2
    append(path, lee_docs, 2, 2)  # 3, 4
    assert compact(data, "lee")["log_sequence"] == 4 and recovered(path) == []
    assert written(idle, 4) == [True] * 4 and idle.delta.seq == 4
    document = {"id": "k/4", "text": lee_docs.texts[4], "vector": lee_docs.vectors[4].tolist(), "fields": {}}
    seq, _ = idle.write(lambda delta: ({"op": "upsert", "documents": [document]}, None), sync=True)
    assert seq == 5 and [r.seq for r in recovered(path)] == [5]
    assert written(idle, 5) == [True] * 5
    assert written(attached(data), 5) == [False] * 4 + [True]  # 1..4 in the newest version, 5 in the log


@pytest.mark.parametrize("replaced", ["kept", "emptied"])
def test_a_worker_two_cuts_behind_an_empty_log_refuses_its_reads_and_writes(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, replaced: str
) -> None:
    """The second cut leaves the log empty: the worker two cuts behind, which lacks writes 3 and 4, learns it from
    the file that cut replaced (which holds 5 and 6), or, when that was emptied (a write that found the disk full
    took its room), from the newest version's manifest; it neither answers without them nor writes (the log stays
    empty), nor calls the next write to the log damage."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    idle = attached(data)
    append(path, lee_docs, 0, 2)
    assert written(idle, 2) == [True, True]
    append(path, lee_docs, 2, 2)
    compact(data, "lee")
    append(path, lee_docs, 4, 2)
    compact(data, "lee")
    assert recovered(path) == []
    if replaced == "emptied":
        assert writelog.empty_replaced(path) > 0
    lacking = "up to sequence 4" if replaced == "kept" else "up to sequence 6"
    assert lacking in refused(idle)
    document = {"id": "late/1", "text": lee_docs.texts[7], "vector": lee_docs.vectors[7].tolist(), "fields": {}}
    with pytest.raises(ApiError) as caught:
        idle.write(lambda delta: ({"op": "upsert", "documents": [document]}, None), sync=True)
    assert caught.value.code == "not_ready" and recovered(path) == []
    append(path, lee_docs, 6, 1)  # another worker's write, 7
    assert lacking in refused(idle)


def _orphan_log(path: Path, lee: Lee) -> None:
    """Writes left in a log no loaded table reads (the table was imported again, sharded otherwise, since)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with writelog.appending(path) as log:
        for i in range(3):
            document = {"id": f"gone/{i}", "text": lee.texts[i], "vector": lee.vectors[i].tolist(), "fields": {}}
            log.append(i + 1, {"op": "upsert", "documents": [document]})


@pytest.mark.parametrize("orphan", ["lee.log", "lee/shard-009.log"])
def test_a_log_the_table_does_not_read_calls_for_no_compaction(
    lee_docs: Lee, lee_imports: Path, tmp_path: Path, orphan: str
) -> None:
    """A sharded table with the log of the unsharded table it replaced, or of a shard it no longer has: automatic
    compaction counts only the logs of the table's own shards, so it neither compacts it again and again (each
    time finding nothing to fold, and reloading every worker) nor stops compacting it."""
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    _orphan_log(data / writelog.DIRECTORY / orphan, lee_docs)
    auto = AutoCompaction(data, rows=2, seconds=0)
    assert auto.due() == []
    _orphan_log(writelog.table_log(data / "lee" / shardmap.shard_name(0)), lee_docs)  # the table's own writes
    assert auto.due() == ["lee"]


def test_a_table_imported_again_over_a_compacted_one_numbers_its_writes_after_the_folded(
    lee_docs: Lee, tmp_path: Path
) -> None:
    """A compaction folded writes 1..3 and cut the log to nothing; the table is then imported again (``--force``).
    The new version keeps the sequence the older one folded, so the next write is 4: a worker still on the older
    version reads it as the write after its last, not as a damaged log."""
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    log = writelog.log_path(data, "lee")
    append(log, lee_docs, 0, 3)
    assert compact(data, "lee")["log_sequence"] == 3 and recovered(log) == []
    older = attached(data)
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data, "--force").code == 0
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 3
    newer = attached(data)
    document = {"id": "late/1", "text": lee_docs.texts[7], "vector": lee_docs.vectors[7].tolist(), "fields": {}}
    seq, _ = newer.write(lambda delta: ({"op": "upsert", "documents": [document]}, None), sync=True)
    assert seq == 4
    assert older.refresh().written("late/1") is not None


def test_a_log_replayed_at_load_says_so_before_and_after(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that loads a table with a write log says it replays it, before (seconds for tens of thousands of
    writes, between the load's line and the table's loaded line) and after (the records, what they left); a table
    with no log, nothing."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    with caplog.at_level("INFO", logger="service.live"):
        attached(data)
    assert not caplog.messages
    append(path, lee_docs, 0, 3)
    with writelog.appending(path) as log:
        log.append(4, {"op": "delete", "ids": ["lee-001", "k/2"]})
    with caplog.at_level("INFO", logger="service.live"):
        attached(data)
    before, after = caplog.messages
    assert before.startswith("table 'lee': write log lee.log: replaying ") and before.endswith(" MiB of writes ...")
    assert after.startswith("table 'lee': write log lee.log: 4 records replayed in ")
    assert after.endswith("s: 2 documents written, 1 row of the version deleted or replaced")


def test_a_worker_behind_a_log_emptied_by_hand_and_written_past_where_it_read_reads_it_again(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Two workers read writes 1 to 3; the log is emptied by hand, and another worker writes 6 documents into it
    from sequence 1, past the byte where the idle worker stopped reading. That byte starts no record of the log now:
    the idle worker reads the log again from its start, as the disk holds it, rather than answer 503 for damage
    that is not there, or hold the writes emptied away."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    idle = attached(data)
    append(path, lee_docs, 0, 3)  # 1..3: k/0..k/2
    assert written(idle, 3) == [True] * 3
    read = idle.delta.offset
    path.write_bytes(b"")
    append(path, lee_docs, 10, 6)  # 1..6: k/10..k/15
    assert path.stat().st_size > read and read not in [record.offset for record in recovered(path)]
    assert written(idle, 16) == [False] * 10 + [True] * 6
    assert idle.delta.seq == 6


def test_a_log_replaced_by_hand_after_a_cut_that_kept_the_writes_read_is_read_again_from_its_start(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A worker read writes 1 to 3 from a log a compaction's cut made, which kept them (written during the
    compaction): the file that cut replaced holds them too. The log is then replaced by hand by an empty file,
    the version left as it is: the log and the version no longer hold those writes, only the replaced file does,
    which is no longer the log. The worker reads the log again from its start (none of the three) rather than keep
    them, which would number its next write 4 and leave a gap that refuses the table at the next start."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    idle = attached(data)
    append(path, lee_docs, 0, 3)  # 1..3: k/0..k/2
    assert written(idle, 3) == [True] * 3
    previous = writelog.previous_path(path)
    previous.write_bytes(path.read_bytes())  # the file the cut replaced: another file, holding 1..3 too
    empty = path.with_name("empty")
    empty.touch()  # made while the log is there: another inode, never the log's own again
    empty.replace(path)
    assert written(idle, 3) == [False] * 3
    assert idle.delta.seq == 0


def test_a_record_damaged_past_where_a_worker_read_is_refused_without_the_log_read_again_from_its_start(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes 4 to 6 after a worker read 1 to 3, the fifth damaged (a good record after it): the bytes where the
    worker stopped still start a record, so the log was not emptied and written again. Each read answers 503 from
    where the worker stopped, as before, and never reads the whole log again from its start, which every request
    to the table would otherwise do, under the lock, for as long as the damage lasts."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    state = attached(data)
    append(path, lee_docs, 0, 3)
    assert written(state, 3) == [True] * 3
    append(path, lee_docs, 3, 3)
    records = recovered(path)
    damaged = bytearray(path.read_bytes())
    damaged[records[4].end - 5] ^= 0x10
    path.write_bytes(bytes(damaged))
    starts: list[int] = []
    read_new = writelog.read_new

    def read(path: Path, start: int, previous: int, inode: int | None) -> tuple[list[writelog.Record], int, int]:
        starts.append(start)
        return read_new(path, start, previous, inode)

    monkeypatch.setattr("index.store.read_new", read)  # as the worker reads it
    assert f"record at byte {records[4].offset} (after sequence number 4) is damaged" in refused(state)
    assert f"record at byte {records[4].offset} (after sequence number 4) is damaged" in refused(state)
    assert starts == [records[3].offset] * 2
