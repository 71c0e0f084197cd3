"""Each call of the API described once, for :class:`~service_client.Client` and :class:`~service_client.AsyncClient`
alike: a generator that yields the :class:`~service_client.request.Request` s it makes (most make one), is sent
each one's decoded answer, and returns the answer shaped. The clients only carry the requests (``Client`` waiting,
``AsyncClient`` awaiting). A call of many items is sent in runs the server's limits take (:mod:`service_client.runs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import httpx
import numpy as np

from service_client import maps
from service_client.maps import MapColours
from service_client.request import ANSWER_LIMIT, ENCODE_LIMIT, Call, Request
from service_client.runs import (
    Batch,
    Known,
    Scan,
    batch_size,
    batched,
    by_bytes,
    described,
    halved,
    in_runs,
    limits,
    scanned,
)
from service_client.shapes import (
    READ_DOCUMENTS,
    WRITE_DOCUMENTS,
    ApiError,
    Embedded,
    Hits,
    Neighbor,
    Piece,
    Point,
    Projection,
    TableInfo,
    _batch,
    _document,
    _encoded,
    _hits,
    _items,
    _neighbors,
    _retry_after,
    _searched,
    _values,
    segment,
    write_body,
)

Method = Literal["3cosadd", "3cosmul"]
MapMethod = Literal["pca", "tsne"]
RETRY_SECONDS = 10.0  # the longest wait a Retry-After makes before a retry


def retry_wait(response: httpx.Response) -> float | None:
    """The seconds to wait before sending a request again, for an answer that did not start it and says when to
    ask again: 503 with ``Retry-After`` (``overloaded``), or 429 with it (a rate limit in front of the server); None
    for any other answer."""
    wait = _retry_after(response)
    return None if response.status_code not in (429, 503) or wait is None else min(wait, RETRY_SECONDS)


def table_path(table: str, suffix: str) -> str:
    return f"/v1/tables/{segment(table)}/{suffix}"


# ------------------------------------------------------------------------------------------- server
def reload() -> Call[dict[str, Any]]:
    report: dict[str, Any] = yield Request("POST", "/v1/admin/reload")
    return report


def tables() -> Call[list[TableInfo]]:
    keys = ("name", "rows", "dim", "kind", "index")
    answer = yield Request("GET", "/v1/tables")
    return [
        TableInfo(t["name"], t["rows"], t["dim"], t["kind"], t["index"], {k: v for k, v in t.items() if k not in keys})
        for t in answer["tables"]
    ]


def table(name: str) -> Call[dict[str, Any]]:
    info: dict[str, Any] = yield Request("GET", f"/v1/tables/{segment(name)}")
    return info


def vector(table: str, token: str, normalized: bool) -> Call[list[float]]:
    answer = yield Request("GET", table_path(table, "tokens/" + segment(token)), params={"normalized": normalized})
    found: list[float] = answer["vector"]
    return found


def vector_of_id(table: str, id: int, normalized: bool) -> Call[list[float]]:
    answer = yield Request("GET", table_path(table, f"ids/{int(id)}"), params={"normalized": normalized})
    found: list[float] = answer["vector"]
    return found


def tokenize(table: str, text: str) -> Call[list[Piece]]:
    answer = yield Request("POST", table_path(table, "tokenize"), json={"text": text})
    return [Piece(int(t["id"]), t["token"]) for t in answer["tokens"]]


# ------------------------------------------------------------------------------------------ queries
def neighbors(table: str, token: str, k: int, options: dict[str, Any]) -> Call[list[Neighbor]]:
    answer = yield Request("POST", table_path(table, "neighbors"), json={"token": token, "k": k, **options})
    return _neighbors(answer["neighbors"])


def most_similar(
    table: str, positive: Sequence[str], negative: Sequence[str], k: int, options: dict[str, Any]
) -> Call[list[Neighbor]]:
    body = {"positive": list(positive), "negative": list(negative), "k": k, **options}
    answer = yield Request("POST", table_path(table, "neighbors"), json=body)
    return _neighbors(answer["neighbors"])


def neighbors_batch(
    table: str, queries: Sequence[str | dict[str, Any]], k: int, options: dict[str, Any], known: Known
) -> Call[list[list[Neighbor] | ApiError]]:
    words = [len(q.get("positive", ())) + len(q.get("negative", ())) if isinstance(q, dict) else 0 for q in queries]
    batch = Batch(
        table_path(table, "neighbors"),
        "queries",
        list(queries),
        {"k": k, **options},
        costs=(("max_hits", [k] * len(queries)), ("max_words", words)),
        scans=((table, "max_exact_rows", scanned(options)),),
    )
    return _batch((yield from batched(batch, known))["results"])


def similarity(table: str, a: str, b: str) -> Call[float]:
    answer = yield Request("GET", table_path(table, "similarity"), params={"a": a, "b": b})
    return float(answer["similarity"])


def similarities(table: str, pairs: Sequence[tuple[str, str]], known: Known) -> Call[list[float | None]]:
    answer = yield from pairs_batch(table, "similarity", pairs, {}, known)
    found: list[float | None] = answer["similarities"]
    return found


def similarity_batch(
    table: str, pairs: Sequence[tuple[str, str]], options: dict[str, Any], known: Known
) -> Call[list[Any]]:
    answer = yield from pairs_batch(table, "similarity", pairs, options, known)
    return _values(answer["similarities"], answer["errors"])


def pairs_batch(
    table: str, route: str, pairs: Sequence[tuple[str, str]], options: dict[str, Any], known: Known
) -> Call[Any]:
    """``POST .../similarity`` or ``.../rank`` of ``pairs`` in runs; each pair's rank scores every row, as an exact
    search."""
    every = (table, "max_exact_rows", lambda described: int(described.get("rows", 0)))  # a rank's rows
    items = [list(p) for p in pairs]
    batch = Batch(table_path(table, route), "pairs", items, options, scans=(every,) if route == "rank" else ())
    return (yield from batched(batch, known))


def analogy(
    table: str, a: str, b: str, c: str, k: int, method: Method, options: dict[str, Any]
) -> Call[list[Neighbor]]:
    body = {"a": a, "b": b, "c": c, "k": k, "method": method, **options}
    answer = yield Request("POST", table_path(table, "analogy"), json=body)
    return _neighbors(answer["neighbors"])


def analogies(
    table: str,
    questions: Sequence[tuple[str, str, str]],
    k: int,
    method: Method,
    options: dict[str, Any],
    known: Known,
) -> Call[list[list[Neighbor] | ApiError]]:
    """In runs; 3CosMul's questions each score every row searched (``max_scored_rows``)."""
    scans: list[Scan] = [(table, "max_exact_rows", scanned(options))]
    if method == "3cosmul":
        scans.append((table, "max_scored_rows", scanned({**options, "exact": True})))
    batch = Batch(
        table_path(table, "analogy"),
        "queries",
        [{"a": a, "b": b, "c": c} for a, b, c in questions],
        {"k": k, "method": method, **options},
        costs=(("max_hits", [k] * len(questions)),),
        scans=tuple(scans),
    )
    return _batch((yield from batched(batch, known))["results"])


