"""The write log (``index.store.writelog``): framed, checksummed records; a torn or corrupt tail is cut with a warning
naming the bytes lost, a damaged record in the middle refuses the log naming it; appenders in several processes
take turns; a cut keeps the records after the position it covered. Payloads are real text (the GPL's paragraphs).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import multiprocessing
import os
import random
import shutil
import struct
import subprocess
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from index.errors import InvalidQuery
from index.store import writelog
from tests.logs import lock_is_free, read_only, recovered

PARAGRAPHS = [p for p in Path("/usr/share/common-licenses/GPL-3").read_text().split("\n\n") if p.strip()][:40]


@pytest.fixture(autouse=True, params=["whole", "in pieces"])
def read_bytes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test reads its log at once (its records fit in one read), and a record at a time: a read shorter than
    a record, so that each piece is one record read again whole."""
    if request.param == "in pieces":
        monkeypatch.setattr(writelog, "READ_BYTES", 64)


def body(i: int) -> dict[str, Any]:
    return {"op": "upsert", "documents": [{"id": f"gpl-{i}", "text": PARAGRAPHS[i % len(PARAGRAPHS)], "vector": [i]}]}


def write(path: Path, count: int, first: int = 1) -> list[writelog.Record]:
    with writelog.appending(path) as log:
        return [log.append(first + i, body(first + i - 1)) for i in range(count)]


def test_records_come_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    written = write(path, 12)
    assert path.stat().st_size == written[-1].end
    again = recovered(path)
    assert [r.seq for r in again] == list(range(1, 13))
    assert [r.body for r in again] == [body(i) for i in range(12)]
    assert [(r.offset, r.end) for r in again] == [(r.offset, r.end) for r in written]


def test_reading_only_what_was_appended(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    first = write(path, 3)
    records, offset, inode = writelog.read_new(path, 0, 0, None)
    assert [r.seq for r in records] == [1, 2, 3] and offset == first[-1].end and inode == path.stat().st_ino
    assert writelog.read_new(path, offset, 3, inode) == ([], offset, inode)
    write(path, 2, first=4)
    records, end, _ = writelog.read_new(path, offset, 3, inode)
    assert [r.seq for r in records] == [4, 5] and end == path.stat().st_size
    assert writelog.read_new(tmp_path / "none.log", 0, 0, None) == ([], 0, -1)
    writelog.cut(path, 4)  # a compaction: another, shorter file; read from its start
    records, end, again = writelog.read_new(path, end, 5, inode)
    assert [r.seq for r in records] == [5] and end == path.stat().st_size and again != inode


@pytest.mark.parametrize("keep", [1, 5, writelog.HEADER.size, writelog.HEADER.size + 40, -1])
def test_a_torn_tail_is_cut_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture, keep: int) -> None:
    path = tmp_path / "t.log"
    records = write(path, 6)
    last = records[-1]
    cut_at = last.offset + keep if keep >= 0 else last.end - 1
    with path.open("r+b") as handle:
        handle.truncate(cut_at)
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        kept = recovered(path)
    assert [r.seq for r in kept] == [1, 2, 3, 4, 5]
    assert path.stat().st_size == last.offset
    lost = cut_at - last.offset
    assert f"cut {lost} bytes at byte {last.offset}" in caplog.text and "sequence number 5" in caplog.text
    write(path, 1, first=6)  # appending goes on after the cut
    assert [r.seq for r in recovered(path)] == [1, 2, 3, 4, 5, 6]


def test_a_corrupt_last_record_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "t.log"
    records = write(path, 4)
    data = bytearray(path.read_bytes())
    data[records[-1].end - 3] ^= 0x20  # a flipped bit in the last record's payload
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        assert [r.seq for r in recovered(path)] == [1, 2, 3]
    size = records[-1].end - records[-1].offset
    assert f"cut {size} bytes at byte {records[-1].offset} (a checksum that does not match)" in caplog.text


