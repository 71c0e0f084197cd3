"""Reloading tables while the server runs: ``POST /v1/admin/reload`` (admin key) and SIGHUP, one or two workers.

Tables are built with the real builder from GloVe rows; a "version" of table ``t`` is its first N rows, so a
rebuild shows in ``rows`` and in which tokens exist.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.table import Table
from index.store import artifact
from service_client import ApiError, Client
from tests.index.build.test_embed_documents import import_texts
from tests.lee import Lee
from tests.service.conftest import client_for
from tests.service.real_server import HTTP, Server, running, start, wait_for

KEY = "admin-key-for-tests-0123456789"
ADMIN = {"x-api-key": KEY}
V1, V2 = 5_000, 6_000  # rows of the two versions of table t
ONLY_IN_V2 = 5_500  # a row id whose token exists in version 2 only
# The watch interval of the watching servers: a look is two stats, so a short one costs nothing and shortens
# every wait for a change and every wait that shows nothing more happens.
WATCH_SECONDS = 0.2
DEFAULT_WATCH_SECONDS = 2.0  # EMBEDDING_WATCH_SECONDS unset


def build(raw: RawTable, data_dir: Path, name: str, rows: int) -> dict:
    part = RawTable(tokens=raw.tokens[:rows], matrix=raw.matrix[:rows].copy())
    return build_table(
        part, data_dir=data_dir, name=name, source={"format": "test", "path": f"glove[:{rows}]"}, force=True
    )


def corrupt_rebuild(raw: RawTable, data_dir: Path, name: str, rows: int, work: Path) -> None:
    """Publish a new version of ``name`` whose vectors file disagrees with its manifest (one byte flipped)."""
    build(raw, work, name, rows)
    vectors = work / name / artifact.VECTORS
    data = bytearray(vectors.read_bytes())
    data[len(data) // 2] ^= 0x01
    vectors.write_bytes(bytes(data))
    artifact.publish(work / name, data_dir / name)


@pytest.fixture
def data_dir(tmp_path: Path, glove_raw: RawTable) -> Path:
    directory = tmp_path / "data"
    build(glove_raw, directory, "t", V1)
    build(glove_raw, directory, "u", 3_000)
    return directory


def rows(client, name: str = "t") -> int:  # type: ignore[no-untyped-def]
    return client.get(f"/v1/tables/{name}").json()["rows"]


def test_reload_swaps_in_a_rebuilt_table_and_keeps_the_rest(data_dir: Path, glove_raw: RawTable) -> None:
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        registry = client.app.state.registry
        old, unchanged = registry.tables["t"], registry.tables["u"]
        heart = client.get("/v1/tables/t/neighbors", params={"token": "heart", "k": 5}).json()
        assert rows(client) == V1

        build(glove_raw, data_dir, "t", V2)  # replaces the directory; the served version is still mapped
        assert rows(client) == V1
        assert client.get("/v1/tables/t/neighbors", params={"token": "heart", "k": 5}).json() == heart
        assert client.get("/v1/tables/t/ids/5500").status_code == 404

        report = client.post("/v1/admin/reload", headers=ADMIN)
        assert report.status_code == 200, report.text
        body = report.json()
        assert (body["loaded"], body["unchanged"], body["refused"], body["missing"], body["removed"]) == (
            ["t"],
            ["u"],
            [],
            [],
            [],
        )
        assert body["ready"] is True and body["other_workers_signalled"] is False
        assert rows(client) == V2
        assert client.get(f"/v1/tables/t/ids/{ONLY_IN_V2}").json()["token"] == glove_raw.tokens[ONLY_IN_V2]
        new_registry = client.app.state.registry
        assert new_registry is not registry and new_registry.tables["u"] is unchanged  # reused, not reloaded
        # A request that started before the swap holds the old Table: its files are gone from disk, still mapped.
        assert old.rows == V1
        assert [i for i, _ in old.most_similar([old.tokens.find("heart")], k=5)] == [
            n["id"] for n in heart["neighbors"]
        ]

        again = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert again["loaded"] == [] and again["unchanged"] == ["t", "u"]


def test_new_and_removed_tables(data_dir: Path, glove_raw: RawTable) -> None:
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        build(glove_raw, data_dir, "w", 2_000)
        shutil.rmtree(data_dir / "u")
        body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert body["loaded"] == ["w"] and body["removed"] == ["u"] and body["unchanged"] == ["t"]
        assert client.get("/v1/tables/w").json()["rows"] == 2_000
        assert client.get("/v1/tables/u").status_code == 404
        assert client.get("/readyz").json() == {"status": "ready", "loaded": ["t", "w"], "missing": []}


def test_a_data_directory_gone_is_said_missing(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A data directory moved away while the server runs is named missing (log and /readyz), not "no tables
    found"; its tables come back with it."""
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        data_dir.rename(data_dir.with_name("away"))
        with caplog.at_level(logging.WARNING, logger="service.registry"):
            assert client.post("/v1/admin/reload", headers=ADMIN).json()["removed"] == ["t", "u"]
        said = [r.getMessage() for r in caplog.records]
        assert f"the data directory {data_dir} is missing (moved or removed): no tables until it is back" in said
        assert not any("no tables found" in line for line in said), said
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["message"] == "the data directory is missing"
        data_dir.with_name("away").rename(data_dir)
        assert client.post("/v1/admin/reload", headers=ADMIN).json()["loaded"] == ["t", "u"]
        assert client.get("/readyz").status_code == 200


