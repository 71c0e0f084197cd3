"""``python -m bench --quick --only peers-text --peers-busy`` keeps working: both sides answer every query with the
same top 10 as their first pass, quiet and busy, paired by round; Chroma (when the ``bench`` extra is installed)
embeds every passage as our server does and finds the same hits; the report renders (timings are not checked)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from gensim.test.utils import datapath

from bench.peers_text import PASSAGES, WORDS, padding_cost, passages, sentences
from tests.early import Early
from tests.minilm import ST

pytestmark = pytest.mark.slow


def argv(out: Path) -> list[str]:
    command = [sys.executable, "-m", "bench", "--quick", "--only", "peers-text", "--peers-busy"]
    command += ["--data-dir", str(out / "no-table"), "--results-dir", str(out / "results")]
    return [*command, "--markdown", str(out / "BENCHMARKS.md")]


QUICK = Early(__name__, "quick_run", argv)  # started at collection (tests/early.py)


@pytest.fixture(scope="module")
def quick_run() -> dict[str, Any]:
    done = QUICK.result()
    assert done.returncode == 0, done.stderr[-4000:]
    payload = json.loads((done.out / "results" / "peers-text.json").read_text())
    assert payload["status"] == "ok" and payload["quick"] is True, payload.get("error")
    return {"result": payload["result"], "markdown": (done.out / "BENCHMARKS.md").read_text()}


def test_every_query_answered_alike_quiet_and_busy(quick_run: dict[str, Any]) -> None:
    r = quick_run["result"]
    chroma = importlib.util.find_spec("chromadb") is not None
    assert set(r["conditions"]) == {"quiet", "busy"}
    for condition, part in r["conditions"].items():
        systems = part["systems"]
        assert systems["embedding-search"]["status"] == "ok"
        assert (systems["chroma"]["status"] == "ok") is chroma  # Chroma runs exactly when it is installed
        for name, s in systems.items():
            if s["status"] != "ok":
                continue
            # The one-query answers are those of the side's first pass over the queries.
            assert s["latency_calls"] > 0 and s["same_answers"] == s["latency_calls"], (condition, name)
            assert s["errors"] == 0 and s["qps"] > 0 and 0 < s["p50_ms"] <= s["p99_ms"], (
                condition,
                name,
                s["first_error"],
            )
            assert len(s["rounds"]) == len(r["conditions"]["quiet"]["systems"][name]["rounds"]) > 0  # paired
            assert s["load"]["seconds"] > 0 and s["rss_mib"] > 0
        assert set(part["ratios"]) == ({"chroma"} if chroma else set())
        for x in part["ratios"].values():
            assert x["p50"] > 0 and x["qps"] > 0 and len(x["p50_rounds"]) == len(x["qps_rounds"]) == 1
    assert "## 6b. Peers: the text path" in quick_run["markdown"]


def test_chroma_embeds_as_our_server_does_and_finds_the_same_hits(quick_run: dict[str, Any]) -> None:
    if importlib.util.find_spec("chromadb") is None:
        pytest.skip("chromadb is not installed (the bench extra)")
    checks = quick_run["result"]["checks"]
    assert checks["rows"] == quick_run["result"]["passages"]
    # Chroma's function, given our table's graph and the checkpoint's tokenizer, pads every text to 256 tokens:
    # the same vectors all the same (the padding is masked).
    assert checks["passage_cosine_min"] > 0.9999
    assert checks["top10_overlap"] >= 0.95 and checks["recall_at_10"]["embedding-search"] >= 0.95
    assert checks["recall_at_10"]["chroma"] >= 0.95
    assert "Checks: each passage's two vectors" in quick_run["markdown"]


def test_passages_are_distinct_windows_and_the_queries_are_held_out() -> None:
    texts = passages()  # one pass of the background corpus
    assert len(texts) > 1_900 and {len(t.split()) for t in texts} == {WORDS} and passages(10) == texts[:10]
    assert len(set(texts[:PASSAGES])) == PASSAGES  # the benchmark's passages are distinct
    asked = sentences()
    background = Path(datapath("lee_background.cor")).read_text(encoding="utf-8")
    assert len(asked) > 100 and len(set(asked)) == len(asked) and all(len(s.split()) >= 5 for s in asked)
    assert not any(s in background for s in asked)


def test_the_padding_check_runs_chromadbs_lengths_and_finds_the_same_vectors(
    minilm_st_dir: Path, tmp_path: Path
) -> None:
    if importlib.util.find_spec("tokenizers") is None:
        pytest.skip("tokenizers is not installed (chromadb's dependency, the bench extra)")
    # MiniLM as the benchmark imports it (a transformer table), the session's import: only read
    result = padding_cost(minilm_st_dir / ST, sentences(3), 1, tmp_path / "chroma")
    (one,) = result["rounds"]
    assert one["tokens_median"]["padded"] == 256 and 5 < one["tokens_median"]["own"] < 128
    assert one["largest_difference"] < 1e-4  # the padding is masked: the same pooled vector either way
    assert one["p50_ms"]["padded"] > 0 and one["p50_ms"]["own"] > 0