def search(table: str, vector: Sequence[float], k: int, options: dict[str, Any]) -> Call[list[Neighbor]]:
    body = {"vector": [float(x) for x in vector], "k": k, **options}
    answer = yield Request("POST", table_path(table, "search"), json=body)
    return _searched(answer, table)


def search_batch(
    table: str, vectors: Sequence[Sequence[float]], k: int, options: dict[str, Any], known: Known
) -> Call[list[list[Neighbor] | ApiError]]:
    items = [[float(x) for x in v] for v in vectors]
    answer = yield from batched(searches(table, "vectors", items, k, options), known)
    return _batch(answer["results"], table)


def searches(table: str, key: str, items: list[Any], k: int, options: dict[str, Any]) -> Batch:
    """A batch of ``POST .../search``: each item asks its page (``max_hits``: k and the largest offset); a run none
    of whose items is of mode hybrid is sent without ``rrf_k`` and ``weights`` (another run's hybrid items')."""
    offsets = [int(options.get("offset", 0)), *(int(q.get("offset", 0)) for q in items if isinstance(q, dict))]
    page = [k + max(offsets)] * len(items)
    scans = ((table, "max_exact_rows", scanned(options)),)
    mode = options.get("mode") or "vector"
    unused = (lambda run: () if _hybrid(run, mode) else FUSION) if _hybrid(items, mode) else None
    body = {"k": k, **options}
    return Batch(table_path(table, "search"), key, items, body, (("max_hits", page),), scans, unused=unused)