def test_a_checksummed_last_record_that_is_no_json_object_is_cut_as_a_damaged_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole, checksummed frame in sequence whose payload is no JSON object holds no write a server acknowledged
    (a server writes JSON objects): last in the log, it is a damaged tail, cut with the torn tail's warning, and
    the writes go on after the last good record."""
    path = tmp_path / "t.log"
    records = write(path, 2)
    with path.open("ab") as handle:
        handle.write(raw_frame(3, b"[1, 2]"))
    size = path.stat().st_size
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        assert [r.seq for r in recovered(path)] == [1, 2]
    assert path.stat().st_size == records[-1].end
    lost = f"cut {size - records[-1].end} bytes at byte {records[-1].end} (a payload that is not a JSON object)"
    assert f"{lost}; last good record: sequence number 2" in caplog.text, caplog.text
    write(path, 1, first=3)
    assert [(r.seq, r.body) for r in recovered(path)][-1] == (3, body(2))


def test_records_no_server_writes_longer_than_a_piece_end_the_log_as_a_damaged_tail(tmp_path: Path) -> None:
    """Such records at the end of the log longer than a piece of it (read a record at a time): the load reads the
    writes before them and refuses nothing; the next writer cuts what the load's check did not, and appends after
    the last good record."""
    path = tmp_path / "t.log"
    records = write(path, 2)
    with path.open("ab") as handle:
        handle.write(b"".join(raw_frame(seq, b'"' + b"x" * 40 + b'"') for seq in range(3, 8)))
    assert [r.seq for r in recovered(path)] == [1, 2]
    with writelog.appending(path) as log:
        assert log.new_records(records[-1].end, 2, log.inode) == ([], records[-1].end)
        log.append(3, body(2))
    assert [(r.seq, r.body) for r in recovered(path)] == [(1, body(0)), (2, body(1)), (3, body(2))]


@pytest.mark.parametrize("reader", ["read_new", "read_pieces", "new_records"])
def test_every_reader_takes_a_checksummed_last_record_that_is_no_json_object_for_a_damaged_tail(
    tmp_path: Path, reader: str
) -> None:
    """A replica's read and a read under a shared lock leave that record unread, as they leave a torn tail, for the
    writer to cut; a writer's read before it appends cuts it, so that its record follows the last good one. None
    refuses the log over it, nor reads it as a write."""
    path = tmp_path / "t.log"
    records = write(path, 2)
    with path.open("ab") as handle:
        handle.write(raw_frame(3, b'"gpl"'))
    before = path.read_bytes()
    if reader == "read_new":
        found, end, _ = writelog.read_new(path, records[0].end, 1, path.stat().st_ino)
        assert [r.seq for r in found] == [2] and end == records[-1].end
    elif reader == "read_pieces":
        assert [r.seq for piece in writelog.read_pieces(path) for r in piece] == [1, 2]
    else:
        with writelog.appending(path) as log:
            found, end = log.new_records(records[0].end, 1, log.inode)
            assert [r.seq for r in found] == [2] and end == records[-1].end
        assert path.stat().st_size == records[-1].end
        return
    assert path.read_bytes() == before


def test_a_checksummed_record_that_is_no_json_object_with_good_records_after_it_refuses_the_log(
    tmp_path: Path,
) -> None:
    """Not last, such a record is damage in the middle: the writes after it may have been acknowledged."""
    path = tmp_path / "t.log"
    records = write(path, 1)
    junk = raw_frame(2, b"[1, 2]")
    with path.open("ab") as handle:
        handle.write(junk)
    write(path, 1, first=3)
    before = path.read_bytes()
    message = (
        f"record at byte {records[0].end} (after sequence number 1) is damaged: a payload that is not a JSON object; "
        f"good records follow at byte {records[0].end + len(junk)}, so it is not a torn tail"
    )
    with pytest.raises(writelog.LogCorrupt) as refused:
        recovered(path)
    assert str(refused.value) == message and path.read_bytes() == before


@pytest.mark.parametrize("where", ["payload", "length", "mark"])
def test_a_damaged_middle_record_refuses_the_log(tmp_path: Path, where: str) -> None:
    path = tmp_path / "t.log"
    records = write(path, 5)
    damaged = records[2]
    at = {"payload": damaged.end - 10, "length": damaged.offset + 3, "mark": damaged.offset}[where]
    data = bytearray(path.read_bytes())
    data[at] ^= 0x41
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(writelog.LogCorrupt, match=f"record at byte {damaged.offset} \\(after sequence number 2\\)"):
        recovered(path)
    assert path.read_bytes() == before  # nothing cut: the records after it are acknowledged writes
    with pytest.raises(writelog.LogCorrupt):
        writelog.read_new(path, records[1].end, 2, path.stat().st_ino)


def test_a_damaged_tail_met_while_appending_is_cut_first(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The writer cuts it with the load's warning, naming the last good record too (it named none)."""
    path = tmp_path / "t.log"
    records = write(path, 3)
    torn = writelog.frame(4, body(3))[:-9]
    with path.open("ab") as handle:
        handle.write(torn)  # torn after this process read the log
    assert writelog.read_new(path, records[-1].end, 3, path.stat().st_ino)[:2] == ([], records[-1].end)  # not read
    loaded = tmp_path / "copy" / tmp_path.name / "t.log"  # the same name, as a record names its log
    loaded.parent.mkdir(parents=True)
    shutil.copyfile(path, loaded)
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        assert [r.seq for r in recovered(loaded)] == [1, 2, 3]
        said = [[r.getMessage().replace(str(loaded), str(path)) for r in caplog.records]]
        caplog.clear()
        with writelog.appending(path) as log:
            assert log.new_records(records[-1].end, 3, log.inode) == ([], records[-1].end)
            log.append(4, body(9))
        said.append([r.getMessage() for r in caplog.records])
    assert said[0] == said[1] and len(said[1]) == 1, said
    assert f"cut {len(torn)} bytes at byte {records[-1].end} (" in said[1][0], said
    assert said[1][0].endswith("; last good record: sequence number 3"), said
    assert [(r.seq, r.body) for r in recovered(path)][-1] == (4, body(9))


