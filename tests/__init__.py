"""The tests; ``REPO`` is the checkout they test (the folder holding ``pyproject.toml``)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
