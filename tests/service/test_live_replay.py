"""A server's load of a documents table replays its write log a piece at a time, as a compaction does
(``Delta.replay_log``): what it holds meanwhile is the delta and a piece of the log, not the log's records."""

from __future__ import annotations

import multiprocessing
import signal
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.engine.delta import Delta
from index.engine.table import Table
from index.store import writelog
from service import live
from tests.index.build.test_compact_replay import data_dir, fresh, logged, writes
from tests.lee import Lee
from tests.logs import append_when_started, killed_in_a_record, read_only, writing_after_the_first_piece

__all__ = ["data_dir"]  # the fixture, taken from compaction's tests


def test_a_server_replays_its_log_a_piece_at_a_time(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four times the writes (the same documents written again) hold no more at once while ``live.attach`` replays
    them (tracemalloc's peak; read whole, the log's records held about four times as much), and the delta is the
    one the log replayed at once makes, read from the log file the server goes on reading."""
    monkeypatch.setattr(writelog, "READ_BYTES", 32 << 10)
    peaks = []
    for count in (250, 1000):
        path = logged(data_dir, writes(lee_docs, count))
        table = Table.load(data_dir / "lee", checksums=False)
        tracemalloc.start()
        try:
            live.attach(table, data_dir / "lee")
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        state = live.live_of(table)
        assert state is not None
        at_once = fresh(data_dir)
        at_once.replay(read_only(path))
        assert (state.delta.seq, state.delta.offset, state.inode) == (count, path.stat().st_size, path.stat().st_ino)
        assert list(state.delta.documents) == list(at_once.documents)
        assert np.array_equal(state.delta.deleted, at_once.deleted)
        for mine, theirs in zip(state.delta.matrix()[1:], at_once.matrix()[1:], strict=True):
            assert np.array_equal(mine, theirs)
    assert peaks[1] < 1.5 * peaks[0], peaks


def test_a_long_replay_says_how_far_it_is_every_few_seconds(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Between the line before and the line after, a line at most every few seconds (here: at every piece) with the
    share of the log replayed, as the builder's long steps print theirs."""
    monkeypatch.setattr(writelog, "READ_BYTES", 32 << 10)
    monkeypatch.setattr(live, "REPLAY_LINE_SECONDS", 0.0)
    path = logged(data_dir, writes(lee_docs, 250))
    size = path.stat().st_size
    with caplog.at_level("INFO", logger="service.live"):
        live.attach(Table.load(data_dir / "lee", checksums=False), data_dir / "lee")
    where = "table 'lee': write log lee.log"
    assert caplog.messages[0] == f"{where}: replaying {size / 2**20:.1f} MiB of writes ..."
    assert caplog.messages[-1].startswith(f"{where}: 250 records replayed in ")
    shown = caplog.messages[1:-1]
    pieces = [records[-1].end for records in writelog.read_pieces(path)][:-1]  # the last: the closing line's
    assert len(shown) == len(pieces) >= 3, caplog.messages
    for line, end in zip(shown, pieces, strict=True):
        expected = f"{where}: {100 * end / size:.0f}% replayed ({end / 2**20:.1f} of {size / 2**20:.1f} MiB) ..."
        assert line == expected


def counting(applied: list[int]) -> Callable[[Delta, Any], None]:
    """``Delta.apply`` that lists the sequence numbers it applies (those past the delta's) in ``applied``, in order."""
    apply = Delta.apply

    def apply_counted(delta: Delta, records: Any) -> None:
        records = list(records)
        applied.extend(r.seq for r in records if r.seq > delta.seq)
        apply(delta, records)

    return apply_counted


def test_a_write_waits_for_the_check_of_the_log_not_for_its_replay(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load locks the log while it checks its frames (and would cut a torn tail), not while it parses and applies
    its records: in the middle of the replay the lock is free and another writer's record is appended at once; the
    replay stops at the end it checked, and the loaded table takes that record up at its next read."""
    monkeypatch.setattr(writelog, "READ_BYTES", 32 << 10)
    count = 250
    path = logged(data_dir, writes(lee_docs, count))
    table = Table.load(data_dir / "lee", checksums=False)
    document = {"id": "during-replay", "text": lee_docs.texts[0], "vector": lee_docs.vectors[0].tolist()}
    body = {"op": "upsert", "documents": [{**document, "fields": lee_docs.record(0)}]}
    replay_then_write, appended = writing_after_the_first_piece(Delta.replay, path, count + 1, body)
    monkeypatch.setattr(Delta, "replay", replay_then_write)
    live.attach(table, data_dir / "lee")
    state = live.live_of(table)
    assert state is not None and appended and state.delta.seq == count, appended
    assert state.delta.offset == appended[0].offset  # the end the load checked, where the new record begins
    assert state.refresh().seq == count + 1 and "during-replay" in state.delta.documents
    assert state.delta.offset == path.stat().st_size


def test_writes_and_a_writer_killed_during_a_load_are_each_applied_once(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a load replays the log (its lock free), a writer is killed halfway through a record, then two others
    append: the load replays what it checked, its next reads take up every later write once, in order, and the torn
    record is never read (the next writer cuts it). The delta is the one the whole log makes replayed at once."""
    monkeypatch.setattr(writelog, "READ_BYTES", 32 << 10)
    count, each = 250, 12
    path = logged(data_dir, writes(lee_docs, count))
    table = Table.load(data_dir / "lee", checksums=False)
    context = multiprocessing.get_context("spawn")
    kill, started, appended = context.Event(), context.Event(), context.Value("i", 0)
    bodies = [
        [
            {
                "op": "upsert",
                "documents": [
                    {"id": f"w{w}-{i}", "text": lee_docs.texts[i], "vector": lee_docs.vectors[i].tolist()}
                    | {"fields": lee_docs.record(i)}
                ],
            }
            for i in range(w * each, (w + 1) * each)
        ]
        for w in range(2)
    ]
    writers = [context.Process(target=append_when_started, args=(str(path), b, started, appended)) for b in bodies]
    killed = context.Process(target=killed_in_a_record, args=(str(path), bodies[0][0], kill))
    for process in [*writers, killed]:
        process.start()
    replay, applied = Delta.replay, []

    def replay_slowly(delta: Delta, records: list[writelog.Record]) -> None:
        replay(delta, records)
        if not kill.is_set():  # after the first piece: the others write while the rest is replayed
            kill.set()
            killed.join(60)
            started.set()  # after the torn record: the first to append cuts it
            deadline = time.monotonic() + 30
            while appended.value < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
        time.sleep(0.01)

    monkeypatch.setattr(Delta, "replay", replay_slowly)
    monkeypatch.setattr(Delta, "apply", counting(applied))
    try:
        live.attach(table, data_dir / "lee")
        replayed, during = len(applied), appended.value
        for process in writers:
            process.join(60)
    finally:
        for process in [*writers, killed]:
            process.kill()
    assert killed.exitcode == -signal.SIGKILL and [p.exitcode for p in writers] == [0, 0]
    assert replayed == count and during >= 3, (replayed, during)  # the load replayed what it checked, others wrote
    state = live.live_of(table)
    assert state is not None
    state.refresh()
    total = count + 2 * each
    assert applied == list(range(1, total + 1)), applied[count - 5 :]  # each write once, in order
    assert (state.delta.seq, state.delta.offset) == (total, path.stat().st_size)  # the torn record cut, not read
    at_once = fresh(data_dir)
    at_once.replay(read_only(path))
    assert list(state.delta.documents) == list(at_once.documents)
    assert all(f"w{w}-{i}" in state.delta.documents for w in range(2) for i in range(w * each, (w + 1) * each))
    assert np.array_equal(state.delta.deleted, at_once.deleted)


def _load_slowly(directory: str, started: Any, appended: Any, written: Any, answers: Any) -> None:
    """A worker's load of the table at ``directory`` whose replay takes 10 ms a piece and, after its first, sets
    ``started`` and waits until another process has ``appended`` a write; once ``written`` is set, its next read:
    (the writes appended by the end of its replay; the sequences applied, in order; the documents it holds)."""
    writelog.READ_BYTES = 32 << 10
    replay, applied = Delta.replay, []

    def replay_slowly(delta: Delta, records: list[writelog.Record]) -> None:
        replay(delta, records)
        started.set()
        deadline = time.monotonic() + 60
        while appended.value < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.01)

    Delta.replay, Delta.apply = replay_slowly, counting(applied)  # type: ignore[method-assign]
    table = Table.load(Path(directory), checksums=False)
    live.attach(table, Path(directory))
    during = appended.value
    state = live.live_of(table)
    assert state is not None
    written.wait(120)
    answers.put((during, applied, list(state.refresh().documents)))


def test_two_workers_loading_while_others_write_each_apply_every_write_once(data_dir: Path, lee_docs: Lee) -> None:
    """Two workers start at once (two loads replaying the same log, each locking it for its own check) while
    another process appends: each applies every write once, in order, and both hold the documents the whole log
    makes."""
    count, each = 250, 20
    path = logged(data_dir, writes(lee_docs, count))
    context = multiprocessing.get_context("spawn")
    started, written, appended, answers = context.Event(), context.Event(), context.Value("i", 0), context.Queue()
    bodies = [
        {
            "op": "upsert",
            "documents": [{"id": f"w-{i}", "vector": lee_docs.vectors[i].tolist(), "fields": lee_docs.record(i)}],
        }
        for i in range(each)
    ]
    table = str(data_dir / "lee")
    loads = [context.Process(target=_load_slowly, args=(table, started, appended, written, answers)) for _ in "ab"]
    writer = context.Process(target=append_when_started, args=(str(path), bodies, started, appended))
    processes = [*loads, writer]
    for process in processes:
        process.start()
    try:
        writer.join(120)
        written.set()
        got = [answers.get(timeout=120) for _ in loads]
        for process in loads:
            process.join(60)
    finally:
        for process in processes:
            process.kill()
    assert [p.exitcode for p in processes] == [0, 0, 0]
    at_once = fresh(data_dir)
    at_once.replay(read_only(path))
    assert at_once.seq == count + each
    for during, applied, documents in got:
        assert during >= 1  # the writer had written by the end of its replay: the lock was left to it
        assert applied == list(range(1, count + each + 1)), applied[count - 5 :]
        assert documents == list(at_once.documents)
