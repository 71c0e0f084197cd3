"""``python -m bench`` stopped by SIGTERM (``timeout``, ``kill``, a cancelled CI job) stops the servers it started:
they run in sessions of their own, which the signal does not reach."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench.common import REPO

# python -m bench with one benchmark that starts a real server (the HTTP floor app under uvicorn), prints its pid
# and waits: what any benchmark does while it measures.
SCRIPT = """
import sys, time
import bench.__main__ as bench_main
from bench.common import free_port, serve, server_env
from bench.neighbours import floor_command

def runner(name):
    def run(ctx):
        port = free_port()
        env = {**server_env(), "BENCH_FLOOR_BODIES": sys.argv[1]}
        with serve(floor_command(port), "/readyz", port, env) as server:
            print(server.process.pid, flush=True)
            time.sleep(600)
        return {"targets": []}
    return run

bench_main.runner = runner
out = sys.argv[2]
sys.exit(bench_main.main(["--only", "writes", "--results-dir", out, "--markdown", out + "/BENCHMARKS.md"]))
"""


def test_sigterm_stops_the_benchmarks_servers(tmp_path: Path) -> None:
    bodies = tmp_path / "bodies.json"
    bodies.write_text(json.dumps({"get": "{}", "post": "{}", "search": "{}"}))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", SCRIPT, str(bodies), str(tmp_path / "results")]
    bench = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    server = 0
    try:
        assert bench.stdout is not None
        server = int(bench.stdout.readline())  # the server answers /readyz
        assert psutil.Process(server).is_running()
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(120) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 30
        while psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the benchmark's server outlived it"
            time.sleep(0.1)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        if server and psutil.pid_exists(server):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server, signal.SIGKILL)  # left behind: the test fails, the machine keeps its cores
