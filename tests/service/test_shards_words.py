"""A sharded word table over HTTP: a GloVe slice imported whole (``words``) and as 3 shards (``words3``) in one
data directory, served by one real ``embedding-serve`` (the shards loaded in one process and searched as one
table), and by three real shard servers behind a real front (``EMBEDDING_SHARDS``) on loopback.

Every word route answers the sharded table as the whole table: neighbours by token (exact, case-folded: the
lowest row of the whole table wins), by id, by positive/negative tokens, by vector (one, a batch, pages, floors,
exact), 3CosAdd and 3CosMul analogies with an expected answer, similarity, rows, the map; what it cannot answer
(``restrict``) is a 422. The front answers ``POST .../search`` by vector, neighbours by token (the whole table's
match: exact, else case-folded, lowest row), by row id (the shard holding that row of the whole table) and by
positive/negative tokens, similarity and analogies by 3CosAdd and 3CosMul (each shard scoring its own rows given the
words' rows, ``POST .../analogy/rows``) with an expected answer's rank (each shard's count of better rows, summed),
one or a batch, and the table's summary, as the whole table does, its errors with the whole table's status and code,
an unknown token's suggestions the whole table's; what it cannot answer (``compose``, ``restrict``) is a 422 that
says why. Every server takes keys (``EMBEDDING_API_KEY``, ``EMBEDDING_READ_API_KEY``): the front forwards the
client's key to its shards on every route. Both tables end with a zero row (an import keeps it): its cosine with every
token is 0, and as a neighbours query it is a 422 naming it, through the front as on the whole table.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from gensim.models import KeyedVectors

from index.build.sources import RawTable
from index.engine.table import Table
from index.store import shardmap
from tests.cli import run_cli
from tests.index.build.test_shards import ROUNDING, equal_up_to_ties
from tests.service import real_server
from tests.service.real_server import HTTP, Server
from tests.service.test_word_fuzz import (
    KINDS,
    Draw,
    Oracle,
    closer_case,
    doesnt_match_case,
    n_similarity_case,
    run,
)
from tests.words import write_words

SHARDS = 3
ZERO = "zerorow"  # the token of a zero row, last in both tables
READ_KEY = "words-read-key-0123456789"
KEYS = {"EMBEDDING_API_KEY": "words-admin-key-0123456789", "EMBEDDING_READ_API_KEY": READ_KEY}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Path:
    root = tmp_path_factory.mktemp("word-front")
    source = write_words(glove_raw, root / "words.txt")
    header, rows = source.read_text().split("\n", 1)
    count, dim = map(int, header.split())
    source.write_text(f"{count + 1} {dim}\n{rows}{ZERO} {' '.join(['0'] * dim)}\n")  # an import keeps a zero row
    for name, extra in (("words", ()), ("words3", ("--shards", SHARDS))):  # the command's entry point, in process
        done = run_cli("import", source, "--name", name, *extra, "--data-dir", root / "data")
        assert done.code == 0, done.err
    return root


@pytest.fixture(scope="module")
def servers(root: Path) -> Iterator[dict[str, Any]]:
    """One server of the data directory (both tables), three shard servers (each serving its shard of ``words3``
    alone) and the front of ``words3``: the first four started together, then the front, which needs the shards'
    URLs."""
    started: list[Server] = []
    try:
        started += real_server.start_together(
            lambda: real_server.start(root / "data", root / "one.log", env=KEYS),
            *real_server.shard_starts(root / "data" / "words3", root, SHARDS, KEYS),
        )
        replicas = real_server.replicas(started[1:])
        (root / "front").mkdir()
        env = {"EMBEDDING_SHARDS": json.dumps({"words3": replicas}), "EMBEDDING_SHARD_TIMEOUT": "10", **KEYS}
        started += real_server.start_together(lambda: real_server.start(root / "front", root / "front.log", env=env))
        yield {"one": started[0], "front": started[-1], "shards": started[1:-1]}
    finally:
        real_server.stop_together(started)


@pytest.fixture(scope="module")
def one(servers: dict[str, Any]) -> Server:
    return servers["one"]


@pytest.fixture(scope="module")
def vectors(glove_raw: RawTable) -> list[list[float]]:
    rng = np.random.default_rng(11)
    return [*rng.normal(size=(2, 50)).tolist(), (glove_raw.matrix[691] * 2).tolist()]


def ask(server: Server, table: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    url = f"{server.base}/v1/tables/{table}{path}"
    answer = HTTP.request(method, url, json=body, headers={"x-api-key": READ_KEY}, timeout=60)
    return answer.status_code, answer.json()


def ask_both(whole: Server, sharded: Server, method: str, path: str, body: Any = None) -> tuple[Any, Any]:
    """The request to ``words`` on ``whole`` and to ``words3`` on ``sharded``, at once: separate processes, their
    work overlaps on the machine's cores."""
    with ThreadPoolExecutor(1) as pool:
        theirs = pool.submit(ask, sharded, "words3", method, path, body)
        return ask(whole, "words", method, path, body), theirs.result()


