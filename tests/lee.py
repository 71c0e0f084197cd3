"""gensim's Lee background corpus as documents: 300 news documents with fields derived from their own words and
a vector each, the mean GloVe 6B 50d row of their words (computed with one sparse product), and writers for the
formats ``embedding-index import --format documents`` reads."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse
from gensim.test.utils import datapath

from index.build.sources import RawTable, glove_package
from tests.vectors import unit

TYPES = {
    "year": "integer",
    "tags": "string_list",
    "lang": "string",
    "known": "float",
    "long": "boolean",
    "published": "timestamp",
}
EPOCH = datetime(2001, 1, 1, tzinfo=UTC)


@dataclass
class Lee:
    ids: list[str]
    texts: list[str]
    vectors: np.ndarray  # float32, the mean GloVe row of each document's words
    fields: dict[str, list[Any]]  # Python values; timestamps as datetime

    def record(self, i: int) -> dict[str, Any]:
        """Document ``i`` as the payload gives it back (timestamps as ISO 8601 text)."""
        values = {name: column[i] for name, column in self.fields.items()}
        values["published"] = values["published"].strftime("%Y-%m-%dT%H:%M:%SZ")
        return values

    def unit(self) -> np.ndarray:
        return unit(self.vectors)


@cache
def glove_rows() -> RawTable:
    """The GloVe package's rows as read, once per process and read-only: the session's ``glove_raw``, and what a
    command started at collection needs of them (``lee_stories``), are these (a build normalises its input's rows in
    place: it is given a copy)."""
    raw = glove_package.read()
    raw.matrix.setflags(write=False)
    return raw


@cache
def lee_stories() -> Lee:
    """The Lee corpus over ``glove_rows`` (``make_lee``), once per process, its vectors read-only: the session's
    ``lee_docs``."""
    lee = make_lee(glove_rows())
    lee.vectors.setflags(write=False)
    return lee


def make_lee(glove_raw: RawTable) -> Lee:
    texts = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()
    vocab = {token: i for i, token in enumerate(glove_raw.tokens)}
    words = [re.findall(r"[a-z]+|[0-9]+", text.lower()) for text in texts]
    known = [[vocab[w] for w in ws if w in vocab] for ws in words]
    lengths = np.array([len(k) for k in known])
    counts = scipy.sparse.csr_matrix(
        (np.ones(lengths.sum(), dtype=np.float32), np.concatenate(known), np.concatenate([[0], np.cumsum(lengths)])),
        shape=(len(texts), len(glove_raw.tokens)),
    )
    vectors = np.asarray((counts @ glove_raw.matrix) / lengths[:, None], dtype=np.float32)
    long_words = [Counter(w for w in ws if len(w) >= 7).most_common(3) for ws in words]
    fields: dict[str, list[Any]] = {
        "year": [1990 + len(ws) % 12 for ws in words],
        "tags": [None if i % 11 == 0 else [w for w, _ in common] for i, common in enumerate(long_words)],
        "lang": [None if i % 13 == 0 else "en" for i in range(len(texts))],
        "known": [len(k) / len(ws) for k, ws in zip(known, words, strict=True)],
        "long": [len(ws) > 200 for ws in words],
        "published": [EPOCH + timedelta(hours=37 * i, minutes=len(ws) % 60) for i, ws in enumerate(words)],
    }
    return Lee([f"lee-{i:03d}" for i in range(len(texts))], texts, vectors, fields)


def jsonl_records(lee: Lee) -> list[dict[str, Any]]:
    records = []
    for i in range(len(lee.ids)):
        record = {"id": lee.ids[i], "text": lee.texts[i], **lee.record(i)}
        record["vector"] = lee.vectors[i].tolist()  # float32 -> float -> JSON -> float32 gives the same values
        records.append(record)
    return records


def write_jsonl(path: Path, records: list[dict[str, Any]], lines: list[str] | None = None) -> Path:
    text = "\n".join(lines if lines is not None else [json.dumps(r) for r in records]) + "\n"
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    return path


def write_parquet(path: Path, lee: Lee, vectors: np.ndarray | None = None) -> Path:
    matrix = lee.vectors if vectors is None else vectors
    table = pa.table(
        {
            "id": lee.ids,
            "text": lee.texts,
            "year": pa.array(lee.fields["year"], pa.int32()),
            "tags": lee.fields["tags"],
            "lang": lee.fields["lang"],
            "known": lee.fields["known"],
            "long": lee.fields["long"],
            "published": pa.array(lee.fields["published"], pa.timestamp("ms", tz="UTC")),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1]),
        }
    )
    pq.write_table(table, path, row_group_size=128)
    return path
