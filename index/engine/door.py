"""The engine's one door: a batch of :class:`~index.engine.query.Query` run against a table, each item answered
in order by a :class:`~index.engine.query.Result` or its :class:`~index.engine.query.Failed` (a single query is a
batch of one).

Inside, once: tokens, row ids, document ids and examples become unit query vectors with the rows they leave out
(:func:`probe`); a text is embedded by the table's encoder (the table that embedded its documents), with mode
hybrid's fallbacks; a filter is compiled; the mode rules each query read on itself (``Query.problem``) are
answered, with what only the table can say (its keyword index); the items are grouped into one engine request per
filter, page and mode; the write log's delta is searched beside the version; hybrid fusion and MMR run
(``index.engine.hybrid``, which checks only that a request is whole, for callers other than the door).

:func:`run` does all of it; :func:`split` gives a plain query's one engine request (a ``VectorSearch`` or
``AnalogySearch``, which the service's searcher can join with others) and the step that finishes its answers, so
that the caller decides where the request runs. :func:`expectations` reports analogies' expected answers, work
that scores every row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, cast

import numpy as np

from index.engine import diagnostics, filters
from index.engine.budget import EXACT_BUDGET, SCORE_BUDGET, OverBudget
from index.engine.contextual import contextual, transformer_of
from index.engine.delta import (
    Delta,
    Document,
    Key,
    parse_timestamp,
    timestamp_text,
    unwritten,
    vector_search,
    written_row,
)
from index.engine.dfs import gather as keyword_statistics
from index.engine.dfs import summed as summed_statistics
from index.engine.documents import (
    Bound,
    check_weights,
    page_within,
    read_document,
    read_documents,
    scroll_documents,
)
from index.engine.encode import (
    Encoded,
    NoKnownWord,
    Pooling,
    check_known,
    embeds_text,
    encoder_for,
    no_known_word,
    preview,
    unembedded,
    visible,
)
from index.engine.field_stats import (
    MOST_LISTED,
    MOST_LISTED_BYTES,
    TOP_VALUES,
    cut_fields,
    field_stats,
    merged_field_stats,
)
from index.engine.filters import RowSet
from index.engine.fusion import rrf
from index.engine.hybrid import DEPTH, LISTS, DocumentSearch, Hit, Mode, depths, diverse, reaching
from index.engine.hybrid import run as run_hybrid
from index.engine.knn import (
    FLOAT32_MAX,
    Hits,
    Neighbor,
    mean_query,
    pair_cosines,
    unit_mean,
    unit_queries,
    unit_vector,
    within_float32,
)
from index.engine.layout import (
    MAP_INSTALL,
    LayoutCache,
    Projection,
    colour_column,
    colour_columns,
    default_cache_dir,
    project,
    quantize,
    tsne_available,
    tsne_least_rows,
)
from index.engine.live_search import LiveSource, Statistics
from index.engine.lookup import SUGGESTED_MISSES, SUGGESTION_BUDGET, spellings
from index.engine.query import (
    Analogy,
    Answer,
    Examples,
    Failed,
    Query,
    Result,
    check_fusion,
    check_options,
)
from index.engine.shard_writes import WholeDelta, by_owner, owner, routed
from index.engine.shards import (
    ShardedTable,
    analogy_part,
    expectation_part,
    is_sharded,
    local_rows,
    merge,
    merged_suggestions,
    merged_summary,
    merged_writes,
    suggestion_part,
    whole_rows,
)
from index.engine.table import AnalogySearch, Answers, Plan, Resolved, Search, SearchOptions, Table, VectorSearch
from index.engine.transformer_encoder import ENCODE_BUDGET, TooManyTokens
from index.errors import EmbeddingError, InvalidQuery, counted
from index.store.payload import (
    BOOLEAN,
    FLOAT,
    INTEGER,
    LOOKUP_LIMIT,
    STRING,
    STRING_LIST,
    TIMESTAMP,
    Payload,
    UnknownDocument,
    id_key,
    string_offsets,
    unknown_documents,
)
from index.store.rows import MAX_DIM
from index.store.shardmap import Place as ShardPlace
from index.store.shardmap import is_sharded as manifest_is_sharded
from index.store.shardmap import shard_name
from index.store.tokens import MAX_TOKEN_CHARS

__all__ = [
    "BOOLEAN",
    "DEPTH",
    "ENCODE_BUDGET",
    "EXACT_BUDGET",
    "FLOAT",
    "FLOAT32_MAX",
    "INTEGER",
    "LISTS",
    "LOOKUP_LIMIT",
    "MAP_INSTALL",
    "MAX_DIM",
    "MAX_TOKEN_CHARS",
    "MOST_LISTED",
    "MOST_LISTED_BYTES",
    "SCORE_BUDGET",
    "STRING",
    "STRING_LIST",
    "SUGGESTED_MISSES",
    "SUGGESTION_BUDGET",
    "TIMESTAMP",
    "TOP_VALUES",
    "Analogy",
    "Answer",
    "Answers",
    "Bound",
    "Delta",
    "Document",
    "DocumentSearch",
    "EmbeddingError",
    "Encoded",
    "Examples",
    "Failed",
    "Hit",
    "Hits",
    "Key",
    "LayoutCache",
    "Mode",
    "Neighbor",
    "Payload",
    "Plan",
    "Pooling",
    "Projection",
    "Query",
    "Resolved",
    "Result",
    "Search",
    "SearchOptions",
    "ShardPlace",
    "ShardedTable",
    "Split",
    "Statistics",
    "Table",
    "UnknownDocument",
    "WholeDelta",
    "analogy_part",
    "by_owner",
    "check_fusion",
    "check_known",
    "check_options",
    "check_weights",
    "colour_column",
    "colour_columns",
    "compared_rows",
    "contextual",
    "cut_fields",
    "default_cache_dir",
    "depths",
    "diagnostics",
    "diverse",
    "embeds_text",
    "encoder_for",
    "expectation_part",
    "expectations",
    "expecting",
    "field_stats",
    "filters",
    "id_key",
    "is_sharded",
    "keyword_statistics",
    "local_rows",
    "manifest_is_sharded",
    "merge",
    "merged_field_stats",
    "merged_suggestions",
    "merged_summary",
    "merged_writes",
    "no_direction",
    "owner",
    "page_within",
    "pair_cosines",
    "parse_timestamp",
    "probe",
    "project",
    "quantize",
    "reaching",
    "read_document",
    "read_documents",
    "routed",
    "rrf",
    "run",
    "scroll_documents",
    "shard_name",
    "similarities",
    "similarity",
    "spellings",
    "split",
    "string_offsets",
    "suggestion_part",
    "summed_statistics",
    "timestamp_text",
    "transformer_of",
    "tsne_available",
    "tsne_least_rows",
    "unembedded",
    "unit_mean",
    "unit_queries",
    "unknown_documents",
    "visible",
    "whole_rows",
    "within_float32",
    "written_row",
]

KEYWORD_HINT = "; mode keyword (and hybrid, which falls back to it) finds the words by the keyword index"
NO_INPUT = "a query needs an input: a token, id, vector, positive/negative examples or text"


@dataclass(slots=True)
class Probe:
    """A query's unit vector, the rows left out of its answer (its inputs, as gensim does) and the query as the
    answer echoes it."""

    vector: np.ndarray  # (dim,) float32, unit length
    exclude: set[int]
    info: dict[str, Any]


# ---------------------------------------------------------------------------------------- inputs to vectors
def _word(table: Table, text: str, compose: Literal["mean"] | None) -> Probe:
    """One word: its row if the table has it, else (with ``compose="mean"``) the mean of its tokenizer pieces."""
    found = table.lookup.find(text)
    if found is None and compose == "mean":
        vector, pieces = table.compose(text)
        info = {
            "text": text,
            "match": "composed",
            "compose": "mean",
            "tokens": [{"id": i, "token": t} for i, t in pieces],
        }
        return Probe(vector[0], {i for i, _ in pieces}, info)
    if found is None:
        found = table.resolve(text)  # raises UnknownToken with suggestions
    info = found.as_dict()  # the lookup's part done before the rows are read
    try:
        return Probe(mean_query(table.vectors, [found.id])[0], {found.id}, info)
    except InvalidQuery as exc:
        raise _undirected(table, [found], exc) from None


def _row(table: Table, row: int) -> Probe:
    found = table.resolve_id(row)
    try:
        return Probe(mean_query(table.vectors, [row])[0], {row}, found.as_dict())
    except InvalidQuery as exc:
        raise _undirected(table, [found], exc) from None


def no_direction(named: Sequence[dict[str, Any]]) -> InvalidQuery:
    """The 422 of a query whose rows ``named`` (their lookups, ``Resolved.as_dict``) are all zero vectors."""
    names = [f"id {n['id']}" if n["match"] == "id" else f"token {n['text']!r}" for n in named]
    whose = f"the vector of {names[0]} is" if len(names) == 1 else f"the vectors of {', '.join(names)} are"
    return InvalidQuery(
        f"{whose} all zeros: no direction to find neighbours by (a zero row's cosine with every row is 0)"
    )


def compared_rows(first: Table, second: Table, token: str) -> tuple[Resolved, Resolved]:
    """A word's row in each of two tables, whose neighbours ``/v1/compare`` sets side by side: 404 for a word either
    table lacks, and the 422 of its neighbours' query for a zero row (it has no neighbours to compare)."""
    rows = first.resolve(token), second.resolve(token)
    for table, found in zip((first, second), rows, strict=True):
        if not table.vectors[found.id].any():
            raise no_direction([found.as_dict()])
    return rows


