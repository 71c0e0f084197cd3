"""A BERT-family sentence encoder as an ONNX graph, built from its safetensors weights with ``onnx``'s helpers.

:func:`read_checkpoint` reads a sentence-transformers model directory: ``config.json`` (a BERT-shaped encoder:
``model_type`` bert, absolute positions, GELU), ``modules.json`` (Transformer, Pooling, optionally Normalize),
the pooling module's ``config.json`` (mean or CLS), ``sentence_bert_config.json`` (``max_seq_length``, and
``do_lower_case``: sentence-transformers lower-cases the texts before its tokenizer when it is set) and the
weights. Anything else is an :class:`InputError` naming what is missing or unsupported.

:func:`build_graph` writes the forward pass as BERT computes it: word + position + token type 0 embeddings and
LayerNorm; per layer, multi-head self-attention over the unmasked positions (the mask adds a large negative
number to the scores of padding), output projection, residual and LayerNorm, then the GELU (erf) feed-forward,
residual and LayerNorm; then the pooling (the mean of the unmasked last-layer vectors, or the first one) and,
when the model normalises, unit length. Inputs: ``input_ids`` and ``attention_mask`` (int64, batch x length).
Outputs: ``sentence_embedding`` (batch x hidden) and ``token_embeddings`` (batch x length x hidden, the last
layer). Linear weights are stored transposed (in x out), as MatMul wants them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from index.build.sources.huggingface import TensorInfo, model_files, read_header, read_json, read_tensor
from index.errors import InputError
from index.progress import Progress
from index.store.artifact import GRAPH

OPSET = 17  # LayerNormalization is an ONNX operator from opset 17
MASK_BIAS = -1e9  # added to the attention scores of padding positions
SUPPORTED_TYPES = ("bert",)
TRANSFORMER = "sentence_transformers.models.Transformer"
POOLING = "sentence_transformers.models.Pooling"
NORMALIZE = "sentence_transformers.models.Normalize"

Pooling = Literal["mean", "cls"]


@dataclass(frozen=True)
class Checkpoint:
    """What the graph and the tokenisation need to know about a model directory."""

    directory: Path
    config: dict[str, Any]
    pooling: Pooling
    normalize: bool
    max_seq_length: int
    lower_case: bool  # the texts are lower-cased (Python's str.lower) before they are tokenised
    prefix: str  # of the tensor names ("" or e.g. "bert.")
    tensors: dict[str, TensorInfo]

    @property
    def layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def hidden(self) -> int:
        return int(self.config["hidden_size"])

    @property
    def heads(self) -> int:
        return int(self.config["num_attention_heads"])

    @property
    def eps(self) -> float:
        return float(self.config.get("layer_norm_eps", 1e-12))

    def info(self) -> dict[str, Any]:
        """The manifest's record of the encoder."""
        return {
            "graph": GRAPH,
            "opset": OPSET,
            "model_type": self.config.get("model_type"),
            "layers": self.layers,
            "hidden_size": self.hidden,
            "heads": self.heads,
            "intermediate_size": int(self.config["intermediate_size"]),
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_seq_length": self.max_seq_length,
            "do_lower_case": self.lower_case,
        }

    def tensor(self, name: str) -> np.ndarray:
        """The weight ``name`` (without the prefix) as float32; older checkpoints' gamma/beta are accepted."""
        full = self.prefix + name
        if full not in self.tensors and name.endswith((".weight", ".bias")) and "LayerNorm" in name:
            full = self.prefix + name.replace(".weight", ".gamma").replace(".bias", ".beta")
        found = self.tensors.get(full)
        if found is None:
            raise InputError(self.directory, f"the weights have no tensor {self.prefix + name!r}")
        return read_tensor(found)


MISSING = "missing (a sentence-transformers model directory has it)"


def _modules(directory: Path) -> tuple[Path, bool]:
    """The pooling module's directory and whether a Normalize module follows, from ``modules.json``."""
    path = directory / "modules.json"
    modules = read_json(path, missing=MISSING, expect=object)  # its shape is checked below
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise InputError(path, "expected a JSON list of modules")
    types = [str(m.get("type", "")) for m in modules]
    if not types or types[0] != TRANSFORMER:
        raise InputError(path, f"the first module must be {TRANSFORMER}, found {types[0] if types else 'none'}")
    others = [t for t in types[1:] if t not in (POOLING, NORMALIZE)]
    if others:
        raise InputError(path, f"unsupported module {others[0]} (supported: Transformer, Pooling, Normalize)")
    pooling = [m for m in modules if m.get("type") == POOLING]
    if len(pooling) != 1:
        raise InputError(path, f"expected one {POOLING} module, found {len(pooling)}")
    return directory / str(pooling[0].get("path") or "1_Pooling"), NORMALIZE in types