def test_refused_files_keep_the_previous_version(
    data_dir: Path, glove_raw: RawTable, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch
) -> None:
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        before = client.get("/v1/tables/t/neighbors", params={"token": "heart", "k": 5}).json()
        corrupt_rebuild(glove_raw, data_dir, "t", V2, tmp_path / "work")
        with caplog.at_level(logging.ERROR, logger="service.registry"):
            body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert body["refused"] == ["t"] and body["loaded"] == [] and body["ready"] is True
        [line] = [r.getMessage() for r in caplog.records if "new files refused" in r.getMessage()]
        assert "'t'" in line and "still serving the version built at" in line and "sha256" in line
        assert rows(client) == V1
        assert client.get("/v1/tables/t/neighbors", params={"token": "heart", "k": 5}).json() == before
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["stale"] == ["t"]

        loads: list[Path] = []
        real_load = Table.load.__func__  # type: ignore[attr-defined]
        monkeypatch.setattr(Table, "load", classmethod(lambda cls, d, **kw: loads.append(d) or real_load(cls, d, **kw)))
        assert client.post("/v1/admin/reload", headers=ADMIN).json()["refused"] == ["t"]
        assert loads == []  # the same refused files are not verified again

        build(glove_raw, data_dir, "t", V2)  # a good build ends it
        body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert body["loaded"] == ["t"] and body["refused"] == []
        assert rows(client) == V2
        assert "stale" not in client.get("/readyz").json()


def test_a_table_that_never_loaded_is_reported_missing_until_fixed(data_dir: Path, glove_raw: RawTable) -> None:
    (data_dir / "t" / artifact.NORMS).write_bytes(b"\x93NUMPY truncated")
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["t"]
        assert client.post("/v1/admin/reload", headers=ADMIN).json()["missing"] == ["t"]
        build(glove_raw, data_dir, "t", V1)
        body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert body["loaded"] == ["t"] and body["missing"] == [] and body["ready"] is True
        assert client.get("/readyz").status_code == 200


def test_a_table_of_another_format_version_is_refused_naming_the_command_that_builds_it_again(
    data_dir: Path, glove_raw: RawTable, caplog: pytest.LogCaptureFixture
) -> None:
    """A table whose manifest records another format version than this release reads (one built by a later
    release, served again by this one) is not loaded: the log names it, its format and the command that builds it
    again; the other tables serve, and once it is built again it loads."""
    path = data_dir / "t" / artifact.MANIFEST
    path.write_text(path.read_text().replace('"format_version": 1,', '"format_version": 2,', 1))
    with (
        caplog.at_level(logging.ERROR, logger="service.registry"),
        client_for(data_dir=data_dir, api_key=KEY) as client,
    ):
        [line] = [r.getMessage() for r in caplog.records if "'t'" in r.getMessage()]
        assert (
            "table 't' not loaded, skipped: table 't' " in line
            and "has format version 2, which this release does not read (it reads format version 1)" in line
            and f"`embedding-index import glove[:{V1}] --format test --name t --force`" in line
        ), line
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["t"]
        assert client.get("/v1/tables/t").json()["error"]["code"] == "not_ready"
        assert rows(client, "u") == 3_000
        build(glove_raw, data_dir, "t", V1)  # what the message says to do
        assert client.post("/v1/admin/reload", headers=ADMIN).json()["loaded"] == ["t"]
        assert rows(client) == V1


