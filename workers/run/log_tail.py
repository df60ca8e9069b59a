"""The byte-offset tail of a remote log: `tail -F` on the host from a stored offset, its bytes cut into complete
numbered lines and handed over in batches as soon as the handler has taken the batch before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import asyncssh

from ..ssh import HostConnection, SSHError, quote_command
from .log_lines import LineAssembler

READ_SIZE = 1 << 16
# How often `tail --pid` checks that the server lives (GNU tail's default is 1 s): teardown waits for the tail to
# drain the file once the server is gone, so this bounds that wait.
PID_CHECK_SECONDS = 0.2


BatchHandler = Callable[[int, list[str], int], Awaitable[None]]


async def _exited_cleanly(process: asyncssh.SSHClientProcess) -> bool:
    """tail exits 0 once `--pid` has exited and the file is drained; a dropped connection has no exit status."""
    try:
        completed = await asyncio.wait_for(process.wait(), timeout=5)
    except (TimeoutError, asyncssh.Error, OSError):
        return False
    return completed.exit_status == 0


class LogTail:
    """Runs `tail -F` on the host from a byte offset and hands batches of lines to `on_batch`.

    `on_batch(first_line, lines, offset_after)` is awaited in order; it returns once it can take the next batch
    (the run's `ServerLog`: once the batch before is stored; it stores, then broadcasts). Lines are pushed, not
    polled for: what was read is handed over as soon as `on_batch` has returned, so a trickle's line is on the page
    within one store and broadcast (handovers at least `min_gap` apart), and while one batch is in hand the lines
    read meanwhile coalesce into the next (a flood is written in batches of up to `batch_lines`, the reader
    reading on while one is stored, and pausing only when the next batch is full).
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
        min_gap: float = 0.0,
    ) -> None:
        self.conn = conn
        self.path = path
        self.assembler = LineAssembler(offset)
        self.next_line = next_line
        self.on_batch = on_batch
        self.batch_lines = batch_lines
        self.min_gap = min_gap
        self._last_flush = float("-inf")  # on the event loop's clock
        self.last_growth = time.monotonic()
        self._process: asyncssh.SSHClientProcess | None = None
        self._buffer: list[str] = []
        self._buffer_offset = offset
        self._ended = False  # `end()` was called: the file was read to its end
        # Batches are stored strictly in order: the pushing flusher and a caller's flush must not overlap.
        self._flush_lock = asyncio.Lock()
        self._lines_waiting = asyncio.Event()  # the buffer has lines for the flusher
        self._room = asyncio.Event()  # the flusher took the buffer: a reader held back by a full one reads on
        self._handover: asyncio.Future[None] | None = None  # the batch being handed over
        self._discarded = False  # `discard()` was called: nothing more is stored

    async def follow(self, stop_when_pid_exits: int | None = None) -> None:
        """Follow until cancelled, or until `stop_when_pid_exits` has exited and the file is drained."""
        argv = ["tail", "-c", f"+{self.assembler.offset + 1}", "-F", "-s", str(PID_CHECK_SECONDS)]
        if stop_when_pid_exits:
            argv.append(f"--pid={stop_when_pid_exits}")
        argv.append(self.path)
        # tail complains on stderr while the file does not exist yet; that is expected.
        process = self._process = await self.conn.start(quote_command(argv) + " 2>/dev/null")
        reading = asyncio.create_task(self._read(process, stop_when_pid_exits))
        flusher = asyncio.create_task(self._flush_as_lines_arrive())
        try:
            # The flusher ends only by failing (a batch that cannot be stored), and that ends the tail too.
            await asyncio.wait({reading, flusher}, return_when=asyncio.FIRST_COMPLETED)
            if flusher.done():
                flusher.result()
            reading.result()
        finally:
            for task in (reading, flusher):
                task.cancel()
            await asyncio.gather(reading, flusher, return_exceptions=True)
            process.close()
            await self.flush()

    async def _read(self, process: asyncssh.SSHClientProcess, stop_when_pid_exits: int | None) -> None:
        reader = process.stdout
        while True:
            try:
                data = await reader.read(READ_SIZE)
            except (asyncssh.Error, OSError):
                if self._ended:
                    break
                raise
            if not data:
                break
            self.last_growth = time.monotonic()
            lines = self.assembler.feed(data)
            if lines:
                self._buffer.extend(lines)
                self._buffer_offset = self.assembler.offset
                self._lines_waiting.set()
                if len(self._buffer) >= self.batch_lines:
                    # Memory stays bounded in a flood: read on once the flusher has taken this batch.
                    self._room.clear()
                    await self._room.wait()
        if self._ended or (stop_when_pid_exits and await _exited_cleanly(process)):
            # The server is gone and the file was read to its end: a partial last line is final.
            self._buffer.extend(self.assembler.finish())
            self._buffer_offset = self.assembler.offset

    @property
    def lines_waiting(self) -> bool:
        """Whether lines read are waiting for the next handover (the next batch is coming)."""
        return bool(self._buffer)

    @property
    def bytes_read(self) -> int:
        return self.assembler.offset + self.assembler.pending_bytes

    async def file_size(self) -> int | None:
        """The log file's size now, or None when it cannot be read."""
        try:
            result = await self.conn.run(quote_command(["stat", "-c", "%s", "--", self.path]), timeout=10)
        except SSHError:
            return None
        text = result.stdout.strip()
        return int(text) if result.exit_status == 0 and text.isdigit() else None

    def discard(self) -> None:
        """Store nothing more: the lines read but not stored are dropped (a batch already being stored finishes)."""
        self._discarded = True
        self._buffer = []
        self._room.set()

    def end(self) -> None:
        """Stop following: the writer is gone and every byte of the file has been read."""
        self._ended = True
        if self._process is not None:
            self._process.close()

    async def _flush_as_lines_arrive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._lines_waiting.wait()
            # A steady stream of a few lines a read would otherwise be a store and a broadcast per read (most of a
            # core at 1,000 lines/s): handovers at least `min_gap` apart let the gap's lines go as one batch, at
            # that much latency. The first line after a quiet spell, and a full batch, go at once.
            wait = self._last_flush + self.min_gap - loop.time()
            if wait > 0 and len(self._buffer) < self.batch_lines:
                await asyncio.sleep(wait)
            self._lines_waiting.clear()
            self._last_flush = loop.time()
            await self.flush()

    async def flush(self) -> None:
        """Hand the buffered lines to `on_batch`. A batch is never cut in two: cancelling the caller (the
        flusher when the tail ends, or the whole tail when a run stops it) lets the batch finish storing and
        broadcasting, and the next flush waits for it. A batch stored but never broadcast would be missing from
        every open page, and one stored without advancing `next_line` would make the next batch's numbers clash."""
        async with self._flush_lock:
            await self._finish_handover()
            if not self._buffer or self._discarded:
                return
            lines, self._buffer = self._buffer, []
            self._room.set()
            self._handover = asyncio.ensure_future(self._hand_over(self.next_line, lines, self._buffer_offset))
            await self._finish_handover()

    async def _hand_over(self, first: int, lines: list[str], offset: int) -> None:
        await self.on_batch(first, lines, offset)
        self.next_line = first + len(lines)

    async def _finish_handover(self) -> None:
        handover = self._handover
        if handover is None:
            return
        try:
            await asyncio.shield(handover)
        finally:
            if handover.done():
                self._handover = None
