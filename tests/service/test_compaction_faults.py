"""kill -9 of ``embedding-index compact`` at random points: the table always verifies, the old version (or the
new one) serves with the log, no write is lost, and the next compaction completes."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from index.build import compact as compact_module
from index.build.compact import compact
from index.engine.delta import Delta
from index.engine.table import Table
from index.errors import ArtifactError
from index.store import artifact, writelog
from service import live
from tests.cli import run_cli
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.logs import recovered
from tests.service import real_server
from tests.service.test_live_search import KEY
from tests.service.test_write_durability import immutable

ROUNDS = 6


def lee_with_log(lee_data_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A data directory holding a copy of the Lee table, and where its write log goes (its folder made)."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    path.parent.mkdir()
    return data, path


def append(path: Path, lee: Lee, first: int, count: int) -> None:
    """Upserts as the server logs them: one record per document, the next sequence numbers."""
    path.parent.mkdir(exist_ok=True)
    with writelog.appending(path) as log:
        records, _ = log.new_records(0, 0, None)
        covered = artifact.read_manifest(path.parent.parent / "lee").get("log_sequence", 0)
        last = records[-1].seq if records else int(covered)
        for i in range(first, first + count):
            vector = lee.vectors[i % 300].tolist()
            document = {"id": f"k/{i}", "text": lee.texts[i % 300], "vector": vector, "fields": {"year": i}}
            last += 1
            log.append(last, {"op": "upsert", "documents": [document]})


DONE = "compacted 'lee'"  # the start of the report the command prints when it is done


def start_compaction(command: list[str]) -> tuple[subprocess.Popen[str], float]:
    """``embedding-index compact`` started (its stdout and stderr in one pipe); returned with the time its work
    began: its first progress line after those naming what it cleared."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    first = child.stdout.readline()
    while ": removed, " in first:  # first, what the compaction killed before it left (its staging directory)
        first = child.stdout.readline()
    assert first.startswith("embedding-index: verifying"), first
    return child, time.monotonic()


