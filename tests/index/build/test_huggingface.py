"""Model token tables: the real all-MiniLM-L6-v2 (WordPiece), and small models written here with `tokenizers`
(byte-level BPE, SentencePiece Unigram and BPE) in float32, float16, bfloat16 and sharded files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gensim.test.utils import datapath
from safetensors import TensorSpec, safe_open, serialize_file
from safetensors.numpy import save_file
from tokenizers import ByteLevelBPETokenizer, SentencePieceBPETokenizer, SentencePieceUnigramTokenizer, Tokenizer

from index.build.sources import ReadOptions
from index.build.sources import huggingface as hf
from index.build.writer import build_table
from index.engine.table import Table
from index.errors import InputError
from index.store.tokens import FLAG_CONTINUATION, FLAG_SPECIAL
from tests.cli import run_index
from tests.minilm import MINILM_TENSOR, SPECIALS, minilm_dir
from tests.vectors import unit


def brute_top(matrix: np.ndarray, row: int, k: int, keep: np.ndarray | None = None) -> list[int]:
    """Top-k cosine neighbours of ``row`` computed from scratch in float64, ``row`` (and rows not kept) left out."""
    rows = unit(matrix)
    scores = rows @ rows[row]
    scores[row] = -np.inf
    if keep is not None:
        scores[~keep] = -np.inf
    return [int(i) for i in np.argsort(-scores, kind="stable")[:k]]


# ------------------------------------------------------------------ real MiniLM
@pytest.fixture(scope="module")
def minilm_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("minilm-data")
    done = run_index("import", str(minilm_dir()), "--format", "hf", "--name", "minilm", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert "30,522 rows x 384" in done.stdout
    return data_dir


@pytest.fixture(scope="module")
def minilm(minilm_data_dir: Path) -> Table:
    return Table.load(minilm_data_dir / "minilm")


@pytest.fixture(scope="module")
def minilm_matrix() -> np.ndarray:
    with safe_open(str(minilm_dir() / "model.safetensors"), framework="numpy") as f:
        return f.get_tensor(MINILM_TENSOR)


def test_minilm_shape_labels_and_manifest(minilm: Table, minilm_tokenizer: Tokenizer) -> None:
    assert (minilm.rows, minilm.dim) == (30_522, 384)
    assert minilm.kind == "tokens"
    vocab = minilm_tokenizer.get_vocab(with_added_tokens=True)
    assert len(vocab) == minilm.rows
    ids = np.fromiter(vocab.values(), dtype=np.int64)
    assert minilm.tokens.labels(ids) == list(vocab)  # row id = token id, labels are the tokenizer's strings
    model = minilm.manifest["model"]
    assert model["tensor"] == MINILM_TENSOR and model["dtype"] == "float32"
    assert model["tokenizer_type"] == "WordPiece" and model["architecture"] == "BertModel"
    assert model["tied_embeddings"] is True and model["output_tensor"] is None
    assert model["vocab_size"] == 30_522 and model["unused_rows"] == 0
    assert minilm.summary()["model"] == model
    assert (minilm.directory / "tokenizer.json").read_bytes() == (minilm_dir() / "tokenizer.json").read_bytes()


def test_minilm_vectors_equal_safetensors(minilm: Table, minilm_matrix: np.ndarray) -> None:
    ids = np.arange(0, minilm.rows, 997)
    np.testing.assert_allclose(np.stack([minilm.row(int(i)) for i in ids]), minilm_matrix[ids], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("word", ["heart", "king", "blue", "##beat"])
def test_minilm_neighbours_equal_brute_force(minilm: Table, minilm_matrix: np.ndarray, word: str) -> None:
    row = minilm.resolve(word).id
    got = minilm.most_similar([row], k=10, exact=True)
    assert [i for i, _ in got] == brute_top(minilm_matrix, row, 10)
    rows = unit(minilm_matrix)
    np.testing.assert_allclose([s for _, s in got], rows[[i for i, _ in got]] @ rows[row], rtol=1e-5, atol=1e-6)


def test_minilm_tokenize_equals_tokenizers(minilm: Table, minilm_tokenizer: Tokenizer) -> None:
    for text in ("heartbeat", "heartbeats", "heartache", "embeddings", "Heart of gold, 心"):
        encoding = minilm_tokenizer.encode(text, add_special_tokens=False)
        assert minilm.tokenize(text) == list(zip(encoding.ids, encoding.tokens, strict=True))
    assert [label for _, label in minilm.tokenize("heartache")] == ["heart", "##ache"]


def test_minilm_lookup_rules(minilm: Table, minilm_tokenizer: Tokenizer) -> None:
    vocab = minilm_tokenizer.get_vocab()
    heart = minilm.resolve("Heart")  # uncased vocabulary: found case-folded
    assert (heart.id, heart.token, heart.match) == (vocab["heart"], "heart", "casefold")
    for char in "心中愛细":  # CJK characters resolve to their own token where the vocabulary has one
        found = minilm.find(char)
        if char in vocab:
            assert (found.id, found.match) == (vocab[char], "exact")
        else:
            assert found is None and minilm_tokenizer.encode(char, add_special_tokens=False).tokens == ["[UNK]"]
    assert minilm.metadata["readable"][vocab["##beat"]] == "beat"
    assert minilm.metadata["piece"][vocab["##beat"]] == "continuation"


def test_minilm_flags_skip_special_and_whole_words(minilm: Table, minilm_matrix: np.ndarray) -> None:
    labels = minilm.tokens[:]
    flags = np.asarray(minilm.flags)
    special = {labels[i] for i in np.flatnonzero(flags & FLAG_SPECIAL)}
    # BERT's reserved rows [unused0]..[unused993] are special too: no text tokenizes to them.
    assert special == set(SPECIALS) | {f"[unused{i}]" for i in range(994)}
    assert minilm.manifest["model"]["special_tokens"] == len(SPECIALS) + 994
    unused = minilm.find("[unused7]")
    assert unused is not None and minilm.metadata["piece"][unused.id] == "special"
    continuation = np.fromiter(((t.startswith("##") and len(t) > 2) for t in labels), dtype=bool)
    assert np.array_equal((flags & FLAG_CONTINUATION) > 0, continuation)
    assert minilm.manifest["model"]["continuation_tokens"] == continuation.sum()  # a count, not a sum of flags

    # A special token's own row is its nearest neighbour unless special tokens are skipped.
    for token in SPECIALS:
        row = minilm.tokens.find(token)
        assert minilm.resolve(token).id == row  # found by its label, as a query word
        query = np.asarray(minilm.vectors[row])[None, :]
        assert minilm.search(query, 5, exact=True)[0][0][0] == row
        kept = minilm.search(query, 5, exact=True, skip_special=True)[0]
        assert not {i for i, _ in kept} & {minilm.tokens.find(t) for t in SPECIALS}

    # whole_words_only leaves out "##" rows and equals brute force over the remaining rows.
    row = minilm.tokens.find("##beat")
    plain = [i for i, _ in minilm.most_similar([row], k=10, exact=True)]
    assert any(continuation[i] for i in plain)
    words = [i for i, _ in minilm.most_similar([row], k=10, exact=True, whole_words_only=True, skip_special=True)]
    assert words == brute_top(minilm_matrix, row, 10, keep=flags == 0)


def test_minilm_compose_is_mean_of_pieces(minilm: Table) -> None:
    query, pieces = minilm.compose("heartache")
    assert [label for _, label in pieces] == ["heart", "##ache"]
    mean = np.asarray(minilm.vectors[[i for i, _ in pieces]], dtype=np.float64).mean(axis=0)
    np.testing.assert_allclose(query[0], mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)


def test_vocab_txt_without_tokenizer_json(tmp_path: Path, minilm_tokenizer: Tokenizer) -> None:
    model = tmp_path / "bert-vocab"
    model.mkdir()
    (model / "vocab.txt").write_bytes((minilm_dir() / "vocab.txt").read_bytes())
    rows = minilm_tokenizer.get_vocab_size()
    matrix = np.random.default_rng(3).standard_normal((rows, 8)).astype(np.float16)
    save_file({"bert.embeddings.word_embeddings.weight": matrix}, model / "model.safetensors")
    raw = hf.read(model, ReadOptions())
    assert raw.info["model"]["tensor"] == "bert.embeddings.word_embeddings.weight"
    assert raw.info["model"]["tokenizer_type"] == "WordPiece" and raw.info["model"]["dtype"] == "float16"
    vocab = minilm_tokenizer.get_vocab()
    assert [raw.tokens[vocab[t]] for t in ("heart", "##beat", "[CLS]")] == ["heart", "##beat", "[CLS]"]
    np.testing.assert_array_equal(raw.matrix, matrix.astype(np.float32))
    built = Tokenizer.from_str(raw.extra_files["tokenizer.json"].decode())
    assert built.encode("Heartache", add_special_tokens=False).tokens == ["heart", "##ache"]


# ---------------------------------------------------------------- small models
def corpus() -> list[str]:
    lines = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()[:300]
    # A few non-ASCII lines so byte-level tokens hold multi-byte characters.
    return lines + ["Grüße aus Köln, café crème, naïve façade, 心 细 中文 心脏"] * 150


def train(scheme: str) -> Tokenizer:
    lines = corpus()
    if scheme == "byte-bpe":
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(lines, vocab_size=600, min_frequency=2, show_progress=False, special_tokens=["<|eos|>"])
    elif scheme == "sp-unigram":
        tok = SentencePieceUnigramTokenizer()
        tok.train_from_iterator(
            lines, vocab_size=500, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>"
        )
    else:
        tok = SentencePieceBPETokenizer()
        tok.train_from_iterator(lines, vocab_size=500, min_frequency=2, show_progress=False, special_tokens=["<unk>"])
    return Tokenizer.from_str(tok.to_str())


def bf16_bits(matrix: np.ndarray) -> np.ndarray:
    return (matrix.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits as float32, by placing them in the high half of each little-endian 32-bit word."""
    words = np.zeros((*bits.shape, 2), dtype=np.uint16)
    words[..., 1] = bits
    return words.view("<f4")[..., 0]


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str) -> None:
    if dtype != "BF16":
        save_file({k: v.astype({"F32": np.float32, "F16": np.float16}[dtype]) for k, v in tensors.items()}, path)
        return
    bits = {k: bf16_bits(v) for k, v in tensors.items()}
    specs = {
        k: TensorSpec(dtype="bfloat16", shape=v.shape, data_ptr=v.ctypes.data, data_len=v.nbytes)
        for k, v in bits.items()
    }
    serialize_file(specs, str(path), metadata={"format": "pt"})


