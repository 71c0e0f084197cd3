"""The delta's matrix of written documents, made again after each change (reusing the rows of the last one when
documents were only appended), always equals the one made from scratch: ids, unit rows and norms in write order."""

from __future__ import annotations

import copy
import json
import shutil
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from index.engine import delta as delta_module
from index.engine import documents
from index.engine.delta import Delta
from index.engine.keyword import LENGTHS
from index.engine.table import Table
from index.store import artifact
from index.store.payload import UnknownDocument
from index.store.rows import normalise
from index.store.writelog import LogMismatch, Record
from tests.index.engine.test_keyword import check_cut_once
from tests.lee import Lee


def fresh(delta: Delta) -> tuple[list[object], np.ndarray, np.ndarray]:
    docs = list(delta.documents.values())
    return [d.id for d in docs], np.vstack([d.vector for d in docs]), np.array([d.norm for d in docs], np.float32)


def test_the_matrix_after_appends_replacements_and_deletes(lee_data_dir: Path, lee_docs: Lee) -> None:
    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    vectors = lee_docs.vectors
    seq = 0

    def upsert(ids: list[str], rows: list[int]) -> None:
        nonlocal seq
        seq += 1
        docs = [
            {"id": i, "text": lee_docs.texts[r], "vector": vectors[r].tolist()} for i, r in zip(ids, rows, strict=True)
        ]
        delta.apply([Record(seq, 0, 0, {"op": "upsert", "documents": docs})])

    def delete(ids: list[str]) -> None:
        nonlocal seq
        seq += 1
        delta.apply([Record(seq, 0, 0, {"op": "delete", "ids": ids})])

    steps = [
        lambda: upsert([f"n{i}" for i in range(20)], list(range(20))),
        lambda: upsert(["n20", "n21"], [40, 41]),  # appended: the last matrix's rows reused
        lambda: upsert(["n3"], [99]),  # a written document replaced: it moves to the end
        lambda: delete(["n5", "lee-010"]),  # a written and an imported document deleted
        lambda: upsert(["n22"], [50]),
        lambda: delete([f"n{i}" for i in range(23)]),  # none left
        lambda: upsert(["n30"], [60]),
    ]
    for step in steps:
        step()
        snapshot = delta.snapshot()
        ids, matrix, norms = snapshot.matrix()
        if not snapshot.documents:
            assert ids == [] and matrix.shape == (0, table.dim)
            continue
        want_ids, want_matrix, want_norms = fresh(snapshot)
        assert ids == want_ids
        np.testing.assert_array_equal(matrix, want_matrix)
        np.testing.assert_array_equal(norms, want_norms)
        assert [d.id for d in snapshot.written_in_order()] == ids


