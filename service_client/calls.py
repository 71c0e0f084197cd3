"""Each call of the API described once, for :class:`~service_client.Client` and :class:`~service_client.AsyncClient`
alike: a generator that yields the :class:`Request` s it makes (most make one), is sent each one's decoded answer,
and returns the answer shaped. The clients only carry the requests (``Client`` waiting, ``AsyncClient`` awaiting).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import httpx
import numpy as np

from service_client import maps
from service_client.maps import MapColours
from service_client.shapes import (
    READ_DOCUMENTS,
    WRITE_BYTES,
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
    _decoded,
    _document,
    _encoded,
    _error,
    _hits,
    _items,
    _neighbors,
    _retry_after,
    _values,
    counted_from,
    segment,
    spans,
    write_body,
)

Method = Literal["3cosadd", "3cosmul"]
MapMethod = Literal["pca", "tsne"]
RETRY_SECONDS = 10.0  # the longest wait a Retry-After makes before a retry
ENCODE_LIMIT = "max_encode_tokens"  # the ``limit`` of the refusal of a request's texts for their tokens
ANSWER_LIMIT = "max_answer_bytes"  # the ``limit`` of the refusal of an answer of too many bytes (documents read)
SIZING = frozenset({"max_batch", "max_body_bytes"})  # the limits the clients size their requests of many items by
T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """One request: ``json``, a body to encode (see :func:`~service_client.shapes._encoded`), or ``content``, one
    encoded already; ``raw``: the answer is the response itself (a binary or text body), not its JSON."""

    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    content: bytes | None = None
    raw: bool = False
    first: int = 0  # a write's: the index of its first document among the whole write's, which its error counts
    missing: Any = None  # not None: the answer of a server without the route (404), in place of its error
    halves: str | None = None  # a request of several items: its refusal for this limit is its answer (sent in halves)
    sized: bool = False  # sized by the limits read before: its refusal for one of SIZING is its answer (resent)

    def arguments(self) -> dict[str, Any]:
        """httpx's arguments for the request."""
        arguments: dict[str, Any] = {} if self.params is None else {"params": self.params}
        content = _encoded(self.json) if self.json is not None else self.content
        if content is not None:
            arguments.update(content=content, headers={"Content-Type": "application/json"})
        return arguments

    def answer(self, response: httpx.Response) -> Any:
        """The successful answer (decoded, unless ``raw``), or its error raised."""
        if response.status_code == 404 and self.missing is not None:
            return self.missing
        if not response.is_success:
            error = _error(response)
            if (self.halves is not None and _refused_for(error, self.halves)) or (self.sized and error.limit in SIZING):
                return error
            raise counted_from(error, self.first)
        return response if self.raw else _decoded(response)


Call = Generator[Request, Any, T]


def _refused_for(error: ApiError, limit: str) -> bool:
    """Whether ``error`` is a server's refusal of a whole request for ``limit``: the tokens its texts have the model
    run (before the model runs: nothing of it is written), or the bytes of its answer (before any is read)."""
    return error.status == 422 and error.code == "invalid_request" and error.details.get("limit") == limit


@dataclass
class Known:
    """What a client learns of its server and keeps: its limits (``GET /v1/limits``), read by the first call that
    needs them, and again when a request sized by them is refused for one (:func:`in_runs`: the server restarted
    with lower limits, or a front's shards changed); ``{}`` from a server that does not publish them (the clients
    then use the defaults' sizes)."""

    limits: dict[str, Any] | None = None


def retry_wait(response: httpx.Response) -> float | None:
    """The seconds to wait before sending a request again, for an ``overloaded`` answer (503 with ``Retry-After``:
    the server did not start it); None for any other answer."""
    wait = _retry_after(response)
    return None if response.status_code != 503 or wait is None else min(wait, RETRY_SECONDS)


def table_path(table: str, suffix: str) -> str:
    return f"/v1/tables/{segment(table)}/{suffix}"


# ------------------------------------------------------------------------------------------- server
def limits(known: Known) -> Call[dict[str, Any]]:
    if known.limits is None:
        known.limits = yield Request("GET", "/v1/limits", missing={})
    return dict(known.limits)


def batch_size(limits: dict[str, Any], most: int) -> int:
    """The items one batch request of the client's holds: ``most``, fewer if the server's ``max_batch`` is."""
    return min(most, int(limits.get("max_batch", most)))


