"""A sentence-transformers BERT-family checkpoint as an encoder table: the input token table, as ``hf`` reads it,
plus the model's forward pass as an ONNX graph built from its weights (``index.build.onnx_graph``), which the artifact
keeps beside the rows (its checksum in the manifest like every file's) and ``index.engine.transformer_encoder`` runs."""

from __future__ import annotations

from pathlib import Path

from index.build.onnx_graph import build_graph, read_checkpoint
from index.build.sources import RawTable, ReadOptions, huggingface
from index.errors import InputError
from index.progress import note
from index.store.artifact import GRAPH


def read(path: Path, options: ReadOptions) -> RawTable:
    directory = Path(path)
    if not directory.is_dir():
        raise InputError(directory, "--format transformer reads a model directory, not a file")
    checkpoint = read_checkpoint(directory)  # first: a missing or unsupported file fails before the big reads
    raw = huggingface.read(directory, options)
    note(f"building the ONNX graph of {checkpoint.layers} layers ...")
    raw.extra_files[GRAPH] = build_graph(checkpoint)
    raw.info["transformer"] = checkpoint.info()
    return raw
