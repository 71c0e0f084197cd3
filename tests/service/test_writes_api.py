"""Writes over HTTP on a real ``embedding-serve`` process with two workers: gensim's Lee corpus imported as a
documents table embedded by ``small`` (GloVe's first rows), then documents added, replaced and deleted.

Each answer carries the table's sequence number; a write is read back by the next request, whichever worker
answers it; a restart replays the log; a damaged log tail is cut with a warning, a damaged middle refuses that
table only. Writes need a write key: without one configured the routes answer 403 saying how to enable them.
Other writes to a table are answered while an upsert's texts are embedded (an in-process app, its encoder held).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from index.engine.delta import Delta
from index.engine.encode import encoder_for
from index.engine.table import Table
from index.errors import InvalidQuery
from index.store import writelog
from service import writes
from service.schemas.writes import WriteDocument
from service_client import ApiError, Client
from tests.cli import run_cli
from tests.conftest import link_table
from tests.index.build.test_embed_documents import import_texts
from tests.lee import Lee, write_jsonl
from tests.logs import recovered
from tests.opposite import build_opposite
from tests.service import real_server
from tests.service.conftest import client_for

KEY = "writer-" + "k" * 24
HEADERS = {"X-API-Key": KEY}
ENV = {"EMBEDDING_WRITE_KEYS": f"other-key-1234,{KEY}", "EMBEDDING_MAX_BATCH": "64"}
NOTE = "The committee met on Tuesday to discuss the new budget for schools and hospitals."


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, small_data_dir: Path, lee_docs: Lee) -> Path:
    data = tmp_path_factory.mktemp("writes-data")
    import_texts(data, small_data_dir, lee_docs, data.parent / "lee-writes.jsonl")
    numbers = [{"id": i * 10, "vector": lee_docs.vectors[i].tolist()} for i in range(12)]  # integer ids, no text
    path = write_jsonl(data.parent / "numbers.jsonl", numbers)
    assert run_cli("import", path, "--format", "documents", "--name", "numbers", "--data-dir", data).code == 0
    return data


@pytest.fixture(scope="module")
def server(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_server.Server]:
    log = tmp_path_factory.mktemp("writes-serve") / "serve.log"
    with real_server.running(data_dir, log, "--workers", "2", env=ENV) as server:
        yield server


def post(server: real_server.Server, path: str, body: Any, headers: dict[str, str] = HEADERS) -> httpx.Response:
    return real_server.HTTP.post(f"{server.base}/v1/tables/lee{path}", json=body, headers=headers, timeout=30)


def get(server: real_server.Server, document: str, **params: Any) -> httpx.Response:
    return real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/{document}", params=params, timeout=30)


def every_worker(server: real_server.Server, document: str, **params: Any) -> list[httpx.Response]:
    """The same GET a few times over new connections, so that both workers answer it."""
    return [get(server, document, **params) for _ in range(8)]


def test_an_upsert_with_a_vector_is_read_back_by_every_worker(server: real_server.Server, lee_docs: Lee) -> None:
    vector = (lee_docs.vectors[3] * 2.5).tolist()
    fields = {"year": 2024, "tags": ["budget", "schools"], "lang": "en", "published": "2024-05-01T09:30:00+02:00"}
    answer = post(
        server, "/documents", {"documents": [{"id": "note-1", "text": NOTE, "vector": vector, "fields": fields}]}
    )
    assert answer.status_code == 200, answer.text
    first = answer.json()
    assert first["table"] == "lee" and first["upserted"] == 1 and first["sequence"] >= 1
    for response in every_worker(server, "note-1", vector="true"):
        assert response.status_code == 200
        shown = response.json()
        assert shown["text"] == NOTE
        assert shown["fields"] == {**fields, "published": "2024-05-01T07:30:00Z", "known": None, "long": None}
        assert shown["vector"] == pytest.approx(vector, rel=1e-6)
    again = post(server, "/documents", {"documents": [{"id": "note-2", "vector": vector}]}).json()
    assert again["sequence"] == first["sequence"] + 1


def test_a_document_without_a_vector_is_embedded_by_the_encoder(server: real_server.Server, data_dir: Path) -> None:
    answer = post(server, "/documents", {"documents": [{"id": "note-text", "text": NOTE}]})
    assert answer.status_code == 200, answer.text
    expected = encoder_for(Table.load(data_dir / "small")).encode([NOTE]).vectors[0]
    for response in every_worker(server, "note-text", vector="true"):
        assert np.array_equal(np.asarray(response.json()["vector"], dtype=np.float32), expected)


def test_replacing_and_deleting_documents_of_the_version(server: real_server.Server, lee_docs: Lee) -> None:
    target = lee_docs.ids[10]
    assert get(server, target).json()["text"] == lee_docs.texts[10]
    replaced = post(server, "/documents", {"documents": [{"id": target, "text": NOTE, "fields": {"year": 1}}]})
    assert replaced.status_code == 200, replaced.text
    for response in every_worker(server, target):
        assert response.json()["text"] == NOTE and response.json()["fields"]["year"] == 1
    gone = real_server.HTTP.delete(f"{server.base}/v1/tables/lee/documents/{lee_docs.ids[11]}", headers=HEADERS)
    assert gone.status_code == 200 and gone.json()["deleted"] == 1
    for response in every_worker(server, lee_docs.ids[11]):
        assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_document"
    twice = real_server.HTTP.delete(f"{server.base}/v1/tables/lee/documents/{lee_docs.ids[11]}", headers=HEADERS)
    assert twice.json() == {"table": "lee", "sequence": gone.json()["sequence"], "deleted": 0}


def test_ids_with_slashes_and_deletes_by_ids_and_by_filter(server: real_server.Server, lee_docs: Lee) -> None:
    docs = [{"id": f"notes/2024/{i}", "text": NOTE, "fields": {"year": 1985}} for i in range(3)]
    assert post(server, "/documents", {"documents": docs}).json()["upserted"] == 3
    assert get(server, "notes/2024/1").json()["id"] == "notes/2024/1"
    one = real_server.HTTP.delete(f"{server.base}/v1/tables/lee/documents/notes/2024/0", headers=HEADERS)
    assert one.json()["deleted"] == 1 and get(server, "notes/2024/0").status_code == 404
    # The ids not there (one deleted, one never written) are not counted.
    by_ids = post(server, "/documents/delete", {"ids": ["notes/2024/0", "notes/2024/1", "nowhere", lee_docs.ids[0]]})
    assert by_ids.status_code == 200 and by_ids.json()["deleted"] == 2
    assert get(server, lee_docs.ids[0]).status_code == 404
    # 1991 documents of the version, and the written 1985 one, by the search filter language.
    year_1991 = {i for i, y in enumerate(lee_docs.fields["year"]) if y == 1991} - {0, 10, 11}
    spec = {"or": [{"year": 1991}, {"year": {"lt": 1986, "gt": 1984}}]}
    by_filter = post(server, "/documents/delete", {"filter": spec})
    assert by_filter.status_code == 200, by_filter.text
    assert by_filter.json()["deleted"] == len(year_1991) + 1
    assert get(server, "notes/2024/2").status_code == 404
    assert all(get(server, lee_docs.ids[i]).status_code == 404 for i in sorted(year_1991)[:5])
    assert post(server, "/documents/delete", {"filter": spec}).json()["deleted"] == 0


def test_ids_are_looked_up_as_the_versions_are(server: real_server.Server, lee_docs: Lee) -> None:
    """An integer id beyond 64 bits is no document of an integer-id table (its writes are refused, as it could never
    be stored); a string id is found by an integer's digits, written or of the version, as reads find it."""
    numbers = f"{server.base}/v1/tables/numbers"
    vector = lee_docs.vectors[20].tolist()
    for ident in ("99999999999999999999", "-9223372036854775809", 2**63 - 1):
        answer = real_server.HTTP.post(
            f"{numbers}/documents", json={"documents": [{"id": ident, "vector": vector}]}, headers=HEADERS
        )
        if ident == 2**63 - 1:
            assert answer.status_code == 200, answer.text
            continue
        assert answer.status_code == 422, answer.text
        assert "the ids of table 'numbers' are integers of 64 bits" in answer.json()["error"]["message"]
    gone = real_server.HTTP.post(f"{numbers}/documents/delete", json={"ids": ["99999999999999999999"]}, headers=HEADERS)
    assert gone.status_code == 200 and gone.json()["deleted"] == 0
    found = real_server.HTTP.post(f"{numbers}/search", json={"vector": vector, "k": 2})
    assert found.status_code == 200 and found.json()["hits"][0]["id"] == 2**63 - 1
    assert post(server, "/documents", {"documents": [{"id": "5", "text": NOTE}]}).status_code == 200
    like = post(server, "/search", {"id": 5, "k": 1})
    assert like.status_code == 200, like.text
    assert post(server, "/documents/delete", {"ids": [5]}).json()["deleted"] == 1
    assert get(server, "5").status_code == 404


