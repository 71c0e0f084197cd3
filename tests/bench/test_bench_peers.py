"""The peers benchmark (bench/peers.py) does not quietly compare embedding-search with nobody."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.peers
from bench.__main__ import main


def test_a_selected_peer_that_is_not_installed_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.peers, "installed", lambda packages: False)  # neither peer's packages importable
    results = tmp_path / "results"
    argv = ["--quick", "--only", "peers", "--peers-systems", "chroma", "--data-dir", str(tmp_path / "no-table")]
    assert main([*argv, "--results-dir", str(results), "--markdown", str(tmp_path / "BENCHMARKS.md")]) == 1
    payload = json.loads((results / "peers.json").read_text())
    assert payload["status"] == "failed" and payload["result"] == {}
    assert "chroma selected but not installed" in payload["error"] and "`bench` extra" in payload["error"]


def test_peers_left_out_are_named_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.peers, "installed", lambda packages: "chromadb" in packages)  # chroma only
    assert bench.peers.absent_peers(()) == {"milvus-lite": "not installed"}
    assert bench.peers.absent_peers(("chroma",)) == {"milvus-lite": "not selected"}
    with pytest.raises(RuntimeError, match="milvus-lite selected but not installed"):
        bench.peers.absent_peers(("milvus-lite", "chroma"))
