"""What the client sends and reads back: the answers' dataclasses, :class:`ApiError`, and the helpers that encode
a request's body and shape an answer, shared by :class:`~service_client.Client` and
:class:`~service_client.AsyncClient`."""

from __future__ import annotations

import json as _json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import orjson
from httpx._utils import URLPattern, get_environment_proxies  # how httpx reads the proxy settings

WRITE_DOCUMENTS = 256  # documents per write request of upsert_many, at most
READ_DOCUMENTS = 1024  # ids per request of documents(), at most: the server's default max_batch
WRITE_BYTES = 2 * 1024 * 1024  # and about this much JSON: half the server's default body limit
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
    text: str = ""  # the first of the tokens asked for that found this row, as sent (older servers: its token)


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
    """A search's hits; ``passing``, with a filter, how many documents pass it; ``fallback``, a hybrid search
    answered by one list alone (``{"mode", "reason"}``: the other had nothing); ``partial``, the front of a sharded
    table answering without the shards that did not (``{"shards", "answered", "missing"}``)."""

    hits: list[Hit]
    passing: int | None = None
    fallback: dict[str, Any] | None = None
    partial: dict[str, Any] | None = None


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

    @property
    def limit(self) -> str | None:
        """The name of the server's limit (as ``GET /v1/limits`` gives it) the request was refused for being over."""
        limit = self.details.get("limit")
        return None if limit is None else str(limit)


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


def server_address(base_url: str) -> str:
    """``base_url`` as a client's address, or a ValueError for one that could never be reached (no scheme: httpx
    would refuse every request, and ``ready()`` answer False for ever)."""
    problem = f"base_url {base_url!r} is not an address of the form http://host:port (or https://)"
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as exc:  # not a ValueError: a port that is no number, an unclosed [
        raise ValueError(f"{problem}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(problem)
    return base_url


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
    return Hits(hits, answer.get("passing"), answer.get("fallback"), answer.get("partial"))


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


def _batch(results: list[dict[str, Any]], table: str = "") -> list[list[Neighbor] | ApiError]:
    return _items(results, lambda item: _searched(item, table))


def _searched(answer: dict[str, Any], table: str) -> list[Neighbor]:
    """A word table's neighbours in an answer of ``POST .../search``; a documents table answers hits, which
    ``search_documents`` reads (their ids, texts and fields are no ``Neighbor``)."""
    if "neighbors" not in answer and "hits" in answer:
        raise ValueError(f"table {table!r} holds documents: search it with search_documents, which reads its hits")
    return _neighbors(answer["neighbors"])


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
    the server says if it is too large). The clients size theirs by the server's limits (``GET /v1/limits``)."""
    encoded = [_encoded(document) for document in documents]
    runs = spans([len(e) + 1 for e in encoded], WRITE_DOCUMENTS, WRITE_BYTES)
    return [write_body(encoded[start:end]) for start, end in runs]


def write_body(encoded: Sequence[bytes]) -> bytes:
    """The body of ``POST .../documents`` of the documents ``encoded`` (:func:`_encoded`)."""
    return b'{"documents":[' + b",".join(encoded) + b"]}"


def spans(
    sizes: Sequence[int], most: int, budget: int, also: Sequence[tuple[Sequence[int], int]] = ()
) -> list[tuple[int, int]]:
    """The runs ``(start, end)`` of consecutive items whose sizes are ``sizes``: at most ``most`` items and
    ``budget`` of size each, and of each ``(costs, bound)`` of ``also`` (the items' costs), at most ``bound``;
    every item in one (an item over a budget alone)."""
    costs = [(sizes, budget), *also]
    runs: list[tuple[int, int]] = []
    start, totals = 0, [0] * len(costs)
    for i in range(len(sizes)):
        if i > start and (i - start == most or any(t + c[i] > b for t, (c, b) in zip(totals, costs, strict=True))):
            runs.append((start, i))
            start, totals = i, [0] * len(costs)
        totals = [t + c[i] for t, (c, _) in zip(totals, costs, strict=True)]
    return [*runs, (start, len(sizes))] if sizes else runs


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


