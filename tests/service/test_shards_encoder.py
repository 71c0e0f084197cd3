"""The shards of a documents table imported with ``--encoder`` served alone: gensim's Lee stories without their
vectors, embedded at import by the 20,000-row GloVe table ``small`` and imported as ``--shards 2`` into a data
directory that holds ``small`` too. Each shard is a real server over the sharded table's directory
(``--tables shard-00N``), which loads the encoder from beside it (the data directory's parent) to embed its query
texts; a real front (``EMBEDDING_SHARDS``) over them answers text and hybrid searches as a real server of the same
table imported whole does (hits and scores), before and after a document written by its text alone. A shard whose
encoder is beside it nowhere is refused, saying why; a reload reuses the unchanged encoder, and refuses the shard
for an encoder rebuilt from other vectors, or damaged, since; a watched shard server sees such changes beside it with
no signal.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from index.build.sources import RawTable
from index.build.writer import build_table
from index.engine.door import Table
from index.store import artifact
from service import registry, watch
from service.errors import ApiError
from service.registry import Registry
from tests.cli import run_cli
from tests.conftest import small_raw
from tests.index.build.test_embed_documents import without_vectors
from tests.lee import Lee, write_jsonl
from tests.service import real_server
from tests.service.real_server import Server

SHARDS = 2
TEXTS = ("bushfires burn homes near Sydney", "Taliban fighters in Afghanistan", "the government said on Monday")
BESIDE = "table 'small' loaded from"  # the shard server's log line for the encoder it loaded from the parent
WRITER = "shards-write-key-0123456789"
# every server's: the front forwards the client's key to its shards; reload takes the admin key, writes the writer's
KEYS = {"EMBEDDING_API_KEY": "shards-admin-key-0123456789", "EMBEDDING_WRITE_KEYS": WRITER}
HTTP = httpx.Client(headers={"x-api-key": KEYS["EMBEDDING_API_KEY"]}, limits=httpx.Limits(max_keepalive_connections=0))


def imported(source: Path, data: Path, *extra: object) -> None:
    """``lee`` in ``data``, its texts embedded by ``small`` (there too)."""
    args = ("import", source, "--format", "documents", "--name", "lee", "--encoder", "small", "--data-dir", data)
    done = run_cli(*args, *extra)
    assert done.code == 0, done.err


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path, lee_docs: Lee) -> Path:
    """``whole/`` (``small`` and ``lee``), ``sharded/`` (``small`` and ``lee`` as shards), ``alone/`` (the
    sharded ``lee`` with no ``small`` beside it), ``front/`` (empty)."""
    root = tmp_path_factory.mktemp("shards-encoder")
    source = write_jsonl(root / "lee-text.jsonl", without_vectors(lee_docs))
    for where, extra in (("whole", ()), ("sharded", ("--shards", SHARDS))):
        shutil.copytree(small_data_dir / "small", root / where / "small")
        imported(source, root / where, *extra)
    shutil.copytree(root / "sharded" / "lee", root / "alone" / "lee")
    (root / "front").mkdir()
    return root


@pytest.fixture(scope="module")
def servers(root: Path) -> Iterator[dict[str, Any]]:
    with real_server.whole_and_front(root, SHARDS, KEYS, KEYS) as (whole, shards, front):
        yield {"whole": whole, "shards": shards, "front": front}


def search(server: Server, body: dict[str, Any], table: str = "lee") -> tuple[int, dict[str, Any]]:
    answer = HTTP.post(f"{server.base}/v1/tables/{table}/search", json=body, timeout=30)
    return answer.status_code, answer.json()


def test_text_and_hybrid_searches_through_the_front_answer_as_the_whole_table(servers: dict[str, Any]) -> None:
    for shard in servers["shards"]:
        assert HTTP.get(f"{shard.base}/readyz").status_code == 200, shard.log()[-2000:]
        assert BESIDE in shard.log()
    for text in TEXTS:
        for body in (
            {"text": text, "k": 10},
            {"text": text, "k": 5, "offset": 3, "filter": {"long": True}},
            {"text": text, "mode": "hybrid", "k": 10},
            {"text": text, "mode": "hybrid", "k": 8, "rrf_k": 10, "weights": {"vector": 2, "keyword": 1}},
        ):
            status, got = search(servers["front"], body)
            expected_status, expected = search(servers["whole"], body)
            assert status == expected_status == 200, (body, got)
            assert got["hits"] and got == expected, body
            if body.get("mode") == "hybrid":  # both lists fused: the shards embedded the text
                assert any(set(hit["ranks"]) == {"vector", "keyword"} for hit in got["hits"]), body


def test_the_encoder_is_not_served_by_the_shard(servers: dict[str, Any]) -> None:
    """It embeds the shard's texts; the shard server's tables stay the ones it was asked for."""
    shard = servers["shards"][0]
    ready = HTTP.get(f"{shard.base}/readyz").json()
    assert ready["loaded"] == ["shard-000"], ready
    status, got = search(shard, {"vector": [0.1] * 50, "k": 3}, table="small")
    assert status == 404 and got["error"]["code"] == "unknown_table", got


def reload(server: Server) -> dict[str, Any]:
    answer = HTTP.post(f"{server.base}/v1/admin/reload", timeout=120)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_reload_reuses_the_encoder_and_checks_a_changed_one(
    root: Path, servers: dict[str, Any], glove_raw: RawTable
) -> None:
    shard = servers["shards"][1]
    again = reload(shard)
    assert again["unchanged"] == ["shard-001"] and again["ready"], again
    assert shard.log().count(BESIDE) == 1  # reused, not loaded again
    encoder, kept = root / "sharded" / "small", root / "small-kept"
    encoder.rename(kept)
    try:
        # rebuilt from other vectors (each word given its neighbour's row): not those that embedded the documents
        raw = small_raw(glove_raw)
        other = RawTable(tokens=raw.tokens, matrix=np.roll(raw.matrix, 1, axis=0))
        build_table(other, data_dir=encoder.parent, name="small", source={})
        report = reload(shard)
        assert report["missing"] == ["shard-001"] and not report["ready"], report
        status, got = search(shard, {"text": TEXTS[0], "k": 3}, table="shard-001")
        assert status == 503 and got["error"]["code"] == "not_ready", got
        assert "with other vectors than table 'small' holds now" in got["error"]["message"], got
        # damaged: refused at verification, the shard with it
        shutil.rmtree(encoder)
        shutil.copytree(kept, encoder)
        vectors = encoder / "vectors.npy"
        vectors.write_bytes(vectors.read_bytes()[:-4] + b"\0\0\0\1")
        report = reload(shard)
        assert report["missing"] == ["shard-001"] and not report["ready"], report
        status, got = search(shard, {"text": TEXTS[0], "k": 3}, table="shard-001")
        assert status == 503 and got["error"]["code"] == "not_ready", got
        assert "'small', beside this sharded table's directory, whose files were refused" in got["error"]["message"]
    finally:
        shutil.rmtree(encoder, ignore_errors=True)
        kept.rename(encoder)
    report = reload(shard)
    assert report["loaded"] == ["shard-001"] and report["ready"], report
    status, got = search(shard, {"text": TEXTS[0], "k": 3}, table="shard-001")
    assert status == 200 and len(got["hits"]) == 3, got


def test_a_shard_whose_encoder_is_not_beside_it_is_refused(root: Path) -> None:
    with real_server.running(root / "alone" / "lee", root / "alone.log", "--tables", "shard-000", env=KEYS) as server:
        ready = HTTP.get(f"{server.base}/readyz")
        assert ready.status_code == 503, ready.text
        status, got = search(server, {"text": TEXTS[0], "k": 3}, table="shard-000")
        assert status == 503 and got["error"]["code"] == "not_ready", got
        assert got["error"]["message"] == (
            "table 'shard-000' is not loaded: its documents were embedded with table 'small', which is neither in "
            "this sharded table's directory nor beside it (in its parent); keep the table and its encoder in one "
            "data directory, as the import wrote them (it embeds the query texts)"
        )
        assert "table 'shard-000' not loaded, skipped" in server.log()


def test_a_write_of_text_through_the_front_is_embedded_by_its_shard(servers: dict[str, Any]) -> None:
    """A document given by its text alone: its shard embeds it with the encoder beside the table, as the whole
    table's server embeds it."""
    text = "kangaroos bounded across the outback road near Canberra at dawn"
    documents = [{"id": "lee-written-0", "text": text, "fields": {"year": 2001}}]
    for server in (servers["front"], servers["whole"]):
        url, headers = f"{server.base}/v1/tables/lee/documents", {"x-api-key": WRITER}
        written = HTTP.post(url, json={"documents": documents}, headers=headers, timeout=30)
        assert written.status_code == 200 and written.json()["upserted"] == 1, written.text
    for body in ({"text": text, "k": 5}, {"text": text, "mode": "hybrid", "k": 5}):
        status, got = search(servers["front"], body)
        expected_status, expected = search(servers["whole"], body)
        assert status == expected_status == 200 and got == expected, body
        assert got["hits"][0]["id"] == "lee-written-0", got


