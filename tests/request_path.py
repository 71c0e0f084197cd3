"""One request followed through the project's modules: which ``index.*`` and ``service.*`` modules it enters, in
order, and how often it goes back into a module it had already left.

The request runs in process against a real app (``TestClient`` over ``create_app``) under ``sys.setprofile`` and
``threading.setprofile``, so the event loop's thread, the worker threads and the searcher thread are all followed.
Every Python function entered (a call, or a coroutine resumed) is one step, named by its module; steps in a row in
the same module are one visit. The HTTP middleware (``service.http.*`` but ``fastroute``, and ``service.app``,
which installs it) wraps every request and is listed apart, in neither the count nor the returns.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from fastapi.testclient import TestClient

from tests.service.conftest import client_for

PROJECT = ("index", "service")


def is_middleware(module: str) -> bool:
    return module == "service.app" or (module.startswith("service.http.") and module != "service.http.fastroute")


@dataclass
class RequestPath:
    """The modules one request entered: ``visits`` in order (a module once per visit), the middleware apart."""

    visits: list[str] = field(default_factory=list)
    middleware: list[str] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        """The project modules entered, in the order of their first visit."""
        return list(dict.fromkeys(self.visits))

    @property
    def returns(self) -> Counter[str]:
        """Per module, how many times the path came back to it after it had left it."""
        return Counter(self.visits) - Counter(self.modules)

    @property
    def most_returns(self) -> int:
        return max(self.returns.values(), default=0)

    def report(self) -> str:
        returns = ", ".join(f"{m} x{n}" for m, n in self.returns.most_common()) or "none"
        return (
            f"{len(self.modules)} modules: {' -> '.join(self.modules)}\n"
            f"visits: {' -> '.join(self.visits)}\n"
            f"returns: {sum(self.returns.values())} ({returns})\n"
            f"middleware: {', '.join(dict.fromkeys(self.middleware)) or 'none'}"
        )


class Tracer:
    """A profile function for every thread; it records only while a request is being followed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: RequestPath | None = None
        self.last: dict[int, str] = {}  # per thread, the module of its last step

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        path = self.path
        if path is None or event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module.split(".")[0] not in PROJECT:
            return
        with self.lock:
            if is_middleware(module):
                path.middleware.append(module)
            elif not path.visits or path.visits[-1] != module:
                path.visits.append(module)

    @contextmanager
    def following(self) -> Iterator[RequestPath]:
        path = RequestPath()
        self.path = path
        try:
            yield path
        finally:
            self.path = None


@dataclass
class TracedClient:
    client: TestClient
    tracer: Tracer

    def request(self, method: str, url: str, **kwargs: Any) -> tuple[Any, RequestPath]:
        """The answer to one request and the path it took through the project's modules."""
        with self.tracer.following() as path:
            response = self.client.request(method, url, **kwargs)
        return response, path


@contextmanager
def traced_client(**settings: Any) -> Iterator[TracedClient]:
    """A TestClient over ``create_app(Settings(**settings))`` whose every thread (the app's loop, its worker and
    searcher threads, this one) is followed while :meth:`TracedClient.request` runs. The profile functions are set
    before the app starts, so each thread the app starts has one."""
    tracer = Tracer()
    threading.setprofile(tracer)
    sys.setprofile(tracer)
    try:
        with client_for(**settings) as client:
            client.get("/readyz")  # the app's first request: its one-time set-up is not part of a path
            yield TracedClient(client, tracer)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
