"""The builder's lines on a stream nobody reads any more (``2>&1 | head -1``, a log collector that died, a closed
terminal): a real child process on a real closed pipe or terminal builds and publishes its table; the server's
background child, whose reader is the server, stops as at the server's SIGTERM and leaves its table as it was."""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from index import progress
from index.build.cli import INTERRUPTED, options
from index.build.sources import RawTable
from index.build.writer import build_table
from index.store import artifact
from tests import REPO
from tests.words import write_words

ROWS = 5_000
SECONDS = 600  # a bound for a hung build on a busy machine, not a timing
# The builder with a step's clock on a short interval: its thread writes on the unread stream too, as a long step's
# clock would.
BUILDER = "from index import progress; progress.CONFIG.interval = 0.01; from index.build.cli import main; main()"


def unread_pipe() -> int:
    """The write end of a pipe whose reader went away."""
    read, write = os.pipe()
    os.close(read)
    return write


def closed_terminal() -> int:
    """A terminal's side of a pseudo-terminal whose other side was closed (the window, the ssh session, gone)."""
    master, terminal = pty.openpty()
    os.close(master)
    return terminal


def run_unread(*args: str, stream: int, joined: bool = False) -> subprocess.CompletedProcess[str]:
    """The builder in a child process, ``args`` its arguments, its stderr on ``stream`` (closed here once it runs),
    its stdout too if ``joined`` (``2>&1``), else read."""
    try:
        return subprocess.run(
            [sys.executable, "-c", BUILDER, *args],
            stdout=stream if joined else subprocess.PIPE,
            stderr=stream,
            text=True,
            cwd=REPO,
            timeout=SECONDS,
        )
    finally:
        os.close(stream)


@pytest.mark.parametrize("stream", [unread_pipe, closed_terminal])
def test_a_build_whose_lines_nobody_reads_publishes_its_table(
    glove_raw: RawTable, tmp_path: Path, stream: Callable[[], int]
) -> None:
    """A progress line the builder could not write (BrokenPipeError on a pipe, OSError EIO on a closed terminal)
    ended the build with exit status 1 and no table, whichever thread wrote it: the main thread's next line, or a
    step's clock, whose thread died with a traceback while the step worked on to its closing line. An IVF index is
    trained while FAISS's stderr is held, the builder's lines then written through a stream of their own."""
    words = write_words(glove_raw, tmp_path / "words.txt", rows=ROWS)
    data = tmp_path / "data"
    done = run_unread("import", str(words), "--name", "w", "--data-dir", str(data), "--index", "ivf", stream=stream())
    assert done.returncode == 0 and done.stdout.startswith(f"built 'w': {ROWS + 2:,} rows x 50 (ivf"), done
    assert artifact.verify(data / "w").ok
    assert artifact.read_manifest(data / "w")["index"]["spec"]["kind"] == "ivf"
    assert sorted(path.name for path in data.iterdir()) == ["w"]  # nothing half-written beside it


def test_a_build_whose_result_line_nobody_reads_publishes_its_table_and_exits_0(
    glove_raw: RawTable, tmp_path: Path
) -> None:
    """``embedding-index import ... 2>&1 | head -1``: its last line, the one that says what was built, found the
    pipe without reader after the table was published; the command ended with exit status 1 and not a word, as
    if it had failed. That line is dropped as a progress line is: the status is the build's."""
    words = write_words(glove_raw, tmp_path / "words.txt", rows=ROWS)
    data = tmp_path / "data"
    done = run_unread("import", str(words), "--name", "w", "--data-dir", str(data), stream=unread_pipe(), joined=True)
    assert done.returncode == 0, done
    assert artifact.verify(data / "w").ok and sorted(path.name for path in data.iterdir()) == ["w"]