def _undirected(table: Table, found: Sequence[Resolved], error: InvalidQuery) -> InvalidQuery:
    """The error of a query mean without direction (:func:`mean_query`'s ``error``): when every row ``found`` is a
    zero vector (an import keeps zero rows), the 422 naming them rather than saying that rows cancel out."""
    return no_direction([f.as_dict() for f in found]) if not table.vectors[[f.id for f in found]].any() else error


def _mean_of(table: Table, positive: Sequence[str], negative: Sequence[str]) -> Probe:
    """gensim ``most_similar``: the normalised mean of the unit rows, positive +1 and negative -1."""
    pos = [table.resolve(t) for t in positive]
    neg = [table.resolve(t) for t in negative]
    try:
        vector = mean_query(table.vectors, [r.id for r in pos], [r.id for r in neg])[0]
    except InvalidQuery as exc:
        raise _undirected(table, pos + neg, exc) if pos or neg else exc from None
    info = {"positive": [r.as_dict() for r in pos], "negative": [r.as_dict() for r in neg]}
    return Probe(vector, {r.id for r in pos + neg}, info)


def _raw_vector(table: Table, values: Sequence[float] | np.ndarray) -> Probe:
    """A client's vector: right length, finite, within float32, not zero; normalised here."""
    array = np.asarray(values, dtype=np.float64)
    if array.shape != (table.dim,):
        got, dims = counted(array.size, "value"), counted(table.dim, "dimension")
        raise InvalidQuery(f"the vector has {got}; table {table.name!r} has {dims}")
    if not within_float32(array):
        if not np.isfinite(array).all():
            raise InvalidQuery("the vector must contain only finite numbers (no NaN or Infinity)")
        raise InvalidQuery(f"vector values must fit in float32 (|x| <= {FLOAT32_MAX:.4g})")
    return Probe(unit_vector(array), set(), {})


