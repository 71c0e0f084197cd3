"""2-D layouts of a whole table for the explorer's map, and the axes projection of a few rows.

- ``pca``: every row (unit length, as every cosine query sees it) on the table's first two principal components.
  The 2 x dim components come from the dim x dim covariance, accumulated block by block in float32 products and
  summed in float64, so a 400,000 x 50 table needs no full-size temporary; the points are one float32 product.
  A PCA that lasts a few seconds has the covariance's progress logged (the server's log, in its format), a line
  every few seconds as the builder's long steps print theirs, then one at the end; so has a t-SNE (its iterations)
  and a UMAP (how long it has run): :class:`index.progress.Progress` with the module's logger.
- ``tsne``: openTSNE (when installed) on the ``rows`` most frequent rows (the first rows of a frequency-ordered
  table), seeded, cosine metric, PCA initialisation; its parameters are recorded with the layout.

A few chosen rows (``POST .../project``) are laid out by ``pca_projection`` (their own principal components),
``axes_projection`` (word-pair axes), ``tsne_projection`` and ``umap_projection`` (openTSNE and umap-learn, seeded,
their neighbourhood size clamped to the handful of rows). umap-learn's compiled code is kept in numba's cache
(``umap_cache``), so a process's first UMAP loads what an earlier process compiled.

A layout is a pure function of the table's vectors and the parameters, so it is cached on disk under a key made
of the ``vectors.npy`` checksum from the manifest, the method and its parameters (``LayoutCache``). The cache
lives outside the table directory, which is read-only and verified file by file against its manifest.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import importlib.util
import json
import logging
import os
import stat
import tempfile
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from index.engine import umap_cache
from index.engine.table import Table
from index.errors import Abandoned, InvalidQuery, UnknownToken
from index.progress import Progress
from index.store import artifact
from index.store.tokens import FLAG_CONTINUATION, FLAG_SPECIAL

log = logging.getLogger(__name__)
Remembered = TypeVar("Remembered", "Layout", bytes)

LAYOUT_VERSION = 1  # bump when a method's output changes: older cache files are then never read
BLOCK_BYTES = 32 << 20  # covariance accumulated over blocks of about this size
TSNE_DEFAULTS: dict[str, Any] = {"perplexity": 30.0, "n_iter": 500, "seed": 42, "metric": "cosine"}
PROJECTION_SEED = 42  # the default seed of a t-SNE or UMAP projection of chosen rows
STOP_EVERY_ITERS = 25  # how often a t-SNE layout asks whether it is still wanted (and counts its progress)
TSNE_EARLY_ITERS = 250  # openTSNE's iterations of early exaggeration, before the n_iter ones
UMAP_DEFAULTS: dict[str, Any] = {"n_neighbors": 15, "min_dist": 0.1, "n_epochs": 500, "metric": "cosine"}
SAME_DIRECTION = 1e-6  # unit rows no further apart than this in any coordinate point the same way
MIN_NONLINEAR_ROWS = 4  # t-SNE of fewer rows is degenerate; UMAP's spectral initialisation needs four
# method -> (module to import, the PyPI package that provides it); both come with the ``map`` extra
PACKAGES = {"tsne": ("openTSNE", "openTSNE"), "umap": ("umap", "umap-learn")}
# How a server gets t-SNE and UMAP: the extra installed from the project's own checkout (PyPI's package of the same
# name is another project's) or built into the image. The 422 of a missing package and the explorer page say it.
MAP_INSTALL = "the map extra: .venv/bin/pip install -e '.[map]' in the checkout, or docker build --build-arg EXTRAS=map"
_UMAP_LOCK = threading.Lock()  # umap-learn does not promise thread safety; a few rows take milliseconds
KIND_FLAGS = (("special", FLAG_SPECIAL), ("continuation", FLAG_CONTINUATION))
TOKEN_KIND = "token kind"  # the colour column model-token tables get from their token flags
MAX_CATEGORIES = 16  # a colour column keeps its most common values; the rest are "other"


@dataclass(frozen=True)
class Layout:
    """``points``: float32 (rows, 2); ``info``: method, parameters, rows, bounds, explained variance, timing."""

    points: np.ndarray
    info: dict[str, Any]


def _sign_fix(components: np.ndarray) -> np.ndarray:
    """Each component flipped so that its largest loading is positive (as ``pca_projection`` does)."""
    signs = np.sign(components[np.arange(len(components)), np.abs(components).argmax(axis=1)])
    signs[signs == 0] = 1
    fixed: np.ndarray = components * signs[:, None]
    return fixed


def pca_components(rows: np.ndarray, n: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean (dim,), top-``n`` components (n, dim), their explained variance ratio (n,)) of ``rows``.

    Two passes over blocks of rows: the mean, then the centred covariance as float32 block products summed in
    float64; the dim x dim eigenproblem is solved in float64.
    """
    count, dim = rows.shape
    if count < 2:
        raise InvalidQuery("a layout needs at least two rows")
    step = max(1, BLOCK_BYTES // max(1, dim * 4))
    total = np.zeros(dim, dtype=np.float64)
    for start in range(0, count, step):
        total += np.asarray(rows[start : start + step], dtype=np.float32).sum(axis=0, dtype=np.float64)
    mean = total / count
    mean32 = mean.astype(np.float32)
    cov = np.zeros((dim, dim), dtype=np.float64)
    with Progress(f"PCA of {count:,} rows", count, log=log) as shown:  # the covariance is nearly all of the time
        for start in range(0, count, step):
            block = np.asarray(rows[start : start + step], dtype=np.float32) - mean32
            cov += block.T @ block
            shown.advance(len(block))
    cov /= count
    values, vectors = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1]
    values, vectors = np.clip(values[order], 0, None), vectors[:, order]
    components = _sign_fix(vectors[:, :n].T)
    variance = values.sum()
    ratio = values[:n] / variance if variance > 0 else np.zeros(n)
    if len(ratio) < n:
        components = np.pad(components, ((0, n - len(components)), (0, 0)))
        ratio = np.pad(ratio, (0, n - len(ratio)))
    return mean, components, ratio


