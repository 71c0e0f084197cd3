"""Text queries on a documents table embedded at import (``--encoder``): the server embeds the query with the
same table and pooling, and refuses a documents table whose encoder is not loaded, or has changed since.

On gensim's Lee corpus without its vectors, embedded with the 20,000-row GloVe table ``small``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from index.engine.encode import encoder_for
from index.engine.table import Table
from index.store import artifact
from service.registry import Registry
from tests.index.build.test_embed_documents import import_texts
from tests.lee import Lee
from tests.service.conftest import client_for


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path, lee_docs: Lee) -> Path:
    data = tmp_path_factory.mktemp("text-data")
    import_texts(data, small_data_dir, lee_docs, data.parent / "lee-text.jsonl")
    return data


@pytest.fixture(scope="module")
def client(data_dir: Path) -> TestClient:
    with client_for(data_dir=data_dir) as client:
        yield client


def test_a_text_query_is_embedded_by_the_documents_encoder(client: TestClient, data_dir: Path, lee_docs: Lee) -> None:
    text = "bushfires burn homes near Sydney as firefighters battle the wind"
    query = encoder_for(Table.load(data_dir / "small")).encode([text]).vectors[0].astype(np.float64)
    documents = np.asarray(Table.load(data_dir / "lee").vectors, dtype=np.float64)
    expected = [lee_docs.ids[i] for i in np.argsort(-(documents @ query), kind="stable")[:5]]
    answer = client.post("/v1/tables/lee/search", json={"text": text, "k": 5}).json()
    assert [hit["id"] for hit in answer["hits"]] == expected
    filtered = client.post("/v1/tables/lee/search", json={"text": text, "k": 3, "filter": {"long": True}}).json()
    long_ids = {lee_docs.ids[i] for i, long in enumerate(lee_docs.fields["long"]) if long}
    assert len(filtered["hits"]) == 3 and {hit["id"] for hit in filtered["hits"]} <= long_ids
    unknown = client.post("/v1/tables/lee/search", json={"text": "zzqx qqzv", "k": 3})
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["error"]["message"] == (
        "text 'zzqx qqzv': no word of it is known to the vocabulary the documents of 'lee' were embedded with "
        "(small): unknown zzqx, qqzv; mode keyword (and hybrid, which falls back to it) finds the words by the "
        "keyword index"
    )
    assert unknown.json()["error"]["words"] == ["zzqx", "qqzv"]


def test_hybrid_and_batches_embed_text_alone(client: TestClient, data_dir: Path) -> None:
    """Text alone in mode hybrid, or in a batch item, is the same search as text with its embedded vector."""
    text = "the Prime Minister said the government would act on the report"
    vector = encoder_for(Table.load(data_dir / "small")).encode([text]).vectors[0].tolist()
    alone = client.post("/v1/tables/lee/search", json={"text": text, "mode": "hybrid", "k": 6}).json()
    given = client.post("/v1/tables/lee/search", json={"text": text, "vector": vector, "mode": "hybrid", "k": 6})
    assert alone["hits"] == given.json()["hits"] and len(alone["hits"]) == 6
    assert any(set(hit["ranks"]) == {"vector", "keyword"} for hit in alone["hits"])
    items = [{"text": text}, {"text": "zzqx"}, {"text": text, "mode": "keyword"}]
    results = client.post("/v1/tables/lee/search", json={"queries": items, "k": 4}).json()["results"]
    plain = client.post("/v1/tables/lee/search", json={"text": text, "k": 4}).json()
    assert results[0]["hits"] == plain["hits"]
    assert results[1]["error"]["code"] == "invalid_request"
    keyword = client.post("/v1/tables/lee/search", json={"text": text, "mode": "keyword", "k": 4}).json()
    assert results[2]["hits"] == keyword["hits"]
    summary = client.get("/v1/tables/lee").json()["documents"]
    assert summary["encoder"]["table"] == "small" and summary["keyword"] is True


def test_a_documents_table_without_its_encoder_is_refused(data_dir: Path) -> None:
    alone = Registry.load(data_dir, names=["lee"])
    assert "lee" not in alone.tables
    assert "embedded with table 'small', which is not loaded" in alone.failed["lee"]
    both = Registry.load(data_dir)
    assert set(both.tables) == {"small", "lee"} and both.encoder_of(both.tables["lee"]) is both.tables["small"]


def test_an_encoder_rebuilt_since_is_refused(tmp_path: Path, data_dir: Path, small_data_dir: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    vectors = np.load(copy / "small" / "vectors.npy")
    vectors[0] = vectors[1]  # another build of the encoder table
    np.save(copy / "small" / "vectors.npy", vectors)
    manifest = artifact.read_manifest(copy / "small")
    del manifest["files"]
    artifact.write_manifest(copy / "small", manifest)
    registry = Registry.load(copy)
    assert "small" in registry.tables and "lee" not in registry.tables
    assert "other vectors than table 'small' holds now" in registry.failed["lee"]


def test_documents_embedded_by_a_sif_component_the_encoder_no_longer_has_are_refused(
    tmp_path: Path, data_dir: Path
) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    manifest = artifact.read_manifest(copy / "lee")
    manifest["documents"]["encoder"]["pooling"] = "sif"  # as an import by the component dropped since would say
    artifact.write_manifest(copy / "lee", manifest)
    registry = Registry.load(copy)
    assert "small" in registry.tables and "lee" not in registry.tables
    assert registry.failed["lee"] == (
        "its documents were embedded with the SIF component of table 'small', which that table no longer has: "
        "`embedding-index sif small` computes one, then import the documents again with --encoder"
    )


def test_tables_whose_vectors_came_with_them_refuse_text_queries(lee_data_dir: Path) -> None:
    with client_for(data_dir=lee_data_dir) as client:
        response = client.post("/v1/tables/lee/search", json={"text": "fires", "k": 3})
    assert response.status_code == 422
    assert "records no encoder" in response.json()["error"]["message"]


def test_the_python_client_embeds_and_searches_text(client: TestClient, data_dir: Path) -> None:
    from service_client import Client

    api = Client("http://testserver", http=client)
    text = "storms cut power to thousands of homes"
    vector = api.embed("small", [text])[0]
    expected = encoder_for(Table.load(data_dir / "small")).encode([text]).vectors[0]
    np.testing.assert_allclose(vector, expected, rtol=0, atol=1e-7)
    by_text = api.search_documents("lee", text=text, k=3)
    by_vector = api.search_documents("lee", vector=vector, k=3)
    assert [hit.id for hit in by_text.hits] == [hit.id for hit in by_vector.hits]
    hybrid = api.search_documents("lee", text=text, mode="hybrid", k=3)
    assert all(hit.ranks for hit in hybrid.hits)
    details = api.embed_details("small", [text, "storms qqzxv"], pooling="mean")
    assert details.vectors[0] == api.embed("small", [text], pooling="mean")[0]
    assert (details.tokens, details.unknown, details.pooling, details.truncated) == ([7, 1], [0, 1], "mean", None)
