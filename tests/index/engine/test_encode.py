"""Text encoders (index.engine.encode) on real tables, against float64 brute force written here from the definitions:

- all-MiniLM-L6-v2's token table: the mean of the original rows of the tokenizer's pieces, special pieces left out;
- a model2vec model written here in model2vec's own layout from MiniLM's rows (token weights and a quantised
  vocabulary), imported with ``--format model2vec``, also against model2vec's own ``StaticModel``;
- GloVe 6B 50d: SIF (Arora, Liang and Ma 2017) with gensim's Lee background corpus as the reference corpus, p(w)
  by Zipf over the row order or from a counts column (the Lee corpus's own counts), and the plain mean.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from gensim.test.utils import datapath
from safetensors import safe_open
from safetensors.numpy import save_file
from tokenizers import Tokenizer

from index.build.sif import sif_table
from index.build.sources import RawTable, ReadOptions, read_source, sniff_format
from index.build.sources import model2vec as m2v_source
from index.build.writer import build_table
from index.engine.encode import (
    DEFAULT_A,
    Encoder,
    NoKnownWord,
    check_known,
    embeds_text,
    encoder_for,
    visible,
)
from index.engine.table import Table
from index.errors import InputError, InvalidQuery
from index.store import artifact
from index.store.tokens import WEIGHTS
from tests import REPO
from tests.cli import run_index
from tests.index.engine.test_loaded_version import linked, next_version
from tests.minilm import MINILM, MINILM_TENSOR, SPECIALS, minilm_dir
from tests.opposite import build_opposite
from tests.vectors import unit

WORD = re.compile(r"\w+")
TEXTS = [
    "The heart pumps blood through the body.",
    "Heartbeat, heartache and a broken heart",
    "Stock markets fell sharply on Monday as investors sold shares.",
    "☃ snowman in the snow",  # ☃ is [UNK] in MiniLM's vocabulary, and no GloVe word
    "x",
]
CLUSTERS = 2048  # the quantised vocabulary of the model2vec fixture


def lee(name: str) -> list[str]:
    """gensim's Lee corpus, a document a line (lee.cor has one byte that is not UTF-8: a Latin-1 pound sign)."""
    return Path(datapath(name)).read_bytes().decode("utf-8", "replace").splitlines()


# ------------------------------------------------------------------------------------------- tables
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("encode-data")


@pytest.fixture(scope="module")
def glove(data_dir: Path, glove_sif_dir: Path) -> Table:
    """The whole GloVe 6B 50d table (exact search: no index is needed to embed), with its SIF component from gensim's
    Lee background corpus: a copy of the session's (``glove_sif_dir``)."""
    shutil.copytree(glove_sif_dir / "glove", data_dir / "glove")
    return Table.load(data_dir / "glove")


def minilm_rows() -> np.ndarray:
    with safe_open(str(minilm_dir() / "model.safetensors"), framework="numpy") as f:
        return f.get_tensor(MINILM_TENSOR)


@pytest.fixture(scope="module")
def minilm_matrix() -> np.ndarray:
    return minilm_rows()


@pytest.fixture(scope="module")
def minilm(data_dir: Path, minilm_data_dir: Path) -> Table:
    """MiniLM's token embeddings as a model-token table: a copy of the session's (``minilm_data_dir``)."""
    shutil.copytree(minilm_data_dir / MINILM, data_dir / "minilm")
    return Table.load(data_dir / "minilm")


def write_model2vec(
    directory: Path, embeddings: np.ndarray, weights: np.ndarray | None, mapping: np.ndarray | None
) -> Path:
    """A model2vec model directory as model2vec's ``save_pretrained`` writes it: model.safetensors (embeddings,
    weights, mapping), tokenizer.json, config.json and modules.json."""
    directory.mkdir(parents=True)
    tensors = {"embeddings": embeddings}
    if weights is not None:
        tensors["weights"] = weights
    if mapping is not None:
        tensors["mapping"] = mapping
    save_file(tensors, directory / "model.safetensors")
    (directory / "tokenizer.json").write_bytes((minilm_dir() / "tokenizer.json").read_bytes())
    config = {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": "sentence-transformers/all-MiniLM-L6-v2",
        "apply_pca": None,
        "apply_zipf": True,
        "hidden_dim": int(embeddings.shape[1]),
        "seq_length": 1000000,
        "normalize": True,
        "embedding_dtype": str(embeddings.dtype),
    }
    if mapping is not None:
        config["vocabulary_quantization"] = int(embeddings.shape[0])
    (directory / "config.json").write_text(json.dumps(config, indent=4))
    modules = [{"idx": 0, "name": "0", "path": ".", "type": "sentence_transformers.models.StaticEmbedding"}]
    (directory / "modules.json").write_text(json.dumps(modules))
    return directory


