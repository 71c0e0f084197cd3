"""A small typed client for the embedding-search API, on httpx.

    from service_client import Client

    with Client("http://127.0.0.1:8000") as api:
        api.neighbors("glove-6b-50d", "heart", k=5)          # [Neighbor(token='pain', id=2901, score=0.827), ...]
        api.analogy("glove-6b-50d", "man", "king", "woman")  # queen first
        api.similarity("glove-6b-50d", "red", "blue")        # 0.89

Every error is raised as :class:`ApiError` (status, code, message, details): the server's answers, and also a
server that cannot be reached or does not answer in time (status 0) or an answer that is not JSON.
"""

from __future__ import annotations

import json as _json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
import numpy as np
import orjson

from service_client import maps
from service_client.maps import MapColours

Method = Literal["3cosadd", "3cosmul"]
MapMethod = Literal["pca", "tsne"]
WRITE_DOCUMENTS = 256  # documents per write request of upsert_many, at most
WRITE_BYTES = 2 * 1024 * 1024  # and about this much JSON: half the server's default body limit
RETRY_SECONDS = 10.0  # the longest wait a Retry-After makes before a retry
T = TypeVar("T")


@dataclass(frozen=True)
class Neighbor:
    token: str
    id: int
    score: float


@dataclass(frozen=True)
class Piece:
    """One token of a text as a model-token table's tokenizer splits it."""

    id: int
    token: str


@dataclass(frozen=True)
class TableInfo:
    name: str
    rows: int
    dim: int
    kind: str
    index: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Point:
    token: str
    id: int
    x: float
    y: float


@dataclass(frozen=True)
class Projection:
    """``explained_variance_ratio``: pca's and axes' (empty for tsne and umap); ``unknown``: the tokens
    ``skip_unknown`` left out; ``axes`` (method axes) and ``params`` (tsne, umap) as the server gives them."""

    points: list[Point]
    explained_variance_ratio: list[float]
    method: str = "pca"
    unknown: list[str] = field(default_factory=list)
    axes: dict[str, Any] | None = None
    params: dict[str, Any] | None = None


@dataclass(frozen=True)
class Hit:
    """A documents table's hit: the document's id, score, text and fields; ``ranks`` in keyword and hybrid modes
    (its rank in each list that holds it); ``vector``, its unit vector, when the search's ``include`` asks."""

    id: str | int
    score: float
    text: str | None
    fields: dict[str, Any]
    ranks: dict[str, int] = field(default_factory=dict)
    vector: list[float] | None = None


@dataclass(frozen=True)
class Hits:
    hits: list[Hit]
    passing: int | None = None  # with a filter: how many documents pass it


@dataclass(frozen=True)
class Embedded:
    """``POST .../embed``'s whole answer, per text: its unit vector; ``tokens``, how many tokens (words, or model
    pieces) the vector is made of; ``unknown``, how many words the table does not know (model tables: special
    pieces); ``truncated`` (transformer tables, else None), whether it was cut to the model's max_seq_length."""

    vectors: list[list[float]]
    tokens: list[int]
    unknown: list[int]
    pooling: str
    truncated: list[bool] | None = None


class ApiError(Exception):
    """An error response: HTTP status, the envelope's code and message, and its other fields; ``retry_after``,
    the seconds of the answer's ``Retry-After`` (503 ``overloaded``). No answer at all is status 0, code
    ``connection_error`` (refused, reset, closed) or ``timeout`` (a write may have been applied)."""

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any], retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[type[ApiError], tuple[Any, ...]]:
        """Pickled with its fields (an error raised in a worker process reaches the parent whole)."""
        return ApiError, (self.status, self.code, self.message, self.details, self.retry_after)

    @property
    def suggestions(self) -> list[str]:
        return list(self.details.get("suggestions", []))


# The HTTP status of each code a batch item's error can have (docs/api.md, "Errors"): the batch answers 200, the
# item's error is what the same query alone would have answered.
ITEM_STATUS = {
    "unknown_table": 404,
    "unknown_token": 404,
    "unknown_document": 404,
    "invalid_request": 422,
    "unauthorized": 401,
    "forbidden": 403,
    "not_ready": 503,
    "overloaded": 503,
    "shard_unavailable": 503,
    "shard_timeout": 504,
    "internal": 500,
}


