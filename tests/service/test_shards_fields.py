"""The front's ``GET .../fields`` of a sharded table with fields of more distinct values than a shard lists in
full (``MOST_LISTED``): a small table of generated documents imported as 2 shards, each shard served alone, the
sharded table served whole by one process, and a front of the shards, all real processes.

Fields of few values, or of more than the shards' top lists but at most ``MOST_LISTED`` on every shard, are the
one-process server's, exactly; those with more on some shard (unique titles) are flagged ``"exact": false``, their
figures lower bounds checked against plain Python over the documents imported. The explorer's filter controls
work on them through the front, in Chromium. A second sharded table of fields with long names (one server for
both its shards) is fronted too: every value of all of them would not fit one request line.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from index.engine.field_stats import MOST_LISTED, MOST_LISTED_BYTES, TOP_VALUES
from index.store import shardmap
from service.scatter import segment
from tests.cli import run_cli
from tests.lee import write_jsonl
from tests.service import real_server
from tests.service.real_server import HTTP, Server

SHARDS = 2
DOCUMENTS = 2 * MOST_LISTED + 1000  # a shard holds more than MOST_LISTED titles, words
# Table "wide": fields of long names, a value of their own in each document (more than TOP_VALUES on a shard), so
# that asking a shard for every value of all of them at once would be a URL over its 32 KiB max_header_bytes; and
# "long", a value of 20 KB of its own in each document: more than MOST_LISTED_BYTES on a shard.
WIDE_FIELDS = [f"{n} {'long name ' * 400}" for n in range(9)]
WIDE_DOCUMENTS = 160


def record(i: int) -> dict[str, Any]:
    """Document ``i``: a unique title; a word, the first 500 documents' one of 5, each other's its own; one of 4,000
    middling values (at most MOST_LISTED on a shard, more than TOP_VALUES); one of 7 kinds; a number."""
    vector = [float(i % 7), float(i % 11), float(i % 13), 1.0]
    word = f"hot{i % 5}" if i < 500 else f"word {i}"
    fields = {"title": f"title {i}", "word": word, "middling": f"m{i % 4000}", "kind": f"k{i % 7}", "n": i}
    return {"id": f"d{i}", "vector": vector, **fields}


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    return [record(i) for i in range(DOCUMENTS)]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, records: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("front-fields")
    source = write_jsonl(root / "uniq.jsonl", records)
    done = run_cli("import", source, "--name", "uniq", "--shards", SHARDS, "--data-dir", root / "sharded")
    assert done.code == 0, done.err
    done = run_cli(
        "import",
        wide_table(root / "wide.parquet"),
        "--name",
        "wide",
        "--shards",
        SHARDS,
        "--data-dir",
        root / "sharded",
    )
    assert done.code == 0, done.err
    (root / "front").mkdir()
    shard_names = ",".join(shardmap.shard_name(i) for i in range(SHARDS))
    started: list[Server] = []
    try:
        started += real_server.start_together(
            *real_server.shard_starts(root / "sharded" / "uniq", root, SHARDS, {}),
            lambda: real_server.start(root / "sharded", root / "one.log"),
            lambda: real_server.start(root / "sharded" / "wide", root / "wide.log", "--tables", shard_names),
        )
        *shards, one, wide = started
        replicas = [[f"{wide.base}/v1/tables/{shardmap.shard_name(i)}"] for i in range(SHARDS)]
        env = {"EMBEDDING_SHARDS": json.dumps({"uniq": real_server.replicas(shards), "wide": replicas})}
        started.append(real_server.start(root / "front", root / "front.log", env=env))
        yield {"shards": shards, "one": one, "wide": wide, "front": started[-1]}
    finally:
        real_server.stop_together(started)


def wide_table(path: Path) -> Path:
    """Table "wide" as Parquet (its long field names written once)."""
    ids = [f"w{i}" for i in range(WIDE_DOCUMENTS)]
    vectors = [[float(i % 7), float(i % 11), 1.0] for i in range(WIDE_DOCUMENTS)]
    columns = {name: [f"{n} {i}" for i in range(WIDE_DOCUMENTS)] for n, name in enumerate(WIDE_FIELDS)}
    columns["long"] = [f"{i} {'long value ' * 1850}" for i in range(WIDE_DOCUMENTS)]
    pq.write_table(pa.table({"id": ids, "vector": vectors, **columns}), path)
    return path


def fields(server: Server, table: str = "uniq", query: str = "") -> dict[str, Any]:
    answer = HTTP.get(f"{server.base}/v1/tables/{table}/fields{query}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()["fields"]
    return found


def test_a_shard_lists_every_value_of_a_field_up_to_most_listed(servers: dict[str, Any]) -> None:
    """A shard's ``GET .../fields/values``: every value of a field of at most ``MOST_LISTED`` distinct ones (its
    answer stays small); of one of more, its most common only, as ``GET .../fields``."""
    shard = servers["shards"][0]
    name = shardmap.shard_name(0)
    listed = fields(shard, name, "/values?field=title&field=word&field=middling&field=nope")
    top = fields(shard, name)
    assert list(listed) == ["title", "word", "middling"]
    assert listed["title"] == top["title"] and listed["word"] == top["word"]
    assert listed["title"]["distinct"] > MOST_LISTED and len(listed["title"]["values"]) == TOP_VALUES
    assert len(listed["middling"]["values"]) == listed["middling"]["distinct"] > TOP_VALUES


def test_the_fronts_fields_are_exact_or_lower_bounds_flagged(
    servers: dict[str, Any], records: list[dict[str, Any]]
) -> None:
    """Through the front: the fields no shard holds more than ``MOST_LISTED`` values of as the one-process server
    says them; the others flagged ``"exact": false``, their ``distinct`` and counts lower bounds of plain Python's
    over the documents imported, ``distinct`` at least the largest shard's."""
    front, one = fields(servers["front"]), fields(servers["one"])
    capped = {name for name, stats in front.items() if "exact" in stats}
    assert capped == {"title", "word"} and all(front[name]["exact"] is False for name in capped), front
    assert {name: front[name] for name in front if name not in capped} == {
        name: one[name] for name in one if name not in capped
    }
    shard_fields = [fields(shard, shardmap.shard_name(i)) for i, shard in enumerate(servers["shards"])]
    for name in capped:
        counts = Counter(r[name] for r in records)
        stats = front[name]
        assert max(part[name]["distinct"] for part in shard_fields) <= stats["distinct"] <= len(counts), name
        assert stats["non_null"] == len(records) and len(stats["values"]) == TOP_VALUES
        assert all(value["count"] <= counts[value["value"]] for value in stats["values"]), name
        shown = {value["value"]: value["count"] for value in stats["values"]}
        assert shown == {
            value: sum(c["count"] for part in shard_fields for c in part[name]["values"] if c["value"] == value)
            for value in shown
        }
    assert front["word"]["values"][:5] == one["word"]["values"][:5]  # the common words' counts are all there
    assert [v["value"] for v in front["word"]["values"][:5]] == [f"hot{i}" for i in range(5)]