def test_a_watched_shard_sees_its_encoder_change_beside_it(root: Path, glove_raw: RawTable, tmp_path: Path) -> None:
    """With the data directory watched and no signal: the encoder beside the sharded table moved away, rebuilt
    from other vectors, published damaged, repaired in place and put back is each seen within a few intervals."""
    seconds = 0.2
    shutil.copytree(root / "sharded", tmp_path / "data")  # ``lee`` as shards and ``small`` beside it
    encoder, kept = tmp_path / "data" / "small", tmp_path / "small-kept"
    env = {"EMBEDDING_WATCH_SECONDS": str(seconds), **KEYS}
    with real_server.running(encoder.parent / "lee", tmp_path / "shard.log", "--tables", "shard-001", env=env) as shard:

        def refused_for(reason: str) -> bool:
            status, got = search(shard, {"text": TEXTS[0], "k": 3}, table="shard-001")
            return status == 503 and reason in got["error"]["message"]

        def served() -> bool:
            return search(shard, {"text": TEXTS[0], "k": 3}, table="shard-001")[0] == 200

        def seen(condition: Callable[[], bool], what: str) -> None:
            real_server.wait_for(condition, seconds=20 * seconds + 15, what=what)  # a few intervals and a reload

        assert served(), shard.log()[-2000:]
        encoder.rename(kept)
        seen(lambda: refused_for("which is neither in this sharded table's directory nor beside it"), "gone")
        raw = small_raw(glove_raw)  # each word given its neighbour's row: not the vectors that embedded the texts
        other = RawTable(tokens=raw.tokens, matrix=np.roll(raw.matrix, 1, axis=0))
        build_table(other, data_dir=encoder.parent, name="small", source={})
        seen(lambda: refused_for("with other vectors than table 'small' holds now"), "the rebuilt encoder refused")
        # damaged, published as a build publishes (renamed into place): refused at verification
        shutil.copytree(kept, tmp_path / "damaged")
        vectors = tmp_path / "damaged" / "vectors.npy"
        good = vectors.read_bytes()
        vectors.write_bytes(good[:-4] + b"\0\0\0\1")
        artifact.publish(tmp_path / "damaged", encoder)
        seen(lambda: refused_for("beside this sharded table's directory, whose files were refused"), "damaged")
        (encoder / "vectors.npy").write_bytes(good)  # repaired in place: its manifest unchanged, its files seen
        seen(served, "the repaired encoder and its shard served")
        shutil.rmtree(encoder)
        seen(lambda: refused_for("which is neither in this sharded table's directory nor beside it"), "gone")
        kept.rename(encoder)
        seen(served, "the encoder put back and its shard served")
        log = shard.log()
        assert "table 'small' beside the data directory changed: reloading them" in log, log[-3000:]
        assert "SIGHUP" not in log and "/v1/admin/reload" not in log
        reloads = log.count("reloading them")
        time.sleep(5 * seconds)  # nothing changes: no more reloads
        assert shard.log().count("reloading them") == reloads


