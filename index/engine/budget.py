"""A request's bound on the rows it scores or tests one by one, beyond its searches' kernels: the documents its
keyword queries' words add up, each filter condition's pass over a table's rows, and the candidates a diverse
(MMR) search compares with each hit it chooses. One count for the whole request, checked before each part's work:
past the bound, the request is refused, naming the server's setting."""

from __future__ import annotations

from contextvars import ContextVar

from index.errors import OverLimit

SCORE_SETTING = "max_scored_rows"
# The request's bound and the rows spent so far, ``[bound, spent]``: a list, so that every copy of the request's
# context (the worker thread a search runs in) spends from the same count; the server sets it per request, None
# (the builder, the tests of the engine) bounds nothing.
SCORE_BUDGET: ContextVar[list[int] | None] = ContextVar("score_budget", default=None)


class OverBudget(OverLimit):
    """Rows over the request's bound: the whole request is refused, a batch too (its items count together), never
    one item of it."""


def spend(rows: int, what: str, advice: str, aside: str = "") -> None:
    """Count ``rows`` the request is about to score against its bound (:data:`SCORE_BUDGET`): past it, the whole
    request is refused before they are. ``what`` says what adds them up (``aside``: how), ``advice`` what to send
    instead."""
    budget = SCORE_BUDGET.get()
    if budget is None:
        return
    bound, spent = budget
    if spent + rows > bound:
        raise OverBudget(
            f"{what} add up to {spent + rows:,}{aside}, more than the server's {SCORE_SETTING} of {bound:,}; {advice}",
            SCORE_SETTING,
        )
    budget[1] = spent + rows
