"""``cores()``: the CPUs a worker may use, including a container's CPU limit (cgroup v2 ``cpu.max``; cgroup v1 in
test_settings.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.settings import cores


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [
        ("max 100000\n", None),  # no quota: the CPUs it may run on
        ("150000 100000\n", 2),  # 1.5 CPUs: rounded up
        ("50000 100000\n", 1),  # half a CPU: still one
        ("100000 100000\n", 1),
        ("garbage\n", None),
    ],
)
def test_cores_follow_the_cgroup_quota(tmp_path: Path, cpu_max: str, expected: int | None) -> None:
    affinity = len(os.sched_getaffinity(0))
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    assert cores(path) == (affinity if expected is None else min(affinity, expected))


def test_cores_without_a_cgroup_file(tmp_path: Path) -> None:
    assert cores(tmp_path / "missing") == len(os.sched_getaffinity(0))