def test_admin_endpoints_need_the_admin_key(data_dir: Path) -> None:
    with client_for(data_dir=data_dir, api_key=KEY) as client:
        assert client.post("/v1/admin/reload").json()["error"]["code"] == "unauthorized"
        assert client.post("/v1/admin/reload").status_code == 401
        wrong = client.post("/v1/admin/reload", headers={"x-api-key": KEY[:-1]})
        assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "forbidden"
        assert client.post("/v1/admin/reload", headers={"x-api-key": KEY + "x"}).status_code == 403
        assert client.post("/v1/admin/reload", headers={"x-api-key": "é".encode()}).status_code == 403
        assert client.post("/v1/admin/reload", headers=ADMIN).status_code == 200
        assert client.get("/v1/admin/reload", headers=ADMIN).status_code == 405
        with pytest.raises(ApiError) as unkeyed:
            Client("http://testserver", http=client).reload()
        assert (unkeyed.value.status, unkeyed.value.code) == (401, "unauthorized")
        report = Client("http://testserver", http=client, api_key=KEY).reload()  # the key stays in client's headers
        assert report["unchanged"] == ["t", "u"] and report["loaded"] == [] and report["ready"] is True
    with client_for(data_dir=data_dir) as client:  # no EMBEDDING_API_KEY: admin endpoints are disabled
        for headers in ({}, ADMIN):
            refused = client.post("/v1/admin/reload", headers=headers)
            assert refused.status_code == 403
            assert "disabled" in refused.json()["error"]["message"]
            assert "EMBEDDING_API_KEY" in refused.json()["error"]["message"]


# ------------------------------------------------------------------------------------- the real server
def served_rows(base: str) -> int:
    return HTTP.get(f"{base}/v1/tables/t", timeout=10).json()["rows"]


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_reloads_every_worker(data_dir: Path, glove_raw: RawTable, tmp_path: Path, workers: int) -> None:
    server = start(data_dir, tmp_path / "server.log", "--workers", str(workers), "--threads", "1")
    try:
        assert served_rows(server.base) == V1
        build(glove_raw, data_dir, "t", V2)
        os.kill(server.process.pid, signal.SIGHUP)
        # Each worker logs its own reload; then every connection, whichever worker takes it, sees version 2.
        wait_for(lambda: server.log().count("reload: 1 loaded") == workers, what="every worker to reload")
        assert all(served_rows(server.base) == V2 for _ in range(20))
        assert server.process.poll() is None  # SIGHUP does not stop the server
    finally:
        server.stop()


@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_while_starting_stops_no_worker(data_dir: Path, tmp_path: Path, workers: int) -> None:
    sent = []

    def hup(server: Server) -> None:
        if "Started" in server.log():  # the process is up (no program handles a signal before it runs)
            os.kill(server.process.pid, signal.SIGHUP)
            sent.append(True)

    server = start(data_dir, tmp_path / "server.log", "--workers", str(workers), "--threads", "1", while_starting=hup)
    try:
        assert sent  # SIGHUPs from the start of the process to the last worker's start-up
        assert served_rows(server.base) == V1
        log = server.log()
        assert "died" not in log and log.count("Started server process") == workers  # no worker was replaced
        assert server.process.poll() is None
    finally:
        server.stop()


def test_http_reload_reaches_every_worker(data_dir: Path, glove_raw: RawTable, tmp_path: Path) -> None:
    server = start(
        data_dir, tmp_path / "server.log", "--workers", "2", "--threads", "1", env={"EMBEDDING_API_KEY": KEY}
    )
    try:
        build(glove_raw, data_dir, "t", V2)
        body = HTTP.post(f"{server.base}/v1/admin/reload", headers=ADMIN, timeout=60).json()
        assert body["loaded"] == ["t"] and body["other_workers_signalled"] is True
        # The worker that answered reloaded at once; the supervisor passes SIGHUP on to both (the answering
        # worker then finds nothing new). Two workers, two reloads that load t.
        wait_for(lambda: server.log().count("reload: 1 loaded") == 2, seconds=180, what="the other worker to reload")
        assert all(served_rows(server.base) == V2 for _ in range(20))
    finally:
        server.stop()


