"""The ``embedding-index`` command's options as a user types them: the real problem first, ``--quiet`` on either
side of the command, the import's help, and the Makefile's shortcuts for the common steps."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import typer.main

from index.build import writer
from index.build.cli import compact as compact_command
from index.build.cli import index_column, verify
from index.build.sources import RawTable
from index.engine.table import Table
from index.engine.transformer_encoder import threads
from index.store import artifact, writelog
from tests.cli import REPO, Result, progress_lines, run_cli, untimed
from tests.examples import example
from tests.lee import Lee, jsonl_records
from tests.minilm import minilm_dir
from tests.words import write_words

EXE = Path(sys.executable).with_name("embedding-index")


def lee_json(path: Path, lee: Lee, rows: int = 20, vectors: bool = False) -> Path:
    """JSON Lines of Lee documents in a file named ``.json``."""
    records = [{k: v for k, v in r.items() if vectors or k != "vector"} for r in jsonl_records(lee)[:rows]]
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def test_a_missing_file_is_named_before_any_option(tmp_path: Path, data_dir: Path) -> None:
    missing = tmp_path / "notes.jsonl"
    result = run_cli("import", missing, "--name", "t", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 1
    assert result.err.strip() == f"embedding-index: error: {missing}: no such file or directory"


def test_a_json_file_is_documents(tmp_path: Path, data_dir: Path, lee_docs: Lee) -> None:
    """A ``.json`` file of JSON Lines is read as documents (with --encoder, or its own vectors)."""
    embedded = lee_json(tmp_path / "lee.json", lee_docs)
    result = run_cli("import", embedded, "--name", "embedded", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 0, result.err
    assert Table.load(data_dir / "embedded").manifest["kind"] == "documents"
    own = lee_json(tmp_path / "own.json", lee_docs, vectors=True)
    result = run_cli("import", own, "--name", "own", "--data-dir", data_dir, "--id-field", "id")
    assert result.code == 0, result.err
    array = tmp_path / "array.json"
    array.write_text(json.dumps(jsonl_records(lee_docs)[:3], indent=1), encoding="utf-8")
    result = run_cli("import", array, "--name", "array", "--data-dir", data_dir, "--encoder", "small")
    assert result.code == 1 and "only for" not in result.err
    assert f"{array}:1: " in result.err  # what is wrong with the file, at its line


def test_document_options_on_another_format_say_what_the_file_is(tmp_path: Path, data_dir: Path) -> None:
    words = tmp_path / "words.vec"
    words.write_text("1 3\nheart 0.1 0.2 0.3\n", encoding="utf-8")
    result = run_cli("import", words, "--name", "t", "--data-dir", data_dir, "--encoder", "small", "--stemmer", "none")
    assert result.code == 1
    assert result.err.strip().endswith(
        f"--encoder, --stemmer: only for --format documents, and {words} reads as fasttext"
    )


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        (["--vocab", "vocab.txt"], "--vocab: only for --format npy or projector, and {} reads as fasttext"),
        (["--tensor", "wte.weight"], "--tensor: only for --format hf or transformer, and {} reads as fasttext"),
        (
            ["--tensor", "w", "--format", "glove"],
            "--tensor: only for --format hf or transformer, and {} reads as glove",
        ),
        (["--allow-pickle"], "--allow-pickle: only for --format gensim, and {} reads as fasttext"),
    ],
)
def test_a_reader_option_on_another_format_is_refused(
    tmp_path: Path, data_dir: Path, given: list[str], problem: str
) -> None:
    """--vocab, --tensor and --allow-pickle are read by some formats only: with another they are refused, never
    ignored."""
    words = tmp_path / "words.vec"
    words.write_text("1 3\nheart 0.1 0.2 0.3\n", encoding="utf-8")
    result = run_cli("import", words, "--name", "t", "--data-dir", data_dir, *given)
    assert result.code == 1
    assert result.err == f"embedding-index: error: {problem.format(words)}\n"
    assert not (data_dir / "t").exists()


@pytest.mark.parametrize("fmt", ["hf", "transformer", "model2vec", "gensim"])
def test_unicode_errors_replace_on_a_model_is_refused(tmp_path: Path, data_dir: Path, fmt: str) -> None:
    """A model's tokens are text already (its tokenizer.json, a gensim model's keys): --unicode-errors replace
    would change nothing, so it is refused, never ignored."""
    model = tmp_path / "model"
    model.mkdir()
    result = run_cli(
        "import", model, "--name", "t", "--data-dir", data_dir, "--format", fmt, "--unicode-errors", "replace"
    )
    problem = (
        "--unicode-errors replace: only for --format word2vec, word2vec-binary, glove, fasttext, npy, projector or a "
        f"folder of text files, and {model} reads as {fmt}, whose tokens are text already"
    )
    assert (result.code, result.err) == (1, f"embedding-index: error: {problem}\n")
    assert not (data_dir / "t").exists()


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--chunk-words", "80"], "--chunk-words"),
        (["--unicode-errors", "replace"], "--unicode-errors replace"),
        (["--unicode-errors", "ignore"], "--unicode-errors ignore"),
        (["--encoding", "latin-1"], "--encoding"),
        (["--chunk-words", "80", "--unicode-errors", "replace", "--format", "documents"], None),
    ],
)
def test_folder_options_on_a_file_of_documents_are_refused(
    tmp_path: Path, data_dir: Path, suffix: str, given: list[str], named: str | None
) -> None:
    """--chunk-words, --encoding and --unicode-errors are for the files of a folder: with a JSON Lines or CSV file
    they are refused, never ignored."""
    records = tmp_path / f"notes{suffix}"
    records.write_text('{"id": "a", "text": "the heart"}\n' if suffix == ".jsonl" else "id,text\na,the heart\n")
    result = run_cli("import", records, "--name", "t", "--data-dir", data_dir, "--encoder", "small", *given)
    named = named or "--chunk-words, --unicode-errors replace"
    problem = f"{named}: only for a folder of text files, and {records} is a file of documents"
    assert (result.code, result.err) == (1, f"embedding-index: error: {problem}\n")
    assert not (data_dir / "t").exists()


def test_a_data_dir_that_is_a_file_is_named_by_every_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command taking --data-dir says that a file given as the data directory is not one (before the
    arguments it lacks, and before any write that would say "File exists")."""
    from index.build.cli import app

    words = tmp_path / "ft.vec"
    words.write_text("1 3\nheart 0.1 0.2 0.3\n", encoding="utf-8")
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    taking = sorted(name for name, command in commands.items() if "data_dir" in {p.name for p in command.params})
    assert {"build", "import", "list", "verify", "remove", "eval"} <= set(taking)
    for name in sorted(taking, key=lambda name: name != "import"):  # import first: build would read GloVe 6B
        result = run_cli(name, "--data-dir", words, *([words, "--name", "t"] if name == "import" else []))
        assert (result.code, result.err) == (1, f"embedding-index: error: {words}: not a directory\n"), name
    monkeypatch.setenv("EMBEDDING_DATA_DIR", str(words))  # the same directory from the environment
    assert run_cli("list").err == f"embedding-index: error: {words}: not a directory\n"