def same_neighbors(got: list[dict[str, Any]], expected: list[dict[str, Any]], whole: np.ndarray) -> None:
    """The same rows and tokens, scores up to a batch's float32 rounding, equal scores by row."""
    equal_up_to_ties([(h["id"], h["score"]) for h in got], [(h["id"], h["score"]) for h in expected], whole)
    tokens = {h["id"]: h["token"] for h in expected}
    assert all(tokens.get(h["id"], h["token"]) == h["token"] for h in got)


def same_answer(got: Any, expected: Any, whole: np.ndarray) -> None:
    """Two answers of the word routes: equal but for their neighbours (:func:`same_neighbors`)."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys(), (got, expected)
        for key, value in expected.items():
            if key == "neighbors":
                same_neighbors(got[key], value, whole)
            elif key == "expect":  # its rank exact; its score and margin up to a product's float32 rounding
                assert got[key].keys() == value.keys() and got[key]["rank"] == value["rank"], (got[key], value)
                assert {k: v for k, v in got[key].items() if k not in ("score", "margin")} == {
                    k: v for k, v in value.items() if k not in ("score", "margin")
                }
                assert abs(got[key]["score"] - value["score"]) <= ROUNDING, (got[key], value)
                assert abs(got[key]["margin"] - value["margin"]) <= 2 * ROUNDING, (got[key], value)
            else:
                same_answer(got[key], value, whole)
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected)
        for mine, theirs in zip(got, expected, strict=True):
            same_answer(mine, theirs, whole)
    elif isinstance(expected, str):
        assert got == expected.replace("'words'", "'words3'")
    else:
        assert got == expected


@pytest.fixture(scope="module")
def whole_rows(root: Path) -> np.ndarray:
    """The whole table's unit rows (ties among equal rows are judged on these)."""
    return np.asarray(Table.load(root / "data" / "words").vectors)


def word_requests(vectors: list[list[float]]) -> list[tuple[str, str, Any]]:
    return [
        ("GET", "/neighbors?token=king&k=10", None),
        ("GET", "/neighbors?token=PARIS&k=20", None),  # case-folded: "paris" (a lower row than "Paris")
        ("GET", "/neighbors?token=Paris&k=5", None),
        ("GET", "/neighbors?id=20001&k=8", None),
        ("GET", "/neighbors?token=heart&k=10&exact=true", None),
        ("GET", "/neighbors?token=kingz", None),  # 404 with suggestions
        ("POST", "/neighbors", {"positive": ["king", "woman"], "negative": ["man"], "k": 10}),
        ("POST", "/neighbors", {"queries": ["france", {"id": 5}, "nosuchwordzz"], "k": 6}),
        ("POST", "/search", {"vector": vectors[0], "k": 15}),
        ("POST", "/search", {"vector": vectors[2], "k": 10, "offset": 5, "min_score": 0.6}),
        ("POST", "/search", {"vectors": vectors, "k": 7, "exact": True}),
        ("POST", "/search", {"vector": [0.0] * 50}),  # 422: no direction
        ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "k": 10, "expect": "queen"}),
        ("POST", "/analogy", {"queries": [{"a": "france", "b": "paris", "c": "japan"}], "k": 5}),
        ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "k": 10, "method": "3cosmul", "expect": "queen"}),
        ("POST", "/analogy", {"queries": [{"a": "france", "b": "paris", "c": "japan"}], "method": "3cosmul"}),
        ("GET", "/similarity?a=king&b=queen", None),
        ("GET", "/tokens/PARIS", None),
        ("GET", "/ids/20000", None),
    ]