def test_searches_and_deletes_by_the_documents_ids(server: real_server.Server, lee_docs: Lee) -> None:
    """A filter on ids passes written documents and the version's alike, ids read as the table reads them ("030"
    is 30 in an integer-id table, of no fields), and an id deleted or never there passes nothing."""
    numbers = f"{server.base}/v1/tables/numbers"
    documents = [{"id": ident, "vector": lee_docs.vectors[40 + ident].tolist()} for ident in (5, 7)]
    written = real_server.HTTP.post(f"{numbers}/documents", json={"documents": documents}, headers=HEADERS)
    assert written.status_code == 200, written.text

    def among(spec: dict[str, Any]) -> tuple[set[int], int]:
        body = {"vector": lee_docs.vectors[41].tolist(), "k": 20, "filter": spec}
        answer = real_server.HTTP.post(f"{numbers}/search", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        return {hit["id"] for hit in answer.json()["hits"]}, answer.json()["passing"]

    assert among({"id": {"in": ["030", 5, 7, 999]}}) == ({30, 5, 7}, 3)
    gone = real_server.HTTP.post(
        f"{numbers}/documents/delete", json={"filter": {"id": {"in": ["030", 5, 6]}}}, headers=HEADERS
    )
    assert gone.status_code == 200 and gone.json()["deleted"] == 2
    assert among({"id": {"in": ["030", 5, 7, 999]}}) == ({7}, 1)
    others, _ = among({"id": {"ne": 7}, "not": {"id": 0}})
    assert {10, 110} <= others and not others & {0, 5, 7, 30}


def read_many(server: real_server.Server, table: str, ids: list[Any], **options: Any) -> httpx.Response:
    body = {"ids": ids, **options}
    return real_server.HTTP.post(f"{server.base}/v1/tables/{table}/documents/get", json=body, timeout=30)


def read_one_by_one(server: real_server.Server, table: str, ids: list[Any], **options: Any) -> dict[str, Any]:
    """What ``GET .../documents/{id}`` answers for each of ``ids``: the documents found and the ids of the 404s."""
    params = {k: ",".join(v) if isinstance(v, list) else str(v).lower() for k, v in options.items()}
    found: dict[str, Any] = {"documents": [], "missing": []}
    for ident in ids:
        answer = real_server.HTTP.get(f"{server.base}/v1/tables/{table}/documents/{ident}", params=params, timeout=30)
        if answer.status_code == 404:
            assert answer.json()["error"]["code"] == "unknown_document", answer.text
            found["missing"].append(ident)
        else:
            assert answer.status_code == 200, answer.text
            found["documents"].append(answer.json())
    return found


def test_many_documents_at_once_are_what_reads_one_by_one_give(server: real_server.Server, lee_docs: Lee) -> None:
    """``POST .../documents/get`` after writes: written, replaced, deleted (written or of the version), never
    there, an id asked twice; integer ids read as the table reads them ("0007" is 7); each option as GET's."""
    assert post(server, "/documents", {"documents": [{"id": "get", "text": NOTE}]}).status_code == 200
    assert get(server, "get").json()["text"] == NOTE  # the document "get", not the route of many
    ids = ["note-1", lee_docs.ids[10], lee_docs.ids[11], "nowhere", lee_docs.ids[42], "notes/2024/0", "notes/2024/1"]
    ids += ["get", lee_docs.ids[42], "note-text", lee_docs.ids[0], 5]
    options: list[dict[str, Any]] = [{}, {"vector": True}, {"vector": True, "normalized": True}]
    for option in [*options, {"fields": ["tags", "year", "published"]}]:
        answer = read_many(server, "lee", ids, **option)
        assert answer.status_code == 200, answer.text
        assert answer.json() == read_one_by_one(server, "lee", ids, **option)
    numbers = ["0007", 7, 5, "030", 10, "10", 2**63 - 1, "99999999999999999999", "ten", 110]
    for option in options:
        answer = read_many(server, "numbers", numbers, **option)
        assert answer.status_code == 200, answer.text
        assert answer.json() == read_one_by_one(server, "numbers", numbers, **option)
    shown = read_many(server, "numbers", numbers).json()
    assert [d["id"] for d in shown["documents"]] == [7, 7, 10, 10, 2**63 - 1, 110]
    assert shown["missing"] == [5, "030", "99999999999999999999", "ten"]


def test_many_documents_at_once_refuse_as_a_batch_does(server: real_server.Server) -> None:
    """At most max_batch ids (64 here), at least one; a field the table does not have, as GET refuses it."""
    many = read_many(server, "lee", [f"n{i}" for i in range(65)])
    assert many.status_code == 422 and "at most 64 items (the server's max_batch)" in many.text
    assert read_many(server, "lee", []).status_code == 422
    assert read_many(server, "lee", [True]).status_code == 422
    bad = read_many(server, "lee", ["nowhere"], fields=["nope"])
    one = get(server, "lee-042", fields="nope")
    assert bad.status_code == one.status_code and 400 <= bad.status_code < 500, bad.text
    assert bad.json()["error"] == one.json()["error"]


def test_written_timestamps_read_as_imported_ones(server: real_server.Server, lee_docs: Lee) -> None:
    """A written timestamp shows as the version's do (fractions of a second only as far as they go), in its
    document, in search hits and in the fields' range."""
    vector = lee_docs.vectors[30].tolist()
    document = {"id": "stamp", "vector": vector, "fields": {"published": "2099-06-01T12:00:00.5+02:00"}}
    assert post(server, "/documents", {"documents": [document]}).status_code == 200
    assert get(server, "stamp").json()["fields"]["published"] == "2099-06-01T10:00:00.5Z"
    hit = post(server, "/search", {"vector": vector, "k": 1, "filter": {"published": {"gt": "2099-01-01"}}})
    assert hit.json()["hits"][0]["fields"]["published"] == "2099-06-01T10:00:00.5Z"
    fields = real_server.HTTP.get(f"{server.base}/v1/tables/lee/fields").json()["fields"]
    assert fields["published"]["max"] == "2099-06-01T10:00:00.5Z"


def test_a_whole_float_is_an_integer_fields_value(server: real_server.Server) -> None:
    """2000.0 (what many JSON encoders write for a whole float) is the integer 2000, as in filters."""
    document = {"id": "whole", "text": NOTE, "fields": {"year": 2000.0}}
    assert post(server, "/documents", {"documents": [document]}).status_code == 200
    year = get(server, "whole").json()["fields"]["year"]
    assert year == 2000 and isinstance(year, int)
    found = post(server, "/search", {"text": NOTE, "k": 5, "filter": {"year": 2000.0}})
    assert "whole" in [hit["id"] for hit in found.json()["hits"]], found.text


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({"id": "bad", "text": NOTE, "fields": {"colour": "red"}}, ["documents[1] (id 'bad')", "no field 'colour'"]),
        # a table's field given beside id and text, not in "fields"
        (
            {"id": "bad", "text": NOTE, "year": 1999},
            [
                "documents.1.year: not a field of a document (id, text, vector, fields): ",
                'the table\'s fields go in its "fields"',
            ],
        ),
        ({"id": "bad", "text": NOTE, "fields": {"year": "1999"}}, ["documents[1] (id 'bad')", "'year' is an integer"]),
        ({"id": "bad", "text": NOTE, "fields": {"year": 1999.5}}, ["(id 'bad'): field 'year' is an integer", "1999.5"]),
        ({"id": "bad", "text": NOTE, "fields": {"tags": [1, 2]}}, ["field 'tags' is a string_list field"]),
        ({"id": "bad", "text": NOTE, "fields": {"published": "tuesday"}}, ["field 'published' is a timestamp"]),
        ({"id": "bad", "vector": [0.5]}, ["a vector of 1 value; the table's have 50"]),
        ({"id": "bad", "vector": [0.0] * 50}, ["all zeros"]),
        ({"id": "bad"}, ["give its vector, or its text"]),
        ({"id": "bad", "text": "zzqxv qqqzx"}, ["its text 'zzqxv qqqzx': no word of it is known to 'small'"]),
        ({"id": 7, "text": NOTE}, ["the ids of table 'lee' are strings"]),
        ({"id": 7.0, "text": NOTE}, ["the ids of table 'lee' are strings"]),  # 7.0 is JSON Schema's integer 7
        ({"id": "ok-0", "text": NOTE}, ["the id comes twice in this request"]),
    ],
)
def test_a_bad_document_is_a_422_naming_it(
    server: real_server.Server, document: dict[str, Any], words: list[str]
) -> None:
    before = get(server, "ok-0")
    answer = post(server, "/documents", {"documents": [{"id": "ok-0", "text": NOTE}, document]})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    message = error["message"]
    assert all(word in message for word in words), message
    # the document's index in the request, as the client's refusal before sending gives it (a body's shape: a path)
    assert error.get("document") == (None if message.startswith("documents.1.") else 1), error
    assert get(server, "ok-0").status_code == before.status_code  # nothing of the request was written


