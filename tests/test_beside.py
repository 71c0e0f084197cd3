"""The split of a run between the suite's session and the second one (``tests.beside``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

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


THIRD_MODULE = sorted(beside.THIRD.modules)[0]


def test_the_modules_named_exist_each_in_one_session() -> None:
    for part in beside.SESSIONS:
        assert part.modules and all((REPO / module).is_file() for module in part.modules), part.name
    assert not beside.SECOND.modules & beside.THIRD.modules


def test_a_run_of_more_than_those_modules_sends_theirs_beside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(beside.INSIDE, raising=False)
    run = items("tests/service/test_api.py", "tests/service/test_reload.py", "tests/index/test_x.py", THIRD_MODULE)
    kept, others = beside.split(run)  # type: ignore[arg-type]  # only the node ids are read
    assert kept == [run[0], run[2]]
    assert others == {beside.SECOND: [run[1].nodeid], beside.THIRD: [run[3].nodeid]}


@pytest.mark.parametrize(
    "paths",
    [
        ("tests/service/test_api.py",),
        ("tests/service/test_reload.py", "tests/service/test_shutdown.py"),
        ("tests/service/test_reload.py", THIRD_MODULE),
    ],
)
def test_a_run_without_the_suite_s_own_modules_or_in_a_session_beside_is_not_split(
    monkeypatch: pytest.MonkeyPatch, paths: tuple[str, ...]
) -> None:
    monkeypatch.delenv(beside.INSIDE, raising=False)
    run = items(*paths)
    assert beside.split(run) == (run, {})  # type: ignore[arg-type]
    mixed = items("tests/service/test_api.py", "tests/service/test_reload.py", THIRD_MODULE)
    monkeypatch.setenv(beside.INSIDE, "1")
    assert beside.split(mixed) == (mixed, {})  # type: ignore[arg-type]


def test_the_report_keeps_the_failures_and_the_summary() -> None:
    report = beside.report(STDOUT)
    assert "assert 1 == 2" in report and "FAILED tests/service/test_reload.py::test_broken" in report
    assert "1 failed, 13 passed" in report
    assert "slowest" not in report and "[100%]" not in report and "1.00s call" not in report
    assert beside.summary(beside.Done(1, STDOUT, "", REPO)) == "1 failed, 13 passed in 9.00s"


def test_a_failed_session_beside_is_named_with_its_report() -> None:
    done = beside.Done(1, STDOUT, "", REPO)
    wait = SimpleNamespace(part=beside.THIRD, count=14)  # what the report reads of the waiting test
    with pytest.raises(beside.Failed) as failed:
        raise beside.Failed(done)
    text = beside.Wait.repr_failure(wait, failed)  # type: ignore[arg-type]
    assert text.startswith("the third session (14 tests, tests/beside.py) exited with 1:\n")
    assert "FAILED tests/service/test_reload.py::test_broken" in text and "1 failed, 13 passed" in text


def test_the_tests_run_so_far_are_counted_from_the_progress_lines() -> None:
    assert beside.tests_run(STDOUT) == 14
    assert beside.tests_run("") == 0
    assert beside.tests_run("..s.\n") == 4  # a line still being written
    assert beside.tests_run(".....F" + " " * 60 + "[ 50%]\n..x") == 9


def test_a_run_selected_with_k_sends_only_the_selected_tests_beside(tmp_path: Path) -> None:
    """A real run: ``-k`` picks one test here, one of a module of the second session and one of the third's, which
    run them (and only them: the split comes after the selection) and report; the suite's session passes its own
    and the waits, saying (every half second here) how far a session beside is while it waits."""
    selection = "test_the_modules_named_exist or test_a_payload_must_be_json and whole or test_a_table_of_empty_labels"
    env = {k: v for k, v in os.environ.items() if k != beside.INSIDE} | {"EMBEDDING_TESTS_PROGRESS_SECONDS": "0.5"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path), "-k"]
    modules = ["tests/test_beside.py", "tests/index/store/test_writelog.py", "tests/index/store/test_tokens.py"]
    run = subprocess.run(
        [*command, selection, *modules], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for name in ("second", "third"):
        assert f"{name} session (tests/beside.py): 1 passed" in run.stdout, run.stdout[-2000:]
    # The third session may be done by the time its wait comes, after the second's.
    assert re.search(r"^waiting for the second session: [01] of its 1 tests run$", run.stdout, re.MULTILINE)
    assert re.search(r"^3 passed, \d+ deselected", run.stdout, re.MULTILINE), run.stdout[-2000:]
