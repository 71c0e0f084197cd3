"""The whole table as a map: a 2-D layout of every row, served compactly, and the explorer's export and
settings.

- ``GET /v1/tables/{t}/map``: int16 x, y pairs (``application/octet-stream``), row id = position;
- ``GET /v1/tables/{t}/map/info``: how many, their bounds (to read the int16 codes back), method, parameters;
- ``GET /v1/tables/{t}/map/labels``: every row's label, one gzip-compressed JSON array (``application/gzip``);
- ``GET /v1/tables/{t}/map/colours/{column}``: a metadata column (or a model table's token kind) as categories
  and one uint8 code per row;
- ``POST /v1/tables/{t}/export``: rows as the Embedding Projector's ``vectors.tsv`` or ``metadata.tsv``;
- ``GET /v1/explorer``: the table the explorer opens on, and what the map offers.

Layouts are computed on first request, off the event loop, and cached on disk by the table's checksum
(``index.engine.layout``).
"""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Collection
from typing import Annotated, Any, Literal, cast

import numpy as np
from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from index.engine.door import (
    MAP_INSTALL,
    LayoutCache,
    Table,
    colour_column,
    colour_columns,
    default_cache_dir,
    quantize,
    tsne_available,
    tsne_least_rows,
)
from index.errors import InvalidQuery
from service.deps import RegistryDep, SettingsDep, TableDep
from service.errors import BODY_ERRORS, TABLE_ERRORS, responses
from service.execute import compute
from service.respond import FastJSON
from service.schemas.map import MAX_EXPORT_ROWS, ExplorerConfig, ExportRequest, MapColours, MapInfo
from service.settings import MAP_TSNE

router = APIRouter(tags=["map"])
Method = Annotated[
    Literal["pca", "tsne"],
    Query(description="pca: every row; tsne: the EMBEDDING_MAP_TSNE_ROWS most frequent rows (when enabled)"),
]
MAP_FORMAT = "int16-le-xy"
DEFAULT_NAME = "glove-6b-50d"  # the table `make run` builds: the GloVe package's, under its default name


def layout_cache(request: Request) -> LayoutCache:
    cache = getattr(request.app.state, "layouts", None)
    if cache is None:
        settings = request.app.state.settings
        cache = LayoutCache(settings.cache_dir or default_cache_dir(settings.data_dir))
        request.app.state.layouts = cache
    return cache


async def get_layout(request: Request, table: Table, method: str) -> Any:
    """The table's layout: a kept one read in the ordinary slots; one to compute computed once however many requests
    ask for it meanwhile, a t-SNE one in the long computations' slots."""
    cache = layout_cache(request)
    params: dict[str, Any] = {}
    if method == "tsne":
        rows = request.app.state.settings.map_tsne_rows
        if not rows:
            raise InvalidQuery("t-SNE maps are off on this server (EMBEDDING_MAP_TSNE_ROWS=0)")
        if not tsne_available():
            raise InvalidQuery(f"t-SNE maps need the openTSNE package, which this server does not have ({MAP_INSTALL})")
        params = {**MAP_TSNE, "rows": min(rows, table.rows)}
        least = tsne_least_rows(MAP_TSNE["perplexity"])
        if params["rows"] < least:  # the setting has that many (service.settings): the table has fewer
            raise InvalidQuery(
                f"a t-SNE map (perplexity {MAP_TSNE['perplexity']:g}) needs at least {least} rows, and table "
                f"{table.name!r} has {table.rows:,} (pca lays out any table)"
            )
    kept = await compute(request, table, "map", lambda: cache.kept(table.name, table.manifest, method, **params))
    if kept is not None:
        return kept
    running: dict[tuple[str, int, str], asyncio.Future[Any]] | None = getattr(request.app.state, "computing", None)
    if running is None:
        running = request.app.state.computing = {}
    key = (table.name, id(table), method)
    task = running.get(key)
    if task is None:
        work = compute(
            request,
            table,
            "map",
            lambda: cache.layout(table.name, table.manifest, table.vectors, method, labels=table.tokens, **params),
            long=method == "tsne",  # a t-SNE map takes minutes, a PCA one seconds at most
            check_client=False,  # others may be waiting for it too
        )
        task = running[key] = asyncio.ensure_future(work)

        def finished(done: asyncio.Future[Any]) -> None:
            running.pop(key, None)
            if not done.cancelled():
                done.exception()  # retrieved: the requests awaiting it raise it, even if none is left

        task.add_done_callback(finished)
    return await asyncio.shield(task)


@router.get(
    "/v1/tables/{table}/map/info",
    response_model=MapInfo,
    responses=responses(*TABLE_ERRORS),
    summary="How the whole-table map is laid out: rows, bounds, method and its parameters",
)
async def map_info(request: Request, table: TableDep, method: Method = "pca") -> Response:
    layout = await get_layout(request, table, method)
    info = layout.info
    out = {
        "table": table.name,
        "method": info["method"],
        "rows": info["rows"],
        "bounds": info["bounds"],
        "format": MAP_FORMAT,
        "params": info.get("params", {}),
        "explained_variance_ratio": info.get("explained_variance_ratio"),
        "seconds": info["seconds"],
        "computed_at": info.get("computed_at"),
        "cached": info.get("cached", False),
        "columns": colour_columns(table.metadata, table.flags),
    }
    return FastJSON(out)


