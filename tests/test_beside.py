"""The split of a run between the suite's session and the second one (``tests.beside``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import REPO, beside

STDOUT = """\
...........F..                                                           [100%]
=================================== FAILURES ===================================
_________________________________ test_broken __________________________________
E       assert 1 == 2
============================= slowest 25 durations =============================
1.00s call     tests/service/test_reload.py::test_watching_is_off_at_zero
=========================== short test summary info ============================
FAILED tests/service/test_reload.py::test_broken - assert 1 == 2
1 failed, 13 passed in 9.00s
"""


@dataclass
class Item:
    nodeid: str


def items(*paths: str) -> list[Item]:
    return [Item(f"{path}::test_{i}") for i, path in enumerate(paths)]


def test_the_modules_named_exist() -> None:
    assert beside.MODULES and all((REPO / module).is_file() for module in beside.MODULES)


def test_a_run_of_more_than_those_modules_sends_theirs_beside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(beside.SECOND, raising=False)
    run = items("tests/service/test_api.py", "tests/service/test_reload.py", "tests/index/test_x.py")
    kept, others = beside.split(run)  # type: ignore[arg-type]  # only the node ids are read
    assert kept == [run[0], run[2]] and others == [run[1].nodeid]


@pytest.mark.parametrize(
    "paths", [("tests/service/test_api.py",), ("tests/service/test_reload.py", "tests/service/test_shutdown.py")]
)
def test_a_run_of_only_the_one_kind_or_the_second_session_itself_is_not_split(
    monkeypatch: pytest.MonkeyPatch, paths: tuple[str, ...]
) -> None:
    monkeypatch.delenv(beside.SECOND, raising=False)
    run = items(*paths)
    assert beside.split(run) == (run, [])  # type: ignore[arg-type]
    mixed = items("tests/service/test_api.py", "tests/service/test_reload.py")
    monkeypatch.setenv(beside.SECOND, "1")
    assert beside.split(mixed) == (mixed, [])  # type: ignore[arg-type]


def test_the_report_keeps_the_failures_and_the_summary() -> None:
    report = beside.report(STDOUT)
    assert "assert 1 == 2" in report and "FAILED tests/service/test_reload.py::test_broken" in report
    assert "1 failed, 13 passed" in report
    assert "slowest" not in report and "[100%]" not in report and "1.00s call" not in report
    assert beside.summary(beside.Done(1, STDOUT, "", REPO)) == "1 failed, 13 passed in 9.00s"


def test_the_tests_run_so_far_are_counted_from_the_progress_lines() -> None:
    assert beside.tests_run(STDOUT) == 14
    assert beside.tests_run("") == 0
    assert beside.tests_run("..s.\n") == 4  # a line still being written
    assert beside.tests_run(".....F" + " " * 60 + "[ 50%]\n..x") == 9


def test_a_run_selected_with_k_sends_only_the_selected_tests_beside(tmp_path: Path) -> None:
    """A real run: ``-k`` picks one test here and one of a module of the second session, which runs it (and only
    it: the split comes after the selection) and reports; the suite's session passes its own and the wait, saying
    (every half second here) how far the second session is while it waits."""
    selection = "test_the_modules_named_exist or test_spec_parsing"
    env = {k: v for k, v in os.environ.items() if k != beside.SECOND} | {"EMBEDDING_TESTS_PROGRESS_SECONDS": "0.5"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path), "-k"]
    run = subprocess.run(
        [*command, selection, "tests/test_beside.py", "tests/index/build/test_compressed.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "second session (tests/beside.py): 1 passed" in run.stdout
    assert re.search(r"^waiting for the second session: [01] of its 1 tests run$", run.stdout, re.MULTILINE)
    assert re.search(r"^2 passed, \d+ deselected", run.stdout, re.MULTILINE), run.stdout[-2000:]
