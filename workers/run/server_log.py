"""A run's server log as its orchestrator follows it: `tail -F` on the host from the stored byte offset (so nothing
is lost or stored twice across workers and reconnects), cut into complete numbered lines, each batch read for facts
(progress, milestones, the failure it proves) and stored with them, then broadcast and acted on while the next
batch is read and stored. Past its host's cap (`log_cap.py`) the log is cut: the run is warned, and the lines after
the marker are read for their facts as before (its live series, failures, milestones) but neither stored nor
broadcast."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections import deque
from typing import Any

from django.conf import settings

from experiments.actions.runs import do_add_run_warning, do_advance_log, do_append_log
from experiments.live import broadcast
from experiments.models import LogChunk, Run
from experiments.rules import log_metrics

from .. import engines
from ..ssh import HostConnection
from .database import db
from .errors import RunFailed
from .log_cap import LOG_CUT_KIND, LogCap, cut_warning
from .log_tail import LogTail
from .stopping import cancel_and_wait

RECENT_LINES = 400  # kept in memory to cut the excerpt that proves a failure
EXCERPT_CONTEXT = 3
SERVER_EXITED = "The server process group exited."
END_POLL, END_GRACE = 0.02, 0.5  # reading a dead server's log to its end
# A bound, not a wait: the tail is usually through a dead server's last lines in milliseconds, but on a loaded
# worker or a slow link it can take seconds, and a failure judged before its traceback is read says "crashed".
EXITED_READ_TIMEOUT = 15.0
# In a flood, the live chart's series is read (and stored and broadcast) at most this often.
LIVE_SERIES_SECONDS = 0.25


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
        self.engine = engines.of(run.config)
        self.failure_signal: engines.FailureSignal | None = None
        self.server_args_dump: dict[str, Any] = {}
        metrics = run.config.log_metrics or {}
        # A metric switched off before a re-attach stays off: its warning is on the run already.
        warned = {w.get("message") for w in run.warnings or [] if isinstance(w, dict)}
        off = [name for name in metrics if log_metrics.timeout_warning(name) in warned]
        levels = run.experiment.profile.concurrency or []
        self.facts = engines.LogFacts(
            self.engine.grammar,
            metrics,
            disabled_metrics=off,
            target_progress=run.loading_progress,
            max_concurrency=max(levels) if levels else None,
        )
        # The batches' stores, and after each its broadcast and actions, in order: the last one of each scheduled
        # (each waits for the one before).
        self._storing: asyncio.Future[None] | None = None
        self._publishing: asyncio.Future[None] | None = None
        self._series_due = float("-inf")  # on the event loop's clock
        # The live acceptance alarm, armed by the benchmark phase (`watch_acceptance`).
        self.acceptance: engines.AcceptanceWatch | None = None
        self.acceptance_remedies: list[dict[str, Any]] = []
        # The log cap (read once: an admin's change applies from the next run or re-attach); past the cut it keeps
        # the lines the run reads back: a cell's Decode lines, the expected texts.
        expected = [text for text in (run.config.expect or {}).get("log_contains") or [] if isinstance(text, str)]
        self.cap = LogCap(
            run.host.run_log_cap,
            stored_bytes=run.log_bytes,
            cut=run.log_cut_line is not None,
            path=run.log_path,
            kept_texts=[*engines.summary_markers(self.engine.grammar), *expected],
        )
        self.lines_read = run.log_lines  # the last line number handed over: stored, or past the cut not

    def watch_acceptance(self, watch: engines.AcceptanceWatch, remedies: list[dict[str, Any]]) -> None:
        """From now on, read the Decode lines' accept length for a collapse; `remedies` go with its warning."""
        self.acceptance, self.acceptance_remedies = watch, remedies

    async def follow(self, conn: HostConnection) -> None:
        """(Re)start the tail through `conn` at the stored offset: complete lines only."""
        await self.stop_now()
        self.conn = conn
        self.cap.path = self.run.log_path  # known once the server is launched
        if not self.cap.cut:
            # Counted as stored: a batch handed over and never stored is read again.
            self.lines_read, self.cap.stored_bytes = self.run.log_lines, self.run.log_bytes
        self.tail = LogTail(
            conn,
            self.run.log_path,
            offset=self.run.log_offset,
            next_line=self.lines_read + 1,
            on_batch=self._on_batch,
            batch_lines=settings.SPECDASH_LOG_BATCH_LINES,
            min_gap=settings.SPECDASH_LOG_BATCH_GAP,
        )
        self.task = asyncio.create_task(self.tail.follow(stop_when_pid_exits=self.run.remote_pid))

    async def stop_now(self, *, store: bool = True) -> None:
        """Stop the tail at once; it stores what it had read unless told not to (`store=False`: the run is another
        worker's now, which reads those lines again from the stored offset)."""
        if self.task is None:
            return
        if not store and self.tail is not None:
            self.tail.discard()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await cancel_and_wait(self.task)  # its `finally` stores what it had read (nothing once discarded)
        self.task = None
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.published()  # what was stored reaches the pages

    async def drained(self, timeout: float) -> bool:
        """Wait for the tail to end by itself: it does once the server is gone and the file is read to its end."""
        if self.task is None:
            return True
        deadline = time.monotonic() + timeout
        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(self.task), timeout)
        if not self.task.done():
            return False
        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(self.published(), max(deadline - time.monotonic(), END_GRACE))
        return self._publishing is None or self._publishing.done()

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
        """Store what the tail has read but not stored yet, and see every stored batch broadcast and acted on."""
        if self.tail is not None:
            await self.tail.flush()
        await self.published()

    async def published(self) -> None:
        """Wait until every stored batch has been broadcast and acted on (a failure doing so is raised)."""
        if self._publishing is not None:
            await asyncio.shield(self._publishing)

    async def next_milestone(self, timeout: float) -> bool:
        """Wait up to `timeout` for the log to pass a milestone (HTTP started, ready, ...); True if it did."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._new_milestone.wait(), timeout)
        seen = self._new_milestone.is_set()
        self._new_milestone.clear()
        return seen

    def keep_lines_containing(self, text: str) -> None:
        """Past the cut, keep the lines that contain `text` too, for `lines` (from the next batch on)."""
        self.cap.keep(text)

    async def lines(self, *, after: int, limit: int, containing: str | None = None) -> list[dict[str, Any]]:
        """The log's numbered lines after line `after`, at most `limit` (`containing`: only those that contain it,
        case-insensitively), as `LogChunk.objects.lines` gives the stored ones; past the cut, the kept ones follow."""
        found = await db(LogChunk.objects.lines)(self.run.pk, after=after, limit=limit, containing=containing)
        if self.cap.cut and len(found) < limit:
            found += self.cap.kept_lines(after=after, limit=limit - len(found), containing=containing)
        return found

    async def contains(self, text: str) -> bool:
        """Whether a line of the log contains `text` (case-sensitive), stored or, past the cut, kept."""
        if await db(LogChunk.objects.contains_text)(self.run.pk, text):
            return True
        return self.cap.cut and self.cap.kept_contains(text)

    def last_growth(self, default: float) -> float:
        return self.tail.last_growth if self.tail else default

    def raise_if_broken(self) -> None:
        """A dead tail would look like a silent server (a false zombie); say what really broke."""
        for task in (self.task, self._publishing):
            if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
                raise RunFailed(Run.FailureKind.INTERNAL, f"Following the server log failed: {task.exception()!r}")

    async def _on_batch(self, first_line: int, lines: list[str], offset: int) -> None:
        """Read the batch's facts, then hand its store (lines and facts in one write), and after that its broadcast
        and what the facts call for (milestones, warnings, the live chart), to tasks of their own, each after the
        batch before's; return once the batch before is stored. So the database writes one batch while the tail
        reads the next and its facts are read (a flood's round trips overlap its reading), and a flood holds no more
        than the batch being stored, the next one and the tail's buffer. Storage always comes first, so a browser
        can refill from it; broadcasts go in order, each after the one before."""
        storing_before, publishing_before = self._storing, self._publishing
        for before in (storing_before, publishing_before):
            if before is not None and before.done() and not before.cancelled() and before.exception() is not None:
                before.result()  # the batch before could not be stored or acted on: the tail fails, the run says why
        if self.cap.cut:
            first_line = self.lines_read + 1  # numbered on from the marker, which the tail does not count
        lines, stored, stored_fields = self.cap.hold(first_line, lines)
        self.lines_read = first_line - 1 + len(lines)
        # The live chart's series is read unless the next batch is already coming and the series was read lately: a
        # flood's batches come faster than a chart is redrawn, so all but one a LIVE_SERIES_SECONDS leave their
        # series to the next (which keeps their last points: none the chart would show is lost).
        now = asyncio.get_running_loop().time()
        series = self.tail is None or not self.tail.lines_waiting or now >= self._series_due
        if series:
            self._series_due = now + LIVE_SERIES_SECONDS
        facts = self.facts.read(first_line, lines, series=series)
        changes = self._run_changes(facts)
        for field, value in changes.items():
            setattr(self.run, field, value)  # the next batch's changes build on these, stored or not yet
        # The page shows the server's facts (draft loading, CUDA graphs, KV pool) from the state event.
        notify = "loading_progress" in changes or bool(facts.server_facts) or facts.draft_progress is not None
        storing = self._storing = asyncio.ensure_future(
            self._store(
                storing_before, first_line, lines[:stored], offset, bool(changes) and notify, changes, stored_fields
            )
        )
        self._publishing = asyncio.ensure_future(
            self._publish(publishing_before, storing, first_line, lines, stored, facts)
        )
        if storing_before is not None:
            await asyncio.shield(storing_before)

    async def _store(
        self,
        before: asyncio.Future[None] | None,
        first_line: int,
        lines: list[str],
        offset: int,
        notify: bool,
        changes: dict[str, Any],
        stored_fields: dict[str, Any],
    ) -> None:
        if before is not None:
            await before
        # The action writes what it stored onto the run it is given: a copy, as this one may be a batch ahead of the
        # store (its live series holds the batch read since); its log position moves here once the batch is stored.
        if lines:
            await db(do_append_log)(
                copy.copy(self.run), first_line, lines, offset, notify=notify, **changes, **stored_fields
            )
            self.run.log_lines = first_line - 1 + len(lines)
        else:
            await db(do_advance_log)(copy.copy(self.run), offset, notify=notify, **changes)
        self.run.log_offset = offset
        for field, value in stored_fields.items():
            setattr(self.run, field, value)
        if "log_cut_line" in stored_fields:
            line = stored_fields["log_cut_line"]
            message = cut_warning(self.cap.cap, line, self.run.log_path)
            await db(do_add_run_warning)(self.run, LOG_CUT_KIND, message, line=line, text=lines[-1])

    async def _publish(
        self,
        before: asyncio.Future[None] | None,
        storing: asyncio.Future[None],
        first_line: int,
        lines: list[str],
        stored: int,
        facts: engines.FactBatch,
    ) -> None:
        """Broadcast the batch's stored lines (past the cut, none: a page shows what a reload shows) and act on all."""
        await storing
        if before is not None:
            await before
        sending = broadcast.send_log_lines(self.run.pk, first_line, lines[:stored]) if stored else asyncio.sleep(0)
        await asyncio.gather(sending, self._learn(first_line, lines, facts))

    def _run_changes(self, facts: engines.FactBatch) -> dict[str, Any]:
        """What the batch's facts change on the run: its loading progress, its live series."""
        run = self.run
        changes: dict[str, Any] = {}
        if facts.progress is not None and facts.progress != run.loading_progress:
            changes["loading_progress"] = facts.progress
        if facts.has_series:
            changes["live_facts"] = engines.merge_series(run.live_facts, facts)
        return changes

    async def _learn(self, first_line: int, lines: list[str], facts: engines.FactBatch) -> None:
        """Act on the batch's facts: the excerpt kept for a failure, milestones, warnings, the live chart."""
        run = self.run
        kept = max(len(lines) - RECENT_LINES, 0)  # a flood's batch is far longer than what is kept
        self.recent.extend(enumerate(lines[kept:], start=first_line + kept))
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
            text = self.engine.grammar.clean_line(lines[i]) if 0 <= i < len(lines) else ""
            await db(do_add_run_warning)(
                run, alarm.kind, alarm.message, line=alarm.last_line, text=text, remedies=self.acceptance_remedies
            )
        if facts.has_series and (facts.decode or facts.metrics):
            await broadcast.send_run_facts(run.pk, facts.decode, facts.metrics)

    async def failure(self, *, default_kind: str, exited: bool = False) -> RunFailed:
        """The failure the log proves (kind, SGLang's message, the excerpt around it), else `default_kind` with
        the last lines. `exited`: the server is gone, so the rest of the file is read first."""
        if exited:
            await self.read_to_end(EXITED_READ_TIMEOUT)
        await self.flush()
        numbered = list(self.recent)
        texts = [text for _, text in numbered]
        found = self.engine.find_failure(texts) or (self.engine.find_usage_error(texts) if exited else None)
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
