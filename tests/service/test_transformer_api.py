"""A transformer table (all-MiniLM-L6-v2, ``--format transformer``) where static encoders serve: ``POST .../embed``,
the OpenAI-compatible ``/v1/embeddings`` through OpenAI's own client against the real ``embedding-serve``
process, and text queries on gensim's Lee corpus imported without vectors and embedded by it (``--encoder``);
writes of more tokens than a request may run, sent in halves, straight and through a front of two shards of it.
The vectors are checked against the encoder called directly and against sentence-transformers' recorded ones."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from index.engine.encode import encoder_for, visible
from index.engine.table import Table
from service.registry import Registry
from service_client import AsyncClient, Client
from service_client.langchain import EmbeddingSearchStore
from tests.cli import run_cli
from tests.conftest import link_table
from tests.early import Early
from tests.index.build.test_embed_documents import without_vectors
from tests.index.build.test_transformer import RECORDED, Reference, _edit, _model_copy, cosine
from tests.lee import Lee, lee_stories, write_jsonl
from tests.minilm import ST, TRANSFORMER, minilm_dir, transformer_data_dir
from tests.service import real_server
from tests.service.conftest import client_for

openai = pytest.importorskip("openai")

TEXTS = ["The heart pumps blood through the body.", "she deposited money at the bank", "word " * 300]
LONG = "word " * 300  # cut at the model's 256 tokens
BOUND = 259  # the tokens a request of the ``bounded`` server may have the model run: LONG and "a" ([CLS] a [SEP])
SERVED_BOUND = 1_024  # the real server's: the recorded texts (833 tokens) at once, 4 or 5 Lee stories
WRITER = {"X-API-Key": "transformer-writer-key-0123456789"}
SHARDED_STORIES = 40  # the stories of the sharded table behind ``front``


def imports_argv(out: Path) -> list[str]:
    """A copy of the session's transformer table ``st`` (``tests.minilm.TRANSFORMER``, done before this starts),
    then the import of the Lee stories without their vectors, embedded by it at import (``--encoder st``): one shell
    command, started at collection (tests/early.py)."""
    path = write_jsonl(out / "lee-text.jsonl", without_vectors(lee_stories()))
    data, model = out / "data", TRANSFORMER.result().out / "data" / ST
    lee = [sys.executable, "-m", "index", "import", str(path), "--format", "documents", "--name", "lee"]
    lee += ["--encoder", ST, "--data-dir", str(data)]
    copy = ["cp", "-R", str(model), str(data / ST)]
    return ["sh", "-c", f"mkdir -p {shlex.quote(str(data))} && {shlex.join(copy)} && {shlex.join(lee)}"]


IMPORTS = Early(__name__, "data_dir", imports_argv, needs=TRANSFORMER)


@pytest.fixture(scope="module")
def data_dir() -> Path:
    done = IMPORTS.result()
    assert done.returncode == 0, done.stderr[-4000:]
    return done.out / "data"


@pytest.fixture(scope="module")
def st(data_dir: Path) -> Table:
    return Table.load(data_dir / "st")


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[TestClient]:
    with client_for(data_dir=data_dir) as test_client:
        yield test_client


def linked_copy(data_dir: Path, copy: Path) -> Path:
    """``copy`` holding linked copies of the tables (its writes go to a log of its own)."""
    copy.mkdir(exist_ok=True)
    for name in ("st", "lee"):
        if not link_table(data_dir / name, copy):  # another file system
            shutil.copytree(data_dir / name, copy / name)
    return copy


@pytest.fixture(scope="module")
def bounded(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A server whose requests may have the model run ``BOUND`` tokens, over linked copies of the tables."""
    copy = linked_copy(data_dir, tmp_path_factory.mktemp("bounded"))
    settings = {"max_encode_tokens": BOUND, "write_keys": [WRITER["X-API-Key"]], "verify_checksums": False}
    with client_for(data_dir=copy, **settings) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_server.Server]:
    """``embedding-serve`` over linked copies of the tables, taking writes, its requests' tokens ``SERVED_BOUND``."""
    root = tmp_path_factory.mktemp("transformer-serve")
    env = {"EMBEDDING_MAX_ENCODE_TOKENS": str(SERVED_BOUND), "EMBEDDING_WRITE_KEYS": WRITER["X-API-Key"]}
    with real_server.running(linked_copy(data_dir, root / "data"), root / "server.log", env=env) as server:
        yield server


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_server.Server]:
    """A front (``EMBEDDING_SHARDS``) of two shard servers of Lee's first stories embedded by ``st`` and imported as
    ``--shards 2`` beside it, each shard's requests' tokens ``SERVED_BOUND``, taking writes."""
    root = tmp_path_factory.mktemp("transformer-shards")
    data = root / "data"
    data.mkdir()
    (root / "front").mkdir()
    if not link_table(transformer_data_dir() / ST, data):  # another file system
        shutil.copytree(transformer_data_dir() / ST, data / ST)
    source = write_jsonl(root / "lee-text.jsonl", without_vectors(lee_stories())[:SHARDED_STORIES])
    done = run_cli(
        "import", source, "--format", "documents", "--name", "lee", "--encoder", ST, "--shards", 2, "--data-dir", data
    )
    assert done.code == 0, done.err
    env = {"EMBEDDING_MAX_ENCODE_TOKENS": str(SERVED_BOUND), "EMBEDDING_WRITE_KEYS": WRITER["X-API-Key"]}
    started = real_server.start_together(*real_server.shard_starts(data / "lee", root, 2, env))
    try:
        config = {"EMBEDDING_SHARDS": json.dumps({"lee": real_server.replicas(started)}), **env}
        started += real_server.start_together(lambda: real_server.start(root / "front", root / "front.log", env=config))
        yield started[-1]
    finally:
        real_server.stop_together(started)


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORDED.read_text(encoding="utf-8"))
    return data


