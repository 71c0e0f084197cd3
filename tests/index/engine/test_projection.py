"""Projections of a few chosen rows (engine.layout): PCA against a float64 SVD, t-SNE and UMAP against openTSNE and
umap-learn called directly with the same seed and parameters, on the 20,000-row GloVe table."""

from __future__ import annotations

import logging
import re
import sys
import time

import numpy as np
import pytest

from index import progress
from index.engine import layout as layouts
from index.engine.layout import (
    MAP_INSTALL,
    MIN_NONLINEAR_ROWS,
    PROJECTION_SEED,
    Projection,
    pca_projection,
    project,
    require,
    tsne_layout,
    tsne_projection,
    umap_projection,
)
from index.engine.table import Table
from index.errors import Abandoned, InvalidQuery, UnknownToken

GROUPS = {  # the explorer's opening word map
    "colours": "red green blue yellow purple orange",
    "numbers": "one two three four five six",
    "body parts": "hand foot head eye heart arm",
    "animals": "dog cat horse cow bird fish",
    "people": "man woman king queen he she",
}
WORDS = [w for line in GROUPS.values() for w in line.split()]
GROUP_OF = [g for g, line in GROUPS.items() for _ in line.split()]


@pytest.fixture(scope="module")
def rows(small: Table) -> np.ndarray:
    return np.asarray(small.vectors[[small.resolve(w).id for w in WORDS]])


def same_group_share(points: np.ndarray) -> float:
    """The share of points whose nearest other point (in 2-D) is of their own group."""
    distances = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=2)
    np.fill_diagonal(distances, np.inf)
    nearest = distances.argmin(axis=1)
    return float(np.mean([GROUP_OF[i] == GROUP_OF[j] for i, j in enumerate(nearest)]))


