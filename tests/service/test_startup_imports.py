"""A server of word tables never loads the libraries only other tables use (index.lazy): their pages would be
resident in every server process (BENCHMARKS.md, "Server memory and load + index, before and after").

Checked on the real ``embedding-serve`` process, by the shared libraries mapped into it after it answered, and
against a server of documents tables, which must map Arrow's (so the check sees a library when it is there).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from index.engine.table import Table
from tests.service import real_server
from tests.service.real_server import HTTP, Server

# Shared objects of libraries a word table never calls: pyarrow (documents, filters, metadata columns), ONNX
# Runtime and tokenizers (transformer and model-token tables), PyStemmer (keyword search), SciPy, pandas.
UNUSED_BY_WORDS = ("libarrow", "pyarrow", "onnxruntime", "tokenizers", "Stemmer", "scipy/", "pandas/")
# Pure-Python modules the same start-up must not import: the above, and httpx (only a sharded front asks shards).
UNIMPORTED = ("pyarrow", "httpx", "onnxruntime", "tokenizers", "Stemmer", "bm25s", "scipy", "pandas")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")


def mapped(server: Server) -> set[str]:
    """The files mapped into the server's processes (the worker and any process it started)."""
    root = psutil.Process(server.process.pid)
    paths: set[str] = set()
    for proc in [root, *root.children(recursive=True)]:
        paths.update(m.path for m in proc.memory_maps() if m.path.startswith("/"))
    return paths


def unused(paths: set[str]) -> list[str]:
    return sorted(p for p in paths if any(name in p for name in UNUSED_BY_WORDS))


def test_a_word_table_server_maps_no_library_it_never_calls(small_server: Server, small: Table) -> None:
    base = f"{small_server.base}/v1/tables/small"
    assert HTTP.get(f"{base}/neighbors", params={"token": "heart", "k": 5}).status_code == 200
    vector = small.vectors[small.tokens.find("heart")].tolist()
    assert HTTP.post(f"{base}/search", json={"vector": vector, "k": 5}).status_code == 200
    assert HTTP.get(f"{base}/similarity", params={"a": "heart", "b": "lung"}).status_code == 200
    paths = mapped(small_server)
    assert any("faiss" in p for p in paths)  # what it does use is seen
    assert unused(paths) == []


def test_a_documents_server_maps_arrow(documents_data_dir: Path, tmp_path: Path) -> None:
    """On a server of its own: the session's documents server also answers other modules' projections."""
    body = {"text": "bushfires", "mode": "keyword", "k": 3, "filter": {"year": {"gte": 1995}, "lang": "en"}}
    with real_server.running(documents_data_dir, tmp_path / "serve.log") as server:
        response = HTTP.post(f"{server.base}/v1/tables/lee/search", json=body)
        assert response.status_code == 200, response.text
        paths = mapped(server)
    assert any("libarrow" in p for p in unused(paths))
    # Its keyword search reads the keyword index's files itself: numba's compiler and SciPy are not mapped.
    assert [p for p in paths if any(name in p for name in ("llvmlite", "numba/", "scipy/"))] == []


def test_the_app_and_a_word_table_loaded_import_none_of_them(small_data_dir: Path) -> None:
    """In a fresh interpreter: the server's modules imported, its app made, the word table loaded and searched."""
    script = f"""
import sys
import numpy as np
import service.main
from service.app import create_app
from service.registry import Registry
from service.settings import Settings
create_app(Settings(data_dir={str(small_data_dir)!r}))
table = Registry.load({str(small_data_dir)!r}).tables["small"]
table.most_similar([table.tokens.find("heart")], k=5)
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] in {UNIMPORTED!r})))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == []


# embedding-serve's own start-up in a fresh interpreter (service.main.main: settings, uvicorn, the app factory, the
# lifespan), until /readyz answers 200: what is imported then, and the collector's state then and after the stop.
READY = """
import gc, http.client, os, signal, sys, threading, time
from service.main import main

seen = {{}}


