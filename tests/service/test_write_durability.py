"""Nothing acknowledged is lost: a stream of writes to a real ``embedding-serve`` (two workers, each write fsynced
before its answer) is cut by kill -9 of the whole process group at random points, again and again; after each
restart every write answered 200 is there, every write refused (a 422) is not, and the log replays cleanly.

Nothing is served wrongly either: a log the table's version cannot take (written to another schema, or leaving a
gap after the version) refuses the table, naming the record; a repaired log brings it back; a write the disk
refuses answers 503 and leaves the log at its last whole record.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from index.store import artifact, writelog
from tests.cli import Result, run_cli
from tests.index.store.test_writelog import small_tmpfs
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.logs import recovered
from tests.service import real_server

KEY = "durability-writer-key-0123456789"
HEADERS = {"X-API-Key": KEY}
ROUNDS = 4
# Answers (by id) in each round before its kill: every round adds acknowledged and refused writes to check, on a
# machine however slow (two writers' first 20 answers hold a refused write and at least 16 acknowledged ids).
FLOWING = 20


def stream(base: str, lee: Lee, start: int, acked: dict[str, int], refused: set[str], stop: threading.Event) -> None:
    """Upserts (every fifth one bad: a field the table lacks) until the server dies; acked: id -> year written."""
    client = httpx.Client(timeout=10)
    i = start
    while not stop.is_set():
        ident = f"stream-{i}"
        fields: dict[str, Any] = {"year": i, "colour": "red"} if i % 5 == 4 else {"year": i}
        document = {"id": ident, "text": lee.texts[i % 300], "vector": lee.vectors[i % 300].tolist(), "fields": fields}
        try:
            answer = client.post(f"{base}/v1/tables/lee/documents", json={"documents": [document]}, headers=HEADERS)
        except httpx.TransportError:
            return  # killed: this write's fate is unknown (either is allowed)
        if answer.status_code == 200:
            acked[ident] = i
        elif answer.status_code == 422:
            refused.add(ident)
        i += 1


def kill_9(server: real_server.Server) -> None:
    """SIGKILL to the workers and their supervisor at once: nothing gets to flush or finish."""
    processes = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
    # Orphaned by the kill, a worker is reaped by init, later; its pidfd says sooner that it has
    # exited, every thread of it (nothing of it writes any more), so the next server may start.
    pidfds = []
    for process in processes[1:]:
        with contextlib.suppress(ProcessLookupError):
            pidfds.append(os.pidfd_open(process.pid))
    try:
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        server.process.wait()
        for pidfd in pidfds:
            assert select.select([pidfd], [], [], 10)[0], "a killed worker did not exit in 10 s"
    finally:
        for pidfd in pidfds:
            os.close(pidfd)


Stream = Callable[[str, Lee, int, dict[str, int], set[str], threading.Event], None]


def kill_in_streams(
    data: Path, logs: Path, lee_docs: Lee, stream: Stream, rng: random.Random, rounds: int, key: str
) -> tuple[dict[str, int], set[str]]:
    """``rounds`` rounds of: a real ``embedding-serve`` of ``data`` with two workers, where every write answered
    200 so far is found and no refused one is, then two writers running ``stream`` until kill -9 at a random
    point. Returns the acknowledged writes (id -> year) and the refused ids."""
    acked: dict[str, int] = {}
    refused: set[str] = set()
    # The temporary directories a server removes as it stops (its workers' metrics, its builds' status) in
    # ``logs``, not the system's: a server killed with SIGKILL leaves them.
    temporary = logs / "tmp"
    temporary.mkdir(exist_ok=True)
    env = {"EMBEDDING_WRITE_KEYS": key, "TMPDIR": str(temporary)}
    for round_ in range(rounds):
        server = real_server.start(data, logs / f"serve-{round_}.log", "--workers", "2", env=env)
        try:
            for ident, year in rng.sample(sorted(acked.items()), min(40, len(acked))):
                shown = real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/{ident}")
                assert shown.status_code == 200 and shown.json()["fields"]["year"] == year, (round_, ident)
            for ident in refused:
                assert real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/{ident}").status_code == 404
            stop = threading.Event()
            writers = [
                threading.Thread(target=stream, args=(server.base, lee_docs, start, acked, refused, stop))
                for start in ((round_ * 2 + w) * 100_000 for w in range(2))
            ]
            answered = len(acked) + len(refused)
            for writer in writers:
                writer.start()
            # Once the stream flows (this round's first FLOWING answers, however slowly a busy machine answers
            # them), kill at a random point of it: the writers answer many writes a second, so the window spans
            # many writes, each at any stage of its way.
            flowing = answered + FLOWING
            real_server.wait_for(lambda n=flowing: len(acked) + len(refused) >= n, 30, "the round's first answers")
            time.sleep(rng.uniform(0.2, 0.8))
            kill_9(server)
            stop.set()
            for writer in writers:
                writer.join(30)
        finally:
            server.stop()
    return acked, refused


def test_kill_9_in_a_stream_of_writes_loses_no_acknowledged_write(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    acked, refused = kill_in_streams(data, tmp_path, lee_docs, stream, random.Random(28), ROUNDS, KEY)
    assert len(acked) > 20 and refused
    records = recovered(writelog.log_path(data, "lee"))
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    logged = {d["id"] for r in records for d in r.body["documents"]}
    assert set(acked) <= logged and not (refused & logged)


def upsert_body(lee: Lee, ident: str, row: int, year: int) -> dict[str, Any]:
    """An upsert record as the server logs it: one document with its vector and a year."""
    document = {"id": ident, "text": lee.texts[row], "vector": lee.vectors[row].tolist(), "fields": {"year": year}}
    return {"op": "upsert", "documents": [document]}


def append(data: Path, lee: Lee, first: int, idents: list[str]) -> list[writelog.Record]:
    """Write ``idents`` to table lee's log as a writer would, from sequence ``first``."""
    with writelog.appending(writelog.log_path(data, "lee")) as log:
        return [log.append(first + i, upsert_body(lee, ident, i, 2000 + i)) for i, ident in enumerate(idents)]