def calls_made(run: Callable[[], object]) -> int:
    """The function calls (Python's and C's) ``run()`` makes: what a loop over every written document multiplies."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def test_a_write_beside_many_written_documents_reads_none_of_them_one_by_one(lee_data_dir: Path, lee_docs: Lee) -> None:
    """A write, the snapshot a search takes after it (its matrix made), the live keyword index a keyword search
    makes over it and a filter over the written documents make as many calls beside 200 written documents as
    beside 800: appended, replaced (it moves to the end) or deleted, no document is read one by one (at 40,000
    written documents a replacement's matrix took 70 ms, rebuilt row by row, the keyword index 490 ms, each
    document's counts gathered one by one, and a filter 320 ms, each document's fields read and its timestamp
    parsed)."""
    from index.engine.live_search import LiveKeyword

    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    vectors, texts = lee_docs.vectors, lee_docs.texts

    def calls(written: int) -> list[int]:
        delta = Delta(table.payload, table.rows, table.dim, 0)  # type: ignore[arg-type]

        def document(ident: str, i: int) -> dict[str, object]:
            fields = {
                "year": 1990 + i % 20,
                "tags": ["a", "b"][: i % 3],
                "published": f"{1990 + i % 20}-01-02T03:04:05Z",
            }
            return {
                "id": ident,
                "text": texts[i % len(texts)],
                "vector": vectors[i % len(vectors)].tolist(),
                "fields": fields,
            }

        delta.apply([Record(1, 0, 0, {"op": "upsert", "documents": [document(f"w{i}", i) for i in range(written)]})])
        spec = {"and": [{"year": {"gte": 2000}}, {"tags": {"in": ["b"]}}, {"published": {"lt": "2008-01-01"}}]}

        def searched(snapshot: Delta) -> np.ndarray:
            LiveKeyword(table, snapshot)
            return snapshot.passing(spec)

        searched(delta.snapshot())
        changes = [
            {"op": "upsert", "documents": [document("new", 13)]},
            {"op": "upsert", "documents": [document("w7", 14)]},
            {"op": "delete", "ids": ["w9"]},
        ]
        made = []
        for seq, body in enumerate(changes, 2):
            made.append(calls_made(lambda: searched((delta.apply([Record(seq, 0, 0, body)]), delta.snapshot())[1])))  # noqa: B023
            ids, matrix, _ = delta.matrix()
            assert ids == list(delta.documents) and len(matrix) == len(ids)
            np.testing.assert_array_equal(matrix, np.vstack([d.vector for d in delta.documents.values()]))
            passing = [
                d.fields["year"] >= 2000 and "b" in d.fields["tags"] and d.fields["published"] < "2008"
                for d in delta.documents.values()
            ]
            assert delta.passing(spec).tolist() == passing
        return made

    calls(100)  # what loads on first use (pyarrow's modules) loaded
    assert calls(200) == calls(800)


def test_a_log_replayed_at_once_looks_its_ids_up_once_and_holds_what_its_records_one_by_one_make(
    lee_data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log's records applied together (its replay at load) look the version's rows of their ids up in one call and
    normalise their vectors in one (a record at a time, 21,722 records of a log took 9.6 s to replay, 1.5 s
    together), and leave the delta as the records applied one by one do: the same documents in the same order,
    rows, norms and deletion mask, whatever was upserted, replaced, deleted and written again."""
    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    vectors, ids = lee_docs.vectors, lee_docs.ids
    records = []
    for seq in range(1, 41):
        if seq % 5 == 0:
            body: dict[str, object] = {"op": "delete", "ids": [f"w{seq - 3}", ids[seq], f"w{seq - 20}", "nobody"]}
        else:
            chosen = [f"w{seq}", f"w{seq // 2}", ids[seq + 40], f"w{seq - 10}"]  # new, written again, imported, gone
            body = {
                "op": "upsert",
                "documents": [
                    {"id": i, "text": f"text {seq} {i}", "vector": vectors[seq + j].tolist(), "fields": {"year": seq}}
                    for j, i in enumerate(dict.fromkeys(chosen))
                ],
            }
        records.append(Record(seq, 0, 0, body))
    one_by_one = Delta(table.payload, table.rows, table.dim, 0)
    for record in records:
        one_by_one.apply([record])
    looked_up = []
    find_rows = table.payload.find_rows
    monkeypatch.setattr(table.payload, "find_rows", lambda keys: looked_up.append(keys) or find_rows(keys))
    normalised = []
    monkeypatch.setattr(delta_module, "normalise", lambda rows: normalised.append(rows) or normalise(rows))
    together = Delta(table.payload, table.rows, table.dim, 0)
    together.replay(records)
    assert len(looked_up) == 1 and len(normalised) == 1
    assert list(together.documents) == list(one_by_one.documents) and together.seq == one_by_one.seq == 40
    for mine, theirs in zip(together.documents.values(), one_by_one.documents.values(), strict=True):
        assert (mine.id, mine.text, mine.fields, mine.norm) == (theirs.id, theirs.text, theirs.fields, theirs.norm)
        np.testing.assert_array_equal(mine.vector, theirs.vector)
    np.testing.assert_array_equal(together.deleted, one_by_one.deleted)
    for mine_part, theirs_part in zip(together.matrix(), one_by_one.matrix(), strict=True):
        np.testing.assert_array_equal(np.asarray(mine_part), np.asarray(theirs_part))


