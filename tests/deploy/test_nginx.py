"""The repo's nginx config, run by Debian's nginx on loopback in front of two real ``embedding-serve`` processes.

The config is rendered from deploy/nginx.conf itself: only the upstream ``server api:8000 ...`` line (two loopback
servers with the same parameters), the ``listen`` port and the ``/tmp/`` prefix change (and, for the replica that
never answers, two timeouts shortened). The tests check that requests are balanced over both replicas and that
killing one (SIGKILL) under load fails no client request; that a replica that never answers gets nginx's 504
``timeout``, not the 503 of no replica at all; that the API's own 503s (a table refused at load) take no replica
out of service; that nginx passes the request heads the server takes, names each request (X-Request-ID) and
answers its own errors in the API's JSON envelope (OpenAI's shape on the OpenAI paths); and that /metrics is not
published.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from bench.common import free_port
from index.store import artifact
from service.settings import Settings
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


Stack = tuple[str, dict[str, tuple[subprocess.Popen[bytes], Path]], Path]  # nginx's URL, replicas, nginx's log


@contextmanager
def running_stack(
    data_dir: Path,
    tmp_path: Path,
    ready_path: str = "/readyz",
    replicas: int = 2,
    more_backends: tuple[int, ...] = (),
    changes: tuple[tuple[str, str], ...] = (),
) -> Iterator[Stack]:
    """``replicas`` embedding-serve replicas of ``data_dir`` (and the ports ``more_backends`` beside them) with
    nginx (from the repo's config, each of ``changes`` replaced in it) in front, each ready when ``ready_path``
    answers 200; everything stopped after."""
    if NGINX is None:
        pytest.fail("nginx is not installed: install the Debian package nginx (`make system-deps` does it)")
    serve = Path(sys.executable).parent / "embedding-serve"
    env = {**os.environ, "EMBEDDING_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1"}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        backends = {}
        for name in "abcdefgh"[:replicas]:
            port = free_port()
            log = tmp_path / f"backend-{name}.log"
            process = start([str(serve), "--host", "127.0.0.1", "--port", str(port)], env, log)
            processes.append(process)
            backends[f"127.0.0.1:{port}"] = (process, log)
        for address, (process, log) in backends.items():
            wait_ready(f"http://{address}{ready_path}", process, log)

        port = free_port()
        prefix = tmp_path / "nginx"
        prefix.mkdir()
        conf = prefix / "nginx.conf"
        text = render(
            NGINX_CONF.read_text(), [int(a.split(":")[1]) for a in backends] + list(more_backends), port, prefix
        )
        for before, after in changes:
            assert before in text, f"deploy/nginx.conf has no {before!r}"
            text = text.replace(before, after)
        conf.write_text(text)
        command = [NGINX, "-p", str(prefix), "-c", str(conf), "-e", "stderr"]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr
        nginx_log = tmp_path / "nginx.log"  # nginx's stdout (the access log) and stderr (the error log)
        nginx = start([*command, "-g", "daemon off;"], dict(os.environ), nginx_log)
        processes.append(nginx)
        wait_ready(f"http://127.0.0.1:{port}{ready_path}", nginx, nginx_log)
        yield f"http://127.0.0.1:{port}", backends, nginx_log
    finally:
        for process in reversed(processes):
            stop(process, signal.SIGQUIT if process.args[0] == NGINX else signal.SIGTERM)


@pytest.fixture
def stack(small_data_dir: Path, tmp_path: Path) -> Iterator[Stack]:
    with running_stack(small_data_dir, tmp_path) as running:
        yield running


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


def raw_request(base: str, request: bytes) -> tuple[int, str, bytes]:
    """(status, content type, body) of a request sent as bytes (for what an HTTP client would not send)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers.get("content-type", ""), body


def assert_envelope(response: httpx.Response, status: int, code: str, openai: bool = False) -> None:
    """The API's JSON error envelope (OpenAI's shape when ``openai``) with this status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"], error
    if openai:
        assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error"), error
        assert "param" in error, error


def logged_line(nginx_log: Path, request_id: str) -> str:
    """nginx's one access line naming ``request_id`` (written once the answer is sent)."""
    deadline = time.monotonic() + 30
    while f" id={request_id}" not in nginx_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    [line] = [line for line in nginx_log.read_text().splitlines() if line.endswith(f" id={request_id}")]
    return line


def test_errors_from_nginx_use_the_json_envelope(stack) -> None:
    """nginx's own errors are in the API's envelope and, as the API's answers, name the request (X-Request-ID, the
    id its access line names)."""
    base, backends, nginx_log = stack
    with httpx.Client(base_url=base, timeout=30) as client:
        response = client.post(f"/v1/tables/{TABLE}/neighbors", content=b"x" * (9 << 20))
        assert_envelope(response, 413, "body_too_large")
        request_id = response.headers.get("x-request-id", "")
        assert re.fullmatch("[0-9a-f]{32}", request_id), response.headers
        assert f'"POST /v1/tables/{TABLE}/neighbors HTTP/1.1" 413 ' in logged_line(nginx_log, request_id)
        named = [response]
        response = client.post("/v1/embeddings", content=b"x" * (9 << 20))
        assert_envelope(response, 400, "body_too_large", openai=True)  # OpenAI's status, as the server's

        # Beyond the server's limits on request heads (32 KiB), nginx answers, in JSON, with the server's codes.
        long_line = client.get("/v1/tables?q=" + "a" * (33 << 10))
        assert_envelope(long_line, 414, "request_line_too_long")
        assert_envelope(client.get("/v1/tables", headers={"x-long": "a" * (33 << 10)}), 431, "headers_too_large")
        too_large = client.get("/v1/models", headers={"x-long": "a" * (33 << 10)})
        assert_envelope(too_large, 431, "headers_too_large", openai=True)
        named += [long_line, too_large]
        status, content_type, body = raw_request(base, b"GET /v1/tables HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert (status, content_type) == (400, "application/json"), body  # HTTP/1.1 without Host
        assert b'"code": "bad_request"' in body

        for process, _ in backends.values():
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        unavailable = client.get(neighbours_path("king"))
        assert_envelope(unavailable, 503, "not_ready")
        assert_envelope(client.get("/v1/models"), 503, "not_ready", openai=True)
        named.append(unavailable)
    ids = [response.headers.get("x-request-id", "") for response in named]
    assert all(re.fullmatch("[0-9a-f]{32}", i) for i in ids) and len(set(ids)) == len(ids), ids


def test_request_heads_the_server_takes_reach_it(stack) -> None:
    """A URL or a header within the server's 32 KiB gets the server's own answer through nginx, as directly. And
    nginx names each request ($request_id, in place of a client's own X-Request-ID): the server sends it back, and
    both the nginx and the server's access lines carry it."""
    base, backends, nginx_log = stack
    direct = f"http://{next(iter(backends))}"
    long_path = "/v1/" + "a" * 9_212  # 9,216 characters: over nginx's default buffers, within the server's
    long_header = {"x-long": "a" * 10_000}
    with httpx.Client(timeout=30) as client:
        for url in (base, direct):
            assert_envelope(client.get(url + long_path), 404, "not_found")
            answered = client.get(url + neighbours_path("king"), headers=long_header)
            assert answered.status_code == 200, answered.text
        answered = client.get(base + neighbours_path("paris"), headers={"X-Request-ID": "the-clients-own"})
    request_id = answered.headers["x-request-id"]
    assert answered.status_code == 200 and re.fullmatch("[0-9a-f]{32}", request_id)
    assert f'"GET {neighbours_path("paris")} HTTP/1.1" 200 ' in logged_line(nginx_log, request_id)
    logged = [line for _, log in backends.values() for line in log.read_text().splitlines() if request_id in line]
    assert [line.endswith(f" 200 request_id={request_id}") for line in logged] == [True], logged


def directive(conf: str, name: str) -> str:
    """The value of the one ``name`` directive of the config."""
    [value] = re.findall(rf"^\s*{name}\s+([^;]+);", conf, re.MULTILINE)
    return value.strip()


def test_slow_clients_get_the_servers_time() -> None:
    """nginx reads a request whole before it passes it on, so the server's own timeouts never see the client:
    nginx's are the server's, not its default minute."""
    conf = NGINX_CONF.read_text()
    timeouts = {"client_header_timeout": "header_timeout", "client_body_timeout": "body_timeout"}
    timeouts["send_timeout"] = "send_timeout"
    for nginx, setting in timeouts.items():
        assert directive(conf, nginx) == f"{Settings.model_fields[setting].default:g}s", nginx


def test_a_body_over_the_servers_limit_gets_the_servers_answer(stack) -> None:
    """nginx takes bodies as large as the server does (``EMBEDDING_MAX_BODY_BYTES``), and refuses a larger one
    with the server's own answer: the same status and JSON whether nginx or a replica refuses it (the limit's
    name, which clients read, included), on the API's paths and OpenAI's."""
    base, backends, _ = stack
    direct = f"http://{next(iter(backends))}"
    with httpx.Client(timeout=30) as client:
        limit = client.get(f"{direct}/v1/limits").json()["max_body_bytes"]
        assert directive(NGINX_CONF.read_text(), "client_max_body_size") == f"{limit >> 20}m"
        for path in (f"/v1/tables/{TABLE}/neighbors", "/v1/embeddings"):
            for size in (limit + 1, 2 * limit + 1):  # just over the limit, and well over it
                body = b"x" * size
                through, alone = client.post(base + path, content=body), client.post(direct + path, content=body)
                assert (through.status_code, through.json()) == (alone.status_code, alone.json()), (path, size)
                assert through.json()["error"]["code"] == "body_too_large"
            within = client.post(base + path, content=b"x" * limit)  # not too large: malformed JSON, the server's
            assert within.status_code in (400, 422) and within.json()["error"]["code"] != "body_too_large"


def test_metrics_are_not_published(stack) -> None:
    base, backends, _ = stack
    with httpx.Client(timeout=30) as client:
        for path in ("/metrics", "/metrics/", "/%6detrics", "/metrics?name=x"):
            refused = client.get(base + path)
            assert_envelope(refused, 404, "not_found")
            assert re.fullmatch("[0-9a-f]{32}", refused.headers.get("x-request-id", "")), refused.headers
        status, _, body = raw_request(base, b"GET //metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        assert status == 404 and b"embedding_" not in body
        direct = client.get(f"http://{next(iter(backends))}/metrics")  # scraped on each replica's own port
        assert direct.status_code == 200 and "embedding_http_requests_total" in direct.text


@pytest.fixture
def refused_table_data(small_data_dir: Path, tmp_path: Path) -> Path:
    """A data directory with ``small`` and ``broken``, a copy of it whose vectors fail their checksum."""
    data_dir = tmp_path / "data"
    shutil.copytree(small_data_dir / TABLE, data_dir / TABLE)
    shutil.copytree(small_data_dir / TABLE, data_dir / "broken")
    vectors = data_dir / "broken" / artifact.VECTORS
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0x01
    vectors.write_bytes(bytes(data))
    return data_dir


def test_the_apis_503_takes_no_replica_out_of_service(refused_table_data: Path, tmp_path: Path) -> None:
    """Requests for a table every replica refused at load get the API's 503, from one replica each (not retried),
    and the loaded table is answered on both replicas right after."""
    with running_stack(refused_table_data, tmp_path, ready_path=neighbours_path("the")) as (base, backends, log):
        with httpx.Client(base_url=base, timeout=30) as client:
            for _ in range(4):
                refused = client.get("/v1/tables/broken/neighbors?token=king")
                assert_envelope(refused, 503, "not_ready")
                assert "broken" in refused.json()["error"]["message"]  # the API's answer, not nginx's
            logged = len(upstreams(log))
            for word in WORDS:
                answered = client.get(neighbours_path(word))
                assert answered.status_code == 200, answered.text
        deadline = time.monotonic() + 10
        while len(upstreams(log)) < logged + len(WORDS) and time.monotonic() < deadline:
            time.sleep(0.05)
        entries = upstreams(log)
        assert all(len(tried) == 1 for request, _, tried in entries if "/broken/" in request), entries
        assert {tried[-1] for _, _, tried in entries[logged:]} == set(backends)


@contextmanager
def silent_backend() -> Iterator[int]:
    """A port that takes connections and requests and never answers, as a replica that hangs."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def take() -> None:
        with contextlib.suppress(OSError):  # the listener shut down
            while True:
                held.append(listener.accept()[0])

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        taker.join(10)
        for connection in held:
            connection.close()


def test_a_replica_that_does_not_answer_in_time_is_a_timeout(small_data_dir: Path, tmp_path: Path) -> None:
    """An answer later than ``proxy_read_timeout`` (60 s), past the 20 s in which nginx retries a request, is
    nginx's 504 ``timeout`` in the API's envelope: not the 503 that says no replica is available, which sends the
    operator looking for replicas that are down when one was only slow (or a t-SNE map still being computed). The
    two timeouts shortened in the same proportion, 2 s and 1 s, for a test of seconds."""
    conf = NGINX_CONF.read_text()
    read, connect = (
        directive(conf, name).removesuffix("s") for name in ("proxy_read_timeout", "proxy_connect_timeout")
    )
    assert f"did not answer in time ({read} s; {connect} s to connect)" in conf, "the 504 names the timeouts set"
    shorter = (
        ("proxy_read_timeout 60s;", "proxy_read_timeout 2s;"),
        ("proxy_next_upstream_timeout 20s;", "proxy_next_upstream_timeout 1s;"),
    )
    with (
        silent_backend() as silent,
        running_stack(small_data_dir, tmp_path, replicas=1, more_backends=(silent,), changes=shorter) as stack,
    ):
        base, backends, nginx_log = stack
        with httpx.Client(base_url=base, timeout=30) as client:
            for path, openai in ((neighbours_path("king"), False), ("/v1/models", True)):
                # Round-robin, and the silent replica skipped for fail_timeout (5 s) once it timed out: ask until it
                # is asked again.
                deadline = time.monotonic() + 30
                answers = [client.get(path)]
                while answers[-1].status_code == 200 and time.monotonic() < deadline:
                    answers.append(client.get(path))
                assert_envelope(answers[-1], 504, "timeout", openai=openai)
                assert "did not answer in time" in answers[-1].json()["error"]["message"]
                line = logged_line(nginx_log, answers[-1].headers["x-request-id"])
                assert f"upstream=127.0.0.1:{silent} upstream_status=504 " in line, line
                assert all(response.status_code == 200 for response in answers[:-1]), answers
        assert set(backends) <= {u[-1] for _, status, u in upstreams(nginx_log) if status == 200}
