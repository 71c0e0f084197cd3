"""The ``$ curl`` examples of README.md, docs/api.md, docs/models.md, docs/encoders.md and docs/explorer.md, run as
written against a real ``embedding-serve`` over the default table and all-MiniLM-L6-v2's token table (``minilm``),
their shown output compared with the real one; those of docs/documents.md's folder of notes (``notes``, embedded
by the default table's SIF component) on a server of the two; those of docs/documents.md and README.md on
docs/documents.md's Lee table (``lee``), made by its script and imported as it shows, and on its ``pair-notes``
(notes embedded by the word table ``pair``); the writes of README.md and docs/documents.md on their Lee table
(tests/lee.py's fields, embedded by ``small`` at import), a new one for each block; README.md's documents table
``licences`` and its server's model list; docs/operations.md's rebuild and reload of ``words``, a whole session
from its files to its answers; and docs/operations.md's keys on a server of its three keys over the Lee table and
the 20,000 most frequent GloVe rows (``words``).

Each example is the command after ``$`` in a ``console`` block and the lines up to the next ``$``. The command runs
in bash with the docs' address replaced by the server's; an example naming any other table (the other documents
tables, the diagnostics' ``glove-6b-50d-flat`` and ``small``, ...) is documented against other data and left out, as
are those in :data:`UNCHECKED` (:data:`LEE_UNCHECKED` on the Lee table). An output line that is JSON is compared
parsed, each float to the digits shown (or to a millionth of its size, of 1 under 1), the fields of
:data:`VOLATILE` left out (and the floats of :data:`LAYOUTS`); any other line as text.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, chdir
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from index.build.sources import RawTable, glove_package
from index.build.writer import build_table
from tests.cli import Result, run_cli, untimed
from tests.conftest import REPO, link_table, small_raw
from tests.examples import console_blocks, example, printed, same_float
from tests.index.build.test_embed_documents import import_texts
from tests.lee import Lee
from tests.minilm import minilm_dir
from tests.service import real_server

GLOVE = glove_package.DEFAULT_NAME
SERVED = {GLOVE, "minilm", "glove6b"}  # glove6b: docs/api.md's example of an unknown table
ADMIN_KEY = "s3cret-admin-key"
BODY_LIMIT = 4 * 1024 * 1024  # EMBEDDING_MAX_BODY_BYTES's default
DOCS_BASE = re.compile(r"(?:http://)?(?:127\.0\.0\.1|localhost):8000")
TABLE = re.compile(
    r"/v1/(?:tables|models)/([^/?'\" ]+)|\"(?:model|first|second)\": \"([^\"]+)\"|[?&](?:first|second)=([^&'\" ]+)"
)
FUNCTION = re.compile(r"^\w+\(\) \{")  # a shell function the block's later commands call

VOLATILE = {
    "built_at": "the table's build time",
    "recall_at_10": "measured on the table's HNSW graph, which differs a little from build to build",
    "efSearch": "raised on the table's HNSW graph until its recall@10 reaches 0.99: 48 or 56 for the default table",
    "seconds": "a timing",
    "computed_at": "the map's computation time",
    "cached": "whether the map was computed before, by an earlier request or run",
    "created": "the model's table's build time (OpenAI's model list gives it in seconds)",
    "sif_sha256": (
        "the bytes of the SIF component, an eigenvector of float64 sums that another CPU's vector kernels add in "
        "their own order: its last bits are the machine's (the scores it gives are compared to the digits shown)"
    ),
}
UNCHECKED = {
    "/metrics": "its counts are those of the requests the server answered before",
    '"method": "umap", "seed"': (
        "a UMAP layout: umap-learn compiles with numba at its first call, for seconds "
        "(tests/service/test_projection_methods.py)"
    ),
    "/v1/models": "shown for a server of the default table and the documents table licences (licences_server)",
    "minilm/ids/19442": "docs/models.md shortens the vector it shows",
}
LAYOUTS = {  # examples whose floats are not compared: their fields, tokens and ids are
    '"method": "tsne"': (
        "a t-SNE layout: its iterations carry the last digits another CPU's vector kernels round differently into "
        "its coordinates' first ones (tests/service/test_projection_methods.py checks it against openTSNE's own)"
    ),
}
OPERATIONS_UNCHECKED = {  # docs/operations.md's other examples need other servers
    "X-API-Key: s3cret-admin-key": "reloads after the table was rebuilt (loaded), then rebuilt damaged (refused)",
    "token=python": "the rebuild of words, run whole by test_the_rebuild_and_reload_of_operations_md_answers_as_shown",
    "no EMBEDDING_API_KEY set": "a server started without the admin key",
    "/readyz": "a server serving a rebuild it refused (stale)",
}
LEE_UNCHECKED = {  # docs/documents.md's writes run on another Lee table: tests/lee.py's fields, --encoder small
    "s3cret-write-key": "a write (writes_server)",
    "budget for hospitals": "a search for a written document (writes_server)",
    "{rows, writes}": "the table's writes",
}
WRITE_KEY = "s3cret-write-key"


@dataclass(frozen=True)
class Example:
    line: int
    command: str
    shown: str


def examples(first: int, block: list[str]) -> list[Example]:
    """The block's commands (a line after ``$``, with the lines that continue it) and what each printed."""
    found: list[Example] = []
    i = 0
    while i < len(block):
        if not block[i].startswith("$ "):
            i += 1
            continue
        start, command = i, [block[i][2:]]
        while i + 1 < len(block) and (command[-1].endswith("\\") or block[i + 1].startswith(" ")):
            i += 1
            command.append(block[i])
        i += 1
        shown = []
        while i < len(block) and not block[i].startswith("$ "):
            shown.append(block[i])
            i += 1
        found.append(Example(first + start, "\n".join(command), "\n".join(shown).strip("\n")))
    return found