def test_keyword_search_after_each_change_equals_a_delta_made_at_once(lee_data_dir: Path, lee_docs: Lee) -> None:
    """The written documents' words are cut once each and kept across changes; after every change, BM25 over the
    delta equals that of a delta that applied the same records at once (which equals a fresh import:
    tests/service/test_live_search.py)."""
    from index.engine.live_search import LiveSource

    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None and table.keyword is not None
    growing = Delta(table.payload, table.rows, table.dim, 0)
    records: list[Record] = []
    texts = lee_docs.texts

    def record(body: dict[str, object]) -> None:
        records.append(Record(len(records) + 1, 0, 0, body))
        growing.apply(records[-1:])

    def upsert(ids: list[str], rows: list[int]) -> dict[str, object]:
        docs = [
            {"id": i, "text": texts[r], "vector": lee_docs.vectors[r].tolist()} for i, r in zip(ids, rows, strict=True)
        ]
        return {"op": "upsert", "documents": docs}

    queries = [" ".join(texts[r].split()[:10]) for r in (3, 40, 77, 150)]
    steps = [
        upsert([f"n{i}" for i in range(10)], list(range(3, 13))),
        upsert(["n10"], [40]),
        upsert(["n2"], [77]),  # a written document replaced
        {"op": "delete", "ids": ["n4", "lee-040"]},
        upsert(["lee-003"], [150]),  # an imported document replaced
        {"op": "delete", "ids": [f"n{i}" for i in range(11)]},
    ]
    for body in steps:
        record(body)
        at_once = Delta(table.payload, table.rows, table.dim, 0)
        at_once.apply(records)
        mine = LiveSource(table, growing.snapshot()).keyword
        theirs = LiveSource(table, at_once.snapshot()).keyword
        assert mine is not None and theirs is not None
        got, want = mine.search(queries, 20), theirs.search(queries, 20)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def without_lengths(source: Path, directory: Path) -> Path:
    """A copy of the table in ``source`` as built before its keyword index kept the documents' lengths."""
    shutil.copytree(source, directory)
    (directory / LENGTHS).unlink()
    manifest = json.loads((directory / artifact.MANIFEST).read_text())
    del manifest["files"][LENGTHS]
    manifest["keyword"]["files"].remove(LENGTHS)
    (directory / artifact.MANIFEST).write_text(json.dumps(manifest))
    return directory


def test_a_table_without_kept_lengths_searches_beside_writes_as_one_with_them(
    lee_data_dir: Path, lee_docs: Lee, tmp_path: Path
) -> None:
    """A table built before the lengths were kept loads and cuts its version's text once for them (the same
    counts); beside the same writes, its keyword searches answer as the table's that reads them, to the bit."""
    from index.engine.live_search import LiveSource, version_lengths

    kept = Table.load(lee_data_dir / "lee")
    old = Table.load(without_lengths(lee_data_dir / "lee", tmp_path / "lee"))
    assert kept.keyword is not None and kept.keyword.lengths is not None
    assert old.keyword is not None and old.keyword.lengths is None
    np.testing.assert_array_equal(version_lengths(old, old.keyword), kept.keyword.lengths)
    assert version_lengths(old, old.keyword) is version_lengths(old, old.keyword)  # cut once per loaded table
    texts = lee_docs.texts
    written = [{"id": f"n{i}", "text": texts[r], "vector": lee_docs.vectors[r].tolist()} for i, r in enumerate((3, 40))]
    records = [upsert(1, written[0]), upsert(2, written[1]), Record(3, 0, 0, {"op": "delete", "ids": ["lee-077"]})]
    queries = [" ".join(texts[r].split()[:10]) for r in (3, 40, 77, 150)]
    answers = []
    for table in (kept, old):
        assert table.payload is not None
        delta = Delta(table.payload, table.rows, table.dim, 0)
        delta.apply(records)
        live = LiveSource(table, delta.snapshot()).keyword
        assert live is not None
        answers.append(live.search(queries, 20))
    (kept_scores, kept_ids), (old_scores, old_ids) = answers
    assert (kept_ids[:, 0] >= 0).all()
    np.testing.assert_array_equal(old_ids, kept_ids)
    np.testing.assert_array_equal(old_scores, kept_scores)


