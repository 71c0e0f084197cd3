"""Metadata columns of a projector table (e.g. a "kind" per word) are kept by the builder and served."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from index.build.cli import app as cli
from index.build.sources import RawTable
from tests.service.conftest import client_for

WORDS = 2_000


def test_projector_kind_column_is_served(tmp_path: Path, glove_raw: RawTable) -> None:
    tokens = glove_raw.tokens[:WORDS]
    kinds = ["stop" if i < 100 else "word" for i in range(WORDS)]
    source = tmp_path / "projector"
    source.mkdir()
    (source / "vectors.tsv").write_text(
        "\n".join("\t".join(f"{x:.6g}" for x in row) for row in glove_raw.matrix[:WORDS]) + "\n"
    )
    (source / "metadata.tsv").write_text(
        "word\tkind\n" + "".join(f"{t}\t{k}\n" for t, k in zip(tokens, kinds, strict=True))
    )
    data_dir = tmp_path / "data"
    result = CliRunner().invoke(cli, ["import", str(source), "--name", "proj", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output

    with client_for(data_dir=data_dir) as client:
        summary = client.get("/v1/tables/proj").json()
        assert summary["metadata_columns"] == ["kind"]
        row = client.get("/v1/tables/proj/tokens/the").json()
        assert row["metadata"] == {"kind": "stop"}
        hits = client.get("/v1/tables/proj/neighbors", params={"token": "heart", "k": 8}).json()["neighbors"]
        assert len(hits) == 8
        for hit in hits:
            assert hit["metadata"] == {"kind": kinds[hit["id"]]}
        # Raw-vector search results carry it too.
        plain = client.post("/v1/tables/proj/search", json={"vector": [1.0] * 50, "k": 3}).json()["neighbors"]
        assert all("metadata" in hit for hit in plain)
