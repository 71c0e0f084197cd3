"""Word diagnostics, answered as gensim's KeyedVectors: doesnt_match, rank, closer_than, n_similarity; and a
word's neighbours in two tables side by side (overlap@k)."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from starlette.responses import Response

from index.engine.door import Neighbor, Resolved, Table, diagnostics
from index.errors import InvalidQuery
from service.deps import TableDep, TableName, get_registry, table_named
from service.errors import BODY_ERRORS, TABLE_ERRORS, per_item, responses, with_errors
from service.execute import compute
from service.http.fastroute import QueryRoute, parse_query, query_params
from service.respond import FastJSON, neighbors
from service.schemas.common import TokenOptions
from service.schemas.diagnostics import (
    CloserThanParams,
    CloserThanResponse,
    CompareBatchResponse,
    CompareParams,
    CompareRequest,
    CompareResponse,
    DoesntMatchBatchResponse,
    DoesntMatchRequest,
    DoesntMatchResponse,
    NSimilarityBatchResponse,
    NSimilarityRequest,
    NSimilarityResponse,
    RankParams,
    RankRequest,
    RankResponse,
    RanksResponse,
)

router = APIRouter(tags=["diagnostics"], route_class=QueryRoute)
T = "/v1/tables/{table}"


# ----------------------------------------------------------------------------------------- doesnt_match
def odd_one_out(table: Table, words: list[str], skip_unknown: bool) -> dict[str, Any]:
    found = diagnostics.doesnt_match(table, words, skip_unknown)
    ranking = [{**r.as_dict(), "score": score} for r, score in found.ranking]
    return {"doesnt_match": ranking[-1], "ranking": ranking, "unknown": found.unknown}


@router.post(
    f"{T}/doesnt-match",
    response_model=DoesntMatchResponse | DoesntMatchBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="The word that does not go with the others (gensim doesnt_match), or a batch of word lists",
    description="Each word's unit row is compared with the normalised mean of the words' unit rows; the odd one "
    "out has the lowest cosine and `ranking` lists them all, most central first (gensim rank_by_centrality). "
    "A repeated word counts once per occurrence. An unknown word is a 404, or with `skip_unknown` left out and "
    "listed in `unknown` (gensim's way); a list with no known word is a 404.",
)
async def doesnt_match(request: Request, table: TableDep, body: DoesntMatchRequest) -> Response:
    if body.queries is None:
        words = body.words or []
        return FastJSON(
            await compute(request, table, "doesnt_match", lambda: odd_one_out(table, words, body.skip_unknown))
        )
    queries = body.queries

    def many() -> dict[str, Any]:
        return {"results": with_errors(*per_item(queries, lambda words: odd_one_out(table, words, body.skip_unknown)))}

    return FastJSON(await compute(request, table, "doesnt_match_batch", many))


# --------------------------------------------------------------------------------------------- rank
RANK_HELP = (
    "1 + the number of rows whose cosine with a is greater than that of b, a itself left out (gensim rank(a, b)): "
    "1 means b is a's nearest neighbour."
)


def one_rank(table: Table, a: str, b: str) -> dict[str, Any]:
    left, right = table.resolve(a), table.resolve(b)
    ranks, cosines = diagnostics.ranks(table, [left.id], [right.id])
    return {
        "a": a,
        "b": b,
        "rank": int(ranks[0]),
        "similarity": float(cosines[0]),
        "query": {"a": left.as_dict(), "b": right.as_dict()},
    }


@router.get(
    f"{T}/rank",
    response_model=RankResponse,
    responses=responses(*TABLE_ERRORS),
    summary="Where b ranks among the neighbours of a (gensim rank)",
    description=RANK_HELP,
)
@query_params(RankParams)
async def rank_get(request: Request, table: TableName) -> Response:
    found = await table_named(request, table)
    params = parse_query(request, RankParams)
    return FastJSON(await compute(request, found, "rank", lambda: one_rank(found, params.a, params.b)))


@router.post(
    f"{T}/rank",
    response_model=RanksResponse,
    responses=responses(*BODY_ERRORS),
    summary="gensim rank of many (a, b) pairs; null (with the reason in errors) for a pair with an unknown token",
    description=RANK_HELP + " The pairs are scored together, one matrix product per block of pairs.",
)
async def rank_post(request: Request, table: TableDep, body: RankRequest) -> Response:
    def run() -> dict[str, Any]:
        size = len(body.pairs)
        ranks: list[int | None] = [None] * size
        similarities: list[float | None] = [None] * size
        rows, failed = per_item(body.pairs, lambda pair: (table.resolve(pair[0]).id, table.resolve(pair[1]).id))
        good = [(position, *ids) for position, ids in enumerate(rows) if ids is not None]  # (position, id a, id b)
        if good:
            positions, left, right = (list(column) for column in zip(*good, strict=True))
            found, cosines = diagnostics.ranks(table, left, right)
            for position, value, cosine in zip(positions, found.tolist(), cosines.tolist(), strict=True):
                ranks[position], similarities[position] = value, cosine
        errors = [failed[position]["error"] if position in failed else None for position in range(size)]
        return {"ranks": ranks, "similarities": similarities, "errors": errors}

    return FastJSON(await compute(request, table, "rank_batch", run))


# ------------------------------------------------------------------------------------------ closer_than
def closer(table: Table, params: CloserThanParams) -> dict[str, Any]:
    left, right = table.resolve(params.a), table.resolve(params.b)
    ids, scores = diagnostics.closer_than(table, left.id, right.id)
    count = len(ids)
    if params.order == "score":
        best = np.argsort(-scores, kind="stable")[: params.limit]
        ids, scores = ids[best], scores[best]
    hits = list(zip(ids[: params.limit].tolist(), scores[: params.limit].tolist(), strict=True))
    return {
        "a": params.a,
        "b": params.b,
        "similarity": table.similarity(left.id, right.id),
        "count": count,
        "order": params.order,
        "words": neighbors(table, hits),
        "query": {"a": left.as_dict(), "b": right.as_dict()},
    }


@router.get(
    f"{T}/closer-than",
    response_model=CloserThanResponse,
    responses=responses(*TABLE_ERRORS),
    summary="The words closer to a than b is (gensim closer_than)",
    description="Every row whose cosine with a is greater than that of b, a itself left out: `count` of them "
    "(gensim rank(a, b) - 1) and the first `limit`, in row order as gensim returns them (`order=index`; for "
    "frequency-sorted tables the most frequent first) or most similar first (`order=score`).",
)
@query_params(CloserThanParams)
async def closer_than(request: Request, table: TableName) -> Response:
    found = await table_named(request, table)
    params = parse_query(request, CloserThanParams)
    return FastJSON(await compute(request, found, "closer_than", lambda: closer(found, params)))


# ----------------------------------------------------------------------------------------- n_similarity
def set_similarity(table: Table, a: list[str], b: list[str], skip_unknown: bool) -> dict[str, Any]:
    found = diagnostics.n_similarity(table, a, b, skip_unknown)
    return {
        "similarity": found.similarity,
        "a": [r.as_dict() for r in found.first.found],
        "b": [r.as_dict() for r in found.second.found],
        "unknown": found.first.unknown + found.second.unknown,
    }


@router.post(
    f"{T}/n-similarity",
    response_model=NSimilarityResponse | NSimilarityBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="Cosine of the mean vectors of two word sets (gensim n_similarity), or a batch of set pairs",
    description="As gensim, the means are of the words' original vectors (not their unit rows), and a repeated "
    "word counts once per occurrence. An unknown word is a 404, or with `skip_unknown` left out and listed in "
    "`unknown` (gensim's way); a set with no known word is a 404 (gensim would score it 0).",
)
async def n_similarity(request: Request, table: TableDep, body: NSimilarityRequest) -> Response:
    if body.queries is None:
        a, b = body.a or [], body.b or []
        return FastJSON(
            await compute(request, table, "n_similarity", lambda: set_similarity(table, a, b, body.skip_unknown))
        )
    pairs = body.queries

    def many() -> dict[str, Any]:
        found = per_item(pairs, lambda pair: set_similarity(table, pair.a, pair.b, body.skip_unknown))
        return {"results": with_errors(*found)}

    return FastJSON(await compute(request, table, "n_similarity_batch", many))


# --------------------------------------------------------------------------------------------- compare
COMPARE_HELP = (
    "The word's k nearest neighbours (the word left out) in table `first` and in table `second`, side by side, "
    "and overlap@k: the share of the k neighbours, matched by label, that both tables give. Search options "
    "(exact, restrict, skip_special, whole_words_only) apply to both tables."
)


def side(table: Table, found: Resolved, hits: list[Neighbor]) -> dict[str, Any]:
    return {"table": table.name, "query": found.as_dict(), "neighbors": neighbors(table, hits)}


Pair = tuple[Resolved, Resolved]  # one word's row in the first table and in the second


def word_rows(first: Table, second: Table, token: str) -> Pair:
    """The word's row in each table: 404 for a word either lacks, 422 for a zero row (no neighbours by cosine)."""
    pair = (first.resolve(token), second.resolve(token))
    for table, found in zip((first, second), pair, strict=True):
        if not table.vectors[found.id].any():
            raise InvalidQuery(
                f"the vector of token {token!r} is all zeros in table {table.name!r}: no direction to find "
                "neighbours by (a zero row's cosine with every row is 0)"
            )
    return pair


