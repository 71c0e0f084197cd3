"""Documents tables through the real ``embedding-index import``, on gensim's Lee corpus.

The 300 Lee background news documents (one per line of ``lee_background.cor``) get fields derived from their own
words and a vector each: the mean GloVe 6B 50d row of their words, computed here with one sparse product. They are
written as JSON Lines, Parquet and gzipped CSV, imported, and read back through :class:`index.store.payload.Payload`
and :class:`index.engine.table.Table`: ids, text, every field with its type, and vectors equal to the float64-normalised
input. Every kind of bad input must fail with status 1 and one line naming the file and line (row for Parquet).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shlex
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from contextlib import redirect_stdout
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from index.build import documents as documents_build
from index.build.passages import paragraphs, passages_table, split_passages
from index.build.sources import RawTable, sniff_format
from index.build.sources import documents as documents_source
from index.engine.table import Table
from index.errors import InvalidQuery, UnknownToken, counted
from index.store import artifact
from index.store.payload import ID_LOOKUP, PAYLOAD, Payload, UnknownDocument, search_sorted, sort_ids, string_offsets
from index.store.tokens import MAX_TOKEN_CHARS
from tests import REPO
from tests.cli import progress_lines, run_cli, untimed
from tests.examples import example, printed
from tests.index.build.test_sources import import_fails
from tests.lee import TYPES, Lee, jsonl_records, write_jsonl, write_parquet


@pytest.fixture(scope="module")
def lee(lee_docs: Lee) -> Lee:
    return lee_docs  # the session's, read-only


# ------------------------------------------------------------------------------------------------ writers


def csv_rows(lee: Lee) -> list[list[str]]:
    rows = [["id", "text", *TYPES, "vector"]]
    for i, record in enumerate(jsonl_records(lee)):
        cells = [record["id"], record["text"], str(record["year"])]
        cells.append("" if record["tags"] is None else json.dumps(record["tags"]))
        cells += [record["lang"] or "", repr(record["known"]), "true" if record["long"] else "false"]
        cells += [record["published"], json.dumps(record["vector"])]
        assert len(cells) == len(rows[0]), i
        rows.append(cells)
    return rows


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerows(rows)
    data = out.getvalue().encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def import_ok(path: Path, data_dir: Path, name: str = "lee", *extra: object) -> tuple[Table, Payload, str]:
    result = run_cli("import", path, "--format", "documents", "--name", name, "--data-dir", data_dir, *extra)
    assert result.code == 0, result.err
    assert artifact.verify(data_dir / name).ok
    table = Table.load(data_dir / name)
    payload = Payload.open(data_dir / name)
    assert payload is not None
    return table, payload, result.out


def assert_documents(table: Table, payload: Payload, lee: Lee, rows: list[int] | None = None) -> None:
    """The table holds documents ``rows`` of ``lee`` in order: ids, text, fields, unit vectors."""
    rows = list(range(len(lee.ids))) if rows is None else rows
    n = len(rows)
    assert table.kind == "documents" and table.rows == n and len(payload) == n
    assert list(table.tokens[:n]) == [lee.ids[i] for i in rows]
    assert payload.ids(range(n)) == [lee.ids[i] for i in rows]
    assert payload.text(range(n)) == [lee.texts[i] for i in rows]
    assert payload.fields == TYPES
    assert payload.records(range(n)) == [lee.record(i) for i in rows]
    np.testing.assert_allclose(np.asarray(table.vectors), lee.unit()[rows], rtol=0, atol=2e-7)
    restored = np.asarray(table.vectors, dtype=np.float64) * np.asarray(table.norms)[:, None]
    np.testing.assert_allclose(restored, lee.vectors[rows], rtol=1e-6, atol=1e-7)
    order = np.random.default_rng(0).permutation(n)
    assert np.array_equal(payload.row_of([lee.ids[rows[i]] for i in order]), order)


# ------------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "csv.gz"])
def test_round_trip(tmp_path: Path, lee: Lee, kind: str) -> None:
    path = tmp_path / f"lee.{kind}"
    if kind == "jsonl":
        write_jsonl(path, jsonl_records(lee))
    elif kind == "parquet":
        write_parquet(path, lee)
    else:
        write_csv(path, csv_rows(lee))
    table, payload, out = import_ok(path, tmp_path / "data")
    assert_documents(table, payload, lee)
    fields = ", ".join(f"{name} {kind}" for name, kind in TYPES.items())
    assert f"documents: 300 (string ids from 'id'; text 'text'; fields: {fields})" in out

    info = table.manifest["documents"]
    assert (info["id_field"], info["id_type"], info["text_field"], info["vector_field"]) == (
        "id",
        "string",
        "text",
        "vector",
    )
    assert info["text_non_null"] == 300 and info["dim"] == 50
    for name, values in lee.fields.items():
        assert info["fields"][name] == {"type": TYPES[name], "non_null": sum(v is not None for v in values)}
    assert info["fields"]["tags"]["non_null"] == 300 - 28 and info["fields"]["lang"]["non_null"] == 300 - 24
    assert {PAYLOAD, ID_LOOKUP} <= set(table.manifest["files"])

    # The columns, for filters: Arrow arrays of the stored types, over the mapped file.
    assert payload.column("year").type == pa.int64() and payload.column("year").to_pylist() == lee.fields["year"]
    assert payload.column("published").type == pa.timestamp("us", tz="UTC")
    assert payload.column("published").to_pylist() == lee.fields["published"]
    assert payload.column("long").to_pylist() == lee.fields["long"]
    assert payload.column("tags").to_pylist() == lee.fields["tags"]
    assert payload.records([5, 2], fields=["id", "published", "known"]) == [
        {"id": lee.ids[i], "published": lee.record(i)["published"], "known": lee.fields["known"][i]} for i in (5, 2)
    ]
    # The table's word routes work on the ids.
    assert table.tokens.find("lee-042") == 42


def test_payload_errors_and_lookup_by_row_number(tmp_path: Path, lee: Lee) -> None:
    """Without an id field the ids are the row numbers (digit strings find them too); clear errors otherwise."""
    records = jsonl_records(lee)
    for record in records:
        record["doc"] = record.pop("id")
        record["embedding"] = record.pop("vector")
    path = write_jsonl(tmp_path / "noid.jsonl", records)
    table, payload, out = import_ok(path, tmp_path / "data", "rows", "--text-field", "text")
    assert "documents: 300 (row numbers as ids;" in out
    assert payload.id_type == "integer" and payload.ids([0, 299]) == [0, 299]
    assert payload.records([3])[0]["doc"] == lee.ids[3]
    assert np.array_equal(payload.row_of(["12", 7, np.int64(250)]), [12, 7, 250])
    assert np.array_equal(payload.row_of(np.array([3, 1])), [3, 1])
    passing = table.filter({"id": {"in": ["12", 7, 7.0, "+7", "x", 300, -1, 10**30]}})  # as the table reads ids
    assert passing.ids.tolist() == [7, 12] and table.filter({"id": {"ne": "007"}}).count == 299
    assert table.manifest["documents"]["vector_field"] == "embedding"
    with pytest.raises(UnknownDocument) as unknown:
        payload.row_of([5, "x", 300, -1, "lee-001", 2.5, 10**30])
    assert isinstance(unknown.value, UnknownToken) and unknown.value.code == "unknown_document"
    assert "no document with id 'x', 300, -1, 'lee-001', 2.5 and 1 more in table 'rows'" in unknown.value.message
    with pytest.raises(InvalidQuery, match="row 300 is outside the table's 300 rows"):
        payload.ids([0, 300])
    with pytest.raises(InvalidQuery, match="has no field 'nope'"):
        payload.records([0], fields=["year", "nope"])
    with pytest.raises(InvalidQuery, match="has no field 'nope'"):
        payload.column("nope")
    assert payload.row_of([]).shape == (0,)


def test_a_table_imported_with_a_field_named_id_refuses_a_filter_on_id(
    tmp_path: Path, lee: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table imported before the import refused a field named ``id`` beside the ids of another field: its
    filters named that field, so a filter's ``id`` is refused there rather than read as the documents' ids (which
    would pass other documents without a word); its other fields filter as before."""
    records = jsonl_records(lee)[:20]
    for i, record in enumerate(records):
        record["doc"], record["id"] = record["id"], f"group-{i % 3}"
    monkeypatch.setattr(documents_build, "ID_KEY", "\0")  # the import as it was: no field refused
    table, payload, _ = import_ok(
        write_jsonl(tmp_path / "old.jsonl", records), tmp_path / "data", "old", "--id-field", "doc"
    )
    assert payload.fields["id"] == "string" and payload.id_field == "doc"
    for spec in ({"id": "group-1"}, {"or": [{"year": 1990}, {"id": {"in": [lee.ids[1]]}}]}):
        with pytest.raises(
            InvalidQuery, match=r"filter(\.or\[1\])?\.id: the table has a field named 'id' beside its ids \('doc'\)"
        ):
            table.filter(spec)
    assert table.filter({"year": {"gte": 0}}).count == 20


