"""A step's clock (``index.progress``) beside the thread that runs the step: the status file both write, an interrupt
on the way into or out of a step, the context its lines are written in."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from index import progress
from index.build import cli

LINE_WAIT = 120  # seconds a test waits for a line it is owed: a bound for a hung step, not a timing


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


def clocks() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("progress: ")]


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
            for step in range(500):  # with one temporary file for both threads, each run read torn ones by hundreds
                progress.note(f"tuning: efSearch {step} gives recall@10 0.9 (target 0.99){'.' * (step % 50)}")
        finally:
            stop.set()
            reader.join()
    assert torn == []
    assert [path.name for path in tmp_path.iterdir()] == ["status.json"]  # no temporary file left


def test_an_interrupt_while_the_clock_starts_leaves_no_clock(
    monkeypatch: pytest.MonkeyPatch, lines: io.StringIO
) -> None:
    """Ctrl-C (or the server's SIGTERM, taken as one) while the step's thread starts: the step never began, and
    its clock, which ran on, wrote a line every interval until the process ended."""
    start = threading.Thread.start

    def interrupted(self: threading.Thread) -> None:
        start(self)
        raise KeyboardInterrupt

    progress.configure(quiet=False, interval=0.01)
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt), progress.Progress("reading", 10):
        pass
    monkeypatch.undo()
    for clock in clocks():
        clock.join(LINE_WAIT)
    said = lines.getvalue()  # a busy machine may let the clock speak once before the interrupt is raised
    time.sleep(0.05)  # five intervals: a clock left running would have said something
    assert clocks() == [] and lines.getvalue() == said


def test_the_command_ends_a_clock_its_step_could_not(monkeypatch: pytest.MonkeyPatch, lines: io.StringIO) -> None:
    """An interrupt handled as a step's ``__exit__`` is entered ends the command before the step ends its clock:
    the command ends every clock still running, so nothing is said after its last line."""

    def interrupted_on_the_way_out() -> None:
        progress.Progress("adding rows to the index", 10).__enter__()  # its __exit__ never runs
        raise SystemExit(cli.INTERRUPTED)

    progress.configure(quiet=False, interval=0.01)
    monkeypatch.setattr(cli, "app", interrupted_on_the_way_out)
    with pytest.raises(SystemExit):
        cli.main()
    said = lines.getvalue()
    time.sleep(0.05)  # five intervals: a clock left running would have said something
    assert clocks() == [] and lines.getvalue() == said


def test_a_clocks_lines_are_written_in_the_context_of_the_steps_caller(lines: io.StringIO) -> None:
    """A server's log names the request a line is of (a context variable its formatter reads): the clock's lines,
    from a thread of their own, named none, so that two projections' lines could not be told apart."""
    request = contextvars.ContextVar[str]("request")
    log = logging.getLogger("tests.progress")
    seen: list[tuple[str, str]] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((record.getMessage(), request.get("none")))

    handler = Seen()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    progress.configure(interval=0.01)
    request.set("r-1")
    try:
        with progress.Progress("UMAP of 10 rows", None, log=log):
            deadline = time.monotonic() + LINE_WAIT
            while len(seen) < 2:
                assert time.monotonic() < deadline, "a step silent"
                time.sleep(0.01)
    finally:
        log.removeHandler(handler)
    assert len(seen) >= 3 and {context for _, context in seen} == {"r-1"}, seen
