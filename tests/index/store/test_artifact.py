"""The artifact: atomic publication, manifest verification, refusal of damaged tables."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.table import Table
from index.errors import ArtifactError, InvalidQuery, UnknownTable
from index.store import artifact
from index.store.artifact import MANIFEST
from tests.cli import run_cli


def _raw(rows: int = 300, dim: int = 8, seed: int = 0) -> RawTable:
    rng = np.random.default_rng(seed)
    return RawTable(tokens=[f"w{i}" for i in range(rows)], matrix=rng.standard_normal((rows, dim)).astype(np.float32))


def test_build_writes_manifest_with_checksums(tmp_path: Path) -> None:
    manifest = build_table(_raw(), data_dir=tmp_path, name="t", source={"format": "test"})
    directory = tmp_path / "t"
    on_disk = json.loads((directory / artifact.MANIFEST).read_text())
    assert on_disk == manifest
    assert manifest["rows"] == 300 and manifest["dim"] == 8
    assert manifest["index"]["spec"]["kind"] == "flat" and manifest["index"]["recall_at_10"] == 1.0
    assert set(manifest["files"]) == {p.name for p in directory.iterdir()} - {artifact.MANIFEST}
    for name, info in manifest["files"].items():
        assert info["sha256"] == artifact.sha256_file(directory / name)
    assert artifact.verify(directory).ok
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_build_copies_rows_it_cannot_write_and_leaves_them_as_they_were(tmp_path: Path) -> None:
    """A build normalises the rows it is given in place (they are the build's: no second copy of a table's rows);
    read-only rows, such as rows a caller keeps, are copied first: the build succeeds and they stay as given."""
    raw = _raw()
    given = raw.matrix.copy()
    raw.matrix.setflags(write=False)
    build_table(raw, data_dir=tmp_path, name="t", source={})
    assert np.array_equal(raw.matrix, given)
    table = Table.load(tmp_path / "t")
    np.testing.assert_allclose(table.vectors * table.norms[:, None], given, rtol=1e-6, atol=1e-6)
    owned = _raw()
    build_table(owned, data_dir=tmp_path, name="u", source={})
    np.testing.assert_allclose(np.linalg.norm(owned.matrix, axis=1), 1, rtol=1e-6)  # the build's own, normalised


def test_file_problems_name_each_file_that_disagrees_with_the_manifest(tmp_path: Path) -> None:
    """What a table's and a sharded table's verification says of their files: missing, another size, another
    sha256, or there and not listed (a sharded table's shard directories apart)."""
    for name, content in (("a", b"abc"), ("b", b"xyz"), ("c", b"1234"), ("extra", b"")):
        (tmp_path / name).write_bytes(content)
    (tmp_path / "shard-000").mkdir()
    listed = {
        "a": {"bytes": 3, "sha256": artifact.sha256_file(tmp_path / "a")},
        "b": {"bytes": 3, "sha256": "0" * 64},
        "c": {"bytes": 3, "sha256": "0" * 64},
        "gone": {"bytes": 1, "sha256": "0" * 64},
    }
    read: list[int] = []
    problems = artifact.file_problems(tmp_path, listed, progress=read.append, beside=["shard-000"])
    wrong = ["c: 4 bytes, manifest says 3", "gone: missing", "extra: not listed in the manifest"]
    assert problems == ["b: sha256 differs from the manifest", *wrong] and read == [3, 3]
    assert artifact.file_problems(tmp_path, listed, checksums=False, beside=["shard-000"]) == wrong
    assert "shard-000: not listed in the manifest" in artifact.file_problems(tmp_path, listed)


def test_rows_are_unit_and_norms_kept(tmp_path: Path) -> None:
    raw = _raw()
    original = raw.matrix.copy()
    build_table(raw, data_dir=tmp_path, name="t", source={})
    table = Table.load(tmp_path / "t")
    np.testing.assert_allclose(np.linalg.norm(table.vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(table.row(5), original[5], rtol=1e-5)
    np.testing.assert_allclose(table.row(5, normalized=True), original[5] / np.linalg.norm(original[5]), rtol=1e-5)


def test_existing_table_needs_force_and_survives_failed_rebuild(tmp_path: Path) -> None:
    build_table(_raw(seed=1), data_dir=tmp_path, name="t", source={})
    before = (tmp_path / "t" / artifact.VECTORS).read_bytes()
    with pytest.raises(ArtifactError):
        build_table(_raw(seed=2), data_dir=tmp_path, name="t", source={})
    bad = _raw(seed=3)
    bad.matrix[7, 2] = np.nan
    with pytest.raises(Exception, match="NaN"):
        build_table(bad, data_dir=tmp_path, name="t", source={}, force=True)
    assert (tmp_path / "t" / artifact.VECTORS).read_bytes() == before
    assert artifact.list_tables(tmp_path) == ["t"]
    assert not list(tmp_path.glob(".tmp-*"))
    build_table(_raw(seed=4), data_dir=tmp_path, name="t", source={}, force=True)
    assert (tmp_path / "t" / artifact.VECTORS).read_bytes() != before


def test_a_name_published_while_building_is_not_replaced_without_force(tmp_path: Path) -> None:
    """Two builds of a new name at once: the one that publishes second is refused (without --force) and the
    table the first published is left as it is."""
    with pytest.raises(ArtifactError, match="already exists"), artifact.staging(tmp_path, "t") as tmp:
        (tmp / "marker").write_text("the second build")
        build_table(_raw(seed=1), data_dir=tmp_path, name="t", source={})  # the other build, published meanwhile
    assert artifact.verify(tmp_path / "t").ok and not (tmp_path / "t" / "marker").exists()
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_build_that_has_just_begun_is_not_taken_for_a_dead_one(tmp_path: Path) -> None:
    """A recovery (a server starting, another build) never removes a build's directory, even one just made."""
    with artifact.staging(tmp_path, "t") as tmp:
        assert artifact.recover(tmp_path) == []
        assert tmp.is_dir()


def test_a_removal_under_way_is_not_taken_for_a_dead_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recovery in another process (a server starting, a build, ``verify``) while ``remove`` deletes the files
    leaves them to it; a second removal of the name is told there is no such table."""
    build_table(_raw(), data_dir=tmp_path, name="t", source={})
    rmtree, recovered = shutil.rmtree, []

    def recovery_meanwhile(path: Path, **options: bool) -> None:
        code = "import sys; from index.store import artifact; print(artifact.recover(sys.argv[1]))"
        recovered.append(subprocess.run([sys.executable, "-c", code, tmp_path], capture_output=True, text=True))
        rmtree(path, **options)

    with monkeypatch.context() as patched:
        patched.setattr(shutil, "rmtree", recovery_meanwhile)
        artifact.remove(tmp_path, "t")
    assert [(done.returncode, done.stdout) for done in recovered] == [(0, "[]\n")]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UnknownTable, match="no table at 't'"):
        artifact.remove(tmp_path, "t")


def test_a_lock_still_held_on_a_table_does_not_hold_up_its_removal(tmp_path: Path) -> None:
    """The build that published a table holds a lock on its directory until it has finished: a ``remove`` then
    does not wait for it."""
    build_table(_raw(), data_dir=tmp_path, name="t", source={})
    held = os.open(tmp_path / "t", os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    removal = threading.Thread(target=artifact.remove, args=(tmp_path, "t"))
    try:
        removal.start()
        removal.join(timeout=10)
        assert not removal.is_alive() and list(tmp_path.iterdir()) == []
    finally:
        os.close(held)
        removal.join()


def test_a_table_linked_from_elsewhere_loses_its_link_only(tmp_path: Path) -> None:
    """A symbolic link to a table: ``remove`` and a ``--force`` build unlink it and leave the table it points to as
    it is; a link left by a publisher that was killed is removed by the next recovery."""
    data_dir, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    build_table(_raw(), data_dir=elsewhere, name="t", source={})
    data_dir.mkdir()
    (data_dir / "linked").symlink_to(elsewhere / "t")
    artifact.remove(data_dir, "linked")
    (data_dir / "linked").symlink_to(elsewhere / "t")
    build_table(_raw(seed=1), data_dir=data_dir, name="linked", source={}, force=True)
    assert [path.name for path in data_dir.iterdir()] == ["linked"] and not (data_dir / "linked").is_symlink()
    (data_dir / ".tmp-linked-deadbeef").symlink_to(elsewhere / "t")
    assert [path.name for path, _ in artifact.recover(data_dir)] == [".tmp-linked-deadbeef"]
    assert [path.name for path in data_dir.iterdir()] == ["linked"] and artifact.verify(elsewhere / "t").ok


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest", "extra", "missing"])
def test_loader_refuses_damaged_table(tmp_path: Path, damage: str) -> None:
    build_table(_raw(), data_dir=tmp_path, name="t", source={})
    directory = tmp_path / "t"
    vectors = directory / artifact.VECTORS
    if damage == "truncate":
        vectors.write_bytes(vectors.read_bytes()[:-100])
    elif damage == "flip":
        data = bytearray(vectors.read_bytes())
        data[-7] ^= 0xFF
        vectors.write_bytes(bytes(data))
    elif damage == "manifest":
        manifest = json.loads((directory / artifact.MANIFEST).read_text())
        manifest["files"][artifact.NORMS]["sha256"] = "0" * 64
        (directory / artifact.MANIFEST).write_text(json.dumps(manifest))
    elif damage == "extra":
        (directory / "stray.bin").write_bytes(b"x")
    else:
        (directory / artifact.NORMS).unlink()
    with pytest.raises(ArtifactError, match="disagrees with its manifest"):
        Table.load(directory)


@pytest.mark.parametrize(
    ("source", "command"),
    [
        (
            {"format": "glove", "path": "/src/w.txt"},
            "embedding-index import /src/w.txt --format glove --name t --force",
        ),
        ({"format": "glove-package"}, "embedding-index build --name t --force"),
        (
            {"format": "word2vec-training", "path": ["a.txt", "b.txt"]},
            "embedding-index train a.txt b.txt --name t --force",
        ),
    ],
)
@pytest.mark.parametrize("version", [2, None])
def test_a_table_of_another_format_version_is_refused_with_the_command_that_builds_it_again(
    tmp_path: Path, source: dict, command: str, version: int | None
) -> None:
    """A manifest of another format version (or none) than this release's: the load, ``verify`` and any other
    reader refuse the table naming it, its format and the command that builds it from its source again; that
    command's ``--force`` replaces it."""
    build_table(_raw(), data_dir=tmp_path, name="t", source=source)
    path = tmp_path / "t" / artifact.MANIFEST
    manifest = json.loads(path.read_text())
    manifest.pop("format_version")
    path.write_text(json.dumps(manifest if version is None else {"format_version": version, **manifest}))
    has = "no format version" if version is None else f"format version {version}"
    expected = f"table 't' ({tmp_path / 't'}) has {has}, which this release does not read (it reads format version 1)"
    for read in (Table.load, artifact.verify):
        with pytest.raises(ArtifactError) as refused:
            read(tmp_path / "t")
        assert str(refused.value).startswith(expected) and f"`{command}`" in str(refused.value), refused.value
    build_table(_raw(), data_dir=tmp_path, name="t", source=source, force=True)
    assert Table.load(tmp_path / "t").manifest["format_version"] == artifact.FORMAT_VERSION


def test_a_sharded_table_of_another_format_version_is_built_again_as_shards(tmp_path: Path) -> None:
    """The command for a sharded table of another format version, and for each of its shards, is the sharded
    table's import."""
    manifest = {"format_version": 2, "kind": "sharded", "source": {"format": "documents", "path": "lee.jsonl"}}
    manifest["shards"] = {"count": 3, "names": ["shard-000", "shard-001", "shard-002"]}
    (tmp_path / "lee" / "shard-001").mkdir(parents=True)
    (tmp_path / "lee" / MANIFEST).write_text(json.dumps(manifest))
    command = "`embedding-index import lee.jsonl --format documents --name lee --shards 3 --force`"
    assert f"build it again with this release, {command}" in artifact.other_format(tmp_path / "lee", manifest)
    shard = artifact.other_format(tmp_path / "lee" / "shard-001", {"format_version": 2, "source": {}})
    assert (
        shard.startswith("table 'shard-001' (")
        and f"build its sharded table again with this release, {command}" in shard
    )


def test_a_table_whose_rows_an_earlier_release_stored_column_major_is_refused_with_the_command_that_builds_it(
    tmp_path: Path,
) -> None:
    """Vectors stored column-major (Fortran order, as an earlier release kept a column-major source), its manifest
    agreeing: the load, ``verify`` and ``index`` refuse the table naming it and the command that builds it again
    (the load did so without a word of what to do, and ``verify`` said ok); built again, it loads."""
    source = {"format": "npy", "path": "m.npy"}
    build_table(_raw(), data_dir=tmp_path, name="t", source=source)
    directory = tmp_path / "t"
    vectors = directory / artifact.VECTORS
    np.save(vectors, np.asfortranarray(np.load(vectors)))
    manifest = json.loads((directory / artifact.MANIFEST).read_text())
    manifest["files"][artifact.VECTORS] = {"bytes": vectors.stat().st_size, "sha256": artifact.sha256_file(vectors)}
    (directory / artifact.MANIFEST).write_text(json.dumps(manifest))
    said = (
        "vectors.npy: its rows are stored column-major (Fortran order), as an earlier release kept a column-major "
        "source; this release maps rows whole: build it again with this release, `embedding-index import m.npy "
        "--format npy --name t --force`"
    )
    with pytest.raises(ArtifactError) as refused:
        Table.load(directory)
    assert str(refused.value).startswith(f"table 't': {said}"), refused.value
    checked = artifact.verify(directory)
    assert not checked.ok and checked.problems[0].startswith(said), checked
    done = run_cli("index", "t", "--index", "flat", "--data-dir", tmp_path)
    assert done.code == 1 and said in done.err and json.loads((directory / artifact.MANIFEST).read_text()) == manifest
    build_table(_raw(), data_dir=tmp_path, name="t", source=source, force=True)
    assert Table.load(directory).vectors.flags.c_contiguous


@pytest.mark.parametrize("name", ["..", "../x", "a/b", ".hidden", "", "x" * 65, "a\x00b", "%2e%2e"])
def test_unsafe_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidQuery):
        artifact.table_dir(tmp_path, name)


def test_stale_temporary_directories_are_cleaned(tmp_path: Path) -> None:
    build_table(_raw(), data_dir=tmp_path, name="t", source={})
    (tmp_path / ".tmp-t-deadbeef").mkdir()
    shutil.copytree(tmp_path / "t", tmp_path / ".old-u-12345678")
    done = artifact.recover(tmp_path)
    assert [(p.name, what.split(",")[0].split(":")[0]) for p, what in done] == [
        (".tmp-t-deadbeef", "removed"),
        (".old-u-12345678", "restored as 'u'"),
    ]
    assert artifact.list_tables(tmp_path) == ["t", "u"]


def test_leftovers_on_a_read_only_data_directory_are_reported_not_fixed(tmp_path: Path) -> None:
    """A read-only mount (the replicas' /data): recovery names each leftover and what to run, and changes nothing."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a read-only bind mount needs root")
    data_dir, mounted = tmp_path / "data", tmp_path / "ro"
    build_table(_raw(), data_dir=data_dir, name="t", source={})
    (data_dir / "t").rename(data_dir / ".old-t-12345678")  # killed between the two renames of a publish
    (data_dir / ".tmp-u-deadbeef").mkdir()
    mounted.mkdir()
    if subprocess.run(["mount", "--bind", str(data_dir), str(mounted)], check=False).returncode != 0:
        pytest.skip("this system does not allow bind mounts")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mounted)], check=True)
        done = {path.name: what for path, what in artifact.recover(mounted)}
    finally:
        subprocess.run(["umount", str(mounted)], check=False)
    advice = "left as it is (Read-only file system); run `embedding-index verify` where the data directory is writable"
    assert done == {".old-t-12345678": advice, ".tmp-u-deadbeef": advice}
    assert sorted(p.name for p in data_dir.iterdir()) == [".old-t-12345678", ".tmp-u-deadbeef"]
    assert [path.name for path, _ in artifact.recover(data_dir)] == [".tmp-u-deadbeef", ".old-t-12345678"]
    assert artifact.list_tables(data_dir) == ["t"] and artifact.verify(data_dir / "t").ok


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda m: m.pop("name"), "'name' is missing, not the table's name"),
        (lambda m: m.update(rows="300"), "'rows' is '300', not a number of rows"),
        (lambda m: m.update(dim=True), "'dim' is True, not a number of dimensions"),
        (lambda m: m.update(files=[]), "'files' is [], not the table's files by name"),
        (lambda m: m["files"].update({artifact.NORMS: "x"}), "the entry of file 'norms.npy' is 'x', not its bytes"),
        (lambda m: m["files"].update({"../t/norms.npy": {}}), "lists '../t/norms.npy', not the name of a file of"),
    ],
)
def test_a_manifest_without_a_field_every_table_has_is_refused_naming_it(
    tmp_path: Path, change: object, said: str
) -> None:
    """A manifest damaged or edited by hand: verification and loading say which field is wrong (they failed inside
    the loader, with a KeyError or an AttributeError, and the server said only that)."""
    build_table(_raw(), data_dir=tmp_path, name="t", source={})
    path = tmp_path / "t" / artifact.MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)  # type: ignore[operator]
    path.write_text(json.dumps(manifest))
    for check in (artifact.verify, Table.load):
        with pytest.raises(ArtifactError, match=f"manifest.json: {re.escape(said)}"):
            check(tmp_path / "t")


@pytest.mark.parametrize("kind", ["dangling link", "directory"])
def test_a_file_that_is_no_file_is_named_for_what_it_is(tmp_path: Path, kind: str) -> None:
    build_table(_raw(), data_dir=tmp_path, name="t", source={})
    norms = tmp_path / "t" / artifact.NORMS
    norms.unlink()
    norms.symlink_to("gone.npy") if kind == "dangling link" else norms.mkdir()
    said = "a symbolic link to gone.npy, which is not a file" if kind == "dangling link" else "a directory, not a file"
    assert artifact.verify(tmp_path / "t").problems == [f"norms.npy: {said}"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "extra"])
def test_a_new_version_never_vouches_for_a_file_damaged_since_the_table_was_verified(
    tmp_path: Path, damage: str
) -> None:
    """``republish`` (``index``, ``sif``) carries the newest version's other files forward: one damaged since the
    work began is refused, naming it, and the table is left as it was, still failing its verification; it is not
    checksummed into the new version's manifest, which would make the damage pass every later check."""
    build_table(_raw(), data_dir=tmp_path, name="t", source={})
    directory = tmp_path / "t"
    manifest = artifact.read_manifest(directory)  # the version the work read (and verified)
    norms = directory / artifact.NORMS
    if damage == "flip":
        with open(norms, "r+b") as handle:
            handle.seek(-3, os.SEEK_END)
            handle.write(b"\xff")
    elif damage == "truncate":
        os.truncate(norms, norms.stat().st_size - 1)
    else:
        (directory / "notes.txt").write_text("a file an operator left")
    before = (directory / artifact.MANIFEST).read_bytes()

    def write(tmp: Path) -> None:
        (tmp / "extra.npy").write_bytes(artifact.npy_bytes(np.zeros(3, dtype=np.float32)))

    said = {"flip": "norms.npy: sha256 differs", "truncate": "norms.npy: 1327 bytes", "extra": "notes.txt: not listed"}
    with pytest.raises(ArtifactError, match=f"table 't' is damaged \\({said[damage]}.*nothing replaced while testing"):
        artifact.republish(tmp_path, "t", manifest, write, ("extra.npy",), {"extra": True}, "testing")
    assert (directory / artifact.MANIFEST).read_bytes() == before and not artifact.verify(directory).ok
    assert [p.name for p in tmp_path.iterdir()] == ["t"]
