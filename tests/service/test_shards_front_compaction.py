"""A front over shard servers catching up with a compaction, on loopback: ``lee`` imported as 3 shards, each served
by its own server with two workers, and a front over them (``EMBEDDING_SHARDS``).

Documents are written and deleted through the front, then the table is compacted by hand (``embedding-index
compact lee``, as docs/deployment.md says to run it behind a front) while a client keeps writing through the front
(documents far from every query, each read back at once); then another searches and reads by id through the front
while the shard servers still serve the versions before the compaction (not watching: their first searches since
their load), and on while they catch up (SIGHUP, which each passes on to its two workers). Each shard's workers read
on from the file the compaction's cut replaced and keep their version's rows in the whole table, so the clients
never get a 5xx (none is promised for a compaction a worker keeps up with), and every answer, before and after the
catch-up, is the float64 brute force over the documents written: a vector search's hits and scores, the written
documents found by id and the deleted ones missing; every write answered is there. Writes after the catch-up are
searched as written.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from index.store import artifact, shardmap
from tests.cli import run_cli
from tests.lee import Lee, jsonl_records
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.real_server import Server
from tests.service.test_live_search import as_write

KEY = "front-compaction-key-0123456789"
HEADERS = {"x-api-key": KEY}
NAMES = [shardmap.shard_name(s) for s in range(LEE_SHARDS)]
K = 10
QUERIES = (3, 48, 120, 250)  # the rows whose vectors (mixed with a written document's) are searched


class Oracle:
    """The documents written so far, id -> float64 unit vector: the brute force a front's answer must equal."""

    def __init__(self, lee: Lee) -> None:
        self.vectors = {ident: unit(vector) for ident, vector in zip(lee.ids, lee.vectors, strict=True)}

    def upsert(self, documents: list[dict[str, Any]]) -> None:
        self.vectors |= {document["id"]: unit(np.array(document["vector"])) for document in documents}

    def delete(self, ids: list[str]) -> None:
        for ident in ids:
            del self.vectors[ident]

    def wrong(self, query: np.ndarray, hits: list[dict[str, Any]]) -> str | None:
        """What is wrong with ``hits`` (the front's answer for ``query``, k=K), or None: the brute force's ids in its
        order, bar swaps of equal scores, and its scores to float32's precision."""
        ids = list(self.vectors)
        scores = np.array([self.vectors[ident] for ident in ids]) @ unit(query)
        order = np.argsort(-scores, kind="stable")[:K]
        found = {ident: i for i, ident in enumerate(ids)}
        if len(hits) != K or any(hit["id"] not in found for hit in hits):
            return f"hits {[hit['id'] for hit in hits]}, expected {[ids[i] for i in order]}"
        got = np.array([scores[found[hit["id"]]] for hit in hits])
        if not np.allclose(got, scores[order], atol=1e-5):
            return f"hits {[hit['id'] for hit in hits]} score {got.tolist()}, expected {scores[order].tolist()}"
        if not np.allclose([hit["score"] for hit in hits], scores[order], atol=1e-5):
            return f"scores {[hit['score'] for hit in hits]}, expected {scores[order].tolist()}"
        return None


def unit(vector: np.ndarray) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float64)
    return vector / np.linalg.norm(vector)


def writes(lee: Lee, first: int, count: int) -> list[dict[str, Any]]:
    """``count`` new documents, ``w/<i>``: the text of a corpus document and the sum of two documents' vectors."""
    records = jsonl_records(lee)
    out = []
    for i in range(first, first + count):
        vector = np.asarray(lee.vectors[i % 300], dtype=np.float64) + lee.vectors[(7 * i + 11) % 300]
        out.append(as_write({**records[i % 300], "id": f"w/{i}", "vector": vector.tolist()}))
    return out


