"""``/metrics`` of the real server as Prometheus reads it: every answer parsed by prometheus_client's own parser of the
text format, its histograms and counters checked as a monitoring system relies on them, its series bounded whatever
clients send, and its counts equal to the requests clients sent."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import httpx

from tests.service.real_server import Server, wait_for
from tests.service.scraped import Series, never_less, scrape

HOSTILE = ['"', "%22", "%5C", "%0A", "%0D%0A", "%1B[31m", "%E2%80%A8", "caf%C3%A9", "%F0%9F%98%80", "}", "{", ",", "="]


def requests(series: Series) -> dict[tuple[str, ...], float]:
    """``embedding_http_requests_total`` by (method, route, table, status)."""
    keys = ("method", "route", "table", "status")
    return {
        tuple(dict(labels)[k] for k in keys): value
        for (name, labels), value in series.items()
        if name == "embedding_http_requests_total"
    }


def test_hostile_requests_add_a_few_series_and_are_counted_as_sent(small_server: Server) -> None:
    """1,200 requests, each of a path, table name, query parameter or token of their own, with quotes, backslashes,
    newlines, escapes and Unicode, and methods the server does not serve: a handful of series more (label values
    are route templates, loaded tables' names and the standard methods), each request counted once under its route
    template and status, and nothing counted less afterwards, a reload (SIGHUP) included."""
    before, size_before = scrape(small_server.base)
    sent: Counter[tuple[str, ...]] = Counter()
    neighbours = "/v1/tables/{table}/neighbors"
    with httpx.Client(base_url=small_server.base, timeout=60) as client:
        for i in range(200):
            hostile = HOSTILE[i % len(HOSTILE)] + HOSTILE[(i * 7) % len(HOSTILE)]
            asked: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
                ("GET", f"/nosuch/{i}/{hostile}", {}, ("GET", "unmatched", "", "404")),
                ("GET", f"/v1/tables/t{i}/neighbors?token=heart", {}, ("GET", neighbours, "unknown", "404")),
                ("GET", f"/v1/tables/t{i}{hostile}/neighbors?token=heart", {}, ("GET", neighbours, "unknown", "422")),
                (
                    "GET",
                    f"/v1/tables/small/neighbors?token=heart&q{i}={hostile}",
                    {},
                    ("GET", neighbours, "small", "422"),
                ),
                (
                    "GET",
                    "/v1/tables/small/neighbors",
                    {"token": f"zz{i}{hostile}"},
                    ("GET", neighbours, "small", "404"),
                ),
                ("PROPFIND", f"/healthz?{i}", {}, ("other", "/healthz", "", "405")),
            ]
            for method, url, params, labels in asked:
                answer = client.request(method, url, params=params)
                assert str(answer.status_code) == labels[-1], (url, answer.text)
                sent[labels] += 1
    after, size_after = scrape(small_server.base)
    never_less(before, after)
    counted = {labels: n - requests(before).get(labels, 0.0) for labels, n in requests(after).items()}
    scrapes = ("GET", "/metrics", "", "200")
    assert {labels: n for labels, n in counted.items() if n and labels != scrapes} == dict(sent)
    assert len(after) - len(before) <= 6 * 20  # six label sets at most: a count, 17 samples of latency, a _created
    assert size_after - size_before < 40_000  # a series per request would add over 150 KB
    reloads = small_server.log().count("INFO service.reload: reload: ")
    small_server.process.send_signal(signal.SIGHUP)
    wait_for(lambda: small_server.log().count("INFO service.reload: reload: ") > reloads, what="the reload")
    never_less(after, scrape(small_server.base)[0])
