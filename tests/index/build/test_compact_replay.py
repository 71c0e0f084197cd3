"""Compaction's replay of a write log (``index.build.compact.replay``): a piece of the log at a time, so that it holds
the delta and a piece, not the log's records; a progress line as it goes; the same delta as the log replayed at
once, as a server replays it at load."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.build import compact
from index.engine.delta import Delta
from index.engine.table import Table
from index.store import writelog
from tests.cli import progress_lines
from tests.lee import Lee
from tests.logs import read_only, recovered, writing_after_the_first_piece


def writes(lee: Lee, count: int) -> list[dict[str, Any]]:
    """``count`` writes over the Lee table: its first 20 documents written again and again with nudged vectors, and
    every fifth write a delete, so that what the delta holds does not grow with the log."""
    rng = np.random.default_rng(3)
    bodies: list[dict[str, Any]] = []
    for i in range(count):
        j = i % 20
        if i % 5 == 4:
            bodies.append({"op": "delete", "ids": [lee.ids[(i * 7) % 20]]})
            continue
        vector = lee.vectors[j] + rng.normal(0, 0.01, lee.vectors.shape[1]).astype(np.float32)
        document = {"id": lee.ids[j], "text": lee.texts[j], "vector": vector.tolist(), "fields": lee.record(j)}
        bodies.append({"op": "upsert", "documents": [document]})
    return bodies


@pytest.fixture
def data_dir(lee_data_dir: Path, tmp_path: Path) -> Path:
    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    return tmp_path


def logged(data_dir: Path, bodies: list[dict[str, Any]]) -> Path:
    path = writelog.log_path(data_dir, "lee")
    writelog.remove_logs(data_dir, "lee")
    with writelog.appending(path, sync=False) as log:
        for seq, body in enumerate(bodies, 1):
            log.append(seq, body)
    return path


def frame_of_no_object(seq: int) -> bytes:
    """A whole frame of sequence ``seq``, its checksum right, whose payload is JSON but no object: no server writes
    one."""
    payload = b'"not a write"'
    crc = zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq)))
    return writelog.HEADER.pack(writelog.MARK, len(payload), seq, crc) + payload


def fresh(data_dir: Path) -> Delta:
    table = Table.load(data_dir / "lee", checksums=False)
    assert table.payload is not None
    return Delta(table.payload, table.rows, table.dim, 0)


def test_replay_in_pieces_holds_a_piece_not_the_log(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four times the writes (the same documents written again) hold no more at once: tracemalloc's peak of the
    replay; the log replayed whole, as before, holds about four times as much."""
    monkeypatch.setattr(writelog, "READ_BYTES", 32 << 10)
    peaks: dict[str, list[int]] = {"pieces": [], "whole": []}
    for count in (250, 1000):
        path = logged(data_dir, writes(lee_docs, count))
        for how, replay in [
            ("pieces", lambda delta: compact.replay("lee", delta, path)),  # noqa: B023
            ("whole", lambda delta: delta.replay(recovered(path))),  # noqa: B023
        ]:
            delta = fresh(data_dir)
            tracemalloc.start()
            try:
                replay(delta)
                peaks[how].append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            assert delta.seq == count
    assert peaks["whole"][1] > 2.5 * peaks["whole"][0], peaks  # the measure sees the records held at once
    assert peaks["pieces"][1] < 1.5 * peaks["pieces"][0], peaks