def test_kill_9_during_compaction(lee_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> None:
    data, path = lee_with_log(lee_data_dir, tmp_path)
    rng = random.Random(5)
    written = 0
    cli = [str(real_server.BIN / "embedding-index"), "compact", "lee", "--data-dir", str(data)]
    # How long a compaction's own work lasts here (on a copy): from its first progress line (before it, the command
    # only starts up: imports) to its report, written once the version is published and the log cut (after it, the
    # process only exits). Each kill below lands at a random point of that work.
    trial = tmp_path / "trial"
    shutil.copytree(data, trial, symlinks=True)
    append(writelog.log_path(trial, "lee"), lee_docs, 0, 40)
    calibration, began = start_compaction([*cli[:-1], str(trial)])
    assert calibration.stdout is not None
    assert any(line.startswith(DONE) for line in calibration.stdout)
    work = time.monotonic() - began  # its exit, not waited for here, overlaps the rounds
    outcomes = set()
    rounds = 0
    # At least ROUNDS rounds, and on until one was killed at work: a calibration slowed by a busy moment of the
    # machine overstates the work, and a round that finished before its kill bounds it instead.
    while rounds < ROUNDS or "killed" not in outcomes:
        assert rounds < 3 * ROUNDS, "every compaction finished before its kill"
        rounds += 1
        append(path, lee_docs, written, 40)
        written += 40
        child, began = start_compaction(cli)
        time.sleep(rng.uniform(0.0, work))
        child.kill()
        killed_after = time.monotonic() - began
        assert child.stdout is not None
        finished = DONE in child.stdout.read()  # its work was done before the kill
        code = child.wait()
        child.stdout.close()
        assert finished or code == -signal.SIGKILL, code
        outcomes.add("finished" if finished else "killed")
        if finished:
            work = min(work, killed_after)
        assert artifact.verify(data / "lee").ok
        covered = int(artifact.read_manifest(data / "lee").get("log_sequence", 0))
        rows = artifact.read_manifest(data / "lee")["rows"]
        after = [r for r in recovered(path) if r.seq > covered]
        assert rows - 300 + len(after) == written  # every write: in the version or in the log, once
    assert calibration.wait() == 0  # it exited meanwhile
    calibration.stdout.close()
    done = subprocess.run(cli, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert artifact.read_manifest(data / "lee")["rows"] == 300 + written
    assert not list(data.glob(".tmp-*")) and not list(data.glob(".old-*"))  # the last build cleaned up after kills
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        for i in range(0, written, 7):
            shown = real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/k/{i}")
            assert shown.status_code == 200 and shown.json()["fields"]["year"] == i


def test_removing_a_table_removes_its_log(lee_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> None:
    data, path = lee_with_log(lee_data_dir, tmp_path)
    append(path, lee_docs, 0, 3)
    writelog.cut(path, 2)  # the file a cut replaced goes too
    assert writelog.previous_path(path).exists()
    removed = subprocess.run([str(real_server.BIN / "embedding-index"), "remove", "lee", "--data-dir", str(data)])
    assert removed.returncode == 0 and not (data / "lee").exists() and not any(path.parent.iterdir())


def test_a_remove_cut_short_leaves_no_writes_for_a_table_imported_later(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``remove`` deletes the log before the table, and the file a cut replaced before the log: stopped at any step,
    it leaves no write that a table imported later under the name would replay (a table left without its log is
    still removed by running the command again)."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    append(path, lee_docs, 0, 3)
    writelog.cut(path, 2)
    real_unlink = Path.unlink

    def unlink_failing_on_the_log(self: Path, missing_ok: bool = False) -> None:
        if self == path:
            raise OSError("stopped here")
        real_unlink(self, missing_ok=missing_ok)

    with monkeypatch.context() as patched:
        patched.setattr(Path, "unlink", unlink_failing_on_the_log)
        with pytest.raises(OSError):
            writelog.remove_logs(data, "lee")
    assert not writelog.previous_path(path).exists()  # never a replaced file without its log
    real_rename = os.rename

    def rename_failing_on_the_table(source: Any, target: Any) -> None:  # the table's one step out of its name
        if Path(source) == data / "lee":
            raise OSError("stopped here")
        real_rename(source, target)

    with monkeypatch.context() as patched:
        patched.setattr(os, "rename", rename_failing_on_the_table)
        assert run_cli("remove", "lee", "--data-dir", data).code != 0
    assert not any(path.parent.iterdir()) and (data / "lee").is_dir()
    assert run_cli("remove", "lee", "--data-dir", data).code == 0 and not (data / "lee").exists()


def test_compaction_keeps_the_keyword_options_of_the_import(lee_docs: Lee, tmp_path: Path) -> None:
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    options = ("--stopwords", "none", "--stemmer", "porter")
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data, *options).code == 0
    before = artifact.read_manifest(data / "lee")["keyword"]["tokenizer"]
    append(writelog.log_path(data, "lee"), lee_docs, 0, 2)
    assert compact(data, "lee")["written"] == 2
    after = artifact.read_manifest(data / "lee")["keyword"]["tokenizer"]
    assert after == before and after["stemmer"] == "porter" and not after["stopword_list"]


def test_a_compaction_never_publishes_over_a_version_published_meanwhile(
    lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version published while a compaction builds (here an import --force) stays; the log is kept whole."""
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    log = writelog.log_path(data, "lee")
    append(log, lee_docs, 0, 2)
    size = log.stat().st_size
    fewer = write_jsonl(tmp_path / "fewer.jsonl", jsonl_records(lee_docs)[:50])
    build = compact_module.build_table

    def import_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        cmd = ("import", fewer, "--format", "documents", "--name", "lee", "--data-dir", data, "--force")
        assert run_cli(*cmd).code == 0
        return build(*args, **kwargs)

    monkeypatch.setattr(compact_module, "build_table", import_meanwhile)
    with pytest.raises(ArtifactError, match="published again while it was being compacted"):
        compact(data, "lee")
    assert artifact.read_manifest(data / "lee")["rows"] == 50 and artifact.verify(data / "lee").ok
    assert log.stat().st_size == size


@pytest.mark.parametrize("spec", ["hnsw:M=8", "flat"])
def test_a_compaction_folds_into_the_version_an_index_publishes_meanwhile(
    lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    """``embedding-index index`` by hand beside a server that compacts: its version, published while the server's
    compaction built, failed the compaction (``table 'lee' was published again while it was being compacted``;
    1 of 23 compactions in the server's log while it ran 20 times). A version of the same build (its index, its SIF
    component replaced) is compacted again from the newest version, keeping its index. A version whose manifest is
    the same as the one it replaced (``index --index flat`` of a flat table, run twice) is one too: it failed the
    compaction as damage (``manifest.json changed in place while it was being compacted``), which verify did not
    find."""
    from index.build.writer import index_table

    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    index_table(data, "lee", index_spec=spec)  # the version the one published meanwhile repeats
    log = writelog.log_path(data, "lee")
    append(log, lee_docs, 0, 2)
    build = compact_module.build_table
    builds: list[int] = []

    def index_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        builds.append(1)
        if len(builds) == 1:
            index_table(data, "lee", index_spec=spec)
        return build(*args, **kwargs)

    monkeypatch.setattr(compact_module, "build_table", index_meanwhile)
    assert compact(data, "lee")["written"] == 2
    manifest = artifact.read_manifest(data / "lee")
    assert len(builds) == 2 and manifest["log_sequence"] == 2 and manifest["index"]["spec"]["kind"] == spec[:4]
    assert artifact.verify(data / "lee").ok and recovered(log) == []


def test_a_compaction_never_vouches_for_a_file_written_over_in_place_meanwhile(
    lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte of the payload changed in place while a compaction builds: the new version would be built from the
    changed bytes and checksummed as verified. Nothing is published, the damage stays for verify to name, and the
    log is kept whole."""
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    log = writelog.log_path(data, "lee")
    append(log, lee_docs, 0, 2)
    size, before = log.stat().st_size, (data / "lee" / artifact.MANIFEST).read_bytes()
    build = compact_module.build_table

    def damage_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        with open(data / "lee" / "payload.arrow", "r+b") as payload:
            payload.seek(-100, os.SEEK_END)
            payload.write(b"\xff")
        return build(*args, **kwargs)

    monkeypatch.setattr(compact_module, "build_table", damage_meanwhile)
    with pytest.raises(ArtifactError, match=r"payload\.arrow changed in place while it was being compacted"):
        compact(data, "lee")
    assert (data / "lee" / artifact.MANIFEST).read_bytes() == before and log.stat().st_size == size
    assert artifact.verify(data / "lee").problems == ["payload.arrow: sha256 differs from the manifest"]


def test_the_next_compaction_finishes_one_killed_between_its_publish_and_its_cut(
    lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after its publish, a compaction can leave the older version it swapped out (in a temporary directory
    it had not removed yet) and the log uncut; the next one, with nothing to fold, removes the one and cuts the
    other."""
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    log = writelog.log_path(data, "lee")
    append(log, lee_docs, 0, 3)
    shutil.copytree(data / "lee", tmp_path / "older")
    monkeypatch.setattr(compact_module, "finish", lambda *_: 0)  # killed here
    assert compact(data, "lee")["log_sequence"] == 3
    monkeypatch.undo()
    (tmp_path / "older").rename(data / ".tmp-lee-0badc0de")  # where the exchange of the two versions put it
    assert len(recovered(log)) == 3
    done = compact(data, "lee")
    assert done["written"] == 0 and done["log_sequence"] == 3
    assert not list(data.glob(".tmp-*")) and recovered(log) == []
    assert [r.seq for r in recovered(writelog.previous_path(log))] == [1, 2, 3]
    assert artifact.verify(data / "lee").ok and artifact.read_manifest(data / "lee")["rows"] == 303


def test_a_worker_that_missed_the_folded_writes_numbers_its_next_after_them(lee_docs: Lee, tmp_path: Path) -> None:
    """Two workers of one table: one appended writes the other never read, a compaction folded them and cut the
    log to nothing; the other's next write is numbered after them, so the next version keeps it."""
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    stale = Table.load(data / "lee")
    live.attach(stale, data / "lee")
    state = live.live_of(stale)
    assert state is not None
    log = writelog.log_path(data, "lee")
    append(log, lee_docs, 0, 3)  # another worker's writes, 1..3
    assert compact(data, "lee")["log_sequence"] == 3 and recovered(log) == []
    document = {"id": "late/1", "text": lee_docs.texts[7], "vector": lee_docs.vectors[7].tolist(), "fields": {}}
    seq, _ = state.write(lambda delta: ({"op": "upsert", "documents": [document]}, None), sync=True)
    assert seq == 4
    assert compact(data, "lee")["written"] == 1
    payload = Table.load(data / "lee").payload
    assert payload is not None and payload.find_rows(["late/1"])[0] >= 0


def test_a_load_that_races_the_cut_of_the_log_sees_the_writes_after_it(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker loads the version a compaction published and reads the log; the compaction cuts the log before the
    worker looks at the file's identity. The worker must still read the writes made to the new log after it."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    append(path, lee_docs, 0, 3)
    cut, replay_log = writelog.cut, Delta.replay_log
    with monkeypatch.context() as patched:
        patched.setattr(writelog, "cut", lambda *args: 0)  # published; its cut comes later, below
        compact(data, "lee")
    table = Table.load(data / "lee")  # the new version, holding the three writes

    cuts = [3]

    def read_then_cut(delta: Delta, log: Path, done: Callable[[int], object]) -> int:
        replayed = replay_log(delta, log, done)
        while cuts:  # once, after the first read
            cut(log, cuts.pop())
        return replayed

    with monkeypatch.context() as patched:
        patched.setattr(Delta, "replay_log", read_then_cut)
        live.attach(table, data / "lee")
    assert not cuts  # the load read the log, then the cut came
    assert not recovered(path)  # the log was cut: the three writes are in the version only
    append(path, lee_docs, 3, 1)  # another worker's write, to the new log file
    delta = live.delta_of(table)
    assert delta is not None and delta.written("k/3") is not None
    assert artifact.read_manifest(data / "lee")["rows"] == 303


def test_a_worker_that_had_read_no_log_sees_the_writes_a_cut_took_from_it(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A worker loaded its version before anything was written (no log file yet) and read nothing since: every write
    went to another worker. A compaction folds them into a new version and cuts the log. Until the worker loads
    that version it must still see them (from the file the cut replaced), and number its own writes after them."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    older = Table.load(data / "lee")
    live.attach(older, data / "lee")
    state = live.live_of(older)
    assert state is not None and state.inode is None
    append(path, lee_docs, 0, 3)  # another worker's writes, 1..3
    assert compact(data, "lee")["log_sequence"] == 3 and recovered(path) == []
    append(path, lee_docs, 3, 1)  # 4, to the new log file
    delta = live.delta_of(older)
    assert delta is not None and [delta.written(f"k/{i}") is not None for i in range(4)] == [True] * 4
    document = {"id": "k/1", "text": lee_docs.texts[9], "vector": lee_docs.vectors[9].tolist(), "fields": {}}
    seq, known = state.write(lambda d: ({"op": "upsert", "documents": [document]}, d.written("k/1")), sync=True)
    assert seq == 5 and known is not None  # an update of a document it knows, after the writes it had not read


def test_a_table_whose_every_document_is_deleted_is_not_compacted(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """No table is empty: the compaction says why it leaves such a table as it is, its log whole."""
    data, path = lee_with_log(lee_data_dir, tmp_path)
    with writelog.appending(path) as log:
        log.append(1, {"op": "delete", "ids": lee_docs.ids})
    done = run_cli("compact", "lee", "--data-dir", data)
    assert done.code == 1
    assert "table 'lee' not compacted: every one of its documents is deleted" in done.err, done.err
    assert [r.seq for r in recovered(path)] == [1]
    assert Table.load(data / "lee").rows == 300


def test_a_log_the_compaction_could_not_cut_stops_it_before_anything_is_published(
    lee_docs: Lee, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data).code == 0
    log = writelog.log_path(data, "lee")
    append(log, lee_docs, 0, 3)
    manifest = (data / "lee" / artifact.MANIFEST).read_bytes()
    with immutable(log):  # a compaction would publish, then fail to cut the log
        refused = run_cli("compact", "lee", "--data-dir", data)
    assert refused.code != 0 and "Traceback" not in refused.err, refused.err
    assert (
        "table 'lee' not compacted: write log lee.log could not be opened for writing (Operation not permitted), and "
        "a compaction cuts it once its new version is published; nothing was changed" in refused.err
    ), refused.err
    assert (data / "lee" / artifact.MANIFEST).read_bytes() == manifest and not list(data.glob(".tmp-*"))
    assert [r.seq for r in recovered(log)] == [1, 2, 3]
    assert compact(data, "lee")["log_sequence"] == 3  # writable again: compacted


def test_a_writer_killed_in_a_record_during_a_compaction_does_not_fail_it(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record torn while the compaction builds (its writer killed in it: never answered) is cut off by the
    compaction's cut, which succeeds, keeping the writes after the folded ones; before, the compaction failed after
    publishing its version, leaving the log uncut (and the server not told to reload)."""
    data, log = lee_with_log(lee_data_dir, tmp_path)
    append(log, lee_docs, 0, 3)
    build = compact_module.build_table

    def written_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        append(log, lee_docs, 3, 2)  # writes 4 and 5, kept by the cut
        torn = writelog.frame(6, {"op": "delete", "ids": ["lee-000"]})
        with log.open("ab") as handle:
            handle.write(torn[:20])
        return build(*args, **kwargs)

    monkeypatch.setattr(compact_module, "build_table", written_meanwhile)
    done = compact(data, "lee")
    assert done["written"] == 3 and done["kept"] == 2
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 3 and artifact.verify(data / "lee").ok
    assert [r.seq for r in recovered(log)] == [4, 5]


# ``embedding-index compact`` SIGKILLed in its cut of the log: after it linked the log as the file the cut replaces,
# before it renamed the new log file over the log.
KILLED_IN_ITS_CUT = """
import os, signal, sys
from index.build.cli import main
rename = os.rename
def killed_before_the_log_is_replaced(source, target):
    if str(source).endswith(".log.cut"):
        os.kill(os.getpid(), signal.SIGKILL)
    rename(source, target)
os.rename = killed_before_the_log_is_replaced
sys.argv = ["embedding-index", "--quiet", "compact", "lee", "--data-dir", sys.argv[1]]
main()
"""


def test_a_compaction_killed_in_its_cut_leaves_no_write_to_be_lost_by_the_next(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between the cut's link and its rename, a compaction left the log itself as the file the cut replaced
    (two names of one file). The next cut emptied that "replaced file" to make room, so emptied the log: the writes
    it was to keep (made while that compaction built) were lost, and the cut then read the emptied file for ever,
    holding the log's lock, so that every write to the table waited behind it."""
    data, log = lee_with_log(lee_data_dir, tmp_path)
    append(log, lee_docs, 0, 3)
    killed = subprocess.run([real_server.BIN / "python", "-c", KILLED_IN_ITS_CUT, data], capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert os.path.samefile(log, writelog.previous_path(log))  # what the kill left
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 3  # published, the log not cut
    append(log, lee_docs, 3, 2)  # writes 4 and 5, answered by the server after the kill
    build = compact_module.build_table

    def written_meanwhile(*args: Any, **kwargs: Any) -> dict[str, Any]:
        append(log, lee_docs, 5, 2)  # writes 6 and 7, made while the next compaction builds: its cut keeps them
        return build(*args, **kwargs)

    monkeypatch.setattr(compact_module, "build_table", written_meanwhile)
    done: dict[str, Any] = {}
    compacting = threading.Thread(target=lambda: done.update(compact(data, "lee")), daemon=True)
    compacting.start()
    compacting.join(120)
    assert not compacting.is_alive(), "the compaction's cut never ended"
    assert done["written"] == 2 and done["kept"] == 2 and done["log_sequence"] == 5
    assert [r.seq for r in recovered(log)] == [6, 7]
    assert artifact.verify(data / "lee").ok and artifact.read_manifest(data / "lee")["rows"] == 305
