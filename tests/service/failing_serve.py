"""``embedding-serve`` with one more route, ``GET /v1/fails``, whose handler raises: the real server's answer and
log lines for an unexpected error (``python -m tests.service.failing_serve`` with embedding-serve's arguments; one
worker, which builds its app in this process)."""

from __future__ import annotations

import sys

from fastapi import FastAPI

import service.app
from service.main import main

PATH = "/v1/fails"
made = service.app.app_from_env


async def fails() -> None:
    raise RuntimeError("an unexpected fault")


def with_failing_route() -> FastAPI:
    app = made()
    app.add_api_route(PATH, fails)
    return app


if __name__ == "__main__":
    service.app.app_from_env = with_failing_route  # uvicorn imports the factory by its name once main runs it
    sys.exit(main(sys.argv[1:]))
