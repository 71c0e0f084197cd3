"""The repo's nginx config, run by Debian's nginx on loopback in front of two real ``embedding-serve`` processes.

The config is rendered from deploy/nginx.conf itself: only the upstream ``server api:8000 ...`` line (two loopback
servers with the same parameters), the ``listen`` port and the ``/tmp/`` prefix change. The test checks that
requests are balanced over both replicas and that killing one (SIGKILL) under load fails no client request.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bench.common import free_port
from tests import REPO
from tests.deploy.support import start, stop, tail, wait_ready

NGINX_CONF = REPO / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx", path=f"/usr/sbin{os.pathsep}{os.environ.get('PATH', '')}")
SERVER_LINE = re.compile(r"^(\s*)server\s+api:8000\b([^;]*);", re.MULTILINE)
LISTEN_LINE = re.compile(r"^(\s*)listen\s+8000\s*;", re.MULTILINE)
LOG_UPSTREAM = re.compile(r'"(?P<request>[^"]*)" (?P<status>\d{3}) .* upstream=(?P<upstream>.*?) upstream_status=')

TABLE = "small"
WORDS = ["the", "king", "queen", "paris", "france", "computer", "music", "river", "science", "money", "water", "city"]
CLIENTS = 8
REQUESTS_PER_CLIENT = 50
KILL_AFTER = CLIENTS * REQUESTS_PER_CLIENT // 3  # completed requests before one backend is killed


def render(conf: str, backends: list[int], port: int, prefix: Path) -> str:
    """deploy/nginx.conf for loopback: the same settings, local upstream servers, port and temp paths."""
    match = SERVER_LINE.search(conf)
    assert match, "deploy/nginx.conf has no `server api:8000 ...;` upstream line"
    indent, params = match.group(1), " ".join(p for p in match.group(2).split() if p != "resolve")
    servers = "\n".join(f"{indent}server 127.0.0.1:{b} {params};" for b in backends)
    conf = SERVER_LINE.sub(lambda _: servers.lstrip("\n"), conf, count=1)
    conf, listens = LISTEN_LINE.subn(lambda m: f"{m.group(1)}listen 127.0.0.1:{port};", conf)
    assert listens == 1, "deploy/nginx.conf should have exactly one `listen 8000;`"
    return conf.replace("/tmp/", f"{prefix}/")


def upstreams(access_log: Path) -> list[tuple[str, int, list[str]]]:
    """(request line, status, upstream addresses tried in order) for every request nginx logged."""
    out = []
    for line in access_log.read_text().splitlines():
        m = LOG_UPSTREAM.search(line)
        if m:
            out.append((m["request"], int(m["status"]), [a.strip() for a in m["upstream"].split(",")]))
    return out


@pytest.fixture
def stack(small_data_dir: Path, tmp_path: Path):
    """Two embedding-serve replicas and nginx (from the repo's config) in front; everything stopped after."""
    if NGINX is None:
        pytest.fail("nginx is not installed: install the Debian package nginx (`make system-deps` does it)")
    serve = Path(sys.executable).parent / "embedding-serve"
    env = {**os.environ, "EMBEDDING_DATA_DIR": str(small_data_dir), "OMP_NUM_THREADS": "1"}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        backends = {}
        for name in ("a", "b"):
            port = free_port()
            log = tmp_path / f"backend-{name}.log"
            process = start([str(serve), "--host", "127.0.0.1", "--port", str(port)], env, log)
            processes.append(process)
            backends[f"127.0.0.1:{port}"] = (process, log)
        for address, (process, log) in backends.items():
            wait_ready(f"http://{address}/readyz", process, log)

        port = free_port()
        prefix = tmp_path / "nginx"
        prefix.mkdir()
        conf = prefix / "nginx.conf"
        conf.write_text(render(NGINX_CONF.read_text(), [int(a.split(":")[1]) for a in backends], port, prefix))
        command = [NGINX, "-p", str(prefix), "-c", str(conf), "-e", "stderr"]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr
        nginx_log = tmp_path / "nginx.log"  # nginx's stdout (the access log) and stderr (the error log)
        nginx = start([*command, "-g", "daemon off;"], dict(os.environ), nginx_log)
        processes.append(nginx)
        wait_ready(f"http://127.0.0.1:{port}/readyz", nginx, nginx_log)
        yield f"http://127.0.0.1:{port}", backends, nginx_log
    finally:
        for process in reversed(processes):
            stop(process, signal.SIGQUIT if process.args[0] == NGINX else signal.SIGTERM)


def neighbours_path(word: str) -> str:
    return f"/v1/tables/{TABLE}/neighbors?token={word}&k=5"


def test_balances_and_survives_a_killed_replica(stack, small) -> None:
    base, backends, nginx_log = stack
    expected = {w: [small.tokens[i] for i, _ in small.most_similar([small.resolve(w).id], k=5)] for w in WORDS}

    # Balanced: sequential requests alternate between the two replicas.
    with httpx.Client(base_url=base, timeout=30) as client:
        for i in range(20):
            assert client.get(neighbours_path(WORDS[i % len(WORDS)])).status_code == 200
    # nginx logs a request just after answering it: wait for the 20 lines before counting.
    deadline = time.monotonic() + 10
    while sum("/neighbors" in r for r, _, _ in upstreams(nginx_log)) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    served = Counter(u[-1] for r, _, u in upstreams(nginx_log) if "/neighbors" in r)
    assert set(served) == set(backends), served
    assert min(served.values()) >= 5, served

    # Under load from several clients, one replica is killed: every request still succeeds.
    victim, (victim_process, _) = next(iter(backends.items()))
    done = threading.Semaphore(0)
    failures: list[str] = []

    def client_loop(seed: int) -> int:
        ok = 0
        with httpx.Client(base_url=base, timeout=30) as client:
            for i in range(REQUESTS_PER_CLIENT):
                word = WORDS[(seed * 7 + i) % len(WORDS)]
                try:
                    response = client.get(neighbours_path(word))
                    got = [n["token"] for n in response.json()["neighbors"]] if response.status_code == 200 else None
                    if got != expected[word]:
                        failures.append(f"{word}: {response.status_code} {response.text[:200]}")
                    else:
                        ok += 1
                except (httpx.HTTPError, ValueError) as exc:
                    failures.append(f"{word}: {type(exc).__name__}: {exc}")
                done.release()
        return ok

    logged_before = len(upstreams(nginx_log))
    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(client_loop, seed) for seed in range(CLIENTS)]
        for _ in range(KILL_AFTER):
            done.acquire()
        os.killpg(victim_process.pid, signal.SIGKILL)
        victim_process.wait(10)
        succeeded = sum(f.result() for f in futures)

    assert failures == [], f"{len(failures)} failed requests, e.g. {failures[:5]}\n{tail(nginx_log)}"
    assert succeeded == CLIENTS * REQUESTS_PER_CLIENT
    deadline = time.monotonic() + 10
    while len(upstreams(nginx_log)) < logged_before + CLIENTS * REQUESTS_PER_CLIENT and time.monotonic() < deadline:
        time.sleep(0.05)
    entries = upstreams(nginx_log)[logged_before:]
    assert len(entries) == CLIENTS * REQUESTS_PER_CLIENT and all(status == 200 for _, status, _ in entries)
    final = Counter(u[-1] for _, _, u in entries)
    assert set(final) == set(backends), f"both replicas served part of the load: {final}"
    retried = [u for _, _, u in entries if len(u) > 1]
    assert retried, "some requests reached the killed replica and were retried on the other"
    assert all(u[0] == victim and u[-1] != victim for u in retried), retried


def test_errors_from_nginx_use_the_json_envelope(stack) -> None:
    base, backends, _ = stack
    with httpx.Client(base_url=base, timeout=30) as client:
        response = client.post(f"/v1/tables/{TABLE}/neighbors", content=b"x" * (9 << 20))
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "body_too_large"

        for process, _ in backends.values():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        response = client.get(neighbours_path("king"))
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "not_ready"