def test_an_empty_data_dir_is_refused_not_taken_as_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty --data-dir was the working directory (an import wrote its table there), an empty EMBEDDING_DATA_DIR
    (as a compose file or a ConfigMap leaves it) ./data without a word; both are refused, as embedding-serve
    refuses them. The option still overrides an empty variable."""
    words = tmp_path / "ft.vec"
    words.write_text("1 3\nheart 0.1 0.2 0.3\n", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    refused = "embedding-index: error: {} is empty: name a directory (the default is ./data)\n"
    for empty in ("", " "):
        result = run_cli("import", words, "--name", "t", "--data-dir", empty)
        assert (result.code, result.err) == (1, refused.format("--data-dir")), repr(empty)
        monkeypatch.setenv("EMBEDDING_DATA_DIR", empty)
        for args in (["list"], ["import", words, "--name", "t"]):
            result = run_cli(*args)
            assert (result.code, result.err) == (1, refused.format("EMBEDDING_DATA_DIR")), (repr(empty), args)
        monkeypatch.delenv("EMBEDDING_DATA_DIR")
    assert list(work.iterdir()) == []  # no table in ./ nor in ./data
    monkeypatch.setenv("EMBEDDING_DATA_DIR", "")
    data_dir = tmp_path / "data"
    assert run_cli("import", words, "--name", "t", "--data-dir", data_dir).code == 0
    assert (data_dir / "t" / "manifest.json").is_file()


def test_a_threads_variable_that_is_no_number_of_threads_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMBEDDING_THREADS (the threads that embed texts): a value embedding-serve refuses was replaced by every core
    without a word, " 2" too; the builder refuses the same values in the same words, and reads the values
    embedding-serve takes (" 2", "2.0", "+2") as their number."""
    for given in ("abc", "0", "", "513", "2.5"):
        monkeypatch.setenv("EMBEDDING_THREADS", given)
        result = run_cli("list", "--data-dir", tmp_path)
        refused = f"embedding-index: error: EMBEDDING_THREADS={given!r}: must be a whole number from 1 to 512\n"
        assert (result.code, result.err) == (1, refused), given
    for given in (" 2", "2.0", "+2"):
        monkeypatch.setenv("EMBEDDING_THREADS", given)
        assert run_cli("list", "--data-dir", tmp_path).code == 0, given
        assert threads() == 2, given


def test_a_data_dir_that_is_a_dangling_link_is_named(tmp_path: Path) -> None:
    """A data directory that is a link to nothing (a volume not mounted, a moved folder): an import said only
    "File exists" (making the directory), list "no tables"; both name the link and where it points."""
    words = tmp_path / "ft.vec"
    words.write_text("1 3\nheart 0.1 0.2 0.3\n", encoding="utf-8")
    link = tmp_path / "data"
    link.symlink_to(tmp_path / "volume")
    problem = f"embedding-index: error: {link}: a symbolic link to {tmp_path / 'volume'}, which does not exist\n"
    for args in (["import", words, "--name", "t"], ["list"]):
        result = run_cli(*args, "--data-dir", link)
        assert (result.code, result.out, result.err) == (1, "", problem), args
    assert not (tmp_path / "volume").exists()