def test_embed_runs_the_model(client: TestClient, st: Table) -> None:
    response = client.post("/v1/tables/st/embed", json={"texts": TEXTS})
    assert response.status_code == 200, response.text
    body = response.json()
    direct = encoder_for(st).encode(TEXTS)
    assert (body["table"], body["pooling"], body["dim"]) == ("st", "mean", 384)
    np.testing.assert_allclose(np.array(body["vectors"], dtype=np.float32), direct.vectors, atol=1e-6)
    assert body["tokens"] == direct.tokens == [10, 8, 256] and body["unknown"] == [0, 0, 0]
    assert body["truncated"] == [False, False, True]
    summary = client.get("/v1/tables/st").json()["transformer"]
    assert summary["pooling"] == "mean" and summary["graph_bytes"] == (st.directory / "model.onnx").stat().st_size
    refused = client.post("/v1/tables/st/embed", json={"texts": ["a"], "pooling": "sif"})
    assert refused.status_code == 422 and "pools by mean" in refused.json()["error"]["message"]


def test_openai_client_gets_sentence_transformers_vectors(server: real_server.Server, recorded: dict[str, Any]) -> None:
    oai = openai.OpenAI(base_url=f"{server.base}/v1", api_key="not-needed", max_retries=0)
    chosen = [i for i, text in enumerate(recorded["texts"]) if visible(text)]  # the API refuses a blank text
    texts = [recorded["texts"][i] for i in chosen]
    answer = oai.embeddings.create(model="st", input=texts)  # the client asks for base64 and decodes it
    assert answer.model == "st" and [item.index for item in answer.data] == list(range(len(texts)))
    for item, i in zip(answer.data, chosen, strict=True):
        assert cosine(np.array(item.embedding), np.array(recorded["vectors"][i])) >= 0.99999, recorded["texts"][i]
    used = sum(len(recorded["input_ids"][i]) for i in chosen)  # the model's tokens, [CLS] and [SEP] included
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (used, used)


def test_text_queries_in_every_mode(client: TestClient, data_dir: Path, st: Table, lee_docs: Lee) -> None:
    text = "bushfires burn homes near Sydney as firefighters battle the wind"
    query = encoder_for(st).encode([text]).vectors[0].astype(np.float64)
    documents = np.asarray(Table.load(data_dir / "lee").vectors, dtype=np.float64)
    expected = [lee_docs.ids[i] for i in np.argsort(-(documents @ query), kind="stable")[:5]]
    answer = client.post("/v1/tables/lee/search", json={"text": text, "k": 5}).json()
    assert [hit["id"] for hit in answer["hits"]] == expected
    vector = query.tolist()
    hybrid = client.post("/v1/tables/lee/search", json={"text": text, "mode": "hybrid", "k": 6}).json()
    given = client.post("/v1/tables/lee/search", json={"text": text, "vector": vector, "mode": "hybrid", "k": 6})
    assert [h["id"] for h in hybrid["hits"]] == [h["id"] for h in given.json()["hits"]] and len(hybrid["hits"]) == 6
    items = [{"text": text}, {"text": text, "mode": "keyword"}]
    results = client.post("/v1/tables/lee/search", json={"queries": items, "k": 4}).json()["results"]
    assert [h["id"] for h in results[0]["hits"]] == expected[:4]
    keyword = client.post("/v1/tables/lee/search", json={"text": text, "mode": "keyword", "k": 4}).json()
    assert results[1]["hits"] == keyword["hits"]
    record = client.get("/v1/tables/lee").json()["documents"]["encoder"]
    assert record["table"] == "st" and record["graph_sha256"] == st.graph_sha256