def test_one_process_serves_the_sharded_word_table_whole(
    one: Server, vectors: list[list[float]], whole_rows: np.ndarray
) -> None:
    for method, path, body in word_requests(vectors):
        status, expected = ask(one, "words", method, path, body)
        mine, got = ask(one, "words3", method, path, body)
        assert mine == status, (path, body, got, expected)
        same_answer(got, expected, whole_rows)
    status, summary = ask(one, "words3", "GET", "")
    assert status == 200 and summary["kind"] == "words" and summary["shards"]["count"] == SHARDS
    assert summary["rows"] == 20_003 == sum(summary["shards"]["rows"])
    status, mapped = ask(one, "words3", "GET", "/map/info")
    assert status == 200 and mapped["rows"] == 20_003


def test_what_one_process_cannot_answer_is_a_422(one: Server) -> None:
    for method, path, body, message in (
        ("GET", "/neighbors?token=king&restrict=1000", None, "restrict"),
        ("POST", "/search", {"vector": [0.1] * 50, "restrict": 1000}, "restrict"),
    ):
        status, got = ask(one, "words3", method, path, body)
        assert status == 422 and got["error"]["code"] == "invalid_request", (path, got)
        assert message in got["error"]["message"]
        assert ask(one, "words", method, path, body)[0] == 200


@pytest.fixture(scope="module")
def front(servers: dict[str, Any]) -> Server:
    return servers["front"]


def test_the_front_searches_the_sharded_word_table_as_the_whole_table(
    one: Server, front: Server, vectors: list[list[float]], whole_rows: np.ndarray
) -> None:
    """Every vector form (one, a batch, pages, floors, exact, rows and unit vectors included) answered as the whole
    table answers it; a documents table's field, a zero vector and ``restrict`` are the whole table's 422."""
    bodies: list[dict[str, Any]] = [
        {"vector": vectors[0], "k": 15},
        {"vector": vectors[1], "k": 40, "exact": True},
        {"vector": vectors[2], "k": 10, "offset": 5, "min_score": 0.6},
        {"vector": vectors[2], "k": 3, "offset": 200},
        {"vectors": vectors, "k": 7},
        {"vector": vectors[2], "k": 5, "include": ["row", "vector"]},
        {"vector": [0.0] * 50},
        {"vector": vectors[0], "positive": ["king"]},
        {"vector": vectors[0], "queries": [{"vector": vectors[0]}]},
    ]
    for body in bodies:
        (status, expected), (mine, got) = ask_both(one, front, "POST", "/search", body)
        assert mine == status, (body, got, expected)
        same_answer(got, expected, whole_rows)
    status, got = ask(front, "words3", "POST", "/search", {"vector": [0.1] * 49})  # a shard's 422, as it is
    assert status == 422 and "the vector has 49 values" in got["error"]["message"], got
    status, got = ask(front, "words3", "POST", "/search", {"vector": vectors[0], "restrict": 100})
    assert status == 422 and "restrict" in got["error"]["message"], got
    status, got = ask(front, "words3", "GET", "/tokens/king")
    assert status == 404 and "this server is its front" in got["error"]["message"], got


