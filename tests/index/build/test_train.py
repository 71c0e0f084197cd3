"""``embedding-index train`` on gensim's bundled Lee corpus: a verified table equal to gensim's own model.

The trainings of the Lee corpus start at collection, beside the tests before this module (``tests/early.py``);
the refused corpora's commands start together."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gensim.models import Word2Vec
from gensim.test.utils import datapath

from index import progress
from index.build import train
from index.build.train import TrainParams, train_word2vec
from index.engine.table import Table
from tests import REPO
from tests.cli import progress_lines, run_cli, run_index
from tests.early import Early

SMALL = ("--dim", "32", "--epochs", "2", "--workers", "1", "--min-count", "5", "--index", "flat")
LEE = Path(datapath("lee_background.cor"))


def train_argv(name: str, *extra: str) -> Callable[[Path], list[str]]:
    """``embedding-index train`` of the Lee corpus into table ``name`` of the job's directory."""
    train = [sys.executable, "-m", "index", "train", str(LEE), "--name", name, *SMALL, *extra]
    return lambda out: [*train, "--data-dir", str(out / "data")]


TRAININGS = {  # fixture (and table name) -> its training
    "trained": Early(__name__, "trained", train_argv("lee", "--seed", "7")),
    "again": Early(__name__, "again", train_argv("again", "--seed", "7")),
    "other": Early(__name__, "other", train_argv("other", "--seed", "8")),
    "cbow": Early(__name__, "cbow", train_argv("cbow", "--seed", "7", "--cbow", "--window", "3")),
}


def trained_table(fixture: str) -> Path:
    done = TRAININGS[fixture].result()
    name = "lee" if fixture == "trained" else fixture
    assert done.returncode == 0, done.stderr
    assert f"built {name!r}" in done.stdout
    return done.out / "data" / name


@pytest.fixture(scope="module")
def lee() -> Path:
    return LEE


@pytest.fixture(scope="module")
def trained() -> Path:
    return trained_table("trained")


@pytest.fixture
def again() -> Path:
    return trained_table("again")


@pytest.fixture
def other() -> Path:
    return trained_table("other")


@pytest.fixture
def cbow() -> Path:
    return trained_table("cbow")


