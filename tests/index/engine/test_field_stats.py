"""``index.engine.field_stats`` on gensim's Lee corpus imported as a documents table, in process: every count, top
list and range against plain Python over the values the test wrote, for the version's rows and for the live
documents after writes (replacements, deletions, a NaN, repeated tags, missing values)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from index.engine import field_stats as field_stats_module
from index.engine.delta import Delta, parse_timestamp, timestamp_text
from index.engine.field_stats import MOST_LISTED, TOP_VALUES, cut_fields, field_stats, merged_field_stats
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store.writelog import Record
from tests.lee import TYPES, Lee

NUMBERS = ("integer", "float", "timestamp")


def oracle(records: list[dict[str, Any]], top: int | None = TOP_VALUES) -> dict[str, Any]:
    """The statistics of each of Lee's fields over ``records`` (timestamps as ISO 8601 text), in plain Python; the
    ``top`` most common values of each (None: all)."""
    out: dict[str, Any] = {}
    for name, kind in TYPES.items():
        present = [r[name] for r in records if r.get(name) is not None]
        stats: dict[str, Any] = {"type": kind, "non_null": len(present)}
        if kind in ("string", "boolean", "string_list"):
            counts = Counter(tag for v in present for tag in set(v)) if kind == "string_list" else Counter(present)
            order = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            stats["distinct"] = len(counts)
            stats["values"] = [{"value": value, "count": count} for value, count in order[:top]]
        if kind in NUMBERS:
            numbers = [v for v in present if not (isinstance(v, float) and math.isnan(v))]
            stats["min"], stats["max"] = (min(numbers), max(numbers)) if numbers else (None, None)
        out[name] = stats
    return out


@pytest.fixture(scope="module")
def lee(lee_data_dir: Path) -> Table:
    return Table.load(lee_data_dir / "lee")


def test_the_version_s_fields(lee: Table, lee_docs: Lee) -> None:
    records = [lee_docs.record(i) for i in range(len(lee_docs.ids))]
    found = field_stats(lee.documents("it has no fields"))
    assert found == {"rows": 300, "fields": oracle(records)}
    assert found["fields"]["tags"]["distinct"] > TOP_VALUES  # the top list is cut


def test_the_live_documents_fields(lee: Table, lee_docs: Lee) -> None:
    payload = lee.documents("it has no fields")
    delta = Delta(payload, lee.rows, lee.dim, 0)
    written: list[dict[str, Any]] = [
        {"id": "new-0", "year": 1900, "tags": ["zz", "zz", "aa"], "lang": "fr", "known": math.nan, "long": True},
        {"id": "new-1", "year": None, "tags": [], "lang": "fr", "known": 2.5, "published": "1999-12-31T23:59:59Z"},
        {"id": "lee-004", "year": 2100, "tags": ["zz"], "lang": None, "known": -1.0, "long": False},  # replaced
    ]
    vector = lee_docs.vectors[0].tolist()
    documents = [
        {"id": d["id"], "text": "a written one", "vector": vector, "fields": {k: v for k, v in d.items() if k != "id"}}
        for d in written
    ]
    delta.apply([Record(1, 0, 0, {"op": "upsert", "documents": documents})])
    delta.apply([Record(2, 0, 0, {"op": "delete", "ids": ["lee-000", "lee-007", "new-9"]})])

    kept = [
        lee_docs.record(i) for i in range(len(lee_docs.ids)) if lee_docs.ids[i] not in {"lee-000", "lee-004", "lee-007"}
    ]
    live = kept + [{k: v for k, v in d.items() if k != "id"} for d in written]
    found = field_stats(payload, delta)
    assert found == {"rows": 300 - 3 + 3, "fields": oracle(live)}
    assert found["fields"]["year"]["min"] == 1900 and found["fields"]["known"]["min"] == -1.0
    assert found["fields"]["published"]["min"] == "1999-12-31T23:59:59Z"
    assert found != field_stats(payload)  # the writes count


def test_a_year_before_1000_is_written_in_four_digits(lee: Table, lee_docs: Lee) -> None:
    """A timestamp before the year 1000 as ISO 8601 writes it (``0999``, not ``999``): what the writes keep and
    read back, and the shards' extremes the merge compares as moments."""
    payload = lee.documents("it has no fields")
    delta = Delta(payload, lee.rows, lee.dim, 0)
    old = {"id": "old", "text": "long ago", "vector": lee_docs.vectors[0].tolist(), "fields": {}}
    old["fields"] = {"published": timestamp_text(parse_timestamp("0999-06-01T05:00:00.25+05:00"))}
    assert old["fields"]["published"] == "0999-06-01T00:00:00.25Z"
    delta.apply([Record(1, 0, 0, {"op": "upsert", "documents": [old]})])
    shard = field_stats(payload, delta)
    assert shard["fields"]["published"]["min"] == "0999-06-01T00:00:00.25Z"
    merged = merged_field_stats([field_stats(payload), shard])["fields"]["published"]
    assert (merged["min"], merged["max"]) == ("0999-06-01T00:00:00.25Z", shard["fields"]["published"]["max"])


def test_word_tables_have_no_fields(small_data_dir: Path) -> None:
    words = Table.load(small_data_dir / "small")
    with pytest.raises(InvalidQuery, match="holds words, not documents: it has no fields"):
        words.documents("it has no fields")


