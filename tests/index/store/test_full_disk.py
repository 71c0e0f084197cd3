"""A write that fails for want of space names the file it was writing, and the table it was replacing is intact.

The import runs as a real ``embedding-index`` process under a file size limit (RLIMIT_FSIZE), which fails its
writes past the limit as a full disk does (EFBIG instead of ENOSPC, the same path through the builder); and,
where the tests run as root, on a small tmpfs that fills up (ENOSPC itself)."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.store import artifact
from tests.conftest import small_raw
from tests.service.real_server import BIN

LIMIT = 1 << 20  # bytes: the new vectors (4 MB) do not fit


def source(directory: Path, raw: RawTable) -> list[str]:
    np.save(directory / "vectors.npy", raw.matrix, allow_pickle=False)
    (directory / "vocab.txt").write_text("\n".join(raw.tokens) + "\n")
    return [str(directory / "vectors.npy"), "--vocab", str(directory / "vocab.txt")]


def limited() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def full_import(data_dir: Path, args: list[str], preexec: Callable[[], None] | None) -> str:
    """Replace table ``t`` in ``data_dir`` by an import that cannot write its files; its stderr's last line."""
    return refused(data_dir, ["import", *args, "--name", "t", "--force"], preexec)


def refused(data_dir: Path, args: list[str], preexec: Callable[[], None] | None) -> str:
    """Run ``embedding-index ARGS`` over table ``t`` in ``data_dir``, which cannot write its files; its stderr's
    last line, once the table is checked as it was and nothing else is left."""
    before = (data_dir / "t" / artifact.MANIFEST).read_bytes()
    command = [str(BIN / "embedding-index"), *args, "--data-dir", str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, preexec_fn=preexec, check=False)
    assert done.returncode == 1, done.stderr
    assert (data_dir / "t" / artifact.MANIFEST).read_bytes() == before and artifact.verify(data_dir / "t").ok
    assert [p.name for p in data_dir.iterdir()] == ["t"]  # no partial table left behind
    return done.stderr.strip().splitlines()[-1]


def test_a_write_past_the_file_size_limit_names_the_file(tmp_path: Path, glove_raw: RawTable) -> None:
    data_dir = tmp_path / "data"
    build_table(small_raw(glove_raw, 2_000), data_dir=data_dir, name="t", source={"format": "test"})
    line = full_import(data_dir, source(tmp_path, small_raw(glove_raw)), limited)
    assert line.startswith(f"embedding-index: error: {data_dir}/.tmp-t-"), line
    assert f"/{artifact.VECTORS}: File too large: the file size limit (ulimit -f)" in line, line


def test_an_index_past_the_file_size_limit_names_its_file(tmp_path: Path, glove_raw: RawTable) -> None:
    """FAISS writes the index itself, and says a failed write with a RuntimeError of its own."""
    data_dir = tmp_path / "data"
    build_table(small_raw(glove_raw, 8_000), data_dir=data_dir, name="t", source={"format": "test"}, index_spec="flat")
    line = refused(data_dir, ["index", "t", "--index", "hnsw:M=16,efConstruction=40"], limited)
    assert line.startswith(f"embedding-index: error: {data_dir}/.tmp-t-"), line
    assert f"/{artifact.INDEX}: File too large: the file size limit (ulimit -f) (FAISS wrote " in line, line
    assert line.endswith(" bytes it was writing)"), line


def test_a_full_disk_names_the_file(tmp_path: Path, glove_raw: RawTable) -> None:
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small tmpfs needs root")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(data_dir)], check=False)
    if mounted.returncode != 0:
        pytest.skip("this system does not allow mounting a tmpfs")
    try:
        build_table(small_raw(glove_raw, 2_000), data_dir=data_dir, name="t", source={"format": "test"})
        line = full_import(data_dir, source(tmp_path, small_raw(glove_raw)), None)
        assert line.startswith(f"embedding-index: error: {data_dir}/.tmp-t-"), line
        assert f"/{artifact.VECTORS}: No space left on device" in line, line
    finally:
        subprocess.run(["umount", str(data_dir)], check=False)


def test_a_read_only_data_directory_is_refused_before_the_work(tmp_path: Path, glove_raw: RawTable) -> None:
    """A read-only data directory is said before the build's work (an index build may take many minutes), not
    when the build writes its first file; the table is left as it was."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a read-only bind mount needs root")
    data_dir = tmp_path / "data"
    build_table(small_raw(glove_raw, 8_000), data_dir=data_dir, name="t", source={"format": "test"}, index_spec="flat")
    before = (data_dir / "t" / artifact.MANIFEST).read_bytes()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n" * 50)
    mounts = [["mount", "--bind", str(data_dir), str(data_dir)], ["mount", "-o", "remount,bind,ro", str(data_dir)]]
    if any(subprocess.run(mount, check=False).returncode for mount in mounts):
        subprocess.run(["umount", str(data_dir)], check=False)
        pytest.skip("this system does not allow a read-only bind mount")
    try:
        commands = [
            ["index", "t", "--index", "hnsw:M=16,efConstruction=40"],
            ["sif", "t"],
            ["import", *source(tmp_path, small_raw(glove_raw)), "--name", "t", "--force", "--index", "hnsw"],
            ["train", str(corpus), "--name", "w", "--dim", "8", "--min-count", "1", "--epochs", "1", "--workers", "1"],
        ]
        for args in commands:
            command = [str(BIN / "embedding-index"), *args, "--data-dir", str(data_dir)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
            assert done.returncode == 1, done.stderr
            said = done.stderr.strip().splitlines()[-1]
            assert said == f"embedding-index: error: {data_dir}: Read-only file system: nothing was built", said
            for work in ("reading", "training", "adding rows", "SIF vectors"):  # nothing read, trained or built
                assert work not in done.stderr, done.stderr
    finally:
        subprocess.run(["umount", str(data_dir)], check=True)
    assert (data_dir / "t" / artifact.MANIFEST).read_bytes() == before