def pca_layout(rows: np.ndarray) -> Layout:
    """Every row on the first two principal components of all rows (float32)."""
    started = time.perf_counter()
    mean, components, ratio = pca_components(rows)
    comp32 = np.ascontiguousarray(components.T, dtype=np.float32)  # dim x 2
    points = np.asarray(rows, dtype=np.float32) @ comp32
    points -= (mean @ components.T).astype(np.float32)
    info = {"method": "pca", "params": {}, "explained_variance_ratio": ratio.tolist()}
    return Layout(points, _finish(info, points, started))


def tsne_available() -> bool:
    """Whether openTSNE is installed (looked up, not imported: importing it loads scikit-learn)."""
    return importlib.util.find_spec("openTSNE") is not None


def tsne_least_rows(perplexity: float) -> int:
    """The fewest rows a t-SNE layout of ``perplexity`` takes: it looks at about 3 x perplexity neighbours of each."""
    return int(3 * perplexity) + 1


def missing_package(method: str) -> InvalidQuery:
    """The 422 for a layout method whose package is not installed: it names the package and the extra."""
    package = PACKAGES[method][1]
    name = {"tsne": "t-SNE", "umap": "UMAP"}[method]
    return InvalidQuery(
        f"{name} needs the {package} package, which this server does not have ({MAP_INSTALL})",
        package=package,
        extra="map",
    )


def require(method: str) -> None:
    """Raise ``missing_package`` when ``method`` (tsne, umap) cannot run here; other methods need nothing."""
    if method in PACKAGES:
        try:
            found = importlib.util.find_spec(PACKAGES[method][0]) is not None
        except ValueError:  # a module set to None in sys.modules: as good as missing
            found = False
        if not found:
            raise missing_package(method)


