"""uvicorn's httptools protocol with the limits a server that clients reach directly needs, every refusal in the
API's JSON error envelope (OpenAI's shape on its paths, once the request's path is read). ``embedding-serve`` runs
with it (``JsonErrorsProtocol.with_limits(...)``).

- 400 ``bad_request``: a request that is not valid HTTP/1.1 (raw non-ASCII bytes or a NUL in the request line, its
  message then saying to percent-encode them; %-escapes that are not UTF-8, which uvicorn and the query parser would
  decode to U+FFFD, but in the query string of a probe or of the explorer page, which the server does not read; a
  bad Content-Length, a broken header, broken chunked framing, a Transfer-Encoding other than chunked), which
  uvicorn would answer itself in plain text (httptools takes ``gzip, chunked`` as chunked: that one, and a
  Content-Encoding, ``service.http.limits`` refuses); also a body the client ends (shuts its side) before it is
  complete, and a request with more than one Host header or one that is no host and port, or an HTTP/1.1 request
  without one (RFC 9112, 3.2: HTTP/1.0 requests may omit it).
  A request whose body breaks off this way is given up at once (its app sees ``http.disconnect``): the refusal
  is its answer, and waits only for answers to earlier (pipelined) requests.
- 505 ``http_version_not_supported``: a request line of another version than HTTP/1.0 or 1.1 (httptools parses
  ``HTTP/2.0`` as if it were 1.1, and refuses ``HTTP/3.0`` as it refuses a malformed request).
- 431 ``headers_too_large`` / 414 ``request_line_too_long``: a request head (request line and headers) over
  ``max_header_bytes`` (``"limit": "max_header_bytes"`` in the envelope). httptools has no limit of its own
  (uvicorn's ``h11_max_incomplete_event_size`` is for h11 only), so the protocol counts the bytes of an
  unfinished head and stops at the limit: nothing beyond it is buffered. A head that starts in the same read as
  the end of a pipelined request is counted from the next piece of the read (pieces of the limit, 64 KiB inside a
  body), so it can exceed the limit by that much at most.
- 408 ``request_timeout``: a head not complete ``header_timeout`` seconds after the connection opened, or after
  the first byte of the next request on a kept-alive connection (a client sending a byte now and then, forever).
  A connection that sent nothing is closed without an answer. Idle kept-alive connections close after uvicorn's
  ``timeout_keep_alive``.
- 408 ``request_timeout`` too: a body not complete ``body_timeout`` seconds after the read that ended its head
  (a timer armed only for a body that goes on past that read).
- 503 ``overloaded`` with ``Retry-After``: a connection opened while ``max_connections`` are open gets this
  answer to its request and is closed (instead of uvicorn's plain-text ``limit_concurrency`` 503, which also
  refuses requests on connections already served); ``GET /healthz`` excepted, answered alive.

Each refusal is counted in the app's metrics (``embedding_http_refused_total`` by its code): the app's own
request metrics never see these requests (one whose app waits for its body, which then stalls or is cut, is marked
``service.http.metrics.REFUSED`` in its scope: the route's answer, dropped, is not counted).
- A client that reads none of its answers: while answer bytes wait in the write buffer (the client's window is
  closed), the connection is checked every ``send_timeout`` seconds and aborted once they have not moved since
  the check before, so the connection slot and the answers' memory are not held forever (a close would wait for
  them to be sent). Also after the keep-alive timeout, whose close waits for them too.
- A client that leaves while answers are under way: the request being answered and those queued behind it
  (pipelined) are marked disconnected, so their answers are dropped (not written to the closed transport) and the
  queued ones do not run. Each whose answer had not begun has its access line, status 499; the request metrics
  count the one running only (the queued ones were never routed).
- A request with ``Upgrade`` (``h2c``, as a Java ``HttpClient`` or ``curl --http2`` sends on plain HTTP; a
  WebSocket) is answered as the plain request it also is (RFC 9110, 7.8), its body read and the connection kept:
  httptools leaves what follows such a request's head to the new protocol, so a new parser reads on from there.
- While the server drains before a shutdown (``service.http.drain``), every answer says ``Connection: close``, so
  clients move to another replica instead of keeping this one.

After one of these refusals the answer is written, the write side shut, and what the client still sends is read
and dropped for up to ``LINGER_SECONDS`` before the connection closes: closing with unread bytes would reset the
connection, which can destroy the answer before the client reads it. A refusal carries the request's valid
``X-Request-ID`` (as ``service.http.request_id`` sends it back) when the parser had handed that header on, and the
refusal's log line names it (as ``service.logs`` names the app's): not when the request line or the head is refused
before it, nor when the broken header follows it directly (the parser hands a header on once the next one begins).

What a normal request pays: a length comparison per read, a counter, three assignments, a look for Host among
its headers, a look at the parser's upgrade flag and at the write buffer's size per request (the send timer only
when bytes wait in it); the head timer is one per connection (re-armed every ``header_timeout``), none per
request; the body timer, one per request whose body spans reads.
"""

