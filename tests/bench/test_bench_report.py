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
from bench.common import TABLE


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
