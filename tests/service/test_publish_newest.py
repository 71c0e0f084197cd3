"""Every publisher starts from the newest version: a background index build that began before ``embedding-index
sif`` published keeps the SIF component, so a documents table embedded with it keeps answering text queries. A
served documents table whose encoder lost what embedded it is not ready, and /readyz and the table list say so.

Real processes: ``embedding-serve`` with its deferred index build, ``embedding-index sif`` and ``import``. The
background build stops itself (SIGSTOP) once it has read the table, so that the other publishers finish first."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.progress import read_status
from index.store import artifact
from service import indexing
from tests.conftest import small_raw
from tests.index.build.test_embed_documents import without_vectors
from tests.lee import Lee, write_jsonl
from tests.service import real_server
from tests.service.real_server import BIN, HTTP

KEY = "publish-newest-admin-key-0123"
SPEC = "hnsw:M=16,efConstruction=40"


def builder_of(data_dir: Path) -> tuple[int, Path] | None:
    """The pid and status file of the background ``embedding-index index`` process working on ``data_dir``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"index" in argv and str(data_dir).encode() in argv and b"--status-file" in argv:
            return int(entry.name), Path(argv[argv.index(b"--status-file") + 1].decode())
    return None


def reached(status: Path, stage: str) -> bool:
    """The build is ``verifying`` the table, or has verified it and is ``building`` its index."""
    step = read_status(status) or {}
    verifying = "verifying" in str(step.get("step"))
    return step.get("state") == "running" and verifying == (stage == "verifying")


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP); a process that has ended fails the test, naming why."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        pytest.fail(f"the background build (pid {pid}) ended before it reached the stage the test waits for")
    return state == "T"


# The background build stops itself (SIGSTOP) as it announces ``stage`` in its status file, whatever the machine's
# load: a ``sitecustomize`` on the server's PYTHONPATH, which its child inherits, watches the status file's rename
# (an audit hook), writes what the rename would publish and stops the process before the build goes on.
STOP_AT_STAGE = """import json, os, signal, sys
STAGE = {stage!r}
if "--status-file" in sys.argv:
    STATUS = os.path.abspath(sys.argv[sys.argv.index("--status-file") + 1])
    SEEN = set()

    def stop_at_stage(event, args):
        if event != "os.rename" or "stopped" in SEEN:
            return
        try:
            if os.path.abspath(os.fsdecode(args[1])) != STATUS:
                return
            with open(args[0]) as source:
                text = source.read()
            step = json.loads(text)
        except Exception:
            return
        verifying = "verifying" in str(step.get("step"))
        SEEN.add("verifying" if verifying else "other")
        building = not verifying and "verifying" in SEEN
        if step.get("state") == "running" and (verifying if STAGE == "verifying" else building):
            with open(STATUS, "w") as status:
                status.write(text)
            SEEN.add("stopped")
            os.kill(os.getpid(), signal.SIGSTOP)

    sys.addaudithook(stop_at_stage)
"""


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "embedding-index"), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def search(server: real_server.Server) -> int:
    answer = HTTP.post(f"{server.base}/v1/tables/docs/search", json={"text": "fire in the bush", "k": 3}, timeout=30)
    return answer.status_code