def tsne_layout(
    rows: np.ndarray,
    perplexity: float,
    n_iter: int,
    seed: int,
    metric: str = "cosine",
    stop: Callable[[], bool] | None = None,
    labels: Sequence[str] | None = None,
) -> Layout:
    """openTSNE of ``rows``: PCA initialisation, seeded, on one thread (reproducible run to run). ``stop`` is asked
    every few iterations; when it says so, the layout is abandoned (:class:`Abandoned`). ``labels`` (the rows'
    tokens) name a row that cannot be placed."""
    try:
        from openTSNE import TSNE
    except ImportError:
        raise missing_package("tsne") from None
    if len(rows) < tsne_least_rows(perplexity):
        raise InvalidQuery(f"t-SNE with perplexity {perplexity:g} needs more than {3 * perplexity:g} rows")
    started = time.perf_counter()
    data = np.asarray(rows, dtype=np.float32)
    zero = np.flatnonzero(~data.any(axis=1))
    if len(zero):  # openTSNE's cosine of a zero row is NaN
        row = int(zero[0])
        which = f"token {labels[row]!r} (row {row})" if labels is not None else f"row {row}"
        raise InvalidQuery(
            f"the vector of {which} is all zeros: t-SNE by cosine cannot place a row without direction (pca can)"
        )
    if data.shape[1] < 2:  # openTSNE starts from the rows' first two principal components
        raise InvalidQuery(
            f"t-SNE needs rows of at least 2 dimensions, and this table's have {data.shape[1]} (pca can lay them out)"
        )
    if np.ptp(data, axis=0).max() <= SAME_DIRECTION:  # openTSNE's PCA start divides by their spread: NaN points
        raise InvalidQuery(
            f"all {len(data):,} rows point the same way: t-SNE by cosine cannot spread rows with no distance between "
            "them (pca can)"
        )
    with Progress(f"t-SNE of {len(data):,} rows", TSNE_EARLY_ITERS + n_iter, "iterations", log=log) as shown:

        def callback(*_: object) -> bool:
            shown.advance(STOP_EVERY_ITERS)
            return stop is not None and stop()

        tsne = TSNE(
            n_components=2,
            perplexity=perplexity,
            metric=metric,
            initialization="pca",
            n_iter=n_iter,
            early_exaggeration_iter=TSNE_EARLY_ITERS,
            random_state=seed,
            n_jobs=1,
            neighbors="annoy" if len(data) > 1000 else "exact",
            verbose=False,
            callbacks=callback,
            callbacks_every_iters=STOP_EVERY_ITERS,
        )
        points = np.asarray(tsne.fit(data), dtype=np.float32)  # a stop cuts each phase short (openTSNE logs it)
        if stop is not None and stop():  # within the step: an abandoned one is not said done
            raise Abandoned("the t-SNE layout was abandoned: no one waits for it")
    import openTSNE

    params = {
        "perplexity": perplexity,
        "n_iter": n_iter,
        "seed": seed,
        "metric": metric,
        "initialization": "pca",
        "early_exaggeration_iter": TSNE_EARLY_ITERS,
        "neighbors": "annoy" if len(data) > 1000 else "exact",
        "library": f"openTSNE {openTSNE.__version__}",
    }
    return Layout(points, _finish({"method": "tsne", "params": params}, points, started))


def umap_layout(
    rows: np.ndarray,
    n_neighbors: int,
    min_dist: float,
    seed: int,
    n_epochs: int = UMAP_DEFAULTS["n_epochs"],
    metric: str = "cosine",
) -> Layout:
    """umap-learn of ``rows``: spectral initialisation, seeded (which makes umap-learn run on one thread)."""
    require("umap")  # looked up: its import (seconds) is part of the step shown
    if not 2 <= n_neighbors < len(rows):
        raise InvalidQuery(f"UMAP with n_neighbors {n_neighbors} needs more than {n_neighbors} rows")
    with Progress(f"UMAP of {len(rows):,} rows", None, log=log):  # umap-learn (its import too) reports nothing
        return _umap_layout(rows, n_neighbors, min_dist, seed, n_epochs, metric)