def segment(text: str) -> str:
    """``text`` as one path segment: every reserved character escaped, dots too (so "." and ".." survive)."""
    return quote(text, safe="").replace(".", "%2E")


def _neighbors(items: list[dict[str, Any]]) -> list[Neighbor]:
    return [Neighbor(n["token"], int(n["id"]), float(n["score"])) for n in items]


def _hits(answer: dict[str, Any]) -> Hits:
    hits = [
        Hit(h["id"], h["score"], h.get("text"), h.get("fields", {}), h.get("ranks", {}), h.get("vector"))
        for h in answer["hits"]
    ]
    return Hits(hits, answer.get("passing"))


def _item_error(envelope: dict[str, Any]) -> ApiError:
    """A batch item's error, with the status the same query alone would have answered."""
    error = dict(envelope)
    code = error.pop("code")
    return ApiError(ITEM_STATUS.get(code, 422), code, error.pop("message"), error)


def _items(results: list[dict[str, Any]], shape: Callable[[dict[str, Any]], T]) -> list[T | ApiError]:
    """Per item of a batch: its answer shaped, or the item's error (the batch itself succeeded)."""
    return [_item_error(item["error"]) if "error" in item else shape(item) for item in results]


def _values(values: list[Any], errors: list[dict[str, Any] | None]) -> list[Any]:
    """Per pair of ``POST .../similarity`` or ``.../rank``: its value, or the error its null stands for."""
    return [value if error is None else _item_error(error) for value, error in zip(values, errors, strict=True)]


def _batch(results: list[dict[str, Any]]) -> list[list[Neighbor] | ApiError]:
    return _items(results, lambda item: _neighbors(item["neighbors"]))


def _listed(value: Any) -> Any:
    """A NumPy array or scalar anywhere in a body (a batch item's vector) as the floats and lists JSON holds."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(f"{type(value).__name__} cannot be written as JSON")


def _encoded(value: Any) -> bytes:
    """``value`` as a JSON request body: orjson, or ``json`` for what orjson cannot write (an integer beyond 64
    bits); NaN and infinities are written as null, which the server refuses as it refuses any value that is not
    a number."""
    try:
        return orjson.dumps(value, default=_listed)
    except orjson.JSONEncodeError:
        return _json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_listed).encode()


def write_bodies(documents: Sequence[dict[str, Any]]) -> list[bytes]:
    """The bodies of ``POST .../documents`` for ``documents`` (ready to send: :func:`_document`), each document
    encoded once: runs of at most ``WRITE_DOCUMENTS`` and about ``WRITE_BYTES`` of JSON, so that each request stays
    under the server's default body limit whatever the vectors' size; a document larger than that goes alone (and
    the server says if it is too large)."""
    runs: list[list[bytes]] = []
    size = 0
    for encoded in map(_encoded, documents):
        if not runs or len(runs[-1]) == WRITE_DOCUMENTS or size + len(encoded) > WRITE_BYTES:
            runs.append([])
            size = 0
        runs[-1].append(encoded)
        size += len(encoded)
    return [b'{"documents":[' + b",".join(run) + b"]}" for run in runs]


def _document(document: dict[str, Any]) -> dict[str, Any]:
    """A document to write, its vector (a list or an array of any float type) as plain floats."""
    if document.get("vector") is None:
        return {k: v for k, v in document.items() if k != "vector"}
    return {**document, "vector": [float(x) for x in document["vector"]]}


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds of the answer's ``Retry-After`` (a number of seconds; an HTTP date counts as one second)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return 1.0


def _error(response: httpx.Response) -> ApiError:
    """The answer's error envelope as an :class:`ApiError`; an answer that is not one (a proxy's HTML page) is code
    ``http_error``, its text's beginning the message."""
    retry_after = _retry_after(response)
    try:
        error = dict(response.json()["error"])
        code, message = str(error.pop("code")), str(error.pop("message", ""))
    except (ValueError, KeyError, TypeError):
        text = " ".join(response.text[:200].split())
        return ApiError(response.status_code, "http_error", text or response.reason_phrase, {}, retry_after)
    return ApiError(response.status_code, code, message, error, retry_after)


