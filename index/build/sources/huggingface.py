"""A Hugging Face model directory: the input embedding matrix, labelled by the model's own tokenizer.

Reads ``config.json``, ``model.safetensors`` (or the shards named by ``model.safetensors.index.json``, or every
``*.safetensors`` file) and ``tokenizer.json`` (or a WordPiece ``vocab.txt``). Row id = token id.

The matrix is read without torch: the safetensors header gives each tensor's dtype and byte range, and the rows
are read in blocks straight into one float32 array (fp16 widened by NumPy, bf16 by a 16-bit shift), so the peak
memory is the float32 table plus one block. Reading through a memory map would add the file's pages to the
process, so plain reads are used instead.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from index.build.sources import RawTable, ReadOptions
from index.errors import InputError, counted
from index.store.tokens import (
    BYTE_DECODER,
    BYTE_LEVEL_TO_LATIN1,
    FLAG_CONTINUATION,
    FLAG_SPECIAL,
    TOKENIZER,
)

BLOCK_BYTES = 64 << 20  # rows are read and converted this many source bytes at a time
MAX_HEADER = 100 << 20
INDEX_JSON = "model.safetensors.index.json"

# Input embedding names in common architectures, most specific first; a name may carry a prefix ("bert.").
EMBEDDING_NAMES = (
    "embeddings.word_embeddings.weight",  # BERT, RoBERTa, MiniLM, ...
    "embed_tokens.weight",  # Llama, Mistral, Qwen, OPT, T5 encoder/decoder
    "tok_embeddings.weight",  # original Llama checkpoints
    "wte.weight",  # GPT-2, GPT-J
    "embed_in.weight",  # GPT-NeoX, Pythia
    "word_embeddings.weight",  # BLOOM, Falcon
    "shared.weight",  # T5, BART
    "embedding.weight",
    "token_embedding.weight",  # CLIP text
)
OUTPUT_NAMES = ("lm_head.weight", "embed_out.weight", "output.weight", "cls.predictions.decoder.weight")
DTYPES: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F64": np.dtype("<f8"),
}
DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
# Rows a vocabulary reserves and the model never saw in training (BERT's [unused0]..[unused993], Gemma's <unused0>):
# no text tokenizes to them, so they are special like the added tokens.
RESERVED = re.compile(r"\[unused\d+\]|<unused\d+>")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in the file
    end: int


# ------------------------------------------------------------------ safetensors
def read_header(path: Path) -> dict[str, TensorInfo]:
    """The tensors of one safetensors file, from its JSON header (8-byte length, JSON, then the data)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise InputError(path, "not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER:
                raise InputError(path, f"not a safetensors file (header length {length} is implausible)")
            header = json.loads(handle.read(length))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not a safetensors file (header is not JSON: {exc})") from None
    if not isinstance(header, dict):
        raise InputError(path, "not a safetensors file (header is not a JSON object)")
    size = path.stat().st_size
    base = 8 + length
    out: dict[str, TensorInfo] = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in spec["data_offsets"])
            info = TensorInfo(
                name, path, str(spec["dtype"]), tuple(int(d) for d in spec["shape"]), base + begin, base + end
            )
        except (KeyError, TypeError, ValueError):
            raise InputError(path, f"tensor {name!r} has a malformed header entry") from None
        if not base <= info.start <= info.end <= size:
            raise InputError(path, f"tensor {name!r} lies outside the file (truncated download?)")
        out[name] = info
    return out


