"""``POST .../search`` with one raw vector on a table of words or rows, answered without the request model.

``service.http.fastroute.plain_vector`` reads the common body ``{"vector": [...], "k": n}`` (``offset`` and
``min_score`` too) with orjson and checks it as the request model would; this answers it exactly as the search
route's vector path does, and leaves everything else to the route: a documents table, a name the route refuses
or does not know (its errors), a table while the tables load. BENCHMARKS.md section 6 says what it is worth.
"""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from index.engine.search import VectorSearch
from service import execute, queries
from service.deps import MAX_NAME
from service.http.fastroute import PlainVector
from service.models import search_options
from service.respond import FastJSON, neighbors


async def plain_vector_search(request: Request, plain: PlainVector) -> Response | None:
    """The route's answer to ``plain``; None to leave the request to the route."""
    registry = getattr(request.app.state, "registry", None)
    name = request.path_params["table"]
    table = None if registry is None or len(name) > MAX_NAME else registry.tables.get(name)
    if table is None or table.payload is not None:
        return None
    query = queries.raw_vector(table, plain.vector)  # 422: wrong length, zero
    options = search_options(False, None, True, False)  # the request model's defaults
    search = VectorSearch(query.vector[None, :], plain.k, (), options, None, plain.offset, plain.min_score)
    (hits,) = await execute.search(request, table, "search", search)
    return FastJSON({"neighbors": neighbors(table, hits)})
