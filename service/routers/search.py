"""Nearest rows to raw query vectors (normalised server-side), and the search of a documents table: by vector,
by document (more like it) or by positive/negative documents, by keyword (BM25) or both fused (``index.engine.hybrid``),
with filters, paging, a score floor and diversity. A batch is one search per group of queries sharing a filter,
page and mode."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.delta import Delta, vector_search
from index.engine.encode import preview
from index.engine.filters import RowSet
from index.engine.hybrid import DocumentSearch, Mode
from index.engine.hybrid import run as run_hybrid
from index.engine.keyword import KeywordIndex
from index.engine.live_search import LiveKeyword, LiveSource
from index.engine.search import SearchOptions, VectorSearch
from index.engine.table import Table
from index.errors import EmbeddingError, InvalidQuery
from service import execute, live, queries
from service.deps import RegistryDep, TableDep
from service.errors import BODY_ERRORS, item_error, responses
from service.http.fastroute import QueryRoute, plain_body
from service.models import (
    DocumentQuery,
    DocumentSearchBatchResponse,
    DocumentSearchResponse,
    SearchBatchResponse,
    SearchRequest,
    SearchResponse,
    check_mode,
)
from service.plain_search import plain_vector_search
from service.respond import FastJSON, documents, neighbors, ranked_documents

router = APIRouter(prefix="/v1/tables/{table}", tags=["search"], route_class=QueryRoute)

DOCUMENT_ONLY = (
    "id",
    "positive",
    "negative",
    "queries",
    "filter",
    "fields",
    "text",
    "mode",
    "diversity",
    "rrf_k",
    "weights",
)


@router.post(
    "/search",
    response_model=SearchResponse | SearchBatchResponse | DocumentSearchResponse | DocumentSearchBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="Nearest rows to a raw vector ({vector}) or to each of several ({vectors}); on a documents table also "
    "by document id, by keyword or hybrid (text, mode), filtered, paged and diversified",
)
@plain_body(plain_vector_search)  # one raw vector: answered without the request model (service.http.fastroute)
async def search(request: Request, table: TableDep, registry: RegistryDep, body: SearchRequest) -> Response:
    if table.payload is not None:
        return FastJSON(await _documents(request, table, body, registry.encoder_of(table)))
    if given := [name for name in DOCUMENT_ONLY if name in body.model_fields_set]:
        raise InvalidQuery(
            f"{', '.join(given)}: only for documents tables; table {table.name!r} holds {table.kind}, search it "
            "by vector"
        )
    options = body.search_options()
    if body.vector is not None:
        query = queries.raw_vector(table, body.vector)  # 422: wrong length, NaN/Inf, beyond float32, zero
        search = VectorSearch(query.vector[None, :], body.k, (), options, None, body.offset, body.min_score)
        (hits,) = await execute.search(request, table, "search", search)
        return FastJSON({"neighbors": neighbors(table, hits)})
    vectors = body.vectors or []

    def many() -> dict[str, Any]:
        batch = queries.Batch.build(lambda values: queries.raw_vector(table, values), vectors)
        hits = (
            table.run(VectorSearch(batch.matrix(), body.k, (), options, None, body.offset, body.min_score))
            if batch.queries
            else []
        )
        return {"results": batch.results(table, hits, echo=False)}

    return FastJSON(await execute.compute(request, table, "search_batch", many))


async def _documents(request: Request, table: Table, body: SearchRequest, encoder: Table | None) -> dict[str, Any]:
    options = body.search_options()
    delta = live.delta_of(table)  # the documents written since the version, if any: searched beside it
    if body.queries is None and body.vectors is None:  # one query
        query = body.document_query()
        fast = (query.mode or body.mode) == "vector" and not body.diversity and query.filter is None
        if fast and query.vector_query and delta is None:  # the searcher's path, as for words
            _, probe, _ = _prepare(table, query, body, encoder)
            assert probe is not None
            search = _request([probe], query, body.k, options, None)
            (hits,) = await execute.search(request, table, "search", search)
            return _shape(documents(table, hits, body.fields), None)

        def one() -> dict[str, Any]:
            mode, probe, fallback = _prepare(table, query, body, encoder, delta)
            rows = None if query.filter is None else table.filter(query.filter)
            (shaped,) = _run(table, mode, [(probe, query.text)], query, body, options, rows, delta)
            return _shape(shaped, rows, fallback, live.passing(delta, query.filter, rows))

        return await execute.compute(request, table, "search", one)
    items = body.queries
    if items is None:  # a batch of vectors, sharing the request's filter and page
        items = [
            DocumentQuery.model_construct(
                vector=v,
                positive=[],
                negative=[],
                filter=body.filter,
                offset=body.offset,
                min_score=body.min_score,
                text=None,
                mode=None,
            )
            for v in body.vectors or []
        ]
    batch = items

    def answer() -> list[dict[str, Any]]:
        return _answer(table, batch, body, options, encoder, delta)

    return {"results": await execute.compute(request, table, "search_batch", answer)}


def _prepare(
    table: Table, query: DocumentQuery, body: SearchRequest, encoder: Table | None, delta: Delta | None = None
) -> tuple[Mode, queries.Probe | None, dict[str, str] | None]:
    """A query's mode (its own, else the request's), its vector query (None in mode keyword) and the fallback
    taken, if any: from its vector, id or positive/negative ids, else its text embedded by ``encoder`` (the
    table that embedded the documents); a 422 for what the mode lacks or the table cannot do. Text alone in mode
    hybrid none of whose words the encoder knows (a command name, a product code, a typo) is searched by keyword
    alone, and the answer says so (``fallback``); text none of whose words a document holds, by vector alone.
    ``min_score`` (a floor on fused scores) keeps mode hybrid as asked."""
    mode: Mode = query.mode or body.mode
    try:
        check_mode(mode, query.text, query.vector_query, query.min_score, body.diversity)
    except ValueError as exc:
        raise InvalidQuery(str(exc)) from None
    if mode != "vector" and table.keyword is None:
        raise InvalidQuery(
            f"mode {mode}: table {table.name!r} has no keyword index (its documents have no text); search it by vector"
        )
    if mode == "vector" and query.text is not None and query.vector_query:
        raise InvalidQuery(
            "text: mode vector searches by one query: a vector, id or positive/negative ids, or text alone (embedded "
            "by the table's encoder); use mode hybrid to search by both"
        )
    if query.vector_query:
        probe = queries.document(table, query) if delta is None else live.document_probe(table, delta, query)
    elif mode == "keyword" or query.text is None:
        return mode, None, None
    else:
        try:
            probe = queries.document_text(encoder, table, query.text)  # 422 when the table records no encoder
        except queries.NoKnownWord as exc:
            if mode != "hybrid" or body.diversity or query.min_score is not None:  # these need a vector
                raise
            reason = exc.message.removesuffix(queries.KEYWORD_HINT)
            return "keyword", None, {"mode": "keyword", "reason": reason}
    if (
        mode == "hybrid"
        and query.text is not None
        and query.min_score is None
        and not _has_keyword(table, query.text, delta)
    ):
        reason = (
            f"no document of {table.name!r} holds a word of text {preview(query.text)} as the keyword index reads it"
        )
        return "vector", probe, {"mode": "vector", "reason": reason}
    return mode, probe, None


def _has_keyword(table: Table, text: str, delta: Delta | None) -> bool:
    """Whether some live document holds a word of ``text`` (mode hybrid's keyword list is not empty, filter aside):
    with a ``delta``, a written one counts and a deleted one does not."""
    allowed = None
    index: KeywordIndex | LiveKeyword | None = table.keyword
    if delta is not None:
        source = LiveSource(table, delta)
        index = source.keyword
        allowed = np.concatenate([~delta.deleted, np.ones(source.rows - table.rows, dtype=bool)])
    assert index is not None  # checked by _prepare for modes keyword and hybrid
    _, rows = index.search([text], 1, allowed)
    return bool(rows[0, 0] >= 0)


def _request(
    probes: list[queries.Probe], page: DocumentQuery, k: int, options: SearchOptions, rows: RowSet | None
) -> VectorSearch:
    """The engine's request for ``probes`` that share a filter's ``rows`` and ``page``'s offset and score floor."""
    matrix = np.vstack([probe.vector for probe in probes]).astype(np.float32, copy=False)
    return VectorSearch(matrix, k, [probe.exclude for probe in probes], options, rows, page.offset, page.min_score)


def _run(
    table: Table,
    mode: Mode,
    members: list[tuple[queries.Probe | None, str | None]],
    page: DocumentQuery,
    body: SearchRequest,
    options: SearchOptions,
    rows: RowSet | None,
    delta: Delta | None = None,
) -> list[list[dict[str, Any]]]:
    """The shaped hits of queries sharing a mode, a filter's ``rows`` and ``page``'s offset and score floor: a plain
    vector search (``Table.run``) unless the mode or diversity asks for ``index.engine.hybrid``. With a ``delta``, a
    search merges the version and the written documents as one table (``index.engine.live_search``)."""
    probes = [probe for probe, _ in members if probe is not None]
    source: Table | LiveSource = table
    if delta is not None:
        written = live.written_passing(delta, page.filter)
        if mode == "vector" and not body.diversity:
            merged = _request(probes, page, body.k, options, rows)
            answers = vector_search(table, delta, merged, written)
            return [live.documents(table, delta, hits, body.fields) for hits in answers]
        source = LiveSource(table, delta)
        version = (np.ones(table.rows, dtype=bool) if rows is None else rows.mask) & ~delta.deleted
        extra = np.ones(source.rows - table.rows, dtype=bool) if written is None else written
        rows = RowSet(np.concatenate([version, extra]))
    if mode == "vector" and not body.diversity:
        return [
            documents(table, hits, body.fields) for hits in table.run(_request(probes, page, body.k, options, rows))
        ]
    texts = [text for _, text in members if text is not None]
    search = DocumentSearch(
        mode,
        body.k,
        None if mode == "keyword" else np.vstack([p.vector for p in probes]).astype(np.float32, copy=False),
        None if mode == "vector" else texts,
        [] if mode == "keyword" else [p.exclude for p in probes],
        options,
        rows,
        page.offset,
        page.min_score,
        body.rrf_k,
        None if body.weights is None else (body.weights.vector, body.weights.keyword),
        body.diversity or 0.0,
    )
    if delta is not None:
        return [live.ranked_documents(table, delta, hits, body.fields) for hits in run_hybrid(source, search)]
    return [ranked_documents(table, hits, body.fields) for hits in run_hybrid(table, search)]


def _shape(
    hits: list[dict[str, Any]], rows: RowSet | None, fallback: dict[str, str] | None = None, passing: int | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"hits": hits}
    if rows is not None:
        out["passing"] = len(rows) if passing is None else passing
    if fallback is not None:
        out["fallback"] = fallback
    return out


def _answer(
    table: Table,
    items: list[DocumentQuery],
    body: SearchRequest,
    options: SearchOptions,
    encoder: Table | None,
    delta: Delta | None = None,
) -> list[dict[str, Any]]:
    """Each item's hits (or its error), in order: one search per group of items with the same filter, page and
    mode."""
    out: list[dict[str, Any]] = [{} for _ in items]
    groups: dict[str, list[tuple[int, Mode, queries.Probe | None, str | None]]] = defaultdict(list)
    fallbacks: dict[int, dict[str, str]] = {}
    for position, item in enumerate(items):
        try:
            mode, probe, fallback = _prepare(table, item, body, encoder, delta)
            if fallback is not None:
                fallbacks[position] = fallback
            if item.filter is not None:
                table.filter(item.filter)  # an error in the filter is this item's (the rows are kept for below)
        except EmbeddingError as exc:
            out[position] = item_error(exc)
            continue
        key = json.dumps([item.filter, item.offset, item.min_score, mode], sort_keys=True)
        groups[key].append((position, mode, probe, item.text))
    for members in groups.values():
        page, mode = items[members[0][0]], members[0][1]
        rows = None if page.filter is None else table.filter(page.filter)
        shaped = _run(table, mode, [(probe, text) for _, _, probe, text in members], page, body, options, rows, delta)
        passing = live.passing(delta, page.filter, rows)
        for (position, *_), hits in zip(members, shaped, strict=True):
            out[position] = _shape(hits, rows, fallbacks.get(position), passing)
    return out
