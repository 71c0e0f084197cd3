"""Model token tables through the API: all-MiniLM-L6-v2 (WordPiece) and a small byte-level BPE model."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from fastapi.testclient import TestClient
from safetensors import safe_open
from tokenizers import Tokenizer

from index.build.sources import RawTable, ReadOptions
from index.build.sources import huggingface as hf
from index.build.writer import build_table
from index.engine.table import Table
from service.app import create_app
from service.settings import Settings
from tests import vectors
from tests.index.build.test_huggingface import write_model
from tests.minilm import MINILM, MINILM_TENSOR, SPECIALS, minilm_dir

K = 10


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable, minilm_data_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("model-tables")
    data = root / "data"
    shutil.copytree(minilm_data_dir / MINILM, data / MINILM)  # the session's
    tiny = write_model(root / "tiny", "byte-bpe", "BF16", "model.embed_tokens.weight", sharded=False, output=None)
    build_table(hf.read(tiny.directory, ReadOptions()), data_dir=data, name="tiny-bpe", source={"format": "hf"})
    sp = write_model(root / "sp", "sp-unigram", "F32", "shared.weight", sharded=False, output=None)
    build_table(hf.read(sp.directory, ReadOptions()), data_dir=data, name="tiny-sp", source={"format": "hf"})
    words = RawTable(tokens=glove_raw.tokens[:5000], matrix=glove_raw.matrix[:5000].copy())
    build_table(words, data_dir=data, name="glove-5k", source={"format": "glove-package"})
    return data


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(data_dir=data_dir))) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def unit() -> np.ndarray:
    """all-MiniLM-L6-v2's input embeddings, straight from the safetensors file, as unit rows (float64)."""
    with safe_open(str(minilm_dir() / "model.safetensors"), framework="numpy") as f:
        return vectors.unit(f.get_tensor(MINILM_TENSOR))


@pytest.fixture(scope="module")
def special_ids(minilm_tokenizer: Tokenizer) -> set[int]:
    return {minilm_tokenizer.token_to_id(t) for t in SPECIALS}


def brute_force(unit: np.ndarray, query: np.ndarray, k: int, drop: set[int]) -> list[int]:
    scores = unit @ (query / np.linalg.norm(query))
    scores[list(drop)] = -np.inf
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


def ids(response_json: dict) -> list[int]:
    return [n["id"] for n in response_json["neighbors"]]


def test_tables_show_kind_model_and_tokenizer(client: TestClient) -> None:
    body = client.get("/v1/tables").json()
    tables = {t["name"]: t for t in body["tables"]}
    minilm, words = tables["minilm"], tables["glove-5k"]
    assert (minilm["kind"], minilm["rows"], minilm["dim"], minilm["has_tokenizer"]) == ("tokens", 30_522, 384, True)
    model = minilm["model"]
    assert model["tokenizer_type"] == "WordPiece" and model["tensor"] == MINILM_TENSOR
    assert model["architecture"] == "BertModel" and model["tied_embeddings"] is True
    assert tables["tiny-bpe"]["model"]["dtype"] == "bfloat16" and tables["tiny-bpe"]["model"]["tokenizer_type"] == "BPE"
    assert (words["kind"], words["has_tokenizer"]) == ("words", False) and "model" not in words


def test_neighbours_of_heart_equal_brute_force(client: TestClient, unit: np.ndarray, special_ids: set[int]) -> None:
    heart = client.get("/v1/tables/minilm/tokens/heart").json()["id"]
    got = client.get("/v1/tables/minilm/neighbors", params={"token": "heart", "k": K}).json()
    assert got["query"] == {"text": "heart", "token": "heart", "id": heart, "match": "exact"}
    assert ids(got) == brute_force(unit, unit[heart], K, {heart} | special_ids)
    np.testing.assert_allclose([n["score"] for n in got["neighbors"]], unit[ids(got)] @ unit[heart], rtol=1e-5)
    assert all(n["readable"] == n["token"].removeprefix("##") for n in got["neighbors"])
    posted = client.post("/v1/tables/minilm/neighbors", json={"token": "heart", "k": K, "skip_special": False})
    assert ids(posted.json()) == brute_force(unit, unit[heart], K, {heart})


