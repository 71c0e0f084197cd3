"""Draining before a shutdown: on SIGTERM (or SIGINT) readiness fails at once, the server keeps serving for
``EMBEDDING_DRAIN_SECONDS``, then uvicorn's own shutdown runs (it stops accepting connections, closes the idle
ones, waits up to ``EMBEDDING_SHUTDOWN_TIMEOUT`` for the requests in flight, and the process exits 0).

uvicorn stops accepting connections the moment it gets the signal; a load balancer or a Kubernetes Service
still sends new connections to the replica until it sees readiness fail. The drain covers that time. While it
lasts, every answer carries ``Connection: close`` (``service.http.protocol``), so kept-alive clients reconnect
elsewhere. A second SIGINT (Ctrl-C twice) ends the drain at once; a repeated SIGTERM (from a process manager and
the ``--workers`` supervisor alike) changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
Handler = Callable[[int, FrameType | None], Any]


class Drain:
    """Wraps the server's own SIGTERM/SIGINT handlers (uvicorn's) in the lifespan of the app."""

    def __init__(self, seconds: float, on_start: Callable[[], None]) -> None:
        self.seconds = seconds
        self.on_start = on_start  # e.g. make /readyz answer 503
        self.draining = False
        self._signalled = False
        self._ended = False
        self._previous: dict[int, Handler] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def install(self) -> bool:
        """Take over SIGTERM and SIGINT from the server; only in the main thread of a process (as under uvicorn),
        and only where the server has Python handlers for them to pass the signal on to."""
        if threading.current_thread() is not threading.main_thread():
            return False
        self._loop = asyncio.get_running_loop()
        for sig in SIGNALS:
            previous = signal.getsignal(sig)
            if callable(previous):
                self._previous[sig] = previous
                signal.signal(sig, self._on_signal)
        return bool(self._previous)

    def remove(self) -> None:
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, previous)
        self._previous.clear()
        if self._timer is not None:
            self._timer.cancel()

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: it runs between two bytecodes of whatever the main thread does, so the work is
        # handed to the event loop.
        assert self._loop is not None
        if self._ended:
            self._previous[sig](sig, frame)  # the server's own handling (a second Ctrl-C forces the exit)
        elif not self._signalled:
            self._signalled = True
            self._loop.call_soon_threadsafe(self._begin, sig)
        elif sig == signal.SIGINT:
            self._loop.call_soon_threadsafe(self._end, sig)

    def _begin(self, sig: int) -> None:
        self.draining = True
        self.on_start()
        name = signal.Signals(sig).name
        if self.seconds <= 0:
            self._end(sig)
            return
        log.info("%s: readiness fails now; serving %gs more, then shutting down", name, self.seconds)
        assert self._loop is not None
        self._timer = self._loop.call_later(self.seconds, self._end, sig)

    def _end(self, sig: int) -> None:
        if self._ended:
            return
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
        self._previous[sig](sig, None)  # uvicorn's handle_exit: the graceful shutdown