def test_a_table_imported_with_a_field_named_and_or_not_says_no_filter_tests_it(
    tmp_path: Path, lee: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table imported before the import refused fields named ``and``, ``or`` or ``not``: a filter giving such a
    key a field's value is refused naming the field and what to do, not as a malformed combination; the keys
    still combine filters."""
    records = jsonl_records(lee)[:20]
    for i, record in enumerate(records):
        record["and"], record["not"] = f"group-{i % 3}", i
    monkeypatch.setattr(documents_build, "LOGICAL", ())  # the import as it was: no field refused
    table, payload, _ = import_ok(write_jsonl(tmp_path / "old.jsonl", records), tmp_path / "data", "old")
    assert payload.fields["and"] == "string" and payload.fields["not"] == "integer"
    for spec, key in (({"and": "group-1"}, "and"), ({"year": {"gte": 0}, "not": 3}, "not")):
        with pytest.raises(InvalidQuery, match=rf"filter\.{key}: the table has a field named '{key}', imported before"):
            table.filter(spec)
    assert table.filter({"and": [{"year": {"gte": 0}}, {"not": {"year": 1990}}]}).count == sum(
        1 for r in records if r["year"] != 1990
    )
    with pytest.raises(InvalidQuery, match=r"filter\.or: takes a non-empty list of filters"):
        table.filter({"or": "group-1"})  # no field of that name


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_string_offsets_of_a_slice(kind: pa.DataType) -> None:
    strings = pa.array(["a", "", "héllo", None, "xyz"], kind).slice(1, 3)
    offsets = string_offsets(strings)
    assert np.diff(offsets).tolist() == [0, len("héllo".encode()), 0]
    assert bytes(strings.buffers()[2])[offsets[1] : offsets[2]].decode() == "héllo"


def test_string_id_search_matches_a_dict(lee: Lee) -> None:
    """The vectorised binary search over sorted string ids, on the corpus's own words (with shared prefixes)."""
    words = sorted({w for text in lee.texts for w in text.split()}, key=lambda w: (len(w), w))
    words += ["é", "éa", "ü-über", "中文", "中"]
    ids = pa.array(words)
    order = sort_ids(ids)
    haystack = ids.take(pa.array(order))
    queries = [*words[::7], "", "zzzz-not-a-word", "Australia!!", "中文字", "é"]
    positions = search_sorted(haystack, pa.array(queries))
    row_of = {w: i for i, w in enumerate(words)}
    found = [int(order[p]) if p >= 0 else None for p in positions]
    assert found == [row_of.get(q) for q in queries]
    assert len(words) > 8000


def test_payload_open_is_none_for_a_words_table(tmp_path: Path, glove_raw: RawTable) -> None:
    lines = [
        t + " " + " ".join(map(repr, r.tolist()))
        for t, r in zip(glove_raw.tokens[:50], glove_raw.matrix[:50], strict=True)
    ]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n")
    assert run_cli("import", path, "--name", "words", "--data-dir", tmp_path / "data").code == 0
    assert Payload.open(tmp_path / "data" / "words") is None


def test_sniffing_and_options_need_documents(tmp_path: Path, lee: Lee) -> None:
    path = write_jsonl(tmp_path / "lee.jsonl", jsonl_records(lee)[:20])
    assert sniff_format(path) == "documents"
    _, payload, _ = import_ok(path, tmp_path / "data", "sniffed")
    assert len(payload) == 20
    glove = tmp_path / "g.txt"
    glove.write_text("a 1 2\nb 3 4\n")
    message = import_fails(glove, tmp_path / "data", "--id-field", "x")
    assert message.endswith(f"--id-field: only for --format documents, and {glove} reads as glove")


# ------------------------------------------------------------------------------------------------ passages


def markdown_files(directory: Path, lee: Lee) -> dict[str, str]:
    """Markdown and text files of real Lee paragraphs: sentences grouped 1-4 to a paragraph, with headings,
    runs of blank lines (some holding spaces), a CRLF file and a file in a sub-directory."""
    files: dict[str, str] = {}
    separators = ["\n\n", "\n  \n\n", "\n\t\n", "\n\n\n\n"]
    for f in range(6):
        parts = [f"# Lee document {f * 5}"]
        for d in range(f * 5, f * 5 + 5):
            sentences = re.split(r"(?<=\.) ", lee.texts[d])
            size = 1 + d % 4
            joiner = "\n" if d % 3 == 0 else " "  # some paragraphs span several lines
            parts += [joiner.join(sentences[i : i + size]) for i in range(0, len(sentences), size)]
        text = ""
        for i, part in enumerate(parts):
            text += part + (separators[i % len(separators)] if i < len(parts) - 1 else "\n")
        name = ["a.md", "b.txt", "sub/c.md", "d.md", "e.TXT", "f.md"][f]
        if f == 3:
            text = text.replace("\n", "\r\n")
        files[name] = text
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(text.encode())
    (directory / "screenshot.jpg").write_bytes((REPO / "docs" / "explorer-map.jpg").read_bytes())  # binary: skipped
    return files


@pytest.mark.parametrize("chunk_words", [1, 60, 250])
def test_passages_join_paragraphs_up_to_chunk_words(tmp_path: Path, lee: Lee, chunk_words: int) -> None:
    files = markdown_files(tmp_path, lee)
    table = passages_table(tmp_path, chunk_words).to_pylist()
    assert sorted({row["source"] for row in table}) == sorted(files)
    for source, text in files.items():
        rows = [row for row in table if row["source"] == source]
        assert [row["chunk"] for row in rows] == list(range(len(rows)))
        assert [row["id"] for row in rows] == [f"{source}#{i}" for i in range(len(rows))]
        # Paragraphs, found independently: what lies between blank lines, trimmed.
        spans, position = [], 0
        for block in re.split(r"(\r?\n[ \t]*\r?\n(?:[ \t]*\r?\n)*)", text):
            if block.strip() and not re.fullmatch(r"\s+", block):
                start = position + len(block) - len(block.lstrip())
                spans.append((start, start + len(block.strip()), len(block.split())))
            position += len(block)
        starts, ends = [s for s, _, _ in spans], [e for _, e, _ in spans]
        covered = []
        for row in rows:
            assert text[row["start"] : row["end"]] == row["text"]  # the offsets slice the file to the passage
            first, last = starts.index(row["start"]), ends.index(row["end"])  # boundaries are paragraph bounds
            covered += list(range(first, last + 1))
            words = sum(w for _, _, w in spans[first : last + 1])
            assert words == len(row["text"].split())
            assert words <= chunk_words or first == last
            if last + 1 < len(spans):  # greedy: the next paragraph would not have fitted
                assert words + spans[last + 1][2] > chunk_words
        assert covered == list(range(len(spans)))
    text = "one\n\ntwo three\n\n\nfour"
    assert [(p.start, p.end, p.words) for p in split_passages(text, 2)] == [(0, 3, 1), (5, 14, 2), (17, 21, 1)]
    assert [(p.start, p.end, p.words) for p in split_passages(text, 3)] == [(0, 14, 3), (17, 21, 1)]
    assert [(p.start, p.end, p.words) for p in paragraphs("  a b\n c\n\n\t\n d \n")] == [(2, 8, 3), (13, 14, 1)]


def test_directory_of_passages_needs_vectors(tmp_path: Path, lee: Lee) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    markdown_files(docs, lee)
    assert sniff_format(docs) == "documents"
    message = import_fails(docs, tmp_path / "data", "--format", "documents", "--chunk-words", "80")
    rows = passages_table(docs, 80).num_rows
    assert message == (
        f"embedding-index: error: {docs}: {rows} passages from 6 text files, but no vectors: embed them with "
        "--encoder TABLE (a table of --data-dir), or import a JSONL, Parquet or CSV file with each document's "
        "vector in a field (--vector-field, default 'vector', else 'embedding')"
    )
    (docs / "e.TXT").write_bytes(b"fine\n\ncaf\xe9\n")
    message = import_fails(docs, tmp_path / "data", "--format", "documents")
    assert message == (
        f"embedding-index: error: {docs / 'e.TXT'}:3: not UTF-8 text (byte 0xe9); use --encoding NAME for a file in "
        "another encoding (such as latin-1), --unicode-errors replace to substitute U+FFFD, or --drop-invalid to skip "
        "such files"
    )


# ------------------------------------------------------------------------------------------------ bad input


def _edit(lee: Lee, row: int, change: Callable[[dict[str, Any]], None]) -> list[str]:
    records = jsonl_records(lee)
    change(records[row])
    return [json.dumps(r) for r in records]


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda record: record.__setitem__(key, value)


def _bad_json(lee: Lee) -> list[str]:
    lines = [json.dumps(r) for r in jsonl_records(lee)]
    lines[60] = lines[60][:-30]
    return ["", *lines[:10], "   ", *lines[10:]]  # two blank lines: row 60 is on line 63


JSONL_CASES: dict[str, tuple[Callable[[Lee], list[str]], list[str], str]] = {
    # case: (lines of the file, extra options, the message after "docs.jsonl")
    "missing vector": (
        lambda lee: _edit(lee, 41, lambda r: r.pop("vector")),
        [],
        ":42: no vector ('vector' is missing or null)",
    ),
    "null vector": (lambda lee: _edit(lee, 0, _set("vector", None)), [], ":1: no vector ('vector' is missing or null)"),
    "ragged vector": (
        lambda lee: _edit(lee, 7, lambda r: r["vector"].pop()),
        [],
        ":8: vector 'vector' has 49 values, expected 50 (as most rows)",
    ),
    "empty vector": (lambda lee: _edit(lee, 9, _set("vector", [])), [], ":10: vector 'vector' is empty"),
    "NaN in vector": (
        lambda lee: _edit(lee, 100, lambda r: r["vector"].__setitem__(3, float("nan"))),
        [],
        ":101: vector 'vector' value 4 is NaN",
    ),
    "null in vector": (
        lambda lee: _edit(lee, 101, lambda r: r["vector"].__setitem__(0, None)),
        [],
        ":102: vector 'vector' value 1 is null",
    ),
    "beyond float32": (
        lambda lee: _edit(lee, 102, lambda r: r["vector"].__setitem__(1, 1e39)),
        [],
        ":103: vector 'vector' value 2 is 1e+39, beyond float32",
    ),
    "squares beyond float32": (
        lambda lee: _edit(lee, 103, lambda r: r["vector"].__setitem__(2, 1e20)),
        [],
        ":104: vector 'vector' has values too large to normalise in float32 (their squares overflow)",
    ),
    "zero vector": (lambda lee: _edit(lee, 5, _set("vector", [0.0] * 50)), [], ":6: vector 'vector' is all zeros"),
    "vector of strings": (
        lambda lee: _edit(lee, 3, _set("vector", "0.1 0.2")),
        [],
        ":4: field 'vector' is a string, but its first value (line 1) is a list of numbers",
    ),
    "duplicate id": (
        lambda lee: _edit(lee, 200, _set("id", "lee-003")),
        [],
        ":201: duplicate id 'lee-003', first at line 4",
    ),
    "empty id": (lambda lee: _edit(lee, 12, _set("id", "")), [], ":13: empty id"),
    "null id": (lambda lee: _edit(lee, 13, _set("id", None)), [], ":14: no id ('id' is missing or null)"),
    "id longer than max_token_chars": (  # no route could read, delete or search by it
        lambda lee: _edit(lee, 20, _set("id", "lee-" + "x" * (MAX_TOKEN_CHARS - 3))),
        [],
        f":21: id of 1,025 characters ('lee-{'x' * 52}...): the API names a document by at most 1,024 "
        "(max_token_chars)",
    ),
    "float ids": (
        lambda lee: [json.dumps({**r, "id": i + 0.5}) for i, r in enumerate(jsonl_records(lee))],
        [],
        ":1: the id field 'id' holds floats; ids are strings or integers",
    ),
    "string in an integer field": (
        lambda lee: _edit(lee, 50, _set("year", "1999")),
        [],
        ":51: field 'year' is a string, but its first value (line 1) is a number",
    ),
    "number in a list of strings": (
        lambda lee: _edit(lee, 30, _set("tags", ["a", 1])),
        [],
        ":31: field 'tags' is a list mixing numbers and strings",
    ),
    "unpaired surrogate": (
        lambda lee: _edit(lee, 9, _set("text", "x \ud800 y")),
        [],
        ":10: a string holds an unpaired surrogate escape",
    ),
    "integer beyond 64 bits": (
        lambda lee: _edit(lee, 40, _set("year", 2**64 + 1)),
        [],
        ":41: field 'year' holds an integer beyond 64 bits",
    ),
    "NaN in a float field": (
        lambda lee: _edit(lee, 70, _set("known", float("nan"))),
        [],
        ":71: field 'known' is NaN or infinite",
    ),
    "object field": (
        lambda lee: _edit(lee, 20, _set("meta", {"a": 1})),
        [],
        ":21: field 'meta' holds objects; a document field holds strings, integers, floats, booleans, timestamps "
        "or lists of strings",
    ),
    "text that is a number": (
        lambda lee: [json.dumps({**r, "text": len(r["text"])}) for r in jsonl_records(lee)],
        [],
        ":1: the text field 'text' holds integers, not strings",
    ),
    "bad JSON": (_bad_json, [], ":63: bad JSON: "),
    "not an object": (
        lambda lee: [*_edit(lee, 0, lambda r: None)[:5], "[1, 2]"],
        [],
        ":6: not a JSON object but a list of numbers",
    ),
    "repeated key": (
        lambda lee: [*_edit(lee, 0, lambda r: None)[:5], '{"id": "x", "id": "y"}'],
        [],
        ":6: field 'id' appears twice in the object",
    ),
    "two objects on a line": (
        lambda lee: (lambda lines: [*lines[:8], lines[8] + " " + lines[9], *lines[10:]])(_edit(lee, 0, lambda r: None)),
        [],
        ":9: bad JSON: Extra data (column",
    ),
    "no such id field": (
        lambda lee: _edit(lee, 0, lambda r: None),
        ["--id-field", "doc"],
        ": --id-field 'doc': no such field",
    ),
    "no such text field": (
        lambda lee: _edit(lee, 0, lambda r: None),
        ["--text-field", "body"],
        ": --text-field 'body': no such field",
    ),
    "no such vector field": (
        lambda lee: _edit(lee, 0, lambda r: None),
        ["--vector-field", "emb"],
        ": --vector-field 'emb': no such field; the fields are 'id', 'text', 'year', 'tags', 'lang', 'known', "
        "'long', 'published', 'vector'",
    ),
    "a field named id beside the ids": (
        lambda lee: _edit(lee, 0, lambda r: None),
        ["--id-field", "lang"],
        ": a field named 'id' beside the ids of --id-field 'lang': a filter's 'id' is the documents' ids; rename "
        "the field, or make it the ids (--id-field id)",
    ),
    "a field named not": (
        lambda lee: _edit(lee, 2, _set("not", "x")),
        [],
        ": a field named 'not': a filter's 'not' combines filters, so no filter could test the field; rename it",
    ),
    "two options, one field": (
        lambda lee: _edit(lee, 0, lambda r: None),
        ["--text-field", "id"],
        ": field 'id' is named for two of --id-field, --text-field, --vector-field",
    ),
    "no vectors at all": (
        lambda lee: [json.dumps({"id": i, "text": t}) for i, t in zip(lee.ids, lee.texts, strict=True)],
        [],
        ": no vector field ('vector' or 'embedding'; name yours with --vector-field): documents need a vector each, "
        "from your own encoder or embedded here from their text with --encoder TABLE; the fields are 'id', 'text'",
    ),
    "empty file": (lambda lee: ["", "  "], [], ": empty file: no documents"),
    "blank lines before a NaN": (
        lambda lee: (lambda lines: ["", *lines[:5], "", " \t", *lines[5:]])(
            _edit(lee, 100, lambda r: r["vector"].__setitem__(0, float("inf")))
        ),
        [],
        ":104: vector 'vector' value 1 is infinite",
    ),
    "every line bad": (lambda lee: ["", "not JSON", "{oops"], [], ":2: bad JSON: Expecting value (column 1)"),
    "a JSON array": (
        lambda lee: ["[", *_edit(lee, 0, lambda r: None)[:3], "]"],
        [],
        ":1: a JSON array, not JSON Lines",
    ),
}
FILE_PROBLEMS = {"float ids", "object field", "text that is a number", "a JSON array"}  # not one row's fault


@pytest.mark.parametrize("case", sorted(JSONL_CASES))
def test_bad_jsonl_fails_with_file_and_line(tmp_path: Path, lee: Lee, case: str) -> None:
    make, extra, expected = JSONL_CASES[case]
    path = write_jsonl(tmp_path / "docs.jsonl", [], make(lee))
    data_dir = tmp_path / "data"
    message = import_fails(path, data_dir, "--format", "documents", *extra)
    assert message.startswith(f"embedding-index: error: {path}{expected}"), message
    row_problem = expected.split(":")[1].isdigit() and case not in FILE_PROBLEMS
    assert message.endswith("(use --drop-invalid to skip such rows)") == row_problem, message
    assert not data_dir.exists() or not any(data_dir.iterdir())


@pytest.mark.parametrize("where", ["text", "id", "tags", "lang"])
def test_bytes_that_are_not_utf8_are_refused_with_their_line_or_dropped(tmp_path: Path, lee: Lee, where: str) -> None:
    """A document's bytes that are not UTF-8 (a Latin-1 'é'), in its text, id or any field: the line is named, as
    any line's problem is, and --drop-invalid skips it; nothing undecodable reaches the table."""
    records = jsonl_records(lee)[:20]
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in records]
    value = records[7][where]
    swapped = json.dumps(value[0] if where == "tags" else value, ensure_ascii=False).encode()
    lines[7] = lines[7].replace(swapped, swapped[:-1] + b"caf\xe9" + swapped[-1:], 1)
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    data_dir = tmp_path / "data"
    message = import_fails(path, data_dir, "--format", "documents")
    assert message.startswith(f"embedding-index: error: {path}:8: not UTF-8 text (byte 0xe9 at column"), message
    assert (
        run_cli("import", path, "--format", "documents", "--name", "t", "--data-dir", data_dir, "--drop-invalid").code
        == 0
    )
    table = Table.load(data_dir / "t")
    assert table.rows == 19 and table.payload is not None
    assert [r["id"] for r in table.payload.records(range(19), ["id"])] == [
        r["id"] for i, r in enumerate(records) if i != 7
    ]