from __future__ import annotations

import asyncio
import http
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, cast
from urllib.parse import unquote_to_bytes

import httptools
import orjson
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string
from uvicorn.server import ServerState

from service.errors import error_body, status_of
from service.http.declared_query import PROBES
from service.http.metrics import GONE, GONE_STATUS, REFUSED
from service.http.one_write import use_one_write
from service.http.openai_errors import is_openai, openai_error
from service.http.request_id import HEADER as REQUEST_ID
from service.http.request_id import VALID as VALID_ID
from service.logs import REQUEST_ID as LOGGED_ID

log = logging.getLogger("uvicorn.error")

MESSAGE = "the request is not valid HTTP/1.1 (request line, headers or body framing)"
HOST_MESSAGE = "a request must have at most one Host header, naming a host (name or address) and optionally a port"
NO_HOST_MESSAGE = "an HTTP/1.1 request must have a Host header naming the server, e.g. Host: localhost:8000"
METHOD_MESSAGE = (  # llhttp refuses a method it does not know and bytes that are not HTTP alike
    "the request line does not begin with a known HTTP method in upper case (this server answers GET, HEAD, POST and "
    "DELETE), or the request is not HTTP (a TLS client on this plain-HTTP port: use an http:// URL)"
)
CONNECT_MESSAGE = "this server is no proxy: CONNECT opens no tunnel here"
ESCAPES_MESSAGE = "the URL's %-escapes are not UTF-8: encode its words as UTF-8 before escaping them (é is %C3%A9)"
URL_MESSAGE = (  # curl sends a query string as typed: ?token=café is refused by the parser
    "the URL holds a byte HTTP does not allow in it as it is (a non-ASCII letter, a control character): "
    "percent-encode it as UTF-8 (é is %C3%A9; curl -G --data-urlencode 'token=café')"
)
# RFC 9110's Host: a reg-name (unreserved, sub-delims, %-escapes) or an IP-literal (an IPv6 address, with a zone as
# RFC 6874 writes it or as a client sends it unescaped, or an IPvFuture), and an optional port
HOST = re.compile(
    rb"(?:\[(?:[0-9A-Fa-f:.]+(?:%[A-Za-z0-9._~%-]+)?|[vV][0-9A-Fa-f]+\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\]"
    rb"|[A-Za-z0-9._~!$&'()*+,;=%-]*)(?::[0-9]*)?"
)
RETRY_AFTER_SECONDS = 1
LINGER_SECONDS = 2.0
BODY_SLICE = 64 << 10  # a body is fed this much at a time (uvicorn stops reading at 64 KiB of unread body)
JSON = (b"content-type", b"application/json")
CLOSE = (b"connection", b"close")


