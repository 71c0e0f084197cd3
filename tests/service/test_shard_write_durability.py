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

from index.store import shardmap, writelog
from tests.lee import Lee
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
        records = writelog.recover(data / writelog.DIRECTORY / "lee" / f"{shardmap.shard_name(s)}.log")
        assert [r.seq for r in records] == list(range(1, len(records) + 1))
        ids = {d["id"] for r in records for d in r.body["documents"]}
        assert all(shardmap.shard_of_id(i, SHARDS) == s for i in ids)
        logged |= ids
    assert set(acked) <= logged and not (refused & logged)
