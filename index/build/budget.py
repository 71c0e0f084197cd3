"""The seconds ``--index auto`` may spend building a table's index by default (``--build-budget``), and the seconds
a compaction waits for another of the same table by default and at most (``compact --wait``).

Apart from ``index.build.index_choice`` and ``index.build.compact``, which import FAISS: the command line names the
defaults in its options without importing FAISS, which only the commands that build an index need.
"""

from __future__ import annotations

AUTO_BUDGET_SECONDS = 900.0
COMPACT_WAIT_SECONDS = 600.0  # a large table's compaction takes minutes on a busy machine
MAX_COMPACT_WAIT_SECONDS = 86400.0  # a day: a wait said in seconds (an infinite one cannot be said, nor counted down)
