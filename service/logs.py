"""Logging for the server: plain lines or one JSON object per line, for our loggers and uvicorn's alike."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import quote, unquote, unquote_plus

import orjson

from index.progress import SERVER_VARIABLE
from service.settings import without_passwords

# The X-Request-ID of the request being handled, when it sent a valid one (service.http.request_id): every line
# logged while it is handled names it.
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = REQUEST_ID.get()
        if request_id is not None:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


REDACTED = "[key]"
# The most of a URL a line logs: a 32 KiB request line of quotes (each logged %22) made a 90 KB access line, which
# Docker's and containerd's log drivers cut into 16 KiB pieces, none of a JSON line's pieces parsing.
URL_CHARS = 4096
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # characters that end or rewrite a line where it is read


def _escaped(control: re.Match[str]) -> str:
    return quote(control.group(), safe="")


class LoggedUrls(logging.Filter):
    """The URLs a line logs (the access line's, an error's: an argument of its message that starts with its path),
    as the log may hold them.

    - The server's keys out of them: a path segment, or a query parameter's name or value, that is a key once its
      %-escapes are decoded is written ``[key]``. A client that sends a key where none is read (``?api_key=...``, a
      path) is refused as sending none, and its key does not reach the log, whose readers need not hold it. Whole
      parts only: a short key leaves the words that hold it alone.
    - Control characters %-escaped again (a path as the app reads it is decoded: its ``%0A`` would begin a line of
      its own, a forged one in the plain format; ``%1B`` would drive a terminal).
    - At most ``URL_CHARS`` characters of each, then ``...[+N]``, N the characters left out."""

    def __init__(self, keys: Iterable[str]) -> None:
        super().__init__()
        self.keys = frozenset(keys)
        self.slashed = tuple(key for key in self.keys if "/" in key)  # a key holding "/" spans path segments

    def part(self, text: str, decode: Callable[[str], str]) -> str:
        return REDACTED if decode(text) in self.keys else text

    def redacted(self, url: str) -> str:
        path, mark, query = url.partition("?")
        for key in self.slashed:
            if key in unquote(path):
                path = unquote(path).replace(key, REDACTED)  # written decoded then
        path = "/".join(self.part(segment, unquote) for segment in path.split("/"))
        params = (param.partition("=") for param in query.split("&")) if mark else ()
        query = "&".join(self.part(n, unquote_plus) + eq + self.part(v, unquote_plus) for n, eq, v in params)
        return path + mark + query

    def url(self, url: str) -> str:
        url = CONTROL.sub(_escaped, self.redacted(url) if self.keys else url)
        return url if len(url) <= URL_CHARS else f"{url[:URL_CHARS]}...[+{len(url) - URL_CHARS}]"

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):  # a URL is an argument of the message, starting with its path
            record.args = tuple(self.url(a) if isinstance(a, str) and a[:1] == "/" else a for a in record.args)
        return True


def log_urls(keys: Iterable[str]) -> None:
    """:class:`LoggedUrls` with the server's keys on every handler of the root logger and of uvicorn's (plain
    uvicorn gives them their own), in place of one set before."""
    logged = LoggedUrls(keys)
    for name in (None, "uvicorn", "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            for before in [each for each in handler.filters if isinstance(each, LoggedUrls)]:
                handler.removeFilter(before)
            handler.addFilter(logged)


class WithoutPasswords(logging.Filter):
    """The URLs a library's line names as they were given, a replica's password written ``***``: httpx's line for
    each request a sharded table's front sends its shards (at debug level)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = without_passwords(record.getMessage()), None
        return True


PLAIN = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class PlainFormatter(logging.Formatter):
    """``PLAIN``, and `` request_id=...`` at the end of the line (before a traceback) while a request names one."""

    def __init__(self) -> None:
        super().__init__(PLAIN)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        request_id = REQUEST_ID.get()
        # rstrip: uvicorn's "Exception in ASGI application\n" ends in a newline, and the id goes on its line
        return line if request_id is None else f"{line.rstrip()} request_id={request_id}"


COMMAND = "embedding-serve"


def said_once(log: logging.Logger, said: str | None, message: str) -> str:
    """Log a background thread's warning once until it changes (``said``: the last one logged): a want that lasts
    (no descriptor left, a full temporary directory) is said once, not at every turn the thread tries again."""
    if message != said:
        log.warning("%s", message)
    return message


def cannot_look(exc: OSError) -> str:
    return f"cannot look at the data directory now ({exc}); looking again at every turn"


