"""Known-item retrieval on gensim's Lee background corpus: does a document's first half find its second half?

Each of the 300 news documents is cut in two by its whitespace-separated words (the first ``n // 2`` words and
the rest). The second halves are imported as a documents table (``embedding-index import --format documents``'s
reader and builder, each half's vector the mean GloVe 6B 50d row of its words); the first halves are the queries.
Each query has one right answer, its own second half: MRR@10 (1 / its rank when within the first 10, else 0) and
recall@10 (how often it is within the first 10), over the 300 queries.

    .venv/bin/python -m bench.retrieval                  # the table printed
    .venv/bin/python -m bench.retrieval --json out.json  # and the figures as JSON
    .venv/bin/python -m bench.retrieval --tables W/data  # the encoders' tables bench.lee_similarity --work-dir W built

Each method is one function from the queries to their best rows; the keyword rows are BM25 with the builder's
settings and variants of them (built apart from the table, over the same texts): no stop words or stemming,
stemming alone, stop words alone, both, and bm25s's k1; they are also measured on short queries (each first
half's first 5 and 10 words), where a word's other forms matter most; the vector row is the
engine's nearest rows to each first half's mean GloVe vector, and the hybrid rows Reciprocal Rank Fusion of the
two (``index.engine.hybrid``, as ``POST .../search`` with ``mode: hybrid`` runs it). The fusion's constant
(``rrf_k``, 60 by default) is measured on each side of the default with the weakest and the strongest vector list
(mean GloVe, the MiniLM transformer): ``rrf_k`` in the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from gensim.test.utils import datapath

from index.build.sources import ReadOptions, glove_package
from index.build.sources import documents as documents_source
from index.build.writer import build_table
from index.engine.encode import Pooling, encoder_for
from index.engine.fusion import RRF_K
from index.engine.hybrid import DocumentSearch
from index.engine.hybrid import run as run_hybrid
from index.engine.keyword import K1, KeywordIndex, Tokenizer, build
from index.engine.table import Table, VectorSearch
from index.progress import configure
from index.store import artifact

K = 10
SHORT = (5, 10)  # the short queries' words
RRF_KS = (5, 10, 30, RRF_K, 100, 200)  # the fusion's constant, on each side of the default
TOKENIZERS = {  # the keyword variants: (stop words, stemmer)
    "no stop words, no stemming": (None, None),
    "English stemmer": (None, "english"),
    "English stop words": ("en", None),
    "English stop words and stemmer": ("en", "english"),
}
Search = Callable[[list[str], int], np.ndarray]  # queries, k -> rows (queries x k), -1 pads


def halves() -> tuple[list[str], list[str]]:
    """(first halves, second halves) of the Lee documents, by whitespace-separated words."""
    texts = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()
    cut = [text.split() for text in texts]
    return [" ".join(w[: len(w) // 2]) for w in cut], [" ".join(w[len(w) // 2 :]) for w in cut]


def mean_glove(texts: list[str]) -> np.ndarray:
    glove = glove_package.read()
    row = {token: i for i, token in enumerate(glove.tokens)}
    vectors = np.zeros((len(texts), glove.matrix.shape[1]), dtype=np.float32)
    for i, text in enumerate(texts):
        found = [row[w] for w in re.findall(r"[a-z]+|[0-9]+", text.lower()) if w in row]
        vectors[i] = glove.matrix[found].mean(axis=0)
    return vectors


def import_documents(texts: list[str], work: Path, vectors: np.ndarray | None = None, name: str = "lee-halves") -> Path:
    """The second halves as a documents table, through the import's reader and builder (``vectors``: one per
    text, by default each text's mean GloVe row)."""
    source = work / f"{name}.jsonl"
    vectors = mean_glove(texts) if vectors is None else vectors
    with open(source, "w", encoding="utf-8") as out:
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            out.write(json.dumps({"id": f"lee-{i:03d}", "text": text, "vector": vector.tolist()}) + "\n")
    raw = documents_source.read(source, ReadOptions())
    build_table(raw, data_dir=work / "data", name=name, source={"path": str(source)}, index_spec="flat")
    return work / "data" / name


