"""``python -m bench --quick --only writes`` keeps working: every figure is there and in range, every write is
seen by the first search after its answer, and the report renders (timings are not checked)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bench.quick import quick_early
from tests.bench.quick import quick_run as run_quick

pytestmark = pytest.mark.slow

QUICK = quick_early(__name__, "quick_run", "writes")  # started at collection (tests/early.py)


@pytest.fixture
def quick_run() -> dict[str, Any]:
    return run_quick(QUICK, "writes")


def test_writes_quick(quick_run: dict[str, Any]) -> None:
    run = quick_run
    result, markdown = run["result"], run["markdown"]
    ours = result["ours"]
    assert set(ours["throughput"]) == {f"{s}, batch {b}" for s in ("fsync", "no fsync") for b in (1, 100, 1000)}
    assert all(rate > 0 for rate in ours["throughput"].values())
    assert ours["visible_ms"]["first_search"] == 20  # read your writes: the first search finds each one
    assert list(ours["search"]) == ["delta 0", "delta 100", "delta 1,000"]
    assert all(0 < v["p50_ms"] <= v["p90_ms"] for v in ours["search"].values())
    compaction = result["compaction"]
    assert (compaction["rows"], compaction["new"], compaction["replaced"], compaction["deleted"]) == (
        20_000,
        500,
        250,
        250,
    )
    assert compaction["seconds"] > 0 and compaction["peak_rss_mib"] > 0
    if result["chroma"] is not None:  # the bench extra is installed
        assert set(result["chroma"]["throughput"]) == {
            f"{m}, batch {b}" for m in ("add", "upsert") for b in (1, 100, 1000)
        }
    assert "## 10. Live tables" in markdown and "Compaction (`embedding-index compact`) of 20,000 rows" in markdown
