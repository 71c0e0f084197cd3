"""An early command (``tests.early``) stopped, at its timeout or at the end of the session, leaves none of the
processes it started running, not even those in sessions of their own (a benchmark's servers)."""

from __future__ import annotations

import sys
import time

import psutil
import pytest

from tests.early import Early, running

# A command that starts a child in a session of its own (as bench.common.own_session starts a server), says its
# process id and waits.
STARTER = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True); "
    "print(child.pid, flush=True); time.sleep(600)"
)
START_SECONDS = 120.0  # for the command to start its child on a starved machine


def started_child(early: Early) -> psutil.Process:
    early.start()
    deadline = time.monotonic() + START_SECONDS
    while not early.stdout().endswith("\n"):  # its whole line
        assert time.monotonic() < deadline, "the command did not start its child"
        time.sleep(0.05)
    return psutil.Process(int(early.stdout()))


@pytest.mark.parametrize("end", ["timeout", "stop"])
def test_a_stopped_command_leaves_no_process_behind(end: str) -> None:
    early = Early(__name__, f"starter_{end}", lambda out: [sys.executable, "-c", STARTER], timeout=1.0, nice=0)
    child: psutil.Process | None = None
    try:
        child = started_child(early)
        assert running(child)
        if end == "timeout":
            assert early.result().stderr == "killed after 1 s"  # its timeout counted from here
        else:
            early.stop()
        assert not running(child)
    finally:
        early.stop()
        if child is not None and running(child):
            child.kill()
