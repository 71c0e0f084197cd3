"""A word table's SIF common component: ``embedding-index sif NAME [--corpus FILE] [--a A]``.

SIF (Arora, Liang and Ma 2017) removes from each sentence vector its projection on the first principal
component of a corpus's sentence vectors. This step computes that component once, from a reference corpus
(one text a line, UTF-8, gzip allowed; by default gensim's Lee background corpus, which gensim installs): the
SIF-weighted mean of each line's known words (``index.engine.encode``, without the removal), and of all of them the
first right singular vector, uncentred as in the paper's code (the top eigenvector of their Gram matrix,
summed batch by batch, so a corpus of any size takes memory for one batch). It is stored beside the table as
``sif_component.npy`` (float64, unit length, its largest entry positive), listed in the manifest with how it
was made (``manifest["sif"]``); the new version of the table is published as ``embedding-index index`` does,
the other files linked unchanged. Lines without a known word are skipped and counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from index.build.gensim_data import gensim_data
from index.build.sources import open_text
from index.build.writer import source_digest
from index.engine.encode import DEFAULT_A, Encoder
from index.engine.table import Table
from index.errors import InputError, InvalidQuery, counted
from index.progress import Progress, duration, note
from index.store import artifact

BATCH_LINES = 4096
DEFAULT_CORPUS = "lee_background.cor"  # gensim's test data


def default_corpus() -> Path:
    return gensim_data(DEFAULT_CORPUS)


def count_lines(path: Path) -> int:
    with open_text(path) as handle:
        return sum(1 for _ in handle)


def read_lines(path: Path, batch: int = BATCH_LINES) -> Iterator[list[str]]:
    """The corpus's lines in batches, decoded strictly: a line that is not UTF-8 is an error naming it."""
    with open_text(path) as handle:
        lines: list[str] = []
        for number, raw in enumerate(handle, start=1):
            try:
                lines.append(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                problem = f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                raise InputError(path, problem, number) from None
            if len(lines) == batch:
                yield lines
                lines = []
        if lines:
            yield lines


def first_component(gram: np.ndarray) -> tuple[np.ndarray, float]:
    """The top eigenvector of a Gram matrix X^T X (the first right singular vector of X), its largest entry
    made positive, and the share of X's squared length along it."""
    values, vectors = np.linalg.eigh(gram)
    component = vectors[:, -1]
    if component[np.argmax(np.abs(component))] < 0:
        component = -component
    share = float(values[-1] / values.sum()) if values.sum() > 0 else 0.0
    return np.ascontiguousarray(component, dtype=np.float64), share


def corpus_component(encoder: Encoder, corpus: Path) -> tuple[np.ndarray, dict[str, Any]]:
    """The SIF component of ``corpus`` for ``encoder``'s table, and what it was made from."""
    dim = encoder.table.dim
    gram = np.zeros((dim, dim), dtype=np.float64)
    lines = texts = 0
    with Progress("sif", count_lines(corpus), "lines") as progress:
        for batch in read_lines(corpus):
            pieces = encoder.pieces(batch)
            means, used = encoder.means(pieces, encoder.weights(pieces.ids, "sif"), len(batch))
            known = means[used > 0]
            gram += known.T @ known
            lines, texts = lines + len(batch), texts + len(known)
            progress.advance(len(batch))
    if not texts:
        raise InputError(corpus, f"no line has a word of table {encoder.table.name!r} ({counted(lines, 'line')})")
    component, share = first_component(gram)
    return component, {"lines": lines, "texts": texts, "skipped": lines - texts, "explained": round(share, 6)}


def sif_table(data_dir: Path, name: str, corpus: Path | None = None, a: float = DEFAULT_A) -> dict[str, Any]:
    """Compute table ``name``'s SIF component from ``corpus`` and publish the table's new version with it."""
    started = time.perf_counter()
    directory = artifact.table_dir(data_dir, name)
    note(f"verifying {directory} ...")
    table = Table.load(directory)
    if table.kind != "words":
        raise InvalidQuery(f"table {name!r} is a {table.kind} table: SIF is for word tables")
    artifact.check_writable(data_dir)
    path = Path(corpus) if corpus is not None else default_corpus()
    if not path.is_file():
        raise InputError(path, "no such file" if not path.exists() else "not a file")
    encoder = Encoder(table, a=a)
    note(f"SIF vectors of the lines of {path.name} (a = {a}, p(w) from {encoder.frequency_source}) ...")
    component, made = corpus_component(encoder, path)
    info = {
        "file": artifact.SIF_COMPONENT,
        "a": a,
        "frequencies": encoder.frequency_source,
        "corpus": {
            "path": f"gensim:{DEFAULT_CORPUS}" if corpus is None else str(path),
            "sha256": source_digest([path]),
            **made,
        },
        "computed_at": artifact.now_iso(),
    }
    published = artifact.republish(
        data_dir,
        name,
        table.manifest,
        lambda tmp: np.save(tmp / artifact.SIF_COMPONENT, component, allow_pickle=False),
        (artifact.SIF_COMPONENT,),
        {"sif": info},
        "its SIF component was computed",
    )
    note(f"SIF component of {name!r} in {duration(time.perf_counter() - started)}")
    return published