def watch() -> None:
    while True:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", {port}, timeout=5)
            connection.request("GET", "/readyz")
            status = connection.getresponse().status
            connection.close()
        except OSError:
            status = None
        if status == 200:
            break
        time.sleep(0.02)
    seen["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in {unimported!r})
    seen["collector"] = (gc.isenabled(), gc.get_freeze_count() > 0)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=watch, daemon=True).start()
try:
    code = main(["--data-dir", {data_dir!r}, *{tables!r}, "--port", "{port}", "--log-level", "warning"])
except SystemExit as exc:
    code = exc.code
print(code, seen["imported"], seen["collector"], gc.isenabled())
"""


def served_until_ready(data_dir: Path, tables: list[str], env: dict[str, str]) -> str:
    from bench.common import free_port

    script = READY.format(port=free_port(), data_dir=str(data_dir), tables=tables, unimported=UNIMPORTED)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    environment |= {"EMBEDDING_WATCH_SECONDS": "0", **env}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, env=environment
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_a_word_table_server_at_readyz(small_data_dir: Path) -> None:
    """Ready to answer: none of the modules only other tables use is imported; the collector runs, with what
    start-up made frozen, and it still runs once the server has stopped."""
    assert served_until_ready(small_data_dir, ["--tables", "small"], {}) == "0 [] (True, True) True"


def test_a_front_without_tables_at_readyz(tmp_path: Path) -> None:
    """A sharded table's front with no table of its own: not even httpx until it first asks a shard."""
    shards = '{"lee": [["http://127.0.0.1:9/v1/tables/shard-000"], ["http://127.0.0.1:9/v1/tables/shard-001"]]}'
    assert served_until_ready(tmp_path, [], {"EMBEDDING_SHARDS": shards}) == "0 [] (True, True) True"


def fresh_interpreter(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a fresh interpreter, with none of the caller's EMBEDDING_* settings."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("EMBEDDING_")}
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False, env=environment
    )


REFUSED = """
import gc, os, sys
from service.main import main

codes = []
for data_dir, environment in {cases!r}:
    os.environ.update(environment)
    codes.append(main(["--data-dir", data_dir]))
heavy = {{"numpy", "faiss", "fastapi", "starlette", "uvicorn", "pyarrow", "httpx"}}
print(codes, sorted({{m.split(".")[0] for m in sys.modules}} & heavy), gc.isenabled())
"""


def test_a_refusal_imports_no_numpy_and_leaves_the_collector_on(tmp_path: Path) -> None:
    """Bad settings (a missing data directory, EMBEDDING_SHARDS that is not JSON) stop embedding-serve before
    numpy is imported, let alone the HTTP stack or FAISS; main returns with the collector on."""
    cases = [("/no/such/dir", {}), (str(tmp_path), {"EMBEDDING_SHARDS": "nonsense"})]
    done = fresh_interpreter(REFUSED.format(cases=cases))
    assert done.stdout.strip() == "[2, 2] [] True", (done.stdout, done.stderr[-3000:])
    refusals = done.stderr.splitlines()  # one line each, naming the option or the variable
    assert len(refusals) == 2 and "--data-dir" in refusals[0] and "EMBEDDING_SHARDS" in refusals[1], refusals


# What SIGHUP does at the moments of a start-up with workers: when the deferred index builds start (one sends SIGHUP
# to the server once its index is published) and when the supervisor takes over.
HUP = """
import signal
import service.main as serve
import service.workers as workers

seen = []
serve.start_deferred_builds = lambda settings: seen.append(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)
workers.serve_workers = lambda options, exit_seconds: seen.append(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)
code = serve.main(["--data-dir", {data_dir!r}, "--workers", "2", "--port", "0"])
print(code, seen, signal.getsignal(signal.SIGHUP) is signal.SIG_DFL)
"""


def test_a_sighup_during_a_start_up_with_workers_does_not_stop_the_server(tmp_path: Path) -> None:
    """SIGHUP is ignored from before the deferred index builds start until the supervisor handles it (its default
    action would end the server); main gives the caller's handler back when it returns."""
    done = fresh_interpreter(HUP.format(data_dir=str(tmp_path)))
    assert done.stdout.strip() == "0 [True, True] True", (done.stdout, done.stderr[-3000:])
