"""Writers and readers at once on a real server with two workers, until the readers have checked ``CHECKS`` answers
and ``DELETES`` deletes are acknowledged (at most ``SECONDS``): two clients add and delete documents while two
others search, with bounded load. No request fails; every hit's score is the cosine of the document as written; a
document acknowledged before a search began is in its answer whenever it scores above the answer's last hit, and
one whose delete was acknowledged before the search began never is."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from tests.lee import Lee
from tests.service import real_server
from tests.service.test_live_search import HEADERS, KEY

# The end is a count, not a duration (the checks made are what the test proves; a fixed duration burned both cores
# for as long on any machine): ten times the floors asserted below; at most SECONDS on a machine too busy to reach it.
CHECKS, DELETES = 500, 100
SECONDS = 15
K = 10


def test_concurrent_writers_and_readers(lee_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    rng = np.random.default_rng(15)
    unit = lee_docs.unit()
    lock = threading.Lock()
    live: dict[str, np.ndarray] = {ident: unit[i] for i, ident in enumerate(lee_docs.ids)}  # acknowledged, unit
    gone: set[str] = set()
    deleting: set[str] = set()  # deletes sent: their documents may be gone before the answer says so
    failures: list[str] = []
    checked = [0]
    stop = threading.Event()
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_COMPACT_ROWS": "0"}
    with real_server.running(data, tmp_path / "serve.log", "--workers", "2", env=env) as server:
        url = f"{server.base}/v1/tables/lee"

        def writer(w: int) -> None:
            client = httpx.Client(timeout=30)
            local = np.random.default_rng(w)
            i = 0
            while not stop.is_set():
                if i % 3 == 2:  # a delete of a document acknowledged earlier
                    with lock:
                        ident = sorted(live)[int(local.integers(len(live)))]
                        deleting.add(ident)  # from now on a search may or may not see it
                    answer = client.post(f"{url}/documents/delete", json={"ids": [ident]}, headers=HEADERS)
                    if answer.status_code != 200:
                        failures.append(answer.text)
                        return
                    with lock:
                        live.pop(ident, None)
                        gone.add(ident)
                else:
                    vector = (unit[int(local.integers(300))] + local.normal(0, 0.1, unit.shape[1])).astype(np.float32)
                    ident = f"w{w}/{i}"
                    body = {"documents": [{"id": ident, "vector": vector.tolist(), "text": "written"}]}
                    answer = client.post(f"{url}/documents", json=body, headers=HEADERS)
                    if answer.status_code != 200:
                        failures.append(answer.text)
                        return
                    with lock:
                        live[ident] = vector.astype(np.float64) / np.linalg.norm(vector.astype(np.float64))
                        gone.discard(ident)
                i += 1
                time.sleep(0.01)

        def reader(r: int) -> None:
            client = httpx.Client(timeout=30)
            local = np.random.default_rng(100 + r)
            while not stop.is_set():
                query = unit[int(local.integers(300))] + local.normal(0, 0.2, unit.shape[1])
                with lock:
                    before = dict(live)
                    deleted = set(gone)
                answer = client.post(f"{url}/search", json={"vector": query.tolist(), "k": K})
                if answer.status_code != 200:
                    failures.append(answer.text)
                    return
                hits = answer.json()["hits"]
                with lock:
                    unsure = set(deleting)
                q = query / np.linalg.norm(query)
                ids = {h["id"] for h in hits}
                last = hits[-1]["score"]
                for hit in hits:
                    if hit["id"] in deleted and hit["id"] not in before:
                        failures.append(f"deleted {hit['id']} answered")
                    if hit["id"] in before and abs(float(before[hit["id"]] @ q) - hit["score"]) > 1e-5:
                        failures.append(f"{hit['id']}: score {hit['score']}, cosine {before[hit['id']] @ q}")
                for ident, vector in before.items():
                    if float(vector @ q) > last + 1e-5 and ident not in ids and ident not in unsure:
                        failures.append(f"{ident} acknowledged before the search, scores above its last hit, missing")
                checked[0] += 1

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
        threads += [threading.Thread(target=reader, args=(r,)) for r in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline and not failures and (checked[0] < CHECKS or len(gone) < DELETES):
            time.sleep(0.05)
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not failures, failures[:5]
    assert checked[0] > 50 and len(gone) > 10
    del rng
