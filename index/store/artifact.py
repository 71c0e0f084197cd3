"""The on-disk table: ``<data-dir>/<name>/`` with a manifest that names and checksums every file.

A table is written into a hidden temporary directory beside its final place and published in one step: a new
table is renamed into place; a new version is exchanged with the current one (Linux ``renameat2`` with
``RENAME_EXCHANGE``), so that the table's name holds a complete version at every instant, the old one or the
new one. A build that fails or is killed leaves no table and never touches an existing table of that name. Where
the file system cannot exchange, the old version is renamed aside first and :func:`recover` (run by every build,
by ``verify`` and by the server at start-up) puts it back if the publisher died between the two renames. Every
publish holds the data directory's lock, under which a new version is completed from the newest one
(:func:`republish`). The loader checks every file against the manifest and refuses a table that disagrees.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import resource
import shutil
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
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
GRAPH = "model.onnx"  # the graph's file in a table's directory
SIF_COMPONENT = "sif_component.npy"  # a word table's common component (float64, unit length)

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(name: str) -> str:
    """Return ``name`` if it is a safe table name (no path separators, no leading dot), else raise."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        raise InvalidQuery(
            f"invalid table name {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


# What a command line run published or removed, said if it is interrupted after (None: not recorded, as in a server)
changed: list[str] | None = None


def _did(what: str) -> None:
    if changed is not None:
        changed.append(what)


def table_dir(data_dir: Path, name: str) -> Path:
    return Path(data_dir) / check_name(name)


def is_taken(data_dir: Path, name: str) -> bool:
    """True when table ``name`` exists. Anything else of that name (a folder of one's own, a file) is refused: a
    table published over it, ``--force`` or not, would delete what it holds."""
    path = table_dir(data_dir, name)
    if not os.path.lexists(path):
        return False
    if not (path / MANIFEST).is_file():
        raise ArtifactError(f"{path}: not a table (no {MANIFEST}), never replaced, even with --force: move it away")
    return True


def check_writable(data_dir: Path) -> None:
    """Refuse a data directory this process cannot write (a read-only mount, another user's directory) before the
    work of a build, which would find it out only when it writes its first file; a directory still to be made is
    judged by the nearest one that exists. A full disk cannot be told ahead: a write that finds it names its file."""
    existing = Path(os.path.abspath(data_dir))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if os.access(existing, os.W_OK | os.X_OK):
        return
    code = errno.EROFS if os.statvfs(existing).f_flag & os.ST_RDONLY else errno.EACCES
    raise OSError(code, f"{os.strerror(code)}: nothing was built", str(existing))


def check_free(data_dir: Path, name: str, force: bool) -> None:
    """Refuse to publish table ``name`` over an existing one without ``force`` (over anything else, always)."""
    if is_taken(data_dir, name) and not force:
        raise ArtifactError(f"table {name!r} already exists in {data_dir} (use --force to rebuild it)")


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
    return sorted(p.name for p in data_dir.iterdir() if NAME_PATTERN.fullmatch(p.name) and _holds_manifest(p))


