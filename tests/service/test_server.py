"""The real ``embedding-serve`` process on a free loopback port, queried over HTTP and through the Python client."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from index.engine.table import Table
from service.main import listen_problem
from service.workers import WORKER_SILENCE_SECONDS
from service_client import ApiError, Client, Neighbor, segment
from tests.cli import run_cli
from tests.service import failing_serve, raw_http
from tests.service.real_server import HTTP, Server, running, start, wait_for
from tests.service.scraped import never_less, scrape


def stop(server: Server) -> None:
    """SIGTERM, then assert a graceful exit (uvicorn re-raises the signal after shutting down cleanly)."""
    assert server.stop() in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in server.log()


@pytest.fixture(scope="module")
def server(small_server: Server) -> str:
    """The shared server over the small table (tests/service/conftest.py; its graceful exit checked there)."""
    return small_server.base


def test_real_server_answers_neighbours_of_heart(server: str, small: Table) -> None:
    response = HTTP.get(f"{server}/v1/tables/small/neighbors", params={"token": "heart", "k": 8})
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    heart = small.tokens.find("heart")
    assert body["query"]["id"] == heart
    assert [n["id"] for n in body["neighbors"]] == [i for i, _ in small.most_similar([heart], k=8)]
    assert "server" not in response.headers  # no server banner
    metrics = HTTP.get(f"{server}/metrics").text
    assert 'embedding_http_requests_total{method="GET",route="/v1/tables/{table}/neighbors"' in metrics


def test_a_request_id_is_sent_back_and_logged(small_server: Server) -> None:
    """A valid X-Request-ID comes back with the answer and ends the request's access line; any other value is
    neither sent back nor logged; a request without one is given none."""

    def ask(k: int, request_id: str | None) -> tuple[int, dict[str, str]]:
        headers = {"Connection": "close"} | ({} if request_id is None else {"X-Request-ID": request_id})
        with raw_http.connect(small_server.port) as sock:
            sock.sendall(raw_http.request("GET", f"/v1/tables/small/neighbors?token=heart&k={k}", headers=headers))
            status, answered, _ = raw_http.read_response(sock)
        return status, answered

    def access_line(k: int) -> str:
        [line] = [line for line in small_server.log().splitlines() if f"&k={k} HTTP/1.1" in line]
        return line

    assert "INFO service.app: ready: 1 table loaded, 0 failed\n" in small_server.log()  # its start-up's line
    status, answered = ask(42, "req-7f3a/2")
    assert status == 200 and answered["x-request-id"] == "req-7f3a/2"
    assert access_line(42).endswith('/neighbors?token=heart&k=42 HTTP/1.1" 200 request_id=req-7f3a/2')
    status, answered = ask(43, None)
    assert status == 200 and "x-request-id" not in answered and access_line(43).endswith(" 200")
    # (Control characters other than a tab are refused by the server's HTTP parser: 400.)
    for k, invalid in enumerate(["x" * 129, "req\t7f3a", "réq-7f3a", "req 7f3a"], start=44):
        status, answered = ask(k, invalid)
        assert status == 200 and "x-request-id" not in answered, invalid
        assert access_line(k).endswith(" 200") and invalid not in small_server.log(), invalid


def test_a_long_url_is_logged_cut_to_a_line_a_log_driver_keeps_whole(small_server: Server) -> None:
    """A request line of 30,000 quotes (within the 32 KiB head limit), each logged as %22, made a 90 KB access line:
    Docker's and containerd's log drivers cut lines at 16 KiB, so a JSON line would reach the log pipeline in pieces
    that do not parse. The URL is logged cut at 4,096 characters, saying how many it left out; the line keeps its
    status and id."""
    targets = {"long-quotes": "/healthz?" + '"' * 30_000, "long-path": "/nosuch/" + "a" * 30_000}
    for request_id, target in targets.items():
        with raw_http.connect(small_server.port) as sock:
            sock.sendall(raw_http.request("GET", target, headers={"X-Request-ID": request_id, "Connection": "close"}))
            assert raw_http.read_response(sock)[0] in (200, 404)
    wait_for(lambda: all(f"request_id={name}" in small_server.log() for name in targets), what="the access lines")
    lines = {
        name: [line for line in small_server.log().splitlines() if f"request_id={name}" in line] for name in targets
    }
    for name, status in (("long-quotes", 200), ("long-path", 404)):
        [line] = lines[name]
        url = targets[name].replace('"', "%22")  # as uvicorn writes it
        assert line.endswith(f'"GET {url[:4096]}...[+{len(url) - 4096}] HTTP/1.1" {status} request_id={name}')
        assert len(line) < 4400


def analogies_counted(base: str) -> dict[str, float]:
    """``POST /v1/tables/{table}/analogy``'s requests by status, as Prometheus' parser reads ``/metrics``."""
    return {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(HTTP.get(f"{base}/metrics").text)
        if family.name == "embedding_http_requests"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["route"] == "/v1/tables/{table}/analogy"
    }


def test_a_request_whose_client_leaves_before_its_answer_has_its_access_line_and_counts_499(
    small_server: Server,
) -> None:
    """A batch of 3CosMul analogies (each scores every row) whose client closes its connection once it is sent:
    the answer, computed after the client left, is sent to no one. Its access line says so, 499 as for work not
    started, naming its id, and the metrics count it so, not as the 200 no client got."""
    words = ["king", "man", "woman", "paris", "france", "berlin", "germany", "red", "blue", "dog", "cat", "queen"]
    questions = [{"a": words[i % 12], "b": words[(i + 1) % 12], "c": words[(i + 5) % 12]} for i in range(300)]
    body = json.dumps({"queries": questions, "k": 10, "method": "3cosmul"}).encode()
    before = analogies_counted(small_server.base)
    with raw_http.connect(small_server.port) as sock:
        sock.sendall(raw_http.request("POST", "/v1/tables/small/analogy", body, {"X-Request-ID": "left-early"}))
    wait_for(lambda: analogies_counted(small_server.base) != before, seconds=60, what="the batch counted")
    added = {status: count - before.get(status, 0.0) for status, count in analogies_counted(small_server.base).items()}
    assert {status: count for status, count in added.items() if count} == {"499": 1}
    [line] = [line for line in small_server.log().splitlines() if "left-early" in line]
    assert line.endswith('"POST /v1/tables/small/analogy HTTP/1.1" 499 request_id=left-early'), line


def test_requests_pipelined_behind_one_whose_client_leaves_have_their_access_lines(small_server: Server) -> None:
    """Three searches pipelined behind such a batch, on the connection its client closes once they are sent: they
    never run, and each has its access line, 499 with its id, as the batch has (uvicorn wrote none for them)."""
    words = ["king", "man", "woman", "paris", "france", "berlin", "germany", "red", "blue", "dog", "cat", "queen"]
    questions = [{"a": words[i % 12], "b": words[(i + 1) % 12], "c": words[(i + 5) % 12]} for i in range(300)]
    body = json.dumps({"queries": questions, "k": 10, "method": "3cosmul"}).encode()
    sent = raw_http.request("POST", "/v1/tables/small/analogy", body, {"X-Request-ID": "ahead-left"})
    queued = {f"queued-{k}": f"/v1/tables/small/neighbors?token=heart&k={k}" for k in (5, 6, 7)}
    for name, target in queued.items():
        sent += raw_http.request("GET", target, headers={"X-Request-ID": name})
    with raw_http.connect(small_server.port) as sock:
        sock.sendall(sent)
    names = ["ahead-left", *queued]
    wait_for(lambda: all(f"request_id={name}" in small_server.log() for name in names), what="the access lines")
    lines = [line for line in small_server.log().splitlines() if any(f"request_id={n}" in line for n in names)]
    assert len(lines) == 4 and lines[0].endswith('"POST /v1/tables/small/analogy HTTP/1.1" 499 request_id=ahead-left')
    for line, (name, target) in zip(lines[1:], queued.items(), strict=True):
        assert line.endswith(f'"GET {target} HTTP/1.1" 499 request_id={name}'), lines


def test_a_pipelined_request_is_not_logged_under_the_id_of_the_one_before(small_server: Server) -> None:
    """A request queued behind another (pipelined in one write) runs once that one's answer is sent, from inside
    its send: it was logged under that request's X-Request-ID (its access line said request_id=first-named)."""
    target = "/v1/tables/small/neighbors?token=heart&k=3"
    sent = raw_http.request("GET", target, headers={"X-Request-ID": "first-named"})
    sent += raw_http.request("GET", f"{target}&exact=true", headers={"Connection": "close"})
    with raw_http.connect(small_server.port) as sock:
        sock.sendall(sent)
        first, second = raw_http.read_responses(sock, 2)
    assert (first[1]["x-request-id"], second[0], "x-request-id" in second[1]) == ("first-named", 200, False)
    line = f'"GET {target}&exact=true HTTP/1.1" 200'
    wait_for(lambda: line in small_server.log(), what="the second request's access line")
    (logged,) = [logged for logged in small_server.log().splitlines() if line in logged]
    assert logged.endswith(line), logged


