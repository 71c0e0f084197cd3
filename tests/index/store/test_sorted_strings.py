"""The binary search of sorted strings (index.store.payload): with the strings' prefix keys as without, and as
Python's bisect over the same strings in UTF-8 byte order."""

from __future__ import annotations

import bisect
import random

import numpy as np
import pyarrow as pa
import pytest

from index.store.payload import insertion_points, prefix_keys, search_sorted


def strings(seed: int) -> list[str]:
    """Words that share long prefixes, short and empty ones, NULs, and characters of 2 to 4 UTF-8 bytes."""
    rng = random.Random(seed)
    alphabet = ["a", "b", "z", "\x00", "é", "中", "😀", "A", " "]
    stems = ["", "inter", "international", "internationalisation", "a", "zz", "中文", "é"]
    words = {rng.choice(stems) + "".join(rng.choices(alphabet, k=rng.randrange(0, 6))) for _ in range(3000)}
    return sorted(words, key=lambda word: word.encode())


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("large", [False, True])
def test_insertion_points_with_and_without_keys_are_bisect_s(seed: int, large: bool) -> None:
    kind = pa.large_string() if large else pa.string()
    words = strings(seed)
    haystack = pa.array(["padding", *words], kind).slice(1)  # a slice: offsets that do not start at 0
    keys = prefix_keys(haystack)
    encoded = [word.encode() for word in words]
    rng = random.Random(seed + 100)
    asked = [*rng.sample(words, 200), *(w + rng.choice(["", "a", "\x00", "é"]) for w in rng.sample(words, 200))]
    asked += ["", "\x00", "zzzzzzzzzzzz", "internationalisationz", "😀😀"]
    needles = pa.array(asked, kind)
    for right in (False, True):
        find = bisect.bisect_right if right else bisect.bisect_left
        expected = [find(encoded, word.encode()) for word in asked]
        assert insertion_points(haystack, needles, right=right).tolist() == expected
        assert insertion_points(haystack, needles, right=right, keys=keys).tolist() == expected
    where = {word: i for i, word in enumerate(words)}
    assert search_sorted(haystack, needles, keys).tolist() == [where.get(word, -1) for word in asked]


def test_prefix_keys_order_as_the_strings_bytes() -> None:
    words = strings(9)
    keys = prefix_keys(pa.array(words))
    assert np.all(keys[1:] >= keys[:-1])  # sorted strings, sorted keys
    assert prefix_keys(pa.array(["ab", "", "abcdefghij"])).tolist() == [0x6162 << 48, 0, 0x6162636465666768]
    assert prefix_keys(pa.array([], pa.string())).tolist() == []