def test_a_vector_search_beside_writes_makes_no_live_keyword_index(lee_data_dir: Path, lee_docs: Lee) -> None:
    """Diverse and plain vector searches beside writes never read the live keyword index, so never make it (its
    written documents cut, its version's lengths read); a hybrid search does."""
    from index.engine import door
    from index.engine.query import Query, Result

    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    delta.apply([upsert(1, {"id": "n1", "text": lee_docs.texts[5], "vector": lee_docs.vectors[5].tolist()})])
    snapshot = delta.snapshot()
    vector = lee_docs.vectors[5].tolist()
    answers = door.run(table, [Query(vector=vector, diversity=0.5), Query(vector=vector)], None, snapshot)
    assert all(isinstance(a, Result) and a.hits for a in answers)
    assert "keyword" not in snapshot._cache
    hybrid = Query(vector=vector, text=" ".join(lee_docs.texts[5].split()[:8]), mode="hybrid")
    (answer,) = door.run(table, [hybrid], None, snapshot)
    assert isinstance(answer, Result) and answer.hits and "keyword" in snapshot._cache


def test_the_live_probe_answers_as_a_live_search_of_one_hit(lee_data_dir: Path, lee_docs: Lee) -> None:
    """Mode hybrid's probe beside writes (``LiveKeyword.holds``, a look-up) says whether a whole live search of one
    hit finds a document, after each change: words held only by deleted, replaced or written-then-deleted documents,
    words given twice, no word at all; and with version rows whose recovered counts round to 0."""
    from index.engine.live_search import LiveKeyword, LiveSource

    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None and table.keyword is not None
    texts, ids = lee_docs.texts, lee_docs.ids
    words_of = [set(table.keyword.tokenizer.words(text)) for text in texts]
    holders: dict[str, list[int]] = {}
    for row, words in enumerate(words_of):
        for word in words:
            holders.setdefault(word, []).append(row)
    chosen = (3, 7, 40, 41, 77, 150, 200)  # the rows the changes touch, and some they do not
    rare = [sorted(w for w in words_of[r] if holders[w] == [r])[:2] for r in chosen]  # words only row r holds
    probes = ["", "!!! ... ?", "the and of", "zzqx qqzv"] + [" ".join(words) for words in rare]
    probes += [f"{words[0]} zzqx {words[0]}" for words in rare if words] + [
        " ".join(texts[r].split()[:6]) for r in chosen
    ]
    delta = Delta(table.payload, table.rows, table.dim, 0)
    steps: list[dict[str, object]] = [
        {"op": "delete", "ids": [ids[40], ids[41]]},  # words only deleted rows hold
        {
            "op": "upsert",
            "documents": [
                {"id": f"n{r}", "text": texts[r], "vector": lee_docs.vectors[r].tolist()} for r in (40, 7, 200)
            ],
        },  # one of them written again, and words of live rows written too
        {"op": "upsert", "documents": [{"id": ids[77], "text": texts[150], "vector": lee_docs.vectors[0].tolist()}]},
        {"op": "delete", "ids": ["n40", "n7", ids[3]]},  # written documents deleted again
    ]

    def old_probe(keyword: LiveKeyword, text: str) -> bool:
        allowed = np.concatenate([~delta.deleted, np.ones(keyword.rows - table.rows, dtype=bool)])
        return bool(keyword.search([text], 1, allowed)[1][0, 0] >= 0)

    differs: list[list[bool]] = []
    for seq, body in enumerate(steps, 1):
        delta.apply([Record(seq, 0, 0, body)])
        live = LiveSource(table, delta.snapshot()).keyword
        assert live is not None
        rounded = copy.copy(live)
        rounded.old_average = live.old_average * 8  # most recovered counts of 1 and 2 now round to 0
        for keyword in (live, rounded):
            answers = [keyword.holds(text) for text in probes]
            assert answers == [old_probe(keyword, text) for text in probes], seq
            assert True in answers and False in answers
            differs.append(answers)
        held = [live.holds(" ".join(words)) for words in rare]
        gone = {40, 41} | ({3} if seq == 4 else set()) | ({77} if seq >= 3 else set())
        want = [
            bool(words) and (r not in gone or (r == 40 and seq in (2, 3)))
            for r, words in zip(chosen, rare, strict=True)
        ]
        assert held == want, seq
    assert any(a != b for a, b in zip(differs[::2], differs[1::2], strict=True))  # counts rounded to 0 tried


