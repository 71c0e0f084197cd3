"""Automatic compaction on a real server with two workers: once the documents written since the version reach
``EMBEDDING_COMPACT_ROWS``, the server compacts the table in a child process and every worker reloads it; the
written documents are then in the version (and found by keyword), none is lost, and the log is cut. A sharded
table's writes are counted over its shards' logs, and every shard is compacted at once. A table whose writes tie
massively, over which its graph misses its recall, is compacted into exact search."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from index import store
from index.build.writer import index_table
from index.store import artifact, shardmap, writelog
from tests.cli import run_cli
from tests.index.build.test_compact_ties import GRAPH, WRITTEN, templated
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.logs import recovered
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.scraped import scrape
from tests.service.test_live_search import HEADERS, KEY
from tests.vectors import unit

if TYPE_CHECKING:
    from service.compacting import AutoCompaction, Failed

# How long a compaction may take here: the server runs it at a low CPU priority (``service.compacting.CHILD_NICE``),
# so on a machine busy with other work it gets a small share of the CPU and lasts many times its own work (as long
# as the deferred index builds the background index tests wait for).
SECONDS = 240


def test_a_table_is_compacted_when_its_writes_reach_the_setting(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": "6"}
    with real_server.running(data, tmp_path / "serve.log", "--workers", "2", env=env) as server:
        url = f"{server.base}/v1/tables/lee"

        def write(first: int, count: int) -> int:
            docs = [
                {"id": f"auto/{i}", "text": f"zebracrossing number {i}", "vector": lee_docs.vectors[i].tolist()}
                for i in range(first, first + count)
            ]
            answer = real_server.HTTP.post(f"{url}/documents", json={"documents": docs}, headers=HEADERS)
            assert answer.status_code == 200, answer.text
            sequence: int = answer.json()["sequence"]
            return sequence

        write(0, 4)
        real_server.wait_for(lambda: "writes" in real_server.HTTP.get(url).json(), what="the summary")
        assert artifact.read_manifest(data / "lee").get("log_sequence") is None  # 4 < 6: not compacted
        last = write(4, 3)

        def compacted_everywhere() -> bool:  # over new connections: both workers
            return all(real_server.HTTP.get(url).json()["writes"]["version_sequence"] == last for _ in range(6))

        real_server.wait_for(compacted_everywhere, seconds=SECONDS, what="the compacted version in both workers")
        assert artifact.read_manifest(data / "lee")["log_sequence"] == last
        assert real_server.HTTP.get(url).json()["rows"] == 307
        assert recovered(writelog.log_path(data, "lee")) == []
        found = real_server.HTTP.post(f"{url}/search", json={"text": "zebracrossing", "mode": "keyword", "k": 10})
        assert sorted(hit["id"] for hit in found.json()["hits"]) == [f"auto/{i}" for i in range(7)]
        assert "compacting 7 written or deleted documents" in server.log()


def compactions(base: str) -> dict[tuple[str, ...], float]:
    """The compaction series of ``/metrics``: (name, table, outcome) of the counter, (name, table) of the gauge."""
    series = scrape(base)[0]
    return {
        (name, *(dict(labels)[label] for label in ("table", "outcome") if label in dict(labels))): count
        for (name, labels), count in series.items()
        if name.startswith("embedding_compaction")
    }


def test_a_failed_compaction_and_the_next_that_succeeds_are_counted_in_the_metrics(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A failed background compaction was one ERROR line in the log, tried again a minute later, and counted nowhere:
    a dashboard could not see a table whose log only grows. ``/metrics`` counts the compactions by table and outcome
    and gives the time of each table's last success; a server with two workers, whose supervisor compacts.

    The failure is a table whose every document is deleted, refused until it is written to: it was an ERROR line
    and a compaction every minute, all day. It is one warning that says what to do, and no other attempt until
    the next write (over 5 s, ten times the first wait after a failure here), which is compacted at once."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": "6", "EMBEDDING_COMPACT_SECONDS": "0.5"}
    with real_server.running(data, tmp_path / "serve.log", "--workers", "2", env=env) as server:
        url = f"{server.base}/v1/tables/lee"
        assert compactions(server.base) == {}
        # every document deleted, in one write (a look between several could compact the first): not compacted
        body = {"filter": {"year": {"gte": min(lee_docs.fields["year"])}}}
        answer = real_server.HTTP.post(f"{url}/documents/delete", json=body, headers=HEADERS)
        assert answer.status_code == 200 and answer.json()["deleted"] == len(lee_docs.ids), answer.text
        failed = ("embedding_compactions_total", "lee", "failed")
        real_server.wait_for(lambda: failed in compactions(server.base), seconds=SECONDS, what="the failure counted")
        assert compactions(server.base) == {failed: 1.0}
        time.sleep(5)
        assert compactions(server.base) == {failed: 1.0}  # not tried again before the next write
        assert server.log().count("table 'lee': compacting") == 1
        [said] = re.findall(r"\w+ service\.compacting: table 'lee': not compacted: .*", server.log())
        assert said == (
            "WARNING service.compacting: table 'lee': not compacted: every one of its documents is deleted; it serves "
            "on from its version and its writes, and is compacted again after its next write (add a document, or "
            "remove the table)"
        ), said
        assert " ERROR " not in server.log()
        before = time.time()
        doc = {"id": "auto/0", "text": "zebracrossing", "vector": lee_docs.vectors[0].tolist()}
        answer = real_server.HTTP.post(f"{url}/documents", json={"documents": [doc]}, headers=HEADERS)
        assert answer.status_code == 200, answer.text
        compacted = ("embedding_compactions_total", "lee", "compacted")
        # tried again at the next look after the write
        real_server.wait_for(lambda: compacted in compactions(server.base), seconds=SECONDS, what="the next counted")
        counted = compactions(server.base)
        last = counted.pop(("embedding_compaction_last_success_timestamp_seconds", "lee"))
        assert counted == {failed: 1.0, compacted: 1.0}
        assert before <= last <= time.time()
        real_server.wait_for(lambda: real_server.HTTP.get(url).json()["rows"] == 1, what="the compacted version")


def test_a_sharded_table_is_compacted_when_its_shards_writes_reach_the_setting(
    lee_docs: Lee, lee_imports: Path, tmp_path: Path
) -> None:
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")  # lee as 3 shards
    ids = [f"auto/{i}" for i in range(7)]
    assert len({shardmap.shard_of_id(i, LEE_SHARDS) for i in ids[:4]}) > 1  # the first writes span shards
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": "6"}
    with real_server.running(data, tmp_path / "serve.log", env=env) as server:
        url = f"{server.base}/v1/tables/lee"

        def write(first: int, count: int) -> None:
            docs = [
                {"id": ids[i], "text": f"zebracrossing number {i}", "vector": lee_docs.vectors[i].tolist()}
                for i in range(first, first + count)
            ]
            answer = real_server.HTTP.post(f"{url}/documents", json={"documents": docs}, headers=HEADERS)
            assert answer.status_code == 200, answer.text

        write(0, 4)
        real_server.wait_for(lambda: real_server.HTTP.get(url).json()["writes"]["written"] == 4, what="the writes")
        write(4, 3)  # 7 >= 6 over the shards' logs, fewer than 6 in any one

        def compacted() -> bool:
            return real_server.HTTP.get(url).json()["writes"]["written"] == 0

        real_server.wait_for(compacted, seconds=SECONDS, what="the compacted version")
        shards = real_server.HTTP.get(url).json()["writes"]["shards"]
        assert all(s["version_sequence"] == s["sequence"] for s in shards), shards
        assert real_server.HTTP.get(url).json()["rows"] == 307
        for s in range(3):
            shard = shardmap.shard_name(s)
            assert artifact.read_manifest(data / "lee" / shard).get("log_sequence") == shards[s]["sequence"]
            assert recovered(data / writelog.DIRECTORY / "lee" / f"{shard}.log") == []
        found = real_server.HTTP.post(f"{url}/search", json={"text": "zebracrossing", "mode": "keyword", "k": 10})
        assert sorted(hit["id"] for hit in found.json()["hits"]) == ids
        # The count it says is what it had read: the second write's documents go to their shards' logs one log after
        # another, and a look between two of them finds 6 (the setting), while the compaction folds all 7.
        said = re.findall(r"table 'lee': compacting (\d+) written or deleted documents", server.log())
        assert len(said) == 1 and 6 <= int(said[0]) <= 7, said


def test_a_shards_server_says_it_compacts_none_of_its_shards_writes(
    lee_docs: Lee, lee_imports: Path, tmp_path: Path
) -> None:
    """A server of a shard alone (its data directory the sharded table's) takes writes into the shard's log beside
    the table, which only a compaction of the whole table cuts: it says so at its start, naming the command and
    the data directory that do it, rather than take EMBEDDING_COMPACT_SECONDS and never compact."""
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    ident = next(f"alone/{i}" for i in range(99) if shardmap.shard_of_id(f"alone/{i}", LEE_SHARDS) == 0)
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_SECONDS": "0.5"}
    with real_server.running(data / "lee", tmp_path / "serve.log", "--tables", "shard-000", env=env) as server:
        document = {"id": ident, "vector": lee_docs.vectors[0].tolist()}
        url = f"{server.base}/v1/tables/shard-000/documents"
        answer = real_server.HTTP.post(url, json={"documents": [document]}, headers=HEADERS)
        assert answer.status_code == 200, answer.text
        expected = (
            f"WARNING service.compacting: table 'lee': this server serves its shards alone and compacts none of "
            f"their writes (EMBEDDING_COMPACT_ROWS, EMBEDDING_COMPACT_SECONDS): the shards' logs, "
            f"{data.resolve() / writelog.DIRECTORY / 'lee'}, are compacted with the whole table, by `embedding-index "
            f"compact lee --data-dir {data.resolve()}` or by a server whose data directory is {data.resolve()}"
        )
        assert expected in server.log(), server.log()[-3000:]
    done = run_cli("compact", "lee", "--data-dir", data)  # as it says: the whole table's compaction cuts the log
    assert done.code == 0, done.err
    assert recovered(data / writelog.DIRECTORY / "lee" / "shard-000.log") == []


def write_templated(url: str, lee_docs: Lee) -> None:
    """The templated writes (Lee's 300 vectors reused for ``WRITTEN`` documents) to the table at ``url``."""
    for body in templated(lee_docs):
        documents = {"documents": body["documents"]}
        answer = real_server.HTTP.post(f"{url}/documents", json=documents, headers=HEADERS, timeout=60)
        assert answer.status_code == 200, answer.text


def test_a_table_whose_writes_tie_massively_is_compacted_into_exact_search(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A writer reuses the Lee table's 300 vectors for 16,000 documents: the table's HNSW graph (M=8) no longer
    reaches its --min-recall over them. The server's compaction folds the log all the same, into exact search (what
    an import of 16,300 rows takes by default), says so in one line, and the summary shows it; every document is
    there, the log is cut, and the answers are the exact ones, ties counted, against a float64 brute force."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    index_table(data, "lee", index_spec=GRAPH)
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": str(WRITTEN)}
    with real_server.running(data, tmp_path / "serve.log", env=env) as server:
        url = f"{server.base}/v1/tables/lee"
        write_templated(url, lee_docs)

        def compacted() -> bool:
            return real_server.HTTP.get(url).json()["writes"]["written"] == 0

        real_server.wait_for(compacted, seconds=SECONDS, what="the compacted version")
        summary = real_server.HTTP.get(url).json()
        assert summary["rows"] == 300 + WRITTEN and summary["index"]["kind"] == "flat"
        assert summary["recall_at_10"] == 1.0 and summary["writes"]["log_bytes"] == 0
        fallback = summary["index_fallback"]
        assert fallback["index"]["kind"] == "hnsw" and fallback["recall_at_10"] < 0.95 and fallback["instead"] == "flat"
        said = re.findall(r"table 'lee': compacted 'lee': .* index flat in place of .*", server.log())
        assert len(said) == 1 and f"recall@10 {fallback['recall_at_10']} is below --min-recall 0.95" in said[0]
        assert "compaction failed" not in server.log()
        assert recovered(writelog.log_path(data, "lee")) == []
        rows = unit(np.vstack([lee_docs.vectors, lee_docs.vectors[np.arange(WRITTEN) % 300]]))
        ids = [*lee_docs.ids, *(f"copy/{i}" for i in range(WRITTEN))]
        row_of = {ident: row for row, ident in enumerate(ids)}
        rng = np.random.default_rng(5)
        for _ in range(20):  # between two documents: the copies of both tie in the exact top 10
            a, b = rng.choice(300, size=2, replace=False)
            query = lee_docs.vectors[a] + rng.uniform(0.3, 1.0) * lee_docs.vectors[b]
            hits = real_server.HTTP.post(f"{url}/search", json={"vector": query.tolist(), "k": 10}).json()["hits"]
            exact = rows @ unit(query)
            kth = np.sort(exact)[-10]
            found = [row_of[hit["id"]] for hit in hits]
            assert len(set(found)) == 10 and min(exact[found]) >= kth - 1e-6, (a, b)


def test_a_sharded_table_whose_writes_tie_massively_is_compacted_into_exact_search(
    lee_docs: Lee, tmp_path: Path
) -> None:
    """The same writes to Lee imported as 3 shards with that graph: each shard's compaction takes exact search,
    the line says the lowest recall of the shards', as the summary's ``index_fallback`` does."""
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    data = tmp_path / "data"
    done = run_cli("import", source, "--name", "lee", "--shards", LEE_SHARDS, "--index", GRAPH, "--data-dir", data)
    assert done.code == 0, done.err
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": str(WRITTEN)}
    with real_server.running(data, tmp_path / "serve.log", env=env) as server:
        url = f"{server.base}/v1/tables/lee"
        write_templated(url, lee_docs)
        real_server.wait_for(
            lambda: real_server.HTTP.get(url).json()["writes"]["written"] == 0, seconds=SECONDS, what="the compaction"
        )
        summary = real_server.HTTP.get(url).json()
        assert summary["rows"] == 300 + WRITTEN and summary["index"]["kind"] == "flat"
        shards = [artifact.read_manifest(data / "lee" / shardmap.shard_name(s))["index"] for s in range(3)]
        assert all(shard["fallback"]["instead"] == "flat" for shard in shards), shards
        lowest = min(shard["fallback"]["recall_at_10"] for shard in shards)
        assert summary["index_fallback"]["recall_at_10"] == lowest < 0.95
        said = re.findall(r"table 'lee': compacted 'lee': .* index flat in place of .*", server.log())
        assert len(said) == 1 and f"recall@10 {lowest} is below --min-recall 0.95" in said[0], said


def test_a_background_compaction_that_gives_up_on_the_lock_says_what_the_server_does(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's compaction (a real ``embedding-index compact`` child) that waited in vain for another one's lock
    logged the command's advice, "or with a longer --wait", an option the server has no setting for. It says that
    the server tries the table again, and when, and what its operator can do: end the other compaction if it
    hangs."""
    from index.build.compact import locked
    from service import compacting

    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    with writelog.appending(writelog.log_path(data, "lee")) as log:
        log.append(1, {"op": "delete", "ids": [lee_docs.ids[1]]})
    monkeypatch.setattr(store, "COMPACTION_WAIT_SECONDS", 0.5)  # the server's wait, its command's --wait
    with caplog.at_level(logging.INFO, logger="service.compacting"), locked(data, "lee"):
        assert compacting.AutoCompaction(data, 1, 0)._compact("lee") is not None
    [said] = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert said == (
        "table 'lee': compaction failed (embedding-index: error: table 'lee' not compacted: another compaction of it "
        f"(process {os.getpid()}) held its lock for the 0.5s it was given; nothing was changed); it keeps its version "
        "and its log, and is tried again in 60s: end that compaction if it hangs"
    ), said
    assert artifact.read_manifest(data / "lee").get("log_sequence") is None


def with_one_delete(lee_data_dir: Path, lee_docs: Lee, data: Path) -> Path:
    """A copy of lee in ``data`` whose write log holds one delete, which calls for a compaction: the log's path."""
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    with writelog.appending(path) as log:
        log.append(1, {"op": "delete", "ids": [lee_docs.ids[1]]})
    return path


def test_a_background_compaction_says_its_progress_in_the_log_as_the_index_build_does(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's compaction child's lines were read only once it had ended, and only its last one logged: a
    compaction of a large table was one line at its start and one at its end, minutes apart. Each line is logged
    as it comes, the table's, as a background index build's are: its steps, their progress, then its summary."""
    from service import compacting

    data = tmp_path / "data"
    with_one_delete(lee_data_dir, lee_docs, data)
    with caplog.at_level(logging.INFO, logger="service.compacting"):
        assert compacting.AutoCompaction(data, 1, 0)._compact("lee") is None
    said = [record.getMessage() for record in caplog.records if record.name == "service.compacting"]
    assert said[0].startswith("table 'lee': compacting "), said  # its count is of the writes its loop has read
    assert f"table 'lee': verifying {data / 'lee'} ..." in said, said
    assert any(message.startswith("table 'lee': checksums: done (") for message in said), said
    assert said[-1].startswith("table 'lee': compacted 'lee': "), said
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING], said


def compacting_at_work(
    lee_data_dir: Path, lee_docs: Lee, data: Path
) -> tuple[AutoCompaction, threading.Thread, list[Failed | None], subprocess.Popen[str]]:
    """A copy of lee in ``data`` with one delete in its log, compacted by the server's compaction in a thread: that
    compaction, its thread, the list its outcome goes to, and its child once the child holds the table's compaction
    lock (its id in the lock file)."""
    from service import compacting

    with_one_delete(lee_data_dir, lee_docs, data)
    auto = compacting.AutoCompaction(data, 1, 0)
    lock = writelog.compaction_lock(data, "lee")
    outcome: list[compacting.Failed | None] = []
    thread = threading.Thread(target=lambda: outcome.append(auto._compact("lee")))
    thread.start()
    deadline = time.monotonic() + SECONDS
    while not ((child := auto._child) and lock.is_file() and lock.read_text().strip() == str(child.pid)):
        assert time.monotonic() < deadline and thread.is_alive(), "the compaction never took its lock"
        time.sleep(0.005)
    return auto, thread, outcome, child


def test_a_background_compaction_killed_is_said_killed_and_the_next_one_compacts(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's compaction child killed (by the OOM killer, or ``kill -9``) was said to have failed with the last
    progress line it had printed (``compaction failed (embedding-index: checksums: done (2 MiB of 2 MiB) in 0s)``),
    or as ``exit -9``: its line names the signal. Its lock dies with it: the next compaction folds the write."""
    data = tmp_path / "data"
    with caplog.at_level(logging.INFO, logger="service.compacting"):
        # killed at work: once the child holds the table's compaction lock, long before it has verified the table,
        # folded the write, built and published the next version
        auto, compacting_thread, outcome, child = compacting_at_work(lee_data_dir, lee_docs, data)
        child.kill()
        compacting_thread.join(SECONDS)
        assert outcome and outcome[0] is not None
        [said] = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
        assert said.startswith("table 'lee': compaction failed (killed by SIGKILL); it keeps its version"), said
        assert auto._compact("lee") is None  # no lock left behind
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 1 and not list(data.glob(".tmp-*"))


def test_a_background_compaction_the_server_stops_is_said_stopped_as_its_index_build_is(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Ctrl-C on the server's terminal while it compacts a table (SIGINT to its process group, the compaction's
    child in it), then the server's stop: the child leaves the Ctrl-C to the server, as its index build's does, and
    the stop is said as the index build's is, once, not as a compaction that failed (``compaction failed
    (embedding-index: interrupted; ...)`` or ``(killed by SIGTERM)``, an error to be tried again in 60 s)."""
    data = tmp_path / "data"
    with caplog.at_level(logging.INFO, logger="service.compacting"):
        auto, compacting_thread, _, child = compacting_at_work(lee_data_dir, lee_docs, data)
        # the terminal's Ctrl-C reaches the child as it reaches the server, which stops at once (the child, left
        # alone by the Ctrl-C, would otherwise finish this small compaction)
        os.kill(child.pid, signal.SIGINT)
        auto.stop()
        compacting_thread.join(SECONDS)
    said = [(record.levelno, record.getMessage()) for record in caplog.records]
    assert (
        logging.INFO,
        "table 'lee': compaction stopped with the server; it keeps its version and its log",
    ) in said, said
    assert not [message for level, message in said if level >= logging.WARNING], said
    assert artifact.read_manifest(data / "lee").get("log_sequence") is None  # its version as it was, the log kept


def test_a_compaction_that_keeps_failing_is_tried_again_later_each_time_until_its_cause_is_removed(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A background compaction that failed for a cause that lasts (here a write log made immutable, which the
    compaction cannot cut) was tried again every minute, for ever. After each failure in a row the server waits
    twice as long (from ``EMBEDDING_COMPACT_SECONDS``, 0.5 s here, up to an hour), says so in the ERROR line, and
    keeps to it; once the cause is removed, the next attempt compacts the table."""
    from tests.service.test_write_durability import immutable

    data = tmp_path / "data"
    path = with_one_delete(lee_data_dir, lee_docs, data)
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": "1", "EMBEDDING_COMPACT_SECONDS": "0.5"}
    failed = ("embedding_compactions_total", "lee", "failed")
    with contextlib.ExitStack() as cause:
        cause.enter_context(immutable(path))
        with real_server.running(data, tmp_path / "serve.log", env=env) as server:

            def failures() -> float:
                return compactions(server.base).get(failed, 0.0)

            real_server.wait_for(lambda: failures() == 4, seconds=SECONDS, what="four failures")
            cause.close()  # the log writable again: the next attempt, after the fourth failure's wait, succeeds
            starts = re.findall(r"^(\S+ \S+) INFO service\.compacting: table 'lee': compacting", server.log(), re.M)
            ends = re.findall(
                r"^(\S+ \S+) ERROR service\.compacting: table 'lee': compaction failed \(.*not permitted.*\); "
                r"it keeps its version and its log, and is tried again in ([\d.]+)s$",
                server.log(),
                re.M,
            )
            assert [float(wait) for _, wait in ends] == [0.5, 1, 2, 4], ends
            for (end, wait), start in zip(ends, starts[1:], strict=False):
                assert seconds_between(end, start) >= float(wait) - 0.01, (end, wait, start)
            compacted = ("embedding_compactions_total", "lee", "compacted")
            real_server.wait_for(lambda: compacted in compactions(server.base), seconds=SECONDS, what="the success")
            assert failures() == 4
            assert artifact.read_manifest(data / "lee")["log_sequence"] == 1
            url = f"{server.base}/v1/tables/lee"
            real_server.wait_for(lambda: real_server.HTTP.get(url).json()["rows"] == 299, what="the compacted version")


def test_a_version_published_by_hand_ends_the_wait_after_a_failed_compaction(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A background compaction failed (its write log immutable), so the server waits before the next: an hour here
    (``EMBEDDING_COMPACT_SECONDS=3600``). Its operator removes the cause and compacts the table by hand
    (``embedding-index compact``, the server running): the server took the new version, but the writes after it
    waited out the rest of that hour. A version published since the failure ends the wait: those writes are
    compacted as soon as they call for it, as a table's that never failed, and the server says why."""
    from tests.service.test_write_durability import immutable

    data = tmp_path / "data"
    path = with_one_delete(lee_data_dir, lee_docs, data)
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": "1", "EMBEDDING_COMPACT_SECONDS": "3600"}
    failed, compacted = (
        ("embedding_compactions_total", "lee", "failed"),
        ("embedding_compactions_total", "lee", "compacted"),
    )
    with contextlib.ExitStack() as cause:
        cause.enter_context(immutable(path))
        with real_server.running(data, tmp_path / "serve.log", env=env) as server:
            real_server.wait_for(lambda: failed in compactions(server.base), seconds=SECONDS, what="a failure")
            assert "and is tried again in 3600s" in server.log()
            cause.close()
            done = run_cli("compact", "lee", "--data-dir", data)  # the operator's, by hand
            assert done.code == 0 and artifact.read_manifest(data / "lee")["log_sequence"] == 1, done
            with writelog.appending(path) as log:  # a write after it, which calls for a compaction at once
                log.append(2, {"op": "delete", "ids": [lee_docs.ids[2]]})
            real_server.wait_for(lambda: compacted in compactions(server.base), seconds=SECONDS, what="its compaction")
            assert compactions(server.base)[failed] == 1
            assert artifact.read_manifest(data / "lee")["log_sequence"] == 2
            assert "table 'lee': a new version was published (" in server.log()
            url = f"{server.base}/v1/tables/lee"

            def compacted_version() -> bool:  # until its reload, the first version with both writes: never a 503
                answer = real_server.HTTP.get(url)
                assert answer.status_code == 200, answer.text
                return bool(answer.json()["rows"] == 298)

            real_server.wait_for(compacted_version, what="the compacted version")


def seconds_between(earlier: str, later: str) -> float:
    """The seconds from one log line's time (``2026-12-07 12:18:49,123``) to another's."""
    stamps = [datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") for stamp in (earlier, later)]
    return (stamps[1] - stamps[0]).total_seconds()


def test_the_wait_after_failures_in_a_row_doubles_up_to_an_hour() -> None:
    """The waits a failure that lasts gets, as the server's line says them: from ``EMBEDDING_COMPACT_SECONDS`` (a
    minute when it is off), doubled up to an hour, or the setting when it is longer; a success starts again."""
    from service import compacting

    def waits(seconds: float, count: int) -> list[float]:
        auto = compacting.AutoCompaction(Path("."), rows=1, seconds=seconds)
        out = []
        for _ in range(count):
            wait = auto.retry_seconds("lee")
            auto.failed["lee"] = compacting.Failed(at=time.monotonic(), wait=wait)
            out.append(wait)
        auto.failed.pop("lee")  # a success
        assert auto.retry_seconds("lee") == out[0]
        return out

    assert waits(0, 9) == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
    assert waits(0.5, 4) == [0.5, 1, 2, 4]
    assert waits(7200, 3) == [7200, 7200, 7200]


def holding(path: Path) -> list[int]:
    """The other processes that have the file at ``path`` open (a compaction in its lock, or waiting for it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):  # a process that ended meanwhile, or not ours to look at
            if any(os.readlink(fd) == str(path) for fd in (entry / "fd").iterdir()):
                pids.append(int(entry.name))
    return pids


def written_once(lee_data_dir: Path, lee_docs: Lee, data: Path) -> list[writelog.Record]:
    """A copy of the Lee table in ``data`` with one write in its log (a deletion): the log's records."""
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    with writelog.appending(writelog.log_path(data, "lee")) as log:
        log.append(1, {"op": "delete", "ids": [lee_docs.ids[1]]})
    return recovered(writelog.log_path(data, "lee"))


def as_it_was(data: Path, records: list[writelog.Record]) -> None:
    """The table ``lee`` in ``data`` as before an ended compaction: its version, its log, no temporary folder, its
    compaction lock free."""
    from index.build.compact import locked

    assert artifact.read_manifest(data / "lee").get("log_sequence") is None
    assert recovered(writelog.log_path(data, "lee")) == records
    assert not [path.name for path in data.iterdir() if path.name.startswith((".tmp-", ".old-"))]
    with locked(data, "lee", wait=0):
        pass


def test_a_background_compaction_leaves_ctrl_c_to_the_server_and_takes_its_sigterm_as_an_interrupt(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """``embedding-index --background compact``, as the server runs it: the terminal's Ctrl-C is ignored (the server
    ends it), and the server's SIGTERM ends it as an interrupt does (exit status 130 and its one line; what an
    interrupt cleans up, tests/index/build/test_cli.py), nothing lost. The default SIGTERM ended it at once, its
    temporary folder, had it been writing one, left to the next start's recovery."""
    from index.build.compact import locked

    data = tmp_path / "data"
    records = written_once(lee_data_dir, lee_docs, data)
    lock = writelog.compaction_lock(data, "lee")
    command = [sys.executable, "-m", "index", "--background", "compact", "lee", "--data-dir", str(data)]
    with locked(data, "lee"):  # the compaction waits for it: still running when it is signalled
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            real_server.wait_for(lambda: child.pid in holding(lock), seconds=SECONDS, what="the compaction's wait")
            ignored = int(re.search(r"SigIgn:\s*(\w+)", Path(f"/proc/{child.pid}/status").read_text())[1], 16)
            assert ignored & (1 << (signal.SIGINT - 1))
            child.terminate()
            output = child.communicate(timeout=60)[0]
        finally:
            if child.poll() is None:
                child.kill()
    interrupted = "\nembedding-index: interrupted; no table was built or replaced\n"
    assert child.returncode == 130 and output.endswith(interrupted), output
    as_it_was(data, records)


def test_ctrl_c_on_the_servers_terminal_ends_the_compaction_as_the_server_says(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """Ctrl-C on the terminal of ``make run`` while the server compacts a table (SIGINT to its process group, the
    compaction's child in it): the server ends the compaction itself and says so. The child relayed its own
    "interrupted" and the server called the compaction failed."""
    from index.build.compact import locked

    data = tmp_path / "data"
    records = written_once(lee_data_dir, lee_docs, data)
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": "1", "EMBEDDING_VERIFY_CHECKSUMS": "false"}
    with locked(data, "lee"):  # the server's compaction waits for it: running when Ctrl-C is typed
        server = real_server.start(data, tmp_path / "serve.log", env=env, terminal=True)
        try:
            lock = writelog.compaction_lock(data, "lee")
            real_server.wait_for(lambda: bool(holding(lock)), seconds=SECONDS, what="the compaction's wait")
        except BaseException:
            server.stop()
            raise
        real_server.ctrl_c(server)
    real_server.group_ended(server, what="the compaction's child to end")
    log = server.log()
    assert "table 'lee': compaction stopped with the server; it keeps its version and its log" in log, log
    assert "interrupted" not in log and "compaction failed" not in log, log
    as_it_was(data, records)