def test_the_front_answers_a_tokens_neighbours_as_the_whole_table(
    one: Server, front: Server, whole_rows: np.ndarray
) -> None:
    """The token looked up on every shard: exact where its hash puts it, else the case-folded match of the lowest
    row in the whole table ("PARIS": "paris", not "Paris" of a higher row, on another shard)."""
    owners = {token: shardmap.shard_of_id(token, SHARDS) for token in ("paris", "Paris")}
    assert owners["paris"] != owners["Paris"], owners
    for path in (
        "/neighbors?token=king&k=10",
        "/neighbors?token=PARIS&k=20",
        "/neighbors?token=Paris&k=5",
        "/neighbors?token=THE&k=5",
        "/neighbors?token=.&k=5",  # asked of each shard as a token, not as a step in its URL
        "/neighbors?token=heart&k=50&exact=true",
        "/neighbors?id=0&k=10",
        "/neighbors?id=5&k=7",
        "/neighbors?id=20001&k=8",  # "The", on another shard than "the"
        "/neighbors?id=20000&k=30&exact=true",
    ):
        (status, expected), (mine, got) = ask_both(one, front, "GET", path)
        assert status == mine == 200, (path, got)
        same_answer(got, expected, whole_rows)
    for path in ("/neighbors?token=kingz", "/neighbors?token=..", "/neighbors?id=20003", f"/neighbors?id={1 << 70}"):
        (status, expected), (mine, got) = ask_both(one, front, "GET", path)
        assert status == mine == 404 and got["error"]["code"] == "unknown_token", (path, got)
        same_answer(got, expected, whole_rows)  # the message (its table's name) and the suggestions too
    for path in ("/neighbors?token=king&restrict=10", "/neighbors?token=king&k=0", "/neighbors?id=-1"):
        status, got = ask(front, "words3", "GET", path)
        assert status == 422 and got["error"]["code"] == "invalid_request", (path, got)


def codes_only(answer: Any) -> Any:
    """An answer with each error reduced to its code and suggestions (a refusal's message may be worded by the
    front's own check of the request)."""

    def reduced(error: dict[str, Any]) -> dict[str, Any]:
        return {key: error[key] for key in ("code", "suggestions") if key in error}

    if isinstance(answer, dict):
        if "error" in answer and isinstance(answer["error"], dict):
            return {"error": reduced(answer["error"])}
        out = {key: codes_only(value) for key, value in answer.items()}
        if isinstance(answer.get("errors"), list):  # a similarity batch's, one per pair
            out["errors"] = [None if e is None else reduced(e) for e in answer["errors"]]
        return out
    if isinstance(answer, list):
        return [codes_only(item) for item in answer]
    return answer


TOKEN_REQUESTS: list[tuple[str, str, Any]] = [
    ("GET", "/similarity?a=king&b=queen", None),
    ("GET", "/similarity?a=PARIS&b=Paris", None),  # case-folded "paris" (one shard) and exact "Paris" (another)
    ("GET", "/similarity?a=The&b=france", None),
    ("GET", "/similarity?a=kingz&b=queen", None),  # 404 unknown_token
    ("GET", "/similarity?a=king", None),  # 422
    ("POST", "/similarity", {"pairs": [["king", "queen"], ["PARIS", "germany"], ["kingz", "queen"], ["a", "the"]]}),
    ("POST", "/similarity", {"pairs": [["king"]]}),  # 422
    ("POST", "/neighbors", {"positive": ["king", "woman"], "negative": ["man"], "k": 10}),
    ("POST", "/neighbors", {"positive": ["paris", "germany"], "negative": ["france"], "k": 25, "exact": True}),
    ("POST", "/neighbors", {"negative": ["good"], "k": 5}),
    ("POST", "/neighbors", {"token": "PARIS", "k": 12}),
    ("POST", "/neighbors", {"positive": ["king"], "negative": ["king"]}),  # 422: the query vector is zero
    ("POST", "/neighbors", {"positive": ["king", "kingz"]}),  # 404 unknown_token
    ("POST", "/neighbors", {"token": "king", "k": 0}),  # 422
    (
        "POST",
        "/neighbors",
        {"queries": ["france", {"positive": ["king", "woman"], "negative": ["man"]}, "nosuchwordzz", "The"], "k": 6},
    ),
    ("POST", "/neighbors", {"id": 20001, "k": 12}),
    ("POST", "/neighbors", {"id": 20003}),  # 404: past the table's rows
    ("POST", "/neighbors", {"queries": [{"id": 3}, "king", {"id": 20003}, {"id": 19_999}, {"token": "kingz"}], "k": 4}),
    ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "k": 10}),
    ("POST", "/analogy", {"a": "france", "b": "paris", "c": "japan", "k": 30, "exact": True}),
    ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "k": 10, "method": "3cosmul"}),
    ("POST", "/analogy", {"a": "PARIS", "b": "france", "c": "berlin", "k": 40, "method": "3cosmul"}),
    ("POST", "/analogy", {"a": "man", "b": "man", "c": "woman"}),  # 422: b - a is zero
    ("POST", "/analogy", {"a": "man", "b": "kingz", "c": "woman"}),  # 404 unknown_token
    ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "k": 10, "expect": "queen"}),
    ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "expect": "QUEEN", "method": "3cosmul"}),
    ("POST", "/analogy", {"a": "france", "b": "paris", "c": "japan", "expect": "The", "exact": True}),  # far down
    ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "expect": "king"}),  # 422: one of a, b and c
    ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "expect": "queenz"}),  # 404 unknown_token
    ("POST", "/analogy", {"a": "man", "b": "man", "c": "woman", "expect": "queenz"}),  # 422 before the 404
    (
        "POST",
        "/analogy",
        {
            "queries": [
                {"a": "france", "b": "paris", "c": "japan"},
                {"a": "man", "b": "kingz", "c": "woman"},
                {"a": "good", "b": "better", "c": "bad"},
                {"a": "king", "b": "king", "c": "queen"},
            ],
            "k": 5,
        },
    ),
    (
        "POST",
        "/analogy",
        {
            "queries": [{"a": "france", "b": "paris", "c": "japan"}, {"a": "good", "b": "better", "c": "zzqq"}],
            "k": 7,
            "method": "3cosmul",
        },
    ),
] + [
    (
        "POST",
        "/analogy",
        {
            "queries": [
                {"a": "france", "b": "paris", "c": "japan", "expect": "tokyo"},
                {"a": "good", "b": "better", "c": "bad", "expect": "worse"},
                {"a": "good", "b": "better", "c": "bad"},
                {"a": "man", "b": "king", "c": "woman", "expect": "qqzz"},
                {"a": "man", "b": "king", "c": "woman", "expect": "man"},
                {"a": "paris", "b": "france", "c": "berlin", "expect": "Paris"},
            ],
            "k": 6,
            "method": method,
        },
    )
    for method in ("3cosadd", "3cosmul")
]


