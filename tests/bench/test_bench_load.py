"""The HTTP load generators (bench/load.py) count every response that is not a 200, and a checked result refuses
to stand for requests served when there were any."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import load
from bench.common import wrk_path
from tests.bench.stub_server import QuietHandler, served


class Handler(QuietHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the drivers' connections expect

    def do_GET(self) -> None:
        self.answer(503 if self.path.startswith("/busy") else 200, b'{"ok": true}')


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with served(Handler) as url:
        yield url


DRIVERS = [False] + ([True] if wrk_path() else [])


@pytest.mark.parametrize("use_wrk", DRIVERS, ids=lambda w: "wrk" if w else "httpx")
def test_a_refused_request_is_an_error_and_a_checked_result_says_so(base: str, use_wrk: bool) -> None:
    served = load.run(base, [load.Request("GET", "/ok")], 2, 1.0, use_wrk, max_requests=50)
    assert served.errors == 0 and served.requests > 0 and served.checked() is served
    refused = load.run(base, [load.Request("GET", "/ok"), load.Request("GET", "/busy")], 2, 1.0, use_wrk, 50)
    assert 0 < refused.errors < refused.requests
    with pytest.raises(RuntimeError, match="responses were not a 200"):
        refused.checked()
