"""The Makefile as a newcomer meets it: ``make`` alone lists the targets README.md names (and makes nothing), and
the long installs say what they do before they start."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
MAKEFILE = REPO / "Makefile"


def make(*args: str, cwd: Path = REPO) -> str:
    # a make of its own, not one level below the make that may run the tests (which prints "Entering directory")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        ["make", "-f", str(MAKEFILE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_alone_lists_every_target_readme_names_and_makes_nothing(tmp_path: Path) -> None:
    listed = make(cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []  # no .venv made by a make that only asked what there is
    assert make("help", "PORT=9000", cwd=tmp_path) == listed.replace(":8000", ":9000").replace(", 8000)", ", 9000)")
    named = set(re.findall(r"`make ([a-z][a-z-]*)", (REPO / "README.md").read_text(encoding="utf-8")))
    assert {"run", "test", "lint", "build", "sif", "import", "bench"} <= named, named
    rules = set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE.read_text(encoding="utf-8"), re.M))
    assert named <= rules, named - rules
    assert {target for target in named if f"make {target} " not in listed} == set(), listed
    assert "serve on http://127.0.0.1:8000" in listed and "make run PORT=9000" in listed


def test_the_installs_say_what_they_do_before_they_start(tmp_path: Path) -> None:
    """``make run`` on a fresh clone spends up to a minute installing: a line says so first, not only the
    commands make echoes (the installer itself is quiet)."""
    planned = make("-n", "run", f"VENV={tmp_path / 'venv'}", f"DATA_DIR={tmp_path / 'data'}").splitlines()
    installing = next(i for i, line in enumerate(planned) if "uv pip install" in line)
    said = [line for line in planned[:installing] if line.startswith("echo ")]
    assert said[-1].startswith(f'echo "installing embedding-search and its packages into {tmp_path / "venv"} ('), said
    assert any("creating" in line and "installing uv" in line for line in said), said


def test_pip_says_nothing_of_a_newer_pip() -> None:
    """pip's notice of its own next release (``[notice] A new release of pip is available: 23.2.1 -> 26.3`` and
    ``To update, run: ...``, which ``--quiet`` leaves, on a machine without PIP_DISABLE_PIP_VERSION_CHECK) is no
    step of ``make run`` or ``make dev``: every pip command they run turns the check off."""
    planned = make("-n", "run", "dev", "VENV=/nonexistent/venv", "DATA_DIR=/nonexistent/data")
    commands = [part for part in re.split(r"\|\||;|&&|\bthen\b|\belse\b", planned) if re.search(r"\bpip\b", part)]
    pips = [command for command in commands if "uv pip" not in command and "install" in command]
    assert len(pips) >= 3, planned  # uv's own install, pip's upgrade if uv cannot install, pip in place of uv
    assert all("--disable-pip-version-check" in command for command in pips), pips


def test_make_run_echoes_the_builders_and_the_servers_commands_alone() -> None:
    """A fresh clone's ``make run`` shows, beside the lines that say what it installs, the two commands a person
    can run again (``embedding-index build``, ``embedding-serve``), not the installs' shell plumbing (the venv, uv or
    pip, their flags, the fall-back from one to the other). With a shell that runs nothing, make prints only what it
    echoes."""
    echoed = make("SHELL=/bin/true", "run", "VENV=/nonexistent/venv", "DATA_DIR=/nonexistent/data").splitlines()
    assert echoed == [
        "/nonexistent/venv/bin/embedding-index build --data-dir /nonexistent/data --defer-index",
        "/nonexistent/venv/bin/embedding-serve --data-dir /nonexistent/data --host 127.0.0.1 --port 8000",
    ]