def test_long_integers_within_64_bits_stay_integers(tmp_path: Path, lee: Lee) -> None:
    """Integers of 19 digits within 64 bits (and such digits in a text) are read exactly, as integers."""
    records = jsonl_records(lee)[:10]
    records[3]["year"], records[4]["year"] = 2**63 - 1, -(2**63)
    records[5]["text"] = "call 12345678901234567890123 now"
    path = write_jsonl(tmp_path / "docs.jsonl", records)
    assert run_cli("import", path, "--format", "documents", "--name", "t", "--data-dir", tmp_path / "data").code == 0
    payload = Table.load(tmp_path / "data" / "t").payload
    assert payload is not None and payload.fields["year"] == "integer"
    assert [r["year"] for r in payload.records([3, 4], ["year"])] == [2**63 - 1, -(2**63)]


def test_a_parquet_string_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    """Parquet's strings are not checked as read: a column holding other bytes is refused, not stored."""
    path = tmp_path / "latin.parquet"
    names = pa.array([b"caf\xe9", b"tea"], type=pa.binary()).cast(pa.string(), safe=False)
    pq.write_table(pa.table({"id": ["a", "b"], "name": names, "vector": [[1.0, 2.0], [3.0, 4.0]]}), path)
    message = import_fails(path, tmp_path / "data", "--format", "documents")
    assert message.startswith(f"embedding-index: error: {path}: cannot read the Parquet file") and "UTF8" in message


