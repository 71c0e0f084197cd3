"""umap-learn's cached numba code (pynndescent's, mostly) compiled once into the test cache.

Importing umap-learn imports pynndescent, which compiles the functions it declares with a signature and
``cache=True`` at once: tens of seconds of CPU in a fresh environment, in whichever test process imports it
first. ``tests/conftest.py`` points ``NUMBA_CACHE_DIR`` into the test cache for every process the tests start,
and ``python -m tests.numba_cache STAMP`` (started in the background at collection) compiles that code there and
writes the versions it was compiled with to STAMP.

umap-learn compiles the rest of its code (its k nearest neighbours, fuzzy graph and layout epochs) at a process's
first UMAP, in numba's cache since ``index.engine.umap_cache``: the background step compiles it there too, with one
small layout, and every test process and server then loads it.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

PACKAGES = ("numba", "pynndescent", "umap-learn")


def versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in PACKAGES}


def is_current(stamp: Path) -> bool:
    try:
        return bool(json.loads(stamp.read_text()) == versions())
    except (OSError, ValueError, metadata.PackageNotFoundError):
        return False


def main(stamp: Path) -> None:
    import numpy as np

    from index.engine.layout import umap_projection

    # Importing umap compiles pynndescent's and umap-learn's cached functions into NUMBA_CACHE_DIR; one layout, the
    # rest of umap-learn's code (index.engine.umap_cache).
    umap_projection(np.random.default_rng(0).standard_normal((20, 8)))
    stamp.write_text(json.dumps(versions()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