class Client:
    """Synchronous client; ``options`` of query methods are ``exact``, ``restrict``, ``skip_special``, ..."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 30.0,
        http: httpx.Client | None = None,
        api_key: str | None = None,
        retries: int = 2,
    ) -> None:
        """``api_key``: sent as ``X-API-Key`` (a read key, or a write key for the write methods). ``retries``: how
        many times a request answered 503 with ``Retry-After`` (``overloaded``: the server did not start it) is
        sent again, after the seconds it says (at most ``RETRY_SECONDS``). ``http``: an ``httpx.Client`` of the
        caller's, already pointed at the server (``base_url`` and ``timeout`` are then its own); the caller closes
        it, :meth:`close` does not."""
        self.retries = retries
        self._owned = http is None
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        if api_key:
            self.http.headers["X-API-Key"] = api_key

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The server's answer, after the retries an ``overloaded`` answer takes."""
        response = self._once(method, path, **kwargs)
        for _ in range(self.retries):
            wait = _retry_after(response)
            if response.status_code != 503 or wait is None:
                break
            time.sleep(min(wait, RETRY_SECONDS))
            response = self._once(method, path, **kwargs)
        return response

    def _once(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request's answer; none is an :class:`ApiError` of status 0."""
        try:
            return self.http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            message = f"no answer from {exc.request.url} in time ({type(exc).__name__})"
            raise ApiError(0, "timeout", message, {}) from exc
        except httpx.TransportError as exc:
            raise ApiError(0, "connection_error", f"{exc.request.url}: {exc}", {}) from exc

    def _answer(self, method: str, path: str, json: Any = None, **kwargs: Any) -> httpx.Response:
        """The successful answer, or its error raised; ``json``, the body (see :func:`_encoded`)."""
        if json is not None:
            kwargs["content"] = _encoded(json)
        if "content" in kwargs:  # a JSON body, encoded here or by the caller
            kwargs["headers"] = {**kwargs.get("headers", {}), "Content-Type": "application/json"}
        response = self._send(method, path, **kwargs)
        if not response.is_success:
            raise _error(response)
        return response

    def _call(self, method: str, path: str, json: Any = None, **kwargs: Any) -> Any:
        """The decoded JSON body (Any: each method annotates the part of it that it reads). Bodies are encoded and
        answers decoded with orjson: a quarter of the client's own CPU per search call, which is what limits
        many threads of one client process (BENCHMARKS.md section 6); see :func:`_encoded`."""
        response = self._answer(method, path, json, **kwargs)
        try:
            return orjson.loads(response.content)
        except orjson.JSONDecodeError:
            text = " ".join(response.text[:200].split())
            raise ApiError(response.status_code, "invalid_response", f"the answer is not JSON: {text}", {}) from None

    @staticmethod
    def _path(table: str, suffix: str) -> str:
        return f"/v1/tables/{segment(table)}/{suffix}"

    # --------------------------------------------------------------------------------------- server
    def ready(self) -> bool:
        """Whether every table is loaded (``GET /readyz``); False too while the server cannot be reached."""
        try:
            return self.http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    def reload(self) -> dict[str, Any]:
        """Re-scan the data directory (``POST /v1/admin/reload``; ``api_key`` the server's ``EMBEDDING_API_KEY``):
        ``{"loaded", "unchanged", "refused", "missing", "removed", "ready", "seconds", ...}``."""
        report: dict[str, Any] = self._call("POST", "/v1/admin/reload")
        return report

    def tables(self) -> list[TableInfo]:
        keys = ("name", "rows", "dim", "kind", "index")
        return [
            TableInfo(
                t["name"],
                t["rows"],
                t["dim"],
                t["kind"],
                t["index"],
                extra={k: v for k, v in t.items() if k not in keys},
            )
            for t in self._call("GET", "/v1/tables")["tables"]
        ]

    def table(self, table: str) -> dict[str, Any]:
        info: dict[str, Any] = self._call("GET", f"/v1/tables/{segment(table)}")
        return info

    def vector(self, table: str, token: str, normalized: bool = False) -> list[float]:
        path = self._path(table, "tokens/" + segment(token))
        vector: list[float] = self._call("GET", path, params={"normalized": normalized})["vector"]
        return vector

    def vector_of_id(self, table: str, id: int, normalized: bool = False) -> list[float]:
        """The vector of the row ``id`` (``GET .../ids/{id}``)."""
        path = self._path(table, f"ids/{int(id)}")
        vector: list[float] = self._call("GET", path, params={"normalized": normalized})["vector"]
        return vector

    def tokenize(self, table: str, text: str) -> list[Piece]:
        """``text`` split by a model-token table's own tokenizer (``POST .../tokenize``)."""
        tokens = self._call("POST", self._path(table, "tokenize"), json={"text": text})["tokens"]
        return [Piece(int(t["id"]), t["token"]) for t in tokens]

    # -------------------------------------------------------------------------------------- queries
    def neighbors(self, table: str, token: str, k: int = 10, **options: Any) -> list[Neighbor]:
        """Nearest neighbours of ``token``, itself left out."""
        return _neighbors(
            self._call("POST", self._path(table, "neighbors"), json={"token": token, "k": k, **options})["neighbors"]
        )

    def most_similar(
        self, table: str, positive: Sequence[str], negative: Sequence[str] = (), k: int = 10, **options: Any
    ) -> list[Neighbor]:
        """gensim ``most_similar`` semantics: the mean of unit rows, the inputs left out."""
        body = {"positive": list(positive), "negative": list(negative), "k": k, **options}
        return _neighbors(self._call("POST", self._path(table, "neighbors"), json=body)["neighbors"])

    def neighbors_batch(
        self, table: str, queries: Sequence[str | dict[str, Any]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        body = {"queries": list(queries), "k": k, **options}
        return _batch(self._call("POST", self._path(table, "neighbors"), json=body)["results"])

    def similarity(self, table: str, a: str, b: str) -> float:
        return float(self._call("GET", self._path(table, "similarity"), params={"a": a, "b": b})["similarity"])

    def similarities(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        body = {"pairs": [list(p) for p in pairs]}
        similarities: list[float | None] = self._call("POST", self._path(table, "similarity"), json=body)[
            "similarities"
        ]
        return similarities

    def similarity_batch(self, table: str, pairs: Sequence[tuple[str, str]], **options: Any) -> list[float | ApiError]:
        """:meth:`similarities` with, for a pair it cannot score, the item's :class:`ApiError` (an unknown token's
        suggestions) in place of None; ``options``: ``compose``."""
        body = {"pairs": [list(p) for p in pairs], **options}
        answer = self._call("POST", self._path(table, "similarity"), json=body)
        similarities: list[float | ApiError] = _values(answer["similarities"], answer["errors"])
        return similarities

    def analogy(
        self, table: str, a: str, b: str, c: str, k: int = 10, method: Method = "3cosadd", **options: Any
    ) -> list[Neighbor]:
        """``a`` is to ``b`` as ``c`` is to ?; a, b and c left out."""
        body = {"a": a, "b": b, "c": c, "k": k, "method": method, **options}
        return _neighbors(self._call("POST", self._path(table, "analogy"), json=body)["neighbors"])

    def analogies(
        self,
        table: str,
        questions: Sequence[tuple[str, str, str]],
        k: int = 10,
        method: Method = "3cosadd",
        **options: Any,
    ) -> list[list[Neighbor] | ApiError]:
        body = {"queries": [{"a": a, "b": b, "c": c} for a, b, c in questions], "k": k, "method": method, **options}
        return _batch(self._call("POST", self._path(table, "analogy"), json=body)["results"])

    def search(self, table: str, vector: Sequence[float], k: int = 10, **options: Any) -> list[Neighbor]:
        body = {"vector": [float(x) for x in vector], "k": k, **options}
        return _neighbors(self._call("POST", self._path(table, "search"), json=body)["neighbors"])

    def search_batch(
        self, table: str, vectors: Sequence[Sequence[float]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        body = {"vectors": [[float(x) for x in v] for v in vectors], "k": k, **options}
        return _batch(self._call("POST", self._path(table, "search"), json=body)["results"])

    def search_documents(self, table: str, k: int = 10, **query: Any) -> Hits:
        """A documents table's search: ``query`` is the request's fields (``vector``, ``id``, ``positive``,
        ``negative``, ``text``, ``mode``, ``filter``, ``offset``, ``min_score``, ``fields``, ``diversity``, ...)."""
        if "vector" in query:
            query["vector"] = [float(x) for x in query["vector"]]
        return _hits(self._call("POST", self._path(table, "search"), json={"k": k, **query}))

    def search_documents_batch(
        self, table: str, queries: Sequence[dict[str, Any]], k: int = 10, **options: Any
    ) -> list[Hits | ApiError]:
        body = {"queries": list(queries), "k": k, **options}
        return _items(self._call("POST", self._path(table, "search"), json=body)["results"], _hits)

    def document(
        self,
        table: str,
        id: str | int,
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """One document: ``{"id", "text", "fields"}`` (and ``"vector"`` when asked, its unit vector if
        ``normalized``); ``fields``: only these of its fields."""
        params: dict[str, str] = {"vector": "true"} if vector else {}
        if normalized:
            params["normalized"] = "true"
        if fields is not None:
            params["fields"] = ",".join(fields)
        document: dict[str, Any] = self._call("GET", self._path(table, f"documents/{segment(str(id))}"), params=params)
        return document

    def fields(self, table: str) -> dict[str, Any]:
        """A documents table's fields (``GET .../fields``): each one's type, common values or range."""
        fields: dict[str, Any] = self._call("GET", self._path(table, "fields"))
        return fields

    # ---------------------------------------------------------------------------------------- writes
    def upsert_documents(self, table: str, documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Add documents, or replace them by id: each ``{"id", "text", "vector", "fields"}`` (no ``vector``: the
        table's encoder embeds the text). Answers ``{"table", "sequence", "upserted"}``; needs a write key."""
        body = {"documents": [_document(d) for d in documents]}
        answer: dict[str, Any] = self._call("POST", self._path(table, "documents"), json=body)
        return answer

    def upsert_many(self, table: str, documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`upsert_documents` for any number of documents, in as many requests as :func:`write_bodies`
        makes of them (each answered as one write: a request refused leaves the runs before it written)."""
        path = self._path(table, "documents")
        bodies = write_bodies([_document(d) for d in documents])
        return [self._call("POST", path, content=body) for body in bodies]

    def delete_many(self, table: str, ids: Sequence[str | int]) -> list[dict[str, Any]]:
        """:meth:`delete_documents` by ``ids``, ``WRITE_DOCUMENTS`` ids a request."""
        runs = range(0, len(ids), WRITE_DOCUMENTS)
        return [self.delete_documents(table, ids=ids[start : start + WRITE_DOCUMENTS]) for start in runs]

    def delete_documents(
        self, table: str, ids: Sequence[str | int] | None = None, filter: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Delete documents by ``ids`` or by a search ``filter``: ``{"table", "sequence", "deleted"}``."""
        body = {"ids": list(ids)} if ids is not None else {"filter": filter}
        answer: dict[str, Any] = self._call("POST", self._path(table, "documents/delete"), json=body)
        return answer

    def delete_document(self, table: str, id: str | int) -> dict[str, Any]:
        answer: dict[str, Any] = self._call("DELETE", self._path(table, f"documents/{segment(str(id))}"))
        return answer

    def embed(self, table: str, texts: Sequence[str], pooling: str | None = None) -> list[list[float]]:
        """Vectors of ``texts`` by the table's encoder (``POST .../embed``)."""
        return self.embed_details(table, texts, pooling).vectors

    def embed_details(self, table: str, texts: Sequence[str], pooling: str | None = None) -> Embedded:
        """:meth:`embed`'s whole answer: the vectors, and per text its tokens, unknown words and truncation."""
        body: dict[str, Any] = {"texts": list(texts), **({"pooling": pooling} if pooling else {})}
        data = self._call("POST", self._path(table, "embed"), json=body)
        vectors = [list(v) for v in data["vectors"]]
        return Embedded(vectors, list(data["tokens"]), list(data["unknown"]), data["pooling"], data.get("truncated"))

    def contextual(self, table: str, texts: Sequence[str], token: str | None = None, k: int = 5) -> dict[str, Any]:
        """A transformer table's last-layer token vectors of ``texts`` (``POST .../contextual``): ``{"table",
        "texts": [{"text", "truncated", "tokens"}]}``; with ``token``, a word followed through the texts, also
        ``"token"``: its occurrences, their cosines with its static row and each other, their ``k`` nearest rows."""
        body: dict[str, Any] = {"texts": list(texts), "k": k, **({"token": token} if token is not None else {})}
        answer: dict[str, Any] = self._call("POST", self._path(table, "contextual"), json=body)
        return answer

    def project(
        self,
        table: str,
        tokens: Sequence[str],
        skip_unknown: bool = False,
        method: Literal["pca", "axes", "tsne", "umap"] = "pca",
        **options: Any,
    ) -> Projection:
        """The tokens in two dimensions; ``options`` are the method's (``x_axis``, ``y_axis``, ``perplexity``,
        ``n_neighbors``, ``min_dist``, ``seed``, ...)."""
        body = {"tokens": list(tokens), "method": method, "skip_unknown": skip_unknown, **options}
        data = self._call("POST", self._path(table, "project"), json=body)
        points = [Point(p["token"], int(p["id"]), float(p["x"]), float(p["y"])) for p in data["points"]]
        ratios = [float(r) for r in data.get("explained_variance_ratio") or []]
        return Projection(points, ratios, data["method"], data.get("unknown", []), data.get("axes"), data.get("params"))

    # ---------------------------------------------------------------------------------- diagnostics
    def doesnt_match(self, table: str, words: Sequence[str], skip_unknown: bool = False) -> str:
        """gensim ``doesnt_match``: the word least similar to the mean of the words' unit rows."""
        body = {"words": list(words), "skip_unknown": skip_unknown}
        token: str = self._call("POST", self._path(table, "doesnt-match"), json=body)["doesnt_match"]["token"]
        return token

    def doesnt_match_batch(
        self, table: str, queries: Sequence[Sequence[str]], skip_unknown: bool = False
    ) -> list[str | ApiError]:
        """:meth:`doesnt_match` of each word list: per list the odd one out, or the item's :class:`ApiError`."""
        body = {"queries": [list(words) for words in queries], "skip_unknown": skip_unknown}
        results = self._call("POST", self._path(table, "doesnt-match"), json=body)["results"]
        return _items(results, lambda item: str(item["doesnt_match"]["token"]))

    def rank(self, table: str, a: str, b: str) -> int:
        """gensim ``rank(a, b)``: where ``b`` ranks among the neighbours of ``a`` (1: the nearest)."""
        return int(self._call("GET", self._path(table, "rank"), params={"a": a, "b": b})["rank"])

    def ranks(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        body = {"pairs": [list(p) for p in pairs]}
        ranks: list[int | None] = self._call("POST", self._path(table, "rank"), json=body)["ranks"]
        return ranks

    def rank_batch(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[int | ApiError]:
        """:meth:`ranks` with, for a pair it cannot rank, the item's :class:`ApiError` in place of None."""
        answer = self._call("POST", self._path(table, "rank"), json={"pairs": [list(p) for p in pairs]})
        ranks: list[int | ApiError] = _values(answer["ranks"], answer["errors"])
        return ranks

    def closer_than(
        self, table: str, a: str, b: str, limit: int = 100, order: Literal["index", "score"] = "index"
    ) -> tuple[int, list[Neighbor]]:
        """gensim ``closer_than(a, b)``: how many words are closer to ``a`` than ``b`` is, and the first ``limit``."""
        params = {"a": a, "b": b, "limit": limit, "order": order}
        data = self._call("GET", self._path(table, "closer-than"), params=params)
        return int(data["count"]), _neighbors(data["words"])

    def n_similarity(self, table: str, a: Sequence[str], b: Sequence[str], skip_unknown: bool = False) -> float:
        """gensim ``n_similarity``: cosine of the mean vectors of two word sets."""
        body = {"a": list(a), "b": list(b), "skip_unknown": skip_unknown}
        return float(self._call("POST", self._path(table, "n-similarity"), json=body)["similarity"])

    def n_similarity_batch(
        self, table: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], skip_unknown: bool = False
    ) -> list[float | ApiError]:
        """:meth:`n_similarity` of each pair of word sets: per pair the cosine, or the item's :class:`ApiError`."""
        body = {"queries": [{"a": list(a), "b": list(b)} for a, b in pairs], "skip_unknown": skip_unknown}
        results = self._call("POST", self._path(table, "n-similarity"), json=body)["results"]
        return _items(results, lambda item: float(item["similarity"]))

    def expected_rank(
        self, table: str, a: str, b: str, c: str, expect: str, method: Method = "3cosadd", **options: Any
    ) -> dict[str, Any]:
        """Where ``expect`` ranks among the answers to "a is to b as c is to ?": token, id, rank, score, margin."""
        body = {"a": a, "b": b, "c": c, "expect": expect, "k": 1, "method": method, **options}
        expectation: dict[str, Any] = self._call("POST", self._path(table, "analogy"), json=body)["expect"]
        return expectation

    def compare(self, first: str, second: str, token: str, k: int = 10, **options: Any) -> dict[str, Any]:
        """``token``'s neighbours in two tables side by side: overlap (overlap@k), shared, first, second."""
        params = {"first": first, "second": second, "token": token, "k": k, **options}
        comparison: dict[str, Any] = self._call("GET", "/v1/compare", params=params)
        return comparison

    def compare_batch(
        self, first: str, second: str, tokens: Sequence[str], k: int = 10, **options: Any
    ) -> list[dict[str, Any] | ApiError]:
        """:meth:`compare` of each token: per token the comparison, or the item's :class:`ApiError`."""
        body = {"first": first, "second": second, "tokens": list(tokens), "k": k, **options}
        results = self._call("POST", "/v1/compare", json=body)["results"]
        return _items(results, lambda item: item)

    # ------------------------------------------------------------------------------ map and export
    def map_info(self, table: str, method: MapMethod = "pca") -> dict[str, Any]:
        """How the whole-table map is laid out (``GET .../map/info``): ``rows``, ``bounds``, ``method``,
        ``params``, ``columns`` (what :meth:`map_colours` takes), ..."""
        info: dict[str, Any] = self._call("GET", self._path(table, "map/info"), params={"method": method})
        return info

    def map_points(self, table: str, method: MapMethod = "pca") -> np.ndarray:
        """Every row's map position (row id = position) as float64 x, y (rows x 2), read from ``GET .../map``'s
        int16 codes (to within 1/65534 of each axis's span) and :meth:`map_info`'s bounds."""
        bounds = self.map_info(table, method)["bounds"]
        return maps.points(self._answer("GET", self._path(table, "map"), params={"method": method}).content, bounds)

    def map_labels(self, table: str) -> list[str]:
        """Every row's label, row id = position (``GET .../map/labels``)."""
        return maps.labels(self._answer("GET", self._path(table, "map/labels")).content)

    def map_colours(self, table: str, column: str) -> MapColours:
        """A metadata column (or a model table's token kind) as ``categories`` and a uint8 ``codes`` array, one a
        row (``GET .../map/colours/{column}``)."""
        return maps.colours(self._call("GET", self._path(table, "map/colours/" + segment(column))))

    def export(
        self, table: str, rows: Sequence[str | int | dict[str, Any]], file: Literal["vectors", "metadata"]
    ) -> str:
        """Rows as the Embedding Projector's ``vectors.tsv`` or ``metadata.tsv`` (``POST .../export``): each row a
        token, a row id, or ``{"token" or "id", "group"}``."""
        items = [r if isinstance(r, dict) else {"token": r} if isinstance(r, str) else {"id": r} for r in rows]
        return self._answer("POST", self._path(table, "export"), json={"rows": items, "file": file}).text