def test_the_watcher_takes_no_manifest_file_beside_for_a_change(root: Path, tmp_path: Path) -> None:
    """An encoder beside whose manifest.json is no file (a directory) is not there for the registry: the watcher
    sees no change at every look (which would reload in a loop), and sees its manifest once it is put back."""
    shutil.copytree(root / "sharded", tmp_path / "data")
    manifest = tmp_path / "data" / "small" / artifact.MANIFEST
    kept = tmp_path / "manifest-kept.json"
    manifest.rename(kept)
    manifest.mkdir()
    loaded = Registry.load(tmp_path / "data" / "lee", ["shard-001"])
    assert loaded.beside_missing == ["small"] and not loaded.ready, loaded.failed
    assert watch.encoders_now(loaded) == watch.encoders_held(loaded) == (("small", None),)
    manifest.rmdir()
    kept.rename(manifest)
    assert watch.encoders_now(loaded) != watch.encoders_held(loaded)  # put back: seen, and loaded
    assert Registry.load(tmp_path / "data" / "lee", ["shard-001"]).ready


@pytest.mark.parametrize("relative", [".", "shard-000/.."])
def test_a_relative_data_directory_finds_the_encoder_beside_the_sharded_table(
    root: Path, relative: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--data-dir .`` in the sharded table's directory (or a path through ``..``): its parent is the directory
    above, where the import wrote the encoder."""
    monkeypatch.chdir(root / "sharded" / "lee")
    registry = Registry.load(Path(relative), ["shard-000"])
    assert registry.ready, registry.failed
    shard, encoder = registry.tables["shard-000"], Table.load(root / "sharded" / "small")
    assert registry.encoder_of(shard) is registry.beside["small"]
    assert registry.beside["small"].vectors_sha256 == encoder.vectors_sha256


def test_an_encoder_named_as_a_shard_is_the_one_beside_the_table(
    root: Path, lee_docs: Lee, glove_raw: RawTable
) -> None:
    """The shards are the documents table, never its encoder: ``shard-000`` beside the table embeds the texts of
    the shard of that name too."""
    data = root / "shard-named"
    build_table(small_raw(glove_raw), data_dir=data, name="shard-000", source={})
    source = write_jsonl(root / "lee-shard-named.jsonl", without_vectors(lee_docs))
    done = run_cli(
        "import", source, "--format", "documents", "--name", "lee", "--encoder", "shard-000", "--shards", SHARDS,
        "--data-dir", data,
    )  # fmt: skip
    assert done.code == 0, done.err
    registry = Registry.load(data / "lee")
    assert registry.ready and sorted(registry.tables) == ["shard-000", "shard-001"], registry.failed
    for shard in registry.tables.values():
        assert registry.encoder_of(shard) is registry.beside["shard-000"]


def test_the_encoder_asked_for_by_name_is_told_to_be_left_out(root: Path) -> None:
    """``--tables shard-000,small`` over the sharded table's directory: the shard is served with ``small`` from
    beside it; ``small`` is not served there, and a request of it is told why and what to do."""
    registry = Registry.load(root / "sharded" / "lee", ["shard-000", "small"])
    assert sorted(registry.tables) == ["shard-000"] and not registry.ready
    assert registry.encoder_of(registry.tables["shard-000"]) is registry.beside["small"]
    with pytest.raises(ApiError) as refused:
        registry.get("small")
    assert refused.value.code == "not_ready"
    assert refused.value.message == (
        "table 'small' is not loaded: it is beside this sharded table's directory (in its parent), not in it: a "
        "shard whose documents it embedded loads it from there itself, and it is not served under routes of its "
        "own; leave it out of the tables asked for (--tables, EMBEDDING_TABLES)"
    )


@pytest.mark.parametrize("served", ["shard-000", "small"])
@pytest.mark.parametrize("changes", [1, registry.LOAD_ATTEMPTS])
def test_an_encoder_or_table_changed_while_it_is_read_is_read_again(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, served: str, changes: int
) -> None:
    """``small``'s files change under each of its first ``changes`` reads: read again, the version after the change
    served; refused once every read saw a change, and loaded by the next reload. ``small`` beside the sharded table
    (its shard's encoder), or asked for itself in a data directory."""
    shutil.copytree(root / "sharded", tmp_path / "data")
    data = tmp_path / "data" / "lee" if served == "shard-000" else tmp_path / "data"
    encoder, read, reads = tmp_path / "data" / "small", registry._read, []

    def changing(directory: Path, checksums: bool) -> tuple[Table | None, str, str]:
        got = read(directory, checksums)
        if directory.name == "small":
            reads.append(directory)
            if len(reads) <= changes:  # a file rewritten in place: its mtime is new
                os.utime(encoder / artifact.MANIFEST, ns=(len(reads) * 10**9,) * 2)
        return got

    monkeypatch.setattr(registry, "_read", changing)
    loaded = Registry.load(data, [served])
    assert len(reads) == min(changes + 1, registry.LOAD_ATTEMPTS)
    if changes < registry.LOAD_ATTEMPTS:
        assert loaded.ready, loaded.failed
        versions = loaded.beside_versions if served == "shard-000" else loaded.versions
        assert versions["small"] == registry.files_of(registry.fingerprint(encoder) or ())
    else:
        assert not loaded.ready and not loaded.tables
        why = "its files changed while they were being loaded"
        expected = why if served == "small" else "'small', beside this sharded table's directory, whose files"
        assert expected in loaded.failed[served], loaded.failed
        if served == "shard-000":
            assert loaded.beside_refused["small"][1] == why
        monkeypatch.undo()  # the files as they settled: loaded at the next reload, not refused with the change
        again, report = loaded.reload()
        assert again.ready and report["loaded"] == [served], (report, again.failed)


@pytest.mark.parametrize("manifest", ["[]", "{", '{"format_version": 0}'])
def test_a_data_directory_with_a_stray_manifest_serves_its_tables(
    small_data_dir: Path, tmp_path: Path, manifest: str
) -> None:
    """A ``manifest.json`` in the data directory that is no table's (whether it is a sharded table's is asked at
    each reload) is not one: the tables in the directory are served, reload after reload."""
    data = tmp_path / "data"
    shutil.copytree(small_data_dir / "small", data / "small")
    (data / artifact.MANIFEST).write_text(manifest)
    loaded = Registry.load(data)
    assert loaded.ready and list(loaded.tables) == ["small"] and not loaded.sharded, loaded.failed
    again, report = loaded.reload()
    assert again.ready and report["unchanged"] == ["small"], report


def test_a_hybrid_text_falls_back_through_the_front_as_on_the_whole_table(servers: dict[str, Any]) -> None:
    """Mode hybrid's two fallbacks (docs/documents.md), taken by the front by the whole table's rules
    (``door.keyword_fallback``, ``door.vector_fallback``): a text none of whose words the encoder knows is searched
    by keyword, and one whose words no document holds (stop words, or words of no document) by its vector, beside
    a vector or document, a filter or a diversity too; each answer says so in ``fallback``, as the whole table's
    does. ``min_score`` keeps mode hybrid, and its refusal (a diversity at the front needs a vector or document). The
    front answered the first 422, naming a shard, and the second without the fallback."""
    vector = HTTP.get(f"{servers['whole'].base}/v1/tables/lee/documents/lee-201", params={"vector": "true"}).json()
    taken: dict[str | None, int] = {}
    for given in (
        {},
        {"id": "lee-200"},
        {"vector": vector["vector"]},
        {"positive": ["lee-200"], "negative": ["lee-002"]},
    ):
        for text in ("escude", "the", "zzqxv qqqzx", "Taliban"):
            for extra in ({}, {"filter": {"long": True}}, {"min_score": 0.01}, {"diversity": 0.5}):
                if "diversity" in extra and not given:  # the front re-ranks by the query's vector: give it one
                    continue
                body = {**given, "text": text, "mode": "hybrid", "k": 3, "fields": [], **extra}
                status, got = search(servers["front"], body)
                expected_status, expected = search(servers["whole"], body)
                assert status == expected_status and got == expected, (body, got, expected)
                fallback = got.get("fallback", {}).get("mode") if status == 200 else "refused"
                taken[fallback] = taken.get(fallback, 0) + 1
    assert set(taken) == {None, "keyword", "vector", "refused"}, taken  # each case met
    status, refused = search(servers["front"], {"text": "escude", "mode": "hybrid", "k": 3, "min_score": 0.01})
    assert status == 422 and "'lee'" in refused["error"]["message"], refused
    _, answer = search(servers["front"], {"text": "escude", "mode": "hybrid", "k": 3})
    assert answer["fallback"]["mode"] == "keyword" and answer["hits"][0]["id"] == "lee-283", answer
    _, answer = search(servers["front"], {"text": "the", "mode": "hybrid", "k": 3})
    assert answer["fallback"]["mode"] == "vector" and "ranks" not in answer["hits"][0], answer