@dataclass
class SmallModel:
    directory: Path
    tokenizer: Tokenizer
    tensor: str
    expected: np.ndarray  # the float32 matrix the reader must give
    scheme: str
    tied: bool


def write_model(
    directory: Path, scheme: str, dtype: str, tensor: str, *, sharded: bool, output: str | None, pad_rows: int = 0
) -> SmallModel:
    """A model directory: tokenizer.json, config.json and the embedding (+ optional output) matrix."""
    directory.mkdir()
    tokenizer = train(scheme)
    tokenizer.save(str(directory / "tokenizer.json"))
    rows, dim = tokenizer.get_vocab_size() + pad_rows, 16
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((rows, dim)).astype(np.float32)
    tensors = {tensor: matrix, "layers.0.mlp.weight": rng.standard_normal((dim, 2 * dim)).astype(np.float32)}
    tied = output is None
    if output == "same":
        tensors["lm_head.weight"], tied = matrix, True
    elif output:
        tensors[output] = rng.standard_normal((rows, dim)).astype(np.float32)
    config = {"architectures": ["TinyForCausalLM"], "model_type": "tiny", "vocab_size": rows, "_name_or_path": "tiny"}
    (directory / "config.json").write_text(json.dumps(config))
    if sharded:
        names = sorted(tensors)
        shards = {f"model-0000{i + 1}-of-00002.safetensors": names[i::2] for i in range(2)}
        for shard, members in shards.items():
            write_safetensors(directory / shard, {n: tensors[n] for n in members}, dtype)
        weight_map = {n: shard for shard, members in shards.items() for n in members}
        (directory / hf.INDEX_JSON).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        write_safetensors(directory / "model.safetensors", tensors, dtype)
    if dtype == "BF16":
        expected = bits_to_float32(bf16_bits(matrix))
    else:
        expected = matrix.astype({"F32": np.float32, "F16": np.float16}[dtype]).astype(np.float32)
    return SmallModel(directory, tokenizer, tensor, expected, scheme, tied)


