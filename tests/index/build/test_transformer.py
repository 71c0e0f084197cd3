"""Transformer tables: all-MiniLM-L6-v2 imported with ``--format transformer``, its ONNX graph run by ONNX Runtime,
checked against a float64 NumPy forward pass of the same weights written here and against the vectors
sentence-transformers itself gave (recorded once by ``bench/record_sentence_transformers.py``)."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file
from scipy.special import erf

from index.build.sources import ReadOptions
from index.build.sources import transformer as transformer_source
from index.engine import door
from index.engine.contextual import contextual
from index.engine.encode import encoder_for
from index.engine.table import Table
from index.engine.transformer_encoder import TOKENS, TransformerEncoder, batches
from index.errors import ArtifactError, InputError, InvalidQuery
from index.store import artifact
from index.store.artifact import GRAPH
from tests import REPO
from tests.cli import progress_lines, run_cli, run_index
from tests.minilm import ST, minilm_dir

RECORDED = REPO / "tests" / "data" / "sentence-transformers-minilm.json"
NAME = ST  # imported by ``embedding-index import`` once per session (``minilm_st_dir``, tests/minilm.py)


@pytest.fixture(scope="module")
def data_dir(minilm_st_dir: Path) -> Path:
    return minilm_st_dir


@pytest.fixture(scope="module")
def table(data_dir: Path) -> Table:
    return Table.load(data_dir / NAME)


@pytest.fixture(scope="module")
def encoder(table: Table) -> TransformerEncoder:
    found = encoder_for(table)
    assert isinstance(found, TransformerEncoder)
    return found


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORDED.read_text(encoding="utf-8"))
    return data


# ------------------------------------------------------------------ the float64 reference
class Reference:
    """BERT's forward pass and sentence-transformers' mean pooling and normalisation, in float64, one text at a
    time (no padding, no mask): written from the architecture, sharing no code with the graph builder."""

    def __init__(self, directory: Path) -> None:
        self.w = {k: v.astype(np.float64) for k, v in load_file(str(directory / "model.safetensors")).items()}
        self.config = json.loads((directory / "config.json").read_text())

    def layer_norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        eps = self.config["layer_norm_eps"]
        out: np.ndarray = (x - mean) / np.sqrt(var + eps) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]
        return out

    def dense(self, x: np.ndarray, name: str) -> np.ndarray:
        out: np.ndarray = x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]
        return out

    def tokens(self, ids: list[int]) -> np.ndarray:
        n, heads = len(ids), self.config["num_attention_heads"]
        size = self.config["hidden_size"] // heads
        x = (
            self.w["embeddings.word_embeddings.weight"][ids]
            + self.w["embeddings.position_embeddings.weight"][:n]
            + self.w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self.layer_norm(x, "embeddings.LayerNorm")
        for i in range(self.config["num_hidden_layers"]):
            p = f"encoder.layer.{i}"
            q, k, v = (
                self.dense(x, f"{p}.attention.self.{m}").reshape(n, heads, size).transpose(1, 0, 2)
                for m in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = (scores / scores.sum(-1, keepdims=True)) @ v
            context = context.transpose(1, 0, 2).reshape(n, heads * size)
            x = self.layer_norm(
                self.dense(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm"
            )
            inner = self.dense(x, f"{p}.intermediate.dense")
            inner = 0.5 * inner * (1 + erf(inner / math.sqrt(2)))
            x = self.layer_norm(self.dense(inner, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        return x

    def sentence(self, ids: list[int]) -> np.ndarray:
        pooled = self.tokens(ids).mean(0)
        unit: np.ndarray = pooled / np.linalg.norm(pooled)
        return unit


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ------------------------------------------------------------------ import
def test_import_keeps_the_graph_with_its_checksum(table: Table, tmp_path: Path) -> None:
    manifest = table.manifest
    assert manifest["transformer"] == {
        "graph": GRAPH,
        "opset": 17,
        "model_type": "bert",
        "layers": 6,
        "hidden_size": 384,
        "heads": 12,
        "intermediate_size": 1536,
        "pooling": "mean",
        "normalize": True,
        "max_seq_length": 256,
        "do_lower_case": False,
    }
    assert manifest["kind"] == "tokens" and (table.rows, table.dim) == (30_522, 384)
    graph = table.directory / GRAPH
    assert manifest["files"][GRAPH]["sha256"] == artifact.sha256_file(graph)
    # a damaged graph is a table that does not load
    damaged = tmp_path / "damaged"  # the session's table is read-only for its readers
    shutil.copytree(table.directory, damaged)
    with open(damaged / GRAPH, "r+b") as handle:
        handle.seek(-8, 2)
        byte = handle.read(1)
        handle.seek(-8, 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ArtifactError, match=r"model\.onnx: sha256 differs"):
        Table.load(damaged)


def _model_copy(tmp_path: Path) -> Path:
    """A copy of the model directory whose large files are links, for editing its small ones."""
    copy = tmp_path / "model"
    copy.mkdir()
    for item in minilm_dir().iterdir():
        if item.is_dir():
            shutil.copytree(item, copy / item.name)
        elif item.stat().st_size > 1 << 20:
            (copy / item.name).symlink_to(item)
        else:
            shutil.copy(item, copy / item.name)
    return copy


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    model = _model_copy(tmp_path)
    (model / "modules.json").unlink()
    done = run_index("import", str(model), "--format", "transformer", "--name", "x", "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[1:] == [  # after the progress line, one line naming the file
        f"embedding-index: error: {model / 'modules.json'}: missing (a sentence-transformers model directory has it)"
    ]
    assert not (tmp_path / "d" / "x").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: (m / "sentence_bert_config.json").unlink(), "sentence_bert_config.json: missing"),
        (lambda m: (m / "1_Pooling" / "config.json").unlink(), "1_Pooling/config.json: missing"),
        (lambda m: (m / "model.safetensors").unlink(), "no *.safetensors file"),
        (lambda m: _edit(m / "config.json", model_type="xlm-roberta"), "model_type 'xlm-roberta' is not supported"),
        (lambda m: _edit(m / "config.json", hidden_act="relu"), "hidden_act 'relu' is not supported"),
        (
            lambda m: _edit(
                m / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True
            ),
            "unsupported pooling max_tokens",
        ),
        (lambda m: _edit(m / "sentence_bert_config.json", max_seq_length=4096), "max_seq_length must be an integer"),
        (lambda m: _edit(m / "sentence_bert_config.json", do_lower_case="yes"), "do_lower_case must be true or false"),
    ],
)
def test_unsupported_or_missing(tmp_path: Path, edit: Any, message: str) -> None:
    model = _model_copy(tmp_path)
    edit(model)
    with pytest.raises(InputError, match=message.replace("*", r"\*")):
        transformer_source.read(model, ReadOptions())


def _edit(path: Path, **changes: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_model_that_lower_cases_is_given_lower_cased_text(tmp_path: Path) -> None:
    """A cased tokenizer whose model sets ``do_lower_case`` (sentence-transformers then lower-cases the texts
    itself): the flag is kept in the manifest, and a cased text has the vectors of its lower-cased text, those of
    the NumPy forward pass of the lower-cased text's pieces; the table's tokenizer and composed words agree."""
    from tokenizers import Tokenizer

    model = _model_copy(tmp_path)
    _edit(model / "sentence_bert_config.json", do_lower_case=True)
    shipped = json.loads((model / "tokenizer.json").read_text())
    shipped["normalizer"]["lowercase"] = False  # a cased tokenizer: the model asks for lower-cased text instead
    (model / "tokenizer.json").write_text(json.dumps(shipped))
    data = tmp_path / "data"
    done = run_cli("import", model, "--format", "transformer", "--name", "cased", "--data-dir", data)
    assert done.code == 0, done.err
    table = Table.load(data / "cased")
    assert table.manifest["transformer"]["do_lower_case"] is True
    encoder = TransformerEncoder(table)
    texts = ["Hello World from PARIS", "Crème Brûlée in İstanbul", "The Bank of the RIVER"]
    lowered = [text.lower() for text in texts]
    cased = Tokenizer.from_file(str(model / "tokenizer.json"))
    cased.no_truncation()
    cased.no_padding()
    pieces = [cased.encode(text).ids for text in lowered]
    assert [cased.encode(text).ids for text in texts] != pieces  # the tokenizer alone keeps the case
    assert encoder.tokenise(texts).ids == pieces
    vectors = encoder.encode(texts).vectors
    np.testing.assert_array_equal(vectors, encoder.encode(lowered).vectors)
    reference = Reference(minilm_dir())
    for i, ids in enumerate(pieces):
        assert cosine(vectors[i], reference.sentence(ids)) >= 0.99999, texts[i]
    followed = contextual(encoder, texts, token="Paris")  # the word followed is lower-cased too
    assert [piece["token"] for piece in followed["token"]["pieces"]] == ["paris"]
    # so is a text split by POST .../tokenize, and a word composed from its pieces (compose="mean")
    assert [i for i, _ in table.tokenize(texts[0])] == cased.encode(lowered[0], add_special_tokens=False).ids
    score, found = door.similarity(table, "HeartAche", "heartache", compose="mean")
    assert [piece["token"] for piece in found["a"]["tokens"]] == ["heart", "##ache"]
    assert found["a"]["tokens"] == found["b"]["tokens"] and score == pytest.approx(1.0)


# ------------------------------------------------------------------ truth
def test_onnx_runtime_equals_float64_numpy(encoder: TransformerEncoder, recorded: dict[str, Any]) -> None:
    texts = recorded["texts"]
    assert "" in texts and any(len(ids) == 256 for ids in recorded["input_ids"])  # empty and over-length among them
    reference = Reference(minilm_dir())
    tokenised = encoder.tokenise(texts)
    out = encoder.forward(tokenised.ids, tokens=True)
    for i, ids in enumerate(tokenised.ids):
        assert cosine(out.vectors[i], reference.sentence(ids)) >= 0.99999, texts[i]
    assert out.tokens is not None
    for i in (3, 7, 11):  # per-token last-layer vectors too (a short, a CJK and a cut text)
        expected = reference.tokens(tokenised.ids[i])
        got = out.tokens[i]
        assert got.shape == expected.shape
        assert min(cosine(a, b) for a, b in zip(got, expected, strict=True)) >= 0.9999


def test_equals_sentence_transformers(encoder: TransformerEncoder, recorded: dict[str, Any]) -> None:
    texts = recorded["texts"]
    assert recorded["max_seq_length"] == encoder.max_length == 256
    encoded = encoder.encode(texts)
    tokenised = encoder.tokenise(texts)
    assert tokenised.ids == recorded["input_ids"]  # the same pieces, cut at the same place
    assert encoded.truncated == [len(ids) == 256 for ids in recorded["input_ids"]]
    assert sum(encoded.truncated or []) == 2
    assert [t + u for t, u in zip(encoded.tokens, encoded.unknown, strict=True)] == [len(i) for i in tokenised.ids]
    expected = np.asarray(recorded["vectors"], dtype=np.float64)
    for i, text in enumerate(texts):
        assert cosine(encoded.vectors[i], expected[i]) >= 0.99999, text
    assert np.allclose(np.linalg.norm(encoded.vectors, axis=1), 1, atol=1e-6)


def test_shipped_tokenizer_limits_are_overridden(table: Table, encoder: TransformerEncoder) -> None:
    shipped = json.loads((table.directory / "tokenizer.json").read_text())
    assert shipped["truncation"]["max_length"] == 128 and shipped["padding"]["strategy"] == {"Fixed": 128}
    lengths = [len(ids) for ids in encoder.tokenise(["short", "word " * 200, "word " * 1000]).ids]
    assert lengths == [3, 202, 256]


def test_batches_by_length_give_each_text_its_own_vector(encoder: TransformerEncoder) -> None:
    texts = [f"{'a long sentence about rivers and banks ' * (i % 7)} number {i}" for i in range(70)]
    together = encoder.encode(texts).vectors
    alone = np.vstack([encoder.encode([text]).vectors for text in texts[::9]])
    assert np.abs(together[::9] - alone).max() < 1e-5


def test_runs_hold_about_tokens_padded_and_every_text_once() -> None:
    lengths = np.array([300, 3, 40, 12, 12, 256, 7, 90, 30, 30, 30, 30, 30, 30, 30, 30, 30], dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    runs = batches(lengths[order], order)
    assert np.array_equal(np.concatenate(runs), order)
    for run in runs:
        assert len(run) == 1 or len(run) * lengths[run].max() <= TOKENS
    # each run as full as the budget allows: the next text would not have fitted
    for run, following in itertools.pairwise(runs):
        assert (len(run) + 1) * lengths[following[0]] > TOKENS
    assert [len(run) for run in runs] == [8, 6, 1, 1, 1]


def test_pooling_is_the_models(encoder: TransformerEncoder) -> None:
    assert encoder.check(None) == encoder.check("mean") == "mean"
    with pytest.raises(InvalidQuery, match="pools by mean"):
        encoder.check("sif")


def test_threads_follow_faiss(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBEDDING_THREADS", "1")
    fresh = TransformerEncoder(table)
    assert fresh.session.get_session_options().intra_op_num_threads == 1


def test_an_import_embeds_blocks_on_single_threaded_runs_with_the_same_vectors(
    table: Table, encoder: TransformerEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An import's blocks run on one thread per core through one single-threaded session: the vectors and the
    texts found embeddable are those of one run of the table's own encoder, block by block, in order."""
    from index.build import embed_documents
    from index.build.embed_documents import TextEncoder

    monkeypatch.setenv("EMBEDDING_THREADS", "3")
    monkeypatch.setattr(embed_documents, "MODEL_BLOCK_TEXTS", 7)  # many blocks, run out of order
    opened = TextEncoder.open(table.directory)
    assert opened.runs == 3 and isinstance(opened.encoder, TransformerEncoder)
    assert opened.encoder.session.get_session_options().intra_op_num_threads == 1
    texts = [f"sentence {i} about the {word} of the river bank" for i, word in enumerate(["edge", "money"] * 20)]
    texts[5], texts[22], texts[39] = "", "   ", None  # blank texts are no documents, wherever they fall
    found = opened.embed(texts)
    serial = TextEncoder(table, encoder).embed(texts)
    assert found.ok.tolist() == [i not in (5, 22, 39) for i in range(40)] and np.array_equal(found.ok, serial.ok)
    assert found.matrix.shape == (37, table.dim) and np.array_equal(found.matrix, serial.matrix)


