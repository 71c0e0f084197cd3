"""Per-row text columns of a word or model-token table (a projector table's "kind", a model's "readable" form),
stored as the documents payload is: one Arrow IPC record batch, uncompressed, memory-mapped by every worker, so
that a column of 400,000 labels costs no Python object per row until a row is asked for.

A table built before this store holds them as ``metadata.json`` (a dict of lists), which still loads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from index.store.payload import open_batch, serialise

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from index.lazy import pa

METADATA = "metadata.arrow"
METADATA_JSON = "metadata.json"  # tables built before the Arrow store


class Column(Sequence[str]):
    """One column as a read-only sequence of strings over its Arrow array."""

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, row: int) -> str: ...
    @overload
    def __getitem__(self, row: slice) -> list[str]: ...
    def __getitem__(self, row: int | slice) -> str | list[str]:
        if isinstance(row, slice):
            values: list[str] = self.array[row].to_pylist()
            return values
        value: str = self.array[row].as_py()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.array.to_pylist())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.asarray(self.array.to_numpy(zero_copy_only=False), dtype=dtype)


def metadata_file(columns: Mapping[str, Sequence[str]]) -> memoryview:
    """The Arrow IPC file of ``columns`` (name -> one string per row)."""
    names = list(columns)
    batch = pa.RecordBatch.from_arrays([pa.array(list(columns[name]), pa.string()) for name in names], names=names)
    return serialise(batch)


def load_metadata(directory: Path) -> dict[str, Sequence[str]]:
    """The table's metadata columns (none: an empty dict)."""
    if (directory / METADATA).is_file():
        batch = open_batch(directory / METADATA)
        return {name: Column(batch.column(i)) for i, name in enumerate(batch.schema.names)}
    if (directory / METADATA_JSON).is_file():
        columns: dict[str, Sequence[str]] = json.loads((directory / METADATA_JSON).read_text())
        return columns
    return {}