def post(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post(url, json=body, headers=HEADERS, timeout=60)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def searched(client: httpx.Client, url: str, oracle: Oracle, lee: Lee, read: list[str], gone: list[str]) -> list[str]:
    """One round of the client's requests through the front: what was wrong with each answer (nothing: [])."""
    problems = []
    for row in QUERIES:
        query = np.asarray(lee.vectors[row], dtype=np.float64) + 0.5 * np.asarray(lee.vectors[(row + 1) % 300])
        answer = client.post(f"{url}/search", json={"vector": query.tolist(), "k": K}, timeout=60)
        if answer.status_code != 200:
            problems.append(f"search {row}: {answer.status_code} {answer.text}")
        elif (wrong := oracle.wrong(query, answer.json()["hits"])) is not None:
            problems.append(f"search {row}: {wrong}")
    answer = client.post(f"{url}/documents/get", json={"ids": read + gone}, timeout=60)
    if answer.status_code != 200:
        problems.append(f"documents/get: {answer.status_code} {answer.text}")
    else:
        body = answer.json()
        if [document["id"] for document in body["documents"]] != read or body["missing"] != gone:
            problems.append(f"documents/get: {[d['id'] for d in body['documents']]}, missing {body['missing']}")
    return problems


def caught_up(shards: list[Server], data: Path) -> bool:
    """Every worker of every shard server serves the compacted version (the shard's ``built_at`` on disk; a request
    on a new connection reaches either worker: ten such per shard)."""
    for name, server in zip(NAMES, shards, strict=True):
        built = artifact.read_manifest(data / "lee" / name)["built_at"]
        for _ in range(10):
            answer = real_server.HTTP.get(f"{server.base}/v1/tables/{name}", timeout=60)
            assert answer.status_code == 200, answer.text
            if answer.json()["built_at"] != built:
                return False
    return True


def test_a_front_answers_right_while_its_shards_catch_up_with_a_compaction(
    tmp_path: Path, lee_imports: Path, lee_docs: Lee
) -> None:
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "data")
    (tmp_path / "front").mkdir()
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_WATCH_SECONDS": "0"}  # reloaded by SIGHUP, once read
    shards = real_server.start_together(
        *[
            lambda name=name: real_server.start(  # type: ignore[misc]
                data / "lee", tmp_path / f"{name}.log", "--tables", name, "--workers", "2", env=env
            )
            for name in NAMES
        ]
    )
    started = list(shards)
    try:
        front_env = {"EMBEDDING_SHARDS": json.dumps({"lee": real_server.replicas(shards)})}
        front = real_server.start(tmp_path / "front", tmp_path / "front.log", env=front_env)
        started.append(front)
        url = f"{front.base}/v1/tables/lee"
        oracle = Oracle(lee_docs)
        client = httpx.Client()
        written = writes(lee_docs, 0, 60)
        for start in range(0, len(written), 20):
            assert post(client, f"{url}/documents", {"documents": written[start : start + 20]})["upserted"] == 20
        oracle.upsert(written)
        gone = [*lee_docs.ids[100:130:3], "w/5", "w/17"]
        assert post(client, f"{url}/documents/delete", {"ids": gone})["deleted"] == len(gone)
        oracle.delete(gone)
        assert {shardmap.shard_of_id(d["id"], LEE_SHARDS) for d in written} == set(range(LEE_SHARDS))
        read = [document["id"] for document in written if document["id"] not in gone][:12]
        # No search before the compaction: each shard's workers first look up their rows in the whole table after it

        problems: list[str] = []
        rounds = 0
        during: list[str] = []  # written while the shards catch up, each read back through the front at once
        stop = threading.Event()

        def keep_reading() -> None:
            nonlocal rounds
            with httpx.Client() as reader:
                while not stop.is_set():
                    problems.extend(searched(reader, url, oracle, lee_docs, read, gone))
                    rounds += 1

        def keep_writing() -> None:
            away = -np.mean(lee_docs.vectors, axis=0)  # a cosine near -1 with every query: in no search's hits
            with httpx.Client() as writer:
                while not stop.is_set():
                    ident = f"during/{len(during)}"
                    document = {"id": ident, "text": "written during", "vector": away.tolist(), "fields": {}}
                    answer = writer.post(f"{url}/documents", json={"documents": [document]}, headers=HEADERS)
                    if answer.status_code != 200:
                        problems.append(f"write {ident}: {answer.status_code} {answer.text}")
                        continue
                    found = writer.get(f"{url}/documents/{ident}")
                    if found.status_code != 200:
                        problems.append(f"read {ident}: {found.status_code} {found.text}")
                    during.append(ident)

        clients = [threading.Thread(target=keep_writing), threading.Thread(target=keep_reading)]
        try:
            clients[0].start()
            done = run_cli("compact", "lee", "--data-dir", data)
            assert done.code == 0, done.err
            clients[1].start()
            real_server.wait_for(lambda: rounds >= 4, 180, "four rounds of reads from the versions before it")
            for server in shards:
                server.process.send_signal(signal.SIGHUP)  # the supervisor passes it on to both workers
            real_server.wait_for(lambda: caught_up(shards, data), 180, "every shard's workers on the compacted version")
            at_catch_up = rounds
            real_server.wait_for(lambda: rounds >= at_catch_up + 2, 180, "two rounds of reads after the catch-up")
        finally:
            stop.set()
            for thread in clients:
                if thread.is_alive():
                    thread.join(120)
        assert problems == [], problems[:5]
        assert len(during) > 10, len(during)
        with httpx.Client() as fresh:
            answer = fresh.post(f"{url}/documents/get", json={"ids": during})
            assert answer.status_code == 200 and answer.json()["missing"] == [], answer.text
        for name, server in zip(NAMES, shards, strict=True):  # each shard's version holds the writes before it
            summary = real_server.HTTP.get(f"{server.base}/v1/tables/{name}", timeout=60).json()
            assert summary["writes"]["version_sequence"] > 0

        later = writes(lee_docs, 60, 30)
        assert post(client, f"{url}/documents", {"documents": later})["upserted"] == len(later)
        oracle.upsert(later)
        for _ in range(4):  # new connections: either worker of each shard
            with httpx.Client() as fresh:
                assert searched(fresh, url, oracle, lee_docs, [*read, later[0]["id"]], gone) == []
    finally:
        real_server.stop_together(started)
