"""The whole-table map, the axes projection and the projector export over HTTP (in process, real tables).

Coordinates are checked against a numpy float64 SVD of the table's unit rows (up to sign); an export is read
back by the real ``embedding-index import --format projector`` command.
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from index.build.sources import RawTable, glove_package
from index.build.writer import build_table
from index.engine.layout import MAP_INSTALL, TOKEN_KIND
from index.engine.table import Table
from index.store import artifact
from index.store.tokens import FLAG_CONTINUATION, FLAG_SPECIAL
from service.routers import map as map_routes
from tests.examples import example
from tests.minilm import MINILM
from tests.service import real_server
from tests.service.conftest import client_for

T = "/v1/tables/small"


def reference_pca(rows: np.ndarray) -> np.ndarray:
    centred = np.asarray(rows, dtype=np.float64) - np.asarray(rows, dtype=np.float64).mean(axis=0)
    u, s, _ = np.linalg.svd(centred, full_matrices=False)
    return (u * s)[:, :2]


def decode(body: bytes, info: dict) -> np.ndarray:
    codes = np.frombuffer(body, dtype="<i2").reshape(-1, 2).astype(np.float64)
    out = np.empty_like(codes)
    for axis, name in enumerate("xy"):
        lo, hi = info["bounds"][name]
        out[:, axis] = lo + (codes[:, axis] + 32767) / 65534 * (hi - lo)
    return out


def test_map_is_every_row_on_its_principal_components(api: TestClient, small: Table) -> None:
    info = api.get(f"{T}/map/info").json()
    assert info["table"] == "small" and info["method"] == "pca" and info["rows"] == small.rows
    assert info["format"] == "int16-le-xy" and info["columns"] == []
    response = api.get(f"{T}/map")
    assert response.status_code == 200 and response.headers["content-type"] == "application/octet-stream"
    assert len(response.content) == small.rows * 4  # two int16 a row
    points = decode(response.content, info)
    reference = reference_pca(small.vectors)
    for axis, name in enumerate("xy"):
        lo, hi = info["bounds"][name]
        sign = np.sign(points[:, axis] @ reference[:, axis])
        assert np.abs(points[:, axis] - sign * reference[:, axis]).max() <= (hi - lo) / 65534 + 1e-5
    centred = np.asarray(small.vectors, dtype=np.float64) - np.asarray(small.vectors, dtype=np.float64).mean(axis=0)
    s = np.linalg.svd(centred, compute_uv=False)
    np.testing.assert_allclose(info["explained_variance_ratio"], (s**2 / (s**2).sum())[:2], rtol=1e-5)


def test_map_is_cached_beside_the_tables_not_in_them(api: TestClient, small_data_dir: Path) -> None:
    api.get(f"{T}/map/info")
    layouts = small_data_dir / ".cache" / "layouts"
    assert any(p.suffix == ".npy" for p in layouts.iterdir())
    with client_for(data_dir=small_data_dir) as fresh:  # another server: read from disk, not computed
        assert fresh.get(f"{T}/map/info").json()["cached"] is True
    assert artifact.verify(small_data_dir / "small").ok
    assert [t["name"] for t in api.get("/v1/tables").json()["tables"]] == ["small"]


def test_labels_are_every_token_in_row_order(api: TestClient, small: Table) -> None:
    response = api.get(f"{T}/map/labels")
    assert response.status_code == 200 and response.headers["content-type"] == "application/gzip"
    assert json.loads(gzip.decompress(response.content)) == list(small.tokens[:])


def test_map_errors_are_the_envelope(api: TestClient) -> None:
    for path, status in [
        (f"{T}/map/colours/kind", 422),
        (f"{T}/map?method=tsne", 422),
        (f"{T}/map?method=umap", 422),
        ("/v1/tables/nope/map", 404),
    ]:
        response = api.get(path)
        assert response.status_code == status, path
        assert set(response.json()["error"]) >= {"code", "message"}
    assert "EMBEDDING_MAP_TSNE_ROWS" in api.get(f"{T}/map/info?method=tsne").json()["error"]["message"]


def test_a_model_table_is_coloured_by_token_kind(minilm_api: TestClient, minilm_data_dir: Path) -> None:
    table = Table.load(minilm_data_dir / MINILM, checksums=False)
    info = minilm_api.get(f"/v1/tables/{MINILM}/map/info").json()
    assert info["rows"] == table.rows and TOKEN_KIND in info["columns"]
    colours = minilm_api.get(f"/v1/tables/{MINILM}/map/colours/{TOKEN_KIND}").json()
    codes = np.frombuffer(base64.b64decode(colours["codes"]), dtype=np.uint8)
    kinds = np.asarray(colours["categories"])[codes]
    flags = np.asarray(table.flags)
    assert (kinds[(flags & FLAG_SPECIAL) != 0] == "special").all()
    assert (kinds[(flags & (FLAG_SPECIAL | FLAG_CONTINUATION)) == FLAG_CONTINUATION] == "continuation").all()
    assert kinds[table.resolve("heart").id] == "word start"


def test_the_python_client_reads_the_map_back(api: TestClient, minilm_api: TestClient, small: Table) -> None:
    from service_client import ApiError, Client

    client = Client("http://testserver", http=api)
    info = client.map_info("small")
    assert info == api.get(f"{T}/map/info").json()
    points = client.map_points("small")
    assert points.shape == (small.rows, 2) and points.dtype == np.float64
    np.testing.assert_array_equal(points, decode(api.get(f"{T}/map").content, info))
    assert client.map_labels("small") == list(small.tokens[:])
    with pytest.raises(ApiError) as refused:
        client.map_points("small", method="tsne")
    assert refused.value.status == 422 and "EMBEDDING_MAP_TSNE_ROWS" in refused.value.message
    colours = Client("http://testserver", http=minilm_api).map_colours(MINILM, TOKEN_KIND)
    answer = minilm_api.get(f"/v1/tables/{MINILM}/map/colours/{TOKEN_KIND}").json()
    assert colours.column == TOKEN_KIND and colours.categories == answer["categories"]
    np.testing.assert_array_equal(colours.codes, np.frombuffer(base64.b64decode(answer["codes"]), dtype=np.uint8))


def test_project_on_word_pair_axes(api: TestClient, small: Table) -> None:
    words = ["man", "woman", "king", "queen", "boy", "girl"]
    body = {"tokens": words, "method": "axes", "x_axis": ["man", "woman"], "y_axis": ["king", "boy"]}
    answer = api.post(f"{T}/project", json=body).json()
    assert answer["method"] == "axes" and answer["axes"] == {"x": ["man", "woman"], "y": ["king", "boy"]}
    rows = {w: np.asarray(small.vectors[small.resolve(w).id], dtype=np.float64) for w in words}
    dx, dy = rows["man"] - rows["woman"], rows["king"] - rows["boy"]
    for point in answer["points"]:
        v = rows[point["token"]]
        assert point["x"] == pytest.approx(v @ dx / (dx @ dx), abs=1e-9)
        assert point["y"] == pytest.approx(v @ dy / (dy @ dy), abs=1e-9)
    one = api.post(f"{T}/project", json={"tokens": words, "method": "axes", "x_axis": ["man", "woman"]}).json()
    assert one["axes"]["y"] == "pca" and [p["x"] for p in one["points"]] == [p["x"] for p in answer["points"]]
    # The PCA answer keeps its fields and values.
    pca = api.post(f"{T}/project", json={"tokens": words}).json()
    assert set(pca) == {"method", "points", "explained_variance_ratio", "unknown"} and pca["method"] == "pca"
    reference = reference_pca(np.stack([rows[w] for w in words]))
    got = np.asarray([[p["x"], p["y"]] for p in pca["points"]])
    np.testing.assert_allclose(np.abs(got), np.abs(reference), atol=1e-9)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"tokens": ["man", "king"], "method": "axes"}, 422),  # no x_axis
        ({"tokens": ["man", "king"], "x_axis": ["man", "woman"]}, 422),  # axes with pca
        ({"tokens": ["man", "king"], "method": "axes", "x_axis": ["man"]}, 422),  # not a pair
        ({"tokens": ["man", "king"], "method": "axes", "x_axis": ["man", "Man"]}, 422),  # one row
        ({"tokens": ["man", "king"], "method": "axes", "x_axis": ["man", "qzxqzx"]}, 404),
    ],
)
def test_axes_errors(api: TestClient, body: dict, status: int) -> None:
    response = api.post(f"{T}/project", json=body)
    assert response.status_code == status and response.json()["error"]["message"]


def run_import(path: Path, data_dir: Path, name: str, *options: str) -> Table:
    """``embedding-index import path`` with ``options`` (by default ``--format projector``) as table ``name``."""
    command = [str(Path(sys.executable).with_name("embedding-index")), "--quiet", "import", str(path)]
    command += [*(options or ("--format", "projector")), "--name", name, "--data-dir", str(data_dir), "--index", "flat"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return Table.load(data_dir / name)


def test_export_reimports_as_a_projector_table(api: TestClient, small: Table, tmp_path: Path) -> None:
    rows = [{"token": "red", "group": "colours"}, {"token": "blue", "group": "colours"}, {"id": 1000}]
    rows += [{"token": w, "group": "numbers"} for w in ("one", "two", "three")]
    out = tmp_path / "export"
    out.mkdir()
    for file in ("vectors", "metadata"):
        response = api.post(f"{T}/export", json={"rows": rows, "file": file})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/tab-separated-values")
        assert response.headers["content-disposition"] == f'attachment; filename="{file}.tsv"'
        (out / f"{file}.tsv").write_bytes(response.content)
    table = run_import(out, tmp_path / "data", "exported")
    ids = [small.resolve(r["token"]).id if "token" in r else r["id"] for r in rows]
    assert list(table.tokens[:]) == small.tokens.labels(ids)
    assert list(table.metadata["group"]) == ["colours", "colours", "", "numbers", "numbers", "numbers"]
    original = np.asarray(small.vectors[ids], dtype=np.float64) * np.asarray(small.norms[ids])[:, None]
    again = np.asarray(table.vectors, dtype=np.float64) * np.asarray(table.norms)[:, None]
    np.testing.assert_allclose(again, original, rtol=1e-6, atol=1e-7)

    # Without groups and metadata columns the metadata is one token per line, as the projector writes it.
    plain = api.post(f"{T}/export", json={"rows": [{"id": 0}, {"id": 1}], "file": "metadata"})
    assert plain.text == "\n".join(small.tokens.labels([0, 1])) + "\n"
    assert api.post(f"{T}/export", json={"rows": [{"id": 10**9}], "file": "vectors"}).status_code == 404
    assert api.post(f"{T}/export", json={"rows": [{"id": 2**63}], "file": "metadata"}).status_code == 404
    assert api.post(f"{T}/export", json={"rows": [], "file": "vectors"}).status_code == 422
    assert api.post(f"{T}/export", json={"rows": [{"id": 1, "token": "a"}], "file": "vectors"}).status_code == 422


def three_rows(small: Table, data_dir: Path, metadata: dict[str, list[str]]) -> None:
    """Table ``three`` in ``data_dir``: three of ``small``'s rows, the last token an ideographic space."""
    raw = RawTable(
        tokens=["heart", "tab\there", "\u3000"], matrix=np.asarray(small.vectors[:3]).copy(), metadata=metadata
    )
    build_table(raw, data_dir=data_dir, name="three", source={"format": "test", "path": "three"})