def test_pca_projection_is_a_float64_svd_of_the_centred_rows(small: Table) -> None:
    ids = [small.resolve(w).id for w in ("red", "blue", "green", "one", "two", "three")]
    points, ratio = pca_projection(small.vectors[ids])
    data = np.asarray(small.vectors[ids], dtype=np.float64)
    u, s, vt = np.linalg.svd(data - data.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(ratio, (s**2 / (s**2).sum())[:2], rtol=1e-9)
    np.testing.assert_allclose(np.abs(points), np.abs(u[:, :2] * s[:2]), atol=1e-12)
    for axis in range(2):  # the sign makes each component's largest loading positive
        component = vt[axis] * np.sign(points[:, axis] @ (u[:, axis] * s[axis]))
        assert component[np.abs(component).argmax()] > 0
    assert np.sign(points[:3, 0]).tolist() != np.sign(points[3:, 0]).tolist()  # colours and numbers apart
    with pytest.raises(InvalidQuery, match="at least two distinct"):
        pca_projection(small.vectors[ids[:1]])
    two, two_ratio = pca_projection(small.vectors[ids[:2]])  # two rows differ along one direction: y is 0
    assert two.shape == (2, 2) and np.abs(two[:, 1]).max() < 1e-9 and two_ratio[0] == pytest.approx(1.0)


@pytest.mark.usefixtures("numba_compiled")
def test_tsne_equals_opentsne_with_the_same_seed_and_the_perplexity_lowered(rows: np.ndarray) -> None:
    from openTSNE import TSNE

    layout = tsne_projection(rows)
    n = len(rows)
    perplexity = (n - 1) / 3  # 30 asked for; 29 other rows
    direct = TSNE(
        n_components=2,
        perplexity=perplexity,
        metric="cosine",
        initialization="pca",
        n_iter=500,
        random_state=PROJECTION_SEED,
        n_jobs=1,
        neighbors="exact",
        verbose=False,
    ).fit(np.asarray(rows, dtype=np.float32))
    np.testing.assert_array_equal(layout.points, np.asarray(direct, dtype=np.float32))
    params = layout.info["params"]
    assert params["perplexity"] == pytest.approx(perplexity) and params["perplexity_requested"] == 30.0
    assert params["seed"] == PROJECTION_SEED and params["metric"] == "cosine" and params["n_iter"] == 500
    assert params["library"].startswith("openTSNE ")
    assert same_group_share(layout.points) >= 0.8  # words of a group end up beside each other

    low = tsne_projection(rows, perplexity=4.0, seed=7)  # below the cap: kept
    assert low.info["params"]["perplexity"] == 4.0 and low.info["params"]["seed"] == 7
    np.testing.assert_array_equal(tsne_projection(rows, perplexity=4.0, seed=7).points, low.points)
    assert not np.array_equal(tsne_projection(rows, perplexity=4.0, seed=8).points, low.points)


@pytest.mark.usefixtures("numba_compiled")
def test_umap_equals_umap_learn_with_the_same_seed_and_n_neighbors_lowered(rows: np.ndarray) -> None:
    import umap

    few = rows[:10]
    layout = umap_projection(few)  # 15 asked for; 9 other rows
    direct = umap.UMAP(
        n_components=2,
        n_neighbors=9,
        min_dist=0.1,
        metric="cosine",
        n_epochs=500,
        init="spectral",
        random_state=PROJECTION_SEED,
        n_jobs=1,
    ).fit_transform(np.asarray(few, dtype=np.float32))
    np.testing.assert_array_equal(layout.points, np.asarray(direct, dtype=np.float32))
    params = layout.info["params"]
    assert params["n_neighbors"] == 9 and params["n_neighbors_requested"] == 15
    assert params["min_dist"] == 0.1 and params["seed"] == PROJECTION_SEED and params["init"] == "spectral"
    assert params["library"].startswith("umap-learn ")

    every = umap_projection(rows, n_neighbors=5, min_dist=0.3, seed=3)  # below the cap: kept
    assert every.info["params"]["n_neighbors"] == 5 and every.info["params"]["min_dist"] == 0.3
    np.testing.assert_array_equal(umap_projection(rows, n_neighbors=5, min_dist=0.3, seed=3).points, every.points)
    assert not np.array_equal(umap_projection(rows, n_neighbors=5, min_dist=0.3, seed=4).points, every.points)
    assert same_group_share(every.points) >= 0.8


@pytest.mark.usefixtures("numba_compiled")
def test_a_long_tsne_logs_its_iterations_and_a_long_umap_its_time(
    rows: np.ndarray, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A t-SNE or UMAP that lasts the progress interval says so in the server's log, as the builder's long steps
    do: t-SNE its iterations (openTSNE's callback, every few), UMAP (which reports nothing) how long it has run,
    every interval, then its end; one quicker than the interval says nothing. Here UMAP's fit is held until its
    clock has said two lines: a UMAP made long on purpose."""
    import umap

    with caplog.at_level(logging.INFO, logger=layouts.__name__):
        monkeypatch.setattr(progress.CONFIG, "interval", 3600.0)  # quicker than it on any machine, however busy
        tsne_projection(rows)
        assert caplog.messages == []
        monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at every step forward
        tsne_projection(rows)
    said = caplog.messages
    assert said[-1].startswith("t-SNE of 30 rows: done (750 of 750 iterations) in "), said
    done = [int(message.split(": ")[1].split("%")[0]) for message in said[:-1]]
    assert len(done) >= 10 and done == sorted(done) and done[0] < 10, said

    caplog.clear()
    fit = umap.UMAP.fit_transform

    def held(self: object, *args: object, **kwargs: object) -> object:
        deadline = time.monotonic() + 120  # a bound for a silent step, not a timing
        while sum(message.startswith("UMAP of 10 rows: ") for message in caplog.messages) < 2:
            assert time.monotonic() < deadline, f"UMAP silent for 120 s: {caplog.messages}"
            time.sleep(0.01)
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(umap.UMAP, "fit_transform", held)
    monkeypatch.setattr(progress.CONFIG, "interval", 0.05)
    with caplog.at_level(logging.INFO, logger=layouts.__name__):
        umap_projection(rows[:10])
    *running, last = caplog.messages
    assert len(running) >= 2 and all(re.fullmatch(r"UMAP of 10 rows: \S+ so far", m) for m in running), running
    assert last.startswith("UMAP of 10 rows: done in "), last


def test_an_abandoned_tsne_is_not_said_done(
    rows: np.ndarray, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A projection whose client went stops within a few iterations: its step ends with the refusal, not with a
    line saying all its iterations were done."""
    asked = []

    def stop() -> bool:
        asked.append(True)
        return len(asked) > 2

    monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at each step forward
    with caplog.at_level(logging.INFO, logger=layouts.__name__), pytest.raises(Abandoned):
        tsne_projection(rows, stop=stop)
    assert caplog.messages and not [message for message in caplog.messages if "done" in message], caplog.messages


@pytest.mark.parametrize(("project", "name"), [(tsne_projection, "t-SNE"), (umap_projection, "UMAP")])
def test_too_few_rows_are_refused(rows: np.ndarray, project: object, name: str) -> None:
    with pytest.raises(InvalidQuery, match=f"{name} needs at least {MIN_NONLINEAR_ROWS} distinct tokens, got 3"):
        project(rows[:3])  # type: ignore[operator]


def test_a_tsne_map_refuses_a_zero_row(rows: np.ndarray) -> None:
    """openTSNE's cosine of a zero row is NaN: the whole-table layout names the row instead, by its label."""
    zeroed = rows.copy()
    zeroed[7] = 0
    refused = r"the vector of token 'two' \(row 7\) is all zeros: t-SNE by cosine cannot place a row without direction"
    with pytest.raises(InvalidQuery, match=refused):
        tsne_layout(zeroed, 5.0, 250, 42, labels=WORDS)
    with pytest.raises(InvalidQuery, match="the vector of row 7 is all zeros"):
        tsne_layout(zeroed, 5.0, 250, 42)


@pytest.mark.parametrize(
    ("method", "module", "package", "project"),
    [("tsne", "openTSNE", "openTSNE", tsne_projection), ("umap", "umap", "umap-learn", umap_projection)],
)
def test_a_missing_package_is_named_with_its_extra(
    rows: np.ndarray, monkeypatch: pytest.MonkeyPatch, method: str, module: str, package: str, project: object
) -> None:
    require(method)  # installed here (the dev extra)
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if it were not installed
    for call in (lambda: require(method), lambda: project(rows)):  # type: ignore[operator]
        with pytest.raises(InvalidQuery) as missing:
            call()
        assert package in missing.value.message and MAP_INSTALL in missing.value.message
        assert missing.value.details == {"package": package, "extra": "map"}
    require("pca")
    require("axes")


def test_a_table_s_tokens_projected_each_row_once_unknown_ones_listed(small: Table) -> None:
    """``project`` resolves the tokens (a repeated word, or another case of it, is one point: ``token`` its row's
    label, ``text`` the first word that found it), leaves unknown ones out when asked, and lays out the rows as
    ``pca_projection`` does."""
    tokens = ["King", "queen", "zzqx-unknown", "man", "king", "woman"]
    answer = project(small, Projection(tokens, skip_unknown=True))
    ids = [small.resolve(w).id for w in ("king", "queen", "man", "woman")]
    points, ratio = pca_projection(np.asarray(small.vectors[ids]))
    assert [(p["token"], p["id"]) for p in answer["points"]] == list(
        zip(["king", "queen", "man", "woman"], ids, strict=True)
    )
    assert [p["text"] for p in answer["points"]] == ["King", "queen", "man", "woman"]
    np.testing.assert_allclose([[p["x"], p["y"]] for p in answer["points"]], points)
    assert answer["explained_variance_ratio"] == ratio.tolist() and answer["unknown"] == ["zzqx-unknown"]
    with pytest.raises(UnknownToken):
        project(small, Projection(tokens))
    for method in ("pca", "axes", "tsne"):  # too few rows left: the message names the tokens left out
        with pytest.raises(InvalidQuery, match=r"two distinct tokens; not in table 'small': 'zzqx-unknown', 'qq-z'$"):
            project(small, Projection(["king", "zzqx-unknown", "king", "qq-z"], method=method, skip_unknown=True))


def test_word_pair_axes_of_a_table(small: Table) -> None:
    """x along king - queen, y along man - woman: each point's coordinates are its unit row's projections."""
    answer = project(small, Projection(WORDS, method="axes", x_axis=["king", "queen"], y_axis=["man", "woman"]))
    unit = {
        w: np.asarray(small.vectors[small.resolve(w).id], dtype=np.float64) for w in ("king", "queen", "man", "woman")
    }
    x_dir, y_dir = unit["king"] - unit["queen"], unit["man"] - unit["woman"]
    for point in answer["points"]:
        row = np.asarray(small.vectors[point["id"]], dtype=np.float64)
        assert point["x"] == pytest.approx(row @ x_dir / (x_dir @ x_dir))
        assert point["y"] == pytest.approx(row @ y_dir / (y_dir @ y_dir))
    assert answer["axes"] == {"x": ["king", "queen"], "y": ["man", "woman"]}
    with pytest.raises(InvalidQuery, match="are one row"):
        project(small, Projection(WORDS, method="axes", x_axis=["king", "king"]))
