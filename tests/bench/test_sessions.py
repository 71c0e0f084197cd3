"""Processes started to run beside other work keep their starter's weight with the scheduler: a benchmark's server in
a session of its own (``bench.common.own_session``), and the commands the tests start early (``tests.early``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.early import NICE, REPO, Early

needs_autogroups = pytest.mark.skipif(
    not Path("/proc/self/autogroup").exists(), reason="the kernel here has no scheduler autogroups"
)
SERVER = """
from bench.common import own_session, stop
server = own_session(["sleep", "30"])
print(open(f"/proc/{server.pid}/autogroup").read().strip(), open("/proc/self/autogroup").read().strip())
stop(server)
"""


@needs_autogroups
@pytest.mark.parametrize("nice", [0, 19])
def test_a_server_in_a_session_of_its_own_is_weighed_as_its_starter(nice: int) -> None:
    starter = ["nice", "-n", str(nice), sys.executable, "-c", SERVER]
    # The starter in a session of its own too, so that its nice value does not slow it down beside the tests.
    done = subprocess.run(
        starter, capture_output=True, text=True, cwd=REPO, timeout=60, check=True, start_new_session=True
    )
    server_group, _, server_nice, starter_group, _, _ = done.stdout.split()
    assert server_group != starter_group  # its own session: stopped as a group, apart from its starter
    assert int(server_nice) == min(19, os.nice(0) + nice)  # a nice 0 starter leaves the group's weight as it was


@needs_autogroups
def test_an_early_command_runs_below_the_tests_in_their_scheduling_group() -> None:
    # The file names the process's scheduling group (one per session), or is empty in the session the system started
    # in, which has no group of its own: its processes share one group, where nice values count too.
    probe = (
        "import json, os; "
        "print(json.dumps([open('/proc/self/autogroup').read(), os.getpgid(0) == os.getpid(), os.nice(0)]))"
    )
    early = Early(__name__, "probe", lambda out: [sys.executable, "-c", probe])
    try:
        assert early.wait(60), "the probe did not end"  # beside the tests: a test waiting for it would hurry it
        done = early.result()
        assert done.returncode == 0, done.stderr
        group, own_process_group, nice = json.loads(done.stdout)
        assert group == Path("/proc/self/autogroup").read_text()  # weighed with the tests: its nice value counts
        assert own_process_group  # apart from the tests': the terminal's Ctrl-C is theirs only
        assert nice == min(19, os.nice(0) + NICE)
    finally:
        early.stop()