def export_and_reimport(small: Table, tmp_path: Path, metadata: dict[str, list[str]], rows: list[dict]) -> Table:
    """A table of three rows (:func:`three_rows`) and ``metadata``, exported by a real server as ``rows`` and
    imported again."""
    three_rows(small, tmp_path / "data", metadata)
    (tmp_path / "export").mkdir()
    server = real_server.start(tmp_path / "data", tmp_path / "server.log")
    try:
        for file in ("vectors", "metadata"):
            body = {"rows": rows, "file": file}
            response = real_server.HTTP.post(f"{server.base}/v1/tables/three/export", json=body)
            assert response.status_code == 200, response.text
            (tmp_path / "export" / f"{file}.tsv").write_bytes(response.content)
    finally:
        server.stop()
    table = run_import(tmp_path / "export", tmp_path / "again", "three")
    assert list(table.tokens[:]) == ["heart", "tab here", "\u3000"]  # a tab in a token is written as a space
    np.testing.assert_allclose(table.vectors[:], small.vectors[:3], rtol=1e-6, atol=1e-7)
    return table


def test_an_export_whose_last_token_is_spaces_reimports(small: Table, tmp_path: Path) -> None:
    """One token a line, the last an ideographic space: a token, not a blank line at the end of the file."""
    table = export_and_reimport(small, tmp_path, {}, [{"id": 0}, {"id": 1}, {"id": 2}])
    assert (tmp_path / "export" / "metadata.tsv").read_text() == "heart\ntab here\n\u3000\n"
    assert table.metadata == {}