def model2vec_parts(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MiniLM's rows as model2vec keeps them: Zipf SIF weights per token, and the vocabulary quantised to 2,048
    rows (each token mapped to the most similar of 2,048 of its rows): (embeddings, weights, mapping)."""
    rows = len(matrix)
    zipf = 1.0 / np.arange(1, rows + 1)
    weights = (1e-4 / (1e-4 + zipf / zipf.sum())).astype(np.float32)
    centres = np.random.default_rng(0).choice(rows, CLUSTERS, replace=False)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    mapping = np.argmax(unit @ unit[centres].T, axis=1).astype(np.int64)
    return matrix[centres].copy(), weights, mapping


@pytest.fixture(scope="module")
def m2v_model(tmp_path_factory: pytest.TempPathFactory, m2v_parts: tuple[np.ndarray, ...]) -> Path:
    embeddings, weights, mapping = m2v_parts
    return write_model2vec(tmp_path_factory.mktemp("m2v") / "potion-minilm", embeddings, weights, mapping)


@pytest.fixture(scope="module")
def m2v(data_dir: Path, m2v_model: Path) -> Table:
    done = run_index("import", str(m2v_model), "--name", "m2v", "--data-dir", str(data_dir))  # format sniffed
    assert done.returncode == 0, done.stderr
    return Table.load(data_dir / "m2v")


# -------------------------------------------------------------------------------- brute force (float64)
def token_mean(
    texts: list[str], tokenizer: Tokenizer, rows: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, list[int], list[int]]:
    """Each text's unit-length mean of its pieces' rows (times their weights), special pieces left out."""
    special = {tokenizer.token_to_id(t) for t in SPECIALS}
    out, used, unknown = [], [], []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        kept = [i for i in ids if i not in special]
        vectors = rows[kept].astype(np.float64) * (1.0 if weights is None else weights[kept, None])
        out.append(unit(vectors.mean(axis=0)))
        used.append(len(kept))
        unknown.append(len(ids) - len(kept))
    return np.array(out), used, unknown


def words_of(text: str, rows: dict[str, int]) -> tuple[list[int], int]:
    words = WORD.findall(text.lower())
    known = [rows[w] for w in words if w in rows]
    return known, len(words) - len(known)


def sif_vectors(texts: list[str], matrix: np.ndarray, rows: dict[str, int], p: np.ndarray) -> np.ndarray:
    """Each text's SIF-weighted mean of its words' rows (not yet unit length; zero without a known word)."""
    out = np.zeros((len(texts), matrix.shape[1]))
    for n, text in enumerate(texts):
        known, _ = words_of(text, rows)
        if known:
            weights = DEFAULT_A / (DEFAULT_A + p[known])
            out[n] = (weights[:, None] * matrix[known].astype(np.float64)).mean(axis=0)
    return out


def first_singular_vector(vectors: np.ndarray) -> np.ndarray:
    """As the paper's code: TruncatedSVD (no centring) of the reference sentence vectors."""
    from sklearn.decomposition import TruncatedSVD

    svd = TruncatedSVD(n_components=1, n_iter=7, random_state=0).fit(vectors)
    return svd.components_[0]


def zipf(rows: int) -> np.ndarray:
    p = 1.0 / np.arange(1, rows + 1)
    return p / p.sum()


@pytest.fixture(scope="module")
def glove_rows(glove_raw: RawTable) -> dict[str, int]:
    rows: dict[str, int] = {}
    for i, token in enumerate(glove_raw.tokens):
        rows.setdefault(token, i)
    return rows


# --------------------------------------------------------------------------------------- model tokens
def test_minilm_token_mean_equals_brute_force(
    minilm: Table, minilm_matrix: np.ndarray, minilm_tokenizer: Tokenizer
) -> None:
    encoded = Encoder(minilm).encode(TEXTS)
    expected, used, unknown = token_mean(TEXTS, minilm_tokenizer, minilm_matrix)
    assert encoded.pooling == "mean" and encoded.vectors.dtype == np.float32
    np.testing.assert_allclose(encoded.vectors, expected, atol=2e-7)
    assert (encoded.tokens, encoded.unknown) == (used, unknown)
    assert encoded.unknown[3] == 1  # the snowman
    np.testing.assert_allclose(np.linalg.norm(encoded.vectors, axis=1), 1, atol=1e-6)


def test_minilm_mean_is_of_the_original_rows(
    minilm: Table, minilm_matrix: np.ndarray, minilm_tokenizer: Tokenizer
) -> None:
    """The model's rows as they are (a frequent piece has a smaller norm), not the unit rows."""
    encoded = Encoder(minilm).encode(TEXTS[:3])
    of_units, _, _ = token_mean(TEXTS[:3], minilm_tokenizer, unit(minilm_matrix.astype(np.float64)))
    assert np.all(np.einsum("ij,ij->i", encoded.vectors, of_units) < 0.9999)


def test_minilm_special_tokens_typed_in_text_are_left_out(minilm: Table) -> None:
    encoder = Encoder(minilm)
    plain, marked = encoder.encode(["a red heart", "[CLS] a red heart [SEP]"]).vectors
    np.testing.assert_allclose(plain, marked, atol=1e-7)
    assert encoder.encode(["[CLS] a red heart [SEP]"]).unknown == [2]


def test_batch_order_and_size_do_not_change_a_vector(minilm: Table, glove: Table) -> None:
    for table in (minilm, glove):
        encoder = Encoder(table)
        alone = np.vstack([encoder.encode([text]).vectors for text in TEXTS[:4]])
        together = encoder.encode(TEXTS[:4][::-1]).vectors[::-1]
        np.testing.assert_allclose(alone, together, atol=1e-7)


# ------------------------------------------------------------------------------------------- model2vec
def test_model2vec_import_is_a_token_table_with_weights(
    m2v: Table, m2v_parts: tuple[np.ndarray, ...], minilm_tokenizer: Tokenizer
) -> None:
    embeddings, weights, mapping = m2v_parts
    assert (m2v.kind, m2v.rows, m2v.dim) == ("tokens", 30_522, 384)
    assert m2v.manifest["source"]["format"] == "model2vec"
    info = m2v.manifest["model2vec"]
    assert info["weights"] is True and info["quantized_rows"] == CLUSTERS and info["max_length"] == 512
    assert info["config"]["normalize"] is True
    ids = np.arange(0, m2v.rows, 509)
    np.testing.assert_allclose(np.stack([m2v.row(int(i)) for i in ids]), embeddings[mapping[ids]], rtol=1e-6)
    np.testing.assert_array_equal(np.load(m2v.directory / WEIGHTS), weights)
    assert m2v.tokenize("heartache") == [(2540, "heart"), (15395, "##ache")]
    assert artifact.verify(m2v.directory).ok


def test_model2vec_encode_equals_brute_force_and_model2vec(
    m2v: Table, m2v_model: Path, m2v_parts: tuple[np.ndarray, ...], minilm_tokenizer: Tokenizer
) -> None:
    embeddings, weights, mapping = m2v_parts
    encoded = Encoder(m2v).encode(TEXTS)
    expected, used, unknown = token_mean(TEXTS, minilm_tokenizer, embeddings[mapping], weights)
    np.testing.assert_allclose(encoded.vectors, expected, atol=2e-7)
    assert (encoded.tokens, encoded.unknown) == (used, unknown)
    model2vec = pytest.importorskip("model2vec")
    theirs = model2vec.StaticModel.from_pretrained(m2v_model).encode(TEXTS)
    np.testing.assert_allclose(encoded.vectors, theirs, atol=1e-6)


def test_model2vec_max_length_cuts_long_texts_as_model2vec_does(m2v: Table, m2v_model: Path) -> None:
    long = [" ".join(lee("lee_background.cor")[:3]), "heart " * 600 + "stock market"]
    encoded = Encoder(m2v).encode(long)
    assert encoded.tokens[1] == 512  # the first 512 pieces: "stock market" is past them
    model2vec = pytest.importorskip("model2vec")
    theirs = model2vec.StaticModel.from_pretrained(m2v_model).encode(long)
    np.testing.assert_allclose(encoded.vectors, theirs, atol=1e-6)


def test_model2vec_weights_are_the_loaded_versions(tmp_path: Path, m2v: Table) -> None:
    """The token weights a loaded table embeds with are its version's, the next one published under its name since."""
    directory = linked(m2v.directory, tmp_path)
    mine = np.load(directory / WEIGHTS)
    loaded = Table.load(directory, checksums=False)
    next_version(tmp_path, "m2v", {WEIGHTS: lambda path: np.save(path, mine[::-1] * 2)})
    assert not np.array_equal(np.load(directory / WEIGHTS), mine)  # the next version's
    np.testing.assert_array_equal(Encoder(loaded).token_weights, mine)


def test_model2vec_without_weights_or_mapping(
    data_dir: Path, tmp_path: Path, minilm_matrix: np.ndarray, minilm_tokenizer: Tokenizer
) -> None:
    half = minilm_matrix.astype(np.float16)
    directory = write_model2vec(tmp_path / "plain", half, None, None)
    assert sniff_format(directory) == "model2vec" and sniff_format(minilm_dir()) == "hf"
    raw, fmt = read_source(directory)
    assert fmt == "model2vec" and WEIGHTS not in raw.extra_files and raw.info["model"]["dtype"] == "float16"
    build_table(raw, data_dir=data_dir, name="m2v-plain", source={"format": fmt})
    table = Table.load(data_dir / "m2v-plain")
    expected, _, _ = token_mean(TEXTS[:3], minilm_tokenizer, half)
    np.testing.assert_allclose(Encoder(table).encode(TEXTS[:3]).vectors, expected, atol=2e-7)


def test_model2vec_reader_errors(tmp_path: Path, m2v_parts: tuple[np.ndarray, ...]) -> None:
    embeddings, weights, mapping = m2v_parts
    cases = {
        "no-embeddings": ({"vectors": embeddings}, "no 'embeddings' tensor"),
        "rows": ({"embeddings": embeddings}, "'embeddings' has 2048 rows but tokenizer.json has 30522 tokens"),
        "mapping": ({"embeddings": embeddings, "mapping": mapping + CLUSTERS - 1}, "tensor 'mapping' sends token"),
        "weights": ({"embeddings": embeddings[mapping], "weights": weights[:10]}, "'weights' has shape [10]"),
        "nan": (
            {"embeddings": embeddings[mapping], "weights": np.where(np.arange(len(weights)) == 7, np.nan, weights)},
            "not finite for token 7",
        ),
    }
    for name, (tensors, problem) in cases.items():
        directory = write_model2vec(tmp_path / name, embeddings, None, None)
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, directory / "model.safetensors")
        with pytest.raises(InputError, match=re.escape(problem)) as caught:
            m2v_source.read(directory, ReadOptions())
        assert str(directory / "model.safetensors") in caught.value.message
    with pytest.raises(InputError, match=r"no model\.safetensors"):
        m2v_source.read(tmp_path, ReadOptions())

    # A model of many tensors that is not model2vec's (a transformer checkpoint) is named by its largest few.
    directory = write_model2vec(tmp_path / "checkpoint", embeddings, None, None)
    layers = {f"encoder.layer.{i}.dense.weight": np.zeros((4, 4), np.float32) for i in range(40)}
    save_file({"word_embeddings.weight": embeddings, **layers}, directory / "model.safetensors")
    with pytest.raises(InputError, match=r"\(tensors: word_embeddings\.weight \[2048, 384\], .* and 29 more\); is"):
        m2v_source.read(directory, ReadOptions())
    # Any file but the model's weights is not a model2vec model (its directory is not read in its place).
    with pytest.raises(InputError, match=r"tokenizer\.json: --format model2vec reads a model directory"):
        m2v_source.read(directory / "tokenizer.json", ReadOptions())