def _documents(table: Table, query: Query, delta: Delta | None) -> Probe:
    """More like one document (itself left out), or the normalised mean of positive and negative documents'
    unit vectors (gensim ``most_similar``; they are left out); with a ``delta``, written documents too."""
    payload = table.documents("search it by vector")
    if query.document is not None:
        asked, positive, info = [query.document], 1, {"id": query.document}
    else:
        assert query.examples is not None
        examples = query.examples
        asked, positive = [*examples.positive, *examples.negative], len(examples.positive)
        info = {"positive": examples.positive, "negative": examples.negative}
    if delta is None:
        pos, neg = payload.row_of(asked[:positive]).tolist(), payload.row_of(asked[positive:]).tolist()
        return Probe(mean_query(table.vectors, pos, neg, "documents")[0], set(pos) | set(neg), info)
    order = delta.places()
    rows, vectors = [], []
    for ident in asked:
        document = delta.written(ident)
        if document is not None:
            rows.append(table.rows + order[document.id])
            vectors.append(document.vector)
        else:
            (row,) = delta.row_of([ident]).tolist()  # 404 for an unknown or deleted id
            rows.append(row)
            vectors.append(table.vectors[row])
    if len(asked) == 1 and positive == 1:
        mean = np.asarray(vectors[0], dtype=np.float64)
    else:
        weights = np.array([1.0] * positive + [-1.0] * (len(asked) - positive))
        mean = weights @ np.asarray(vectors, dtype=np.float64) / len(asked)
    norm = np.sqrt(mean @ mean)
    if norm < 1e-12:
        raise InvalidQuery("the positive and negative documents cancel out: the query vector is zero")
    return Probe((mean / norm).astype(np.float32), set(rows), info)