def import_lee(path: Path, data: Path, *more: str) -> Result:
    return run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", data, *more)


def ready(server: real_server.Server) -> int:
    return real_server.HTTP.get(f"{server.base}/readyz").status_code


def test_a_reimport_of_another_schema_over_writes_is_refused_and_such_a_log_refuses_the_table(
    lee_docs: Lee, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    assert import_lee(write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs)), data).code == 0
    append(data, lee_docs, 1, ["w1"])  # a write with an integer year
    other = [{**{k: v for k, v in r.items() if k != "tags"}, "year": str(r["year"])} for r in jsonl_records(lee_docs)]
    reimport = write_jsonl(tmp_path / "lee-other.jsonl", other)
    manifest = (data / "lee" / artifact.MANIFEST).read_bytes()

    refused = import_lee(reimport, data, "--force")
    assert refused.code != 0
    said = refused.out + refused.err
    assert "sequence 1: document 'w1': field 'year' holds 2000, not of type string" in said
    assert "compact first (`embedding-index compact lee`)" in said and "remove the table" in said
    assert (data / "lee" / artifact.MANIFEST).read_bytes() == manifest  # the old table is left as it was

    # The same table put in place over the log by other means: refused at load, naming the record
    assert import_lee(reimport, tmp_path / "elsewhere").code == 0
    assert artifact.read_manifest(tmp_path / "elsewhere" / "lee")["documents"]["fields"]["year"]["type"] == "string"
    shutil.rmtree(data / "lee")
    shutil.copytree(tmp_path / "elsewhere" / "lee", data / "lee")
    with real_server.running(data, tmp_path / "serve.log") as server:
        assert ready(server) == 503
        answer = real_server.HTTP.get(f"{server.base}/v1/tables/lee/fields")
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "not_ready"
        assert "write log lee.log: its record of sequence 1 does not fit this version" in server.log()
        assert "field 'year' holds 2000, not of type string" in server.log()


