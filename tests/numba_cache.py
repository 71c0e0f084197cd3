"""umap-learn's cached numba code (pynndescent's, mostly) compiled once into the test cache.

Importing umap-learn imports pynndescent, which compiles the functions it declares with a signature and
``cache=True`` at once: tens of seconds of CPU in a fresh environment, in whichever test process imports it
first. ``tests/conftest.py`` points ``NUMBA_CACHE_DIR`` into the test cache for every process the tests start,
and ``python -m tests.numba_cache STAMP`` (started in the background at collection) compiles that code there and
writes the versions it was compiled with to STAMP.
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
    import umap  # noqa: F401  # compiles pynndescent's and umap-learn's cached functions into NUMBA_CACHE_DIR

    stamp.write_text(json.dumps(versions()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
