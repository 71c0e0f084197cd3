"""The app's ``state`` with its values found by Python's own attribute lookup.

Starlette's ``State`` keeps its values in a dict that its ``__getattr__`` reads, and Python calls ``__getattr__``
only once its own lookup has failed: each read of ``app.state.searcher`` first raises and catches an
``AttributeError`` inside the interpreter, about a microsecond. Every searched request reads three values (the
registry, the searcher, the metrics), so :class:`AppState` keeps each value as a plain attribute too, found at once
(BENCHMARKS.md, "HTTP floors: a plain body read without FastAPI's wrappers, the app's state read at once").
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import State


class AppState(State):
    """``State`` whose values are instance attributes as well as entries of its dict, kept the same both ways."""

    def __init__(self, state: dict[str, Any] | None = None) -> None:
        super().__init__(state)
        for key, value in self._state.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: Any, value: Any) -> None:
        super().__setattr__(key, value)
        object.__setattr__(self, key, value)

    def __delattr__(self, key: Any) -> None:
        super().__delattr__(key)
        object.__delattr__(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self.__setattr__(key, value)

    def __delitem__(self, key: str) -> None:
        self.__delattr__(key)
