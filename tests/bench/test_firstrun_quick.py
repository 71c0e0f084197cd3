"""``python -m bench --quick --only firstrun``: the first-run benchmark's steps work and its figures hold together.

Timings are not checked (``make bench`` measures them); answers and structure are.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.early import Done, Early

pytestmark = pytest.mark.slow


def firstrun_argv(out: Path) -> list[str]:
    argv = [sys.executable, "-m", "bench", "--quick", "--only", "firstrun", "--results-dir", str(out / "r")]
    return [*argv, "--markdown", str(out / "BENCHMARKS.md")]


FIRSTRUN = Early(__name__, "firstrun_run", firstrun_argv)  # started at collection (tests/early.py)


@pytest.fixture
def firstrun_run() -> Done:
    return FIRSTRUN.result()


def test_firstrun_quick(firstrun_run: Done) -> None:
    done, markdown = firstrun_run, firstrun_run.out / "BENCHMARKS.md"
    assert done.returncode == 0, done.stderr[-4000:]
    payload = json.loads((done.out / "r" / "firstrun.json").read_text())
    assert payload["status"] == "ok" and payload["quick"]
    first = payload["result"]["first_answer"]
    assert 0 < first["published_seconds"] <= first["first_answer_seconds"] <= first["indexed_seconds"]
    assert first["index"]["kind"] == "flat" and first["recall_at_10"] == 1.0
    by_spec = {c["spec"]: c for c in payload["result"]["candidates"]}
    assert by_spec["flat"]["frequent_words_recall_at_10"] == 1.0 and by_spec["flat"]["index_mib"] == 0
    assert by_spec["ivf"]["described"]["kind"] == "ivf" and by_spec["ivf"]["builder_recall_at_10"] >= 0.99
    graph = next(c for c in payload["result"]["candidates"] if c["spec"].startswith("hnsw"))
    assert graph["hnsw_estimate_seconds"] > 0 and graph["index_mib"] > 0
    assert 0.5 < graph["frequent_words_recall_at_10"] <= 1.0
    # over HTTP: every index served and measured against the first candidate (itself: ratio 1); exact search not
    assert graph["http"]["p50_vs_first"] == graph["http"]["rps_vs_first"] == 1.0
    assert by_spec["ivf"]["http"]["p50_ms_c1"] > 0 and by_spec["ivf"]["http"]["rps_c32"] > 0
    assert "http" not in by_spec["flat"]
    text = markdown.read_text()
    assert "## 7. The first run: serving at once, and the index choice" in text
    assert "the first 200 from `/v1/tables/glove-6b-50d/neighbors?token=heart`" in text
    assert "| HTTP p50 ms (c=1) | HTTP req/s (c=32) | HTTP p50 vs first | HTTP req/s vs first |" in text