def test_the_front_asks_for_the_values_of_many_long_named_fields_in_parts(servers: dict[str, Any]) -> None:
    """Fields whose names, all in one URL, would be longer than a shard's request line may be: the front's answer is
    still the one-process server's."""
    front, one = fields(servers["front"], "wide"), fields(servers["one"], "wide")
    assert [front[name] for name in WIDE_FIELDS] == [one[name] for name in WIDE_FIELDS]
    assert {front[name]["distinct"] for name in WIDE_FIELDS} == {WIDE_DOCUMENTS}
    assert len("&".join(f"field={segment(name)}" for name in WIDE_FIELDS)) > 32 << 10


def test_a_field_of_long_values_is_listed_in_part(servers: dict[str, Any]) -> None:
    """A shard lists every value of a field only up to ``MOST_LISTED_BYTES`` of them, so that its answer stays
    small: of "long" (about 1.6 MB on a shard), its most common, as ``GET .../fields``; the front's figures are then
    lower bounds, flagged."""
    shard, name = servers["wide"], shardmap.shard_name(0)
    listed = fields(shard, name, "/values?field=long")["long"]
    assert listed == fields(shard, name)["long"] and len(listed["values"]) == TOP_VALUES < listed["distinct"]
    assert listed["distinct"] * len(listed["values"][0]["value"]) > MOST_LISTED_BYTES
    front = fields(servers["front"], "wide")["long"]
    assert front["exact"] is False and front["non_null"] == WIDE_DOCUMENTS, front["distinct"]
    largest = max(fields(shard, shardmap.shard_name(i))["long"]["distinct"] for i in range(SHARDS))
    assert largest <= front["distinct"] <= WIDE_DOCUMENTS and {v["count"] for v in front["values"]} == {1}


def test_the_explorer_filters_on_a_field_of_lower_bounds(servers: dict[str, Any], tmp_path: Path) -> None:
    """The explorer's Search card of the front: the control of a field of lower bounds says so, and a value typed
    in its box filters the hits to the document that has it."""
    from tests.service.browser import Watched, launched, save_screenshot

    with launched() as browser:
        watched = Watched(browser)
        page = watched.page
        page.goto(f"{servers['front'].base}/?table=uniq")
        page.wait_for_selector("#ds-out:not([aria-busy]) .ds-hits li")
        title = page.locator("#ds-controls [data-field='title']")
        assert f"{TOP_VALUES} common ones of ≥" in title.inner_text()
        assert page.locator("#ds-controls [data-field='word'] .ds-n").first.inner_text() == "≥100"
        assert "most common of 4,000" in page.locator("#ds-controls [data-field='middling']").inner_text()
        title.locator(".ds-other input").fill("title 12345")
        title.locator(".ds-other input").press("Enter")
        page.wait_for_selector("#ds-out:not([aria-busy]) .ds-passing")
        page.wait_for_function("document.querySelector('#ds-out .ds-passing')?.textContent === '1'")
        assert page.locator("#ds-out .ds-hit .ds-id").all_inner_texts() == ["d12345"]
        save_screenshot(page, "explorer-front-bounds", tmp_path)
        watched.assert_clean()
        watched.close()
