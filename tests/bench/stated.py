"""The figures BENCHMARKS.md states, read back for the tests that check them against a benchmark's run."""

from __future__ import annotations

from tests import REPO


def section_rows(heading: str) -> dict[str, list[str]]:
    """The table rows of BENCHMARKS.md's section ``heading`` (its ``## ...`` line): each row's first cell -> its
    other cells, bold marks removed."""
    text = (REPO / "BENCHMARKS.md").read_text()
    section = text[text.index(heading) :]
    section = section[: section.index("\n## ", len(heading))]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip().strip("*") for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows


def shown(measured: float, stated: str) -> bool:
    """Whether ``stated`` is ``measured`` to the digits it shows (a percentage: ``measured`` x 100)."""
    number = stated.removesuffix("%")
    scale = 100 if number != stated else 1
    decimals = len(number.partition(".")[2])
    return abs(scale * measured - float(number)) <= 0.5 * 10**-decimals + 1e-12