def test_a_query_s_text_is_cut_once_for_the_live_probe_and_search(
    lee_data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    from index.engine.live_search import LiveKeyword

    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    written = {"id": "n1", "text": lee_docs.texts[5], "vector": lee_docs.vectors[5].tolist()}
    delta.apply([upsert(1, written), Record(2, 0, 0, {"op": "delete", "ids": [lee_docs.ids[9]]})])
    live = LiveKeyword(table, delta.snapshot())  # its own kept texts
    check_cut_once(live, " ".join(lee_docs.texts[5].split()[:8]), monkeypatch)


def upsert(seq: int, document: dict[str, object]) -> Record:
    return Record(seq, 0, 0, {"op": "upsert", "documents": [document]})


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"fields": {"year": "1977"}}, "field 'year' holds '1977', not of type integer"),
        ({"fields": {"colour": "red"}}, "field 'colour', which the table does not have"),
        ({"vector": [0.5]}, "a vector of 1 value; the table's have 50"),
        ({"id": 7}, "id 7 is not of the table's id type (string)"),
    ],
)
def test_a_record_that_does_not_fit_the_version_is_refused_unapplied(
    lee_data_dir: Path, lee_docs: Lee, change: dict[str, object], problem: str
) -> None:
    """A log written to an earlier version of another schema: its record is named, and nothing of it applied."""
    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    good = {"id": "w1", "vector": lee_docs.vectors[0].tolist(), "fields": {"year": 1977}}
    with pytest.raises(LogMismatch) as refused:
        delta.replay([upsert(1, good), upsert(2, {**good, "id": "w2", **change})])
    assert "record of sequence 2 does not fit this version" in refused.value.message
    assert problem in refused.value.message
    assert delta.seq == 0 and not delta.documents


def test_a_log_that_starts_after_the_version_leaves_a_gap_and_is_refused(lee_data_dir: Path, lee_docs: Lee) -> None:
    """A version restored from before a compaction, over the log the compaction cut: the writes between are named."""
    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    document = {"id": "g4", "vector": lee_docs.vectors[0].tolist()}
    with pytest.raises(LogMismatch, match="writes 1 to 3 are in neither"):
        Delta(table.payload, table.rows, table.dim, 0).replay([upsert(4, document)])
    delta = Delta(table.payload, table.rows, table.dim, 3)  # the version that holds them: replayed
    delta.replay([upsert(4, document)])
    assert list(delta.documents) == ["g4"]


def test_deleted_ids_asked_for_are_named_as_unknown_ones_are(lee_data_dir: Path, lee_docs: Lee) -> None:
    """The first five deleted ids asked for, and how many more, as unknown ids are named; said deleted."""
    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    gone = lee_docs.ids[:7]
    delta.apply([Record(1, 0, 0, {"op": "delete", "ids": gone})])
    with pytest.raises(UnknownDocument) as caught:
        delta.row_of([lee_docs.ids[10], *gone])
    shown = ", ".join(map(repr, gone[:5]))
    assert caught.value.message == f"no document with id {shown} and 2 more in table 'lee' (deleted)"
    assert caught.value.details == {"ids": gone[:5], "count": 7}


