"""Test modules that run in a second pytest session, beside the suite's own.

The suite's process runs its tests one after the other, and many of them mostly wait: the server tests on their
servers (kill -9 in a stream of writes, restarts, reloads, shutdowns, crashed publications, indexes built in the
background, compactions, nginx in front, clients on raw sockets left at the time-outs), the builder's tests on the
commands they run (every format's reader, shards, a Ray cluster, kustomize), the stored format's on the processes
they start (an import filling a disk, a write log's appenders). Meanwhile a core is left to the work beside the
tests (the default table's graph, the early commands), and once that is done it idles. The modules in
:data:`MODULES` (those, and a few that build tables in process, so that both sessions take about as long) run in a
second session instead (``python -m tests.beside <node ids>``, with a temporary directory of its own), started with
the suite at the tests' own priority, so the two sessions share the cores. The suite's session ends with one test
that waits for the second session and fails with its report when any of its tests failed; the second session's
summary line comes before the suite's.

Only a run of more than these modules is split: a run of some of them alone (``pytest tests/service/test_reload.py``)
runs them in its own process as before. Every module here reads no early command and no
default table (``tests.early``, ``glove_data_dir``; ``tests/conftest.py`` refuses the split otherwise): the second
session makes only its own small fixtures, and waits for nothing the first one does.
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from tests.early import Done, Early

MODULES = frozenset(
    f"tests/{name}.py"
    for name in (
        "deploy/test_k8s",
        "deploy/test_nginx",
        "index/build/test_compressed",
        "index/build/test_documents",
        "index/build/test_index_choice",
        "index/build/test_ray_import",
        "index/build/test_shards",
        "index/build/test_shards_words",
        "index/build/test_sources",
        "index/build/test_sources_fuzz",
        "index/store/test_full_disk",
        "index/store/test_writelog",
        "service/test_auto_compaction",
        "service/test_background_index",
        "service/test_compaction",
        "service/test_compaction_faults",
        "service/test_documents_answer_bytes",
        "service/test_documents_scroll",
        "service/test_exposure",
        "service/test_fuzz",
        "service/test_hostile",
        "service/test_live_cuts",
        "service/test_publish_crash",
        "service/test_publish_newest",
        "service/test_reload",
        "service/test_shard_write_durability",
        "service/test_shard_writes",
        "service/test_shards_compaction_reload",
        "service/test_shards_encoder",
        "service/test_shards_fields",
        "service/test_shards_front",
        "service/test_shards_front_ids",
        "service/test_shards_front_imports",
        "service/test_shards_replicas",
        "service/test_shards_words",
        "service/test_shards_writes_http",
        "service/test_shutdown",
        "service/test_work_bounds",
        "service/test_worker_restarts",
        "service/test_write_durability",
        "service/test_write_load",
        "service/test_writes_api",
    )
)
SECOND = "EMBEDDING_TESTS_BESIDE"  # set in the second session: it runs its tests itself
REPORT_CHARS = 20_000
# How often the suite's last test says how far the second session is, while it waits for it.
PROGRESS_SECONDS = float(os.environ.get("EMBEDDING_TESTS_PROGRESS_SECONDS", "20"))
RESULT_LETTERS = ".FEsxX"  # what a line of ``pytest -q``'s progress starts with: one letter a test


def split(items: list[pytest.Item]) -> tuple[list[pytest.Item], list[str]]:
    """The items this session runs, and the node ids of those the second session runs (none: all here)."""
    if os.environ.get(SECOND):
        return items, []
    here: list[pytest.Item] = []
    beside: list[pytest.Item] = []
    for item in items:
        (beside if item.nodeid.split("::")[0] in MODULES else here).append(item)
    if not beside or not here:
        return items, []
    return here, [item.nodeid for item in beside]


def session_job(nodeids: list[str]) -> Early:
    """The second session, as an early command (``tests.early``) at the tests' own priority: its servers answer
    on clocks (timeouts, drains) that starve at nice 19."""

    def argv(out: Path) -> list[str]:
        options = ["-q", "-p", "no:cacheprovider", "--basetemp", str(out / "tmp")]
        return [sys.executable, "-u", "-m", __name__, *options, *nodeids]  # unbuffered: its progress is read

    return Early(__name__, "beside", argv, nice=0)


class Failed(Exception):
    def __init__(self, done: Done) -> None:
        super().__init__(done.returncode)
        self.done = done


class SecondSession(pytest.Item):
    """The suite's last test: the second session's tests all passed."""

    def __init__(self, *, job: Early, count: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job, self.count = job, count
        self.done: Done | None = None  # once it has ended

    def runtest(self) -> None:
        waited = 0.0
        while waited < self.job.timeout and not self.job.wait(PROGRESS_SECONDS):
            line = f"waiting for the second session: {tests_run(self.job.stdout())} of its {self.count} tests run"
            self.say(line if waited else f"\n{line}")  # the first ends the line of this session's progress
            waited += PROGRESS_SECONDS
        self.done = self.job.result()
        if self.done.returncode != 0:
            raise Failed(self.done)

    def say(self, line: str) -> None:
        """``line`` on the terminal, now (the test's output is captured otherwise)."""
        plugins = self.config.pluginmanager
        reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
        if reporter is not None:
            with capture.global_and_fixture_disabled() if capture is not None else nullcontext():
                reporter.write_line(line)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if not isinstance(excinfo.value, Failed):
            return str(super().repr_failure(excinfo))
        done = excinfo.value.done
        return (
            f"the second session ({self.count} tests, tests/beside.py) exited with {done.returncode}:\n"
            f"{report(done.stdout)[-REPORT_CHARS:]}\n{done.stderr[-3000:]}"
        )

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"the {self.count} tests of the second session"


def report(stdout: str) -> str:
    """The second session's failures and its short summary, without its progress and slowest durations."""
    lines = stdout.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("=")]
    if not heads:
        return stdout
    ends = [*heads[1:], len(lines)]
    parts = [lines[i:end] for i, end in zip(heads, ends, strict=True) if "slowest" not in lines[i]]
    return "\n".join(line for part in parts for line in part)


def tests_run(stdout: str) -> int:
    """How many tests a ``pytest -q`` run has reported so far: the result letters of its progress lines."""
    run = 0
    for line in stdout.splitlines():
        if line.startswith("="):  # its progress is over: failures, summary
            break
        run += len(line) - len(line.lstrip(RESULT_LETTERS))
    return run


def summary(done: Done) -> str:
    """The second session's summary line (e.g. ``105 passed in 80.12s``)."""
    lines = [line.strip("= ") for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else f"no report (exit status {done.returncode})"


def main(argv: list[str]) -> int:
    os.environ[SECOND] = "1"
    return int(pytest.main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
