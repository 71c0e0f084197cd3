"""The peers benchmark (bench/peers.py) does not quietly compare embedding-search with nobody."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def round_of(p50_ms: float, qps: float, rss_mib: float, rps: float) -> dict[str, Any]:
    return {"c1": {"p50_ms": p50_ms}, "c16": {"qps": qps}, "memory": {"rss_mib": rss_mib}, "raw_http": {"rps": rps}}


def test_every_ratio_says_how_many_times_better_embedding_search_is() -> None:
    # embedding-search ahead on every figure: twice as fast, three times the throughput, a quarter of the memory.
    ours = [round_of(1.0, 300.0, 100.0, 2_000.0), round_of(2.0, 600.0, 100.0, 4_000.0)]
    peer = [round_of(2.0, 100.0, 400.0, 500.0), round_of(4.0, 200.0, 400.0, 1_000.0)]
    systems = {
        "embedding-search": {"load": {"seconds": 10.0}, "recall_at_10": 0.995},
        "chroma": {"load": {"seconds": 15.0}, "recall_at_10": 0.991},
    }
    r = bench.peers.ratios(systems, {"embedding-search": ours, "chroma": peer})["chroma"]
    assert r == {
        "load_seconds": 1.5,
        "p50": 2.0,
        "qps": 3.0,
        "rss": 4.0,
        "raw_http_rps": 4.0,
        "recall_difference": 0.004,
    }


def test_the_text_paths_ratios_too() -> None:
    from bench.peers_text import ratios

    ours = [round_of(20.0, 40.0, 0, 0), round_of(30.0, 60.0, 0, 0)]
    chroma = [round_of(60.0, 10.0, 0, 0), round_of(60.0, 20.0, 0, 0)]
    r = ratios({"embedding-search": ours, "chroma": chroma})["chroma"]
    assert r["p50"] == 2.5 and r["p50_rounds"] == [3.0, 2.0]
    assert r["qps"] == 3.5 and r["qps_rounds"] == [4.0, 3.0]