def counted_from(error: ApiError, first: int) -> ApiError:
    """``error`` of a write request whose documents are a longer write's from ``first`` on: the document it names
    counted among the write's, ``documents[i]`` (the server's check of a document, and its ``document``) or
    ``documents.i`` (of the body's shape: a vector over ``max_dim``), and the documents before named as
    written, whatever refused it (a document too big for any request's ``max_body_bytes`` names none)."""
    if first == 0:
        return error
    found = re.match(r"documents\[(\d+)\]", error.message)
    if found is not None:
        message = f"documents[{first + int(found.group(1))}]{error.message[found.end() :]}"
        details = dict(error.details)
        if isinstance(details.get("document"), int):
            details["document"] += first
    else:
        shaped = renumbered(error, "documents", first)
        message, details = shaped.message, shaped.details
    message += f" (documents[0] to documents[{first - 1}] were written, by the requests before)"
    return ApiError(error.status, error.code, message, details, error.retry_after)


def renumbered(error: ApiError, key: str, first: int) -> ApiError:
    """``error`` of a batch request whose items (``key``) are a longer batch's from ``first`` on: each item it names
    (``queries.3: ...; queries.5: ...``, and in its ``details``' ``loc``) counted among the batch's."""
    place = re.compile(rf"(?:^|(?<=; )){re.escape(key)}\.(\d+)")  # each problem of the message names its place
    if first == 0 or place.search(error.message) is None:
        return error
    message = place.sub(lambda found: f"{key}.{first + int(found.group(1))}", error.message)
    details = dict(error.details)
    if isinstance(details.get("details"), list):
        details["details"] = [_renumbered_loc(item, key, first) for item in details["details"]]
    return ApiError(error.status, error.code, message, details, error.retry_after)


def _renumbered_loc(item: Any, key: str, first: int) -> Any:
    loc = item.get("loc") if isinstance(item, dict) else None
    if isinstance(loc, list) and key in loc[:-1] and str(loc[loc.index(key) + 1]).isdigit():
        at = loc.index(key) + 1
        return {**item, "loc": [*loc[:at], type(loc[at])(first + int(loc[at])), *loc[at + 1 :]]}
    return item


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


def _decoded(response: httpx.Response) -> Any:
    """The answer's JSON body, decoded with orjson (a quarter of the client's own CPU per search call, which is what
    limits many threads of one client process: BENCHMARKS.md section 6)."""
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        text = " ".join(response.text[:200].split())
        raise ApiError(response.status_code, "invalid_response", f"the answer is not JSON: {text}", {}) from None


@contextmanager
def encodable() -> Iterator[None]:
    """Text that UTF-8 cannot encode (a lone UTF-16 surrogate, as ``json.loads('"\\ud800"')`` gives and a file
    name decoded with ``surrogateescape`` holds) is refused before its request is sent, as the server refuses such
    text (422 ``invalid_request``), rather than raised as the encoder's ``UnicodeEncodeError``."""
    try:
        yield
    except UnicodeEncodeError as exc:
        if exc.encoding != "utf-8":  # another encoding's (ASCII's, of a header): not the text's
            raise
        text = exc.object[exc.start : exc.end]
        message = f"text must be valid Unicode (a lone UTF-16 surrogate, {text!r}, is not): its request was not sent"
        raise ApiError(422, "invalid_request", message, {}) from exc


def _no_answer(exc: httpx.TransportError, owned: bool) -> ApiError:
    """No answer to a request as an :class:`ApiError` of status 0; ``owned``: the request's httpx client is the
    client's own, which sends it through the proxy the environment names (whose connection it then was)."""
    proxy = _proxy_of(exc.request.url) if owned else ""
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(0, "timeout", f"no answer from {exc.request.url}{proxy} in time ({type(exc).__name__})", {})
    return ApiError(0, "connection_error", f"{exc.request.url}{proxy}: {exc}", {})


def _proxy_of(url: httpx.URL) -> str:
    """The proxy the environment names for ``url`` as words of an error's message (``""``: none, or ``url``'s host
    in ``no_proxy``), decided by httpx's own reading of it (its NO_PROXY rules are not urllib's: ``host:port``,
    ``.domain``), without the proxy's user and password."""
    mounts = sorted(get_environment_proxies().items(), key=lambda mount: URLPattern(mount[0]))  # httpx's order
    pattern, proxy = next(
        ((pattern, proxy) for pattern, proxy in mounts if URLPattern(pattern).matches(url)), ("", None)
    )
    if proxy is None:  # none, or a NO_PROXY of the host
        return ""
    variable = f"{pattern.split(':')[0].upper()}_PROXY"  # http://, https:// or all://
    shown = httpx.URL(proxy).copy_with(userinfo=b"")
    return f" through the proxy {shown} ({variable}; NO_PROXY={url.host} reaches the server directly)"
