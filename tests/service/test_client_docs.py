"""The Python client's examples of docs/api.md (and README.md's async one), run as written (only the server's address
differs) against a real ``embedding-serve`` over the default table and MiniLM's token table: each value a comment
shows is the value of its line, whole or up to its ``...``, and what the example prints is what its comment shows."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from index.build.sources import glove_package
from service_client import ApiError, Client
from tests.conftest import link_table
from tests.examples import example, same_float
from tests.minilm import MINILM
from tests.service import real_server

DOC = "docs/api.md"
DOCS_BASE = "http://localhost:8000"
FLOAT = re.compile(r"(-?[0-9]+\.[0-9]+(?:e[-+]?[0-9]+)?)")  # split around it, the floats at odd places
PAGE = {"Client": Client, "ApiError": ApiError}  # what the page's first example imports, for the others


@pytest.fixture(scope="module")
def base(glove_data_dir: Path, minilm_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("client-docs") / "data"
    data.mkdir()
    for table in (glove_data_dir / glove_package.DEFAULT_NAME, minilm_data_dir / MINILM):
        assert link_table(table, data)
    env = {"EMBEDDING_VERIFY_CHECKSUMS": "false"}  # the session's own tables, verified when they were built
    with real_server.running(data, data.parent / "serve.log", env=env) as server:
        yield server.base


def shown_values(code: str) -> dict[int, str]:
    """The comment showing a line's value, by the line the statement ends on: after its code on that line, or alone
    on the next line."""
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            alone = token.line.strip().startswith("#")
            comments[token.start[0] - 1 if alone else token.start[0]] = token.string.lstrip("#").strip()
    return comments


def is_print(node: ast.AST) -> bool:
    call = node.value if isinstance(node, ast.Expr) else None
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print"


class Recorder(ast.NodeTransformer):
    """Each expression statement's value recorded by the line it ends on (``__seen``); calls of print left as
    they are."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if is_print(node):
            return node
        seen = ast.Call(ast.Name("__seen", ast.Load()), [ast.Constant(node.end_lineno), node.value], [])
        return ast.copy_location(ast.Expr(seen), node)


class Run:
    """An example of the docs run as written against ``base``: its values by line, what it printed by line, its
    comments by line, and the ``ApiError`` it raised, if any."""

    def __init__(self, name: str, base: str, doc: str = DOC) -> None:
        code = example(doc, name)
        assert DOCS_BASE in code or "http://127.0.0.1:8000" in code
        code = code.replace(DOCS_BASE, base).replace("http://127.0.0.1:8000", base)
        tree = ast.parse(code)
        prints = sorted(node.end_lineno or 0 for node in ast.walk(tree) if is_print(node))
        self.values: dict[int, Any] = {}
        self.error: ApiError | None = None
        out = io.StringIO()
        with redirect_stdout(out):
            try:
                exec(compile(ast.fix_missing_locations(Recorder().visit(tree)), f"{doc}:{name}", "exec"),
                     {"__seen": self.values.__setitem__, **PAGE})  # fmt: skip
            except ApiError as error:
                self.error = error
        self.printed = dict(zip(prints, out.getvalue().splitlines(), strict=True))
        self.comments = shown_values(code)


def agrees(value: str, comment: str) -> bool | None:
    """Whether a value's repr (or a printed line) is what the comment shows: up to its ``...``, or whole for a
    comment that is a value (its floats as :func:`tests.examples.same_float` compares them); None for a comment in
    words."""
    if "..." in comment:
        return value.startswith(comment.split("...")[0])
    try:
        shown = ast.literal_eval(comment)
    except (ValueError, SyntaxError):
        return same_text(comment, value) if comment[:1] in "[({'\"" else None  # a value with an ApiError in it
    if value == repr(shown):
        return True
    try:
        return alike(shown, ast.literal_eval(value))
    except (ValueError, SyntaxError):  # a value with an ApiError in it
        return False


def same_text(shown: str, real: str) -> bool:
    """Whether ``real`` reads as ``shown``: the same text between their floats, and each float the one shown."""
    shown_parts, real_parts = FLOAT.split(shown), FLOAT.split(real)
    return (
        shown_parts[::2] == real_parts[::2]
        and len(shown_parts) == len(real_parts)
        and all(same_float(float(a), float(b)) for a, b in zip(shown_parts[1::2], real_parts[1::2], strict=True))
    )


def alike(shown: Any, real: Any) -> bool:
    if type(shown) is not type(real):
        return False
    if isinstance(shown, float):
        return same_float(shown, real)
    if isinstance(shown, (list, tuple)):
        return len(shown) == len(real) and all(alike(a, b) for a, b in zip(shown, real, strict=False))
    if isinstance(shown, dict):
        return shown.keys() == real.keys() and all(alike(shown[key], real[key]) for key in shown)
    return bool(shown == real)


@pytest.mark.parametrize(
    ("doc", "name", "least"),
    [(DOC, "client", 6), (DOC, "client-batches", 6), (DOC, "client-async", 6), ("README.md", "client-async-readme", 3)],
)
def test_the_documented_client_examples_give_the_values_their_comments_show(
    base: str, doc: str, name: str, least: int
) -> None:
    run = Run(name, base, doc)
    assert run.error is None, run.error
    shown = [(repr(value), run.comments[line]) for line, value in run.values.items() if line in run.comments]
    shown += [(text, run.comments[line]) for line, text in run.printed.items()]
    checked = [(value, comment) for value, comment in shown if agrees(value, comment) is not None]
    assert all(agrees(value, comment) for value, comment in checked), checked
    assert len(checked) >= least, shown


def test_the_documented_client_without_a_server_says_so() -> None:
    nothing = f"http://127.0.0.1:{real_server.free_port()}"
    run = Run("client-unreachable", nothing)
    assert run.error is not None and run.error.code == "connection_error"
    (ready,) = run.values.values()  # the line before the one that raised
    assert agrees(repr(ready), run.comments[min(run.values)])
    shown = [text for text in run.comments.values() if text.startswith("ApiError: ")]
    assert shown == [f"ApiError: {run.error}"], shown


def test_a_shown_value_with_an_error_in_it_reads_its_floats_as_floats() -> None:
    shown = "[[Neighbor(token='yellow', id=2843, score=0.8995459079742432)], ApiError(\"404 unknown_token\")]"
    # the same float32 score, rounded otherwise by another processor's vector units
    assert agrees(shown.replace("0.8995459079742432", "0.8995458483695984"), shown)
    assert not agrees(shown.replace("0.8995459079742432", "0.8994"), shown)
    assert not agrees(shown.replace("yellow", "orange"), shown)
    assert not agrees(shown.replace("2843", "2844"), shown)
