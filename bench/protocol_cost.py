"""What the connection limits of ``service.http.protocol`` cost a normal request: uvicorn's own httptools protocol
against ``JsonErrorsProtocol`` on the same kept-alive connection, parsing one typical GET after another, and a
4 MiB POST body arriving in 256 KiB reads (which the protocol feeds in slices of the head limit).

CPU time of the main thread (not wall time, so other processes on the machine do not count), per request, for
parsing the request and creating its request/response cycle; the app is not run, so only the protocol's own
work is measured. The two protocols alternate, run after run; the medians are reported.

    .venv/bin/python -m bench.protocol_cost [--runs 40] [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from service.http.protocol import ConnectionLimits, JsonErrorsProtocol

REQUEST = (
    b"GET /v1/tables/glove-6b-50d/neighbors?token=heart&k=10 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
    b"User-Agent: python-httpx/0.28.1\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\n"
    b"Connection: keep-alive\r\n\r\n"
)


async def app(scope: Any, receive: Any, send: Any) -> None:  # never run: the protocol alone is measured
    raise AssertionError("not reached")


class Transport(asyncio.Transport):
    """A connected socket's transport, without the socket."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


BODY = b"[" + b"0.123456," * ((4 << 20) // 9) + b"0]"
POST = b"POST /v1/tables/t/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
UPLOAD = POST + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
READS = [UPLOAD[start : start + (256 << 10)] for start in range(0, len(UPLOAD), 256 << 10)]


def per_request(protocol: type[HttpToolsProtocol], requests: int, reads: list[bytes]) -> float:
    """Microseconds of CPU per request, each request arriving as ``reads``."""
    config = Config(app, access_log=False, log_level="warning")
    config.load()
    loop = asyncio.new_event_loop()
    try:
        connection = protocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)
        connection._start_asgi_task = lambda cycle, app: None  # type: ignore[method-assign]
        connection.connection_made(Transport())
        started = time.thread_time()
        for _ in range(requests):
            for data in reads:
                connection.data_received(data)
                connection.cycle.body.clear()  # as if the app read it
            connection.cycle.response_complete = True  # as if answered: the next request starts a new cycle
        return (time.thread_time() - started) / requests * 1e6
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    protocols = {"uvicorn HttpToolsProtocol": HttpToolsProtocol, "JsonErrorsProtocol": JsonErrorsProtocol}
    protocols["JsonErrorsProtocol"] = JsonErrorsProtocol.with_limits(ConnectionLimits())
    for what, reads, requests in (("GET", [REQUEST], args.requests), ("4 MiB POST", READS, 20)):
        times: dict[str, list[float]] = {name: [] for name in protocols}
        for _ in range(args.runs):
            for name, protocol in protocols.items():
                times[name].append(per_request(protocol, requests, reads))
        print(f"{what}:")
        for name, values in times.items():
            print(f"  {name:26} median {statistics.median(values):.2f} us/request (min {min(values):.2f})")
        medians = [statistics.median(values) for values in times.values()]
        print(f"  {'difference':26} {medians[1] - medians[0]:+.2f} us/request")


if __name__ == "__main__":
    main()
