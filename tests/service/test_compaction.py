"""Compaction on a real server: gensim's Lee corpus written to over HTTP (two workers), then ``embedding-index
compact lee`` run as its own process while a client keeps writing. The new version holds every write up to the
sequence it records, the log keeps exactly the later ones, the server swaps to the new version (watching the data
directory) and answers as a fresh import of the final documents does; no acknowledged write is lost.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from index.engine.shard_writes import owner
from index.store import artifact, shardmap, writelog
from service.reload import CatchUp
from tests.cli import run_cli
from tests.lee import Lee, write_jsonl
from tests.logs import recovered
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, client_for, lee_copy
from tests.service.test_compaction_faults import lee_with_log
from tests.service.test_live_search import HEADERS, KEY, QUERIES, as_write, hits_of, ranked, resolve, written


def test_compaction_while_writes_go_on(lee_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    final, batches, deletes = written(lee_docs)
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_WATCH_SECONDS": "0.2"}
    cli = real_server.BIN / "embedding-index"
    # Before any write, nothing to compact: that command's start-up overlaps the server's.
    nothing = subprocess.Popen([cli, "compact", "lee", "--data-dir", data], stdout=subprocess.PIPE, text=True)
    with real_server.running(data, tmp_path / "serve.log", "--workers", "2", env=env) as server:
        said = nothing.communicate()[0]
        assert nothing.returncode == 0 and "no writes since its version" in said
        url = f"{server.base}/v1/tables/lee"
        for batch in batches:
            body = {"documents": [as_write(r) for r in batch]}
            assert real_server.HTTP.post(f"{url}/documents", json=body, headers=HEADERS).status_code == 200
        for body in deletes:
            last = real_server.HTTP.post(f"{url}/documents/delete", json=body, headers=HEADERS).json()["sequence"]
        acked: list[str] = []
        stop = threading.Event()

        def keep_writing() -> None:
            client = httpx.Client(timeout=30)
            i = 0
            while not stop.is_set():
                doc = {"id": f"during/{i}", "vector": lee_docs.vectors[i % 300].tolist(), "fields": {"year": 3000}}
                answer = client.post(f"{url}/documents", json={"documents": [doc]}, headers=HEADERS)
                assert answer.status_code == 200, answer.text
                acked.append(doc["id"])
                i += 1

        writer = threading.Thread(target=keep_writing)
        writer.start()
        try:
            done = subprocess.run([cli, "compact", "lee", "--data-dir", data], capture_output=True, text=True)
        finally:
            stop.set()
            writer.join(60)
        assert done.returncode == 0, done.stderr
        manifest = artifact.read_manifest(data / "lee")
        covered = manifest["log_sequence"]
        assert covered >= last and f"sequence {covered}" in done.stdout
        kept = recovered(writelog.log_path(data, "lee"))
        assert all(r.seq > covered for r in kept)
        assert [r.seq for r in kept] == list(range(covered + 1, covered + 1 + len(kept)))
        in_version = manifest["rows"] - len(final)
        assert in_version + len(kept) == len(acked)  # each write made during the compaction: in one place only
        for ident in acked:  # every write answered, by whichever worker, on whichever version it serves now
            assert real_server.HTTP.get(f"{url}/documents/{ident}").json()["fields"]["year"] == 3000
        real_server.wait_for(lambda: server.log().count("reload: 1 loaded") == 2, what="both workers' new version")
        assert real_server.HTTP.get(url).json()["built_at"] == manifest["built_at"]
        writes = real_server.HTTP.get(url).json()["writes"]
        assert writes["version_sequence"] == covered and writes["sequence"] == covered + len(kept)
        assert writes["written"] == len(kept) and writes["deleted"] == 0
        # Without the documents written during the compaction, the table is the fresh import of ``final``.
        wiped = real_server.HTTP.post(f"{url}/documents/delete", json={"filter": {"year": 3000}}, headers=HEADERS)
        assert wiped.json()["deleted"] == len(acked)
        fresh_dir = tmp_path / "fresh"
        path = write_jsonl(tmp_path / "final.jsonl", final)
        assert run_cli("import", path, "--format", "documents", "--name", "lee", "--data-dir", fresh_dir).code == 0
        with client_for(data_dir=fresh_dir) as fresh:
            for body in QUERIES:
                request = resolve(body, lee_docs)
                expected: dict[str, Any] = fresh.post("/v1/tables/lee/search", json=request).json()
                got = real_server.HTTP.post(f"{url}/search", json=request).json()
                for mine, theirs in zip(hits_of(got), hits_of(expected), strict=True):
                    assert ranked(mine) == ranked(theirs), body
                    assert {h["id"]: h["fields"] for h in mine} == {h["id"]: h["fields"] for h in theirs}
                    np.testing.assert_allclose([h["score"] for h in mine], [h["score"] for h in theirs], atol=1e-6)


def test_a_server_two_compactions_behind_answers_with_every_write(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A compaction by hand folds the write the server had read, then the server's own compaction folds the next
    and cuts the log again before its SIGHUP is handled: the server (not watching its data directory, so it never
    loaded the first) still serves the first version. The write it had not read is in the file the second cut
    replaced, so its summary, a read by id and a write answer with both writes; the summary answered 503 here (it took
    itself for a worker that had lost writes), once seen under load between a test's compactions. After the
    reload, the newest version."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    with writelog.appending(path) as log:
        log.append(1, {"op": "delete", "ids": [lee_docs.ids[1]]})
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    with real_server.running(data, tmp_path / "serve.log", env=env) as server:
        url = f"{server.base}/v1/tables/lee"
        assert real_server.HTTP.get(url).json()["writes"]["sequence"] == 1  # read at its load
        assert run_cli("compact", "lee", "--data-dir", data).code == 0  # by hand: folds 1, cuts the log
        with writelog.appending(path) as log:  # the write that calls for the server's compaction
            log.append(2, {"op": "delete", "ids": [lee_docs.ids[2]]})
        assert run_cli("compact", "lee", "--data-dir", data).code == 0  # the server's: folds 2, cuts again
        assert artifact.read_manifest(data / "lee")["log_sequence"] == 2 and recovered(path) == []
        answer = real_server.HTTP.get(url)
        assert answer.status_code == 200, answer.text
        summary = answer.json()
        assert summary["rows"] == 300
        assert summary["writes"] | {"log_bytes": 0} == {
            "version_sequence": 0,
            "sequence": 2,
            "written": 0,
            "deleted": 2,
            "log_bytes": 0,
        }
        found = real_server.HTTP.post(f"{url}/documents/get", json={"ids": lee_docs.ids[:3]})
        assert found.status_code == 200, found.text
        assert [document["id"] for document in found.json()["documents"]] == [lee_docs.ids[0]]
        assert found.json()["missing"] == lee_docs.ids[1:3]
        body = {"ids": [lee_docs.ids[3]]}
        deleted = real_server.HTTP.post(f"{url}/documents/delete", json=body, headers=HEADERS)
        assert deleted.status_code == 200 and deleted.json()["sequence"] == 3, deleted.text
        server.process.send_signal(signal.SIGHUP)
        real_server.wait_for(lambda: real_server.HTTP.get(url).json()["rows"] == 298, what="the newest version")
        writes = real_server.HTTP.get(url).json()["writes"]
        assert (writes["version_sequence"], writes["sequence"], writes["deleted"]) == (2, 3, 1)


def lose_writes_to_two_compactions(data: Path, url: str, lee_docs: Lee) -> None:
    """The server (not watching its data directory) answers writes 1 and 2; another process writes 3 and 4, a
    compaction by hand folds 1..4 and cuts the log, 5 and 6 follow and a second compaction folds them and cuts again:
    the file holding 3 and 4 is gone, so the server, still on the first version, has lost them."""
    path = writelog.log_path(data, "lee")
    for seq in (1, 2):  # answered 200 by the server
        body = {"ids": [lee_docs.ids[seq]]}
        deleted = real_server.HTTP.post(f"{url}/documents/delete", json=body, headers=HEADERS)
        assert deleted.status_code == 200 and deleted.json()["sequence"] == seq, deleted.text
    with writelog.appending(path) as log:  # another process's writes, which the server never reads
        for seq in (3, 4):
            log.append(seq, {"op": "delete", "ids": [lee_docs.ids[seq]]})
    assert run_cli("compact", "lee", "--data-dir", data).code == 0  # folds 1..4, cuts the log
    with writelog.appending(path) as log:
        for seq in (5, 6):
            log.append(seq, {"op": "delete", "ids": [lee_docs.ids[seq]]})
    assert run_cli("compact", "lee", "--data-dir", data).code == 0  # folds 5 and 6, cuts again: 3 and 4 gone
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 6 and recovered(path) == []


BEHIND = "a newer version holds writes this worker lacks"  # the server's line as a worker behind reloads


def behind_503(url: str) -> None:
    answer = real_server.HTTP.get(url)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "not_ready"
    assert "up to sequence 4" in answer.json()["error"]["message"]


def test_a_server_that_lost_writes_to_two_compactions_loads_the_newest_version_itself(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A server that lost writes to two compactions answers 503, then loads the newest version by itself, without
    a signal: it answers with every write, from that version, and takes the next."""
    data, _ = lee_with_log(lee_data_dir, tmp_path)
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        url = f"{server.base}/v1/tables/lee"
        lose_writes_to_two_compactions(data, url, lee_docs)
        behind_503(url)
        real_server.wait_for(lambda: real_server.HTTP.get(url).status_code == 200, what="the newest version")
        summary = real_server.HTTP.get(url).json()
        assert summary["rows"] == 294
        assert (summary["writes"]["version_sequence"], summary["writes"]["sequence"]) == (6, 6)
        found = real_server.HTTP.post(f"{url}/documents/get", json={"ids": lee_docs.ids[:8]})
        assert found.status_code == 200, found.text
        assert [document["id"] for document in found.json()["documents"]] == [lee_docs.ids[0], lee_docs.ids[7]]
        deleted = real_server.HTTP.post(f"{url}/documents/delete", json={"ids": [lee_docs.ids[7]]}, headers=HEADERS)
        assert deleted.status_code == 200 and deleted.json()["sequence"] == 7, deleted.text
        assert [r.seq for r in recovered(writelog.log_path(data, "lee"))] == [7]
        assert server.log().count(BEHIND) == 1


