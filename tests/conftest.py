"""Shared fixtures: real tables built with the real builder.

- ``glove_data_dir``: the full default table (GloVe 6B 50d, all 400,000 rows, built by ``embedding-index build``
  with an HNSW graph tuned to recall@10 >= 0.99), cached across runs in ``.cache/test-data`` (or
  ``$EMBEDDING_TEST_CACHE``). A current copy of the table in ``data/`` (what ``make run`` built and indexed) is
  linked in instead of building it again. Otherwise it is built in a child process started as soon as the tests
  are collected, with the builder's defaults (``embedding-index build``), and the modules that use the table run
  last: the other tests run while its graph is built.
- ``gensim_google``: gensim's own evaluation of the whole Google analogy set on the same rows, as recorded with
  the tests for the installed versions (and checked against gensim on a sample by ``test_evaluate``), else
  computed the same way in the background; kept in the cache (``tests/gensim_reference.py``).
- ``gensim_answers``: gensim's answers to the questions of the other gensim comparisons
  (``tests.gensim_reference.answers``), recorded with the tests the same way, else computed in the background.
- ``small_data_dir``: the 20,000 most frequent GloVe rows as an exact (flat) table, built per session.
- ``minilm_data_dir``: MiniLM's token embeddings as the model-token table ``minilm``, built per session.
- ``glove_sif_dir``: every GloVe row as the exact (flat) table ``glove`` with its SIF component, built per session.
- ``m2v_parts``: MiniLM's rows as model2vec keeps them (``tests.index.engine.test_encode.model2vec_parts``).
- ``minilm_st_dir``: MiniLM imported as a transformer table by ``embedding-index import``, once per session, in a
  child process started at collection (``tests.minilm.TRANSFORMER``).

Every process the tests start shares one numba cache in the test cache (``NUMBA_CACHE_DIR``), filled in the
background at collection (``tests/numba_cache.py``; a test that runs a UMAP or t-SNE layout waits for it with
``numba_compiled``); commands a test declares with ``tests.early.Early`` start at collection too, and so do the
sessions that run the modules of ``tests.beside`` (the one that may read the default table once it is built).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController
from tokenizers import Tokenizer

from index.build.index_choice import IndexSpec
from index.build.sources import RawTable, glove_package, read_source
from index.build.writer import build_table
from index.engine.table import Table
from index.errors import ArtifactError, UnknownTable
from index.store import artifact
from tests import REPO, beside, gensim_reference, numba_cache
from tests.early import JOBS, hurry
from tests.lee import Lee, glove_rows, jsonl_records, lee_stories, write_jsonl
from tests.minilm import MINILM, minilm_dir, transformer_data_dir, whole_text_tokenizer

SMALL_ROWS = 20_000


@pytest.fixture(scope="session")
def glove_raw() -> RawTable:
    """The package's rows as read, shared by the whole session: read-only, so that no test changes them for the
    tests after it (``tests.lee.glove_rows``)."""
    return glove_rows()


GLOVE_FIXTURES = {"glove_data_dir"}  # what needs the cached default table (other fixtures reach it through these)


def cache_dir() -> Path:
    return Path(os.environ.get("EMBEDDING_TEST_CACHE", REPO / ".cache" / "test-data"))


os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir() / "numba"))  # before numba loads, here and in children


def one_blas_thread() -> None:
    """One thread for numpy's and scipy's BLAS in the tests' own processes, as ``embedding-serve`` gives each
    worker: with two, every product waits for a second thread that the busy other core runs late, and both spin
    meanwhile (docs/first-run.md says what it cost). FAISS's BLAS runs on OpenMP's threads, which stay as they are
    (the builder's use of them is tested). Libraries loaded since the last call included; children keep their own
    settings."""
    ThreadpoolController().select(threading_layer="pthreads").limit(limits=1)


one_blas_thread()  # numpy's; again once the test modules are imported (scipy's)


def is_current(directory: Path) -> bool:
    """A complete table with the builder's default graph (what ``make run`` builds); not a deferred index, not an
    older builder's."""
    try:
        manifest = Table.load(directory, checksums=False).manifest
    except (ArtifactError, UnknownTable):
        return False
    spec, default = manifest["index"].get("spec", {}), IndexSpec(kind="hnsw")
    graph = (spec.get("kind"), spec.get("M"), spec.get("efConstruction"))
    return not manifest["index"].get("deferred") and graph == ("hnsw", default.m, default.ef_construction)


def link_table(source: Path, data_dir: Path) -> bool:
    """Hard-link a built table into ``data_dir`` (published like a build: staged, then renamed)."""
    try:
        with artifact.staging(data_dir, source.name, force=True) as tmp:
            for child in source.iterdir():
                os.link(child, tmp / child.name)
    except OSError:  # another file system: build instead
        return False
    return True


# Background work runs at a lower priority: the tests' own process and its servers, which the run waits for,
# come first; the background takes the rest of the machine, until a test waits for it (Background.wait).
BELOW = ["nice", "-n", "10"] if shutil.which("nice") else []


class Background:
    """Work that later tests read, done by a child process started as soon as the tests are collected.

    ``ready()`` says whether its output is there and current; ``prepare()`` may provide it without a child
    (True: done). The child inherits the job's lock file and holds it until it exits, so that another test
    process on the same cache (a second ``pytest``) waits for it instead of starting its own."""

    def __init__(
        self,
        name: str,
        command: list[str],
        ready: Callable[[], bool],
        prepare: Callable[[], bool] = lambda: False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name, self.command, self.ready, self.prepare = name, command, ready, prepare
        self.env = None if env is None else {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def lock(self) -> Path:
        return cache_dir() / f"{self.name}.lock"

    @property
    def log(self) -> Path:
        return cache_dir() / f"{self.name}.log"

    def start(self) -> None:
        if self.process is not None or self.ready():
            return
        cache_dir().mkdir(parents=True, exist_ok=True)
        with self.lock.open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another worker started it
                return
            if self.ready() or self.prepare():  # done meanwhile, or without a child
                return
            with self.log.open("wb") as log:
                self.process = subprocess.Popen(
                    [*BELOW, *self.command],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO,
                    env=self.env,
                    pass_fds=(lock.fileno(),),
                )

    def done(self) -> bool:
        """Wait for the work; whether its output is there."""
        self.start()
        if self.process is not None:
            self.process.wait()
        with self.lock.open("a") as lock:  # a child another worker started: until it is done
            fcntl.flock(lock, fcntl.LOCK_EX)
        return self.ready()

    def wait(self) -> None:
        """A test waits for the work: its child runs at the tests' own priority from now on (``tests.early.hurry``)."""
        self.start()
        if self.process is not None and self.process.poll() is None:
            hurry(self.process.pid)
        if not self.done():
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            pytest.fail(f"{self.name} for the tests failed:\n{tail}")

    def stop(self) -> None:
        """At the end of the session: a child still running (the tests stopped early) is not left behind."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


def glove_table() -> Path:
    return cache_dir() / glove_package.DEFAULT_NAME


def link_made_table() -> bool:
    """The table ``make run`` built and indexed in data/, when it is current: linked instead of built."""
    made = REPO / "data" / glove_package.DEFAULT_NAME
    return is_current(made) and link_table(made, cache_dir())


def gensim_google_file() -> Path:
    return cache_dir() / "gensim-google.json"


GLOVE_BUILD = Background(
    "build",
    [sys.executable, "-m", "index", "build", "--data-dir", str(cache_dir()), "--force"],
    ready=lambda: is_current(glove_table()),
    prepare=link_made_table,
)
GENSIM_GOOGLE = Background(
    "gensim-google",
    [sys.executable, "-m", "tests.gensim_reference", str(gensim_google_file())],
    ready=lambda: gensim_reference.is_current(gensim_google_file()),
    prepare=lambda: gensim_reference.install_recorded(gensim_google_file()),
    env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},  # one core: the tests have the other
)
GENSIM_ANSWERS = Background(
    "gensim-answers",
    [sys.executable, "-m", "tests.gensim_reference", "--answers", str(cache_dir() / "gensim-answers.json")],
    ready=lambda: gensim_reference.answers_current(cache_dir() / "gensim-answers.json"),
    prepare=lambda: gensim_reference.install_recorded(
        cache_dir() / "gensim-answers.json", gensim_reference.ANSWERS_RECORDED, gensim_reference.answers_current
    ),
    env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
)
BACKGROUND = {  # fixture -> its background job
    "glove_data_dir": GLOVE_BUILD,
    "gensim_google": GENSIM_GOOGLE,
    "gensim_answers": GENSIM_ANSWERS,
}
NUMBA_STAMP = cache_dir() / "numba.json"
NUMBA = Background(
    "numba",
    [sys.executable, "-m", "tests.numba_cache", str(NUMBA_STAMP)],
    ready=lambda: numba_cache.is_current(NUMBA_STAMP),
)


BESIDE: list[beside.Wait] = []  # the session's last tests, one a session beside when it runs part of the run there


def needs_glove(item: pytest.Item) -> bool:
    return bool(GLOVE_FIXTURES & set(getattr(item, "fixturenames", ())))


def waits_for_numba(item: pytest.Item) -> bool:
    """Whether ``item`` waits for the background step that compiles numba's code (``numba_compiled``)."""
    return "numba_compiled" in getattr(item, "fixturenames", ())


def reads_early(item: pytest.Item) -> bool:
    """Whether ``item`` reads an early command's result (``tests.early``)."""
    module = getattr(getattr(item, "module", None), "__name__", None)
    fixtures = set(getattr(item, "fixturenames", ()))
    return any(job.fixture in fixtures and (job.module == module or job.shared) for job in JOBS)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected: only what is selected goes to the sessions beside
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that use the default table run after the others, which run while it is built; in each part,
    the modules that read an early command's result (``tests.early``) or numba's compiled code (``numba_compiled``)
    run last, while it is made. The modules of ``tests.beside`` run in sessions beside this one, whose results are
    the last tests."""
    late = {item.module for item in items if needs_glove(item)}  # type: ignore[attr-defined]
    compiled = {item.module for item in items if waits_for_numba(item)}  # type: ignore[attr-defined]
    reads = {job.module for job in JOBS}

    def part(item: pytest.Item) -> tuple[bool, bool]:
        module = getattr(item, "module", None)
        return module in late, module in compiled or getattr(module, "__name__", None) in reads

    items.sort(key=part)  # stable: the order within each part stays
    kept, others = beside.split(items)
    if not others or config.option.collectonly:
        return
    waits: list[beside.Wait] = []
    for where in beside.SESSIONS:
        moved = set(others.get(where, ()))
        if not moved:
            continue
        for item in items:
            if item.nodeid in moved and (reads_early(item) or (needs_glove(item) and not where.reads_table)):
                raise pytest.UsageError(f"{item.nodeid} reads the default table or an early command: not beside")
        name, job = f"{where.name} session", beside.session_job(where, others[where])
        table = any(needs_glove(item) for item in items if item.nodeid in moved)
        waits.append(
            beside.Wait.from_parent(
                session,
                name=name,
                nodeid=f"tests/beside.py::{name}",
                part=where,
                job=job,
                count=len(moved),
                table=table,
            )
        )
    BESIDE.extend(waits)
    items[:] = [*kept, *waits]


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:  # nothing will run: nothing to prepare
        return
    one_blas_thread()
    used = {fixture for item in session.items for fixture in getattr(item, "fixturenames", ())}
    for fixture, job in BACKGROUND.items():
        if fixture in used:
            job.start()
    if importlib.util.find_spec("umap") is not None and session.items:
        NUMBA.start()
    readers = {
        (getattr(getattr(item, "module", None), "__name__", None), fixture)
        for item in session.items
        for fixture in getattr(item, "fixturenames", ())
    }
    for early in JOBS:
        if (early.module, early.fixture) in readers or (early.shared and early.fixture in used):
            early.start(after=GLOVE_BUILD.done if early.needs_glove else None)
    for wait in BESIDE:  # tests.beside: made after -k and -m, so they are among the items
        wait.job.start(after=GLOVE_BUILD.done if wait.table else None)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The summary line of each session beside (``tests.beside``), before the suite's own."""
    for wait in BESIDE:
        if wait.done is not None:
            terminalreporter.write_line(f"{wait.name} (tests/beside.py): {beside.summary(wait.done)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for job in [*BACKGROUND.values(), NUMBA]:
        job.stop()
    for early in JOBS:
        early.stop()


@pytest.fixture(scope="session")
def glove_data_dir() -> Path:
    GLOVE_BUILD.wait()
    return cache_dir()


@pytest.fixture(scope="session")
def numba_compiled() -> None:
    """pynndescent's and umap-learn's code compiled in numba's cache (``tests.numba_cache``): a test that runs a
    UMAP or t-SNE layout (openTSNE imports pynndescent), in process or in its servers, waits for the background
    step instead of compiling the same code beside it (tens of seconds of CPU in a fresh clone)."""
    NUMBA.wait()


@pytest.fixture(scope="session")
def gensim_google() -> list[dict[str, Any]]:
    """gensim's evaluate_word_analogies of the whole Google set on the GloVe rows (``tests.gensim_reference``)."""
    GENSIM_GOOGLE.wait()
    return gensim_reference.read(gensim_google_file())


@pytest.fixture(scope="session")
def gensim_answers() -> dict[str, Any]:
    """gensim's answers to the parity sample and the trimmed Google sets (``tests.gensim_reference.answers``)."""
    GENSIM_ANSWERS.wait()
    return gensim_reference.read_answers(cache_dir() / "gensim-answers.json")


@pytest.fixture(scope="session")
def minilm_tokenizer() -> Tokenizer:
    return whole_text_tokenizer()


@pytest.fixture(scope="session")
def glove(glove_data_dir: Path) -> Table:
    return Table.load(glove_data_dir / glove_package.DEFAULT_NAME)


def small_raw(raw: RawTable, rows: int = SMALL_ROWS) -> RawTable:
    return RawTable(tokens=raw.tokens[:rows], matrix=raw.matrix[:rows].copy())


@pytest.fixture(scope="session")
def small_data_dir(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Path:
    data_dir = tmp_path_factory.mktemp("small-data")
    build_table(small_raw(glove_raw), data_dir=data_dir, name="small", source={"format": "test", "path": "glove"})
    return data_dir


@pytest.fixture(scope="session")
def lee_docs(glove_raw: RawTable) -> Lee:
    return lee_stories()  # the Lee corpus over ``glove_raw``, read-only: shared by the session, as the rows are


@pytest.fixture(scope="session")
def lee_data_dir(tmp_path_factory: pytest.TempPathFactory, lee_docs: Lee) -> Path:
    """A data directory holding ``lee``: the Lee background corpus imported as a documents table (JSON Lines)."""
    data_dir = tmp_path_factory.mktemp("lee-data")
    path = write_jsonl(data_dir.parent / "lee.jsonl", jsonl_records(lee_docs))
    raw, fmt = read_source(path, "documents")
    build_table(raw, data_dir=data_dir, name="lee", source={"format": fmt, "path": path.name})
    return data_dir


@pytest.fixture(scope="session")
def minilm_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding ``minilm``, MiniLM's token embeddings as a model-token table: read-only, a module
    that serves it beside other tables or changes it copies it."""
    from index.build.sources import ReadOptions, huggingface

    data_dir = tmp_path_factory.mktemp("minilm-data")
    raw = huggingface.read(minilm_dir(), ReadOptions())
    build_table(raw, data_dir=data_dir, name=MINILM, source={"format": "huggingface", "path": "all-MiniLM-L6-v2"})
    return data_dir


@pytest.fixture(scope="session")
def glove_sif_dir(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Path:
    """A data directory holding ``glove``: every GloVe row as an exact (flat) table, with its SIF component from
    gensim's Lee background corpus (the default). Read-only: the modules that embed text with it copy it."""
    from index.build.sif import sif_table

    data_dir = tmp_path_factory.mktemp("glove-sif")
    raw = RawTable(tokens=list(glove_raw.tokens), matrix=glove_raw.matrix.copy())
    build_table(raw, data_dir=data_dir, name="glove", source={"format": "glove-package"}, index_spec="flat")
    sif_table(data_dir, "glove")
    return data_dir


@pytest.fixture(scope="session")
def m2v_parts() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MiniLM's rows as model2vec keeps them, (embeddings, weights, mapping): read-only, shared by the modules that
    write model2vec models (``tests.index.engine.test_encode.model2vec_parts``)."""
    from tests.index.engine.test_encode import minilm_rows, model2vec_parts

    parts = model2vec_parts(minilm_rows())
    for part in parts:
        part.setflags(write=False)
    return parts


@pytest.fixture(scope="session")
def minilm_st_dir() -> Path:
    """A data directory holding MiniLM imported as the transformer table ``st`` by the command, started at
    collection (``tests.minilm.TRANSFORMER``): its tests, the speed benchmark's, the explorer's and the API's read
    the same one (read-only: a module that serves it beside other tables copies it)."""
    return transformer_data_dir()


@pytest.fixture(scope="session")
def small(small_data_dir: Path) -> Table:
    return Table.load(small_data_dir / "small")