def test_ctrl_c_says_so_and_leaves_the_table_as_it_was(
    tmp_path: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while a rebuild writes its files: exit status 130 with one line (Typer ends it so without a word), the
    existing table as it was and no temporary directory left."""
    words, data_dir = write_words(glove_raw, tmp_path / "words.txt", rows=2000), tmp_path / "data"
    assert run_cli("import", words, "--name", "t", "--data-dir", data_dir).code == 0
    before = (data_dir / "t" / "manifest.json").read_bytes()

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(writer, "write_tokens", interrupted)
    result = run_cli("import", words, "--name", "t", "--data-dir", data_dir, "--force")
    assert (result.code, result.err) == (130, "embedding-index: interrupted; no table was built or replaced\n")
    assert (data_dir / "t" / "manifest.json").read_bytes() == before
    assert sorted(path.name for path in data_dir.iterdir()) == ["t"]


def test_ctrl_c_after_the_publish_says_the_table_was_published(
    tmp_path: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C just after the new version took the table's name: the message says so (a shard published into its
    table's staging directory is not a table published)."""
    words, data_dir = write_words(glove_raw, tmp_path / "words.txt", rows=2000), tmp_path / "data"
    publish, interrupted = artifact.publish, "embedding-index: interrupted; "

    def then_interrupted(tmp: Path, final: Path) -> None:
        publish(tmp, final)
        raise KeyboardInterrupt

    monkeypatch.setattr(artifact, "publish", then_interrupted)
    result = run_cli("import", words, "--name", "t", "--data-dir", data_dir, "--shards", "2")
    assert (result.code, result.err) == (130, f"{interrupted}no table was built or replaced\n")
    result = run_cli("import", words, "--name", "t", "--data-dir", data_dir)
    assert (result.code, result.err) == (130, f"{interrupted}table 't' was published\n")
    assert artifact.list_tables(data_dir) == ["t"] and artifact.verify(data_dir / "t").ok


def test_a_folder_of_ones_own_under_a_tables_name_is_never_replaced(tmp_path: Path, glove_raw: RawTable) -> None:
    """A folder (or file) in the data directory that is not a table keeps what it holds: each command that makes a
    table refuses its name, --force or not, before reading anything."""
    words, data_dir = write_words(glove_raw, tmp_path / "words.txt", rows=2000), tmp_path / "data"
    (data_dir / "notes").mkdir(parents=True)
    (data_dir / "notes" / "todo.txt").write_text("mine\n")
    refused = f"embedding-index: error: {data_dir / 'notes'}: not a table (no manifest.json), never replaced, even "
    for command in (["import", words], ["import", words, "--shards", "2"], ["train", words], ["build"]):
        for force in ([], ["--force"]):
            result = run_cli(*command, "--name", "notes", "--data-dir", data_dir, *force)
            assert (result.code, result.err.startswith(refused)) == (1, True), (command, force, result.err)
    assert [path.name for path in data_dir.rglob("*")] == ["notes", "todo.txt"]


def test_a_removal_stopped_midway_takes_the_whole_table_away(
    tmp_path: Path, glove_raw: RawTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``remove`` stopped while it deletes the files (Ctrl-C here) says the table was removed: the name holds no part
    of the table, which no server would load; its files, hidden, are deleted by the next build, ``verify`` or server
    start."""
    words, data_dir = write_words(glove_raw, tmp_path / "words.txt", rows=2000), tmp_path / "data"
    assert run_cli("import", words, "--name", "t", "--data-dir", data_dir).code == 0

    unlink, deleted = os.unlink, []

    def one_then_interrupted(path: str, *, dir_fd: int | None = None) -> None:  # shutil.rmtree's unlink
        if dir_fd is not None and deleted:
            raise KeyboardInterrupt
        unlink(path, dir_fd=dir_fd)
        deleted.append(path)

    with monkeypatch.context() as patched:
        patched.setattr(os, "unlink", one_then_interrupted)
        result = run_cli("remove", "t", "--data-dir", data_dir)
    removed = "table 't' was removed (its files are deleted by the next build, verify or server start)"
    assert (result.code, result.err) == (130, f"embedding-index: interrupted; {removed}\n")
    assert not (data_dir / "t").exists() and artifact.list_tables(data_dir) == []
    [hidden] = data_dir.glob(".tmp-t-*")
    assert [path for path, _ in artifact.recover(data_dir)] == [hidden] and not hidden.exists()


def start(*args: object, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)


def finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return finish(start(*args, cwd=cwd))


def test_quiet_keeps_faiss_training_warnings_off_stderr(
    tmp_path: Path, data_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """FAISS warns from C++, on file descriptor 2, when its k-means gets fewer rows than it asks for (16 lists want
    624): --quiet leaves only errors, so not that either."""
    rows = np.random.default_rng(0).standard_normal((300, 8))
    glove = tmp_path / "few.txt"
    glove.write_text("".join(f"w{i} " + " ".join(f"{v:.4f}" for v in row) + "\n" for i, row in enumerate(rows)))
    given = ("--index", "IVF16,Flat", "--min-recall", "0")
    result = run_cli("import", glove, "--name", "few", "--data-dir", data_dir, *given)
    assert (result.code, result.err) == (0, "")
    assert capfd.readouterr().err == ""


def test_a_deferred_index_names_the_server_that_builds_it(tmp_path: Path, data_dir: Path) -> None:
    """What ``make run`` prints before serving: the index is left to ``embedding-serve`` (which builds it), not only
    to a command the user would think they must run."""
    rows = np.random.default_rng(0).standard_normal((200, 8))
    words = tmp_path / "few.txt"
    words.write_text("".join(f"w{i} " + " ".join(f"{v:.4f}" for v in row) + "\n" for i, row in enumerate(rows)))
    given = ("--index", "hnsw", "--defer-index")
    result = run_cli("import", words, "--name", "later", "--data-dir", data_dir, *given, quiet=False)
    assert result.code == 0, result.err
    note = "the 'hnsw' index is built later, in the background by `embedding-serve` or by `embedding-index index later`"
    assert f"embedding-index: exact search for now; {note}\n" in result.err, result.err
    until = "(exact search until `embedding-serve` or `embedding-index index` builds its index)"
    assert result.out.startswith("built 'later': 200 rows x 8 (flat, recall@10 1.0) " + until), result.out


def test_quiet_before_or_after_the_command(tmp_path: Path, data_dir: Path, lee_docs: Lee) -> None:
    source = lee_json(tmp_path / "lee.json", lee_docs)
    places = (["--quiet", "import"], ["import", "--quiet"], ["-q", "import"], ["import", "-q"])
    # The imports are independent (a table each): started together, they share the cores instead of queueing.
    started = [start(EXE, "import", source, "--name", "loud", "--data-dir", data_dir, "--encoder", "small")]
    for i, where in enumerate(places):
        started.append(start(EXE, *where, source, "--name", f"q{i}", "--data-dir", data_dir, "--encoder", "small"))
    loud, *quiet = [finish(process) for process in started]
    assert loud.returncode == 0, loud.stderr
    assert "embedding-index: keyword index:" in loud.stderr
    for i, (where, done) in enumerate(zip(places, quiet, strict=True)):
        assert done.returncode == 0 and done.stderr == "", (where, done.stderr)
        assert done.stdout.splitlines()[0].startswith(f"built 'q{i}': 20 rows x 50")
    listed = run(EXE, "list", "--data-dir", data_dir, "--quiet")
    assert listed.returncode == 0 and "q3\t20 x 50\tdocuments" in listed.stdout


def test_import_help_names_folders_and_the_documents_options() -> None:
    done = run(EXE, "import", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.replace("│", " ").split())
    for words in ("folder of text files", "--encoder", "--chunk-words", "--stopwords", "--stemmer", "--quiet"):
        assert words in text, words
    # every format, and what --index auto does past the HNSW budget
    for words in ("--format transformer", "gensim .model/.kv", "else HNSW if its build fits --build-budget, else IVF"):
        assert words in text, words


def test_make_import_runs_the_builder(tmp_path: Path, data_dir: Path, lee_docs: Lee) -> None:
    """``make import SRC=... NAME=... ENCODER=...`` from the repository, without activating the environment."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    source = lee_json(tmp_path / "lee.json", lee_docs)
    make = ["make", "-s", "-o", ".venv/.installed", "import"]
    importing = start(*make, f"SRC={source}", "NAME=made", f"DATA_DIR={data_dir}", "ENCODER=small", "ARGS=-q", cwd=REPO)
    missing = run(*make, f"SRC={source}", cwd=REPO)  # while the import runs: it builds nothing
    done = finish(importing)
    assert done.returncode == 0, done.stderr
    assert "built 'made': 20 rows x 50" in done.stdout and done.stderr == ""
    assert Table.load(data_dir / "made").manifest["source"]["path"] == str(source)
    assert missing.returncode != 0 and "make import needs SRC=file-or-folder and NAME=table-name" in missing.stderr


def test_commands_that_build_no_index_do_not_import_faiss(data_dir: Path) -> None:
    """``list``, ``inspect``, ``verify`` and ``remove`` run without FAISS (index.build.budget): the tests and the
    deployments start them as processes, each of which would pay for its import."""
    script = f"""
import sys
from index.build.cli import main
for command in (["list"], ["inspect", "small"], ["verify", "small"], ["remove", "small"]):
    sys.argv = ["embedding-index", "--quiet", *command, "--data-dir", {str(data_dir)!r}]
    try:
        main()
    except SystemExit as exit:
        assert not exit.code, (command, exit.code)
    assert "faiss" not in sys.modules, command
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "ok", done.stderr[-3000:]
    assert not (data_dir / "small").exists()


def test_compact_names_a_missing_or_word_table_and_leaves_no_lock(tmp_path: Path, data_dir: Path) -> None:
    shutil.copytree(data_dir / "small", tmp_path / "small")
    for name, why in (("nope", f"no table 'nope' in {tmp_path}"), ("small", "holds words, not documents")):
        result = run_cli("compact", name, "--data-dir", tmp_path)
        assert result.code == 1 and why in result.err, result.err
    assert not (tmp_path / ".writes").exists()
    result = run_cli("compact", "x", "--data-dir", tmp_path / "no" / "such")
    assert result.code == 1 and f"no table 'x' in {tmp_path / 'no' / 'such'}" in result.err, result.err


@pytest.mark.parametrize("command", ["inspect", "verify", "remove", "index", "compact", "sif", "eval"])
def test_a_missing_table_is_named_with_the_data_directory_looked_in(tmp_path: Path, command: str) -> None:
    """A --data-dir left out (./data of the working directory) or mistyped: the error says where it looked."""
    result = run_cli(command, "nope", "--data-dir", tmp_path)
    assert result.code == 1 and result.err.strip() == f"embedding-index: error: no table 'nope' in {tmp_path}"


@pytest.mark.parametrize(
    ("command", "refused"), [(("index", "--index", "flat"), ""), (("sif",), ""), (("compact",), "holds words")]
)
def test_a_version_a_killed_publish_parked_is_put_back_before_a_new_one(
    tmp_path: Path, data_dir: Path, command: tuple[str, ...], refused: str
) -> None:
    """A publish killed between its two renames (a file system that cannot exchange) leaves the table parked as
    .old-<name>-*: the next index, SIF build or compaction puts it back and goes on with it (a compaction of a
    word table: refused as such), as an import, verify and the server's start-up do, rather than find no table."""
    parked = tmp_path / "parked"
    shutil.copytree(data_dir / "small", parked / ".old-small-0123abcd")
    result = run_cli(command[0], "small", *command[1:], "--data-dir", parked)
    assert (result.code, refused in result.err) == (1 if refused else 0, True), result.err
    assert [p.name for p in parked.iterdir()] == ["small"]
    assert run_cli("verify", "small", "--data-dir", parked).code == 0


def test_min_recall_is_a_fraction(tmp_path: Path, data_dir: Path) -> None:
    """Refused before anything is read or built, not after a build no recall could pass."""
    result = run_cli("import", tmp_path / "any.txt", "--name", "t", "--data-dir", data_dir, "--min-recall", "1.5")
    assert result.code == 2 and "Invalid value for '--min-recall'" in result.err, result.err
    for given in ("1.5", "-1"):  # `index` too, before the table is verified and its index built
        result = run_cli("index", "small", "--data-dir", data_dir, "--min-recall", given)
        assert result.code == 2 and "Invalid value for '--min-recall'" in result.err, result.err


@pytest.mark.parametrize(
    ("command", "option", "allowed"),
    [
        (
            ("import", "any.txt", "--name", "t"),
            "--format",
            "auto, word2vec, word2vec-binary, glove, fasttext, npy, projector, hf, transformer, model2vec, gensim, "
            "documents",
        ),
        (("eval", "small"), "--method", "3cosadd, 3cosmul"),
    ],
)
@pytest.mark.parametrize("given", ["foo", "GLOVE", ""])
def test_a_value_out_of_an_options_choices_names_the_values_allowed(
    data_dir: Path, command: tuple[str, ...], option: str, allowed: str, given: str
) -> None:
    """One line in the builder's words, a usage error (exit status 2) as an option out of its range is; not the
    parser's "Value error, ..." in a box."""
    result = run_cli(*command, "--data-dir", data_dir, option, given)
    assert (result.code, result.out) == (2, ""), result
    assert result.err == f"embedding-index: error: {option} {given!r}: not one of {allowed}\n", result.err


def test_a_table_with_an_unreadable_manifest_is_listed_as_such_and_can_be_removed(
    tmp_path: Path, data_dir: Path
) -> None:
    shutil.copytree(data_dir / "small", tmp_path / "good")
    shutil.copytree(data_dir / "small", tmp_path / "bad")
    (tmp_path / "bad" / "manifest.json").write_text("{bad")
    listed = run_cli("list", "--data-dir", tmp_path)
    assert listed.code == 0 and listed.out.splitlines()[0].startswith("bad\tunreadable: "), listed.out
    assert listed.out.splitlines()[1].startswith("good\t20000 x 50"), listed.out
    assert run_cli("remove", "bad", "--data-dir", tmp_path).code == 0
    assert not (tmp_path / "bad").exists() and (tmp_path / "good").is_dir()
    missing = run_cli("remove", "bad", "--data-dir", tmp_path)
    assert missing.code == 1 and f"no table 'bad' in {tmp_path}" in missing.err


def test_list_names_a_sharded_tables_shards_and_their_index(tmp_path: Path, glove_raw: RawTable) -> None:
    """``list`` names the shards; ``remove`` of one shard (in the table's directory, as its servers' data directory)
    is refused: the table would be left without it."""
    source = write_words(glove_raw, tmp_path / "words.txt", rows=2_000)
    assert run_cli("import", source, "--name", "words", "--shards", "3", "--data-dir", tmp_path).code == 0
    listed = run_cli("list", "--data-dir", tmp_path)
    assert listed.code == 0 and listed.out == "words\t2002 x 50\tsharded\t3 shards, flat\n", listed.out
    shard = run_cli("remove", "shard-000", "--data-dir", tmp_path / "words")
    refused = f"embedding-index: error: {tmp_path / 'words'} is the sharded table 'words', 'shard-000' one of its"
    assert (shard.code, shard.err.startswith(refused)) == (1, True), shard.err
    assert run_cli("verify", "words", "--data-dir", tmp_path).out == "words: ok\n"


@pytest.mark.parametrize(
    ("kinds", "column"),
    [(["hnsw", "flat", "hnsw"], "3 shards, hnsw/flat"), (["flat", "flat", "flat"], "3 shards, flat"), ([], "3 shards")],
)
def test_list_names_each_kind_of_the_shards_indexes_once_in_their_order(kinds: list[str], column: str) -> None:
    """Shards of one table can hold indexes of different kinds (each chosen for its own rows)."""
    manifest = {"shards": {"count": 3, "index": [{"kind": kind} for kind in kinds]}}
    assert index_column(manifest) == column


def test_verify_says_that_it_replays_the_write_log(lee_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> None:
    """verify replays a documents table's write log as a server would (the whole log: long for a long one), and
    says so first."""
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    with writelog.appending(writelog.log_path(data, "lee")) as log:
        log.append(1, {"op": "delete", "ids": lee_docs.ids[:1]})
    with progress_lines() as stream:
        verify("lee", data_dir=data, quiet=False)
    assert stream.getvalue().splitlines() == ["embedding-index: replaying its write log lee.log as a server would ..."]


def test_verify_checks_the_newest_version_when_compactions_replace_the_log_it_replays(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two compactions during verify's replay empty the log file it reads: it ended there and said "ok" of a log
    it had not read whole. It says so (writelog.LogReplaced) and verifies the table again, its newest version."""
    from index.build.compact import compact

    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    with writelog.appending(path) as log:
        for seq in (1, 2, 3):
            log.append(seq, {"op": "delete", "ids": [lee_docs.ids[seq]]})
    monkeypatch.setattr(writelog, "READ_BYTES", 64)  # a piece a record: the replay is under way after the first
    real, reads = writelog.read_pieces, []

    def read_pieces(log_file: Path) -> Iterator[list[writelog.Record]]:
        reads.append(log_file)
        pieces = real(log_file)
        if len(reads) == 1:  # two compactions, a write between them, once the replay is under way
            yield next(pieces)
            assert compact(data, "lee")["written"] == 3
            with writelog.appending(path) as log:
                log.append(4, {"op": "delete", "ids": [lee_docs.ids[4]]})
            assert compact(data, "lee")["written"] == min(len(reads), 2)  # with the one written after the last
        yield from pieces

    monkeypatch.setattr(writelog, "read_pieces", read_pieces)
    with progress_lines() as stream:
        verify("lee", data_dir=data, quiet=False)
    lines = [line for line in stream.getvalue().splitlines() if "its write log" in line or "emptied" in line]
    assert len(reads) == 2 and lines[0] == lines[-1] == (
        "embedding-index: replaying its write log lee.log as a server would ..."
    )
    assert re.fullmatch(
        r"embedding-index: write log lee\.log was emptied while it was read \(at byte \d+ of \d+\): compactions "
        r"replaced it meanwhile; verifying the newest version \.\.\.",
        lines[1],
    ), lines
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 4


def lee_with_one_write(lee_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the Lee table in ``tmp_path/data`` whose write log holds one write (a delete): the data directory
    and the log's path."""
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    with writelog.appending(path) as log:
        log.append(1, {"op": "delete", "ids": [lee_docs.ids[1]]})
    return data, path


def test_verify_checks_the_newest_version_when_one_is_published_while_it_verifies(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's compaction publishing a version and cutting the log between verify's load of the version and its
    read of the log: the log then started after a gap over the older version, and verify failed a good table
    (``its write log lee.log would refuse it: its first record has sequence 3, ...``; 5 of 40 runs against a
    server compacting every 50 writes). It verifies the newest version again, as for a log emptied under it."""
    from index.build.compact import compact

    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    real, reads = writelog.read_pieces, []

    def read_pieces(log_file: Path) -> Iterator[list[writelog.Record]]:
        reads.append(log_file)
        if len(reads) == 1:  # the version loaded, a compaction published and a write made before the log is read
            with writelog.appending(path) as log:
                log.append(2, {"op": "delete", "ids": [lee_docs.ids[2]]})
            assert compact(data, "lee")["written"] == 2
            with writelog.appending(path) as log:
                log.append(3, {"op": "delete", "ids": [lee_docs.ids[3]]})
        yield from real(log_file)

    monkeypatch.setattr(writelog, "read_pieces", read_pieces)
    with progress_lines() as stream:
        verify("lee", data_dir=data, quiet=False)
    assert len(reads) == 2, reads
    assert "embedding-index: a newer version of 'lee' was published while it was verified; verifying it ..." in (
        stream.getvalue().splitlines()
    ), stream.getvalue()


def test_verify_gives_up_on_a_table_published_anew_every_time_it_verifies_it(
    lee_data_dir: Path,
    lee_docs: Lee,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A server compacting more often than verify reads the table: a newer version published in every round made
    verify verify again without end. It verifies at most ``artifact.ROUNDS`` versions, then says why it stopped."""
    from index.build.compact import compact

    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    path = writelog.log_path(data, "lee")
    real, reads = writelog.read_pieces, []

    def read_pieces(log_file: Path) -> Iterator[list[writelog.Record]]:
        reads.append(log_file)
        assert len(reads) <= 2 * artifact.ROUNDS, "verify never stops"
        seq = 2 * len(reads)  # a write folded into a version published, and one after it, before the log is read
        with writelog.appending(path) as log:
            log.append(seq - 1, {"op": "delete", "ids": [lee_docs.ids[seq - 1]]})
        assert compact(data, "lee")["written"] == min(len(reads), 2)  # with the one written after the last
        with writelog.appending(path) as log:
            log.append(seq, {"op": "delete", "ids": [lee_docs.ids[seq]]})
        yield from real(log_file)

    monkeypatch.setattr(writelog, "read_pieces", read_pieces)
    with progress_lines() as stream, pytest.raises(typer.Exit) as exited:
        verify("lee", data_dir=data, quiet=False)
    assert exited.value.exit_code == 1 and len(reads) == artifact.ROUNDS, reads
    said = "a newer version of 'lee' was published while it was verified; verifying it ..."
    assert stream.getvalue().count(said) == artifact.ROUNDS - 1, stream.getvalue()
    assert capsys.readouterr().err == (
        f"embedding-index: error: table 'lee': a newer version was published each of the {artifact.ROUNDS} times it "
        "was verified (a server compacting it more often than verify reads it); verify it again when it is compacted "
        "less often\n"
    )


def test_verify_refuses_a_table_its_load_refuses_as_the_load_says(lee_data_dir: Path, tmp_path: Path) -> None:
    """Files that match the manifest, a load that refuses them (a documents table whose manifest lost its
    'documents'), the version still the current one: verify says what the load says, as it did before it verified
    a newer version, not behind the table's directory once more (``/data/lee: table 'lee': ...``)."""
    data = tmp_path / "data"
    shutil.copytree(lee_data_dir / "lee", data / "lee")
    manifest = json.loads((data / "lee" / artifact.MANIFEST).read_text())
    del manifest["documents"]
    (data / "lee" / artifact.MANIFEST).write_text(json.dumps(manifest))
    done = run_cli("verify", "lee", "--data-dir", data)
    assert done.code == 1 and done.err == (
        "embedding-index: error: table 'lee': a documents table whose manifest has no 'documents'\n"
    ), done.err


# ---------------------------------------------------------------------- the import runs of docs/builder.md

DOC_ROWS = 5_000  # "5,000 GloVe rows in each format"


@pytest.fixture(scope="module")
def doc_folder(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Path:
    """The files docs/builder.md imports, from the first 5,000 GloVe rows, and its bad files as it describes them."""
    from gensim.models import KeyedVectors

    raw, folder = glove_raw, tmp_path_factory.mktemp("doc-imports")

    tokens, matrix = raw.tokens[:DOC_ROWS], np.asarray(raw.matrix[:DOC_ROWS], dtype=np.float32)
    kv = KeyedVectors(matrix.shape[1])
    kv.add_vectors(tokens, matrix)
    kv.save_word2vec_format(str(folder / "vectors.5k.txt.gz"), binary=False)
    kv.save_word2vec_format(str(folder / "vectors.5k.bin"), binary=True)
    kv.save(str(folder / "vectors.5k.kv"))
    np.save(folder / "matrix.npy", matrix)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
    rows = [" ".join(f"{x:.6g}" for x in row) for row in matrix.tolist()]
    (folder / "projector").mkdir()
    (folder / "projector" / "vectors.tsv").write_text("".join(row.replace(" ", "\t") + "\n" for row in rows))
    kinds = ["word" if token.isalnum() else "symbol" for token in tokens]
    metadata = "".join(f"{token}\t{kind}\n" for token, kind in zip(tokens, kinds, strict=True))
    (folder / "projector" / "metadata.tsv").write_text("word\tkind\n" + metadata)
    lines = [f"{token} {row}" for token, row in zip(tokens, rows, strict=True)]  # GloVe text, no header

    def glove_text(name: str, changed: dict[int, str], header: str = "") -> None:
        text = [changed.get(number, line) for number, line in enumerate(lines, 1)]
        (folder / name).write_text(header + "\n".join(text) + "\n")

    glove_text("short-row.txt", {1234: " ".join(lines[1233].split()[:48])})  # 47 values after the token
    glove_text("nan.txt", {42: f"{tokens[41]} nan {' '.join(lines[41].split()[2:])}"})  # row 42 is 'i'
    glove_text("wrong-header.txt", {}, header="6000 50\n")
    latin1 = [line.encode() for line in lines[:200]]
    latin1[99] = "caf\xe9".encode("latin-1") + latin1[99][latin1[99].index(b" ") :]
    (folder / "latin1.txt").write_bytes(b"\n".join(latin1) + b"\n")
    (folder / "ft.bin").write_bytes(bytes.fromhex("ba164f2f") + bytes(100))  # fastText's magic number
    return folder


def documented_runs(name: str) -> list[tuple[list[str], list[str]]]:
    """The commands of the block ``name`` of docs/builder.md, each with the lines the docs show it print."""
    runs: list[tuple[list[str], list[str]]] = []
    for line in example("docs/builder.md", name).splitlines():
        if line.startswith("$ "):
            runs.append((shlex.split(line.removeprefix("$ ")), []))
        else:
            runs[-1][1].append(line)
    return runs


@pytest.mark.parametrize("block", ["import-runs", "import-refusals", "encodings"])
def test_the_documented_imports_print_what_the_docs_show(
    block: str, doc_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/builder.md's imports of 5,000 GloVe rows in each format, its refusals and its file of latin-1, run as
    written (``--quiet``, as the docs leave the progress lines out) in a folder of the files it names: each prints the
    docs' lines, but for the seconds. The whole ``glove.6B.50d.txt`` is left out (171 MB)."""
    monkeypatch.chdir(doc_folder)  # the tables go to its data/, each block's under names of its own
    runs = [run for run in documented_runs(block) if run[0][2] != "glove.6B.50d.txt"]
    assert len(runs) >= 6, runs
    for command, shown in runs:
        assert command[:2] == ["embedding-index", "import"], command
        result = run_cli(*command[1:])
        assert result.code == (1 if shown[0].startswith("embedding-index: error: ") else 0), (command, result.err)
        assert untimed((result.out + result.err).splitlines()) == untimed(shown), command


@pytest.mark.parametrize("block", ["factory-strings", "defer-index", "option-order"])
def test_the_documented_index_runs_print_what_the_docs_show(
    block: str, doc_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/builder.md's indexes of its 5,000 GloVe rows (FAISS factory strings beside the specs of the same index,
    an index deferred and then built by hand) and its options refused in their order, run as written (``--quiet``)
    in a folder of the files they name, ``npy-5k`` imported first where the block indexes it without importing it:
    each prints the docs' lines, but for the seconds. The graphs are built the same way run after run: the tuned
    efSearch and recall are the docs' own."""
    for name in ("matrix.npy", "vocab.txt"):
        (tmp_path / name).symlink_to(doc_folder / name)
    (tmp_path / "all-MiniLM-L6-v2").symlink_to(minilm_dir())
    for name in ("wiki.5k.vec", "ft.vec"):  # fastText's text format: refused by the options before it is read
        (tmp_path / name).write_text("2 3\nof 0.1 0.2 0.3\nthe 0.3 0.2 0.1\n")
    (tmp_path / "notes.jsonl").write_text('{"id": "n1", "text": "heart beat"}\n')
    monkeypatch.chdir(tmp_path)
    runs = documented_runs(block)
    assert len(runs) >= 3, runs
    if runs[0][0][1] == "index":
        imported = run_cli("import", "matrix.npy", "--vocab", "vocab.txt", "--name", "npy-5k", "--data-dir", "data")
        assert imported.code == 0, imported.err
    for command, shown in runs:
        assert command[0] == "embedding-index" and command[1] in ("import", "index"), command
        result = run_cli(*command[1:])
        assert result.code == (1 if shown[0].startswith("embedding-index: error: ") else 0), (command, result.err)
        assert untimed((result.out + result.err).splitlines()) == untimed(shown), command


def test_compact_waits_for_a_compaction_another_process_is_making(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """``embedding-index compact`` run by hand while a server compacts the same table: it failed (``table 'lee' is
    being compacted by another process``, exit 1; 2 of 20 runs against a server compacting every 50 writes), and the
    server's own compaction failed alike when the hand's held the lock. It waits for the other compaction, then folds
    the writes made since."""
    from index.build.compact import locked

    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            compact_command("lee", data_dir=data, quiet=False)
        except BaseException as exc:  # said by the assertion below
            errors.append(exc)

    with progress_lines() as stream:
        with locked(data, "lee"):  # the other process's compaction
            thread = threading.Thread(target=run)
            thread.start()
            deadline = time.monotonic() + 30
            while "waiting" not in stream.getvalue() and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            with writelog.appending(path) as log:  # a write made while it waits
                log.append(2, {"op": "delete", "ids": [lee_docs.ids[2]]})
        thread.join(30)
    assert not errors, errors
    assert (
        f"embedding-index: table 'lee' is being compacted by another process (process {os.getpid()}); waiting for it, "
        "10m00s at most (--wait) ..."
    ) in stream.getvalue().splitlines(), stream.getvalue()
    assert artifact.read_manifest(data / "lee")["log_sequence"] == 2


def test_index_builds_the_newest_version_when_a_compaction_publishes_one_meanwhile(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``embedding-index index`` beside a server that compacts the table: a compaction publishing its version while
    the index was built made it fail (``table 'lee' was rebuilt while its index was being built; nothing
    replaced``). It builds the index of the newest version again, and keeps the writes the compaction folded in."""
    from index.build.compact import compact
    from index.build.index_choice import build_or_instead

    data, _ = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    builds: list[int] = []

    def build_once_compacted(vectors: np.ndarray, *args: object, **kwargs: object) -> object:
        builds.append(len(vectors))
        if len(builds) == 1:  # the server's compaction publishes its version while the index is built
            assert compact(data, "lee")["written"] == 1
        return build_or_instead(vectors, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer, "build_or_instead", build_once_compacted)
    with progress_lines() as stream:
        writer.index_table(data, "lee", index_spec="flat")
    assert builds == [len(lee_docs.ids), len(lee_docs.ids) - 1, len(lee_docs.ids) - 1]  # index, compaction, index
    assert "embedding-index: a newer version of 'lee' was published while its index was built; indexing it ..." in (
        stream.getvalue().splitlines()
    ), stream.getvalue()
    manifest = artifact.read_manifest(data / "lee")
    assert (manifest["rows"], manifest["log_sequence"], manifest["index"]["spec"]["kind"]) == (299, 1, "flat")
    assert artifact.verify(data / "lee").ok


def test_the_compaction_lock_and_its_default_wait_are_the_store_s(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """The compaction lock's file and its default wait are defined once, beside the write log in the store
    (``writelog.compaction_lock``, ``writelog.COMPACTION_WAIT_SECONDS``), where the server, which runs the command
    without importing the builder, reads the wait too (it stated 600 s a second time): the command's default is
    that one, and a lock held on that file is the one a compaction does not take."""
    import fcntl
    import inspect

    assert inspect.signature(compact_command).parameters["wait"].default == writelog.COMPACTION_WAIT_SECONDS
    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    lock = writelog.compaction_lock(data, "lee")
    assert lock == path.with_suffix(".compacting")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = run_cli("compact", "lee", "--data-dir", data, "--wait", "0")
    finally:
        os.close(fd)
    assert done.code == 1 and "another compaction of it holds its lock, and --wait 0" in done.err, done
    assert run_cli("compact", "lee", "--data-dir", data, "--wait", "0").code == 0


def test_compact_waits_for_another_compaction_at_most_its_wait(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction that holds the table's lock and never ends (a server's compaction child stopped, a hung disk):
    ``embedding-index compact`` waited for it without end and without a word after its first line, and a cron job
    hung with it. It waits ``--wait`` seconds at most, saying every few seconds what it waits for, then exits 1
    naming the table and the process that held the lock, nothing changed; once the lock is free it compacts."""
    from index import progress
    from index.build.compact import locked

    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    manifest, log = artifact.read_manifest(data / "lee"), path.read_bytes()
    monkeypatch.setattr(progress.CONFIG, "interval", 0.2)
    with locked(data, "lee"):  # the other process's compaction: this process, as the lock file names it
        started = time.monotonic()
        done = run_cli("compact", "lee", "--data-dir", data, "--wait", "1", quiet=False)
        waited = time.monotonic() - started
    holder, lines = f"process {os.getpid()}", done.err.splitlines()
    assert done.code == 1 and 1 <= waited < 10, (done, waited)
    assert lines[0] == (
        f"embedding-index: table 'lee' is being compacted by another process ({holder}); waiting for it, 1s at most "
        "(--wait) ..."
    ), lines
    assert (
        sum(
            line.startswith(f"embedding-index: still waiting for the other compaction of 'lee' ({holder}): ")
            for line in lines
        )
        >= 2
    )
    assert lines[-1] == (
        f"embedding-index: error: table 'lee' not compacted: another compaction of it ({holder}) held its lock for "
        "the 1s it was given; nothing was changed: compact it again once that one is done, or with a longer "
        "--wait"
    ), lines
    assert artifact.read_manifest(data / "lee") == manifest and path.read_bytes() == log
    assert not list(data.glob(".tmp-*"))
    done = run_cli("compact", "lee", "--data-dir", data, "--wait", "1")
    assert done.code == 0 and artifact.read_manifest(data / "lee")["log_sequence"] == 1, done


def test_compact_gives_up_on_a_table_published_anew_every_time_it_is_compacted(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``embedding-index index`` publishing a version of the same build while each compaction builds: the compaction
    began again from the newest version, without end. It compacts at most ``artifact.ROUNDS`` versions, then says why
    it stopped, nothing replaced and the log as it was."""
    from index.build import compact as compact_module

    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    build, builds = compact_module.build_table, []

    def index_meanwhile(*args: object, **kwargs: object) -> dict[str, object]:
        builds.append(1)
        assert len(builds) <= 2 * artifact.ROUNDS, "compact never stops"
        said = len(artifact.changed)
        writer.index_table(data, "lee", index_spec="flat")  # a version of the same build, published meanwhile
        del artifact.changed[said:]  # another process's publish: not the command's own
        return build(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(compact_module, "build_table", index_meanwhile)
    log = path.read_bytes()
    with progress_lines() as stream:
        done = run_cli("compact", "lee", "--data-dir", data, quiet=False)
    assert done.code == 1 and len(builds) == artifact.ROUNDS, (done, builds)
    said = "table 'lee' was published again while it was being compacted; nothing replaced; compacting the newest"
    assert stream.getvalue().count(said) == artifact.ROUNDS - 1, stream.getvalue()
    assert done.err == (
        f"embedding-index: error: table 'lee' not compacted: a newer version of it was published each of the "
        f"{artifact.ROUNDS} times it was compacted (embedding-index index or sif run meanwhile); nothing replaced: "
        "compact it again once they are done\n"
    ), done.err
    assert artifact.read_manifest(data / "lee").get("log_sequence", 0) == 0 and path.read_bytes() == log
    assert artifact.verify(data / "lee").ok and not list(data.glob(".tmp-*"))


def test_index_gives_up_on_a_table_compacted_anew_every_time_its_index_is_built(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server compacting the table more often than ``embedding-index index`` builds its index: a compaction
    published in every round made it build the newest version's index again, without end. It builds at most
    ``artifact.ROUNDS`` indexes, then says why it stopped, the newest version left as the compaction published it."""
    from index.build.compact import compact
    from index.build.index_choice import build_or_instead

    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    builds: list[int] = []
    compacting: list[int] = []

    def build_compacted(vectors: np.ndarray, *args: object, **kwargs: object) -> object:
        if not compacting:  # the index's build, not the compaction's
            builds.append(len(vectors))
            assert len(builds) <= 2 * artifact.ROUNDS, "index never stops"
            compacting.append(1)
            seq = len(builds) + 1  # a write after the one the log holds, then the server's compaction publishes
            with writelog.appending(path) as log:
                log.append(seq, {"op": "delete", "ids": [lee_docs.ids[seq]]})
            said = len(artifact.changed)
            compact(data, "lee")
            del artifact.changed[said:]  # another process's publish: not the command's own
            compacting.pop()
        return build_or_instead(vectors, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(writer, "build_or_instead", build_compacted)
    with progress_lines() as stream:
        done = run_cli("index", "lee", "--index", "flat", "--data-dir", data, quiet=False)
    said = "a newer version of 'lee' was published while its index was built; indexing it ..."
    assert done.code == 1 and stream.getvalue().count(said) == artifact.ROUNDS - 1, (done, stream.getvalue())
    assert done.err == (
        f"embedding-index: error: table 'lee': a newer version was published each of the {artifact.ROUNDS} times its "
        "index was built (a server compacting it more often than its index is built); nothing replaced: build it "
        "again when it is compacted less often\n"
    ), done.err
    manifest = artifact.read_manifest(data / "lee")
    assert manifest["log_sequence"] == artifact.ROUNDS + 1 and manifest["compacted_at"]  # the last compaction's
    assert len(builds) == artifact.ROUNDS and artifact.verify(data / "lee").ok and not list(data.glob(".tmp-*"))


@pytest.mark.parametrize("wait", ["inf", "1e400", "86401", "nan", "-1"])
def test_compact_refuses_a_wait_that_is_no_number_of_seconds(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, wait: str
) -> None:
    """``--wait inf`` (or 1e400) failed with a traceback when it said how long it would wait, the lock still held by
    the other: a wait of more than a day is refused before anything is waited for, as NaN and a negative one are,
    nothing changed."""
    from index.build.compact import locked

    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    log = path.read_bytes()
    outcome: list[Result] = []
    with locked(data, "lee"):  # another compaction, which never ends while this waits
        thread = threading.Thread(
            target=lambda: outcome.append(run_cli("compact", "lee", "--data-dir", data, "--wait", wait)), daemon=True
        )
        thread.start()
        thread.join(10)
    thread.join(30)
    assert outcome, f"compact --wait {wait} waited for the lock"
    done = outcome[0]
    assert done.code == 2 and "--wait" in done.err and "Traceback" not in done.err, done
    assert artifact.read_manifest(data / "lee").get("log_sequence", 0) == 0 and path.read_bytes() == log


def test_compact_names_the_process_that_holds_the_lock_when_it_says_so(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock taken over by another compaction while this one waits (the one it waited for done, a third one
    quicker to take it): this one read the holder's process id once, and gave up naming the process it began to
    wait for, ended since (its id free for another process). Each line names the process as the lock file names it
    then."""
    from index import progress
    from index.build.compact import locked

    data, _ = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    monkeypatch.setattr(progress.CONFIG, "interval", 0.2)
    lock_file = writelog.compaction_lock(data, "lee")
    with locked(data, "lee"):  # the first holder: this process, as the lock file names it
        taken_over = threading.Timer(0.3, lambda: lock_file.write_text("4242\n"))  # as the next holder writes it
        taken_over.start()
        done = run_cli("compact", "lee", "--data-dir", data, "--wait", "3", quiet=False)
        taken_over.join()
    lines = done.err.splitlines()
    assert done.code == 1 and f"(process {os.getpid()}); waiting for it" in lines[0], lines
    assert "still waiting for the other compaction of 'lee' (process 4242): " in done.err, lines
    assert lines[-1].startswith(
        "embedding-index: error: table 'lee' not compacted: another compaction of it (process 4242) held its lock"
    ), lines


@pytest.mark.parametrize(
    ("wait", "first", "given"),
    [
        ("0.4", "waiting for it, 0.4s at most (--wait) ...", "held its lock for the 0.4s it was given"),
        ("0", None, "holds its lock, and --wait 0 does not wait for it"),
    ],
)
def test_compact_says_a_wait_under_a_second_and_no_wait_as_such(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path, wait: str, first: str | None, given: str
) -> None:
    """``compact --wait 0.4`` said it waited "0s"; ``--wait 0`` said "waiting for it, 0s at most" and failed at
    once. A wait under a second is said as such, and ``--wait 0`` says it does not wait."""
    from index.build.compact import locked

    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    log = path.read_bytes()
    with locked(data, "lee"):
        done = run_cli("compact", "lee", "--data-dir", data, "--wait", wait, quiet=False)
    holder, lines = f"process {os.getpid()}", done.err.splitlines()
    assert done.code == 1, done
    if first is None:
        assert not any("waiting" in line for line in lines), lines
    else:
        assert lines[0].endswith(f"({holder}); {first}"), lines
    assert lines[-1] == (
        f"embedding-index: error: table 'lee' not compacted: another compaction of it ({holder}) {given}; nothing "
        "was changed: compact it again once that one is done, or with a longer --wait"
    ), lines
    assert path.read_bytes() == log


def test_verify_and_compact_refuse_a_log_holding_an_op_no_server_writes(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A write of an op this release does not know (a newer release's log) was skipped by the replay, and a
    compaction then cut the log, losing it. Both refuse the table naming the log, the record and the op (compact
    named neither the table nor its log, as it does for a log that does not follow the version); nothing is
    cut."""
    data, path = lee_with_one_write(lee_data_dir, lee_docs, tmp_path)
    with writelog.appending(path) as log:
        odd = log.append(2, {"op": "merge", "ids": [lee_docs.ids[2]]})
    before, manifest = path.read_bytes(), artifact.read_manifest(data / "lee")
    said = f"record at byte {odd.offset} (sequence 2) holds op 'merge', which this release does not write"
    checked = run_cli("verify", "lee", "--data-dir", data)
    assert checked.code == 1 and "its write log lee.log would refuse it: " + said in checked.err, checked
    done = run_cli("compact", "lee", "--data-dir", data)
    assert done.code == 1 and "table 'lee' not compacted (its write log): " + said in done.err, done
    assert path.read_bytes() == before and artifact.read_manifest(data / "lee") == manifest
