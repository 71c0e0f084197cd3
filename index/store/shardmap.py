"""A sharded table on disk: ``<data-dir>/<name>/`` holds its shard map and one complete table per shard.

::

    <name>/manifest.json        kind "sharded": the map (how rows are assigned, each shard's rows and manifest
                                checksum, the import's identity), the whole table's documents and keyword
                                statistics, its own files
    <name>/assignment.npy       uint16, the shard of each row of the whole table, in import order
    <name>/keyword_terms.arrow  the whole table's words (sorted) and ...
    <name>/keyword_df.npy       ... the documents holding each (int64): BM25's document frequencies
    <name>/tokens.bin, ...      the ids in the whole table's order (``index.store.tokens``), for its lookups
    <name>/shard-000/ ...       each a complete table (its own manifest, checksums, index, payload, keyword index,
                                and whole_rows.npy: the whole table's row of each of its rows, for a front that
                                orders equal scores as the whole table does)

The shards live inside the table's directory, so a sharded table is written, published, exchanged and recovered
in one step as any table is (``artifact.staging``): a reader sees every shard of one version with the map and
the statistics they were built with, never shards of two versions. Each shard is a table on its own: verified
by ``artifact.verify``, loaded by ``Table.load``, served alone by a shard replica.

A document's shard is the first 8 bytes of the BLAKE2b digest of its id (the id's text in UTF-8, an integer id
in decimal), read big-endian, modulo the number of shards: stable across runs, machines and versions, and
computable by any writer that knows the id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from index.errors import ArtifactError, InvalidQuery
from index.store import artifact

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from index.lazy import pa, pc

KIND = "sharded"
ASSIGNMENT = "assignment.npy"
WHOLE_ROWS = "whole_rows.npy"  # in each shard: the whole table's row of each of its rows (int64)
TERMS, DF = "keyword_terms.arrow", "keyword_df.npy"
HASH = "blake2b-64(id as UTF-8 text, integers in decimal), big-endian, mod shards"
MAX_SHARDS = 1024
# The map's key of the import's identity: made by each sharded import, kept by its compactions, so that a front
# tells a shard of this import from the same shard of another import of the table's name and count.
IMPORT = "import"


def shard_name(shard: int) -> str:
    return f"shard-{shard:03d}"


def check_count(count: int) -> int:
    if not 1 <= count <= MAX_SHARDS:
        raise InvalidQuery(f"shards must be between 1 and {MAX_SHARDS}, not {count}")
    return count


def shard_of_id(document_id: str | int, count: int) -> int:
    """The shard that owns the document ``document_id`` in a table of ``count`` shards."""
    digest = hashlib.blake2b(str(document_id).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def assign(ids: pa.Array, count: int) -> np.ndarray:
    """The shard (uint16) of each of ``ids`` (strings or int64): :func:`shard_of_id` of every one."""
    check_count(count)
    texts = pc.cast(ids, pa.string()).to_pylist()
    blake2b = hashlib.blake2b
    digests = b"".join(blake2b(text.encode(), digest_size=8).digest() for text in texts)
    hashed = np.frombuffer(digests, dtype=">u8")
    return (hashed % np.uint64(count)).astype(np.uint16)


def is_sharded(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") == KIND


def holds_sharded(directory: Path) -> bool:
    """Whether ``directory`` holds a sharded table: it has a manifest, which says so (one that cannot be read
    raises)."""
    return (directory / artifact.MANIFEST).is_file() and is_sharded(artifact.read_manifest(directory))


@dataclass(frozen=True)
class Place:
    """Where a shard sits in its sharded table: what a server of the shard alone checks a write's ids against."""

    table: str  # the sharded table's name
    shard: int
    count: int
    identity: str | None  # its import's (``shards.import``: None for a table imported before imports had one)

    def foreign(self, keys: Sequence[str | int]) -> tuple[np.ndarray, np.ndarray]:
        """The places among ``keys`` (ids as the table stores them) that another shard owns, and their owners."""
        if not keys:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16)
        owners = assign(pa.array(list(keys)), self.count)
        places = np.flatnonzero(owners != self.shard)
        return places, owners[places]


def place(directory: Path) -> Place | None:
    """The place of the table in ``directory`` when it is a shard of a sharded table (its parent's map names it),
    else None. A ``manifest.json`` in the parent that is no table's (a data directory's stray file) makes none."""
    parent = Path(directory).parent
    if not (parent / artifact.MANIFEST).is_file():
        return None
    try:
        manifest = artifact.read_manifest(parent)
    except ArtifactError:
        return None
    shards = (manifest.get("shards") or {}) if is_sharded(manifest) else {}
    names = list(shards.get("names") or ())
    if Path(directory).name not in names:
        return None
    return Place(parent.name, names.index(Path(directory).name), len(names), shards.get(IMPORT))


@dataclass(frozen=True)
class ShardMap:
    """A sharded table's map, read from its directory."""

    directory: Path
    manifest: dict[str, Any]
    names: tuple[str, ...]  # the shards' directory names, in shard order
    assignment: np.ndarray  # the shard of each row of the whole table

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def name(self) -> str:
        return str(self.manifest["name"])

    def rows_of(self, shard: int) -> np.ndarray:
        """The whole table's rows (ascending) that shard ``shard`` holds: its row ``i`` is the table's row
        ``rows_of(shard)[i]``."""
        return np.flatnonzero(self.assignment == shard)

    def shard_directory(self, shard: int) -> Path:
        return self.directory / self.names[shard]

    def place(self, shard: int) -> Place:
        """Shard ``shard``'s place in the table, as :func:`place` reads it from the shard's directory."""
        return Place(self.directory.name, shard, self.count, (self.manifest.get("shards") or {}).get(IMPORT))