FUSION = ("rrf_k", "weights")  # mode hybrid's options: the server refuses them to a request with no hybrid search


def _hybrid(items: list[Any], mode: str) -> bool:
    """Whether a query of ``items`` is of mode hybrid (its own, else the batch's ``mode``)."""
    return any(isinstance(q, dict) and (q.get("mode") or mode) == "hybrid" for q in items)


def search_documents(table: str, k: int, query: dict[str, Any]) -> Call[Hits]:
    if "vector" in query:
        query = {**query, "vector": [float(x) for x in query["vector"]]}
    answer = yield Request("POST", table_path(table, "search"), json={"k": k, **query})
    return _hits(answer)


def search_documents_batch(
    table: str, queries: Sequence[dict[str, Any]], k: int, options: dict[str, Any], known: Known
) -> Call[list[Hits | ApiError]]:
    answer = yield from batched(searches(table, "queries", list(queries), k, options), known)
    return _items(answer["results"], _hits)


def document(
    table: str, id: str | int, vector: bool, normalized: bool, fields: Sequence[str] | None
) -> Call[dict[str, Any]]:
    params: dict[str, Any] = {"vector": "true"} if vector else {}
    if normalized:
        params["normalized"] = "true"
    if fields is not None:
        params["fields"] = ",".join(fields)
    found: dict[str, Any] = yield Request("GET", table_path(table, f"documents/{segment(str(id))}"), params=params)
    return found


def id_sizes(ids: Sequence[str | int]) -> list[int]:
    """Each id's bytes in a request's list of ids, about."""
    return [len(_encoded(ident)) + 1 for ident in ids]


def documents(
    table: str, ids: Sequence[str | int], vector: bool, normalized: bool, fields: Sequence[str] | None, known: Known
) -> Call[dict[str, Any]]:
    """``POST .../documents/get`` for each run of ids (:func:`in_runs`), the answers joined: ``{"documents",
    "missing"}``."""
    options: dict[str, Any] = {"vector": vector, "normalized": normalized}
    if fields is not None:
        options["fields"] = list(fields)
    joined: dict[str, Any] = {"documents": [], "missing": []}

    def read(start: int, end: int, sized: bool, halves: str | None) -> Call[ApiError | None]:
        body = {"ids": list(ids[start:end]), **options}
        answer = yield Request("POST", table_path(table, "documents/get"), json=body, sized=sized, halves=halves)
        if isinstance(answer, ApiError):
            return answer
        joined["documents"] += answer["documents"]
        joined["missing"] += answer["missing"]
        return None

    yield from in_runs(len(ids), known, by_bytes(id_sizes(ids), READ_DOCUMENTS), halved(read, ANSWER_LIMIT))
    return joined


def scroll_documents(
    table: str,
    filter: dict[str, Any] | None,
    limit: int | None,
    after: str | int | None,
    vector: bool,
    normalized: bool,
    fields: Sequence[str] | None,
    sized: bool = False,
) -> Call[Any]:
    """``POST .../documents/scroll``: one page, ``{"documents", "next"}`` (no ``limit``: the server's page);
    ``sized`` (a ``limit`` sized by the limits read before), its refusal for ``max_batch`` as an :class:`ApiError`."""
    body: dict[str, Any] = {"vector": vector, "normalized": normalized}
    options = (
        ("filter", filter),
        ("limit", limit),
        ("after", after),
        ("fields", None if fields is None else list(fields)),
    )
    for name, value in options:
        if value is not None:
            body[name] = value
    return (yield Request("POST", table_path(table, "documents/scroll"), json=body, sized=sized))


