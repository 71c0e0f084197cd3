"""A front over shards of more than one import of ``lee``, on loopback: real shard servers and a real front.

Each sharded import has an identity (``shards.import`` in its map, kept by its compactions) that every shard's
summary carries (``shard_of``): a replica serving shard 2 of another import of the same name and number of shards
is refused as one listed out of place is (503 naming it, logged once), rather than merged with the other shards.
The front reads a table's kind, type of ids and string fields again every ``PLACE_SECONDS``: shards imported again
under integer ids are routed by the new ids without restarting the front.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from index.store import shardmap
from service.scatter import PLACE_SECONDS, Front
from service.shard_settings import ShardSettings
from tests.cli import run_cli
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.real_server import HTTP

SHARDS = LEE_SHARDS


def shard_urls(server: real_server.Server, shards: range) -> list[list[str]]:
    return [[f"{server.base}/v1/tables/{shardmap.shard_name(s)}"] for s in shards]


def identity(table: Path) -> str:
    return str(shardmap.read(table).manifest["shards"][shardmap.IMPORT])


def owned_by(shard: int, prefix: str = "lee-") -> str:
    return next(f"{prefix}{i:03d}" for i in range(300) if shardmap.shard_of_id(f"{prefix}{i:03d}", SHARDS) == shard)


def test_a_shard_of_another_import_is_refused_not_merged(tmp_path: Path, lee_imports: Path) -> None:
    """Shards 0 and 1 of one import of ``lee`` into three shards and shard 2 of another (the same documents and
    copies of some): each passes the check of its place (shard i of 3 of ``lee``), but the front refuses shard 2's
    replica for its import, on every route that needs it; shards 0 and 1 answer their own documents."""
    plain = lee_copy(lee_imports, "plain", "sharded", tmp_path / "plain") / "lee"
    other = lee_copy(lee_imports, "copies", "sharded", tmp_path / "copies") / "lee"
    mine, theirs = identity(plain), identity(other)
    assert mine != theirs
    (tmp_path / "front").mkdir()
    names = [shardmap.shard_name(s) for s in range(SHARDS)]
    started = real_server.start_together(
        lambda: real_server.start(plain, tmp_path / "plain.log", "--tables", ",".join(names[:2])),
        lambda: real_server.start(other, tmp_path / "other.log", "--tables", names[2]),
    )
    try:
        summary = HTTP.get(f"{started[1].base}/v1/tables/{names[2]}").json()
        assert summary["shard_of"] == {"table": "lee", "shard": 2, "shards": SHARDS, "import": theirs}, summary
        replicas = shard_urls(started[0], range(2)) + shard_urls(started[1], range(2, 3))
        env = {"EMBEDDING_SHARDS": json.dumps({"lee": replicas})}
        started.append(real_server.start(tmp_path / "front", tmp_path / "front.log", env=env))
        base = f"{started[-1].base}/v1/tables/lee"
        assert HTTP.get(f"{base}/documents/{owned_by(0)}").status_code == 200  # shard 0's import, checked first
        assert HTTP.get(f"{base}/documents/{owned_by(1)}").status_code == 200
        for answer in (
            HTTP.post(f"{base}/search", json={"vector": [0.5] * 50, "k": 3}),
            HTTP.post(f"{base}/search", json={"text": "bushfires in Sydney", "mode": "keyword", "k": 3}),
            HTTP.get(f"{base}/documents/{owned_by(2)}"),
            HTTP.get(base),
        ):
            error = answer.json()["error"]
            assert answer.status_code == 503 and error["code"] == "shard_unavailable", (answer.request.url, error)
            assert error["shard"] == 2 and (
                f"{replicas[2][0]}: its server serves shard 2 of table 'lee' of import {theirs}, not of import "
                f"{mine} as the table's other replicas do" in error["message"]
            ), error
    finally:
        real_server.stop_together(started)
    said = [line for line in started[-1].log().splitlines() if f"of import {theirs}" in line]
    assert len(said) == 1 and "ERROR service.scatter: table 'lee', shard 2: " in said[0], said


def test_shards_imported_again_under_integer_ids_are_routed_by_them(tmp_path: Path, lee_docs: Lee) -> None:
    """``lee`` imported as shards under string ids, served through a front; then imported again over it under
    integer ids, and its shards' server reloaded: within ``PLACE_SECONDS`` the front routes an id as the new table
    reads it (``"007"`` is 7, on 7's shard) and leaves a query's own document out of its hits, as it does for a
    table it has served from the start."""
    records = jsonl_records(lee_docs)
    strings = write_jsonl(tmp_path / "strings.jsonl", records)
    numbers = write_jsonl(tmp_path / "numbers.jsonl", [{**r, "id": i} for i, r in enumerate(records)])
    data = tmp_path / "data"
    done = run_cli("import", strings, "--name", "lee", "--shards", SHARDS, "--data-dir", data)
    assert done.code == 0, done.err
    (tmp_path / "front").mkdir()
    names = ",".join(shardmap.shard_name(s) for s in range(SHARDS))
    started = [real_server.start(data / "lee", tmp_path / "shards.log", "--tables", names)]
    try:
        env = {"EMBEDDING_SHARDS": json.dumps({"lee": shard_urls(started[0], range(SHARDS))})}
        started.append(real_server.start(tmp_path / "front", tmp_path / "front.log", env=env))
        base = f"{started[-1].base}/v1/tables/lee"
        assert HTTP.get(f"{base}/documents/lee-007").status_code == 200

        done = run_cli("import", numbers, "--name", "lee", "--shards", SHARDS, "--data-dir", data, "--force")
        assert done.code == 0, done.err
        shard = f"{started[0].base}/v1/tables/{shardmap.shard_name(0)}"
        started[0].process.send_signal(signal.SIGHUP)
        real_server.wait_for(
            lambda: HTTP.get(shard).json()["documents"]["id_type"] == "integer", what="the shards reloaded"
        )
        time.sleep(PLACE_SECONDS)
        number = next(
            n for n in range(1, 300) if shardmap.shard_of_id(f"0{n}", SHARDS) != shardmap.shard_of_id(n, SHARDS)
        )
        found = HTTP.get(f"{base}/documents/0{number}")  # routed by the text "0<n>": another shard, a 404
        assert found.status_code == 200 and found.json()["id"] == number, found.text
        hits = HTTP.post(f"{base}/search", json={"id": number, "k": 5}).json()["hits"]
        assert len(hits) == 5 and number not in [hit["id"] for hit in hits], hits  # the query's own left out
    finally:
        real_server.stop_together(started)


def test_an_import_made_before_imports_had_an_identity_is_named_so() -> None:
    """A shard imported before imports had an identity says ``"import": null``: a front's refusal of it, or of a
    shard of a later import beside it, names it in words, not as Python's None; shards that all have none pass."""
    urls = [["http://a/v1/tables/shard-000"], ["http://b/v1/tables/shard-001"]]
    older = "an import made before imports had an identity"
    for checked, asked, said in (
        (None, "9f0c", f"import 9f0c, not of {older}"),
        ("9f0c", None, f"{older}, not of import 9f0c"),
    ):
        front = Front(ShardSettings(shards={"lee": urls}))
        front.placed[("lee", 0, urls[0][0])] = (
            time.monotonic(),
            {"table": "lee", "shard": 0, "shards": 2, "import": checked},
        )
        problem = front.out_of_place("lee", 1, {"table": "lee", "shard": 1, "shards": 2, "import": asked})
        assert problem == f"its server serves shard 1 of table 'lee' of {said} as the table's other replicas do"
    front.placed[("lee", 0, urls[0][0])] = (time.monotonic(), {"table": "lee", "shard": 0, "shards": 2, "import": None})
    assert front.out_of_place("lee", 1, {"table": "lee", "shard": 1, "shards": 2, "import": None}) is None
