"""Faults with real processes: corrupted artifacts at start-up and on reload, and a builder killed mid-write.

A corrupted table is refused with one clear line in the server log (its stderr, captured to a file) while the
other tables keep serving, and ``/readyz`` names what is missing. A build killed with SIGKILL leaves the table it
was replacing intact and no partial table; the next build removes what the killed one left behind.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.store import artifact
from tests.service.real_server import BIN, HTTP, Server, start

KEY = "faults-admin-key-0123456789"
ADMIN = {"x-api-key": KEY}
KILL_ROWS = 200_000


def truncate(directory: Path) -> str:
    vectors = directory / artifact.VECTORS
    vectors.write_bytes(vectors.read_bytes()[:-4096])
    return "bytes, manifest says"


def flip_byte(directory: Path) -> str:
    vectors = directory / artifact.VECTORS
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0x01
    vectors.write_bytes(bytes(data))
    return "sha256 differs from the manifest"


def lying_manifest(directory: Path) -> str:
    manifest = json.loads((directory / artifact.MANIFEST).read_text())
    manifest["rows"] -= 1  # every file checks out, but the manifest describes another table
    (directory / artifact.MANIFEST).write_text(json.dumps(manifest))
    return "manifest says 19999 x 50"


CORRUPTIONS: dict[str, Callable[[Path], str]] = {
    "truncated": truncate,
    "flipped": flip_byte,
    "lying": lying_manifest,
}


def neighbours(server: Server, table: str) -> list[int]:
    response = HTTP.get(f"{server.base}/v1/tables/{table}/neighbors", params={"token": "heart", "k": 8}, timeout=30)
    assert response.status_code == 200, response.text
    return [n["id"] for n in response.json()["neighbors"]]


def log_lines(server: Server, *fragments: str) -> list[str]:
    return [line for line in server.log().splitlines() if all(f in line for f in fragments)]


# --------------------------------------------------------------------------------------------- start-up
def test_corrupted_tables_are_refused_at_start_up(small_data_dir: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(small_data_dir / "small", data_dir / "good")
    expected = {}
    for name, corrupt in CORRUPTIONS.items():
        shutil.copytree(small_data_dir / "small", data_dir / name)
        expected[name] = corrupt(data_dir / name)
    server = start(data_dir, tmp_path / "server.log")
    try:
        ready = HTTP.get(f"{server.base}/readyz")
        assert ready.status_code == 503
        error = ready.json()["error"]
        assert error["code"] == "not_ready" and error["missing"] == sorted(CORRUPTIONS) and error["loaded"] == ["good"]
        assert all(name in error["message"] for name in CORRUPTIONS)
        for name, reason in expected.items():  # one clear line each: which table, which file, what is wrong
            [line] = log_lines(server, "ERROR", f"table {name!r} not loaded, skipped")
            assert "vectors.npy" in line and reason in line, line
            refused = HTTP.get(f"{server.base}/v1/tables/{name}/neighbors", params={"token": "heart"})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "not_ready"
        good = neighbours(server, "good")
        assert len(good) == 8
        assert HTTP.get(f"{server.base}/v1/tables").json()["unavailable"] == sorted(CORRUPTIONS)
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------- reload
@pytest.fixture
def served(small_data_dir: Path, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    data_dir = tmp_path / "data"
    for name in ("a", "b"):
        shutil.copytree(small_data_dir / "small", data_dir / name)
    server = start(data_dir, tmp_path / "server.log", env={"EMBEDDING_API_KEY": KEY})
    try:
        yield server, data_dir
    finally:
        server.stop()


def reload(server: Server) -> dict:
    response = HTTP.post(f"{server.base}/v1/admin/reload", headers=ADMIN, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_corrupted_rebuilds_are_refused_on_reload(
    served: tuple[Server, Path], small_data_dir: Path, tmp_path: Path
) -> None:
    server, data_dir = served
    before = neighbours(server, "b")
    for number, (kind, corrupt) in enumerate(CORRUPTIONS.items(), start=1):
        work = tmp_path / f"work-{kind}" / "b"
        shutil.copytree(small_data_dir / "small", work)
        reason = corrupt(work)
        artifact.publish(work, data_dir / "b")  # the new version takes the table's place on disk
        body = reload(server)
        assert body["refused"] == ["b"] and body["unchanged"] == ["a"] and body["ready"] is True, kind
        lines = log_lines(server, "ERROR", "table 'b': new files refused, still serving the version built at")
        assert len(lines) == number and reason in lines[-1], lines
        assert not log_lines(server, "table 'b' not loaded"), "one line: the version served is not withdrawn"
        ready = HTTP.get(f"{server.base}/readyz").json()
        assert ready["status"] == "ready" and ready["stale"] == ["b"]
        assert neighbours(server, "b") == before and len(neighbours(server, "a")) == 8

    shutil.copytree(data_dir / "a", tmp_path / "c")  # a new table that never loads
    flip_byte(tmp_path / "c")
    shutil.move(tmp_path / "c", data_dir / "c")
    body = reload(server)
    assert body["missing"] == ["c"] and body["ready"] is False
    assert log_lines(server, "ERROR", "table 'c' not loaded, skipped", "sha256 differs")
    ready = HTTP.get(f"{server.base}/readyz")
    assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["c"]
    assert "c" in ready.json()["error"]["message"]
    assert neighbours(server, "a") == before

    shutil.rmtree(data_dir / "c")  # taken away again: nothing is missing any more
    assert reload(server)["ready"] is True
    assert HTTP.get(f"{server.base}/readyz").status_code == 200


# -------------------------------------------------------------------------------- a builder killed
@pytest.fixture(scope="module")
def big_source(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> tuple[Path, Path]:
    """200,000 GloVe rows as a .npy matrix and its vocabulary: an import that writes ~60 MB of table files."""
    directory = tmp_path_factory.mktemp("big-source")
    np.save(directory / "vectors.npy", glove_raw.matrix[:KILL_ROWS], allow_pickle=False)
    (directory / "vocab.txt").write_text("\n".join(glove_raw.tokens[:KILL_ROWS]) + "\n")
    return directory / "vectors.npy", directory / "vocab.txt"


def small_source(glove_raw: RawTable, directory: Path) -> tuple[Path, Path]:
    """1,000 GloVe rows as a .npy matrix and its vocabulary."""
    np.save(directory / "small.npy", glove_raw.matrix[:1_000], allow_pickle=False)
    (directory / "small-vocab.txt").write_text("\n".join(glove_raw.tokens[:1_000]) + "\n")
    return directory / "small.npy", directory / "small-vocab.txt"


def importer(source: tuple[Path, Path], name: str) -> list[str]:
    matrix, vocab = source
    return [str(BIN / "embedding-index"), "import", str(matrix), "--vocab", str(vocab), "--name", name]


def test_a_killed_build_leaves_the_old_table_and_no_partial_one(
    big_source: tuple[Path, Path], glove_raw: RawTable, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    part = RawTable(tokens=glove_raw.tokens[:5_000], matrix=glove_raw.matrix[:5_000].copy())
    build_table(part, data_dir=data_dir, name="t", source={"format": "test", "path": "glove[:5000]"})
    manifest = (data_dir / "t" / artifact.MANIFEST).read_bytes()
    server = start(data_dir, tmp_path / "server.log", env={"EMBEDDING_API_KEY": KEY})
    try:
        before = neighbours(server, "t")
        command = [*importer(big_source, "t"), "--data-dir", str(data_dir), "--index", "flat", "--force"]
        builder = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        staged: list[Path] = []
        while not staged and builder.poll() is None:  # the import writes its files into .tmp-t-*
            staged = [p for p in data_dir.glob(".tmp-t-*") if (p / artifact.VECTORS).exists()]
            time.sleep(0.001)
        builder.send_signal(signal.SIGKILL)
        builder.wait()
        assert staged and builder.returncode == -signal.SIGKILL, "the build finished before it could be killed"

        # The old table is as it was, and nothing new became a table.
        assert (data_dir / "t" / artifact.MANIFEST).read_bytes() == manifest
        verification = artifact.verify(data_dir / "t")
        assert verification.ok, verification.problems
        assert artifact.list_tables(data_dir) == ["t"]
        assert [p.name for p in data_dir.iterdir() if p.name.startswith(".old-")] == []
        leftovers = sorted(p.name for p in data_dir.glob(".tmp-*"))
        assert leftovers == [staged[0].name]  # left by the killed build, never served
        body = reload(server)
        assert body["unchanged"] == ["t"] and body["loaded"] == [] and body["ready"] is True
        assert neighbours(server, "t") == before

        # The next build removes what the killed one left, then builds (a small table: its size is not the point).
        finished = subprocess.run(
            [*importer(small_source(glove_raw, tmp_path), "u"), "--data-dir", str(data_dir), "--index", "flat"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert finished.returncode == 0, finished.stderr
        assert list(data_dir.glob(".tmp-*")) == []
        assert artifact.list_tables(data_dir) == ["t", "u"]
        assert (data_dir / "t" / artifact.MANIFEST).read_bytes() == manifest and artifact.verify(data_dir / "t").ok
        assert reload(server)["loaded"] == ["u"]
        assert neighbours(server, "t") == before
    finally:
        server.stop()


def test_a_live_build_is_left_alone_and_a_half_published_one_is_restored(small_data_dir: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(small_data_dir / "small", data_dir / "t")
    # A rebuild killed between its two renames: the previous table is parked as .old-t-*, t itself is gone.
    (data_dir / "t").rename(data_dir / ".old-t-0123abcd")
    with artifact.staging(data_dir, "v") as live:  # a build that is still running holds its directory
        (live / "part").write_bytes(b"being written")
        done = artifact.recover(data_dir)
        assert live.exists() and (live / "part").exists()
        assert [p.name for p, _ in done] == [".old-t-0123abcd"]
        (live / "part").unlink()
        artifact.write_manifest(live, {"name": "v", "rows": 0, "dim": 0})
    assert artifact.verify(data_dir / "t").ok  # restored
    assert sorted(p.name for p in data_dir.iterdir()) == ["t", "v"]