# The paths whose query string the server does not read: the probes (a monitor's cache-buster: ``PROBES``) and the
# explorer page, whose script reads it as the browser decodes it (a shared link cut inside an escape, or a Latin-1
# caf%E9, opens the page, whose cards say which word the table lacks, instead of a JSON refusal).
QUERY_NOT_READ = PROBES | {"/"}


def utf8_escapes(url: bytes) -> bool:
    """Whether ``url``'s %-escapes decode to UTF-8 (uvicorn and the query parser would put U+FFFD for others), or
    the URL's path is one that answers whatever its query string (``QUERY_NOT_READ``)."""
    try:
        unquote_to_bytes(url).decode("utf-8")
    except UnicodeDecodeError:
        try:
            return (httptools.parse_url(url).path or b"").decode("latin-1") in QUERY_NOT_READ
        except httptools.HttpParserInvalidURLError:
            return False
    return True


@dataclass(frozen=True)
class ConnectionLimits:
    max_header_bytes: int = 32 << 10
    header_timeout: float = 10.0
    max_connections: int = 1000
    body_timeout: float = 30.0
    send_timeout: float = 30.0


# The refusals of a head over max_header_bytes, which their envelope names (as /v1/limits does).
HEAD_LIMIT = {"request_line_too_long": "max_header_bytes", "headers_too_large": "max_header_bytes"}


def _body(code: str, message: str) -> bytes:
    limit = HEAD_LIMIT.get(code)
    return orjson.dumps(error_body(code, message, **({} if limit is None else {"limit": limit})))


