"""The split of a run between the suite's session and the second one (``tests.beside``)."""

from __future__ import annotations

from dataclasses import dataclass

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
