"""Whole-table layouts and the axes projection on the 20,000-row GloVe table, against numpy float64 references."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import stat
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from index import progress
from index.engine import layout as layouts
from index.engine.layout import (
    TOKEN_KIND,
    LayoutCache,
    axes_projection,
    colour_column,
    colour_columns,
    default_cache_dir,
    dequantize,
    pca_components,
    pca_layout,
    pca_projection,
    quantize,
)
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store import artifact
from tests.cli import progress_lines


def reference_pca(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points on the first two components and their variance ratio by a float64 SVD of the centred rows."""
    centred = np.asarray(rows, dtype=np.float64) - np.asarray(rows, dtype=np.float64).mean(axis=0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    return (u * s)[:, :2], (s**2 / (s**2).sum())[:2]


def test_pca_of_every_row_equals_a_float64_svd_up_to_sign(small: Table) -> None:
    layout = pca_layout(small.vectors)
    points, ratio = reference_pca(small.vectors)
    assert layout.points.dtype == np.float32 and layout.points.shape == (small.rows, 2)
    for axis in range(2):
        sign = np.sign(points[:, axis] @ layout.points[:, axis])
        np.testing.assert_allclose(layout.points[:, axis], sign * points[:, axis], atol=2e-5)
    np.testing.assert_allclose(layout.info["explained_variance_ratio"], ratio, rtol=1e-5)
    assert layout.info["method"] == "pca" and layout.info["rows"] == small.rows
    lo, hi = layout.points.min(axis=0), layout.points.max(axis=0)
    assert layout.info["bounds"] == {"x": [float(lo[0]), float(hi[0])], "y": [float(lo[1]), float(hi[1])]}


def test_pca_signs_follow_the_largest_loading_and_blocks_do_not_change_the_answer(small: Table, monkeypatch) -> None:
    mean, components, _ = pca_components(small.vectors)
    for component in components:
        assert component[np.abs(component).argmax()] > 0
    np.testing.assert_allclose(mean, np.asarray(small.vectors, dtype=np.float64).mean(axis=0), atol=1e-7)
    monkeypatch.setattr("index.engine.layout.BLOCK_BYTES", 4096)  # many small blocks
    np.testing.assert_allclose(pca_components(small.vectors)[1], components, atol=1e-5)
    with pytest.raises(InvalidQuery):
        pca_components(small.vectors[:1])


def test_a_long_pca_logs_its_progress(
    small: Table, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A PCA that lasts the progress interval (here 0: at every block) logs a line as the builder's long steps print
    theirs, and one at the end; in the server's log, so in its format (JSON lines too), not printed to its stderr.
    One quicker than the interval (here an hour) says nothing."""
    with caplog.at_level(logging.INFO, logger=layouts.__name__), progress_lines() as printed:
        monkeypatch.setattr(progress.CONFIG, "interval", 3600.0)  # quicker than it on any machine, however busy
        pca_layout(small.vectors)
        assert caplog.messages == []
        monkeypatch.setattr(layouts, "BLOCK_BYTES", 5_000 * small.dim * 4)  # four blocks of 5,000 rows
        monkeypatch.setattr(progress.CONFIG, "interval", 0.0)
        layout = pca_layout(small.vectors)
    assert printed.getvalue() == ""
    assert [re.sub(r"(, \S+ left| in \S+)$", "", message) for message in caplog.messages] == [
        "PCA of 20,000 rows: 25% (5,000 of 20,000 rows)",
        "PCA of 20,000 rows: 50% (10,000 of 20,000 rows)",
        "PCA of 20,000 rows: 75% (15,000 of 20,000 rows)",
        "PCA of 20,000 rows: done (20,000 of 20,000 rows)",
    ], caplog.messages
    np.testing.assert_array_equal(layout.points, pca_layout(small.vectors).points)


def test_a_projection_of_two_rows_has_a_second_coordinate_of_0_never_minus_0(small: Table) -> None:
    """Two rows have one direction: their second coordinate is 0, which a negative loading times 0 made -0.0 (an
    answer's ``"y": -0.0``) for about half of the pairs."""
    for first in range(0, 40, 2):
        points, ratio = pca_projection(np.asarray(small.vectors[first : first + 2]))
        assert points[:, 1].tolist() == [0.0, 0.0] and not np.signbit(points[:, 1]).any(), points
        assert ratio.tolist() == [1.0, 0.0]


def test_quantized_points_come_back_within_one_step(small: Table) -> None:
    layout = pca_layout(small.vectors)
    codes = quantize(layout.points, layout.info["bounds"])
    assert codes.dtype == np.dtype("<i2") and codes.min() == -32767 and codes.max() == 32767
    back = dequantize(codes, layout.info["bounds"])
    steps = [(hi - lo) / 65534 for lo, hi in layout.info["bounds"].values()]
    assert (np.abs(back - layout.points) <= np.asarray(steps) * 0.5 + 1e-6).all()


def test_axes_are_lengths_along_word_differences_as_whatlies_measures_them(small: Table) -> None:
    words = ["man", "woman", "king", "queen", "he", "she", "red", "blue"]
    ids = [small.resolve(w).id for w in words]
    rows = np.asarray(small.vectors[ids], dtype=np.float64)
    man, woman, red, blue = (rows[words.index(w)] for w in ("man", "woman", "red", "blue"))
    points, share = axes_projection(small.vectors[ids], man - woman, red - blue)
    d1, d2 = man - woman, red - blue
    np.testing.assert_allclose(points[:, 0], rows @ d1 / (d1 @ d1), rtol=1e-12)
    np.testing.assert_allclose(points[:, 1], rows @ d2 / (d2 @ d2), rtol=1e-12)
    assert points[words.index("man"), 0] - points[words.index("woman"), 0] == pytest.approx(1.0)
    assert points[words.index("king"), 0] > points[words.index("queen"), 0]  # king sits on man's side
    centred = rows - rows.mean(axis=0)
    expected = ((centred @ (d1 / np.linalg.norm(d1))) ** 2).sum() / (centred**2).sum()
    assert share[0] == pytest.approx(expected)


def test_one_axis_and_the_first_component_of_the_rest(small: Table) -> None:
    words = ["man", "woman", "king", "queen", "boy", "girl", "one", "two", "three"]
    rows = np.asarray(small.vectors[[small.resolve(w).id for w in words]], dtype=np.float64)
    d = rows[0] - rows[1]
    points, share = axes_projection(rows, d, None)
    unit = d / np.linalg.norm(d)
    centred = rows - rows.mean(axis=0)
    rest = centred - np.outer(centred @ unit, unit)
    reference, _ = reference_pca(rest)
    sign = np.sign(reference[:, 0] @ points[:, 1])
    np.testing.assert_allclose(points[:, 1], sign * reference[:, 0], atol=1e-12)
    assert 0 < share[0] < 1 and 0 < share[1] < 1
    with pytest.raises(InvalidQuery):
        axes_projection(rows, rows[0] - rows[0], None)


def test_cache_computes_once_keyed_by_checksum_and_outside_the_table(small: Table, tmp_path: Path) -> None:
    cache = LayoutCache(tmp_path)
    first = cache.layout(small.name, small.manifest, small.vectors, "pca")
    assert first.info["cached"] is False
    files = sorted(p.name for p in (tmp_path / "layouts").iterdir())
    checksum = small.manifest["files"][artifact.VECTORS]["sha256"][:16]
    key = f"small-{checksum}-pca-v1"
    assert files == [f".{key}.lock", f"{key}.json", f"{key}.npy"]  # the lock: one process computes it at a time
    again = LayoutCache(tmp_path).layout(small.name, small.manifest, small.vectors, "pca")  # a new process
    assert again.info["cached"] is True and again.info["key"] == first.info["key"]
    np.testing.assert_array_equal(again.points, first.points)
    other = {**small.manifest, "files": {artifact.VECTORS: {"sha256": "0" * 64}}}  # other rows: another key
    assert cache.layout(small.name, other, small.vectors[:100], "pca").info["rows"] == 100
    assert artifact.verify(small.directory).ok  # the table directory is untouched
    info = json.loads((tmp_path / "layouts" / f"{key}.json").read_text())
    assert info["method"] == "pca" and info["computed_at"]


def _lay_out(
    cache_dir: Path, small: Table, start: multiprocessing.synchronize.Event, cached: multiprocessing.Queue
) -> None:
    start.wait()
    cached.put(LayoutCache(cache_dir).layout(small.name, small.manifest, small.vectors, "pca").info["cached"])


def test_processes_sharing_the_directory_lay_a_table_out_once(
    small: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers asking for one layout at once: one computes it, the other waits for it and reads it from disk
    (each used to compute it: a t-SNE map's minutes of CPU once per worker)."""
    compute = layouts.pca_layout

    def slow(rows: np.ndarray) -> layouts.Layout:
        time.sleep(1)  # long enough for both to ask before either has written it
        return compute(rows)

    monkeypatch.setattr(layouts, "pca_layout", slow)
    fork = multiprocessing.get_context("fork")
    start, cached = fork.Event(), fork.Queue()
    workers = [fork.Process(target=_lay_out, args=(tmp_path, small, start, cached)) for _ in range(2)]
    for worker in workers:
        worker.start()
    start.set()
    answers = sorted(cached.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert answers == [False, True]


def test_labels_are_cached_as_gzip_json(small: Table, tmp_path: Path) -> None:
    import gzip

    body = LayoutCache(tmp_path).labels(small.name, small.manifest, small.tokens[:])
    assert json.loads(gzip.decompress(body)) == list(small.tokens[:])
    assert LayoutCache(tmp_path).labels(small.name, small.manifest, []) == body  # read back, not recomputed


def test_cache_dir_is_beside_the_tables_or_a_temporary_one(tmp_path: Path) -> None:
    assert default_cache_dir(tmp_path) == tmp_path / ".cache"
    assert artifact.list_tables(tmp_path) == []  # a dot name is never taken for a table
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / ".cache").write_text("not a directory")
    fallback = default_cache_dir(blocked)
    assert fallback.is_dir() and blocked not in fallback.parents


@pytest.mark.parametrize("made", ["a file", "a directory others may write", "a link"])
def test_a_temporary_cache_dir_made_by_someone_else_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: str
) -> None:
    """The shared fallback's name is predictable: a file, a directory others may write or a link there (another
    user's doing) is passed by, for a private directory of this process."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"embedding-search-cache-{os.getuid()}"
    if made == "a file":
        shared.write_text("x")
    elif made == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        shared.symlink_to(tmp_path / "elsewhere")
    else:
        shared.mkdir()
        shared.chmod(0o777)
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / ".cache").write_text("not a directory")
    fallback = default_cache_dir(blocked)
    assert fallback.is_dir() and fallback != shared and fallback.parent == tmp_path
    assert stat.S_IMODE(fallback.stat().st_mode) == 0o700
    if shared.is_dir() and not shared.is_symlink():
        shared.rmdir()
    else:
        shared.unlink()
    assert default_cache_dir(blocked) == shared and stat.S_IMODE(shared.stat().st_mode) == 0o700  # its own


def test_colour_columns_from_metadata_and_token_flags() -> None:
    kinds = ["colour", "number", "colour", "animal"] * 5 + [f"rare{i}" for i in range(20)]
    categories, codes = colour_column({"kind": kinds}, None, "kind")
    assert categories[:3] == ["colour", "animal", "number"] and categories[-1] == "other"
    assert len(categories) == 16
    assert [categories[c] for c in codes[:4]] == ["colour", "number", "colour", "animal"]
    assert categories[codes[kinds.index("rare9")]] == "other"  # ties: the first by value keep their own code
    flags = np.asarray([0, 2, 1, 3, 0], dtype=np.uint8)
    categories, codes = colour_column({}, flags, TOKEN_KIND)
    assert [categories[c] for c in codes] == ["word start", "continuation", "special", "special", "word start"]
    assert colour_columns({"kind": kinds, "readable": kinds}, flags) == [TOKEN_KIND, "kind"]
    with pytest.raises(InvalidQuery):
        colour_column({}, None, "kind")


def test_a_label_list_the_disk_cannot_hold_leaves_nothing_behind(
    small: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk: the list is answered, the failure logged, and the part written taken away again (no room kept
    by a temporary file no one will rename)."""
    import errno
    import gzip

    def half_written(self: Path, data: bytes) -> int:
        with open(self, "wb") as handle:
            handle.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(Path, "write_bytes", half_written)
    body = LayoutCache(tmp_path).labels(small.name, small.manifest, small.tokens[:])
    assert json.loads(gzip.decompress(body)) == list(small.tokens[:])
    assert "not written: [Errno 28] No space left on device" in caplog.text
    left = [path.name for path in (tmp_path / "layouts").iterdir() if path.suffix != ".lock"]  # the key's lock stays
    assert left == [], "a partial temporary file was left"
