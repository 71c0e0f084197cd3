"""The builder's command line, run as the tests run it: in this process through its console entry point
(:func:`run_cli`, cheap enough for the hundreds of calls the tests make; its progress lines too with ``quiet=False``)
or in a child process as a user runs it (:func:`run_index`: its whole output, progress lines included).
:func:`progress_lines` holds the lines of a step run in this process."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from unittest import mock

import typer.main

from index import progress
from index.build.cli import main
from tests import REPO


@dataclass
class Result:
    code: int
    out: str
    err: str


# Typer makes the click command of its app anew at every call (mostly reading the commands' annotations, most of
# a small import's time): a process that runs one command pays it once, the tests' hundreds of calls each time.
# The same command, made once per app, is what every call here runs.
command_of = cache(typer.main.get_command)


def run_cli(*args: object, quiet: bool = True) -> Result:
    """Run ``embedding-index --quiet`` in this process through its console entry point ``index.build.cli.main``;
    with ``quiet=False``, without ``--quiet``: its progress lines are on its stderr (and this process as quiet as
    before afterwards)."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["embedding-index", *(["--quiet"] if quiet else []), *map(str, args)]
    with (
        nullcontext() if quiet else quiet_kept(),
        mock.patch.object(sys, "argv", argv),
        mock.patch.object(typer.main, "get_command", command_of),
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return Result(code, out.getvalue(), err.getvalue())


def untimed(lines: list[str]) -> list[str]:
    """``lines`` with the seconds of each ``built ... in S s -> ...`` and ``indexed ..., built in S s`` line left
    out."""
    return [re.sub(r" in [0-9.]+ s( -> |$)", r" in (seconds) s\1", line) for line in lines]


def run_index(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m index`` with ``args`` in a child process, from the repository's root."""
    return subprocess.run(
        [sys.executable, "-m", "index", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout
    )


@contextmanager
def quiet_kept() -> Iterator[None]:
    """The builder as quiet (``--quiet``) in this process afterwards as it was before."""
    quiet = progress.CONFIG.quiet
    try:
        yield
    finally:
        progress.CONFIG.quiet = quiet


@contextmanager
def progress_lines() -> Iterator[io.StringIO]:
    """The builder's progress lines written in this process meanwhile, whatever an earlier test left set (--quiet)."""
    stream, quiet = io.StringIO(), progress.CONFIG.quiet
    progress.CONFIG.stream, progress.CONFIG.quiet = stream, False
    try:
        yield stream
    finally:
        progress.CONFIG.stream, progress.CONFIG.quiet = None, quiet