def _text(table: Table, encoder: Table | None, text: str) -> Probe:
    """A documents table's text query, embedded by ``encoder``: the table that embedded its documents at import,
    with the same pooling. A text with no word the encoder knows, or whose known words cancel out, is a
    :class:`NoKnownWord`; so is a blank one, with every encoder, as a blank document is no document (a transformer
    would embed it as [CLS] [SEP] alone, a vector every document scores by chance)."""
    record = table.encoder_record
    if record is None or encoder is None:
        raise InvalidQuery(
            f"table {table.name!r} records no encoder (its vectors came with the documents): send the query's "
            "vector from your own model, or search by keyword"
        )
    whose = f"the vocabulary the documents of {table.name!r} were embedded with ({encoder.name})"
    if not visible(text):  # blank, or only invisible characters (a zero-width space, NUL)
        raise no_known_word("text", text, whose)
    encoded = encoder_for(encoder).encode([text], record.get("pooling"), strict=False)
    if encoded.tokens[0] == 0:
        raise unembedded(encoded, 0, "text", text, whose)
    info = {"text": text, "encoder": encoder.name, "tokens": encoded.tokens[0], "unknown": encoded.unknown[0]}
    return Probe(encoded.vectors[0], set(), info)


def _analogy(table: Table, query: Query) -> Probe:
    """b + c - a as gensim ``most_similar(positive=[b, c], negative=[a])``; a, b and c are left out.

    A question whose offset b - a is zero ("a is to a as c is to ?") has no answer beyond c itself: 422. So is
    an expected answer that can never be given (one of a, b and c, or a row the search leaves out)."""
    question = query.analogy
    assert question is not None
    found = _mean_of(table, [question.b, question.c], [question.a])
    a = found.info["negative"][0]
    b, c = found.info["positive"]
    if a["id"] == b["id"] or np.array_equal(table.vectors[a["id"]], table.vectors[b["id"]]):
        raise InvalidQuery(
            f"the analogy's offset b - a is zero ({question.a!r} and {question.b!r} are the same vector): "
            "give two different words for a and b"
        )
    found.info = {"a": a, "b": b, "c": c}
    if question.expect is not None:
        expect = table.resolve(question.expect)
        diagnostics.check_expected(table, (a["id"], b["id"], c["id"]), expect.id, query.options)
        found.info["expect"] = expect.as_dict()
    return found