def encoder_rows(
    data_dir: Path | None, work: Path, queries: list[str], documents: list[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(query vectors, document vectors) of the server's encoders (``index.engine.encode``): GloVe 6B 50d by SIF, its
    component from the Lee background corpus itself (as the SIF paper takes it from the sentences embedded), and
    all-MiniLM-L6-v2's token table by the mean of the pieces' rows, and all-MiniLM-L6-v2 itself (its transformer
    table, run by ONNX Runtime). The tables are bench.lee_similarity's: those it built in ``data_dir`` (every GloVe
    row: a run without ``--quick``), else built here as it builds them."""
    from bench.lee_similarity import GLOVE, MINILM, TRANSFORMER, build_tables

    if data_dir is None:
        data_dir = work / "encoders"
        build_tables(data_dir, None)
    out = {}
    encoders: tuple[tuple[str, str, Pooling | None], ...] = (
        ("GloVe 6B 50d SIF", GLOVE, "sif"),
        ("MiniLM token mean", MINILM, "mean"),
        ("MiniLM transformer", TRANSFORMER, None),
    )
    for label, name, pooling in encoders:
        encoder = encoder_for(Table.load(data_dir / name))
        out[label] = (encoder.encode(queries, pooling).vectors, encoder.encode(documents, pooling).vectors)
    return out


def keyword_search(index: KeywordIndex) -> Search:
    return lambda queries, k: index.search(queries, k)[1]


def padded(answers: list[list[int]], k: int) -> np.ndarray:
    rows = np.full((len(answers), k), -1, dtype=np.int64)
    for i, found in enumerate(answers):
        rows[i, : len(found)] = found[:k]
    return rows


def vector_search(table: Table, vectors: dict[str, np.ndarray]) -> Search:
    """The nearest rows to each query's mean GloVe vector (``vectors``: by query text)."""

    def search(queries: list[str], k: int) -> np.ndarray:
        units = table.normalize_queries(np.vstack([vectors[q] for q in queries]))
        return padded([[i for i, _ in hits] for hits in table.run(VectorSearch(units, k))], k)

    return search


def hybrid_search(table: Table, vectors: dict[str, np.ndarray], **settings: Any) -> Search:
    """RRF of the vector list and the keyword list (``index.engine.hybrid``), as the HTTP API's mode hybrid runs it."""

    def search(queries: list[str], k: int) -> np.ndarray:
        units = table.normalize_queries(np.vstack([vectors[q] for q in queries]))
        answers = run_hybrid(table, DocumentSearch("hybrid", k, units, queries, **settings))
        return padded([[hit.row for hit in hits] for hits in answers], k)

    return search


def keyword_variant(texts: list[str], work: Path, **settings: Any) -> Search:
    built = build(pa.array(texts), **settings)
    assert built is not None
    directory = Path(tempfile.mkdtemp(dir=work))
    for name, content in built.files.items():
        (directory / name).write_bytes(content)
    index = KeywordIndex.open(directory, {"rows": len(texts), "keyword": built.info})
    assert index is not None
    return keyword_search(index)


def measure(search: Search, queries: list[str]) -> dict[str, float]:
    """The figures of one method; its time is that of one call with every query, after a first call."""
    search(queries[:1], K)
    started = time.perf_counter()
    rows = search(queries, K)
    seconds = time.perf_counter() - started
    right = rows == np.arange(len(queries))[:, None]
    found = right.any(axis=1)
    rank = right.argmax(axis=1) + 1
    return {
        "mrr@10": float(np.where(found, 1.0 / rank, 0.0).mean()),
        "recall@10": float(found.mean()),
        "recall@1": float(right[:, 0].mean()),
        "ms_per_query": 1000 * seconds / len(queries),
    }


def run(tables: Path | None = None) -> dict[str, Any]:
    configure(quiet=True)
    queries, documents = halves()
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as scratch:
        work = Path(scratch)
        directory = import_documents(documents, work)
        manifest = artifact.read_manifest(directory)
        index = KeywordIndex.open(directory, manifest)
        assert index is not None
        settings = manifest["keyword"]["tokenizer"]
        methods: dict[str, Search] = {
            f"keyword: BM25 k1 {index.k1}, b {index.b}, the import's (stop words {settings['stopwords']}, "
            f"stemmer {settings['stemmer']})": keyword_search(index)
        }
        variants = {
            f"keyword: BM25 k1 {K1}, b 0.75, {label}": keyword_variant(
                documents, work, tokenizer=Tokenizer.named(*named)
            )
            for label, named in TOKENIZERS.items()
        }
        methods.update(variants)
        methods["keyword: BM25 k1 1.5, b 0.75 (bm25s's defaults), the import's words"] = keyword_variant(
            documents, work, tokenizer=index.tokenizer, k1=1.5
        )
        table = Table.load(directory)
        vectors = dict(zip(queries, mean_glove(queries), strict=True))
        methods["vector: mean GloVe 6B 50d, cosine"] = vector_search(table, vectors)
        methods["hybrid: RRF k 60 of vector and keyword lists (100 deep)"] = hybrid_search(table, vectors)
        methods["hybrid: RRF k 60, keyword weight 2"] = hybrid_search(table, vectors, weights=(1.0, 2.0))
        fused = {"mean GloVe 6B 50d": (table, vectors)}
        for label, (query_rows, document_rows) in encoder_rows(tables, work, queries, documents).items():
            slug = "-".join(label.split()[:2]).lower()
            encoded = Table.load(import_documents(documents, work, document_rows, f"lee-halves-{slug}"))
            by_text = dict(zip(queries, query_rows, strict=True))
            methods[f"vector: {label}, cosine"] = vector_search(encoded, by_text)
            methods[f"hybrid: RRF k 60 of {label} and keyword lists"] = hybrid_search(encoded, by_text)
            fused[label] = (encoded, by_text)
        rows = {name: measure(search, queries) for name, search in methods.items()}
        rrf_k = {
            label: {str(k): measure(hybrid_search(*fused[label], rrf_k=k), queries) for k in RRF_KS}
            for label in ("mean GloVe 6B 50d", "MiniLM transformer")
        }
        short = {
            f"{name}, first {n} words": measure(search, [" ".join(q.split()[:n]) for q in queries])
            for n in SHORT
            for name, search in variants.items()
        }
    return {
        "queries": len(queries),
        "documents": len(documents),
        "k": K,
        "keyword": manifest["keyword"],
        "rows": rows,
        "short_queries": short,
        "rrf_k": rrf_k,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--tables",
        type=Path,
        help="the encoders' tables as bench.lee_similarity built them (its --work-dir's data/), not built again",
    )
    args = parser.parse_args()
    result = run(args.tables)
    width = max(map(len, result["rows"]))
    print(f"{result['queries']} first halves -> {result['documents']} second halves (Lee background corpus)")
    print(f"{'method':<{width}}  MRR@10  recall@10  recall@1  ms/query")
    fusion = {f"hybrid of {label}, rrf_k {k}": f for label, by_k in result["rrf_k"].items() for k, f in by_k.items()}
    for name, figures in [*result["rows"].items(), *result["short_queries"].items(), *fusion.items()]:
        print(
            f"{name:<{width}}  {figures['mrr@10']:.4f}  {figures['recall@10']:9.4f}  {figures['recall@1']:8.4f}"
            f"  {figures['ms_per_query']:8.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