def test_a_projection_logs_its_access_line_alone(small_data_dir: Path, tmp_path: Path) -> None:
    """openTSNE logs two or three info lines per t-SNE (its gradient method, its initialization): at the server's
    info level they stay out of the log, which has the request's access line. (A server of its own: the shared
    one's mapped libraries are checked by tests/service/test_startup_imports.py.)"""
    words = ["king", "queen", "man", "woman", "paris", "france", "berlin", "germany", "red", "blue", "dog", "cat"]
    with running(small_data_dir, tmp_path / "server.log") as server:
        body = {"tokens": words, "method": "tsne"}
        response = HTTP.post(f"{server.base}/v1/tables/small/project", json=body, timeout=120)
        assert response.status_code == 200 and len(response.json()["points"]) == len(words)
        wait_for(lambda: '"POST /v1/tables/small/project HTTP/1.1" 200' in server.log(), what="the access line")
        assert "openTSNE" not in server.log()


TRACEBACK = "Traceback (most recent call last):"


def test_a_request_that_fails_logs_one_traceback_naming_its_id(small_data_dir: Path, tmp_path: Path) -> None:
    """An unexpected error's 500 logs two lines, each naming the request's id at the end of its line: the access
    line and the service's with the one traceback (uvicorn's "Exception in ASGI application" with the traceback
    again is not logged). The connection stays open: the next request on it, without an id, fails the same way
    and its lines name none."""
    serve = (sys.executable, "-m", "tests.service.failing_serve")
    server = start(small_data_dir, tmp_path / "server.log", "--threads", "1", serve=serve)
    try:
        with raw_http.connect(server.port) as sock:
            sock.sendall(raw_http.request("GET", failing_serve.PATH, headers={"X-Request-ID": "fails-7"}))
            status, answered, body = raw_http.read_response(sock)
            assert (status, answered["x-request-id"]) == (500, "fails-7")
            assert json.loads(body) == {"error": {"code": "internal", "message": "internal server error"}}
            sock.sendall(raw_http.request("GET", failing_serve.PATH))
            status, answered, _ = raw_http.read_response(sock)
            assert status == 500 and "x-request-id" not in answered
        counted = 'embedding_http_requests_total{method="GET",route="/v1/fails",status="500",table=""} 2.0'
        assert counted in HTTP.get(f"{server.base}/metrics").text
    finally:
        stop(server)
    records = re.split(r"\n(?=\d{4}-\d\d-\d\d )", server.log())  # a traceback belongs to the line it follows
    lines = [record.split(" ", 3)[3] for record in records if " ERROR " in record or "/v1/fails" in record]
    access = [line.split(" ")[1] for line in lines[::2]]
    assert [line.splitlines()[0] for line in lines] == [
        f'uvicorn.access: {access[0]} - "GET /v1/fails HTTP/1.1" 500 request_id=fails-7',
        "service.errors: unhandled error on GET /v1/fails request_id=fails-7",
        f'uvicorn.access: {access[1]} - "GET /v1/fails HTTP/1.1" 500',
        "service.errors: unhandled error on GET /v1/fails",
    ]
    assert [line.splitlines()[1:2] for line in lines] == [[], [TRACEBACK], [], [TRACEBACK]]
    assert server.log().count(TRACEBACK) == 2 and server.log().count("RuntimeError: an unexpected fault") == 2


