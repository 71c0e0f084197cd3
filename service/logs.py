"""Logging for the server: plain lines or one JSON object per line, for our loggers and uvicorn's alike."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


PLAIN = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_config(log_format: str = "plain", level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` dict, also handed to uvicorn (``log_config=``) so workers use it."""
    formatter: dict[str, Any] = {"()": "service.logs.JsonFormatter"} if log_format == "json" else {"format": PLAIN}
    handler = {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}
    level = level.upper()
    # httpx logs each request a sharded table's front sends its shards at info level: one line per shard asked,
    # beside the request's own access line. Kept for debug (and quieter levels).
    shard_requests = level if level in ("DEBUG", "ERROR", "CRITICAL") else "WARNING"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.access": {"handlers": [], "level": level, "propagate": True},
            "faiss.loader": {"level": "WARNING"},  # which SIMD build loaded is noise at info level
            "httpx": {"level": shard_requests},
        },
    }
