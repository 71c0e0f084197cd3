"""A sharded import run on a Ray cluster (``embedding-index import ... --shards N --ray auto|ADDRESS``).

What runs where:

- the documents are read and checked by the command (the driver), as without Ray;
- their text, when ``--encoder`` embeds it, is embedded by actors that each hold the encoder (its table
  mapped, a transformer's ONNX session loaded once per actor), one block of texts per call, in the blocks a
  local import embeds (``embed_documents.BLOCK_TEXTS``): the same vectors;
- each shard's table (its keyword index with the whole table's statistics, its vector index, its files) is
  built by a task of its own, all shards at once, into the staging directory of the import (the data directory
  must be on storage every node of the cluster mounts);
- the map and the statistics are written, and the whole published, by the command.

Progress: a line per block embedded and per shard built. Without ``--ray`` the same steps run in the command's
process, one after the other; the tables are the same files either way (the tests compare their checksums).
``auto``: the cluster ``RAY_ADDRESS`` names, else a new one of this machine's cores; an address: that cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from index.build.documents import Embed, Embedded
from index.build.embed_documents import BLOCK_TEXTS, MODEL_BLOCK_TEXTS, TextEncoder
from index.errors import InputError
from index.progress import Progress

T = TypeVar("T")
Job = Callable[[], T]


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the cluster ``address`` names (``auto``: see the module's notes)."""
    try:
        import ray
    except ImportError:
        raise InputError(Path("--ray"), "Ray is not installed: pip install 'ray>=2.40,<3'") from None
    if not ray.is_initialized():
        if address == "auto":
            ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    return ray


def run_all(ray: Any, jobs: Sequence[Job[T]], what: str) -> list[T]:
    """Each of ``jobs`` as a Ray task, all at once; their results in order, a progress step as each ends."""
    task = ray.remote(lambda job: job())
    refs = [task.remote(job) for job in jobs]
    order = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    waiting = list(refs)
    with Progress(what, len(refs), "shards") as progress:
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            results[order[done[0]]] = ray.get(done[0])
            progress.advance(1)
    return results


class _Embedder:
    """A Ray actor's encoder: opened once, then one block of texts per call."""

    def __init__(self, directory: str) -> None:
        self.encoder = TextEncoder.open(Path(directory))

    def embed(self, texts: list[str | None]) -> Embedded:
        return self.encoder.embed(texts)


def embedder(ray: Any, encoder: TextEncoder) -> Embed:
    """``encoder.embed`` run by Ray actors holding the encoder (as many as the cluster has cores, at most one per
    block), the blocks in a local import's order."""
    step = MODEL_BLOCK_TEXTS if encoder.table.graph_sha256 else BLOCK_TEXTS
    directory = str(encoder.table.directory)

    def embed(texts: Sequence[str | None]) -> Embedded:
        from ray.util import ActorPool

        blocks = [list(texts[start : start + step]) for start in range(0, len(texts), step)]
        cores = max(1, int(ray.cluster_resources().get("CPU", 1)))
        actor = ray.remote(num_cpus=1)(_Embedder)
        pool = ActorPool([actor.remote(directory) for _ in range(min(cores, len(blocks)) or 1)])
        matrices, found = [], []
        cancelled: dict[int, list[str]] = {}
        left_out: dict[int, tuple[list[str], list[str]]] = {}
        with Progress(f"embedding with {encoder.table.name} on Ray", len(texts), "documents") as progress:
            answers = pool.map(lambda a, block: a.embed.remote(block), blocks)
            for number, (block, answer) in enumerate(zip(blocks, answers, strict=True)):
                matrices.append(answer.matrix)
                found.append(answer.ok)
                cancelled.update({number * step + i: words for i, words in answer.cancelled.items()})
                left_out.update({number * step + i: pieces for i, pieces in answer.left_out.items()})
                progress.advance(len(block))
        dim = encoder.table.dim
        return Embedded(
            np.vstack(matrices) if matrices else np.zeros((0, dim), dtype=np.float32),
            np.concatenate(found) if found else np.zeros(0, dtype=bool),
            cancelled,
            left_out,
        )

    return embed
