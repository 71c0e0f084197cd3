"""A table published with a deferred index: served exactly at once, its index built in the background and swapped
in by the real ``embedding-serve``, with the build's progress on /readyz and the table summary."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index import store
from index.build.sources import RawTable
from index.build.writer import build_table
from index.progress import SERVER_VARIABLE, read_status, write_status
from index.store import artifact
from service import compacting, indexing
from tests.service import real_server
from tests.service.real_server import HTTP

SPEC = "hnsw:M=16,efConstruction=40"
ROWS = 20_000


@pytest.fixture()
def deferred_dir(tmp_path: Path, glove_raw: RawTable) -> Path:
    raw = RawTable(tokens=glove_raw.tokens[:ROWS], matrix=glove_raw.matrix[:ROWS].copy())
    build_table(raw, data_dir=tmp_path, name="words", source={"format": "test"}, index_spec=SPEC, defer_index=True)
    return tmp_path


def neighbours(server: real_server.Server, word: str) -> list[str]:
    answer = HTTP.get(f"{server.base}/v1/tables/words/neighbors", params={"token": word, "k": 8}, timeout=30)
    assert answer.status_code == 200, answer.text
    return [hit["token"] for hit in answer.json()["neighbors"]]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_served_exact_at_once_then_indexed_in_the_background(deferred_dir: Path, tmp_path: Path, workers: str) -> None:
    server = real_server.start(deferred_dir, tmp_path / "server.log", "--workers", workers)
    try:
        summary = HTTP.get(f"{server.base}/v1/tables/words", timeout=10).json()
        ready = HTTP.get(f"{server.base}/readyz", timeout=10)
        exact = {word: neighbours(server, word) for word in ("heart", "king", "paris")}
        assert ready.status_code == 200 and ready.json()["loaded"] == ["words"]
        if not summary["approximate"]:  # the build may already be done on a fast machine
            assert summary["index"]["kind"] == "flat" and summary["index_deferred"] == SPEC
            assert summary["building"]["state"] in ("queued", "running")
            assert set(summary["building"]) >= {"state", "step", "done"}
            assert "words" in ready.json().get("building", {})

        def indexed() -> bool:  # every worker answers from the new version
            summaries = [HTTP.get(f"{server.base}/v1/tables/words", timeout=10).json() for _ in range(6)]
            return all(s["approximate"] for s in summaries)

        # Until the build is published, wait on the server's log, not on requests: each request would take the
        # workers' CPU from the build, which runs at a lower priority.
        published = "index of table 'words' published; reloading"
        real_server.wait_for(lambda: published in server.log(), seconds=240, what="the background index")
        if workers == "1":  # one process: once /readyz reports no build, its answers come from the index

            def reported_done() -> bool:
                return "building" not in HTTP.get(f"{server.base}/readyz", timeout=10).json()

            real_server.wait_for(reported_done, seconds=240, what="/readyz to stop reporting the build")
            assert HTTP.get(f"{server.base}/v1/tables/words", timeout=10).json()["approximate"]
        else:  # a request reaches either worker (a kept-alive connection, the same one): each logs its reload

            def both_reloaded() -> bool:
                return server.log().count("reload: 1 loaded") >= 2

            real_server.wait_for(both_reloaded, seconds=240, what="both workers to load the new version")
        real_server.wait_for(indexed, seconds=240, what="the background index to be published and loaded")
        summary = HTTP.get(f"{server.base}/v1/tables/words", timeout=10).json()
        assert summary["index"]["kind"] == "hnsw" and "building" not in summary and "index_deferred" not in summary
        assert summary["recall_at_10"] >= 0.99
        assert "building" not in HTTP.get(f"{server.base}/readyz", timeout=10).json()
        for word, before in exact.items():  # the graph finds the exact answers for these words
            after = neighbours(server, word)
            assert len(set(after) & set(before)) >= 7, (word, before, after)
        log = server.log()
        assert "table 'words': building its index in the background" in log
        assert "table 'words': adding rows to the index: done (20,000 of 20,000 rows)" in log
        assert "index of table 'words' published; reloading" in log
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(("workers", "watch"), [("1", "0"), ("2", "0.5"), ("2", "0")])
def test_a_table_published_with_a_deferred_index_while_serving_gets_its_index(
    tmp_path: Path, glove_raw: RawTable, workers: str, watch: str
) -> None:
    """A table published with ``--defer-index`` into a running server gets its index built in the background and
    swapped in, as one found at start-up: loaded by SIGHUP (one process, the data directory not watched), by the
    watcher (two workers: the build runs in their supervisor, which sees none of their reloads), or by the build's
    own SIGHUP once its index is published (two workers, nothing watched)."""
    data_dir = tmp_path / "data"
    raw = RawTable(tokens=glove_raw.tokens[:2_000], matrix=glove_raw.matrix[:2_000].copy())
    build_table(raw, data_dir=data_dir, name="words", source={"format": "test"}, index_spec="flat")
    env = {"EMBEDDING_WATCH_SECONDS": watch}
    server = real_server.start(data_dir, tmp_path / "server.log", "--workers", workers, env=env)
    try:
        late = RawTable(tokens=glove_raw.tokens[:5_000], matrix=glove_raw.matrix[:5_000].copy())
        build_table(late, data_dir=data_dir, name="late", source={"format": "test"}, index_spec=SPEC, defer_index=True)
        if workers == "1":
            server.process.send_signal(signal.SIGHUP)
        published = "index of table 'late' published; reloading"
        real_server.wait_for(lambda: published in server.log(), seconds=240, what="the background index")

        def served(summary: dict[str, Any]) -> bool:
            return (
                summary["approximate"]
                and summary["index"]["kind"] == "hnsw"
                and not {"building", "index_deferred"} & set(summary)
            )

        def indexed() -> bool:  # every worker answers from the new version, as far as requests can tell: each request
            # is a connection of its own, which the kernel gives to either worker, often to one many times in a row;
            # so all that is checked is read here, not once more after the wait (which may reach the other)
            answers = [HTTP.get(f"{server.base}/v1/tables/late", timeout=10) for _ in range(8)]
            ready = [HTTP.get(f"{server.base}/readyz", timeout=10).json() for _ in range(4)]
            return all(a.status_code == 200 and served(a.json()) for a in answers) and not any(
                "building" in r for r in ready
            )

        real_server.wait_for(indexed, seconds=120, what="the index to be loaded")
        assert "table 'late': building its index in the background" in server.log()
        assert "table 'words': building" not in server.log()  # nothing deferred there
    finally:
        assert server.stop() == 0


def test_ctrl_c_on_the_servers_terminal_ends_the_build_as_the_server_says(tmp_path: Path, glove_raw: RawTable) -> None:
    """Ctrl-C on the terminal of ``make run`` while the index is built (SIGINT to the server's process group, its
    build's child in it): the server stops and ends the build itself, saying that the next start builds it. The
    child is left alone by the Ctrl-C: it does not say, of the table the server was serving, that no table was
    built."""
    data_dir = tmp_path / "data"
    raw = RawTable(tokens=glove_raw.tokens[:100_000], matrix=glove_raw.matrix[:100_000].copy())
    spec = "hnsw:M=32,efConstruction=200"  # a build of tens of seconds, ended as soon as it runs
    build_table(raw, data_dir=data_dir, name="words", source={"format": "test"}, index_spec=spec, defer_index=True)
    env = {"EMBEDDING_VERIFY_CHECKSUMS": "false"}
    server = real_server.start(data_dir, tmp_path / "server.log", env=env, terminal=True)
    try:

        def running() -> bool:
            status = HTTP.get(f"{server.base}/readyz", timeout=10).json().get("building", {}).get("words", {})
            return status.get("state") == "running"

        real_server.wait_for(running, seconds=120, what="the background build to run")
    except BaseException:
        server.stop()
        raise
    real_server.ctrl_c(server)
    real_server.group_ended(server, what="the build's child to end")
    log = server.log()
    assert "table 'words': index build stopped with the server; the next start builds it" in log, log
    assert "interrupted" not in log, log
    assert artifact.read_manifest(data_dir / "words")["index"]["spec"]["kind"] == "flat"  # its version as published


# A build run by hand (from a terminal, a script): a process that starts embedding-index by itself.
BY_HAND = r"""
import subprocess, sys
data_dir, status = sys.argv[1:]
command = [sys.executable, "-m", "index", "--status-file", status, "index", "words", "--data-dir", data_dir]
child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(child.pid, flush=True)
child.wait()
"""
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child ends with its parent on Linux only")


def state(pid: int) -> str:
    """The state of process ``pid`` (R, S, T: stopped, Z: ended), "" once it is reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def running(pid: int, data_dir: Path) -> bool:
    """Whether process ``pid`` is a build over ``data_dir`` that has not ended (an ended one is a zombie until it is
    reaped)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(data_dir).encode() in argv and state(pid) not in ("Z", "")


def background_child(pid: int) -> int | None:
    """The background build process ``pid`` started, if it runs (a supervisor's workers are its children too)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                if b"--background" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0"):
                    return int(child)
    return None


def orphaned(parent: subprocess.Popen[Any], child: int) -> bool:
    """Kill ``parent`` outright while its ``child`` is stopped (SIGSTOP), so that a signal sent to the child as its
    parent dies waits, pending, where it can be seen; whether that was SIGTERM. The child goes on once continued."""
    os.kill(child, signal.SIGSTOP)
    real_server.wait_for(lambda: state(child) in ("T", "Z", ""), seconds=60, what="the build to stop")
    assert state(child) == "T", "the build ended before the test could stop it"
    parent.kill()
    parent.wait(timeout=60)  # every thread of it ended, the one that started the child too
    status = dict(line.split(":\t") for line in Path(f"/proc/{child}/status").read_text().splitlines() if ":\t" in line)
    return bool((int(status["SigPnd"], 16) | int(status["ShdPnd"], 16)) & (1 << (signal.SIGTERM - 1)))


def kill_build(pid: int | None, data_dir: Path) -> None:
    """End a build a failed test left running."""
    if pid is not None and running(pid, data_dir):
        os.kill(pid, signal.SIGKILL)


@LINUX
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_build_of_a_server_killed_outright_ends_and_publishes_nothing(
    deferred_dir: Path, tmp_path: Path, workers: str
) -> None:
    """The server (or the supervisor of its workers, which runs the builds) killed outright while its child built
    an index: the child built on until one of its lines found nobody to read it, for the whole build if it wrote
    none, with the server's cores, and published a version no server was there to load. It is sent SIGTERM as the
    server dies, which it takes as an interrupt: it ends, its temporary folder removed, and publishes nothing."""
    env = {"EMBEDDING_VERIFY_CHECKSUMS": "false", "TMPDIR": str(tmp_path)}  # its status folder, left by the kill
    server = real_server.start(deferred_dir, tmp_path / "server.log", "--workers", workers, env=env)
    child = None
    try:

        def at_work() -> bool:
            """The child stopped (SIGSTOP) while the server says it builds: then it cannot end before the test
            kills the server, however fast the build; else it goes on until the next look."""
            nonlocal child
            child = background_child(server.process.pid)
            if child is None:
                return False
            os.kill(child, signal.SIGSTOP)
            real_server.wait_for(lambda: state(child) in ("T", "Z", ""), seconds=60, what="the build to stop")
            status = HTTP.get(f"{server.base}/readyz", timeout=10).json().get("building", {}).get("words", {})
            if status.get("state") == "running" and state(child) == "T":
                return True
            with contextlib.suppress(ProcessLookupError):  # ended: the next look finds no child
                os.kill(child, signal.SIGCONT)
            return False

        real_server.wait_for(at_work, seconds=240, what="the background build to run")
        assert child is not None
        assert orphaned(server.process, child), "the build was sent no SIGTERM as its server died"
        os.kill(child, signal.SIGCONT)
        real_server.wait_for(lambda: not running(child, deferred_dir), seconds=300, what="the build to end")
    finally:
        server.stop()
        kill_build(child, deferred_dir)
    assert not list(deferred_dir.glob(".tmp-*"))  # no temporary folder left
    assert artifact.read_manifest(deferred_dir / "words")["index"].get("deferred")  # its version as published


@LINUX
def test_a_build_run_by_hand_goes_on_when_the_process_that_ran_it_ends(deferred_dir: Path, tmp_path: Path) -> None:
    """Only a server's own child ends with it: a build started otherwise is sent nothing as the process that
    started it ends, and publishes its index."""
    status = tmp_path / "words.json"
    starter = subprocess.Popen(
        [sys.executable, "-c", BY_HAND, str(deferred_dir), str(status)], stdout=subprocess.PIPE, text=True
    )
    child = None
    try:
        assert starter.stdout is not None
        child = int(starter.stdout.readline())
        real_server.wait_for(lambda: (read_status(status) or {}).get("state") == "running", 240, "the build to run")
        assert not orphaned(starter, child), "the build was sent SIGTERM as its parent ended"
        assert artifact.read_manifest(deferred_dir / "words")["index"].get("deferred")  # still to build
        os.kill(child, signal.SIGCONT)
        real_server.wait_for(lambda: not running(child, deferred_dir), seconds=300, what="the build to end")
        assert artifact.read_manifest(deferred_dir / "words")["index"]["spec"]["kind"] == "hnsw"
    finally:
        starter.kill()
        kill_build(child, deferred_dir)
        if starter.stdout is not None:
            starter.stdout.close()


@LINUX
def test_a_child_whose_server_died_before_it_started_ends_at_once(deferred_dir: Path) -> None:
    """The server killed while its child starts, before the child asked to be told of its death: the child, whose
    parent is then another process, ends at once as at the server's SIGTERM, and builds nothing. A value that is no
    process id is refused."""
    command = [sys.executable, "-m", "index", "--background", "index", "words", "--data-dir", str(deferred_dir)]
    another = {**os.environ, SERVER_VARIABLE: str(os.getppid())}  # not the child's parent: this process is
    ended = subprocess.run(command, env=another, capture_output=True, text=True, timeout=600)
    assert ended.returncode == 130, ended.stderr
    assert ended.stderr == "embedding-index: interrupted; no table was built or replaced\n"
    assert artifact.read_manifest(deferred_dir / "words")["index"].get("deferred")
    refused = subprocess.run(
        command, env={**os.environ, SERVER_VARIABLE: "x"}, capture_output=True, text=True, timeout=600
    )
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith(f"embedding-index: error: {SERVER_VARIABLE}='x': not a process id"), refused.stderr


def brute_force(raw: RawTable, word: str, rows: int = ROWS, k: int = 8) -> list[str]:
    matrix = raw.matrix[:rows].astype(np.float64)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    query = raw.tokens.index(word)
    scores = unit @ unit[query]
    scores[query] = -np.inf  # the word itself is left out of its neighbours
    return [raw.tokens[i] for i in np.argsort(-scores, kind="stable")[:k]]


def test_a_failing_background_build_keeps_exact_search(deferred_dir: Path, tmp_path: Path, glove_raw: RawTable) -> None:
    manifest = deferred_dir / "words" / "manifest.json"
    manifest.write_text(manifest.read_text().replace(SPEC, "ivf:nlist=1000000"))  # refused by the builder
    server = real_server.start(deferred_dir, tmp_path / "server.log", env={"EMBEDDING_VERIFY_CHECKSUMS": "false"})
    try:

        def failed() -> bool:
            status = HTTP.get(f"{server.base}/readyz", timeout=10).json().get("building", {}).get("words", {})
            return status.get("state") == "failed"

        real_server.wait_for(lambda: "index build failed" in server.log(), seconds=120, what="the failure logged")
        real_server.wait_for(failed, seconds=120, what="the background build to fail")
        status = HTTP.get(f"{server.base}/readyz", timeout=10).json()["building"]["words"]
        assert "nlist 1000000 is more than the 20000 rows" in status["step"]
        assert "index build failed" in server.log()
        summary = HTTP.get(f"{server.base}/v1/tables/words", timeout=10).json()
        assert not summary["approximate"] and summary["building"]["state"] == "failed"
        assert neighbours(server, "heart") == brute_force(glove_raw, "heart")  # still exact
    finally:
        assert server.stop() == 0


def test_a_background_build_killed_is_said_killed_as_a_compaction_is(
    deferred_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The build's child killed (by the OOM killer, or ``kill -9``) was said to have failed with the last progress
    line it had printed, a step that had gone well: it is said killed by its signal, as a compaction's child is
    (``service.compacting``), in the log and in the status ``/readyz`` shows."""
    builds = indexing.IndexBuilds(deferred_dir)
    outcome: list[bool | OSError] = []
    with caplog.at_level(logging.INFO, logger="service.indexing"):
        building = threading.Thread(target=lambda: outcome.append(builds._build("words")))
        building.start()
        deadline = time.monotonic() + 120
        while not ((child := builds._child) and (read_status(builds._status("words")) or {}).get("state") == "running"):
            assert time.monotonic() < deadline and building.is_alive(), "the build never ran"
            time.sleep(0.005)
        child.kill()
        building.join(120)
    assert outcome == [False]
    [said] = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert said == "table 'words': index build failed (killed by SIGKILL); it keeps exact search", said
    assert read_status(builds._status("words")) == {"state": "failed", "step": "killed by SIGKILL", "done": 0.0}


def test_a_done_build_is_reported_until_its_table_is_loaded(tmp_path: Path) -> None:
    """Between the build's publication and this process's reload, /readyz still reports the build."""
    write_status(tmp_path / "words.json", {"state": "done", "step": "published", "done": 1.0})
    write_status(tmp_path / "other.json", {"state": "running", "step": "adding rows to the index", "done": 0.5})
    serving_exactly = indexing.building(str(tmp_path), deferred={"words"})
    assert serving_exactly["words"] == {"state": "running", "step": "loading the new version", "done": 1.0}
    assert serving_exactly["other"]["step"] == "adding rows to the index"
    assert "words" not in indexing.building(str(tmp_path), deferred=set())  # loaded: no longer reported


def test_a_failed_build_is_reported_only_while_its_table_waits_for_an_index(tmp_path: Path) -> None:
    """A table published again while its build ran (the build then fails: its table changed) has nothing pending:
    the failure is not reported for good."""
    failed = {"state": "failed", "step": "'mid' was rebuilt while its index was being built", "done": 0.0}
    write_status(tmp_path / "mid.json", failed)
    write_status(tmp_path / "queued.json", {"state": "queued", "step": "waiting for its turn", "done": 0.0})
    assert indexing.building(str(tmp_path), deferred={"mid"})["mid"] == failed  # still served exactly
    assert set(indexing.building(str(tmp_path), deferred=set())) == {"queued"}


def test_the_builds_keep_nothing_of_a_version_no_longer_published(tmp_path: Path, glove_raw: RawTable) -> None:
    """Each version is built once (a failed build waits for the next version), and what the builds keep of a
    version goes with it: a server whose tables are published again and again keeps no more."""
    raw = RawTable(tokens=glove_raw.tokens[:300], matrix=glove_raw.matrix[:300].copy())

    def publish() -> None:
        build_table(
            raw,
            data_dir=tmp_path,
            name="words",
            source={"format": "test"},
            index_spec=SPEC,
            defer_index=True,
            force=True,
        )

    publish()
    builds = indexing.IndexBuilds(tmp_path)
    try:

        def failing(name: str) -> bool:  # one turn of the loop: this version's build runs and fails
            builds._stopping = True
            return False

        builds._build = failing  # type: ignore[method-assign]
        [first] = builds.look()
        builds._run()
        assert builds.look() == []  # tried: not built again
        publish()
        [second] = builds.look()
        assert second != first
        builds._stopping = False
        builds._run()
        assert builds.look() == []
        shutil.rmtree(tmp_path / "words")
        assert builds.look() == []
        kept = [value for value in vars(builds).values() if isinstance(value, set | dict) and value]
        assert kept == []
    finally:
        builds.stop()


def no_descriptor() -> OSError:
    return OSError(errno.EMFILE, os.strerror(errno.EMFILE))


def test_the_builds_go_on_after_a_look_that_found_no_descriptor(
    deferred_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A look at the data directory that fails for a passing want (the server's descriptors all taken, ``ulimit
    -n``) is said once and tried again at the next turn: the builds never stop for it."""
    builds = indexing.IndexBuilds(deferred_dir, seconds=0.01)
    listed = store.list_tables  # the server's, through the store's face
    looks: list[int] = []

    def list_tables(data_dir: Path) -> list[str]:
        looks.append(1)
        if len(looks) <= 3:
            raise no_descriptor()
        return listed(data_dir)

    built: list[str] = []

    def build(name: str) -> bool:  # one build, then the loop ends
        built.append(name)
        builds._stopping = True
        return False

    monkeypatch.setattr(store, "list_tables", list_tables)
    builds._build = build  # type: ignore[method-assign]
    try:
        with caplog.at_level(logging.WARNING, logger="service.indexing"):
            builds._run()
    finally:
        builds.stop()
    assert built == ["words"]
    assert caplog.text.count("deferred index builds: cannot look at the data directory now") == 1, caplog.text
    assert "Too many open files" in caplog.text


def test_the_background_compaction_goes_on_after_a_look_that_found_no_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    compaction = compacting.AutoCompaction(tmp_path, rows=1, seconds=0)
    looks: list[int] = []

    def due() -> list[str]:
        looks.append(1)
        if len(looks) <= 3:
            raise no_descriptor()
        compaction.stop()
        return []

    compaction.due = due  # type: ignore[method-assign]
    monkeypatch.setattr(compacting, "CHECK_SECONDS", 0.01)
    with caplog.at_level(logging.WARNING, logger="service.compacting"):
        compaction._run()
    assert len(looks) == 4
    assert caplog.text.count("background compaction: cannot look at the data directory now") == 1, caplog.text


def test_a_build_that_could_not_start_is_tried_again(
    deferred_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A child that cannot be started (no descriptor left) is no failed build: the version is tried again at the next
    turn, not left to exact search until it is published anew."""
    builds = indexing.IndexBuilds(deferred_dir, seconds=0.01)
    starts: list[int] = []

    def popen(*args: object, **kwargs: object) -> None:
        starts.append(1)
        if len(starts) == 2:
            builds._stopping = True
        raise no_descriptor()

    monkeypatch.setattr(indexing.subprocess, "Popen", popen)
    thread = threading.Thread(target=builds._run)
    try:
        with caplog.at_level(logging.WARNING, logger="service.indexing"):
            thread.start()
            thread.join(10)
    finally:
        builds.stop()
        thread.join(10)
    assert len(starts) == 2
    said = "table 'words': cannot start the index build now ([Errno 24] Too many open files); trying again"
    assert caplog.text.count(said) == 1, caplog.text  # said once, not at every turn


def test_a_status_the_disk_cannot_hold_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full temporary directory: the status is not written (a courtesy, never a build's failure), and the part
    of it written is taken away again."""

    def half_written(self: Path, text: str) -> int:
        with open(self, "w") as handle:
            handle.write(text[: len(text) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_text", half_written)
    write_status(tmp_path / "words.json", {"state": "running", "step": "adding rows to the index", "done": 0.5})
    assert list(tmp_path.iterdir()) == []
