"""Benchmarks on GloVe 6B 50d, question for question against gensim's evaluate_word_analogies / _pairs."""

from __future__ import annotations

import ast
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gensim.models import KeyedVectors

from bench.analogy import subset
from index import progress
from index.build.evaluate import default_sets, evaluate_analogies, evaluate_pairs, format_report
from index.build.sources import RawTable
from index.engine import analogy
from index.engine.analogy import analogy_top
from index.engine.table import Table
from tests import REPO
from tests.cli import Result, progress_lines, run_cli
from tests.conftest import SMALL_ROWS, cache_dir
from tests.early import Done, Early
from tests.examples import example
from tests.gensim_reference import PARITY_TOP5, TRIMMED, gensim_analogies, google_sample, trimmed_key

GOOGLE, (WORDSIM, SIMLEX) = default_sets()


def assert_same_as_gensim(ours: dict[str, Any], sections: list[dict[str, Any]]) -> None:
    *parts, total = sections
    assert total["section"] == "Total accuracy"
    assert ours["correct"] == len(total["correct"])
    assert ours["total"] == len(total["correct"]) + len(total["incorrect"])
    evaluated = ours["total"]
    assert ours["accuracy"] == (len(total["correct"]) / evaluated if evaluated else 0.0)
    assert [s["section"] for s in ours["sections"]] == [s["section"] for s in parts]
    for mine, theirs in zip(ours["sections"], parts, strict=True):
        assert mine["correct"] == len(theirs["correct"]), mine["section"]
        assert mine["incorrect"] == len(theirs["incorrect"]), mine["section"]
        assert [tuple(q) for q in mine["correct_questions"]] == theirs["correct"], mine["section"]
        assert [tuple(q) for q in mine["incorrect_questions"]] == theirs["incorrect"], mine["section"]


def well_formed(path: Path) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if not line.startswith(": ") and len(line.split()) == 4)


@pytest.fixture(scope="session")
def google_report(glove: Table) -> dict[str, Any]:
    return evaluate_analogies(glove, GOOGLE, details=True)


@pytest.fixture(scope="session")
def pair_reports(glove: Table) -> list[dict[str, Any]]:
    return [evaluate_pairs(glove, WORDSIM), evaluate_pairs(glove, SIMLEX)]


# ------------------------------------------------------------------------------------------- against gensim
@pytest.mark.slow
def test_google_set_3cosadd_equals_gensim(glove: Table, gensim_google: list[dict[str, Any]], google_report) -> None:
    """The whole set, against gensim's evaluate_word_analogies at its defaults (restrict_vocab 300,000,
    case-insensitive), computed in the background on the same rows (``tests/gensim_reference.py``)."""
    assert_same_as_gensim(google_report, gensim_google)
    assert google_report["questions"] == well_formed(GOOGLE)
    assert google_report["questions"] - google_report["skipped"] == google_report["total"]


def test_the_gensim_reference_is_gensims_own(glove_kv: KeyedVectors, gensim_google: list, tmp_path: Path) -> None:
    """The whole-set reference above (recorded with the tests or computed in the background) is what gensim
    answers: gensim, run here on every 50th question of each section, scores each of them as the reference does."""
    sample, asked, nth = [], {}, 0  # section -> the questions asked of it (a few questions are in two sections)
    for line in GOOGLE.read_text(encoding="utf-8").splitlines():
        nth = 0 if line.startswith(": ") else nth + 1
        if nth == 0:
            section = asked.setdefault(line[2:].strip(), set())
        if nth % 50 == 0:  # the header, then the 50th question, the 100th, ...
            sample.append(line)
            section.add(tuple(line.upper().split()))
    path = tmp_path / "sample.txt"
    path.write_text("\n".join(sample) + "\n", encoding="utf-8")
    *live, _ = gensim_analogies(glove_kv, path, 300_000, "3cosadd", True)
    *parts, total = gensim_google
    assert [s["section"] for s in live] == [s["section"] for s in parts]
    for now, recorded in zip(live, parts, strict=True):
        mine = asked[recorded["section"]]
        for outcome in ("correct", "incorrect"):
            assert now[outcome] == [q for q in recorded[outcome] if q in mine], (now["section"], outcome)
        assert len(now["correct"]) + len(now["incorrect"]) > 0, now["section"]
    for outcome in ("correct", "incorrect"):  # the total is the sections' questions, in order
        assert total[outcome] == [q for s in parts for q in s[outcome]]


def same_hits(live: list[tuple[str, float]], recorded: list[tuple[str, float]]) -> bool:
    return [t for t, _ in live] == [t for t, _ in recorded] and np.allclose(
        [s for _, s in live], [s for _, s in recorded], rtol=0, atol=1e-6
    )