def test_the_front_answers_the_word_routes_by_token_as_the_whole_table(
    one: Server, front: Server, whole_rows: np.ndarray
) -> None:
    """Similarity (a pair, a batch), neighbours by token and by positive/negative tokens (one, a batch) and
    analogies by 3CosAdd and 3CosMul (one, a batch): the front's answer is the whole table's (scores up to float32
    rounding, equal scores by row), its errors the whole table's status and code, each in its place in a batch."""
    statuses = set()
    for method, path, body in TOKEN_REQUESTS:
        (status, expected), (mine, got) = ask_both(one, front, method, path, body)
        assert mine == status, (path, body, got, expected)
        same_answer(codes_only(got), codes_only(expected), whole_rows)
        statuses.add(status)
    assert statuses == {200, 404, 422}
    status, got = ask(front, "words3", "GET", "/similarity?a=kingz&b=queen")
    assert got["error"]["code"] == "unknown_token" and "kings" in got["error"]["suggestions"], got


# Words a table spells composed (NFC) and decomposed (NFD), in either case, each on the shard its spelling's hash
# names; and how they are asked
SPELLINGS = [
    "Cr\u00e8me",
    "cre\u0300me",
    "BRU\u0302LE\u0301E",
    "Br\u00fbl\u00e9e",
    "Zu\u0308rich",
    "ph\u1ed1",
    "pho\u0302\u0301",
]
SPELLED = ["cr\u00e8me", "CR\u00c8ME", "br\u00fbl\u00e9e", "z\u00fcrich", "ZU\u0308RICH", "Cre\u0300me"]
SPELLED += ["ph\u00f4\u0301"]  # neither composed nor decomposed: the composed label found first, not the other