CASES = [
    ("byte-bpe", "F16", "model.embed_tokens.weight", False, "lm_head.weight", 40),
    ("byte-bpe", "BF16", "transformer.wte.weight", True, None, 0),
    ("sp-unigram", "BF16", "shared.weight", False, "same", 12),
    ("sp-unigram", "F32", "gpt_neox.embed_in.weight", True, "embed_out.weight", 0),
    ("sp-bpe", "F16", "tok_embeddings.weight", True, None, 3),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'sharded' if c[3] else 'single'}")
def small_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[SmallModel, Table]:
    scheme, dtype, tensor, sharded, output, pad = request.param
    root = tmp_path_factory.mktemp("models")
    model = write_model(root / "model", scheme, dtype, tensor, sharded=sharded, output=output, pad_rows=pad)
    raw = hf.read(model.directory, ReadOptions())
    np.testing.assert_array_equal(raw.matrix, model.expected)  # bit-exact widening of fp16 / bf16
    build_table(raw, data_dir=root / "data", name="tiny", source={"format": "hf", "path": str(model.directory)})
    return model, Table.load(root / "data" / "tiny")


def test_small_model_manifest(small_model: tuple[SmallModel, Table]) -> None:
    model, table = small_model
    info = table.manifest["model"]
    assert info["tensor"] == model.tensor and info["architecture"] == "TinyForCausalLM"
    assert info["tokenizer_type"] == {"byte-bpe": "BPE", "sp-unigram": "Unigram", "sp-bpe": "BPE"}[model.scheme]
    assert info["tied_embeddings"] is model.tied
    assert info["readable_labels"]["scheme"] == ("byte-level" if model.scheme == "byte-bpe" else "metaspace")
    assert (table.rows, table.dim) == model.expected.shape
    np.testing.assert_allclose(np.stack([table.row(i) for i in range(table.rows)]), model.expected, rtol=2e-6)


