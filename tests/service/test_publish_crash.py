"""A publisher killed with SIGKILL at every step of its publish: the table's name holds a complete version each
time (the old one or the new one), ``embedding-index verify`` says ok, a server started then serves it, and what
the killed publisher left is cleaned up and named.

The publisher is a real ``embedding-index index`` process (tests/service/publish_killer.py) that kills itself right
after the N-th operation it makes on the data directory under the publish lock; N runs over every step it makes.
Each step has a data directory, a publisher and a ``verify`` of its own (processes forked from one that imports
the builder once, two at a time). The table is named after its step (``t3``): what each step's directory holds
is then moved into one data directory, with the names the publishers gave, and one server start serves them all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.store import artifact
from tests import REPO
from tests.conftest import small_raw
from tests.service.real_server import HTTP, start

NEW_INDEX = "hnsw:M=16,efConstruction=40,efSearch=32"
ROWS = 2_000  # the steps of a publish are the same for any number of rows; each step builds the index again
SERVE = {"EMBEDDING_BUILD_DEFERRED": "false"}  # the restored old version must not be indexed behind the test's back


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Path:
    """A data directory whose table ``t`` waits for its approximate index (built with --defer-index)."""
    data_dir = tmp_path_factory.mktemp("pristine") / "data"
    source = {"format": "test", "path": "glove"}
    raw = small_raw(glove_raw, ROWS)
    build_table(raw, data_dir=data_dir, name="t", source=source, index_spec=NEW_INDEX, defer_index=True)
    return data_dir


def run(jobs: list[dict[str, Any]]) -> list[subprocess.CompletedProcess[str]]:
    """Each job's ``embedding-index`` command in a process of its own (tests/service/publish_killer.py)."""
    command = [sys.executable, "-m", "tests.service.publish_killer"]
    driver = subprocess.run(command, cwd=REPO, input=json.dumps(jobs), capture_output=True, text=True, timeout=900)
    assert driver.returncode == 0, driver.stderr
    return [
        subprocess.CompletedProcess(job["argv"], r["returncode"], r["stdout"], r["stderr"])
        for job, r in zip(jobs, json.loads(driver.stdout), strict=True)
    ]


def publisher(data_dir: Path, name: str, step: int, mode: str) -> dict[str, Any]:
    """``embedding-index index NAME`` killed right after the ``step``-th step of its publish (-1: traced)."""
    return {"argv": ["index", name, "--data-dir", str(data_dir)], "kill_at": step, "mode": mode}


def verifier(data_dir: Path, name: str) -> dict[str, Any]:
    return {"argv": ["verify", name, "--data-dir", str(data_dir)]}


def steps(pristine: Path, tmp_path: Path, mode: str) -> list[str]:
    data_dir = tmp_path / f"trace-{mode}"
    shutil.copytree(pristine, data_dir)
    [traced] = run([publisher(data_dir, "t", -1, mode)])
    assert traced.returncode == 0, traced.stderr
    return [line.removeprefix("step: ") for line in traced.stderr.splitlines() if line.startswith("step: ")]


def step_dirs(pristine: Path, tmp_path: Path, mode: str, kills: range) -> dict[int, Path]:
    """A data directory for each step, holding pristine's ``t`` as the step's own table (:func:`table`)."""
    data_dirs = {step: tmp_path / f"{mode}-{step}" for step in kills}
    for step, data_dir in data_dirs.items():
        shutil.copytree(pristine / "t", data_dir / table(step))
    return data_dirs


def table(step: int) -> str:
    return f"t{step}"


def version(data_dir: Path, name: str) -> str:
    """Which version ``name`` is: ``old`` (exact search, index deferred) or ``new`` (its HNSW index)."""
    index = json.loads((data_dir / name / artifact.MANIFEST).read_text())["index"]
    return "old" if index.get("deferred") else "new"


def leftovers(data_dir: Path) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith((".tmp-", ".old-")))


def gather(data_dirs: list[Path], into: Path) -> Path:
    """Move what every step's data directory holds into ``into``, as it is (the names are the steps' own)."""
    into.mkdir()
    for data_dir in data_dirs:
        for entry in data_dir.iterdir():
            assert not (into / entry.name).exists(), entry
            entry.rename(into / entry.name)
    return into


