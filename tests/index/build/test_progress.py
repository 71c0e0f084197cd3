"""A step's clock (``index.progress``) beside the thread that runs the step: the status file both write, an interrupt
on the way into or out of a step, the context its lines are written in."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from index import progress


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    progress.CONFIG.stream = stream
    try:
        yield stream
    finally:
        progress.CONFIG.stream = None
        progress.CONFIG.status_file = None
        progress.configure(quiet=False, interval=progress.INTERVAL)


def test_the_status_file_is_whole_while_a_clock_and_the_builder_both_write_it(
    tmp_path: Path, lines: io.StringIO
) -> None:
    """The step's clock and the builder's own lines (a tuning step's notes) wrote the status file through one
    temporary file: one thread's rename put the other's half-written file in place, which ``/readyz`` read."""
    status = tmp_path / "status.json"
    progress.configure(quiet=True, status_file=status, interval=0.001)
    torn: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            text = status.read_text()
            try:
                json.loads(text)
            except ValueError:
                torn.append(text)

    reader = threading.Thread(target=read)
    with progress.Progress("tuning efSearch", None):
        reader.start()
        try:
            for step in range(2_000):
                progress.note(f"tuning: efSearch {step} gives recall@10 0.9 (target 0.99){'.' * (step % 50)}")
        finally:
            stop.set()
            reader.join()
    assert torn == []
    assert [path.name for path in tmp_path.iterdir()] == ["status.json"]  # no temporary file left
