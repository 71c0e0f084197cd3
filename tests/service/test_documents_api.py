"""The search of a documents table over HTTP, on a real ``embedding-serve`` process serving gensim's Lee corpus
(300 news documents with fields, imported from JSON Lines; vectors: the mean GloVe row of their words).

Hits are checked against a float64 brute force over the documents that pass the filter, evaluated here row by
row on the values the test wrote; paging, more-like-this, recommendations, batches with bad items, one
document by id, and the errors of every kind of bad request.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest

from tests.lee import TYPES, Lee
from tests.service import real_server

K = 5


@pytest.fixture(scope="module")
def base(documents_server: real_server.Server) -> str:
    """The shared server over the Lee tables (tests/service/conftest.py)."""
    return documents_server.base


def post(base: str, body: dict[str, Any], table: str = "lee") -> httpx.Response:
    return real_server.HTTP.post(f"{base}/v1/tables/{table}/search", json=body, timeout=30)


def ranking(lee: Lee, query: np.ndarray, passing: np.ndarray, leave_out: set[int] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """Ids of the passing documents by float64 cosine with ``query``, best first."""
    unit = lee.unit()
    scores = unit @ (query / np.linalg.norm(query))
    order = [int(i) for i in np.argsort(-scores, kind="stable") if passing[i] and int(i) not in leave_out]
    return [lee.ids[i] for i in order]


def test_the_table_lists_its_fields(base: str) -> None:
    summary = real_server.HTTP.get(f"{base}/v1/tables/lee").json()
    assert summary["kind"] == "documents" and summary["rows"] == 300
    documents = summary["documents"]
    assert (documents["id_field"], documents["id_type"], documents["text_field"]) == ("id", "string", "text")
    assert {name: field["type"] for name, field in documents["fields"].items()} == TYPES


def test_a_search_among_documents_by_id(base: str, lee_docs: Lee) -> None:
    """A re-rank of candidates: the filter on ids passes the documents named (an unknown one passes none)."""
    chosen = [lee_docs.ids[i] for i in (3, 50, 51, 120, 299)]
    query = lee_docs.vectors[50].astype(np.float64)
    spec = {"id": {"in": [*chosen, "lee-300"]}, "not": {"id": lee_docs.ids[51]}}
    answer = post(base, {"vector": query.tolist(), "k": K, "filter": spec}).json()
    passing = np.isin(lee_docs.ids, chosen) & (np.array(lee_docs.ids) != lee_docs.ids[51])
    assert [hit["id"] for hit in answer["hits"]] == ranking(lee_docs, query, passing) and answer["passing"] == 4


def test_a_filtered_vector_search(base: str, lee_docs: Lee) -> None:
    query = lee_docs.vectors[42].astype(np.float64) + lee_docs.vectors[7]
    spec = {"year": {"gte": 1995}, "lang": "en"}
    passing = np.array(
        [y >= 1995 and lang == "en" for y, lang in zip(lee_docs.fields["year"], lee_docs.fields["lang"], strict=True)]
    )
    answer = post(base, {"vector": query.tolist(), "k": K, "filter": spec}).json()
    assert [hit["id"] for hit in answer["hits"]] == ranking(lee_docs, query, passing)[:K]
    assert answer["passing"] == int(passing.sum())
    for hit in answer["hits"]:
        row = lee_docs.ids.index(hit["id"])
        assert hit["text"] == lee_docs.texts[row]
        assert hit["fields"] == lee_docs.record(row)
        expected = lee_docs.unit()[row] @ (query / np.linalg.norm(query))
        assert hit["score"] == pytest.approx(expected, abs=1e-5)


def test_more_like_this_pages_and_fields(base: str, lee_docs: Lee) -> None:
    row = 12
    passing = np.array(
        [
            lang != "en" or "government" not in (tags or [])
            for lang, tags in zip(lee_docs.fields["lang"], lee_docs.fields["tags"], strict=True)
        ]
    )
    spec = {"not": {"lang": "en", "tags": "government"}}
    expected = ranking(lee_docs, lee_docs.vectors[row].astype(np.float64), passing, {row})
    pages = []
    for offset in range(0, 20, K):
        body = {"id": lee_docs.ids[row], "k": K, "offset": offset, "filter": spec, "fields": ["year"]}
        answer = post(base, body).json()
        assert all(set(hit["fields"]) == {"year"} for hit in answer["hits"])
        pages += [hit["id"] for hit in answer["hits"]]
    assert pages == expected[:20]
    floor = post(base, {"id": lee_docs.ids[row], "k": 20, "filter": spec}).json()["hits"][9]["score"]
    cut = post(base, {"id": lee_docs.ids[row], "k": 20, "filter": spec, "min_score": floor}).json()["hits"]
    assert [hit["id"] for hit in cut] == expected[:10]


def test_recommend_from_positive_and_negative_documents(base: str, lee_docs: Lee) -> None:
    unit = lee_docs.unit()
    query = (unit[3] + unit[30] - unit[100]) / 3
    everyone = np.ones(300, dtype=bool)
    body = {"positive": [lee_docs.ids[3], lee_docs.ids[30]], "negative": [lee_docs.ids[100]], "k": K}
    answer = post(base, body).json()
    expected = ranking(lee_docs, query, everyone, {3, 30, 100})
    # Cosines with a difference of mean vectors are close together: compare the scores of the ranks
    cosine = {i: float(unit[i] @ query / np.linalg.norm(query)) for i in range(300)}
    got = [cosine[lee_docs.ids.index(hit["id"])] for hit in answer["hits"]]
    want = [cosine[lee_docs.ids.index(ident)] for ident in expected[:K]]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose([hit["score"] for hit in answer["hits"]], want, rtol=0, atol=1e-5)


def test_a_batch_keeps_its_order_and_its_bad_items_apart(base: str, lee_docs: Lee) -> None:
    items = [
        {"id": lee_docs.ids[1]},
        {"id": "no-such-document"},
        {"vector": lee_docs.vectors[2].tolist(), "filter": {"long": True}},
        {"id": lee_docs.ids[4], "filter": {"year": "late"}},
        {"positive": [lee_docs.ids[5]], "offset": 3},
    ]
    results = post(base, {"queries": items, "k": 3, "fields": []}).json()["results"]
    assert results[1]["error"]["code"] == "unknown_document" and "no-such-document" in results[1]["error"]["message"]
    assert results[3]["error"]["code"] == "invalid_request" and "year" in results[3]["error"]["message"]
    for position in (0, 2, 4):
        one = {key: value for key, value in items[position].items()}
        alone = post(base, {**one, "k": 3, "fields": []}).json()
        assert results[position]["hits"] == alone["hits"], position
    assert all(hit["fields"] == {} for hit in results[0]["hits"])
    long_rows = {lee_docs.ids[i] for i, long in enumerate(lee_docs.fields["long"]) if long}
    assert {hit["id"] for hit in results[2]["hits"]} <= long_rows


def test_a_batch_item_takes_the_requests_filter_and_page_unless_it_has_its_own(base: str, lee_docs: Lee) -> None:
    shared = {"filter": {"long": True}, "offset": 2, "min_score": 0.5}
    items = [{"id": lee_docs.ids[1]}, {"id": lee_docs.ids[4], "offset": 0}, {"id": lee_docs.ids[6], "filter": None}]
    results = post(base, {"queries": items, "k": 3, "fields": [], **shared}).json()["results"]
    long_rows = {lee_docs.ids[i] for i, long in enumerate(lee_docs.fields["long"]) if long}
    for item, result in zip(items, results, strict=True):
        alone = post(base, {**shared, **item, "k": 3, "fields": []}).json()
        assert result["hits"] == alone["hits"] and result.get("passing") == alone.get("passing"), item
    assert {hit["id"] for hit in results[0]["hits"] + results[1]["hits"]} <= long_rows
    assert results[0]["hits"] and all(hit["score"] >= 0.5 for hit in results[0]["hits"])
    assert "passing" not in results[2]  # its own filter: none


def test_one_document_by_id(base: str, lee_docs: Lee) -> None:
    row = 77
    document = real_server.HTTP.get(
        f"{base}/v1/tables/lee/documents/{lee_docs.ids[row]}", params={"vector": "true"}
    ).json()
    assert document["id"] == lee_docs.ids[row] and document["text"] == lee_docs.texts[row]
    assert document["fields"] == lee_docs.record(row)
    np.testing.assert_allclose(document["vector"], lee_docs.vectors[row], rtol=1e-6, atol=1e-7)
    some = real_server.HTTP.get(
        f"{base}/v1/tables/lee/documents/{lee_docs.ids[row]}", params={"fields": "year,tags"}
    ).json()
    assert some["fields"] == {"year": lee_docs.fields["year"][row], "tags": lee_docs.fields["tags"][row]}
    assert "vector" not in some or some["vector"] is None
    missing = real_server.HTTP.get(f"{base}/v1/tables/lee/documents/lee-999")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_document"


@pytest.mark.parametrize(
    "body, words",
    [
        ({"id": "lee-001", "filter": {"yeer": 1990}}, "no field 'yeer'"),
        ({"id": "lee-001", "filter": {"lang": {"gt": "en"}}}, "takes the operators"),
        ({"id": "lee-001", "filter": {"published": {"gte": 2001}}}, "ISO 8601"),
        ({"id": "lee-001", "filter": {"id": {"in": ["lee-002", None]}}}, "filter.id.in[1]: a document's id is"),
        ({"id": "lee-001", "filter": {"id": {"prefix": "lee"}}}, "the documents' ids take the operators eq, ne, in"),
        ({"id": "lee-001", "k": 900, "offset": 200}, "offset + k must be at most 1000"),
        ({"id": "lee-001", "offset": -1}, "offset"),
        ({"id": "lee-001", "min_score": 2}, "min_score"),
        ({"id": "lee-001", "fields": ["nope"]}, "no field 'nope'"),
        ({"id": "lee-001", "vector": [0.1] * 50}, "exactly one of"),
        ({"vector": [0.0] * 50}, "all zeros"),
        ({"vector": [0.1] * 49}, "50 dimensions"),
    ],
)
def test_bad_requests_are_422s_that_say_why(base: str, body: dict[str, Any], words: str) -> None:
    response = post(base, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and words in error["message"], error


def test_unknown_documents_are_404s(base: str) -> None:
    response = post(base, {"positive": ["lee-001", "nope-1", "nope-2"]})
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "unknown_document" and error["ids"] == ["nope-1", "nope-2"]


def test_word_tables_refuse_document_options(api: Any) -> None:
    vector = [0.1] * 50
    for extra in ({"filter": {"lang": "en"}}, {"fields": ["a"]}):
        response = api.post("/v1/tables/small/search", json={"vector": vector, **extra})
        assert response.status_code == 422
        assert "only for documents tables" in response.json()["error"]["message"]
    response = api.post("/v1/tables/small/search", json={"id": "heart"})
    assert response.status_code == 422
    assert api.get("/v1/tables/small/documents/heart").status_code == 422
    whole = api.post("/v1/tables/small/search", json={"vector": vector, "k": 12}).json()["neighbors"]
    page = api.post("/v1/tables/small/search", json={"vector": vector, "k": 4, "offset": 8}).json()["neighbors"]
    assert page == whole[8:12]


def test_the_python_clients_word_search_of_a_documents_table_says_which_method_reads_its_hits(
    base: str, lee_docs: Lee
) -> None:
    """A misuse of the client, as its docstring says: a ValueError naming the method to use, not an ApiError, from
    both clients."""
    from service_client import ApiError, AsyncClient, Client

    vector = lee_docs.unit()[3].tolist()
    with Client(base) as api:
        with pytest.raises(ValueError, match="'lee' holds documents: search it with search_documents"):
            api.search("lee", vector, k=2)
        with pytest.raises(ValueError, match="search_documents"):
            api.search_batch("lee", [vector, vector], k=2)
        assert api.search_documents("lee", vector=vector, k=1).hits[0].id == lee_docs.ids[3]

    async def searched(batch: bool) -> None:
        async with AsyncClient(base) as api:
            await (api.search_batch("lee", [vector], k=2) if batch else api.search("lee", vector, k=2))

    for batch in (False, True):  # the same misuse, the same error as the sync client's (the docstring's contract)
        with pytest.raises(ValueError, match="'lee' holds documents: search it with search_documents") as info:
            asyncio.run(searched(batch))
        assert not isinstance(info.value, ApiError)


def test_the_python_client_searches_documents(base: str, lee_docs: Lee) -> None:
    from service_client import ApiError, Client

    body = {"id": lee_docs.ids[8], "k": 4, "filter": {"long": True}, "fields": ["year"]}
    with Client(base) as api:
        found = api.search_documents("lee", **{key: value for key, value in body.items() if key != "k"}, k=4)
        raw = post(base, body).json()
        assert [(hit.id, hit.score, hit.text, hit.fields) for hit in found.hits] == [
            (hit["id"], hit["score"], hit["text"], hit["fields"]) for hit in raw["hits"]
        ]
        assert found.passing == raw["passing"]
        batch = api.search_documents_batch("lee", [{"id": lee_docs.ids[1]}, {"id": "nope"}], k=2)
        assert isinstance(batch[1], ApiError) and batch[1].code == "unknown_document"
        assert not isinstance(batch[0], ApiError) and len(batch[0].hits) == 2
        document = api.document("lee", lee_docs.ids[5])
        assert document["text"] == lee_docs.texts[5] and "vector" not in document
        some = api.document("lee", lee_docs.ids[5], vector=True, normalized=True, fields=["year", "tags"])
        assert some["fields"] == {name: document["fields"][name] for name in ("year", "tags")}
        np.testing.assert_allclose(some["vector"], lee_docs.unit()[5], atol=1e-6)
        assert api.fields("lee") == real_server.HTTP.get(f"{base}/v1/tables/lee/fields").json()
        with pytest.raises(ApiError) as missing:
            api.document("lee", "lee-999")
        assert missing.value.status == 404 and missing.value.code == "unknown_document"
        # more ids than one request takes (READ_DOCUMENTS): several requests, their answers joined in order
        ids = [*lee_docs.ids, "lee-999"] * 4
        many = api.documents("lee", ids, fields=["year"])
        assert [d["id"] for d in many["documents"]] == lee_docs.ids * 4 and many["missing"] == ["lee-999"] * 4
        assert many["documents"][5] == api.document("lee", lee_docs.ids[5], fields=["year"])