def test_the_recorded_answers_are_gensims_own(
    glove_kv: KeyedVectors, gensim_answers: dict[str, Any], tmp_path: Path
) -> None:
    """The other comparisons' gensim answers (recorded with the tests or computed in the background) are what gensim
    answers: gensim, run here on every 50th question of the parity sample (every 25th of its top-5 part) and on the
    first two questions of each section of every trimmed set, gives the same hits and scores each of them alike."""
    google = gensim_answers["google"]
    assert google == google_sample(glove_kv.key_to_index)
    for i in range(0, len(google), 50):
        a, b, c, _ = google[i]
        assert same_hits(glove_kv.most_similar(positive=[b, c], negative=[a], topn=1), gensim_answers["top1"][i]), i
    for i in range(0, PARITY_TOP5, 25):
        a, b, c, _ = google[i]
        top5 = glove_kv.most_similar(positive=[b, c], negative=[a], topn=5)
        cosmul = glove_kv.most_similar_cosmul(positive=[b, c], negative=[a], topn=5)
        assert same_hits(top5, gensim_answers["3cosadd"][i]) and same_hits(cosmul, gensim_answers["3cosmul"][i]), i
    first_two = subset(GOOGLE, tmp_path / "first-two.txt", 2)
    for method, restrict, case_insensitive, per_section in TRIMMED:
        live = gensim_analogies(glove_kv, first_two, restrict, method, case_insensitive)
        recorded = {
            s["section"]: s
            for s in gensim_answers["trimmed"][trimmed_key(method, restrict, case_insensitive, per_section)]
        }
        assert {s["section"] for s in live} <= set(recorded)
        for now in live:
            asked = set(now["correct"]) | set(now["incorrect"])
            for outcome in ("correct", "incorrect"):
                kept = [q for q in recorded[now["section"]][outcome] if q in asked]
                assert now[outcome] == kept, (method, restrict, now["section"], outcome)


# (3cosmul, 300,000): gensim's 3CosMul scores all 400,000 rows whatever restrict says; (3cosmul, 30,000): answers
# past the vocabulary are looked up by label; (3cosadd, case-sensitive): the capitalised sections are all skipped
@pytest.mark.parametrize(("method", "restrict", "case_insensitive", "per_section"), TRIMMED)
def test_trimmed_set_equals_gensim(
    glove: Table,
    gensim_answers: dict[str, Any],
    tmp_path: Path,
    method: str,
    restrict: int,
    case_insensitive: bool,
    per_section: int,
) -> None:
    """Against gensim's evaluate_word_analogies of the same trimmed set (``gensim_analogies``), computed in the
    background from the start of the session (``tests.gensim_reference.answers``)."""
    path = subset(GOOGLE, tmp_path / "questions.txt", per_section)
    ours = evaluate_analogies(glove, path, restrict, method, case_insensitive, details=True)
    assert ours["method"] == method and ours["restrict"] == restrict
    theirs = gensim_answers["trimmed"][trimmed_key(method, restrict, case_insensitive, per_section)]
    assert_same_as_gensim(ours, theirs)
    assert ours["total"] > 50
    assert ours["questions"] == well_formed(path)


@pytest.mark.parametrize("path", [WORDSIM, SIMLEX], ids=["wordsim353", "simlex999"])
def test_pairs_equal_gensim(glove: Table, glove_kv: KeyedVectors, path: Path) -> None:
    ours = evaluate_pairs(glove, path)
    pearson, spearman, oov_ratio = glove_kv.evaluate_word_pairs(str(path))
    assert ours["pearson"] == pytest.approx(pearson[0], abs=1e-6)
    assert ours["spearman"] == pytest.approx(spearman[0], abs=1e-6)
    assert ours["pearson_pvalue"] == pytest.approx(pearson[1], rel=1e-4)
    assert ours["spearman_pvalue"] == pytest.approx(spearman[1], rel=1e-4)
    assert ours["oov_ratio"] == pytest.approx(oov_ratio, abs=1e-6)
    assert ours["pairs"] + ours["oov"] == sum(
        1 for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")
    )


def test_restricted_pairs_equal_gensim(glove: Table, glove_kv: KeyedVectors) -> None:
    ours = evaluate_pairs(glove, SIMLEX, restrict=5_000)
    pearson, spearman, oov_ratio = glove_kv.evaluate_word_pairs(str(SIMLEX), restrict_vocab=5_000)
    assert ours["oov"] > 0
    assert (ours["pearson"], ours["spearman"], ours["oov_ratio"]) == pytest.approx(
        (pearson[0], spearman[0], oov_ratio), abs=1e-6
    )


