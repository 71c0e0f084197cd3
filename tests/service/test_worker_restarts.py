"""``embedding-serve --workers 2`` killed outright: the temporary directories it made (metrics, index builds'
status) removed by the next server, never those a running server holds.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from index.build.sources import RawTable
from service import temp_dirs
from service.temp_dirs import INDEX_STATUS, METRICS
from tests.service.real_server import HTTP, Server, start
from tests.service.test_reload import V1, build

KEY = "read-key-for-restarts-0123456789"
ARGS = ("--workers", "2", "--threads", "1")


@dataclass
class Served:
    server: Server
    data_dir: Path
    key_file: Path
    temp: Path  # the server's TMPDIR, where it makes its metrics directory
    left: list[Path]  # the metrics and index status directories a server killed outright left there


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("restarts")
    data_dir, temp, key_file = root / "data", root / "tmp", root / "read-key"
    build(glove_raw, data_dir, "t", V1)
    temp.mkdir()
    key_file.write_text(f"{KEY}\n")  # as a mounted secret: each worker reads it at its start
    env = {"TMPDIR": str(temp), "EMBEDDING_READ_API_KEY_FILE": str(key_file)}
    # kill -9 of a supervisor: its workers drain and exit (the kernel sends them SIGTERM), its metrics directory stays
    killed = start(data_dir, root / "killed.log", *ARGS, env=env)
    workers = psutil.Process(killed.process.pid).children()
    left = [path for prefix in (METRICS, INDEX_STATUS) for path in temp.glob(f"{prefix}{killed.process.pid}-*")]
    killed.process.kill()
    killed.process.wait()
    assert not psutil.wait_procs(workers, timeout=30)[1]
    assert len(left) == 2 and all(path.is_dir() for path in left)
    server = start(data_dir, root / "server.log", *ARGS, env=env)
    try:
        yield Served(server, data_dir, key_file, temp, left)
    finally:
        server.stop()


def workers(server: Server) -> list[psutil.Process]:
    return psutil.Process(server.process.pid).children()


def test_a_new_supervisor_removes_the_temporary_directories_of_one_killed_outright(served: Served) -> None:
    assert not any(path.exists() for path in served.left)
    for prefix in (METRICS, INDEX_STATUS):
        [own] = served.temp.glob(f"{prefix}*")  # its own, named by its pid, in use
        assert own.name.startswith(f"{prefix}{served.server.process.pid}-")
    metrics = HTTP.get(f"{served.server.base}/metrics")  # the workers' metrics kept there
    assert metrics.status_code == 200 and "embedding_answer_cache_total" in metrics.text


def test_only_this_users_metrics_directories_no_process_holds_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory whose lock a running server holds is kept, whatever the pid in its name; so are a link, another
    user's directory (when the tests may make one) and those of other names."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    abandoned, running, foreign = (tmp_path / f"{METRICS}{name}" for name in ("1-abandoned", "1-running", "2-foreign"))
    for directory in (abandoned, running, foreign, tmp_path / "embedding-metrics-1", tmp_path / f"{INDEX_STATUS}1-x"):
        directory.mkdir()
    if os.getuid() == 0:
        os.chown(foreign, 65534, 65534)  # nobody's
    (tmp_path / f"{METRICS}3-link").symlink_to(abandoned)
    held = os.open(running, os.O_RDONLY | os.O_DIRECTORY)  # as the running server's supervisor holds it
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert temp_dirs.remove_abandoned(METRICS) == [str(abandoned)] + ([] if os.getuid() == 0 else [str(foreign)])
    finally:
        os.close(held)
    kept = {running.name, f"{METRICS}3-link", "embedding-metrics-1", f"{INDEX_STATUS}1-x"}  # the last: not asked
    assert kept <= {p.name for p in tmp_path.iterdir()}
