"""A test's own command, started in a child process as soon as the tests are collected instead of when the test
comes: it runs on the core the test process leaves idle, beside the tests before it.

The child runs at the lowest priority (nice 19): the tests the session is waiting for come first, and the default
table's build (nice 10, ``tests/conftest.py``) before it (to the scheduler, a dozen commands at nice 10 weigh as
much as the tests' own process). A command whose processes check each other's health on a clock (a Ray cluster)
runs at the tests' own priority (``nice=0``): starved at nice 19 on busy cores, they would miss those checks.
Once a test waits for a command (``result()``), nothing comes before it: it runs at the tests' own priority from
then on (:func:`hurry`), else the other session's tests kept the cores from it while this session waited.
A test module declares ``Early(__name__, fixture, argv)``; ``tests/conftest.py`` starts it at collection when a
collected test of that module uses that fixture (with ``needs_glove``: once the default table is ready, waited for
in a thread), and the fixture reads ``result()``, which waits for the child. A command several modules read
(``shared``) is started when a collected test of any module uses its fixture; a command that reads another's output
names it (``needs``) and starts once that one is done.
Nothing is cached: every session runs the command again, in a temporary directory of its own that ``stop()``
removes at the end of the session. A command stopped (at the end of a session cut short, or at its timeout) is
stopped with every process it started, those in sessions of their own too (a benchmark's servers).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests import REPO

NICE = 19  # below the tests' own process and the table's build
GRACE_SECONDS = 30.0  # a process still running this long after SIGTERM gets SIGKILL


def running(process: psutil.Process) -> bool:
    """Whether ``process`` still runs (a zombie not reaped yet has ended)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def frozen_tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and every process it started, each stopped (SIGSTOP) as it is found, until the search
    finds no more: none of them can start another unseen. Those in sessions of their own (``start_new_session``)
    too, which its process group does not hold."""
    found: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(pid)
        while True:
            new = [p for p in [root, *root.children(recursive=True)] if p.pid not in found]
            if not new:
                return list(found.values())
            for process in new:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.suspend()
                found[process.pid] = process
    except psutil.NoSuchProcess:  # the command itself has ended: what it started is no longer its children
        return list(found.values())


def hurry(pid: int) -> None:
    """``pid`` and every process it started, to the tests' own priority (nice 0), where the system lets a process
    raise a priority (root, or a ``RLIMIT_NICE`` that allows it); elsewhere they keep theirs. The processes they
    start from then on inherit it."""
    try:
        processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:  # ended meanwhile
        return
    for process in processes:
        with contextlib.suppress(psutil.Error, OSError):
            if process.nice() > 0:
                process.nice(0)


def end_tree(pid: int, grace: float = GRACE_SECONDS) -> None:
    """SIGTERM to the process ``pid`` and every process it started (:func:`frozen_tree`), SIGKILL to those still
    running ``grace`` seconds later."""
    processes = frozen_tree(pid)
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
            process.resume()  # the SIGTERM is delivered once it runs again
    deadline = time.monotonic() + grace
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in processes:
        if running(process):
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str
    out: Path  # the command's directory


@dataclass
class Early:
    module: str  # the test module that reads it (``__name__``)
    fixture: str  # that module's fixture that reads it: started when a collected test of the module uses it
    argv: Callable[[Path], list[str]]  # the command, given its directory
    needs_glove: bool = False  # started once the default table is ready (the data directory is given then)
    timeout: float = 840.0  # from result(): inside pytest's own per-test timeout (pyproject.toml), to say why
    nice: int = NICE
    shared: bool = False  # started when a test of any module uses ``fixture`` (a session fixture of conftest.py)
    needs: Early | None = None  # run once this other command is done (its output is read by ``argv``)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _out: Path | None = field(default=None, repr=False)
    _failure: str = field(default="", repr=False)
    _stopped: bool = field(default=False, repr=False)
    _waited: bool = field(default=False, repr=False)  # a test waits for it: it runs at the tests' priority
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        JOBS.append(self)

    def start(self, after: Callable[[], bool] | None = None) -> None:
        """Run the command from a thread (after ``after()`` returns True, when given)."""
        if self.needs is not None:
            self.needs.start()
        if self._thread is None:
            self._out = Path(tempfile.mkdtemp(prefix=f"embedding-tests-{self.fixture}-"))
            self._thread = threading.Thread(target=self._run, args=(after,), name=self.fixture, daemon=True)
            self._thread.start()

    def _run(self, after: Callable[[], bool] | None) -> None:
        if after is not None and not after():
            self._failure = "not run: what it needs was not made"
            return
        if self.needs is not None:
            needed = self.needs.outcome()  # waited for by this command, not by a test: not hurried
            if needed.returncode != 0:
                self._failure = f"not run: {self.needs.fixture} failed:\n{needed.stderr[-3000:]}"
                return
        assert self._out is not None
        try:
            files = (self._out / "stdout").open("wb"), (self._out / "stderr").open("wb")
        except FileNotFoundError:  # stopped at the end of the session while it waited (its directory removed)
            return
        with files[0] as stdout, files[1] as stderr:
            with self._lock:
                if self._stopped:
                    return
                nice = 0 if self._waited else self.nice
                below = ["nice", "-n", str(nice)] if nice and shutil.which("nice") else []
                argv = [*below, *self.argv(self._out)]
                # A process group of its own: the terminal's Ctrl-C reaches the tests only, and ``stop()`` ends the
                # command with what it started (end_tree). Not a session of its own: with the kernel's autogroups
                # (sched_autogroup_enabled) every session is weighed as one process against the test session
                # whatever its nice value, and the early commands, each its own session, took most of the cores from
                # the tests of the first minutes.
                self._process = subprocess.Popen(argv, cwd=REPO, stdout=stdout, stderr=stderr, process_group=0)
            self._process.wait()

    def wait(self, seconds: float) -> bool:
        """Whether the command has ended, waiting for it up to ``seconds``."""
        self.start()
        assert self._thread is not None
        self._thread.join(seconds)
        return not self._thread.is_alive()

    def stdout(self) -> str:
        """What the command has written to its standard output so far."""
        try:
            return (self._out / "stdout").read_text(errors="replace") if self._out else ""
        except FileNotFoundError:  # not started yet, or stopped
            return ""

    def result(self) -> Done:
        """What the command did, once it has ended; the test that asks waits for it (:meth:`waited`)."""
        self.start()
        self.waited()
        return self.outcome()

    def outcome(self) -> Done:
        """What the command did, once it has ended (killed at its timeout)."""
        self.start()
        assert self._thread is not None and self._out is not None
        self._thread.join(self.timeout)
        if self._thread.is_alive() and self._process is not None:
            end_tree(self._process.pid)
            self._thread.join()
            self._failure = f"killed after {self.timeout:.0f} s"
        if self._process is None or self._failure:
            return Done(-1, "", self._failure or "not run", self._out)
        out = self._out
        try:
            stdout, stderr = ((out / name).read_text(errors="replace") for name in ("stdout", "stderr"))
        except FileNotFoundError:  # stopped at the end of the session (its directory removed) while read
            return Done(-1, "", "stopped", out)
        return Done(self._process.returncode, stdout, stderr, out)

    def waited(self) -> None:
        """A test waits for this command: it (and what it needs) runs at the tests' own priority from now on."""
        if self.needs is not None:
            self.needs.waited()
        with self._lock:
            self._waited = True
            if self._process is not None and self._process.poll() is None:
                hurry(self._process.pid)

    def stop(self) -> None:
        """At the end of the session: the child is not left behind, nor what it started, nor its directory."""
        with self._lock:
            self._stopped = True
        if self._process is not None and self._process.poll() is None:
            end_tree(self._process.pid)
            self._process.wait()
        if self._out is not None:
            shutil.rmtree(self._out, ignore_errors=True)


JOBS: list[Early] = []  # filled as the test modules are imported