def test_a_replica_on_a_read_only_mount_reads_and_cuts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.log"
    write(path, 3)
    with path.open("ab") as handle:
        handle.write(b"\xe5\x1f torn")
    size = path.stat().st_size
    real_open = os.open

    def read_only(name: Any, flags: int, *args: Any) -> int:
        if flags & (os.O_RDWR | os.O_WRONLY):
            raise OSError(errno.EROFS, "Read-only file system", str(name))
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", read_only)
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        assert [r.seq for r in recovered(path)] == [1, 2, 3]
    assert path.stat().st_size == size and "7 bytes at byte" in caplog.text and "not read" in caplog.text
    monkeypatch.setattr(writelog, "READ_BYTES", 256)  # a piece a record
    pieces = writelog.recover_pieces(path)
    assert [r.seq for r in next(pieces)] == [1]
    assert lock_is_free(path, real_open)  # the writer (another instance, the mount its own) appends meanwhile
    assert [r.seq for piece in pieces for r in piece] == [2, 3]


def test_a_read_only_reader_lets_a_writer_append_while_it_parses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """read_pieces (``embedding-index verify``'s replay of a log, an import's look for writes it cannot take) reads
    as a replica does: the frames checked under a shared lock, the records parsed without it, so that a server's
    write appends meanwhile instead of waiting for the whole read; the reader stops at the end it checked, a torn
    tail left (with a warning) for the writer to cut."""
    path = tmp_path / "t.log"
    write(path, 3)
    with path.open("ab") as handle:
        handle.write(b"\xe5\x1f torn")
    monkeypatch.setattr(writelog, "READ_BYTES", 256)  # a piece a record
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        pieces = writelog.read_pieces(path)
        assert [r.seq for r in next(pieces)] == [1]
        assert lock_is_free(path)
        with writelog.appending(path, sync=False) as log:  # the writer cuts the torn tail, then appends
            log.new_records(0, 0, None)
            log.append(4, body(3))
        assert [r.seq for piece in pieces for r in piece] == [2, 3]
    assert "7 bytes at byte" in caplog.text and "not read" in caplog.text
    assert [r.seq for r in read_only(path)] == [1, 2, 3, 4]


@pytest.mark.parametrize("cuts", [1, 2])
def test_a_read_only_reader_says_when_the_file_it_reads_is_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuts: int
) -> None:
    """read_pieces behind a compaction's cut reads the replaced file whole; a second cut empties that file, and the
    reader stopped there as if the log ended, so ``verify`` said a log was good that it had not read whole. It now
    raises LogReplaced, naming where it stopped."""
    monkeypatch.setattr(writelog, "READ_BYTES", 256)  # a piece a record: the read is under way after the first
    path = tmp_path / "t.log"
    write(path, 8)
    pieces = writelog.read_pieces(path)
    given = [r.seq for r in next(pieces)]
    assert writelog.cut(path, 4) == 4  # a compaction folded 1..4: the file being read is the replaced one now
    write(path, 2, first=9)
    if cuts == 1:
        assert given + [r.seq for piece in pieces for r in piece] == list(range(1, 9))
        return
    assert writelog.cut(path, 9) == 1  # another: the file being read is emptied
    with pytest.raises(writelog.LogReplaced, match=r"t\.log was emptied while it was read \(at byte \d+ of \d+\)"):
        list(pieces)


def test_a_gap_in_the_sequence_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    write(path, 2)
    write(path, 2, first=4)
    with pytest.raises(writelog.LogCorrupt, match="sequence number 4 after 2"):
        recovered(path)


def test_a_whole_record_out_of_sequence_at_the_end_is_not_cut(tmp_path: Path) -> None:
    """A last record whose frame is whole and checksummed may hold an answered write: damage, not a torn tail."""
    path = tmp_path / "t.log"
    write(path, 2)
    write(path, 1, first=4)
    size = path.stat().st_size
    with pytest.raises(writelog.LogCorrupt, match="is damaged: sequence number 4 after 2; it is whole"):
        recovered(path)
    assert path.stat().st_size == size


def _append_many(path: str, worker: int, count: int) -> None:
    for i in range(count):
        with writelog.appending(Path(path)) as log:
            records, _ = log.new_records(0, 0, None)
            last = records[-1].seq if records else 0
            log.append(last + 1, {"op": "delete", "ids": [f"w{worker}-{i}"]})


def test_appenders_in_several_processes_take_turns(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(path), w, 40)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    records = recovered(path)
    assert [r.seq for r in records] == list(range(1, 121))
    ids = sorted(r.body["ids"][0] for r in records)
    assert ids == sorted(f"w{w}-{i}" for w in range(3) for i in range(40))