def _pooling(directory: Path) -> Pooling:
    path = directory / "config.json"
    config = read_json(path, missing=MISSING)
    modes = sorted(k.removeprefix("pooling_mode_") for k, v in config.items() if k.startswith("pooling_mode_") and v)
    if modes == ["mean_tokens"]:
        return "mean"
    if modes == ["cls_token"]:
        return "cls"
    raise InputError(path, f"unsupported pooling {', '.join(modes) or 'none'} (supported: mean_tokens, cls_token)")


def read_checkpoint(directory: Path) -> Checkpoint:
    """The model directory's configuration and weights (headers only), checked for what the graph supports."""
    config_path = directory / "config.json"
    config = read_json(config_path, missing=MISSING)
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_TYPES:
        raise InputError(config_path, f"model_type {model_type!r} is not supported (BERT-family encoders: bert)")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise InputError(config_path, f"missing or invalid {key!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise InputError(config_path, "hidden_size is not a multiple of num_attention_heads")
    if config.get("hidden_act", "gelu") != "gelu":
        raise InputError(config_path, f"hidden_act {config.get('hidden_act')!r} is not supported (gelu)")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise InputError(config_path, f"position_embedding_type {config['position_embedding_type']!r} is not supported")
    pooling_dir, normalize = _modules(directory)
    pooling = _pooling(pooling_dir)
    st_path = directory / "sentence_bert_config.json"
    st_config = read_json(st_path, missing=MISSING)
    max_seq = st_config.get("max_seq_length")
    positions = int(config.get("max_position_embeddings", 512))
    if not isinstance(max_seq, int) or not 2 <= max_seq <= positions:
        raise InputError(st_path, f"max_seq_length must be an integer from 2 to {positions}, got {max_seq!r}")
    lower_case = st_config.get("do_lower_case", False)
    if not isinstance(lower_case, bool):
        raise InputError(st_path, f"do_lower_case must be true or false, got {lower_case!r}")
    tensors: dict[str, TensorInfo] = {}
    for file in model_files(directory):
        for name, found in read_header(file).items():
            tensors.setdefault(name, found)
    word = next((n for n in tensors if n.endswith("embeddings.word_embeddings.weight")), None)
    if word is None:
        raise InputError(directory, "the weights have no embeddings.word_embeddings.weight (not a BERT checkpoint)")
    prefix = word.removesuffix("embeddings.word_embeddings.weight")
    return Checkpoint(directory, config, pooling, normalize, max_seq, lower_case, prefix, tensors)


# ------------------------------------------------------------------ the graph
class _Graph:
    """Nodes and initializers, with fresh names."""

    def __init__(self) -> None:
        from onnx import NodeProto, TensorProto

        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def op(self, kind: str, inputs: list[str], **attributes: Any) -> str:
        from onnx import helper

        self.count += 1
        out = f"{kind.lower()}_{self.count}"
        self.nodes.append(helper.make_node(kind, inputs, [out], name=out, **attributes))
        return out

    def linear(self, x: str, checkpoint: Checkpoint, name: str) -> str:
        weight = self.const(f"{name}.weight_t", np.ascontiguousarray(checkpoint.tensor(f"{name}.weight").T))
        bias = self.const(f"{name}.bias", checkpoint.tensor(f"{name}.bias"))
        return self.op("Add", [self.op("MatMul", [x, weight]), bias])

    def layer_norm(self, x: str, checkpoint: Checkpoint, name: str) -> str:
        scale = self.const(f"{name}.weight", checkpoint.tensor(f"{name}.weight"))
        bias = self.const(f"{name}.bias", checkpoint.tensor(f"{name}.bias"))
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=checkpoint.eps)


def _attention(g: _Graph, x: str, bias: str, checkpoint: Checkpoint, name: str) -> str:
    """Multi-head self-attention: (batch, length, hidden) -> the same, before the output projection."""
    heads, size = checkpoint.heads, checkpoint.hidden // checkpoint.heads
    split = g.const(f"{name}.split_shape", np.array([0, 0, heads, size], dtype=np.int64))
    q, k, v = (g.op("Reshape", [g.linear(x, checkpoint, f"{name}.{p}"), split]) for p in ("query", "key", "value"))
    q = g.op("Transpose", [q], perm=[0, 2, 1, 3])  # batch, heads, length, size
    k = g.op("Transpose", [k], perm=[0, 2, 3, 1])  # batch, heads, size, length
    v = g.op("Transpose", [v], perm=[0, 2, 1, 3])
    scale = g.const(f"{name}.scale", np.array(1.0 / math.sqrt(size), dtype=np.float32))
    scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), bias])
    context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    merge = g.const(f"{name}.merge_shape", np.array([0, 0, checkpoint.hidden], dtype=np.int64))
    return g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), merge])