def test_an_import_shows_progress_as_the_model_runs_end(
    table: Table, encoder: TransformerEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block of texts (seconds of work on a busy machine) advances the import's progress run by run of the model,
    not once at its end; the lines count the texts up to all of them."""
    from index import progress
    from index.build.embed_documents import TextEncoder

    monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at every step forward
    monkeypatch.setenv("EMBEDDING_THREADS", "1")
    texts = [f"sentence {i} about the edge of the river bank, " * 4 for i in range(24)]  # one block, several runs
    lengths = np.array([len(ids) for ids in encoder.tokenise(texts).ids])
    runs = batches(lengths, np.argsort(lengths, kind="stable"))
    with progress_lines() as shown:
        TextEncoder.open(table.directory).embed(texts)
    states = [line.split(f"embedding with {NAME}: ", 1)[1] for line in shown.getvalue().splitlines() if NAME in line]
    counted = [int(state.split("(")[1].split(" of ")[0]) for state in states[:-1]]
    assert len(runs) > 2 and counted == np.cumsum([len(run) for run in runs])[:-1].tolist(), states
    assert states[-1].startswith("done (24 of 24 documents)")


def test_requests_that_come_together_share_one_session(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first requests of a table, arriving together in worker threads, load one tokenizer and one session."""
    import onnxruntime
    import tokenizers

    opened: list[str] = []
    real_session, real_tokenizer = onnxruntime.InferenceSession, tokenizers.Tokenizer

    def slow_session(*args: Any, **kwargs: Any) -> Any:
        opened.append("session")
        time.sleep(0.2)  # long enough for every thread to ask while the first one loads
        return real_session(*args, **kwargs)

    class SlowTokenizer:
        @staticmethod
        def from_file(path: str) -> Any:
            opened.append("tokenizer")
            time.sleep(0.2)
            return real_tokenizer.from_file(path)

    monkeypatch.setattr(onnxruntime, "InferenceSession", slow_session)
    monkeypatch.setattr(tokenizers, "Tokenizer", SlowTokenizer)
    fresh = TransformerEncoder(table)
    with ThreadPoolExecutor(8) as pool:
        vectors = list(pool.map(lambda text: fresh.encode([text]).vectors[0], ["heart"] * 8))
    assert sorted(opened) == ["session", "tokenizer"]
    assert all(np.array_equal(v, vectors[0]) for v in vectors)


def test_an_import_says_how_many_texts_the_model_cut(table: Table, encoder: TransformerEncoder) -> None:
    """Texts longer than the model reads are embedded from their start, as sentence-transformers embeds them; the
    import says how many, so that a user can split them and have all of their text embedded."""
    from index.build.embed_documents import TextEncoder

    long = "the river bank " * 100  # 300 words: more than 256 tokens
    texts = [long, "a short one", long + "again", "another short one"]
    assert encoder.tokenise(texts).truncated == [True, False, True, False]
    with progress_lines() as shown:
        TextEncoder(table, encoder).embed(texts)
    assert (
        f"embedding-index: warning: 2 of the 4 texts are longer than the 256 tokens the model of table {NAME!r} "
        "reads: each embedded from its first 256 (as sentence-transformers embeds it); split such documents smaller "
        "(a folder's --chunk-words) to embed all of their text"
    ) in shown.getvalue().splitlines()
    with progress_lines() as shown:
        TextEncoder(table, encoder).embed([long])
    assert "warning: the only text is longer than the 256 tokens" in shown.getvalue()
    with progress_lines() as shown:
        TextEncoder(table, encoder).embed(texts[1::2])
    assert "warning" not in shown.getvalue()