def _holds_manifest(directory: Path) -> bool:
    """Whether ``directory`` holds a table's manifest; True when it may not be looked into (no permission): a
    table that its reader then refuses, saying why, rather than one passed over."""
    try:
        return (directory / MANIFEST).is_file()
    except OSError:
        return True


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def publish_lock(data_dir: Path) -> Iterator[None]:
    """Held while a version is completed and published, and while :func:`recover` looks at the data directory:
    one publisher at a time sees the newest version and replaces it."""
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def staging(
    data_dir: Path, name: str, force: bool = False, complete: Callable[[Path], None] | None = None
) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success publish it as ``<data_dir>/<name>`` atomically.

    ``complete(directory)``, if given, runs under the publish lock just before the swap (it may refuse by raising).
    On any failure (or interruption) the temporary directory is removed and an existing table of the same
    name is left as it was. An error without a file name (a full disk) is given the name of the file it stopped.
    """
    final = table_dir(data_dir, name)
    check_free(data_dir, name, force)
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(data_dir) / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    with publish_lock(data_dir):
        lock = _made_and_locked(tmp)
    try:
        try:
            yield tmp
            with publish_lock(data_dir):
                check_free(data_dir, name, force)  # another build may have published the name meanwhile
                if complete is not None:
                    complete(tmp)
                if final.exists():
                    _continue_log(final, tmp)
                for child in tmp.iterdir():
                    if child.is_dir():  # a sharded table's shard, published into it (and synced) already
                        fsync_dir(child)
                        continue
                    with open(child, "rb") as handle:
                        os.fsync(handle.fileno())
                fsync_dir(tmp)
                publish(tmp, final)
        except OSError as exc:
            if exc.filename is None:  # a write that failed (no space left, a file size limit): say which file
                raise _named(exc, _newest(tmp)) from exc
            raise
    finally:
        delete(tmp, ignore_errors=True)  # after an exchange, the older version (a link if the table was one)
        os.close(lock)


def remove(data_dir: Path, name: str) -> None:
    """Delete table ``name`` in one step: moved into a hidden temporary directory under the publish lock (the name
    holds the whole table until then, and nothing after), then deleted, the directory locked as a live build's is,
    so that :func:`recover` leaves it alone; stopped midway, :func:`recover` finishes it. A table that is a symbolic
    link loses its link only."""
    final = table_dir(data_dir, name)
    hidden = Path(data_dir) / f".tmp-{name}-{uuid.uuid4().hex[:8]}"
    with publish_lock(data_dir):
        if not (final / MANIFEST).is_file():  # removed by another process meanwhile
            raise UnknownTable(f"no table at {name!r}")
        lock = _made_and_locked(hidden)
        try:
            os.rename(final, hidden / name)
        except BaseException:
            os.close(lock)
            hidden.rmdir()
            raise
        _did(f"table {name!r} was removed (its files are deleted by the next build, verify or server start)")
    try:
        shutil.rmtree(hidden)
    finally:
        os.close(lock)


def _made_and_locked(directory: Path) -> int:
    """Make ``directory`` and lock it (under the publish lock: :func:`recover` never sees it unlocked), for as long
    as the returned descriptor is open: :func:`recover` leaves a live build's or removal's directory alone."""
    directory.mkdir()
    lock = os.open(directory, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def delete(path: Path, ignore_errors: bool = False) -> None:
    """Delete a directory and its files; a symbolic link (a table linked from elsewhere) is unlinked, what it points
    to left as it is."""
    if not path.is_symlink():
        shutil.rmtree(path, ignore_errors=ignore_errors)
        return
    try:
        path.unlink()
    except OSError:
        if not ignore_errors:
            raise


def _continue_log(final: Path, tmp: Path) -> None:
    """A version published over another one of the table continues its write log's numbering: when it does not set
    the sequence it holds (``log_sequence``: a compaction's, a republish's), it keeps the replaced version's, so the
    log's later writes are replayed over it and the next ones numbered after them (a re-import's, ``--force``)."""
    try:
        older = read_manifest(final).get("log_sequence")
    except (UnknownTable, ArtifactError):  # the name held a damaged table: nothing to continue
        return
    path = tmp / MANIFEST
    manifest = json.loads(path.read_text())
    # A documents table's own log only: a sharded table's shards keep their own logs' sequences.
    if older is not None and manifest.get("kind") == "documents" and "log_sequence" not in manifest:
        path.write_text(json.dumps({**manifest, "log_sequence": older}, indent=2, ensure_ascii=False) + "\n")


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` with the file it failed to write; a short write without an error number (numpy's) gets its cause."""
    if exc.errno is not None:
        return type(exc)(exc.errno, exc.strerror, str(path))
    try:
        space = os.statvfs(path.parent)
        free = (space.f_bfree if os.geteuid() == 0 else space.f_bavail) * space.f_frsize
        size = path.stat().st_size
    except OSError:
        return OSError(errno.EIO, str(exc), str(path))
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if free < 1 << 16:
        return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({exc})", str(path))
    if limit != resource.RLIM_INFINITY and size >= limit:
        return OSError(errno.EFBIG, f"{os.strerror(errno.EFBIG)}: the file size limit (ulimit -f) ({exc})", str(path))
    return OSError(errno.EIO, str(exc), str(path))


