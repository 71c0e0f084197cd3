"""``GET /v1/limits``: the limits a request must respect, as the server's settings set them, so that a client
sizes its batches and bodies by them (``service_client`` does) rather than by the defaults. Read as the other
reads are (the read key, when one is set); a front of sharded tables answers the lowest of its own and its shards'
servers' (``service.scatter.Front.shard_limits``): a request it takes, it forwards to them."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request
from starlette.responses import Response

from service.errors import responses
from service.respond import FastJSON
from service.schemas.bounds import MAX_DIM, MAX_EMBED_CHARS, MAX_TEXT_CHARS, MAX_TOKEN_CHARS
from service.schemas.common import LIMITS
from service.schemas.limits import ServerLimits

router = APIRouter(tags=["tables"])


@router.get(
    "/v1/limits", response_model=ServerLimits, responses=responses(), summary="The limits a request must respect"
)
async def get_limits(request: Request) -> Response:
    settings = request.app.state.settings
    limits = {
        **asdict(LIMITS.get()),  # this app's (service.http.limits publishes them to every request)
        "max_body_bytes": settings.max_body_bytes,
        "max_header_bytes": settings.max_header_bytes,
        "max_token_chars": MAX_TOKEN_CHARS,
        "max_text_chars": MAX_TEXT_CHARS,
        "max_embed_chars": MAX_EMBED_CHARS,
        "max_dim": MAX_DIM,
    }
    for shard in await request.app.state.front.shard_limits():  # a front's: its shards' servers' too
        limits = {name: min(value, int(shard.get(name, value))) for name, value in limits.items()}
    return FastJSON(limits)