def test_tokenize_equals_tokenizers(client: TestClient, minilm_tokenizer: Tokenizer) -> None:
    for text in ("heartbeat", "heartache", "Heartbeats and 心"):
        body = client.post("/v1/tables/minilm/tokenize", json={"text": text}).json()
        encoding = minilm_tokenizer.encode(text, add_special_tokens=False)
        assert body == {
            "text": text,
            "tokens": [{"id": i, "token": t} for i, t in zip(encoding.ids, encoding.tokens, strict=True)],
        }
    pieces = client.post("/v1/tables/minilm/tokenize", json={"text": "heartache"}).json()["tokens"]
    assert [p["token"] for p in pieces] == ["heart", "##ache"]
    refused = client.post("/v1/tables/glove-5k/tokenize", json={"text": "heart"})
    assert refused.status_code == 422 and "no tokenizer" in refused.json()["error"]["message"]
    from service_client import Client, Piece

    assert Client("http://testserver", http=client).tokenize("minilm", "heartache") == [
        Piece(p["id"], p["token"]) for p in pieces
    ]


def test_ids_endpoint(client: TestClient, minilm_tokenizer: Tokenizer) -> None:
    with safe_open(str(minilm_dir() / "model.safetensors"), framework="numpy") as f:
        matrix = f.get_tensor(MINILM_TENSOR)
    for token in ("heart", "##beat", "[CLS]"):
        row = minilm_tokenizer.token_to_id(token)
        body = client.get(f"/v1/tables/minilm/ids/{row}").json()
        assert (body["token"], body["id"], body["query"]["match"]) == (token, row, "id")
        np.testing.assert_allclose(body["vector"], matrix[row], rtol=1e-6, atol=1e-7)
    assert client.get(f"/v1/tables/minilm/ids/{minilm_tokenizer.token_to_id('##beat')}").json()["readable"] == "beat"
    missing = client.get("/v1/tables/minilm/ids/30522")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_token"
    neighbours = client.get("/v1/tables/minilm/neighbors", params={"id": minilm_tokenizer.token_to_id("heart"), "k": 3})
    assert neighbours.json()["query"]["match"] == "id"


def test_cjk_lookup(client: TestClient, minilm_tokenizer: Tokenizer, unit: np.ndarray, special_ids: set[int]) -> None:
    vocab = minilm_tokenizer.get_vocab()
    for char in "心中愛":
        body = client.get(f"/v1/tables/minilm/tokens/{char}").json()
        assert (body["token"], body["id"]) == (char, vocab[char])
        got = client.get("/v1/tables/minilm/neighbors", params={"token": char, "k": 5}).json()
        assert ids(got) == brute_force(unit, unit[vocab[char]], 5, {vocab[char]} | special_ids)
    # 细 is not in this vocabulary: the tokenizer maps it to [UNK], which compose refuses to stand in for it.
    assert "细" not in vocab
    for params in ({"token": "细"}, {"token": "细", "compose": "mean"}):
        missing = client.get("/v1/tables/minilm/neighbors", params=params)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_token"
    assert "[UNK]" in missing.json()["error"]["message"]


def test_a_word_is_the_row_the_uncased_model_reads_it_as(
    client: TestClient, data_dir: Path, minilm_tokenizer: Tokenizer, unit: np.ndarray, special_ids: set[int]
) -> None:
    """all-MiniLM-L6-v2's tokenizer lower-cases and strips accents before it splits a text, and its vocabulary
    holds no accented letter: to the model "Café" is the row ``cafe``, and so it is to the word routes."""
    vocab = minilm_tokenizer.get_vocab()
    normalizer = minilm_tokenizer.normalizer
    for word, label in [("café", "cafe"), ("Café", "cafe"), ("naïve", "naive"), ("ÉCOLE", "ecole"), ("##É", "##e")]:
        assert word not in vocab and normalizer.normalize_str(word) == label
        row = vocab[label]
        got = client.get("/v1/tables/minilm/neighbors", params={"token": word, "k": 5}).json()
        assert got["query"] == {"text": word, "token": label, "id": row, "match": "normalized"}
        assert ids(got) == brute_force(unit, unit[row], 5, {row} | special_ids)
        assert client.get(f"/v1/tables/minilm/tokens/{quote(word, safe='')}").json()["id"] == row
    assert minilm_tokenizer.encode("Café", add_special_tokens=False).ids == [vocab["cafe"]]
    sim = client.get("/v1/tables/minilm/similarity", params={"a": "Café", "b": "cafe"}).json()
    assert sim["similarity"] == pytest.approx(1.0) and sim["query"]["a"]["match"] == "normalized"
    # Rules before it still come first ("[cls]" is [CLS] case-folded), a normal form that is no row is unknown
    # ("straße"), and a word table has no tokenizer to normalise with (GloVe's "role" is among its first 5,000 rows,
    # "rôle" is not).
    assert client.get("/v1/tables/minilm/tokens/[cls]").json()["query"]["match"] == "casefold"
    missing = client.get("/v1/tables/minilm/neighbors", params={"token": "Straße"}).json()
    assert missing["error"]["code"] == "unknown_token" and missing["error"]["suggestions"]
    assert client.get("/v1/tables/glove-5k/neighbors", params={"token": "role"}).status_code == 200
    assert client.get("/v1/tables/glove-5k/neighbors", params={"token": "rôle"}).status_code == 404
    assert Table.load(data_dir / MINILM).find("caf\ud800") is None  # a lone surrogate, which no normaliser reads


