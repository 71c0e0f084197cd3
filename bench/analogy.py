"""The Google analogy set on the benchmark table, counted as gensim counts (restrict_vocab 300,000,
case-insensitive, questions with unknown words skipped, 3CosAdd), through

- ``index.build.evaluate.evaluate_analogies`` in process (what ``embedding-index eval`` runs),
- the ``embedding-index eval`` process (start-up, table load and verification included),
- the HTTP batch analogy endpoint of a real ``embedding-serve`` (exact, batches of 1,024),

against gensim's ``KeyedVectors.evaluate_word_analogies`` on KeyedVectors holding the same matrix.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    BIN,
    Context,
    display,
    embedding_serve,
    free_port,
    median,
    paired,
    run_child,
    serve,
    server_env,
    target,
)
from bench.neighbours import keyed_vectors
from index.engine.table import Table

RESTRICT = 300_000
BATCH = 1024
Question = tuple[str, str, str, str, str]  # section, a, b, c, expected


def google_set() -> Path:
    from gensim.test.utils import datapath

    return Path(datapath("questions-words.txt"))


def read_questions(path: Path) -> list[Question]:
    section, out = "", []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(":"):
            section = line[1:].strip()
        elif line.strip():
            a, b, c, expected = line.split()
            out.append((section, a, b, c, expected))
    return out


def subset(path: Path, out: Path, per_section: int) -> Path:
    """The first ``per_section`` questions of every section (the quick mode's set)."""
    lines, kept = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(":"):
            lines.append(line)
            kept = 0
        elif kept < per_section:
            lines.append(line)
            kept += 1
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def score(correct: int, total: int) -> dict[str, Any]:
    return {"correct": correct, "total": total, "accuracy": round(correct / total, 4) if total else 0.0}


# -------------------------------------------------------------------- sides
def run_gensim(kv: Any, path: Path) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    _, sections = kv.evaluate_word_analogies(str(path), restrict_vocab=RESTRICT, case_insensitive=True)
    seconds = time.perf_counter() - started
    total = next(s for s in sections if s["section"] == "Total accuracy")
    return seconds, score(len(total["correct"]), len(total["correct"]) + len(total["incorrect"]))


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    """Correct and total questions from an ``evaluate_analogies`` report."""
    for keys in (("correct", "total"), ("correct", "questions"), ("correct", "count")):
        if all(k in report for k in keys):
            return score(int(report[keys[0]]), int(report[keys[1]]))
    if "total" in report and isinstance(report["total"], dict):
        return summarise(report["total"])
    raise KeyError(f"cannot find correct/total in the evaluation report: {sorted(report)}")


def run_function(table: Table, path: Path) -> tuple[float, dict[str, Any]]:
    from index.build.evaluate import evaluate_analogies

    started = time.perf_counter()
    report = evaluate_analogies(table, path, restrict=RESTRICT, method="3cosadd")
    return time.perf_counter() - started, summarise(report)


def cli_argv(ctx: Context, path: Path) -> list[str]:
    return [
        str(BIN / "embedding-index"),
        "eval",
        ctx.table,
        "--data-dir",
        str(ctx.data_dir),
        "--analogies",
        str(path),
        "--restrict",
        str(RESTRICT),
        "--json",
    ]


def run_cli(ctx: Context, path: Path) -> tuple[float, dict[str, Any]]:
    child = run_child(cli_argv(ctx, path)).check()
    return child.seconds, summarise(child.json()["analogies"])


def run_http(base: str, table: str, questions: list[Question]) -> tuple[float, dict[str, Any]]:
    """A client of the API: resolve the set's words once (batch neighbours, k=1), skip questions with a word
    outside the first 300,000 rows, then ask the rest in batches of 1,024 (exact, restrict 300,000)."""
    started = time.perf_counter()
    with httpx.Client(base_url=base, timeout=600) as client:
        words = sorted({w for q in questions for w in q[1:]})
        ids: dict[str, int] = {}
        for i in range(0, len(words), BATCH):
            chunk = words[i : i + BATCH]
            response = client.post(f"/v1/tables/{table}/neighbors", json={"queries": chunk, "k": 1})
            response.raise_for_status()
            for word, result in zip(chunk, response.json()["results"], strict=True):
                if "query" in result:
                    ids[word] = result["query"]["id"]
        known = [q for q in questions if all(ids.get(w, RESTRICT) < RESTRICT for w in q[1:])]
        correct = 0
        for i in range(0, len(known), BATCH):
            chunk = known[i : i + BATCH]
            body = {
                "queries": [{"a": a, "b": b, "c": c} for _, a, b, c, _ in chunk],
                "k": 1,
                "method": "3cosadd",
                "exact": True,
                "restrict": RESTRICT,
            }
            response = client.post(f"/v1/tables/{table}/analogy", json=body)
            response.raise_for_status()
            for q, result in zip(chunk, response.json()["results"], strict=True):
                found = result.get("neighbors") or [{}]
                correct += str(found[0].get("token", "")).upper() == q[4].upper()
    return time.perf_counter() - started, score(correct, len(known))


# ----------------------------------------------------------------------- run
def run(ctx: Context) -> dict[str, Any]:
    logging.getLogger("gensim").setLevel(logging.WARNING)
    path = google_set()
    if ctx.quick:
        path = subset(path, ctx.work_dir / "questions-quick.txt", 10)
    questions = read_questions(path)
    table = Table.load(ctx.table_dir)
    kv = keyed_vectors(table)
    port = free_port()
    seconds: dict[str, list[float]] = {"gensim": [], "function": [], "cli": [], "http": []}
    answers: dict[str, dict[str, Any]] = {}
    with serve(embedding_serve(ctx, port), "/readyz", port, server_env()) as server:
        run_http(server.base, ctx.table, questions[:50])  # warm-up: connection, first batch
        sides = {
            "gensim": lambda: run_gensim(kv, path),
            "function": lambda: run_function(table, path),
            "cli": lambda: run_cli(ctx, path),
            "http": lambda: run_http(server.base, ctx.table, questions),
        }
        for r in range(ctx.rounds):
            names = list(sides)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                took, result = sides[name]()
                seconds[name].append(round(took, 3))
                if answers.setdefault(name, result) != result:
                    raise RuntimeError(f"{name}: answers changed between rounds: {answers[name]} vs {result}")
    medians = {name: median(values) for name, values in seconds.items()}
    same = all(answers[name] == answers["gensim"] for name in answers)
    command = ctx.bench_command("analogy")
    labels = {
        "function": ("analogy set, evaluate_analogies in process (embedding-index eval's code)", command),
        "cli": (
            "analogy set, embedding-index eval process (start-up and table load included)",
            display(cli_argv(ctx, path)),
        ),
        "http": ("analogy set, HTTP batch endpoint (exact, batches of 1,024)", server.command),
    }
    targets = []
    for name, (label, how) in labels.items():
        speedup = paired(seconds["gensim"], seconds[name])
        targets.append(
            target(
                label,
                medians[name],
                medians["gensim"],
                "s",
                speedup,
                ">= 10x, same accuracy",
                speedup >= 10 and answers[name] == answers["gensim"],
                how,
                "gensim evaluate_word_analogies",
            )
        )
    return {
        "table": ctx.table,
        "questions_file": str(path),
        "questions": len(questions),
        "restrict": RESTRICT,
        "method": "3cosadd",
        "seconds": seconds,
        "median_seconds": medians,
        "answers": answers,
        "same_accuracy": same,
        "speedup_vs_gensim": {name: round(paired(seconds["gensim"], seconds[name]), 2) for name in labels},
        "targets": targets,
        "command": command,
        "server": server.command,
        "cli": display(cli_argv(ctx, path)),
    }
