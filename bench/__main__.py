"""Run the side-by-side benchmarks and write BENCHMARKS.md.

    python -m bench --data-dir data                      # everything (make bench)
    python -m bench --data-dir data --only neighbours    # one benchmark; the others' last results are kept
    python -m bench --data-dir data --quick              # tiny sizes, one round, into build/bench-quick/
    python -m bench --only peers                         # vector databases side by side (the `bench` extra)
    python -m bench --only peers-text                    # the text path beside Chroma (query text -> top 10)

Each benchmark writes ``<results-dir>/<name>.json`` (machine, load average at its start and end, versions, command,
every figure); BENCHMARKS.md is then rendered from every results file present, so benchmarks can be run (and
rerun) one at a time. It is not rendered when that would drop a section it has (a benchmark with no results in
``--results-dir``: bench/results/ is not kept in the repository): the run then stops before it starts, and
``--markdown build/BENCHMARKS.md`` renders elsewhere. ``--quick`` writes into build/bench-quick/ unless told
otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import report
from bench.common import REPO, SECONDS, TABLE, Context, exit_on_sigterm, machine, versions

NAMES = report.NAMES  # every benchmark, in the report's order
# benchmarks that build their own tables (no --data-dir table needed)
OWN_TABLE = {"peers", "peers-text", "firstrun", "growth", "documents", "text", "writes"}


def runner(name: str) -> Callable[..., dict[str, Any]]:
    if name == "analogy":
        from bench.analogy import run
    elif name == "neighbours":
        from bench.neighbours import run
    elif name == "import":
        from bench.imports import run
    elif name == "startup":
        from bench.startup import run
    elif name == "peers":
        from bench.peers import run
    elif name == "peers-text":
        from bench.peers_text import run
    elif name == "firstrun":
        from bench.firstrun import run
    elif name == "documents":
        from bench.documents import run
    elif name == "text":
        from bench.text import run
    elif name == "writes":
        from bench.writes import run
    else:
        from bench.growth import run
    return run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("EMBEDDING_DATA_DIR", "data")),
        help="directory holding the built glove-6b-50d table (make build)",
    )
    p.add_argument("--table", default=TABLE, help="table for the analogy, neighbours and start-up benchmarks")
    p.add_argument("--only", action="append", choices=NAMES, help="run only this benchmark (repeatable)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and one round: seconds, not minutes")
    p.add_argument("--rounds", type=int, help="rounds per comparison (default 3; 1 with --quick)")
    p.add_argument("--seconds", type=float, default=SECONDS, help="duration of each HTTP load measurement")
    p.add_argument("--results-dir", type=Path, help="default bench/results (build/bench-quick with --quick)")
    p.add_argument("--markdown", type=Path, help="report to write: BENCHMARKS.md (with --quick, in the results dir)")
    p.add_argument("--work-dir", type=Path, help="scratch directory for generated inputs (default: a temp dir)")
    p.add_argument("--fresh", action="store_true", help="growth: measure the selected sizes again (others are kept)")
    p.add_argument("--growth-rows", type=int, nargs="+", help="growth: row counts (default 100k 500k 1M 2M)")
    p.add_argument("--growth-dims", type=int, nargs="+", help="growth: dimensions (default 128 300)")
    p.add_argument(
        "--growth-compressed-rows",
        type=int,
        nargs="+",
        help="growth: tables bigger than memory, N x 128 with a compressed index (e.g. 10000000; default none)",
    )
    p.add_argument(
        "--peers-rows",
        type=int,
        help="peers: the first N GloVe rows (default all; 2,000 with --quick); peers-text: the first N passages "
        "(default 1,000; 64 with --quick)",
    )
    p.add_argument(
        "--peers-busy",
        action="store_true",
        help="peers, peers-text: every round measured quiet and again under a fixed background load on the same cores",
    )
    p.add_argument(
        "--peers-systems",
        nargs="+",
        choices=("milvus-lite", "chroma"),
        help="peers: the peers to compare with (default every one installed)",
    )
    p.add_argument(
        "--peers-latency-seconds", type=float, help="peers: most seconds of each one-query measurement (default 30)"
    )
    args = p.parse_args(argv)
    quick = REPO / "build" / "bench-quick"
    args.results_dir = args.results_dir or (quick if args.quick else REPO / "bench" / "results")
    args.markdown = args.markdown or (quick / "BENCHMARKS.md" if args.quick else REPO / "BENCHMARKS.md")
    return args


def save(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    with exit_on_sigterm():  # a run stopped by SIGTERM stops its servers too
        return run(parse_args(argv), argv)


def run(args: argparse.Namespace, argv: list[str] | None) -> int:
    rounds = args.rounds or (1 if args.quick else 3)
    lost = report.dropped(args.results_dir, args.markdown, args.only or NAMES)
    if lost:  # checked before a long run, and again when writing (a benchmark may fail)
        print(
            f"bench: {args.markdown} has sections of {', '.join(lost)} and {args.results_dir} no results of them: "
            "rendering would drop them; pass --markdown elsewhere (e.g. build/BENCHMARKS.md)",
            file=sys.stderr,
        )
        return 2
    needs_table = any(name not in OWN_TABLE for name in args.only or NAMES)
    if needs_table and not (args.data_dir / args.table / "manifest.json").is_file():
        print(
            f"bench: no table {args.table!r} in {args.data_dir} (run `make build` or pass --data-dir)", file=sys.stderr
        )
        return 2
    scratch = args.work_dir or Path(tempfile.mkdtemp(prefix="embedding-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    ctx = Context(
        data_dir=args.data_dir.resolve(),
        work_dir=scratch,
        results_dir=args.results_dir,
        quick=args.quick,
        rounds=rounds,
        table=args.table,
        command=shlex.join([".venv/bin/python", "-m", "bench", *(argv if argv is not None else sys.argv[1:])]),
        options={
            "seconds": args.seconds,
            "fresh": args.fresh,
            "growth_rows": args.growth_rows,
            "growth_dims": args.growth_dims,
            "growth_compressed_rows": args.growth_compressed_rows,
            "peers_rows": args.peers_rows,
            "peers_busy": args.peers_busy,
            "peers_systems": args.peers_systems,
            "peers_latency_seconds": args.peers_latency_seconds,
        },
    )
    failed = []
    try:
        for name in args.only or NAMES:
            path = args.results_dir / f"{name}.json"
            header = {
                "name": name,
                "quick": args.quick,
                "rounds": rounds,
                "command": ctx.bench_command(name),
                "load_average_at_start": [round(x, 2) for x in os.getloadavg()],  # machine() has the end's
            }
            started = time.time()
            print(f"bench: {name} ...", file=sys.stderr, flush=True)

            def partial(result: dict[str, Any], header: dict[str, Any] = header, path: Path = path) -> None:
                save(
                    path,
                    {**header, "status": "partial", "machine": machine(), "versions": versions(), "result": result},
                )

            try:
                fn = runner(name)
                result = fn(ctx, partial) if name == "growth" else fn(ctx)
                status, error = "ok", None
            except Exception:
                traceback.print_exc()
                result, status, error = {}, "failed", traceback.format_exc(limit=8)
                failed.append(name)
            payload = {
                **header,
                "status": status,
                "error": error,
                "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
                "seconds": round(time.time() - started, 1),
                "machine": machine(),
                "versions": versions(),
                "result": result,
            }
            if status == "ok" or not path.is_file():
                save(path, payload)
                if status == "ok":
                    path.with_name(f"{name}.failed.json").unlink(missing_ok=True)
            else:
                save(path.with_name(f"{name}.failed.json"), payload)  # keep the last good figures
            print(f"bench: {name} {status} in {payload['seconds']} s", file=sys.stderr, flush=True)
    finally:
        if args.work_dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    try:
        report.write(args.results_dir, args.markdown)
    except RuntimeError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    print(f"bench: wrote {args.markdown}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
