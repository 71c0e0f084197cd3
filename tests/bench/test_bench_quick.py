"""The benchmark scripts keep working: ``python -m bench --quick`` on the real GloVe table produces every figure.

Only structure and sanity are checked (both sides measured, same answers on both sides, figures in range),
never timings: performance is measured by ``make bench``, not by tests. The peers benchmark builds its own table
and runs embedding-search plus every peer whose packages (the ``bench`` extra) are importable.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cache_dir
from tests.early import Early

NAMES = ("analogy", "neighbours", "import", "startup", "growth")

pytestmark = pytest.mark.slow


def quick_argv(out: Path) -> list[str]:
    argv = [sys.executable, "-m", "bench", "--quick", "--data-dir", str(cache_dir())]
    argv += [arg for name in NAMES for arg in ("--only", name)]
    argv += ["--work-dir", str(out / "work")]  # kept after the run: what the measurements leave behind is checked
    return [*argv, "--results-dir", str(out / "results"), "--markdown", str(out / "BENCHMARKS.md")]


# Started as soon as the default table is ready, beside the tests before this module (tests/early.py).
QUICK = Early(__name__, "quick_run", quick_argv, needs_glove=True)


@pytest.fixture(scope="module")
def quick_run(glove_data_dir: Path) -> dict[str, Any]:
    done = QUICK.result()
    assert done.returncode == 0, done.stderr[-4000:]
    results = {name: json.loads((done.out / "results" / f"{name}.json").read_text()) for name in NAMES}
    return {"results": results, "markdown": (done.out / "BENCHMARKS.md").read_text(), "work": done.out / "work"}


def result(quick_run: dict[str, Any], name: str) -> dict[str, Any]:
    payload = quick_run["results"][name]
    assert payload["status"] == "ok", payload.get("error")
    assert payload["quick"] is True and payload["rounds"] == 1
    assert payload["machine"]["cores"] >= 1 and payload["machine"]["ram_gib"] > 0
    assert {"numpy", "faiss-cpu", "gensim", "fastapi", "uvicorn"} <= set(payload["versions"])
    assert payload["command"].startswith(".venv/bin/python -m bench ")
    for row in payload["result"]["targets"]:
        assert row["figure"] and row["command"] and row["unit"]
        assert row["ours"] > 0 and row["other"] > 0 and math.isfinite(row["ratio"]) and row["ratio"] > 0
    return payload["result"]


def test_analogy_same_accuracy_on_every_side(quick_run: dict[str, Any]) -> None:
    r = result(quick_run, "analogy")
    answers = r["answers"]
    assert set(answers) == {"gensim", "function", "cli", "http"}
    assert answers["gensim"]["total"] > 100 and 0 < answers["gensim"]["accuracy"] <= 1
    for side in ("function", "cli", "http"):
        assert answers[side] == answers["gensim"], side
        assert r["speedup_vs_gensim"][side] > 0
    assert r["same_accuracy"] is True
    assert len(r["targets"]) == 3


def test_neighbours_in_process_and_over_http(quick_run: dict[str, Any]) -> None:
    r = result(quick_run, "neighbours")
    proc = r["in_process"]
    for case in ("ours_hnsw_single", "ours_exact_single", "gensim_single", "ours_hnsw_batch64", "gensim_batch64"):
        assert 0 < proc[case]["p50_ms"] <= proc[case]["p99_ms"]
    same = proc["exact_equals_gensim"]
    assert same["queries"] > 0 and same["same"] == same["queries"]
    efs = [x["efSearch"] for x in r["recall"]]
    assert efs == sorted(efs) and len(efs) >= 2
    assert all(0 < x["recall_at_10"] <= 1 for x in r["recall"])
    http = r["http"]
    cases = ("floor_get", "hnsw_get", "cached_get", "remembered_get", "exact_get", "floor_post64", "hnsw_post64")
    for case in (*cases, "exact_post64"):
        assert http[case]["errors"] == 0 and http[case]["requests"] > 0
        assert http[case]["rps_c32"] > 0 and 0 < http[case]["p50_ms"] <= http[case]["p99_ms"]
    assert http["response_bytes"]["post64"] > http["response_bytes"]["get"] > 0
    assert {t["unit"] for t in r["targets"]} == {"ms", "req/s"}


def test_import_same_matrix_as_gensim(quick_run: dict[str, Any]) -> None:
    r = result(quick_run, "import")
    for fmt in ("glove", "word2vec-binary"):
        info = r["inputs"][fmt]
        assert info["same_tokens"] and info["same_matrix"] and info["rows"] == r["rows"]
        for side in ("ours", "gensim", "cli"):
            run = r["runs"][f"{side}:{fmt}"]
            assert run["seconds"] > 0 and run["peak_rss_mib"] > 0
        assert r["runs"][f"ours:{fmt}"]["read_memory_mib"] >= 0
        assert r["table_bytes"][fmt] > 0


def test_startup_and_worker_memory(quick_run: dict[str, Any]) -> None:
    r = result(quick_run, "startup")
    for variant in ("verified", "unverified"):
        assert r["ready"][variant]["median_seconds"] > 0
    workers = r["memory"]["workers"]
    assert set(workers) == {"1", "2"}
    assert all(w["sum PSS"] > 0 for w in workers.values())


def test_growth_tables_and_llama_shape(quick_run: dict[str, Any]) -> None:
    from bench.growth import COMPRESSED_QUICK

    r = result(quick_run, "growth")
    cell = next(iter(r["cells"].values()))
    for kind in ("flat", "hnsw"):
        assert cell[kind]["seconds"] > 0 and cell[kind]["disk_mib"] > 0 and cell[kind]["p50_ms"] > 0
    assert cell["hnsw"]["efSearch"] in [x["efSearch"] for x in cell["recall_sweep"]]
    (compressed,) = r["compressed"].values()  # the bigger-than-memory measurement on its tiny table
    check_compressed(compressed)
    assert compressed["rows"] == COMPRESSED_QUICK[0] and "Bigger than memory" in quick_run["markdown"]
    assert not [p.name for p in quick_run["work"].iterdir() if p.name.startswith("growth-")]  # generated files deleted
    llama = r["llama"]
    assert llama["query_equals_brute_force"] is True
    assert llama["query"]["resolved"]["match"] == "space-marked" and len(llama["query"]["neighbors"]) == 10
    assert llama["peak_rss_mib"] > 0


def check_compressed(cell: dict[str, Any]) -> None:
    """A compressed-index table served by embedding-serve: figures present, re-ranking better than the codes."""
    assert cell["index"]["spec"]["kind"] == "ivfpq" and cell["index"]["spec"]["nprobe"] >= 1
    assert 0 < cell["recall_at_10_without_rerank"] < cell["recall_at_10"] <= 1
    assert cell["recall_at_10_served"] == cell["recall_at_10"]  # the service returns the engine's answers
    assert cell["served_score_max_error"] < 1e-5  # exact cosines, not the codes' estimates
    assert cell["index"]["recall_at_10_without_rerank"] < cell["index"]["recall_at_10"]
    for stage in ("idle", "after_warmup"):
        memory = cell["server"][stage]
        assert 0 < memory["uss_mib"] <= memory["rss_mib"] and 0 < memory["pss_mib"] <= memory["rss_mib"]
    assert cell["build"]["seconds"] > 0 and cell["build"]["peak_rss_mib"] > 0 and cell["disk_mib"] > 0
    assert cell["p50_ms"] > 0 and cell["http_p50_ms"] > 0


def test_markdown_has_every_section(quick_run: dict[str, Any]) -> None:
    text = quick_run["markdown"]
    for heading in ("## Machine", "## Summary", "## 1. Analogy", "## 2. Neighbours", "## 3. Import", "## 4. Start"):
        assert heading in text
    assert "## 5. Growth" in text and "Llama-3 shape" in text


PEERS = {"milvus-lite": ("milvus_lite", "pymilvus"), "chroma": ("chromadb",)}


def peers_argv(out: Path) -> list[str]:
    argv = [sys.executable, "-m", "bench", "--quick", "--only", "peers", "--data-dir", str(out / "no-table")]
    argv.append("--peers-busy")  # every round again under the background load
    return [*argv, "--results-dir", str(out / "results"), "--markdown", str(out / "BENCHMARKS.md")]


PEERS_RUN = Early(__name__, "peers_run", peers_argv)  # started at collection (tests/early.py)


@pytest.fixture(scope="module")
def peers_run() -> dict[str, Any]:
    done = PEERS_RUN.result()
    assert done.returncode == 0, done.stderr[-4000:]
    return {
        "results": {"peers": json.loads((done.out / "results" / "peers.json").read_text())},
        "markdown": (done.out / "BENCHMARKS.md").read_text(),
    }


def test_peers_same_recall_on_every_side_that_runs(peers_run: dict[str, Any]) -> None:
    r = result(peers_run, "peers")
    systems = r["systems"]
    assert systems["embedding-search"]["status"] == "ok"
    assert systems["embedding-search"]["load"]["same_rows"] is True  # the builder's rows are the peers' rows
    for name, modules in PEERS.items():  # every importable peer runs, and only those
        importable = all(importlib.util.find_spec(m) is not None for m in modules)
        assert (systems[name]["status"] == "ok") is importable, name
    ran = [name for name, s in systems.items() if s["status"] == "ok"]
    for name in ran:
        s = systems[name]
        steps = s["ladder"]
        assert [x["ef"] for x in steps] == r["ef_ladder"][: len(steps)], name
        assert all(x["recall_at_10"] < r["target_recall"] for x in steps[:-1]), name
        assert s["ef"] == steps[-1]["ef"] and s["recall_at_10"] == steps[-1]["recall_at_10"] >= r["target_recall"]
        # The one-query answers of the latency loop are those of the ladder's batches at the chosen ef.
        assert s["latency_calls"] > 0 and s["same_answers"] == s["latency_calls"], name
        assert s["errors"] == 0 and s["qps"] > 0 and 0 < s["p50_ms"] <= s["p99_ms"], name
        assert s["load"]["seconds"] > 0 and s["rss_mib"] > 0, name
    assert set(r["ratios"]) == set(ran) - {"embedding-search"}
    # Four figures per peer, five where wrk measured both servers' HTTP search routes; quiet and busy.
    per_peer = [4 + ("raw_http_rps" in x) for x in r["ratios"].values()]
    assert len(r["targets"]) == 2 * sum(per_peer)
    assert "## 6. Peers" in peers_run["markdown"]


def test_peers_busy_measures_every_side_again_under_the_background_load(peers_run: dict[str, Any]) -> None:
    r = result(peers_run, "peers")
    busy = r["busy"]
    ran = [name for name, s in r["systems"].items() if s["status"] == "ok"]
    assert [name for name, s in busy["systems"].items() if s["status"] == "ok"] == ran
    for name in ran:
        quiet, loaded = r["systems"][name], busy["systems"][name]
        assert len(loaded["rounds"]) == len(quiet["rounds"]) > 0, name  # paired by round
        assert loaded["ef"] == quiet["ef"], name  # the same ef, the same answers expected
        assert loaded["latency_calls"] > 0 and loaded["same_answers"] == loaded["latency_calls"], name
        assert loaded["errors"] == 0 and loaded["qps"] > 0, name
        assert loaded["load"]["seconds"] > 0 and loaded["load"]["wall_seconds"] > 0, name  # loaded again, busy
    assert set(busy["ratios"]) == set(ran) - {"embedding-search"}
    # Half the targets are the busy run's (none where no peer is installed: the bench extra is make bench's).
    assert sum(t["figure"].startswith("peers: busy: ") for t in r["targets"]) * 2 == len(r["targets"])
    assert "**Quiet and busy**" in peers_run["markdown"]


def test_the_background_load_computes_while_it_runs_and_stops_after() -> None:
    import psutil

    from bench.peers import LOAD_PROCESSES, background_load

    with background_load() as load:
        processes = [psutil.Process(pid) for pid in load["pids"]]
        assert len(processes) == LOAD_PROCESSES
        before = [sum(p.cpu_times()[:2]) for p in processes]
        deadline = time.monotonic() + 10
        while any(sum(p.cpu_times()[:2]) - b < 0.2 for p, b in zip(processes, before, strict=True)):
            assert time.monotonic() < deadline, "a background process does not compute"
        assert all(p.nice() == psutil.Process().nice() for p in processes)  # the caller's priority
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes)