@pytest.mark.parametrize("stage", ["verifying", "building"])
def test_a_background_build_keeps_the_extras_published_while_it_ran(
    tmp_path: Path, glove_raw: RawTable, lee_docs: Lee, stage: str
) -> None:
    data_dir = tmp_path / "data"
    source = {"format": "test", "path": "glove"}
    build_table(small_raw(glove_raw), data_dir=data_dir, name="w", source=source, index_spec=SPEC, defer_index=True)
    before_sif = tmp_path / "w-before-sif"
    shutil.copytree(data_dir / "w", before_sif)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(STOP_AT_STAGE.format(stage=stage))
    path = os.pathsep.join(filter(None, [str(hook), os.environ.get("PYTHONPATH")]))
    server = real_server.start(data_dir, tmp_path / "server.log", env={"EMBEDDING_API_KEY": KEY, "PYTHONPATH": path})
    pid = None
    try:
        real_server.wait_for(lambda: builder_of(data_dir) is not None, seconds=60, what="the background build")
        found = builder_of(data_dir)
        assert found is not None
        pid, status_file = found
        real_server.wait_for(
            lambda: stopped(pid) and reached(status_file, stage), seconds=120, what=f"the build to stop at {stage}"
        )
        # It read the version without SIF; it publishes after the others.
        assert json.loads((data_dir / "w" / artifact.MANIFEST).read_text())["index"]["deferred"]
        # What the build costs, as it reported it last (its nice level, elapsed and CPU seconds so far).
        build = HTTP.get(f"{server.base}/readyz", timeout=10).json()["building"]["w"]
        assert build["state"] == "running" and build["nice"] == indexing.CHILD_NICE, build
        assert build["elapsed_seconds"] > 0 and build["cpu_seconds"] > 0, build
        summary = HTTP.get(f"{server.base}/v1/tables/w", timeout=10).json()
        assert summary["building"]["nice"] == indexing.CHILD_NICE and summary["building"]["cpu_seconds"] > 0

        made = cli("sif", "w", "--data-dir", data_dir)
        assert made.returncode == 0, made.stderr
        docs = write_jsonl(tmp_path / "lee.jsonl", without_vectors(lee_docs))
        cmd = ("import", docs, "--format", "documents", "--name", "docs", "--encoder", "w", "--data-dir", data_dir)
        imported = cli(*cmd)
        assert imported.returncode == 0, imported.stderr
        reloaded = HTTP.post(f"{server.base}/v1/admin/reload", headers={"x-api-key": KEY}, timeout=120).json()
        assert reloaded["ready"] and sorted(reloaded["loaded"]) == ["docs", "w"], reloaded
        assert search(server) == 200

        os.kill(pid, signal.SIGCONT)

        def indexed() -> bool:
            summary = HTTP.get(f"{server.base}/v1/tables/w", timeout=10).json()
            assert summary.get("building", {}).get("state") != "failed", summary["building"]
            return bool(summary["approximate"]) and "building" not in summary

        real_server.wait_for(indexed, seconds=300, what="the background build to publish and be loaded")
        manifest = json.loads((data_dir / "w" / artifact.MANIFEST).read_text())
        assert manifest["index"]["spec"]["kind"] == "hnsw" and manifest["sif"] is not None, manifest
        assert artifact.verify(data_dir / "w").ok
        ready = HTTP.get(f"{server.base}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["loaded"] == ["docs", "w"], ready.text
        assert search(server) == 200

        # A version of the encoder without the SIF component the documents were embedded with: docs is not ready.
        work = data_dir / ".tmp-w-restored"
        shutil.copytree(before_sif, work)
        artifact.publish(work, data_dir / "w")
        reloaded = HTTP.post(f"{server.base}/v1/admin/reload", headers={"x-api-key": KEY}, timeout=120).json()
        assert reloaded["missing"] == ["docs"] and not reloaded["ready"], reloaded
        ready = HTTP.get(f"{server.base}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["error"]["missing"] == ["docs"], ready.text
        assert HTTP.get(f"{server.base}/v1/tables", timeout=10).json()["unavailable"] == ["docs"]
        [line] = [line for line in server.log().splitlines() if "table 'docs' not loaded" in line]
        assert "SIF component" in line and "`embedding-index sif w`" in line, line
    finally:
        if pid is not None:
            with_pid = Path(f"/proc/{pid}")
            if with_pid.exists():
                os.kill(pid, signal.SIGCONT)
        server.stop()


@pytest.fixture(autouse=True)
def _no_stray_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBEDDING_INDEX_STATUS_DIR", raising=False)