@pytest.mark.parametrize("chunk", [1, 5000, 8 << 20])
def test_jsonl_blocks_do_not_change_the_result(tmp_path: Path, lee: Lee, chunk: int, monkeypatch) -> None:
    """Blocks of lines are parsed apart; a field typed apart by two blocks is typed as for the whole file. A list
    that starts with a null keeps it, whether its block or the whole file is parsed (pyarrow's parser leaves such
    nulls out when it infers the types, apache/arrow#51305)."""
    monkeypatch.setattr(documents_source, "CHUNK_BYTES", chunk)
    records = jsonl_records(lee)
    records[0]["tags"] = [None, "sydney"]
    for i, record in enumerate(records):
        record["note"] = "2001-02-03" if i < 150 else "n/a"  # dates in the first blocks, then text: strings
        record["weight"] = i if i < 200 else i + 0.5  # integers, then floats: floats
        record["since"] = None if i < 250 else "2001-02-03T04:05:06.5+01:00"  # nulls, then times: timestamps
    lines = [json.dumps(r) for r in records]
    path = write_jsonl(tmp_path / "docs.jsonl", [], [*lines[:100], "", *lines[100:]])
    table, payload, _ = import_ok(path, tmp_path / "data")
    assert payload.fields == {**TYPES, "note": "string", "weight": "float", "since": "timestamp"}
    assert payload.column("note").to_pylist() == [r["note"] for r in records]
    assert payload.column("weight").to_pylist() == [float(r["weight"]) for r in records]
    assert payload.records([249, 299], fields=["since"]) == [{"since": None}, {"since": "2001-02-03T03:05:06.5Z"}]
    assert payload.records([0], fields=["tags"]) == [{"tags": [None, "sydney"]}]
    assert payload.ids(range(300)) == lee.ids and payload.text(range(300)) == lee.texts
    np.testing.assert_allclose(np.asarray(table.vectors), lee.unit(), rtol=0, atol=2e-7)