def _umap_layout(rows: np.ndarray, n_neighbors: int, min_dist: float, seed: int, n_epochs: int, metric: str) -> Layout:
    try:
        import umap
    except ImportError:
        raise missing_package("umap") from None
    started = time.perf_counter()
    data = np.asarray(rows, dtype=np.float32)

    def fit() -> np.ndarray:
        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=n_neighbors,
            min_dist=min_dist,
            metric=metric,
            n_epochs=n_epochs,
            init="spectral",
            random_state=seed,
            n_jobs=1,
        )
        with warnings.catch_warnings():  # a point it leaves unplaced is the caller's 422 (project), not a log line
            warnings.filterwarnings("ignore", "A large number of your vertices were disconnected", UserWarning)
            return np.asarray(reducer.fit_transform(data), dtype=np.float32)

    with _UMAP_LOCK:
        umap_cache.enable()  # a process's first layout loads umap-learn's compiled code where numba cached it
        try:
            points = fit()
        except OSError:
            if not umap_cache.disable():
                raise
            log.warning("numba's cache of umap-learn's code failed to write; compiling without it", exc_info=True)
            points = fit()
    params = {
        "n_neighbors": n_neighbors,
        "min_dist": min_dist,
        "n_epochs": n_epochs,
        "seed": seed,
        "metric": metric,
        "init": "spectral",
        "library": f"umap-learn {umap.__version__}",
    }
    return Layout(points, _finish({"method": "umap", "params": params}, points, started))


def _finish(info: dict[str, Any], points: np.ndarray, started: float) -> dict[str, Any]:
    lo, hi = points.min(axis=0), points.max(axis=0)
    return {
        **info,
        "rows": len(points),
        "bounds": {"x": [float(lo[0]), float(hi[0])], "y": [float(lo[1]), float(hi[1])]},
        "seconds": round(time.perf_counter() - started, 3),
    }


def quantize(points: np.ndarray, bounds: dict[str, list[float]]) -> np.ndarray:
    """Points as little-endian int16 pairs: -32767..32767 spans each axis's bounds (``dequantize`` undoes it)."""
    out = np.empty(points.shape, dtype="<i2")
    for axis, name in enumerate(("x", "y")):
        lo, hi = bounds[name]
        span = hi - lo if hi > lo else 1.0
        scaled = (points[:, axis].astype(np.float64) - lo) / span * 65534.0 - 32767.0
        out[:, axis] = np.rint(np.clip(scaled, -32767, 32767))
    return out


def dequantize(codes: np.ndarray, bounds: dict[str, list[float]]) -> np.ndarray:
    out = np.empty(codes.shape, dtype=np.float64)
    for axis, name in enumerate(("x", "y")):
        lo, hi = bounds[name]
        span = hi - lo if hi > lo else 1.0
        out[:, axis] = lo + (codes[:, axis].astype(np.float64) + 32767.0) / 65534.0 * span
    return out