def test_a_word_spelled_composed_or_decomposed_is_the_whole_tables_row_through_the_front(tmp_path: Path) -> None:
    """The front finds the row the whole table finds, whichever shards its spellings are on: the decomposed
    spelling before another case, the lowest row of the case-folded ones (it found "crème" decomposed where the
    whole table found "Crème", and "BRÛLÉE" where the whole table found "Brûlée"); of exact matches of a word
    typed in neither form, the composed one (it took the first shard's, "phố" decomposed)."""
    labels = [*SPELLINGS, *(f"w{i}" for i in range(30))]
    matrix = np.random.default_rng(3).standard_normal((len(labels), 8)).astype(np.float32)
    np.savez(tmp_path / "spellings.npz", vectors=matrix, tokens=np.array(labels, dtype=str))
    for name, extra in (("words", ()), ("words3", ("--shards", SHARDS))):
        done = run_cli("import", tmp_path / "spellings.npz", "--name", name, *extra, "--data-dir", tmp_path / "data")
        assert done.code == 0, done.err
    started: list[Server] = []
    try:
        started += real_server.start_together(
            lambda: real_server.start(tmp_path / "data", tmp_path / "one.log"),
            *real_server.shard_starts(tmp_path / "data" / "words3", tmp_path, SHARDS, {}),
        )
        (tmp_path / "front").mkdir()
        env = {"EMBEDDING_SHARDS": json.dumps({"words3": real_server.replicas(started[1:])})}
        started.append(real_server.start(tmp_path / "front", tmp_path / "front.log", env=env))
        for token in SPELLED:
            path = f"/neighbors?token={quote(token, safe='')}&k=2"
            (status, expected), (mine, got) = ask_both(started[0], started[-1], "GET", path)
            assert (status, mine) == (200, 200) and got["query"] == expected["query"], (got, expected)
    finally:
        real_server.stop_together(started)


def test_a_zero_row_scores_zero_and_is_named_as_a_query_through_the_front(
    one: Server, front: Server, whole_rows: np.ndarray
) -> None:
    """A zero row's cosine with every token is 0 in both similarity forms; as a neighbours query (alone, or in a
    batch) it has no direction: the whole table's 422 naming the token, through the front too."""
    for method, path, body in (
        ("GET", f"/similarity?a={ZERO}&b=king", None),
        ("POST", "/similarity", {"pairs": [[ZERO, "king"], ["king", ZERO], ["king", "queen"]]}),
    ):
        (status, expected), (mine, got) = ask_both(one, front, method, path, body)
        assert status == mine == 200, (path, got, expected)
        same_answer(got, expected, whole_rows)
        assert (got.get("similarity") if method == "GET" else got["similarities"][0]) == 0.0, got
    message = f"the vector of token {ZERO!r} is all zeros"
    for method, path, body in (
        ("GET", f"/neighbors?token={ZERO}", None),
        ("POST", "/neighbors", {"positive": [ZERO]}),
    ):
        (status, expected), (mine, got) = ask_both(one, front, method, path, body)
        assert status == mine == 422 and got == expected and message in got["error"]["message"], (got, expected)
    (_, expected), (_, got) = ask_both(one, front, "POST", "/neighbors", {"queries": [ZERO, "king"], "k": 3})
    assert got["results"][0] == expected["results"][0] and message in got["results"][0]["error"]["message"]
    same_answer(got["results"][1], expected["results"][1], whole_rows)


def test_the_front_suggests_for_an_unknown_token_what_the_whole_table_suggests(
    one: Server, front: Server, root: Path
) -> None:
    """A token no shard holds: the whole table's 404, its message and suggestions (the shards' candidates merged),
    not those of the shard its hash names (which differ for most of these)."""
    differ = suggested = 0
    for token in ("kingz", "nosuchwordzz", "parsi", "PARISS", "thw", "quen", "frnace", "aaaa", "zzzzz", "ÿÿÿ", "xq"):
        (status, expected), (mine, got) = ask_both(one, front, "GET", f"/neighbors?token={token}")
        assert status == mine == 404, (token, got)
        suggested += len(expected["error"]["suggestions"])
        whole = expected["error"]["message"].replace("'words'", "'words3'")
        assert got["error"] == {**expected["error"], "message": whole}, (token, got, expected)
        home = Table.load(root / "data" / "words3" / shardmap.shard_name(shardmap.shard_of_id(token, SHARDS)))
        differ += home.suggest(token) != expected["error"]["suggestions"]
    assert differ >= 5 and suggested >= 40, (differ, suggested)