@pytest.mark.parametrize("blank", [" ", "\u200b", "\x00 \u200b"])
def test_a_blank_text_is_not_embedded(server: real_server.Server, blank: str) -> None:
    """As a blank text query is no query (below), a blank text is no text to embed, on ``.../embed`` and through
    OpenAI's client, as a word table refuses it: the model would embed it as [CLS] [SEP] alone. A text of an unknown
    piece alone is embedded."""
    oai = openai.OpenAI(base_url=f"{server.base}/v1", api_key="not-needed", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        oai.embeddings.create(model="st", input=["a heart", blank])
    assert (refused.value.param, refused.value.code) == ("input[1]", None)
    assert refused.value.response.json()["error"]["message"] == f"input[1] {blank!r} has no words to embed"
    with pytest.raises(openai.BadRequestError) as alone:
        oai.embeddings.create(model="st", input=blank)
    assert alone.value.param == "input" and f"input {blank!r} has no words to embed" in alone.value.message
    embed = real_server.HTTP.post(f"{server.base}/v1/tables/st/embed", json={"texts": [blank]})
    assert embed.status_code == 422 and embed.json()["error"]["message"] == f"texts[0] {blank!r} has no words to embed"
    assert len(oai.embeddings.create(model="st", input="\U0001f642").data) == 1


def test_a_blank_text_query_is_no_query(client: TestClient) -> None:
    """As a blank document is refused (below), so is a blank text query, as a static encoder refuses it: the model
    would embed it as [CLS] [SEP] alone, to which every story scores by chance. Mode hybrid falls back to keyword;
    a text of an unknown piece alone ([CLS] [UNK] [SEP]) is embedded, as sentence-transformers embeds it."""
    for blank in (" ", "  \n\t ", "\u200b", "\x00 \u200b"):  # invisible characters are no words either
        refused = client.post("/v1/tables/lee/search", json={"text": blank, "k": 3})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["message"] == f"text {blank!r} has no words to embed"  # no keyword to find
        hybrid = client.post("/v1/tables/lee/search", json={"text": blank, "k": 3, "mode": "hybrid"}).json()
        assert hybrid == {
            "hits": [],
            "fallback": {"mode": "keyword", "reason": f"text {blank!r} has no words to embed"},
        }
        batch = client.post("/v1/tables/lee/search", json={"queries": [{"text": blank}, {"text": "a bank"}], "k": 3})
        first, second = batch.json()["results"]
        assert (
            first["error"]["message"].startswith(f"text {blank!r} has no words to embed") and len(second["hits"]) == 3
        )
    unknown = client.post("/v1/tables/lee/search", json={"text": "\U0001f642", "k": 3})
    assert unknown.status_code == 200 and len(unknown.json()["hits"]) == 3


def test_the_tokens_a_request_has_the_model_run_are_bounded(bounded: TestClient) -> None:
    """Every route that runs the model counts the tokens of its texts (cut at the model's length, [CLS] and [SEP]
    included) against max_encode_tokens, before the model runs: one token over it is a 422 naming the count, the
    bound and the setting; a batch of text queries counts its items together and is refused whole."""
    within = bounded.post("/v1/tables/st/embed", json={"texts": [LONG, "a"]})
    assert within.status_code == 200 and within.json()["tokens"] == [256, 3]
    message = (
        "tokens for the model of table 'st' to run: 260, more than the server's max_encode_tokens of 259; send "
        "fewer or shorter texts at a time: 1 text of any length fits in one request (the model cuts each at 256 "
        "tokens)"
    )
    over = bounded.post("/v1/tables/st/embed", json={"texts": [LONG, "a b"]})
    refusal = {"code": "invalid_request", "message": message, "limit": "max_encode_tokens"}  # the setting reached
    assert over.status_code == 422 and over.json() == {"error": refusal}
    openai_shape = {"message": message, "type": "invalid_request_error", "param": "input", "code": None}
    embeddings = bounded.post("/v1/embeddings", json={"model": "st", "input": [LONG, "a b"]})
    assert (embeddings.status_code, embeddings.json()) == (400, {"error": openai_shape})  # OpenAI's status
    contextual = bounded.post("/v1/tables/st/contextual", json={"texts": [LONG, "a b"]})
    assert (contextual.status_code, contextual.json()["error"]["message"]) == (422, message)
    documents = [{"id": "w1", "text": LONG}, {"id": "w2", "text": "a b"}]
    written = bounded.post("/v1/tables/lee/documents", json={"documents": documents}, headers=WRITER)
    assert (written.status_code, written.json()["error"]["message"]) == (422, message)
    assert bounded.get("/v1/tables/lee").json()["writes"]["written"] == 0
    queries = [{"text": LONG}, {"text": "a b", "mode": "hybrid"}]
    search = bounded.post("/v1/tables/lee/search", json={"queries": queries, "k": 3})
    assert search.status_code == 422, search.text[:400]
    counted = message.replace("260,", "260 (256 of them by this request's texts before),")  # LONG ran, "a b" not
    assert search.json()["error"]["message"] == counted
    assert bounded.post("/v1/tables/lee/search", json={"text": "a b", "k": 3}).status_code == 200


def test_langchain_and_llamaindex_embed_in_the_batches_the_refusal_names(server: real_server.Server, st: Table) -> None:
    """LangChain's and LlamaIndex's OpenAI embeddings send a batch as one request and cannot split one refused for
    its tokens: at their default batch sizes (1,000 and 100 texts) a few long texts are refused, the refusal saying
    how many texts fit (SERVED_BOUND // 256 = 4); at that batch size, as docs/documents.md says, every text is
    embedded as the encoder embeds it."""
    from langchain_openai import OpenAIEmbeddings
    from llama_index.embeddings.openai import OpenAIEmbedding

    texts = lee_stories().texts[:10]  # 1,915 tokens as the model cuts them: over SERVED_BOUND
    expected = encoder_for(st).encode(texts).vectors
    base = f"{server.base}/v1"
    fit = SERVED_BOUND // 256
    chain = {"model": "st", "base_url": base, "api_key": "unused", "check_embedding_ctx_length": False}
    llama = {"model_name": "st", "api_base": base, "api_key": "unused"}
    refusals = (
        lambda: OpenAIEmbeddings(**chain, max_retries=0).embed_documents(texts),
        lambda: OpenAIEmbedding(**llama, max_retries=1).get_text_embedding_batch(texts),
    )
    for embed in refusals:
        with pytest.raises(openai.BadRequestError) as refused:
            embed()
        assert (refused.value.code, refused.value.param) == (None, "input")
        told = f"; send fewer or shorter texts at a time: {fit} texts of any length fit in one request (the model "
        assert told + "cuts each at 256 tokens)" in refused.value.message
    vectors = OpenAIEmbeddings(**chain, chunk_size=fit).embed_documents(texts)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    vectors = OpenAIEmbedding(**llama, embed_batch_size=fit).get_text_embedding_batch(texts)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)