def probe(table: Table, query: Query, encoder: Table | None = None, delta: Delta | None = None) -> Probe:
    """The unit vector ``query``'s input stands for and the rows it leaves out (its text is embedded by
    ``encoder``; document ids are looked up in the version and, with a ``delta``, the written documents)."""
    if query.token is not None:
        return _word(table, query.token, query.compose)
    if query.row is not None:
        return _row(table, query.row)
    if query.vector is not None:
        return _raw_vector(table, query.vector)
    if query.analogy is not None:
        return _analogy(table, query)
    examples = query.examples
    if examples is not None and not examples.documents:
        return _mean_of(table, examples.positive, examples.negative)
    if query.document is not None or examples is not None:
        return _documents(table, query, delta)
    if query.text is not None:
        return _text(table, encoder, query.text)
    raise InvalidQuery(NO_INPUT)


def similarity(table: Table, a: str, b: str, compose: Literal["mean"] | None = None) -> tuple[float, dict[str, Any]]:
    """gensim ``similarity``: the cosine of two tokens (:meth:`Table.similarity` of their rows; a zero row's is 0),
    a token the table does not hold composed from its tokenizer pieces with ``compose``; and how each was found."""
    (left, found_a), (right, found_b) = _side(table, a, compose), _side(table, b, compose)
    info = {"a": found_a, "b": found_b}
    if isinstance(left, int) and isinstance(right, int):
        return table.similarity(left, right), info
    one, other = (table.vectors[s] if isinstance(s, int) else s for s in (left, right))
    return float(pair_cosines(one[None], other[None])[0]), info


def similarities(
    table: Table, pairs: Sequence[Sequence[str]], compose: Literal["mean"] | None = None
) -> list[float | Failed]:
    """The cosine of each pair of tokens, or its error (an unknown token: its :class:`Failed`); plain rows scored
    together."""
    out: list[float | Failed] = []
    rows: list[tuple[int, int, int]] = []  # (position, row a, row b) of the pairs of rows, scored at once
    for position, (a, b) in enumerate(pairs):
        try:
            if compose is None:
                rows.append((position, table.resolve(a).id, table.resolve(b).id))
                out.append(0.0)
            else:
                out.append(similarity(table, a, b, compose)[0])
        except EmbeddingError as exc:
            out.append(Failed(exc))
    if rows:
        positions, left, right = (list(column) for column in zip(*rows, strict=True))
        for position, value in zip(positions, table.similarities(left, right).tolist(), strict=True):
            out[position] = value
    return out


def _side(table: Table, token: str, compose: Literal["mean"] | None) -> tuple[int | np.ndarray, dict[str, Any]]:
    """A token's row and its lookup when the table holds it (a zero row too: its cosine with every token is 0, as
    gensim's), else, with ``compose``, the unit mean of its tokenizer pieces."""
    found = table.lookup.find(token)
    if found is None:  # composed, or UnknownToken with suggestions
        probed = probe(table, Query(token=token, compose=compose))
        return probed.vector, probed.info
    return found.id, found.as_dict()


# ------------------------------------------------------------------------------------------- mode rules
@dataclass(slots=True)
class _Item:
    """A query made ready: the mode it runs in, its vector side (None in mode keyword) and the fallback taken."""

    query: Query
    mode: Mode
    probe: Probe | None
    fallback: dict[str, str] | None = None
    rows: RowSet | None = None  # the rows its filter passes (None: no filter)


