"""The interactive API page at ``/docs``: Swagger UI from the files of the installed ``fastapi-offline`` package.

FastAPI's own ``/docs`` page loads Swagger UI's script and stylesheet from a CDN, so on a machine or cluster that
reaches no CDN it is blank. Here the same page (FastAPI's ``get_swagger_ui_html``) loads them from the server,
under ``/docs/files/``, open without a key as ``/docs`` and ``/openapi.json`` are."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

PAGE = "/docs"
FILES = "/docs/files"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
SWAGGER_FILES = Path(fastapi_offline.__file__).resolve().parent / "static"


def mount(app: FastAPI) -> None:
    """``/docs``, its Swagger UI files and the OAuth2 redirect page Swagger UI asks for, on ``app`` (built with
    ``docs_url=None``)."""
    app.mount(FILES, StaticFiles(directory=SWAGGER_FILES), name="docs-files")

    @app.get(PAGE, include_in_schema=False)
    async def swagger_page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")  # behind a proxy that serves the API under a path
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API",
            swagger_js_url=f"{root}{FILES}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{FILES}/swagger-ui.css",
            swagger_favicon_url=f"{root}{FILES}/favicon.png",
            oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT}",
        )

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