def _newest(directory: Path) -> Path:
    """The file of ``directory`` written last (the one a failed write was writing), else the directory."""
    try:
        files = [(child.stat().st_mtime_ns, child) for child in directory.iterdir()]
    except OSError:
        return directory
    return max(files)[1] if files else directory


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (``renameat2(RENAME_EXCHANGE)``); False where the system or file system cannot."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux, or a C library without it
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def publish(tmp: Path, final: Path) -> None:
    """Move a finished table directory into place. An older version is exchanged with it in one step (then ``tmp``
    holds the older version, removed here); where the file system cannot exchange, it is renamed aside first."""
    old = tmp
    if not final.exists():
        os.rename(tmp, final)
    elif not _exchange(tmp, final):
        old = final.with_name(f".old-{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
        os.rename(tmp, final)  # killed before this, recover() puts the old version back
    if not any(part.startswith(".tmp-") for part in final.parts):  # a table's, not a shard's into its table's
        _did(f"table {final.name!r} was published")
    fsync_dir(final.parent)
    delete(old, ignore_errors=True)


def try_lock(fd: int) -> bool:
    """Whether the exclusive lock of the file open as ``fd`` was taken at once (False: another process holds it)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _in_use(path: Path) -> bool:
    """A build that is still running holds a lock on its temporary directory (released when it dies)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return not try_lock(fd)
    finally:
        os.close(fd)


def recover(data_dir: Path) -> list[tuple[Path, str]]:
    """Finish what killed publishers left in ``data_dir``: (path, what was done) for each leftover.

    A temporary directory that no live build holds is removed (an unfinished build, or the older version a
    publish swapped out). A version parked as ``.old-<name>-*`` by a publish that died between its two renames
    is put back under its name (the unfinished new version is discarded). A leftover that cannot be changed (a
    read-only mount) is reported, not fixed."""
    data_dir = Path(data_dir)
    done: list[tuple[Path, str]] = []
    if not data_dir.is_dir():
        return done
    with publish_lock(data_dir):
        for p in sorted(data_dir.glob(".tmp-*")):
            if not _in_use(p):
                done.append((p, _attempt(delete, p, None, "removed, left by a build that did not finish")))
        for p in sorted(data_dir.glob(".old-*")):
            target = data_dir / p.name[len(".old-") :].rsplit("-", 1)[0]
            if target.exists():
                done.append((p, _attempt(delete, p, None, "removed, an older version already replaced")))
            else:
                what = f"restored as {target.name!r}: a publish was interrupted, the previous version serves"
                done.append((p, _attempt(os.rename, p, target, what)))
    return done


def _attempt(action: Callable[..., object], path: Path, target: Path | None, what: str) -> str:
    try:
        action(path) if target is None else action(path, target)
    except OSError as exc:
        return f"left as it is ({exc.strerror}); run `embedding-index verify` where the data directory is writable"
    return what


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
    try:
        if not path.is_file():
            raise UnknownTable(f"no table at {directory.name!r}")
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"{path}: unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{path}: not a table's manifest (a JSON object)")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(other_format(directory, manifest))
    for key, kind, what in _REQUIRED:
        value = manifest.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ArtifactError(f"{path}: {key!r} is {'missing' if value is None else repr(value)}, not {what}")
    for name, info in manifest["files"].items():
        if "/" in name or name in (".", "..", MANIFEST):
            raise ArtifactError(f"{path}: lists {name!r}, not the name of a file of the table's directory")
        if not (isinstance(info, dict) and isinstance(info.get("bytes"), int) and isinstance(info.get("sha256"), str)):
            raise ArtifactError(f"{path}: the entry of file {name!r} is {info!r}, not its bytes and sha256")
    return manifest


# What every table's manifest holds, checked when it is read: a manifest damaged or edited by hand is refused
# naming the field, not failed on later inside the loader.
_REQUIRED = (
    ("name", str, "the table's name"),
    ("rows", int, "a number of rows"),
    ("dim", int, "a number of dimensions"),
    ("files", dict, "the table's files by name"),
)


def other_format(directory: Path, manifest: dict[str, Any]) -> str:
    """Why the table in ``directory`` whose ``manifest`` records another format version than this release's is
    refused, and the command that builds it again from the source its manifest names (a shard's: its sharded
    table's)."""
    version = manifest.get("format_version")
    has = "no format version" if version is None else f"format version {version!r}"
    return (
        f"table {directory.name!r} ({directory}) has {has}, which this release does not read (it reads format "
        f"version {FORMAT_VERSION}): {_build_again(directory, manifest)}, or serve it with the release that built it"
    )


def _build_again(directory: Path, manifest: dict[str, Any]) -> str:
    """What to do with the table in ``directory`` that this release cannot serve: the command that builds it (a
    shard: its sharded table) from the source its ``manifest`` names."""
    whole = _sharded_owner(directory)
    table, built = (directory.parent.name, whole) if whole is not None else (directory.name, manifest)
    return (
        f"build {'its sharded table' if whole else 'it'} again with this release, `{_build_command(table, built)}` "
        "(with the options it was built with)"
    )