def halves(lengths: list[int], start: int, end: int) -> list[int]:
    """The documents of each write request of texts ``start`` to ``end`` of ``lengths`` tokens, in order: all of
    them if their tokens fit ``SERVED_BOUND`` (or one alone), else each half's."""
    if end - start == 1 or sum(lengths[start:end]) <= SERVED_BOUND:
        return [end - start]
    middle = (start + end) // 2
    return halves(lengths, start, middle) + halves(lengths, middle, end)


def test_writes_of_more_tokens_than_a_request_may_run_are_sent_in_halves(server: real_server.Server, st: Table) -> None:
    """A write refused for the tokens its texts have the model run (the refusal's ``limit`` names the setting;
    nothing of it is written) is sent again by the clients in halves, until each fits: ``upsert_many`` of both
    clients and LangChain's ``add_texts`` of Lee stories of several times the bound write every document, each as
    a write of it alone, in requests answered in order."""
    texts = lee_stories().texts[:24]
    lengths = [len(ids) for ids in encoder_for(st).tokenise(texts).ids]
    assert sum(lengths) > 4 * SERVED_BOUND
    key = WRITER["X-API-Key"]
    client = Client(server.base, api_key=key, timeout=120)
    written = [{"id": f"many-{i}", "text": text} for i, text in enumerate(texts)]
    refused = httpx.post(f"{server.base}/v1/tables/lee/documents", json={"documents": written}, headers=WRITER)
    assert refused.status_code == 422 and refused.json()["error"]["limit"] == "max_encode_tokens", refused.text
    answers = client.upsert_many("lee", written)
    assert [a["sequence"] for a in answers] == sorted({a["sequence"] for a in answers})
    assert [a["upserted"] for a in answers] == halves(lengths, 0, len(texts)) and len(answers) > 4
    EmbeddingSearchStore(client, "lee").add_texts(texts, ids=[f"chain-{i}" for i in range(len(texts))])

    async def write_async() -> list[dict[str, Any]]:
        async with AsyncClient(server.base, api_key=key, timeout=120) as async_client:
            return await async_client.upsert_many("lee", [{**d, "id": f"async-{d['id']}"} for d in written])

    assert sum(a["upserted"] for a in asyncio.run(write_async())) == len(texts)
    for i, text in enumerate(texts):
        client.upsert_documents("lee", [{"id": f"alone-{i}", "text": text}])
    for i, text in enumerate(texts):
        ids = [f"alone-{i}", f"many-{i}", f"chain-{i}", f"async-many-{i}"]
        got = client.documents("lee", ids, vector=True)["documents"]
        assert [d["id"] for d in got] == ids and {d["text"] for d in got} == {text}
        np.testing.assert_allclose([d["vector"] for d in got[1:]], [got[0]["vector"]] * 3, atol=1e-6)
        found = client.search_documents("lee", k=5, vector=got[0]["vector"])  # with the imported story itself
        assert set(ids) < {hit.id for hit in found.hits}, i


