"""Keyword (BM25) search over gensim's Lee background corpus, imported as a documents table.

The 300 Lee news documents get a vector each (the mean GloVe 6B 50d row of their words) and go through the real
``embedding-index import --format documents``, which builds the keyword index. Its arrays must be the ones
``bm25s.BM25.index`` computes for the same words, its scores those of a float64 BM25 (Lucene's variant, bm25s's
default method) over words counted here by a plain ``re.findall``, and a filtered search the brute-force
filtered ranking.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import scipy.sparse
from gensim.test.utils import datapath

from index.build import cli
from index.build.sources import RawTable, ReadOptions
from index.engine import keyword
from index.engine.keyword import (
    DATA,
    DEFAULT_STEMMER,
    DEFAULT_STOPWORDS,
    FILES,
    INDICES,
    INDPTR,
    KEYWORD,
    LENGTHS,
    PARAMS,
    Built,
    KeywordIndex,
    Tokenizer,
    build,
    english_stopwords,
)
from index.engine.live_search import LiveKeyword
from index.engine.table import Table
from index.errors import ArtifactError, InvalidQuery
from index.store import artifact
from tests.cli import run_cli


@dataclass
class Lee:
    texts: list[str]
    directory: Path
    manifest: dict[str, object]
    index: KeywordIndex
    words: list[list[str]]  # each document's words, by re.findall(r"\w+", text.lower())


def write_lee(path: Path, texts: list[str], glove: RawTable, with_text: bool = True) -> Path:
    vocab = {token: i for i, token in enumerate(glove.tokens)}
    known = [[vocab[w] for w in re.findall(r"[a-z]+|[0-9]+", text.lower()) if w in vocab] for text in texts]
    lengths = np.array([len(k) for k in known])
    counts = scipy.sparse.csr_matrix(
        (np.ones(lengths.sum(), dtype=np.float32), np.concatenate(known), np.concatenate([[0], np.cumsum(lengths)])),
        shape=(len(texts), len(glove.tokens)),
    )
    vectors = np.asarray((counts @ glove.matrix) / lengths[:, None], dtype=np.float32)
    with open(path, "w", encoding="utf-8") as out:
        for i, text in enumerate(texts):
            record = {"id": f"lee-{i:03d}", "year": 1990 + i % 12, "vector": vectors[i].tolist()}
            if with_text:
                record["text"] = text
            out.write(json.dumps(record) + "\n")
    return path


def import_table(source: Path, data_dir: Path, name: str, options: tuple[str, ...] | None = None) -> Path:
    """The import, unless ``options`` are given without stop words or stemming (the words the reference counts)."""
    options = ("--stopwords", "none", "--stemmer", "none") if options is None else options
    result = run_cli("import", source, "--format", "documents", "--name", name, "--data-dir", data_dir, *options)
    assert result.code == 0, result.err
    return data_dir / name


@pytest.fixture(scope="module")
def lee(tmp_path_factory: pytest.TempPathFactory, glove_raw: RawTable) -> Lee:
    texts = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()
    work = tmp_path_factory.mktemp("keyword")
    directory = import_table(write_lee(work / "lee.jsonl", texts, glove_raw), work / "data", "lee")
    manifest = Table.load(directory).manifest  # checks every file against the manifest, the keyword files too
    index = KeywordIndex.open(directory, manifest)
    assert index is not None
    return Lee(texts, directory, manifest, index, [re.findall(r"\w+", text.lower()) for text in texts])


def open_built(built: Built, directory: Path, rows: int) -> KeywordIndex:
    for name, content in built.files.items():
        (directory / name).write_bytes(content)
    index = KeywordIndex.open(directory, {"rows": rows, KEYWORD: built.info})
    assert index is not None
    return index


def assert_lengths_are_the_cut(table: Table) -> None:
    """The table's kept lengths (int32, mapped) are each document's word count as its own tokenizer cuts the
    document alone."""
    index = table.keyword
    assert index is not None and table.payload is not None and index.lengths is not None
    assert index.lengths.dtype == np.int32 and isinstance(index.lengths.base, np.memmap)
    texts = table.payload.text(range(table.rows))
    assert index.lengths.tolist() == [len(index.tokenizer.words(text or "")) for text in texts]


def bm25_reference(lee: Lee, queries: list[str], k1: float, b: float) -> np.ndarray:
    """Scores (queries x documents) of Lucene's BM25 in float64, from words counted with Counter."""
    counts = [Counter(words) for words in lee.words]
    lengths = np.array([len(words) for words in lee.words], dtype=np.float64)
    n, average = len(counts), lengths.mean()
    df = Counter(word for c in counts for word in c)
    scores = np.zeros((len(queries), n))
    for q, query in enumerate(queries):
        for word in re.findall(r"\w+", query.lower()):  # a word given twice counts twice
            if word not in df:
                continue
            idf = np.log(1.0 + (n - df[word] + 0.5) / (df[word] + 0.5))
            tf = np.array([c.get(word, 0) for c in counts], dtype=np.float64)
            scores[q] += idf * tf / (tf + k1 * (1.0 - b + b * lengths / average))
    return scores