def test_the_servers_background_build_stops_once_the_server_is_gone(glove_raw: RawTable, tmp_path: Path) -> None:
    """The server's background child (``--background``) writes to the server: a server killed outright leaves it
    without a reader. It stops as the server's SIGTERM stops it (an interrupt: its temporary folder removed, its
    locks let go), its table left as it was for the next start to build; it was said to fail (exit status 1) at its
    first line, or a step's clock died and the step worked on to its end first."""
    raw = RawTable(tokens=glove_raw.tokens[:ROWS], matrix=glove_raw.matrix[:ROWS].copy())
    build_table(raw, data_dir=tmp_path, name="w", source={"format": "test"}, index_spec="ivf", defer_index=True)
    manifest = artifact.read_manifest(tmp_path / "w")
    done = run_unread("--background", "index", "w", "--data-dir", str(tmp_path), stream=unread_pipe(), joined=True)
    assert done.returncode == INTERRUPTED, done
    assert artifact.read_manifest(tmp_path / "w") == manifest and artifact.verify(tmp_path / "w").ok
    assert sorted(path.name for path in tmp_path.iterdir()) == ["w"]


@pytest.fixture
def unread_stream() -> Iterator[None]:
    write = unread_pipe()
    stream = os.fdopen(write, "w")
    progress.CONFIG.stream = stream
    try:
        yield
    finally:
        progress.CONFIG.stream = None
        progress.configure(quiet=False, interval=progress.INTERVAL)
        with contextlib.suppress(OSError):  # the lines it still holds, which nobody reads
            stream.close()


def test_a_steps_clock_on_a_pipe_nobody_reads_goes_on_with_the_step(
    unread_stream: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In this process: the clock's thread died at its first line (BrokenPipeError, printed by
    ``threading.excepthook``) and the step's closing line raised it in the thread that ran the step."""
    died: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    progress.configure(quiet=False, interval=0.001)
    deadline = time.monotonic() + SECONDS
    with progress.Progress("adding rows to the index", 10) as step:
        while not step.said and time.monotonic() < deadline:  # the clock's first line, tried
            time.sleep(0.01)
        step.advance(10)
    assert step.said and died == []


@pytest.fixture
def background_signals() -> Iterator[None]:
    """The signal handlers and progress settings of the server's background child (``--background``), as its
    command line sets them, those of this process restored afterwards."""
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        options(background=True)
        yield
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        progress.configure(background=False)


def test_a_line_unread_while_the_background_child_stops_interrupts_it_no_second_time(
    unread_stream: None, background_signals: None
) -> None:
    """The server's SIGTERM, then the server killed while the child cleans up (its temporary folder, its locks):
    the cleanup's line found no reader and asked for an interrupt again, which cut the cleanup short."""
    cleaned = interrupted_again = False
    try:
        try:
            signal.raise_signal(signal.SIGTERM)  # the server's stop
        except KeyboardInterrupt:
            progress.say("interrupted; no table was built or replaced")
            for _ in range(1_000):  # an interrupt asked for is raised at the next of these
                time.sleep(0)
            cleaned = True
    except KeyboardInterrupt:
        interrupted_again = True
    assert cleaned and not interrupted_again


def test_a_line_unread_wakes_the_background_childs_main_thread_from_its_wait(
    unread_stream: None, background_signals: None
) -> None:
    """A step's clock whose line finds no reader while the main thread waits (for a thread pool's texts embedded,
    for a thread to end): the interrupt was only asked for, raised once the wait ended by itself, where the
    server's SIGTERM wakes the thread at once."""
    waiting, ended, stop = threading.Event(), threading.Event(), threading.Event()

    def clock() -> None:
        waiting.wait()  # the interrupt comes where the test expects it, not before (a busy machine's order)
        progress.say("embedding texts: 45% (1,800 of 4,000 texts), 1m12s left")
        stop.wait(SECONDS / 10)  # the wait's own end, long after the signal's
        ended.set()

    writer = threading.Thread(target=clock)
    writer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            waiting.set()
            ended.wait()
        assert not ended.is_set()
    finally:
        stop.set()
        writer.join()
