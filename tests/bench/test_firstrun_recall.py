"""``bench.firstrun``'s recall of a candidate is that of the answers its table serves, as the builder's is."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from bench.firstrun import K, in_process
from index.build.recall import kth_scores, tied_recall
from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.table import Table


def test_a_candidate_s_recall_is_that_of_its_served_answers(tmp_path: Path) -> None:
    """An inverted file of 256 lists over 2,000 rows searched at nprobe 1 leaves many queries short of 10 rows:
    the table serves those exactly. FAISS's own top 10 (padded with -1) found fewer of the exact top 10."""
    rng = np.random.default_rng(5)
    matrix = (rng.standard_normal((2_000, 16)) / np.sqrt(np.arange(1, 17))).astype(np.float32)
    raw = RawTable(tokens=[f"w{i}" for i in range(len(matrix))], matrix=matrix)
    build_table(raw, data_dir=tmp_path, name="t", source={}, index_spec="ivf:nlist=256,nprobe=1", min_recall=0.0)
    table = Table.load(tmp_path / "t")
    unit = np.asarray(table.vectors)
    queries = np.ascontiguousarray(unit[:300])
    scores, _ = faiss.knn(queries, unit, K, metric=faiss.METRIC_INNER_PRODUCT)
    kth = kth_scores(scores)
    served = round(tied_recall(queries, unit, kth, table.knn(queries, K)[1], K), 4)
    own = round(tied_recall(queries, unit, kth, table.index.search(queries, K)[1], K), 4)
    assert own < served, (own, served)  # else this table does not tell the two apart
    result: dict[str, object] = {}
    in_process(result, tmp_path, "t", queries, kth)
    assert result["frequent_words_recall_at_10"] == served
