"""Tables damaged on disk while a server serves them: a file that is no file (a dangling link). The server names
the table and the file and serves the other tables.

Tables are built with the real builder from GloVe rows; the server is the app in-process (``client_for``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from index.build.sources import RawTable
from index.store import artifact
from tests.service.conftest import client_for
from tests.service.test_reload import ADMIN, KEY, build

ROWS = 3_000
KING = {"positive": ["king"], "k": 3, "exact": True}  # a POST: answered by a search, never by the answer cache


@pytest.fixture
def data_dir(tmp_path: Path, glove_raw: RawTable) -> Path:
    directory = tmp_path / "data"
    build(glove_raw, directory, "t", ROWS)
    build(glove_raw, directory, "u", 2_000)
    return directory


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