def test_parquet_and_csv_types(tmp_path: Path, lee: Lee) -> None:
    """Parquet's own types map onto the field types; CSV cells are typed by what all of a column's cells are."""
    offset = timezone(timedelta(hours=2))
    table = pa.table(
        {
            "id": pa.array(range(1000, 1300), pa.uint32()),
            "body": pa.array(lee.texts).dictionary_encode(),
            "embedding": [v.tolist() for v in lee.vectors.astype(np.float64)],
            "day": pa.array([date(2001, 1, 1) + timedelta(days=i) for i in range(300)], pa.date32()),
            "local": pa.array(
                [datetime(2001, 5, 1, 12) + timedelta(seconds=i) for i in range(300)], pa.timestamp("ns")
            ),
            "east": pa.array([datetime(2001, 5, 1, 12, tzinfo=offset)] * 300, pa.timestamp("s", tz="+02:00")),
            "ratio": pa.array(lee.fields["known"], pa.float32()),
            "big": pa.array(lee.texts, pa.large_string()),
            "kinds": pa.array(lee.fields["tags"], pa.large_list(pa.string())),
            "flag": pa.array(lee.fields["long"]),
        }
    )
    pq.write_table(table, tmp_path / "typed.parquet")
    _, payload, _ = import_ok(tmp_path / "typed.parquet", tmp_path / "data", "typed", "--text-field", "body")
    assert payload.id_type == "integer" and payload.text_field == "body"
    assert payload.fields == {
        "day": "timestamp",
        "local": "timestamp",
        "east": "timestamp",
        "ratio": "float",
        "big": "string",
        "kinds": "string_list",
        "flag": "boolean",
    }
    assert payload.records([2])[0] == {
        "day": "2001-01-03T00:00:00Z",
        "local": "2001-05-01T12:00:02Z",
        "east": "2001-05-01T10:00:00Z",
        "ratio": float(np.float32(lee.fields["known"][2])),
        "big": lee.texts[2],
        "kinds": lee.fields["tags"][2],
        "flag": lee.fields["long"][2],
    }
    assert np.array_equal(payload.row_of([1005, "1299"]), [5, 299]) and payload.text([7]) == [lee.texts[7]]

    header = ["id", "code", "count", "flag", "when", "ratio", "mixed", "huge", "vector"]
    rows = [header]
    for i in range(300):
        code = f"{i:03d}"  # leading zeros: text
        mixed = str(i) if i < 299 else "n/a"  # one cell is not a number: a string field
        when = f"2001-02-{1 + i % 28:02d}" if i % 5 else ""
        huge = str(i) if i < 299 else str(2**64 + 1)  # one whole number beyond 64 bits: a string field, as written
        vector = json.dumps(lee.vectors[i].tolist())
        flag = ["True", "false"][i % 2]
        rows.append([str(i + 1), code, str(i * 7), flag, when, f"{i / 3:.6g}", mixed, huge, vector])
    _, payload, _ = import_ok(write_csv(tmp_path / "typed.csv", rows), tmp_path / "data", "csv")
    assert payload.id_type == "integer" and payload.text_field is None
    assert payload.fields == {
        "code": "string",
        "count": "integer",
        "flag": "boolean",
        "when": "timestamp",
        "ratio": "float",
        "mixed": "string",
        "huge": "string",
    }
    assert payload.records([0, 7]) == [
        {"code": "000", "count": 0, "flag": True, "when": None, "ratio": 0.0, "mixed": "0", "huge": "0"},
        {
            "code": "007",
            "count": 49,
            "flag": False,
            "when": "2001-02-08T00:00:00Z",
            "ratio": float("2.33333"),
            "mixed": "7",
            "huge": "7",
        },
    ]
    assert payload.records([299], ["huge"]) == [{"huge": "18446744073709551617"}]
    assert payload.text([0]) == [None] and np.array_equal(payload.row_of([300, 1]), [299, 0])


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # nothing said beside the error
def test_bad_csv_and_parquet_name_the_line_or_row(tmp_path: Path, lee: Lee) -> None:
    rows = csv_rows(lee)
    rows[3][1] = 'A quoted "text"\nover two lines, with a comma'  # row 2 spans lines 4 and 5
    rows[11][-1] = json.dumps(json.loads(rows[11][-1])[:-2])  # row 10: line 13
    path = write_csv(tmp_path / "docs.csv.gz", rows)
    message = import_fails(path, tmp_path / "data")
    assert message == (
        f"embedding-index: error: {path}:13: vector 'vector' has 48 values, expected 50 (as most rows) "
        "(use --drop-invalid to skip such rows)"
    )
    rows = csv_rows(lee)
    rows[3][1] = "two\nlines"
    rows[20] = rows[20][:4]
    rows[30][3] = '["a", 3'  # not JSON
    path = cells = write_csv(tmp_path / "cells.csv", rows)
    message = import_fails(path, tmp_path / "data")
    assert (
        message
        == f"embedding-index: error: {path}:22: 4 cells, the header has 9 (use --drop-invalid to skip such rows)"
    )
    _, payload, out = import_ok(path, tmp_path / "data", "cells", "--drop-invalid")
    assert (
        len(payload) == 298 and "line 22: 4 cells, the header has 9; line 32: field 'tags' is not a JSON array" in out
    )

    # Rows that are not UTF-8 (one with a cell too many too: said once), a record over two lines named by its first:
    # such rows are dropped with --drop-invalid, as any bad row; a header that is not UTF-8 refuses the file
    latin = tmp_path / "latin.csv"
    lines = cells.read_bytes().split(b"\n")
    lines[7] += b",extra caf\xe9"
    lines[5] = lines[5].replace(b",", b",caf\xe9 ", 1)
    lines[4] = lines[4].replace(b"lines", b"lin\xe9s", 1)  # the second line of record 4 (lines 4 and 5)
    latin.write_bytes(b"\n".join(lines))
    hint = " (use --drop-invalid to skip such rows)"
    assert (
        import_fails(latin, tmp_path / "data") == f"embedding-index: error: {latin}:4: not UTF-8 text (byte 0xe9){hint}"
    )
    _, payload, out = import_ok(latin, tmp_path / "data", "latin", "--drop-invalid")
    said = "; ".join(f"line {n}: not UTF-8 text (byte 0xe9)" for n in (4, 6, 8))
    assert len(payload) == 295 and f"first: {said}; line 22: 4 cells" in out, out
    kept = [r["id"] for r in payload.records(range(len(payload)), ["id"])]
    assert kept == [row[0] for i, row in enumerate(csv_rows(lee)) if i not in (0, 3, 4, 6, 20, 30)]
    head = tmp_path / "head.csv"
    head.write_bytes(lines[0].replace(b"text", b"t\xe9xt") + b"\n" + b"\n".join(lines[1:]))
    message = import_fails(head, tmp_path / "data", "--drop-invalid")
    assert message == f"embedding-index: error: {head}:1: not UTF-8 text (byte 0xe9)"

    vectors = lee.vectors.copy()
    vectors[17, 4] = np.nan
    path = write_parquet(tmp_path / "docs.parquet", lee, vectors)
    message = import_fails(path, tmp_path / "data")
    assert message == (
        f"embedding-index: error: {path}: row 18: vector 'vector' value 5 is NaN (use --drop-invalid to skip such rows)"
    )


