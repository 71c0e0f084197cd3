"""Helpers for the deployment tests: read the Dockerfile, start real servers on loopback, stop them."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests import REPO

DOCKERFILE = REPO / "Dockerfile"
START_TIMEOUT = 180.0  # seconds for a server to load its tables (the full GloVe table is checksummed on load)


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper-cased: FROM, ENV, CMD, ...
    args: str


def parse_dockerfile(path: Path = DOCKERFILE) -> list[list[Instruction]]:
    """The Dockerfile's instructions, one list per build stage (comments dropped, continuations joined)."""
    stages: list[list[Instruction]] = []
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if logical and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, args = logical.partition(" ")
        instruction = Instruction(keyword.upper(), args.strip())
        logical = ""
        if instruction.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def final_stage() -> list[Instruction]:
    return parse_dockerfile()[-1]


def image_env(stage: list[Instruction]) -> dict[str, str]:
    """The ``ENV`` values of a stage, in order, with ``$VAR``/``${VAR}`` expanded from earlier values."""
    env: dict[str, str] = {}
    for ins in stage:
        if ins.keyword != "ENV":
            continue
        for pair in shlex.split(ins.args):
            key, _, value = pair.partition("=")
            env[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), os.environ.get(m.group(1), "")), value)
    return env


def exec_form(stage: list[Instruction], keyword: str) -> list[str]:
    """The exec-form (JSON array) arguments of the stage's last ``keyword`` instruction."""
    args = [ins.args for ins in stage if ins.keyword == keyword][-1]
    if keyword == "HEALTHCHECK":
        args = args[args.index("CMD ") + 4 :].strip()
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(a, str) for a in value), f"{keyword} is not in exec form"
    return value


def override_option(argv: list[str], option: str, value: str) -> list[str]:
    """``argv`` with the value of ``option`` replaced (the option must be present)."""
    out = list(argv)
    position = out.index(option)
    out[position + 1] = value
    return out


def start(argv: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a process in its own session (so it and its children can be stopped together), output to ``log``."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = START_TIMEOUT) -> None:
    """Poll ``url`` until it answers 200; fail with the log's tail if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as probe:  # one client for every poll: a new one loads the CA bundle each time
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"{process.args} exited with {process.returncode}:\n{tail(log)}")
            try:
                if probe.get(url).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)  # polling interval while the server loads, not a timing assumption
    raise AssertionError(f"{url} not ready after {timeout:.0f} s:\n{tail(log)}")


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    """Signal the process's whole session, escalating to SIGKILL if it does not exit in time."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout)


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"