def test_a_text_whose_known_words_cancel_out_is_named_so(data_dir: Path, tmp_path: Path) -> None:
    """An upsert's text whose known words' rows sum to zero has no vector: the 422 names those words as cancelling
    out (as a text query's does), not as unknown."""
    small = Table.load(data_dir / "small")
    heart = small.tokens.find("heart")
    assert heart is not None
    opposite = build_opposite(np.asarray(small.vectors[heart]) * small.norms[heart], tmp_path)
    lee = Table.load(data_dir / "lee")
    delta = Delta(lee.payload, lee.rows, lee.dim, 0)
    documents = [WriteDocument(id="fine", text="heart"), WriteDocument(id="none", text="heart zzqxv trah")]
    with pytest.raises(InvalidQuery) as error:
        writes.upsert_body(lee, opposite, documents, delta)
    assert error.value.message == (
        "documents[1] (id 'none'): its text 'heart zzqxv trah': its words known to 'opposite', this table's encoder "
        "('heart', 'trah') cancel out: it pools to a zero vector; send its vector"
    )
    assert error.value.code == "invalid_request" and error.value.details == {"words": ["heart", "trah"], "document": 1}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/documents", {"documents": []}),
        ("/documents", {"documents": [{"id": "", "text": NOTE}]}),
        ("/documents", {"documents": [{"id": 1.5, "text": NOTE}]}),
        ("/documents", {"documents": [{"id": 2**70, "text": NOTE}]}),
        ("/documents", {"documents": [{"id": None, "text": NOTE}]}),
        ("/documents", {"documents": [{"id": True, "text": NOTE}]}),
        ("/documents", {"documents": [{"id": "h", "text": 7}]}),
        ("/documents", {"documents": [{"id": "h", "vector": ["a"] * 50}]}),
        ("/documents", {"documents": [{"id": "h", "vector": [1e39] * 50}]}),
        # values within float32 whose norm overflows it, or whose squares vanish in it: refused at import too
        ("/documents", {"documents": [{"id": "h", "vector": [3e38] * 50}]}),
        ("/documents", {"documents": [{"id": "h", "vector": [0.1] * 49 + [2e19]}]}),
        ("/documents", {"documents": [{"id": "h", "vector": [1e-30] * 50}]}),
        ("/documents", {"documents": [{"id": "h", "vector": [1e-46] * 50}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"known": 10**400}}]}),
        (
            "/documents",
            {"documents": [{"id": "h", "text": NOTE, "fields": {"published": "9999-12-31T23:00:00-05:00"}}]},
        ),
        (
            "/documents",
            {"documents": [{"id": "h", "text": NOTE, "fields": {"published": "0001-01-01T00:30:00+01:00"}}]},
        ),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"year": {"nested": 1}}}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"year": 2**70}}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"tags": "not-a-list"}}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"long": "yes"}}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"known": True}}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"published": 12345}}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": ["year"]}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "colour": "red"}]}),
        ("/documents", {"documents": "h"}),
        ("/documents/delete", {"filter": {"nowhere": 1}}),
        ("/documents/delete", {"filter": {"year": {"near": 3}}}),
        ("/documents/delete", {"filter": "year"}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"lang": "\ud800"}}]}),
        ("/documents", {"documents": [{"id": "h", "text": NOTE, "fields": {"tags": ["ok", "\udfff"]}}]}),
        ("/documents/delete", {"filter": {"lang": "\ud800"}}),
        ("/documents/delete", {"filter": {"or": [{"year": 3000 + i} for i in range(4097)]}}),  # over max conditions
        ("/documents/delete", {"ids": [[1]]}),
        ("/documents/delete", {"ids": []}),
    ],
)
def test_hostile_writes_are_422s(server: real_server.Server, path: str, body: Any) -> None:
    before = real_server.HTTP.get(f"{server.base}/v1/tables/lee").json()["writes"]["sequence"]
    # json.dumps escapes a lone surrogate as JSON may (httpx's json= would fail to encode it)
    answer = real_server.HTTP.post(f"{server.base}/v1/tables/lee{path}", content=json.dumps(body), headers=HEADERS)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_request" and answer.json()["error"]["message"]
    assert real_server.HTTP.get(f"{server.base}/v1/tables/lee").json()["writes"]["sequence"] == before


