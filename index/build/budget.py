"""The seconds ``--index auto`` may spend building a table's index by default (``--build-budget``), and the seconds
a compaction waits for another of the same table at most (``compact --wait``; its default is the store's, with the
lock: ``index.store.writelog.COMPACTION_WAIT_SECONDS``).

Apart from ``index.build.index_choice`` and ``index.build.compact``, which import FAISS: the command line names the
defaults in its options without importing FAISS, which only the commands that build an index need.
"""

from __future__ import annotations

AUTO_BUDGET_SECONDS = 900.0
MAX_COMPACT_WAIT_SECONDS = 86400.0  # a day: a wait said in seconds (an infinite one cannot be said, nor counted down)
