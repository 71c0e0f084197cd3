"""POST .../project with method tsne and umap over HTTP (in process, the 20,000-row GloVe table): the answers equal
openTSNE's and umap-learn's own on the table's unit rows with the same seed, the parameters are echoed, errors
are the usual envelope, and the OpenAPI document describes the four forms the validator accepts."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from fastapi.testclient import TestClient

from index.engine.layout import MAP_INSTALL
from index.engine.table import Table
from tests.cli import run_cli
from tests.service.conftest import client_for

T = "/v1/tables/small"

WORDS = ["red", "green", "blue", "yellow", "one", "two", "three", "four"]
WORDS += ["dog", "cat", "horse", "cow", "king", "queen", "man", "woman"]


def unit_rows(small: Table, words: list[str]) -> np.ndarray:
    return np.asarray(small.vectors[[small.resolve(w).id for w in words]], dtype=np.float32)


def points_of(answer: dict[str, Any]) -> np.ndarray:
    return np.asarray([[p["x"], p["y"]] for p in answer["points"]], dtype=np.float32)


def project(api: TestClient, **body: Any) -> dict[str, Any]:
    response = api.post(f"{T}/project", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_tsne_answers_as_opentsne_with_the_same_seed(api: TestClient, small: Table) -> None:
    from openTSNE import TSNE

    answer = project(api, tokens=[*WORDS, "qzxqzxq"], method="tsne", skip_unknown=True)
    assert answer["method"] == "tsne" and answer["unknown"] == ["qzxqzxq"]
    assert [p["token"] for p in answer["points"]] == WORDS
    assert "explained_variance_ratio" not in answer and "axes" not in answer
    params = answer["params"]
    perplexity = (len(WORDS) - 1) / 3  # 30 asked for by default, lowered for 16 words
    assert params["perplexity"] == pytest.approx(perplexity) and params["perplexity_requested"] == 30.0
    assert params["seed"] == 42 and params["metric"] == "cosine" and params["initialization"] == "pca"
    direct = TSNE(
        perplexity=perplexity,
        metric="cosine",
        initialization="pca",
        n_iter=500,
        random_state=42,
        n_jobs=1,
        neighbors="exact",
        verbose=False,
    ).fit(unit_rows(small, WORDS))
    np.testing.assert_array_equal(points_of(answer), np.asarray(direct, dtype=np.float32))

    again = project(api, tokens=WORDS, method="tsne", seed=42)
    assert again["points"] == answer["points"]  # the default seed is 42, and the same seed gives the same map
    other = project(api, tokens=WORDS, method="tsne", seed=1, perplexity=3)
    assert other["params"]["seed"] == 1 and other["params"]["perplexity"] == 3.0
    assert other["points"] != answer["points"]


def test_umap_answers_as_umap_learn_with_the_same_seed(api: TestClient, small: Table) -> None:
    import umap

    answer = project(api, tokens=WORDS, method="umap", seed=7, min_dist=0.25)
    params = answer["params"]
    assert answer["method"] == "umap" and "explained_variance_ratio" not in answer
    assert params["n_neighbors"] == len(WORDS) - 1 and params["n_neighbors_requested"] == 15
    assert params["min_dist"] == 0.25 and params["seed"] == 7 and params["library"].startswith("umap-learn ")
    direct = umap.UMAP(
        n_components=2,
        n_neighbors=len(WORDS) - 1,
        min_dist=0.25,
        metric="cosine",
        n_epochs=500,
        init="spectral",
        random_state=7,
        n_jobs=1,
    ).fit_transform(unit_rows(small, WORDS))
    np.testing.assert_array_equal(points_of(answer), np.asarray(direct, dtype=np.float32))
    small_hood = project(api, tokens=WORDS, method="umap", n_neighbors=4)
    assert small_hood["params"]["n_neighbors"] == 4 and small_hood["params"]["seed"] == 42
    assert project(api, tokens=WORDS, method="umap", n_neighbors=4)["points"] == small_hood["points"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"method": "tsne", "n_neighbors": 5}, "n_neighbors and min_dist belong to method umap"),
        ({"method": "umap", "perplexity": 5}, "perplexity belongs to method tsne"),
        ({"method": "pca", "seed": 1}, "seed belongs to methods tsne and umap"),
        ({"seed": 1}, "seed belongs to methods tsne and umap"),
        ({"method": "axes", "x_axis": ["man", "woman"], "seed": 1}, "seed belongs"),
        ({"method": "tsne", "x_axis": ["man", "woman"]}, "x_axis and y_axis belong to method axes"),
        ({"method": "tsne", "perplexity": 0.5}, "perplexity"),
        ({"method": "tsne", "perplexity": 101}, "perplexity"),
        ({"method": "umap", "n_neighbors": 1}, "n_neighbors"),
        ({"method": "umap", "min_dist": 1.5}, "min_dist"),
        ({"method": "umap", "seed": -1}, "seed"),
        ({"method": "umap", "seed": 2**32}, "seed"),
        ({"method": "tsne", "seed": 1.5}, "seed"),
        ({"method": "mds"}, "method"),
    ],
)
def test_invalid_forms_are_refused(api: TestClient, body: dict[str, Any], message: str) -> None:
    response = api.post(f"{T}/project", json={"tokens": WORDS, **body})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and message in error["message"]


@pytest.mark.parametrize(("method", "name"), [("tsne", "t-SNE"), ("umap", "UMAP")])
def test_too_few_tokens_and_unknown_tokens(api: TestClient, method: str, name: str) -> None:
    response = api.post(f"{T}/project", json={"tokens": ["red", "Red", "blue", "green"], "method": method})
    assert response.status_code == 422  # "Red" is the row of "red": three distinct rows
    assert response.json()["error"]["message"] == f"{name} needs at least 4 distinct tokens, got 3"
    missing = api.post(f"{T}/project", json={"tokens": [*WORDS, "qzxqzxq"], "method": method})
    assert missing.status_code == 404 and missing.json()["error"]["token"] == "qzxqzxq"


def test_tsne_of_rows_that_all_point_the_same_way_is_a_422(tmp_path: Path) -> None:
    """Words whose rows are one direction (an import keeps duplicate vectors under their own tokens) have no
    distance between them: openTSNE's PCA start would divide by their zero spread and place every point at NaN
    (a 200 of null coordinates). t-SNE refuses them; a single other word is enough to lay them out; pca and umap
    answer with numbers."""
    source = tmp_path / "same.txt"
    source.write_text("6 3\ns0 1 2 3\ns1 1 2 3\ns2 2 4 6\ns3 1 2 3\na 0 1 0\nb 1 0 0\n")
    assert run_cli("import", source, "--name", "same", "--data-dir", tmp_path / "data").code == 0
    same = ["s0", "s1", "s2", "s3"]
    with client_for(data_dir=tmp_path / "data") as client:
        refused = client.post("/v1/tables/same/project", json={"tokens": same, "method": "tsne"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == {
            "code": "invalid_request",
            "message": "all 4 rows point the same way: t-SNE by cosine cannot spread rows with no distance between "
            "them (pca can)",
        }
        for body in ({"tokens": [*same, "a"], "method": "tsne"}, {"tokens": same, "method": "umap"}, {"tokens": same}):
            answer = client.post("/v1/tables/same/project", json=body)
            assert answer.status_code == 200, answer.text
            assert np.isfinite(points_of(answer.json())).all(), (body, answer.text)


@pytest.mark.filterwarnings("error:A large number of your vertices:UserWarning")  # umap-learn's, of the row it left
def test_a_table_of_one_dimension_is_laid_out_or_refused_with_a_422(tmp_path: Path) -> None:
    """openTSNE starts from two principal components, which rows of one value do not have (it raised, a 500)."""
    source = tmp_path / "line.txt"
    source.write_text("5 1\na 1\nb 2\nc -1\nd -3\ne 0.5\n")
    assert run_cli("import", source, "--name", "line", "--data-dir", tmp_path / "data").code == 0
    tokens = ["a", "b", "c", "d", "e"]
    with client_for(data_dir=tmp_path / "data") as client:
        refused = client.post("/v1/tables/line/project", json={"tokens": tokens, "method": "tsne"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["message"] == (
            "t-SNE needs rows of at least 2 dimensions, and this table's have 1 (pca can lay them out)"
        )
        pca = client.post("/v1/tables/line/project", json={"tokens": tokens})
        assert pca.status_code == 200 and pca.json()["explained_variance_ratio"] == [1.0, 0.0]
        # UMAP: "c" alone points one way (-1), so its every neighbour is at cosine distance 2, an edge umap-learn
        # cuts; the row it left without any was a point at NaN (a 200 of nulls)
        alone = client.post("/v1/tables/line/project", json={"tokens": ["a", "b", "e", "c"], "method": "umap"})
        assert alone.status_code == 422, alone.text
        assert alone.json()["error"]["message"] == (
            "UMAP cannot place 'c': every row near it by cosine points exactly the opposite way (leave it out, add "
            "tokens near it, or use pca or axes)"
        )
        both = client.post("/v1/tables/line/project", json={"tokens": tokens, "method": "umap"})
        assert both.status_code == 200 and np.isfinite(points_of(both.json())).all()


@pytest.mark.parametrize(
    ("method", "module", "package"), [("tsne", "openTSNE", "openTSNE"), ("umap", "umap", "umap-learn")]
)
def test_a_missing_package_is_a_422_naming_it_and_the_extra(
    api: TestClient, monkeypatch: pytest.MonkeyPatch, method: str, module: str, package: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    response = api.post(f"{T}/project", json={"tokens": WORDS, "method": method})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and error["package"] == package and error["extra"] == "map"
    assert f"the {package} package" in error["message"] and f"({MAP_INSTALL})" in error["message"]
    assert project(api, tokens=WORDS)["method"] == "pca"  # the other methods still answer


def test_the_map_extra_is_installed_one_way_everywhere_it_is_named() -> None:
    """PyPI's ``embedding-search`` is another project's: the map extra is installed from the project's checkout (or
    built into the image), as the 422s, GET /v1/explorer (the page's hint) and every doc say."""
    assert "pip install -e '.[map]'" in MAP_INSTALL and "--build-arg EXTRAS=map" in MAP_INSTALL
    root = Path(__file__).resolve().parents[2]
    assert "[map]" not in (root / "service" / "static" / "app.js").read_text()  # the page reads GET /v1/explorer's
    named = 0
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        text = path.read_text()
        assert "embedding-search[map]" not in text, path
        for install in re.findall(r"[\w./-]*pip install [^\n`;)]*\[map\]'?", text):
            assert install == ".venv/bin/pip install -e '.[map]'", (path, install)
            named += 1
    assert named >= 4  # README's example, api.md's two, explorer.md's t-SNE


def test_openapi_describes_the_four_forms(api: TestClient) -> None:
    document = api.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    request = schemas["ProjectRequest"]
    properties = request["properties"]
    assert properties["method"]["enum"] == ["pca", "axes", "tsne", "umap"] and properties["method"]["default"] == "pca"
    assert "default 42" in properties["seed"]["description"] and properties["seed"]["minimum"] == 0
    assert properties["seed"]["maximum"] == 2**32 - 1
    assert "default 30 " in properties["perplexity"]["description"] and properties["perplexity"]["minimum"] == 1
    assert "default 15 " in properties["n_neighbors"]["description"] and properties["n_neighbors"]["minimum"] == 2
    assert properties["min_dist"]["description"].endswith("default 0.1")
    forms = request["allOf"][0]["oneOf"]
    assert [form["properties"]["method"]["const"] for form in forms] == ["pca", "axes", "tsne", "umap"]
    response = schemas["ProjectResponse"]
    assert "params" in response["properties"] and "explained_variance_ratio" not in response.get("required", [])
    operation = document["paths"][f"{'/v1/tables/{table}'}/project"]["post"]
    assert "tsne" in operation["summary"] and "umap" in operation["summary"]

    # What the schema accepts is what the validator accepts.
    validator = jsonschema.Draft202012Validator({"$ref": "#/components/schemas/ProjectRequest", **document})
    accepted = [
        {"tokens": WORDS},
        {"tokens": WORDS, "method": "axes", "x_axis": ["man", "woman"]},
        {"tokens": WORDS, "method": "tsne", "seed": 3, "perplexity": 5},
        {"tokens": WORDS, "method": "umap", "seed": 3, "n_neighbors": 5, "min_dist": 0.5},
    ]
    refused = [
        {"tokens": WORDS, "seed": 3},
        {"tokens": WORDS, "method": "tsne", "min_dist": 0.5},
        {"tokens": WORDS, "method": "umap", "perplexity": 5},
        {"tokens": WORDS, "method": "tsne", "y_axis": ["man", "woman"]},
    ]
    for body in accepted:
        assert validator.is_valid(body), body
    for body in refused:
        assert not validator.is_valid(body), body
        assert api.post(f"{T}/project", json=body).status_code == 422


def test_the_python_client_projects_by_every_method(api: TestClient) -> None:
    """``Client.project`` takes the method and its options, and gives back the tokens ``skip_unknown`` left out."""
    from service_client import Client

    client = Client("http://testserver", http=api)
    body = {"tokens": [*WORDS, "qzxqzxq"], "skip_unknown": True, "method": "axes", "x_axis": ["man", "woman"]}
    answer = project(api, **body)
    got = client.project("small", body["tokens"], skip_unknown=True, method="axes", x_axis=["man", "woman"])
    assert [(p.token, p.x, p.y) for p in got.points] == [(p["token"], p["x"], p["y"]) for p in answer["points"]]
    assert (got.method, got.unknown, got.axes) == ("axes", ["qzxqzxq"], answer["axes"])
    assert got.explained_variance_ratio == answer["explained_variance_ratio"]
