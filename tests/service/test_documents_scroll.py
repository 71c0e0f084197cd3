"""``POST .../documents/scroll`` on a real ``embedding-serve`` process: gensim's Lee corpus (text ids) and a table of
integer ids, listed page by page after writes (written, replaced, deleted), each page against a brute force of
the passing ids (the filter evaluated here over the values the test wrote, the ids sorted as the table sorts them),
each document against what ``documents/get`` shows; the errors of a bad filter, limit or ``after``; the clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from index.store.tokens import MAX_TOKEN_CHARS
from service_client import AsyncClient, Client, calls
from tests.cli import run_cli
from tests.lee import Lee, write_jsonl
from tests.service import real_server
from tests.service.conftest import lee_copy

KEY = "scroll-writer-" + "k" * 24
HEADERS = {"X-API-Key": KEY}
MAX_BATCH = 64
NUMBERS = [1000, -7, 20, 3, 2**40, 100, 5]  # integer ids: by number 100 comes after 20, as text before it
# ids as long as an import takes (max_token_chars; the emoji counts as one character), one with "/" and NUL
LONG_IDS = ["c", "b" + "x" * (MAX_TOKEN_CHARS - 1), "a", "b" + "x" * (MAX_TOKEN_CHARS - 2) + "\U0001f600", "d/\0"]

Record = dict[str, Any]
Passes = Callable[[Record], bool]


def year_and_english(fields: Record) -> bool:
    return (fields.get("year") or 0) >= 1995 and fields.get("lang") == "en"


# Filters and the same conditions in Python, over a document's fields (and its id).
FILTERS: list[tuple[dict[str, Any] | None, Callable[[str | int, Record], bool]]] = [
    (None, lambda _, f: True),
    ({"year": {"gte": 1995}, "lang": "en"}, lambda _, f: year_and_english(f)),
    ({"tags": "government"}, lambda _, f: "government" in (f.get("tags") or [])),
    (
        {"or": [{"long": True}, {"id": {"in": ["lee-003", "lee-299", "new-1"]}}]},
        lambda i, f: bool(f.get("long")) or i in ("lee-003", "lee-299", "new-1"),
    ),
    ({"not": {"year": 1993}}, lambda _, f: f.get("year") != 1993),
]


@pytest.fixture(scope="module")
def server(lee_imports: Path, lee_docs: Lee, tmp_path_factory: pytest.TempPathFactory) -> Iterator[real_server.Server]:
    data = lee_copy(lee_imports, "plain", "whole", tmp_path_factory.mktemp("scroll") / "data")
    numbers = [{"id": n, "vector": lee_docs.vectors[i].tolist(), "odd": n % 2 == 1} for i, n in enumerate(NUMBERS)]
    path = write_jsonl(data.parent / "numbers.jsonl", numbers)
    assert run_cli("import", path, "--format", "documents", "--name", "numbers", "--data-dir", data).code == 0
    long = [{"id": ident, "vector": lee_docs.vectors[i].tolist()} for i, ident in enumerate(LONG_IDS)]
    path = write_jsonl(data.parent / "long.jsonl", long)
    assert run_cli("import", path, "--format", "documents", "--name", "long", "--data-dir", data).code == 0
    env = {"EMBEDDING_WRITE_KEYS": KEY, "EMBEDDING_MAX_BATCH": str(MAX_BATCH)}
    with real_server.running(data, data.parent / "serve.log", env=env) as server:
        yield server


def scroll(server: real_server.Server, body: dict[str, Any], table: str = "lee") -> httpx.Response:
    return real_server.HTTP.post(f"{server.base}/v1/tables/{table}/documents/scroll", json=body, timeout=30)


def write(server: real_server.Server, path: str, body: dict[str, Any], table: str = "lee") -> None:
    answer = real_server.HTTP.post(f"{server.base}/v1/tables/{table}{path}", json=body, headers=HEADERS, timeout=30)
    assert answer.status_code == 200, answer.text


def every_page(server: real_server.Server, body: dict[str, Any], table: str = "lee") -> list[list[Record]]:
    """The pages of a scroll from its start, each checked: ``next`` its last id while more follow, then null; its
    documents what ``documents/get`` shows of its ids."""
    pages, after = [], None
    while True:
        answer = scroll(server, {**body, **({} if after is None else {"after": after})}, table)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        documents = page["documents"]
        ids = [d["id"] for d in documents]
        options = {k: v for k, v in body.items() if k in ("vector", "normalized", "fields")}
        read = real_server.HTTP.post(
            f"{server.base}/v1/tables/{table}/documents/get", json={"ids": ids or ["-"], **options}, timeout=30
        ).json()
        assert documents == (read["documents"] if ids else []), ids
        pages.append(documents)
        assert len(documents) <= body.get("limit", MAX_BATCH)
        if page["next"] is None:
            return pages
        assert len(documents) == body.get("limit", MAX_BATCH) and page["next"] == ids[-1]
        after = page["next"]


def passing(live: dict[str | int, Record], passes: Callable[[str | int, Record], bool]) -> list[str | int]:
    """The brute force: the ids whose document passes, sorted as the table sorts its ids."""
    return sorted(i for i, fields in live.items() if passes(i, fields))


def lee_state(lee: Lee) -> dict[str | int, Record]:
    return {lee.ids[i]: lee.record(i) for i in range(len(lee.ids))}


def listed(pages: list[list[Record]]) -> list[str | int]:
    return [d["id"] for page in pages for d in page]


def test_every_page_is_the_brute_force(server: real_server.Server, lee_docs: Lee) -> None:
    """Each filter's pages (of 7, of 64 and the default 100) list the passing ids once, in order; a page is what
    documents/get shows of its ids, with vectors and chosen fields too."""
    live = lee_state(lee_docs)
    for spec, passes in FILTERS:
        body = {} if spec is None else {"filter": spec}
        expected = passing(live, passes)
        assert len(expected) > 0
        for limit in (7, MAX_BATCH):
            assert listed(every_page(server, {**body, "limit": limit})) == expected, (spec, limit)
    pages = every_page(server, {"filter": FILTERS[1][0], "vector": True, "normalized": True, "fields": ["year"]})
    shown = pages[0][0]
    assert set(shown) == {"id", "text", "fields", "vector"} and list(shown["fields"]) == ["year"]
    first = scroll(server, {}).json()
    assert len(first["documents"]) == MAX_BATCH and first["next"] == "lee-063"  # 100 unless max_batch is lower


def test_pages_after_writes(server: real_server.Server, lee_docs: Lee) -> None:
    """Written documents among the version's in the ids' order, replaced ones once with their new fields, deleted
    ones (of the version or written) never; a page goes on after an id deleted since the last one (an ``after``
    need not be a document's)."""
    live = lee_state(lee_docs)

    def upsert(ident: str, row: int, fields: Record) -> None:
        write(
            server,
            "/documents",
            {"documents": [{"id": ident, "vector": lee_docs.vectors[row].tolist(), "fields": fields}]},
        )
        live[ident] = fields

    upsert("lee-1005", 1, {"year": 1999, "lang": "en", "tags": ["government"]})  # between lee-100 and lee-101
    upsert("aaa", 2, {"year": 2001, "lang": "en", "long": True})  # before every other
    upsert("new-1", 3, {"year": 1993})
    upsert("lee-010", 4, {"year": 1990, "tags": ["government"]})  # replaced: other fields
    upsert("zzz", 5, {"lang": "fr"})
    upsert("bbb", 6, {"year": 2000})
    write(server, "/documents/delete", {"ids": ["lee-200", "bbb", "lee-011"]})
    for ident in ("lee-200", "bbb", "lee-011"):
        del live[ident]
    for spec, passes in FILTERS:
        body = {} if spec is None else {"filter": spec}
        assert listed(every_page(server, {**body, "limit": 7})) == passing(live, passes), spec
    first = scroll(server, {"limit": 20}).json()
    assert [d["id"] for d in first["documents"]][:2] == ["aaa", "lee-000"]
    write(server, "/documents/delete", {"ids": [first["next"], "lee-030"]})  # the cursor's id, and one ahead of it
    ahead = first["next"] + "5"
    upsert(ahead, 7, {})  # just after the cursor: listed
    upsert("lee-0005", 8, {})  # behind it: not
    del live[first["next"]], live["lee-030"]
    rest = listed(every_page(server, {"after": first["next"], "limit": MAX_BATCH}))
    assert rest == [i for i in passing(live, lambda i, f: True) if str(i) > first["next"]] and rest[0] == ahead


def test_integer_ids_by_number(server: real_server.Server, lee_docs: Lee) -> None:
    """An integer-id table's pages go by number (20 before 100, -7 first); ``after`` as digits is the integer,
    as the table reads ids; written and deleted documents merged as for text ids."""
    assert listed(every_page(server, {"limit": 3}, "numbers")) == sorted(NUMBERS)
    page = scroll(server, {"after": "20", "limit": 2, "filter": {"odd": False}}, "numbers").json()
    assert [d["id"] for d in page["documents"]] == [100, 1000] and page["next"] == 1000
    write(
        server,
        "/documents",
        {"documents": [{"id": 50, "vector": lee_docs.vectors[0].tolist(), "fields": {"odd": False}}]},
        "numbers",
    )
    write(server, "/documents/delete", {"ids": [100]}, "numbers")
    assert listed(every_page(server, {"limit": 2, "filter": {"odd": False}}, "numbers")) == [20, 50, 1000, 2**40]
    assert listed(every_page(server, {"after": -8}, "numbers"))[:2] == [-7, 3]


def test_a_scroll_goes_on_past_the_longest_ids_and_after_a_longer_one(
    server: real_server.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids of max_token_chars, the longest an import takes: a page that ends on one names it as ``next``, and the
    next page starts after it (the listing goes on to the end, the clients' too); each is read by ``documents/get``
    and by its path, and searched by. An ``after`` longer than any id (a table imported before the bound may hold
    one) is taken."""
    pages = every_page(server, {"limit": 1, "fields": []}, "long")  # each page read by documents/get too
    assert listed(pages) == sorted(LONG_IDS)
    for ident in LONG_IDS:
        body = {"id": ident, "k": 1, "fields": []}
        answer = real_server.HTTP.post(f"{server.base}/v1/tables/long/search", json=body, timeout=30)
        assert answer.status_code == 200 and len(answer.json()["hits"]) == 1, answer.text[:300]
    page = scroll(server, {"after": "b" + "x" * 2000, "fields": []}, "long")
    assert [d["id"] for d in page.json()["documents"]] == sorted(LONG_IDS)[2:]
    monkeypatch.setattr(calls, "READ_DOCUMENTS", 1)
    with Client(server.base) as client:
        assert [d["id"] for d in client.list_documents("long")] == sorted(LONG_IDS)
        assert [client.document("long", ident, fields=[])["id"] for ident in LONG_IDS] == LONG_IDS  # GET by path


def test_an_integer_id_of_thousands_of_digits_is_read_as_any_other(server: real_server.Server, lee_docs: Lee) -> None:
    """An integer-id table reads an id of more digits than Python's int() takes (4,300) as it reads any, in a
    filter (a page's, a search's) and as ``after``: its leading zeros dropped (``"0...05"`` is 5), past 64 bits no
    id's (a 422 as ``after``), never a 500."""
    many, padded = "1" * 5000, "0" * 5000 + "5"
    page = scroll(server, {"filter": {"id": {"in": [many, padded]}}, "fields": []}, "numbers")
    assert page.status_code == 200 and [d["id"] for d in page.json()["documents"]] == [5], page.text[:300]
    searched = real_server.HTTP.post(
        f"{server.base}/v1/tables/numbers/search",
        json={"vector": lee_docs.vectors[0].tolist(), "filter": {"id": many}},
        timeout=30,
    )
    assert searched.status_code == 200 and searched.json()["hits"] == [], searched.text[:300]
    page = scroll(server, {"after": padded, "limit": 1, "fields": []}, "numbers")
    assert page.status_code == 200 and page.json()["next"] == 20, page.text[:300]
    status, _, message = error(scroll(server, {"after": many}, "numbers"))
    assert status == 422 and "integers within 64 bits" in message, message


def error(answer: httpx.Response) -> tuple[int, str, str]:
    body = answer.json()["error"]
    return answer.status_code, body["code"], body["message"]


def test_bad_requests_are_refused_with_their_reason(server: real_server.Server, lee_docs: Lee) -> None:
    """A bad filter as a search refuses it; a limit out of 1..max_batch, an ``after`` that is no id (or text on an
    integer-id table), an unknown field, an unknown key: 4xx envelopes saying why."""
    vector = lee_docs.vectors[0].tolist()
    for spec in ({"nope": 1}, {"year": {"near": 3}}, {"year": "x"}, {}):
        searched = real_server.HTTP.post(
            f"{server.base}/v1/tables/lee/search", json={"vector": vector, "filter": spec}, timeout=30
        )
        status, code, message = error(scroll(server, {"filter": spec}))
        assert 400 <= status < 500 and (status, code, message) == error(searched), spec
    for limit in (0, MAX_BATCH + 1, "5", True, 2.5):
        status, code, message = error(scroll(server, {"limit": limit}))
        assert status == 422 and code == "invalid_request" and "limit" in message, limit
    assert "at most 64 (the server's max_batch)" in error(scroll(server, {"limit": 65}))[2]
    for after in (True, {"id": 1}, "", 2**64):
        status, code, message = error(scroll(server, {"after": after}))
        assert status == 422 and "after" in message, after
    status, code, message = error(scroll(server, {"after": "ten"}, "numbers"))
    assert (status, code) == (
        422,
        "invalid_request",
    ) and "ids of table 'numbers' are integers within 64 bits" in message, message
    got = real_server.HTTP.post(
        f"{server.base}/v1/tables/lee/documents/get", json={"ids": ["lee-001"], "fields": ["nope"]}
    )
    assert error(scroll(server, {"fields": ["nope"]})) == error(got)
    assert error(scroll(server, {"limits": 5}))[0] == 422
    assert error(scroll(server, {}, "nosuch"))[:2] == (404, "unknown_table")


def test_the_clients_scroll_and_list(
    server: real_server.Server, lee_docs: Lee, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``scroll_documents`` is one page as the server answers it (without a limit, the server's page);
    ``list_documents`` every page joined (of 7 here), the same of both clients."""
    spec = FILTERS[2][0]
    with Client(server.base) as client:
        page = client.scroll_documents("lee", filter=spec, limit=3, after="lee-050", fields=["tags"])
        assert page == scroll(server, {"filter": spec, "limit": 3, "after": "lee-050", "fields": ["tags"]}).json()
        first = client.scroll_documents("lee", fields=[])  # the server's page: 100, or max_batch when lower
        assert first == scroll(server, {"fields": []}).json() and len(first["documents"]) == MAX_BATCH
        monkeypatch.setattr(calls, "READ_DOCUMENTS", 7)
        every = client.list_documents("lee", filter=spec, vector=True)
    assert [d["id"] for d in every] == listed(every_page(server, {"filter": spec}))

    async def both() -> list[Any]:
        async with AsyncClient(server.base) as api:
            return [
                await api.scroll_documents("lee", filter=spec, limit=3, after="lee-050", fields=["tags"]),
                await api.list_documents("lee", filter=spec, vector=True),
                await api.scroll_documents("lee", fields=[]),
            ]

    again = asyncio.run(both())
    assert again[0] == page and [d["id"] for d in again[1]] == [d["id"] for d in every]
    assert all(len(d["vector"]) == lee_docs.vectors.shape[1] for d in again[1]) and again[2] == first
