"""An early command (``tests.early``) stopped, at its timeout or at the end of the session, leaves none of the
processes it started running, not even those in sessions of their own (a benchmark's servers)."""

from __future__ import annotations

import os
import resource
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


def hurried(raised: bool) -> str:
    """A command that says its priority, starts a child, and once its priority is raised (where the system lets
    it be: else after 2 s) says it again, as its child does: said on the event, not after a while that the test
    thread, starved on a busy machine, might outlast before it hurries them."""
    seconds = START_SECONDS if raised else 2.0
    wait = f"end = time.monotonic() + {seconds}\nwhile os.nice(0) > 0 and time.monotonic() < end:\n    time.sleep(0.05)"
    says_later = f"import os, time\n{wait}\nprint(os.nice(0), flush=True)"
    return "\n".join(
        [
            "import os, subprocess, sys, time",
            f"child = subprocess.Popen([sys.executable, '-c', {says_later!r}])",
            "print(os.nice(0), flush=True)",
            wait,
            "print(os.nice(0), flush=True)",
            "child.wait()",
        ]
    )


def test_a_command_a_test_waits_for_runs_at_the_tests_priority() -> None:
    """Beside the tests an early command runs at nice 19; once a test waits for it, it and what it started run at
    the tests' own priority, where the system lets a process raise one (root, or ``RLIMIT_NICE``)."""
    raised = os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20
    command = hurried(raised)
    early = Early(__name__, "hurried", lambda out: [sys.executable, "-c", command], timeout=2 * START_SECONDS)
    try:
        early.start()
        deadline = time.monotonic() + START_SECONDS
        while not early.stdout().endswith("\n"):  # started, at its priority, its child started too
            assert time.monotonic() < deadline, "the command did not start"
            time.sleep(0.05)
        assert early.stdout() == "19\n"
        done = early.result()  # waited for: hurried
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["19", *(["0", "0"] if raised else ["19", "19"])], done.stdout
    finally:
        early.stop()
