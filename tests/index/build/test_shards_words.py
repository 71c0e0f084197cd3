"""Sharded word tables: ``embedding-index import --shards 3`` of a GloVe slice against the same file imported
whole.

The union of the shards is the whole table (tokens, unit rows and norms, in the import's order, each row in the
shard the hash of its token names); each shard is a word table that verifies and loads alone; the shards loaded
as one answer the engine door's word queries (token, case-folded token, row, vector, positive/negative tokens,
3CosAdd and 3CosMul analogies, pages and floors) as the whole table does, and refuse what they cannot answer with a 422.
Each shard's parts of what the front of a sharded word table gathers (a row by its row in the whole table, an
analogy's expected answer's rank, an unknown token's suggestions) add up to the whole table's answer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from index.build.sources import RawTable
from index.engine import door, lookup, shards
from index.engine.diagnostics import analogy_expectations
from index.engine.query import Analogy, Examples, Failed, Query, Result
from index.engine.shards import (
    ShardedTable,
    expectation_part,
    local_rows,
    merged_suggestions,
    suggestion_part,
    whole_rows,
)
from index.engine.table import SearchOptions, Table
from index.errors import InvalidQuery
from index.store import artifact, shardmap
from index.store.tokens import MAX_TOKEN_CHARS
from tests.cli import run_cli
from tests.index.build.test_shards import EXE, ROUNDING, SHARDS, equal_up_to_ties, import_whole_and_sharded, run
from tests.words import CASED, write_words


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Path:
    """``words`` (whole) and ``words3`` (3 shards), imported by the command from one word2vec text file."""
    root = tmp_path_factory.mktemp("word-shards")
    source = write_words(glove_raw, root / "words.txt")
    data = root / "data"
    said = import_whole_and_sharded(source, data, "words")
    assert said.startswith(f"built 'words3': 20,002 rows x 50 in {SHARDS} shards (")
    return data


@pytest.fixture(scope="module")
def whole(data_dir: Path) -> Table:
    return Table.load(data_dir / "words")


@pytest.fixture(scope="module")
def sharded(data_dir: Path) -> ShardedTable:
    return ShardedTable.load(data_dir / "words3")


def test_the_shards_union_is_the_whole_table(whole: Table, sharded: ShardedTable) -> None:
    tokens = whole.tokens[: whole.rows]
    expected = np.array([shardmap.shard_of_id(token, SHARDS) for token in tokens])
    np.testing.assert_array_equal(sharded.map.assignment, expected)
    assert sorted(np.concatenate(sharded.global_rows).tolist()) == list(range(whole.rows))
    assert sharded.kind == "words" and sharded.rows == whole.rows and sharded.payload is None
    for s, shard in enumerate(sharded.shards):
        mine = sharded.global_rows[s]
        assert shard.kind == "words" and shard.rows == len(mine) > 0
        assert shard.tokens[: shard.rows] == [tokens[i] for i in mine.tolist()]
        np.testing.assert_array_equal(shard.vectors, whole.vectors[mine])
        np.testing.assert_array_equal(shard.norms, whole.norms[mine])
        np.testing.assert_array_equal(whole_rows(shard), mine)
    np.testing.assert_array_equal(sharded.vectors[[5, 0, 20_001]], whole.vectors[[5, 0, 20_001]])
    np.testing.assert_array_equal(np.asarray(sharded.vectors), whole.vectors)


def test_each_shard_is_a_word_table_alone(data_dir: Path, sharded: ShardedTable) -> None:
    for s in range(SHARDS):
        directory = sharded.map.shard_directory(s)
        assert artifact.verify(directory).ok
        assert Table.load(directory).kind == "words"
    done = run(EXE, "verify", "words3", "--data-dir", data_dir)
    assert done.returncode == 0 and done.stdout.strip() == "words3: ok", done.stderr
    # no writes to fold in; each shard's index is built by its import; eval and sif read one whole table
    for command in ("compact", "index", "eval", "sif"):
        done = run(EXE, command, "words3", "--data-dir", data_dir)
        assert done.returncode == 1 and "error: table 'words3'" in done.stderr and "Traceback" not in done.stderr
        assert command == "compact" or "is sharded" in done.stderr, done.stderr
    vectors = sharded.map.shard_directory(1) / artifact.VECTORS
    original = vectors.read_bytes()
    try:
        vectors.write_bytes(original[:-4] + b"\0\0\0\0")
        done = run(EXE, "verify", "words3", "--data-dir", data_dir)
        assert done.returncode == 1 and "shard-001/vectors.npy" in done.stderr, done.stderr
    finally:
        vectors.write_bytes(original)


def test_shards_refused_where_they_do_not_apply(tmp_path: Path, data_dir: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("a 1 0\nb 0 1\nc 1 1\n")
    done = run(EXE, "import", words, "--name", "w", "--shards", 2, "--ray", "auto", "--data-dir", tmp_path)
    assert done.returncode == 1 and "--ray: only for --format documents" in done.stderr, done.stderr
    done = run(EXE, "import", words, "--name", "w", "--shards", 2, "--id-field", "x", "--data-dir", tmp_path)
    assert done.returncode == 1 and "--id-field: only for --format documents" in done.stderr, done.stderr
    done = run(EXE, "import", words, "--name", "w", "--shards", 40, "--data-dir", tmp_path)
    assert done.returncode == 1 and "would hold no rows" in done.stderr, done.stderr
    assert not (tmp_path / "w").exists()


def word_queries(whole: Table) -> list[Query]:
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(3, whole.dim)).tolist()
    return [
        Query(token="king"),
        Query(token="PARIS", k=20),  # case-folded: "paris" and "Paris" match, the lower row wins
        Query(token="Paris", k=5),
        Query(token="The"),
        Query(row=77, k=5, offset=3),
        Query(row=20_001, k=12),
        *(Query(vector=vector, k=15) for vector in vectors),
        Query(vector=(whole.vectors[691] * 3).tolist(), k=10, min_score=0.7),  # king's, floored
        Query(token="king", k=10, options=SearchOptions(exact=True)),
        Query(examples=Examples(["king", "woman"], ["man"])),
        Query(examples=Examples(["paris", "germany"], ["france"]), k=25, offset=5),
        Query(analogy=Analogy("man", "king", "woman")),
        Query(analogy=Analogy("france", "paris", "japan"), k=30),
        Query(analogy=Analogy("man", "king", "woman"), method="3cosmul"),
        Query(analogy=Analogy("france", "paris", "japan"), k=30, method="3cosmul"),
        Query(token="nosuchwordzz"),  # an unknown token fails alone
    ]


def test_a_word_no_request_could_name_is_dropped_before_the_rows_are_sharded(tmp_path: Path) -> None:
    """The rows are cleaned once, as for a whole table: a word longer than max_token_chars leaves and is counted."""
    words = tmp_path / "words.txt"
    named = [f"w{i}" for i in range(12)]
    words.write_text(
        "".join(f"{word} {i} 1\n" for i, word in enumerate([named[0], "x" * (MAX_TOKEN_CHARS + 1), *named[1:]]))
    )
    done = run_cli("import", words, "--name", "w", "--shards", 2, "--data-dir", tmp_path)
    assert done.code == 0, done.err
    table = ShardedTable.load(tmp_path / "w")
    assert sorted(token for shard in table.shards for token in shard.tokens[: shard.rows]) == sorted(named)
    assert artifact.read_manifest(tmp_path / "w")["cleaning"]["long_tokens_dropped"] == 1


def test_the_shards_answer_the_doors_word_queries_as_the_whole_table(whole: Table, sharded: ShardedTable) -> None:
    assert door.run(sharded, [Query(token="PARIS")])[0].query["id"] == whole.tokens.find("paris")  # type: ignore[union-attr]
    assert {token: whole.tokens.find(token) for token in CASED} == {"Paris": 20_000, "The": 20_001}
    queries = word_queries(whole)
    got, expected = door.run(sharded, queries), door.run(whole, queries)
    for query, mine, theirs in zip(queries, got, expected, strict=True):
        if isinstance(theirs, Failed):
            assert isinstance(mine, Failed) and mine.error.message.replace("words3", "words") == theirs.error.message
            continue
        assert isinstance(mine, Result) and mine.query == theirs.query, (query, mine)
        assert len(mine.hits) == len(theirs.hits) > 0
        equal_up_to_ties(mine.hits, theirs.hits, whole.vectors)  # type: ignore[arg-type]


def test_what_the_shards_cannot_answer_is_a_422(sharded: ShardedTable) -> None:
    for query, message in ((Query(token="king", options=SearchOptions(restrict=1000)), "restrict"),):
        with pytest.raises(InvalidQuery, match=message):  # the HTTP layer's 422
            door.run(sharded, [query])


def test_a_sharded_word_table_has_no_documents_to_name_or_write(sharded: ShardedTable) -> None:
    """Its ids by row and a delta of its writes, asked in process: the engine's error, not an AssertionError."""
    with pytest.raises(InvalidQuery, match="table 'words3' holds words, not documents: it has no document ids"):
        sharded.ids([0])
    with pytest.raises(InvalidQuery, match="holds words, not documents: only documents tables take writes"):
        door.WholeDelta(sharded)


