"""Nothing acknowledged is lost in a sharded table: a stream of two-document upserts (their ids owned by two
shards, so each write appends to two shards' logs) to a real ``embedding-serve`` serving a 3-shard Lee table
whole, with two workers, cut by kill -9 at random points; after each restart every document of every write
answered 200 is there, no document of a refused write (one bad document refuses both) is, and every shard's log
replays cleanly, holding only the ids its shard owns.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import httpx
import psutil

from index.store import shardmap, writelog
from tests.lee import Lee
from tests.logs import recovered
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.test_write_durability import kill_in_streams

KEY = "sharded-durability-key-0123456789"
HEADERS = {"X-API-Key": KEY}
SHARDS, ROUNDS = 3, 3


def pair(i: int) -> tuple[str, str]:
    """Two ids of the ``i``-th write, owned by two different shards."""
    first = f"stream-{i}-a"
    second = next(
        f"stream-{i}-{j}"
        for j in range(99)
        if shardmap.shard_of_id(f"stream-{i}-{j}", SHARDS) != (shardmap.shard_of_id(first, SHARDS))
    )
    return first, second


def stream(base: str, lee: Lee, start: int, acked: dict[str, int], refused: set[str], stop: threading.Event) -> None:
    client = httpx.Client(timeout=10)
    i = start
    while not stop.is_set():
        bad = i % 5 == 4  # its second document has a field the table lacks: the write is refused whole
        documents: list[dict[str, Any]] = []
        for n, ident in enumerate(pair(i)):
            fields: dict[str, Any] = {"year": i, "colour": "red"} if bad and n else {"year": i}
            documents.append({"id": ident, "vector": lee.vectors[(i + n) % 300].tolist(), "fields": fields})
        try:
            answer = client.post(f"{base}/v1/tables/lee/documents", json={"documents": documents}, headers=HEADERS)
        except httpx.TransportError:
            return  # killed: this write's fate is unknown
        if answer.status_code == 200:
            assert len(answer.json()["shards"]) == 2
            acked.update({d["id"]: i for d in documents})
        elif answer.status_code == 422:
            refused.update(d["id"] for d in documents)
        i += 1


def test_kill_9_in_a_stream_of_sharded_writes_loses_no_acknowledged_write(
    lee_docs: Lee, lee_imports: Path, tmp_path: Path
) -> None:
    assert SHARDS == LEE_SHARDS
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    acked, refused = kill_in_streams(data, tmp_path, lee_docs, stream, random.Random(30), ROUNDS, KEY)
    assert len(acked) > 20 and refused
    logged: set[str] = set()
    for s in range(SHARDS):
        records = recovered(data / writelog.DIRECTORY / "lee" / f"{shardmap.shard_name(s)}.log")
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        ids = {d["id"] for r in records for d in r.body["documents"]}
        assert all(shardmap.shard_of_id(i, SHARDS) == s for i in ids)
        logged |= ids
    assert set(acked) <= logged and not (refused & logged)


def test_a_write_one_shards_log_refuses_writes_nothing_to_the_others(
    lee_docs: Lee, lee_imports: Path, tmp_path: Path
) -> None:
    """A two-shard upsert whose second shard's log cannot grow (the file size limit) answers 503 and leaves the
    first shard's log as it was: the record appended there is cut off again, never seen."""
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    ids = [f"doc-{i}" for i in range(200)]
    first = next(i for i in ids if shardmap.shard_of_id(i, SHARDS) == 0)
    last = [i for i in ids if shardmap.shard_of_id(i, SHARDS) == SHARDS - 1]
    logs = data / writelog.DIRECTORY / "lee"
    url = "/v1/tables/lee/documents"

    def document(ident: str, row: int) -> dict[str, Any]:
        return {"id": ident, "vector": lee_docs.vectors[row].tolist(), "fields": {"year": 2000 + row}}

    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": KEY}) as server:

        def write(*documents: dict[str, Any]) -> httpx.Response:
            return real_server.HTTP.post(f"{server.base}{url}", json={"documents": list(documents)}, headers=HEADERS)

        for row, ident in enumerate(last[:3]):  # the last shard's log grows past what the first shard's will hold
            assert write(document(ident, row)).status_code == 200
        sizes = {s: (logs / f"{shardmap.shard_name(s)}.log") for s in range(SHARDS)}
        before = {s: path.stat().st_size if path.exists() else 0 for s, path in sizes.items()}
        processes = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
        hard = processes[0].rlimit(psutil.RLIMIT_FSIZE)[1]
        for process in processes:  # room for the first shard's record, not for the last shard's
            process.rlimit(psutil.RLIMIT_FSIZE, (before[SHARDS - 1] + 100, hard))
        refused = write(document(first, 10), document(last[3], 11))
        assert refused.status_code == 503, refused.text
        error = refused.json()["error"]
        assert error["code"] == "not_ready" and "File too large" in error["message"], error
        assert "nothing was written" in error["message"]
        after = {s: path.stat().st_size if path.exists() else 0 for s, path in sizes.items()}
        assert after == before
        for ident in (first, last[3]):
            assert real_server.HTTP.get(f"{server.base}{url}/{ident}").status_code == 404
        for process in processes:
            process.rlimit(psutil.RLIMIT_FSIZE, (hard, hard))
        assert write(document(first, 10), document(last[3], 11)).status_code == 200
        assert real_server.HTTP.get(f"{server.base}{url}/{first}").json()["fields"]["year"] == 2010
    logged = [d["id"] for r in recovered(logs / f"{shardmap.shard_name(0)}.log") for d in r.body["documents"]]
    assert logged.count(first) == 1