def test_a_cut_keeps_the_records_after_what_it_covered(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    write(path, 7)
    assert writelog.cut(path, 4) == 3
    kept = recovered(path)
    assert [r.seq for r in kept] == [5, 6, 7] and kept[0].offset == 0
    assert [r.body for r in kept] == [body(4), body(5), body(6)]
    write(path, 1, first=8)
    assert [r.seq for r in recovered(path)] == [5, 6, 7, 8]


def test_a_cut_parses_the_last_payload_alone_under_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cut reads the whole log under its exclusive lock, the writes of every worker waiting: it checks the frames
    (the records to keep, a torn tail) without parsing their payloads, as a load's check does (over a log of
    184 MiB: 0.53-0.78 s, 4.5-5.3 s when it parsed them), but for the last record's, which no server may have
    written (a damaged tail then)."""
    path = tmp_path / "t.log"
    write(path, 7)
    parsed: list[bytes] = []
    loads = writelog._loads
    monkeypatch.setattr(writelog, "_loads", lambda payload: parsed.append(payload) or loads(payload))
    assert writelog.cut(path, 4) == 3
    assert parsed == [writelog.frame(7, {**body(6), "table": writelog.log_owner(path)})[writelog.HEADER.size :]]
    assert [(r.seq, r.body) for r in recovered(path)] == [(i + 1, body(i)) for i in range(4, 7)]


def test_a_cut_with_nothing_to_drop_leaves_the_log_as_it_is(tmp_path: Path) -> None:
    """Readers take a new file for a cut: a log holding no record up to ``covered`` keeps its file."""
    path = tmp_path / "t.log"
    write(path, 3)
    inode = path.stat().st_ino
    assert writelog.cut(path, 0) == 3
    assert path.stat().st_ino == inode and not writelog.previous_path(path).exists()
    assert writelog.cut(path, 2) == 1 and path.stat().st_ino != inode


def test_a_reader_behind_a_cut_reads_what_it_had_not_read_from_the_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    write(path, 3)
    records, offset, inode = writelog.read_new(path, 0, 0, None)  # a reader on the older version has read 1..3
    write(path, 4, first=4)
    assert writelog.cut(path, 5) == 2  # a compaction folded 1..5 into a version the reader has not loaded yet
    records, end, again = writelog.read_new(path, offset, 3, inode)
    assert [r.seq for r in records] == [4, 5, 6, 7] and end == path.stat().st_size and again != inode
    assert [r.body for r in records] == [body(i) for i in range(3, 7)]
    write(path, 1, first=8)
    with writelog.appending(path) as log:  # a writer on the older version catches up the same way
        assert [r.seq for r in log.new_records(offset, 3, inode)[0]] == [4, 5, 6, 7, 8]
    assert writelog.cut(path, 7) == 1  # a second cut: the file the reader read is emptied; it gets the file this
    assert [r.seq for r in writelog.read_new(path, offset, 3, inode)[0]] == [6, 7, 8]  # cut replaced: 4, 5 missing


@pytest.mark.parametrize("cuts", [1, 2])
def test_a_load_replaying_while_the_log_is_appended_and_cut_gets_each_write_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuts: int
) -> None:
    """A load replays the records up to the end it checked without the lock, so writes and a compaction's cut may
    come meanwhile: the replay gives the records of the file it checked, each once, and none appended after that
    end; a reader going on from the last record given, in that file (``read_new``), gets each later write once,
    from the replaced file and then the new one. A second cut empties the file being replayed: the replay stops
    there without an error, and the reader going on sees the gap (``service.live`` replays the new file again)."""
    monkeypatch.setattr(writelog, "READ_BYTES", 256)  # a piece a record: the replay is under way after the first
    path = tmp_path / "t.log"
    write(path, 12)
    inode = path.stat().st_ino
    pieces = writelog.recover_pieces(path)
    given = list(next(pieces))
    assert given[-1].seq < 12 and lock_is_free(path)
    write(path, 3, first=13)  # another worker's writes, after the end the load checked
    assert writelog.cut(path, 8) == 7  # a compaction folded 1..8: the file being replayed is the replaced one now
    write(path, 2, first=16)
    if cuts == 2:
        assert writelog.cut(path, 14) == 3  # another: the file being replayed is emptied
    given += [record for piece in pieces for record in piece]
    seqs = [r.seq for r in given]
    later, end, _ = writelog.read_new(path, given[-1].end, given[-1].seq, inode)
    if cuts == 1:
        assert seqs == list(range(1, 13)) and [r.body for r in given] == [body(i) for i in range(12)]
        assert [r.seq for r in later] == list(range(13, 18)) and end == path.stat().st_size
        assert [r.body for r in later] == [body(i) for i in range(12, 17)]
    else:
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) < 12  # what was read before the file was emptied
        # the file the second cut replaced, whole, then the new one's: the gap after the replay shows (the load
        # reads the new file again)
        assert [r.seq for r in later] == list(range(9, 18)) and later[0].seq > seqs[-1] + 1


def test_a_payload_must_be_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        writelog.frame(1, {"score": float("nan")})


@pytest.mark.parametrize("sync", [True, False])
def test_a_record_is_fsynced_before_append_returns_unless_sync_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    path = tmp_path / "t.log"
    write(path, 1)
    synced: list[int] = []
    real_fsync = os.fsync

    def counting(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting)
    with writelog.appending(path, sync=sync) as log:
        log.append(2, body(1))
        assert len(synced) == (1 if sync else 0)  # on disk before the write is answered
    assert [r.seq for r in recovered(path)] == [1, 2]


def _lock_exclusively_later(path: str) -> None:
    """In a forked child: once the parent's reader has closed the log, take an exclusive lock on it at once."""
    time.sleep(1.0)
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os._exit(1)  # a lock inherited from the parent, which no one in this process can release
    os._exit(0)