def list_documents(
    table: str,
    filter: dict[str, Any] | None,
    vector: bool,
    normalized: bool,
    fields: Sequence[str] | None,
    known: Known,
) -> Call[list[dict[str, Any]]]:
    """Every page of :func:`scroll_documents`, ``READ_DOCUMENTS`` documents a request (fewer if the server's
    ``max_batch`` is), joined; a page refused for ``max_batch`` (lowered since it was read): the limits read again
    and the page asked again by them, once."""
    size = batch_size((yield from limits(known)), READ_DOCUMENTS)
    found: list[dict[str, Any]] = []
    after: str | int | None = None
    sized = True
    while True:
        page = yield from scroll_documents(table, filter, size, after, vector, normalized, fields, sized)
        if isinstance(page, ApiError):
            known.forget()
            sized = False
            size = batch_size((yield from limits(known)), READ_DOCUMENTS)
            continue
        found += page["documents"]
        after = page["next"]
        if after is None:
            return found


def fields(table: str) -> Call[dict[str, Any]]:
    found: dict[str, Any] = yield Request("GET", table_path(table, "fields"))
    return found


# ------------------------------------------------------------------------------------------- writes
def upsert_documents(table: str, documents: Sequence[dict[str, Any]]) -> Call[dict[str, Any]]:
    body = {"documents": [_document(d) for d in documents]}
    answer: dict[str, Any] = yield Request("POST", table_path(table, "documents"), json=body)
    return answer


def upsert_many(table: str, documents: Sequence[dict[str, Any]], known: Known) -> Call[list[dict[str, Any]]]:
    _check_once(documents)
    answers: list[dict[str, Any]] = []
    if not documents:
        return answers
    sent = [_document(d) for d in documents]
    encoded = [_encoded(d) for d in sent]
    _check_fits(documents, encoded, (yield from limits(known)))
    yield from _check_dimension(table, sent, known)

    def write(start: int, end: int, sized: bool, halves: str | None) -> Call[ApiError | None]:
        body = write_body(encoded[start:end])
        path = table_path(table, "documents")
        answer = yield Request("POST", path, content=body, first=start, halves=halves, sized=sized)
        if isinstance(answer, ApiError):
            return answer
        answers.append(answer)
        return None

    # Refused for the tokens their texts have the table's encoder run, none of a run's documents is written: each half
    # is written so in turn, the documents' order kept. (Through a sharded table's front, the other shards may have
    # written their parts of the refused request: they are written again, as an upsert repeated is harmless.)
    sizes = [len(e) + 1 for e in encoded]
    yield from in_runs(len(encoded), known, by_bytes(sizes, WRITE_DOCUMENTS), halved(write, ENCODE_LIMIT))
    return answers


def _check_fits(documents: Sequence[dict[str, Any]], encoded: Sequence[bytes], limits: dict[str, Any]) -> None:
    """Refuse a document no request can hold, before anything is written, with the error the server answers for
    it (its ``limit`` naming which): its JSON alone over ``max_body_bytes`` (413, the first such, as a body too large
    is refused before it is read), else the first whose id is over ``max_token_chars`` or text over
    ``max_text_chars`` (422). What the server does not publish is left to it."""
    if "max_body_bytes" in limits:
        most = int(limits["max_body_bytes"])
        alone = most - len(write_body([]))  # the most bytes of one document alone in a request
        over = next((i for i, body in enumerate(encoded) if len(body) > alone), None)
        if over is not None:
            problem = f"its JSON alone ({len(encoded[over])} bytes) makes a request body over {most} bytes"
            raise _refused(413, "body_too_large", documents, over, problem, "max_body_bytes")
    found = []
    for key, limit in (("id", "max_token_chars"), ("text", "max_text_chars")):
        if limit in limits:
            most = int(limits[limit])
            values = (document.get(key) for document in documents)
            over = next((i for i, value in enumerate(values) if isinstance(value, str) and len(value) > most), None)
            if over is not None:
                found.append((over, f"{key}: String should have at most {most} characters", limit))
    if found:
        raise _refused(422, "invalid_request", documents, *min(found))