def test_a_scroll_reads_the_rows_a_chunk_at_a_time(
    lee_data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page looks for its rows in chunks (of 3 rows at least here, each next twice the last): page after page,
    with filters that pass many rows and few, deleted and replaced rows left out, the ids listed are the brute
    force's."""
    monkeypatch.setattr(documents, "CHUNK", 3)
    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    delta.apply([Record(1, 0, 0, {"op": "delete", "ids": lee_docs.ids[::4]})])
    delta.apply([upsert(2, {"id": lee_docs.ids[1], "vector": lee_docs.vectors[1].tolist(), "fields": {"year": 1}})])
    live = {lee_docs.ids[i]: lee_docs.record(i) for i in range(len(lee_docs.ids)) if i % 4}
    live[lee_docs.ids[1]] = {"year": 1}
    few = lee_docs.ids[1::23]  # one in 23: a page reads chunk after chunk
    specs: list[tuple[dict[str, object] | None, Callable[[str, dict[str, Any]], bool]]] = [
        (None, lambda i, f: True),
        ({"year": {"gte": 1995}}, lambda i, f: (f.get("year") or 0) >= 1995),
        ({"id": {"in": few}}, lambda i, f: i in few),
    ]
    for spec, passes in specs:
        expected = sorted(i for i, fields in live.items() if passes(i, fields))
        for limit in (1, 7, 500):
            listed: list[object] = []
            after = None
            while True:
                page, after = documents.scroll_documents(table, delta, spec, limit, after, [], False, False)
                listed += [d["id"] for d in page]
                if after is None:
                    break
            assert listed == expected, (spec, limit)
        for start in lee_docs.ids:  # a page after each id: the rows a chunk ends at differ from page to page
            page, _ = documents.scroll_documents(table, delta, spec, 3, start, [], False, False)
            assert [d["id"] for d in page] == [i for i in expected if i > start][:3], (spec, start)


def test_a_filter_over_the_written_documents_is_evaluated_once_per_change(
    lee_data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages of a listing by one filter evaluate it over the written documents once until the next write (the
    last filter's booleans are kept), another filter's its own: every listing the brute force's."""
    evaluated: list[object] = []
    evaluate = delta_module.evaluate
    monkeypatch.setattr(
        delta_module, "evaluate", lambda columns, spec: evaluated.append(spec) or evaluate(columns, spec)
    )
    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    delta = Delta(table.payload, table.rows, table.dim, 0)
    live = {lee_docs.ids[i]: lee_docs.record(i) for i in range(len(lee_docs.ids))}

    def write(seq: int, ident: str, year: int) -> None:
        delta.apply([upsert(seq, {"id": ident, "vector": lee_docs.vectors[seq].tolist(), "fields": {"year": year}})])
        live[ident] = {"year": year}

    def listing(spec: dict[str, Any]) -> list[object]:
        listed, after, snapshot = [], None, delta.snapshot()
        while True:
            page, after = documents.scroll_documents(table, snapshot, spec, 25, after, [], False, False)
            listed += [d["id"] for d in page]
            if after is None:
                return listed

    for seq in range(1, 31):
        write(seq, f"w-{seq:02d}", 1980 + seq)
    late, early = {"year": {"gte": 2000}}, {"year": {"lt": 2000}}

    def expected(spec: dict[str, Any]) -> list[object]:
        return sorted(i for i, f in live.items() if ((f.get("year") or 0) >= 2000) == (spec is late))

    for count, spec in enumerate((late, early, late), 1):
        assert listing(spec) == expected(spec), spec
        assert len(evaluated) == count, spec  # once a listing, however many pages
    write(31, "w-05", 2005)  # replaced: it passes now
    assert listing(late) == expected(late) and "w-05" in expected(late)
    assert len(evaluated) == 4  # written since: evaluated again


def test_a_live_keyword_index_made_slowly_holds_up_no_other_search(
    lee_data_dir: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each search beside writes makes its live keyword index when it first reads it: one made slowly (a table built
    before the lengths were kept cuts its version's text) holds up no other search's, of another delta."""
    from index.engine import live_search

    table = Table.load(lee_data_dir / "lee")
    assert table.payload is not None
    snapshots = []
    for row in (5, 6):
        delta = Delta(table.payload, table.rows, table.dim, 0)
        delta.apply([upsert(1, {"id": "n1", "text": lee_docs.texts[row], "vector": lee_docs.vectors[row].tolist()})])
        snapshots.append(delta.snapshot())
    cutting, cut = threading.Event(), threading.Event()

    class Slow(live_search.LiveKeyword):
        def __init__(self, table: Table, delta: Delta) -> None:
            if delta is snapshots[0]:
                cutting.set()
                cut.wait(30)
            super().__init__(table, delta)

    monkeypatch.setattr(live_search, "LiveKeyword", Slow)
    slow = threading.Thread(target=lambda: live_search.LiveSource(table, snapshots[0]).keyword)
    other = ThreadPoolExecutor(1)
    slow.start()
    try:
        assert cutting.wait(30)
        assert other.submit(lambda: live_search.LiveSource(table, snapshots[1]).keyword).result(timeout=5) is not None
    finally:
        cut.set()
        slow.join()
        other.shutdown()
