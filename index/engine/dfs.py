"""A sharded table's keyword statistics for one query, gathered from its shards: Elasticsearch's
``dfs_query_then_fetch``.

Every shard's keyword index is scored with the whole table's BM25 statistics as imported; writes change them
(documents added, replaced and deleted in some shards). So that a front's keyword and hybrid answers after writes
are the whole table's, it first asks every shard for its :func:`gather` of the query's words: its documents and
their words (the version's, and the live ones: the version's not deleted and the written ones) and each word's
document frequency (the version's and the live one). Their sums (:func:`summed`) are the whole table's, which
every shard then scores with (``index.engine.live_search.Statistics``, ``LiveKeyword.scored_with``): the live
ones to score; the version's to read its stored scores back into term counts, unless the shard keeps the whole
table's statistics its version was scored with (``KeywordIndex.whole``, every shard of a current import), which
it reads them back with instead: while a shard's replicas reload a compaction, some shards answer from the new
version and some from the old, whose version parts do not add up to either (their live parts are the same).
The sums are sent when some shard was written to since its version, or when the shards' versions were scored
with different whole tables' statistics (``scored_with``). A shard refuses statistics that cannot be those of a
whole table holding its own documents (fewer documents or word counts than its own, or missing a word of the
query).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from index.engine.delta import Delta, unwritten
from index.engine.live_search import LiveKeyword
from index.engine.table import Table
from index.errors import InvalidQuery

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from index.lazy import pa


def live_keyword(table: Table, delta: Delta | None) -> LiveKeyword:
    """The keyword index over the table's version and its writes (``delta``; None: none)."""
    if table.keyword is None or table.payload is None:
        raise InvalidQuery(f"table {table.name!r} has no keyword index (its documents have no text)")
    written = unwritten(table) if delta is None else delta
    return written.cached("keyword", lambda: LiveKeyword(table, written))


def gather(table: Table, delta: Delta | None, texts: Sequence[str]) -> dict[str, Any]:
    """This table's part of the statistics of ``texts``' words: ``documents``, ``words`` and each word's
    document frequency in ``terms``, each [the version's, the live documents'], and whether anything was
    ``written`` since the version."""
    index = live_keyword(table, delta)
    words = sorted(set(index.tokenizer(pa.array(list(texts), pa.string())).terms.to_pylist()))
    terms = {}
    for word in words:
        rows, _ = index.index.postings(word)
        written, _ = index._written_postings(word)
        terms[word] = [len(rows), int((~index.deleted[rows]).sum()) + len(written)]
    whole = index.index.whole
    return {
        "documents": [index.base, index.n],
        "words": list(index.word_counts),
        "terms": terms,
        "written": bool(delta is not None and (delta.documents or delta.deleted.any())),
        "scored_with": None if whole is None else [whole.documents, whole.words],
    }


def summed(parts: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The whole table's statistics from its shards' :func:`gather` (the request field ``keyword_statistics``);
    None when no shard was written to since its version and every version was scored with the same whole
    table's statistics (each scores with the whole table's already; not while its replicas reload a compaction,
    some shards of the new version, some of the old)."""
    versions = {tuple(part.get("scored_with") or ()) for part in parts}
    if not any(part["written"] for part in parts) and len(versions) <= 1:
        return None
    terms: dict[str, list[int]] = {}
    for part in parts:
        for word, (version, live) in part["terms"].items():
            counts = terms.setdefault(word, [0, 0])
            counts[0] += version
            counts[1] += live
    return {
        "documents": [sum(part["documents"][i] for part in parts) for i in (0, 1)],
        "words": [sum(part["words"][i] for part in parts) for i in (0, 1)],
        "terms": terms,
    }