# ---------------------------------------------------------------------------------------- words: SIF
@pytest.fixture(scope="module")
def reference(glove_raw: RawTable, glove_rows: dict[str, int]) -> np.ndarray:
    """The common component of the Lee background corpus's SIF vectors, by brute force (Zipf p(w))."""
    vectors = sif_vectors(lee("lee_background.cor"), glove_raw.matrix, glove_rows, zipf(len(glove_raw.tokens)))
    return first_singular_vector(vectors[np.linalg.norm(vectors, axis=1) > 0])


def test_sif_component_equals_brute_force(glove: Table, reference: np.ndarray) -> None:
    component = np.load(glove.directory / artifact.SIF_COMPONENT)
    assert component.dtype == np.float64 and component.shape == (50,)
    assert abs(component @ reference) == pytest.approx(1, abs=1e-9)
    info = glove.manifest["sif"]
    assert info["file"] == artifact.SIF_COMPONENT and info["a"] == DEFAULT_A and info["frequencies"] == "zipf"
    assert info["corpus"]["path"] == "gensim:lee_background.cor"
    assert (info["corpus"]["lines"], info["corpus"]["texts"], info["corpus"]["skipped"]) == (300, 300, 0)
    assert artifact.SIF_COMPONENT in glove.manifest["files"] and artifact.verify(glove.directory).ok


