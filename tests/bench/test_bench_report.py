"""What BENCHMARKS.md says of each run (bench/__main__.py, bench/report.py): the machine it ran on and the load
average when it started and when it ended, read from the run's results file."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import bench.__main__ as bench_main
from bench import report
from bench.common import REPO, TABLE


def test_each_run_records_the_load_average_at_its_start_and_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    averages: Iterator[tuple[float, float, float]] = iter([(9.0, 8.0, 7.0)])  # then the end's, for every later call
    monkeypatch.setattr(bench_main.os, "getloadavg", lambda: next(averages, (1.5, 2.0, 3.0)))

    def runner(name: str) -> Callable[..., dict[str, Any]]:
        return lambda ctx: {"targets": []}

    monkeypatch.setattr(bench_main, "runner", runner)
    results, markdown = tmp_path / "results", tmp_path / "BENCHMARKS.md"
    argv = ["--only", "writes", "--data-dir", str(tmp_path), "--results-dir", str(results), "--markdown", str(markdown)]
    assert bench_main.main(argv) == 0
    payload = json.loads((results / "writes.json").read_text())
    assert payload["load_average_at_start"] == [9.0, 8.0, 7.0]
    assert payload["machine"]["load_average"] == [1.5, 2.0, 3.0]
    (row,) = [line for line in markdown.read_text().splitlines() if line.startswith("| writes |")]
    assert "| 9 / 8 / 7 | 1.5 / 2 / 3 |" in row


def result(cpu: str, start: list[float] | None) -> dict[str, Any]:
    machine = {"cpu": cpu, "cores": 2, "ram_gib": 23.5, "kernel": "6", "python": "3.11", "load_average": [1, 1, 1]}
    machine["date"] = "2026-12-06 21:00:00 UTC"
    payload = {"quick": False, "rounds": 3, "command": "cmd", "machine": machine, "versions": {}, "status": "ok"}
    if start is not None:
        payload["load_average_at_start"] = start
    return {**payload, "result": {"targets": []}}


def test_the_machine_table_names_each_runs_machine() -> None:
    text = report.render({"analogy": result("AMD EPYC", [0.5, 0.6, 0.7]), "text": result("Intel Xeon", None)})
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "| AMD EPYC, 2 cores |" in rows["analogy"] and "| 0.5 / 0.6 / 0.7 | 1 / 1 / 1 |" in rows["analogy"]
    assert "| Intel Xeon, 2 cores |" in rows["text"] and "| - | 1 / 1 / 1 |" in rows["text"]  # an older results file


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("neighbours", ["--table", "mine", "--seconds", "3"]),
        ("growth", ["--seconds", "2.5", "--fresh", "--growth-rows", "1000", "2000", "--growth-dims", "8"]),
        ("peers", ["--peers-rows", "500", "--peers-systems", "chroma", "--peers-busy"]),
    ],
)
def test_the_recorded_command_reruns_the_benchmark_with_the_same_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, options: list[str]
) -> None:
    monkeypatch.setattr(bench_main, "runner", lambda name: lambda ctx, *partial: {"targets": []})
    (tmp_path / "mine" / "manifest.json").parent.mkdir()
    (tmp_path / "mine" / "manifest.json").write_text("{}")
    (tmp_path / TABLE).mkdir()
    (tmp_path / TABLE / "manifest.json").write_text("{}")
    results = tmp_path / "results"
    argv = ["--only", name, "--rounds", "2", *options, "--data-dir", str(tmp_path), "--results-dir", str(results)]
    assert bench_main.main([*argv, "--markdown", str(tmp_path / "BENCHMARKS.md")]) == 0
    command = json.loads((results / f"{name}.json").read_text())["command"]
    assert command.startswith(".venv/bin/python -m bench ")
    rerun, ran = bench_main.parse_args(shlex.split(command)[3:]), bench_main.parse_args(argv)
    assert vars(rerun) == {**vars(ran), "results_dir": rerun.results_dir}  # the results go where the reader says


def rendered(tmp_path: Path, *names: str) -> Path:
    """A BENCHMARKS.md with the sections of ``names`` and hand-written notes below the marker."""
    sections = "".join(f"## {report.TITLES[name]}\n\nfigures of {name}\n\n" for name in names)
    markdown = tmp_path / "BENCHMARKS.md"
    markdown.write_text(f"# Benchmarks\n\n{sections}\n<!-- notes -->\nnotes\n")
    return markdown


def test_a_rerun_that_would_drop_another_benchmarks_section_stops_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def runner(name: str) -> Callable[..., dict[str, Any]]:
        raise AssertionError("nothing is run")

    monkeypatch.setattr(bench_main, "runner", runner)
    markdown = rendered(tmp_path, "analogy", "writes")
    before = markdown.read_text()
    argv = ["--only", "writes", "--results-dir", str(tmp_path / "results"), "--markdown", str(markdown)]
    assert bench_main.main(argv) == 2  # analogy's figures are in the file, not in the (empty) results dir
    assert markdown.read_text() == before and not (tmp_path / "results").exists()


def test_a_failed_rerun_leaves_the_sections_figures_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(ctx: Any) -> dict[str, Any]:
        raise RuntimeError("the server did not start")

    monkeypatch.setattr(bench_main, "runner", lambda name: failing)
    markdown = rendered(tmp_path, "writes")
    before = markdown.read_text()
    argv = ["--only", "writes", "--results-dir", str(tmp_path / "results"), "--markdown", str(markdown)]
    assert bench_main.main(argv) == 1
    assert json.loads((tmp_path / "results" / "writes.json").read_text())["status"] == "failed"
    assert markdown.read_text() == before  # not replaced by "Not measured: the run failed"


def test_the_quick_mode_writes_into_build_unless_told_otherwise() -> None:
    args = bench_main.parse_args(["--quick"])
    assert args.results_dir == REPO / "build" / "bench-quick"
    assert args.markdown == REPO / "build" / "bench-quick" / "BENCHMARKS.md"
    args = bench_main.parse_args([])
    assert args.results_dir == REPO / "bench" / "results" and args.markdown == REPO / "BENCHMARKS.md"
