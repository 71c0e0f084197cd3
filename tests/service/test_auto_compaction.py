"""Automatic compaction on a real server with two workers: once the documents written since the version reach
``EMBEDDING_COMPACT_ROWS``, the server compacts the table in a child process and every worker reloads it; the
written documents are then in the version (and found by keyword), none is lost, and the log is cut. A sharded
table's writes are counted over its shards' logs, and every shard is compacted at once."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from index.store import artifact, shardmap, writelog
from tests.lee import Lee
from tests.logs import recovered
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.test_live_search import HEADERS, KEY

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
