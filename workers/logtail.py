"""Following a remote log file by byte offset, turned into batches of complete, numbered lines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import asyncssh

from .ssh import HostConnection, quote_command

READ_SIZE = 1 << 16


class LineAssembler:
    """Bytes in, complete lines out; the byte offset only ever covers whole lines, so a resume is exact.

    - a partial last line is held back until its newline arrives;
    - `\\r` rewrites (tqdm progress bars) keep the last state of the line;
    - invalid UTF-8 is replaced, never fatal (decoding is per complete line, so a multi-byte character split
      across reads is not mangled).
    """

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset  # bytes of the file consumed into complete lines
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[str]:
        self._pending += data
        end = self._pending.rfind(b"\n")
        if end < 0:
            return []
        complete = bytes(self._pending[: end + 1])
        del self._pending[: end + 1]
        self.offset += len(complete)
        return [_last_state(raw) for raw in complete[:-1].split(b"\n")]

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)


def _last_state(raw: bytes) -> str:
    if raw.endswith(b"\r"):
        raw = raw[:-1]  # CRLF line ending, not a rewrite
    if b"\r" in raw:
        raw = raw.rsplit(b"\r", 1)[-1]
    return raw.decode("utf-8", errors="replace")


BatchHandler = Callable[[int, list[str], int], Awaitable[None]]


class LogTail:
    """Runs `tail -F` on the host from a byte offset and hands batches of lines to `on_batch`.

    `on_batch(first_line, lines, offset_after)` is awaited in order; it stores, then broadcasts. A batch is
    flushed when it reaches `batch_lines` or has waited `batch_seconds`, so a flood is written in big
    batches and a trickle still shows up within a fraction of a second.
    """

    def __init__(
        self,
        conn: HostConnection,
        path: str,
        *,
        offset: int,
        next_line: int,
        on_batch: BatchHandler,
        batch_lines: int = 2000,
        batch_seconds: float = 0.1,
    ) -> None:
        self.conn = conn
        self.path = path
        self.assembler = LineAssembler(offset)
        self.next_line = next_line
        self.on_batch = on_batch
        self.batch_lines = batch_lines
        self.batch_seconds = batch_seconds
        self.last_growth = time.monotonic()
        self._process: asyncssh.SSHClientProcess | None = None
        self._buffer: list[str] = []
        self._buffer_offset = offset
        # Batches are stored strictly in order: the periodic flush and a full-buffer flush must not overlap.
        self._flush_lock = asyncio.Lock()

    async def follow(self, stop_when_pid_exits: int | None = None) -> None:
        """Follow until cancelled, or until `stop_when_pid_exits` has exited and the file is drained."""
        argv = ["tail", "-c", f"+{self.assembler.offset + 1}", "-F"]
        if stop_when_pid_exits:
            argv.append(f"--pid={stop_when_pid_exits}")
        argv.append(self.path)
        # tail complains on stderr while the file does not exist yet; that is expected.
        process = self._process = await self.conn.start(quote_command(argv) + " 2>/dev/null")
        reader = process.stdout
        flusher = asyncio.create_task(self._flush_periodically())
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                self.last_growth = time.monotonic()
                lines = self.assembler.feed(data)
                if lines:
                    self._buffer.extend(lines)
                    self._buffer_offset = self.assembler.offset
                    if len(self._buffer) >= self.batch_lines:
                        await self.flush()
        finally:
            flusher.cancel()
            process.close()
            await self.flush()

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.batch_seconds)
            await self.flush()

    async def flush(self) -> None:
        async with self._flush_lock:
            if not self._buffer:
                return
            lines, self._buffer = self._buffer, []
            first = self.next_line
            await self.on_batch(first, lines, self._buffer_offset)
            self.next_line += len(lines)