def body_budget(limits: dict[str, Any]) -> int:
    """The bytes of JSON the client puts in one request of many documents or ids, about: half the server's body
    limit (``WRITE_BYTES`` for a server that does not say it)."""
    return int(limits.get("max_body_bytes", 2 * WRITE_BYTES)) // 2


# A run's requests: ``run(start, end, sized)`` sends items ``start`` to ``end`` and answers None, or, refused for a
# limit of SIZING while ``sized`` (its requests' refusal is then their answer), the first item it did not send.
Run = Callable[[int, int, bool], Call[int | None]]


def in_runs(sizes: Sequence[int], known: Known, most: int, run: Run) -> Call[None]:
    """The items whose encoded ``sizes`` are given, sent by ``run`` in runs of at most ``most`` items, fewer if the
    server's ``max_batch`` is (:func:`batch_size`), and :func:`body_budget` bytes. A run refused for one of those
    limits (lowered since they were read): the limits read again and the items from the first unsent on cut by them,
    once; a second refusal is raised. No items: no runs, and the limits not asked for."""
    if not sizes:
        return
    found = yield from limits(known)
    start, sized = 0, True
    while True:
        unsent = None
        for first, end in spans(sizes[start:], batch_size(found, most), body_budget(found)):
            unsent = yield from run(start + first, start + end, sized)
            if unsent is not None:
                break
        if unsent is None:
            return
        known.limits = None
        found = yield from limits(known)
        start, sized = unsent, False


# A request of items ``start`` to ``end``: ``send(start, end, sized, halves)`` sends them and answers None, or, refused
# for a limit of SIZING while ``sized`` or for ``halves`` (the request's refusal is then its answer), that refusal.
Send = Callable[[int, int, bool, str | None], Call[ApiError | None]]


def halved(send: Send, limit: str) -> Run:
    """A :data:`Run` of ``send``'s requests: items refused together for ``limit`` (too many tokens or bytes at once:
    the request did nothing) are sent again in halves, each halved again while refused, in order; one item refused
    so is raised. Refused for a limit of SIZING: the first item not sent."""

    def run(start: int, end: int, sized: bool) -> Call[int | None]:
        refused = yield from send(start, end, sized, limit if end - start > 1 else None)
        if refused is None:
            return None
        if not _refused_for(refused, limit):
            return start
        middle = (start + end) // 2
        for first, last in ((start, middle), (middle, end)):
            if (unsent := (yield from run(first, last, sized))) is not None:
                return unsent
        return None

    return run


def id_sizes(ids: Sequence[str | int]) -> list[int]:
    """Each id's bytes in a request's list of ids, about."""
    return [len(_encoded(ident)) + 1 for ident in ids]


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
    table: str, queries: Sequence[str | dict[str, Any]], k: int, options: dict[str, Any]
) -> Call[list[list[Neighbor] | ApiError]]:
    body = {"queries": list(queries), "k": k, **options}
    answer = yield Request("POST", table_path(table, "neighbors"), json=body)
    return _batch(answer["results"])


def similarity(table: str, a: str, b: str) -> Call[float]:
    answer = yield Request("GET", table_path(table, "similarity"), params={"a": a, "b": b})
    return float(answer["similarity"])


def similarities(table: str, pairs: Sequence[tuple[str, str]]) -> Call[list[float | None]]:
    answer = yield Request("POST", table_path(table, "similarity"), json={"pairs": [list(p) for p in pairs]})
    found: list[float | None] = answer["similarities"]
    return found


def similarity_batch(table: str, pairs: Sequence[tuple[str, str]], options: dict[str, Any]) -> Call[list[Any]]:
    body = {"pairs": [list(p) for p in pairs], **options}
    answer = yield Request("POST", table_path(table, "similarity"), json=body)
    return _values(answer["similarities"], answer["errors"])


def analogy(
    table: str, a: str, b: str, c: str, k: int, method: Method, options: dict[str, Any]
) -> Call[list[Neighbor]]:
    body = {"a": a, "b": b, "c": c, "k": k, "method": method, **options}
    answer = yield Request("POST", table_path(table, "analogy"), json=body)
    return _neighbors(answer["neighbors"])


def analogies(
    table: str, questions: Sequence[tuple[str, str, str]], k: int, method: Method, options: dict[str, Any]
) -> Call[list[list[Neighbor] | ApiError]]:
    body = {"queries": [{"a": a, "b": b, "c": c} for a, b, c in questions], "k": k, "method": method, **options}
    answer = yield Request("POST", table_path(table, "analogy"), json=body)
    return _batch(answer["results"])