def read(directory: Path) -> ShardMap:
    """The map of the sharded table in ``directory`` (its own files checked for size, not checksummed)."""
    manifest = artifact.read_manifest(directory)
    if not is_sharded(manifest):
        raise ArtifactError(f"table {directory.name!r} is not sharded")
    shards = manifest.get("shards") or {}
    names = tuple(shards.get("names") or ())
    if not names or any(name != shard_name(i) for i, name in enumerate(names)):
        raise ArtifactError(f"table {directory.name!r}: a shard map without its shards' names")
    try:
        assignment = np.load(directory / ASSIGNMENT, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"table {directory.name!r}: unreadable {ASSIGNMENT} ({exc})") from exc
    if assignment.shape != (manifest.get("rows"),):
        raise ArtifactError(f"table {directory.name!r}: {ASSIGNMENT} disagrees with the manifest's rows")
    return ShardMap(Path(directory), manifest, names, np.asarray(assignment))


@dataclass(frozen=True)
class WholeKeyword:
    """The keyword statistics of the whole sharded table a shard belongs to, which its stored scores were made
    with: its documents, their words and average length, and each word's document frequency."""

    documents: int
    average_length: float
    words: int
    terms: pa.Array  # sorted
    df: np.ndarray


def whole_keyword(shard_directory: Path) -> WholeKeyword | None:
    """The whole table's keyword statistics beside the map of the sharded table holding ``shard_directory`` (None
    when it is no shard, or its table has no text): :func:`table_keyword` of its parent."""
    parent = Path(shard_directory).parent
    try:
        manifest = artifact.read_manifest(parent)
    except ArtifactError:
        return None
    return table_keyword(parent, manifest)


def table_keyword(parent: Path, manifest: dict[str, Any], checked: bool = False) -> WholeKeyword | None:
    """The keyword statistics of the table in ``parent`` (``manifest``: its manifest) when it is a sharded table
    of text, else None: what a loader of the whole table reads once and hands to every shard. Their two files are
    checked against the manifest unless ``checked`` (:func:`verify` checksummed them already)."""
    statistics = manifest.get("keyword_statistics") if is_sharded(manifest) else None
    if not statistics:
        return None
    listed = manifest.get("files", {})
    for name in (TERMS, DF):
        path = parent / name
        if not path.is_file() or (not checked and artifact.sha256_file(path) != listed.get(name, {}).get("sha256")):
            raise ArtifactError(f"table {parent.name!r}: {name} is missing or differs from its manifest")
    terms = pa.ipc.open_file(pa.memory_map(str(parent / TERMS), "r")).get_batch(0).column(0)
    df = np.load(parent / DF, allow_pickle=False)
    if df.shape != (len(terms),):
        raise ArtifactError(f"table {parent.name!r}: {DF} disagrees with {TERMS}")
    return WholeKeyword(
        int(statistics["documents"]), float(statistics["average_length"]), int(statistics["words"]), terms, df
    )


def write_manifest(directory: Path, manifest: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Checksum the sharded table's own files and each shard's manifest into ``manifest`` and write it."""
    files = {}
    for child in sorted(directory.iterdir()):
        if child.is_file() and child.name != artifact.MANIFEST:
            files[child.name] = {"bytes": child.stat().st_size, "sha256": artifact.sha256_file(child)}
    shards = dict(manifest["shards"])
    shards["manifests"] = {name: artifact.sha256_file(directory / name / artifact.MANIFEST) for name in names}
    written = {"format_version": artifact.FORMAT_VERSION, **manifest, "shards": shards, "files": files}
    (directory / artifact.MANIFEST).write_text(json.dumps(written, indent=2, ensure_ascii=False) + "\n")
    return written


def verify(directory: Path, checksums: bool = True) -> artifact.Verification:
    """A sharded table's own files against its manifest, each shard's manifest against the checksum the map
    holds, and each shard's files against its manifest (``artifact.verify``)."""
    manifest = artifact.read_manifest(directory)
    shards = manifest.get("shards", {})
    names = list(shards.get("names") or ())
    problems = artifact.file_problems(directory, manifest.get("files", {}), checksums, beside=names)
    rows = 0
    for name in names:
        shard = directory / name
        if not (shard / artifact.MANIFEST).is_file():
            problems.append(f"{name}: missing")
            continue
        if artifact.sha256_file(shard / artifact.MANIFEST) != shards.get("manifests", {}).get(name):
            problems.append(f"{name}: its manifest is not the one the shard map names")
        problems.extend(f"{name}/{problem}" for problem in artifact.verify(shard, checksums).problems)
        rows += int(artifact.read_manifest(shard).get("rows", 0))
    if not problems and rows != manifest.get("rows"):
        problems.append(f"the shards hold {rows:,} rows, the map says {manifest.get('rows'):,}")
    return artifact.Verification(ok=not problems, problems=problems)


def read_whole_rows(directory: Path, rows: int) -> np.ndarray | None:
    """The whole table's row of each of the ``rows`` rows of the shard in ``directory`` (its ``WHOLE_ROWS``), None
    for a table without that file (not a shard). Read with the rest of its version when it is loaded: a compaction
    publishes the next version's file under the same path while the loaded one is still served."""
    path = directory / WHOLE_ROWS
    if not path.is_file():
        return None
    found = np.load(path, mmap_mode="r", allow_pickle=False)
    if found.shape != (rows,):
        raise ArtifactError(f"table {directory.name!r}: {WHOLE_ROWS} disagrees with its rows")
    return np.asarray(found, dtype=np.int64).view(np.ndarray)
