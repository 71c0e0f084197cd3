"""Documents without vectors, embedded at import by a table the data directory already has (``--encoder``).

The encoder table is loaded and verified like any served table and its encoder (``index.engine.encode``) embeds the
text field in blocks, with progress. A document with no text, whose text has no token the encoder knows, or
whose known words cancel out (their rows sum to zero), is a bad row (named by its line, or dropped with
``--drop-invalid``), each kind counted apart (``index.build.documents.embedded``). The manifest records the encoder: its
name, kind, pooling, dimension and the sha256 of its vectors (and of its SIF component; a transformer table's:
of its model graph), so that the server can check that the table it embeds query texts with is the one the
documents were embedded with.

A transformer table's blocks run on as many threads as the process has cores (:func:`threads`), each through one
ONNX Runtime session of a single intra-op thread (a session may be run from several threads at once; the GIL is
released while it runs). Independent single-threaded runs spend less CPU per text than one run spread over the
cores, whose threads wait for each other at every operator (BENCHMARKS.md, "A sharded table"); a Ray actor, given
one core, runs one. The vectors do not depend on the threads. Progress counts the texts of each run of the model
as it ends (a block of :data:`MODEL_BLOCK_TEXTS` texts takes seconds on a busy machine), a word table's per block.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from index.build.documents import Embedded
from index.engine.encode import Encoder, encoder_for, visible
from index.engine.encoding import Encoded
from index.engine.table import Table
from index.engine.transformer_encoder import TransformerEncoder, threads
from index.errors import InputError, UnknownTable, counted, every
from index.progress import Progress, note, warn
from index.store import artifact

BLOCK_TEXTS = 4096  # texts embedded at a time (one progress step)
MODEL_BLOCK_TEXTS = 256  # the same for a transformer table, whose texts take longer


@dataclass
class TextEncoder:
    """What the documents reader calls: ``embed(texts)`` -> :class:`index.build.documents.Embedded`."""

    table: Table
    encoder: Encoder | TransformerEncoder
    runs: int = 1  # blocks embedded at once

    @classmethod
    def open(cls, directory: Path) -> TextEncoder:
        try:
            table = Table.load(directory)
        except UnknownTable:
            known = ", ".join(artifact.list_tables(directory.parent)) or "none"
            problem = f"--encoder: no table {directory.name!r} in the data directory (its tables: {known})"
            raise InputError(directory, problem) from None
        if "transformer" in table.manifest:
            return cls(table, TransformerEncoder(table, intra_op_threads=1), runs=threads())
        return cls(table, encoder_for(table))

    def info(self) -> dict[str, Any]:
        """The manifest's record of the encoder (with SIF pooling, the checksum of the component it used)."""
        pooling = self.encoder.default_pooling
        sif = {"sif_sha256": self.table.sif_sha256} if pooling == "sif" else {}
        return {
            "table": self.table.name,
            "kind": self.table.kind,
            "pooling": pooling,
            "dim": self.table.dim,
            "vectors_sha256": self.table.vectors_sha256,
            **sif,
            **({"graph_sha256": self.table.graph_sha256} if self.table.graph_sha256 else {}),
        }

    def embed(self, texts: Sequence[str | None]) -> Embedded:
        """The float32 unit rows of the embeddable texts, in order; a boolean per text: embedded or not; the known
        words of the texts whose known words cancel out; what the tokenizer left out of those without a known piece."""
        ok = np.zeros(len(texts), dtype=bool)
        cut = 0  # texts longer than a transformer reads, embedded from their start
        cancelled: dict[int, list[str]] = {}
        left_out: dict[int, tuple[list[str], list[str]]] = {}
        blocks = []
        step = MODEL_BLOCK_TEXTS if self.table.graph_sha256 else BLOCK_TEXTS
        given = [[text or "" for text in texts[start : start + step]] for start in range(0, len(texts), step)]
        started = time.perf_counter()
        with (
            Progress(f"embedding with {self.table.name}", len(texts), "documents") as progress,
            ThreadPoolExecutor(self.runs) as pool,
        ):
            counting = threading.Lock()  # the blocks' threads advance one progress

            def advance(done: int) -> None:
                with counting:
                    progress.advance(done)

            # zero rows for texts the encoder cannot embed; the blocks come back in their order
            for number, encoded in enumerate(pool.map(lambda block: self._encode(block, advance), given)):
                block, start = given[number], number * step
                # a blank text is no document (a transformer would embed it as [CLS] [SEP] alone)
                known = (np.asarray(encoded.tokens) > 0) & np.array([visible(text) for text in block], dtype=bool)
                blocks.append(encoded.vectors[known])
                ok[start : start + len(block)] = known
                cut += int(np.count_nonzero(encoded.truncated)) if encoded.truncated is not None else 0
                cancelled.update({start + i: words for i, words in encoded.cancelled.items()})
                left_out.update({start + i: pieces for i, pieces in encoded.left_out.items()})
        seconds = time.perf_counter() - started
        rate = len(texts) / max(seconds, 1e-9)
        note(f"embedded {counted(len(texts), 'text')} in {seconds:.1f} s ({rate:,.0f} texts/s)")
        if cut and isinstance(self.encoder, TransformerEncoder):
            longest = self.encoder.max_length
            which = every(cut, "text") if cut == len(texts) else f"{cut:,} of the {counted(len(texts), 'text')}"
            warn(
                f"{which} {'is' if cut == 1 else 'are'} longer than the {longest:,} tokens the model of table "
                f"{self.table.name!r} reads: each embedded from its first {longest:,} (as sentence-transformers embeds "
                "it); split such documents smaller (a folder's --chunk-words) to embed all of their text"
            )
        matrix = np.vstack(blocks) if blocks else np.zeros((0, self.table.dim), dtype=np.float32)
        return Embedded(matrix, ok, cancelled, left_out)

    def _encode(self, block: list[str], advance: Callable[[int], None]) -> Encoded:
        if isinstance(self.encoder, TransformerEncoder):
            return self.encoder.encode(block, strict=False, done=advance)  # advanced run by run
        encoded = self.encoder.encode(block, strict=False)
        advance(len(block))
        return encoded
