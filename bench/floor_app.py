"""The HTTP floor: a bare FastAPI app on the same paths as the neighbours API, answering a constant JSON body.

It parses the same query parameters, reads the request body (``POST .../search``: parses it as a FastAPI app
would, a pydantic model of a vector and ``k``), and returns the bytes of a real response captured
from the service beforehand (so the same size on the wire), without any lookup, search or encoding. Served by
uvicorn with the same settings as ``embedding-serve``; what the service adds over it is the work it really does.

    BENCH_FLOOR_BODIES=bodies.json uvicorn bench.floor_app:create_app --factory

``bodies.json``: ``{"get": "<neighbours response>", "post": "<batch response>", "search": "<search response>"}``
(``search`` optional).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.responses import Response

JSON = "application/json"


class VectorBody(BaseModel):
    """What a bare FastAPI app reads from a ``POST .../search`` body: the vector and ``k``."""

    vector: list[float]
    k: int = 10


def create_app() -> FastAPI:
    bodies = json.loads(Path(os.environ["BENCH_FLOOR_BODIES"]).read_text())
    get_body = bodies["get"].encode()
    post_body = bodies["post"].encode()
    search_body = bodies.get("search", "{}").encode()
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/readyz")
    async def readyz() -> Response:
        return Response(b'{"status":"ready"}', media_type=JSON)

    @app.get("/v1/tables/{table}/neighbors")
    async def neighbors_get(table: str, token: str, k: int = 10, exact: bool = False) -> Response:
        return Response(get_body, media_type=JSON)

    @app.post("/v1/tables/{table}/neighbors")
    async def neighbors_post(table: str, request: Request) -> Response:
        await request.body()
        return Response(post_body, media_type=JSON)

    @app.post("/v1/tables/{table}/search")
    async def search(table: str, body: VectorBody) -> Response:
        return Response(search_body, media_type=JSON)

    return app