def test_writes_through_a_front_of_more_tokens_than_a_request_may_run_are_each_written_once(
    front: real_server.Server,
) -> None:
    """Through a sharded table's front, a write refused for its tokens may have been written by the shards whose
    part fit their bound before the client sends it again in halves: ``upsert_many`` and LangChain's ``add_texts``
    of Lee stories of several times the bound end with every document written once, as the front reads, scrolls
    and searches the table."""
    texts = lee_stories().texts[SHARDED_STORIES : SHARDED_STORIES + 24]
    lengths = [len(ids) for ids in encoder_for(Table.load(transformer_data_dir() / ST)).tokenise(texts).ids]
    assert sum(lengths) > 4 * SERVED_BOUND
    client = Client(front.base, api_key=WRITER["X-API-Key"], timeout=120)
    written = [{"id": f"many-{i}", "text": text} for i, text in enumerate(texts)]
    refused = httpx.post(f"{front.base}/v1/tables/lee/documents", json={"documents": written}, headers=WRITER)
    assert refused.status_code == 422 and refused.json()["error"]["limit"] == "max_encode_tokens", refused.text
    answers = client.upsert_many("lee", written)
    assert sum(a["upserted"] for a in answers) == len(texts)
    writes = client.table("lee")["writes"]  # the shards' records: the answered ones', and parts of refused requests
    records = sum(shard["sequence"] for shard in writes["shards"])
    assert writes["written"] == len(texts) and records > sum(len(a["shards"]) for a in answers), (writes, answers)
    chain = EmbeddingSearchStore(client, "lee").add_texts(texts, ids=[f"chain-{i}" for i in range(len(texts))])
    assert chain == [f"chain-{i}" for i in range(len(texts))]
    ids = [f"{kind}-{i}" for kind in ("many", "chain") for i in range(len(texts))]
    got = client.documents("lee", ids, vector=True)
    assert [d["id"] for d in got["documents"]] == ids and got["missing"] == []
    assert [d["text"] for d in got["documents"]] == [*texts, *texts]
    listed, after = [], None
    while True:  # page after page of the shards' merged pages
        page = client.scroll_documents("lee", limit=10, after=after)
        listed += [d["id"] for d in page["documents"]]
        if (after := page["next"]) is None:
            break
    assert sorted(listed) == sorted([*ids, *lee_stories().ids[:SHARDED_STORIES]]), listed
    for i, document in enumerate(got["documents"][: len(texts)]):
        hits = client.search_documents("lee", vector=document["vector"], k=3).hits
        assert {f"many-{i}", f"chain-{i}"} <= {hit.id for hit in hits}, (i, hits)