@router.get(
    "/v1/tables/{table}/map",
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "int16 x, y per row (see map/info)"},
        **responses(*TABLE_ERRORS),
    },
    summary="Every row's 2-D map position as little-endian int16 x, y pairs (bounds in map/info)",
)
async def map_points(request: Request, table: TableDep, method: Method = "pca") -> Response:
    layout = await get_layout(request, table, method)
    body = quantize(layout.points, layout.info["bounds"]).tobytes()
    headers = {"x-map-rows": str(layout.info["rows"]), "x-map-method": layout.info["method"]}
    return Response(body, media_type="application/octet-stream", headers=headers)


@router.get(
    "/v1/tables/{table}/map/labels",
    response_class=Response,
    responses={
        200: {"content": {"application/gzip": {}}, "description": "a gzip-compressed JSON array of every label"},
        **responses(*TABLE_ERRORS),
    },
    summary="Every row's label (row id = position) as one gzip-compressed JSON array",
)
async def map_labels(request: Request, table: TableDep) -> Response:
    cache = layout_cache(request)
    body = await compute(request, table, "map", lambda: cache.labels(table.name, table.manifest, table.tokens[:]))
    return Response(body, media_type="application/gzip")


ColumnName = Annotated[str, Path(max_length=200, description="a column listed in map/info 'columns'")]


@router.get(
    "/v1/tables/{table}/map/colours/{column}",
    response_model=MapColours,
    responses=responses(*TABLE_ERRORS),
    summary="A metadata column (or a model table's token kind) as categories and one code per row",
)
async def map_colours(request: Request, table: TableDep, column: ColumnName) -> Response:
    categories, codes = await compute(request, table, "map", lambda: colour_column(table.metadata, table.flags, column))
    return FastJSON({"column": column, "categories": categories, "codes": base64.b64encode(codes.tobytes()).decode()})


def tsv_field(text: str) -> str:
    """The projector's TSV has no quoting: a tab or line break inside a value becomes a space."""
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def unused(name: str, columns: Collection[str]) -> str:
    """``name``, or ``name`` with underscores after it, whichever no metadata column of the table is named: the
    header's names must differ for the import to read them back (a table may have a column named ``token``)."""
    while name in columns:
        name += "_"
    return name


def export(table: Table, body: ExportRequest) -> bytes:
    for row in body.rows:
        if row.id is not None and row.id >= table.rows:
            table.resolve_id(row.id)  # raises unknown_token with the id range (before numpy sees a huge id)
    # ExportRow's validator gives each row exactly one of token and id.
    ids = np.asarray(
        [table.resolve(cast(str, row.token)).id if row.id is None else row.id for row in body.rows], dtype=np.int64
    )
    if body.file == "vectors":
        rows = (
            np.asarray(table.vectors[ids], dtype=np.float32) * np.asarray(table.norms[ids], dtype=np.float32)[:, None]
        )
        out = io.StringIO()
        np.savetxt(out, rows, fmt="%.9g", delimiter="\t")
        return out.getvalue().encode()
    labels = [tsv_field(label) for label in table.tokens.labels(ids.tolist())]
    columns = {name: [tsv_field(table.metadata[name][i]) for i in ids.tolist()] for name in sorted(table.metadata)}
    if any(row.group is not None for row in body.rows):
        columns = {unused("group", columns): [tsv_field(row.group or "") for row in body.rows], **columns}
    if not columns:  # one column: no header, one token per line
        return ("\n".join(labels) + "\n").encode()
    header = "\t".join([unused("token", columns), *columns])
    lines = ["\t".join(fields) for fields in zip(labels, *columns.values(), strict=True)]
    return ("\n".join([header, *lines]) + "\n").encode()


@router.post(
    "/v1/tables/{table}/export",
    response_class=Response,
    responses={
        200: {"content": {"text/tab-separated-values": {}}, "description": "vectors.tsv or metadata.tsv"},
        **responses(*BODY_ERRORS),
    },
    summary="Rows as the Embedding Projector's vectors.tsv or metadata.tsv (embedding-index import reads both)",
)
async def export_rows(request: Request, table: TableDep, body: ExportRequest) -> Response:
    data = await compute(request, table, "export", lambda: export(table, body))
    name = "vectors.tsv" if body.file == "vectors" else "metadata.tsv"
    headers = {"content-disposition": f'attachment; filename="{name}"'}
    return Response(data, media_type="text/tab-separated-values; charset=utf-8", headers=headers)


def default_table(registry: Any, fronted: Collection[str] = ()) -> tuple[str | None, str]:
    """The table the explorer opens on: the first of EMBEDDING_TABLES that is loaded; else glove-6b-50d (what
    ``make run`` builds) when loaded; else the first loaded table by name, the sharded tables this server fronts
    (``fronted``, which it lists) among them."""
    loaded = {*registry.tables, *fronted}
    for name in registry.names or []:
        if name in loaded:
            return name, "EMBEDDING_TABLES"
    if DEFAULT_NAME in loaded:
        return DEFAULT_NAME, DEFAULT_NAME
    return (min(loaded), "first") if loaded else (None, "first")


@router.get(
    "/v1/explorer",
    response_model=ExplorerConfig,
    responses=responses("not_ready"),
    summary="What the explorer page opens on: the default table, and what its map offers",
)
async def explorer_config(request: Request, registry: RegistryDep, settings: SettingsDep) -> Response:
    name, reason = default_table(registry, request.app.state.front.tables)
    return FastJSON(
        {
            "default_table": name,
            "default_reason": reason,
            "tsne_rows": settings.map_tsne_rows,
            "tsne_available": tsne_available(),
            "map_install": MAP_INSTALL,
            "max_export_rows": MAX_EXPORT_ROWS,
        }
    )
