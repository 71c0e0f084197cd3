"""The on-disk table: ``<data-dir>/<name>/`` with a manifest that names and checksums every file.

A table is written into a hidden temporary directory beside its final place and renamed into place, so a
build that fails or is killed leaves no table and never touches an existing table of that name. The loader
checks every file against the manifest and refuses a table that disagrees.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.errors import ArtifactError, InvalidQuery, UnknownTable
from index.progress import Progress

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
VECTORS = "vectors.npy"
NORMS = "norms.npy"
INDEX = "index.faiss"

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(name: str) -> str:
    """Return ``name`` if it is a safe table name (no path separators, no leading dot), else raise."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise InvalidQuery(
            f"invalid table name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def table_dir(data_dir: Path, name: str) -> Path:
    return Path(data_dir) / check_name(name)


def sha256_file(path: Path, chunk: int = 1 << 22, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
            if progress is not None:
                progress.advance(len(block))
    return digest.hexdigest()


def list_tables(data_dir: Path) -> list[str]:
    """Names of the table directories (with a manifest) under ``data_dir``, sorted."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        return []
    return sorted(p.name for p in data_dir.iterdir() if NAME_PATTERN.fullmatch(p.name) and (p / MANIFEST).is_file())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def staging(data_dir: Path, name: str, force: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success publish it as ``<data_dir>/<name>`` atomically.

    On any failure (or interruption) the temporary directory is removed and an existing table of the same
    name is left as it was.
    """
    final = table_dir(data_dir, name)
    if final.exists() and not force:
        raise ArtifactError(f"table {name!r} already exists in {data_dir} (use --force to rebuild it)")
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(data_dir) / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    lock = os.open(tmp, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)  # held while building: clean_stale leaves a live build's directory alone
    try:
        yield tmp
        for child in tmp.iterdir():
            with open(child, "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(tmp)
        publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(lock)


def publish(tmp: Path, final: Path) -> None:
    """Move a finished table directory into place, replacing an older one with two renames."""
    if final.exists():
        old = final.with_name(f".old-{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
    _fsync_dir(final.parent)


def _in_use(path: Path) -> bool:
    """A build that is still running holds a lock on its temporary directory (released when it dies)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def clean_stale(data_dir: Path) -> list[Path]:
    """Remove temporary directories left by builds that were killed; return what was removed."""
    removed = []
    building = set()  # tables a live build is writing: their directories are left alone
    for p in Path(data_dir).glob(".tmp-*"):
        if _in_use(p):
            building.add(p.name[len(".tmp-") :].rsplit("-", 1)[0])
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    # A rebuild killed between its two renames leaves the previous table under .old-*: put it back.
    for p in Path(data_dir).glob(".old-*"):
        name = p.name[len(".old-") :].rsplit("-", 1)[0]
        if name in building:  # a live rebuild is between its two renames
            continue
        target = Path(data_dir) / name
        if not target.exists():
            os.rename(p, target)
        else:
            shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def write_manifest(directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Checksum every file in ``directory`` into ``manifest['files']`` and write ``manifest.json``."""
    files = {}
    children = [child for child in sorted(directory.iterdir()) if child.name != MANIFEST]
    with Progress("checksums", sum(child.stat().st_size for child in children), "bytes") as progress:
        for child in children:
            files[child.name] = {"bytes": child.stat().st_size, "sha256": sha256_file(child, progress=progress)}
    manifest = {"format_version": FORMAT_VERSION, **manifest, "files": files}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        raise UnknownTable(f"no table at {directory.name!r}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{path}: unsupported format version {manifest.get('format_version')!r}")
    return manifest


@dataclass(frozen=True)
class Verification:
    ok: bool
    problems: list[str]


def verify(directory: Path, checksums: bool = True, progress: Callable[[int], None] | None = None) -> Verification:
    """Compare the files of a table with its manifest: presence, sizes, and (by default) sha256."""
    manifest = read_manifest(directory)
    problems = []
    listed = manifest.get("files", {})
    for name, info in listed.items():
        path = directory / name
        if not path.is_file():
            problems.append(f"{name}: missing")
            continue
        size = path.stat().st_size
        if size != info.get("bytes"):
            problems.append(f"{name}: {size} bytes, manifest says {info.get('bytes')}")
            continue
        if checksums and sha256_file(path) != info.get("sha256"):
            problems.append(f"{name}: sha256 differs from the manifest")
        if progress:
            progress(size)
    for child in directory.iterdir():
        if child.name != MANIFEST and child.name not in listed:
            problems.append(f"{child.name}: not listed in the manifest")
    if VECTORS in listed and not problems:
        shape = np.load(directory / VECTORS, mmap_mode="r").shape
        if shape != (manifest.get("rows"), manifest.get("dim")):
            problems.append(f"{VECTORS}: shape {shape}, manifest says {manifest.get('rows')} x {manifest.get('dim')}")
    return Verification(ok=not problems, problems=problems)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def republish(
    data_dir: Path,
    name: str,
    manifest: dict[str, Any],
    write: Callable[[Path], None],
    replaced: Collection[str],
    changes: dict[str, Any],
    what: str,
) -> dict[str, Any]:
    """Publish the next version of table ``name`` (whose manifest is ``manifest``): its files but ``replaced``
    linked (or copied) unchanged, ``write(staging_directory)`` writing the new ones, the manifest updated with
    ``changes``. The current version serves until the new one is renamed into place, and stays as it was if
    anything fails, or if the table was rebuilt meanwhile (``what`` says what was being done)."""
    directory = table_dir(data_dir, name)
    with staging(data_dir, name, force=True) as tmp:
        for child in directory.iterdir():
            if child.name != MANIFEST and child.name not in replaced:
                _link_or_copy(child, tmp / child.name)
        write(tmp)
        kept = {k: v for k, v in manifest.items() if k not in ("format_version", "files", *changes)}
        published = write_manifest(tmp, {**kept, **changes})
        if read_manifest(directory).get("built_at") != manifest.get("built_at"):
            raise ArtifactError(f"table {name!r} was rebuilt while {what}; nothing replaced")
    return published


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # same file system (the staging directory is beside the table): no copy
    except OSError:
        shutil.copy2(source, target)