def test_glove_sif_equals_brute_force(
    glove: Table, glove_raw: RawTable, glove_rows: dict[str, int], reference: np.ndarray
) -> None:
    texts = TEXTS[:4] + lee("lee.cor")[:20]
    encoded = Encoder(glove).encode(texts)
    assert encoded.pooling == "sif"  # the default once the table has its component
    weighted = sif_vectors(texts, glove_raw.matrix, glove_rows, zipf(len(glove_raw.tokens)))
    expected = unit(weighted - np.outer(weighted @ reference, reference))
    np.testing.assert_allclose(encoded.vectors, expected, atol=2e-6)
    counts = [words_of(text, glove_rows) for text in texts]
    assert encoded.tokens == [len(known) for known, _ in counts]
    assert encoded.unknown == [missing for _, missing in counts]
    assert encoded.unknown[3] == 0 and encoded.tokens[3] == 4  # ☃ is no \w word


def test_glove_mean_equals_brute_force(glove: Table, glove_raw: RawTable, glove_rows: dict[str, int]) -> None:
    texts = TEXTS[:4] + lee("lee.cor")[:10]
    encoded = Encoder(glove).encode(texts, "mean")
    expected = [unit(glove_raw.matrix[words_of(t, glove_rows)[0]].astype(np.float64).mean(axis=0)) for t in texts]
    np.testing.assert_allclose(encoded.vectors, np.array(expected), atol=2e-6)


