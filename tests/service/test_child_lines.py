"""The lines of the server's child processes (a background index build, a compaction) in the server's log, as
``service.logs.relay`` reads them from a real child: bytes that are no UTF-8 neither stop the relay nor lose a line,
and a line without end is logged in pieces as it comes, never held whole."""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

import pytest

from service.logs import LINE_CHARS, relay, spawn

# A child as a native library or a kill may leave its output: a message with a Latin-1 byte, a character cut by the
# pipe (written in two pieces, and again across the 8 KiB the relay reads at a time), and a last line cut inside a
# character by the child's end.
CHILD = r"""
import os, sys, time
def out(data):
    os.write(1, data)
out(b"embedding-index: reading caf\xe9.txt ...\n")
out(b"price: 3 \xe2\x82")
time.sleep(0.2)
out(b"\xac\n")
out(b"x" * 8190 + "\u20ac\n".encode())
sys.stderr.write("embedding-index: after them\n")
sys.stderr.flush()
out(b"cut \xe2\x82")
"""


def test_a_childs_lines_that_are_no_utf8_are_logged_escaped_and_the_lines_after_them_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A child's line with a byte that is no UTF-8 raised UnicodeDecodeError in the relay: the thread that runs the
    server's builds (or compactions) ended there, the child's later lines were never read (a child whose pipe
    filled up waited for ever), and no build was run again until the server restarted."""
    log = logging.getLogger("tests.child_lines")
    child = spawn([sys.executable, "-c", CHILD])
    with caplog.at_level(logging.INFO, logger=log.name):
        last = relay(child, log, "words", lambda: False)
    assert child.wait(timeout=120) == 0
    assert [record.getMessage() for record in caplog.records] == [
        "table 'words': reading caf\\xe9.txt ...",
        "table 'words': price: 3 \u20ac",
        f"table 'words': {'x' * 8190}\u20ac",
        "table 'words': after them",
        "table 'words': cut \\xe2\\x82",
    ]
    assert last == "cut \\xe2\\x82"


# A child that writes a long line without a newline (a native library's dump), and ends it only once told to (the file
# named by its argument made): the relay must log it meanwhile, in pieces, as the server's memory must not hold it.
ENDLESS = r"""
import os, sys, time
os.write(1, b"embedding-index: dump ")
for _ in range(PIECES):
    os.write(1, b"x" * 8192)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
os.write(1, b"y" * 8170 + b"\n")  # the end of the line alone after its last piece, a full one
os.write(1, b"embedding-index: error: the end\n")
sys.exit(1)
"""
PIECES = 48


def test_a_childs_line_without_newline_is_logged_in_pieces_as_it_comes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A line was read whole before it was logged: a child writing megabytes without a newline grew the server's
    memory by as much, and nothing of it was logged until it ended. It is logged in pieces of at most
    ``LINE_CHARS`` characters as they are read, and the child's last line is still what ``relay`` returns."""
    log = logging.getLogger("tests.child_lines")
    told = tmp_path / "end the line"
    child = spawn([sys.executable, "-c", ENDLESS.replace("PIECES", str(PIECES)), str(told)])
    last: list[str] = []
    relaying = threading.Thread(target=lambda: last.append(relay(child, log, "words", lambda: False)), daemon=True)
    try:
        with caplog.at_level(logging.INFO, logger=log.name):
            relaying.start()
            deadline = time.monotonic() + 120  # bounds a hang only: the pieces come as soon as the child writes them
            while not caplog.records:
                assert time.monotonic() < deadline, "nothing of the line was logged while the child wrote it"
                time.sleep(0.05)
            assert child.poll() is None  # logged while the line is still being written
            told.touch()
            relaying.join(timeout=120)
            assert not relaying.is_alive(), "the relay did not end with the child"
    finally:
        if child.poll() is None:  # a failure above: the child waits for ever otherwise
            child.kill()
    assert child.wait(timeout=120) == 1
    said = [record.getMessage().removeprefix("table 'words': ") for record in caplog.records]
    assert all(0 < len(piece) <= LINE_CHARS for piece in said), [len(piece) for piece in said]
    assert "".join(said[:-1]) == "dump " + "x" * 8192 * PIECES + "y" * 8170
    assert said[-1] == "error: the end"
    assert last == ["embedding-index: error: the end"]
