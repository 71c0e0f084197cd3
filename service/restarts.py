"""When ``embedding-serve --workers N`` replaces a dead worker: at once, unless the workers of its slot keep dying
soon after their start (a key file gone, the tables' memory not to be had, a lifespan that fails). Then each
replacement waits, the wait doubling up to a cap, as systemd's restart limit and Kubernetes' CrashLoopBackOff do:
uvicorn's supervisor replaced such a worker on every pass of its half-second loop, for ever, forking and logging
twice a second while the other workers served on.
"""

from __future__ import annotations

# The first wait: uvicorn's pass over the workers, so a worker that dies once comes back as soon as before.
FIRST_WAIT_SECONDS = 0.5
# The longest wait: a worker whose cause of death is fixed (the key file back) serves again within it, and a slot
# that keeps failing costs one start, and one log line, per half minute.
MAX_WAIT_SECONDS = 30.0
# A worker that lived this long was not dying at its start: its replacement starts at once, the wait starts over.
STEADY_SECONDS = MAX_WAIT_SECONDS


class RestartWaits:
    """The wait of each worker slot (its index in the supervisor's list) before its dead worker is replaced."""

    def __init__(self) -> None:
        self._waits: dict[int, float] = {}  # the last wait of each slot (0: its worker had lived long enough)
        self._due: dict[int, float] = {}  # when the replacement of each waiting slot starts (time.monotonic)

    def died(self, slot: int, lived: float, now: float) -> float:
        """The worker of ``slot`` died ``lived`` seconds after its start: the seconds its replacement waits (0:
        none, it starts now)."""
        if lived >= STEADY_SECONDS:
            wait = 0.0
        else:
            wait = min(2 * self._waits.get(slot, 0.0) or FIRST_WAIT_SECONDS, MAX_WAIT_SECONDS)
        self._waits[slot] = wait
        if wait:
            self._due[slot] = now + wait
        return wait

    def waiting(self, slot: int, now: float) -> bool:
        """Whether the replacement of ``slot``'s dead worker is still to wait (False once it is due: start it)."""
        due = self._due.get(slot)
        if due is None or now >= due:
            self._due.pop(slot, None)
            return False
        return True

    def forget(self, slot: int) -> None:
        """``slot`` is no more (SIGTTOU removed its worker)."""
        self._waits.pop(slot, None)
        self._due.pop(slot, None)