def test_gzip_files_are_read_as_gensim_reads_them(small: Table, glove_raw: RawTable, tmp_path: Path) -> None:
    """A gzip-compressed analogy or pair file is decompressed, as gensim opens it: the same figures as gensim's."""
    kv = KeyedVectors(small.dim)
    kv.add_vectors(glove_raw.tokens[: small.rows], glove_raw.matrix[: small.rows])
    questions, pairs = tmp_path / "questions.txt.gz", tmp_path / "wordsim.tsv.gz"
    questions.write_bytes(gzip.compress(subset(GOOGLE, tmp_path / "q.txt", 40).read_bytes()))
    pairs.write_bytes(gzip.compress(WORDSIM.read_bytes()))
    ours = evaluate_analogies(small, questions)
    accuracy, sections = kv.evaluate_word_analogies(str(questions))
    assert ours["total"] == len(sections[-1]["correct"]) + len(sections[-1]["incorrect"]) > 100
    assert ours["accuracy"] == pytest.approx(accuracy, abs=1e-9)
    pearson, spearman, oov_ratio = kv.evaluate_word_pairs(str(pairs))
    found = evaluate_pairs(small, pairs)
    assert (found["pearson"], found["spearman"], found["oov_ratio"]) == pytest.approx(
        (pearson[0], spearman[0], oov_ratio), abs=1e-6
    )


# -------------------------------------------------------------------------------------- the published figures
def test_published_figures(google_report, pair_reports) -> None:
    assert round(google_report["accuracy"], 4) == 0.4637
    assert google_report["total"] == 19_486
    wordsim, simlex = pair_reports
    assert round(wordsim["spearman"], 3) == 0.503
    assert round(simlex["spearman"], 3) == 0.263
    text = format_report(
        {"table": "glove-6b-50d", "restrict": 300_000, "analogies": google_report, "pairs": pair_reports}
    )
    lines = text.splitlines()
    assert "accuracy 0.4637 (9,036/19,486)" in lines[1]
    assert len(lines) == 2 + len(google_report["sections"]) + 2
    assert lines[-2].startswith("pairs wordsim353.tsv: Spearman 0.503")
    assert lines[-1].startswith("pairs simlex999.txt: Spearman 0.263")


# `embedding-index eval --json` of the default table, started once the table is ready (tests/early.py)
EVAL_JSON = Early(
    __name__,
    "eval_json_run",
    lambda _: [sys.executable, "-m", "index", "eval", "glove-6b-50d", "--data-dir", str(cache_dir()), "--json"],
    needs_glove=True,
    timeout=600,
)


@pytest.fixture
def eval_json_run(glove_data_dir: Path) -> Done:
    return EVAL_JSON.result()


@pytest.mark.slow
def test_cli_eval_json(eval_json_run: Done, google_report, pair_reports) -> None:
    done = eval_json_run
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["table"] == "glove-6b-50d" and report["restrict"] == 300_000
    analogies = report["analogies"]
    for key in ("accuracy", "correct", "total", "questions", "skipped"):
        assert analogies[key] == google_report[key]
    assert [s["correct"] for s in analogies["sections"]] == [s["correct"] for s in google_report["sections"]]
    assert [Path(p["file"]).name for p in report["pairs"]] == ["wordsim353.tsv", "simlex999.txt"]
    for got, want in zip(report["pairs"], pair_reports, strict=True):
        assert got["spearman"] == pytest.approx(want["spearman"], abs=1e-12)
        assert got["pearson"] == pytest.approx(want["pearson"], abs=1e-12)


