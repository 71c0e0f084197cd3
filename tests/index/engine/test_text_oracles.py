"""Every text encoder's cut of real text of many scripts and shapes, against an oracle written or configured here:

- a transformer table's input ids against the Hugging Face tokenizer set up as sentence-transformers sets it up
  (the model's ``tokenizer.json``, truncation at 256, no padding, [CLS] and [SEP]), and where it is cut;
- a model-token table's pieces against the same tokenizer with every text whole, special pieces left out;
- a word table's words and vectors against a plain-Python reading of docs/encoders.md in float64 (lower-cased,
  composed, runs of letters, digits, ``_`` and marks; the mean of the words' original rows, or SIF's weights);
- the keyword index's words and scores against bm25s given the rule docs/documents.md names (composed, lower-cased,
  the final sigma folded, the same runs; bm25s's English stop words and PyStemmer's English stemmer).

The texts: gensim's Lee corpus (English news) and Crime and Punishment (Russian, paragraphs far over 256 tokens)
cut into sentences and whole, and lines written here for what real text seldom holds.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
from gensim.test.utils import datapath
from tokenizers import Tokenizer as HFTokenizer

from index.engine.encode import Encoder, encoder_for
from index.engine.keyword import KEYWORD, KeywordIndex, Tokenizer, build
from index.engine.table import Table
from index.engine.transformer_encoder import TransformerEncoder
from index.store.tokens import DOTTED_I
from tests.minilm import MINILM, SPECIALS, ST, minilm_dir

WRITTEN = [
    "café crème",
    "cafe\u0301 cre\u0300me",  # decomposed (NFD)
    "CAFÉ NAÏVE RÉSUMÉ",
    "A\u030angstro\u0308m",
    "北京欢迎你。東京は日本の首都です。서울은 한국의 수도입니다.",
    "السَّلَامُ عَلَيْكُمْ",  # Arabic with its vowel marks
    "हिन्दी भाषा नमस्ते",  # Devanagari: marks inside words
    "Σίσυφος ΣΊΣΥΦΟΣ οδός ΟΔΌΣ",
    "👩\u200d👩\u200d👧\u200d👦 family 👍🏽 🏳\ufe0f\u200d🌈 🇯🇵",
    "e\u0301\u0302\u0303 stacked marks, \u0301 a lone one",
    "zero\u200bwidth\u200bspaces and a\u00a0non-breaking space",
    "tab\tseparated\twords\r\nand a bell\x07 and\x00nul",
    "\ufeffa byte-order mark",
    "x" * 150 + " pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "12345 3.14159 1e-10 -42 1,000,000 ① ½ ٣٤٥ १२३",
    "https://example.com/path?q=1&r=2#frag user@example.com C++ don't",
    "ǅ titlecase, ﬁ ligature, Ⅻ, K Kelvin sign, ß STRASSE",
    "[CLS] typed [SEP] [UNK] [MASK] and [cls]",
    "word " * 300,
    "",
    "   ",
    " \t\n ",
    "\u200b",
]


@cache
def real_lines() -> tuple[str, ...]:
    """Sentences of gensim's Lee background corpus and of Crime and Punishment (Russian), and every story and
    paragraph whole (a third of the stories over 256 tokens)."""
    lee = Path(datapath("lee_background.cor")).read_text(encoding="utf-8").splitlines()
    russian = Path(datapath("crime-and-punishment.txt")).read_text(encoding="utf-8").splitlines()
    sentences = [s for text in lee + russian for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    return tuple(sentences + [text for text in lee + russian if text.strip()])


def texts() -> list[str]:
    return [*real_lines(), *WRITTEN]


# ------------------------------------------------------------------ model tokenizers
def sentence_transformers_tokenizer() -> HFTokenizer:
    """The model's tokenizer as sentence-transformers runs all-MiniLM-L6-v2: cut at its max_seq_length, 256, not
    padded (the file's own settings, 128 and fixed padding, overridden)."""
    tokenizer = HFTokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.no_padding()
    return tokenizer


def test_transformer_input_ids_and_cuts_are_sentence_transformers(minilm_st_dir: Path) -> None:
    encoder = encoder_for(Table.load(minilm_st_dir / ST))
    assert isinstance(encoder, TransformerEncoder)
    sample = texts()
    expected = sentence_transformers_tokenizer().encode_batch(sample, add_special_tokens=True)
    tokenised = encoder.tokenise(sample)
    assert len(sample) > 2500 and sum(map(len, tokenised.ids)) > 80_000
    for i, text in enumerate(sample):
        assert tokenised.ids[i] == expected[i].ids, text
    assert tokenised.truncated == [bool(e.overflowing) for e in expected]
    assert 100 < sum(tokenised.truncated) < len(sample)  # the stories, Russian paragraphs, "word " * 300
    assert all(len(ids) <= 256 for ids in tokenised.ids)


def test_model_token_pieces_are_the_tokenizers_less_its_special_pieces(minilm_data_dir: Path) -> None:
    table = Table.load(minilm_data_dir / MINILM)
    sample = texts()
    whole = HFTokenizer.from_file(str(minilm_dir() / "tokenizer.json"))
    whole.no_truncation()
    whole.no_padding()
    special = {whole.token_to_id(token) for token in SPECIALS}
    expected = [e.ids for e in whole.encode_batch(sample, add_special_tokens=False)]
    pieces = Encoder(table).pieces(sample)
    bounds = np.searchsorted(pieces.text_of, np.arange(len(sample) + 1))
    for i, text in enumerate(sample):
        assert pieces.ids[bounds[i] : bounds[i + 1]].tolist() == [p for p in expected[i] if p not in special], text
        assert pieces.unknown[i] == sum(p in special for p in expected[i]), text
    assert [[p for p, _ in table.lookup.tokenize(text)] for text in WRITTEN] == [
        [p for p in ids if p < table.rows] for ids in expected[-len(WRITTEN) :]
    ]


# ------------------------------------------------------------------ word tables
def is_word_character(character: str) -> bool:
    """A letter, a digit or number, a combining mark or ``_`` (docs/encoders.md)."""
    return character == "_" or unicodedata.category(character)[0] in "LMN"


def plain_words(text: str) -> list[str]:
    """The words of ``text`` as docs/encoders.md says a word table reads them, one character at a time."""
    words, word = [], ""
    for character in unicodedata.normalize("NFC", text.lower()):
        if is_word_character(character):
            word += character
        elif word:
            words.append(word)
            word = ""
    return [*words, word] if word else words


def test_word_table_vectors_are_the_documented_rule_in_float64(glove_sif_dir: Path) -> None:
    """Each word is the row of its exact label (GloVe's labels are lower case; a word with ``İ`` folded), unknown
    words skipped; mean: the plain mean of the original rows; sif: weighted a / (a + p(w)), Zipf's p(w), minus the
    projection on the table's component; both unit length. Batch and single texts agree."""
    table = Table.load(glove_sif_dir / "glove")
    encoder = Encoder(table)
    sample = texts()
    rows = np.asarray(table.vectors, dtype=np.float64) * np.asarray(table.norms, dtype=np.float64)[:, None]
    zipf = 1.0 / np.arange(1, table.rows + 1)
    zipf /= zipf.sum()
    component = encoder.component
    for pooling in ("mean", "sif"):
        encoded = encoder.encode(sample, pooling, strict=False)
        for i, text in enumerate(sample):
            found = [table.tokens.find(word) for word in plain_words(text)]
            found = [
                table.tokens.find_folded(word) if row is None and DOTTED_I in word else row
                for row, word in zip(found, plain_words(text), strict=True)
            ]
            ids = [row for row in found if row is not None]
            assert (encoded.tokens[i], encoded.unknown[i]) == (len(ids), len(found) - len(ids)), text
            if not ids:
                assert not encoded.vectors[i].any()
                continue
            weights = encoder.a / (encoder.a + zipf[ids]) if pooling == "sif" else np.ones(len(ids))
            mean = (rows[ids] * weights[:, None]).mean(axis=0)
            if pooling == "sif":
                mean -= (mean @ component) * component
            np.testing.assert_allclose(encoded.vectors[i], mean / np.linalg.norm(mean), atol=2e-7, err_msg=text)
        alone = np.vstack([encoder.encode([text], pooling, strict=False).vectors for text in sample[::97]])
        np.testing.assert_array_equal(alone, encoded.vectors[::97])


# ------------------------------------------------------------------ keyword index
@cache
def word_pattern() -> str:
    """Python's ``\\w`` (letters, digits and numbers, ``_``) with every combining mark added."""
    marks = "".join(chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c))[0] == "M")
    return f"[\\w{re.escape(marks)}]+"


