"""A server's first UMAP loads umap-learn's code from numba's cache when an earlier process compiled it there.

Two real servers in a row over the same data directory and one fresh ``NUMBA_CACHE_DIR`` (pynndescent's code,
which it caches itself, copied in from the test cache): the first compiles umap-learn's functions at its first
UMAP and numba writes them to the directory, the second loads them, for a small part of the first one's CPU time.
A process where numba has nowhere to write by then compiles as before; all three answer the same points.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from tests import REPO
from tests.service import real_server

BODY = {"tokens": ["red", "green", "blue", "yellow", "one", "two", "three", "four", "dog", "cat"], "method": "umap"}
UNWRITABLE = """
import json, resource, signal, sys
from pathlib import Path
import numba, umap  # pynndescent's and umap-learn's own cached code loads as usual
from index.engine import layout, umap_cache
from index.engine.table import Table

table = Table.load(Path(sys.argv[1]))
rows = table.vectors[[table.resolve(token).id for token in json.loads(sys.argv[3])]]
numba.config.CACHE_LOCATOR_CLASSES = "UserProvidedCacheLocator"
numba.config.CACHE_DIR = sys.argv[2] + "/a-file/numba"  # nowhere to write: under a regular file
assert umap_cache.enable() == 0  # no locator: nothing cached, nothing raised
umap_cache._tried = False
numba.config.CACHE_DIR = sys.argv[2]  # somewhere, where writing fails (a file size limit of 0)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
print(json.dumps(layout.umap_projection(rows).points.tolist()))
"""


def cpu_seconds(server: real_server.Server) -> float:
    """User and system CPU time of the server's processes (the supervisor and its workers) so far."""
    tree = psutil.Process(server.process.pid)
    return sum(sum(p.cpu_times()[:2]) for p in [tree, *tree.children(recursive=True)])


def first_umap(data_dir: Path, log: Path, numba_dir: Path) -> tuple[list[list[float]], float]:
    """The points of a new server's first UMAP, and the CPU seconds its processes spent answering it."""
    with real_server.running(data_dir, log, env={"NUMBA_CACHE_DIR": str(numba_dir)}) as server:
        before = cpu_seconds(server)
        response = real_server.HTTP.post(f"{server.base}/v1/tables/small/project", json=BODY, timeout=600)
        spent = cpu_seconds(server) - before
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return [[p["x"], p["y"]] for p in answer["points"]], spent


def test_the_second_server_loads_what_the_first_compiled(small_data_dir: Path, tmp_path: Path) -> None:
    numba_dir = tmp_path / "numba"
    numba_dir.mkdir()
    for cached in Path(os.environ["NUMBA_CACHE_DIR"]).glob("pynndescent_*/*"):
        (numba_dir / cached.parent.name).mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # a file the background step is replacing (the server compiles it)
            shutil.copy2(cached, numba_dir / cached.parent.name)

    unwritable = tmp_path / "unwritable"  # the process where numba cannot write runs beside the servers
    unwritable.mkdir()
    (unwritable / "a-file").write_text("")
    tokens = json.dumps(BODY["tokens"])
    uncached = subprocess.Popen(
        [sys.executable, "-c", UNWRITABLE, str(small_data_dir / "small"), str(unwritable), tokens],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        compiled, compiling = first_umap(small_data_dir, tmp_path / "first.log", numba_dir)
        indexes = list(numba_dir.glob("umap_*/*.nbi"))
        assert {p.name.split(".")[0] for p in indexes} >= {"layouts", "umap_", "utils"}  # numba's cache index files
        loaded, loading = first_umap(small_data_dir, tmp_path / "second.log", numba_dir)
        assert loaded == compiled
        assert loading < compiling / 3, f"first UMAP: {compiling:.1f} s of CPU compiling, {loading:.1f} s loading"

        out, err = uncached.communicate(timeout=600)
    finally:
        uncached.kill()  # nothing if it is done
    assert uncached.returncode == 0, err[-3000:]
    assert "numba's cache of umap-learn's code failed to write; compiling without it" in err
    np.testing.assert_array_equal(np.asarray(json.loads(out), np.float32), np.asarray(compiled, np.float32))
