"""Token lookup without a dict: exact matches through sorted 8-byte prefixes, on awkward labels and the real table."""

from __future__ import annotations

from pathlib import Path

import pytest

from index.engine.table import Table
from index.store.tokens import Tokens, write_tokens

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