def _sharded_owner(directory: Path) -> dict[str, Any] | None:
    """The manifest of the sharded table ``directory`` is a shard of, as it reads (None: it is none's)."""
    try:
        owner = json.loads((directory.parent / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    shards = owner.get("shards") if isinstance(owner, dict) and owner.get("kind") == "sharded" else None
    return owner if isinstance(shards, dict) and directory.name in (shards.get("names") or ()) else None


def _build_command(name: str, manifest: dict[str, Any]) -> str:
    """The command that builds table ``name`` from the source its ``manifest`` names (of any release's shape)."""
    source, shards = manifest.get("source"), manifest.get("shards")
    source = source if isinstance(source, dict) else {}
    form, path = source.get("format"), source.get("path") or "SOURCE"
    if form == "glove-package":
        return f"embedding-index build --name {name} --force"
    if form == "word2vec-training":
        corpus = " ".join(map(str, path)) if isinstance(path, list) else path
        return f"embedding-index train {corpus} --name {name} --force"
    count = shards.get("count") if isinstance(shards, dict) and manifest.get("kind") == "sharded" else None
    return " ".join(
        ["embedding-index import", str(path), *([f"--format {form}"] if form else []), f"--name {name}"]
        + ([f"--shards {count}"] if count else [])
        + ["--force"]
    )


@dataclass(frozen=True)
class Verification:
    ok: bool
    problems: list[str]


def verify(directory: Path, checksums: bool = True, progress: Callable[[int], None] | None = None) -> Verification:
    """Compare the files of a table with its manifest: presence, sizes, and (by default) sha256."""
    manifest = read_manifest(directory)
    listed = manifest.get("files", {})
    problems = file_problems(directory, listed, checksums, progress)
    if VECTORS in listed and not problems:
        shape = np.load(directory / VECTORS, mmap_mode="r").shape
        if shape != (manifest.get("rows"), manifest.get("dim")):
            problems.append(f"{VECTORS}: shape {shape}, manifest says {manifest.get('rows')} x {manifest.get('dim')}")
        elif moved := column_major(directory, manifest):
            problems.append(moved)
    return Verification(ok=not problems, problems=problems)


def column_major(directory: Path, manifest: dict[str, Any]) -> str | None:
    """Why this release does not serve the table in ``directory`` whose vectors an earlier release stored
    column-major (as a column-major source came), with the command that builds it again (None: they are not)."""
    try:
        vectors = np.load(directory / VECTORS, mmap_mode="r")
    except (OSError, ValueError):  # missing or damaged: its verification says so
        return None
    if vectors.ndim != 2 or vectors.flags.c_contiguous:
        return None
    return (
        f"{VECTORS}: its rows are stored column-major (Fortran order), as an earlier release kept a column-major "
        f"source; this release maps rows whole: {_build_again(directory, manifest)}"
    )


def file_problems(
    directory: Path,
    listed: dict[str, Any],
    checksums: bool = True,
    progress: Callable[[int], None] | None = None,
    beside: Collection[str] = (),
) -> list[str]:
    """What disagrees with the manifest's ``listed`` files (name -> bytes, sha256) in ``directory``: a file missing,
    of another size or (``checksums``) another sha256, and one there that it does not list (``beside`` apart);
    ``progress(bytes)`` after each file that was there whole."""
    problems = []
    for name, info in listed.items():
        path = directory / name
        if not path.is_file():
            problems.append(f"{name}: {_not_a_file(path)}")
            continue
        size = path.stat().st_size
        if size != info.get("bytes"):
            problems.append(f"{name}: {size} bytes, manifest says {info.get('bytes')}")
            continue
        try:
            if checksums and sha256_file(path) != info.get("sha256"):
                problems.append(f"{name}: sha256 differs from the manifest")
        except OSError as exc:  # no read permission, an I/O error of the disk
            problems.append(f"{name}: unreadable ({exc.strerror})")
            continue
        if progress:
            progress(size)
    for child in directory.iterdir():
        if child.name != MANIFEST and child.name not in listed and child.name not in beside:
            problems.append(f"{child.name}: not listed in the manifest")
    return problems


def _not_a_file(path: Path) -> str:
    """What ``path``, where a table's file should be, is instead."""
    if path.is_symlink():
        return f"a symbolic link to {os.readlink(path)}, which is not a file"
    return "a directory, not a file" if path.is_dir() else "missing"


def identity(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Each file of the table in ``directory`` (a sharded table's shards' too, as ``shard-000/...``) by its inode,
    size and mtime: what a file written over in place changes, and a version published under the name replaces."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            st = path.stat()
            found[str(path.relative_to(directory))] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return found


def sif_file(info: dict[str, Any]) -> str:
    """The file of a table's SIF component, from its manifest's ``sif`` entry."""
    return str(info.get("file", SIF_COMPONENT))


def directory_identity(directory: Path) -> tuple[int, int] | None:
    """The directory at ``directory`` (device, inode): every version published in a table's place is another one
    (exchanged, or renamed in); None: there is none (removed, or between a publisher's two renames)."""
    try:
        found = os.stat(directory)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


class Opened:
    """Files of a loaded version that are read after its load (a tokenizer, a model graph), opened at the load and
    read later through their descriptors: a version published under the table's name since then (its directory
    exchanged, the old one deleted) leaves them the loaded version's. Closed when nothing holds this any more."""

    def __init__(self, directory: Path, names: Iterable[str]) -> None:
        self._fds: dict[str, int] = {}
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # the version has none
                self._fds[name] = os.open(directory / name, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, _close, list(self._fds.values()))

    def path(self, name: str) -> Path | None:
        """A path that opens the loaded version's file ``name`` (Linux's /proc/self/fd), None when it has none."""
        fd = self._fds.get(name)
        return None if fd is None else Path(f"/proc/self/fd/{fd}")

    def needed(self, name: str) -> Path:
        """:meth:`path` of a file the version must have."""
        found = self.path(name)
        if found is None:
            raise ArtifactError(f"{name} is missing from the loaded version")
        return found


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def verified(directory: Path, attempts: int = 3) -> tuple[dict[str, Any], Verification]:
    """The manifest of the version in ``directory`` and that version's verification, read again if a publisher
    replaced the version while it was being checked (its files would then disagree with the manifest read)."""
    for _ in range(attempts):
        manifest = read_manifest(directory)
        checked = verify(directory)
        if checked.ok or read_manifest(directory) == manifest:
            break
    return manifest, checked


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as the bytes of a .npy file (no pickle), for a file written into a table's directory."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# The versions a command works on, at most, of a table published anew while it works on each (a server compacting
# it): verify, index, compact; then it stops, saying so, rather than start again without end
ROUNDS = 5


class Rebuilt(ArtifactError):
    """A publish from a version refused: the table was rebuilt (imported again, compacted) since that version."""


def republish(
    data_dir: Path,
    name: str,
    manifest: dict[str, Any],
    write: Callable[[Path], None],
    replaced: Collection[str],
    changes: dict[str, Any],
    what: str,
) -> dict[str, Any]:
    """Publish the next version of table ``name``, made from the version whose manifest is ``manifest``:
    ``write(staging_directory)`` writes the new files ``replaced``, the manifest gets ``changes``.

    Under the publish lock, the version is completed from the NEWEST version of the table, not the one the work
    started from: its other files are linked (or copied) unchanged and its manifest carries every other entry
    forward (another publisher's SIF component, index, ...). If the table was rebuilt meanwhile (other vectors,
    or another build), nothing is replaced (``what`` says what was being done). The current version serves until
    the new one takes its place, and stays as it was if anything fails."""
    directory = table_dir(data_dir, name)
    published: dict[str, Any] = {}

    def complete(tmp: Path) -> None:
        newest = read_manifest(directory)
        if not same_build(newest, manifest):
            raise Rebuilt(f"table {name!r} was rebuilt while {what}; nothing replaced")
        # The files carried forward must be the newest version's as its manifest lists them: a file damaged since
        # the table was verified is refused, never checksummed into the new version's manifest
        carried = {k: v for k, v in newest["files"].items() if k not in replaced}
        _refuse_damage(name, what, file_problems(directory, carried, checksums=False, beside=replaced))
        for child in directory.iterdir():
            if child.name != MANIFEST and child.name not in replaced:
                _link_or_copy(child, tmp / child.name)
        kept = {k: v for k, v in newest.items() if k not in ("format_version", "files", *changes)}
        written = write_manifest(tmp, {**kept, **changes})
        _refuse_damage(
            name, what, [f"{k}: sha256 differs from the manifest" for k in carried if written["files"][k] != carried[k]]
        )
        published.update(written)

    with staging(data_dir, name, force=True, complete=complete) as tmp:
        write(tmp)
    return published


def _refuse_damage(name: str, what: str, problems: list[str]) -> None:
    if problems:
        raise ArtifactError(f"table {name!r} is damaged ({'; '.join(problems)}); nothing replaced while {what}")


def same_build(manifest: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two manifests are versions of one build (one republished from the other: an index, a SIF component)."""
    return _lineage(manifest) == _lineage(other)


def _lineage(manifest: dict[str, Any]) -> tuple[Any, Any]:
    """What later versions of one build share: the build's time and its vectors."""
    return manifest.get("built_at"), manifest.get("files", {}).get(VECTORS, {}).get("sha256")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # same file system (the staging directory is beside the table): no copy
    except OSError:
        shutil.copy2(source, target)
