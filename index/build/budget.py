"""The seconds ``--index auto`` may spend building a table's index by default (``--build-budget``).

Apart from ``index.build.index_choice`` and ``index.build.compact``, which import FAISS: the command line names the
default in its options without importing FAISS, which only the commands that build an index need.
"""

from __future__ import annotations

AUTO_BUDGET_SECONDS = 900.0