def test_a_watched_data_directory_is_served_without_a_signal(
    data_dir: Path, glove_raw: RawTable, tmp_path: Path
) -> None:
    """A table published into the data directory, rebuilt there, removed from it, or copied in file by file is
    served (or no longer) once the watcher looks, with no signal and no admin key."""
    seconds = WATCH_SECONDS
    server = start(data_dir, tmp_path / "server.log", env={"EMBEDDING_WATCH_SECONDS": str(seconds)})
    try:
        assert HTTP.get(f"{server.base}/v1/tables/new", timeout=10).status_code == 404
        # Built elsewhere and published into the data directory, as the builder publishes: one rename.
        build(glove_raw, tmp_path / "work", "new", 2_000)
        artifact.publish(tmp_path / "work" / "new", data_dir / "new")
        wait_for(lambda: HTTP.get(f"{server.base}/v1/tables/new", timeout=10).status_code == 200, what="the new table")
        build(glove_raw, data_dir, "t", V2)  # rebuilt in place
        wait_for(lambda: served_rows(server.base) == V2, what="the rebuilt table")
        shutil.rmtree(data_dir / "u")
        wait_for(
            lambda: HTTP.get(f"{server.base}/v1/tables/u", timeout=10).status_code == 404,
            what="the removed table to go",
        )
        # Copied in by hand, manifest first: refused at first, then served once the other files are there too.
        build(glove_raw, tmp_path / "work", "late", 1_000)
        (data_dir / "late").mkdir()
        shutil.copy(tmp_path / "work" / "late" / artifact.MANIFEST, data_dir / "late")
        wait_for(  # refused: its files are missing (a rebuild above may have been seen in more than one look)
            lambda: HTTP.get(f"{server.base}/v1/tables/late", timeout=10).status_code == 503,
            what="the manifest seen and its table refused",
        )
        for path in (tmp_path / "work" / "late").iterdir():
            shutil.copy(path, data_dir / "late")
        wait_for(
            lambda: HTTP.get(f"{server.base}/v1/tables/late", timeout=10).status_code == 200,
            what="the table whose files came after its manifest",
        )
        log = server.log()
        reloads = log.count("the data directory's tables changed: reloading them")
        assert reloads >= 5, log[-2000:]  # more if a look fell between two of the files copied
        assert "SIGHUP" not in log
        time.sleep(3 * seconds)  # nothing changes: no more reloads
        assert server.log().count("reloading them") == reloads
    finally:
        server.stop()


def test_watching_is_off_at_zero(data_dir: Path, glove_raw: RawTable, tmp_path: Path) -> None:
    server = start(data_dir, tmp_path / "server.log", env={"EMBEDDING_WATCH_SECONDS": "0"})
    started = time.monotonic()  # a watcher starts before the server answers
    try:
        build(glove_raw, data_dir, "t", V2)
        time.sleep(max(0.0, started + DEFAULT_WATCH_SECONDS + 0.5 - time.monotonic()))  # past a first look, its reload
        assert served_rows(server.base) == V1
        os.kill(server.process.pid, signal.SIGHUP)
        wait_for(lambda: served_rows(server.base) == V2, what="the reload SIGHUP asked for")
    finally:
        server.stop()


def test_a_change_a_signal_loaded_is_not_loaded_again(data_dir: Path, glove_raw: RawTable, tmp_path: Path) -> None:
    """A rebuild loaded by SIGHUP (as the background index build sends it) is what the watcher compares with next:
    it does not reload the same change a second time."""
    seconds = WATCH_SECONDS
    server = start(data_dir, tmp_path / "server.log", env={"EMBEDDING_WATCH_SECONDS": str(seconds)})
    try:
        build(glove_raw, data_dir, "t", V2)
        os.kill(server.process.pid, signal.SIGHUP)
        wait_for(lambda: served_rows(server.base) == V2, what="the reload SIGHUP asked for")
        looked = server.log().count("reloading them")  # 1 if a look fell between the build and the signal
        time.sleep(3 * seconds)
        log = server.log()
        assert log.count("reloading them") == looked, log[-2000:]
        assert log.count("reload: 1 loaded") == 1, log[-2000:]
    finally:
        server.stop()


