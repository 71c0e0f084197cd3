"""HTTP load generators: ``wrk`` (a Lua script replays a list of requests) or an async httpx driver.

Both report latency percentiles measured by the client and requests per second over the run, and count every
response that is not a 200 as an error. ``wrk`` is the real load generator of the full run; the httpx driver
keeps the quick mode free of system packages (and stands in when ``wrk`` is missing).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np

from bench.common import wrk_path


@dataclass(frozen=True)
class Request:
    method: str  # GET or POST
    path: str  # with its query string
    body: bytes | None = None  # JSON for POST


@dataclass
class LoadResult:
    driver: str
    connections: int
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    command: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def checked(self) -> LoadResult:
        """This result, or an error when a response was not a 200: requests/s must count answers, not refusals."""
        if self.errors:
            raise RuntimeError(f"{self.errors:,} of {self.requests:,} responses were not a 200: {self.command}")
        return self


def run(
    base: str, requests: list[Request], connections: int, seconds: float, use_wrk: bool, max_requests: int = 0
) -> LoadResult:
    """Replay ``requests`` in a loop on ``connections`` keep-alive connections for ``seconds``."""
    if use_wrk and wrk_path():
        return run_wrk(base, requests, connections, seconds)
    return asyncio.run(run_httpx(base, requests, connections, seconds, max_requests))


# ---------------------------------------------------------------------- wrk
def _lua_string(data: bytes) -> str:
    text = data.decode()
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[{text}]{eq}]"


def lua_script(requests: list[Request]) -> str:
    """A wrk script that cycles through ``requests`` and prints its figures as one JSON line."""
    items = []
    for r in requests:
        body = _lua_string(r.body) if r.body is not None else "nil"
        items.append(f"  {{{_lua_string(r.method.encode())}, {_lua_string(r.path.encode())}, {body}}},")
    return "\n".join(
        [
            "local items = {",
            *items,
            "}",
            "local reqs = {}",
            "local idx = 0",
            "init = function(args)",
            "  for i, it in ipairs(items) do",
            "    local headers = {}",
            '    if it[3] then headers["Content-Type"] = "application/json" end',
            "    reqs[i] = wrk.format(it[1], it[2], headers, it[3])",
            "  end",
            "end",
            "request = function()",
            "  idx = idx % #reqs + 1",
            "  return reqs[idx]",
            "end",
            "done = function(summary, latency, requests)",
            "  local e = summary.errors",
            '  io.write(string.format("BENCH_JSON {\\"requests\\": %d, \\"duration_us\\": %d, \\"p50_us\\": %d, '
            '\\"p99_us\\": %d, \\"errors\\": %d}\\n", summary.requests, summary.duration, '
            "latency:percentile(50), latency:percentile(99), "
            "e.connect + e.read + e.write + e.status + e.timeout))",
            "end",
        ]
    )


def run_wrk(base: str, requests: list[Request], connections: int, seconds: float) -> LoadResult:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(lua_script(requests))
        script = Path(handle.name)
    try:
        argv = [
            str(wrk_path()),
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "30s",
            "-s",
            str(script),
            base + requests[0].path,
        ]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
        lines = [line for line in out.stdout.splitlines() if line.startswith("BENCH_JSON ")]
        if out.returncode != 0 or not lines:
            raise RuntimeError(f"wrk failed ({out.returncode}): {out.stdout[-1500:]} {out.stderr[-1500:]}")
        data = json.loads(lines[-1].removeprefix("BENCH_JSON "))
    finally:
        script.unlink(missing_ok=True)
    duration = data["duration_us"] / 1e6
    shown = f"wrk -t1 -c{connections} -d{max(1, round(seconds))}s --timeout 30s -s <script replaying "
    shown += f"{len(requests)} {requests[0].method} requests> {base}{requests[0].path.split('?')[0]}"
    return LoadResult(
        driver="wrk",
        connections=connections,
        requests=int(data["requests"]),
        seconds=round(duration, 3),
        rps=round(data["requests"] / duration, 1),
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        errors=int(data["errors"]),
        command=shown,
    )


# -------------------------------------------------------------------- httpx
async def run_httpx(
    base: str, requests: list[Request], connections: int, seconds: float, max_requests: int = 0
) -> LoadResult:
    """``connections`` tasks on one keep-alive client, each sending the next request as soon as it has an answer."""
    latencies: list[float] = []
    errors = 0
    counter = 0
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    headers = {"Content-Type": "application/json"}
    # verify=False: plain HTTP, without the TLS context httpx loads otherwise (most of the CPU of making a client)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60.0, verify=False) as client:
        started = time.perf_counter()
        deadline = started + seconds

        async def worker() -> None:
            nonlocal counter, errors
            sent_one = False  # each connection sends one request at least: a starved start may pass the deadline
            while not sent_one or (time.perf_counter() < deadline and (not max_requests or counter < max_requests)):
                sent_one = True
                item = requests[counter % len(requests)]
                counter += 1
                sent = time.perf_counter()
                try:
                    response = await client.request(
                        item.method, item.path, content=item.body, headers=headers if item.body else None
                    )
                    ok = response.status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - sent)
                errors += not ok

        await asyncio.gather(*(worker() for _ in range(connections)))
        duration = time.perf_counter() - started
    values = np.asarray(latencies) * 1000
    return LoadResult(
        driver="httpx",
        connections=connections,
        requests=len(latencies),
        seconds=round(duration, 3),
        rps=round(len(latencies) / duration, 1),
        p50_ms=float(np.percentile(values, 50)),
        p99_ms=float(np.percentile(values, 99)),
        errors=errors,
        command=f"async httpx driver, {connections} connection(s), {seconds:g} s, "
        f"{len(requests)} {requests[0].method} requests replayed against {base}{requests[0].path.split('?')[0]}",
    )
