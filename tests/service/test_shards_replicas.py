"""A front over two replicas of a shard, one of them stopped (SIGSTOP: a hung process, which keeps its
connections open and answers nothing), on loopback: real shard servers and a real front.

The front tries the shard's replicas in turn; the stopped one costs the request that meets it its deadline
(``EMBEDDING_SHARD_TIMEOUT``) and a retry on the other, and is then tried after the other for ``FAIL_SECONDS``,
so the requests that follow are answered at once, not every other one after the deadline. The front's log says
so in one warning, its metrics count the failure. Once it answers again it takes its turn again.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from index.store import shardmap
from service.scatter import FAIL_SECONDS
from tests.lee import Lee
from tests.service import real_server
from tests.service.conftest import LEE_SHARDS, lee_copy
from tests.service.real_server import HTTP, Server
from tests.service.scraped import shard_failures

NAMES = [shardmap.shard_name(s) for s in range(LEE_SHARDS)]
TIMEOUT = 2.0  # EMBEDDING_SHARD_TIMEOUT


def searched(front: Server, lee: Lee, times: int) -> list[tuple[float, float]]:
    """Each search's start (``time.monotonic()``) and seconds."""
    timed = []
    for i in range(times):
        began = time.monotonic()
        body = {"vector": lee.vectors[i].tolist(), "k": 5}
        answer = HTTP.post(f"{front.base}/v1/tables/lee/search", json=body, timeout=30)
        timed.append((began, time.monotonic() - began))
        assert answer.status_code == 200 and answer.json()["hits"][0]["id"] == lee.ids[i], answer.text
    return timed


def searches_served(server: Server) -> int:
    return server.log().count(f'"POST /v1/tables/{NAMES[0]}/search HTTP/1.1" 200')


def test_a_stopped_replica_costs_one_deadline_not_every_other_request(
    tmp_path: Path, lee_imports: Path, lee_docs: Lee
) -> None:
    data = lee_copy(lee_imports, "plain", "sharded", tmp_path / "sharded") / "lee"
    (tmp_path / "front").mkdir()
    started = real_server.start_together(
        lambda: real_server.start(data, tmp_path / "all.log", "--tables", ",".join(NAMES)),
        lambda: real_server.start(data, tmp_path / "stopped.log", "--tables", NAMES[0]),
    )
    try:
        every, stopped = started
        replicas = [[f"{server.base}/v1/tables/{NAMES[0]}" for server in (stopped, every)]]
        replicas += [[f"{every.base}/v1/tables/{name}"] for name in NAMES[1:]]
        env = {"EMBEDDING_SHARDS": json.dumps({"lee": replicas}), "EMBEDDING_SHARD_TIMEOUT": str(TIMEOUT)}
        front = real_server.start(tmp_path / "front", tmp_path / "front.log", env=env)
        started.append(front)
        searched(front, lee_docs, 4)
        assert searches_served(stopped) >= 1  # in its turn
        stopped.process.send_signal(signal.SIGSTOP)
        timed = searched(front, lee_docs, 8)
        slow = [i for i, (_, seconds) in enumerate(timed) if seconds >= TIMEOUT]  # waited out the deadline
        assert slow and slow[0] <= 1, timed  # the stopped replica met in its turn, one of the first two searches
        # It failed no earlier than its deadline: the searches begun within FAIL_SECONDS of that (less a second for
        # the front's own delays) are answered by the other replica at once, whatever a busy machine makes of the
        # rest (a later one may meet it in its turn)
        tried_last_until = timed[slow[0]][0] + TIMEOUT + FAIL_SECONDS - 1
        after = [seconds for began, seconds in timed[slow[0] + 1 :] if began < tried_last_until]
        assert after and all(seconds < TIMEOUT for seconds in after), timed
        assert all(seconds < 2 * TIMEOUT for _, seconds in timed), timed  # one deadline each, then the other replica
        # Every search was answered: the operator learns of the replica from the front's log and metrics
        failing = f"{replicas[0][0]}: no answer within {TIMEOUT:g} s; tried after its other replicas for 5 s"
        warnings = [line for line in front.log().splitlines() if "WARNING service.scatter" in line]
        assert len(warnings) == len(slow), warnings
        for line in warnings:
            assert line.endswith(f"WARNING service.scatter: table 'lee', shard 0: {failing}"), line
        assert shard_failures(front.base) == {("lee", "0"): float(len(slow))}
        stopped.process.send_signal(signal.SIGCONT)
        time.sleep(FAIL_SECONDS)  # its last failure's while is over; what it answers late once running is logged
        served = searches_served(stopped)
        searched(front, lee_docs, 4)
        assert searches_served(stopped) > served  # answering again: in its turn again
        assert shard_failures(front.base) == {("lee", "0"): float(len(slow))}
        assert front.log().count("WARNING service.scatter") == len(slow)
    finally:
        real_server.stop_together(started)
