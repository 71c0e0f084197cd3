"""docs/deployment.md's walk of deploy/nginx.conf, run as the page shows it: Debian's nginx (the config rendered as
``tests/deploy/test_nginx.py`` renders it) in front of two replicas of the default table, a search, one replica
killed with SIGKILL and four searches, the other killed and one more search; each command's output compared with the
page's, and the page's access line of the request retried on the second replica with nginx's real one.

In the third session (``tests/beside.py``), not in the second with test_nginx.py: it serves the default table
(``glove_data_dir``).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests import REPO
from tests.conftest import link_table
from tests.deploy.test_nginx import running_stack

PAGE = REPO / "docs" / "deployment.md"
TABLE = "glove-6b-50d"


def walk() -> tuple[list[tuple[str, str]], str]:
    """The walk's commands with what each printed, and the access line shown after it."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(r"one of them killed with SIGKILL:\n\n```\n(.*?)```\n.*?```\n(.*?)\n```", text, re.S)
    assert found, "docs/deployment.md shows no walk of nginx in front of two replicas"
    steps = [step.split("\n", 1) for step in found.group(1).split("$ ")[1:]]
    return [(command, (printed[0] if printed else "").rstrip("\n")) for command, *printed in steps], found.group(2)


def access_line_pattern(shown: str, addresses: dict[str, str]) -> re.Pattern[str]:
    """The shown access line, its replicas' addresses made the real ones, what changes from run to run (time,
    timing, request id) left open."""
    for documented, real in addresses.items():
        shown = shown.replace(documented, real)
    changing = {"[": r"\[[^]]*\]", "r": r"rt=[0-9.]+", "i": r"id=[0-9a-f]{32}"}
    pieces, last = [], 0
    for match in re.finditer(r"\[[^]]*\]|rt=[0-9.]+|id=[0-9a-f]{32}", shown):
        pieces += [re.escape(shown[last : match.start()]), changing[match.group()[0]]]
        last = match.end()
    return re.compile("".join([*pieces, re.escape(shown[last:])]))


def test_the_documented_walk_prints_what_the_page_shows(glove_data_dir: Path, tmp_path: Path) -> None:
    steps, access_line = walk()
    assert len(steps) == 5 and steps[1][0].startswith("kill -9") and steps[3][0].startswith("kill -9")
    data = tmp_path / "data"
    data.mkdir()
    assert link_table(glove_data_dir / TABLE, data)
    with running_stack(data, tmp_path) as (base, backends, nginx_log):
        replicas = list(backends.items())  # in the order of nginx's upstream servers, as the page kills them
        addresses: dict[str, str] = {}
        for command, shown in steps:
            killed = re.fullmatch(r"kill -9 <replica on :(\d+)>", command)
            if killed:
                address, (replica, _) = replicas.pop(0)
                addresses[f"127.0.0.1:{killed.group(1)}"] = address
                replica.kill()
                replica.wait(10)
                continue
            script = command.replace("http://127.0.0.1:8080", base)
            done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
            assert done.stdout.rstrip("\n").rstrip() == shown, (command, done.stdout, done.stderr)
        pattern = access_line_pattern(access_line, addresses)
        deadline = time.monotonic() + 10  # nginx writes a request's line just after answering it
        while not any(map(pattern.fullmatch, nginx_log.read_text().splitlines())) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(map(pattern.fullmatch, nginx_log.read_text().splitlines())), nginx_log.read_text()[-3000:]