def test_sif_removes_what_documents_share(glove: Table) -> None:
    """The plain means of unrelated news documents all point much the same way; SIF's do not."""
    documents = lee("lee.cor")
    encoder = Encoder(glove)
    mean, sif = (encoder.encode(documents, pooling).vectors for pooling in ("mean", "sif"))
    off_diagonal = ~np.eye(len(documents), dtype=bool)
    assert (mean @ mean.T)[off_diagonal].mean() > 0.85
    assert (sif @ sif.T)[off_diagonal].mean() < 0.5


def test_sif_with_a_counts_column(data_dir: Path, glove_raw: RawTable, glove_rows: dict[str, int]) -> None:
    """p(w) = count / total from the table's counts column: the Lee corpus's own word counts."""
    counts = Counter(w for line in lee("lee_background.cor") for w in WORD.findall(line.lower()))
    words = [w for w, _ in counts.most_common() if w in glove_rows]
    matrix = glove_raw.matrix[[glove_rows[w] for w in words]]
    raw = RawTable(tokens=words, matrix=matrix.copy(), metadata={"count": [str(counts[w]) for w in words]})
    build_table(raw, data_dir=data_dir, name="lee-words", source={"format": "test"})
    sif_table(data_dir, "lee-words", corpus=Path(datapath("lee_background.cor")))
    table = Table.load(data_dir / "lee-words")
    assert table.manifest["sif"]["frequencies"] == "column count"
    rows = {w: i for i, w in enumerate(words)}
    p = np.array([counts[w] for w in words], dtype=np.float64)
    p /= p.sum()
    reference = first_singular_vector(sif_vectors(lee("lee_background.cor"), matrix, rows, p))
    texts = lee("lee.cor")[:10]
    weighted = sif_vectors(texts, matrix, rows, p)
    expected = unit(weighted - np.outer(weighted @ reference, reference))
    np.testing.assert_allclose(Encoder(table).encode(texts).vectors, expected, atol=2e-6)


def test_cased_table_matches_words_case_folded(data_dir: Path, glove_raw: RawTable) -> None:
    tokens = [t.capitalize() if t in ("paris", "france") else t for t in glove_raw.tokens[:5000]]
    raw = RawTable(tokens=tokens, matrix=glove_raw.matrix[:5000].copy())
    build_table(raw, data_dir=data_dir, name="cased", source={"format": "test"})
    encoder = Encoder(Table.load(data_dir / "cased"))
    assert encoder.cased
    encoded = encoder.encode(["Paris is in France", "paris is in france"], "mean")
    assert encoded.tokens == [4, 4] and encoded.unknown == [0, 0]
    np.testing.assert_allclose(encoded.vectors[0], encoded.vectors[1], atol=1e-7)
    assert not Encoder(Table.load(data_dir / "lee-words")).cased