def checked(
    example: Example, served: set[str] = SERVED, unchecked: dict[str, str] = UNCHECKED, tableless: bool = True
) -> bool:
    """Whether ``example`` is run: a ``curl`` naming ``served`` tables only (or none, if ``tableless``)."""
    tables = {name for match in TABLE.findall(example.command) for name in match if name}
    return (
        example.command.startswith("curl")
        and tables <= served
        and (tableless or bool(tables))
        and not any(marker in example.command for marker in unchecked)
        and '"building":' not in example.shown  # recorded while the index was built in the background
    )


def on_licences_server(example: Example) -> bool:
    """Whether ``example`` is one of README.md's on its server of the default table and the documents table
    ``licences``: one naming the table, or the model list."""
    return "licences" in example.command or "/v1/models" in example.command


def a_write(example: Example) -> bool:
    """Whether ``example`` is one of the documented writes to the Lee table (or the search that finds one)."""
    return (WRITE_KEY in example.command or "budget for hospitals" in example.command) and "/lee/" in example.command


def runs(
    path: Path, served: set[str] = SERVED, unchecked: dict[str, str] = UNCHECKED, tableless: bool = True
) -> list[Any]:
    """One test per block with a checked example: its checked examples, after the shell functions it defines."""
    params = []
    for first, block in console_blocks(path):
        found = examples(first, block)
        if any(checked(example, served, unchecked, tableless) for example in found):
            kept = [e for e in found if checked(e, served, unchecked, tableless) or FUNCTION.match(e.command)]
            params.append(pytest.param(path, kept, id=f"{path.name}:{first}"))
    return params


README = runs(REPO / "README.md")
API = runs(REPO / "docs" / "api.md")
MODELS = runs(REPO / "docs" / "models.md") + runs(REPO / "docs" / "encoders.md")
NOTES = runs(REPO / "docs" / "documents.md", {GLOVE, "notes"}, UNCHECKED, False)  # its folder of notes
EXPLORER = runs(REPO / "docs" / "explorer.md")
OPERATIONS = runs(REPO / "docs" / "operations.md", {"words", "lee"}, OPERATIONS_UNCHECKED)
LICENCES = [  # README.md's examples on its server of the default table and the documents table licences
    pytest.param(REPO / "README.md", kept, id=f"README.md:{first}")
    for first, block in console_blocks(REPO / "README.md")
    if (kept := [e for e in examples(first, block) if e.command.startswith("curl") and on_licences_server(e)])
]
WRITES = [  # README.md's and docs/documents.md's writes and the search for what they wrote, in order
    pytest.param(REPO / doc, kept, id=f"{doc}:{first}")
    for doc in ("README.md", "docs/documents.md")
    for first, block in console_blocks(REPO / doc)
    if (kept := [e for e in examples(first, block) if e.command.startswith("curl") and a_write(e)])
]
COMMON_LICENSES = Path("/usr/share/common-licenses")  # Debian's
KEYS = {"EMBEDDING_READ_API_KEY": "s3cret-read-key", "EMBEDDING_WRITE_KEYS": "s3cret-write-key"}  # the page's
DOCUMENTS = [  # the examples that name the Lee table, or docs/documents.md's pair-notes
    param
    for doc in ("docs/documents.md", "README.md")
    for param in runs(REPO / doc, {"lee", "pair-notes"}, LEE_UNCHECKED, False)
]


