"""A small HTTP/1.1 client for the streaming POSTs: keep-alive connections to one host:port, no TLS.

aiohttp spends a Future, a task wake-up and a StreamReader round trip on every piece a socket delivers; at one
token per SSE chunk and hundreds of streams that bookkeeping is most of a core. Here the response is parsed in
`data_received` itself and each body piece goes straight to a callback with the time of its read; the caller's
task wakes only once, when the response has ended.

Supported: a status line and headers, bodies with `Transfer-Encoding: chunked`, `Content-Length` or ended by the
server closing the connection, interim 1xx answers, keep-alive reuse (with one retry when a reused connection
turns out to have been closed by the server before it answered).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter
from urllib.parse import urlsplit

# Receives each piece of a 200 answer's body with the perf_counter() time of the read that brought it.
BodySink = Callable[[bytes, float], None]

# A header block or a chunk-size line longer than this is not an answer from an SGLang server.
MAX_LINE_BYTES = 64 * 1024
MAX_HEAD_BYTES = 256 * 1024
# How much of an error answer's body is kept for its message.
MAX_ERROR_BODY_BYTES = 64 * 1024

_HEX_DIGITS = b"0123456789abcdefABCDEF"
_HEAD, _SIZE, _DATA, _DATA_END, _TRAILER, _LENGTH, _UNTIL_CLOSE, _IDLE = range(8)


class HttpError(Exception):
    """The server's answer broke HTTP/1.1 or ended before it was complete."""


class ConnectError(Exception):
    """No connection could be opened to the server."""


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before any byte of the answer arrived."""


def parse_base_url(base_url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http:// base URL; ValueError for anything else, https:// included."""
    parts = urlsplit(base_url.strip())
    if parts.scheme == "https":
        raise ValueError(
            f"https is not supported ({base_url}): the client speaks plain HTTP to the server on the host's loopback"
        )
    if parts.scheme != "http":
        raise ValueError(f"not an http:// URL: {base_url!r}")
    if not parts.hostname:
        raise ValueError(f"no host in {base_url!r}")
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise ValueError(f"bad port in {base_url!r}") from exc
    if parts.query or parts.fragment:
        raise ValueError(f"a base URL has no query or fragment: {base_url!r}")
    return parts.hostname, port, parts.path.rstrip("/")


# Every connection reads into this one buffer and copies out what it got before anything else can run: a
# plain Protocol would have the event loop allocate (mmap, then shrink) a 256 KiB bytes object per read.
_READ_BUFFER = memoryview(bytearray(256 * 1024))