def test_csv_cells_of_megabytes(tmp_path: Path, lee: Lee) -> None:
    """A document's text of 9 MB (more than twice the block pyarrow parses CSV in) is read whole; a bad row after a cell
    longer than Python's csv field limit (128 KiB) is named by its line, as any bad row."""
    rows = csv_rows(lee)
    book = " ".join(lee.texts) * 32
    assert len(book.encode()) > 9_000_000
    rows[5][1] = book
    _, payload, _ = import_ok(write_csv(tmp_path / "book.csv", rows), tmp_path / "data", "book")
    assert len(payload) == 300 and payload.text([4]) == [book] and payload.text([5]) == [lee.texts[5]]

    rows[5][1] = book[:200_000]
    rows[40][-1] = json.dumps(json.loads(rows[40][-1])[:-1])  # record 41: line 41 (the header is line 1)
    path = write_csv(tmp_path / "long-cell.csv", rows)
    assert import_fails(path, tmp_path / "data") == (
        f"embedding-index: error: {path}:41: vector 'vector' has 49 values, expected 50 (as most rows) "
        "(use --drop-invalid to skip such rows)"
    )


def test_a_bad_csv_rows_line_is_found_in_little_memory(tmp_path: Path, lee: Lee) -> None:
    """The line of a bad CSV row is found by a pass of Python's csv module over the text as it is decoded, a few KiB
    at a time: the whole text decoded at once into a StringIO (four bytes a character) took five times the file."""
    header, *body = csv_rows(lee)
    rows = [header, *([f"{row[0]}-{n}", *row[1:]] for n in range(12) for row in body)]
    rows[-2][-1] = json.dumps(json.loads(rows[-2][-1])[:-1])  # the last record but one: its line, as it is one
    path = write_csv(tmp_path / "many.csv", rows)
    tracemalloc.start()
    try:
        message = import_fails(path, tmp_path / "data")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message == (
        f"embedding-index: error: {path}:{len(rows) - 1}: vector 'vector' has 49 values, expected 50 (as most rows) "
        "(use --drop-invalid to skip such rows)"
    )
    size = path.stat().st_size  # the import holds about 3.5 times it before the pass (4.7 at its peak), 8.8 with
    assert size > 5_000_000 and peak < 6 * size, (size, peak)  # the StringIO


def test_lines_checked_one_by_one_are_counted_as_the_file_has_them(tmp_path: Path) -> None:
    """A file pyarrow refuses is checked line by line, its progress counting the file's lines (the empty piece
    after the last newline is none), as the reading of a good file counts its rows."""
    path = tmp_path / "three.jsonl"
    path.write_bytes(b'{"id": "a", "vector": [1, 0]}\n{oops\n{"id": "b", "vector": [0, 1]}\n')
    with progress_lines() as stream:
        rows = documents_source.read_jsonl(path)
    assert rows.problems == [(2, "bad JSON: Expecting property name enclosed in double quotes (column 2)")]
    assert "embedding-index: checking three.jsonl line by line: done (3 of 3 rows) in " in stream.getvalue()