# Tokens that need escaping somewhere on their way: a URL's path or query string, JSON, a shard's place.
AWKWARD = [
    *("1/2", "w/o", ".", "..", "...", "%", "%2F", "+", "c++", "a b", " lead", "#", "?x=1&y=2", "&amp;", '"', "\\"),
    *("caf\u00e9", "nai\u0308ve", "Case", "\U0001f600", "a\tb", "a\x01b", "nul\x00x", "/", "//", "a/../b", "\u65e5"),
]


def test_awkward_tokens_answer_their_rows_from_import_to_the_word_routes(tmp_path: Path) -> None:
    """A table whose tokens need escaping (slashes, dots, %, +, #, ?, &, quotes, a backslash, spaces, control
    characters, a NUL, decomposed marks, an emoji), imported from an .npz whole and as 3 shards: each token asked
    in a path (escaped, its dots as %2E), in a query string (escaped, + as %2B), in a body and through the Python
    client answers its own row, as written; the decomposed label typed composed too."""
    tokens = [*AWKWARD, *(f"w{i}" for i in range(40))]
    matrix = np.random.default_rng(5).standard_normal((len(tokens), 8)).astype(np.float32)
    np.savez(tmp_path / "awkward.npz", vectors=matrix, tokens=np.array(tokens, dtype=str))
    for name, extra in (("awkward", ()), ("awkward3", ("--shards", "3"))):
        done = run_cli("import", tmp_path / "awkward.npz", "--name", name, *extra, "--data-dir", tmp_path / "data")
        assert done.code == 0, done.err
    with running(tmp_path / "data", tmp_path / "serve.log") as server, Client(server.base) as api:
        for table in ("awkward", "awkward3"):
            base = f"{server.base}/v1/tables/{table}"
            for row, token in enumerate(AWKWARD):
                path = HTTP.get(f"{base}/tokens/{segment(token)}").json()
                assert (path["token"], path["id"]) == (token, row)
                query = HTTP.get(f"{base}/neighbors?token={quote(token, safe='')}&k=2").json()["query"]
                assert query == {"text": token, "token": token, "id": row, "match": "exact"}
                body = HTTP.post(f"{base}/neighbors", json={"positive": [token], "k": 2}).json()
                assert body["query"]["positive"] == [query]
                assert api.vector(table, token) == path["vector"] and api.neighbors(table, token, k=2)
            composed = HTTP.get(f"{base}/neighbors", params={"token": "na\u00efve", "k": 2}).json()["query"]
            assert (composed["id"], composed["match"]) == (AWKWARD.index("nai\u0308ve"), "exact")  # the label's NFD


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
        hits = api.search_batch("small", [vector, [1.0]], k=1)
        assert hits[0][0].token == "heart" and isinstance(hits[1], ApiError) and hits[1].code == "invalid_request"
        assert hits[1].message == "the vector has 1 value; table 'small' has 50 dimensions"
        assert api.vector("small", "1/2") and api.vector("small", ".")  # tokens that need escaping in a path
        assert api.vector_of_id("small", heart) == vector
        assert api.vector_of_id("small", heart, normalized=True) == api.vector("small", "heart", normalized=True)

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