# ------------------------------------------------------------------------------------ projections of a few rows
def pca_projection(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows on their own first two principal components, by a float64 SVD of the centred rows: (points n x 2,
    explained variance ratio (2,)). Each component's sign makes its largest loading positive, so the picture is
    stable; fewer than two independent rows leave the missing coordinates 0."""
    if len(rows) < 2:
        raise InvalidQuery("projection needs at least two distinct tokens")
    data = np.asarray(rows, dtype=np.float64)
    centred = data - data.mean(axis=0)
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    s[s <= s.max(initial=0) * max(centred.shape) * np.finfo(np.float64).eps] = 0  # rounding, not a direction
    signs = np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)])
    signs[signs == 0] = 1
    points = (u * s * signs)[:, :2] + 0.0  # + 0.0: a coordinate of no direction is 0, never -0.0
    if points.shape[1] < 2:
        points = np.pad(points, ((0, 0), (0, 2 - points.shape[1])))
    variance = s**2
    total = variance.sum()
    ratio = variance[:2] / total if total > 0 else np.zeros(2)
    return points, np.pad(ratio, (0, 2 - len(ratio)))


def _enough_rows(rows: np.ndarray, name: str) -> None:
    if len(rows) < MIN_NONLINEAR_ROWS:
        raise InvalidQuery(f"{name} needs at least {MIN_NONLINEAR_ROWS} distinct tokens, got {len(rows)}")


def tsne_projection(
    rows: np.ndarray,
    perplexity: float = TSNE_DEFAULTS["perplexity"],
    seed: int = PROJECTION_SEED,
    n_iter: int = TSNE_DEFAULTS["n_iter"],
    stop: Callable[[], bool] | None = None,
) -> Layout:
    """openTSNE of a few rows (``tsne_layout``), the perplexity lowered to (n - 1) / 3 when it is larger: t-SNE
    looks at about 3 x perplexity neighbours of each row, and n rows have n - 1. ``params`` holds the perplexity
    used and the one asked for."""
    _enough_rows(rows, "t-SNE")
    used = min(float(perplexity), (len(rows) - 1) / 3)
    layout = tsne_layout(rows, used, n_iter, seed, stop=stop)
    layout.info["params"]["perplexity_requested"] = float(perplexity)
    return layout


def umap_projection(
    rows: np.ndarray,
    n_neighbors: int = UMAP_DEFAULTS["n_neighbors"],
    min_dist: float = UMAP_DEFAULTS["min_dist"],
    seed: int = PROJECTION_SEED,
) -> Layout:
    """umap-learn of a few rows (``umap_layout``), ``n_neighbors`` lowered to n - 1 when it is larger (UMAP's
    neighbourhoods hold the row itself and n_neighbors - 1 others). ``params`` holds both values."""
    _enough_rows(rows, "UMAP")
    used = min(int(n_neighbors), len(rows) - 1)
    layout = umap_layout(rows, used, float(min_dist), seed)
    layout.info["params"]["n_neighbors_requested"] = int(n_neighbors)
    return layout


# ------------------------------------------------------------------------------------------- axes projection
def axes_projection(rows: np.ndarray, x_axis: np.ndarray, y_axis: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Rows on word-pair axes, as whatlies plots them: x = v . d / |d|^2 for the direction d = a - b (a's
    own point has x = a . d / |d|^2), y the same for c - d, or when ``y_axis`` is None the first principal
    component of the rows with the x direction removed. Returns (points n x 2, each axis's share of the rows'
    variance)."""
    rows = np.asarray(rows, dtype=np.float64)
    centred = rows - rows.mean(axis=0)
    total = float((centred**2).sum())

    def along(direction: np.ndarray) -> tuple[np.ndarray, float]:
        length2 = float(direction @ direction)
        if length2 <= 1e-12:
            raise InvalidQuery("an axis needs two different words (a - b is zero)")
        unit = direction / np.sqrt(length2)
        share = float(((centred @ unit) ** 2).sum()) / total if total > 0 else 0.0
        return rows @ direction / length2, share

    x, x_share = along(np.asarray(x_axis, dtype=np.float64))
    if y_axis is not None:
        y, y_share = along(np.asarray(y_axis, dtype=np.float64))
    else:
        unit = np.asarray(x_axis, dtype=np.float64) / np.linalg.norm(x_axis)
        rest = centred - np.outer(centred @ unit, unit)
        _, s, vt = np.linalg.svd(rest, full_matrices=False)
        component = _sign_fix(vt[:1])[0]
        y = rest @ component
        y_share = float(s[0] ** 2) / total if total > 0 and len(s) else 0.0
    return np.stack([x, y], axis=1), np.asarray([x_share, y_share])


# ------------------------------------------------------------------------------------ a table's chosen tokens
@dataclass(frozen=True)
class Projection:
    """What to project: ``tokens`` of a table by ``method`` (pca, axes, tsne or umap) and that method's settings;
    unknown tokens are an error, or with ``skip_unknown`` left out and listed."""

    tokens: Sequence[str]
    method: str = "pca"
    skip_unknown: bool = False
    x_axis: Sequence[str] | None = None
    y_axis: Sequence[str] | None = None
    seed: int = PROJECTION_SEED
    perplexity: float = TSNE_DEFAULTS["perplexity"]
    n_neighbors: int = UMAP_DEFAULTS["n_neighbors"]
    min_dist: float = UMAP_DEFAULTS["min_dist"]


def project(table: Table, asked: Projection, stop: Callable[[], bool] | None = None) -> dict[str, Any]:
    """The tokens' rows (each row once) laid out in 2-D: ``{"method", "points": [{"token", "id", "x", "y",
    "text"}], "explained_variance_ratio"?, "unknown"}`` (``token`` the row's label, ``text`` the first of the
    tokens asked for that found it: "Café" beside "cafe"), with ``axes`` (method axes) or ``params`` (tsne, umap).
    ``stop`` ends a t-SNE layout early (its client went)."""
    require(asked.method)  # a method whose package is missing: 422 naming it, before any work
    rows: dict[int, str] = {}  # id -> its label; repeats of a row are projected once
    texts: dict[int, str] = {}  # id -> the first token asked for that found it
    unknown = []
    for token in asked.tokens:
        try:
            found = table.resolve(token)
        except UnknownToken:
            if not asked.skip_unknown:
                raise
            unknown.append(token)
            continue
        rows.setdefault(found.id, found.token)
        texts.setdefault(found.id, token)
    ids = list(rows)
    if len(ids) < 2:
        left_out = f"; not in table {table.name!r}: {', '.join(map(repr, unknown[:5]))}" if unknown else ""
        raise InvalidQuery(f"projection needs at least two distinct tokens{left_out}")
    vectors = np.asarray(table.vectors[ids])
    extra: dict[str, Any] = {}
    if asked.method == "axes" and asked.x_axis is not None:
        x_axis, x_pair = _axis(table, asked.x_axis)
        y_axis, y_pair = _axis(table, asked.y_axis) if asked.y_axis is not None else (None, None)
        points, ratio = axes_projection(vectors, x_axis, y_axis)
        extra["axes"] = {"x": x_pair, "y": y_pair if y_pair is not None else "pca"}
    elif asked.method in ("tsne", "umap"):
        if asked.method == "tsne":
            zero = np.flatnonzero(~vectors.any(axis=1))
            if len(zero):
                raise InvalidQuery(
                    f"the vector of token {rows[ids[zero[0]]]!r} is all zeros: t-SNE by cosine cannot place a row "
                    "without direction (leave it out, or use pca, axes or umap)"
                )
            layout = tsne_projection(vectors, asked.perplexity, asked.seed, stop=stop)
        else:
            layout = umap_projection(vectors, asked.n_neighbors, asked.min_dist, asked.seed)
            lost = np.flatnonzero(~np.isfinite(layout.points).all(axis=1))
            if len(lost):  # umap-learn cuts edges of cosine distance 2 and leaves a row without any at NaN
                names = ", ".join(repr(rows[ids[i]]) for i in lost[:5])
                raise InvalidQuery(
                    f"UMAP cannot place {names}: every row near it by cosine points exactly the opposite way (leave "
                    "it out, add tokens near it, or use pca or axes)"
                )
        points, ratio = layout.points, None
        extra["params"] = layout.info["params"]
    else:
        points, ratio = pca_projection(vectors)
    out: dict[str, Any] = {
        "method": asked.method,
        "points": [
            {"token": rows[i], "id": i, "x": x, "y": y, "text": texts[i]}
            for i, (x, y) in zip(ids, points.tolist(), strict=True)
        ],
    }
    if ratio is not None:
        out["explained_variance_ratio"] = ratio.tolist()
    return {**out, "unknown": unknown, **extra}


def _axis(table: Table, pair: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """The direction a - b of two tokens' unit rows, and the tokens they resolved to (unknown: 404)."""
    a, b = (table.resolve(token) for token in pair)
    if a.id == b.id:
        raise InvalidQuery(f"an axis needs at least two distinct tokens: {pair[0]!r} and {pair[1]!r} are one row")
    direction = np.asarray(table.vectors[a.id], dtype=np.float64) - np.asarray(table.vectors[b.id], dtype=np.float64)
    return direction, [a.token, b.token]


# ------------------------------------------------------------------------------------------------ the cache
def table_key(manifest: dict[str, Any], file: str = artifact.VECTORS) -> str:
    """The first 16 hex digits of a table file's sha256 from its manifest (a rebuild with other rows, another
    key); a manifest without checksums gets a key from its name and build time."""
    digest = manifest.get("files", {}).get(file, {}).get("sha256")
    if not digest:
        digest = hashlib.sha256(f"{manifest.get('name')}|{manifest.get('built_at')}".encode()).hexdigest()
    return str(digest)[:16]


def default_cache_dir(data_dir: Path) -> Path:
    """``<data_dir>/.cache`` when it can be written (the registry skips names starting with a dot), else a
    directory under the system's temporary directory."""
    candidate = Path(data_dir) / ".cache"
    try:
        candidate.mkdir(exist_ok=True)
        probe = candidate / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return candidate
    except OSError:
        fallback = Path(tempfile.gettempdir()) / f"embedding-search-cache-{os.getuid()}"  # the workers share it
        with contextlib.suppress(FileExistsError):
            fallback.mkdir(mode=0o700)
        mine = fallback.lstat()
        if not stat.S_ISDIR(mine.st_mode) or mine.st_uid != os.getuid() or mine.st_mode & 0o022:
            # made by someone else (a file, a link, a directory others may write): a private one instead
            return Path(tempfile.mkdtemp(prefix="embedding-search-cache-"))
        return fallback


class LayoutCache:
    """Layouts and label lists kept on disk (``<dir>/layouts``) and the last few in memory, computed once per
    key even when requests for it arrive together, in this process or in others sharing the directory (a lock
    file per key). A kept file is used only whole: a layout's points match the checksum in its ``.json``, a label
    list passes gzip's own check; anything else is computed again and written over it."""

    def __init__(self, directory: Path, memory_items: int = 4) -> None:
        self.directory = Path(directory) / "layouts"
        self.memory_items = memory_items
        self._memory: dict[str, Any] = {}  # key -> its Layout, or a label list's bytes
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, key: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    @contextlib.contextmanager
    def _computing(self, key: str) -> Iterator[None]:
        """Held while ``key`` is looked up and computed: by one thread of this process, and by one process of those
        sharing the directory (an flock on ``.<key>.lock``; a directory that cannot hold it: this process's lock)."""
        with self._lock(key):
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                fd: int | None = os.open(self.directory / f".{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                fd = None
            try:
                if fd is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                if fd is not None:
                    os.close(fd)  # and with it the flock

    def _remember(self, key: str, value: Remembered) -> Remembered:
        with self._guard:
            self._memory.pop(key, None)
            self._memory[key] = value
            while len(self._memory) > self.memory_items:
                self._memory.pop(next(iter(self._memory)))
        return value

    @staticmethod
    def _key(name: str, manifest: dict[str, Any], method: str, params: dict[str, Any]) -> str:
        suffix = "-".join(f"{k}{v}" for k, v in sorted(params.items()))
        return f"{name}-{table_key(manifest)}-{method}{suffix and '-' + suffix}-v{LAYOUT_VERSION}"

    def _kept(self, key: str) -> Layout | None:
        found: Layout | None = self._memory.get(key)  # a layout key holds a Layout
        if found is not None:
            return found
        try:
            points = np.load(self.directory / f"{key}.npy")
            info = json.loads((self.directory / f"{key}.json").read_text())
            whole = (
                points.shape == (int(info["rows"]), 2)
                and points.dtype == np.float32
                and info.get("points_sha256") == _checksum(points)
                and {"method", "bounds", "seconds"} <= info.keys()
            )
            if whole:
                return self._remember(key, Layout(points, {**info, "cached": True}))
            log.warning("layout cache %s: cut, damaged or without its checksum; computed again", key)
        except OSError:  # not there (or not readable): computed, and written when the directory can be
            pass
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("layout cache %s: unreadable (%s), computed again", key, exc)
        return None

    def kept(self, name: str, manifest: dict[str, Any], method: str, **params: Any) -> Layout | None:
        """The layout :meth:`layout` would give if it is kept already (in memory or on disk), else None."""
        return self._kept(self._key(name, manifest, method, params))

    def layout(
        self,
        name: str,
        manifest: dict[str, Any],
        vectors: np.ndarray,
        method: str,
        labels: Sequence[str] | None = None,
        **params: Any,
    ) -> Layout:
        """The ``method`` layout of ``vectors`` (the table's unit rows; t-SNE: the first ``params['rows']``, a row
        it cannot place named by its ``labels``)."""
        key = self._key(name, manifest, method, params)
        found: Layout | None = self._memory.get(key)
        if found is not None:
            return found
        with self._computing(key):
            kept = self._kept(key)  # also by a request, or another process, that held the lock before this one
            if kept is not None:
                return kept
            points_path, info_path = self.directory / f"{key}.npy", self.directory / f"{key}.json"
            if method == "pca":
                layout = pca_layout(vectors)
            elif method == "tsne":
                rows = vectors[: params["rows"]]
                layout = tsne_layout(rows, params["perplexity"], params["n_iter"], params["seed"], labels=labels)
                layout.info["params"]["rows"] = params["rows"]
            else:
                raise InvalidQuery(f"unknown layout method {method!r}")
            info = {
                **layout.info,
                "key": key,
                "computed_at": artifact.now_iso(),
                "points_sha256": _checksum(layout.points),
            }
            self._write(points_path, lambda path: np.save(path, layout.points))
            self._write(info_path, lambda path: path.write_text(json.dumps(info, indent=1)))
            log.info("layout %s: %s of %d rows in %.2f s", key, method, layout.info["rows"], layout.info["seconds"])
            return self._remember(key, Layout(layout.points, {**info, "cached": False}))

    def labels(self, name: str, manifest: dict[str, Any], labels: Sequence[str]) -> bytes:
        """Every row's label as one gzip-compressed JSON array (row id = position)."""
        key = f"{name}-{table_key(manifest, 'tokens.bin')}-labels-v{LAYOUT_VERSION}"
        found: bytes | None = self._memory.get(key)  # a labels key holds bytes
        if found is not None:
            return found
        with self._computing(key):
            path = self.directory / f"{key}.json.gz"
            with contextlib.suppress(OSError):  # not there (or not readable): computed
                kept = path.read_bytes()
                try:
                    gzip.decompress(kept)  # a cut or damaged file fails gzip's length and CRC check
                    return self._remember(key, kept)
                except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
                    log.warning("layout cache %s: cut or damaged (%s), computed again", path.name, exc)
            import orjson

            body = gzip.compress(orjson.dumps(list(labels)), compresslevel=6, mtime=0)
            self._write(path, lambda target: target.write_bytes(body))
            return self._remember(key, body)

    def _write(self, path: Path, write: Callable[[Path], object]) -> None:
        """Write through a temporary file and rename it into place; a cache that cannot be written is logged, and
        what it wrote of the temporary file removed (on a full disk, the room it took)."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        if tmp.suffix != path.suffix:  # np.save adds .npy to names without it
            tmp = tmp.with_name(tmp.name + path.suffix)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write(tmp)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("layout cache %s not written: %s", path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()


def _checksum(points: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(points).tobytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- colour columns
def colour_column(
    metadata: Mapping[str, Sequence[str]], flags: np.ndarray | None, column: str
) -> tuple[list[str], np.ndarray]:
    """(categories, uint8 code per row) of a metadata column, or of the token kind of a model-token table.

    The ``MAX_CATEGORIES - 1`` most common values keep their own code; the rest share the last one, "other".
    """
    if column == TOKEN_KIND and flags is not None:
        codes = np.zeros(len(flags), dtype=np.uint8)
        flags = np.asarray(flags)
        codes[(flags & KIND_FLAGS[1][1]) != 0] = 1
        codes[(flags & KIND_FLAGS[0][1]) != 0] = 2
        return ["word start", "continuation", "special"], codes
    if column not in metadata:
        names = ", ".join(colour_columns(metadata, flags)) or "none"
        raise InvalidQuery(f"no colour column {column!r}; the columns of this table: {names}")
    values, inverse, counts = np.unique(
        np.asarray(metadata[column], dtype=object), return_inverse=True, return_counts=True
    )
    order = np.argsort(-counts, kind="stable")
    keep = order[: MAX_CATEGORIES - 1] if len(values) > MAX_CATEGORIES else order
    code_of = np.full(len(values), len(keep), dtype=np.uint8)
    code_of[keep] = np.arange(len(keep), dtype=np.uint8)
    categories = [str(values[i]) for i in keep] + (["other"] if len(values) > len(keep) else [])
    return categories, code_of[inverse.ravel()]


def colour_columns(metadata: Mapping[str, Sequence[str]], flags: np.ndarray | None) -> list[str]:
    """The columns a map can be coloured by: the token kind (model-token tables), then the metadata columns."""
    names = [TOKEN_KIND] if flags is not None else []
    return names + sorted(name for name in metadata if name != "readable")