def test_long_digits_in_a_string_leave_the_file_to_pyarrow_s_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Digits of an integer beyond 64 bits inside a string (a man page's "between [0, 18446744073692774399]") are
    text, not a value pyarrow would round: the file is read in blocks by pyarrow, not checked line by line in
    Python (which a 300,000-line file of man page lines took 8 s of its 18 s import for); the same digits as a
    value still have their line checked, and named."""
    checked: list[Path] = []
    check = documents_source._checked_jsonl
    monkeypatch.setattr(
        documents_source, "_checked_jsonl", lambda path, data: checked.append(path) or check(path, data)
    )
    texts = ["kernel.shmmax must be between [0, 18446744073692774399]", "-12345678901234567890 and 1234567890123456789"]
    lines = [json.dumps({"id": f"d{i}", "text": text, "n": i, "vector": [1, i]}) for i, text in enumerate(texts * 3)]
    path = tmp_path / "digits.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rows = documents_source.read_jsonl(path)
    assert checked == [] and rows.table.column("text").to_pylist() == texts * 3 and not rows.problems
    path.write_text("\n".join([*lines[:4], json.dumps({"id": "big", "n": 2**64 + 1, "vector": [1, 1]})]) + "\n")
    rows = documents_source.read_jsonl(path)
    assert checked == [path] and rows.problems == [(5, "field 'n' holds an integer beyond 64 bits")]


def test_drop_invalid_skips_and_reports(tmp_path: Path, lee: Lee) -> None:
    records = jsonl_records(lee)
    lines = [json.dumps(r) for r in records]
    lines[10] = lines[10][:50]  # bad JSON
    lines[20] = json.dumps({**records[20], "id": "lee-002"})  # duplicate of row 2: row 2 stays
    records[30]["vector"][0] = float("nan")
    lines[30] = json.dumps(records[30])
    lines[40] = json.dumps({**records[40], "year": "MMI"})  # wrong type
    lines[299] = json.dumps({**records[299], "vector": records[299]["vector"][:10]})  # ragged
    path = write_jsonl(tmp_path / "docs.jsonl", [], lines)
    message = import_fails(path, tmp_path / "data", "--format", "documents")
    assert message.startswith(f"embedding-index: error: {path}:11: bad JSON:")
    table, payload, out = import_ok(path, tmp_path / "data", "lee", "--drop-invalid")
    kept = [i for i in range(300) if i not in (10, 20, 30, 40, 299)]
    assert_documents(table, payload, lee, kept)
    reasons = table.manifest["cleaning"]["invalid_rows"]
    assert table.manifest["cleaning"]["invalid_rows_dropped"] == 5 and len(reasons) == 5
    assert reasons[0].startswith("line 11: bad JSON: ")
    assert reasons[1:] == [
        "line 21: duplicate id 'lee-002', first at line 3",
        "line 31: vector 'vector' value 1 is NaN",
        "line 41: field 'year' is a string, but its first value (line 1) is a number",
        "line 300: vector 'vector' has 10 values, expected 50 (as most rows)",
    ]
    assert f"dropped 5 invalid rows (--drop-invalid), first: {'; '.join(reasons)}" in out


def test_rows_dropped_are_counted_as_english_counts_them(tmp_path: Path) -> None:
    """With --drop-invalid, one row dropped is "1 invalid row" (its vector of "1 value"); every row invalid, one or
    more, refuses the import, whether the reader refused them (bad JSON) or their checks did (NaN)."""
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b'{"id": "a", "vector": [1, 2]}\n{"id": "b", "vector": [3, 4]}\n{"id": "c", "vector": [5]}\n')
    _, _, out = import_ok(path, tmp_path / "data", "t", "--drop-invalid")
    said = (
        "dropped 1 invalid row (--drop-invalid), first: line 3: vector 'vector' has 1 value, expected 2 (as most rows)"
    )
    assert said in out, out
    bad_json = b"{oops"
    nan = [b'{"id": "%s", "vector": [NaN, 1]}' % name for name in (b"a", b"b")]
    for lines, said in [
        ([bad_json], "the only row is invalid, line 1: bad JSON: "),
        ([bad_json, bad_json], "all 2 rows are invalid, line 1: bad JSON: "),
        (nan[:1], "the only row is invalid, line 1: vector 'vector' value 1 is NaN"),
        (nan, "all 2 rows are invalid, line 1: vector 'vector' value 1 is NaN"),
    ]:
        path.write_bytes(b"\n".join(lines) + b"\n")
        message = import_fails(path, tmp_path / "data", "--format", "documents", "--drop-invalid", "--force", name="t")
        assert f"{path}: no documents left: {said}" in message, message


def test_a_null_in_a_vector_is_named_with_its_line_or_dropped(tmp_path: Path, lee: Lee) -> None:
    """A null value in a vector is a bad row, named by its line (row for Parquet) and the value, in each format, or
    dropped and counted with --drop-invalid. JSON Lines whose first list starts with a null (which pyarrow's parser
    leaves out of the list's values when it infers the types, apache/arrow#51305) are read whole, also when the
    file is checked line by line."""
    data_dir, hint = tmp_path / "data", " (use --drop-invalid to skip such rows)"
    null = "vector 'vector' value 1 is null"
    records = jsonl_records(lee)
    records[0]["vector"][0] = None
    lines = [json.dumps(r) for r in records]
    for name, spoilt, dropped in (("block", lines, [0]), ("checked", [*lines[:5], "{oops", *lines[6:]], [0, 5])):
        path = write_jsonl(tmp_path / f"{name}.jsonl", [], spoilt)
        message = import_fails(path, data_dir, "--format", "documents")
        assert message == f"embedding-index: error: {path}:1: {null}{hint}"
        _, payload, out = import_ok(path, data_dir, name, "--drop-invalid")
        assert payload.ids(range(len(payload))) == [t for i, t in enumerate(lee.ids) if i not in dropped]
        assert f"dropped {counted(len(dropped), 'invalid row')} (--drop-invalid), first: line 1: {null}" in out, out

    rows = csv_rows(lee)
    rows[3][-1] = json.dumps([None, *json.loads(rows[3][-1])[1:]])  # row 3: line 4
    path = write_csv(tmp_path / "nulls.csv", rows)
    assert import_fails(path, data_dir) == f"embedding-index: error: {path}:4: {null}{hint}"

    vectors: list[list[float | None] | None] = lee.vectors.tolist()
    vectors[17][4] = None  # type: ignore[index]
    vectors[18] = None
    table = pq.read_table(write_parquet(tmp_path / "docs.parquet", lee))
    path = tmp_path / "nulls.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("vector"), "vector", pa.array(vectors)), path)
    message = import_fails(path, data_dir)
    assert message == f"embedding-index: error: {path}: row 18: vector 'vector' value 5 is null{hint}"
    _, payload, out = import_ok(path, data_dir, "parquet", "--drop-invalid")
    assert len(payload) == 298
    assert "first: row 18: vector 'vector' value 5 is null; row 19: no vector ('vector' is missing or null)" in out


def test_lists_of_nulls_alone_keep_their_nulls(tmp_path: Path, lee: Lee, monkeypatch) -> None:
    """Lists holding only nulls throughout a block (typed lists of nulls, of which pyarrow's parser keeps one null
    each, even given the types, apache/arrow#51305) keep them, whether blocks or checked lines are parsed: a
    field of them holds strings (as ``[null]`` does); a vector of them is named. The table read first is let go
    before the lines are parsed again."""
    data_dir, records = tmp_path / "data", jsonl_records(lee)
    for record in records:
        record["tags"] = [None, None]
    lines = [json.dumps(r) for r in records]
    for name, spoilt in (("block", lines), ("checked", [*lines[:5], "{oops", *lines[6:]])):
        _, payload, out = import_ok(
            write_jsonl(tmp_path / f"{name}.jsonl", [], spoilt), data_dir, name, "--drop-invalid"
        )
        assert payload.records([0, 9], fields=["tags"]) == [{"tags": [None, None]}] * 2 and "tags string_list" in out
    allocated: list[int] = []
    parse = documents_source.pajson.read_json
    monkeypatch.setattr(
        documents_source.pajson,
        "read_json",
        lambda *a, **k: allocated.append(pa.total_allocated_bytes()) or parse(*a, **k),
    )
    table = documents_source._read_json(pa.py_buffer("\n".join(lines).encode()))
    assert len(allocated) == 2 and allocated[1] - allocated[0] < table.nbytes / 10, (allocated, table.nbytes)
    monkeypatch.undo()
    path = write_jsonl(tmp_path / "nulls.jsonl", [{"id": i, "vector": [None, None]} for i in range(3)])
    message = import_fails(path, data_dir, "--format", "documents")
    assert (
        message
        == f"embedding-index: error: {path}:1: vector 'vector' value 1 is null (use --drop-invalid to skip such rows)"
    )


def test_failed_import_leaves_the_existing_table_untouched(tmp_path: Path, lee: Lee) -> None:
    data_dir = tmp_path / "data"
    good = write_jsonl(tmp_path / "good.jsonl", jsonl_records(lee))
    import_ok(good, data_dir)
    before = {p.name: p.read_bytes() for p in (data_dir / "lee").iterdir()}
    for bad_id, problem in [("lee-000", "duplicate id 'lee-000', first at line 1"), ("x" * 2000, "id of 2,000")]:
        bad = write_jsonl(tmp_path / "bad.jsonl", [], _edit(lee, 150, _set("id", bad_id)))
        message = import_fails(bad, data_dir, "--format", "documents", "--force", name="lee")
        assert f"{bad}:151: {problem}" in message
        assert {p.name: p.read_bytes() for p in (data_dir / "lee").iterdir()} == before
    assert artifact.list_tables(data_dir) == ["lee"]
    assert not list(data_dir.glob(".tmp-*")) and not list(data_dir.glob(".old-*"))
    table = Table.load(data_dir / "lee")
    payload = Payload.open(data_dir / "lee")
    assert payload is not None
    assert_documents(table, payload, lee)
    # A payload file that disagrees with the manifest is caught like any other file.
    (data_dir / "lee" / PAYLOAD).write_bytes(before[PAYLOAD][:-8] + b"\0" * 8)
    assert not artifact.verify(data_dir / "lee").ok


def test_real_command(tmp_path: Path, lee: Lee) -> None:
    """``python -m index import`` as a user runs it: progress on stderr, the summary on stdout."""
    path = write_jsonl(tmp_path / "lee.jsonl.gz", jsonl_records(lee))
    data_dir = tmp_path / "data"
    command = [sys.executable, "-m", "index", "import", path, "--format", "documents", "--name", "lee"]
    started = time.perf_counter()
    done = subprocess.run([*command, "--data-dir", data_dir], capture_output=True, text=True, timeout=120, cwd=REPO)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    assert "built 'lee': 300 rows x 50 (flat, recall@10 1.0)" in done.stdout
    assert "documents: 300 (string ids from 'id'; text 'text'; fields: year integer" in done.stdout
    assert "embedding-index: reading lee.jsonl.gz: done (300 of 300 rows)" in done.stderr
    table = Table.load(data_dir / "lee")
    payload = Payload.open(data_dir / "lee")
    assert payload is not None
    assert_documents(table, payload, lee)
    assert seconds < 60


def test_blank_line_numbers_match_a_split() -> None:
    """The line numbers messages give for JSON Lines rows skip the blank lines pyarrow skips."""

    def reference(data: bytes) -> list[int]:
        pieces = data.split(b"\n")[: -1 if data.endswith(b"\n") else None] if data else []
        return [i + 1 for i, piece in enumerate(pieces) if not piece.strip(b" \t\r")]

    rng = np.random.default_rng(1)
    cases = [b"\n", b"a\n \n\t\r\nb", b"  \nb\n\n", b"\r\n\r\na\r\n", b"a\n  "]
    cases += [bytes(rng.choice(list(b"ab \t\r\n\n\n"), size=int(rng.integers(0, 30)))) for _ in range(3000)]
    for data in cases:
        assert list(documents_source._blank_lines(data)) == reference(data), data


def test_the_documented_lee_example_and_payload_reads_print_what_the_docs_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/documents.md's script that writes the Lee corpus as ``lee.jsonl``, its import as the docs show it, and
    the ``Payload`` example over the table: the lines it prints, then its refusal of an id the table does not hold."""
    docs = "docs/documents.md"
    monkeypatch.chdir(tmp_path)
    exec(compile(example(docs, "lee-jsonl"), f"{docs}:lee-jsonl", "exec"), {})
    made = run_cli("import", "lee.jsonl", "--format", "documents", "--name", "lee", "--data-dir", "data")
    assert made.code == 0, made.err
    assert made.out.splitlines()[-1] == printed(docs, "lee-jsonl").splitlines()[-1]  # documents: 300 (...)
    lines, traceback = printed(docs, "payload").split("Traceback (most recent call last):\n")
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(UnknownDocument) as refused:
        exec(compile(example(docs, "payload"), f"{docs}:payload", "exec"), {})
    shown = [line.rstrip() for line in out.getvalue().splitlines()]  # the docs keep no trailing space
    assert shown == lines.splitlines()
    assert traceback.splitlines()[-1] == f"index.store.payload.UnknownDocument: {refused.value}"


Spoil = Callable[[dict[str, Any]], object] | None  # a change to a record, or None: the line cut short


def spoiled_lee(lines: list[str], name: str, spoils: dict[int, Spoil]) -> None:
    """docs/documents.md's ``lee.jsonl`` (``lines``) as ``name`` with a line spoiled for each of ``spoils``: a
    change to its record, or ``None`` to cut the line short within its text."""
    out = list(lines)
    for number, spoil in spoils.items():
        if spoil is None:
            line = out[number - 1]
            out[number - 1] = line[: line.index('"text": "') + 20]
        else:
            record = json.loads(out[number - 1])
            spoil(record)
            out[number - 1] = json.dumps(record)
    Path(name).write_text("\n".join(out) + "\n", encoding="utf-8")


def test_the_documented_bad_lee_files_are_refused_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/documents.md's refusals over the ``lee`` table its script writes and imports, each file ``lee.jsonl``
    with the line spoiled that the page names, and the table left as it was (``verify``); then the file of several
    spoiled lines imported with ``--drop-invalid``: run as written (``--quiet``), each prints the lines shown."""
    docs = "docs/documents.md"
    monkeypatch.chdir(tmp_path)
    exec(compile(example(docs, "lee-jsonl"), f"{docs}:lee-jsonl", "exec"), {})
    assert run_cli("import", "lee.jsonl", "--format", "documents", "--name", "lee").code == 0
    lines = Path("lee.jsonl").read_text(encoding="utf-8").splitlines()
    duplicate, null = {201: lambda r: r.update(id="lee-003")}, {42: lambda r: r["vector"].__setitem__(0, None)}
    words: dict[int, Spoil] = {51: lambda r: r.update(words=str(r["words"]))}
    spoiled_lee(lines, "duplicate.jsonl", duplicate)
    spoiled_lee(lines, "nan.jsonl", null)
    spoiled_lee(lines, "ragged.jsonl", {10: lambda r: r.update(vector=r["vector"][:48])})
    spoiled_lee(lines, "wrong-type.jsonl", words)
    spoiled_lee(lines, "bad-json.jsonl", {100: None})
    spoiled_lee(lines, "several.jsonl", {10: None, **null, **words, **duplicate})
    for block in ("lee-refusals", "lee-dropped"):
        runs = [line.removeprefix("$ ") for line in example(docs, block).splitlines() if line.startswith("$ ")]
        shown = re.split(r"^\$ .*\n", example(docs, block), flags=re.M)[1:]
        assert len(runs) == len(shown) >= 1, block
        for command, lines_shown in zip(runs, shown, strict=True):
            result = run_cli(*shlex.split(command)[1:])
            refused = lines_shown.startswith("embedding-index: error: ")
            assert result.code == (1 if refused else 0), (command, result.err)
            assert untimed((result.out + result.err).splitlines()) == untimed(lines_shown.splitlines()), command
