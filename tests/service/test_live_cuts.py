"""The write logs beside the versions compactions publish: a worker that keeps serving an older version while
compactions cut the log (in process: ``writelog``, ``live``, ``compact``), and which logs automatic compaction
counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.store import shardmap, writelog
from service.compacting import AutoCompaction
from tests.lee import Lee
from tests.service.conftest import lee_copy


def _orphan_log(path: Path, lee: Lee) -> None:
    """Writes left in a log no loaded table reads (the table was imported again, sharded otherwise, since)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with writelog.appending(path) as log:
        for i in range(3):
            document = {"id": f"gone/{i}", "text": lee.texts[i], "vector": lee.vectors[i].tolist(), "fields": {}}
            log.append(i + 1, {"op": "upsert", "documents": [document]})


@pytest.mark.parametrize("orphan", ["lee.log", "lee/shard-009.log"])
def test_a_log_the_table_does_not_read_calls_for_no_compaction(
    lee_docs: Lee, lee_imports: Path, tmp_path: Path, orphan: str
) -> None:
    """A sharded table with the log of the unsharded table it replaced, or of a shard it no longer has: automatic
    compaction counts only the logs of the table's own shards, so it neither compacts it again and again (each
    time finding nothing to fold, and reloading every worker) nor stops compacting it."""
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    _orphan_log(data / writelog.DIRECTORY / orphan, lee_docs)
    auto = AutoCompaction(data, rows=2, seconds=0)
    assert auto.due() == []
    _orphan_log(writelog.table_log(data / "lee" / shardmap.shard_name(0)), lee_docs)  # the table's own writes
    assert auto.due() == ["lee"]