def check_unembedded(documents: Sequence[dict[str, Any]], limits: dict[str, Any]) -> None:
    """What :func:`upsert_many` refuses of ``documents`` before their vectors are made (a store embedding their
    texts asks it first, so that a write refused pays no embedding): an id twice, a text or id over the server's
    ``limits``, a document whose JSON without its vector is already over ``max_body_bytes``; its errors."""
    _check_once(documents)
    _check_fits(documents, [_encoded(_document(d)) for d in documents], limits)


def _dimension_refused(documents: Sequence[dict[str, Any]], described: dict[str, Any]) -> ApiError | None:
    """The server's refusal of the first of ``documents`` whose vector's length is not the dimension of the
    documents table so ``described`` (``GET /v1/tables/{table}``); None when each has it, or has no vector."""
    dim = described.get("dim")
    if described.get("kind") != "documents" or not isinstance(dim, int):
        return None  # the server's to refuse
    for at, document in enumerate(documents):
        vector = document.get("vector")
        if vector is not None and len(vector) != dim:
            values = f"{len(vector):,} value{'' if len(vector) == 1 else 's'}"
            return _refused(422, "invalid_request", documents, at, f"a vector of {values}; the table's have {dim}")
    return None


def _check_dimension(table: str, documents: Sequence[dict[str, Any]], known: Known) -> Call[None]:
    """Refuse a vector whose length is not the table's dimension before anything is written: the server would
    refuse it only in its own request, after the requests before it wrote theirs. The table's description is read
    once and kept (:func:`described`), and read again before a refusal by the kept one, in case the table was
    replaced since (a table replaced with another dimension after that is the server's to refuse)."""
    if all(document.get("vector") is None for document in documents):
        return
    kept = table in known.tables
    refused = _dimension_refused(documents, (yield from described(table, known)))
    if refused is not None and kept:
        del known.tables[table]
        refused = _dimension_refused(documents, (yield from described(table, known)))
    if refused is not None:
        raise refused


def _refused(
    status: int, code: str, documents: Sequence[dict[str, Any]], at: int, problem: str, limit: str | None = None
) -> ApiError:
    """The server's refusal of ``documents[at]`` (for ``limit``), named among the write's documents."""
    ident = repr(documents[at].get("id"))
    shown = ident if len(ident) <= 60 else f"{ident[:56]}...{ident[-1]}"
    cause = "" if limit is None else f" (the server's {limit})"
    message = f"documents[{at}] (id {shown}): {problem}{cause}; nothing was written"
    return ApiError(status, code, message, {"document": at} if limit is None else {"limit": limit, "document": at})


def _check_once(documents: Sequence[dict[str, Any]]) -> None:
    """Refuse an id that comes twice, before anything is written, as the server refuses it in one request: else
    the later would replace the earlier when the two fell in different requests, and be refused in the same."""
    seen: dict[str, int] = {}
    for i, document in enumerate(documents):
        if document.get("id") is None:
            continue  # the server's to refuse
        ident = str(document["id"])  # an integer table's 7 and "7" are one id
        if ident in seen:
            raise ValueError(
                f"documents[{i}] (id {ident!r}): the id comes twice (documents[{seen[ident]}] too); nothing was written"
            )
        seen[ident] = i