def test_made_once_per_loaded_table(lee: Table) -> None:
    calls: list[int] = []

    def make() -> int:
        calls.append(1)
        return len(calls)

    assert (lee.cached("test-stats", make), lee.cached("test-stats", make), calls) == (1, 1, [1])


def test_every_value_of_the_fields_asked(lee: Table, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every value of the fields asked, up to ``MOST_LISTED`` distinct ones; beyond, the most common as without."""
    records = [lee_docs.record(i) for i in range(len(lee_docs.ids))]
    found = field_stats(lee.documents("it has no fields"), every=["tags", "nope"])
    assert found == {"rows": 300, "fields": {"tags": oracle(records, None)["tags"]}}
    assert len(found["fields"]["tags"]["values"]) == found["fields"]["tags"]["distinct"] > TOP_VALUES
    monkeypatch.setattr(field_stats_module, "MOST_LISTED", found["fields"]["tags"]["distinct"] - 1)
    capped = field_stats(lee.documents("it has no fields"), every=["tags", "lang"])["fields"]
    assert capped == {name: oracle(records)[name] for name in ("tags", "lang")}


def test_every_value_up_to_most_listed_bytes(lee: Table, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every value of a field asked whose text is at most ``MOST_LISTED_BYTES`` in all; of longer, the most common,
    as without ``every``."""
    records = [lee_docs.record(i) for i in range(len(lee_docs.ids))]
    tags = oracle(records, None)["tags"]
    text = sum(len(value["value"].encode()) for value in tags["values"])
    monkeypatch.setattr(field_stats_module, "MOST_LISTED_BYTES", text)
    assert field_stats(lee.documents("it has no fields"), every=["tags"])["fields"]["tags"] == tags
    monkeypatch.setattr(field_stats_module, "MOST_LISTED_BYTES", text - 1)
    assert field_stats(lee.documents("it has no fields"), every=["tags"])["fields"]["tags"] == oracle(records)["tags"]


def test_shards_statistics_merge_into_the_whole_tables(lee_docs: Lee) -> None:
    """A sharded table's statistics from its shards' (each listing every value), as the whole table's: counts
    summed, each distinct value once, the extremes of all."""
    records = [lee_docs.record(i) for i in range(len(lee_docs.ids))]
    shards = [records[0::3], records[1::3], records[2::3]]
    parts = [{"rows": len(shard), "fields": oracle(shard, None)} for shard in shards]
    assert merged_field_stats(parts) == {"rows": 300, "fields": oracle(records)}
    cut = {"rows": len(shards[0]), "fields": oracle(shards[0])}
    assert cut_fields(cut) == ["tags"] and cut_fields(parts[0]) == []
    late = [{**part, "fields": {**part["fields"], "published": {**part["fields"]["published"]}}} for part in parts]
    late[0]["fields"]["published"]["max"] = "2009-01-01T00:00:00Z"
    late[2]["fields"]["published"]["max"] = "2009-01-01T00:00:00.5Z"  # half a second later, though less as text
    late[1]["fields"]["published"] |= {"min": None, "max": None}  # a shard without a value of the field
    merged = merged_field_stats(late)["fields"]["published"]
    lowest = min(part["fields"]["published"]["min"] for part in (parts[0], parts[2]))  # whole seconds: as text
    assert merged == {"type": "timestamp", "non_null": 300, "min": lowest, "max": "2009-01-01T00:00:00.5Z"}


def test_a_field_a_shard_lists_in_part_merges_into_lower_bounds(lee_docs: Lee) -> None:
    """A shard with more than ``MOST_LISTED`` values of a field lists its most common only (and the front does not
    ask it for all): that field's merge is flagged ``"exact": false``, its ``distinct`` and each count at most the
    whole table's; the other fields' statistics are exact."""
    records = [lee_docs.record(i) for i in range(len(lee_docs.ids))]
    shards = [records[0::3], records[1::3], records[2::3]]
    parts = [{"rows": len(shard), "fields": oracle(shard, None)} for shard in shards]
    cut = {"rows": len(shards[0]), "fields": oracle(shards[0])}
    assert cut_fields({**cut, "fields": {"tags": {**cut["fields"]["tags"], "distinct": MOST_LISTED + 1}}}) == []
    merged = merged_field_stats([cut, *parts[1:]])["fields"]
    truth = oracle(records, None)
    assert {name: stats for name, stats in merged.items() if name != "tags"} == {
        name: stats for name, stats in oracle(records).items() if name != "tags"
    }
    tags, counts = merged["tags"], {value["value"]: value["count"] for value in truth["tags"]["values"]}
    assert tags["exact"] is False and len(tags["values"]) == TOP_VALUES
    largest = max(part["fields"]["tags"]["distinct"] for part in parts)
    assert largest < tags["distinct"] <= truth["tags"]["distinct"]  # the values of the shards listed in full too
    assert all(value["count"] <= counts[value["value"]] for value in tags["values"])
    assert any(value["count"] < counts[value["value"]] for value in tags["values"])  # some are not exact
    sums = Counter[Any]()
    for part in (cut, *parts[1:]):
        sums.update({value["value"]: value["count"] for value in part["fields"]["tags"]["values"]})
    assert all(value["count"] == sums[value["value"]] for value in tags["values"])
