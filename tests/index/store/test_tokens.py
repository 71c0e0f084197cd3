"""Token lookup without a dict: exact matches through sorted 8-byte prefixes, on awkward labels and the real table."""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.table import Table
from index.store.tokens import FOLDED_ORDER, ORDER, Tokens, write_tokens
from tests.index.engine.test_delta import calls_made

AWKWARD = [
    "",  # an empty label
    "a",
    "a\x00",  # NUL sorts like the zero padding of shorter labels
    "a\x00b",
    "international",
    "internationalisation",  # the same first 8 bytes as the row before and after
    "internationalization",
    "ÿÿÿÿÿÿÿÿ",  # 0xc3 0xbf ...: high bytes in the prefix
    "ÿÿÿÿÿÿÿÿz",
    "\U0010ffff" * 3,  # the largest code point
    "a",  # a duplicate: the lower id wins
    "Heart",
    "héart",
]
# Not labels: prefixes of labels (of 8 bytes or fewer, found by the first label with their prefix, or longer),
# a lone surrogate, a NUL-padded label.
ABSENT = ["internationa", "internat", "Hear", "b", "\x00", "heart", "ÿÿÿÿÿÿÿ", "\ud800", "a\x00\x00", "\U0010ffff" * 2]


def test_every_awkward_label_is_found_and_nothing_else(tmp_path: Path) -> None:
    write_tokens(tmp_path, AWKWARD)
    tokens = Tokens(tmp_path)
    for i, label in enumerate(AWKWARD):
        assert tokens.find(label) == AWKWARD.index(label), (i, label)
    for absent in ABSENT:
        assert tokens.find(absent) is None, absent


def test_a_table_of_empty_labels(tmp_path: Path) -> None:
    write_tokens(tmp_path, ["", ""])
    tokens = Tokens(tmp_path)
    assert tokens.find("") == 0 and tokens.find("x") is None


def test_glove_tokens_find_their_first_row(glove: Table) -> None:
    tokens = glove.tokens
    for i in range(0, len(tokens), 7):  # 57,143 of the 400,000 labels
        found = tokens.find(tokens[i])
        assert found is not None and found <= i and tokens[found] == tokens[i]


def test_labels_of_many_rows_at_once(tmp_path: Path) -> None:
    write_tokens(tmp_path, AWKWARD)
    tokens = Tokens(tmp_path)
    ids = [12, 0, 9, 9, 5, len(AWKWARD) - 1]
    assert tokens.labels(ids) == [AWKWARD[i] for i in ids] == [tokens[i] for i in ids]
    assert tokens.labels([]) == []
    for bad in ([len(AWKWARD)], [-1]):
        with pytest.raises(IndexError):
            tokens.labels(bad)
    (tmp_path / "empty").mkdir()
    write_tokens(tmp_path / "empty", ["", ""])
    assert Tokens(tmp_path / "empty").labels([1, 0]) == ["", ""]


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic garbage collector off: what is freed is freed by reference counts alone."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def mapped_under(directory: Path) -> list[str]:
    """The files under ``directory`` this process has mapped."""
    with open("/proc/self/maps") as maps:
        return [line.split()[-1] for line in maps if str(directory) in line]


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_a_dropped_table_unmaps_its_files_at_once(tmp_path: Path, no_collector: None) -> None:
    """A replaced or removed table's files are unmapped as soon as its last reference goes, without waiting for the
    collector's full pass (a server swapping tables would otherwise keep every old version's files mapped)."""
    rng = np.random.default_rng(0)
    raw = RawTable(tokens=[f"w{i}" for i in range(500)], matrix=rng.standard_normal((500, 8)).astype(np.float32))
    build_table(raw, data_dir=tmp_path, name="t", source={"format": "test", "path": "rows"}, index_spec="flat")
    table = Table.load(tmp_path / "t")
    assert table.tokens.find("w7") == 7 and table.tokens.find_folded("W7") == 7  # the sorted views in use
    assert any(path.endswith("tokens.bin") for path in mapped_under(tmp_path))
    del table
    assert mapped_under(tmp_path) == []


def test_token_orders_are_python_s_and_sorted_with_no_call_per_token(tmp_path: Path) -> None:
    """The tokens' order and their case-folded order (equal ones by row) are Python's sort of the rows by those
    keys, made with as many calls for 4,000 tokens as for 1,000: no key read token by token (Python's sort of a
    million tokens' rows took 13 s of a 15 s import)."""
    rnd = random.Random(0)
    letters = ["a", "B", "é", "ß", "ẞ", "Σ", "σ", "ς", "\u0301", "日", "😀", "\U0010ffff", "\x00", " ", "ﬁ"]

    def tokens(n: int) -> list[str]:
        return ["".join(rnd.choice(letters) for _ in range(rnd.randint(0, 4))) for _ in range(n)]

    def written(words: list[str]) -> int:
        calls = calls_made(lambda: write_tokens(tmp_path, words))
        folded = [w.casefold() for w in words]
        assert np.load(tmp_path / ORDER).tolist() == sorted(range(len(words)), key=words.__getitem__)
        assert np.load(tmp_path / FOLDED_ORDER).tolist() == sorted(range(len(words)), key=lambda i: (folded[i], i))
        return calls

    written(tokens(10))  # what loads on first use (pyarrow's modules) loaded
    assert written(tokens(1000)) == written(tokens(4000))