def _prepare(table: Table, query: Query, encoder: Table | None, delta: Delta | None) -> _Item:
    """A query's mode, vector side and fallback; a 422 for what the mode lacks or the table cannot do. Text alone
    in mode hybrid none of whose words the encoder knows (a command name, a product code, a typo) is searched by
    keyword alone, and the answer says so (``fallback``); text none of whose words a document holds, by vector
    alone. ``min_score`` (a floor on fused scores) and ``diversity`` keep mode hybrid as asked."""
    mode, text, vector_input = query.mode, query.text, query.vector_input
    if text is None and not vector_input:
        raise InvalidQuery(NO_INPUT)
    if query.problem is not None:  # its page and the mode rules, read where the query was made
        raise InvalidQuery(query.problem)
    if query.words_input:
        return _Item(query, "vector", probe(table, query))
    if mode != "vector" and table.keyword is None:  # what the table says, not the query
        raise InvalidQuery(
            f"mode {mode}: table {table.name!r} has no keyword index (its documents have no text); search it by vector"
        )
    if mode == "vector" and text is not None and vector_input:
        raise InvalidQuery(
            "text: mode vector searches by one query: a vector, id or positive/negative ids, or text alone (embedded "
            "by the table's encoder); use mode hybrid to search by both"
        )
    if vector_input:
        found = probe(table, query, encoder, delta)
    elif mode == "keyword" or text is None:
        return _Item(query, mode, None)
    else:
        try:
            found = _text(table, encoder, text)  # 422 when the table records no encoder
        except NoKnownWord as exc:
            if not keyword_fallback(query):
                hint = KEYWORD_HINT if exc.details.get("words") else ""  # a text of no words: none to find either
                raise NoKnownWord(exc.message + hint, **exc.details) from None
            return _Item(query, "keyword", None, {"mode": "keyword", "reason": exc.message})
    item = _Item(query, mode, found)  # made beside the probe, before the keyword index is asked
    if text is not None and vector_fallback(query) and not _has_keyword(table, text, delta):
        item.mode, item.fallback = "vector", by_vector_alone(table.name, text)
    return item


def keyword_fallback(query: Query) -> bool:
    """Whether ``query`` is searched by keyword alone when none of its text's words is known to the encoder: mode
    hybrid, text alone, no ``diversity`` or ``min_score`` (they need its vector). Else that text is refused. The
    whole table's rule, and the sharded front's (``service.scatter``)."""
    return query.mode == "hybrid" and not query.vector_input and not query.diversity and query.min_score is None


def vector_fallback(query: Query) -> bool:
    """Whether ``query`` is searched by its vector alone when no live document holds a word of its text: mode
    hybrid with text and no ``min_score`` (a floor on fused scores, kept hybrid as asked). The whole table's rule,
    and the sharded front's (``service.scatter``)."""
    return query.mode == "hybrid" and query.text is not None and query.min_score is None


def by_vector_alone(table: str, text: str) -> dict[str, str]:
    """The ``fallback`` of a hybrid query none of whose text's words a live document of ``table`` holds: it is
    searched by its vector alone (a sharded table's front says so as the whole table does)."""
    reason = f"no document of {table!r} holds a word of text {preview(text)} as the keyword index reads it"
    return {"mode": "vector", "reason": reason}


def _has_keyword(table: Table, text: str, delta: Delta | None) -> bool:
    """Whether some live document holds a word of ``text`` (mode hybrid's keyword list is not empty, filter aside):
    the version's words looked up (``KeywordIndex.holds``); with a ``delta``, a written document counts and a
    deleted one does not (``LiveKeyword.holds``)."""
    keyword = table.keyword if delta is None else LiveSource(table, delta).keyword
    assert keyword is not None  # checked by _prepare for modes keyword and hybrid
    return keyword.holds(text)


# ------------------------------------------------------------------------------------------------- runs
class Split(NamedTuple):
    """A plain query's one engine request (:attr:`search`), the step that makes its answers results, and whether
    an analogy's expected answer is to be reported after it (:func:`expectations`, which scores every row)."""

    search: Search
    finish: Callable[[Answers], list[Answer]]
    expects: bool


