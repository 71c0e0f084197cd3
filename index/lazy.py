"""Libraries imported on first use, not when the modules that use them are imported.

pyarrow serves what only some tables have: a documents table's payload, filters, keyword index and write log, and
word tables' metadata columns. The server imports every engine module at start-up, so an eager ``import pyarrow``
would map Arrow's libraries into every server process, a word table's included, which never calls them
(BENCHMARKS.md, "Server memory and load + index, before and after"). A module that uses pyarrow names it as

    if TYPE_CHECKING:
        import pyarrow as pa
    else:
        from index.lazy import pa

so that the type checker sees the real module and the first attribute read at run time imports it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name``, imported by the first attribute read (the import system's own lock makes
    concurrent first reads import it once). Each attribute read is kept on the instance, so that later reads of it
    are plain attribute reads, with no call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        value = getattr(module, attribute)
        self.__dict__[attribute] = value
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{'' if self._module is None else ' (imported)'}>"


pa = LazyModule("pyarrow")
pc = LazyModule("pyarrow.compute")
