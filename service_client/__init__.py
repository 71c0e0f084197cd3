"""A small typed client for the embedding-search API, on httpx.

    from service_client import Client

    with Client("http://127.0.0.1:8000") as api:
        api.neighbors("glove-6b-50d", "heart", k=5)          # [Neighbor(token='pain', id=2901, score=0.827), ...]
        api.analogy("glove-6b-50d", "man", "king", "woman")  # queen first
        api.similarity("glove-6b-50d", "red", "blue")        # 0.89

    async with AsyncClient("http://127.0.0.1:8000") as api:  # asyncio: the same calls, awaited
        await api.neighbors("glove-6b-50d", "heart", k=5)

Every error of the server or of reaching it is raised as :class:`ApiError` (status, code, message, details): the
server's answers, and also a server that cannot be reached or does not answer in time (status 0), an answer that is
not JSON, and text that UTF-8 cannot encode (a lone surrogate: 422, not sent). A misuse of the client itself is a
``ValueError``, as in the standard library: an address without its scheme, an id twice in one write, a documents
table searched with ``search`` or ``search_batch`` (``search_documents`` reads its hits), a store's metadata its
table cannot keep. Each call is described once (:mod:`service_client.calls`); the two clients only carry its
requests, and raise the same errors.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import Any, Literal, cast

import httpx
import numpy as np

from service_client import calls, runs
from service_client.async_client import AsyncClient
from service_client.calls import RETRY_SECONDS, MapMethod, Method, retry_wait
from service_client.maps import MapColours
from service_client.request import Call, Request
from service_client.runs import Known
from service_client.shapes import (
    ITEM_STATUS,
    READ_DOCUMENTS,
    WRITE_BYTES,
    WRITE_DOCUMENTS,
    ApiError,
    Embedded,
    Hit,
    Hits,
    Neighbor,
    Piece,
    Point,
    Projection,
    T,
    TableInfo,
    _no_answer,
    encodable,
    segment,
    server_address,
    write_bodies,
)

__all__ = [
    "ITEM_STATUS",
    "READ_DOCUMENTS",
    "RETRY_SECONDS",
    "WRITE_BYTES",
    "WRITE_DOCUMENTS",
    "ApiError",
    "AsyncClient",
    "Client",
    "Embedded",
    "Hit",
    "Hits",
    "MapMethod",
    "Method",
    "Neighbor",
    "Piece",
    "Point",
    "Projection",
    "TableInfo",
    "segment",
    "write_bodies",
]


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
        many times a request answered 503 with ``Retry-After`` (``overloaded``: the server did not start it), or
        429 with it (a rate limit in front of the server), is sent again, after the seconds it says (at most
        ``RETRY_SECONDS``). ``http``: an ``httpx.Client`` of the
        caller's, already pointed at the server (``base_url`` and ``timeout`` are then its own); the caller closes
        it, :meth:`close` does not."""
        self.retries = retries
        self._known = Known()  # the server's limits and tables' rows, read once (again when lowered): runs.Known
        self._owned = http is None
        self.http = http or httpx.Client(base_url=server_address(base_url), timeout=timeout)
        if api_key:
            self.http.headers["X-API-Key"] = api_key

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def _run(self, call: Call[T]) -> T:
        """``call`` carried through: each request it makes sent, its answer handed back to it."""
        answer = None
        with encodable():
            while True:
                try:
                    request = call.send(answer)
                except StopIteration as done:
                    return cast(T, done.value)
                answer = self._request(request)

    def _request(self, request: Request) -> Any:
        """The request's answer, after the retries an ``overloaded`` answer takes."""
        response = self._once(request)
        for _ in range(self.retries):
            wait = retry_wait(response)
            if wait is None:
                break
            time.sleep(wait)
            response = self._once(request)
        return request.answer(response)

    def _once(self, request: Request) -> httpx.Response:
        try:
            return self.http.request(request.method, request.path, **request.arguments())
        except httpx.TransportError as exc:
            raise _no_answer(exc, self._owned) from exc

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
        return self._run(calls.reload())

    def limits(self) -> dict[str, Any]:
        """The server's limits (``GET /v1/limits``: ``max_k``, ``max_batch``, ``max_body_bytes``, ...), read once and
        kept; ``{}`` from a server that does not publish them. :meth:`documents`, :meth:`list_documents`,
        :meth:`upsert_many`, :meth:`delete_many` and the batch calls size their requests by them, and when one is
        refused for a limit it was sized by (the server's lowered since: restarted, or a front whose shards
        changed), read them again and send what was refused sized by them, once (refused again: raised).

        A batch call (``neighbors_batch``, ``search_batch``, ``search_documents_batch``, ``similarity_batch``,
        ``similarities``, ``analogies``, ``rank_batch``, ``ranks``, ``doesnt_match_batch``, ``n_similarity_batch``,
        ``compare_batch``, ``embed``, ``embed_details``) takes any number of items, sent in requests of at most
        ``max_batch`` items and half ``max_body_bytes`` of JSON, within ``max_hits`` (items x k), ``max_words``,
        ``max_exact_rows`` (queries x the rows each scores exactly, by the table's ``rows``, read once) and
        ``max_scored_rows`` (3CosMul's questions), the answers joined in order; ``embed``'s refused for
        ``max_encode_tokens`` sent again in halves. What only the server counts (a filter's rows, a keyword query's
        documents, a search's text tokens, ``max_answer_bytes``, ``max_filter_conditions``) is left to it: its 422
        names the limit."""
        return self._run(runs.limits(self._known))

    def tables(self) -> list[TableInfo]:
        return self._run(calls.tables())

    def table(self, table: str) -> dict[str, Any]:
        return self._run(calls.table(table))

    def vector(self, table: str, token: str, normalized: bool = False) -> list[float]:
        return self._run(calls.vector(table, token, normalized))

    def vector_of_id(self, table: str, id: int, normalized: bool = False) -> list[float]:
        """The vector of the row ``id`` (``GET .../ids/{id}``)."""
        return self._run(calls.vector_of_id(table, id, normalized))

    def tokenize(self, table: str, text: str) -> list[Piece]:
        """``text`` split by a model-token table's own tokenizer (``POST .../tokenize``)."""
        return self._run(calls.tokenize(table, text))

    # -------------------------------------------------------------------------------------- queries
    def neighbors(self, table: str, token: str, k: int = 10, **options: Any) -> list[Neighbor]:
        """Nearest neighbours of ``token``, itself left out."""
        return self._run(calls.neighbors(table, token, k, options))

    def most_similar(
        self, table: str, positive: Sequence[str], negative: Sequence[str] = (), k: int = 10, **options: Any
    ) -> list[Neighbor]:
        """gensim ``most_similar`` semantics: the mean of unit rows, the inputs left out."""
        return self._run(calls.most_similar(table, positive, negative, k, options))

    def neighbors_batch(
        self, table: str, queries: Sequence[str | dict[str, Any]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        return self._run(calls.neighbors_batch(table, queries, k, options, self._known))

    def similarity(self, table: str, a: str, b: str) -> float:
        return self._run(calls.similarity(table, a, b))

    def similarities(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        return self._run(calls.similarities(table, pairs, self._known))

    def similarity_batch(self, table: str, pairs: Sequence[tuple[str, str]], **options: Any) -> list[float | ApiError]:
        """:meth:`similarities` with, for a pair it cannot score, the item's :class:`ApiError` (an unknown token's
        suggestions) in place of None; ``options``: ``compose``."""
        return self._run(calls.similarity_batch(table, pairs, options, self._known))

    def analogy(
        self, table: str, a: str, b: str, c: str, k: int = 10, method: Method = "3cosadd", **options: Any
    ) -> list[Neighbor]:
        """``a`` is to ``b`` as ``c`` is to ?; a, b and c left out."""
        return self._run(calls.analogy(table, a, b, c, k, method, options))

    def analogies(
        self,
        table: str,
        questions: Sequence[tuple[str, str, str]],
        k: int = 10,
        method: Method = "3cosadd",
        **options: Any,
    ) -> list[list[Neighbor] | ApiError]:
        return self._run(calls.analogies(table, questions, k, method, options, self._known))

    def search(self, table: str, vector: Sequence[float], k: int = 10, **options: Any) -> list[Neighbor]:
        return self._run(calls.search(table, vector, k, options))

    def search_batch(
        self, table: str, vectors: Sequence[Sequence[float]], k: int = 10, **options: Any
    ) -> list[list[Neighbor] | ApiError]:
        return self._run(calls.search_batch(table, vectors, k, options, self._known))

    def search_documents(self, table: str, k: int = 10, **query: Any) -> Hits:
        """A documents table's search: ``query`` is the request's fields (``vector``, ``id``, ``positive``,
        ``negative``, ``text``, ``mode``, ``filter``, ``offset``, ``min_score``, ``fields``, ``diversity``, ...)."""
        return self._run(calls.search_documents(table, k, query))

    def search_documents_batch(
        self, table: str, queries: Sequence[dict[str, Any]], k: int = 10, **options: Any
    ) -> list[Hits | ApiError]:
        return self._run(calls.search_documents_batch(table, queries, k, options, self._known))

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
        return self._run(calls.document(table, id, vector, normalized, fields))

    def documents(
        self,
        table: str,
        ids: Sequence[str | int],
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Many documents at once (``POST .../documents/get``, ``READ_DOCUMENTS`` ids a request, fewer if the
        server's :meth:`limits` say so: its ``max_batch``, and half its ``max_body_bytes``): ``{"documents":
        [...], "missing": [...]}``, the documents found in the order asked, each as :meth:`document` gives it, and
        the ids not found. A request refused for the bytes of its answer (``max_answer_bytes``) is sent again in
        halves; a document that alone passes it is raised."""
        return self._run(calls.documents(table, ids, vector, normalized, fields, self._known))

    def scroll_documents(
        self,
        table: str,
        filter: dict[str, Any] | None = None,
        limit: int | None = None,
        after: str | int | None = None,
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """One page of the live documents ``filter`` passes (None: every one) in the ids' order (``POST
        .../documents/scroll``): ``{"documents": [...], "next": id}``, at most ``limit`` documents (None: the
        server's page, 100 or its ``max_batch`` when lower) whose ids come after ``after``, each as :meth:`document`
        gives it; pass ``next`` as ``after`` for the next page (None: this page is the last)."""
        return self._run(calls.scroll_documents(table, filter, limit, after, vector, normalized, fields))

    def list_documents(
        self,
        table: str,
        filter: dict[str, Any] | None = None,
        vector: bool = False,
        normalized: bool = False,
        fields: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every live document ``filter`` passes (None: every one), in the ids' order: :meth:`scroll_documents`
        page after page, ``READ_DOCUMENTS`` documents a request (fewer if the server's ``max_batch`` is)."""
        return self._run(calls.list_documents(table, filter, vector, normalized, fields, self._known))

    def fields(self, table: str) -> dict[str, Any]:
        """A documents table's fields (``GET .../fields``): each one's type, common values or range."""
        return self._run(calls.fields(table))

    # ---------------------------------------------------------------------------------------- writes
    def upsert_documents(self, table: str, documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Add documents, or replace them by id: each ``{"id", "text", "vector", "fields"}`` (no ``vector``: the
        table's encoder embeds the text). Answers ``{"table", "sequence", "upserted"}``; needs a write key."""
        return self._run(calls.upsert_documents(table, documents))

    def upsert_many(self, table: str, documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`upsert_documents` for any number of documents, in requests sized by the server's :meth:`limits`
        (``WRITE_DOCUMENTS`` documents, fewer if its ``max_batch`` is, and about half its ``max_body_bytes`` of
        JSON; :func:`write_bodies`' sizes from a server that does not say them). Each is answered as one write: a
        request refused leaves the runs before it written, and its error's ``documents[i]`` counts among
        ``documents``, but one refused for its texts' tokens (``max_encode_tokens``), which wrote none of them, is
        sent again in halves, each halved again while refused; an id that comes twice is a ValueError before any
        request, and so is a document no request can hold (its id over ``max_token_chars``, its text over
        ``max_text_chars``, its JSON alone over ``max_body_bytes``): the server's error for it (422 or 413, its
        ``limit`` named), and a vector of another length than the table's dimension (``GET /v1/tables/{table}``,
        read once and kept, and again before such a refusal): the server's 422 for it."""
        return self._run(calls.upsert_many(table, documents, self._known))

    def delete_many(self, table: str, ids: Sequence[str | int]) -> list[dict[str, Any]]:
        """:meth:`delete_documents` by ``ids``, ``WRITE_DOCUMENTS`` ids a request (fewer as :meth:`documents`)."""
        return self._run(calls.delete_many(table, ids, self._known))

    def delete_documents(
        self, table: str, ids: Sequence[str | int] | None = None, filter: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Delete documents by ``ids`` or by a search ``filter``: ``{"table", "sequence", "deleted"}``."""
        return self._run(calls.delete_documents(table, ids, filter))

    def delete_document(self, table: str, id: str | int) -> dict[str, Any]:
        return self._run(calls.delete_document(table, id))

    def embed(self, table: str, texts: Sequence[str], pooling: str | None = None) -> list[list[float]]:
        """Vectors of ``texts`` by the table's encoder (``POST .../embed``)."""
        return self._run(calls.embed_details(table, texts, pooling, self._known)).vectors

    def embed_details(self, table: str, texts: Sequence[str], pooling: str | None = None) -> Embedded:
        """:meth:`embed`'s whole answer: the vectors, and per text its tokens, unknown words and truncation."""
        return self._run(calls.embed_details(table, texts, pooling, self._known))

    def contextual(self, table: str, texts: Sequence[str], token: str | None = None, k: int = 5) -> dict[str, Any]:
        """A transformer table's last-layer token vectors of ``texts`` (``POST .../contextual``): ``{"table",
        "texts": [{"text", "truncated", "tokens"}]}``; with ``token``, a word followed through the texts, also
        ``"token"``: its occurrences, their cosines with its static row and each other, their ``k`` nearest rows."""
        return self._run(calls.contextual(table, texts, token, k))

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
        return self._run(calls.project(table, tokens, skip_unknown, method, options))

    # ---------------------------------------------------------------------------------- diagnostics
    def doesnt_match(self, table: str, words: Sequence[str], skip_unknown: bool = False) -> str:
        """gensim ``doesnt_match``: the word least similar to the mean of the words' unit rows."""
        return self._run(calls.doesnt_match(table, words, skip_unknown))

    def doesnt_match_batch(
        self, table: str, queries: Sequence[Sequence[str]], skip_unknown: bool = False
    ) -> list[str | ApiError]:
        """:meth:`doesnt_match` of each word list: per list the odd one out, or the item's :class:`ApiError`."""
        return self._run(calls.doesnt_match_batch(table, queries, skip_unknown, self._known))

    def rank(self, table: str, a: str, b: str) -> int:
        """gensim ``rank(a, b)``: where ``b`` ranks among the neighbours of ``a`` (1: the nearest)."""
        return self._run(calls.rank(table, a, b))

    def ranks(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[int | None]:
        return self._run(calls.ranks(table, pairs, self._known))

    def rank_batch(self, table: str, pairs: Sequence[tuple[str, str]]) -> list[int | ApiError]:
        """:meth:`ranks` with, for a pair it cannot rank, the item's :class:`ApiError` in place of None."""
        return self._run(calls.rank_batch(table, pairs, self._known))

    def closer_than(
        self, table: str, a: str, b: str, limit: int = 100, order: Literal["index", "score"] = "index"
    ) -> tuple[int, list[Neighbor]]:
        """gensim ``closer_than(a, b)``: how many words are closer to ``a`` than ``b`` is, and the first ``limit``."""
        return self._run(calls.closer_than(table, a, b, limit, order))

    def n_similarity(self, table: str, a: Sequence[str], b: Sequence[str], skip_unknown: bool = False) -> float:
        """gensim ``n_similarity``: cosine of the mean vectors of two word sets."""
        return self._run(calls.n_similarity(table, a, b, skip_unknown))

    def n_similarity_batch(
        self, table: str, pairs: Sequence[tuple[Sequence[str], Sequence[str]]], skip_unknown: bool = False
    ) -> list[float | ApiError]:
        """:meth:`n_similarity` of each pair of word sets: per pair the cosine, or the item's :class:`ApiError`."""
        return self._run(calls.n_similarity_batch(table, pairs, skip_unknown, self._known))

    def expected_rank(
        self, table: str, a: str, b: str, c: str, expect: str, method: Method = "3cosadd", **options: Any
    ) -> dict[str, Any]:
        """Where ``expect`` ranks among the answers to "a is to b as c is to ?": token, id, rank, score, margin."""
        return self._run(calls.expected_rank(table, a, b, c, expect, method, options))

    def compare(self, first: str, second: str, token: str, k: int = 10, **options: Any) -> dict[str, Any]:
        """``token``'s neighbours in two tables side by side: overlap (overlap@k), shared, first, second."""
        return self._run(calls.compare(first, second, token, k, options))

    def compare_batch(
        self, first: str, second: str, tokens: Sequence[str], k: int = 10, **options: Any
    ) -> list[dict[str, Any] | ApiError]:
        """:meth:`compare` of each token: per token the comparison, or the item's :class:`ApiError`."""
        return self._run(calls.compare_batch(first, second, tokens, k, options, self._known))

    # ------------------------------------------------------------------------------ map and export
    def map_info(self, table: str, method: MapMethod = "pca") -> dict[str, Any]:
        """How the whole-table map is laid out (``GET .../map/info``): ``rows``, ``bounds``, ``method``,
        ``params``, ``columns`` (what :meth:`map_colours` takes), ..."""
        return self._run(calls.map_info(table, method))

    def map_points(self, table: str, method: MapMethod = "pca") -> np.ndarray:
        """Every row's map position (row id = position) as float64 x, y (rows x 2), read from ``GET .../map``'s
        int16 codes (to within 1/65534 of each axis's span) and :meth:`map_info`'s bounds."""
        return self._run(calls.map_points(table, method))

    def map_labels(self, table: str) -> list[str]:
        """Every row's label, row id = position (``GET .../map/labels``)."""
        return self._run(calls.map_labels(table))

    def map_colours(self, table: str, column: str) -> MapColours:
        """A metadata column (or a model table's token kind) as ``categories`` and a uint8 ``codes`` array, one a
        row (``GET .../map/colours/{column}``)."""
        return self._run(calls.map_colours(table, column))

    def export(
        self, table: str, rows: Sequence[str | int | dict[str, Any]], file: Literal["vectors", "metadata"]
    ) -> str:
        """Rows as the Embedding Projector's ``vectors.tsv`` or ``metadata.tsv`` (``POST .../export``): each row a
        token, a row id, or ``{"token" or "id", "group"}``."""
        return self._run(calls.export(table, rows, file))


def _document_async_calls() -> None:
    """Each of AsyncClient's calls documented as Client's (written once, here), unless it has its own."""
    for name, method in vars(AsyncClient).items():
        if inspect.iscoroutinefunction(method) and method.__doc__ is None and hasattr(Client, name):
            method.__doc__ = getattr(Client, name).__doc__


_document_async_calls()
