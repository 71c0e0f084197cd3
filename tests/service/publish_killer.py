"""Run ``embedding-index`` and SIGKILL it right after the N-th step of its publish: ``python -m
tests.service.publish_killer N MODE ARGS...``.

A step is one operation on the data directory once the publish lock is taken: a file or directory fsync, a
link, a rename, the exchange of two directories, a removal. ``N`` = -1 kills no one and prints the steps (one a
line, on stderr, prefixed ``step:``); 0 kills as soon as the lock is taken. ``MODE`` ``exchange`` publishes as
the system allows, ``renames`` as on a file system that cannot exchange two directories (two renames).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from index.build import cli
from index.store import artifact

STEP, MODE = int(sys.argv[1]), sys.argv[2]
done = 0
publishing = False


def step(what: str) -> None:
    global done
    if not publishing:
        return
    if STEP < 0:
        print(f"step: {what}", file=sys.stderr, flush=True)
    done += 1
    if done == STEP:
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
    global publishing
    with lock(data_dir):
        publishing = True
        if STEP == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        yield
        publishing = False


artifact.publish_lock = publish_lock  # type: ignore[assignment]
os.fsync = counted("fsync", os.fsync)
os.rename = counted("rename", os.rename)
os.link = counted("link", os.link)
shutil.rmtree = counted("rmtree", shutil.rmtree)
exchange = artifact._exchange
artifact._exchange = counted("exchange", exchange if MODE == "exchange" else lambda first, second: False)
sys.argv = ["embedding-index", *sys.argv[3:]]
cli.main()