def test_documents_are_served_only_beside_the_same_model(tmp_path: Path, data_dir: Path) -> None:
    """The same token rows with another graph (the checkpoint rebuilt with CLS pooling) is another encoder."""
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    model = _model_copy(tmp_path)
    _edit(model / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    done = run_cli("import", model, "--format", "transformer", "--name", "st", "--data-dir", copy, "--force")
    assert done.code == 0, done.err
    rebuilt = Table.load(copy / "st")
    assert rebuilt.vectors_sha256 == Table.load(data_dir / "st").vectors_sha256
    registry = Registry.load(copy)
    assert "st" in registry.tables and "lee" not in registry.tables
    assert "other vectors than table 'st' holds now" in registry.failed["lee"]


# ------------------------------------------------------------------ POST .../contextual
BANK = ["the river bank was muddy", "she deposited money at the bank", "we fished from the bank of the river"]


def test_contextual_bank(client: TestClient, st: Table) -> None:
    response = client.post("/v1/tables/st/contextual", json={"texts": BANK, "token": "bank", "k": 5})
    assert response.status_code == 200, response.text
    body = response.json()
    first = body["texts"][0]
    assert [t["token"] for t in first["tokens"]] == ["[CLS]", "the", "river", "bank", "was", "muddy", "[SEP]"]
    assert first["truncated"] is False and len(first["tokens"][3]["vector"]) == 384
    # the last-layer vectors are the model's: the float64 forward pass of the same weights agrees
    reference = Reference(minilm_dir()).tokens([t["id"] for t in first["tokens"]])
    got = np.array([t["vector"] for t in first["tokens"]])
    assert min(cosine(a, b) for a, b in zip(got, reference, strict=True)) >= 0.9999
    word = body["token"]
    assert word["pieces"] == [{"id": 2924, "token": "bank"}]
    assert [(o["text"], o["position"]) for o in word["occurrences"]] == [(0, 3), (1, 6), (2, 5)]
    for o in word["occurrences"]:
        assert np.allclose(o["vector"], body["texts"][o["text"]]["tokens"][o["position"]]["vector"])
        assert np.isclose(o["static_cosine"], cosine(np.array(o["vector"]), np.array(word["static"]["vector"])))
        assert o["neighbors"][0]["token"] == "bank" and len(o["neighbors"]) == 5
    static = np.asarray(st.vectors[2924], dtype=np.float64) * float(st.norms[2924])
    np.testing.assert_allclose(word["static"]["vector"], static, rtol=1e-6)
    cosines = np.array(word["cosines"])
    # the two river banks are nearer each other than either is to the bank of money
    assert cosines[0, 2] > max(cosines[0, 1], cosines[1, 2])
    assert np.allclose(np.diag(cosines), 1) and np.allclose(cosines, cosines.T)


def test_contextual_word_of_several_pieces(client: TestClient) -> None:
    texts = ["heartache after the loss", "no heartache here"]
    word = client.post("/v1/tables/st/contextual", json={"texts": texts, "token": "heartache"}).json()["token"]
    assert [p["token"] for p in word["pieces"]] == ["heart", "##ache"]
    assert [(o["text"], o["position"]) for o in word["occurrences"]] == [(0, 1), (1, 2)]


def test_contextual_finds_a_word_whole_not_inside_a_longer_one(client: TestClient) -> None:
    """ "heart" is not found as the first piece of "heartache" (heart ##ache), nor "heartache" in "heartaches"."""
    texts = ["my heartache will pass", "a heart attack", "so many heartaches"]
    heart = client.post("/v1/tables/st/contextual", json={"texts": texts, "token": "heart"}).json()["token"]
    assert [(o["text"], o["position"]) for o in heart["occurrences"]] == [(1, 2)]
    ache = client.post("/v1/tables/st/contextual", json={"texts": texts, "token": "heartache"}).json()["token"]
    assert [(o["text"], o["position"]) for o in ache["occurrences"]] == [(0, 2)]
    bank = client.post("/v1/tables/st/contextual", json={"texts": ["the bankroll was large"], "token": "bank"})
    assert bank.status_code == 422 and "occurs in none of the texts" in bank.json()["error"]["message"]


def test_contextual_word_cut_by_truncation_is_not_whole(client: TestClient) -> None:
    """A text cut to 256 tokens between "heart" and "##ache" holds no whole "heart"; cut after it, it does."""
    filler = "a " * 253  # [CLS], 253 pieces, then the word's first piece at 254, [SEP] at 255
    texts = [filler + "heartache", filler + "heart attack"]
    body = client.post("/v1/tables/st/contextual", json={"texts": texts, "token": "heart"}).json()
    assert [text["truncated"] for text in body["texts"]] == [True, True]
    assert [text["tokens"][254]["token"] for text in body["texts"]] == ["heart", "heart"]
    assert [(o["text"], o["position"]) for o in body["token"]["occurrences"]] == [(1, 254)]


def test_contextual_unknown_word_is_not_any_other(client: TestClient) -> None:
    """A word the tokenizer reads as [UNK] is refused (422, as a word in none of the texts): it would be found
    wherever any other unknown word is."""
    response = client.post("/v1/tables/st/contextual", json={"texts": ["I love 🎉 parties"], "token": "😀"})
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "invalid_request",
        "message": "token '😀' is not in table 'st', and its tokenizer gives '[UNK]' for it",
    }
    unk = client.post("/v1/tables/st/contextual", json={"texts": ["I love 🎉 parties"], "token": "[UNK]"}).json()
    assert [(o["text"], o["position"]) for o in unk["token"]["occurrences"]] == [(0, 3)]


