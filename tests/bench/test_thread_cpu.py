"""``bench.thread_cpu``: a thread's CPU lands on its own id, the main thread's on the process's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench import thread_cpu

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_per_request_by_thread() -> None:
    pid = os.getpid()
    before = thread_cpu.snapshot(pid)
    worker = threading.Thread(target=spin, args=(0.3,))
    worker.start()
    worker.join()  # the main thread waits without CPU meanwhile
    spin(0.1)
    used = thread_cpu.per_request(pid, before, thread_cpu.snapshot(pid), 10)
    # the worker has ended: its CPU is gone from the snapshot, so "others" is only what live threads spent
    assert 0.1 / 10 * 1e6 * 0.8 <= used["loop"] <= 0.1 / 10 * 1e6 * 3
    assert thread_cpu.per_request(pid, before, {}, 10) == {"loop": 0.0, "others": 0.0}


def test_a_live_thread_counts_as_other() -> None:
    pid = os.getpid()
    stop = threading.Event()
    started = threading.Event()
    spent = threading.Event()

    def busy() -> None:
        began = time.thread_time()
        started.set()
        while not stop.is_set():
            if time.thread_time() - began >= 0.4:  # its own CPU, however busy the machine's cores are
                spent.set()

    worker = threading.Thread(target=busy)
    worker.start()
    started.wait()
    before = thread_cpu.snapshot(pid)
    assert spent.wait(60)  # the main thread waits, the worker spins (with the GIL's switches)
    after = thread_cpu.snapshot(pid)
    stop.set()
    worker.join()
    used = thread_cpu.per_request(pid, before, after, 1)
    assert used["others"] >= 0.2e6
    assert used["loop"] < used["others"] / 4


def test_the_serving_process_is_the_launchers_child() -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"]
    )
    served = launcher.pid
    try:
        deadline = time.monotonic() + 20
        command = "python"  # until the child has run exec, it is a copy of the launcher
        while (served == launcher.pid or command != "sleep") and time.monotonic() < deadline:
            time.sleep(0.05)
            served = thread_cpu.serving_pid(launcher.pid)
            command = Path(f"/proc/{served}/comm").read_text().strip()
        assert served != launcher.pid and command == "sleep"
    finally:
        if served != launcher.pid:
            os.kill(served, signal.SIGKILL)  # the launcher's child, started by this test
        launcher.kill()
        launcher.wait()
