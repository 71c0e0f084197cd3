"""A publisher killed with SIGKILL at every step of its publish: the table's name holds a complete version each
time (the old one or the new one), ``embedding-index verify`` says ok, a server started then serves it, and what
the killed publisher left is cleaned up and named.

The publisher is a real ``embedding-index index`` process (tests/service/publish_killer.py) that kills itself right
after the N-th operation it makes on the data directory under the publish lock; N runs over every step it makes.
Each step has a data directory, a publisher, a ``verify`` and a server of its own: two steps run at a time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.store import artifact
from tests import REPO
from tests.conftest import small_raw
from tests.service.real_server import BIN, HTTP, start

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


def publish(data_dir: Path, step: int, mode: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tests.service.publish_killer", str(step), mode]
    command += ["index", "t", "--data-dir", str(data_dir)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)


def steps(pristine: Path, tmp_path: Path, mode: str) -> list[str]:
    data_dir = tmp_path / f"trace-{mode}"
    shutil.copytree(pristine, data_dir)
    traced = publish(data_dir, -1, mode)
    assert traced.returncode == 0, traced.stderr
    return [line.removeprefix("step: ") for line in traced.stderr.splitlines() if line.startswith("step: ")]


def version(data_dir: Path) -> str:
    """Which version ``t`` is: ``old`` (exact search, index deferred) or ``new`` (its HNSW index)."""
    index = json.loads((data_dir / "t" / artifact.MANIFEST).read_text())["index"]
    return "old" if index.get("deferred") else "new"


def leftovers(data_dir: Path) -> list[str]:
    return sorted(p.name for p in data_dir.iterdir() if p.name.startswith((".tmp-", ".old-")))


def verify(data_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "embedding-index"), "verify", "t", "--data-dir", str(data_dir)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def serves(data_dir: Path, log: Path) -> str:
    """Start a server over ``data_dir``: it is ready with ``t`` and answers from it; return its log."""
    server = start(data_dir, log, env=SERVE)
    try:
        ready = HTTP.get(f"{server.base}/readyz")
        assert ready.status_code == 200 and ready.json()["loaded"] == ["t"], ready.text
        found = HTTP.get(f"{server.base}/v1/tables/t/neighbors", params={"token": "heart", "k": 5}, timeout=30)
        assert found.status_code == 200 and len(found.json()["neighbors"]) == 5, found.text
        return server.log()
    finally:
        server.stop()


def each(steps: Iterable[int], check: Callable[[int], str | None]) -> list[str | None]:
    """``check(step)`` of every step, in order, two steps at a time (they share nothing but ``pristine``)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(check, steps))


def test_a_publish_killed_at_any_step_leaves_the_table_whole(pristine: Path, tmp_path: Path) -> None:
    trace = steps(pristine, tmp_path, "exchange")
    assert any(s.startswith("exchange") for s in trace) and not any(s.startswith("rename") for s in trace), trace

    def killed_at(step: int) -> str:
        data_dir = tmp_path / f"exchange-{step}"
        shutil.copytree(pristine, data_dir)
        killed = publish(data_dir, step, "exchange")
        assert killed.returncode == -9, (step, killed.returncode, killed.stderr[-2000:])
        # Right after the kill, before anyone repairs anything: a complete, verified version under the name.
        assert artifact.verify(data_dir / "t").ok, step
        seen = version(data_dir)
        left = leftovers(data_dir)
        checked = verify(data_dir)
        assert checked.returncode == 0 and checked.stdout == "t: ok\n", (step, checked.stdout, checked.stderr)
        for name in left:  # each leftover named, with what was done
            assert f"{name}: removed" in checked.stderr, (step, checked.stderr)
        assert leftovers(data_dir) == []
        serves(data_dir, tmp_path / f"exchange-{step}.log")
        return seen

    seen = each(range(len(trace) + 1), killed_at)
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

    def killed_at(step: int) -> None:
        data_dir = tmp_path / f"renames-{step}"
        shutil.copytree(pristine, data_dir)
        killed = publish(data_dir, step, "renames")
        assert killed.returncode == -9, (step, killed.stderr[-2000:])
        parked = [p.name for p in data_dir.glob(".old-t-*")]
        between = not (data_dir / "t").exists()
        assert between == (step == renames[0]) and (parked or not between), (step, leftovers(data_dir))
        log = serves(data_dir, tmp_path / f"renames-{step}.log")
        if between:
            [line] = [line for line in log.splitlines() if "a publish was interrupted" in line]
            assert parked[0] in line and "restored as 't'" in line, line
            assert version(data_dir) == "old"
        assert leftovers(data_dir) == []
        checked = verify(data_dir)
        assert checked.returncode == 0 and checked.stdout == "t: ok\n", (step, checked.stderr)
        assert version(data_dir) == ("new" if step >= renames[1] else "old")

    each(range(renames[0] - 1, len(trace) + 1), killed_at)