def test_a_fork_waits_until_no_thread_has_a_log_open(tmp_path: Path) -> None:
    """A server's supervisor forks its workers while its compaction thread reads the logs: a child forked while
    the log was open would share that open file and its lock for its whole life, and its own recover (an
    exclusive lock) would wait forever. The fork waits for the reader instead."""
    path = tmp_path / "lee.log"
    path.write_bytes(b"")
    inside, release = threading.Event(), threading.Event()

    def reader() -> None:
        with writelog._locked(path, os.O_RDONLY, fcntl.LOCK_SH):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=reader)
    thread.start()
    assert inside.wait(10)
    started = time.monotonic()  # before the timer starts: the fork cannot return before the timer fires
    threading.Timer(0.3, release.set).start()
    child = multiprocessing.get_context("fork").Process(target=_lock_exclusively_later, args=(str(path),))
    child.start()
    waited = time.monotonic() - started
    thread.join(10)
    child.join(20)
    assert child.exitcode == 0, "the child inherited the reader's lock on the log"
    assert waited >= 0.2, waited  # the fork waited for the reader to close the log


def test_a_reader_that_had_read_no_file_reads_the_one_a_cut_replaced(tmp_path: Path) -> None:
    path = tmp_path / "t.log"  # no log yet when the reader's version was loaded: it has read no file
    write(path, 5)
    assert writelog.cut(path, 3) == 2  # a compaction folded 1..3 into a version the reader has not loaded
    write(path, 1, first=6)
    records, end, inode = writelog.read_new(path, 0, 0, None)
    assert [r.seq for r in records] == [1, 2, 3, 4, 5, 6] and end == path.stat().st_size
    assert [r.body for r in records] == [body(i) for i in range(6)] and inode == path.stat().st_ino
    with writelog.appending(path) as log:  # a writer on the older version catches up the same way
        assert [r.seq for r in log.new_records(0, 0, None)[0]] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("shard", [False, True])
def test_the_first_record_of_a_new_log_waits_for_its_directory_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shard: bool
) -> None:
    """Two writers of a table with no log yet: one makes the log's folder and file, the other takes the lock first
    and appends. The record is answered only once the entries of the file and its folders are durable, whichever
    writer made them."""
    data = tmp_path / "data"
    folder = data / writelog.DIRECTORY / "lee" if shard else data / writelog.DIRECTORY
    path = folder / ("shard-000.log" if shard else "lee.log")
    folder.mkdir(parents=True)  # the other writer's, its folders' entries not yet synced
    created = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # and its file: its lock comes later
    events: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(writelog.artifact, "fsync_dir", lambda d: events.append(str(d.relative_to(tmp_path))))
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("record"), real_fsync(fd)))
    try:
        write(path, 1)
    finally:
        os.close(created)
    folders = [str(f.relative_to(tmp_path)) for f in (data, data / writelog.DIRECTORY, folder)]
    assert events == [*dict.fromkeys(folders), "record"]
    events.clear()
    write(path, 1, first=2)
    assert events == ["record"]  # a log with records: its entries were synced before the first