def test_replay_in_pieces_makes_the_delta_replayed_at_once(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log read 4 KiB at a time gives the delta a server makes from the whole log, and a progress line names it."""
    monkeypatch.setattr(writelog, "READ_BYTES", 4 << 10)
    path = logged(data_dir, writes(lee_docs, 400))
    at_once = fresh(data_dir)
    at_once.replay(read_only(path))
    in_pieces = fresh(data_dir)
    with progress_lines() as lines:
        compact.replay("lee", in_pieces, path)
    assert f"embedding-index: replaying lee.log: done ({path.stat().st_size / 2**20:,.0f} MiB" in lines.getvalue()
    assert in_pieces.seq == at_once.seq == 400
    assert list(in_pieces.documents) == list(at_once.documents)
    assert np.array_equal(in_pieces.deleted, at_once.deleted)
    for mine, theirs in zip(in_pieces.matrix()[1:], at_once.matrix()[1:], strict=True):
        assert np.array_equal(mine, theirs)
    assert [(d.text, d.fields) for d in in_pieces.written_in_order()] == [
        (d.text, d.fields) for d in at_once.written_in_order()
    ]


def test_pieces_of_writes_the_version_holds_then_a_gap(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version that holds the log's first 40 writes (a compaction killed before it cut the log) takes the later
    ones from later pieces, as at once; a log whose first write does not follow the version is refused, naming the
    writes missing."""
    monkeypatch.setattr(writelog, "READ_BYTES", 4 << 10)
    path = logged(data_dir, writes(lee_docs, 60))
    table = Table.load(data_dir / "lee", checksums=False)
    assert table.payload is not None
    at_once, in_pieces = (Delta(table.payload, table.rows, table.dim, 40) for _ in range(2))
    at_once.replay(read_only(path))
    compact.replay("lee", in_pieces, path)
    assert in_pieces.seq == at_once.seq == 60
    assert list(in_pieces.documents) == list(at_once.documents)
    assert np.array_equal(in_pieces.deleted, at_once.deleted)
    writelog.cut(path, 50)  # the log now starts at 51: writes 41 to 50 are in neither
    gap = "first record has sequence 51, but its version holds the writes up to 40"
    with pytest.raises(writelog.LogMismatch, match=gap):
        compact.replay("lee", Delta(table.payload, table.rows, table.dim, 40), path)


def test_a_write_during_a_compactions_replay_is_kept_in_the_log_once(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction replays the log without its lock (held while the frames are checked): a write appended in the
    middle of the replay is past the end it replays, so the new version does not hold it and the cut keeps it, the
    only record left in the log."""
    monkeypatch.setattr(writelog, "READ_BYTES", 32 << 10)
    count = 250
    path = logged(data_dir, writes(lee_docs, count))
    document = {"id": "during-replay", "text": lee_docs.texts[0], "vector": lee_docs.vectors[0].tolist()}
    body = {"op": "upsert", "documents": [{**document, "fields": lee_docs.record(0)}]}
    replay_then_write, appended = writing_after_the_first_piece(Delta.replay, path, count + 1, body)
    monkeypatch.setattr(Delta, "replay", replay_then_write)
    assert compact.compact(data_dir, "lee")["log_sequence"] == count
    version = Table.load(data_dir / "lee", checksums=False)
    assert version.payload is not None and "during-replay" not in version.payload.ids(range(version.rows))
    kept = recovered(path)
    assert appended and [(r.seq, r.body["documents"][0]["id"]) for r in kept] == [(count + 1, "during-replay")]


def test_a_record_no_server_writes_appended_during_a_compaction_is_cut_as_a_load_cuts_it(
    data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A whole, checksummed frame whose payload is no JSON object (no server writes one, so no acknowledged write)
    appended after a compaction's replay: the cut checks frames only and kept it ("1 later write kept in the log"),
    and the server then refused the new version (``record at byte 0 ... is damaged: a payload that is not a JSON
    object``), answering 503 to the table's requests. The cut and the load follow one rule: it is a damaged tail, cut
    with the torn tail's warning, and the table loads with every write."""
    path = logged(data_dir, writes(lee_docs, 3))
    build = compact.build_table

    def build_then_append(*args: Any, **kwargs: Any) -> dict[str, Any]:
        with writelog.appending(path) as log:
            os.pwrite(log.fd, frame_of_no_object(4), os.fstat(log.fd).st_size)  # another program's, after the replay
        return build(*args, **kwargs)

    monkeypatch.setattr(compact, "build_table", build_then_append)
    with caplog.at_level(logging.WARNING, logger="index.store.writelog"):
        done = compact.compact(data_dir, "lee")
    assert (done["log_sequence"], done["kept"]) == (3, 0), done
    assert "(a payload that is not a JSON object); last good record: sequence number 3" in caplog.text, caplog.text
    assert path.read_bytes() == b"" and recovered(path) == []
    table = Table.load(data_dir / "lee", checksums=False)
    assert table.manifest["log_sequence"] == 3