def test_cli_eval_text_and_errors(small_data_dir: Path, tmp_path: Path) -> None:
    """The report and a refusal as ``python -m index eval`` prints them, each in a process of its own (started
    together); the other refusals of bad files and options through the same entry point in this process,
    while those run."""

    def start(*args: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "index", "eval", "small", "--data-dir", str(small_data_dir), *args]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)

    def run(*args: str) -> Result:
        return run_cli("eval", "small", "--data-dir", small_data_dir, *args)

    questions = subset(GOOGLE, tmp_path / "q.txt", 10)
    report = start("--analogies", str(questions), "--pairs", str(WORDSIM), "--method", "3cosmul")
    missing = start("--analogies", str(tmp_path / "nope.txt"))
    try:
        headless = tmp_path / "headless.txt"
        headless.write_text("athens greece berlin germany\n: capitals\n", encoding="utf-8")
        done = run("--analogies", str(headless))
        assert done.code == 1
        assert f"{headless}:1: question before the first ': section' line" in done.err

        binary = tmp_path / "latin1.txt"
        binary.write_bytes(b": s\nathens greece berlin germany\ncaf\xe9 a b c\n")
        done = run("--analogies", str(binary))
        assert done.code == 1 and f"{binary}:3: not UTF-8" in done.err

        unknown = tmp_path / "pairs.tsv"
        unknown.write_text("qqqzzz\txxyyzz\t1.0\n", encoding="utf-8")
        done = run("--pairs", str(unknown))
        assert done.code == 1 and "no word pair with both words in the first" in done.err

        few = tmp_path / "few.tsv"  # a correlation of 2 pairs has no p-value; scipy refuses 1
        few.write_text("the\tof\t5.0\nqqqzzz\tof\t1.0\nand\tto\t6.0\n", encoding="utf-8")
        done = run("--pairs", str(few), "--json")
        assert (done.code, done.out) == (1, "") and done.err.count("\n") == 1, done.err
        assert f"{few}: a correlation needs at least 3 word pairs with both words in the first" in done.err
        assert done.err.endswith("; found 2\n")

        flat = tmp_path / "flat.tsv"  # scores that do not vary correlate with nothing
        flat.write_text("the\tof\t5\nand\tto\t5\nin\ta\t5.0\n", encoding="utf-8")
        done = run("--pairs", str(flat), "--json")
        assert (done.code, done.out) == (1, "") and done.err.count("\n") == 1, done.err
        assert f"{flat}: all 3 known pairs have the score 5: no correlation to measure" in done.err

        assert run("--method", "3cosfoo").code != 0
    finally:
        report_out, report_err = report.communicate(timeout=300)
        _, missing_err = missing.communicate(timeout=300)
    assert report.returncode == 0, report_err
    assert "analogies q.txt (3cosmul): accuracy" in report_out
    assert "pairs wordsim353.tsv: Spearman" in report_out
    steps = ("analogies q.txt (3cosmul)", "word pairs")
    clock = re.compile(rf"embedding-index: (?:{'|'.join(map(re.escape, steps))}): \d+% \(.*\), \S+ (?:left|so far)")
    ended = [line.rsplit(" in ", 1)[0] for line in report_err.splitlines() if not clock.fullmatch(line)]
    assert ended == [  # each step's progress, on stderr (a busy machine's step lasts long enough for its clock too)
        f"embedding-index: {steps[0]}: done ({SMALL_ROWS:,} of {SMALL_ROWS:,} rows)",
        f"embedding-index: {steps[1]}: done (1 of 1 file)",
    ]
    assert missing.returncode == 1
    assert missing_err.strip().splitlines() == [f"embedding-index: error: {tmp_path / 'nope.txt'}: file not found"]


def test_cli_eval_of_a_documents_table_is_refused(tmp_path: Path) -> None:
    """A documents table's ids are no words: eval said every question skipped (exit 0) or no known word pair,
    blaming the pair file; it names the table's kind instead, whatever files are given."""
    documents = tmp_path / "docs.jsonl"
    rows = [{"id": word, "text": f"about {word}", "vector": [1.0, float(i), 0.5]} for i, word in enumerate(WORDS)]
    documents.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    data_dir = tmp_path / "data"
    assert run_cli("import", documents, "--name", "docs", "--data-dir", data_dir).code == 0
    questions = tmp_path / "q.txt"
    questions.write_text(": s\nman king woman queen\n", encoding="utf-8")
    for files in [["--analogies", questions], ["--pairs", WORDSIM], []]:
        done = run_cli("eval", "docs", "--data-dir", data_dir, *files)
        assert (done.code, done.out) == (1, ""), done.out
        assert (
            done.err == "embedding-index: error: table 'docs' is a documents table: eval is for word and "
            "model-token tables\n"
        ), done.err


