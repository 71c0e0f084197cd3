"""numba's cache for the umap-learn code a UMAP layout compiles, so that a process's first layout loads it.

umap-learn declares its k nearest neighbours, fuzzy graph and layout-epoch functions without numba's cache (a few
of its own and pynndescent's have it): every process compiled them at its first UMAP (BENCHMARKS.md has the
cost). ``enable`` turns the cache on for them, and numba keeps the machine code in the first place it can write:
``NUMBA_CACHE_DIR`` (the image's is under /tmp, shared by a container's workers), the package's ``__pycache__``,
the user's cache directory; the next process loads the same machine code instead of compiling it. Where none is
writable numba finds no locator and those functions compile in the process as before (``import umap`` needs one
already, for its cached functions, so that happens only when the place stopped being writable since); a cache
that fails to write is turned off (``disable``) and the layout runs again without it.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
MODULES = ("umap.umap_", "umap.utils", "umap.layouts", "umap.spectral")  # where its uncached functions live

_cached: list[Any] = []  # the dispatchers whose cache ``enable`` turned on
_tried = False


def enable() -> int:
    """Turn numba's cache on for umap-learn's functions declared without it, once per process (the caller holds
    the UMAP lock); how many it turned on (0 where numba has nowhere to write, or when already done)."""
    global _tried
    if _tried:
        return 0
    _tried = True
    import importlib

    from numba.core.caching import NullCache
    from numba.core.registry import CPUDispatcher

    uncached = {
        id(value): value
        for name in MODULES
        for value in vars(importlib.import_module(name)).values()
        if isinstance(value, CPUDispatcher) and isinstance(getattr(value, "_cache", None), NullCache)
    }
    nowhere = []
    for dispatcher in uncached.values():
        try:
            dispatcher.enable_caching()
        except RuntimeError as error:  # "no locator available": nowhere writable for this module's code
            nowhere.append(str(error))
            continue
        _cached.append(dispatcher)
    if nowhere:
        log.info("%d of umap-learn's numba functions compile uncached: %s", len(nowhere), nowhere[0])
    return len(_cached)


def disable() -> bool:
    """Turn off the cache ``enable`` turned on (numba's ``NullCache``, as before); whether there was any."""
    from numba.core.caching import NullCache

    was_on = bool(_cached)
    for dispatcher in _cached:
        dispatcher._cache = NullCache()
    _cached.clear()
    return was_on
