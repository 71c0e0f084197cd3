"""Run a command and report its own peak resident memory: ``python -m bench.peak OUT.json ARGV...``.

Linux carries a process's peak RSS (``ru_maxrss``) across fork and exec, so a child forked by a large process
(the benchmark, with tables loaded) would report at least its parent's size. This launcher is small: it spawns
the command, waits for it with ``wait4`` and writes ``{"returncode", "seconds", "max_rss"}`` (bytes) to OUT.json.
The command's stdin, stdout and stderr are this process's.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    out, argv = sys.argv[1], sys.argv[2:]
    started = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    with open(out, "w") as handle:
        json.dump({"returncode": code, "seconds": seconds, "max_rss": usage.ru_maxrss * 1024}, handle)
    return code if code >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