def test_small_model_labels_flags_and_readable(small_model: tuple[SmallModel, Table]) -> None:
    model, table = small_model
    tok = model.tokenizer
    vocab = tok.get_vocab(with_added_tokens=True)
    size = len(vocab)
    labels = table.tokens[:]
    assert {labels[i]: i for i in range(size)} == vocab
    assert labels[size:] == [f"<unused:{i}>" for i in range(size, table.rows)]
    flags = np.asarray(table.flags)
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    expected_special = {vocab[t] for t in special} | set(range(size, table.rows))
    assert set(np.flatnonzero(flags & FLAG_SPECIAL)) == expected_special
    marker = "Ġ" if model.scheme == "byte-bpe" else "▁"
    for i in range(size):
        is_continuation = i not in expected_special and not labels[i].startswith(marker)
        assert bool(flags[i] & FLAG_CONTINUATION) == is_continuation, labels[i]
    # The readable form is what the tokenizer's own decoder adds after an anchor token.
    readable = table.metadata["readable"]
    anchor = vocab[marker + "the"]
    head = tok.decode([anchor])
    checked = 0
    for i in range(size):
        if i in expected_special or "\\x" in readable[i]:
            continue
        assert tok.decode([anchor, i]) == head + readable[i], labels[i]
        checked += 1
    assert checked > size // 2  # lone bytes of multi-byte characters (shown as \\xNN) aside
    assert any(not r.isascii() for r in readable)  # multi-byte characters shown as themselves


def test_small_model_space_marked_lookup(small_model: tuple[SmallModel, Table]) -> None:
    model, table = small_model
    marker = "Ġ" if model.scheme == "byte-bpe" else "▁"
    vocab = model.tokenizer.get_vocab()
    words = [t[1:] for t in vocab if t.startswith(marker) and len(t) > 3 and t[1:] not in vocab]
    words = [w for w in words if w.isascii()]
    assert len(words) > 20
    for word in words:
        found = table.resolve(word)
        assert (found.id, found.token, found.match) == (vocab[marker + word], marker + word, "space-marked")
        assert table.metadata["readable"][found.id] == " " + word
    exact = next(t for t in vocab if t.startswith(marker) and len(t) > 3)
    assert table.resolve(exact).match == "exact"
    # Non-ASCII words resolve to the token whose readable form they are (byte-level labels spell bytes).
    readable = table.metadata["readable"]
    checked = 0
    for word in ("细", "心", "心脏", "Köln", "café", "中文", "naïve", "ü"):
        spaced = [i for i in range(len(vocab)) if readable[i] == " " + word]
        bare = [i for i in range(len(vocab)) if readable[i] == word]
        if spaced or bare:
            found = table.find(word)
            assert found is not None and found.id == (bare or spaced)[0], word
            assert found.match == ("exact" if bare else "space-marked")
            checked += 1
    assert checked >= 3


def test_small_model_tokenize_and_neighbours(small_model: tuple[SmallModel, Table]) -> None:
    model, table = small_model
    for text in ("the heartbeat of Sydney", "Grüße aus Köln 心脏"):
        encoding = model.tokenizer.encode(text, add_special_tokens=False)
        assert table.tokenize(text) == list(zip(encoding.ids, encoding.tokens, strict=True))
    row = table.resolve("the").id
    got = [i for i, _ in table.most_similar([row], k=8, exact=True)]
    assert got == brute_top(model.expected, row, 8)