def delete_documents(
    table: str, ids: Sequence[str | int] | None, filter: dict[str, Any] | None
) -> Call[dict[str, Any]]:
    body = {"ids": list(ids)} if ids is not None else {"filter": filter}
    answer: dict[str, Any] = yield Request("POST", table_path(table, "documents/delete"), json=body)
    return answer


def delete_many(table: str, ids: Sequence[str | int], known: Known) -> Call[list[dict[str, Any]]]:
    answers: list[dict[str, Any]] = []

    def delete(start: int, end: int, sized: bool) -> Call[int | None]:
        body = {"ids": list(ids[start:end])}
        answer = yield Request("POST", table_path(table, "documents/delete"), json=body, sized=sized)
        if isinstance(answer, ApiError):
            return start
        answers.append(answer)
        return None

    yield from in_runs(len(ids), known, by_bytes(id_sizes(ids), WRITE_DOCUMENTS), delete)
    return answers


def delete_document(table: str, id: str | int) -> Call[dict[str, Any]]:
    answer: dict[str, Any] = yield Request("DELETE", table_path(table, f"documents/{segment(str(id))}"))
    return answer


def embed_details(table: str, texts: Sequence[str], pooling: str | None, known: Known) -> Call[Embedded]:
    """In runs; one refused for its texts' tokens (``max_encode_tokens``) sent again in halves."""
    body: dict[str, Any] = {"pooling": pooling} if pooling else {}
    batch = Batch(table_path(table, "embed"), "texts", list(texts), body, halves=ENCODE_LIMIT)
    data = yield from batched(batch, known)
    vectors = [list(v) for v in data["vectors"]]
    return Embedded(vectors, list(data["tokens"]), list(data["unknown"]), data["pooling"], data.get("truncated"))


def contextual(table: str, texts: Sequence[str], token: str | None, k: int) -> Call[dict[str, Any]]:
    body: dict[str, Any] = {"texts": list(texts), "k": k, **({"token": token} if token is not None else {})}
    answer: dict[str, Any] = yield Request("POST", table_path(table, "contextual"), json=body)
    return answer


def project(
    table: str,
    tokens: Sequence[str],
    skip_unknown: bool,
    method: Literal["pca", "axes", "tsne", "umap"],
    options: dict[str, Any],
) -> Call[Projection]:
    body = {"tokens": list(tokens), "method": method, "skip_unknown": skip_unknown, **options}
    data = yield Request("POST", table_path(table, "project"), json=body)
    points = [
        Point(p["token"], int(p["id"]), float(p["x"]), float(p["y"]), p.get("text", p["token"])) for p in data["points"]
    ]
    ratios = [float(r) for r in data.get("explained_variance_ratio") or []]
    return Projection(points, ratios, data["method"], data.get("unknown", []), data.get("axes"), data.get("params"))


# -------------------------------------------------------------------------------------- diagnostics
def doesnt_match(table: str, words: Sequence[str], skip_unknown: bool) -> Call[str]:
    body = {"words": list(words), "skip_unknown": skip_unknown}
    answer = yield Request("POST", table_path(table, "doesnt-match"), json=body)
    return str(answer["doesnt_match"]["token"])


def doesnt_match_batch(
    table: str, queries: Sequence[Sequence[str]], skip_unknown: bool, known: Known
) -> Call[list[str | ApiError]]:
    items = [list(words) for words in queries]
    costs = (("max_words", [len(words) for words in items]),)
    batch = Batch(table_path(table, "doesnt-match"), "queries", items, {"skip_unknown": skip_unknown}, costs)
    answer = yield from batched(batch, known)
    return _items(answer["results"], lambda item: str(item["doesnt_match"]["token"]))


def rank(table: str, a: str, b: str) -> Call[int]:
    answer = yield Request("GET", table_path(table, "rank"), params={"a": a, "b": b})
    return int(answer["rank"])


def ranks(table: str, pairs: Sequence[tuple[str, str]], known: Known) -> Call[list[int | None]]:
    answer = yield from pairs_batch(table, "rank", pairs, {}, known)
    found: list[int | None] = answer["ranks"]
    return found


