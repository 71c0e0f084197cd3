"""The interactive API page at ``/docs`` in a real headless Chromium against the real server, with every request
to another host refused: Swagger UI's files come from the server itself (``service/api_docs.py``), not a CDN."""

from __future__ import annotations

import re
from typing import Any

from tests.service.real_server import HTTP, Server


def test_the_docs_page_names_no_other_host(small_server: Server) -> None:
    page = HTTP.get(f"{small_server.base}/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", page.text)
    assert urls and all(url.startswith("/") for url in urls), urls
    for url in urls:
        answer = HTTP.get(f"{small_server.base}{url}")
        assert answer.status_code == 200, url
    script = HTTP.get(f"{small_server.base}/docs/files/swagger-ui-bundle.js")
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert HTTP.get(f"{small_server.base}/docs/files/nosuch.js").status_code == 404


def test_the_docs_page_shows_every_operation_with_no_other_host_reachable(small_server: Server, watched: Any) -> None:
    base = small_server.base
    elsewhere: list[str] = []

    def only_the_server(route: Any) -> None:
        if route.request.url.startswith(f"{base}/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    watched.context.route("**/*", only_the_server)
    watched.page.goto(f"{base}/docs")
    watched.page.wait_for_selector(".opblock")
    operations = HTTP.get(f"{base}/openapi.json").json()["paths"]
    shown = watched.page.locator(".opblock").count()
    assert shown == sum(len(methods) for methods in operations.values())
    assert watched.page.locator(".opblock-summary-path", has_text="/v1/tables/{table}/neighbors").count() >= 1
    assert "embedding-search" in watched.page.locator(".info .title").inner_text()
    assert elsewhere == [] and watched.failed == [] and watched.console == [], (elsewhere, watched.console)