def test_a_record_names_its_log_and_a_copy_under_another_name_is_refused(tmp_path: Path) -> None:
    logs = tmp_path / writelog.DIRECTORY
    (logs / "t").mkdir(parents=True)
    written = write(logs / "a.log", 3)
    assert b'"table":"a"' in (logs / "a.log").read_bytes()
    assert [r.body for r in recovered(logs / "a.log")] == [r.body for r in written] == [body(i) for i in range(3)]
    copy = logs / "b.log"
    copy.write_bytes((logs / "a.log").read_bytes())
    said = r"its record at byte 0 \(sequence 1\) was written to the log of 'a', not of 'b'"
    for reading in (recovered, read_only, lambda p: writelog.read_new(p, 0, 0, None)):
        with pytest.raises(writelog.LogMismatch, match=said):
            reading(copy)
    with pytest.raises(writelog.LogMismatch, match=said), writelog.appending(copy) as log:
        log.new_records(0, 0, None)
    assert copy.read_bytes() == (logs / "a.log").read_bytes()  # nothing cut
    shard = logs / "t" / "shard-001.log"  # a shard's log names its table and shard
    write(shard, 1)
    assert writelog.log_owner(shard) == "t/shard-001" and len(read_only(shard)) == 1
    (logs / "t" / "shard-000.log").write_bytes(shard.read_bytes())
    with pytest.raises(writelog.LogMismatch, match="written to the log of 't/shard-001', not of 't/shard-000'"):
        read_only(logs / "t" / "shard-000.log")
    unnamed = logs / "c.log"  # a record written before records named their log fits any
    unnamed.write_bytes(writelog.frame(1, body(0)))
    assert [r.body for r in recovered(unnamed)] == [body(0)]
    assert writelog.log_owner(writelog.previous_path(shard)) == "t/shard-001"
    assert writelog.log_owner(writelog.previous_path(logs / "a.log")) == "a"


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """``directory`` on a tmpfs of ``size`` that fills up (ENOSPC itself); skipped where mounting needs root."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root")
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)], check=False)
    if mounted.returncode != 0:
        pytest.skip("this system does not allow mounting a tmpfs")
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=True)


def fill(path: Path, seq: int = 0) -> int:
    """Records appended to the log at ``path`` (after sequence ``seq``) until the disk refuses one; the last
    sequence written."""
    with writelog.appending(path) as log:
        while True:
            try:
                log.append(seq + 1, body(seq))
            except writelog.LogWriteFailed as error:
                assert "No space left on device" in error.message, error.message
                return seq
            seq += 1


def test_a_full_disk_gets_back_the_room_of_the_file_a_cut_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with small_tmpfs(tmp_path / writelog.DIRECTORY, "64k") as logs:
        path = logs / "t.log"
        last = fill(path)
        assert last > 10
        size = path.stat().st_size
        assert writelog.cut(path, last) == 0  # every record folded into a new version: the log is empty again
        assert writelog.previous_path(path).stat().st_size == size
        with caplog.at_level(logging.WARNING, logger="index.store.writelog"), writelog.appending(path) as log:
            log.append(last + 1, body(last))  # the disk is full of the replaced file: it is removed for the record
        assert writelog.previous_path(path).stat().st_size == 0  # emptied, not removed (its inode stays taken)
        assert [r.seq for r in recovered(path)] == [last + 1]
        assert f"the disk is full: emptied the file the last cut replaced ({size} bytes)" in caplog.text
        again = fill(path, last + 1)  # room for as many records again, then a full disk refuses the next as before
        assert again - last > 10
        assert [r.seq for r in recovered(path)] == list(range(last + 1, again + 1))


def test_a_full_disk_never_empties_the_log_a_killed_cut_left_as_its_replaced_file(tmp_path: Path) -> None:
    """A cut killed between linking the log as the file it replaces and renaming its new file over the log leaves
    the log under both names. A write on a full disk emptied that "replaced file" for its room, so emptied the log,
    then wrote its record into it: every earlier record was lost, and the write answered. The link goes instead;
    the write is refused, the log whole."""
    with small_tmpfs(tmp_path / writelog.DIRECTORY, "64k") as logs:
        path = logs / "t.log"
        last = fill(path)
        os.link(path, writelog.previous_path(path))  # what the killed cut left
        with writelog.appending(path) as log, pytest.raises(writelog.LogWriteFailed, match="No space left"):
            log.append(last + 1, body(last))
        assert [r.seq for r in recovered(path)] == list(range(1, last + 1))
        assert not writelog.previous_path(path).exists()


def test_a_cut_on_a_full_disk_frees_the_file_the_last_cut_replaced_first(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / writelog.DIRECTORY, "64k") as logs:
        path = logs / "t.log"
        seq = 0
        with writelog.appending(path) as log:
            while path.stat().st_size < 28 << 10:  # less than half the disk
                seq += 1
                log.append(seq, body(seq - 1))
        assert writelog.cut(path, 2) == seq - 2  # the replaced file kept beside the log: the disk nearly full
        assert writelog.cut(path, 4) == seq - 4  # its new file fits in the room of the file it replaces
        assert [r.seq for r in recovered(path)] == list(range(5, seq + 1))
        assert [r.seq for r in read_only(writelog.previous_path(path))] == list(range(3, seq + 1))
        assert not list(logs.glob("*.cut"))


def test_a_record_over_the_largest_a_reader_takes_is_refused_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record longer than ``MAX_RECORD`` (which a reader takes for a damaged length) would be answered, then cut
    as a torn tail by the next reader: it is refused before anything is written (a delete by a filter that matches
    millions of documents, whose record lists their ids)."""
    path = tmp_path / "t.log"
    write(path, 2)
    size = path.stat().st_size
    monkeypatch.setattr(writelog, "MAX_RECORD", 3_000)
    ids = [f"gpl-{i}" for i in range(1_000)]
    with writelog.appending(path) as log, pytest.raises(InvalidQuery) as refused:
        log.append(3, {"op": "delete", "ids": ids})
    assert refused.value.message.startswith(
        "this write's record would be 9,957 bytes, more than the write log takes in one (3,000 bytes)"
    )
    assert path.stat().st_size == size
    write(path, 1, first=3)
    assert [r.seq for r in recovered(path)] == [1, 2, 3]