def rank_batch(table: str, pairs: Sequence[tuple[str, str]], known: Known) -> Call[list[Any]]:
    answer = yield from pairs_batch(table, "rank", pairs, {}, known)
    return _values(answer["ranks"], answer["errors"])


def closer_than(
    table: str, a: str, b: str, limit: int, order: Literal["index", "score"]
) -> Call[tuple[int, list[Neighbor]]]:
    params = {"a": a, "b": b, "limit": limit, "order": order}
    answer = yield Request("GET", table_path(table, "closer-than"), params=params)
    return int(answer["count"]), _neighbors(answer["words"])


def n_similarity(table: str, a: Sequence[str], b: Sequence[str], skip_unknown: bool) -> Call[float]:
    body = {"a": list(a), "b": list(b), "skip_unknown": skip_unknown}
    answer = yield Request("POST", table_path(table, "n-similarity"), json=body)
    return float(answer["similarity"])


def n_similarity_batch(
    table: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], skip_unknown: bool, known: Known
) -> Call[list[float | ApiError]]:
    items = [{"a": list(a), "b": list(b)} for a, b in pairs]
    costs = (("max_words", [len(a) + len(b) for a, b in pairs]),)
    batch = Batch(table_path(table, "n-similarity"), "queries", items, {"skip_unknown": skip_unknown}, costs)
    answer = yield from batched(batch, known)
    return _items(answer["results"], lambda item: float(item["similarity"]))


def expected_rank(
    table: str, a: str, b: str, c: str, expect: str, method: Method, options: dict[str, Any]
) -> Call[dict[str, Any]]:
    body = {"a": a, "b": b, "c": c, "expect": expect, "k": 1, "method": method, **options}
    answer = yield Request("POST", table_path(table, "analogy"), json=body)
    expectation: dict[str, Any] = answer["expect"]
    return expectation


def compare(first: str, second: str, token: str, k: int, options: dict[str, Any]) -> Call[dict[str, Any]]:
    params = {"first": first, "second": second, "token": token, "k": k, **options}
    comparison: dict[str, Any] = yield Request("GET", "/v1/compare", params=params)
    return comparison


def compare_batch(
    first: str, second: str, tokens: Sequence[str], k: int, options: dict[str, Any], known: Known
) -> Call[list[dict[str, Any] | ApiError]]:
    """In runs; each token searches both tables."""
    body = {"first": first, "second": second, "k": k, **options}
    scans = tuple((table, "max_exact_rows", scanned(options)) for table in (first, second))
    batch = Batch("/v1/compare", "tokens", list(tokens), body, (("max_hits", [k] * len(tokens)),), scans)
    answer = yield from batched(batch, known)
    return _items(answer["results"], lambda item: item)


# ---------------------------------------------------------------------------------- map and export
def map_info(table: str, method: MapMethod) -> Call[dict[str, Any]]:
    info: dict[str, Any] = yield Request("GET", table_path(table, "map/info"), params={"method": method})
    return info


def map_points(table: str, method: MapMethod) -> Call[np.ndarray]:
    bounds = (yield from map_info(table, method))["bounds"]
    response = yield Request("GET", table_path(table, "map"), params={"method": method}, raw=True)
    return maps.points(response.content, bounds)


def map_labels(table: str) -> Call[list[str]]:
    response = yield Request("GET", table_path(table, "map/labels"), raw=True)
    return maps.labels(response.content)


def map_colours(table: str, column: str) -> Call[MapColours]:
    answer = yield Request("GET", table_path(table, "map/colours/" + segment(column)))
    return maps.colours(answer)


def export(table: str, rows: Sequence[str | int | dict[str, Any]], file: str) -> Call[str]:
    items = [r if isinstance(r, dict) else {"token": r} if isinstance(r, str) else {"id": r} for r in rows]
    response = yield Request("POST", table_path(table, "export"), json={"rows": items, "file": file}, raw=True)
    text: str = response.text
    return text
