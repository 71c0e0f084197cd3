"""Tables damaged on disk while a server serves them: a file that is no file (a dangling link), a served file
written over or cut short in place. The server names the table and the file, withdraws what it can no longer
answer from faithfully, serves the other tables, and serves the table again once a good version is published.

Tables are built with the real builder from GloVe rows; the server is the app in-process (``client_for``) or the
real ``embedding-serve`` with two workers, whose mapped pages a cut file takes away (SIGBUS).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from index.build.sources import RawTable
from index.store import artifact
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.service.conftest import client_for
from tests.service.real_server import BIN, HTTP, running, start, wait_for
from tests.service.test_reload import ADMIN, KEY, build

ROWS = 3_000
KING = {"positive": ["king"], "k": 3, "exact": True}  # a POST: answered by a search, never by the answer cache


@pytest.fixture
def data_dir(tmp_path: Path, glove_raw: RawTable) -> Path:
    directory = tmp_path / "data"
    build(glove_raw, directory, "t", ROWS)
    build(glove_raw, directory, "u", 2_000)
    return directory


def written_over(path: Path, offset: int) -> None:
    """One byte of ``path`` changed in place (the same file, as an editor or ``dd conv=notrunc`` writes it)."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x40]))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))  # coarse clocks


def king_row(directory: Path) -> int:
    """The offset of a float of ``king``'s row (691 in GloVe's order) in ``vectors.npy``."""
    return os.path.getsize(directory / artifact.VECTORS) - ROWS * 50 * 4 + 691 * 50 * 4 + 3