def test_each_worker_that_lost_writes_loads_the_newest_version_itself(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Under --workers 2 each worker finds itself behind at its own first request and loads the newest version for
    itself (a request on a new connection reaches either worker)."""
    data, _ = lee_with_log(lee_data_dir, tmp_path)
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    with real_server.running(data, tmp_path / "serve.log", "--workers", "2", env=env) as server:
        url = f"{server.base}/v1/tables/lee"
        lose_writes_to_two_compactions(data, url, lee_docs)

        def both_loaded() -> bool:
            answer = real_server.HTTP.get(url, timeout=10)
            assert answer.status_code == 200 or "up to sequence 4" in answer.json()["error"]["message"], answer.text
            return server.log().count(BEHIND) == 2

        real_server.wait_for(both_loaded, what="both workers to load the newest version")
        real_server.wait_for(
            lambda: all(real_server.HTTP.get(url, timeout=10).status_code == 200 for _ in range(10)),
            what="the newest version",
        )
        assert {real_server.HTTP.get(url, timeout=10).json()["rows"] for _ in range(20)} == {294}
        assert server.log().count(BEHIND) == 2


@pytest.mark.parametrize("then", ["repaired", "removed"])
def test_a_server_behind_a_damaged_version_backs_off_until_it_is_repaired_or_removed(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, then: str
) -> None:
    """The newest version's vectors are damaged: the server that lost writes stays on its version and answers 503,
    trying the reload again after waits that double (not at every request). Repaired, the version is loaded without
    a signal; removed, the table is dropped (404)."""
    data, _ = lee_with_log(lee_data_dir, tmp_path)
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        url = f"{server.base}/v1/tables/lee"
        lose_writes_to_two_compactions(data, url, lee_docs)
        vectors = data / "lee" / "vectors.npy"
        good = vectors.read_bytes()
        with vectors.open("r+b") as file:  # in place: the last value's bytes flipped
            file.seek(-4, os.SEEK_END)
            file.write(bytes(b ^ 0xFF for b in good[-4:]))
        # the reloads' first wait, then twice that: n reloads take 2^(n-1) - 1 first waits at least (a window of four
        # holds three at most), polled until the second, however long a busy machine's reloads take
        wait = CatchUp.FIRST_WAIT_SECONDS
        polled = time.monotonic()
        while time.monotonic() - polled < 4 * wait or server.log().count(BEHIND) < 2:
            assert time.monotonic() - polled < 120, server.log()
            behind_503(url)
            time.sleep(0.02)
        reloads = server.log().count(BEHIND)
        assert 2 <= reloads <= 1 + math.log2(1 + (time.monotonic() - polled) / wait), server.log()
        assert "new files refused, still serving the version built at" in server.log()
        if then == "repaired":
            vectors.write_bytes(good)
            real_server.wait_for(lambda: real_server.HTTP.get(url).status_code == 200, what="the repaired version")
            summary = real_server.HTTP.get(url).json()
            assert (summary["rows"], summary["writes"]["version_sequence"]) == (294, 6)
        else:
            assert run_cli("remove", "lee", "--data-dir", data).code == 0
            real_server.wait_for(lambda: real_server.HTTP.get(url).status_code == 404, what="the table dropped")
            assert real_server.HTTP.get(url).json()["error"]["code"] == "unknown_table"


def test_a_server_of_a_sharded_table_that_lost_a_shards_writes_loads_the_newest_version_itself(
    lee_imports: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """The same with Lee as shards served whole: one shard's log loses writes 3 and 4 to two compactions of the
    table; the server loads the table's newest version by itself, every shard's writes in it."""
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    ids = [ident for ident in lee_docs.ids if owner(ident, LEE_SHARDS) == 0][:7]
    path = writelog.table_log(data / "lee" / shardmap.shard_name(0))
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:
        url = f"{server.base}/v1/tables/lee"
        for seq in (1, 2):
            deleted = real_server.HTTP.post(f"{url}/documents/delete", json={"ids": [ids[seq]]}, headers=HEADERS)
            assert deleted.status_code == 200, deleted.text
        for folded in (4, 6):  # another process's two writes to shard 0, then a compaction of the table
            with writelog.appending(path) as log:
                for seq in (folded - 1, folded):
                    log.append(seq, {"op": "delete", "ids": [ids[seq]]})
            assert run_cli("compact", "lee", "--data-dir", data).code == 0
        behind_503(url)
        real_server.wait_for(lambda: real_server.HTTP.get(url).status_code == 200, what="the newest version")
        assert real_server.HTTP.get(url).json()["rows"] == 294
        found = real_server.HTTP.post(f"{url}/documents/get", json={"ids": ids})
        assert found.status_code == 200, found.text
        assert [document["id"] for document in found.json()["documents"]] == [ids[0]]
        assert server.log().count("table 'lee': a newer version holds writes this worker lacks") == 1


def deleted_files(pid: int) -> list[str]:
    """The files process ``pid`` holds open (each mapped array keeps a descriptor) that were deleted meanwhile."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.endswith(" (deleted)"):
                held.append(target)
    return held


def test_a_version_replaced_by_compaction_is_let_go(lee_data_dir: Path, tmp_path: Path) -> None:
    """A worker that searched a version by keyword holds none of its files once a compaction replaced it and the
    worker reloaded: a replaced version's files are deleted, and one held open would keep its descriptor and its
    disk space for as long as the server runs (the start-up version's, kept out of the collector, for ever)."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_WATCH_SECONDS": "0.2"}
    cli = real_server.BIN / "embedding-index"
    with real_server.running(data, tmp_path / "serve.log", env=env) as server:
        url = f"{server.base}/v1/tables/lee"
        for turn in range(2):
            doc = {"id": f"let-go/{turn}", "text": f"zebracrossing {turn}", "vector": [0.5] * 50}
            answer = real_server.HTTP.post(f"{url}/documents", json={"documents": [doc]}, headers=HEADERS)
            assert answer.status_code == 200, answer.text
            sequence = answer.json()["sequence"]
            search = {"text": "zebracrossing bushfire", "mode": "keyword", "k": 3}
            assert real_server.HTTP.post(f"{url}/search", json=search).status_code == 200
            subprocess.run([cli, "compact", "lee", "--data-dir", data, "-q"], check=True)
            real_server.wait_for(
                lambda: real_server.HTTP.get(url).json()["writes"]["version_sequence"] == sequence,  # noqa: B023
                what="the compacted version served",
            )
            hits = real_server.HTTP.post(f"{url}/search", json=search).json()["hits"]
            assert {hit["id"] for hit in hits} >= {f"let-go/{r}" for r in range(turn + 1)}
            assert deleted_files(server.process.pid) == []


def test_a_compaction_keeps_the_index_a_later_index_command_built(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """``embedding-index index lee --index ivf:...`` after the import: the compacted version is built with that
    index and its parameters, not again with the import's (``auto``: exact below 100,000 rows)."""
    from index.build.compact import compact
    from index.build.writer import index_table

    shutil.copytree(lee_data_dir / "lee", tmp_path / "lee")
    index_table(tmp_path, "lee", index_spec="ivf:nlist=16,nprobe=16", min_recall=0.5)
    with client_for(data_dir=tmp_path, write_keys=[KEY]) as client:
        doc = {"id": "new/1", "vector": lee_docs.vectors[0].tolist(), "fields": {"year": 3000}}
        assert client.post("/v1/tables/lee/documents", json={"documents": [doc]}, headers=HEADERS).status_code == 200
    assert compact(tmp_path, "lee")["written"] == 1
    manifest = artifact.read_manifest(tmp_path / "lee")
    assert manifest["rows"] == 301 and manifest["index"]["spec"] == {"kind": "ivf", "nlist": 16, "nprobe": 16}
    assert manifest["build"]["min_recall"] == 0.5


def test_a_compaction_after_the_background_build_of_a_deferred_index_keeps_its_options(
    lee_docs: Lee, tmp_path: Path
) -> None:
    """An import with ``--defer-index``, its index then built as ``embedding-serve`` builds it (``embedding-index index
    lee``, no options): the manifest records the deferred spec, recall and seed, and the compaction builds that index
    again (not exact search, not ``auto``) with them."""
    from index.build.compact import compact
    from tests.lee import jsonl_records

    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    spec = "ivf:nlist=16,nprobe=16"
    options = ("--index", spec, "--min-recall", "0.5", "--seed", "7", "--defer-index", "--data-dir", tmp_path)
    assert run_cli("import", source, "--name", "lee", *options).code == 0
    deferred = artifact.read_manifest(tmp_path / "lee")["index"]
    assert deferred["spec"]["kind"] == "flat" and deferred["deferred"]["spec"] == spec
    assert run_cli("index", "lee", "--data-dir", tmp_path).code == 0  # as the server's background build runs it
    indexed = artifact.read_manifest(tmp_path / "lee")
    assert indexed["index"]["spec"]["kind"] == "ivf" and "deferred" not in indexed["index"]
    assert {key: indexed["build"][key] for key in ("index", "min_recall", "seed")} == {
        "index": spec,
        "min_recall": 0.5,
        "seed": 7,
    }
    with client_for(data_dir=tmp_path, write_keys=[KEY]) as client:
        doc = {"id": "new/1", "vector": lee_docs.vectors[0].tolist(), "fields": {"year": 3000}}
        assert client.post("/v1/tables/lee/documents", json={"documents": [doc]}, headers=HEADERS).status_code == 200
    assert compact(tmp_path, "lee")["written"] == 1
    compacted = artifact.read_manifest(tmp_path / "lee")
    assert compacted["rows"] == 301 and compacted["index"]["spec"] == {"kind": "ivf", "nlist": 16, "nprobe": 16}
    assert "deferred" not in compacted["index"] and compacted["build"]["seed"] == 7


def test_a_compaction_keeps_the_build_budget_of_the_import(
    lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import --build-budget 7``: the compacted version's index is chosen with 7 s, as the import's was; it was
    chosen with the default 900 s, the budget recorded nowhere. A table whose manifest holds no budget (built before
    it was recorded) compacts with the default, as before. The auto rule is let choose on Lee's 300 rows."""
    from index.build import index_choice
    from index.build.compact import compact
    from tests.lee import jsonl_records

    monkeypatch.setattr(index_choice, "AUTO_FLAT_BELOW", 100)
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    options = ("--build-budget", "7", "--min-recall", "0.5", "--data-dir", tmp_path)
    assert run_cli("import", source, "--name", "lee", *options).code == 0
    imported = artifact.read_manifest(tmp_path / "lee")
    assert imported["index"]["choice"]["budget_seconds"] == 7 and imported["build"]["budget_seconds"] == 7

    def write_and_compact(ident: str) -> dict[str, Any]:
        with client_for(data_dir=tmp_path, write_keys=[KEY]) as client:
            doc = {"id": ident, "vector": lee_docs.vectors[0].tolist(), "fields": {"year": 3000}}
            written = client.post("/v1/tables/lee/documents", json={"documents": [doc]}, headers=HEADERS)
            assert written.status_code == 200, written.text
        assert compact(tmp_path, "lee")["written"] == 1
        return artifact.read_manifest(tmp_path / "lee")

    compacted = write_and_compact("new/1")
    assert compacted["index"]["choice"]["budget_seconds"] == 7 and compacted["build"]["budget_seconds"] == 7
    older = tmp_path / "lee" / artifact.MANIFEST
    manifest = json.loads(older.read_text())
    del manifest["build"]["budget_seconds"]
    older.write_text(json.dumps(manifest))
    compacted = write_and_compact("new/2")
    assert compacted["index"]["choice"]["budget_seconds"] == 900 and "budget_seconds" not in compacted["build"]
