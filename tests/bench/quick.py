"""A benchmark's quick mode run as ``python -m bench --quick --only NAME``, in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def quick_run(name: str, out: Path, timeout: float) -> dict[str, Any]:
    """Its result and the BENCHMARKS.md section it renders (``out``: a directory of the test's own)."""
    markdown = out / "BENCHMARKS.md"
    argv = [sys.executable, "-m", "bench", "--quick", "--only", name, "--data-dir", str(out / "no-table")]
    argv += ["--results-dir", str(out / "results"), "--markdown", str(markdown)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    payload = json.loads((out / "results" / f"{name}.json").read_text())
    assert payload["status"] == "ok" and payload["quick"] is True, payload.get("error")
    return {"result": payload["result"], "markdown": markdown.read_text()}
