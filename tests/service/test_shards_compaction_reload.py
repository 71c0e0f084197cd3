"""A front over shard replicas of two versions of ``lee``, on loopback: one replica of shard 0 reloaded with a
compaction while the other, and the servers of shards 1 and 2, still serve the version before it.

Replicas reload a compaction each in its own time (watching the data directory, SIGHUP, a rollout), and the
compaction keeps the import's identity, so the front takes them all. Their keyword scores were made with two
whole tables' BM25 statistics (the compaction scores the written documents into every shard's), yet through the
front every keyword and hybrid search answers as one process serving the compacted table: each shard reads its
stored scores back with the statistics its own version was scored with (``index.engine.dfs``), and the front
sends the sums when the shards' versions disagree, though none of them was written to since its version.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from index.store import shardmap
from tests.cli import run_cli
from tests.lee import Lee, jsonl_records
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.real_server import HTTP, Server
from tests.service.test_live_search import as_write
from tests.service.test_shards_front import TEXTS

KEY = "compaction-reload-key-0123456789"
HEADERS = {"x-api-key": KEY}
NAMES = [shardmap.shard_name(s) for s in range(LEE_SHARDS)]


def bodies(lee: Lee) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for text in (*TEXTS, "fire"):
        out += [
            {"text": text, "mode": "keyword", "k": 10},
            {"vector": lee.vectors[7].tolist(), "text": text, "mode": "hybrid", "k": 10},
        ]
    return out


def hits(server: Server, body: dict[str, Any]) -> list[tuple[str, float]]:
    answer = HTTP.post(f"{server.base}/v1/tables/lee/search", json=body, headers=HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text
    # Equal scores may come in another order (the front's merge by row, the one process's by shard)
    return sorted(((h["id"], round(h["score"], 5)) for h in answer.json()["hits"]), key=lambda h: (-h[1], h[0]))


def reloaded(server: Server, table: str) -> None:
    """SIGHUP, then wait for ``table`` served as compacted. Not for the next "reload: " line: the data directory's
    watcher may have begun a reload while the compaction wrote, and that one logs before SIGHUP's loads anything."""
    server.process.send_signal(signal.SIGHUP)

    def compacted() -> bool:
        return bool(HTTP.get(f"{server.base}/v1/tables/{table}").json()["writes"]["written"] == 0)

    real_server.wait_for(compacted, what=f"{table} reloaded as compacted")


def test_replicas_of_two_versions_answer_as_the_compacted_table(
    tmp_path: Path, lee_imports: Path, lee_docs: Lee
) -> None:
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "sharded")
    (tmp_path / "front").mkdir()
    env = {"EMBEDDING_WRITE_KEYS": KEY}
    started = real_server.start_together(
        lambda: real_server.start(data / "lee", tmp_path / "new.log", "--tables", NAMES[0], env=env),
        lambda: real_server.start(data / "lee", tmp_path / "old.log", "--tables", ",".join(NAMES), env=env),
        lambda: real_server.start(data, tmp_path / "one.log", env=env),
    )
    try:
        new, old, one = started
        # shard 0: the replica to be reloaded (its writer) and one that is not; shards 1 and 2: not reloaded
        replicas = [[f"{server.base}/v1/tables/{NAMES[0]}" for server in (new, old)]]
        replicas += [[f"{old.base}/v1/tables/{name}"] for name in NAMES[1:]]
        front_env = {"EMBEDDING_SHARDS": json.dumps({"lee": replicas})}
        front = real_server.start(tmp_path / "front", tmp_path / "front.log", env=front_env)
        started.append(front)
        # Documents of shard 0 alone, their text the corpus's: every word's statistics change with the compaction
        records = jsonl_records(lee_docs)
        written = [
            as_write({**record, "id": f"{record['id']}-again"})
            for record in records
            if shardmap.shard_of_id(f"{record['id']}-again", LEE_SHARDS) == 0
        ][:60]
        answer = HTTP.post(f"{front.base}/v1/tables/lee/documents", json={"documents": written}, headers=HEADERS)
        assert answer.status_code == 200 and answer.json()["upserted"] == len(written), answer.text
        compacted = run_cli("compact", "lee", "--data-dir", data)
        assert compacted.code == 0, compacted.err
        reloaded(new, NAMES[0])
        reloaded(one, "lee")
        assert HTTP.get(f"{old.base}/v1/tables/{NAMES[0]}").json()["writes"]["written"] == len(written)
        found = 0
        for body in bodies(lee_docs):
            expected = hits(one, body)
            found += sum(ident.endswith("-again") for ident, _ in expected)
            for _ in range(4):  # shard 0's two replicas in turn, for the statistics and the search
                assert hits(front, body) == expected, body
        assert found > 0  # the compaction's documents are among the hits
    finally:
        real_server.stop_together(started)