def test_a_log_repaired_as_documented_brings_its_table_back_without_a_restart(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    records = append(data, lee_docs, 1, ["w1", "w2", "w3"])
    path = writelog.log_path(data, "lee")
    damaged = bytearray(path.read_bytes())
    damaged[records[1].offset + writelog.HEADER.size + 5] ^= 0x01  # inside the middle record's payload
    path.write_bytes(bytes(damaged))
    env = {"EMBEDDING_WATCH_SECONDS": "0.2", "EMBEDDING_API_KEY": KEY}
    with real_server.running(data, tmp_path / "serve.log", env=env) as server:

        def reload() -> dict[str, Any]:
            answer = real_server.HTTP.post(f"{server.base}/v1/admin/reload", headers=HEADERS, timeout=120)
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            return body

        assert ready(server) == 503 and "is damaged" in server.log()
        assert reload()["missing"] == ["lee"]  # the same damaged log: the same verdict, not verified again
        os.truncate(path, records[1].offset)  # as docs/operations.md says: the writes from the damaged one are lost
        real_server.wait_for(lambda: ready(server) == 200, 30, "the watcher to load the table once its log changed")
        shown = real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/w1", headers=HEADERS)
        assert shown.status_code == 200 and shown.json()["fields"]["year"] == 2000
        assert real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/w2", headers=HEADERS).status_code == 404

        append(data, lee_docs, 2, ["w4"])  # a loaded table's log that grows is not a new version to load again
        assert reload()["unchanged"] == ["lee"]


def test_an_older_version_restored_over_a_compacted_log_is_refused(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    shutil.copytree(data / "lee", tmp_path / "backup")
    append(data, lee_docs, 1, ["g1", "g2", "g3"])
    assert run_cli("verify", "lee", "--data-dir", data).out == "lee: ok\n"  # the writes follow the version
    assert run_cli("compact", "lee", "--data-dir", data).code == 0  # its version holds 1..3; the log is cut
    append(data, lee_docs, 4, ["g4"])
    shutil.rmtree(data / "lee")
    shutil.copytree(tmp_path / "backup", data / "lee")  # the version from before the writes
    with real_server.running(data, tmp_path / "serve.log") as server:
        assert ready(server) == 503
        assert real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/g4").status_code == 503
    assert "writes 1 to 3 are in neither" in server.log()
    checked = run_cli("verify", "lee", "--data-dir", data)  # verify says what the server says
    assert checked.code != 0 and "its write log lee.log would refuse it" in checked.err, checked.err
    assert "writes 1 to 3 are in neither" in checked.err
    refused = run_cli("compact", "lee", "--data-dir", data)  # nor does compact fold g4 into it, losing 1..3
    assert refused.code != 0 and "table 'lee' not compacted (its write log)" in refused.err, refused.err
    assert "writes 1 to 3 are in neither" in refused.err and "Traceback" not in refused.err
    assert recovered(writelog.log_path(data, "lee"))[0].seq == 4  # the log is left as it was


def test_a_write_the_disk_refuses_answers_503_and_leaves_no_torn_record(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    url = "/v1/tables/lee/documents"
    documents = [upsert_body(lee_docs, f"d{i}", i, 2000)["documents"][0] for i in range(3)]
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:

        def write(document: dict[str, Any]) -> httpx.Response:
            return real_server.HTTP.post(f"{server.base}{url}", json={"documents": [document]}, headers=HEADERS)

        assert write(documents[0]).status_code == 200
        size = path.stat().st_size
        processes = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
        hard = processes[0].rlimit(psutil.RLIMIT_FSIZE)[1]
        for process in processes:  # room for part of a record only (ulimit -f)
            process.rlimit(psutil.RLIMIT_FSIZE, (size + 100, hard))
        refused = write(documents[1])
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "not_ready" and "File too large" in error["message"], error
        assert "nothing was written" in error["message"]
        assert path.stat().st_size == size  # the part written is cut off again
        said = "write refused: table 'lee': write log lee.log could not be written (File too large)"
        assert f"WARNING service.live: {said}" in server.log()  # the operator's to mend: said in the server's log too
        for process in processes:
            process.rlimit(psutil.RLIMIT_FSIZE, (hard, hard))
        assert write(documents[2]).status_code == 200
        assert real_server.HTTP.get(f"{server.base}{url}/d1").status_code == 404
    records = recovered(path)
    assert [r.seq for r in records] == [1, 2]
    assert [r.body["documents"][0]["id"] for r in records] == ["d0", "d2"]


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``path`` (a log, or the folder a log is to be made in) immutable (``chattr +i``): no process may write it,
    root's neither, as on a read-only mount."""
    if os.geteuid() != 0 or not shutil.which("chattr"):
        pytest.skip("making a file immutable needs root and chattr")
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False).returncode != 0:
        pytest.skip("this file system does not keep the immutable attribute")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_log_that_cannot_be_opened_for_writing_answers_503_naming_it(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    url = "/v1/tables/lee/documents"
    documents = [upsert_body(lee_docs, f"d{i}", i, 2000)["documents"][0] for i in range(4)]
    env = {"EMBEDDING_WRITE_KEYS": KEY}

    def write(server: real_server.Server, document: dict[str, Any]) -> httpx.Response:
        return real_server.HTTP.post(f"{server.base}{url}", json={"documents": [document]}, headers=HEADERS)

    def refused(answer: httpx.Response, reason: str) -> None:
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "not_ready", error
        assert f"write log lee.log could not be opened for writing ({reason}); nothing was written" in error["message"]

    path.parent.mkdir()
    with real_server.running(data, tmp_path / "serve.log", "--workers", "2", env=env) as server:
        with immutable(path.parent):  # no log yet, and none can be made
            refused(write(server, documents[0]), "Operation not permitted")
        assert write(server, documents[1]).status_code == 200
        with immutable(path):
            refused(write(server, documents[2]), "Operation not permitted")
            assert real_server.HTTP.get(f"{server.base}{url}/d1").status_code == 200
        for ident in ("d0", "d2"):
            assert real_server.HTTP.get(f"{server.base}{url}/{ident}").status_code == 404
        assert "Traceback" not in server.log()
    with immutable(path), real_server.running(data, tmp_path / "again.log", env=env) as server:
        assert ready(server) == 200  # a log it may not write is read, as a replica's is
        assert real_server.HTTP.get(f"{server.base}{url}/d1").status_code == 200
        refused(write(server, documents[3]), "Operation not permitted")
    assert [r.body["documents"][0]["id"] for r in recovered(path)] == ["d1"]


def test_a_log_put_in_place_of_another_tables_is_refused_not_replayed(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    data = tmp_path / "data"
    for name in ("lee", "copy"):  # two tables alike: every record of the one fits the other
        shutil.copytree(lee_data_dir / "lee", data / name)
    append(data, lee_docs, 1, ["w1", "w2"])
    shutil.copy(writelog.log_path(data, "lee"), writelog.log_path(data, "copy"))  # a backup restored by the wrong name
    said = "its record at byte 0 (sequence 1) was written to the log of 'lee', not of 'copy'"
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        assert real_server.HTTP.get(f"{server.base}/readyz").json()["error"]["missing"] == ["copy"]
        assert real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/w1").status_code == 200
        assert real_server.HTTP.get(f"{server.base}/v1/tables/copy/documents/w1").status_code == 503
        assert f"table 'copy': write log copy.log: {said}" in server.log()
    checked = run_cli("verify", "copy", "--data-dir", data)
    assert checked.code != 0 and said in checked.err, checked.err
    refused = run_cli("compact", "copy", "--data-dir", data)
    assert refused.code != 0 and "table 'copy' not compacted (its write log)" in refused.err and said in refused.err
    assert writelog.log_path(data, "copy").read_bytes() == writelog.log_path(data, "lee").read_bytes()  # not cut


def test_a_log_that_filled_its_disk_takes_writes_again_once_compacted(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    """The log's folder on a small disk that the writes fill: compacting folds them into the table's next version
    and cuts the log, and the room the cut log took (kept for readers still on the older version) is given back to
    the next write, which a full disk would refuse otherwise."""
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    url = "/v1/tables/lee/documents"
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    with small_tmpfs(data / writelog.DIRECTORY, "64k"), real_server.running(data, tmp_path / "serve.log", env=env) as s:

        def write(i: int) -> httpx.Response:
            document = upsert_body(lee_docs, f"full-{i}", i % 300, 2000)["documents"][0]
            return real_server.HTTP.post(f"{s.base}{url}", json={"documents": [document]}, headers=HEADERS)

        answers = [write(0)]
        while answers[-1].status_code == 200:
            answers.append(write(len(answers)))
        refused = answers.pop()
        assert refused.status_code == 503 and "No space left on device" in refused.text, refused.text
        assert len(answers) > 10
        compacted = run_cli("compact", "lee", "--data-dir", data)
        assert compacted.code == 0, compacted.err
        assert f"{len(answers)} writes folded in, {300 + len(answers)} documents" in compacted.out
        after = write(len(answers) + 1)
        assert after.status_code == 200, after.text
        assert after.json()["sequence"] == len(answers) + 1
        found = real_server.HTTP.get(f"{s.base}{url}/full-{len(answers) + 1}")
        assert found.status_code == 200, found.text
    assert "the disk is full: emptied the file the last cut replaced" in (tmp_path / "serve.log").read_text()


@contextlib.contextmanager
def served_unwatched(
    lee_data_dir: Path, data: Path, lee_docs: Lee
) -> Iterator[tuple[real_server.Server, Callable[[int], httpx.Response]]]:
    """``lee`` copied into ``data`` and served with writes on and nothing watched (its tables change on a reload
    alone); and the upsert of document ``d<i>``."""
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_WATCH_SECONDS": "0"}
    with real_server.running(data, data.parent / "serve.log", env=env) as server:

        def write(i: int) -> httpx.Response:
            document = upsert_body(lee_docs, f"d{i}", i, 2000)["documents"][0]
            url = f"{server.base}/v1/tables/lee/documents"
            return real_server.HTTP.post(url, json={"documents": [document]}, headers=HEADERS)

        yield server, write


IMPORTED_AGAIN = "table 'lee': it was removed or imported again since this worker loaded it: reloading the tables"


def test_a_removed_table_takes_no_write_and_one_imported_under_its_name_starts_afresh(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    """``embedding-index remove`` while the server still serves the table (nothing watched: until a reload): writes
    after it are refused, 404, rather than answered and kept in a log of their own, which a table imported next under
    the name would replay, or be refused for (its first record far past the new version's); and so are writes to the
    removed table once another is imported under its name, until the server has loaded that, which it does by
    itself (no signal, nothing watched)."""
    data = tmp_path / "data"
    path = writelog.log_path(data, "lee")
    url = "/v1/tables/lee/documents"
    with served_unwatched(lee_data_dir, data, lee_docs) as (server, write):
        assert [write(i).status_code for i in range(3)] == [200] * 3
        removed = run_cli("remove", "lee", "--data-dir", data)
        assert removed.code == 0, removed.err
        refused = [write(3), write(4)]  # the second would find the log the first made, and be appended to it
        assert [answer.status_code for answer in refused] == [404, 404], [answer.text for answer in refused]
        for answer in refused:
            assert answer.json()["error"]["message"] == "table 'lee' was removed; nothing was written"
        assert not path.exists() and not list(path.parent.iterdir())
        source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
        imported = run_cli("import", source, "--name", "lee", "--data-dir", data)
        assert imported.code == 0, imported.err
        stale = write(5)  # the removed table's writes are in no version of the new one: its log starts again
        assert stale.status_code == 503, stale.text
        message = stale.json()["error"]["message"]
        assert "table 'lee' was removed or imported again since this worker loaded it" in message, message
        assert (
            "(the version in its place holds the writes up to 0, this worker up to 3); nothing was written" in message
        )

        def fresh() -> bool:
            summary = real_server.HTTP.get(f"{server.base}/v1/tables/lee")
            return summary.status_code == 200 and summary.json()["writes"]["sequence"] == 0

        real_server.wait_for(fresh, 120, "the table imported afresh, loaded by the server itself")
        assert IMPORTED_AGAIN in server.log()
        assert real_server.HTTP.get(f"{server.base}{url}/d0").status_code == 404
        again = write(6)
        assert again.status_code == 200 and again.json()["sequence"] == 1, again.text


def test_a_table_removed_and_imported_again_takes_no_write_before_it_is_loaded(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    """A worker that wrote nothing to the removed table ends at the same sequence (0) as the table imported under
    its name: its writes, checked against the removed table's fields, are refused all the same (503) until it has
    loaded the new import (by itself: nothing watched, no signal), rather than written into the new table's log as
    its first record."""
    data = tmp_path / "data"
    path = writelog.log_path(data, "lee")
    with served_unwatched(lee_data_dir, data, lee_docs) as (server, write):
        assert run_cli("remove", "lee", "--data-dir", data).code == 0
        source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs)[:200])  # another table of the name
        imported = run_cli("import", source, "--name", "lee", "--data-dir", data)
        assert imported.code == 0, imported.err
        stale = write(0)
        assert stale.status_code == 503, stale.text
        assert stale.json()["error"]["message"] == (
            "table 'lee' was removed or imported again since this worker loaded it; nothing was written: it answers "
            "again once it has loaded the table in its place (in a moment)"
        )
        assert not path.exists() or path.stat().st_size == 0

        def fresh() -> bool:
            summary = real_server.HTTP.get(f"{server.base}/v1/tables/lee")
            return summary.status_code == 200 and summary.json()["rows"] == 200

        real_server.wait_for(fresh, 120, "the table imported afresh, loaded by the server itself")
        assert IMPORTED_AGAIN in server.log()
        again = write(1)
        assert again.status_code == 200 and again.json()["sequence"] == 1, again.text


def test_a_worker_on_a_table_imported_again_with_another_schema_loads_the_new_import_itself(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee
) -> None:
    """Nothing watched: ``lee`` imported again over itself (``--force``) with its years as strings, then written to
    through the new import (a string year, which the served version cannot take): the server answers 503, saying
    so, until it has loaded the new import, which it does by itself (no signal); then it serves the write."""
    data = tmp_path / "data"
    other = [{**{k: v for k, v in r.items() if k != "tags"}, "year": str(r["year"])} for r in jsonl_records(lee_docs)]
    with served_unwatched(lee_data_dir, data, lee_docs) as (server, _):
        url = f"{server.base}/v1/tables/lee"
        assert real_server.HTTP.get(url).json()["writes"]["sequence"] == 0
        assert import_lee(write_jsonl(tmp_path / "lee-other.jsonl", other), data, "--force").code == 0
        written = upsert_body(lee_docs, "w1", 1, 2001)
        written["documents"][0]["fields"]["year"] = "2001"
        with writelog.appending(writelog.log_path(data, "lee")) as log:  # a writer serving the new import
            log.append(1, written)
        behind = real_server.HTTP.get(url)
        assert behind.status_code == 503, behind.text
        assert behind.json()["error"]["message"] == (
            "table 'lee': it was imported again with another schema since this worker loaded it, and written to "
            "since: it answers again once it has loaded the table in its place (in a moment)"
        )
        real_server.wait_for(
            lambda: real_server.HTTP.get(url).status_code == 200, 120, "the new import, loaded by the server itself"
        )
        found = real_server.HTTP.get(f"{url}/documents/w1")
        assert found.status_code == 200 and found.json()["fields"]["year"] == "2001", found.text
        assert "it was imported again with another schema since this worker loaded it: reloading" in server.log()


def test_an_import_to_or_from_shards_over_writes_is_refused(lee_docs: Lee, tmp_path: Path) -> None:
    """A re-import that makes a whole table sharded (or a sharded one whole, or sharded again) replays no log: while
    the replaced table's logs hold writes beyond its version it is refused, naming the log, rather than dropping
    them; compacted, it goes ahead."""
    data = tmp_path / "data"
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    assert import_lee(source, data).code == 0
    append(data, lee_docs, 1, ["w1"])
    manifest = (data / "lee" / artifact.MANIFEST).read_bytes()
    refused = import_lee(source, data, "--shards", "3", "--force")
    assert refused.code != 0
    assert "table 'lee' not replaced: its write log lee.log holds writes made since its version (the first: " in (
        refused.err
    )
    assert "sequence 1), which an import as shards does not replay; compact first" in refused.err, refused.err
    assert (data / "lee" / artifact.MANIFEST).read_bytes() == manifest
    assert run_cli("compact", "lee", "--data-dir", data).code == 0
    assert import_lee(source, data, "--shards", "3", "--force").code == 0
    shard = data / "lee" / "shard-002"
    with writelog.appending(writelog.table_log(shard)) as log:
        log.append(1, upsert_body(lee_docs, "w2", 2, 2001))
    for more in ((), ("--shards", "2")):
        refused = import_lee(source, data, "--force", *more)
        assert refused.code != 0
        assert "its write log lee/shard-002.log holds writes made since its version (the first: sequence 1)" in (
            refused.err
        )
    assert artifact.read_manifest(data / "lee")["shards"]["count"] == 3


def test_a_compaction_whose_cut_finds_the_disk_full_says_it_published(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut comes after the publish: its failure is no "nothing changed", and the next compaction finishes it."""
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    append(data, lee_docs, 1, ["c1", "c2"])
    path = writelog.log_path(data, "lee")

    def full(log: Path, covered: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(log.with_name(f".{log.name}.cut")))

    with monkeypatch.context() as patched:
        patched.setattr(writelog, "cut", full)
        refused = run_cli("compact", "lee", "--data-dir", data)
    assert refused.code == 1 and "Traceback" not in refused.err
    assert refused.err.strip().endswith("No space left on device (table 'lee' was published before this)"), refused.err
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 2
    assert [r.seq for r in recovered(path)] == [1, 2]  # not cut: replayed past by the version's sequence
    assert run_cli("verify", "lee", "--data-dir", data).code == 0
    assert run_cli("compact", "lee", "--data-dir", data).code == 0
    assert recovered(path) == []


@pytest.mark.parametrize("how", ["truncated", "cut back", "replaced"])
def test_a_log_emptied_by_hand_is_read_again_from_its_start(
    lee_data_dir: Path, tmp_path: Path, lee_docs: Lee, how: str
) -> None:
    """Three writes, then the log truncated to nothing, cut back after its first record, or replaced by an empty
    file, the version left as it is: the server answers as the log now says (the writes cut away gone, the one kept
    there), without a 503, and numbers the next write after the log's last record, so that the log replays cleanly
    at the next start (a write numbered after the ones cut away would leave a gap that refuses the table)."""
    data = tmp_path / "data"
    path = writelog.log_path(data, "lee")
    kept = 1 if how == "cut back" else 0

    def shown(server: real_server.Server, count: int) -> list[int]:
        url = f"{server.base}/v1/tables/lee/documents"
        return [real_server.HTTP.get(f"{url}/d{i}", headers=HEADERS).status_code for i in range(count)]

    with served_unwatched(lee_data_dir, data, lee_docs) as (server, write):
        assert [write(i).status_code for i in range(3)] == [200] * 3
        if how == "truncated":
            os.truncate(path, 0)
        elif how == "cut back":
            os.truncate(path, recovered(path)[0].end)
        else:  # the empty file made while the log is there: another inode, never the log's own again
            empty = path.with_name("empty")
            empty.touch()
            empty.replace(path)
        summary = real_server.HTTP.get(f"{server.base}/v1/tables/lee")
        assert summary.status_code == 200, summary.text
        assert summary.json()["writes"]["sequence"] == kept
        assert shown(server, 3) == [200] * kept + [404] * (3 - kept)
        again = write(3)
        assert again.status_code == 200, again.text
        assert again.json()["sequence"] == kept + 1
        assert [record.seq for record in recovered(path)] == list(range(1, kept + 2))
        assert shown(server, 4) == [200] * kept + [404] * (3 - kept) + [200]
        assert "read again from its start" in server.log()
    with real_server.running(data, tmp_path / "again.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        assert ready(server) == 200, server.log()[-2000:]
        assert shown(server, 4) == [200] * kept + [404] * (3 - kept) + [200]