def test_the_examples_are_found() -> None:
    """The parser finds the examples: a change to the docs' layout does not silently leave them unchecked. Every
    ``$ curl`` line of a page is the start of an example it read."""
    counts = [sum(checked(e) for param in params for e in param.values[1]) for params in (README, API)]
    assert counts[0] >= 20 and counts[1] >= 25, counts
    assert sum(len(param.values[1]) for param in MODELS) >= 8
    assert sum(len(param.values[1]) for param in EXPLORER) >= 6
    assert sum(len(param.values[1]) for param in NOTES) >= 4
    assert sum(len(param.values[1]) for param in DOCUMENTS) >= 25
    assert sum(len(param.values[1]) for param in OPERATIONS) >= 10
    assert sum(len(param.values[1]) for param in LICENCES) >= 3
    assert [len(param.values[1]) for param in WRITES] == [4, 5]
    for path in (REPO / "README.md", REPO / "docs" / "api.md"):
        lines = re.findall(r"^\s*\$ curl", path.read_text(encoding="utf-8"), re.M)
        read = [e for first, block in console_blocks(path) for e in examples(first, block) if e.command[:4] == "curl"]
        assert len(read) == len(lines), path.name


def close(shown: Any, real: Any, where: str = "", floats: bool = True) -> list[str]:
    """Where ``real`` differs from ``shown``: floats as :func:`tests.examples.same_float` compares them (not at all
    without ``floats``), ``VOLATILE`` fields not compared."""
    if isinstance(shown, float) or (isinstance(real, float) and isinstance(shown, int) and not isinstance(shown, bool)):
        ok = isinstance(real, (int, float)) and (not floats or same_float(shown, real))
        return [] if ok else [f"{where}: {shown!r} shown, {real!r} real"]
    if isinstance(shown, dict) and isinstance(real, dict):
        if shown.keys() != real.keys():
            return [f"{where}: fields {sorted(shown)} shown, {sorted(real)} real"]
        return [
            d for key in shown if key not in VOLATILE for d in close(shown[key], real[key], f"{where}.{key}", floats)
        ]
    if isinstance(shown, list) and isinstance(real, list) and len(shown) == len(real):
        pairs = enumerate(zip(shown, real, strict=True))
        return [d for i, (a, b) in pairs for d in close(a, b, f"{where}[{i}]", floats)]
    return [] if shown == real else [f"{where}: {shown!r} shown, {real!r} real"]


def differences(shown: str, real: str, floats: bool = True) -> list[str]:
    """How ``real`` output differs from ``shown``: line by line, a JSON line parsed (a status code after it kept),
    its floats compared only with ``floats``."""
    shown_lines, real_lines = shown.split("\n"), real.split("\n")
    if len(shown_lines) != len(real_lines):
        return [f"{len(shown_lines)} lines shown, {len(real_lines)} real:\n{real}"]
    found = []
    for n, (a, b) in enumerate(zip(shown_lines, real_lines, strict=True)):
        if a == b:
            continue
        try:
            (a_json, a_rest), (b_json, b_rest) = split_json(a), split_json(b)
        except ValueError:
            found.append(f"line {n + 1}: {a!r} shown, {b!r} real")
            continue
        found += close(a_json, b_json, f"line {n + 1}", floats)
        if a_rest != b_rest:
            found.append(f"line {n + 1}: {a_rest!r} after the JSON shown, {b_rest!r} real")
    return found


def split_json(line: str) -> tuple[Any, str]:
    """A line's JSON value and what follows it (curl's ``-w ' %{http_code}'``)."""
    value, end = json.JSONDecoder().raw_decode(line)
    return value, line[end:]