def work_running(base: str) -> float:
    """The engine work in flight, heavy and long, as ``/metrics`` adds it up over the workers alive."""
    found = re.findall(r'embedding_work\{kind="\w+",state="running"\} ([0-9.e+]+)', HTTP.get(f"{base}/metrics").text)
    return sum(float(value) for value in found)


def project_running(base: str, tokens: list[str]) -> threading.Thread:
    """A t-SNE projection of ``tokens`` (long enough to be caught running) asked in a thread, once it runs; its
    answer is not awaited (its worker may be killed)."""

    def project() -> None:
        with contextlib.suppress(httpx.HTTPError):
            HTTP.post(f"{base}/v1/tables/small/project", json=tsne, timeout=120)

    tsne = {"tokens": tokens, "method": "tsne", "perplexity": 100}
    projecting = threading.Thread(target=project)
    projecting.start()
    wait_for(lambda: work_running(base) == 1, what="the projection running")
    return projecting


def exited(process: psutil.Process) -> bool:
    """Whether ``process`` has exited (a zombie until its parent reaps it)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return process.status() == psutil.STATUS_ZOMBIE
    return True


def test_two_workers_share_the_tables_and_the_metrics(small_data_dir: Path, tmp_path: Path, small: Table) -> None:
    """Requests and metrics shared by two forked workers; a worker killed midway through its work is restarted
    (half a second later: it had run less than 30 s), even while the supervisor's health check waits on it, and its
    work in flight is no longer counted. While
    that check waits on a silent worker, SIGHUP and SIGTERM reach the other at once. A SIGTERM that comes twice
    stops the server once, a hung worker killed once its shutdown's time is over."""
    env = {"EMBEDDING_MAX_LAYOUT_WORK": "102400"}  # a t-SNE layout of 500 words: long enough to be caught running
    env |= {"EMBEDDING_SHUTDOWN_TIMEOUT": "0"}  # nothing in flight at the end: the hung worker killed soon after
    env |= {"EMBEDDING_LOG_FORMAT": "json", "EMBEDDING_LOG_FORMATS": "json"}  # and a warning about the misspelt one
    server = start(small_data_dir, tmp_path / "server.log", "--workers", "2", "--threads", "1", env=env)
    base = server.base
    try:
        with Client(base) as api:
            for _ in range(6):
                assert api.neighbors("small", "heart", k=3)
        named = HTTP.get(f"{base}/v1/tables/small", headers={"X-Request-ID": "req-json"})  # not counted below
        assert named.headers["x-request-id"] == "req-json"

        def counted() -> float:
            metrics = HTTP.get(f"{base}/metrics").text
            return sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("embedding_http_requests_total{") and 'route="/v1/tables/{table}/neighbors"' in line
            )

        # Aggregated over both workers. A request is counted once its answer is sent: the other worker may answer
        # /metrics before the last one's count is written.
        wait_for(lambda: counted() == 6, seconds=30, what="the six requests counted")
        assert counted() == 6
        # The workers are forked from the supervisor after it imported the service: the libraries' memory is
        # shared between them (copy-on-write) instead of each worker holding its own ~50 MiB.
        workers = [c for c in psutil.Process(server.process.pid).children() if c.name() == "embedding-serve"]
        assert len(workers) == 2
        for worker in workers:
            rollup = Path(f"/proc/{worker.pid}/smaps_rollup").read_text().split()
            shared_dirty_kib = int(rollup[rollup.index("Shared_Dirty:") + 1])
            assert shared_dirty_kib > 16 * 1024, shared_dirty_kib

        # A worker silent for longer than uvicorn's default health-check timeout (as one starved of CPU is) is kept.
        # Meanwhile, as the supervisor's health check waits on it, a SIGHUP reaches the other worker at once.
        os.kill(workers[0].pid, signal.SIGSTOP)
        try:
            time.sleep(1.5)
            server.process.send_signal(signal.SIGHUP)
            # at once, not once the check gives up on the silent one: half its wait leaves a busy machine time
            reloaded = "SIGHUP: reloading the tables"
            wait_for(lambda: reloaded in server.log(), seconds=WORKER_SILENCE_SECONDS / 2, what="the other's reload")
            time.sleep(4.5)
            assert workers[0].is_running() and "died" not in server.log()
        finally:
            os.kill(workers[0].pid, signal.SIGCONT)
        with Client(base) as api:
            assert all(api.neighbors("small", "heart", k=3) for _ in range(4))

        projecting = project_running(base, small.tokens[100:600])
        # Both silent first, so that the supervisor's health check (every half second) is waiting on one of them
        # when they die, as when the OOM killer takes a busy worker: the deaths are seen at once, not when the
        # check's WORKER_SILENCE_SECONDS run out.
        scraped, _ = scrape(base)  # the two workers' metrics as one, in the text format's rules
        for worker in workers:
            os.kill(worker.pid, signal.SIGSTOP)
        time.sleep(1.5)
        for worker in workers:
            os.kill(worker.pid, signal.SIGKILL)
        projecting.join(120)
        alive = {worker.pid for worker in workers}
        wait_for(
            lambda: (
                len({c.pid for c in psutil.Process(server.process.pid).children()} - alive) == 2
                and HTTP.get(f"{base}/readyz").status_code == 200
            ),
            seconds=30,
            what="two new workers ready",
        )
        assert work_running(base) == 0
        never_less(scraped, scrape(base)[0])  # the dead workers' counts kept: none lower
        hung, other = psutil.Process(server.process.pid).children()
        os.kill(hung.pid, signal.SIGSTOP)  # as a worker whose event loop is stuck: SIGTERM changes nothing
        time.sleep(1.5)  # the supervisor's health check waits on it: the other worker gets its SIGTERM all the same
        # SIGTERM twice, as a SIGTERM to the process and to its process group (timeout(1)) brings it: one exit.
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.1)  # not merged with the first while that one is pending
        server.process.send_signal(signal.SIGTERM)
        # reaped after the hung one, its SIGTERM not held back by the health check's wait on that one
        wait_for(lambda: exited(other), seconds=WORKER_SILENCE_SECONDS / 2, what="the other worker's exit")
    finally:
        stop(server)
    # Every line of the supervisor's and the workers', from the start-up's warning to the shutdown, is one object.
    entries = [json.loads(line) for line in server.log().splitlines()]
    keys = ("time", "level", "logger", "message")
    assert {tuple(entry) for entry in entries} == {keys, (*keys, "request_id")}
    [named_line] = [entry for entry in entries if "request_id" in entry]  # the access line of the request named
    assert named_line["request_id"] == "req-json" and named_line["logger"] == "uvicorn.access"
    assert named_line["message"].endswith('"GET /v1/tables/small HTTP/1.1" 200')
    assert entries[0]["level"] == "warning" and "EMBEDDING_LOG_FORMATS is not a setting" in entries[0]["message"]
    assert [entry["message"] for entry in entries].count("Received SIGTERM, exiting.") == 1
    killed = f"Child process [{hung.pid}] did not exit in 5 s, killing it"
    assert [entry["level"] for entry in entries if entry["message"] == killed] == ["warning"]
    assert not hung.is_running()