def test_words_keep_their_marks_and_are_composed(data_dir: Path, glove_raw: RawTable) -> None:
    """A word is its letters and combining marks (``हिन्दी`` is one word, not ``ह``, ``न`` and ``द``), looked up
    composed: ``café`` typed decomposed (``e`` and U+0301) is the label ``café``, not ``cafe``."""
    labels = ["हिन्दी", "भारत", "café", "cafe", "naïve", "the"]
    rows = [glove_raw.tokens.index(w) for w in ("hindi", "india", "restaurant", "coffee", "innocent", "the")]
    build_table(
        RawTable(tokens=labels, matrix=glove_raw.matrix[rows].copy()),
        data_dir=data_dir,
        name="marks",
        source={"format": "test"},
    )
    encoder = Encoder(Table.load(data_dir / "marks"))
    texts = ["हिन्दी भारत", "the café", "naïve", "the cafe"]
    decomposed = [unicodedata.normalize("NFD", text) for text in texts]
    encoded = encoder.encode([*texts, *decomposed], "mean")
    assert encoded.tokens == [2, 2, 1, 2] * 2 and encoded.unknown == [0] * 8
    np.testing.assert_array_equal(encoded.vectors[:4], encoded.vectors[4:])
    means = [unit(glove_raw.matrix[[rows[a], rows[b]]].astype(np.float64).mean(0)) for a, b in ((0, 1), (5, 2))]
    np.testing.assert_allclose(encoded.vectors[:2], means, atol=1e-6)
    assert not np.allclose(encoded.vectors[1], encoded.vectors[3])


def test_words_find_the_labels_of_a_decomposed_table(data_dir: Path, glove_raw: RawTable) -> None:
    """A table whose labels are decomposed (NFD: ``café`` spelled ``e`` and U+0301) has its words found in a text
    typed composed or decomposed, as the word routes find them."""
    labels = ["cafe\u0301", "nai\u0308ve", "the"]
    rows = [glove_raw.tokens.index(w) for w in ("restaurant", "innocent", "the")]
    build_table(
        RawTable(tokens=labels, matrix=glove_raw.matrix[rows].copy()),
        data_dir=data_dir,
        name="decomposed",
        source={"format": "test"},
    )
    encoder = Encoder(Table.load(data_dir / "decomposed"))
    texts = ["the caf\u00e9", "na\u00efve", "the cafe\u0301"]
    encoded = encoder.encode(texts, "mean")
    assert encoded.tokens == [2, 1, 2] and encoded.unknown == [0, 0, 0]
    np.testing.assert_array_equal(encoded.vectors[0], encoded.vectors[2])


def test_a_texts_words_are_the_rows_the_word_routes_find(data_dir: Path, glove_raw: RawTable) -> None:
    """In a table whose labels are decomposed and cased ("Zürich", "Café"), a text's word is the row the word
    routes resolve it to, found decomposed and case-folded ("zürich" was counted unknown); and where a table has
    a word both decomposed and case-folded, the same one of them."""
    labels = ["Zu\u0308rich", "Cafe\u0301", "the", "bar", "cafe\u0301s", "Caf\u00e9s", "NAI\u0308VE", "Na\u00efve"]
    rows = [glove_raw.tokens.index(w) for w in ("zurich", "restaurant", "the", "bar", "cafes", "bars", "a", "b")]
    build_table(
        RawTable(tokens=labels, matrix=glove_raw.matrix[rows].copy()),
        data_dir=data_dir,
        name="decomposed-cased",
        source={"format": "test"},
    )
    table = Table.load(data_dir / "decomposed-cased")
    words = ["z\u00fcrich", "caf\u00e9", "the", "caf\u00e9s", "na\u00efve"]
    assert Encoder(table).pieces([" ".join(words)]).ids.tolist() == [table.resolve(word).id for word in words]


def test_the_dotted_capital_i_is_the_plain_i_where_no_label_has_the_dot(glove: Table, small: Table) -> None:
    """``İstanbul`` lower-cases to i and U+0307. GloVe's 400,000 words have that label (its corpus was lower-cased so):
    the row of exactly that label comes first. Its first 20,000 have only ``istanbul``: the word is that row (İ
    folded as Turkish folds it), in upper case too."""
    dotted = glove.tokens.find("i\u0307stanbul")
    assert dotted is not None and Encoder(glove).pieces(["İstanbul"]).ids.tolist() == [dotted]
    encoder = Encoder(small)
    assert not encoder.cased and small.tokens.find("i\u0307stanbul") is None
    encoded = encoder.encode(["İstanbul and İSTANBUL", "istanbul and istanbul"], "mean")
    assert encoded.tokens == [3, 3] and encoded.unknown == [0, 0]
    np.testing.assert_array_equal(encoded.vectors[0], encoded.vectors[1])