def split(table: Table, query: Query, encoder: Table | None = None, delta: Delta | None = None) -> Split | None:
    """A plain ``query`` (:attr:`Query.plain`) as one engine request and its finish, or None when it is not plain
    (filtered, keyword, hybrid, diverse, text alone) or has writes to merge: :func:`run` answers it then. Its error
    raises here. (A caller that reads ``plain`` itself, to decide where a query runs, need not call it otherwise.)"""
    if not query.plain or delta is not None:
        return None
    expects = expecting(query)
    if query.problem is None and query.text is None and query.min_score is None:  # nothing to check: the hot path
        found = probe(table, query, encoder, delta)
    else:
        item = _prepare(table, query, encoder, delta)
        assert item.probe is not None
        found = item.probe
    if query.analogy is not None:
        info = found.info
        question = (info["a"]["id"], info["b"]["id"], info["c"]["id"])
        search: Search = AnalogySearch([question], query.k, query.method, query.options)
    else:
        exclude = found.exclude | set(query.exclude) if query.exclude else found.exclude
        search = VectorSearch(
            found.vector[None, :],
            query.k,
            [exclude] if exclude else (),
            query.options,
            None,
            query.offset,
            query.min_score,
        )

    def finish(answers: Answers) -> list[Answer]:
        return [_result(query, found, answers[0])]

    return Split(search, finish, expects)


def run(
    table: Table, queries: Sequence[Query], encoder: Table | None = None, delta: Delta | None = None
) -> list[Answer]:
    """Answer each of ``queries`` in order (its result, or its error): one engine request per group of items
    sharing a filter, page and mode. ``encoder`` embeds texts (their tokens over the request's bound raise, for the
    whole batch: :class:`TooManyTokens`; so do filters over its bound of rows: :class:`OverBudget`); ``delta`` holds
    the documents written since the version, searched beside it."""
    out: list[Answer | None] = [None] * len(queries)  # every place is set: a failure, or its group's answer
    groups: dict[Any, list[tuple[int, _Item]]] = {}
    for position, query in enumerate(queries):
        try:  # one item's error is its answer
            item = _prepare(table, query, encoder, delta)
            if query.filter is not None:
                item.rows = table.filter(query.filter)
        except (TooManyTokens, OverBudget):  # the request's bounds, which its items share: the whole request is refused
            raise
        except EmbeddingError as exc:
            out[position] = Failed(exc)
            continue
        groups.setdefault(_key(item), []).append((position, item))
    for members in groups.values():
        items = [item for _, item in members]
        for (position, _), answer in zip(members, _run_group(table, items, delta), strict=True):
            out[position] = answer
    return cast(list[Answer], out)


def _key(item: _Item) -> Any:
    """What the items of one engine request share."""
    q = item.query
    spec = None if q.filter is None else json.dumps(q.filter, sort_keys=True)
    options = q.options  # its fields: hashing the frozen options would be one more call per item
    return (
        spec,
        q.offset,
        q.min_score,
        item.mode,
        q.analogy is not None,
        q.k,
        (options.exact, options.restrict, options.skip_special, options.whole_words_only),
        q.diversity,
        q.rrf_k,
        q.weights,
        q.method,
        q.statistics,
    )