def test_request_limits(server: real_server.Server) -> None:
    many = post(server, "/documents", {"documents": [{"id": f"n{i}", "text": NOTE} for i in range(65)]})
    assert many.status_code == 422 and "at most 64 items" in many.text
    assert post(server, "/documents/delete", {"ids": ["a"], "filter": {"year": 1}}).status_code == 422
    assert post(server, "/documents/delete", {}).status_code == 422
    huge = post(server, "/documents", {"documents": [{"id": "big", "text": "word " * 1_000_000}]})
    assert huge.status_code == 413 and huge.json()["error"]["code"] == "body_too_large"


def test_writes_need_a_write_key(server: real_server.Server, small_data_dir: Path) -> None:
    body = {"documents": [{"id": "x", "text": NOTE}]}
    assert post(server, "/documents", body, headers={}).status_code == 401
    wrong = post(server, "/documents", body, headers={"X-API-Key": "not-the-key"})
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "forbidden"
    tokens = real_server.HTTP.post(f"{server.base}/v1/tables/small/documents", json=body, headers=HEADERS)
    assert tokens.status_code == 422 and "not documents" in tokens.json()["error"]["message"]
    with client_for(data_dir=small_data_dir) as client:  # no write key configured: read-only
        refused = client.post("/v1/tables/small/documents", json=body, headers=HEADERS)
        assert refused.status_code == 403
        assert "read-only" in refused.json()["error"]["message"]
        assert "EMBEDDING_WRITE_KEYS" in refused.json()["error"]["message"]
        assert client.delete("/v1/tables/small/documents/x").status_code == 403