def model_files(directory: Path) -> list[Path]:
    """The safetensors files of a model: the shards listed by the index json, else every ``*.safetensors``."""
    index = directory / INDEX_JSON
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise InputError(index, "malformed index (expected a JSON object with a 'weight_map')") from None
        files = [directory / n for n in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise InputError(index, f"lists {counted(len(missing), 'file')} not found: {', '.join(missing)}")
        return files
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise InputError(directory, "no *.safetensors file (pickled .bin/.pt checkpoints are not read)")
    return files


def find_embedding(tensors: dict[str, TensorInfo], wanted: str | None, where: Path) -> TensorInfo:
    """The input embedding tensor: ``wanted`` if given, else the first of the usual names (any prefix)."""
    matrices = {n: t for n, t in tensors.items() if len(t.shape) == 2}
    if wanted is not None:
        if wanted not in tensors:
            raise InputError(where, f"no tensor named {wanted!r}; 2-D tensors: {tensor_listing(matrices)}")
        return tensors[wanted]
    for suffix in EMBEDDING_NAMES:
        hits = sorted((n for n in matrices if n == suffix or n.endswith("." + suffix)), key=lambda n: (len(n), n))
        if hits:
            return matrices[hits[0]]
    raise InputError(where, f"no input embedding tensor found (use --tensor); 2-D tensors: {tensor_listing(matrices)}")


def tensor_listing(tensors: dict[str, TensorInfo], limit: int = 12) -> str:
    """The tensors, largest first, as an error message lists them (at most ``limit``)."""
    items = [f"{n} {list(t.shape)}" for n, t in sorted(tensors.items(), key=lambda kv: -kv[1].shape[0])]
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return (", ".join(items[:limit]) + more) if items else "none"


def read_exact(handle: Any, buffer: memoryview, path: Path) -> None:
    """Fill ``buffer`` from ``handle``; InputError when the file ends first."""
    done = 0
    while done < len(buffer):
        got = handle.readinto(buffer[done:])
        if not got:
            raise InputError(path, "file ends inside a tensor (truncated download?)")
        done += got


def read_matrix(tensor: TensorInfo, block_bytes: int = BLOCK_BYTES) -> np.ndarray:
    """The tensor as a new float32 matrix, read and converted block by block."""
    if tensor.dtype not in DTYPES:
        raise InputError(tensor.file, f"tensor {tensor.name!r} has dtype {tensor.dtype}; expected F32, F16 or BF16")
    if len(tensor.shape) != 2 or min(tensor.shape) < 1:
        raise InputError(tensor.file, f"tensor {tensor.name!r} has shape {list(tensor.shape)}; expected rows x dim")
    source = DTYPES[tensor.dtype]
    rows, dim = tensor.shape
    if tensor.end - tensor.start != rows * dim * source.itemsize:
        raise InputError(tensor.file, f"tensor {tensor.name!r}: byte range disagrees with its shape and dtype")
    out = np.empty((rows, dim), dtype=np.float32)
    step = max(1, block_bytes // (dim * source.itemsize))
    with open(tensor.file, "rb") as handle:
        handle.seek(tensor.start)
        if tensor.dtype == "F32":  # straight into place
            for start in range(0, rows, step):
                # numpy declares ndarray.__buffer__ for Python 3.12+ only
                view = memoryview(out[start : start + step])  # type: ignore[arg-type]
                read_exact(handle, view.cast("B"), tensor.file)
            return out
        block = np.empty(step * dim, dtype=source)
        for start in range(0, rows, step):
            n = min(step, rows - start)
            part = block[: n * dim]
            view = memoryview(part)  # type: ignore[arg-type]  # as above: ndarray.__buffer__ on 3.12+ only
            read_exact(handle, view.cast("B"), tensor.file)
            target = out[start : start + n].reshape(-1)
            if tensor.dtype == "BF16":  # bfloat16 is the top half of a float32
                np.left_shift(part, 16, out=target.view(np.uint32), dtype=np.uint32)
            else:
                target[:] = part
    return out


def read_tensor(tensor: TensorInfo) -> np.ndarray:
    """Any float tensor as a float32 array of its shape (read as the matrix of its last axis)."""
    count = math.prod(tensor.shape)
    last = tensor.shape[-1] if tensor.shape and tensor.shape[-1] > 0 else 1
    flat = replace(tensor, shape=(count // last, last))
    return read_matrix(flat).reshape(tensor.shape)


def same_bytes(a: TensorInfo, b: TensorInfo, block_bytes: int = BLOCK_BYTES) -> bool:
    """Whether two tensors hold identical data (compared block by block)."""
    if (a.dtype, a.shape) != (b.dtype, b.shape):
        return False
    if (a.file, a.start) == (b.file, b.start):
        return True
    with open(a.file, "rb") as left, open(b.file, "rb") as right:
        left.seek(a.start)
        right.seek(b.start)
        remaining = a.end - a.start
        while remaining > 0:
            n = min(block_bytes, remaining)
            if left.read(n) != right.read(n):
                return False
            remaining -= n
    return True


# -------------------------------------------------------------------- tokenizer
def _component_types(node: Any) -> set[str]:
    """Every "type" in a tokenizer pipeline component (Sequence members included)."""
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            found.add(node["type"])
        for value in node.values():
            found |= _component_types(value)
    elif isinstance(node, list):
        for value in node:
            found |= _component_types(value)
    return found


@dataclass
class Vocabulary:
    labels: list[str]
    special: np.ndarray  # bool per id
    tokenizer_type: str  # WordPiece, BPE, Unigram, WordLevel
    scheme: str  # "byte-level", "metaspace", "wordpiece" or "plain"
    continuation_prefix: str | None
    tokenizer_json: bytes


def _wordpiece_json(vocab_txt: Path, directory: Path) -> bytes:
    """A tokenizer.json for a BERT ``vocab.txt`` (lower-casing as ``tokenizer_config.json`` says)."""
    from tokenizers import BertWordPieceTokenizer

    lowercase = bool(read_json(directory / "tokenizer_config.json", {}).get("do_lower_case", True))
    try:
        tokenizer = BertWordPieceTokenizer(str(vocab_txt), lowercase=lowercase)
    except Exception as exc:  # tokenizers raises plain Exceptions for unreadable vocabularies
        raise InputError(vocab_txt, f"not a WordPiece vocabulary: {exc}") from None
    text: str = tokenizer.to_str()  # tokenizers leaves this method untyped
    return text.encode()


def read_vocabulary(directory: Path) -> Vocabulary:
    """Labels (by id), special tokens and labelling scheme from tokenizer.json (or vocab.txt)."""
    from tokenizers import Tokenizer

    path = directory / TOKENIZER
    if path.is_file():
        content = path.read_bytes()
    elif (directory / "vocab.txt").is_file():
        path = directory / "vocab.txt"
        content = _wordpiece_json(path, directory)
    else:
        extra = " (tokenizer.model alone is not read: save the tokenizer as tokenizer.json)"
        raise InputError(
            directory, "no tokenizer.json or vocab.txt" + (extra if (directory / "tokenizer.model").exists() else "")
        )
    try:
        spec = json.loads(content)
        Tokenizer.from_str(content.decode())
        model = spec["model"]
        kind = str(model.get("type") or ("WordPiece" if "continuing_subword_prefix" in model else "BPE"))
        vocab = model["vocab"]
    except Exception as exc:  # tokenizers raises plain Exceptions for malformed files
        raise InputError(path, f"not a tokenizer the tokenizers library can load: {exc}") from None

    pairs: list[tuple[str, int]]
    if isinstance(vocab, list):  # Unigram: [piece, score] by id
        pairs = [(str(entry[0]), i) for i, entry in enumerate(vocab)]
    else:
        pairs = [(str(token), int(i)) for token, i in vocab.items()]
    added = [(str(t["content"]), int(t["id"]), bool(t.get("special"))) for t in spec.get("added_tokens") or []]
    size = 1 + max([i for _, i in pairs] + [i for _, i, _ in added], default=-1)
    labels: list[str | None] = [None] * size
    for token, i in pairs:
        labels[i] = token
    special = np.zeros(size, dtype=bool)
    for token, i, is_special in added:
        labels[i] = token
        special[i] |= is_special
    for i in (i for i, label in enumerate(labels) if not label):
        labels[i] = f"<unused:{i}>"
        special[i] = True
    special |= np.fromiter((bool(RESERVED.fullmatch(str(label))) for label in labels), dtype=bool, count=size)

    pipeline = [spec.get("normalizer"), spec.get("pre_tokenizer"), spec.get("decoder")]
    types = _component_types(pipeline)
    prefix = model.get("continuing_subword_prefix") or None
    if kind == "WordPiece":
        scheme, prefix = "wordpiece", prefix or "##"
    elif "ByteLevel" in types:
        scheme = "byte-level"
    elif "Metaspace" in types or kind == "Unigram" or "▁" in json.dumps(pipeline, ensure_ascii=False):
        scheme = "metaspace"
    else:
        scheme = "plain"
    return Vocabulary([str(label) for label in labels], special, kind, scheme, prefix, content)


def readable_label(label: str, scheme: str, prefix: str | None) -> str:
    """The text a token stands for: byte-level and ``▁`` markers turned into spaces, ``##`` removed."""
    if scheme == "byte-level":
        if not set(label) <= BYTE_DECODER.keys():  # an added token written in plain text
            return label
        raw = label.translate(BYTE_LEVEL_TO_LATIN1).encode("latin-1")
        return raw.decode("utf-8", errors="backslashreplace")
    if scheme == "metaspace":
        byte = BYTE_TOKEN.match(label)
        if byte:  # SentencePiece byte fallback, e.g. <0x0A>
            value = int(byte.group(1), 16)
            return chr(value) if value < 0x80 else f"\\x{value:02x}"
        return label.replace("▁", " ")
    if prefix and label.startswith(prefix) and len(label) > len(prefix):
        return label[len(prefix) :]
    return label


def token_metadata(vocab: Vocabulary, labels: list[str], flags: np.ndarray) -> dict[str, list[str]]:
    """A model-token table's metadata columns: each token's readable label (a row past the tokenizer's, its own
    label) and its piece, ``word``, ``special`` or ``continuation`` (from its ``flags``)."""
    readable = [readable_label(t, vocab.scheme, vocab.continuation_prefix) for t in vocab.labels]
    readable += labels[len(vocab.labels) :]
    piece = np.array(["word", "special", "continuation"])[np.minimum(flags, 2)].tolist()
    return {"readable": readable, "piece": piece}


def token_kinds(vocab: Vocabulary, flags: np.ndarray) -> dict[str, Any]:
    """The manifest's count of special and continuation tokens, and how the readable labels were made."""
    return {
        "special_tokens": int(np.count_nonzero(flags & FLAG_SPECIAL)),
        "continuation_tokens": int(np.count_nonzero(flags & FLAG_CONTINUATION)),
        "readable_labels": {
            "column": "readable",
            "scheme": vocab.scheme,
            "continuation_prefix": vocab.continuation_prefix,
            "space_marker": {"byte-level": "Ġ", "metaspace": "▁"}.get(vocab.scheme),
        },
    }


def token_flags(vocab: Vocabulary) -> np.ndarray:
    """Per-id bits: special token, and sub-word continuation (``##x``, or no word-initial space marker)."""
    labels = vocab.labels
    if vocab.continuation_prefix:
        p = vocab.continuation_prefix
        continuation = [t.startswith(p) and len(t) > len(p) for t in labels]
    elif vocab.scheme == "byte-level":
        continuation = [not t.startswith("Ġ") for t in labels]
    elif vocab.scheme == "metaspace":
        continuation = [not t.startswith("▁") for t in labels]
    else:
        continuation = [False] * len(labels)
    flags = np.where(np.asarray(continuation, dtype=bool), FLAG_CONTINUATION, 0).astype(np.uint8)
    flags[vocab.special] = FLAG_SPECIAL  # a special token is only special
    return flags


# ------------------------------------------------------------------------ read
def read_json(path: Path, default: Any = None, missing: str = "missing", expect: type = dict) -> Any:
    """A model directory's JSON file (``default`` when it is absent, if given): an ``expect`` (object or list)."""
    if not path.is_file():
        if default is not None:
            return default
        raise InputError(path, missing)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, expect):
        raise InputError(path, "expected a JSON object" if expect is dict else "expected a JSON list")
    return data


def read(path: Path, options: ReadOptions) -> RawTable:
    """Read a model directory (or one ``.safetensors`` file inside it) as a token table."""
    path = Path(path)
    directory = path.parent if path.is_file() else path
    config = read_json(directory / "config.json", {})
    files = [path] if path.is_file() else model_files(directory)
    tensors: dict[str, TensorInfo] = {}
    for file in files:
        for name, found in read_header(file).items():
            tensors.setdefault(name, found)
    where = files[0] if len(files) == 1 else directory
    tensor = find_embedding(tensors, options.tensor, where)
    rows = tensor.shape[0] if len(tensor.shape) == 2 else 0
    config_vocab = config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")
    if options.tensor is None and isinstance(config_vocab, int) and rows and config_vocab != rows:
        raise InputError(
            tensor.file,
            f"tensor {tensor.name!r} has {rows} rows but config.json says vocab_size {config_vocab} (choose --tensor?)",
        )
    vocab = read_vocabulary(directory)
    if rows and len(vocab.labels) > rows:
        raise InputError(
            tensor.file,
            f"tensor {tensor.name!r} has {rows} rows but the tokenizer has ids up to {len(vocab.labels) - 1}",
        )
    matrix = read_matrix(tensor)

    unused = rows - len(vocab.labels)  # padding rows beyond the tokenizer (e.g. rounded up to a multiple of 64)
    labels = vocab.labels + [f"<unused:{i}>" for i in range(len(vocab.labels), rows)]
    flags = np.concatenate([token_flags(vocab), np.full(unused, FLAG_SPECIAL, dtype=np.uint8)])
    output = next((tensors[n] for n in OUTPUT_NAMES if n in tensors and n != tensor.name), None)
    tied = same_bytes(tensor, output) if output is not None else bool(config.get("tie_word_embeddings", True))
    architectures = config.get("architectures") or []
    info = {
        "model": {
            "name": str(config.get("_name_or_path") or directory.name),
            "architecture": str(architectures[0] if architectures else config.get("model_type", "unknown")),
            "model_type": config.get("model_type"),
            "tensor": tensor.name,
            "tensor_file": tensor.file.name,
            "dtype": DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "tokenizer_type": vocab.tokenizer_type,
            "tied_embeddings": tied,
            "output_tensor": output.name if output is not None else None,
            "vocab_size": len(vocab.labels),
            "unused_rows": unused,
            **token_kinds(vocab, flags),
        }
    }
    return RawTable(
        tokens=labels,
        matrix=matrix,
        first_line=0,
        rows_are="token id",
        metadata=token_metadata(vocab, labels, flags),
        flags=flags,
        info=info,
        kind="tokens",
        extra_files={TOKENIZER: vocab.tokenizer_json},
    )
