"""``POST .../search`` with one raw vector on a table of words or rows, answered without the request model.

``service.http.fastroute.plain_vector`` reads the common body ``{"vector": [...], "k": n}`` (``offset`` and
``min_score`` too) with orjson and checks it as the request model would; this answers it exactly as the search
route's vector path does, and leaves everything else to the route: a documents table, a name the route refuses
or does not know (its errors), a table while the tables load. BENCHMARKS.md section 6 says what it is worth.
"""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from index.engine.door import Query
from service import execute
from service.deps import MAX_NAME
from service.http.fastroute import PlainVector
from service.respond import FastJSON, neighbors
from service.schemas.common import search_options


async def plain_vector_search(request: Request, plain: PlainVector) -> Response | None:
    """The route's answer to ``plain``; None to leave the request to the route."""
    registry = getattr(request.app.state, "registry", None)
    name = request.path_params["table"]
    table = None if registry is None or len(name) > MAX_NAME else registry.tables.get(name)
    if table is None or table.payload is not None:
        return None
    options = search_options(False, None, True, False)  # the request model's defaults
    query = Query(vector=plain.vector, k=plain.k, offset=plain.offset, min_score=plain.min_score, options=options)
    result = await execute.one(request, table, "search", query)  # 422: wrong length, zero
    return FastJSON({"neighbors": neighbors(table, result.hits)})  # type: ignore[arg-type]