def test_the_python_client_writes(server: real_server.Server, lee_docs: Lee) -> None:
    with Client(server.base, api_key=KEY) as client:
        added = client.upsert_documents("lee", [{"id": "client/1", "text": NOTE, "vector": lee_docs.vectors[5]}])
        assert added["upserted"] == 1
        assert client.document("lee", "client/1")["text"] == NOTE
        hits = client.search_documents("lee", k=1, vector=lee_docs.vectors[5] * 3)
        assert hits.hits[0].id in ("client/1", lee_docs.ids[5])
        assert client.delete_documents("lee", ids=["client/1", "nowhere"])["deleted"] == 1
        assert client.delete_document("lee", "client/1")["deleted"] == 0
        assert client.delete_documents("lee", filter={"year": 1985})["sequence"] >= added["sequence"]
    with Client(server.base) as reader, pytest.raises(ApiError) as refused:
        reader.upsert_documents("lee", [{"id": "x", "text": NOTE}])
    assert refused.value.status == 401


def test_a_restart_replays_the_log_and_cuts_a_torn_tail(
    server: real_server.Server, data_dir: Path, tmp_path: Path
) -> None:
    post(server, "/documents", {"documents": [{"id": "before-restart", "text": NOTE}]})
    sequence = post(server, "/documents", {"documents": [{"id": "last-one", "text": NOTE}]}).json()["sequence"]
    server.stop()
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    log = writelog.log_path(copy, "lee")
    with log.open("ab") as handle:
        handle.write(writelog.frame(sequence + 1, {"op": "delete", "ids": ["last-one"]})[:-7])  # a torn write
    size = log.stat().st_size
    with real_server.running(copy, tmp_path / "serve.log", env=ENV) as again:
        assert real_server.HTTP.get(f"{again.base}/v1/tables/lee/documents/before-restart").status_code == 200
        assert real_server.HTTP.get(f"{again.base}/v1/tables/lee/documents/last-one").status_code == 200
        assert real_server.HTTP.get(f"{again.base}/v1/tables/lee/documents/{'lee-011'}").status_code == 404
        assert f"cut {size - log.stat().st_size} bytes" in again.log()
        next_one = real_server.HTTP.post(
            f"{again.base}/v1/tables/lee/documents", json={"ids": ["last-one"]}, headers=HEADERS
        )
        assert next_one.status_code == 422  # an upsert body without documents
        deleted = real_server.HTTP.post(
            f"{again.base}/v1/tables/lee/documents/delete", json={"ids": ["last-one"]}, headers=HEADERS
        )
        assert deleted.json() == {"table": "lee", "sequence": sequence + 1, "deleted": 1}