def test_table_is_gensims_model(trained: Path, lee: Path) -> None:
    done = run_index("verify", "lee", "--data-dir", str(trained.parent), timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "lee: ok"
    sentences = [line.split() for line in lee.read_text(encoding="utf-8").splitlines()]
    model = Word2Vec(
        sentences, vector_size=32, window=5, min_count=5, epochs=2, workers=1, seed=7, sg=1, hs=0, negative=5
    )
    table = Table.load(trained)
    assert table.rows == len(model.wv) and table.dim == 32
    assert table.tokens[:] == model.wv.index_to_key  # gensim's frequency order
    np.testing.assert_allclose(table.vectors, model.wv.get_normed_vectors(), atol=1e-6)
    np.testing.assert_allclose(table.norms, np.linalg.norm(model.wv.vectors, axis=1), rtol=1e-6)
    manifest = json.loads((trained / "manifest.json").read_text())
    assert manifest["build"]["training"] == TrainParams(32, 5, 5, 2, 5, True, 7, 1).as_dict()
    assert manifest["corpus"]["lines"] == len(sentences)
    assert manifest["corpus"]["words"] == sum(len(s) for s in sentences)


def test_same_seed_same_table_other_seed_differs(trained: Path, again: Path, other: Path) -> None:
    # again: the same training with --seed 7; other: with --seed 8
    assert (again / "vectors.npy").read_bytes() == (trained / "vectors.npy").read_bytes()
    assert (again / "tokens.bin").read_bytes() == (trained / "tokens.bin").read_bytes()
    assert (other / "tokens.bin").read_bytes() == (trained / "tokens.bin").read_bytes()
    assert not np.allclose(np.load(other / "vectors.npy"), np.load(trained / "vectors.npy"), atol=1e-3)


def test_cbow(trained: Path, cbow: Path) -> None:  # trained with --seed 7 --cbow --window 3
    training = json.loads((cbow / "manifest.json").read_text())["build"]["training"]
    assert training["sg"] is False and training["method"] == "cbow" and training["window"] == 3
    table = Table.load(cbow)
    assert table.tokens[:] == Table.load(trained).tokens[:]
    assert not np.allclose(table.vectors, Table.load(trained).vectors, atol=1e-3)


def test_several_files_and_gzip(lee: Path, tmp_path: Path) -> None:
    import gzip

    lines = lee.read_text(encoding="utf-8").splitlines(keepends=True)
    first, second = tmp_path / "one.txt", tmp_path / "two.txt.gz"
    first.write_text("".join(lines[:150]), encoding="utf-8")
    second.write_bytes(gzip.compress("".join(lines[150:]).encode("utf-8")))
    params = TrainParams(dim=16, epochs=1, workers=1, seed=3)
    split = train_word2vec([first, second], params)
    whole = train_word2vec([lee], params)
    assert split.tokens == whole.tokens
    np.testing.assert_array_equal(split.matrix, whole.matrix)


def test_a_byte_order_mark_is_no_part_of_the_first_word(lee: Path, tmp_path: Path) -> None:
    """Files saved with a UTF-8 byte-order mark (as Windows editors save them), plain or gzipped, train the table
    their text without it does: no word '\ufeffHundreds' beside 'Hundreds'."""
    lines = lee.read_text(encoding="utf-8").splitlines(keepends=True)
    first, second = tmp_path / "one.txt", tmp_path / "two.txt.gz"
    first.write_text("\ufeff" + "".join(lines[:150]), encoding="utf-8")
    second.write_bytes(gzip.compress(("\ufeff" + "".join(lines[150:])).encode("utf-8")))
    params = TrainParams(dim=16, epochs=1, workers=1, seed=3, min_count=1)
    marked = train_word2vec([first, second], params)
    whole = train_word2vec([lee], params)
    assert not [token for token in marked.tokens if "\ufeff" in token]
    assert marked.tokens == whole.tokens
    np.testing.assert_array_equal(marked.matrix, whole.matrix)


def test_each_pass_over_the_corpus_shows_progress(lee: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the corpus (by the bytes of its files), counting its words and training (by words, epoch after epoch)
    each say how far they are: a large corpus takes minutes before training and each epoch as long."""
    monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at every step forward
    monkeypatch.setattr(train, "PROGRESS_LINES", 50)  # the corpus's 300 lines read in 6 steps
    with progress_lines() as shown:
        train_word2vec([lee], TrainParams(dim=8, epochs=2, workers=1))
    steps: dict[str, list[str]] = {}
    for line in shown.getvalue().splitlines():
        step, state = line.removeprefix("embedding-index: ").split(": ", 1)
        steps.setdefault(step, []).append(state)
    assert list(steps) == ["reading the corpus", "counting the words of the corpus", "training"]
    words = 59_890
    for step, total in zip(steps, ("0 MiB", f"{words:,}", f"{2 * words:,}"), strict=True):
        *partial, last = steps[step]
        done = [int(state.split("%")[0]) for state in partial]
        assert len(done) >= 2 and done == sorted(done) and done[-1] > 0, (step, partial)
        assert last.startswith(f"done ({total} of {total}"), (step, last)


BAD = [
    (None, "corpus file not found"),
    (b"", "corpus file has no words"),
    (b"  \n\t\n", "corpus file has no words"),
    (b"fine words here\nbad \xff byte\n", ":2: not UTF-8 text"),
    (b"each word once only\n", "no word occurs at least 5 times (--min-count)"),
]


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, Path, subprocess.Popen[str]]]:
    """(corpus, data directory, its ``embedding-index --quiet train``: the error alone, without the progress of the
    steps before it) of each bad corpus, the commands started together."""
    started = []
    for content, _ in BAD:
        work = tmp_path_factory.mktemp("bad")
        corpus = work / "corpus.txt"
        if content is not None:
            corpus.write_bytes(content)
        argv = [
            sys.executable,
            "-m",
            "index",
            "--quiet",
            "train",
            str(corpus),
            "--name",
            "bad",
            "--data-dir",
            str(work / "data"),
        ]
        process = subprocess.Popen([*argv, *SMALL], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started.append((corpus, work / "data", process))
    return started


@pytest.mark.parametrize(("content", "problem"), BAD)
def test_bad_corpus_is_refused(
    refusals: list[tuple[Path, Path, subprocess.Popen[str]]], content: bytes | None, problem: str
) -> None:
    corpus, data_dir, process = refusals[BAD.index((content, problem))]
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"embedding-index: error: {corpus}")
    assert problem in lines[0]
    assert not (data_dir / "bad").exists()


def _corrupt_gzip(data: bytes) -> bytes:
    packed = bytearray(gzip.compress(data))
    for i in range(1000, 1040):  # deflate data that zlib refuses
        packed[i] ^= 0x55
    return bytes(packed)


COMPRESSED = [
    ("corpus.txt.gz", _corrupt_gzip, ["cannot read: Error -3 while decompressing data"]),
    ("corpus.txt.bz2", bz2.compress, ["bzip2 compressed: decompress it first"]),
    ("corpus.txt.xz", lzma.compress, ["xz compressed: decompress it first"]),
]


@pytest.mark.parametrize(("name", "pack", "problem"), COMPRESSED, ids=[c[0] for c in COMPRESSED])
def test_compressed_corpus_is_refused_by_what_it_is(
    tmp_path: Path, name: str, pack: Callable[[bytes], bytes], problem: list[str]
) -> None:
    """A damaged gzip corpus or one compressed otherwise is one line naming the file, not a traceback."""
    corpus = tmp_path / name
    corpus.write_bytes(pack(LEE.read_bytes()[:200_000]))
    done = run_cli("train", corpus, "--name", "bad", "--data-dir", tmp_path / "data", *SMALL)
    assert done.code == 1, done.err
    assert done.err.startswith(f"embedding-index: error: {corpus}: ") and done.err.count("\n") == 1, done.err
    assert all(part in done.err for part in problem), done.err
    assert not (tmp_path / "data" / "bad").exists()


OUT_OF_RANGE = [  # each once a traceback after the corpus was read, or a training that never ended
    ("--window", "10000000000"),  # an OverflowError in gensim's thread, then gensim waiting for it for ever
    ("--negative", "2147483648"),  # the same
    ("--negative", "1000000000"),  # trains for ever
    ("--workers", "100000"),  # "can't start new thread"
    ("--seed", "-5"),  # NumPy refuses a negative seed
    ("--seed", "2147483648"),  # FAISS's k-means seed is a C int
]


@pytest.mark.parametrize(("option", "value"), OUT_OF_RANGE)
def test_train_options_out_of_range_are_refused_before_reading(tmp_path: Path, option: str, value: str) -> None:
    """An option gensim or FAISS cannot take is refused by the command line, at once, and nothing is written."""
    args = ["train", str(LEE), "--name", "bad", "--data-dir", str(tmp_path / "data"), *SMALL, option, value]
    done = run_index(*args, timeout=120)  # a child process: without the bound, some of these never end
    assert done.returncode == 2, done.stderr
    assert f"Invalid value for '{option}'" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "data" / "bad").exists()


def test_import_seed_out_of_range_is_refused(tmp_path: Path) -> None:
    """--seed is the index's sampling seed on import too: a negative one was NumPy's traceback after the read."""
    rows = tmp_path / "rows.txt"
    rows.write_text("".join(f"w{i} {i % 7} {i % 5} {i % 3}\n" for i in range(200)), encoding="utf-8")
    args = ["import", rows, "--name", "bad", "--data-dir", tmp_path / "data", "--index", "hnsw", "--seed", "-5"]
    done = run_cli(*args)
    assert done.code == 2 and "Invalid value for '--seed'" in done.err, done.err
    assert not (tmp_path / "data" / "bad").exists()


@pytest.mark.parametrize(
    ("command", "spec", "problem"),
    [
        ("train", "hnsw:M=0", "index spec 'hnsw:M=0': options must be positive"),
        ("train", "PQ7", "FAISS cannot build index 'PQ7'"),  # 7 codes do not divide --dim 32
        ("import", "ivf:nlist=abc", "index spec 'ivf:nlist=abc': 'nlist=abc' is not KEY=INTEGER"),
    ],
)
def test_a_malformed_index_spec_is_refused_before_reading_or_training(
    tmp_path: Path, command: str, spec: str, problem: str
) -> None:
    """The spec's form is checked first: it was refused only once the corpus was trained on (hours, for a big
    one) or the file read, its progress lines shown."""
    rows = tmp_path / "rows.txt"
    rows.write_text("".join(f"w{i} {i % 7} {i % 5} {i % 3}\n" for i in range(200)), encoding="utf-8")
    source = [str(LEE), *SMALL[:-2]] if command == "train" else [str(rows)]  # SMALL without its --index flat
    done = run_cli(command, *source, "--name", "bad", "--data-dir", tmp_path / "data", "--index", spec, quiet=False)
    assert done.code == 1, done.err
    assert done.err.startswith(f"embedding-index: error: {problem}") and done.err.count("\n") == 1, done.err
    assert not (tmp_path / "data" / "bad").exists()