# --------------------------------------------------------------------- errors
def test_errors_name_the_file(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", "byte-bpe", "F16", "model.embed_tokens.weight", sharded=False, output=None)
    rows = model.expected.shape[0]
    with pytest.raises(InputError, match=r"no tensor named 'nope'; 2-D tensors: model\.embed_tokens\.weight"):
        hf.read(model.directory, ReadOptions(tensor="nope"))

    (model.directory / "model.safetensors").unlink()
    save_file({"encoder.dense.weight": np.zeros((rows, 4), np.float32)}, model.directory / "model.safetensors")
    with pytest.raises(InputError, match=r"model\.safetensors: no input embedding .*encoder\.dense\.weight \[\d+, 4\]"):
        hf.read(model.directory, ReadOptions())
    raw = hf.read(model.directory, ReadOptions(tensor="encoder.dense.weight"))
    assert raw.matrix.shape == (rows, 4)

    save_file({"wte.weight": np.zeros((rows - 5, 4), np.float32)}, model.directory / "model.safetensors")
    with pytest.raises(InputError, match=rf"has {rows - 5} rows but config.json says vocab_size {rows}"):
        hf.read(model.directory, ReadOptions())
    with pytest.raises(InputError, match=r"has \d+ rows but the tokenizer has ids up to"):
        hf.read(model.directory, ReadOptions(tensor="wte.weight"))

    save_file({"wte.weight": np.zeros((rows, 4), np.float32)}, model.directory / "model.safetensors")
    data = (model.directory / "model.safetensors").read_bytes()
    (model.directory / "model.safetensors").write_bytes(data[:-10])
    with pytest.raises(InputError, match=r"model\.safetensors: tensor 'wte\.weight' lies outside the file"):
        hf.read(model.directory, ReadOptions())

    (model.directory / "model.safetensors").write_bytes(data)
    (model.directory / "tokenizer.json").unlink()
    with pytest.raises(InputError, match=r"m: no tokenizer\.json or vocab\.txt"):
        hf.read(model.directory, ReadOptions())


def test_an_index_json_naming_missing_files_is_refused_with_their_count(tmp_path: Path) -> None:
    (tmp_path / hf.INDEX_JSON).write_text(json.dumps({"weight_map": {"a": "model-1.safetensors"}}))
    with pytest.raises(InputError, match=r"lists 1 file not found: model-1\.safetensors$"):
        hf.model_files(tmp_path)
    (tmp_path / hf.INDEX_JSON).write_text(json.dumps({"weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors"}}))
    with pytest.raises(InputError, match=r"lists 2 files not found: m-1\.safetensors, m-2\.safetensors$"):
        hf.model_files(tmp_path)


def test_cli_error_is_one_line(tmp_path: Path) -> None:
    model = tmp_path / "empty-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    done = run_index("import", str(model), "--format", "hf", "--name", "x", "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "embedding-index: reading empty-model (hf) ...",  # the progress line, then the error in one line
        f"embedding-index: error: {model}: no *.safetensors file (pickled .bin/.pt checkpoints are not read)",
    ]
    assert not (tmp_path / "data" / "x").exists()


def test_bf16_conversion_is_bit_exact(tmp_path: Path) -> None:
    """Every bfloat16 bit pattern of interest (signs, zero, subnormal, inf, extremes) widens exactly."""
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 16, size=(257, 7), dtype=np.uint16)
    bits[0, :5] = [0x0000, 0x8000, 0x0001, 0x7F7F, 0xFF7F]  # +0, -0, smallest subnormal, max, -max
    specs = {
        "wte.weight": TensorSpec(dtype="bfloat16", shape=bits.shape, data_ptr=bits.ctypes.data, data_len=bits.nbytes)
    }
    serialize_file(specs, str(tmp_path / "model.safetensors"), metadata=None)
    tensor = hf.read_header(tmp_path / "model.safetensors")["wte.weight"]
    got = hf.read_matrix(tensor, block_bytes=100)  # several blocks, the last one short
    np.testing.assert_array_equal(got.view(np.uint32), bits.astype(np.uint32) << 16)
    assert got[0, 0] == 0 and np.signbit(got[0, 1]) and got[0, 2] == 2.0**-133
    assert got[0, 3] == -got[0, 4] > 3.38e38  # bfloat16's largest finite value
    np.testing.assert_array_equal(got, bits_to_float32(bits))