def ranking(scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: rows with a positive score that pass, best first, equal scores by row, padded to k."""
    rows = np.flatnonzero((scores > 0) & (allowed if allowed is not None else True))
    rows = rows[np.lexsort((rows, -scores[rows]))][:k]
    out_rows = np.full(k, -1, dtype=np.int64)
    out_scores = np.full(k, -np.inf, dtype=scores.dtype)
    out_rows[: len(rows)], out_scores[: len(rows)] = rows, scores[rows]
    return out_scores, out_rows


def queries_of(lee: Lee) -> list[str]:
    """Real queries: the first words of some documents, rare and common words, a repeated word, a phrase."""
    rng = np.random.default_rng(7)
    heads = [" ".join(lee.texts[i].split()[:8]) for i in rng.choice(len(lee.texts), 40, replace=False)]
    return [*heads, "Australian cricket captain", "the", "bushfires Sydney Sydney", "Arafat Hamas Israel", "AIDS"]


# ------------------------------------------------------------------------------------------------ the tokenizer


def test_tokenizer() -> None:
    tokenizer = Tokenizer()
    assert tokenizer.words("  Straße_1 ÉTÉ, naïve 3.14 don't!") == ["straße_1", "été", "naïve", "3", "14", "don", "t"]
    assert tokenizer.words("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # combining marks stay inside their word
    assert tokenizer.words("...") == [] and tokenizer.words("") == []
    tokens = tokenizer(pa.array(["b a", None, "", "c"]))
    assert tokens.terms.to_pylist() == ["b", "a", "c"] and tokens.rows.tolist() == [0, 0, 3]
    english = Tokenizer.english()
    assert english.words("The cat is on the mat") == ["cat", "mat"]
    assert english.stopwords == english_stopwords() and len(english.stopwords) == 33
    assert Tokenizer.from_settings(english.settings()) == english
    with pytest.raises(ArtifactError):
        Tokenizer.from_settings({**english.settings(), "word": r"\S+"})


def arrow_cut(texts: pa.Array) -> tuple[list[str], list[int]]:
    """The words as Arrow's own regex split cuts the composed (NFC), lower-cased texts, the final sigma folded
    (words, the text of each)."""
    lowered = pc.replace_substring(pc.utf8_lower(pc.utf8_normalize(texts, "NFC")), "ς", "σ")
    pieces = pc.split_pattern_regex(lowered, pattern=r"[^\p{L}\p{M}\p{N}_]+")
    words, rows = pc.list_flatten(pieces), pc.list_parent_indices(pieces)
    nonempty = pc.greater(pc.binary_length(words), 0)
    return words.filter(nonempty).to_pylist(), rows.filter(nonempty).to_pylist()


def test_the_cut_is_arrows_regex_split() -> None:
    """Over every code point (shuffled, in texts of 4,000; runs that a text's end cuts; empty and null texts), the
    vectorised cut finds the words RE2 finds, in one call for all texts or one call per text."""
    rng = np.random.default_rng(0)
    points = np.concatenate([np.arange(0xD800), np.arange(0xE000, sys.maxunicode + 1)])
    blob = "".join(map(chr, rng.permutation(points).tolist()))
    texts = [blob[i : i + 4000] for i in range(0, len(blob), 4000)]
    texts += ["ab", "cd", "", None, "é", "x.", ".y", "日本語", "z"]
    tokenizer = Tokenizer()
    tokens = tokenizer(pa.array(texts))
    words, rows = arrow_cut(pa.array(texts))
    assert len(words) > 100_000
    assert tokens.terms.to_pylist() == words and tokens.rows.tolist() == rows
    one_by_one = [tokenizer([text]).terms.to_pylist() for text in texts]
    assert [w for ws in one_by_one for w in ws] == words
    assert tokenizer(pa.array(texts).slice(3, 250)).terms.to_pylist() == arrow_cut(pa.array(texts[3:253]))[0]
    with pytest.raises(InvalidQuery):
        tokenizer(["\ud800"])


def test_the_tokenizer_cuts_lee_as_word_characters_do(lee: Lee) -> None:
    tokenizer = Tokenizer()
    assert [tokenizer.words(text) for text in lee.texts] == lee.words


def test_composed_and_decomposed_text_are_the_same_words(tmp_path: Path) -> None:
    """A word typed decomposed (e and U+0301) finds the documents that hold it composed, and the reverse, with the
    same scores: documents and queries are composed (NFC) before they are cut. A table built before (its manifest
    without "normalize") cuts its queries as it cut its documents, uncomposed."""
    texts = ["un café crème", "un cafe\u0301 noir", "CAFÉ", "le the\u0301", "tea"]
    built = build(pa.array(texts), Tokenizer())
    assert built is not None and built.info["tokenizer"]["normalize"] == "NFC"
    assert built.info["terms"] == 7  # un café crème noir le thé tea: one café, one thé
    index = open_built(built, tmp_path, len(texts))
    scores, rows = index.search(["café", "cafe\u0301", "CAFE\u0301", "thé", "Angstr\u00f6m \u212b"], 5)
    assert rows[:3].tolist() == [[2, 0, 1, -1, -1]] * 3 and (scores[1:3] == scores[0]).all()
    assert rows[3].tolist() == [3, -1, -1, -1, -1] and (rows[4] == -1).all()
    assert Tokenizer().words("\u212b \u2126") == ["å", "ω"]  # singletons (the Angstrom and ohm signs) compose

    settings = {name: value for name, value in built.info["tokenizer"].items() if name != "normalize"}
    older = KeywordIndex.open(tmp_path, {"rows": len(texts), KEYWORD: {**built.info, "tokenizer": settings}})
    assert older is not None and older.tokenizer.normalize is None
    assert older.tokenizer.words("cafe\u0301") == ["cafe\u0301"]  # cut as it comes, as its words were
    with pytest.raises(ArtifactError, match="tokenized otherwise"):
        Tokenizer.from_settings({**built.info["tokenizer"], "normalize": "NFD"})


def test_a_greek_word_in_capitals_is_the_word_in_lower_case(tmp_path: Path) -> None:
    """Lower-cased letter by letter, a Greek word in capitals ends in σ where the word typed in lower case ends in
    its final form ς: the final sigma is folded (as ``str.casefold`` folds it), in documents and queries, so both
    find both with the same scores. A table built before (its manifest without "final_sigma") keeps its ς."""
    texts = ["ο Σίσυφος και η πέτρα", "ΣΊΣΥΦΟΣ", "η οδός", "ΟΔΌΣ ΣΤΑΔΊΟΥ", "ς alone", "stone"]
    built = build(pa.array(texts), Tokenizer())
    assert built is not None
    index = open_built(built, tmp_path, len(texts))
    scores, rows = index.search(["ΣΊΣΥΦΟΣ", "σίσυφος", "Σίσυφος", "οδός", "ΟΔΌΣ"], 3)
    assert rows[:3].tolist() == [[1, 0, -1]] * 3 and (scores[1:3] == scores[0]).all()
    assert rows[3:].tolist() == [[2, 3, -1]] * 2 and (scores[4] == scores[3]).all()
    assert index.tokenizer.words("Σίσυφος ΣΊΣΥΦΟΣ ς") == ["σίσυφοσ", "σίσυφοσ", "σ"]
    assert built.info["tokenizer"]["final_sigma"] == "folded"

    settings = {name: value for name, value in built.info["tokenizer"].items() if name != "final_sigma"}
    older = Tokenizer.from_settings(settings)
    assert older.final_sigma is None and older.words("ΣΊΣΥΦΟΣ σίσυφος") == ["σίσυφοσ", "σίσυφος"]
    with pytest.raises(ArtifactError, match="tokenized otherwise"):
        Tokenizer.from_settings({**built.info["tokenizer"], "final_sigma": "kept"})


def test_only_texts_that_may_change_are_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    """Composing costs nothing for text below U+0300 (ASCII, Latin-1 and Latin Extended, composed already): Arrow's
    normaliser runs over the texts holding a later code point only (a combining mark, Greek, ...)."""
    seen: list[list[str]] = []
    real = pc.utf8_normalize  # read through the keyword module's own (lazy) pyarrow.compute

    def spy(texts: pa.Array, form: str) -> pa.Array:
        seen.append(texts.to_pylist())
        return real(texts, form)

    monkeypatch.setattr(keyword.pc, "utf8_normalize", spy)
    assert Tokenizer().words("plain text, café, żółć") == ["plain", "text", "café", "żółć"] and seen == []
    texts = pa.array(["x a", "cafe\u0301 b", None, "c", "\u03ac\u0399", "\u212b"]).slice(1)
    assert Tokenizer()(texts).terms.to_pylist() == ["café", "b", "c", "άι", "å"]
    assert seen == [["cafe\u0301 b", "\u03ac\u0399", "\u212b"]]
    for code in (*range(0x80, 0x300), 0x300, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF):  # the cut-off, by bytes
        seen.clear()
        Tokenizer()([chr(code)])
        assert (seen != []) == (code >= 0x300), hex(code)


# ------------------------------------------------------------------------------------------------ the import


def test_the_import_writes_the_keyword_index(lee: Lee) -> None:
    info = lee.manifest[KEYWORD]
    assert isinstance(info, dict)
    assert info["field"] == "text" and info["method"] == "lucene" and (info["k1"], info["b"]) == (1.2, 0.75)
    assert info["tokenizer"] == Tokenizer().settings()
    vocabulary = {w for words in lee.words for w in words}
    assert info["documents"] == info["documents_with_words"] == 300
    assert info["terms"] == len(vocabulary)
    assert info["words"] == sum(map(len, lee.words))
    assert info["postings"] == sum(len(set(words)) for words in lee.words)
    files = lee.manifest["files"]
    assert isinstance(files, dict) and set(FILES) <= set(files) and info["files"] == list(FILES)
    assert artifact.verify(lee.directory).ok
    postings = lee.index._postings
    arrays = [getattr(postings, name) for name in ("data", "indices", "indptr")]
    assert all(type(a) is np.ndarray and isinstance(a.base, np.memmap) for a in arrays)  # views of the maps


def test_the_index_keeps_each_document_s_length(lee: Lee, lee_data_dir: Path) -> None:
    """Each document's word count is kept beside the postings, mapped: the words counted here (no stop words or
    stemming), and, in a table of the import's defaults, the words its own tokenizer cuts from each text alone."""
    lengths = lee.index.lengths
    assert lengths is not None and lengths.dtype == np.int32 and isinstance(lengths.base, np.memmap)
    assert lengths.tolist() == [len(words) for words in lee.words]
    assert int(lengths.sum()) == lee.manifest[KEYWORD]["words"]  # type: ignore[index]
    table = Table.load(lee_data_dir / "lee")
    assert table.keyword is not None and table.keyword.tokenizer == Tokenizer.named("en", "english")
    assert_lengths_are_the_cut(table)


def test_lengths_of_documents_without_words_and_in_other_scripts(tmp_path: Path) -> None:
    """No text, empty text, punctuation and stop words alone count 0; a decomposed letter is one word with its
    mark; Cyrillic, CJK and digits with an underscore are words; stemming keeps the count. The file's length is
    the documents', or the index is refused."""
    texts = [None, "", "...", "the of and", "Café cafe\u0301 naïve.", "Привет мир мир", "東京 2024_tokyo"]
    texts.append("running ran")
    tokenizer = Tokenizer.named(DEFAULT_STOPWORDS, DEFAULT_STEMMER)
    built = build(pa.array(texts, pa.string()), tokenizer)
    assert built is not None
    index = open_built(built, tmp_path, len(texts))
    assert index.lengths is not None and index.lengths.tolist() == [0, 0, 0, 0, 3, 3, 2, 2]
    assert index.lengths.tolist() == [len(tokenizer.words(text or "")) for text in texts]
    (tmp_path / LENGTHS).write_bytes(artifact.npy_bytes(np.zeros(len(texts) - 1, dtype=np.int32)))
    with pytest.raises(ArtifactError, match="lengths of shape"):
        KeywordIndex.open(tmp_path, {"rows": len(texts), KEYWORD: built.info})


@pytest.mark.parametrize("damage", ["flip", "missing"])
def test_a_damaged_lengths_file_is_refused(tmp_path: Path, lee: Lee, damage: str) -> None:
    """The manifest checksums the lengths as every other file: a table whose lengths changed or went is refused."""
    directory = shutil.copytree(lee.directory, tmp_path / "lee")
    assert Table.load(directory).keyword is not None
    path = directory / LENGTHS
    if damage == "flip":
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(bytes(data))
    else:
        path.unlink()
    with pytest.raises(ArtifactError, match=f"disagrees with its manifest: {LENGTHS}"):
        Table.load(directory)


def test_the_arrays_are_bm25s_own(lee: Lee) -> None:
    """bm25s's BM25.index over the same words gives the same postings and scores, word by word."""
    import bm25s

    model = bm25s.BM25(k1=1.2, b=0.75)
    model.index(lee.words, show_progress=False, create_empty_token=False)
    theirs = scipy.sparse.csc_matrix(
        (model.scores["data"], model.scores["indices"], model.scores["indptr"]), shape=(300, len(model.vocab_dict))
    )
    stored = lee.index._postings
    ours = scipy.sparse.csc_matrix(
        (np.asarray(stored.data), np.asarray(stored.indices), np.asarray(stored.indptr)),
        shape=(300, lee.index.info["terms"]),
    )
    terms = lee.index._terms.to_pylist()
    theirs = theirs[:, [model.vocab_dict[t] for t in terms]]  # their columns in our (sorted) order
    assert (ours != theirs).nnz == 0
    assert (ours.indptr == theirs.indptr).all() and (ours.indices == theirs.indices).all()


def test_a_table_without_text_has_no_keyword_index(tmp_path: Path, glove_raw: RawTable) -> None:
    texts = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()[:20]
    directory = import_table(write_lee(tmp_path / "no-text.jsonl", texts, glove_raw, with_text=False), tmp_path, "t")
    manifest = artifact.read_manifest(directory)
    assert KEYWORD not in manifest and not set(FILES) & set(manifest["files"])
    assert KeywordIndex.open(directory, manifest) is None
    assert build(pa.array(["...", None, ""])) is None  # text, but not a word in it


def test_a_manifest_that_disagrees_is_refused(lee: Lee) -> None:
    manifest = dict(lee.manifest)
    with pytest.raises(ArtifactError, match="rows"):
        KeywordIndex.open(lee.directory, {**manifest, "rows": 299})
    info = dict(lee.manifest[KEYWORD])  # type: ignore[call-overload]
    with pytest.raises(ArtifactError, match="k1"):
        KeywordIndex.open(lee.directory, {**manifest, KEYWORD: {**info, "k1": 1.5}})


# ------------------------------------------------------------------------------------------------ searching


def test_scores_are_bm25_in_float64(lee: Lee) -> None:
    queries = queries_of(lee)
    reference = bm25_reference(lee, queries, 1.2, 0.75)
    scores, rows = lee.index.search(queries, 300)
    assert scores.shape == rows.shape == (len(queries), 300) and scores.dtype == np.float32
    for q in range(len(queries)):
        hits = rows[q] >= 0
        assert set(rows[q, hits].tolist()) == set(np.flatnonzero(reference[q] > 0).tolist())
        np.testing.assert_allclose(scores[q, hits], reference[q, rows[q, hits]], rtol=2e-6)
        assert (np.diff(reference[q, rows[q, hits]]) <= 1e-9).all()  # best first, by the float64 scores too
        assert (scores[q, ~hits] == -np.inf).all()
        assert rows[q].tolist() == ranking(scores_of(lee, queries[q]), 300)[1].tolist()


@functools.cache
def bm25s_of(directory: Path) -> Any:
    """The table's stored keyword index as bm25s itself loads it (its files are in bm25s's layout)."""
    import bm25s

    names = {"data_name": DATA, "indices_name": INDICES, "indptr_name": INDPTR, "params_name": PARAMS}
    return bm25s.BM25.load(directory, **names, load_vocab=False, mmap=True)


def scores_of(lee: Lee, query: str) -> np.ndarray:
    """One query's float32 score of every row, through bm25s's own scoring of the stored index."""
    index = lee.index
    columns = index.term_ids(index.tokenizer(pa.array([query])).terms)
    return np.asarray(bm25s_of(lee.directory).get_scores_from_ids(columns[columns >= 0]), dtype=np.float32)


def test_other_parameters_give_other_bm25(tmp_path: Path, lee: Lee) -> None:
    built = build(pa.array(lee.texts), k1=1.5, b=0.3)
    assert built is not None
    index = open_built(built, tmp_path, 300)
    assert (index.k1, index.b) == (1.5, 0.3)
    queries = queries_of(lee)[:10]
    reference = bm25_reference(lee, queries, 1.5, 0.3)
    scores, rows = index.search(queries, 10)
    for q in range(len(queries)):
        np.testing.assert_allclose(scores[q], reference[q, rows[q]], rtol=2e-6)
        np.testing.assert_allclose(scores[q], np.sort(reference[q])[::-1][:10], rtol=2e-6)


def test_filtered_search_is_the_filtered_ranking(lee: Lee) -> None:
    queries = queries_of(lee)
    rng = np.random.default_rng(3)
    years = np.array([1990 + i % 12 for i in range(300)])
    masks = {
        "random 30%": rng.random(300) < 0.3,
        "year >= 1999": years >= 1999,
        "three rows": np.isin(np.arange(300), [5, 150, 299]),
        "none": np.zeros(300, dtype=bool),
        "all": np.ones(300, dtype=bool),
    }
    unfiltered = lee.index.search(queries, 10)
    for name, mask in masks.items():
        scores, rows = lee.index.search(queries, 10, allowed=mask)
        for q, query in enumerate(queries):
            expected_scores, expected_rows = ranking(scores_of(lee, query), 10, mask)
            assert rows[q].tolist() == expected_rows.tolist(), (name, query)
            np.testing.assert_array_equal(scores[q], expected_scores)
            assert mask[rows[q][rows[q] >= 0]].all()
        if name == "all":
            np.testing.assert_array_equal(rows, unfiltered[1])


def test_the_k_best_that_pass_not_the_k_best_then_filtered(lee: Lee) -> None:
    """Leave out the unfiltered top 10: the filtered search still gives 10 hits, the next best."""
    query = ["Australian cricket captain"]
    _, rows = lee.index.search(query, 20)
    mask = np.ones(300, dtype=bool)
    mask[rows[0, :10]] = False
    _, filtered = lee.index.search(query, 10, allowed=mask)
    assert filtered[0].tolist() == rows[0, 10:20].tolist()


def test_a_query_s_text_is_cut_once_for_its_probe_and_its_search(lee: Lee, monkeypatch: pytest.MonkeyPatch) -> None:
    index = KeywordIndex.open(lee.directory, lee.manifest)  # its own kept texts
    assert index is not None
    check_cut_once(index, queries_of(lee)[0], monkeypatch)


def check_cut_once(index: KeywordIndex | LiveKeyword, query: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``index`` cuts ``query``, which a document holds, once for the door's probe and its search."""
    tokenizer, cut = index.tokenizer, []
    monkeypatch.setattr(index, "tokenizer", lambda texts: cut.append(len(texts)) or tokenizer(texts))
    assert index.holds(query)
    alone = index.search([query], 10)
    assert cut == [1]  # the door's probe, then the search: one cut
    together = index.search([query, "cricket"], 10)  # a batch: its texts cut together
    assert cut == [1, 2]
    np.testing.assert_array_equal(alone[1][0], together[1][0])
    np.testing.assert_array_equal(alone[0][0], together[0][0])


def test_queries_without_known_words_have_no_hits(lee: Lee) -> None:
    queries = ["zzzqqq xyzzy", "", "!!! ...", "Australian cricket captain", "qwertyuiop cricket"]
    scores, rows = lee.index.search(queries, 5)
    assert (rows[:3] == -1).all() and (scores[:3] == -np.inf).all()
    assert (rows[3:] >= 0).all()
    np.testing.assert_array_equal(rows[4], lee.index.search(["cricket"], 5)[1][0])  # the unknown word adds nothing
    assert lee.index.search([], 5)[1].shape == (0, 5)


def test_k_beyond_the_hits_pads(lee: Lee) -> None:
    _, rows = lee.index.search(["Arafat"], 400)
    hits = int((bm25_reference(lee, ["Arafat"], 1.2, 0.75) > 0).sum())
    assert 0 < hits < 300
    assert (rows[0, :hits] >= 0).all() and (rows[0, hits:] == -1).all() and rows.shape == (1, 400)


def test_stop_words(tmp_path: Path, lee: Lee) -> None:
    built = build(pa.array(lee.texts), Tokenizer.english())
    assert built is not None and built.info["tokenizer"]["stopwords"] == "en"
    index = open_built(built, tmp_path, 300)
    assert index.tokenizer == Tokenizer.english()
    assert (index.search(["the of and"], 5)[1] == -1).all()
    assert (index.search(["the cricket"], 5)[1] >= 0).all()
    assert built.info["terms"] == lee.index.info["terms"] - len(
        set(english_stopwords()) & set(lee.index._terms.to_pylist())
    )


def test_documents_without_text_are_never_hit(tmp_path: Path) -> None:
    built = build(pa.array(["red fox", None, "red red hen", "", "blue fox"]))
    assert built is not None and built.info["documents_with_words"] == 3 and built.info["average_length"] == 1.4
    index = open_built(built, tmp_path, 5)
    _, rows = index.search(["red fox", "hen"], 5)
    assert rows.tolist() == [[0, 2, 4, -1, -1], [2, -1, -1, -1, -1]]


@pytest.mark.parametrize(
    ("k", "allowed"),
    [(0, None), (5, np.ones(299, dtype=bool)), (5, np.ones(300, dtype=np.int8)), (5, np.ones((300, 1), dtype=bool))],
)
def test_bad_calls_are_refused(lee: Lee, k: int, allowed: np.ndarray | None) -> None:
    with pytest.raises(InvalidQuery):
        lee.index.search(["cricket"], k, allowed=allowed)


# ------------------------------------------------------------------------------------ stop words and stemming


def bm25s_words(texts: list[str], stopwords: str | None, stemmer: str | None) -> list[list[str]]:
    """bm25s's own tokenizer, its pattern set to this tokenizer's words (the Lee texts' words are \\w+)."""
    import bm25s
    import Stemmer

    return bm25s.tokenize(  # type: ignore[no-any-return]
        texts,
        token_pattern=r"(?u)\w+",
        stopwords=stopwords or [],
        stemmer=Stemmer.Stemmer(stemmer) if stemmer else None,
        return_ids=False,
        show_progress=False,
    )


@pytest.mark.parametrize(("stopwords", "stemmer"), [(None, "english"), ("en", None), ("en", "english")])
def test_stemmed_and_stop_word_answers_are_bm25s_own(
    tmp_path: Path, lee: Lee, stopwords: str | None, stemmer: str | None
) -> None:
    """With stop words, stemming or both, the arrays and every query's scores are bm25s's, its tokenizer given
    the same list and PyStemmer's stemmer."""
    import bm25s

    tokenizer = Tokenizer.named(stopwords, stemmer)
    built = build(pa.array(lee.texts), tokenizer)
    assert built is not None
    index = open_built(built, tmp_path, 300)
    assert index.tokenizer == tokenizer and built.info["tokenizer"]["stemmer"] == stemmer
    words = bm25s_words(lee.texts, stopwords, stemmer)
    assert [tokenizer.words(text) for text in lee.texts] == words
    model = bm25s.BM25(k1=1.2, b=0.75)
    model.index(words, show_progress=False, create_empty_token=False)
    terms = index._terms.to_pylist()
    assert sorted(model.vocab_dict) == sorted(terms)
    queries = queries_of(lee)
    scores, rows = index.search(queries, 10)
    for q, query_words in enumerate(bm25s_words(queries, stopwords, stemmer)):
        known = [model.vocab_dict[w] for w in query_words if w in model.vocab_dict]
        theirs = np.asarray(model.get_scores_from_ids(known), dtype=np.float32) if known else np.zeros(300)
        expected_scores, expected_rows = ranking(theirs, 10)
        assert rows[q].tolist() == expected_rows.tolist(), queries[q]
        np.testing.assert_array_equal(scores[q], expected_scores)


def test_the_import_stems_and_drops_english_stop_words_by_default(tmp_path: Path, glove_raw: RawTable) -> None:
    """A licence's "Contributor" is found by "contributors"; "the" alone finds nothing; the manifest says how."""
    texts = [
        text
        for name in ("MPL-2.0", "Apache-2.0", "GPL-3", "BSD")
        for text in Path(f"/usr/share/common-licenses/{name}").read_text(encoding="utf-8").split("\n\n")
        if text.strip()
    ]
    directory = import_table(write_lee(tmp_path / "licences.jsonl", texts, glove_raw), tmp_path, "licences", ())
    manifest = artifact.read_manifest(directory)
    settings = manifest[KEYWORD]["tokenizer"]
    assert (settings["stopwords"], settings["stemmer"]) == (DEFAULT_STOPWORDS, DEFAULT_STEMMER) == ("en", "english")
    assert settings["stopword_list"] == list(english_stopwords())
    assert (
        (ReadOptions.stopwords, ReadOptions.stemmer)
        == (cli.DEFAULT_STOPWORDS, cli.DEFAULT_STEMMER)
        == ("en", "english")
    )
    index = KeywordIndex.open(directory, manifest)
    assert index is not None and index.tokenizer == Tokenizer.named("en", "english")
    _, rows = index.search(["contributors", "Contributor", "redistributions", "the"], 5)
    singular = [i for i, text in enumerate(texts) if re.search(r"\bContributor\b", text)]
    assert set(rows[0].tolist()) <= set(range(len(texts))) and (rows[0] >= 0).all()
    assert rows[0].tolist() == rows[1].tolist()  # the same stem, the same answer
    assert set(rows[0].tolist()) & set(singular)
    assert (rows[2] >= 0).any() and (rows[3] == -1).all()


def test_a_table_built_before_stemming_keeps_its_words(tmp_path: Path, lee: Lee) -> None:
    """A manifest without "stemmer" (as every table built before it was an option) is searched unstemmed."""
    settings = dict(lee.manifest[KEYWORD]["tokenizer"])  # type: ignore[index]
    del settings["stemmer"]
    info = {**lee.manifest[KEYWORD], "tokenizer": settings}  # type: ignore[dict-item]
    index = KeywordIndex.open(lee.directory, {**lee.manifest, KEYWORD: info})
    assert index is not None and index.tokenizer == Tokenizer()
    queries = queries_of(lee)
    np.testing.assert_array_equal(index.search(queries, 10)[1], lee.index.search(queries, 10)[1])
    with pytest.raises(ArtifactError, match="klingon"):
        KeywordIndex.open(
            lee.directory, {**lee.manifest, KEYWORD: {**info, "tokenizer": {**settings, "stemmer": "klingon"}}}
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--stemmer", "klingon"), "--stopwords/--stemmer: no stemmer 'klingon'; PyStemmer has"),
        (("--stopwords", "xx"), "--stopwords/--stemmer: no stop-word list 'xx'; the lists are en, en_plus"),
    ],
)
def test_unknown_stemmers_and_lists_are_refused(tmp_path: Path, options: tuple[str, str], message: str) -> None:
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps({"id": "a", "text": "red fox", "vector": [1.0, 0.0]}) + "\n")
    result = run_cli("import", source, "--name", "t", "--data-dir", tmp_path / "data", *options)
    assert result.code == 1 and message in result.err and not (tmp_path / "data" / "t").exists()