def test_only_the_served_tables_are_watched(data_dir: Path, glove_raw: RawTable, tmp_path: Path) -> None:
    """A server given EMBEDDING_TABLES does not reload for a table it does not serve, and still does for its own."""
    seconds = WATCH_SECONDS
    env = {"EMBEDDING_WATCH_SECONDS": str(seconds), "EMBEDDING_TABLES": "t"}
    server = start(data_dir, tmp_path / "server.log", env=env)
    try:
        build(glove_raw, data_dir, "other", 1_000)
        build(glove_raw, data_dir, "u", 2_000)  # a table of the directory it does not serve, rebuilt
        time.sleep(4 * seconds)
        assert "reloading them" not in server.log()
        build(glove_raw, data_dir, "t", V2)
        wait_for(lambda: served_rows(server.base) == V2, what="the served table's rebuild")
        assert server.log().count("reloading them") == 1
    finally:
        server.stop()


def test_files_copied_in_after_a_refusal_are_a_change_the_next_look_sees(
    data_dir: Path, glove_raw: RawTable, tmp_path: Path
) -> None:
    """A refused table's files copied in between the reload that refused it and the picture taken after that
    reload: the picture marks the table unseen, so the next look differs from it and reloads."""
    from service.registry import Registry
    from service.watch import picture, unseen_since

    build(glove_raw, tmp_path / "work", "late", 1_000)
    (data_dir / "late").mkdir()
    shutil.copy(tmp_path / "work" / "late" / artifact.MANIFEST, data_dir / "late")
    registry = Registry.load(data_dir)
    assert "late" in registry.refused and "late" not in registry.tables
    unchanged = picture(data_dir, frozenset({"late"}))
    assert unseen_since(registry, unchanged) == unchanged  # nothing copied since: nothing to reload
    for path in (tmp_path / "work" / "late").iterdir():
        shutil.copy(path, data_dir / "late")
    now = picture(data_dir, frozenset({"late"}))
    seen = unseen_since(registry, now)
    assert dict(seen)["late"] is None and now != seen  # the next look (``now`` again) is a change
    assert {name: entry for name, entry in seen if name != "late"} == {n: e for n, e in now if n != "late"}


