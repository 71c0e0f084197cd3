"""A loaded table reads the files it uses after its load (its tokenizer, its transformer's graph, its SIF component,
as its own version's, even once the next version is published under its
name (its directory exchanged with the next one's, the old one deleted): a worker serves the version it loaded until
it loads the next, never a mix of the two."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.engine.encode import encoder_for
from index.engine.table import Table
from index.errors import ArtifactError
from index.store import artifact
from index.store.tokens import TOKENIZER
from tests.minilm import MINILM, ST


def linked(source: Path, data: Path) -> Path:
    """Table ``source`` in data directory ``data``, its files hard links (a version's files are never written to)."""
    shutil.copytree(source, data / source.name, copy_function=os.link)
    return data / source.name


def next_version(data: Path, name: str, files: dict[str, Callable[[Path], object]]) -> None:
    """Publish the next version of table ``name``: its files ``files`` (name -> writer) replaced, the others kept."""
    manifest = artifact.read_manifest(data / name)

    def write(tmp: Path) -> None:
        for file, writer in files.items():
            writer(tmp / file)

    artifact.republish(data, name, manifest, write, tuple(files), {}, "a test publishes the next version")


def test_a_sif_component_is_the_loaded_versions(tmp_path: Path, glove_sif_dir: Path) -> None:
    directory = linked(glove_sif_dir / "glove", tmp_path)
    mine = np.load(directory / artifact.SIF_COMPONENT)
    loaded = Table.load(directory, checksums=False)
    other = np.roll(mine, 1)  # another unit vector
    next_version(tmp_path, "glove", {artifact.SIF_COMPONENT: lambda path: np.save(path, other)})
    np.testing.assert_array_equal(np.load(directory / artifact.SIF_COMPONENT), other)  # the next version's
    component = encoder_for(loaded).component  # type: ignore[union-attr]
    np.testing.assert_allclose(component, mine / np.linalg.norm(mine), rtol=1e-12)


def swapped_vocabulary(source: Path, first: str, second: str) -> Callable[[Path], object]:
    """A writer of tokenizer ``source`` with the ids of two of its pieces exchanged."""
    found = json.loads(source.read_text())
    vocab = found["model"]["vocab"]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    return lambda path: path.write_text(json.dumps(found))


def test_a_tokenizer_is_the_loaded_versions(tmp_path: Path, minilm_data_dir: Path) -> None:
    directory = linked(minilm_data_dir / MINILM, tmp_path)
    loaded = Table.load(directory, checksums=False)
    expected = Table.load(directory, checksums=False).lookup.tokenize("hello world")
    assert [label for _, label in expected] == ["hello", "world"]
    next_version(tmp_path, MINILM, {TOKENIZER: swapped_vocabulary(directory / TOKENIZER, "hello", "world")})
    assert Table.load(directory, checksums=False).lookup.tokenize("hello world") == expected[::-1]  # the next one's
    assert loaded.lookup.tokenize("hello world") == expected


def test_a_transformers_graph_and_tokenizer_are_the_loaded_versions(tmp_path: Path, minilm_st_dir: Path) -> None:
    directory = linked(minilm_st_dir / ST, tmp_path)
    texts = ["a worker keeps the version it loaded", "hello world"]
    expected = encoder_for(Table.load(directory, checksums=False)).encode(texts).vectors
    loaded = Table.load(directory, checksums=False)
    damaged = {name: lambda path: path.write_bytes(b"not this version's") for name in (artifact.GRAPH, TOKENIZER)}
    next_version(tmp_path, ST, damaged)
    assert (directory / artifact.GRAPH).read_bytes() == b"not this version's"
    np.testing.assert_array_equal(encoder_for(loaded).encode(texts).vectors, expected)


@pytest.mark.parametrize("loads", range(5))  # a load's checks read the rows' header thrice, then map rows and norms
def test_a_version_published_while_a_table_loads_is_loaded_whole(
    tmp_path: Path, lee_data_dir: Path, monkeypatch: pytest.MonkeyPatch, loads: int
) -> None:
    """The next version of ``lee`` (its rows reversed in direction, its norms doubled) published while a load reads
    the version before, after ``loads`` of its arrays read (each of the load's steps in turn): the load answers the
    newer version whole, its manifest's files, never the manifest of one with the rows or norms of the other."""
    directory = linked(lee_data_dir / "lee", tmp_path)
    first = (np.load(directory / artifact.VECTORS), np.load(directory / artifact.NORMS))
    real_load = np.load
    count = 0

    def load(path: Path, *args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        if count == loads + 1:  # a publisher's exchange of the table's directory, between two of the load's reads
            next_version(
                tmp_path,
                "lee",
                {
                    artifact.VECTORS: lambda path: np.save(path, -first[0]),
                    artifact.NORMS: lambda path: np.save(path, 2 * first[1]),
                },
            )
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", load)
    table = Table.load(directory)
    monkeypatch.undo()
    assert count > loads + 1  # the publish came in the middle of the load
    published = artifact.read_manifest(directory)
    assert table.manifest["files"] == published["files"]  # the newer version: the older one's files are gone
    np.testing.assert_array_equal(table.vectors, -first[0])
    np.testing.assert_array_equal(table.norms, 2 * first[1])


def test_a_table_published_anew_during_every_load_is_refused_saying_so(
    tmp_path: Path, lee_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version published at every array a load reads: each load sees another directory at the table's name after
    it than before, and after the last the table is refused, saying why, rather than served as a mix."""
    directory = linked(lee_data_dir / "lee", tmp_path)
    norms = np.load(directory / artifact.NORMS)
    real_load, publishes = np.load, 0

    def load(path: Path, *args: Any, **kwargs: Any) -> Any:
        nonlocal publishes
        publishes += 1
        next_version(tmp_path, "lee", {artifact.NORMS: lambda path: np.save(path, (1 + publishes) * norms)})
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", load)
    with pytest.raises(ArtifactError) as refused:
        Table.load(directory)
    assert str(refused.value) == (
        "table 'lee': a new version was published during each of its 3 loads; load it again once it is published "
        "less often"
    )
