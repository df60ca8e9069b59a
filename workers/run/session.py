"""What a run's phases share: the run row and what it runs, the SSH connection, the server's log and HTTP API, and
the one way they record what they learn. Every fact is stored as soon as it is known (another worker may resume
the run from the database), so nothing here lives only in memory that a resume would need."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from experiments.actions.runs import do_add_run_warning, do_advance_run, do_record_failure, do_update_run
from experiments.models import Run

from .. import hosts
from ..ssh import HostConnection
from .database import db
from .errors import RunFailed
from .server import ServerApi, ServerGroup
from .server_log import ServerLog
from .telemetry import GpuSampler


class RunSession:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.host = run.host
        self.config = run.config
        self.profile = run.experiment.profile
        self.conn: HostConnection | None = None
        self.server_log = ServerLog(run)
        self.api = ServerApi()
        self.telemetry = GpuSampler(run)
        self.work_dir = ""
        # Every pid of the server's group ever seen: teardown proves that none of them still holds GPU memory.
        self.pids_seen: set[int] = set(run.remote_pids or [])

    # ---- the connection and what goes through it ---------------------------------------------------------

    def require_conn(self) -> HostConnection:
        if self.conn is None:
            raise RunFailed(Run.FailureKind.SSH, "Not connected to the host.")
        return self.conn

    async def resolve_work_dir(self) -> None:
        try:
            self.work_dir = await hosts.work_dir(self.require_conn(), self.host)
        except hosts.HostReadError as exc:
            raise RunFailed(Run.FailureKind.PREFLIGHT, str(exc)) from exc

    async def open_api(self) -> None:
        await self.api.open(self.require_conn(), int(self.run.server_port or self.host.server_port))

    def group(self) -> ServerGroup | None:
        """The launched server's process group, through the current connection; None before the launch."""
        pgid = self.run.remote_pgid
        return ServerGroup(self.require_conn(), int(pgid)) if pgid else None

    async def group_alive(self) -> bool:
        group = self.group()
        return group is not None and await group.alive()

    async def raise_if_server_died(self, wait: float = 3.0) -> None:
        """A request that failed because the server crashed is a crash, with the traceback that proves it.

        The failed request usually comes back before the server's process group is gone, so watch for a while.
        A traceback alone does not make a crash: servers log non-fatal ones (a client that went away) and go on.
        """
        deadline = time.monotonic() + wait
        while True:
            if not await self.group_alive():
                signal = self.server_log.failure_signal
                kind = signal.kind if signal else Run.FailureKind.CRASHED
                raise await self.server_log.failure(default_kind=kind, exited=True)
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.25)

    async def drop_connection(self) -> None:
        """Forget a broken connection (and the tail that read through it); the next phase reconnects."""
        await self.server_log.stop_now()
        await self.telemetry.stop()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
        self.conn = None

    async def release_local_resources(self, *, leaving: bool = False) -> None:
        """Close this worker's tail, telemetry, API client and SSH connection. `leaving`: the run is no longer this
        worker's (the database stayed away, or another worker took it over), so the lines read but not stored are
        dropped rather than stored: the next owner reads them again from the stored offset, and a batch stored now
        would clash with the ones it stores."""
        await self.server_log.stop_now(store=not leaving)
        await self.telemetry.stop()
        await self.api.close()
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    # ---- recording -------------------------------------------------------------------------------------------

    async def advance(self, state: str, *, measured: bool = False, **facts: Any) -> None:
        if self.run.state == state and not facts:
            return
        await db(do_advance_run)(self.run, state, measured=measured, **facts)

    async def advance_to(self, state: str) -> None:
        """Advance only forwards along the lifecycle (warming may be seen from the log and HTTP alike)."""
        if self.run.is_before(state):
            await self.advance(state)

    async def update(self, *, notify: bool = True, **facts: Any) -> None:
        await db(do_update_run)(self.run, notify=notify, **facts)

    async def warn(self, kind: str, message: str) -> None:
        """Note on the run what went wrong without failing it."""
        await db(do_add_run_warning)(self.run, kind, message)

    async def record_failure(self, failure: RunFailed) -> None:
        await db(do_record_failure)(self.run, failure.kind, failure.message, failure.excerpt, failure.first_line)
