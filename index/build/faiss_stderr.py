"""What FAISS's C++ code writes on stderr while an index trains: its k-means warning (fewer training rows than it
asks for) becomes one line of the builder's, silent with ``--quiet``; anything else is passed on as it was."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from index.progress import CONFIG, unread, warn

FEW_POINTS = re.compile(
    rb"WARNING clustering (\d+) points to (\d+) centroids: please provide at least (\d+) training points\n"
)
_HELD = threading.Lock()  # file descriptor 2 is the whole process's: one capture at a time


@contextmanager
def faiss_warnings() -> Iterator[None]:
    """Hold what is written on file descriptor 2 (FAISS prints from C++, past ``sys.stderr``) while the block runs,
    then say it: the k-means warnings as :func:`~index.progress.warn` lines, the rest as it came. The builder's own
    lines meanwhile (the progress of a step begun inside the block) go to the real stderr as they come."""
    with _HELD, tempfile.TemporaryFile() as held:
        if sys.stderr is not None:  # what Python wrote before, out first
            sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:  # no stderr to hold
            yield
            return
        os.dup2(held.fileno(), 2)
        # the builder's own lines meanwhile, as they come; a character it cannot encode escaped, as sys.stderr does
        own = open(saved, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
        previous, CONFIG.stream = CONFIG.stream, CONFIG.stream or own
        try:
            yield
        finally:
            CONFIG.stream = previous
            with contextlib.suppress(OSError):  # a line nobody could read, still held: dropped, as say() drops it
                own.close()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            _pass_on(held.read())


def _pass_on(written: bytes) -> None:
    rest = FEW_POINTS.sub(b"", written)
    try:
        while rest:
            rest = rest[os.write(2, rest) :]
    except OSError:  # nobody reads stderr any more: dropped, as progress.say drops a line
        unread()
    # the same warning for each sub-quantiser of a PQ index: said once, with how many times
    for (points, centroids, wanted), times in Counter(m.groups() for m in FEW_POINTS.finditer(written)).items():
        again = f" ({times} times)" if times > 1 else ""
        warn(
            f"the index trained {int(centroids):,} centroids on {int(points):,} rows{again}, fewer than the "
            f"{int(wanted):,} FAISS asks for ({int(wanted) // int(centroids)} per centroid)"
        )
