"""Writes to a sharded documents table: each document's write goes to the shard that owns its id, and the
shards' deltas are searched as the whole table's.

A document's owner is :func:`index.store.shardmap.shard_of_id` of its id as the table stores it (an integer id
by its decimal digits), the function the import assigns rows with, so a write lands where the import put the
id. Each shard keeps its own write log and :class:`~index.engine.delta.Delta` (over its own rows, as any
documents table does); :class:`WholeDelta` gathers them into one delta over the whole table's rows, which the
door searches beside the :class:`~index.engine.shards.ShardedTable` as it searches an unsharded table beside its
delta: vector, keyword with the live statistics of every shard's documents, hybrid, filters, diversity.

The written documents, past the version's rows, are ordered by shard, then by write order in their shard (the
shards' logs share no clock): among equal scores, a written document of a lower shard comes first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import numpy as np

from index.engine.delta import Delta, Document, Key
from index.engine.shards import ShardedTable
from index.errors import WRITES_ONLY
from index.store.payload import id_key
from index.store.shardmap import shard_of_id


def owner(key: Key, count: int) -> int:
    """The shard of ``count`` that owns the document of id ``key`` (an id as the table stores it)."""
    return shard_of_id(key, count)


def routed(values: Iterable[str | int], id_type: str) -> list[Key]:
    """Each of ``values`` (ids as a client sends them) as a table of ids ``id_type`` reads it (:func:`id_key`: on an
    integer-id table ``"007"`` is the id 7), what a front routes it by; one that no id of the table can equal keeps
    its text (its owner finds nothing, or refuses it, as the table does)."""
    return [str(value) if key is None else key for value, key in ((v, id_key(v, id_type)) for v in values)]


def by_owner(keys: Iterable[Key], count: int) -> dict[int, list[int]]:
    """The places of ``keys`` grouped by the shard that owns each, shards in order."""
    groups: dict[int, list[int]] = {}
    for place, key in enumerate(keys):
        groups.setdefault(owner(key, count), []).append(place)
    return dict(sorted(groups.items()))


class WholeDelta:
    """The whole table's delta, gathered from its shards' deltas (made again only when one of them changed)."""

    def __init__(self, table: ShardedTable) -> None:
        payload = table.documents(WRITES_ONLY)
        self.rows, self.global_rows = table.rows, table.global_rows  # not the table: a registry's weak key
        self.delta = Delta(payload, table.rows, table.dim, 0)
        self._parts: list[tuple[dict[Key, Document], np.ndarray]] = []
        self._lock = threading.Lock()

    def of(self, parts: Sequence[Delta]) -> Delta:
        """A snapshot of the whole table's delta, given a snapshot of each shard's (in shard order)."""
        held = [(part.documents, part.deleted) for part in parts]
        with self._lock:
            if len(held) != len(self._parts) or any(
                a is not b or c is not d for (a, c), (b, d) in zip(held, self._parts, strict=True)
            ):
                deleted = np.zeros(self.rows, dtype=bool)
                for rows, part in zip(self.global_rows, parts, strict=True):
                    deleted[rows] = part.deleted
                covered = sum(part.covered for part in parts)
                self.delta.replace(parts, deleted, covered, sum(part.seq for part in parts))
                self._parts = held
            return self.delta.snapshot()