def serves(data_dir: Path, names: list[str], log: Path) -> str:
    """Start a server over ``data_dir``: it is ready with every table of ``names`` and answers from each; return
    its log."""
    server = start(data_dir, log, env=SERVE)
    try:
        ready = HTTP.get(f"{server.base}/readyz")
        assert ready.status_code == 200 and ready.json()["loaded"] == sorted(names), ready.text
        for name in names:
            params = {"token": "heart", "k": 5}
            found = HTTP.get(f"{server.base}/v1/tables/{name}/neighbors", params=params, timeout=30)
            assert found.status_code == 200 and len(found.json()["neighbors"]) == 5, (name, found.text)
        return server.log()
    finally:
        server.stop()


def test_a_publish_killed_at_any_step_leaves_the_table_whole(pristine: Path, tmp_path: Path) -> None:
    trace = steps(pristine, tmp_path, "exchange")
    assert any(s.startswith("exchange") for s in trace) and not any(s.startswith("rename") for s in trace), trace
    data_dirs = step_dirs(pristine, tmp_path, "exchange", range(len(trace) + 1))

    killed = run([publisher(d, table(step), step, "exchange") for step, d in data_dirs.items()])
    seen, left = [], []
    for (step, data_dir), publish in zip(data_dirs.items(), killed, strict=True):
        assert publish.returncode == -9, (step, publish.returncode, publish.stderr[-2000:])
        # Right after the kill, before anyone repairs anything: a complete, verified version under the name.
        assert artifact.verify(data_dir / table(step)).ok, step
        seen.append(version(data_dir, table(step)))
        left.append(leftovers(data_dir))

    checked = run([verifier(d, table(step)) for step, d in data_dirs.items()])
    for (step, data_dir), verified, its_left in zip(data_dirs.items(), checked, left, strict=True):
        assert verified.returncode == 0, (step, verified.stderr)
        assert verified.stdout == f"{table(step)}: ok\n", (step, verified.stdout, verified.stderr)
        for name in its_left:  # each leftover named, with what was done
            assert f"{name}: removed" in verified.stderr, (step, verified.stderr)
        assert [p.name for p in data_dir.iterdir()] == [table(step)], step  # all the server will see of it

    served = gather(list(data_dirs.values()), tmp_path / "served")
    serves(served, [table(step) for step in data_dirs], tmp_path / "served.log")
    exchanged = next(i for i, s in enumerate(trace) if s.startswith("exchange")) + 1
    assert seen == ["old"] * exchanged + ["new"] * (len(seen) - exchanged), (trace, seen)


def test_a_publish_by_two_renames_killed_between_them_is_rolled_back_at_start_up(
    pristine: Path, tmp_path: Path
) -> None:
    """Where the file system cannot exchange two directories, the name is empty between the two renames: the
    server's start-up (and ``verify``, and the next build) put the old version back, in one log line."""
    trace = steps(pristine, tmp_path, "renames")
    renames = [i + 1 for i, s in enumerate(trace) if s.startswith("rename")]
    assert len(renames) == 2, trace
    data_dirs = step_dirs(pristine, tmp_path, "renames", range(renames[0] - 1, len(trace) + 1))

    killed = run([publisher(d, table(step), step, "renames") for step, d in data_dirs.items()])
    parked = {}
    for (step, data_dir), publish in zip(data_dirs.items(), killed, strict=True):
        assert publish.returncode == -9, (step, publish.stderr[-2000:])
        parked[step] = [p.name for p in data_dir.glob(f".old-{table(step)}-*")]
        between = not (data_dir / table(step)).exists()
        assert between == (step == renames[0]) and (parked[step] or not between), (step, leftovers(data_dir))

    # One start-up over what every killed publisher left: it puts back the version parked between the renames.
    served = gather(list(data_dirs.values()), tmp_path / "served")
    log = serves(served, [table(step) for step in data_dirs], tmp_path / "served.log")
    [line] = [line for line in log.splitlines() if "a publish was interrupted" in line]
    assert parked[renames[0]][0] in line and f"restored as {table(renames[0])!r}" in line, line
    assert version(served, table(renames[0])) == "old"
    assert leftovers(served) == []

    checked = run([verifier(served, table(step)) for step in data_dirs])
    for step, verified in zip(data_dirs, checked, strict=True):
        assert verified.returncode == 0 and verified.stdout == f"{table(step)}: ok\n", (step, verified.stderr)
        assert version(served, table(step)) == ("new" if step >= renames[1] else "old"), step