def test_what_the_front_cannot_answer_by_token_is_a_422_naming_why(one: Server, front: Server) -> None:
    for method, path, body, message in (
        ("POST", "/neighbors", {"token": "king", "restrict": 100}, "restrict"),
        ("GET", "/similarity?a=king&b=queen&compose=mean", None, "compose"),
        ("POST", "/neighbors", {"positive": ["king", "woman"], "negative": ["man"], "k": 1000}, "k <= 997"),
    ):
        status, got = ask(front, "words3", method, path, body)
        assert status == 422 and got["error"]["code"] == "invalid_request", (path, got)
        assert message in got["error"]["message"], got
        assert ask(one, "words", method, path, body)[0] == 200


def test_the_front_summarises_the_word_table_as_one_process(one: Server, front: Server) -> None:
    """``GET /v1/tables/words3`` and its entry in ``GET /v1/tables`` through the front, as the one-process server of
    the same shards says them (no documents, no writes); its rows by id (``GET .../ids/{id}``) and its refusal of
    ``GET .../fields`` too."""
    status, got = ask(front, "words3", "GET", "")
    assert (status, got) == ask(one, "words3", "GET", "") and got["kind"] == "words" and "writes" not in got, got
    listed = HTTP.get(f"{front.base}/v1/tables", headers={"x-api-key": READ_KEY}).json()
    assert listed == {"tables": [got], "unavailable": []}, listed
    rows = got["rows"]
    paths = {"/ids/0": 200, f"/ids/{rows // 2}?normalized=true": 200, f"/ids/{rows - 1}": 200, f"/ids/{rows}": 404}
    for path, status in {**paths, "/fields": 422}.items():  # a row of the whole table; no fields in a word table
        answer = ask(front, "words3", "GET", path)
        assert answer == ask(one, "words3", "GET", path) and answer[0] == status, (path, answer)


def test_the_front_refuses_document_reads_of_a_word_table_as_one_process_does(one: Server, front: Server) -> None:
    for method, path, body in (
        ("GET", "/documents/king", None),
        ("POST", "/documents/get", {"ids": ["king"]}),
        ("POST", "/documents/scroll", {}),
    ):
        status, got = ask(front, "words3", method, path, body)
        assert (status, got) == ask(one, "words3", method, path, body), got
        assert status == 422 and "table 'words3' holds words, not documents" in got["error"]["message"], got


def test_a_tables_part_of_an_analogy_is_its_rows_scored_as_its_analogies_score_them(one: Server) -> None:
    """``POST .../analogy/rows`` on the whole table, given its words' unit rows: the analogy's answer with the
    words' own rows in it; with an expected answer's unit row, the count of rows scoring above it (the rows
    ``leave_out`` left out) is the whole table's rank less one; a wrong length, a documents-style body and a bad
    method are 422s."""
    rows = {t: ask(one, "words", "GET", f"/tokens/{t}?normalized=true")[1] for t in ("man", "king", "woman")}
    for method in ("3cosmul", "3cosadd"):
        status, expected = ask(
            one, "words", "POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "k": 10, "method": method}
        )
        body = {
            "a": rows["man"]["vector"],
            "b": rows["king"]["vector"],
            "c": rows["woman"]["vector"],
            "k": 13,
            "method": method,
        }
        mine, got = ask(one, "words", "POST", "/analogy/rows", body)
        assert status == mine == 200, got
        own = {rows[t]["id"] for t in rows}
        kept = [h for h in got["neighbors"] if h["id"] not in own][:10]
        assert [(h["id"], h["token"], h["score"]) for h in kept] == [
            (h["id"], h["token"], h["score"]) for h in expected["neighbors"]
        ]
        assert all(h["row"] == h["id"] for h in got["neighbors"])
        the = ask(one, "words", "GET", "/tokens/the?normalized=true")[1]
        question = {"a": "man", "b": "king", "c": "woman", "method": method, "expect": "the"}
        status, whole = ask(one, "words", "POST", "/analogy", question)
        asked = {**body, "expect": the["vector"], "leave_out": [*own, the["id"]]}
        mine, got = ask(one, "words", "POST", "/analogy/rows", asked)
        assert status == mine == 200 and got["expect"]["higher"] + 1 == whole["expect"]["rank"] > 1, (got, whole)
        assert abs(got["expect"]["score"] - whole["expect"]["score"]) <= ROUNDING
        assert abs(got["expect"]["top"] - whole["expect"]["margin"] - whole["expect"]["score"]) <= 2 * ROUNDING
        queen = ask(one, "words", "GET", "/tokens/queen?normalized=true")[1]
        mine, got = ask(one, "words", "POST", "/analogy/rows", {**body, "expect": queen["vector"], "leave_out": []})
        assert mine == 200 and got["expect"]["higher"] <= 3, got  # the answer: only a, b and c may score higher
    words = {w: rows[t]["vector"] for w, t in zip("abc", ("man", "king", "woman"), strict=True)}
    for body in (
        {"a": [0.1] * 49, "b": [0.1] * 49, "c": [0.1] * 49},
        {"a": [0.1] * 50, "b": [0.1] * 50, "c": [0.1] * 49},
        {"a": [0.1] * 50, "b": [0.1] * 50, "c": [0.1] * 50},  # not unit rows
        {"a": [0.1] * 50, "b": [0.1] * 50, "c": [0.1] * 50, "method": "3cosfoo"},
        {"a": [0.1] * 50, "b": [0.1] * 50},
        {**words, "expect": [0.1] * 49},
        {**words, "leave_out": [-1]},
    ):
        status, got = ask(one, "words", "POST", "/analogy/rows", body)
        assert status == 422 and got["error"]["code"] == "invalid_request", (body, got)