def test_a_damaged_middle_refuses_only_that_table(data_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    log = writelog.log_path(copy, "lee")
    records = recovered(log)
    assert len(records) > 3
    data = bytearray(log.read_bytes())
    data[records[1].end - 5] ^= 0x10
    log.write_bytes(bytes(data))
    with real_server.running(copy, tmp_path / "serve.log", env=ENV) as server:
        answer = real_server.HTTP.get(f"{server.base}/v1/tables/lee/documents/lee-000")
        assert answer.status_code == 503
        assert real_server.HTTP.get(f"{server.base}/v1/tables/small").status_code == 200
        assert f"record at byte {records[1].offset} (after sequence number {records[0].seq}) is damaged" in server.log()
        assert "lee.log" in server.log()


def test_other_writes_do_not_wait_for_the_encoder(
    data_dir: Path, tmp_path: Path, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upsert's texts are embedded before it takes the log's lock: while the encoder runs (held here until the
    other writes are answered), a write with a vector and a delete to the same table are answered, and the upsert
    is appended after them; a search sees them meanwhile."""
    for name in ("small", "lee"):  # the tables only: the copy's log starts empty
        if not link_table(data_dir / name, tmp_path):
            shutil.copytree(data_dir / name, tmp_path / name)
    embedding, release = threading.Event(), threading.Event()
    order: list[str] = []
    encoder_of = writes.encoder_for

    class Held:
        def __init__(self, table: Table) -> None:
            self.encoder = encoder_of(table)

        def encode(self, *args: Any, **kwargs: Any) -> Any:
            embedding.set()
            release.wait(20)  # set once the other writes are answered (it breaks the wait of a write left behind)
            order.append("embedded")
            return self.encoder.encode(*args, **kwargs)

    monkeypatch.setattr(writes, "encoder_for", Held)
    answers: dict[str, httpx.Response] = {}
    with client_for(data_dir=tmp_path, write_keys=[KEY], verify_checksums=False) as client:
        url = "/v1/tables/lee/documents"
        first = client.get("/v1/tables/lee").json()["writes"]["sequence"] + 1

        def upsert_text() -> None:
            answers["text"] = client.post(url, json={"documents": [{"id": "t", "text": NOTE}]}, headers=HEADERS)

        texts = threading.Thread(target=upsert_text)
        texts.start()
        try:
            assert embedding.wait(60)
            document = {"id": "v", "vector": lee_docs.vectors[0].tolist()}
            answers["vector"] = client.post(url, json={"documents": [document]}, headers=HEADERS)
            answers["delete"] = client.post(f"{url}/delete", json={"ids": [lee_docs.ids[1]]}, headers=HEADERS)
            answers["search"] = client.post("/v1/tables/lee/search", json={"vector": document["vector"], "k": 1})
            order.append("written")
        finally:
            release.set()
            texts.join(60)
    assert order == ["written", "embedded"]
    assert answers["vector"].json() == {"table": "lee", "sequence": first, "upserted": 1}
    assert answers["delete"].json() == {"table": "lee", "sequence": first + 1, "deleted": 1}
    assert answers["search"].json()["hits"][0]["id"] == "v"
    assert answers["text"].json() == {"table": "lee", "sequence": first + 2, "upserted": 1}
