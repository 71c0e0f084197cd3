"""The examples of the docs, read from the docs themselves so that a test runs each as written and the docs cannot
drift from the code: the fenced block after a marker ``<!-- example: NAME -->``, and the fenced block right after
it, which shows what the example prints; or every ``console`` block of a page (its ``$ curl`` examples)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tests import REPO

# A float agrees with the one shown to the digits shown, or to this share of its size (of 1 for a value under 1): a
# score or a layout is made of float32 sums, which another CPU's vector kernels add in their own order, so its last
# digits are the machine's; a cosine near 0 is a sum of terms up to 1 in size, rounded at their scale, not its own.
FLOAT_SHARE = 1e-6


def _blocks(doc: str, name: str) -> tuple[str, str | None]:
    text = (REPO / doc).read_text(encoding="utf-8")
    found = re.search(rf"<!-- example: {re.escape(name)} -->\s*```\w*\n(.*?)^```\n", text, re.S | re.M)
    assert found, f"no example {name!r} in {doc}"
    after = re.match(r"\s*```\w*\n(.*?)^```\n", text[found.end() :], re.S | re.M)
    return found.group(1), after.group(1) if after else None


def example(doc: str, name: str) -> str:
    """The code of the block marked ``<!-- example: name -->`` in ``doc`` (a path from the repository's root)."""
    return _blocks(doc, name)[0]


def printed(doc: str, name: str) -> str:
    """What the docs say the example ``name`` of ``doc`` prints: the fenced block right after it."""
    shown = _blocks(doc, name)[1]
    assert shown is not None, f"the example {name!r} in {doc} is not followed by the block of what it prints"
    return shown


def console_blocks(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Each ```console block of ``path``: its first line's number and its lines."""
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("```console"):
            end = lines.index("```", i + 1)
            yield i + 2, lines[i + 1 : end]
            i = end
        i += 1


def same_float(shown: float, real: float) -> bool:
    """Whether ``real`` is the float ``shown`` (see :data:`FLOAT_SHARE`)."""
    text = repr(float(shown))
    digits = len(text.split(".")[1]) if "e" not in text else 17
    return abs(real - shown) <= max(0.5 * 10**-digits + 1e-15, FLOAT_SHARE * max(abs(shown), 1.0))
