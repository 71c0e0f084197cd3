"""The Ray import benchmark: its passages (real sentences, each once), how it reads a progress line's duration,
and a small run end to end (the real command, locally and with ``--ray auto``, then Ray's transfer cost), started
at collection (``tests/early.py``) so that its waits on Ray overlap the tests before it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.ray_import import MAX_WORDS, MIN_WORDS, passages, seconds_of
from tests.early import Early

pytest.importorskip("ray")

SMALL = 150  # passages of the small run


def small_argv(out: Path) -> list[str]:
    return [sys.executable, "-m", "bench.ray_import", "--passages", str(SMALL), "--shards", "3", "--json",
            str(out / "ray.json")]  # fmt: skip


SMALL_RUN = Early(__name__, "small_run", small_argv, nice=0)  # started at collection (tests/early.py)


@pytest.fixture(scope="module")
def small_run() -> dict[str, Any]:
    done = SMALL_RUN.result()
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads((done.out / "ray.json").read_text())
    return result


def test_passages_are_distinct_sentences_of_the_stated_length_from_the_stated_sources() -> None:
    texts, given = passages(3000)
    assert len(texts) == len(set(texts)) == 3000
    assert all(MIN_WORDS <= len(t.split()) <= MAX_WORDS for t in texts)
    assert list(given)[:3] == ["lee_background.cor", "lee.cor", "pang_lee_polarity.cor"]
    assert sum(given.values()) == 3000 and any(name.startswith("/usr/share/") for name in given)
    assert passages(50)[0] == texts[:50]  # the same order every time


def test_a_progress_lines_duration() -> None:
    assert seconds_of("embedding-index: embedding with st on Ray: done (2,000 of 2,000 documents) in 1m12s") == 72
    assert seconds_of("embedding-index: x: done (3 of 3 shards) in 7s") == 7
    with pytest.raises(ValueError, match="no duration"):
        seconds_of("embedding-index: x: done (3 of 3 shards)")


@pytest.mark.slow
def test_a_small_run_imports_the_same_table_both_ways_and_splits_its_time(small_run: dict[str, Any]) -> None:
    result = small_run
    assert result["passages"]["count"] == SMALL and result["shards"] == 3
    assert result["identical"] is True and result["files_compared"] > 20
    for side in ("local", "ray"):
        figures = result[side]
        assert figures["texts_per_second"] > 0 and 0 < figures["encode_cpu_seconds"] <= figures["cpu_seconds"]
        steps = figures["steps"]
        assert all(seconds >= 0 for seconds in steps.values()) and steps["encode"] > 0
        assert sum(steps.values()) == pytest.approx(figures["seconds"], abs=0.1)
    assert result["transfer"]["blocks"] == 1 and result["transfer"]["mb_per_second"] > 0
