"""Run ``embedding-index`` commands, each in a process of its own, and SIGKILL a publisher right after the N-th
step of its publish: ``python -m tests.service.publish_killer < jobs.json`` prints one result per job as JSON
(``returncode``, negative for a signal as with ``subprocess``; ``stdout``; ``stderr``).

A job is ``{"argv": [...]}``: the command's arguments (``embedding-index verify t --data-dir D``), or with
``"kill_at": N, "mode": MODE`` a publisher. The builder is imported once, here; each command runs in a process
forked from this one (``embedding-index``'s own entry point, ``index.build.cli.main``, with the job's arguments),
two at a time, so that a command costs its work and not another start-up of Python and the builder.

A step is one operation on the data directory once the publish lock is taken: a file or directory fsync, a
link, a rename, the exchange of two directories, a removal. ``N`` = -1 kills no one and prints the steps (one a
line, on stderr, prefixed ``step:``); 0 kills as soon as the lock is taken. ``MODE`` ``exchange`` publishes as
the system allows, ``renames`` as on a file system that cannot exchange two directories (two renames).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

# What the commands import as they run (the index command's modules, the option parser's, the recall sample's),
# imported once, here.
import numpy.random  # noqa: F401
import typer._adapters  # noqa: F401

import index.build.writer  # noqa: F401
from index.build import cli
from index.store import artifact

AT_ONCE = 2  # commands running at a time


def kill_at(kill: int, mode: str) -> None:
    """Make this process SIGKILL itself right after the ``kill``-th step of its publish (see the module's doc)."""
    done = 0
    publishing = False

    def step(what: str) -> None:
        nonlocal done
        if not publishing:
            return
        if kill < 0:
            print(f"step: {what}", file=sys.stderr, flush=True)
        done += 1
        if done == kill:
            os.kill(os.getpid(), signal.SIGKILL)

    def counted(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            step(f"{name} {' '.join(Path(str(a)).name for a in args if isinstance(a, (str, Path)))}")
            return result

        return wrapper

    lock = artifact.publish_lock

    @contextmanager
    def publish_lock(data_dir: Path) -> Iterator[None]:
        nonlocal publishing
        with lock(data_dir):
            publishing = True
            if kill == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            yield
            publishing = False

    artifact.publish_lock = publish_lock  # type: ignore[assignment]
    os.fsync = counted("fsync", os.fsync)
    os.rename = counted("rename", os.rename)
    os.link = counted("link", os.link)
    shutil.rmtree = counted("rmtree", shutil.rmtree)
    exchange = artifact._exchange
    artifact._exchange = counted("exchange", exchange if mode == "exchange" else lambda first, second: False)


def command(job: dict[str, Any], out: Path, err: Path) -> NoReturn:
    """In a forked process: run the job's command with its output in ``out`` and ``err``; exit with its status."""
    code = 1
    try:
        with out.open("wb") as stdout, err.open("wb") as stderr:
            os.dup2(stdout.fileno(), 1)
            os.dup2(stderr.fileno(), 2)
        if "kill_at" in job:
            kill_at(job["kill_at"], job["mode"])
        sys.argv = ["embedding-index", *job["argv"]]
        try:
            cli.main()
            code = 0
        except SystemExit as exited:  # as the interpreter turns it into a status
            code = exited.code if isinstance(exited.code, int) else 0 if exited.code is None else 1
            if not isinstance(exited.code, int | None):
                print(exited.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    jobs: list[dict[str, Any]] = json.load(sys.stdin)
    results: list[dict[str, Any]] = [{} for _ in jobs]
    running: dict[int, int] = {}  # pid -> job
    with tempfile.TemporaryDirectory() as scratch:
        outputs = [(Path(scratch) / f"{i}.out", Path(scratch) / f"{i}.err") for i in range(len(jobs))]
        waiting = iter(range(len(jobs)))
        while True:
            for i in waiting:
                sys.stdout.flush()  # nothing buffered here is written again by the child
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    command(jobs[i], *outputs[i])
                running[pid] = i
                if len(running) == AT_ONCE:
                    break
            if not running:
                break
            pid, status = os.wait()
            i = running.pop(pid)
            out, err = outputs[i]
            results[i] = {
                "returncode": os.waitstatus_to_exitcode(status),
                "stdout": out.read_text(errors="replace"),
                "stderr": err.read_text(errors="replace"),
            }
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