class HttpConnection(asyncio.BufferedProtocol):
    """One keep-alive connection that runs one request/response exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        # Whether the connection has completed an exchange before the current one.
        self.reused = False
        self.reusable = False
        self._state = _IDLE
        self._buffer = b""
        self._head_bytes = 0
        self._remaining = 0
        self._status = 0
        self._headers: dict[bytes, bytes] = {}
        self._keep_alive = True
        self._received = False
        self._sink: BodySink | None = None
        self._error_body = bytearray()
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None

    # -- asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_READ_BUFFER[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        """Parse the bytes of one read; what a plain asyncio.Protocol would be handed."""
        now = perf_counter()
        if self._waiter is None:
            # Bytes nobody asked for: the connection can no longer be trusted.
            self._abort()
            return
        self._received = True
        try:
            self._parse(data, now)
        except Exception as exc:  # a broken answer, or the sink's own error (a bad SSE event)
            self._fail(exc)

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost() settles the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._state == _UNTIL_CLOSE and exc is None:
            self._complete()
            return
        error: Exception
        if not self._received and self.reused and (exc is None or isinstance(exc, ConnectionError)):
            error = _StaleConnection()
        elif exc is not None:
            error = exc
        else:
            error = HttpError("the server closed the connection before the response ended")
        self._waiter = None
        waiter.set_exception(error)

    # -- the exchange

    def start(self, request: bytes, sink: BodySink) -> asyncio.Future[tuple[int, bytes]]:
        """Send request; the future ends with (status, body of a non-200 answer) once the response is complete."""
        assert self.transport is not None and not self.closed and self._waiter is None
        waiter: asyncio.Future[tuple[int, bytes]] = self._loop.create_future()
        self._waiter = waiter
        self._sink = sink
        self._state = _HEAD
        self._buffer = b""
        self._head_bytes = 0
        self._status = 0
        self._headers = {}
        self._received = False
        self._error_body = bytearray()
        self.reusable = False
        self.transport.write(request)
        return waiter

    def abort(self) -> None:
        """Drop the connection, e.g. when the caller gave up on the exchange."""
        self._waiter = None
        self._abort()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _abort(self) -> None:
        self.closed = True
        self.reusable = False
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        self._waiter = None
        self._abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _complete(self) -> None:
        waiter = self._waiter
        self._waiter = None
        self._sink = None
        self._state = _IDLE
        self.reusable = self._keep_alive and not self.closed
        self.reused = True
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, bytes(self._error_body)))

    def _deliver(self, pieces: list[bytes], now: float) -> None:
        if self._status == 200:
            assert self._sink is not None
            self._sink(pieces[0] if len(pieces) == 1 else b"".join(pieces), now)
        else:
            room = MAX_ERROR_BODY_BYTES - len(self._error_body)
            for piece in pieces:
                if room <= 0:
                    break
                self._error_body += piece[:room]
                room -= len(piece)

    def _parse(self, data: bytes, now: float) -> None:
        pieces: list[bytes] = []
        pos = 0
        size = len(data)
        state = self._state
        while True:
            if state == _DATA or state == _LENGTH or state == _UNTIL_CLOSE:
                available = size - pos
                if available == 0:
                    break
                if state == _UNTIL_CLOSE:
                    pieces.append(data[pos:] if pos else data)
                    pos = size
                    continue
                take = self._remaining if self._remaining < available else available
                pieces.append(data if take == size else data[pos : pos + take])
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    if state == _LENGTH:
                        self._state = _IDLE
                        self._finish(pieces, now, extra=pos < size)
                        return
                    state = _DATA_END
                continue
            if state == _IDLE:
                break
            # A line-oriented state: the head, a chunk-size line, the CRLF after a chunk, a trailer.
            if self._buffer:
                data = self._buffer + data[pos:]
                self._buffer = b""
                pos = 0
                size = len(data)
            newline = data.find(b"\n", pos)
            if newline < 0:
                rest = data[pos:]
                if len(rest) > MAX_LINE_BYTES:
                    raise HttpError("a line of the response is too long")
                self._buffer = rest
                break
            line = data[pos : newline - 1 if newline > pos and data[newline - 1] == 13 else newline]
            pos = newline + 1
            if state == _SIZE:
                size_text = line.split(b";", 1)[0].strip()
                if not size_text or size_text.strip(_HEX_DIGITS):
                    raise HttpError(f"bad chunk size line {line[:40]!r}")
                chunk_size = int(size_text, 16)
                if chunk_size == 0:
                    state = _TRAILER
                else:
                    self._remaining = chunk_size
                    state = _DATA
            elif state == _DATA_END:
                if line:
                    raise HttpError("a chunk is longer than its size line says")
                state = _SIZE
            elif state == _TRAILER:
                if not line:
                    self._state = _IDLE
                    self._finish(pieces, now, extra=pos < size)
                    return
            else:  # _HEAD
                self._head_bytes += len(line) + 2
                if self._head_bytes > MAX_HEAD_BYTES:
                    raise HttpError("the response headers are too long")
                if line:
                    self._head_line(line)
                    continue
                if not self._status:
                    continue  # tolerate an empty line before the status line
                state = self._body_state()
                if state == _IDLE:
                    self._state = _IDLE
                    self._finish(pieces, now, extra=pos < size)
                    return
        self._state = state
        if pieces:
            self._deliver(pieces, now)

    def _finish(self, pieces: list[bytes], now: float, *, extra: bool) -> None:
        if pieces:
            self._deliver(pieces, now)
        if extra:
            self._keep_alive = False  # bytes after the end of the answer: do not reuse the connection
        self._complete()

    def _head_line(self, line: bytes) -> None:
        if not self._status:
            parts = line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
                raise HttpError(f"not an HTTP/1.x status line: {line[:80]!r}")
            self._status = int(parts[1])
            self._keep_alive = parts[0] != b"HTTP/1.0"
            return
        name, colon, value = line.partition(b":")
        if not colon:
            raise HttpError(f"bad header line: {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        if name in self._headers and name == b"content-length" and self._headers[name] != value:
            raise HttpError("conflicting Content-Length headers")
        self._headers[name] = self._headers[name] + b", " + value if name in self._headers else value

    def _body_state(self) -> int:
        """After the head: the state that reads the body (_IDLE when there is none)."""
        status, headers = self._status, self._headers
        if 100 <= status < 200:
            # An interim answer (100 Continue): the real one follows.
            self._status = 0
            self._headers = {}
            return _HEAD
        connection = headers.get(b"connection", b"").lower()
        if b"close" in connection:
            self._keep_alive = False
        elif b"keep-alive" in connection:
            self._keep_alive = True
        if status == 204 or status == 304:
            return _IDLE
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            return _SIZE
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise HttpError(f"bad Content-Length {length[:40]!r}")
            self._remaining = int(length)
            return _LENGTH if self._remaining else _IDLE
        self._keep_alive = False
        return _UNTIL_CLOSE


class HttpPool:
    """Keep-alive connections to one host:port; as many as exchanges run at once (the caller bounds that)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._host_header = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._idle: list[HttpConnection] = []
        self.connections_opened = 0

    def request_bytes(self, path: str, body: bytes) -> bytes:
        """The whole POST, head and JSON body, ready to write."""
        head = (
            f"POST {path} HTTP/1.1\r\n"
            f"Host: {self._host_header}\r\n"
            "User-Agent: specdash-benchclient\r\n"
            "Accept: */*\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            "\r\n"
        )
        return head.encode("latin-1") + body

    async def send(self, request: bytes, sink: BodySink) -> tuple[int, bytes]:
        """Send one request from request_bytes; (status, body of a non-200 answer) once the response ended.

        Raises ConnectError when no connection can be opened, HttpError or OSError when the exchange breaks,
        and whatever the sink raised. The caller sets the time limit (cancelling drops the connection).
        """
        while self._idle:
            connection = self._idle.pop()
            if connection.closed:
                continue
            try:
                return await self._exchange(connection, request, sink)
            except _StaleConnection:
                continue  # closed by the server while idle: the request never reached it
        return await self._exchange(await self._connect(), request, sink)

    async def _connect(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(HttpConnection, self.host, self.port)
        except OSError as exc:
            raise ConnectError(f"Cannot connect to host {self._host_header}: {exc}") from exc
        self.connections_opened += 1
        return connection

    async def _exchange(self, connection: HttpConnection, request: bytes, sink: BodySink) -> tuple[int, bytes]:
        waiter = connection.start(request, sink)
        try:
            result = await waiter
        except BaseException:
            connection.abort()
            raise
        if connection.reusable:
            self._idle.append(connection)
        else:
            connection.close()
        return result

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