def comparisons(
    first: Table, second: Table, tokens: list[str], pairs: list[Pair | None], options: TokenOptions
) -> list[dict[str, Any]]:
    """The comparison of each resolved word (``None``: an item whose error is already in place)."""
    good = [(position, pair) for position, pair in enumerate(pairs) if pair is not None]
    found = diagnostics.compare(
        first, second, [(a.id, b.id) for _, (a, b) in good], options.k, options.search_options()
    )
    out: list[dict[str, Any]] = [{} for _ in pairs]
    for (position, (left, right)), result in zip(good, found, strict=True):
        out[position] = {
            "token": tokens[position],
            "k": result.k,
            "overlap": result.overlap,
            "shared": result.shared,
            "first": side(first, left, result.first),
            "second": side(second, right, result.second),
        }
    return out


@router.get(
    "/v1/compare",
    response_model=CompareResponse,
    responses=responses(*TABLE_ERRORS),
    summary="A word's neighbours in two tables side by side, with overlap@k",
    description=COMPARE_HELP,
)
@query_params(CompareParams)
async def compare_get(request: Request) -> Response:
    params = parse_query(request, CompareParams)
    registry = await get_registry(request)
    first, second = registry.get(params.first), registry.get(params.second)
    pair = word_rows(first, second, params.token)
    (result,) = await compute(
        request, first, "compare", lambda: comparisons(first, second, [params.token], [pair], params)
    )
    return FastJSON(result)


@router.post(
    "/v1/compare",
    response_model=CompareBatchResponse,
    responses=responses(*BODY_ERRORS),
    summary="Many words' neighbours in two tables side by side, with overlap@k; an error per unknown word",
    description=COMPARE_HELP,
)
async def compare_post(request: Request, body: CompareRequest) -> Response:
    registry = await get_registry(request)
    first, second = registry.get(body.first), registry.get(body.second)

    def run() -> dict[str, Any]:
        pairs, errors = per_item(body.tokens, lambda token: word_rows(first, second, token))
        return {"results": with_errors(comparisons(first, second, body.tokens, pairs, body), errors)}

    return FastJSON(await compute(request, first, "compare_batch", run))