def test_an_export_whose_last_token_is_spaces_and_its_group_none_reimports(small: Table, tmp_path: Path) -> None:
    """With a header (the request's groups), the last line a token of spaces and no group is a row, not a blank line
    at the end of the file."""
    table = export_and_reimport(small, tmp_path, {}, [{"id": 0, "group": "mine"}, {"id": 1}, {"id": 2}])
    assert (tmp_path / "export" / "metadata.tsv").read_text().endswith("\n\u3000\t\n")
    assert {name: list(values) for name, values in table.metadata.items()} == {"group": ["mine", "", ""]}


def test_an_export_of_columns_named_token_and_group_reimports(small: Table, tmp_path: Path) -> None:
    """Metadata columns named ``token`` and ``group`` (a projector import keeps them: its token column is the
    first, whatever its name) keep their names; the token column and the request's groups take others."""
    metadata = {"token": ["t0", "t1", "t2"], "group": ["g0", "g1", "g2"]}
    table = export_and_reimport(small, tmp_path, metadata, [{"id": 0, "group": "mine"}, {"id": 1}, {"id": 2}])
    assert (tmp_path / "export" / "metadata.tsv").read_text().splitlines()[0] == "token_\tgroup_\tgroup\ttoken"
    assert {name: list(values) for name, values in table.metadata.items()} == {**metadata, "group_": ["mine", "", ""]}