def test_byte_level_table_resolves_plain_words(client: TestClient, data_dir: Path) -> None:
    vocab = Tokenizer.from_file(str(data_dir / "tiny-bpe" / "tokenizer.json")).get_vocab()
    words = [t[1:] for t in vocab if t.startswith("Ġ") and t[1:].isalpha() and t[1:].isascii() and t[1:] not in vocab]
    for word in words[:20]:
        got = client.get("/v1/tables/tiny-bpe/neighbors", params={"token": word, "k": 3}).json()
        assert got["query"] == {"text": word, "token": "Ġ" + word, "id": vocab["Ġ" + word], "match": "space-marked"}
        assert len(got["neighbors"]) == 3 and all(n["readable"] for n in got["neighbors"])
    body = client.get("/v1/tables/tiny-bpe/tokens/心").json()
    assert body["readable"].strip() == "心" and body["token"] != "心"  # the label spells the UTF-8 bytes


@pytest.mark.parametrize(("table", "marker"), [("tiny-bpe", "Ġ"), ("tiny-sp", "▁")])
def test_a_word_in_another_case_finds_its_word_start_piece(
    client: TestClient, data_dir: Path, table: str, marker: str
) -> None:
    """A cased byte-level or SentencePiece vocabulary labels a word's start with its space marker: "Need" or
    "NEED", in no case a label, is the word ``▁need`` case-folded (the lowest id of the labels folding alike), as
    "need" is it space-marked; a label spelled as typed still comes first."""
    vocab = Tokenizer.from_file(str(data_dir / table / "tokenizer.json")).get_vocab()
    folded: dict[str, list[int]] = {}
    for label, row in vocab.items():
        folded.setdefault(label.casefold(), []).append(row)
    starts = [t for t in vocab if t.startswith(marker) and t[1:].isascii() and t[1:].isalpha() and len(t) > 3]
    checked = 0
    for start in starts:
        word = start[1:]
        for typed in (word.capitalize(), word.upper()):
            if typed.casefold() in folded or marker + typed in vocab:
                continue  # a label of its own, found before
            got = client.get(f"/v1/tables/{table}/neighbors", params={"token": typed, "k": 3}).json()
            row = min(folded[(marker + typed).casefold()])
            assert got["query"] == {
                "text": typed,
                "token": {i: t for t, i in vocab.items()}[row],
                "id": row,
                "match": "casefold",
            }
            checked += 1
    assert checked >= 20


def test_a_sentencepiece_word_as_its_tokenizer_normalises_it(client: TestClient, data_dir: Path) -> None:
    """The SentencePiece model's normaliser (NFKC) reads full-width letters as plain ones: "ｎｅｅｄ" and "ＮＥＥＤ"
    are ``▁need`` to it. A text it leaves blank (a control character) is no row, not the space marker's ``▁``."""
    tokenizer = Tokenizer.from_file(str(data_dir / "tiny-sp" / "tokenizer.json"))
    vocab = tokenizer.get_vocab()
    assert "▁need" in vocab and "▁" in vocab
    for typed in ("ｎｅｅｄ", "ＮＥＥＤ"):
        assert tokenizer.normalizer.normalize_str(typed).casefold() == "need"
        got = client.get("/v1/tables/tiny-sp/neighbors", params={"token": typed, "k": 3}).json()
        assert got["query"] == {"text": typed, "token": "▁need", "id": vocab["▁need"], "match": "normalized"}
    for blank in ("\x07", "\u200b"):
        assert tokenizer.normalizer.normalize_str(blank).strip() == ""
        assert client.get("/v1/tables/tiny-sp/neighbors", params={"token": blank}).status_code == 404


