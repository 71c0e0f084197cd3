"""A benchmark's quick mode run as ``python -m bench --quick --only NAME``, in a child process started as soon as
the tests are collected (``tests.early``): it runs beside the tests before its module."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.early import Done, Early


def quick_argv(name: str) -> Callable[[Path], list[str]]:
    def argv(out: Path) -> list[str]:
        command = [sys.executable, "-m", "bench", "--quick", "--only", name, "--data-dir", str(out / "no-table")]
        return [*command, "--results-dir", str(out / "results"), "--markdown", str(out / "BENCHMARKS.md")]

    return argv


def quick_early(module: str, fixture: str, name: str) -> Early:
    """The quick run of benchmark ``name``, read by ``fixture`` of test module ``module`` (``quick_run``)."""
    return Early(module, fixture, quick_argv(name))


def quick_run(early: Early, name: str) -> dict[str, Any]:
    """Its result and the BENCHMARKS.md section it renders."""
    done: Done = early.result()
    assert done.returncode == 0, done.stderr[-4000:]
    payload = json.loads((done.out / "results" / f"{name}.json").read_text())
    assert payload["status"] == "ok" and payload["quick"] is True, payload.get("error")
    return {"result": payload["result"], "markdown": (done.out / "BENCHMARKS.md").read_text()}