def _run_group(table: Table, items: list[_Item], delta: Delta | None) -> list[Answer]:
    """The answers of items sharing a mode, a filter and a page: a plain vector search (``Table.run``, or the
    version and the written documents merged) unless the mode or diversity asks for ``index.engine.hybrid``."""
    first = items[0].query
    mode = items[0].mode
    probes = [item.probe for item in items if item.probe is not None]
    if first.analogy is not None:
        asked = [(p.info["a"]["id"], p.info["b"]["id"], p.info["c"]["id"]) for p in probes]
        answers = table.run(AnalogySearch(asked, first.k, first.method, first.options))
        return [_result(item.query, p, hits) for item, p, hits in zip(items, probes, answers, strict=True)]
    rows = items[0].rows
    passing = None if rows is None else _passing(delta, first, rows)
    excludes = [p.exclude | set(item.query.exclude) for item, p in zip(items, probes, strict=False)]
    found: Any  # per item: Neighbor hits, or Hit when ranked
    ranked = bool(mode != "vector" or first.diversity)
    if not ranked:
        matrix = np.vstack([p.vector for p in probes]).astype(np.float32, copy=False)
        search = VectorSearch(
            matrix, first.k, excludes if any(excludes) else (), first.options, rows, first.offset, first.min_score
        )
        found = table.run(search) if delta is None else vector_search(table, delta, search, _written(delta, first))
    else:
        source: Table | LiveSource = table
        if first.statistics is not None and delta is None and mode != "vector" and table.payload is not None:
            delta = unwritten(table)  # nothing written here: scored as the whole, over the table's kept state
        if delta is not None:
            source = LiveSource(table, delta, first.statistics)
            version = (np.ones(table.rows, dtype=bool) if rows is None else rows.mask) & ~delta.deleted
            written = _written(delta, first)
            extra = np.ones(source.rows - table.rows, dtype=bool) if written is None else written
            rows = RowSet(np.concatenate([version, extra]))
        texts = [item.query.text for item in items if item.query.text is not None]
        search_documents = DocumentSearch(
            mode,
            first.k,
            None if mode == "keyword" else np.vstack([p.vector for p in probes]).astype(np.float32, copy=False),
            None if mode == "vector" else texts,
            [] if mode == "keyword" else excludes,
            first.options,
            rows,
            first.offset,
            first.min_score,
            first.rrf_k,
            first.weights,
            first.diversity or 0.0,
        )
        found = run_hybrid(source, search_documents)
    out: list[Answer] = []
    for item, shown in zip(items, found, strict=True):
        info = {} if item.probe is None else item.probe.info
        out.append(Result(shown, info, passing, item.fallback, ranked=ranked))
    return out


def _result(query: Query, found: Probe, hits: list[Neighbor]) -> Result:
    """A plain search's result; an analogy's echoes a, b and c and the method, and holds its expected answer
    (rank, score and margin reported by :func:`expectations`)."""
    if query.analogy is None:
        return Result(hits, found.info)
    info = found.info
    shown = {"a": info["a"], "b": info["b"], "c": info["c"], "method": query.method}
    expect = info.get("expect")
    return Result(hits, shown, expect=None if expect is None else {"token": expect["token"], "id": expect["id"]})


def _written(delta: Delta, query: Query) -> np.ndarray | None:
    """A boolean per written document (in write order): passes the query's filter (None: no filter)."""
    return None if query.filter is None else delta.passing(query.filter)


def _passing(delta: Delta | None, query: Query, rows: RowSet) -> int:
    """How many live documents pass the query's filter (``rows``: those of the version)."""
    if delta is None:
        return rows.count
    written = _written(delta, query)
    return int((rows.mask & ~delta.deleted).sum()) + (0 if written is None else int(written.sum()))


# ----------------------------------------------------------------------------------------------- analogies
def expecting(query: Query) -> bool:
    """Whether ``query`` is an analogy with an expected answer to report (:func:`expectations`, after its search)."""
    return query.analogy is not None and query.analogy.expect is not None


def expectations(table: Table, queries: Sequence[Query], answers: Sequence[Answer]) -> None:
    """Each analogy's expected answer's rank among every candidate its method scores, its score and the best
    candidate's margin over it (``index.engine.diagnostics``), added to its result's ``expect``; exact even on an
    approximate table, so it scores every row."""
    asked = [
        (query, answer)
        for query, answer in zip(queries, answers, strict=True)
        if isinstance(answer, Result) and answer.expect is not None
    ]
    if not asked:
        return
    first = asked[0][0]
    found = diagnostics.analogy_expectations(
        table,
        [(r.query["a"]["id"], r.query["b"]["id"], r.query["c"]["id"]) for _, r in asked],
        [r.expect["id"] for _, r in asked if r.expect is not None],
        first.method,
        restrict=first.options.restrict,
        skip_special=first.options.skip_special,
        whole_words_only=first.options.whole_words_only,
    )
    for (_, result), expectation in zip(asked, found, strict=True):
        assert result.expect is not None
        result.expect.update(expectation.as_dict())