def bm25s_words(sample: list[str]) -> list[list[str]]:
    """bm25s's own tokenizer given the index's rule: the texts composed, lower-cased and the final sigma folded
    here, cut by :func:`word_pattern`, bm25s's English stop words dropped, PyStemmer's English stems."""
    import bm25s
    import Stemmer

    lowered = [unicodedata.normalize("NFC", text).lower().replace("ς", "σ") for text in sample]
    words: list[list[str]] = bm25s.tokenize(
        lowered,
        lower=False,
        token_pattern=word_pattern(),
        stopwords="en",
        stemmer=Stemmer.Stemmer("english"),
        return_ids=False,
        show_progress=False,
    )
    return words


def test_keyword_words_and_scores_are_bm25s_own(tmp_path: Path) -> None:
    import bm25s

    sample = [text for text in texts() if "İ" not in text]  # Arrow lower-cases İ to i, Python to i and U+0307
    tokenizer = Tokenizer.named("en", "english")
    expected = bm25s_words(sample)
    assert [tokenizer.words(text) for text in sample] == expected
    built = build(pa.array(sample), tokenizer)
    assert built is not None
    for name, content in built.files.items():
        (tmp_path / name).write_bytes(content)
    index = KeywordIndex.open(tmp_path, {"rows": len(sample), KEYWORD: built.info})
    assert index is not None
    model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    model.index(expected, show_progress=False, create_empty_token=False)
    queries = [" ".join(text.split()[:5]) for text in sample[::41]] + WRITTEN
    scores, found = index.search(queries, 10)
    for q, words in enumerate(bm25s_words(queries)):
        known = [model.vocab_dict[word] for word in words if word in model.vocab_dict]
        theirs = np.asarray(model.get_scores_from_ids(known), dtype=np.float32) if known else np.zeros(len(sample))
        best = np.sort(theirs[theirs > 0])[::-1][:10]
        np.testing.assert_array_equal(scores[q][: len(best)], best, err_msg=queries[q])
        assert (found[q][len(best) :] == -1).all() and (theirs[found[q][: len(best)]] == best).all(), queries[q]