def test_the_python_client_asks_for_contextual_vectors_and_truncation(client: TestClient) -> None:
    from service_client import Client

    api = Client("http://testserver", http=client)
    answer = api.contextual("st", BANK[:2], token="bank", k=3)
    assert answer == client.post("/v1/tables/st/contextual", json={"texts": BANK[:2], "token": "bank", "k": 3}).json()
    assert [len(o["neighbors"]) for o in answer["token"]["occurrences"]] == [3, 3]
    alone = api.contextual("st", ["a bank"])
    assert "token" not in alone and [t["token"] for t in alone["texts"][0]["tokens"]] == ["[CLS]", "a", "bank", "[SEP]"]
    details = api.embed_details("st", [BANK[0], LONG])
    assert (details.truncated, details.tokens, details.unknown, details.pooling) == (
        [False, True],
        [7, 256],
        [0, 0],
        "mean",
    )


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/v1/tables/lee/contextual", {"texts": ["a"]}, "table 'lee' is not a transformer table"),
        ("/v1/tables/st/contextual", {"texts": ["the river"], "token": "bank"}, "'bank' (bank) occurs in none"),
        ("/v1/tables/st/contextual", {"texts": ["a"] * 17}, "texts: List should have at most 16 items"),
        (  # a zero-width space: BERT's tokenizer drops it, leaving no piece to follow
            "/v1/tables/st/contextual",
            {"texts": ["the river"], "token": "\u200b"},
            "token '\\u200b' has no piece in the tokenizer of table 'st'",
        ),
        ("/v1/tables/st/contextual", {"texts": ["a"], "k": 0}, "k: Input should be greater than or equal to 1"),
        (  # each text cut at the model's length: more occurrences than are followed (their cosines grow as the square)
            "/v1/tables/st/contextual",
            {"texts": ["bank " * 300] * 2, "token": "bank"},
            "'bank' occurs 508 times in the texts; at most 256 are followed (give fewer texts, or leave token out)",
        ),
    ],
)
def test_contextual_errors(client: TestClient, path: str, body: dict[str, Any], message: str) -> None:
    response = client.post(path, json=body)
    assert response.status_code == 422
    assert message in response.json()["error"]["message"]


def test_a_blank_text_written_to_a_transformer_documents_table_is_refused(data_dir: Path, tmp_path: Path) -> None:
    """As at import: a transformer embeds a blank text as [CLS] [SEP] alone, which is no document."""
    shutil.copytree(data_dir, tmp_path / "data")
    key = {"X-API-Key": "transformer-writer-key-0123456789"}
    with client_for(data_dir=tmp_path / "data", write_keys=[key["X-API-Key"]]) as writer:
        for blank in ("", "   \n "):
            answer = writer.post(
                "/v1/tables/lee/documents", json={"documents": [{"id": "w", "text": blank}]}, headers=key
            )
            assert answer.status_code == 422 and "documents[0] (id 'w')" in answer.text, answer.text
        written = writer.post(
            "/v1/tables/lee/documents", json={"documents": [{"id": "w", "text": "a bank"}]}, headers=key
        )
        assert written.status_code == 200, written.text
