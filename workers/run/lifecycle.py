"""The order of a run's phases: connect, preflight, launch, follow to ready, verify, benchmark, tear down.

This module only sequences; each phase lives in its own module and records through the run's session. A run
re-attached by another worker (or after a dropped connection) continues from the state stored in the database.
Teardown always runs, after success, failure and cancel alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback

from django.conf import settings
from django.db import connections

from experiments.actions.confirmations import do_check_history
from experiments.actions.runs import do_heartbeat
from experiments.models import Run

from ..hosts import host_access
from ..ssh import ConnectionLost, HostConnection, HostKeyMismatch, SSHError
from . import benchmark, preflight, profiling, startup, teardown, verify
from .database import DatabaseUnreachable
from .errors import RunCancelled, RunFailed
from .session import RunSession, db
from .stopping import cancel_and_wait

log = logging.getLogger(__name__)

CANCEL_POLL = 1.0
SUPERSEDED, CANCELLED = "superseded", "cancelled"  # why the watcher stopped the phases
LEFT = "left"  # the database stayed away: the run is left as it is, for a worker to re-attach


async def drive_run(run_id: int) -> str:
    """Run the whole lifecycle of a claimed run; returns its final state."""
    run = await db(Run.objects.select_related("host__ssh_key", "config", "experiment__profile").get)(pk=run_id)
    try:
        return await RunOrchestrator(run).execute()
    finally:
        # The ORM ran in sync_to_async's thread; its connection must not outlive this event loop.
        with contextlib.suppress(DatabaseUnreachable):
            await db(connections.close_all)()


class RunOrchestrator:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.session = RunSession(run)

    async def execute(self) -> str:
        try:
            return await self._execute()
        except DatabaseUnreachable as exc:
            # Failing the run now would be wrong (nothing went wrong with it) and could not be stored anyway. Its
            # server runs on under setsid and its facts are stored up to the outage; its heartbeat stops, so once
            # the database is back the beat hands it to a worker that re-attaches and continues.
            log.warning("run %s: %s; leaving it for a worker to re-attach", self.run.pk, exc)
            with contextlib.suppress(Exception):
                await self.session.release_local_resources(leaving=True)
            return LEFT

    async def _execute(self) -> str:
        session = self.session
        outcome = Run.State.SUCCEEDED
        phases = asyncio.create_task(self._phases())
        watcher = asyncio.create_task(self._watch())
        try:
            done, _ = await asyncio.wait({phases, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if watcher in done and not phases.done():
                await cancel_and_wait(phases)
                with contextlib.suppress(asyncio.CancelledError, RunCancelled):
                    phases.result()
                if watcher.result() == SUPERSEDED:
                    # Another worker re-attached while we were stalled: the run is its now; touch nothing.
                    log.warning("run %s: taken over by another worker; leaving it", self.run.pk)
                    await session.release_local_resources(leaving=True)
                    return SUPERSEDED
                outcome = Run.State.CANCELLED
            else:
                phases.result()
        except RunCancelled:
            outcome = Run.State.CANCELLED
        except RunFailed as failure:
            outcome = Run.State.FAILED
            await session.record_failure(failure)
        except DatabaseUnreachable:
            raise
        except Exception as exc:
            log.exception("run %s: orchestrator error", self.run.pk)
            outcome = Run.State.FAILED
            await session.record_failure(
                RunFailed(Run.FailureKind.INTERNAL, f"specdash error: {exc!r}", traceback.format_exc()[-4000:])
            )
        finally:
            watcher.cancel()
        if not await teardown.tear_down(session):
            outcome = Run.State.FAILED
        elif outcome == Run.State.SUCCEEDED and self.run.failure_kind:
            outcome = Run.State.FAILED  # re-attached in teardown after a failure recorded by the previous worker
        elif outcome == Run.State.SUCCEEDED and self.run.cancel_requested:
            outcome = Run.State.CANCELLED
        # A success is a launch this worker timed from claim to end: its phases are what the estimates learn from.
        await session.advance(outcome, measured=outcome == Run.State.SUCCEEDED)
        if outcome == Run.State.SUCCEEDED:
            try:
                await db(do_check_history)(self.run)
            except Exception:
                # A fault in the history check must not turn a measured run into a failed one.
                log.exception("run %s: history check failed", self.run.pk)
        return outcome

    async def _phases(self) -> None:
        """The phases from wherever the run is: a fresh run starts at the beginning, a re-attached one (new worker,
        or the same one after its SSH connection dropped) continues its phase against the running server."""
        reconnect_deadline: float | None = None
        while True:
            try:
                await self._connect(retrying=reconnect_deadline is not None)
                await self._continue()
                return
            except ConnectionLost as exc:
                now = time.monotonic()
                reconnect_deadline = reconnect_deadline or now + settings.SPECDASH_RECONNECT_WINDOW
                if now > reconnect_deadline:
                    raise RunFailed(
                        Run.FailureKind.SSH,
                        f"Lost the SSH connection and could not re-establish it within "
                        f"{settings.SPECDASH_RECONNECT_WINDOW:.0f} s: {exc}",
                    ) from exc
                log.warning("run %s: SSH connection lost (%s); reconnecting", self.run.pk, exc)
                await self.session.drop_connection()
                await asyncio.sleep(1)

    async def _continue(self) -> None:
        session, run = self.session, self.run
        if run.state == Run.State.TEARDOWN:
            await teardown.resume_interrupted(session)
            return
        if not run.remote_pgid:
            await preflight.check(session)
            await startup.launch(session)
        else:
            await startup.reattach(session)
        if run.is_before(Run.State.READY):
            await startup.wait_until_ready(session)
        if run.is_before(Run.State.BENCHMARKING):
            await verify.verify(session)
        if run.is_before(Run.State.TEARDOWN):
            await benchmark.run_cells(session)
            await profiling.profile_cells(session)  # after every measured cell, never inside one

    async def _watch(self) -> str:
        """Heartbeat every second; returns when the run is cancelled or another worker took it over."""
        run_id = self.run.pk
        while True:
            await asyncio.sleep(CANCEL_POLL)
            if not await db(do_heartbeat)(self.run, self.run.worker):
                return SUPERSEDED
            if await db(lambda: Run.objects.cancel_requested().filter(pk=run_id).exists())():
                return CANCELLED

    async def _connect(self, *, retrying: bool = False) -> None:
        if self.session.conn is not None:
            return
        try:
            self.session.conn = await HostConnection.open(
                host_access(self.run.host), timeout=settings.SPECDASH_CONNECT_TIMEOUT
            )
        except HostKeyMismatch as exc:
            raise RunFailed(Run.FailureKind.SSH, str(exc)) from exc
        except SSHError as exc:
            if retrying:
                raise ConnectionLost(str(exc)) from exc  # still inside the reconnect window
            raise RunFailed(Run.FailureKind.SSH, str(exc)) from exc
