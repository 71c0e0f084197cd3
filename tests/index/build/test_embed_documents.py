"""Documents without vectors, embedded at import with ``--encoder`` (a table of the data directory).

On gensim's Lee corpus without its vectors and on a directory of Markdown passages, through the real
``embedding-index import``: the vectors equal the encoder (``index.engine.encode``) called directly on the same texts,
the manifest records the encoder, and bad rows (no text, no known word) are named or dropped.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from index.build.documents import embedded
from index.build.embed_documents import TextEncoder
from index.build.fields import Checks
from index.build.passages import passages_table
from index.engine.encode import encoder_for
from index.engine.table import Table
from index.errors import InvalidQuery
from tests.cli import run_cli
from tests.index.build.test_documents import markdown_files
from tests.index.build.test_sources import import_fails
from tests.lee import Lee, jsonl_records, write_jsonl
from tests.minilm import MINILM
from tests.opposite import build_opposite


def without_vectors(lee: Lee) -> list[dict[str, object]]:
    return [{key: value for key, value in record.items() if key != "vector"} for record in jsonl_records(lee)]


def import_texts(data: Path, small_data_dir: Path, lee: Lee, source: Path, name: str = "lee") -> None:
    """``data`` made of ``small`` (copied from ``small_data_dir``) and table ``name``: Lee's documents without
    vectors (written to ``source``), their texts embedded by ``small`` at import."""
    shutil.copytree(small_data_dir / "small", data / "small")
    path = write_jsonl(source, without_vectors(lee))
    args = ("import", path, "--format", "documents", "--name", name, "--encoder", "small", "--data-dir", data)
    assert run_cli(*args).code == 0


def imported(path: Path, data_dir: Path, *extra: object, name: str = "docs") -> Table:
    result = run_cli("import", path, "--format", "documents", "--name", name, "--data-dir", data_dir, *extra)
    assert result.code == 0, result.err
    return Table.load(data_dir / name)


def test_lee_embedded_with_a_word_table(tmp_path: Path, data_dir: Path, lee_docs: Lee) -> None:
    path = write_jsonl(tmp_path / "lee.jsonl", without_vectors(lee_docs))
    table = imported(path, data_dir, "--encoder", "small")
    small = Table.load(data_dir / "small")
    expected = encoder_for(small).encode(lee_docs.texts).vectors
    np.testing.assert_allclose(np.asarray(table.vectors), expected, rtol=0, atol=1e-6)
    assert table.payload is not None and table.payload.ids(range(3)) == lee_docs.ids[:3]
    encoder = table.manifest["documents"]["encoder"]
    assert encoder == {
        "table": "small",
        "kind": "words",
        "pooling": "mean",
        "dim": 50,
        "vectors_sha256": small.manifest["files"]["vectors.npy"]["sha256"],
    }
    assert table.manifest["documents"]["vector_field"] is None


def test_markdown_passages_embedded(tmp_path: Path, data_dir: Path, lee_docs: Lee) -> None:
    docs = tmp_path / "docs"
    markdown_files(docs, lee_docs)
    table = imported(docs, data_dir, "--encoder", "small", "--chunk-words", "80")
    passages = passages_table(docs, 80)
    assert table.rows == passages.num_rows
    texts = passages.column("text").to_pylist()
    expected = encoder_for(Table.load(data_dir / "small")).encode(texts).vectors
    np.testing.assert_allclose(np.asarray(table.vectors), expected, rtol=0, atol=1e-6)
    assert table.payload is not None and table.payload.fields == {
        "source": "string",
        "folder": "string",
        "chunk": "integer",
        "start": "integer",
        "end": "integer",
    }


def test_rows_that_cannot_be_embedded(tmp_path: Path, data_dir: Path, lee_docs: Lee) -> None:
    records = without_vectors(lee_docs)[:20]
    records[4]["text"] = None
    records[9]["text"] = "zzqx qqzv"  # no word GloVe knows
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    message = import_fails(path, data_dir, "--format", "documents", "--encoder", "small")
    assert message.endswith(f"{path}:5: no text to embed ('text') (use --drop-invalid to skip such rows)"), message
    table = imported(path, data_dir, "--encoder", "small", "--drop-invalid")
    assert table.rows == 18 and table.manifest["cleaning"]["invalid_rows_dropped"] == 2
    assert table.payload is not None and lee_docs.ids[9] not in table.payload.ids(range(18))
    records[4]["text"] = lee_docs.texts[4]
    path = write_jsonl(tmp_path / "bad2.jsonl", records)
    message = import_fails(path, data_dir, "--format", "documents", "--encoder", "small")
    assert message.endswith(
        f"{path}:10: text 'text' has no word the encoder knows (use --drop-invalid to skip such rows)"
    )


def test_a_text_of_special_tokens_names_them(minilm_data_dir: Path) -> None:
    """With a model-token table, a text whose only pieces are special tokens typed in it or [UNK] is a bad row
    naming them as typed (as the API names them), counted as a text with no known word."""
    texts = ["heart", "[CLS]", "☃ [SEP]"]
    checks = Checks(len(texts))
    found = embedded("text", pa.array(texts), checks, TextEncoder.open(minilm_data_dir / MINILM).embed)
    assert found.rows.tolist() == [0] and found.not_embedded == {"no_known_word": 2}
    assert checks.reason(1) == (
        "text 'text' '[CLS]': no word of it is known to the encoder: [CLS] is a special token, which the table "
        "leaves out"
    )
    assert checks.reason(2) == (
        "text 'text' '☃ [SEP]': no word of it is known to the encoder: unknown ☃; [SEP] is a special token, which the "
        "table leaves out"
    )


def test_texts_whose_known_words_cancel_out_are_counted_apart(tmp_path: Path, data_dir: Path) -> None:
    """A text whose known words' rows sum to zero is a bad row naming those words, and the import counts such
    texts apart from those with no known word and those with no text."""
    small = Table.load(data_dir / "small")
    heart = small.tokens.find("heart")
    assert heart is not None
    build_opposite(np.asarray(small.vectors[heart]) * small.norms[heart], data_dir)
    texts = ["heart", "heart zzqx trah", None, "zzqx", "trah trah", "trah heart"]
    path = write_jsonl(tmp_path / "opposite.jsonl", [{"id": str(i), "text": text} for i, text in enumerate(texts)])
    message = import_fails(path, data_dir, "--format", "documents", "--encoder", "opposite")
    assert message.endswith(
        f"{path}:2: text 'text' 'heart zzqx trah': its words known to the encoder ('heart', 'trah') cancel out: it "
        "pools to a zero vector (use --drop-invalid to skip such rows)"
    ), message
    args = ("import", path, "--format", "documents", "--name", "docs", "--encoder", "opposite", "--drop-invalid")
    result = run_cli(*args, "--data-dir", data_dir)
    assert result.code == 0, result.err
    expected = "not embedded: 1 document without text, 1 text with no word the encoder knows, 2 texts whose known "
    assert f"{expected}words cancel out\n" in result.out, result.out
    cleaning = Table.load(data_dir / "docs").manifest["cleaning"]
    assert cleaning["texts_not_embedded"] == {"no_text": 1, "no_known_word": 1, "cancelled_out": 2}


def test_encoder_mistakes(tmp_path: Path, data_dir: Path, lee_docs: Lee) -> None:
    path = write_jsonl(tmp_path / "lee.jsonl", without_vectors(lee_docs)[:5])
    message = import_fails(path, data_dir, "--format", "documents", "--encoder", "nope")
    assert "--encoder: no table 'nope' in the data directory (its tables: small)" in message
    message = import_fails(path, data_dir, "--format", "documents", "--encoder", "../small")
    assert "invalid table name '../small'" in message
    with_vectors = write_jsonl(tmp_path / "vectors.jsonl", jsonl_records(lee_docs)[:5])
    message = import_fails(with_vectors, data_dir, "--format", "documents", "--encoder", "small")
    assert message.endswith(
        "vectors.jsonl: the documents have vectors ('vector'), and --encoder embeds documents that have none: import "
        "these vectors without --encoder, or leave the field out of the file to embed the texts"
    ), message
    no_text = write_jsonl(tmp_path / "ids.jsonl", [{"id": i} for i in range(3)])
    message = import_fails(no_text, data_dir, "--format", "documents", "--encoder", "small")
    assert "no text field" in message
    words = tmp_path / "words.txt"
    words.write_text("heart " + " ".join(["0.1"] * 50) + "\n")
    message = import_fails(words, data_dir, "--encoder", "small")
    assert message.endswith(f"--encoder: only for --format documents, and {words} reads as glove")
    assert json.loads((data_dir / "small" / "manifest.json").read_text())["name"] == "small"


def test_encoding_that_leaves_out_what_it_cannot_embed(data_dir: Path) -> None:
    encoder = encoder_for(Table.load(data_dir / "small"))
    texts = ["the heart of the city", "zzqx qqzv", "", "red and blue"]
    loose = encoder.encode(texts, strict=False)
    assert loose.tokens[1] == loose.tokens[2] == 0 and not loose.vectors[[1, 2]].any()
    strict = encoder.encode([texts[0], texts[3]])
    np.testing.assert_array_equal(loose.vectors[[0, 3]], strict.vectors)
    with pytest.raises(InvalidQuery, match=r"text 1 .* has no known token"):
        encoder.encode(texts)