def test_a_plain_i_does_not_find_a_dotted_capital_label(data_dir: Path, glove_raw: RawTable, minilm: Table) -> None:
    """The lookup agrees with the model: MiniLM lower-cases ``İstanbul`` (to i and U+0307) and its tokenizer strips
    the dot, the piece ``istanbul``, which the lookup finds for it too; a label ``İstanbul`` is no row any
    tokenizer gives for ``istanbul``, so ``istanbul`` does not find it (docs/models.md, lookup rules)."""
    istanbul = minilm.tokens.find("istanbul")
    assert Encoder(minilm).pieces(["İstanbul", "istanbul"]).ids.tolist() == [istanbul, istanbul]
    assert minilm.resolve("İstanbul").id == istanbul
    rows = [glove_raw.tokens.index(w) for w in ("istanbul", "ankara")]
    build_table(
        RawTable(tokens=["İstanbul", "ankara"], matrix=glove_raw.matrix[rows].copy()),
        data_dir=data_dir,
        name="dotted",
        source={"format": "test"},
    )
    dotted = Table.load(data_dir / "dotted")
    assert dotted.resolve("İstanbul").id == dotted.resolve("İSTANBUL").id == 0
    assert dotted.find("istanbul") is None and Encoder(dotted).pieces(["istanbul"]).ids.tolist() == []


def test_word_lookup_in_bulk_equals_one_by_one(glove: Table) -> None:
    labels = glove.tokens[::7]
    words = [*labels, *(w.upper() for w in labels[:500]), *(w + "q" for w in labels[:2000]), "", "a" * 40]
    found = glove.tokens.find_many(words)
    assert found.tolist() == [-1 if (i := glove.tokens.find(w)) is None else i for w in words]
    assert (found[: len(labels)] >= 0).all()


# ----------------------------------------------------------------------------------------------- errors
def test_a_text_without_a_known_token_is_named(glove: Table, minilm: Table) -> None:
    with pytest.raises(InvalidQuery, match=r"text 1 \('zzqxv qqqzx'\) has no known token in table 'glove': 2 unknown"):
        Encoder(glove).encode(["a heart", "zzqxv qqqzx"])
    with pytest.raises(NoKnownWord, match=r"^text 0 '☃ ☃': no word of it is known to table 'minilm': unknown ☃$") as e:
        Encoder(minilm).encode(["☃ ☃", "heart"])
    assert e.value.details == {"words": ["☃"], "text": 0}
    with pytest.raises(InvalidQuery, match=r"text 0 \('\.\.\. !'\) .*: it has no tokens"):
        Encoder(glove).encode(["... !"])


def test_known_words_that_cancel_out_are_named(data_dir: Path, glove_raw: RawTable) -> None:
    """A text whose known words' rows sum to zero has no vector: the error names them as cancelling out, not as
    unknown (which would send a caller looking for a spelling mistake)."""
    opposite = build_opposite(glove_raw.matrix[glove_raw.tokens.index("heart")], data_dir)
    texts = ["heart zzqxv trah", "heart"]
    encoded = Encoder(opposite).encode(texts, "mean", strict=False)
    assert encoded.tokens == [0, 1] and encoded.unknown == [1, 0] and encoded.cancelled == {0: ["heart", "trah"]}
    expected = (
        r"texts\[0\] 'heart zzqxv trah': its words known to table 'opposite' \('heart', 'trah'\) cancel out: it pools"
    )
    with pytest.raises(NoKnownWord, match=expected) as error:
        check_known(encoded, texts, "table 'opposite'", "texts")
    assert error.value.details == {"words": ["heart", "trah"], "text": 0}


def test_special_tokens_typed_in_a_text_are_named_as_typed(minilm: Table) -> None:
    """MiniLM's tokenizer matches a special token typed in a text ([CLS]) as that token, which a model-token table
    leaves out: a text of nothing else names it as the special token it is, beside what became [UNK], not as the
    unknown word "cls"; [cls] is no special token (the tokenizer matches them as written)."""
    texts = ["☃ [SEP] [CLS] ☃", "[cls]", "[MASK]"]
    encoded = Encoder(minilm).encode(texts, strict=False)
    assert encoded.tokens[0] == encoded.tokens[2] == 0 and encoded.tokens[1] > 0
    assert encoded.left_out == {0: (["☃"], ["[SEP]", "[CLS]"]), 2: ([], ["[MASK]"])}
    expected = (
        r"texts\[0\] '☃ \[SEP\] \[CLS\] ☃': no word of it is known to table 'minilm': unknown ☃; \[SEP\], \[CLS\] are "
        r"special tokens, which the table leaves out$"
    )
    with pytest.raises(NoKnownWord, match=expected) as error:
        check_known(encoded, texts, "table 'minilm'", "texts")
    assert error.value.details == {"words": ["☃", "[SEP]", "[CLS]"], "text": 0}
    strict = r"^text 0 '\[CLS\]': no word of it is known to table 'minilm': \[CLS\] is a special token, which the"
    with pytest.raises(NoKnownWord, match=strict):  # strict mode names it alike
        Encoder(minilm).encode(["[CLS]", "heart"])