def test_a_shard_finds_a_row_by_its_row_in_the_whole_table(sharded: ShardedTable) -> None:
    asked = [0, 5, 19_999, 20_000, 20_001, 20_002, 1 << 70]
    for s, shard in enumerate(sharded.shards):
        held = local_rows(shard, asked)
        np.testing.assert_array_equal(whole_rows(shard)[held], [r for r in asked[:5] if sharded.assignment[r] == s])
    assert sum(len(local_rows(shard, [row])) for shard in sharded.shards for row in asked) == 5


QUESTIONS = [
    ("man", "king", "woman", "queen"),
    ("france", "paris", "japan", "tokyo"),
    ("good", "better", "bad", "worse"),
]
QUESTIONS += [("king", "queen", "man", "the"), ("paris", "france", "berlin", "Paris")]  # a poor answer, a cased one


def row_of(table: Table, token: str) -> int:
    found = table.tokens.find(token)
    assert found is not None, token
    return found


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_the_shards_parts_of_an_expected_answers_rank_add_up_to_the_whole_tables(
    whole: Table, sharded: ShardedTable, method: str
) -> None:
    """Each shard counts its rows scoring above the expected answer, a, b, c and the answer left out: the counts'
    sum + 1 is the whole table's rank; the score and the best score (the margin) are the whole table's up to the
    float32 rounding of a product."""
    rows = [[row_of(whole, word) for word in question] for question in QUESTIONS]
    # each question alone, as a shard scores it: a batch of more than two is one matrix product on the whole
    # table, which may round a score one float32 unit apart (docs/deployment.md), and so a rank by one
    expected = [analogy_expectations(whole, [(q[0], q[1], q[2])], [q[3]], method)[0] for q in rows]
    for question, theirs in zip(rows, expected, strict=True):
        words = whole.vectors[question[:3]]
        parts = [
            expectation_part(shard, words, whole.vectors[question[3]], method, question)  # type: ignore[arg-type]
            for shard in sharded.shards
        ]
        score = parts[0][1]
        top = max([score, *(best for _, _, best in parts if best is not None)])
        assert 1 + sum(higher for higher, _, _ in parts) == theirs.rank, (question, parts, theirs)
        assert abs(score - theirs.score) <= ROUNDING and abs((top - score) - theirs.margin) <= 2 * ROUNDING
    assert {e.rank == 1 for e in expected} == {True, False}  # answers found and missed


SPELLINGS = ["kingz", "nosuchwordzz", "parsi", "PARISS", "thw", "quen", "runing", "aaaa", "a", "zzzzz", "hte"]
SPELLINGS += ["ÿÿÿ", "Thee", "frnace", "k", "xq"]


@pytest.mark.parametrize("pool", [lookup.SUGGESTION_POOL, 5_000])
def test_the_shards_parts_of_an_unknown_tokens_suggestions_merge_into_the_whole_tables(
    data_dir: Path, pool: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shard's best spellings among the whole table's first rows and its tokens next to the word case-folded,
    merged: the whole table's suggestions, in its order (also with a pool smaller than the table, so that the
    shards' pools are cut at the whole table's row)."""
    monkeypatch.setattr(lookup, "SUGGESTION_POOL", pool)
    monkeypatch.setattr(shards, "SUGGESTION_POOL", pool)
    whole, sharded = Table.load(data_dir / "words"), ShardedTable.load(data_dir / "words3")  # pools made afresh
    found = 0
    for text in SPELLINGS:
        expected = whole.suggest(text)
        assert merged_suggestions(text, [suggestion_part(shard, text) for shard in sharded.shards]) == expected, text
        found += len(expected)
    assert found > 30