def cache_hits(server: Server) -> float:
    metrics = HTTP.get(f"{server.base}/metrics", headers={"x-api-key": READ_KEY}, timeout=30).text
    found = [
        line.split()[-1]
        for line in metrics.splitlines()
        if line.startswith('embedding_answer_cache_total{result="hit"')
    ]
    return float(found[0]) if found else 0.0


def test_the_front_keeps_none_of_its_sharded_tables_answers(one: Server, front: Server) -> None:
    """A repeated GET is answered from the answer cache by a server of the table, never by the front: its shards
    may reload a new version (or take writes) that the front does not see."""
    before = cache_hits(one), cache_hits(front)
    for _ in range(2):
        assert ask(one, "words", "GET", "/neighbors?token=river&k=3")[0] == 200
        assert ask(front, "words3", "GET", "/neighbors?token=river&k=3")[0] == 200
    assert (cache_hits(one), cache_hits(front)) == (before[0] + 1, before[1])


class Remote:
    """A real server as the random word requests send to a TestClient: paths from its base, the read key sent."""

    def __init__(self, server: Server) -> None:
        self.base = server.base

    def get(self, path: str, params: dict[str, Any]) -> Any:
        return HTTP.get(self.base + path, params=params, headers={"x-api-key": READ_KEY}, timeout=60)

    def post(self, path: str, json: Any) -> Any:
        return HTTP.post(self.base + path, json=json, headers={"x-api-key": READ_KEY}, timeout=60)


def test_random_word_requests_through_the_front_answer_as_gensim(root: Path, front: Server) -> None:
    """``tests.service.test_word_fuzz``'s random requests to the front of ``words3``, checked against gensim on
        the rows imported (the zero row left out of gensim, which divides by its norm, and scored as gensim's formulas
    score a row of cosine 0; no drawn word is it). Each shard
        is searched exactly (flat), so every answer is compared as exact; ``restrict`` is the front's 422, and ``k`` is
        drawn within the query's rows of max_k (beyond it, the documented 422 above). The word diagnostics are no
        route of the front: not drawn."""
    imported = KeyedVectors.load_word2vec_format(str(root / "words.txt"))
    assert imported.index_to_key[-1] == ZERO
    kv = KeyedVectors(imported.vector_size)
    kv.add_vectors(imported.index_to_key[:-1], imported.vectors[:-1])
    status, summary = ask(front, "words3", "GET", "")
    assert status == 200 and summary["approximate"] is False
    draw = Draw(3, Oracle(kv, zeros=1), "words3", max_k=990, rows=summary["rows"], restricts=0.1)
    draw.pair_routes = ["similarity"]
    kinds = [
        (make, weight) for make, weight in KINDS if make not in (doesnt_match_case, n_similarity_case, closer_case)
    ]
    tally = run(Remote(front), draw, True, 250, kinds, front=True)
    assert tally.failures == [], "\n".join(tally.failures[:20])
