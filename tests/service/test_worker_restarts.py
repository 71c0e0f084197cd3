"""``embedding-serve --workers 2`` replacing its workers: the temporary directories of a supervisor killed
outright (metrics, index builds' status) removed by the next one, a replacement serving the version its siblings
serve, and a worker that dies at its start replaced less and less often. One real server for them all (its data
directory unwatched, as the real servers of the tests run), after one killed outright; the last test stops it.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from index.build.sources import RawTable
from service import temp_dirs
from service.restarts import FIRST_WAIT_SECONDS, MAX_WAIT_SECONDS, RestartWaits
from service.temp_dirs import INDEX_STATUS, METRICS
from tests.service.real_server import HTTP, Server, start, wait_for, workers_started
from tests.service.test_reload import V1, V2, build

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


def rows_served_by(worker: psutil.Process, server: Server) -> int:
    """The rows of table t as ``worker`` serves them: the others are stopped meanwhile, so it takes the connection."""
    others = [w for w in workers(server) if w.pid != worker.pid]
    for other in others:
        other.suspend()
    try:
        return int(HTTP.get(f"{server.base}/v1/tables/t", headers={"X-API-Key": KEY}, timeout=10).json()["rows"])
    finally:
        for other in others:
            other.resume()


def test_a_new_supervisor_removes_the_temporary_directories_of_one_killed_outright(served: Served) -> None:
    assert not any(path.exists() for path in served.left)
    for prefix in (METRICS, INDEX_STATUS):
        [own] = served.temp.glob(f"{prefix}*")  # its own, named by its pid, in use
        assert own.name.startswith(f"{prefix}{served.server.process.pid}-")
    metrics = HTTP.get(f"{served.server.base}/metrics")  # the workers' metrics kept there
    assert metrics.status_code == 200 and "embedding_answer_cache_total" in metrics.text


def test_a_replacement_serves_the_version_the_other_workers_serve(served: Served, glove_raw: RawTable) -> None:
    """A new version published while the data directory is not watched, then a worker killed: its replacement
    loads the new version (the old one's files are gone), and the other worker reloads once it serves, so every
    worker answers from the same version."""
    server = served.server
    first, other = workers(server)
    assert rows_served_by(first, server) == rows_served_by(other, server) == V1
    build(glove_raw, served.data_dir, "t", V2)  # published; nothing reloads it
    reloads = server.log().count("reload: 1 loaded")
    first.kill()
    wait_for(lambda: server.log().count("reload: 1 loaded") > reloads, seconds=30, what="the other worker's reload")
    replacement = next(w for w in workers(server) if w.pid != other.pid)
    assert rows_served_by(replacement, server) == rows_served_by(other, server) == V2
    assert f"serves in place of a dead one, workers [{other.pid}] reload their tables." in server.log()


def test_a_worker_sigttin_adds_serves_the_version_the_others_serve(served: Served, glove_raw: RawTable) -> None:
    """A worker added (SIGTTIN) loads the version published since the others' last reload: they reload once it
    serves, as for a replacement. SIGTTOU takes it out again."""
    server = served.server
    build(glove_raw, served.data_dir, "t", V1)  # published; nothing reloads it
    started, reloads = workers_started(server), server.log().count("reload: 1 loaded")
    server.process.send_signal(signal.SIGTTIN)
    wait_for(lambda: server.log().count("reload: 1 loaded") == reloads + 2, seconds=30, what="the others' reloads")
    assert workers_started(server) == started + 1 and "serves added on SIGTTIN, workers [" in server.log()
    assert {rows_served_by(worker, server) for worker in workers(server)} == {V1}
    server.process.send_signal(signal.SIGTTOU)
    wait_for(lambda: len(workers(server)) == 2, seconds=30, what="the added worker gone")


def test_a_slot_sigttou_removes_while_its_replacement_waits_leaves_no_wait(served: Served) -> None:
    """SIGTTOU removes a slot whose workers die at their start, while its replacement waits; a worker SIGTTIN then
    adds in that slot, dying at its start too, is replaced after the first wait, not that slot's doubled one."""
    server = served.server
    aside = served.key_file.with_name("aside")
    served.key_file.rename(aside)
    try:
        mark = len(server.log())
        server.process.send_signal(signal.SIGTTIN)  # dies at its start, and its replacements
        wait_for(lambda: "replacing it in 2.0 s" in server.log()[mark:], seconds=30, what="a slot waiting 2 s")
        server.process.send_signal(signal.SIGTTOU)  # the waiting slot
        wait_for(lambda: "decreasing number" in server.log()[mark:], seconds=10, what="SIGTTOU handled")
        mark = len(server.log())
        server.process.send_signal(signal.SIGTTIN)
        wait_for(lambda: "replacing it in" in server.log()[mark:], seconds=30, what="the added worker's death")
        assert "replacing it in 0.5 s" in server.log()[mark:], server.log()[mark:]
        server.process.send_signal(signal.SIGTTOU)
        wait_for(lambda: "decreasing number" in server.log()[mark:], seconds=10, what="SIGTTOU handled")
    finally:
        aside.rename(served.key_file)
    assert len(workers(server)) == 2


def test_a_worker_that_dies_at_its_start_is_replaced_less_and_less_often(served: Served) -> None:
    """The key file gone (a secret unmounted): a worker killed is replaced by workers that die at their start,
    each after a wait that doubles, while the other worker serves. The file back, a worker serves again within
    the longest wait. Stops the server, while a replacement waits: at once."""
    server = served.server
    aside = served.key_file.with_name("aside")
    served.key_file.rename(aside)
    victim, other = workers(server)
    mark = len(server.log())
    started = workers_started(server)
    victim.kill()
    # uvicorn's supervisor replaced such a worker on every pass of its half-second loop, with no wait
    wait_for(lambda: "replacing it in 2.0 s" in server.log()[mark:], what="a wait of 2 s")
    log = server.log()[mark:]
    log = log[: log.index("replacing it in 2.0 s")]
    waits = re.findall(r"replacing it in ([0-9.]+) s", log)
    failed = log.count("EMBEDDING_READ_API_KEY_FILE: cannot read")
    # the waits double from FIRST_WAIT_SECONDS (service.restarts), the victim's own death the first of them if it
    # lived less than STEADY_SECONDS
    assert waits == ["0.5", "1.0"] and failed in (2, 3), server.log()[mark:]
    headers = {"X-API-Key": KEY}
    assert HTTP.get(f"{server.base}/v1/tables/t", headers=headers, timeout=10).status_code == 200  # the other
    aside.rename(served.key_file)
    back = time.monotonic()
    wait_for(lambda: workers_started(server) == started + 1, seconds=MAX_WAIT_SECONDS + 10, what="a worker back")
    assert time.monotonic() - back < MAX_WAIT_SECONDS
    assert other in workers(server) and len(workers(server)) == 2

    served.key_file.rename(aside)
    mark = len(server.log())
    fifth = FIRST_WAIT_SECONDS * 2**4  # the slot's fifth wait, the one the supervisor is in when it is stopped
    line = f"replacing it in {fifth:.1f} s"
    unseen = time.monotonic()  # the last look that found the fifth wait not begun: its line comes after this
    next(w for w in workers(server) if w.pid != other.pid).kill()  # its slot's wait goes on doubling, to the fifth
    deadline = unseen + 60
    while True:
        looked = time.monotonic()
        if line in server.log()[mark:]:
            break
        unseen = looked
        assert looked < deadline, f"timed out after 60s waiting for {line!r}"
        time.sleep(0.05)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=60) in (0, -signal.SIGTERM)
    # a supervisor that waited out the slot's wait before handling SIGTERM exits that wait after its line at the soonest
    assert time.monotonic() - unseen < fifth
    aside.rename(served.key_file)