def _gelu(g: _Graph, x: str, name: str) -> str:
    """0.5 x (1 + erf(x / sqrt 2)), BERT's exact GELU."""
    root = g.const(f"{name}.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    one = g.const(f"{name}.one", np.array(1.0, dtype=np.float32))
    half = g.const(f"{name}.half", np.array(0.5, dtype=np.float32))
    erf = g.op("Erf", [g.op("Div", [x, root])])
    return g.op("Mul", [g.op("Mul", [x, half]), g.op("Add", [erf, one])])


def build_graph(checkpoint: Checkpoint) -> bytes:
    """The serialised ONNX model of the checkpoint's forward pass and pooling (see the module docstring)."""
    from onnx import TensorProto, checker, helper

    g = _Graph()
    ids, mask = "input_ids", "attention_mask"
    words = g.const("word_embeddings", checkpoint.tensor("embeddings.word_embeddings.weight"))
    positions = g.const("position_embeddings", checkpoint.tensor("embeddings.position_embeddings.weight"))
    token_type = g.const("token_type_0", checkpoint.tensor("embeddings.token_type_embeddings.weight")[0])
    zero = g.const("zero", np.array([0], dtype=np.int64))
    one_axis = g.const("axis_1", np.array([1], dtype=np.int64))
    length = g.op("Slice", [g.op("Shape", [ids]), one_axis, g.const("two", np.array([2], dtype=np.int64))])
    x = g.op("Gather", [words, ids], axis=0)
    x = g.op("Add", [g.op("Add", [x, g.op("Slice", [positions, zero, length, zero])]), token_type])
    x = g.layer_norm(x, checkpoint, "embeddings.LayerNorm")

    mask_f = g.op("Cast", [mask], to=TensorProto.FLOAT)
    ones = g.const("one_f", np.array(1.0, dtype=np.float32))
    big = g.const("mask_bias", np.array(MASK_BIAS, dtype=np.float32))
    bias = g.op("Mul", [g.op("Sub", [ones, mask_f]), big])
    bias = g.op("Unsqueeze", [bias, g.const("axes_1_2", np.array([1, 2], dtype=np.int64))])  # batch, 1, 1, length

    with Progress(
        "building the ONNX graph", checkpoint.layers + 2, "steps"
    ) as progress:  # layers, serialising, checking
        for i in range(checkpoint.layers):
            progress.advance()
            name = f"encoder.layer.{i}"
            context = _attention(g, x, bias, checkpoint, f"{name}.attention.self")
            attended = g.linear(context, checkpoint, f"{name}.attention.output.dense")
            x = g.layer_norm(g.op("Add", [attended, x]), checkpoint, f"{name}.attention.output.LayerNorm")
            inner = _gelu(g, g.linear(x, checkpoint, f"{name}.intermediate.dense"), f"{name}.intermediate")
            out = g.linear(inner, checkpoint, f"{name}.output.dense")
            x = g.layer_norm(g.op("Add", [out, x]), checkpoint, f"{name}.output.LayerNorm")
        g.nodes.append(helper.make_node("Identity", [x], ["token_embeddings"], name="token_embeddings"))

        if checkpoint.pooling == "cls":
            first = g.op("Gather", [x, g.const("first", np.array(0, dtype=np.int64))], axis=1)
        else:
            weights = g.op("Unsqueeze", [mask_f, g.const("axes_2", np.array([2], dtype=np.int64))])
            total = g.op("ReduceSum", [g.op("Mul", [x, weights]), one_axis], keepdims=0)
            count = g.op("ReduceSum", [weights, one_axis], keepdims=0)
            floor = g.const("count_floor", np.array(1e-9, dtype=np.float32))
            first = g.op("Div", [total, g.op("Max", [count, floor])])
        if checkpoint.normalize:
            norm = g.op("ReduceL2", [first], axes=[-1], keepdims=1)  # axes an attribute until opset 18
            first = g.op("Div", [first, g.op("Max", [norm, g.const("norm_floor", np.array(1e-12, dtype=np.float32))])])
        g.nodes.append(helper.make_node("Identity", [first], ["sentence_embedding"], name="sentence_embedding"))

        hidden = checkpoint.hidden
        graph = helper.make_graph(
            g.nodes,
            "sentence_encoder",
            [
                helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "length"]),
                helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "length"]),
            ],
            [
                helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden]),
                helper.make_tensor_value_info("token_embeddings", TensorProto.FLOAT, ["batch", "length", hidden]),
            ],
            g.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="embedding-index"
        )
        model.ir_version = 8  # readable by every onnxruntime that runs opset 17
        serialised: bytes = model.SerializeToString()
        progress.advance()
        checker.check_model(serialised)  # the bytes themselves: the model is serialised once
        progress.advance()
    return serialised
