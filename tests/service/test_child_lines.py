"""The lines of the server's child processes (a background index build, a compaction) in the server's log, as
``service.logs.relay`` reads them from a real child: bytes that are no UTF-8 neither stop the relay nor lose a line."""

from __future__ import annotations

import logging
import sys

import pytest

from service.logs import relay, spawn

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