def test_a_slots_wait_doubles_to_its_cap_and_starts_over_after_a_worker_that_lived() -> None:
    waits = RestartWaits()
    assert [waits.died(0, 0.2, now=0) for _ in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert waits.died(1, 0.2, now=0) == 0.5  # each slot its own
    assert waits.waiting(0, now=29.9) and not waits.waiting(0, now=30)
    assert not waits.waiting(0, now=0)  # its turn came: no wait until its next death
    assert waits.died(0, MAX_WAIT_SECONDS, now=0) == 0 and not waits.waiting(0, now=0)  # lived: replaced at once
    assert waits.died(0, 0.2, now=0) == 0.5


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


def test_a_directory_another_server_removes_before_it_is_locked_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers starting at once: one's sweep may take the other's new directory, not yet locked, for one
    abandoned. The server whose directory went makes another, and holds it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    make = tempfile.mkdtemp
    made: list[str] = []

    def made_then_swept(prefix: str) -> str:
        made.append(make(prefix=prefix))
        if len(made) == 1:
            assert temp_dirs.remove_abandoned(METRICS) == made  # the other server's sweep, between making and locking
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", made_then_swept)
    monkeypatch.setattr(temp_dirs, "_HELD", held := [])
    path = temp_dirs.locked_temp_dir(METRICS)
    assert path == made[1] and os.path.isdir(path) and not os.path.exists(made[0])
    assert temp_dirs.remove_abandoned(METRICS) == []  # locked: kept
    os.close(held.pop())