def test_a_dangling_link_in_a_table_is_named_not_taken_for_a_removed_table(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table file that became a symbolic link to nothing: the table is refused naming the file, the other
    table serves; served, it keeps its version (stale), it is not said removed."""
    norms = data_dir / "t" / artifact.NORMS
    moved = norms.with_name("kept")
    norms.rename(moved)
    norms.symlink_to("/nonexistent/norms.npy")
    with caplog.at_level(logging.ERROR, logger="service.registry"), client_for(data_dir=data_dir) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["t"]
        assert client.post("/v1/tables/u/neighbors", json=KING).status_code == 200
        [line] = [r.getMessage() for r in caplog.records if "'t'" in r.getMessage()]
        assert "norms.npy: a symbolic link to /nonexistent/norms.npy, which is not a file" in line, line
        assert "no table of that name" not in line

    norms.unlink()
    moved.rename(norms)
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        norms.rename(moved)
        norms.symlink_to("/nonexistent/norms.npy")
        body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert (body["refused"], body["removed"]) == (["t"], []), body
        assert client.post("/v1/tables/t/neighbors", json=KING).status_code == 200  # its mapped files are whole


def test_a_served_file_written_over_in_place_withdraws_its_table(
    data_dir: Path, glove_raw: RawTable, caplog: pytest.LogCaptureFixture
) -> None:
    """A byte of a served table's vectors changed in place changes what the server maps: its answers would be
    wrong. The table is withdrawn at the next reload (503, /readyz), not served stale; a rebuild brings it back."""
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        before = client.post("/v1/tables/t/neighbors", json=KING).json()
        written_over(data_dir / "t" / artifact.VECTORS, king_row(data_dir / "t"))
        with caplog.at_level(logging.ERROR, logger="service.registry"):
            body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert (body["missing"], body["refused"], body["removed"], body["ready"]) == (["t"], [], [], False), body
        [line] = [r.getMessage() for r in caplog.records if "'t'" in r.getMessage()]
        assert "vectors.npy written over in place while it was served, withdrawn" in line, line
        assert "vectors.npy: sha256 differs from the manifest" in line
        answer = client.post("/v1/tables/t/neighbors", json=KING)
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "not_ready"
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["t"]
        assert client.post("/v1/tables/u/neighbors", json=KING).status_code == 200

        build(glove_raw, data_dir, "t", ROWS)  # published again: a new directory
        assert client.post("/v1/admin/reload", headers=ADMIN).json()["loaded"] == ["t"]
        assert client.post("/v1/tables/t/neighbors", json=KING).json() == before
        assert client.get("/readyz").status_code == 200


def answers(base: str, table: str) -> int | str:
    try:
        return HTTP.post(f"{base}/v1/tables/{table}/neighbors", json=KING, timeout=10).status_code
    except httpx.TransportError:
        return "dropped"  # the worker that took it died of the cut file (SIGBUS)


@pytest.mark.parametrize("damage", ["written over", "cut short"])
def test_a_real_server_withdraws_a_table_damaged_in_place_within_the_watch_interval(
    data_dir: Path, glove_raw: RawTable, tmp_path: Path, damage: str
) -> None:
    """Two workers watching the data directory: a served vectors file written over in place (no signal), or cut
    to half (a worker that touches the lost pages dies, its replacement refuses the table): within moments every
    answer for the table is 503 and /readyz says so on every worker, the other table serves throughout, and a
    rebuild is served again."""
    env = {"EMBEDDING_WATCH_SECONDS": "0.5"}
    with running(data_dir, tmp_path / "server.log", "--workers", "2", env=env) as server:
        vectors = data_dir / "t" / artifact.VECTORS
        if damage == "written over":
            written_over(vectors, king_row(data_dir / "t"))
        else:
            os.truncate(vectors, vectors.stat().st_size // 2)

        def withdrawn() -> bool:  # six answers in a row: both workers, whichever answers
            return all(
                answers(server.base, "t") == 503 and HTTP.get(f"{server.base}/readyz", timeout=10).status_code == 503
                for _ in range(6)
            )

        wait_for(withdrawn, seconds=30, what="the damaged table withdrawn by every worker")
        assert all(answers(server.base, "u") == 200 for _ in range(6))
        assert HTTP.get(f"{server.base}/readyz", timeout=10).json()["error"]["missing"] == ["t"]
        log = server.log()
        assert "vectors.npy" in log and "table 't'" in log
        if damage == "written over":
            assert "died" not in log, log[-3000:]  # seen by the watcher: nothing read the changed bytes to death

        build(glove_raw, data_dir, "t", ROWS)
        wait_for(lambda: all(answers(server.base, "t") == 200 for _ in range(6)), seconds=30, what="the rebuild served")


def test_a_shard_file_written_over_in_place_withdraws_the_sharded_table(
    tmp_path: Path, lee_docs: Lee, caplog: pytest.LogCaptureFixture
) -> None:
    """A sharded table served whole maps its shards' files: one of them written over in place withdraws it too
    (a shard's files are part of its table's identity), while a stray file added to a shard keeps it stale."""
    source = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee_docs))
    data = tmp_path / "data"
    command = [sys.executable, "-m", "index", "--quiet", "import", str(source), "--format", "documents"]
    subprocess.run([*command, "--name", "lee", "--shards", "2", "--data-dir", str(data)], check=True)
    search = {"vector": lee_docs.vectors[0].tolist(), "k": 3}
    with client_for(data_dir=data, api_key=KEY) as client:
        before = client.post("/v1/tables/lee/search", json=search).json()
        (data / "lee" / "shard-001" / "notes.txt").write_text("left by an operator")
        body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert (body["refused"], body["missing"]) == (["lee"], []), body
        assert client.post("/v1/tables/lee/search", json=search).json() == before

        vectors = data / "lee" / "shard-001" / artifact.VECTORS
        written_over(vectors, os.path.getsize(vectors) - 5)
        with caplog.at_level(logging.ERROR, logger="service.registry"):
            body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert (body["missing"], body["refused"], body["removed"]) == (["lee"], [], []), body
        [line] = [r.getMessage() for r in caplog.records if "written over" in r.getMessage()]
        assert "'lee'" in line and "shard-001/vectors.npy written over in place while it was served" in line, line
        assert client.post("/v1/tables/lee/search", json=search).status_code == 503


# Root reads any file: the server is then run without the capabilities that let it (as a service's user would be).
AS_A_USER = () if os.geteuid() else ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


@pytest.mark.skipif(bool(AS_A_USER) and shutil.which("setpriv") is None, reason="root, and no setpriv to drop it")
def test_what_the_server_may_not_read_is_named_in_one_line_and_the_rest_serves(
    data_dir: Path, glove_raw: RawTable, tmp_path: Path
) -> None:
    """A table file, and a whole table directory, the server's user may not read: each table refused in one line
    naming the file (a directory it may not look into stopped the server's start, every table with it)."""
    (data_dir / "t" / artifact.NORMS).chmod(0)
    build(glove_raw, data_dir, "v", 1_000)
    (data_dir / "v").chmod(0)
    serve = (*AS_A_USER, str(BIN / "embedding-serve"))
    server = start(data_dir, tmp_path / "server.log", serve=serve)
    try:
        ready = HTTP.get(f"{server.base}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["t", "v"]
        assert answers(server.base, "u") == 200
        log = server.log()
        said = "table 't' not loaded, skipped: table 't' disagrees with its manifest: norms.npy: unreadable (Permission"
        assert said in log and "Traceback" not in log, log[-3000:]
        assert "table 'v' not loaded, skipped: " in log and "v/manifest.json: unreadable manifest (" in log
    finally:
        server.stop()
        (data_dir / "v").chmod(0o755)  # for pytest to remove it


def test_what_the_data_directory_holds_that_cannot_be_served_is_said(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table copied under a name no request can give (non-ASCII), and two links that lead to each other, were
    passed over without a word: the server now says why each is not served, and serves the rest."""
    shutil.copytree(data_dir / "u", data_dir / "wörter")
    (data_dir / "a").symlink_to("b")
    (data_dir / "b").symlink_to("a")
    (data_dir / "T").symlink_to("t")  # upper case is a name like another: served
    with caplog.at_level(logging.WARNING, logger="service.registry"), client_for(data_dir=data_dir) as client:
        assert client.get("/readyz").json() == {"status": "ready", "loaded": ["T", "t", "u"], "missing": []}
    said = [r.getMessage() for r in caplog.records if "is not served" in r.getMessage()]
    assert said == [
        "'a' in the data directory is not served: a symbolic link to b, which leads to no table",
        "'b' in the data directory is not served: a symbolic link to a, which leads to no table",
        "'wörter' in the data directory is not served: a table's name is 1-64 letters, digits, '.', '_' or '-' "
        "(rename it)",
    ], said