def test_the_documented_export_of_a_whole_table_reimports(
    small: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/explorer.md's export of a whole table a range of ids at a time, run against a real server in pieces of
    two rows: the pair, and the .npy and vocabulary written from it, import as the table's tokens and rows."""
    three_rows(small, tmp_path / "data", {})
    code = example("docs/explorer.md", "whole-table-export")
    server = real_server.start(tmp_path / "data", tmp_path / "server.log")
    (tmp_path / "export").mkdir()
    monkeypatch.chdir(tmp_path / "export")
    try:
        exec(code.replace("http://127.0.0.1:8000", server.base).replace('"lee", 50_000', '"three", 2'), {})
    finally:
        server.stop()
    vocab = str(tmp_path / "export" / "vocab.txt")
    for name, path, options in (("pair", "", ()), ("npy", "matrix.npy", ("--format", "npy", "--vocab", vocab))):
        table = run_import(tmp_path / "export" / path, tmp_path / "again", name, *options)
        assert list(table.tokens[:]) == ["heart", "tab here", "\u3000"]
        restored = np.asarray(table.vectors) * np.asarray(table.norms)[:, None]
        np.testing.assert_allclose(restored, small.vectors[:3], rtol=1e-6, atol=1e-7)  # the rows three was built of


def test_the_python_client_exports_rows(api: TestClient, small: Table) -> None:
    from service_client import Client

    client = Client("http://testserver", http=api)
    rows = [{"token": "red", "group": "colours"}, {"id": 1000}]
    for file in ("vectors", "metadata"):
        expected = api.post(f"{T}/export", json={"rows": rows, "file": file}).text
        assert client.export("small", rows, file) == expected
    assert client.export("small", ["red", 1000], "metadata") == f"red\n{small.tokens.labels([1000])[0]}\n"


def test_the_explorer_opens_on_the_default_table(tmp_path: Path, small: Table) -> None:
    raw = RawTable(tokens=list(small.tokens[:500]), matrix=np.asarray(small.vectors[:500]).copy())
    for name in ("aaa", "glove-6b-50d", "zzz"):
        build_table(raw, data_dir=tmp_path, name=name, source={"format": "test", "path": name}, index_spec="flat")
    assert map_routes.DEFAULT_NAME == glove_package.DEFAULT_NAME == "glove-6b-50d"  # named without the builder
    with client_for(data_dir=tmp_path) as client:
        assert client.get("/v1/explorer").json()["default_table"] == "glove-6b-50d"
    with client_for(data_dir=tmp_path, tables=["zzz", "aaa"]) as client:
        config = client.get("/v1/explorer").json()
        assert (config["default_table"], config["default_reason"]) == ("zzz", "EMBEDDING_TABLES")
    with client_for(data_dir=tmp_path, tables=["zzz", "aaa"], cache_dir=tmp_path / "elsewhere") as client:
        assert client.get("/v1/tables/aaa/map/info").status_code == 200
    assert list((tmp_path / "elsewhere" / "layouts").glob("aaa-*.npy"))
    (tmp_path / "glove-6b-50d" / artifact.MANIFEST).unlink()
    with client_for(data_dir=tmp_path) as client:
        assert client.get("/v1/explorer").json()["default_table"] == "aaa"


def test_tsne_of_the_most_frequent_rows_is_seeded_recorded_and_cached(tmp_path: Path, small: Table) -> None:
    pytest.importorskip("openTSNE")
    raw = RawTable(tokens=list(small.tokens[:400]), matrix=np.asarray(small.vectors[:400]).copy())
    build_table(raw, data_dir=tmp_path, name="few", source={"format": "test", "path": "few"}, index_spec="flat")
    with client_for(data_dir=tmp_path, map_tsne_rows=200) as client:
        config = client.get("/v1/explorer").json()
        assert config["tsne_rows"] == 200 and config["tsne_available"] is True and config["map_install"] == MAP_INSTALL
        info = client.get("/v1/tables/few/map/info?method=tsne").json()
        body = client.get("/v1/tables/few/map?method=tsne").content
    assert info["method"] == "tsne" and info["rows"] == 200 and len(body) == 200 * 4
    params = info["params"]
    assert (params["perplexity"], params["seed"], params["rows"], params["metric"]) == (30.0, 42, 200, "cosine")
    assert params["library"].startswith("openTSNE ")
    with client_for(data_dir=tmp_path, map_tsne_rows=200) as client:  # another server: the same map, from disk
        assert client.get("/v1/tables/few/map/info?method=tsne").json()["cached"] is True
        assert client.get("/v1/tables/few/map?method=tsne").content == body
    from index.engine.layout import tsne_layout

    few = Table.load(tmp_path / "few")
    again = tsne_layout(few.vectors[:200], 30.0, 500, 42)  # computed afresh with the recorded parameters
    np.testing.assert_allclose(decode(body, info), again.points, atol=max(np.ptp(again.points, axis=0)) / 65534)
    # Neighbourhoods survive: a row's 10 nearest on the map share several of its 10 nearest by cosine.
    points = again.points.astype(np.float64)
    unit = np.asarray(few.vectors[:200], dtype=np.float64)
    cosine = unit @ unit.T
    planar = -((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(cosine, -np.inf)
    np.fill_diagonal(planar, -np.inf)
    near = np.argsort(-cosine, axis=1)[:, :10]
    near2d = np.argsort(-planar, axis=1)[:, :10]
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(near, near2d, strict=True)])
    assert overlap > 0.25  # chance: 10 / 199


@pytest.mark.parametrize("damage", ["labels cut", "points cut", "points changed", "info without bounds"])
def test_a_cut_or_damaged_cache_file_is_laid_out_again(tmp_path: Path, small: Table, damage: str) -> None:
    """A kept file is served only whole: a label list cut short (served as it was, it failed the client's gunzip),
    positions cut or changed inside, an info file lacking a field (a 500): each is computed again and written
    over, and the answers are those of a fresh cache."""
    raw = RawTable(tokens=list(small.tokens[:300]), matrix=np.asarray(small.vectors[:300]).copy())
    build_table(
        raw, data_dir=tmp_path / "data", name="few", source={"format": "test", "path": "few"}, index_spec="flat"
    )
    paths = ("/v1/tables/few/map/labels", "/v1/tables/few/map", "/v1/tables/few/map/info")

    def answers(cache: Path) -> list[bytes]:
        with client_for(data_dir=tmp_path / "data", cache_dir=cache) as client:  # a server of its own: disk read
            got = [client.get(path) for path in paths]
        assert [r.status_code for r in got] == [200, 200, 200], [r.text for r in got]
        info = json.loads(got[2].content)
        assert set(info) >= {"bounds", "rows", "cached"}
        return [got[0].content, got[1].content, json.dumps({**info, "cached": None, "seconds": None}).encode()]

    fresh = answers(tmp_path / "fresh")
    layouts = tmp_path / "kept" / "layouts"
    answers(tmp_path / "kept")
    [labels] = layouts.glob("few-*-labels-v1.json.gz")
    [points] = layouts.glob("few-*-pca-v1.npy")
    [info] = layouts.glob("few-*-pca-v1.json")
    if damage == "labels cut":
        labels.write_bytes(labels.read_bytes()[:-20])
    elif damage == "points cut":
        points.write_bytes(points.read_bytes()[:-8])
    elif damage == "points changed":
        changed = np.load(points)
        changed[7] = changed[8]
        np.save(points, changed)
    else:
        kept = json.loads(info.read_text())
        del kept["bounds"]
        info.write_text(json.dumps(kept))
    again = answers(tmp_path / "kept")
    assert gzip.decompress(again[0]) == gzip.decompress(fresh[0])
    assert again[1] == fresh[1]
    assert json.loads(again[2])["bounds"] == json.loads(fresh[2])["bounds"]
    assert answers(tmp_path / "kept") == again  # written over: the next server reads it whole


def test_a_tsne_map_of_too_few_rows_says_which_limit_and_what_lays_it_out(tmp_path: Path, small: Table) -> None:
    """A t-SNE map at perplexity 30 needs 91 rows: the 422 says that the table has fewer (it said only that
    perplexity 30 needs more than 90 rows, which a client of the map cannot change)."""
    pytest.importorskip("openTSNE")
    raw = RawTable(tokens=list(small.tokens[:50]), matrix=np.asarray(small.vectors[:50]).copy())
    build_table(raw, data_dir=tmp_path, name="few", source={"format": "test", "path": "few"}, index_spec="flat")
    with client_for(data_dir=tmp_path, map_tsne_rows=200) as client:
        for path in ("/v1/tables/few/map/info?method=tsne", "/v1/tables/few/map?method=tsne"):
            response = client.get(path)
            assert response.status_code == 422, response.text
            assert response.json()["error"]["message"] == (
                "a t-SNE map (perplexity 30) needs at least 91 rows, and table 'few' has 50 (pca lays out any table)"
            )
        assert client.get("/v1/tables/few/map/info").json()["rows"] == 50
