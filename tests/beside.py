"""Test modules that run in two more pytest sessions, beside the suite's own.

The suite's process runs its tests one after the other, and many of them mostly wait: the server tests on their
servers (kill -9 in a stream of writes, restarts, reloads, shutdowns, crashed publications, indexes built in the
background, compactions, nginx in front, clients on raw sockets left at the time-outs), the builder's tests on the
commands they run (every format's reader, shards, a Ray cluster, kustomize), the stored format's on the processes
they start (an import filling a disk, a write log's appenders). Meanwhile a core is left to the work beside the
tests (the default table's graph, the early commands), and once that is done it idles. So the modules of
:data:`SECOND` (those, and a few that build tables in process) run in a second session instead
(``python -m tests.beside <node ids>``, with a temporary directory of its own), started with the suite at the tests'
own priority, so the two sessions share the cores while the table's graph is built. The modules of :data:`THIRD`
(those that read the default table but no early command, and a few of both others' that mostly wait) run in a
third session, started once the table is built (at once when it is cached): from then on, the two sessions alone
left a core mostly idle. The three sessions take about as long. The suite's session ends with one test for each
other session, which waits for it and fails with its report when any of its tests failed; their summary lines, each
naming its session, come before the suite's.

Only a run of more than these modules is split: a run of some of them alone (``pytest tests/service/test_reload.py``)
runs them in its own process as before. No module here reads an early command (``tests.early``), and those of the
second session read no default table (``glove_data_dir``; ``tests/conftest.py`` refuses the split otherwise): the
sessions beside make only their own small fixtures, and wait for nothing the first one does but the table.
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.early import Done, Early


def modules(*names: str) -> frozenset[str]:
    return frozenset(f"tests/{name}.py" for name in names)


@dataclass(frozen=True)
class Beside:
    """A pytest session beside the suite's own, and the test modules it runs."""

    name: str  # "second", "third"
    modules: frozenset[str]
    reads_table: bool = False  # its modules may read the default table: it starts once the table is built


SECOND = Beside(
    "second",
    modules(
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
        "service/test_compaction",
        "service/test_compaction_faults",
        "service/test_documents_answer_bytes",
        "service/test_documents_scroll",
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
        "service/test_shards_front_compaction",
        "service/test_shards_front_ids",
        "service/test_shards_front_imports",
        "service/test_shards_replicas",
        "service/test_shards_words",
        "service/test_shards_writes_http",
        "service/test_shutdown",
        "service/test_work_bounds",
        "service/test_write_durability",
        "service/test_write_load",
        "service/test_writes_api",
    ),
)
THIRD = Beside(
    "third",
    modules(
        "bench/test_bench_before_after",
        "bench/test_bench_scoring",
        "deploy/test_docker",
        "deploy/test_nginx_walk",
        "index/engine/test_document_search",
        "index/engine/test_door",
        "index/engine/test_gensim_parity",
        "index/store/test_tokens",
        "service/test_auto_compaction",
        "service/test_background_index",
        "service/test_client_docs",
        "service/test_documented_examples",
        "service/test_exposure",
        "service/test_folder_demo",
        "service/test_load",
        "service/test_metric_files",
        "service/test_metrics_scrape",
        "service/test_parity",
        "service/test_request_path",
        "service/test_searcher",
        "service/test_word_fuzz",
        "service/test_worker_restarts",
    ),
    reads_table=True,
)
SESSIONS = (SECOND, THIRD)
INSIDE = "EMBEDDING_TESTS_BESIDE"  # set in a session beside: it runs its tests itself
REPORT_CHARS = 20_000
# How often the suite's last tests say how far a session beside is, while they wait for it.
PROGRESS_SECONDS = float(os.environ.get("EMBEDDING_TESTS_PROGRESS_SECONDS", "20"))
RESULT_LETTERS = ".FEsxX"  # what a line of ``pytest -q``'s progress starts with: one letter a test


def split(items: list[pytest.Item]) -> tuple[list[pytest.Item], dict[Beside, list[str]]]:
    """The items this session runs, and the node ids each session beside runs (none: all here)."""
    if os.environ.get(INSIDE):
        return items, {}
    here: list[pytest.Item] = []
    beside: dict[Beside, list[str]] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        other = next((part for part in SESSIONS if module in part.modules), None)
        if other is None:
            here.append(item)
        else:
            beside.setdefault(other, []).append(item.nodeid)
    if not beside or not here:
        return items, {}
    return here, beside


def session_job(part: Beside, nodeids: list[str]) -> Early:
    """A session beside, as an early command (``tests.early``) at the tests' own priority: its servers answer
    on clocks (timeouts, drains) that starve at nice 19."""

    def argv(out: Path) -> list[str]:
        options = ["-q", "-p", "no:cacheprovider", "--basetemp", str(out / "tmp")]
        return [sys.executable, "-u", "-m", __name__, *options, *nodeids]  # unbuffered: its progress is read

    return Early(__name__, f"beside-{part.name}", argv, nice=0)


class Failed(Exception):
    def __init__(self, done: Done) -> None:
        super().__init__(done.returncode)
        self.done = done


class Wait(pytest.Item):
    """One of the suite's last tests: a session beside (``part``) has ended and all its tests passed."""

    def __init__(self, *, part: Beside, job: Early, count: int, table: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.part, self.job, self.count = part, job, count
        self.table = table  # some of its tests read the default table: it starts once the table is built
        self.done: Done | None = None  # once it has ended

    def runtest(self) -> None:
        waited = 0.0
        while waited < self.job.timeout and not self.job.wait(PROGRESS_SECONDS):
            run = tests_run(self.job.stdout())
            line = f"waiting for the {self.part.name} session: {run} of its {self.count} tests run"
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
            f"the {self.part.name} session ({self.count} tests, tests/beside.py) exited with {done.returncode}:\n"
            f"{report(done.stdout)[-REPORT_CHARS:]}\n{done.stderr[-3000:]}"
        )

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"the {self.count} tests of the {self.part.name} session"


def report(stdout: str) -> str:
    """A session's failures and its short summary, without its progress and slowest durations."""
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
    """A session's summary line (e.g. ``105 passed in 80.12s``)."""
    lines = [line.strip("= ") for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else f"no report (exit status {done.returncode})"


def main(argv: list[str]) -> int:
    os.environ[INSIDE] = "1"
    return int(pytest.main(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
