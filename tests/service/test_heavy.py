"""Heavy engine calls (exact and batch searches) run in worker threads a few at a time, not all at once."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from index.engine.table import Table
from service.app import create_app
from service.settings import Settings, cores


def test_heavy_calls_take_turns(small_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running, most = 0, 0
    lock = threading.Lock()
    run = Table.run

    def counted(self: Table, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            return run(self, *args, **kwargs)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(Table, "run", counted)
    app = create_app(Settings(data_dir=small_data_dir, cache_bytes=0))
    body = {"queries": ["heart", "red", "king", "paris"] * 16, "k": 10, "exact": True}

    async def scenario() -> list[int]:
        async with app.router.lifespan_context(app):
            assert app.state.heavy_calls.total_tokens == cores()
            app.state.heavy_calls.total_tokens = 1  # so that the limit shows on any machine
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                responses = await asyncio.gather(
                    *(client.post("/v1/tables/small/neighbors", json=body) for _ in range(8))
                )
        return [r.status_code for r in responses]

    assert asyncio.run(scenario()) == [200] * 8
    assert most == 1