def test_pooling_choices(glove: Table, minilm: Table, small: Table) -> None:
    with pytest.raises(InvalidQuery, match="sif pooling is for word tables"):
        Encoder(minilm).encode(["heart"], "sif")
    with pytest.raises(InvalidQuery, match="has no SIF component yet: `embedding-index sif small`"):
        Encoder(small).encode(["heart"], "sif")
    assert Encoder(small).encode(["heart"]).pooling == "mean"  # no component: the mean by default
    with pytest.raises(InvalidQuery, match="unknown pooling 'max'"):
        Encoder(glove).encode(["heart"], "max")  # type: ignore[arg-type]
    assert encoder_for(glove) is encoder_for(glove)


def test_sif_command_and_its_errors(data_dir: Path, tmp_path: Path, glove_raw: RawTable, minilm: Table) -> None:
    raw = RawTable(tokens=glove_raw.tokens[:20000], matrix=glove_raw.matrix[:20000].copy())
    build_table(raw, data_dir=data_dir, name="glove-20k", source={"format": "test"})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n\nzzqxv\nstocks fell on monday\n", encoding="utf-8")
    done = run_index("sif", "glove-20k", "--corpus", str(corpus), "--a", "0.01", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert "SIF component of 'glove-20k': 2 texts of" in done.stdout and "(2 lines skipped), a = 0.01" in done.stdout
    table = Table.load(data_dir / "glove-20k")
    assert table.manifest["sif"]["a"] == 0.01 and Encoder(table).a == 0.01
    corpus.write_bytes(b"fine line\nbad \xff line\n")
    with pytest.raises(InputError, match=re.escape(f"{corpus}:2: not UTF-8 (byte 0xff at column 5)")):
        sif_table(data_dir, "glove-20k", corpus)
    corpus.write_text("zzqxv qqqzx\n")
    with pytest.raises(InputError, match=re.escape("no line has a word of table 'glove-20k' (1 line)")):
        sif_table(data_dir, "glove-20k", corpus)
    for path, problem in ((tmp_path / "nope.txt", "no such file"), (tmp_path, "not a file")):
        with pytest.raises(InputError, match=re.escape(f"{path}: {problem}")):
            sif_table(data_dir, "glove-20k", path)
    done = run_index("sif", "minilm", "--data-dir", str(data_dir))
    assert done.returncode == 1 and "SIF is for word tables" in done.stderr
    assert Table.load(data_dir / "glove-20k").manifest["sif"]["a"] == 0.01  # a failed step changed nothing


def test_the_tables_that_embed_text_are_those_with_an_encoder(glove: Table, minilm: Table, lee_data_dir: Path) -> None:
    """``embeds_text`` (what /v1/models lists) answers as ``encoder_for`` does: a word table and a model-token table
    with a tokenizer embed text; a documents table does not."""
    documents = Table.load(lee_data_dir / "lee")
    assert [embeds_text(t) for t in (glove, minilm, documents)] == [True, True, False]
    for table in (glove, minilm):
        assert encoder_for(table).encode(["the heart"]).vectors.shape == (1, table.dim)
    with pytest.raises(InvalidQuery, match="text is embedded with a word or model table"):
        encoder_for(documents)


def test_the_declared_tokenizers_has_the_batch_call_the_encoders_make() -> None:
    """``Tokenizer.encode_batch_fast`` came with tokenizers 0.20: an older one installed would fail every text."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    lowest = next(re.fullmatch(r"tokenizers>=(\d+)\.(\d+)\S*", d) for d in declared if d.startswith("tokenizers"))
    assert lowest is not None and (int(lowest[1]), int(lowest[2])) >= (0, 20)


def test_a_text_of_invisible_characters_alone_is_not_visible() -> None:
    """Control and format characters and separators are no words; a private-use character is, as a font draws
    it (an icon), and so is a combining mark or an emoji."""
    for text in ("\u200b", "\x00", " \t\n", "\u2028", "\u200b\u2060\ufeff", "\u00a0"):
        assert not visible(text), repr(text)
    for text in ("\ue000", "\u0301", "\U0001f642", "a\u200b", "\u200b!"):
        assert visible(text), repr(text)
