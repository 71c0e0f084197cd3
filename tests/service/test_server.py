"""The real ``embedding-serve`` process on a free loopback port, queried over HTTP and through the Python client."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from index.table import Table
from service.client import ApiError, Client, Neighbor

STARTUP_SECONDS = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(data_dir: Path, log_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start embedding-serve and wait until /readyz answers 200; return the process and its base URL."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("embedding-serve")), "--data-dir", str(data_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            raise AssertionError(f"embedding-serve exited {process.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return process, base
        except httpx.TransportError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise AssertionError(f"embedding-serve not ready after {STARTUP_SECONDS}s: {log_path.read_text()[-2000:]}")
        time.sleep(0.2)  # poll interval while the process starts, not a timing assumption


def stop(process: subprocess.Popen[bytes], log_path: Path) -> None:
    """SIGTERM, then assert a graceful exit (uvicorn re-raises the signal after shutting down cleanly)."""
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    assert code in (0, -signal.SIGTERM), code
    assert "Application shutdown complete" in log_path.read_text()


@pytest.fixture(scope="module")
def server(small_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("serve") / "server.log"
    process, base = start(small_data_dir, log_path)
    try:
        yield base
    finally:
        stop(process, log_path)


def test_real_server_answers_neighbours_of_heart(server: str, small: Table) -> None:
    response = httpx.get(f"{server}/v1/tables/small/neighbors", params={"token": "heart", "k": 8})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    heart = small.tokens.find("heart")
    assert body["query"]["id"] == heart
    assert [n["id"] for n in body["neighbors"]] == [i for i, _ in small.most_similar([heart], k=8)]
    assert "server" not in response.headers  # no server banner
    metrics = httpx.get(f"{server}/metrics").text
    assert 'embedding_http_requests_total{method="GET",route="/v1/tables/{table}/neighbors"' in metrics


def test_python_client_against_the_real_server(server: str, small: Table) -> None:
    with Client(server) as api:
        assert api.ready()
        [info] = api.tables()
        assert (info.name, info.rows, info.dim, info.index["kind"]) == ("small", 20_000, 50, "flat")
        assert api.table("small")["rows"] == 20_000

        heart = small.tokens.find("heart")
        neighbors = api.neighbors("small", "heart", k=5)
        assert all(isinstance(n, Neighbor) for n in neighbors)
        assert [n.id for n in neighbors] == [i for i, _ in small.most_similar([heart], k=5)]
        queen = api.most_similar("small", positive=["king", "woman"], negative=["man"], k=3)
        assert queen[0].token == "queen"
        batch = api.neighbors_batch("small", ["heart", "no-such-wordzz"], k=5)
        assert [n.id for n in batch[0]] == [n.id for n in neighbors]
        assert isinstance(batch[1], ApiError) and batch[1].code == "unknown_token"

        assert api.similarity("small", "red", "blue") == pytest.approx(
            small.similarity(*map(small.tokens.find, ("red", "blue")))
        )
        values = api.similarities("small", [("red", "blue"), ("red", "no-such-wordzz")])
        assert values[0] == pytest.approx(api.similarity("small", "red", "blue")) and values[1] is None

        for method in ("3cosadd", "3cosmul"):
            assert api.analogy("small", "man", "king", "woman", k=3, method=method)[0].token == "queen"
        answers = api.analogies("small", [("france", "paris", "germany"), ("a", "b", "no-such-wordzz")], k=1)
        assert answers[0][0].token == "berlin" and isinstance(answers[1], ApiError)

        vector = api.vector("small", "heart")
        assert len(vector) == 50
        np.testing.assert_allclose(api.vector("small", "heart", normalized=True), small.vectors[heart], atol=1e-6)
        assert api.search("small", vector, k=1)[0].token == "heart"
        hits = api.search_batch("small", [vector, [1.0, 2.0]], k=1)
        assert hits[0][0].token == "heart" and isinstance(hits[1], ApiError) and hits[1].code == "invalid_request"
        assert api.vector("small", "1/2") and api.vector("small", ".")  # tokens that need escaping in a path

        projection = api.project("small", ["red", "blue", "green", "yellow"])
        assert [p.token for p in projection.points] == ["red", "blue", "green", "yellow"]
        assert len(projection.explained_variance_ratio) == 2

        with pytest.raises(ApiError) as unknown:
            api.neighbors("small", "hearrt")
        assert unknown.value.status == 404 and "heart" in unknown.value.suggestions
        with pytest.raises(ApiError) as missing:
            api.neighbors("nosuch", "heart")
        assert missing.value.status == 404 and missing.value.code == "unknown_table"
        with pytest.raises(ApiError) as invalid:
            api.neighbors("small", "heart", k=0)
        assert invalid.value.status == 422


def test_two_workers_share_the_tables_and_the_metrics(small_data_dir: Path, tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    process, base = start(small_data_dir, log_path, "--workers", "2", "--threads", "1")
    try:
        with Client(base) as api:
            for _ in range(6):
                assert api.neighbors("small", "heart", k=3)
        metrics = httpx.get(f"{base}/metrics").text
        counted = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("embedding_http_requests_total{") and 'route="/v1/tables/{table}/neighbors"' in line
        ]
        assert sum(counted) == 6  # aggregated over both workers
    finally:
        stop(process, log_path)