def test_the_workers_of_a_supervisor_killed_outright_drain_and_exit(
    small_data_dir: Path, tmp_path: Path, small: Table
) -> None:
    """kill -9 of the supervisor (the OOM killer's, an operator's): each worker answers its request in flight and
    exits, instead of serving on as an orphan that holds the port from the next ``embedding-serve``."""
    # The projection's time grows many-fold on busy cores: the shutdown timeout (after which it would be cut with a
    # 503) is set above the request's own timeout.
    env = {"EMBEDDING_SHUTDOWN_TIMEOUT": "150"}
    server = start(small_data_dir, tmp_path / "server.log", "--workers", "2", "--threads", "1", env=env)
    workers = psutil.Process(server.process.pid).children()
    try:
        answers: list[int] = []
        tsne = {"tokens": small.tokens[100:400], "method": "tsne", "perplexity": 100}
        projecting = threading.Thread(
            target=lambda: answers.append(
                HTTP.post(f"{server.base}/v1/tables/small/project", json=tsne, timeout=120).status_code
            )
        )
        projecting.start()
        wait_for(lambda: work_running(server.base) == 1, what="the projection running")
        server.process.kill()
        server.process.wait()
        projecting.join(120)
        assert answers == [200]
        alive = psutil.wait_procs(workers, timeout=30)[1]
        assert not alive, [worker.pid for worker in alive]
        assert listen_problem("127.0.0.1", server.port) == ""
    finally:
        server.process.kill()  # nothing if the test did
        for worker in workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()


def test_the_work_in_flight_of_a_server_killed_outright_is_not_counted_by_the_next(
    small_data_dir: Path, tmp_path: Path, small: Table
) -> None:
    """A metrics directory one sets outlives a server killed with all its workers (kill -9): the next server's
    ``/metrics`` does not count the work that was in flight then, for ever."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    server = start(small_data_dir, tmp_path / "first.log", "--workers", "2", "--threads", "1", env=env)
    processes = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children()]
    try:
        projecting = project_running(server.base, small.tokens[100:400])
    finally:
        for process in processes:
            process.kill()
    assert not psutil.wait_procs(processes, timeout=30)[1]
    projecting.join(120)
    server = start(small_data_dir, tmp_path / "second.log", "--workers", "2", "--threads", "1", env=env)
    try:
        assert work_running(server.base) == 0
    finally:
        stop(server)
