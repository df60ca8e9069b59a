"""A run's server log as its orchestrator follows it: `tail -F` on the host from the stored byte offset (so nothing
is lost or stored twice across workers and reconnects), cut into complete numbered lines, and each batch stored,
then broadcast, then read for facts (progress, milestones, the failure it proves)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import asyncssh
from django.conf import settings

from experiments.actions.runs import do_add_run_warning, do_append_log, do_update_run
from experiments.live import broadcast
from experiments.models import Run
from experiments.rules import log_metrics

from .. import sglang
from ..ssh import HostConnection, SSHError, quote_command
from .database import db
from .errors import RunFailed
from .log_lines import LineAssembler

RECENT_LINES = 400  # kept in memory to cut the excerpt that proves a failure
EXCERPT_CONTEXT = 3
SERVER_EXITED = "The server process group exited."


class ServerLog:
    """The run's server log as its orchestrator follows it (see the module's docstring)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.tail: LogTail | None = None
        self.task: asyncio.Task | None = None
        self.conn: HostConnection | None = None  # the connection the tail reads through
        self.recent: deque[tuple[int, str]] = deque(maxlen=RECENT_LINES)
        self.milestones: set[str] = set()
        self._new_milestone = asyncio.Event()
        self.failure_signal: sglang.FailureSignal | None = None
        self.server_args_dump: dict[str, Any] = {}
        metrics = run.config.log_metrics or {}
        # A metric switched off before a re-attach stays off: its warning is on the run already.
        warned = {w.get("message") for w in run.warnings or [] if isinstance(w, dict)}
        off = [name for name in metrics if log_metrics.timeout_warning(name) in warned]
        levels = run.experiment.profile.concurrency or []
        self.facts = sglang.LogFacts(
            metrics,
            disabled_metrics=off,
            target_progress=run.loading_progress,
            max_concurrency=max(levels) if levels else None,
        )
        # The live acceptance alarm, armed by the benchmark phase (`watch_acceptance`).
        self.acceptance: sglang.AcceptanceWatch | None = None
        self.acceptance_remedies: list[dict[str, Any]] = []

    def watch_acceptance(self, watch: sglang.AcceptanceWatch, remedies: list[dict[str, Any]]) -> None:
        """From now on, read the Decode lines' accept length for a collapse; `remedies` go with its warning."""
        self.acceptance, self.acceptance_remedies = watch, remedies

    async def follow(self, conn: HostConnection) -> None:
        """(Re)start the tail through `conn` at the stored offset: complete lines only."""
        await self.stop_now()
        self.conn = conn
        self.tail = LogTail(
            conn,
            self.run.log_path,
            offset=self.run.log_offset,
            next_line=self.run.log_lines + 1,
            on_batch=self._on_batch,
            batch_lines=settings.SPECDASH_LOG_BATCH_LINES,
            batch_seconds=settings.SPECDASH_LOG_BATCH_SECONDS,
        )
        self.task = asyncio.create_task(self.tail.follow(stop_when_pid_exits=self.run.remote_pid))

    async def stop_now(self, *, store: bool = True) -> None:
        """Stop the tail at once; it stores what it had read unless told not to (`store=False`: the run is another
        worker's now, which reads those lines again from the stored offset)."""
        if self.task is None:
            return
        if not store and self.tail is not None:
            self.tail.discard()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task  # its `finally` stores what it had read (nothing once discarded)
        self.task = None

    async def drained(self, timeout: float) -> bool:
        """Wait for the tail to end by itself: it does once the server is gone and the file is read to its end."""
        if self.task is None:
            return True
        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        return self.task.done()

    async def finish(self, timeout: float | None = None) -> None:
        """Let the tail drain the file (the server is gone), or stop it if it does not within `timeout`: a tail
        restarted after a reconnect may have much of the file still to read and store."""
        timeout = EXITED_READ_TIMEOUT if timeout is None else timeout
        if not await self.read_to_end(timeout):
            await self.stop_now()

    async def read_to_end(self, timeout: float) -> bool:
        """The server is gone, so its log is complete: read it to its end, then end the tail. `tail --pid` ends by
        itself too, but only once the leader has been reaped, which an init that reaps late (a container's) delays
        by seconds. True once the tail has ended."""
        task, tail = self.task, self.tail
        if task is None or tail is None:
            return True
        deadline = time.monotonic() + timeout
        size = await tail.file_size()
        if size is not None and task.done() and tail.bytes_read < size and self.conn is not None:
            # `tail --pid` ended with the group's leader, and the group's other processes wrote on: a scheduler
            # whose traceback reaches the file after it signalled the leader to quit. Read the rest.
            await self.follow(self.conn)
            task, tail = self.task, self.tail
            assert task is not None and tail is not None
        while size is not None and not task.done() and time.monotonic() < deadline:
            if tail.bytes_read >= size:
                tail.end()
                break
            await asyncio.sleep(END_POLL)
        return await self.drained(max(deadline - time.monotonic(), END_GRACE))

    async def flush(self) -> None:
        """Store what the tail has read but not stored yet."""
        if self.tail is not None:
            await self.tail.flush()

    async def next_milestone(self, timeout: float) -> bool:
        """Wait up to `timeout` for the log to pass a milestone (HTTP started, ready, ...); True if it did."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._new_milestone.wait(), timeout)
        seen = self._new_milestone.is_set()
        self._new_milestone.clear()
        return seen

    def last_growth(self, default: float) -> float:
        return self.tail.last_growth if self.tail else default

    def raise_if_broken(self) -> None:
        """A dead tail would look like a silent server (a false zombie); say what really broke."""
        task = self.task
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            raise RunFailed(Run.FailureKind.INTERNAL, f"Following the server log failed: {task.exception()!r}")

    async def _on_batch(self, first_line: int, lines: list[str], offset: int) -> None:
        """Store, then broadcast, then learn: storage first so a browser can always refill from it."""
        run = self.run
        await db(do_append_log)(run, first_line, lines, offset)
        await broadcast.send_log_lines(run.pk, first_line, lines)
        self.recent.extend(enumerate(lines, start=first_line))
        facts = self.facts.read(first_line, lines)
        self.milestones |= facts.milestones
        if facts.milestones:
            self._new_milestone.set()
        if facts.failure is not None and self.failure_signal is None:
            self.failure_signal = facts.failure
        if facts.server_args is not None:
            self.server_args_dump = facts.server_args
        for kind, message in facts.warnings:
            await db(do_add_run_warning)(run, kind, message)
        for warning, n, text in facts.server_warnings:
            await db(do_add_run_warning)(run, warning.kind, warning.message, line=n, text=text)
        alarm = self.acceptance.feed(facts.decode) if self.acceptance is not None and facts.decode else None
        if alarm is not None:
            # Stored (and so pushed to the run's page) at once, mid-benchmark: the run goes on, its numbers in doubt.
            i = alarm.last_line - first_line
            text = sglang.loglines.clean_line(lines[i]) if 0 <= i < len(lines) else ""
            await db(do_add_run_warning)(
                run, alarm.kind, alarm.message, line=alarm.last_line, text=text, remedies=self.acceptance_remedies
            )
        changes: dict[str, Any] = {}
        if facts.progress is not None and facts.progress != run.loading_progress:
            changes["loading_progress"] = facts.progress
        if facts.has_series:
            changes["live_facts"] = sglang.merge_series(run.live_facts, facts)
            if facts.decode or facts.metrics:
                await broadcast.send_run_facts(run.pk, facts.decode, facts.metrics)
        if changes:
            # The page shows the server's facts (draft loading, CUDA graphs, KV pool) from the state event.
            notify = "loading_progress" in changes or bool(facts.server_facts) or facts.draft_progress is not None
            await db(do_update_run)(run, notify=notify, **changes)

    async def failure(self, *, default_kind: str, exited: bool = False) -> RunFailed:
        """The failure the log proves (kind, SGLang's message, the excerpt around it), else `default_kind` with
        the last lines. `exited`: the server is gone, so the rest of the file is read first."""
        if exited:
            await self.read_to_end(EXITED_READ_TIMEOUT)
        await self.flush()
        numbered = list(self.recent)
        texts = [text for _, text in numbered]
        found = sglang.find_failure(texts) or (sglang.find_usage_error(texts) if exited else None)
        if found is not None:
            start = max(found.first_line - EXCERPT_CONTEXT, 0)
            excerpt = "\n".join(text for _, text in numbered[start : found.last_line + 1])
            return RunFailed(found.kind, found.message, excerpt, numbered[found.first_line][0])
        message = SERVER_EXITED if exited else "The server reported a failure."
        return RunFailed(default_kind, message, *self.excerpt_of_last(15))

    def excerpt_of_last(self, count: int) -> tuple[str, int | None]:
        lines = list(self.recent)[-count:]
        if not lines:
            return "", None
        return "\n".join(text for _, text in lines), lines[0][0]


# ---- the byte-offset tail ---------------------------------------------------------------------------------

READ_SIZE = 1 << 16
# How often `tail --pid` checks that the server lives (GNU tail's default is 1 s): teardown waits for the tail to
# drain the file once the server is gone, so this bounds that wait.
PID_CHECK_SECONDS = 0.2
END_POLL, END_GRACE = 0.02, 0.5  # reading a dead server's log to its end
# A bound, not a wait: the tail is usually through a dead server's last lines in milliseconds, but on a loaded
# worker or a slow link it can take seconds, and a failure judged before its traceback is read says "crashed".
EXITED_READ_TIMEOUT = 15.0


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
        self._ended = False  # `end()` was called: the file was read to its end
        # Batches are stored strictly in order: the periodic flush and a full-buffer flush must not overlap.
        self._flush_lock = asyncio.Lock()
        self._handover: asyncio.Future[None] | None = None  # the batch being stored and broadcast
        self._discarded = False  # `discard()` was called: nothing more is stored

    async def follow(self, stop_when_pid_exits: int | None = None) -> None:
        """Follow until cancelled, or until `stop_when_pid_exits` has exited and the file is drained."""
        argv = ["tail", "-c", f"+{self.assembler.offset + 1}", "-F", "-s", str(PID_CHECK_SECONDS)]
        if stop_when_pid_exits:
            argv.append(f"--pid={stop_when_pid_exits}")
        argv.append(self.path)
        # tail complains on stderr while the file does not exist yet; that is expected.
        process = self._process = await self.conn.start(quote_command(argv) + " 2>/dev/null")
        reader = process.stdout
        flusher = asyncio.create_task(self._flush_periodically())
        try:
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
                    if len(self._buffer) >= self.batch_lines:
                        await self.flush()
            if self._ended or (stop_when_pid_exits and await _exited_cleanly(process)):
                # The server is gone and the file was read to its end: a partial last line is final.
                self._buffer.extend(self.assembler.finish())
                self._buffer_offset = self.assembler.offset
        finally:
            flusher.cancel()
            process.close()
            await self.flush()

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

    def end(self) -> None:
        """Stop following: the writer is gone and every byte of the file has been read."""
        self._ended = True
        if self._process is not None:
            self._process.close()

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.batch_seconds)
            await self.flush()

    async def flush(self) -> None:
        """Hand the buffered lines to `on_batch`. A batch is never cut in two: cancelling the caller (the periodic
        flusher when the tail ends, or the whole tail when a run stops it) lets the batch finish storing and
        broadcasting, and the next flush waits for it. A batch stored but never broadcast would be missing from
        every open page, and one stored without advancing `next_line` would make the next batch's numbers clash."""
        async with self._flush_lock:
            await self._finish_handover()
            if not self._buffer or self._discarded:
                return
            lines, self._buffer = self._buffer, []
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