@pytest.fixture(scope="module")
def data(glove_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default table beside ``minilm``, imported as README.md imports it (its manifest's source as shown), with
    its SIF component (``embedding-index sif``), which docs/encoders.md's text embeddings need."""
    data = tmp_path_factory.mktemp("documented") / "data"
    data.mkdir()
    if not link_table(glove_data_dir / GLOVE, data):
        shutil.copytree(glove_data_dir / GLOVE, data / GLOVE)
    imported = run_cli(
        "import", minilm_dir(), "--format", "hf", "--name", "minilm", "--index", "flat", "--data-dir", data
    )
    assert imported.code == 0, imported.err
    sif = run_cli("sif", GLOVE, "--data-dir", data)  # a new version of the linked table: the shared one unchanged
    assert sif.code == 0, sif.err
    return data


@pytest.fixture(scope="module")
def server(data: Path) -> Iterator[str]:
    """A server of :func:`data`'s tables, with the admin key."""
    env = {"EMBEDDING_API_KEY": ADMIN_KEY}
    with real_server.running(data, data.parent / "serve.log", env=env) as running:
        yield running.base


@pytest.fixture(scope="module")
def notes_server(glove_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """docs/documents.md's folder of notes beside the default table: its script writes the files and its commands
    (in this process) compute the table's SIF component and import the notes with it, each printing the lines
    shown; then a server of the two."""
    folder = tmp_path_factory.mktemp("documented-notes")
    data = folder / "data"
    data.mkdir()
    if not link_table(glove_data_dir / GLOVE, data):
        shutil.copytree(glove_data_dir / GLOVE, data / GLOVE)
    with chdir(folder):  # the SIF component is a new version of the linked table: the shared one unchanged
        exec(compile(example("docs/documents.md", "notes-folder"), "docs/documents.md:notes-folder", "exec"), {})
        for e in examples(0, printed("docs/documents.md", "notes-folder").splitlines()):
            result = run_cli(*shlex.split(e.command)[1:])
            assert result.code == 0, (e.command, result.err)
            shown = [line for line in e.shown.splitlines() if not line.startswith("embedding-index: ")]
            assert untimed(result.out.splitlines()) == untimed(shown), e.command
    with real_server.running(data, folder / "serve.log") as running:
        yield running.base


@pytest.fixture(scope="module")
def licences_server(glove_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """README.md's server of the default table and the documents table ``licences``: Debian's Apache-2.0, BSD and
    GPL-2 licences in a folder, imported with ``--encoder glove-6b-50d`` as README.md says."""
    folder = tmp_path_factory.mktemp("documented-licences")
    (folder / "licences").mkdir()
    for name in ("Apache-2.0", "BSD", "GPL-2"):
        if not (COMMON_LICENSES / name).is_file():
            pytest.skip(f"no {COMMON_LICENSES / name} on this machine")
        shutil.copy(COMMON_LICENSES / name, folder / "licences" / name)
    data = folder / "data"
    data.mkdir()
    if not link_table(glove_data_dir / GLOVE, data):
        shutil.copytree(glove_data_dir / GLOVE, data / GLOVE)
    licences = folder / "licences"
    imported = run_cli(
        "import", licences, "--format", "documents", "--name", "licences", "--encoder", GLOVE, "--data-dir", data
    )
    assert imported.code == 0, imported.err
    with real_server.running(data, folder / "serve.log") as running:
        yield running.base


@pytest.fixture()
def writes_server(small_data_dir: Path, lee_docs: Lee, tmp_path: Path) -> Iterator[str]:
    """The Lee table of the documented writes: the Lee stories with tests/lee.py's fields and no vectors, imported
    with ``--encoder small``, served with the write key. A new one for each block of writes, which delete."""
    data = tmp_path / "data"
    data.mkdir()
    import_texts(data, small_data_dir, lee_docs, tmp_path / "lee-text.jsonl")
    with real_server.running(data, tmp_path / "serve.log", env={"EMBEDDING_WRITE_KEYS": WRITE_KEY}) as running:
        yield running.base


@pytest.fixture(scope="module")
def pair_notes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[Example, Result]]]:
    """docs/documents.md's ``pair`` table and ``notes.jsonl``, written by its script and imported by its commands (in
    this process, ``--quiet``) in a folder: the folder and each command with what it printed."""
    folder = tmp_path_factory.mktemp("documented-pair")
    with chdir(folder):
        exec(compile(example("docs/documents.md", "pair-notes"), "docs/documents.md:pair-notes", "exec"), {})
        commands = examples(0, printed("docs/documents.md", "pair-notes").splitlines())
        return folder, [(e, run_cli(*shlex.split(e.command)[1:])) for e in commands]


def test_the_pair_notes_imports_print_what_is_shown(pair_notes: tuple[Path, list[tuple[Example, Result]]]) -> None:
    """Each import prints the lines shown (those of its standard output, as the progress lines on its standard error
    are left out by ``--quiet``), but for the seconds."""
    assert [e.command.split()[2] for e, _ in pair_notes[1]] == ["pair.txt", "notes.jsonl"]
    for e, result in pair_notes[1]:
        assert result.code == 0, (e.command, result.err)
        shown = [line for line in e.shown.splitlines() if not line.startswith("embedding-index: ")]
        assert untimed(result.out.splitlines()) == untimed(shown), e.command


@pytest.fixture(scope="module")
def lee_data(pair_notes: tuple[Path, list[tuple[Example, Result]]]) -> Path:
    """docs/documents.md's Lee table: the JSON Lines its script writes, imported as it shows; beside its ``pair`` and
    ``pair-notes`` tables."""
    folder = pair_notes[0]
    script = example("docs/documents.md", "lee-jsonl")
    assert '"lee.jsonl"' in script  # written there rather than in the working directory, which other work shares
    script = script.replace('"lee.jsonl"', repr(str(folder / "lee.jsonl")))
    exec(compile(script, "docs/documents.md:lee-jsonl", "exec"), {})
    data = folder / "data"
    imported = run_cli("import", folder / "lee.jsonl", "--format", "documents", "--name", "lee", "--data-dir", data)
    assert imported.code == 0, imported.err
    return data


@pytest.fixture(scope="module")
def lee_server(lee_data: Path) -> Iterator[str]:
    with real_server.running(lee_data, lee_data.parent / "serve.log") as running:
        yield running.base


@pytest.fixture(scope="module")
def keys_server(tmp_path_factory: pytest.TempPathFactory, lee_data: Path, glove_raw: RawTable) -> Iterator[str]:
    """docs/operations.md's server of the admin key, a read key and a write key, over the Lee table and ``words``."""
    data = tmp_path_factory.mktemp("documented-keys") / "data"
    data.mkdir()
    if not link_table(lee_data / "lee", data):
        shutil.copytree(lee_data / "lee", data / "lee")
    build_table(small_raw(glove_raw), data_dir=data, name="words", source={"format": "test", "path": "glove"})
    with real_server.running(data, data.parent / "serve.log", env={"EMBEDDING_API_KEY": ADMIN_KEY, **KEYS}) as running:
        yield running.base


CURL_AND_JQ = pytest.mark.skipif(
    shutil.which("curl") is None or shutil.which("jq") is None, reason="the examples use curl and jq"
)


@CURL_AND_JQ
@pytest.mark.parametrize(("path", "kept"), README + API + MODELS + EXPLORER)
def test_the_shown_output_is_the_real_one(server: str, path: Path, kept: list[Example], tmp_path: Path) -> None:
    assert_shown_output(server, path, kept, tmp_path)


@CURL_AND_JQ
@pytest.mark.parametrize(("path", "kept"), NOTES)
def test_the_notes_shown_output_is_the_real_one(
    notes_server: str, path: Path, kept: list[Example], tmp_path: Path
) -> None:
    """docs/documents.md's searches of its folder of notes, on a server of the notes and the default table."""
    assert_shown_output(notes_server, path, kept, tmp_path)


@CURL_AND_JQ
@pytest.mark.parametrize(("path", "kept"), LICENCES)
def test_the_licences_shown_output_is_the_real_one(
    licences_server: str, path: Path, kept: list[Example], tmp_path: Path
) -> None:
    """The fields of README.md's documents table ``licences``, and the model list of its server (the documents
    table is no model)."""
    assert_shown_output(licences_server, path, kept, tmp_path)


@CURL_AND_JQ
@pytest.mark.parametrize(("path", "kept"), WRITES)
def test_the_writes_shown_output_is_the_real_one(
    writes_server: str, path: Path, kept: list[Example], tmp_path: Path
) -> None:
    """A document written, found by a search, deleted, and the documents of a year deleted by a filter (and, in
    docs/documents.md, a field the table does not have refused), each as shown."""
    assert_shown_output(writes_server, path, kept, tmp_path)


@CURL_AND_JQ
@pytest.mark.parametrize(("path", "kept"), DOCUMENTS + OPERATIONS)
def test_the_documents_tables_shown_output_is_the_real_one(
    request: pytest.FixtureRequest, path: Path, kept: list[Example], tmp_path: Path
) -> None:
    """On the Lee table; docs/operations.md's on the server of its keys."""
    server = request.getfixturevalue("keys_server" if path.name == "operations.md" else "lee_server")
    assert_shown_output(server, path, kept, tmp_path)


def assert_shown_output(server: str, path: Path, kept: list[Example], tmp_path: Path) -> None:
    """Run ``kept`` against ``server`` in one shell and compare what each printed with what ``path`` shows."""
    (tmp_path / "big.json").write_bytes(b" " * (BODY_LIMIT + 1))  # docs/api.md's body over the limit
    script = "".join(f"echo '<<<{n}>>>'\n{DOCS_BASE.sub(server, e.command)}\n" for n, e in enumerate(kept))
    env = {"PATH": "/usr/bin:/bin", "EMBEDDING_API_KEY": ADMIN_KEY}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    outputs = re.split(r"<<<\d+>>>\n", done.stdout)[1:]
    assert len(outputs) == len(kept), done.stderr
    failures = [
        f"{path.name}:{e.line} {e.command.splitlines()[0]}\n  " + "\n  ".join(found)
        for e, out in zip(kept, outputs, strict=True)
        if e.command.startswith("curl")
        and (found := differences(e.shown, out.rstrip("\n"), not any(m in e.command for m in LAYOUTS)))
    ]
    assert not failures, "\n".join(failures)


@CURL_AND_JQ
def test_the_rebuild_and_reload_of_operations_md_answers_as_shown(tmp_path: Path) -> None:
    """docs/operations.md's rebuild of ``words``, run as written in a folder: its script writes the two versions'
    files, its builder commands build them (in this process), its server is started as shown (the admin key, the
    watching off), and each ``$ curl`` prints what is shown, before the reload and after it."""
    doc = REPO / "docs" / "operations.md"
    with chdir(tmp_path):
        exec(compile(example("docs/operations.md", "words-v2"), "docs/operations.md:words-v2", "exec"), {})
    session = examples(0, printed("docs/operations.md", "words-v2").splitlines())
    assert [e.command.split()[0] for e in session].count("curl") == 3
    with ExitStack() as stack:
        for e in session:
            if e.command.startswith("embedding-index"):
                with chdir(tmp_path):
                    result = run_cli(*shlex.split(e.command)[1:])
                assert result.code == 0, (e.command, result.err)
                assert untimed(result.out.splitlines()) == untimed(e.shown.splitlines()), e.command
            elif e.command.endswith("embedding-serve --data-dir ./data &"):
                env = dict(setting.split("=") for setting in e.command.split()[:-4])
                server = stack.enter_context(real_server.running(tmp_path / "data", tmp_path / "serve.log", env=env))
            else:
                assert_shown_output(server.base, doc, [e], tmp_path)


def test_a_special_token_typed_in_a_text_is_named_as_shown(data: Path) -> None:
    """docs/documents.md's JSON Lines of a text that is only ``[CLS]``, written by its command beside the data
    directory and embedded by ``minilm``: the import is refused with the error shown."""
    write, imported = examples(0, example("docs/documents.md", "tokens-jsonl").splitlines())
    subprocess.run(["bash", "-c", write.command], cwd=data.parent, check=True, timeout=10)
    with chdir(data.parent):
        result = run_cli(*shlex.split(imported.command)[1:])
    assert result.code == 1 and not (data / "tokens").exists()
    assert result.err.splitlines()[-1] == imported.shown.splitlines()[-1], result.err