@pytest.mark.parametrize("covered", [0, 2])
def test_a_cut_cuts_a_torn_tail_too(tmp_path: Path, covered: int, caplog: pytest.LogCaptureFixture) -> None:
    """A writer killed in a record after the compaction read the log leaves a torn tail, never an answered write:
    the compaction's cut, once its version is published, cuts it as a writer or a restart would, rather than fail
    after publishing."""
    path = tmp_path / "t.log"
    write(path, 4)
    torn = writelog.frame(5, body(4))
    with path.open("ab") as handle:
        handle.write(torn[: len(torn) // 2])
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        assert writelog.cut(path, covered) == 4 - covered
    assert f"cut {len(torn) // 2} bytes" in caplog.text
    assert [r.seq for r in recovered(path)] == list(range(covered + 1, 5))
    write(path, 1, first=5)
    assert [r.seq for r in recovered(path)] == list(range(covered + 1, 6))


@pytest.mark.parametrize(
    "damage",
    [
        "partial header",
        "partial payload",
        "checksum last",
        "checksum middle",
        "no object last",
        "no objects last",
        "no object then torn",
    ],
)
def test_a_cut_and_a_load_treat_every_damaged_tail_alike(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A compaction's cut and a load check the frames with the same reader: a torn tail of any shape (a header cut
    short, a payload cut short, a checksum that does not match in the last record, whole checksummed records at the
    end whose payloads are no JSON object, a torn frame after them or not) is cut at the same byte with the same
    warning by both; a record damaged with good ones after it refuses the log in the same words, nothing cut."""
    logs = {}
    for caller in ("load", "cut"):
        path = tmp_path / caller / writelog.DIRECTORY / "t.log"  # the same log's name: frames of the same bytes
        path.parent.mkdir(parents=True)
        records = write(path, 4)
        data = bytearray(path.read_bytes())
        last, second = records[-1], records[1]
        if damage == "partial header":
            del data[last.offset + 7 :]
        elif damage == "partial payload":
            del data[last.end - 5 :]
        elif damage == "no object last":
            data[last.offset :] = raw_frame(4, b'"gpl"')
        elif damage == "no objects last":  # the last two: the tail from the first of them
            data[records[2].offset :] = raw_frame(3, b"[3]") + raw_frame(4, b"null")
        elif damage == "no object then torn":  # a record no server writes, then a record cut short: one tail
            data[records[2].offset :] = raw_frame(3, b"[3]") + data[last.offset : last.end - 5]
        else:
            data[(last if damage == "checksum last" else second).end - 3] ^= 0x20
        path.write_bytes(bytes(data))
        logs[caller] = path
    outcomes = {}
    for caller, path in logs.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
            try:
                outcome = len(recovered(path)) if caller == "load" else writelog.cut(path, 0)
            except writelog.LogCorrupt as exc:
                outcome = str(exc)
        said = [r.getMessage().replace(str(path), "t.log") for r in caplog.records]
        outcomes[caller] = (outcome, path.stat().st_size, said)
    if damage == "checksum middle":
        assert (
            outcomes["load"][0]
            == outcomes["cut"][0]
            == (
                f"record at byte {second.offset} (after sequence number 1) is damaged: a checksum that does not match; "
                f"good records follow at byte {second.end}, so it is not a torn tail"
            )
        )
        assert outcomes["load"][1] == outcomes["cut"][1] == len(data)
    else:
        kept = 2 if damage in ("no objects last", "no object then torn") else 3
        assert outcomes["load"][:2] == outcomes["cut"][:2] == (kept, records[kept].offset), outcomes
        assert outcomes["load"][2] == outcomes["cut"][2] and len(outcomes["cut"][2]) == 1, outcomes
        assert f"cut {len(data) - records[kept].offset} bytes at byte {records[kept].offset} (" in outcomes["cut"][2][0]


def raw_frame(seq: int, payload: bytes) -> bytes:
    """A frame of ``payload`` as it is, which ``writelog.frame`` may not make (NaN, an escaped lone surrogate)."""
    crc = zlib.crc32(struct.pack("<Q", seq) + payload)
    return writelog.HEADER.pack(writelog.MARK, len(payload), seq, crc) + payload


def test_records_read_as_the_standard_parser_reads_them(tmp_path: Path) -> None:
    """The log is parsed by orjson where it gives the same values, types included (``repr`` tells 1 from 1.0 and -0.0
    from 0.0), as json: floats to the bit, integers beyond 64 bits (which orjson reads as floats), non-ASCII text."""
    rng = random.Random(5)
    floats = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(3000)]
    floats = [f for f in floats if math.isfinite(f)] + [5e-324, 1.7976931348623157e308, -0.0, 0.1, 1e16, 1e-05]
    floats += [float(struct.unpack("<f", struct.pack("<f", rng.uniform(-1e-3, 1e-3)))[0]) for _ in range(500)]
    ints = [0, -1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**30)]
    bodies = [
        {"op": "delete", "ids": ints},
        {"op": "upsert", "documents": [{"id": i, "vector": floats, "fields": {"n": i}} for i in ints]},
        {
            "op": "upsert",
            "documents": [{"id": "é😀\u2028\x00", "text": "a ,1234567890123456789 in text", "vector": [1]}],
        },
        {"op": "delete", "ids": [1234567890123456789, 123456789012345678, -1234567890123456789]},
    ]
    path = tmp_path / "t.log"
    with writelog.appending(path) as log:
        for seq, record in enumerate(bodies, 1):
            log.append(seq, record)
    read = read_only(path)
    payloads = [path.read_bytes()[r.offset + writelog.HEADER.size : r.end] for r in read]
    expected = [{k: v for k, v in json.loads(p).items() if k != "table"} for p in payloads]
    assert [repr(r.body) for r in read] == [repr(e) for e in expected] == [repr(b) for b in bodies]


def test_a_payload_orjson_refuses_reads_as_before(tmp_path: Path) -> None:
    """No record is written with NaN (refused, as before) or a lone surrogate, but a log that holds one reads as json
    read it."""
    with pytest.raises(ValueError, match="not JSON compliant"):
        writelog.frame(1, {"op": "upsert", "documents": [{"id": "a", "vector": [math.nan]}]})
    path = tmp_path / "t.log"
    path.write_bytes(
        raw_frame(1, b'{"op":"delete","ids":["\\ud800"]}') + raw_frame(2, b'{"op":"delete","ids":[],"x":NaN}')
    )
    first, second = read_only(path)
    assert first.body == {"op": "delete", "ids": ["\ud800"]}
    assert math.isnan(second.body["x"])


def held_at_most(read: Callable[[], object]) -> int:
    """The most bytes ``read()`` held at once (tracemalloc's peak)."""
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_log_in_pieces_holds_a_piece_not_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log four times as long is read, and cut, holding no more: a piece's bytes and records at a time; each piece
    is at most ``READ_BYTES`` of the log (or one longer record). Reading it whole holds four times as much."""
    monkeypatch.setattr(writelog, "READ_BYTES", 16 << 10)
    peaks: dict[str, list[int]] = {"pieces": [], "whole": [], "cut": []}
    for count in (300, 1200):
        path = tmp_path / f"{count}.log"
        write(path, count)
        for piece in writelog.recover_pieces(path):
            assert piece[-1].end - piece[0].offset <= writelog.READ_BYTES
        peaks["pieces"].append(held_at_most(lambda: [len(p) for p in writelog.recover_pieces(path)]))  # noqa: B023
        peaks["whole"].append(held_at_most(lambda: recovered(path)))  # noqa: B023
        peaks["cut"].append(held_at_most(lambda: writelog.cut(path, count - 5)))  # noqa: B023
        assert [r.seq for r in read_only(path)] == list(range(count - 4, count + 1))
    assert peaks["whole"][1] > 3 * peaks["whole"][0], peaks  # the measure sees a log held whole
    assert peaks["pieces"][1] < 1.5 * peaks["pieces"][0], peaks
    assert peaks["cut"][1] < 1.5 * peaks["cut"][0], peaks


@pytest.mark.parametrize("last", [True, False])
def test_a_record_of_an_op_no_server_writes_refuses_the_log(tmp_path: Path, last: bool) -> None:
    """A whole, checksummed record whose ``op`` is neither ``upsert`` nor ``delete`` (a log written by a newer
    release, or damage that kept its checksum) was skipped by the replay: the write it holds was lost without a
    word. Every reader refuses the log, naming the record and its op, and cuts nothing, last or not."""
    path = tmp_path / "t.log"
    records = write(path, 2)
    with writelog.appending(path) as log:
        odd = log.append(3, {"op": "merge", "ids": ["gpl-0"]})
    if not last:
        write(path, 1, first=4)
    before = path.read_bytes()
    message = (
        f"record at byte {odd.offset} (sequence 3) holds op 'merge', which this release does not write (upsert, "
        "delete): it was written by a newer release, or damaged; serve the table with that release, or move the "
        "log aside to serve this version without its writes"
    )
    with pytest.raises(writelog.LogCorrupt) as refused:
        recovered(path)
    assert str(refused.value) == message
    with pytest.raises(writelog.LogCorrupt, match="holds op 'merge'"):
        writelog.read_new(path, records[-1].end, 2, path.stat().st_ino)
    with pytest.raises(writelog.LogCorrupt, match="holds op 'merge'"):
        list(writelog.read_pieces(path))
    assert path.read_bytes() == before
