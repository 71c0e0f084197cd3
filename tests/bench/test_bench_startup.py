"""The start-up benchmark's ratio (bench/startup.py): verified over unverified, paired by round."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.startup
from bench.common import Context


def test_the_checksums_cost_is_the_median_of_each_rounds_ratio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Round 2's verified start waited for a busy core: each round's ratio 1, 3, 1 (median 1), the medians' 2 / 1.
    verified, unverified = [1.0, 3.0, 2.0], [1.0, 1.0, 2.0]
    ready = {
        "verified": {"median_seconds": 2.0, "seconds": verified, "command": "serve"},
        "unverified": {"median_seconds": 1.0, "seconds": unverified, "command": "serve"},
    }
    monkeypatch.setattr(bench.startup, "ready_times", lambda ctx: ready)
    monkeypatch.setattr(bench.startup, "workers_memory", lambda ctx: {"workers": {}, "command": "memory"})
    ctx = Context(data_dir=tmp_path, work_dir=tmp_path, results_dir=tmp_path)
    (row,) = bench.startup.run(ctx)["targets"]
    assert row["ratio"] == 1.0 and (row["ours"], row["other"]) == (2.0, 1.0)
