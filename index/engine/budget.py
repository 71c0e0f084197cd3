"""A request's bounds on the rows it scores one by one: ``max_scored_rows``, beyond its searches' kernels (the
documents its keyword queries' words add up, each filter condition's pass over a table's rows, the candidates a
diverse (MMR) search compares with each hit it chooses), and ``max_exact_rows``, the rows its exact searches score
(queries x rows). Each is one count for the whole request, checked before each part's work: past the bound, the
request is refused, naming the server's setting."""

from __future__ import annotations

from contextvars import ContextVar

from index.errors import OverLimit

SCORE_SETTING, EXACT_SETTING = "max_scored_rows", "max_exact_rows"
# Each bound and the rows spent so far, ``[bound, spent]``: a list, so that every copy of the request's context (the
# worker thread a search runs in) spends from the same count; the server sets them per request, None (the builder,
# the tests of the engine) bounds nothing.
SCORE_BUDGET: ContextVar[list[int] | None] = ContextVar("score_budget", default=None)
EXACT_BUDGET: ContextVar[list[int] | None] = ContextVar("exact_budget", default=None)


class OverBudget(OverLimit):
    """Rows over one of the request's bounds: the whole request is refused, a batch too (its items count together),
    never one item of it."""


def spend(rows: int, what: str, advice: str, aside: str = "") -> None:
    """Count ``rows`` the request is about to score against its bound (:data:`SCORE_BUDGET`): past it, the whole
    request is refused before they are. ``what`` says what adds them up (``aside``: how), ``advice`` what to send
    instead."""
    _spend(SCORE_BUDGET, SCORE_SETTING, rows, f"{what} add up to {{total}}{aside}", advice)


EXACT_ADVICE = "send fewer queries at a time (a table's approximate index, exact false, scores a few rows a query)"


def spend_exact(queries: int, rows: int, whose: str = "exact search: its queries", advice: str = EXACT_ADVICE) -> None:
    """Count the rows an exact search of ``queries`` over ``rows`` rows scores (:data:`EXACT_BUDGET`); ``whose``:
    what scores them, ``advice``: what to send instead."""
    what = f"{whose} x the rows they score add up to {{total}} ({queries:,} x {rows:,} here)"
    _spend(EXACT_BUDGET, EXACT_SETTING, queries * rows, what, advice)


def _spend(budget_of: ContextVar[list[int] | None], setting: str, rows: int, what: str, advice: str) -> None:
    budget = budget_of.get()
    if budget is None:
        return
    bound, spent = budget
    if spent + rows > bound:
        said = what.format(total=f"{spent + rows:,}")
        raise OverBudget(f"{said}, more than the server's {setting} of {bound:,}; {advice}", setting)
    budget[1] = spent + rows
