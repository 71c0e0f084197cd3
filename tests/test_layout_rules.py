"""The house rules of docs/architecture.md, checked on the source: which package may import which, and no
import circle inside the engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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


@pytest.mark.parametrize("forbidden", ["index.table", "service.routers", "service.registry", "service.execute"])
def test_http_plumbing_knows_no_tables_or_routes(forbidden: str) -> None:
    users = [module_name(p) for p in sources("service/http") if any(n.startswith(forbidden) for n in imports_of(p))]
    assert users == []


def test_no_import_circle_in_the_engine() -> None:
    """The modules of index/ import each other without a circle (type-only imports counted too). A package
    that lists its own modules (``index.sources`` and its readers) is not a circle: those edges are left out."""
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