def test_a_documents_table_withdrawn_for_its_rebuilt_encoder_is_missing_not_removed(
    tmp_path: Path, small_data_dir: Path, lee_docs: Lee, glove_raw: RawTable, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    import_texts(data, small_data_dir, lee_docs, tmp_path / "lee.jsonl", name="leeenc")
    rows = artifact.read_manifest(data / "small")["rows"]
    with client_for(data_dir=data, api_key=KEY) as client:
        assert client.get("/readyz").json()["loaded"] == ["leeenc", "small"]
        build(RawTable(glove_raw.tokens, glove_raw.matrix[::-1].copy()), data, "small", rows)  # other vectors
        with caplog.at_level(logging.WARNING, logger="service.registry"):
            body = client.post("/v1/admin/reload", headers=ADMIN).json()
        assert (body["loaded"], body["missing"], body["removed"]) == (["small"], ["leeenc"], [])
        said = [r.getMessage() for r in caplog.records]
        assert any("'leeenc'" in line and "other vectors than table 'small'" in line for line in said), said
        assert not any("no longer in the data directory" in line for line in said), said


def test_swapped_out_versions_are_unmapped(data_dir: Path, glove_raw: RawTable, tmp_path: Path) -> None:
    """Every version a reload replaced, the first one loaded at start-up too, leaves the server's memory once no
    request holds it: none of its files stays mapped after they are deleted from disk."""

    def deleted_maps(server: Server) -> list[str]:
        with open(f"/proc/{server.process.pid}/maps") as maps:
            return [line.rstrip() for line in maps if str(data_dir) in line and line.rstrip().endswith("(deleted)")]

    with running(data_dir, tmp_path / "serve.log", env={"EMBEDDING_API_KEY": KEY}) as server:
        assert HTTP.get(f"{server.base}/v1/tables/t/neighbors", params={"token": "heart"}).status_code == 200
        for version in (V2, V1):
            build(glove_raw, data_dir, "t", version)
            assert HTTP.post(f"{server.base}/v1/admin/reload", headers=ADMIN).json()["loaded"] == ["t"]
            assert HTTP.get(f"{server.base}/v1/tables/t").json()["rows"] == version
        assert deleted_maps(server) == [], "\n".join(deleted_maps(server))


def test_a_table_with_a_write_log_stays_unchanged_reload_after_reload(data_dir: Path) -> None:
    """A table whose files did not change is kept as it is, however many reloads look at it, its write log too."""
    from index.store import writelog
    from service.registry import Registry

    log_file = writelog.log_path(data_dir, "u")
    log_file.parent.mkdir(exist_ok=True)
    log_file.touch()
    registry = Registry.load(data_dir)
    table = registry.tables["u"]
    for _ in range(3):
        registry, report = registry.reload()
        assert (report["loaded"], report["unchanged"]) == ([], ["t", "u"])
    assert registry.tables["u"] is table


def test_a_table_refused_for_want_of_a_descriptor_is_loaded_at_the_next_reload(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No descriptor left (ulimit -n) is the machine's passing want, no verdict on the table's files: said in one
    line naming the file, and the unchanged table loaded at the next reload rather than refused until it changes."""
    import errno

    from service import registry as registries

    load = Table.load
    path = str(data_dir / "u" / artifact.VECTORS)

    def no_descriptor(directory: Path, **options: object) -> Table:
        if Path(directory).name == "u":
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)
        return load(directory, **options)  # type: ignore[arg-type]

    with monkeypatch.context() as patched, caplog.at_level(logging.ERROR, logger="service.registry"):
        patched.setattr(registries.Table, "load", no_descriptor)
        loaded = registries.Registry.load(data_dir)
    assert set(loaded.tables) == {"t"}
    assert loaded.failed["u"] == f"{path}: Too many open files (tried again at the next reload)", loaded.failed
    assert "Traceback" not in caplog.text
    again, report = loaded.reload()
    assert set(again.tables) == {"t", "u"} and report["loaded"] == ["u"], report


def with_an_index(data_dir: Path, glove_raw: RawTable, name: str) -> Path:
    """Table ``name`` built again with an HNSW index (the tables of ``data_dir`` are too small for one): its path."""
    part = RawTable(tokens=glove_raw.tokens[:3_000], matrix=glove_raw.matrix[:3_000].copy())
    source = {"format": "test", "path": "glove[:3000]"}
    build_table(part, data_dir=data_dir, name=name, source=source, index_spec="hnsw:M=8", force=True)
    index = data_dir / name / artifact.INDEX
    assert index.is_file()
    return index


def no_descriptor_for(index: Path, wanting: Callable[[], bool] = lambda: True) -> Callable[..., Any]:
    """FAISS's ``read_index``, which opens ``index`` with every descriptor of the process taken (as under ``ulimit
    -n`` and many connections) while ``wanting()``, and given back once it has failed."""
    import errno

    import faiss

    read = faiss.read_index

    def read_index(path: str, *flags: int) -> Any:
        if path != str(index) or not wanting():
            return read(path, *flags)
        taken: list[int] = []
        try:
            while True:
                taken.append(os.open(os.devnull, os.O_RDONLY))
        except OSError as exc:
            assert exc.errno == errno.EMFILE
            return read(path, *flags)
        finally:
            for fd in taken:
                os.close(fd)

    return read_index


def test_an_index_faiss_could_not_open_for_want_of_a_descriptor_is_loaded_at_the_next_reload(
    data_dir: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAISS opens a table's index itself, and says a failed open with a RuntimeError of its own: with no
    descriptor left when it opens it, the table is refused for the passing want it is, and loaded at the next
    reload, not held damaged until its files change."""
    import faiss

    from service import registry as registries

    index = with_an_index(data_dir, glove_raw, "u")
    with monkeypatch.context() as patched:
        patched.setattr(faiss, "read_index", no_descriptor_for(index))
        loaded = registries.Registry.load(data_dir)
    assert set(loaded.tables) == {"t"} and loaded.passing == ["u"]
    assert loaded.failed["u"] == f"{index}: Too many open files (tried again at the next reload)", loaded.failed
    again, report = loaded.reload()
    assert set(again.tables) == {"t", "u"} and report["loaded"] == ["u"] and again.passing == [], report


def test_a_table_not_loaded_for_want_of_a_descriptor_is_tried_again_by_the_watcher(
    data_dir: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A want of descriptors passes with no change in the data directory: the watcher tries the table again (every
    ``PASSING_RETRY_SECONDS``), rather than leave it unserved until a signal or another table's change."""
    import faiss

    from service import watch

    index = with_an_index(data_dir, glove_raw, "u")
    wanting = [True]
    tries: list[float] = []

    def want() -> bool:
        tries.append(time.monotonic())
        return wanting[0]

    monkeypatch.setattr(faiss, "read_index", no_descriptor_for(index, want))
    monkeypatch.setattr(watch, "PASSING_RETRY_SECONDS", 5 * WATCH_SECONDS)  # a try at every fifth look
    with client_for(data_dir=data_dir, watch_seconds=WATCH_SECONDS) as client:
        assert client.get("/v1/tables/u").status_code == 503
        assert client.get("/v1/tables/t").status_code == 200
        time.sleep(15 * WATCH_SECONDS)  # the want lasts: tried again, but not at every look
        assert client.get("/v1/tables/u").status_code == 503
        assert 2 <= len(tries) <= 4, tries
        assert all(b - a >= 5 * WATCH_SECONDS for a, b in itertools.pairwise(tries)), tries
        wanting[0] = False  # connections closed: descriptors again
        wait_for(lambda: client.get("/v1/tables/u").status_code == 200, seconds=10, what="table u loaded")
        assert client.app.state.registry.passing == []


def test_a_table_slower_to_load_than_the_retry_is_tried_again_after_a_pause(
    data_dir: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A want that lasts, on a table whose load takes longer than ``PASSING_RETRY_SECONDS``: the retry waits that
    long from the end of the last load, not from its start (which would load it again and again without a pause)."""
    import faiss

    from service import watch

    index = with_an_index(data_dir, glove_raw, "u")
    tries: list[tuple[float, float]] = []  # each load's read of the index: its start and end

    def slow_want() -> bool:
        began = time.monotonic()
        time.sleep(6 * WATCH_SECONDS)  # a table this long to verify
        tries.append((began, time.monotonic()))
        return True

    monkeypatch.setattr(faiss, "read_index", no_descriptor_for(index, slow_want))
    monkeypatch.setattr(watch, "PASSING_RETRY_SECONDS", 5 * WATCH_SECONDS)
    with client_for(data_dir=data_dir, watch_seconds=WATCH_SECONDS) as client:
        time.sleep(30 * WATCH_SECONDS)
        assert client.get("/v1/tables/u").status_code == 503
    assert len(tries) >= 3, tries
    assert all(b[0] - a[1] >= 5 * WATCH_SECONDS for a, b in itertools.pairwise(tries)), tries


def test_the_retry_waits_from_the_end_of_a_reload_the_watcher_did_not_begin(
    data_dir: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload asked for by ``POST /v1/admin/reload`` (or SIGHUP) that loads the wanting table slowly: the watcher's
    next retry waits ``PASSING_RETRY_SECONDS`` from that reload's end too, not from the last load it began itself."""
    import faiss

    from service import watch

    index = with_an_index(data_dir, glove_raw, "u")
    slow = threading.Event()
    tries: list[tuple[float, float]] = []  # each load's read of the index: its start and end

    def want() -> bool:
        began = time.monotonic()
        if slow.is_set():
            time.sleep(12 * WATCH_SECONDS)  # the admin reload's load of the table, longer than the retry
        tries.append((began, time.monotonic()))
        return True

    monkeypatch.setattr(faiss, "read_index", no_descriptor_for(index, want))
    monkeypatch.setattr(watch, "PASSING_RETRY_SECONDS", 8 * WATCH_SECONDS)
    with client_for(data_dir=data_dir, api_key=KEY, watch_seconds=WATCH_SECONDS) as client:
        slow.set()
        assert client.post("/v1/admin/reload", headers=ADMIN).json()["refused"] == []
        slow.clear()
        ended = time.monotonic()
        time.sleep(12 * WATCH_SECONDS)
        assert client.get("/v1/tables/u").status_code == 503
    later = [began for began, _ in tries if began > ended]
    assert later and later[0] - ended >= 7 * WATCH_SECONDS, (ended, tries)
