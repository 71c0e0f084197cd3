"""A sharded word table's routes by token at the front beside the whole table's server, alternated.

``python -m bench.shard_words --rows 100000 --shards 3 --requests 100 --out shard_words.json``

The first ``--rows`` rows of GloVe 6B 50d (the installed package), imported whole and with ``--shards N``; the
whole table on one server, the sharded one behind a front of N shard servers (one replica each), every server
with the answer cache off. Each route's request is sent to the whole table's server and to the front in turn,
one at a time (the two alternated, so both see the same load), ``--requests`` times after 10 unmeasured; p50 of
each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import BIN, free_port, percentile, serve, server_env

WARM = 10
ROUTES: dict[str, tuple[str, str, dict[str, Any] | None, int]] = {  # method, path, body, the status answered
    "similarity, GET": ("GET", "/similarity?a=king&b=queen", None, 200),
    "similarity, POST 100 pairs": (
        "POST",
        "/similarity",
        {"pairs": [["king", "queen"], ["france", "paris"]] * 50},
        200,
    ),
    "neighbours of a token, GET": ("GET", "/neighbors?token=king&k=10", None, 200),
    "neighbours of a row id, GET": ("GET", "/neighbors?id=1000&k=10", None, 200),
    "neighbours, positive/negative": ("POST", "/neighbors", {"positive": ["king", "woman"], "negative": ["man"]}, 200),
    "analogy, 3CosAdd": ("POST", "/analogy", {"a": "man", "b": "king", "c": "woman", "k": 10}, 200),
    "analogy, 3CosAdd with expect": (
        "POST",
        "/analogy",
        {"a": "man", "b": "king", "c": "woman", "k": 10, "expect": "queen"},
        200,
    ),
    "analogy, 3CosMul": (
        "POST",
        "/analogy",
        {"a": "man", "b": "king", "c": "woman", "k": 10, "method": "3cosmul"},
        200,
    ),
    "analogy, 3CosMul with expect": (
        "POST",
        "/analogy",
        {"a": "man", "b": "king", "c": "woman", "k": 10, "method": "3cosmul", "expect": "queen"},
        200,
    ),
    "unknown token (404, suggestions)": ("GET", "/neighbors?token=kingg&k=10", None, 404),
    "search by vector": ("POST", "/search", {"vector": [0.1] * 50, "k": 10}, 200),
}


def words(rows: int, path: Path) -> None:
    """The first ``rows`` rows of the packaged GloVe table as a word2vec text file."""
    from index.build.sources import glove_package

    raw = glove_package.read()
    with path.open("w") as out:
        out.write(f"{min(rows, len(raw.tokens))} {raw.matrix.shape[1]}\n")
        for token, vector in zip(raw.tokens[:rows], raw.matrix[:rows], strict=True):
            out.write(token + " " + " ".join(f"{x:.6g}" for x in vector.tolist()) + "\n")


def imported(source: Path, data_dir: Path, name: str, *extra: str) -> None:
    argv = [str(BIN / "embedding-index"), "-q", "import", str(source), "--name", name, "--data-dir", str(data_dir)]
    subprocess.run([*argv, *extra], check=True)


def timed(client: Any, method: str, url: str, body: Any, status: int = 200) -> float:
    started = time.perf_counter()
    answer = client.request(method, url, json=body, timeout=60)
    spent = time.perf_counter() - started
    if answer.status_code != status:
        raise RuntimeError(f"{method} {url}: {answer.status_code} {answer.text[:300]}")
    return spent


def side_by_side(whole: str, front: str, requests: int) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {}
    with httpx.Client() as client:
        for label, (method, path, body, status) in ROUTES.items():
            spent: dict[str, list[float]] = {"whole": [], "front": []}
            for i in range(WARM + requests):
                for who, base in (("whole", whole), ("front", front)):
                    seconds = timed(client, method, base + path, body, status)
                    if i >= WARM:
                        spent[who].append(seconds)
            p50 = {who: percentile(values, 50) * 1000 for who, values in spent.items()}
            out[label] = {
                "whole_p50_ms": round(p50["whole"], 2),
                "front_p50_ms": round(p50["front"], 2),
                "ratio": round(p50["front"] / p50["whole"], 2),
            }
            print(f"{label:32s} {out[label]}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = server_env(cache=False)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        data = Path(tmp)
        words(args.rows, data / "words.txt")
        imported(data / "words.txt", data / "whole", "words")
        imported(data / "words.txt", data / "sharded", "words", "--shards", str(args.shards))
        (data / "front").mkdir()

        def serve_on(directory: Path, extra: list[str] | None = None, more: dict[str, str] | None = None) -> Any:
            port = free_port()
            argv = [str(BIN / "embedding-serve"), "--data-dir", str(directory), "--port", str(port), *(extra or [])]
            return stack.enter_context(serve([*argv, "--no-access-log"], "/readyz", port, env={**env, **(more or {})}))

        whole = serve_on(data / "whole")
        replicas = []
        for s in range(args.shards):
            shard = serve_on(data / "sharded" / "words", ["--tables", f"shard-{s:03d}"])
            replicas.append([f"{shard.base}/v1/tables/shard-{s:03d}"])
        front = serve_on(data / "front", more={"EMBEDDING_SHARDS": json.dumps({"words": replicas})})
        load = os.getloadavg()
        routes = side_by_side(f"{whole.base}/v1/tables/words", f"{front.base}/v1/tables/words", args.requests)
        result = {
            "rows": args.rows,
            "shards": args.shards,
            "requests": args.requests,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "load_average": {"start": [round(x, 2) for x in load], "end": [round(x, 2) for x in os.getloadavg()]},
            "routes": routes,
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
