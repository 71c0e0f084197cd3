"""How a call of many items is sent in runs the server takes: its limits (``GET /v1/limits``) and its tables' rows
read once and kept (:class:`Known`), the items cut into runs within them (:func:`in_runs`), a run refused for a
limit whose cost the client cannot know beforehand sent again in halves (:func:`halved`), and a batch call of the
API sent so, the runs' answers joined in order (:func:`batched`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from service_client.request import Call, Request, refused_for
from service_client.shapes import WRITE_BYTES, ApiError, _encoded, segment, spans

BATCH_ITEMS = 1024  # the items of one batch request when the server does not say its max_batch: its default


@dataclass
class Known:
    """What a client learns of its server and keeps: its limits (``GET /v1/limits``), read by the first call that
    needs them, and the tables whose rows a batch's exact searches score (``GET /v1/tables/{table}``); both read
    again when a request sized by them is refused for one of the limits (:func:`in_runs`: the server restarted
    with lower limits, a front's shards changed, a table grew); ``{}`` from a server that does not publish its
    limits (the clients then use the defaults' sizes)."""

    limits: dict[str, Any] | None = None
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    def forget(self) -> None:
        self.limits = None
        self.tables.clear()


def limits(known: Known) -> Call[dict[str, Any]]:
    if known.limits is None:
        known.limits = yield Request("GET", "/v1/limits", missing={})
    return dict(known.limits)


def described(table: str, known: Known) -> Call[dict[str, Any]]:
    """The table's description (``GET /v1/tables/{table}``: ``rows``, ``approximate``, ...), read once."""
    if table not in known.tables:
        known.tables[table] = yield Request("GET", f"/v1/tables/{segment(table)}")
    return known.tables[table]


def batch_size(limits: dict[str, Any], most: int) -> int:
    """The items one batch request of the client's holds: ``most``, fewer if the server's ``max_batch`` is."""
    return min(most, int(limits.get("max_batch", most)))


def body_budget(limits: dict[str, Any]) -> int:
    """The bytes of JSON the client puts in one request of many items, about: half the server's body limit
    (``WRITE_BYTES`` for a server that does not say it)."""
    return int(limits.get("max_body_bytes", 2 * WRITE_BYTES)) // 2


# How a call's items are cut into runs: ``cut(known, start)`` reads what it needs of the server (kept in ``known``)
# and answers the runs ``(start, end)`` of the items from ``start`` on.
Cut = Callable[[Known, int], Call[list[tuple[int, int]]]]


def by_bytes(sizes: Sequence[int], most: int) -> Cut:
    """Runs of the items whose encoded ``sizes`` are given: at most ``most`` items, fewer if the server's
    ``max_batch`` is (:func:`batch_size`), and :func:`body_budget` bytes."""

    def cut(known: Known, start: int) -> Call[list[tuple[int, int]]]:
        found = yield from limits(known)
        return _from(start, spans(sizes[start:], batch_size(found, most), body_budget(found)))

    return cut


def _from(start: int, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(start + first, start + end) for first, end in runs]


# A run's requests: ``run(start, end, sized)`` sends items ``start`` to ``end`` and answers None, or, refused for a
# limit of SIZING while ``sized`` (its requests' refusal is then their answer), the first item it did not send.
Run = Callable[[int, int, bool], Call[int | None]]


def in_runs(count: int, known: Known, cut: Cut, run: Run) -> Call[None]:
    """``count`` items sent by ``run`` in the runs ``cut`` makes. A run refused for a limit it was cut by (lowered
    since it was read): what ``cut`` reads read again and the items from the first unsent cut by it, once; a second
    refusal is raised. No items: no runs, and nothing read."""
    if not count:
        return
    start, sized = 0, True
    while True:
        unsent = None
        for first, end in (yield from cut(known, start)):
            unsent = yield from run(first, end, sized)
            if unsent is not None:
                break
        if unsent is None:
            return
        known.forget()
        start, sized = unsent, False


# A request of items ``start`` to ``end``: ``send(start, end, sized, halves)`` sends them and answers None, or, refused
# for a limit of SIZING while ``sized`` or for ``halves`` (the request's refusal is then its answer), that refusal.
Send = Callable[[int, int, bool, str | None], Call[ApiError | None]]


def halved(send: Send, limit: str | None) -> Run:
    """A :data:`Run` of ``send``'s requests: items refused together for ``limit`` (too many tokens or bytes at once:
    the request did nothing) are sent again in halves, each halved again while refused, in order; one item refused
    so is raised. Refused for a limit of SIZING: the first item not sent. ``limit`` None: no halves."""

    def run(start: int, end: int, sized: bool) -> Call[int | None]:
        refused = yield from send(start, end, sized, limit if end - start > 1 else None)
        if refused is None:
            return None
        if limit is None or not refused_for(refused, limit):
            return start
        middle = (start + end) // 2
        for first, last in ((start, middle), (middle, end)):
            if (unsent := (yield from run(first, last, sized))) is not None:
                return unsent
        return None

    return run


# A table whose rows each item of a batch scores one by one: ``(table, limit, rows)``, ``rows`` those of one item
# from the table's description (:func:`described`), counted against the server's ``limit``.
Scan = tuple[str, str, Callable[[dict[str, Any]], int]]


@dataclass(frozen=True)
class Batch:
    """A batch request (``POST path``: ``body`` and its ``items`` under ``key``), sent in runs within the limits the
    client can count beforehand: ``max_batch`` items, half ``max_body_bytes`` of JSON, and per limit of ``costs``
    each item's cost (``max_hits``: its k; ``max_words``: its words) and of ``scans`` the rows it scores. A run
    refused for ``halves`` (a cost the server alone counts: ``max_encode_tokens``) is sent again in halves."""

    path: str
    key: str
    items: list[Any]
    body: dict[str, Any]
    costs: tuple[tuple[str, Sequence[int]], ...] = ()
    scans: tuple[Scan, ...] = ()
    halves: str | None = None
    unused: Callable[[list[Any]], tuple[str, ...]] | None = None  # keys of ``body`` a run of these items leaves out

    def cut(self) -> Cut:
        sizes = [len(_encoded(item)) + 1 for item in self.items]

        def cut(known: Known, start: int) -> Call[list[tuple[int, int]]]:
            found = yield from limits(known)
            costs = {limit: list(each) for limit, each in self.costs}
            for table, limit, rows in (scan for scan in self.scans if scan[1] in found):  # a server's limit only
                scored = rows((yield from described(table, known)))
                costs[limit] = [c + scored for c in costs.get(limit, [0] * len(sizes))]
            also = [(each[start:], int(found[limit])) for limit, each in costs.items() if limit in found]
            return _from(start, spans(sizes[start:], batch_size(found, BATCH_ITEMS), body_budget(found), also))

        return cut


def batched(batch: Batch, known: Known) -> Call[Any]:
    """``batch``'s answer: its runs' (:meth:`Batch.cut`, :func:`in_runs`) joined in order, each list of the answer
    the runs' lists one after the other, its other values the first run's; one run: its answer as it is. No items:
    the one request (the server's answer to it, or refusal)."""

    def request(start: int, end: int, sized: bool, halves: str | None) -> Request:
        items = batch.items[start:end]
        unused = () if batch.unused is None else batch.unused(items)
        body = {batch.key: items, **{key: value for key, value in batch.body.items() if key not in unused}}
        return Request("POST", batch.path, json=body, first=start, items=batch.key, sized=sized, halves=halves)

    if not batch.items:
        return (yield request(0, 0, False, None))
    answers: list[dict[str, Any]] = []

    def send(start: int, end: int, sized: bool, halves: str | None) -> Call[ApiError | None]:
        answer = yield request(start, end, sized, halves)
        if isinstance(answer, ApiError):
            return answer
        answers.append(answer)
        return None

    yield from in_runs(len(batch.items), known, batch.cut(), halved(send, batch.halves))
    if len(answers) == 1:
        return answers[0]
    return {
        key: [item for answer in answers for item in answer[key]] if isinstance(value, list) else value
        for key, value in answers[0].items()
    }


def scanned(options: dict[str, Any]) -> Callable[[dict[str, Any]], int]:
    """The rows one query of a search with ``options`` scores one by one (an exact search's, ``max_exact_rows``)
    in a table so described: with ``restrict``, its first rows; with ``exact``, or in a table without an
    approximate index, every row; else none the client can count (a filter that leaves few rows has them searched
    exactly: the server counts them)."""

    def rows(table: dict[str, Any]) -> int:
        every = int(table.get("rows", 0))
        if options.get("restrict"):
            return min(int(options["restrict"]), every)
        return every if options.get("exact") or table.get("approximate") is False else 0

    return rows