def search(table: str, vector: Sequence[float], k: int, options: dict[str, Any]) -> Call[list[Neighbor]]:
    body = {"vector": [float(x) for x in vector], "k": k, **options}
    answer = yield Request("POST", table_path(table, "search"), json=body)
    return _neighbors(answer["neighbors"])


def search_batch(
    table: str, vectors: Sequence[Sequence[float]], k: int, options: dict[str, Any]
) -> Call[list[list[Neighbor] | ApiError]]:
    body = {"vectors": [[float(x) for x in v] for v in vectors], "k": k, **options}
    answer = yield Request("POST", table_path(table, "search"), json=body)
    return _batch(answer["results"])


def search_documents(table: str, k: int, query: dict[str, Any]) -> Call[Hits]:
    if "vector" in query:
        query = {**query, "vector": [float(x) for x in query["vector"]]}
    answer = yield Request("POST", table_path(table, "search"), json={"k": k, **query})
    return _hits(answer)


def search_documents_batch(
    table: str, queries: Sequence[dict[str, Any]], k: int, options: dict[str, Any]
) -> Call[list[Hits | ApiError]]:
    answer = yield Request("POST", table_path(table, "search"), json={"queries": list(queries), "k": k, **options})
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

    yield from in_runs(id_sizes(ids), known, READ_DOCUMENTS, halved(read, ANSWER_LIMIT))
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
            known.limits, sized = None, False
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
    encoded = [_encoded(_document(d)) for d in documents]

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
    yield from in_runs([len(e) + 1 for e in encoded], known, WRITE_DOCUMENTS, halved(write, ENCODE_LIMIT))
    return answers


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

    yield from in_runs(id_sizes(ids), known, WRITE_DOCUMENTS, delete)
    return answers


def delete_document(table: str, id: str | int) -> Call[dict[str, Any]]:
    answer: dict[str, Any] = yield Request("DELETE", table_path(table, f"documents/{segment(str(id))}"))
    return answer


def embed_details(table: str, texts: Sequence[str], pooling: str | None) -> Call[Embedded]:
    body: dict[str, Any] = {"texts": list(texts), **({"pooling": pooling} if pooling else {})}
    data = yield Request("POST", table_path(table, "embed"), json=body)
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
    points = [Point(p["token"], int(p["id"]), float(p["x"]), float(p["y"])) for p in data["points"]]
    ratios = [float(r) for r in data.get("explained_variance_ratio") or []]
    return Projection(points, ratios, data["method"], data.get("unknown", []), data.get("axes"), data.get("params"))


# -------------------------------------------------------------------------------------- diagnostics
def doesnt_match(table: str, words: Sequence[str], skip_unknown: bool) -> Call[str]:
    body = {"words": list(words), "skip_unknown": skip_unknown}
    answer = yield Request("POST", table_path(table, "doesnt-match"), json=body)
    return str(answer["doesnt_match"]["token"])


def doesnt_match_batch(table: str, queries: Sequence[Sequence[str]], skip_unknown: bool) -> Call[list[str | ApiError]]:
    body = {"queries": [list(words) for words in queries], "skip_unknown": skip_unknown}
    answer = yield Request("POST", table_path(table, "doesnt-match"), json=body)
    return _items(answer["results"], lambda item: str(item["doesnt_match"]["token"]))


def rank(table: str, a: str, b: str) -> Call[int]:
    answer = yield Request("GET", table_path(table, "rank"), params={"a": a, "b": b})
    return int(answer["rank"])


def ranks(table: str, pairs: Sequence[tuple[str, str]]) -> Call[list[int | None]]:
    answer = yield Request("POST", table_path(table, "rank"), json={"pairs": [list(p) for p in pairs]})
    found: list[int | None] = answer["ranks"]
    return found


def rank_batch(table: str, pairs: Sequence[tuple[str, str]]) -> Call[list[Any]]:
    answer = yield Request("POST", table_path(table, "rank"), json={"pairs": [list(p) for p in pairs]})
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
    table: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], skip_unknown: bool
) -> Call[list[float | ApiError]]:
    body = {"queries": [{"a": list(a), "b": list(b)} for a, b in pairs], "skip_unknown": skip_unknown}
    answer = yield Request("POST", table_path(table, "n-similarity"), json=body)
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
    first: str, second: str, tokens: Sequence[str], k: int, options: dict[str, Any]
) -> Call[list[dict[str, Any] | ApiError]]:
    body = {"first": first, "second": second, "tokens": list(tokens), "k": k, **options}
    answer = yield Request("POST", "/v1/compare", json=body)
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