def request_id(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The header naming the request, as ``service.http.request_id`` sends it back: [] without a valid one."""
    for name, value in headers:
        if name == REQUEST_ID:
            return [(REQUEST_ID, value)] if VALID_ID.fullmatch(value) else []  # the first one counts
    return []


@contextmanager
def naming(headers: list[tuple[bytes, bytes]]) -> Iterator[None]:
    """The lines logged inside name the request's valid id (``service.logs``), as the app's lines do; else none."""
    named = request_id(headers)
    token = LOGGED_ID.set(named[0][1].decode("ascii") if named else None)
    try:
        yield
    finally:
        LOGGED_ID.reset(token)


def _answer(code: str, body: bytes, default_headers: list[tuple[bytes, bytes]], *extra: tuple[bytes, bytes]) -> bytes:
    status = http.HTTPStatus(status_of(code))
    lines = [b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode())]
    for name, value in [*default_headers, JSON, *extra, CLOSE, (b"content-length", b"%d" % len(body))]:
        lines.append(name + b": " + value + b"\r\n")
    return b"".join([*lines, b"\r\n", body])


OVERLOADED_BODY = _body("overloaded", "the server has as many connections open as it takes: retry in a moment")
OVERLOADED_HEADERS = [JSON, (b"retry-after", b"%d" % RETRY_AFTER_SECONDS), CLOSE]
ALIVE_BODY = b'{"status":"ok"}'  # GET /healthz's answer


def _shaped(path: str, code: str, body: bytes) -> bytes:
    """``body`` as the request's path answers errors: in OpenAI's shape on the OpenAI-compatible paths (where the
    protocol's refusals keep their status: OpenAI's is the same)."""
    return openai_error(status_of(code), body)[1] if is_openai(path) else body


def refusal(code: str, message: str) -> Any:
    """The ASGI app answering ``code`` and closing, for a queued (pipelined) request refused before it runs."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = _shaped(scope.get("path", ""), code, _body(code, message))
        headers = [JSON, CLOSE, (b"content-length", b"%d" % len(body)), *request_id(scope["headers"])]
        with naming(scope["headers"]):  # its access line
            await send({"type": "http.response.start", "status": status_of(code), "headers": headers})
            await send({"type": "http.response.body", "body": body})

    return app


async def overloaded(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI app of a connection opened beyond ``max_connections``. The liveness probe is still answered alive
    (it costs what the refusal costs): a replica that is only saturated must not be restarted for it."""
    if scope.get("path") == "/healthz" and scope.get("method") in ("GET", "HEAD"):
        status, body, headers = 200, ALIVE_BODY, [JSON, CLOSE]
    else:
        metrics = scope.get("state", {}).get("metrics")  # the app's lifespan state, as the protocol's
        if metrics is not None:
            metrics.count_refusal("overloaded")
        status, body, headers = (
            status_of("overloaded"),
            _shaped(scope.get("path", ""), "overloaded", OVERLOADED_BODY),
            OVERLOADED_HEADERS,
        )
    headers = [*headers, (b"content-length", b"%d" % len(body)), *request_id(scope["headers"])]
    with naming(scope["headers"]):  # its access line
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body})


class Lingering(asyncio.Protocol):
    """A refused connection after its answer: drop what the client still sends until it closes, or
    ``LINGER_SECONDS`` have passed."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.timer = loop.call_later(LINGER_SECONDS, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        self.transport.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.timer.cancel()


class JsonErrorsProtocol(HttpToolsProtocol):
    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[JsonErrorsProtocol]:
        return type(cls.__name__, (cls,), {"limits": limits, "__module__": cls.__module__})

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limit_concurrency = None  # max_connections instead, answered in the envelope
        self.max_head = self.limits.max_header_bytes
        self.body_slice = max(self.max_head, BODY_SLICE)
        self.head: int | None = 0  # bytes of the unfinished request head counted so far; None inside a body
        self.heads = 0  # request heads parsed on this connection
        self.head_since: float | None = None  # when the head awaited now began; None: no head awaited
        self.begun = False  # the parser has begun a request whose head is not complete
        self.head_timer: asyncio.TimerHandle | None = None
        self.in_body = False  # a request head is parsed and its body is not complete
        self.body_timer: asyncio.TimerHandle | None = None  # armed once a body goes on past the read that began it
        self.bad_version = False  # the parser error at hand is a request line's HTTP version
        self.bad_host = ""  # the parser error at hand is Host headers: its message
        self.bad_escapes = False  # the parser error at hand is the URL's %-escapes, not UTF-8
        self.refused = False
        self.running: Any = None  # the request cycle whose app runs (uvicorn's ``cycle`` is the last one parsed)
        self.replaying: tuple[bytes, list[tuple[bytes, bytes]]] | None = None  # an upgrade request's URL and headers
        self.send_timer: asyncio.TimerHandle | None = None  # armed while an answer waits in the write buffer
        self.drain = app_state.get("drain")  # the app's service.http.drain.Drain, from its lifespan state
        self.metrics = app_state.get("metrics")  # the app's service.http.metrics.Metrics: the refusals counted

    def _parse(self, data: bytes) -> None:
        """uvicorn's ``data_received``, an ``Upgrade`` ignored (RFC 9110, 7.8: the request answered as the plain
        request it also is). httptools ends an upgrade request at its head (its body, and what follows, left to the
        new protocol): a Java ``HttpClient`` or ``curl --http2`` sends ``Upgrade: h2c`` on plain HTTP, and a search
        it POSTed had no body, the requests after it on the connection no answer. A new parser reads on from the
        end of that head, behind a head of the request's method, version and framing (``_replay``): the body goes
        to the request's cycle, the requests after it are parsed as any."""
        self._unset_keepalive_if_required()
        while True:
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            except httptools.HttpParserUpgrade as upgrade:  # ws "none": no upgrade is ever taken
                if self.parser.get_method() == b"CONNECT":  # a tunnel asked of a proxy, not an upgrade
                    self._say(logging.INFO, "CONNECT: answering 400")
                    self._refuse("bad_request", CONNECT_MESSAGE)
                    return
                data = self._replay(data[upgrade.args[0] :])
                continue
            return

    def _replay(self, rest: bytes) -> bytes:
        """A new parser for what follows an upgrade request's head (``rest``), and the bytes to feed it first: a
        head of the request's method, HTTP version and the headers that frame its body and end the connection, so
        that it reads the body as the request's and, after a request that ends the connection (HTTP/1.0,
        ``Connection: close``), reads nothing more, as the parser does after any such request."""
        method, version = self.parser.get_method(), self.parser.get_http_version().encode()
        framing = b"".join(
            b"%s: %s\r\n" % (name, value)
            for name, value in self.headers
            if name in (b"content-length", b"transfer-encoding", b"connection")  # Upgrade itself left out
        )
        self.replaying = (self.url, self.headers)
        self.headers = []  # the replayed head's, not added to the request's scope
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)  # as uvicorn's
        return b"%s / HTTP/%s\r\n%s\r\n%s" % (method, version, framing, rest)

    # ------------------------------------------------------------------------------------------ connection
    # asyncio.Protocol declares a BaseTransport; as in uvicorn itself, an HTTP connection gets a Transport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:  # this one included
            log.warning("%s - over %d connections: answering 503", self._peer(), self.limits.max_connections)
            self.app = overloaded
        self.head_since = self.loop.time()
        self._arm(self.head_since + self.limits.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        if self.send_timer is not None:
            self.send_timer.cancel()
        running = self.running
        if running is not None and not running.response_started and REFUSED not in running.scope:
            self._gone(running)
        for queued, app in reversed(self.pipeline):  # behind it, in the order they came: never run
            if app is self.app:  # not a refusal waiting for its turn, which has its own line
                self._gone(queued)
        for cycle in (self.running, *(queued for queued, _ in self.pipeline)):
            if cycle is not None and not cycle.response_complete:  # its app's sends are dropped, receive() ends
                cycle.disconnected = True
                cycle.message_event.set()
        super().connection_lost(exc)

    def _gone(self, cycle: Any) -> None:
        """The client of a request left before its answer began: uvicorn drops that answer, and its access line
        with it. The line is written now, with status 499 (as nginx's); the metrics count it so when its app runs
        (a request queued behind it, pipelined, never runs: it has no route to be counted under)."""
        scope = cycle.scope
        scope[GONE] = True
        if cycle.access_log:
            with naming(scope["headers"]):
                cycle.access_logger.info(
                    '%s - "%s %s HTTP/%s" %d',
                    *(get_client_addr(scope), scope["method"], get_path_with_query_string(scope)),
                    *(scope["http_version"], GONE_STATUS),
                )

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        self.running = cycle
        super()._start_asgi_task(cycle, app)

    # ------------------------------------------------------------------------------------------ sending
    def pause_writing(self) -> None:
        super().pause_writing()
        self._watch_send()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_send()

    def timeout_keep_alive_handler(self) -> None:
        super().timeout_keep_alive_handler()  # the close waits for the write buffer to be sent
        self._watch_send()

    def _watch_send(self) -> None:
        """Arm the send timer if answer bytes wait in the write buffer (the client reads slower than we write)."""
        if self.send_timer is None:
            waiting = self.transport.get_write_buffer_size()
            if waiting:
                self.send_timer = self.loop.call_later(self.limits.send_timeout, self._send_timeout, waiting)

    def _send_timeout(self, waiting_before: int) -> None:
        """Abort the connection if not a byte of the write buffer was sent (and none written) since the timer was
        armed: a client that reads none of its answer would hold the connection and the answer's memory forever."""
        self.send_timer = None
        waiting = self.transport.get_write_buffer_size()
        if not waiting:
            return
        if waiting != waiting_before:  # the client reads (or more was written): watch on
            self.send_timer = self.loop.call_later(self.limits.send_timeout, self._send_timeout, waiting)
            return
        timeout = self.limits.send_timeout
        log.info("%s - %d bytes of answer not read for %gs: closing", self._peer(), waiting, timeout)
        self.transport.abort()  # close() would wait for the buffer to be sent

    def eof_received(self) -> None:
        """The client shut its side: inside a body, that body can never be complete (400, then closed). A request
        answered without its body (a 413 by its declared length) has had its answer: nothing to refuse."""
        answered = self.cycle is not None and self.cycle.response_started
        if self.in_body and not self.refused and not answered:
            self._say(logging.INFO, "the client ended the connection inside a request body: answering 400")
            self._refuse("bad_request", "the connection ended inside the request body")
        # returning None: asyncio closes the transport once what is written is sent

    def data_received(self, data: bytes) -> None:
        self._receive(data)
        if self.in_body and self.body_timer is None and not self.refused:
            self.body_timer = self.loop.call_later(self.limits.body_timeout, self._body_timeout)

    def _receive(self, data: bytes) -> None:
        head = self.head
        if head is None:  # inside a body (its limit is the app's)
            if len(data) <= self.body_slice:
                self._parse(data)
                return
        elif len(data) < self.max_head - head:
            heads = self.heads
            self._parse(data)
            if self.heads == heads:  # no head was completed: every byte of data belongs to the unfinished one
                self.head = head + len(data)
                if self.head_since is None:
                    self.head_since = self.loop.time()
            return
        self._feed_in_pieces(data)

    def _feed_in_pieces(self, data: bytes) -> None:
        """A read longer than what the unfinished head may still take: feed it no more than that at a time, so a
        head over the limit is refused at the limit. Inside a body, pieces of ``body_slice``: a head that starts
        behind the body's end, in the same piece, is counted from the next piece on."""
        start = 0
        while start < len(data) and not self.refused:
            head = self.head
            piece = data[start : start + (self.body_slice if head is None else self.max_head - head)]
            heads = self.heads
            self._parse(piece)
            start += len(piece)
            if self.refused or self.transport.is_closing():
                return
            if head is not None and self.heads == heads:
                self.head = head + len(piece)
                if self.head_since is None:
                    self.head_since = self.loop.time()
                if self.head >= self.max_head:
                    self._head_too_large()
                    return

    # ------------------------------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        if self.replaying is not None:  # the replayed head of an upgrade request (``_parse``): no new request
            return
        self.begun = True
        if self.head_since is None:  # a head that began in the read that ended the request before it
            self.head_since = self.loop.time()
        HttpToolsProtocol.on_message_begin(self)

    def on_headers_complete(self) -> None:
        if self.replaying is not None:  # its body follows, read into the upgrade request's cycle
            self.url, self.headers = self.replaying
            self.replaying = None
            return
        version = self.parser.get_http_version()
        if version not in ("1.0", "1.1"):  # httptools parses HTTP/2.0 as if it were 1.1
            self.bad_version = True
            raise httptools.HttpParserError("unsupported HTTP version")  # the parser stops: send_400_response
        hosts = [value for name, value in self.headers if name == b"host"]
        if hosts and (len(hosts) > 1 or not HOST.fullmatch(hosts[0])):  # RFC 9112, 3.2: answered 400
            self.bad_host = HOST_MESSAGE
        elif not hosts and version == "1.1":  # RFC 9112, 3.2: so is an HTTP/1.1 request without one
            self.bad_host = NO_HOST_MESSAGE
        if self.bad_host:
            raise httptools.HttpParserError("no Host header, more than one, or an invalid one")
        if b"%" in self.url and not utf8_escapes(self.url):  # else decoded to U+FFFD, a word no one asked for
            self.bad_escapes = True
            raise httptools.HttpParserError("%-escapes not UTF-8")
        if version == "1.0":  # RFC 9110, 15.2: no 1xx to an HTTP/1.0 client (10.1.1: its Expect ignored)
            self.expect_100_continue = False
        self.heads += 1
        self.head = self.head_since = None
        self.begun = False
        self.in_body = True
        HttpToolsProtocol.on_headers_complete(self)
        use_one_write(self.cycle)
        if self.drain is not None and self.drain.draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answered with Connection: close

    def on_message_complete(self) -> None:
        if self.parser.should_upgrade():  # the end of an upgrade request's head: its body is read again (``_parse``)
            return
        self.head = 0
        self.in_body = False
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None
        HttpToolsProtocol.on_message_complete(self)

    # ------------------------------------------------------------------------------------------ refusals
    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this while it handles the parser's error: llhttp's own refusal of a well-formed version it
        # does not know (HTTP/3.0, HTTP/1.2) is a version this server does not speak too
        error = sys.exc_info()[1]
        if self.bad_version or (isinstance(error, httptools.HttpParserError) and str(error) == "Invalid HTTP version"):
            self._say(logging.INFO, "request line of an HTTP version other than 1.0 and 1.1: answering 505")
            self._refuse("http_version_not_supported", "this server speaks HTTP/1.1 (and 1.0) only")
            return
        if self.bad_host:
            self._say(logging.INFO, "no Host header, more than one, or an invalid one: answering 400")
            self._refuse("bad_request", self.bad_host)
            return
        if self.bad_escapes:
            self._say(logging.INFO, "URL %%-escapes not UTF-8: answering 400")
            self._refuse("bad_request", ESCAPES_MESSAGE)
            return
        if self.in_body and self.parser.get_method() == b"CONNECT":  # a host:port target: no URL uvicorn parses
            self._say(logging.INFO, "CONNECT: answering 400")
            self._refuse("bad_request", CONNECT_MESSAGE)
            return
        self._say(logging.INFO, "not valid HTTP/1.1: answering 400")
        if isinstance(error, httptools.HttpParserInvalidMethodError):
            self._refuse("bad_request", METHOD_MESSAGE)
            return
        self._refuse("bad_request", URL_MESSAGE if isinstance(error, httptools.HttpParserInvalidURLError) else MESSAGE)

    def _head_too_large(self) -> None:
        url: bytes = getattr(self, "url", b"")  # uvicorn's: the URL received so far
        if not self.headers and len(url) * 2 > (self.head or 0):  # no header yet, the URL is most of the head
            code, what = "request_line_too_long", "request line"
        else:
            code, what = "headers_too_large", "request line and headers"
        self._say(logging.WARNING, "%s over %d bytes: answering %d", what, self.max_head, status_of(code))
        self._refuse(code, f"the {what} must not be longer than {self.max_head} bytes")

    def _arm(self, when: float) -> None:
        self.head_timer = self.loop.call_at(when, self._head_timeout, self.head_since)

    def _head_timeout(self, since: float | None) -> None:
        self.head_timer = None
        if self.refused or self.transport.is_closing():
            return
        timeout = self.limits.header_timeout
        current = self.head_since
        if current is None:  # no head awaited (a request in flight, or an idle kept-alive connection)
            self._arm(self.loop.time() + timeout)
        elif current != since:  # a later head than the one this timer was set for
            self._arm(current + timeout)
        elif self.cycle is not None and not self.cycle.response_complete:  # pipelined behind an answer
            self._arm(self.loop.time() + timeout)
        elif self.head or self.begun:
            self._say(logging.INFO, "request head not complete after %gs: answering 408", timeout)
            self._refuse("request_timeout", f"the request line and headers must arrive within {timeout:g} seconds")
        else:
            log.debug("%s - nothing sent for %gs: closing", self._peer(), timeout)
            self.transport.close()

    def _body_timeout(self) -> None:
        self.body_timer = None
        if self.refused or self.transport.is_closing() or not self.in_body:
            return
        timeout = self.limits.body_timeout
        if any(cycle is self.cycle for cycle, _ in self.pipeline):  # queued behind answers: its body is not read yet
            self.body_timer = self.loop.call_later(timeout, self._body_timeout)
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:  # answering still
            self.body_timer = self.loop.call_later(timeout, self._body_timeout)
            return
        if cycle is not None and cycle.response_complete:  # answered without its body (e.g. 413)
            self._say(logging.INFO, "request body not complete after %gs, its answer sent: closing", timeout)
            self.refused = True
            self._cancel_timers()
            self._linger()
            return
        self._say(logging.INFO, "request body not complete after %gs: answering 408", timeout)
        self._refuse("request_timeout", f"the request body must arrive within {timeout:g} seconds of its head")

    def _cancel_timers(self) -> None:
        for timer in (self.head_timer, self.body_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.body_timer = None

    def _refuse(self, code: str, message: str) -> None:
        """Answer ``code`` and close (lingering); behind answers still under way (pipelined requests), once the
        last of them is sent. A request whose body will never come (a broken chunk, a stalled body) is given up:
        its app is told the client left, and the refusal is its answer (or takes its place in the queue)."""
        if self.refused:  # already refused (e.g. a parser error again, on data read while an answer is sent)
            return
        self.refused = True  # nothing more is read into the parser
        self._cancel_timers()
        if self.metrics is not None:
            self.metrics.count_refusal(code)
        named = request_id(self._refused_headers())
        cycle = self.cycle
        if cycle is not None and self.in_body and not cycle.response_started:
            queued = [i for i, (waiting, _) in enumerate(self.pipeline) if waiting is cycle]
            if queued:
                self.pipeline[queued[0]] = (cycle, refusal(code, message))
                return
            cycle.disconnected = True  # its app's receive() says http.disconnect; what it sends is dropped
            cast(dict[str, Any], cycle.scope)[REFUSED] = True  # and not counted: this refusal is
            cycle.message_event.set()
            self._answer_and_linger(code, message, named)
            return
        if cycle is None or cycle.response_complete:
            self._answer_and_linger(code, message, named)
            return
        self.flow.pause_reading()
        answered = cycle.on_response  # uvicorn's on_response_complete, called once the answer is sent

        def then_refuse() -> None:
            answered()
            self._answer_and_linger(code, message, named)

        cycle.on_response = then_refuse

    def _answer_and_linger(self, code: str, message: str, named: list[tuple[bytes, bytes]]) -> None:
        transport = self.transport
        if transport.is_closing():
            return
        self._unset_keepalive_if_required()
        body = _shaped(self._refused_path(), code, _body(code, message))
        answer = _answer(code, body, self.server_state.default_headers, *named)
        transport.write(answer[: -len(body)] if self._heading() else answer)  # a HEAD's answer: the head alone
        self._linger()

    def _heading(self) -> bool:
        """Whether the request refused is a HEAD. The parser's method is the last one it read: the request before's
        on a kept-alive connection until this one's URL begins (uvicorn's ``url`` is reset as a request begins)."""
        begun = self.begun or self.in_body
        return (
            begun
            and bool(getattr(self, "url", b""))
            and self.parser is not None
            and self.parser.get_method() == b"HEAD"
        )

    def _linger(self) -> None:
        """Shut the write side and hand the connection to :class:`Lingering` (or close it)."""
        transport = self.transport
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.connections.discard(self)  # as uvicorn does when it hands a connection to another protocol
        transport.set_protocol(Lingering(transport, self.loop))
        self.parser = None  # type: ignore[assignment]  # as uvicorn drops it (the attribute is typed non-None)

    def _refused_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers parsed of the request being refused: none before its head began (not the request before's)."""
        return self.headers if self.begun or self.in_body else []

    def _refused_path(self) -> str:
        """The path of the request being refused, decoded as its scope's would be: none before its URL was read."""
        try:
            path = httptools.parse_url(getattr(self, "url", b"")).path if self.begun or self.in_body else b""
        except httptools.HttpParserInvalidURLError:  # a URL read in part, or not one
            return ""
        return unquote_to_bytes(path or b"").decode("utf-8", "replace")

    def _say(self, level: int, message: str, *args: object) -> None:
        """A refusal's log line, after the peer: naming the request's id when its header was read."""
        with naming(self._refused_headers()):
            log.log(level, "%s - " + message, self._peer(), *args)

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "-"