def test_skip_special(client: TestClient, special_ids: set[int]) -> None:
    for row in special_ids:
        vector = client.get(f"/v1/tables/minilm/ids/{row}", params={"normalized": True}).json()["vector"]
        plain = client.post("/v1/tables/minilm/search", json={"vector": vector, "k": 5, "skip_special": False}).json()
        assert ids(plain)[0] == row
        default = client.post("/v1/tables/minilm/search", json={"vector": vector, "k": 5}).json()
        assert not set(ids(default)) & special_ids and len(ids(default)) == 5


def test_whole_words_only(client: TestClient, unit: np.ndarray, minilm_tokenizer: Tokenizer) -> None:
    row = minilm_tokenizer.token_to_id("##beat")
    plain = client.get("/v1/tables/minilm/neighbors", params={"id": row, "k": K}).json()
    assert any(n["token"].startswith("##") for n in plain["neighbors"])
    words = client.get("/v1/tables/minilm/neighbors", params={"id": row, "k": K, "whole_words_only": True}).json()
    vocab = minilm_tokenizer.get_vocab()
    drop = {i for t, i in vocab.items() if t.startswith("##") or t in SPECIALS} | {row}
    assert ids(words) == brute_force(unit, unit[row], K, drop)
    assert not any(n["token"].startswith("##") for n in words["neighbors"])


def test_an_expected_answer_left_out_says_which_kind_and_which_option(client: TestClient) -> None:
    question = {"a": "man", "b": "king", "c": "woman"}
    refusals = [
        (
            {"expect": "[CLS]"},
            "the expected word '[CLS]' is a special token, which skip_special leaves out of the "
            "answers: send skip_special: false to rank it",
        ),
        (
            {"expect": "##s", "whole_words_only": True},
            "the expected word '##s' is a continuation piece, which "
            "whole_words_only leaves out of the answers: send whole_words_only: false to rank it",
        ),
    ]
    for fields, message in refusals:
        response = client.post("/v1/tables/minilm/analogy", json={**question, **fields})
        assert response.status_code == 422
        assert response.json() == {"error": {"code": "invalid_request", "message": message}}
    ranked = client.post("/v1/tables/minilm/analogy", json={**question, "expect": "[CLS]", "skip_special": False})
    assert ranked.status_code == 200 and ranked.json()["expect"]["token"] == "[CLS]"


def test_compose_mean(client: TestClient, unit: np.ndarray, minilm_tokenizer: Tokenizer, special_ids: set[int]) -> None:
    unknown = client.get("/v1/tables/minilm/neighbors", params={"token": "heartache"})
    assert unknown.status_code == 404
    got = client.get("/v1/tables/minilm/neighbors", params={"token": "heartache", "k": K, "compose": "mean"}).json()
    pieces = minilm_tokenizer.encode("heartache", add_special_tokens=False).ids
    assert got["query"]["match"] == "composed" and got["query"]["compose"] == "mean"
    assert [p["id"] for p in got["query"]["tokens"]] == pieces
    mean = unit[pieces].mean(axis=0)
    assert ids(got) == brute_force(unit, mean, K, set(pieces) | special_ids)

    sim = client.get("/v1/tables/minilm/similarity", params={"a": "heartache", "b": "heart", "compose": "mean"}).json()
    heart = minilm_tokenizer.token_to_id("heart")
    assert sim["similarity"] == pytest.approx(float(mean @ unit[heart] / np.linalg.norm(mean)), rel=1e-5)
    assert sim["query"]["a"]["match"] == "composed" and sim["query"]["b"]["match"] == "exact"
    batch = client.post("/v1/tables/minilm/similarity", json={"pairs": [["heartache", "heart"]], "compose": "mean"})
    assert batch.json()["similarities"][0] == pytest.approx(sim["similarity"], rel=1e-6)