def spawn(command: list[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """A child process of the server whose lines :func:`relay` logs: stderr joined to stdout, read as UTF-8 with a
    byte that is none written as its escape (``\\xe9``: a native library's message in Latin-1, a character cut by
    the child's end), so that no line of the child's stops the relay or is lost. The child (``embedding-index``) is
    told the server's pid, and ends as the server dies, even killed outright (``index.progress.stop_with_parent``):
    the calling thread must wait for it, as :func:`relay` does."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        encoding="utf-8",
        errors="backslashreplace",
        env={**(os.environ if env is None else env), SERVER_VARIABLE: str(os.getpid())},
    )


# The most of a child's line one log line holds: a longer one (a native library's output without a newline) is read
# and logged in pieces of this many characters, so that the server holds no more of it at once, and logs it as it
# comes. A piece of ASCII fits a log driver's 16 KiB line (Docker's, containerd's) with room to spare.
LINE_CHARS = 8192


def relay(child: subprocess.Popen[str], log: logging.Logger, name: str, stopping: Callable[[], bool]) -> str:
    """Each line of a child process of the server (a background index build, a compaction; stderr joined to its
    stdout) logged as table ``name``'s as it comes, its progress every few seconds among them, until the server
    stops it; a line longer than ``LINE_CHARS`` in pieces of that many characters, each logged once read. Returns
    the last line (its first piece, when long), for :func:`child_ended`."""
    last, starts = "", True  # starts: the piece read next begins a line
    while child.stdout is not None and (piece := child.stdout.readline(LINE_CHARS)):
        ends = piece.endswith("\n")
        text = piece.rstrip() if ends else piece
        if starts:
            last, text = text, text.removeprefix("embedding-index: ")
        # not the bare end of a line its last piece filled; nor a line once the server stops (it says the stop)
        if (starts or text) and not stopping():
            log.info("table %r: %s", name, text)
        starts = ends
    return last


def child_ended(code: int, output: str) -> str:
    """Why a child process of the server (a background index build, a compaction) that failed ended: the signal that
    killed it (the OOM killer's SIGKILL, ``kill``), whatever progress lines it printed before; else its last line,
    the command's error."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return output.strip().splitlines()[-1] if output.strip() else f"exit {code}"


def format_from_env(environ: Mapping[str, str]) -> str:
    """EMBEDDING_LOG_FORMAT as the settings read it (the name in any case, the value as written), before they are
    checked: a refusal of another setting is written in that format too."""
    values = [value for variable, value in environ.items() if variable.upper() == "EMBEDDING_LOG_FORMAT"]
    return "json" if "json" in values else "plain"


def own_line(message: str, log_format: str, level: int = logging.ERROR) -> str:
    """A line of ``embedding-serve``'s own, before its logging is configured: a refusal or a warning about the
    start-up. Plain: ``embedding-serve: [warning: ]message``; json: the JsonFormatter's object."""
    if log_format == "json":
        return JsonFormatter().format(logging.LogRecord(COMMAND, level, __file__, 0, message, None, None))
    return f"{COMMAND}: {'warning: ' if level == logging.WARNING else ''}{message}"


def say(message: str, log_format: str, level: int = logging.ERROR) -> None:
    """:func:`own_line` on stderr."""
    print(own_line(message, log_format, level), file=sys.stderr, flush=True)


def log_config(log_format: str = "plain", level: str = "info") -> dict[str, Any]:
    """A ``logging.config.dictConfig`` dict, also handed to uvicorn (``log_config=``) so workers use it."""
    formatter = {"()": f"service.logs.{'JsonFormatter' if log_format == 'json' else 'PlainFormatter'}"}
    handler = {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}
    level = level.upper()
    # Libraries that log at info level per request: httpx each request a sharded table's front sends its shards
    # (one line per shard asked), openTSNE two or three lines per t-SNE projection or map, beside the request's own
    # access line. Kept for debug (and quieter levels).
    per_request = level if level in ("DEBUG", "ERROR", "CRITICAL") else "WARNING"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {"without_passwords": {"()": "service.logs.WithoutPasswords"}},
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.access": {"handlers": [], "level": level, "propagate": True},
            "faiss.loader": {"level": "WARNING"},  # which SIMD build loaded is noise at info level
            "httpx": {"level": per_request, "filters": ["without_passwords"]},
            "openTSNE": {"level": per_request},
        },
    }