WORDS = ["man", "king", "woman", "queen", "tiger", "cat", "car"]


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_analogies_show_progress_by_rows_searched(
    small: Table, method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analogy search (seconds on the default sets) advances its progress chunk of rows by chunk of rows; the
    ranks of ``--errors`` (a minute on the whole table) block of questions by block."""
    monkeypatch.setattr(progress.CONFIG, "interval", 0.0)  # a line at every step forward
    questions = subset(GOOGLE, tmp_path / "q.txt", 10)
    with progress_lines() as shown:
        report = evaluate_analogies(small, questions, method=method, errors=True)
    *lines, ranking = shown.getvalue().splitlines()  # then --errors ranks the expected words of the incorrect ones
    assert report["errors"] and ranking.startswith("embedding-index: ranking the expected words of the incorrect ")
    states = [line.split(f"analogies q.txt ({method}): ", 1)[1] for line in lines]
    counted = [int(state.split("(")[1].split(" of ")[0].replace(",", "")) for state in states[:-1]]
    assert len(counted) >= 1 and counted == sorted(set(counted)) and counted[-1] < small.rows, states
    assert states[-1].startswith(f"done ({small.rows:,} of {small.rows:,} rows)")


def test_errors_with_nothing_to_rank_show_no_step(small: Table, tmp_path: Path) -> None:
    """An incorrect answer whose expected word is one of a, b, c has no rank to compute: no step of 0 of 0 shown."""
    questions = tmp_path / "q.txt"
    questions.write_text(": same\nking man queen man\n", encoding="utf-8")
    with progress_lines() as shown:
        report = evaluate_analogies(small, questions, errors=True)
    assert [error["rank"] for error in report["errors"]] == [None]
    assert [line.split(": done")[0] for line in shown.getvalue().splitlines()] == [
        "embedding-index: analogies q.txt (3cosadd)"
    ]


# ---------------------------------------------------------------------------------- the batched exact search
def brute_force(table: Table, a: int, b: int, c: int, method: str, limit: int) -> np.ndarray:
    if method == "3cosadd":
        query = table.mean_query([b, c], [a])[0].astype(np.float64)
        return np.asarray(table.vectors[:limit], dtype=np.float64) @ query
    terms = np.asarray(table.vectors[[b, c, a]], dtype=np.float32)  # 3CosMul of every row, as gensim scores it
    shifted = ((1 + table.vectors @ terms.T) / 2).T
    return analogy.cosmul(shifted[:2], shifted[2:]).astype(np.float64)


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
@pytest.mark.parametrize("limit", [6, 200, 3_000, 20_000])
@pytest.mark.parametrize("chunks", ["default", "tiny"])
def test_batched_search_equals_brute_force(
    small: Table, method: str, limit: int, chunks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunks == "tiny":  # many chunks, seeds and pruning levels on a small table
        monkeypatch.setattr(analogy, "SEED_ROWS", 100)
        monkeypatch.setattr(analogy, "CHUNK_ROWS", 512)
        monkeypatch.setattr(analogy, "BOUND_CELLS", 1_000)
    rng = np.random.default_rng(limit)
    pool = min(limit, 2_000) if method == "3cosadd" else 2_000
    a, b, c = rng.integers(0, pool, size=(3, 60))
    c[:5] = a[:5]  # repeated inputs
    limit = limit if method == "3cosadd" else small.rows
    ids, scores = analogy_top(small, a, b, c, 8, method, limit)
    assert ids.shape == (60, min(8, limit))
    for i in range(60):
        full = brute_force(small, a[i], b[i], c[i], method, limit)
        want = np.argsort(-full, kind="stable")[: ids.shape[1]]
        np.testing.assert_allclose(scores[i], full[want], rtol=1e-5, atol=1e-6)
        for got, expected in zip(ids[i], want, strict=True):  # equal, or a float tie
            assert got == expected or abs(full[got] - full[expected]) < 1e-6


@pytest.mark.parametrize("method", ["3cosadd", "3cosmul"])
def test_a_limit_past_the_table_is_the_whole_table(small: Table, method: str) -> None:
    """As ``restrict`` in the evaluation: ``limit=300_000`` on a smaller table searches all of its rows."""
    a, b, c = np.array([[1, 7], [2, 8], [3, 9]])
    whole = analogy_top(small, a, b, c, 5, method, small.rows)
    past = analogy_top(small, a, b, c, 5, method, 300_000)
    np.testing.assert_array_equal(past[0], whole[0])
    np.testing.assert_array_equal(past[1], whole[1])


def test_unknown_method_refused(small: Table) -> None:
    from index.errors import InvalidQuery

    with pytest.raises(InvalidQuery):
        evaluate_analogies(small, GOOGLE, method="3cosfoo")


def test_the_documented_python_example_runs_as_written(
    glove_data_dir: Path, google_report: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/builder.md's Python example, run as written over ``data/glove-6b-50d``: the report the command prints,
    and its last line's value what its comment says."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "glove-6b-50d").symlink_to(glove_data_dir / "glove-6b-50d")
    monkeypatch.chdir(tmp_path)
    code = example("docs/builder.md", "evaluate")
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/builder.md:evaluate", "exec"), scope)
    timed = ("seconds",)
    assert {k: v for k, v in scope["report"].items() if k not in timed} == {
        k: v for k, v in google_report.items() if k not in timed
    }
    expression, comment = code.strip().splitlines()[-1].split("  # ")
    assert eval(expression, scope) == ast.literal_eval(comment.split(":")[0])
